//! Routing: the upstream a request goes to (a `Host` match first, else the longest matching
//! path prefix), and each upstream's endpoints (URI authority, HTTP/1 pool, metrics) and policy
//! state. A reload builds new routes; an unchanged upstream keeps its state, an endpoint its pool.

use crate::body::ClientBody;
use crate::config;
use crate::metrics::{EndpointMetrics, Metrics, UpstreamMetrics};
use crate::pool::Pool;
use crate::tls::{self, TlsError};
use hyper::http::uri::Authority;
use hyper::Request;
use rand_pcg::Pcg64Mcg;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tailguard_model::build;
use tailguard_policy::call::ClientPolicy;

/// The upstreams of one version of the file.
pub(super) struct Routes {
    pub(super) upstreams: Vec<Arc<Upstream>>,
    pub(super) max_replay_body: usize,
    pub(super) max_requests: usize,
}

/// One called service and the caller's policy state towards it.
pub(super) struct Upstream {
    pub(super) name: String,
    pub(super) config: config::Upstream,
    pub(super) metrics: UpstreamMetrics,
    /// Per endpoint, in the order of `config.endpoints`.
    pub(super) endpoints: Vec<Endpoint>,
    pub(super) core: Mutex<Core>,
}

/// What a request needs of an endpoint, prepared once: its URI authority, its HTTP/1
/// connections and its metrics.
pub(super) struct Endpoint {
    pub(super) addr: SocketAddr,
    /// `None` if the address is no URI authority (then no h2c attempt can be sent there).
    pub(super) authority: Option<Authority>,
    /// Kept across reloads for as long as some upstream lists the address.
    pub(super) pool: Arc<Pool>,
    pub(super) metrics: EndpointMetrics,
}

/// What a policy step needs: the policy and the random source.
pub(super) struct Core {
    pub(super) policy: ClientPolicy,
    pub(super) rng: Pcg64Mcg,
}

impl Routes {
    /// The routes of `config`, keeping what is unchanged from `old`; an error if an upstream's
    /// TLS files cannot be used.
    pub(super) fn new(
        config: &config::Egress,
        old: Option<&Routes>,
        metrics: &Metrics,
        seed: u64,
    ) -> Result<Routes, TlsError> {
        let upstreams = config
            .upstreams
            .iter()
            .enumerate()
            .map(|(i, (name, u))| {
                let same = old.and_then(|old| old.upstreams.iter().find(|o| o.name == *name && o.config == *u));
                match same {
                    Some(same) => Ok(same.clone()),
                    None => Ok(Arc::new(Upstream::new(name, u, crate::rng(seed, i as u64 + 1), metrics, old)?)),
                }
            })
            .collect::<Result<_, TlsError>>()?;
        Ok(Routes { upstreams, max_replay_body: config.max_replay_body, max_requests: config.max_requests })
    }

    /// The upstream for `req`: a Host match first, else the longest matching path prefix.
    pub(super) fn route(&self, req: &Request<ClientBody>) -> Option<&Arc<Upstream>> {
        let host = req.headers().get(hyper::header::HOST).and_then(|h| h.to_str().ok()).or(req.uri().host());
        let host = host.map(|h| h.rsplit_once(':').map_or(h, |(name, _)| name));
        let by_host = self
            .upstreams
            .iter()
            .find(|u| matches!(&u.config.route, config::Route::Host(h) if Some(h.as_str()) == host));
        by_host.or_else(|| {
            let path = req.uri().path();
            self.upstreams
                .iter()
                .filter_map(|u| match &u.config.route {
                    config::Route::PathPrefix(p) if path.starts_with(p.as_str()) => Some((p.len(), u)),
                    _ => None,
                })
                .max_by_key(|(len, _)| *len)
                .map(|(_, u)| u)
        })
    }
}

impl Upstream {
    /// The upstream `name`, drawing from `rng`; its endpoints keep their connection pools from
    /// `old` routes when they speak the same TLS (or none).
    fn new(
        name: &str,
        config: &config::Upstream,
        rng: Pcg64Mcg,
        metrics: &Metrics,
        old: Option<&Routes>,
    ) -> Result<Upstream, TlsError> {
        let policy = build::client_policy(&config.policy, config.endpoints.len());
        let tls = match &config.tls {
            Some(t) => Some(Arc::new(tls::Connector::new(t, &format!("egress.upstreams.{name}.tls"))?)),
            None => None,
        };
        let old_pool = |addr: &SocketAddr| {
            let mut endpoints = old.into_iter().flat_map(|r| r.upstreams.iter()).flat_map(|u| u.endpoints.iter());
            let same_tls = |pool: &Pool| pool.tls().map(|c| c.config()) == config.tls.as_ref();
            endpoints.find(|e| e.addr == *addr && same_tls(&e.pool)).map(|e| e.pool.clone())
        };
        let endpoints = config
            .endpoints
            .iter()
            .map(|addr| {
                let max = config.max_connections_per_endpoint;
                let pool = old_pool(addr).inspect(|pool| pool.set_max_connections(max));
                Endpoint {
                    addr: *addr,
                    authority: Authority::try_from(addr.to_string()).ok(),
                    pool: pool.unwrap_or_else(|| Arc::new(Pool::new(*addr, max).with_tls(tls.clone()))),
                    metrics: metrics.endpoint(name, &addr.to_string()),
                }
            })
            .collect();
        Ok(Upstream {
            name: name.to_string(),
            config: config.clone(),
            metrics: metrics.upstream(name),
            endpoints,
            core: Mutex::new(Core { policy, rng }),
        })
    }
}
