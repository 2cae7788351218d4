//! Routes through the real egress on 127.0.0.1: a fast and a slow route on one upstream, whose
//! work belongs to the request (every replica takes as long). A learned number never fails a
//! request that P2C least-request without timeouts serves, on a machine with two busy cores.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailguard_proxy::{Config, Proxy};
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

/// The slow route's work on any replica, as in the report.
const SLOW: Duration = Duration::from_millis(1200);

/// A replica of a small application: `/slow` takes [`SLOW`], anything else 3 ms. Counts the
/// attempts each route received.
struct App {
    addr: SocketAddr,
    slow_hits: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl App {
    async fn start() -> App {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let slow_hits = Arc::new(AtomicUsize::new(0));
        let hits = slow_hits.clone();
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let hits = hits.clone();
                let service = service_fn(move |req: Request<Incoming>| {
                    let slow = req.uri().path().starts_with("/slow");
                    if slow {
                        hits.fetch_add(1, Ordering::SeqCst);
                    }
                    async move {
                        tokio::time::sleep(if slow { SLOW } else { Duration::from_millis(3) }).await;
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                    }
                });
                conns.spawn(async move {
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                });
            }
        });
        App { addr, slow_hits, task }
    }
}

impl Drop for App {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Two threads that keep a core busy each until dropped (at most 60 s).
struct Busy {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Busy {
    fn start() -> Busy {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let started = Instant::now();
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(60) {
                        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                    }
                })
            })
            .collect();
        Busy { stop, threads }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Sends `n` requests at 100/s, every 25th to `/slow/...` (4 %), the rest to `/fast/...`, through
/// an egress over `apps` with `policy`; the statuses of the slow and of the fast requests.
async fn run(apps: &[&App], policy: &str, n: usize) -> (Vec<StatusCode>, Vec<StatusCode>) {
    let endpoints: Vec<String> = apps.iter().map(|a| a.addr.to_string()).collect();
    let text = format!(
        "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    app:\n      endpoints: [{}]\n      match: {{host: app}}\n      policy: {policy}\nadmin: {{listen: 127.0.0.1:0}}\nshutdown_grace: 1s\n",
        endpoints.join(", ")
    );
    let proxy = Proxy::start(Config::parse(&text, Path::new("routes.yaml")).unwrap()).await.unwrap();
    let egress = proxy.egress.unwrap();
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut requests = JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    for i in 0..n {
        tick.tick().await;
        let slow = i % 25 == 12;
        let path = if slow { format!("/slow/{i}") } else { format!("/fast/{i}") };
        let request = Request::get(format!("http://{egress}{path}")).header("host", "app").body(Empty::new()).unwrap();
        let client = client.clone();
        requests.spawn(async move {
            let answer = tokio::time::timeout(Duration::from_secs(10), client.request(request)).await;
            let status = match answer {
                Ok(Ok(response)) => {
                    let status = response.status();
                    let _ = response.into_body().collect().await;
                    status
                }
                _ => StatusCode::BAD_GATEWAY,
            };
            (slow, status)
        });
    }
    let (mut slow, mut fast) = (Vec::new(), Vec::new());
    while let Some(done) = requests.join_next().await {
        let (is_slow, status) = done.unwrap();
        if is_slow {
            slow.push(status)
        } else {
            fast.push(status)
        }
    }
    proxy.shutdown().await;
    (slow, fast)
}

fn failed(statuses: &[StatusCode]) -> usize {
    statuses.iter().filter(|s| **s != StatusCode::OK).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learned_timeout_fails_no_slow_route_request_that_least_request_serves() {
    let (a, b) = (App::start().await, App::start().await);
    let _busy = Busy::start();
    let n = 400;
    let (slow, fast) = run(&[&a, &b], "{balancer: {kind: least-request}}", n).await;
    assert_eq!((failed(&slow), failed(&fast)), (0, 0), "least-request without timeouts serves all");
    let policies = [
        "{balancer: {kind: least-request}, timeout: {kind: adaptive}}",
        "{balancer: {kind: prequal}, outlier: {}, timeout: {kind: adaptive}, hedge: {kind: adaptive}, retry: {max_attempts: 2}}",
    ];
    for policy in policies {
        let before = a.slow_hits.load(Ordering::SeqCst) + b.slow_hits.load(Ordering::SeqCst);
        let (slow, fast) = run(&[&a, &b], policy, n).await;
        let attempts = a.slow_hits.load(Ordering::SeqCst) + b.slow_hits.load(Ordering::SeqCst) - before;
        assert_eq!((failed(&slow), failed(&fast)), (0, 0), "{policy}: slow {slow:?}");
        // The slow route is its own class: its learned timeout is its own, not the fast route's,
        // so its requests are not raced over and over (a storm would send ~2 per request).
        assert!(attempts <= slow.len() * 3 / 2, "{policy}: {attempts} attempts for {} slow requests", slow.len());
    }
}
