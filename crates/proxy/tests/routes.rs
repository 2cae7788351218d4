//! Routes through the real egress on 127.0.0.1: a fast and a slow route on one upstream, whose
//! work belongs to the request (every replica takes as long). A learned number never fails a
//! request that P2C least-request without timeouts serves: with the slow route at 0.8 s, and at
//! 1.2 s on a machine with two busy cores.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailguard_proxy::{Config, Proxy};
use tailguard_testkit::{Backend, Mode};
use tokio::task::JoinSet;

/// The policies compared, each in front of replicas of its own: P2C least-request with no
/// timeout (what every other must match), the adaptive timeout alone, and the recommended
/// egress (docs/policies.md, examples/routes.yaml's `recommended` without its deadline).
const POLICIES: [&str; 3] = [
    "{balancer: {kind: least-request}}",
    "{balancer: {kind: least-request}, timeout: {kind: adaptive}}",
    "{balancer: {kind: prequal}, outlier: {}, timeout: {kind: adaptive}, hedge: {kind: adaptive}, retry: {max_attempts: 2}}",
];

/// Requests per policy and scenario, at 100/s: every 20th (5 %) to the slow route.
const REQUESTS: usize = 400;

/// A replica of a small application: `/slow/...` takes `slow` on any replica (the work belongs
/// to the request), anything else 3 ms; it counts the attempts its slow route received.
async fn app(slow: Duration) -> Backend {
    Backend::start("app", Mode::SlowOn { prefix: "/slow/", slow, other: Duration::from_millis(3) }).await
}

/// What the client received through one policy's egress: per request, its status (`None`: no
/// answer within 10 s), and the attempts the replicas saw for the slow route.
struct Answers {
    policy: &'static str,
    slow: Vec<Option<StatusCode>>,
    fast: Vec<Option<StatusCode>>,
    slow_attempts: usize,
}

impl Answers {
    fn failed(statuses: &[Option<StatusCode>]) -> usize {
        statuses.iter().filter(|s| **s != Some(StatusCode::OK)).count()
    }
}

/// Sends [`REQUESTS`] requests at 100/s, every 20th to `/slow/{i}`, the rest to `/fast/{i}`,
/// through an egress with `policy` in front of two replicas whose slow route takes `slow`.
async fn run(policy: &'static str, slow: Duration) -> Answers {
    let apps = [app(slow).await, app(slow).await];
    let text = format!(
        "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    app:\n      endpoints: [{}, {}]\n      match: {{host: app}}\n      policy: {policy}\nadmin: {{listen: 127.0.0.1:0}}\nshutdown_grace: 1s\n",
        apps[0].addr, apps[1].addr
    );
    let proxy = Proxy::start(Config::parse(&text, Path::new("routes.yaml")).unwrap()).await.unwrap();
    let egress = proxy.egress.unwrap();
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut requests = JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    for i in 0..REQUESTS {
        tick.tick().await;
        let is_slow = i % 20 == 10;
        let path = if is_slow { format!("/slow/{i}") } else { format!("/fast/{i}") };
        let request = Request::get(format!("http://{egress}{path}")).header("host", "app").body(Empty::new()).unwrap();
        let client = client.clone();
        requests.spawn(async move {
            let answer = tokio::time::timeout(Duration::from_secs(10), async {
                let response = client.request(request).await.ok()?;
                let status = response.status();
                response.into_body().collect().await.ok()?;
                Some(status)
            });
            (is_slow, answer.await.ok().flatten())
        });
    }
    let mut answers = Answers { policy, slow: Vec::new(), fast: Vec::new(), slow_attempts: 0 };
    while let Some(done) = requests.join_next().await {
        let (is_slow, status) = done.unwrap();
        if is_slow { &mut answers.slow } else { &mut answers.fast }.push(status);
    }
    proxy.shutdown().await;
    answers.slow_attempts = apps.iter().map(|a| a.singled_out.load(Ordering::SeqCst)).sum();
    answers
}

/// Every policy side by side, with the slow route taking `slow`; every request must succeed.
async fn every_request_succeeds(slow: Duration) {
    let runs = futures::future::join_all(POLICIES.map(|policy| tokio::spawn(run(policy, slow)))).await;
    for answers in runs {
        let Answers { policy, slow: slow_answers, fast, slow_attempts } = answers.unwrap();
        let (n, failed) = (slow_answers.len(), Answers::failed(&slow_answers));
        println!("{slow:?} {policy}: slow route {failed} of {n} failed, {slow_attempts} attempts");
        assert_eq!(n, REQUESTS / 20);
        assert_eq!((failed, Answers::failed(&fast)), (0, 0), "{slow:?} {policy}: slow route {slow_answers:?}");
        // The slow route is its own class: its learned timeout and hedge are its own, not the
        // fast route's, so its requests are not raced over and over (a storm sends ~2 each).
        assert!(slow_attempts <= n * 3 / 2, "{slow:?} {policy}: {slow_attempts} attempts for {n} slow requests");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learned_timeout_fails_no_slow_route_request_that_least_request_serves() {
    every_request_succeeds(Duration::from_millis(800)).await;
    let busy = Busy::start();
    every_request_succeeds(Duration::from_millis(1200)).await;
    drop(busy);
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
