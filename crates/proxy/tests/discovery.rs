//! Endpoint discovery over real sockets: an upstream's endpoint set read from a file (the same
//! path a DNS answer takes) changes under load, and one upstream resolves `localhost` for real.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailguard_proxy::{Config, Proxy};
use tokio::task::JoinSet;

use tailguard_testkit::{Backend, Mode};

/// A backend answering 200 with its name after 2 ms.
async fn ok(name: &'static str) -> Backend {
    Backend::start(name, Mode::Ok(Duration::from_millis(2))).await
}

/// An endpoint file in the temp directory, replaced whole on each write (write, then rename).
struct EndpointFile(PathBuf);

impl EndpointFile {
    fn new(test: &str) -> EndpointFile {
        EndpointFile(std::env::temp_dir().join(format!("tailguard-{test}-{}.endpoints", std::process::id())))
    }

    fn write(&self, backends: &[&Backend]) {
        let text: String = backends.iter().map(|b| format!("{}\n", b.addr)).collect();
        let next = self.0.with_extension("next");
        std::fs::write(&next, text).unwrap();
        std::fs::rename(&next, &self.0).unwrap();
    }
}

impl Drop for EndpointFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A proxy with one upstream `svc` whose endpoints are found by `discovery` (YAML), under `policy`.
async fn proxy(discovery: &str, policy: &str) -> Proxy {
    let text = format!(
        "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc:\n      discovery: {discovery}\n      policy: {policy}\nadmin: {{listen: 127.0.0.1:0}}\nshutdown_grace: 1s\n"
    );
    Proxy::start(Config::parse(&text, Path::new("test.yaml")).unwrap()).await.unwrap()
}

fn file_discovery(file: &EndpointFile, interval: &str) -> String {
    format!("{{file: '{}', interval: {interval}}}", file.0.display())
}

type TestClient = Client<HttpConnector, Empty<Bytes>>;

fn client() -> TestClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// GET through the egress: status and body.
async fn get(client: &TestClient, proxy: &Proxy) -> (StatusCode, String) {
    let req = Request::get(format!("http://{}/x", proxy.egress.unwrap())).body(Empty::new()).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(5), client.request(req))
        .await
        .expect("the proxy answers within 5 s")
        .unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn metrics(proxy: &Proxy) -> String {
    let req = Request::get(format!("http://{}/metrics", proxy.admin.unwrap())).body(Empty::new()).unwrap();
    let response = client().request(req).await.unwrap();
    String::from_utf8_lossy(&response.into_body().collect().await.unwrap().to_bytes()).into_owned()
}

/// The value of the sample `series` (name and labels, exactly as exposed), if exposed.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    let line = metrics.lines().find(|l| l.strip_prefix(series).is_some_and(|rest| rest.starts_with(' ')))?;
    line[series.len()..].trim().parse().ok()
}

/// Waits (up to 5 s) until the proxy has made an endpoint of `backend`: its series exist.
async fn until_known(proxy: &Proxy, backend: &Backend) {
    let series = format!("tailguard_egress_attempts_total{{upstream=\"svc\",endpoint=\"{}\"}}", backend.addr);
    let started = Instant::now();
    while sample(&metrics(proxy).await, &series).is_none() {
        assert!(started.elapsed() < Duration::from_secs(5), "{} not discovered in 5 s", backend.addr);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_changing_every_150_ms_under_steady_load_fail_no_request() {
    let backends = [ok("a").await, ok("b").await, ok("c").await, ok("d").await];
    let file = EndpointFile::new("churn");
    file.write(&[&backends[0], &backends[1]]);
    // No retries: a request sent to an endpoint as it leaves must still be answered by it.
    let proxy = Arc::new(proxy(&file_discovery(&file, "20ms"), "{balancer: {kind: least-request}}").await);
    // Eight clients in a loop for 3 s, while the set changes every 150 ms: each set has two or
    // three of the four backends, and every backend leaves and comes back.
    let sets: [&[usize]; 6] = [&[1, 2], &[2, 3], &[0, 3], &[0, 1, 2], &[1, 3], &[0, 2, 3]];
    let stop = Instant::now() + Duration::from_secs(3);
    let mut load = JoinSet::new();
    for _ in 0..8 {
        let proxy = proxy.clone();
        load.spawn(async move {
            let client = client();
            let (mut answered, mut failed) = (0, Vec::new());
            while Instant::now() < stop {
                match get(&client, &proxy).await {
                    (StatusCode::OK, _) => answered += 1,
                    other => failed.push(other),
                }
            }
            (answered, failed)
        });
    }
    let mut changes = 0;
    while Instant::now() < stop {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let set: Vec<&Backend> = sets[changes % sets.len()].iter().map(|&i| &backends[i]).collect();
        file.write(&set);
        changes += 1;
    }
    let (mut answered, mut failed) = (0, Vec::new());
    while let Some(result) = load.join_next().await {
        let (a, f) = result.unwrap();
        answered += a;
        failed.extend(f);
    }
    assert!(
        failed.is_empty(),
        "{} of {} requests failed: {:?}",
        failed.len(),
        answered + failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert!(answered > 500, "only {answered} requests in 3 s");
    assert!(changes >= 15, "{changes} changes");
    assert!(backends.iter().all(|b| b.hits() > 0), "{:?}", backends.iter().map(Backend::hits).collect::<Vec<_>>());
    // The file gone: every answer fails, the last set is kept, and requests are still answered.
    // The last set is read first (one 20 ms poll, longer on busy cores: at most 5 s).
    let last = sets[(changes - 1) % sets.len()].len() as f64;
    let read = Instant::now();
    let m = loop {
        let m = metrics(&proxy).await;
        if sample(&m, "tailguard_egress_endpoints{upstream=\"svc\"}") == Some(last)
            || read.elapsed() > Duration::from_secs(5)
        {
            break m;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(
        sample(&m, "tailguard_egress_endpoints{upstream=\"svc\"}"),
        Some(last),
        "the last set unread after 5 s: {m}"
    );
    assert_eq!(sample(&m, "tailguard_egress_discovery_errors_total{upstream=\"svc\"}"), Some(0.0), "{m}");
    std::fs::remove_file(&file.0).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let m = metrics(&proxy).await;
    assert!(sample(&m, "tailguard_egress_discovery_errors_total{upstream=\"svc\"}").unwrap() >= 2.0, "{m}");
    assert_eq!(sample(&m, "tailguard_egress_endpoints{upstream=\"svc\"}"), Some(last), "{m}");
    assert_eq!(get(&client(), &proxy).await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_removed_endpoint_gets_no_new_request_and_its_request_in_flight_finishes() {
    let slow = Backend::start("slow", Mode::Ok(Duration::from_millis(800))).await;
    let fast = ok("fast").await;
    let file = EndpointFile::new("drain");
    file.write(&[&slow]);
    let proxy = Arc::new(proxy(&file_discovery(&file, "20ms"), "{}").await);
    // One request in flight to `slow`; then `slow` leaves the set and `fast` joins.
    let in_flight = tokio::spawn({
        let proxy = proxy.clone();
        async move { get(&client(), &proxy).await }
    });
    while slow.hits() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    file.write(&[&fast]);
    until_known(&proxy, &fast).await;
    // Every new request goes to `fast`, none to `slow`, while its request is still in flight.
    let client = client();
    for _ in 0..20 {
        assert_eq!(get(&client, &proxy).await, (StatusCode::OK, "fast".to_string()));
    }
    assert!(!in_flight.is_finished(), "the slow request should still be in flight");
    assert_eq!(in_flight.await.unwrap(), (StatusCode::OK, "slow".to_string()));
    assert_eq!((slow.hits(), fast.hits()), (1, 20));
    let m = metrics(&proxy).await;
    assert_eq!(sample(&m, "tailguard_egress_endpoints{upstream=\"svc\"}"), Some(1.0), "{m}");
}

#[tokio::test]
async fn an_ejected_endpoint_that_stays_in_the_set_stays_ejected() {
    let broken = Backend::start("broken", Mode::Status(500)).await;
    let (a, b, c) = (ok("a").await, ok("b").await, ok("c").await);
    let file = EndpointFile::new("eject");
    file.write(&[&broken, &a, &b]);
    let policy =
        "{balancer: {kind: round-robin}, outlier: {consecutive_failures: 3, base_ejection: 60s, max_ejected: 0.34}}";
    let proxy = proxy(&file_discovery(&file, "20ms"), policy).await;
    let client = client();
    // Round robin sends every third request to `broken` until its third 500 ejects it.
    for _ in 0..30 {
        get(&client, &proxy).await;
    }
    assert_eq!(broken.hits(), 3);
    // `c` joins; `broken` stays in the set, and stays out of every pick.
    file.write(&[&broken, &a, &b, &c]);
    until_known(&proxy, &c).await;
    for _ in 0..30 {
        assert_eq!(get(&client, &proxy).await.0, StatusCode::OK);
    }
    assert_eq!(broken.hits(), 3);
    assert!(c.hits() >= 9, "c: {}", c.hits());
    let m = metrics(&proxy).await;
    assert_eq!(sample(&m, "tailguard_egress_ejections_total{upstream=\"svc\"}"), Some(1.0), "{m}");
    assert_eq!(sample(&m, "tailguard_egress_endpoints{upstream=\"svc\"}"), Some(4.0), "{m}");
}

#[tokio::test]
async fn a_dns_name_is_resolved_with_the_system_resolver() {
    let backend = ok("a").await;
    // `localhost` may also resolve to ::1, where nothing listens: a retry takes it elsewhere.
    let discovery = format!("{{dns: 'localhost:{}', interval: 1s}}", backend.addr.port());
    let proxy = proxy(&discovery, "{retry: {max_attempts: 3}}").await;
    // The proxy starts once the first answer is in.
    let m = metrics(&proxy).await;
    let series = format!("tailguard_egress_attempts_total{{upstream=\"svc\",endpoint=\"{}\"}}", backend.addr);
    assert_eq!(sample(&m, &series), Some(0.0), "{m}");
    assert!(sample(&m, "tailguard_egress_endpoints{upstream=\"svc\"}").unwrap() >= 1.0, "{m}");
    for _ in 0..4 {
        assert_eq!(get(&client(), &proxy).await, (StatusCode::OK, "a".to_string()));
    }
}
