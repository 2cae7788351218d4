//! The tailguard sidecar proxy (`tailguard proxy --config FILE`, docs/proxy.md).
//!
//! It drives the sans-IO policy core (`tailguard_policy`) with real time: the egress runs one
//! [`tailguard_policy::call::Call`] per outbound request (balancing, attempt timeouts, retries,
//! hedges, deadline), the ingress runs admission control and BLOC chips in front of the local
//! application, and the admin listener serves health, metrics and the configuration.
//!
//! Modules, one concept each: [`config`] (the file), `egress`, `ingress`, `admin`, [`metrics`],
//! `http` (bodies and header helpers), `grpc` (gRPC requests, `grpc-timeout`, replies in gRPC's form), `body` (a client's request body: read timeout, client faults), `pool` (an endpoint's connections: kept-alive HTTP/1, or one HTTP/2 when a TLS endpoint chooses it by ALPN), `probe` (Prequal's probes on the wire), `server` (HTTP/1.1 + h2c accept loops with limits and
//! graceful shutdown), `tls` (rustls on the listeners and towards upstreams, files reloaded when
//! they change), `reload` (watching the file and swapping the egress's upstreams), `trace`
//! (OTLP spans, when configured) and `wire` (the network delay the ingress adds where the kernel
//! adds none). [`fuzz`] holds the fuzz entry points of the parsers the proxy owns (fuzz/).

mod admin;
mod body;
mod cap;
pub mod config;
mod egress;
pub mod fuzz;
mod grpc;
mod http;
mod ingress;
pub mod metrics;
mod pool;
mod probe;
mod reload;
mod renewal;
mod server;
mod tls;
mod trace;
mod trim;
mod wire;

pub use config::Config;

use metrics::Metrics;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How long in-flight requests may take to finish on shutdown unless the file says otherwise.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A running proxy: its bound addresses (useful with port 0) and the handle that stops it.
pub struct Proxy {
    /// The egress listener's address, if configured.
    pub egress: Option<SocketAddr>,
    /// The ingress listener's address, if configured.
    pub ingress: Option<SocketAddr>,
    /// The admin listener's address, if configured.
    pub admin: Option<SocketAddr>,
    /// The seed of every random draw: the file's `seed`, or one drawn from the operating system.
    pub seed: u64,
    stop: watch::Sender<bool>,
    servers: JoinSet<()>,
    tracing: Option<Arc<trace::Tracing>>,
}

impl Proxy {
    /// Binds every configured listener and starts serving. Must run inside a tokio runtime.
    ///
    /// Boxed, so that the servers are compiled in this crate once: an async fn's body is compiled
    /// again into every crate that awaits it (h2spec's test binary took 27.6 s of CPU, now 2).
    pub fn start(config: Config) -> Pin<Box<dyn Future<Output = std::io::Result<Proxy>> + Send>> {
        Box::pin(Proxy::started(config))
    }

    async fn started(config: Config) -> std::io::Result<Proxy> {
        let epoch = Instant::now();
        let metrics = Arc::new(Metrics::new());
        let grace = config.shutdown_grace.map_or(DEFAULT_SHUTDOWN_GRACE, |d| d.get());
        let (stop, stopped) = watch::channel(false);
        let mut servers = JoinSet::new();
        let tracing = match &config.tracing {
            Some(t) => Some(Arc::new(trace::Tracing::new(t).map_err(std::io::Error::other)?)),
            None => None,
        };
        let seed = config.seed.unwrap_or_else(rand::random);
        let mut proxy = Proxy {
            egress: None,
            ingress: None,
            admin: None,
            seed,
            stop,
            servers: JoinSet::new(),
            tracing: tracing.clone(),
        };
        let limits = config.limits.clone();
        let source = Arc::new(RwLock::new(config.source.clone()));
        let mut reloadable = None;
        if let Some(c) = &config.egress {
            let listener = bind(c.listen).await?;
            proxy.egress = Some(listener.local_addr()?);
            let egress = egress::Egress::new(c, epoch, metrics.clone(), seed).map_err(std::io::Error::other)?;
            let egress = Arc::new(egress.traced(tracing.clone()));
            egress.discovered().await;
            reloadable = Some(egress.clone());
            let handler = move |req, _peer| {
                let egress = egress.clone();
                async move { egress.handle(req).await }
            };
            let tls = acceptor(c.tls.as_ref(), "egress.tls", &[])?;
            servers.spawn(server::serve(listener, tls, handler, limits.clone(), Vec::new(), stopped.clone(), grace));
        }
        if let Some(c) = &config.ingress {
            let listener = bind(c.listen).await?;
            proxy.ingress = Some(listener.local_addr()?);
            let ingress = ingress::Ingress::new(c, epoch, metrics.clone(), seed).map_err(std::io::Error::other)?;
            let ingress = Arc::new(ingress.traced(tracing.clone()));
            let handler = move |req, peer| {
                let ingress = ingress.clone();
                async move { ingress.handle(req, peer).await }
            };
            let tls = acceptor(c.tls.as_ref(), "ingress.tls", &c.trusted_identities)?;
            let trusted = c.trusted_peers.clone();
            servers.spawn(server::serve(listener, tls, handler, limits.clone(), trusted, stopped.clone(), grace));
        }
        if let Some(c) = &config.admin {
            let listener = bind(c.listen).await?;
            proxy.admin = Some(listener.local_addr()?);
            let admin = Arc::new(admin::Admin::new(source.clone(), metrics.clone()));
            let handler = move |req, _peer| {
                let admin = admin.clone();
                async move { admin.handle(req) }
            };
            let tls = acceptor(c.tls.as_ref(), "admin.tls", &[])?;
            servers.spawn(server::serve(listener, tls, handler, limits.clone(), Vec::new(), stopped.clone(), grace));
        }
        if let Some(path) = config.path.clone() {
            let watch = reload::Watch { path, current: config, egress: reloadable, source };
            servers.spawn(watch.run(reload::POLL, stopped.clone()));
        }
        servers.spawn(trim::run(stopped.clone()));
        proxy.servers = servers;
        Ok(proxy)
    }

    /// Stops accepting, lets in-flight requests finish (within the grace period), sends the
    /// last spans (within a bound) and returns.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        while self.servers.join_next().await.is_some() {}
        if let Some(tracing) = self.tracing.take() {
            tracing.shutdown().await;
        }
    }
}

/// Reads everything [`Proxy::start`] reads besides the file itself, binding and connecting
/// nothing: every TLS certificate, key and CA the file names (`tailguard proxy --check`, as
/// `nginx -t` and `haproxy -c` check a configuration before it is deployed). The error names the
/// field and the file.
pub fn check(config: &Config) -> std::io::Result<()> {
    let connector = |t, field: &str| tls::Connector::new(t, field).map(drop).map_err(std::io::Error::other);
    if let Some(c) = &config.egress {
        acceptor(c.tls.as_ref(), "egress.tls", &[])?;
        for (name, upstream) in &c.upstreams {
            upstream.tls.as_ref().map(|t| connector(t, &format!("egress.upstreams.{name}.tls"))).transpose()?;
        }
    }
    if let Some(c) = &config.ingress {
        acceptor(c.tls.as_ref(), "ingress.tls", &c.trusted_identities)?;
        c.app_tls.as_ref().map(|t| connector(t, "ingress.app_tls")).transpose()?;
    }
    if let Some(c) = &config.admin {
        acceptor(c.tls.as_ref(), "admin.tls", &[])?;
    }
    Ok(())
}

/// The TLS acceptor of a listener's `tls` section (`field`), its files read now; the error names
/// the field and the file.
fn acceptor(
    tls: Option<&config::ServerTls>,
    field: &str,
    trusted: &[String],
) -> std::io::Result<Option<Arc<tls::Acceptor>>> {
    tls.map(|t| tls::Acceptor::new(t, field, trusted).map(Arc::new)).transpose().map_err(std::io::Error::other)
}

/// A listener on `addr`; the error names the address (`cannot listen on 127.0.0.1:4140: address
/// in use`).
async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::AddrInUse => "address in use".to_string(),
            std::io::ErrorKind::AddrNotAvailable => "no such address on this machine".to_string(),
            std::io::ErrorKind::PermissionDenied => "permission denied (a port below 1024?)".to_string(),
            _ => e.to_string(),
        };
        std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {why}"))
    })
}

/// The runtime for a proxy of `workers` threads (the file's `workers`, or `--workers`): tokio's
/// current-thread runtime for 1 (no work stealing, no cross-thread wakeups), else a multi-thread
/// runtime (unset: one thread per core, or `TOKIO_WORKER_THREADS`).
pub fn runtime(workers: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = match workers {
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    if let Some(n) = workers.filter(|n| *n > 1) {
        builder.worker_threads(n);
    }
    builder.enable_all().build()
}

/// Runs the proxy of `config` until `signal` completes, then shuts down gracefully.
pub async fn run(config: Config, signal: impl Future<Output = ()>) -> std::io::Result<()> {
    let proxy = Proxy::start(config).await?;
    signal.await;
    proxy.shutdown().await;
    Ok(())
}

/// Random stream `stream` of a proxy seeded with `seed`: the ingress draws from stream 0, the
/// egress's upstream n from stream n + 1, so each is repeatable and none repeats another.
pub(crate) fn rng(seed: u64, stream: u64) -> rand_pcg::Pcg64Mcg {
    use rand::SeedableRng;
    rand_pcg::Pcg64Mcg::seed_from_u64(tailguard_model::replica::child_key(seed, stream))
}

/// Completes on ctrl-c or (on Unix) SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
