//! The proxy over real sockets on 127.0.0.1 with tiny in-test backends.

use crate::proxy_of;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailguard_proxy::{Config, Proxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use tailguard_testkit::{Backend, Mode};

fn endpoints(backends: &[&Backend]) -> String {
    let list: Vec<String> = backends.iter().map(|b| b.addr.to_string()).collect();
    format!("[{}]", list.join(", "))
}

/// A proxy with one egress upstream `svc` (matched by host) over `backends` with `policy`.
async fn egress(backends: &[&Backend], policy: &str) -> Proxy {
    let text = format!(
        "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc:\n      endpoints: {}\n      match: {{host: svc}}\n      policy: {policy}\nadmin: {{listen: 127.0.0.1:0}}\nshutdown_grace: 1s\n",
        endpoints(backends)
    );
    Proxy::start(Config::parse(&text, Path::new("test.yaml")).unwrap()).await.unwrap()
}

type TestClient = Client<HttpConnector, Empty<Bytes>>;

fn client() -> TestClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// GET `path` from `addr` with Host `host` and extra headers; status, headers and body.
async fn get(
    client: &TestClient,
    addr: SocketAddr,
    host: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, hyper::HeaderMap, String) {
    let mut req = Request::get(format!("http://{addr}/x")).header("host", host);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let response = tokio::time::timeout(Duration::from_secs(5), client.request(req.body(Empty::new()).unwrap()))
        .await
        .expect("the proxy answers within 5 s")
        .unwrap();
    let status = response.status();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (status, parts.headers, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn round_robin_spreads_requests_over_three_backends() {
    let (a, b, c) = (
        Backend::start("a", Mode::Ok(Duration::ZERO)).await,
        Backend::start("b", Mode::Ok(Duration::ZERO)).await,
        Backend::start("c", Mode::Ok(Duration::ZERO)).await,
    );
    let proxy = egress(&[&a, &b, &c], "{balancer: {kind: round-robin}}").await;
    let client = client();
    for _ in 0..30 {
        let (status, _, _) = get(&client, proxy.egress.unwrap(), "svc", &[]).await;
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!((a.hits(), b.hits(), c.hits()), (10, 10, 10));
    // An unknown host finds no upstream.
    let (status, _, _) = get(&client, proxy.egress.unwrap(), "other", &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    proxy.shutdown().await;
}

#[tokio::test]
async fn the_seed_in_the_file_repeats_the_random_balancers_picks() {
    let names = ["a", "b", "c", "d"];
    let mut backends = Vec::new();
    for name in names {
        backends.push(Backend::start(name, Mode::Ok(Duration::ZERO)).await);
    }
    let all: Vec<&Backend> = backends.iter().collect();
    let client = client();
    let picks = |seed: Option<u64>| {
        let text = format!(
            "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc:\n      endpoints: {}\n      match: {{host: svc}}\n      policy: {{balancer: {{kind: random}}}}\nshutdown_grace: 1s\n{}",
            endpoints(&all),
            seed.map_or(String::new(), |s| format!("seed: {s}\n"))
        );
        let client = &client;
        async move {
            let proxy = proxy_of(&text).await;
            let mut picked = String::new();
            for _ in 0..40 {
                picked += &get(client, proxy.egress.unwrap(), "svc", &[]).await.2;
            }
            let seed = proxy.seed;
            proxy.shutdown().await;
            (seed, picked)
        }
    };
    let (seed, first) = picks(Some(42)).await;
    assert_eq!(seed, 42, "the proxy reports the file's seed");
    assert_eq!(picks(Some(42)).await.1, first, "the same seed makes the same picks");
    assert_ne!(picks(Some(43)).await.1, first, "another seed makes other picks (4^40 sequences)");
    // Without a seed one is drawn, reported, and repeats the picks when written into the file.
    let (drawn, unseeded) = picks(None).await;
    assert_eq!(picks(Some(drawn)).await.1, unseeded);
}

#[tokio::test]
async fn the_egress_reuses_kept_alive_connections() {
    let backend = Backend::start("a", Mode::Ok(Duration::ZERO)).await;
    let proxy = egress(&[&backend], "{}").await;
    let client = client();
    for _ in 0..20 {
        let (status, _, body) = get(&client, proxy.egress.unwrap(), "svc", &[]).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "a"));
    }
    assert_eq!(backend.hits(), 20);
    assert_eq!(backend.accepted.load(Ordering::SeqCst), 1);
    proxy.shutdown().await;
}

/// A backend whose sidecar refuses everything with 429, one that answers "ok", and an egress over
/// both (round robin) that retries once.
async fn refusing_and_ok() -> (Backend, Backend, Proxy) {
    let refusing = Backend::start("refusing", Mode::Refused).await;
    let ok = Backend::start("ok", Mode::Ok(Duration::ZERO)).await;
    let proxy = egress(&[&refusing, &ok], "{retry: {max_attempts: 2}}").await;
    (refusing, ok, proxy)
}

#[tokio::test]
async fn a_429_is_retried_on_another_backend() {
    let (busy, _ok, proxy) = refusing_and_ok().await;
    let client = client();
    for _ in 0..10 {
        let (status, _, body) = get(&client, proxy.egress.unwrap(), "svc", &[]).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    }
    assert!(busy.hits() >= 5, "round robin sent half the first tries to the busy backend");
    let metrics = admin_metrics(&proxy).await;
    let rejected = format!("tailguard_egress_rejected_total{{upstream=\"svc\",endpoint=\"{}\"}}", busy.addr);
    assert_eq!(sample(&metrics, &rejected), busy.hits() as f64, "{metrics}");
    let retries = sample(&metrics, "tailguard_egress_retries_total{upstream=\"svc\"}");
    assert_eq!(retries, busy.hits() as f64, "every 429 was retried once: {metrics}");
    assert_eq!(sample(&metrics, "tailguard_egress_requests_total{upstream=\"svc\"}"), 10.0);
    proxy.shutdown().await;
}

#[tokio::test]
async fn an_application_s_429_is_passed_on_and_not_retried_and_refusals_everywhere_are_a_429() {
    // An application answers 429 when a call of its own was refused: its service's dependency is
    // over capacity, and another replica would only meet the same refusal.
    let overloaded = Backend::start("overloaded", Mode::Status(429)).await;
    let ok = Backend::start("ok", Mode::Ok(Duration::ZERO)).await;
    let proxy = egress(&[&overloaded, &ok], "{retry: {max_attempts: 2}}").await;
    let client = client();
    let mut answers = Vec::new();
    for _ in 0..4 {
        let (status, _, body) = get(&client, proxy.egress.unwrap(), "svc", &[]).await;
        answers.push((status.as_u16(), body));
    }
    answers.sort();
    let expected = [(200, "ok"), (200, "ok"), (429, "overloaded"), (429, "overloaded")];
    assert_eq!(answers, expected.map(|(s, b)| (s, b.to_string())), "round robin, no retry of the 429s");
    let metrics = admin_metrics(&proxy).await;
    assert_eq!(sample(&metrics, "tailguard_egress_retries_total{upstream=\"svc\"}"), 0.0, "{metrics}");
    proxy.shutdown().await;
    // Every endpoint's sidecar refused: the application gets a 429 to pass on, not a 503.
    let (a, b) = (Backend::start("a", Mode::Refused).await, Backend::start("b", Mode::Refused).await);
    let proxy = egress(&[&a, &b], "{retry: {max_attempts: 2}}").await;
    let (status, _, body) = get(&client, proxy.egress.unwrap(), "svc", &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!((a.hits(), b.hits()), (1, 1), "tried on both");
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_killed_backend_loses_no_idempotent_request() {
    let (a, b, c) = (
        Backend::start("a", Mode::Ok(Duration::ZERO)).await,
        Backend::start("b", Mode::Ok(Duration::ZERO)).await,
        Backend::start("c", Mode::Ok(Duration::ZERO)).await,
    );
    let proxy = egress(&[&a, &b, &c], "{retry: {max_attempts: 3}}").await;
    let client = client();
    for i in 0..40 {
        if i == 10 {
            b.kill();
        }
        let (status, _, body) = get(&client, proxy.egress.unwrap(), "svc", &[]).await;
        assert_eq!(status, StatusCode::OK, "request {i}: {body}");
    }
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_hung_backend_is_cut_by_the_timeout() {
    let hung = Backend::start("hung", Mode::Hang).await;
    let ok = Backend::start("ok", Mode::Ok(Duration::ZERO)).await;
    // With a retry, the request moves to the healthy backend.
    let proxy = egress(&[&hung, &ok], "{timeout: {kind: fixed, value: 100ms}, retry: {max_attempts: 2}}").await;
    let client = client();
    for _ in 0..4 {
        let (status, _, body) = get(&client, proxy.egress.unwrap(), "svc", &[]).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    }
    let metrics = admin_metrics(&proxy).await;
    let timeouts = format!("tailguard_egress_timeouts_total{{upstream=\"svc\",endpoint=\"{}\"}}", hung.addr);
    assert_eq!(sample(&metrics, &timeouts), hung.hits() as f64, "{metrics}");
    assert!(hung.hits() >= 1);
    assert_eq!(sample(&metrics, "tailguard_egress_timeout_seconds{upstream=\"svc\"}"), 0.1);
    // Time fraction's parts: each request that tried the hung backend first lost its 100 ms
    // timeout; the answering attempts, to the healthy backend, took well under that.
    let answered = sample(&metrics, "tailguard_egress_answered_seconds_total{upstream=\"svc\"}");
    let answer = sample(&metrics, "tailguard_egress_answer_seconds_total{upstream=\"svc\"}");
    let lost = answered - answer;
    assert!(lost >= 0.1 * hung.hits() as f64 && lost < 0.1 * hung.hits() as f64 + 0.2, "{metrics}");
    assert!(answer < 0.2, "{metrics}");
    // Closeness: every answer came with the 100 ms timeout, far above its latency.
    assert_eq!(sample(&metrics, "tailguard_egress_timeout_headroom_count{upstream=\"svc\"}"), 4.0);
    assert!(sample(&metrics, "tailguard_egress_timeout_headroom_sum{upstream=\"svc\"}") > 4.0, "{metrics}");
    proxy.shutdown().await;
    // Without one, the caller gets 504 once the timeout fires.
    let proxy = egress(&[&hung], "{timeout: {kind: fixed, value: 100ms}}").await;
    let started = Instant::now();
    let (status, _, _) = get(&client, proxy.egress.unwrap(), "svc", &[]).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert!(started.elapsed() < Duration::from_secs(2));
    proxy.shutdown().await;
}

/// A black hole on 127.0.0.1: a listener whose accept queue (of one) is full and never drained,
/// so the kernel drops every further SYN and a connect to it hangs, as to a host gone silent.
/// The listener and the connection filling its queue must be kept.
async fn black_hole() -> (SocketAddr, TcpListener, Vec<TcpStream>) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut held = Vec::new();
    while let Ok(Ok(stream)) = tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await {
        held.push(stream);
        assert!(held.len() < 16, "the accept queue of {addr} never filled");
    }
    (addr, listener, held)
}

#[tokio::test]
async fn a_connect_that_hangs_is_given_up_after_connect_timeout_and_retried_elsewhere() {
    let (hole, _listener, _held) = black_hole().await;
    let ok = Backend::start("ok", Mode::Ok(Duration::ZERO)).await;
    // No timeout in the policy: only connect_timeout bounds the attempt to the black hole.
    let text = format!(
        "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc:\n      endpoints: [{hole}, {}]\n      connect_timeout: 300ms\n      policy: {{balancer: {{kind: round-robin}}, retry: {{max_attempts: 2}}}}\nadmin: {{listen: 127.0.0.1:0}}\n",
        ok.addr
    );
    let proxy = proxy_of(&text).await;
    let client = client();
    let mut waited = Vec::new();
    for _ in 0..4 {
        let started = Instant::now();
        let (status, _, body) = get(&client, proxy.egress.unwrap(), "svc", &[]).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
        waited.push(started.elapsed());
    }
    // Round robin sends each request to the black hole first (the retry takes the other's turn):
    // each waited out the connect timeout, not the kernel's two minutes of SYN retries, and was
    // answered by the other endpoint.
    let bounded = |w: &Duration| (Duration::from_millis(290)..Duration::from_millis(1500)).contains(w);
    assert!(waited.iter().all(bounded), "{waited:?}");
    proxy.shutdown().await;
}

#[tokio::test]
async fn hedging_on_timeout_lets_a_slow_answer_win() {
    let slow = Backend::start("slow", Mode::Ok(Duration::from_millis(300))).await;
    let hung = Backend::start("hung", Mode::Hang).await;
    let policy = "{balancer: {kind: round-robin}, timeout: {kind: fixed, value: 100ms}, retry: {max_attempts: 2";
    // Dropping the timed-out attempt loses every request: the retry goes to the other backend,
    // which is hung or too slow too.
    let proxy = egress(&[&slow, &hung], &format!("{policy}}}}}")).await;
    let client = client();
    for _ in 0..2 {
        let (status, _, _) = get(&client, proxy.egress.unwrap(), "svc", &[]).await;
        assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    }
    proxy.shutdown().await;
    // Keeping it running, the slow backend's answer wins, whichever backend got the first try.
    let proxy = egress(&[&slow, &hung], &format!("{policy}, hedge_on_timeout: true}}}}")).await;
    for _ in 0..4 {
        let started = Instant::now();
        let (status, _, body) = get(&client, proxy.egress.unwrap(), "svc", &[]).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "slow"));
        assert!(started.elapsed() < Duration::from_secs(2));
    }
    let metrics = admin_metrics(&proxy).await;
    for backend in [&slow, &hung] {
        let timeouts = format!("tailguard_egress_timeouts_total{{upstream=\"svc\",endpoint=\"{}\"}}", backend.addr);
        assert_eq!(sample(&metrics, &timeouts), 4.0, "every attempt outlived its timeout: {metrics}");
    }
    // Answers past their timeout are timeouts, not headroom.
    assert_eq!(sample(&metrics, "tailguard_egress_timeout_headroom_count{upstream=\"svc\"}"), 0.0, "{metrics}");
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_hedge_rescues_a_slow_backends_request() {
    let slow = Backend::start("slow", Mode::Ok(Duration::from_secs(3))).await;
    let fast = Backend::start("fast", Mode::Ok(Duration::ZERO)).await;
    let proxy = egress(&[&slow, &fast], "{hedge: {kind: speculative, attempts: 2, patience: 50ms}}").await;
    let client = client();
    let mut marked_as_races = 0.0;
    for _ in 0..4 {
        let started = Instant::now();
        let (status, headers, body) = get(&client, proxy.egress.unwrap(), "svc", &[]).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "fast"));
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        if headers["x-seen"] == "x-tailguard-fallback=race" {
            marked_as_races += 1.0;
        }
    }
    let metrics = admin_metrics(&proxy).await;
    let hedges = sample(&metrics, "tailguard_egress_hedges_total{upstream=\"svc\"}");
    // Every request won by `fast` after a first try to `slow` was won by its hedge, which told
    // fast's admission that it raced a live attempt.
    let won = sample(&metrics, "tailguard_egress_hedges_won_total{upstream=\"svc\"}");
    assert!(hedges >= 1.0 && won == hedges, "{metrics}");
    assert_eq!(marked_as_races, won, "{metrics}");
    assert_eq!(sample(&metrics, "tailguard_egress_budget_exhausted{upstream=\"svc\"}"), 0.0, "{metrics}");
    assert!(slow.hits() >= 1 && fast.hits() >= 4);
    // HTTP/1 cancels by closing: each of slow's attempts lost its race and took its connection
    // with it; fast's one connection carried every request.
    let opened = |b: &Backend| format!("tailguard_egress_connections_opened_total{{endpoint=\"{}\"}}", b.addr);
    let attempts = format!("tailguard_egress_attempts_total{{upstream=\"svc\",endpoint=\"{}\"}}", slow.addr);
    assert_eq!(sample(&metrics, &opened(&slow)), sample(&metrics, &attempts), "{metrics}");
    assert_eq!(sample(&metrics, &opened(&fast)), 1.0, "{metrics}");
    proxy.shutdown().await;
}

#[tokio::test]
async fn the_adaptive_hedge_gate_opens_once_it_has_learnt_the_latency() {
    let backend = Backend::start("ok", Mode::Ok(Duration::from_millis(5))).await;
    let proxy = egress(&[&backend], "{hedge: {kind: adaptive, min_samples: 5, window: 5}}").await;
    let client = client();
    let gate = "tailguard_egress_hedge_gate{upstream=\"svc\"}";
    // The first request starts before any latency is known: the gate is closed.
    let (status, _, _) = get(&client, proxy.egress.unwrap(), "svc", &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(sample(&admin_metrics(&proxy).await, gate), 0.0);
    // Five answers give the base latency; the next request finds the gate open.
    for _ in 0..5 {
        let (status, _, _) = get(&client, proxy.egress.unwrap(), "svc", &[]).await;
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(sample(&admin_metrics(&proxy).await, gate), 1.0);
    proxy.shutdown().await;
    // An upstream that does not hedge reads 0.
    let proxy = egress(&[&backend], "{}").await;
    let (status, _, _) = get(&client, proxy.egress.unwrap(), "svc", &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(sample(&admin_metrics(&proxy).await, gate), 0.0);
    proxy.shutdown().await;
}

#[tokio::test]
async fn hedges_stop_once_the_budget_shared_with_retries_is_spent() {
    // `budget: 0` leaves only the floor of 10 a second over the 10 s window: 100 retries or
    // hedges. 120 requests at once, each slower than the hedge's patience: exactly 100 hedge.
    let slow = Backend::start("slow", Mode::Ok(Duration::from_millis(300))).await;
    let policy = "{hedge: {kind: speculative, attempts: 2, patience: 50ms}, retry: {budget: 0}}";
    let proxy = egress(&[&slow], policy).await;
    let client = client();
    let mut requests = JoinSet::new();
    for _ in 0..120 {
        let (client, addr) = (client.clone(), proxy.egress.unwrap());
        requests.spawn(async move { get(&client, addr, "svc", &[]).await.0 });
    }
    while let Some(status) = requests.join_next().await {
        assert_eq!(status.unwrap(), StatusCode::OK);
    }
    let metrics = admin_metrics(&proxy).await;
    assert_eq!(sample(&metrics, "tailguard_egress_hedges_total{upstream=\"svc\"}"), 100.0, "{metrics}");
    assert_eq!(slow.hits(), 220);
    // The gate reads closed from the next request on.
    let (status, _, _) = get(&client, proxy.egress.unwrap(), "svc", &[]).await;
    assert_eq!(status, StatusCode::OK);
    let metrics = admin_metrics(&proxy).await;
    assert_eq!(sample(&metrics, "tailguard_egress_budget_exhausted{upstream=\"svc\"}"), 1.0, "{metrics}");
    proxy.shutdown().await;
}

#[tokio::test]
async fn internal_headers_are_stripped_and_the_deadline_propagated() {
    let backend = Backend::start("a", Mode::Ok(Duration::ZERO)).await;
    let proxy = egress(&[&backend], "{deadline: 2s}").await;
    let (status, headers, _) =
        get(&client(), proxy.egress.unwrap(), "svc", &[("x-tailguard-chip", "1"), ("x-tailguard-deadline-ms", "500")])
            .await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers.keys().all(|k| !k.as_str().starts_with("x-tailguard-")), "{headers:?}");
    let seen = headers["x-seen"].to_str().unwrap();
    // The backend saw only the remaining deadline, shortened to the caller's 500 ms.
    let ms: u64 = seen.strip_prefix("x-tailguard-deadline-ms=").expect(seen).parse().unwrap();
    assert!(ms <= 500 && ms > 0, "{seen}");
    let (status, _, _) = get(&client(), proxy.egress.unwrap(), "svc", &[("x-tailguard-deadline-ms", "soon")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    proxy.shutdown().await;
}

#[tokio::test]
async fn an_attempt_whose_refusal_would_be_retried_elsewhere_is_marked_for_admission() {
    let (a, b) =
        (Backend::start("a", Mode::Ok(Duration::ZERO)).await, Backend::start("b", Mode::Ok(Duration::ZERO)).await);
    // Two endpoints and a second attempt allowed: a refusal would be retried on the other one.
    let retrying = egress(&[&a, &b], "{retry: {max_attempts: 2}}").await;
    let (status, headers, _) = get(&client(), retrying.egress.unwrap(), "svc", &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["x-seen"], "x-tailguard-fallback=1");
    // One endpoint, or no retry: a refusal would fail the request, and the attempt says nothing.
    let lone = egress(&[&a], "{retry: {max_attempts: 2}}").await;
    let once = egress(&[&a, &b], "{}").await;
    for proxy in [&lone, &once] {
        let (status, headers, _) = get(&client(), proxy.egress.unwrap(), "svc", &[]).await;
        assert_eq!((status, headers["x-seen"].to_str().unwrap()), (StatusCode::OK, ""));
    }
    for proxy in [retrying, lone, once] {
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn a_retry_after_a_refusal_says_so_to_the_next_ingress() {
    // The refusing backend answers 429 as an ingress does (`x-tailguard-refused: 1`); the retry
    // on the other one is the last attempt (no fallback) and carries the refusal's mark, which
    // adaptive admission reads (a request refused elsewhere is held to the limit only in an
    // overload beyond doubt).
    let (refusing, _ok, proxy) = refusing_and_ok().await;
    let client = client();
    let mut seen = Vec::new();
    for _ in 0..4 {
        let (status, headers, _) = get(&client, proxy.egress.unwrap(), "svc", &[]).await;
        assert_eq!(status, StatusCode::OK);
        seen.push(headers["x-seen"].to_str().unwrap().to_owned());
    }
    // A first try that reached the good backend says its refusal would be retried; each retry
    // says only that another ingress refused the request.
    let retried = seen.iter().filter(|s| *s == "x-tailguard-refused=1").count();
    assert!(seen.iter().all(|s| s == "x-tailguard-fallback=1" || s == "x-tailguard-refused=1"), "{seen:?}");
    assert_eq!(retried, refusing.hits());
    assert!(retried >= 1, "round robin sent a first try to the refusing backend");
    proxy.shutdown().await;
}

#[tokio::test]
async fn every_value_of_a_repeated_header_reaches_each_attempt() {
    let (refusing, _ok, proxy) = refusing_and_ok().await;
    let client = client();
    for _ in 0..2 {
        let (status, headers, body) =
            get(&client, proxy.egress.unwrap(), "svc", &[("x-repeat", "1"), ("x-other", "o"), ("x-repeat", "2")]).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
        assert_eq!(headers["x-repeats"], "1,2");
    }
    // Round robin sent at least one of the two first tries to `refusing`: that request was retried.
    assert!(refusing.hits() >= 1);
    proxy.shutdown().await;
}

/// A proxy with an ingress in front of `app` (and an egress to that ingress, host `svc`).
async fn sidecar(app: &Backend, admission: &str) -> Proxy {
    let text = format!(
        "ingress: {{listen: 127.0.0.1:0, app: {}, admission: {admission}}}\nadmin: {{listen: 127.0.0.1:0}}\n",
        app.addr
    );
    Proxy::start(Config::parse(&text, Path::new("test.yaml")).unwrap()).await.unwrap()
}

#[tokio::test]
async fn the_ingress_strips_spoofed_headers_and_sets_its_chip() {
    let app = Backend::start("app", Mode::Ok(Duration::ZERO)).await;
    let server = sidecar(&app, "{kind: none}").await;
    let spoof = [
        ("x-tailguard-chip", "0"),
        ("x-tailguard-evil", "1"),
        ("x-tailguard-fallback", "1"),
        ("x-tailguard-refused", "1"),
        ("x-tailguard-deadline-ms", "3000"),
    ];
    let (status, headers, _) = get(&client(), server.ingress.unwrap(), "app", &spoof).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["x-seen"], "x-tailguard-deadline-ms=3000", "only the deadline reaches the app");
    assert_eq!(headers["x-tailguard-chip"], "1", "without a capacity every response carries a chip");
    assert!(!headers.contains_key("x-tailguard-deadline"), "the app's own internal headers are dropped");
    // Through an egress: the chip reaches the egress's policy and is stripped before the client.
    let ingress = server.ingress.unwrap();
    let caller = Backend::elsewhere(ingress);
    let proxy = egress(&[&caller], "{balancer: {kind: bloc}}").await;
    for _ in 0..3 {
        let (status, headers, body) = get(&client(), proxy.egress.unwrap(), "svc", &[]).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "app"));
        assert!(!headers.contains_key("x-tailguard-chip"));
    }
    assert_eq!(app.hits(), 4);
    assert_eq!(app.accepted.load(Ordering::SeqCst), 1, "the ingress keeps its connection to the app alive");
    proxy.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn the_ingress_keeps_hop_by_hop_and_connection_named_headers_from_the_app() {
    let app = Backend::start("app", Mode::Ok(Duration::ZERO)).await;
    let server = sidecar(&app, "{kind: none}").await;
    let head = "GET /x HTTP/1.1\r\nHost: app\r\nConnection: x-hop, authorization\r\nX-Hop: 1\r\nAuthorization: secret\r\nKeep-Alive: timeout=5\r\nUpgrade: websocket\r\nTE: trailers\r\nX-Kept: 1\r\n\r\n";
    let (reply, _) = raw(server.ingress.unwrap(), head.as_bytes(), Duration::from_millis(500)).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply:?}");
    // `TE: trailers` is the one hop-by-hop header kept (gRPC servers expect it).
    let names = reply.lines().find_map(|l| l.strip_prefix("x-names: ")).expect(&reply);
    assert_eq!(names, "host,x-kept,te");
    server.shutdown().await;
}

/// `n` requests to `ingress` at once; their statuses, sorted.
async fn at_once(ingress: SocketAddr, n: usize) -> Vec<StatusCode> {
    at_once_with(ingress, n, &[]).await
}

/// `n` requests to `ingress` at once with `headers`; their statuses, sorted.
async fn at_once_with(
    ingress: SocketAddr,
    n: usize,
    headers: &'static [(&'static str, &'static str)],
) -> Vec<StatusCode> {
    let tasks: Vec<_> =
        (0..n).map(|_| tokio::spawn(async move { get(&client(), ingress, "app", headers).await.0 })).collect();
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.unwrap());
    }
    statuses.sort();
    statuses
}

#[tokio::test]
async fn a_dynamic_capacity_admits_as_many_as_the_app_answered_at_once_without_waiting() {
    // An app answering each request in 100 ms, all at once (no queue); a 1 s window and the
    // paper's capacity (the mean load), which this load puts at 1.
    let app = Backend::start("app", Mode::Ok(Duration::from_millis(100))).await;
    for (floor, admitted) in [(false, 1), (true, 4)] {
        let server =
            sidecar(&app, &format!("{{kind: dynamic, window: 1s, headroom: 1, deviations: 0, floor: {floor}}}")).await;
        let ingress = server.ingress.unwrap();
        // The first window admits everything: one request alone (the base), then four at once,
        // answered as fast.
        let start = tokio::time::Instant::now();
        assert_eq!(get(&client(), ingress, "app", &[]).await.0, StatusCode::OK);
        assert_eq!(at_once(ingress, 4).await, vec![StatusCode::OK; 4]);
        // The next window: its capacity is the first's mean load (about 0.5, so 1), and with
        // the floor the four held at once without waiting.
        tokio::time::sleep_until(start + Duration::from_millis(1100)).await;
        let statuses = at_once(ingress, 4).await;
        let ok = statuses.iter().filter(|s| **s == StatusCode::OK).count();
        assert_eq!(ok, admitted, "floor {floor}: {statuses:?}");
        assert!(statuses[ok..].iter().all(|s| *s == StatusCode::TOO_MANY_REQUESTS), "{statuses:?}");
        server.shutdown().await;
    }
}

#[tokio::test]
async fn adaptive_admission_learns_the_app_s_queue_and_refuses_while_it_stands() {
    // An app with one worker of 20 ms; the limit is learnt, not set.
    let app = Backend::start("app", Mode::Serial(Duration::from_millis(20))).await;
    let server = sidecar(&app, "{kind: adaptive}").await;
    let ingress = server.ingress.unwrap();
    // Requests one after another find the app idle: its base.
    for _ in 0..20 {
        assert_eq!(get(&client(), ingress, "app", &[]).await.0, StatusCode::OK);
    }
    // A burst of 60 is admitted whole (no queue has stood yet), and its answers show the queue:
    // the k-th waits for the k before it. From 16 of them (about 340 ms) the limit is known, and
    // once the queue has stood 100 ms at it, arrivals that would wait are refused at once while
    // they come faster than the app serves (50 a second: 5 in about the last 100 ms); 800 ms in,
    // the burst still holds the queue (it drains in 1.2 s), and 10 arrive at once from an egress
    // that would retry a refusal on another replica.
    let burst = tokio::spawn(at_once(ingress, 60));
    tokio::time::sleep(Duration::from_millis(800)).await;
    let refused = at_once_with(ingress, 10, &[("x-tailguard-fallback", "1")]).await;
    let count = refused.iter().filter(|s| **s == StatusCode::TOO_MANY_REQUESTS).count();
    assert!(count >= 5, "{refused:?}");
    // What it learnt, in its metrics: the app's 20 ms, and one waiting behind one in service.
    let metrics = admin_metrics(&server).await;
    let base = sample(&metrics, "tailguard_ingress_admission_base_seconds");
    assert!((0.019..0.06).contains(&base), "{metrics}");
    assert_eq!(sample(&metrics, "tailguard_ingress_admission_limit"), 2.0, "{metrics}");
    assert_eq!(sample(&metrics, "tailguard_ingress_admission_enforced"), 1.0, "{metrics}");
    // Ten with no other replica to go to and 10 ms of deadline left, less than the 20 ms each
    // request held costs, would miss it: each is refused at once. Ten without a deadline wait
    // their turn.
    let doomed = at_once_with(ingress, 10, &[("x-tailguard-deadline-ms", "10")]).await;
    assert_eq!(doomed, vec![StatusCode::TOO_MANY_REQUESTS; 10]);
    // Those ten are the refusals that failed their requests; the others moved elsewhere.
    let metrics = admin_metrics(&server).await;
    assert_eq!(sample(&metrics, "tailguard_ingress_rejected_total"), (count + 10) as f64, "{metrics}");
    assert_eq!(sample(&metrics, "tailguard_ingress_rejected_without_fallback_total"), 10.0, "{metrics}");
    assert_eq!(at_once(ingress, 10).await, vec![StatusCode::OK; 10]);
    assert_eq!(burst.await.unwrap(), vec![StatusCode::OK; 60]);
    // The queue drained and no request was refused for a while: everything is admitted again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(at_once(ingress, 3).await, vec![StatusCode::OK; 3]);
    let metrics = admin_metrics(&server).await;
    assert_eq!(sample(&metrics, "tailguard_ingress_admission_enforced"), 0.0, "{metrics}");
    server.shutdown().await;
}

#[tokio::test]
async fn the_ingress_refuses_above_capacity_with_429() {
    let app = Backend::start("app", Mode::Ok(Duration::from_millis(500))).await;
    let server = sidecar(&app, "{kind: fixed, capacity: 1}").await;
    let ingress = server.ingress.unwrap();
    let first = tokio::spawn(async move { get(&client(), ingress, "app", &[]).await.0 });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let (status, headers, _) = get(&client(), ingress, "app", &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["x-tailguard-chip"], "0");
    // Its own refusal, which a caller's egress retries elsewhere (an application's 429 lacks it).
    assert_eq!(headers["x-tailguard-refused"], "1");
    assert_eq!(first.await.unwrap(), StatusCode::OK);
    // The deadline header is honoured: the app gets 100 ms, then the caller 504.
    let (status, _, _) = get(&client(), ingress, "app", &[("x-tailguard-deadline-ms", "100")]).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    // Each response counted once by its class: the 200, the 429 and the 504.
    let metrics = admin_metrics(&server).await;
    for (class, count) in [("1xx", 0.0), ("2xx", 1.0), ("3xx", 0.0), ("4xx", 1.0), ("5xx", 1.0)] {
        let series = format!("tailguard_ingress_responses_total{{class=\"{class}\"}}");
        assert_eq!(sample(&metrics, &series), count, "{series}: {metrics}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn a_hung_app_holds_at_most_max_app_connections_and_the_next_request_gets_503_at_once() {
    let app = Backend::start("app", Mode::Hang).await;
    let text = format!(
        "ingress: {{listen: 127.0.0.1:0, app: {}, admission: {{kind: none}}, max_app_connections: 2}}\nadmin: {{listen: 127.0.0.1:0}}\nshutdown_grace: 1s\n",
        app.addr
    );
    let server = proxy_of(&text).await;
    let ingress = server.ingress.unwrap();
    // Two requests the app never answers hold its two connections.
    let hung: Vec<_> = (0..2)
        .map(|_| {
            tokio::spawn(async move {
                let req = Request::get(format!("http://{ingress}/x")).header("host", "app").body(Empty::new());
                client().request(req.unwrap()).await
            })
        })
        .collect();
    let since = Instant::now();
    while app.hits() < 2 {
        assert!(since.elapsed() < Duration::from_secs(5), "the app got {} requests", app.hits());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The third finds no idle connection and the cap reached: 503 at once, not a third
    // connection and a wait.
    let asked = Instant::now();
    let (status, _, body) = get(&client(), ingress, "app", &[]).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(asked.elapsed() < Duration::from_secs(1), "answered after {:?}", asked.elapsed());
    assert!(body.contains("ingress.max_app_connections 2"), "{body}");
    assert_eq!(app.accepted.load(Ordering::SeqCst), 2);
    let metrics = admin_metrics(&server).await;
    assert_eq!(sample(&metrics, "tailguard_ingress_app_overflow_total"), 1.0, "{metrics}");
    assert_eq!(sample(&metrics, "tailguard_ingress_app_connections_opened_total"), 2.0, "{metrics}");
    assert_eq!(app.hits(), 2);
    for request in hung {
        request.abort();
    }
    server.shutdown().await;
}

#[tokio::test]
async fn a_backend_answering_500_is_ejected_after_three_errors() {
    let broken = Backend::start("broken", Mode::Status(500)).await;
    let (a, b) =
        (Backend::start("a", Mode::Ok(Duration::ZERO)).await, Backend::start("b", Mode::Ok(Duration::ZERO)).await);
    let policy =
        "{balancer: {kind: round-robin}, outlier: {consecutive_failures: 3, base_ejection: 60s, max_ejected: 0.34}}";
    let proxy = egress(&[&broken, &a, &b], policy).await;
    let client = client();
    let metrics = admin_metrics(&proxy).await;
    assert_eq!(sample(&metrics, "tailguard_egress_ejections_total{upstream=\"svc\"}"), 0.0, "{metrics}");
    let mut statuses = Vec::new();
    for _ in 0..30 {
        statuses.push(get(&client, proxy.egress.unwrap(), "svc", &[]).await.0.as_u16());
    }
    // Round robin sends requests 1, 4 and 7 to the broken backend, then never again.
    assert_eq!(broken.hits(), 3);
    assert_eq!(statuses.iter().filter(|&&s| s == 500).count(), 3, "{statuses:?}");
    assert_eq!(a.hits() + b.hits(), 27);
    let metrics = admin_metrics(&proxy).await;
    assert_eq!(sample(&metrics, "tailguard_egress_ejections_total{upstream=\"svc\"}"), 1.0, "{metrics}");
    assert_eq!(sample(&metrics, "tailguard_egress_ejected{upstream=\"svc\"}"), 1.0, "{metrics}");
    proxy.shutdown().await;
}

#[tokio::test]
async fn responses_are_counted_by_status_class_and_failed_requests_per_upstream() {
    let ok = Backend::start("ok", Mode::Ok(Duration::ZERO)).await;
    let missing = Backend::start("missing", Mode::Status(404)).await;
    let broken = Backend::start("broken", Mode::Status(503)).await;
    let hung = Backend::start("hung", Mode::Hang).await;
    // Round robin without retries: each backend gets every fourth request.
    let proxy = egress(
        &[&ok, &missing, &broken, &hung],
        "{balancer: {kind: round-robin}, timeout: {kind: fixed, value: 100ms}}",
    )
    .await;
    let client = client();
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(get(&client, proxy.egress.unwrap(), "svc", &[]).await.0.as_u16());
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 404, 404, 503, 503, 504, 504]);
    // A request no upstream matches has no upstream to count it under.
    assert_eq!(get(&client, proxy.egress.unwrap(), "nowhere", &[]).await.0, StatusCode::NOT_FOUND);
    let metrics = admin_metrics(&proxy).await;
    for (class, count) in [("1xx", 0.0), ("2xx", 2.0), ("3xx", 0.0), ("4xx", 2.0), ("5xx", 4.0)] {
        let series = format!("tailguard_egress_responses_total{{upstream=\"svc\",class=\"{class}\"}}");
        assert_eq!(sample(&metrics, &series), count, "{series}: {metrics}");
    }
    // A 404 is an answer (outcome Success); the 503s and the timed-out requests failed.
    assert_eq!(sample(&metrics, "tailguard_egress_failed_total{upstream=\"svc\"}"), 4.0, "{metrics}");
    assert_eq!(sample(&metrics, "tailguard_egress_requests_total{upstream=\"svc\"}"), 8.0, "{metrics}");
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_malformed_request_gets_400_and_the_proxy_serves_on() {
    let backend = Backend::start("a", Mode::Ok(Duration::ZERO)).await;
    let proxy = egress(&[&backend], "{}").await;
    let reply = |opening: &'static [u8]| async move {
        let mut stream = TcpStream::connect(proxy.egress.unwrap()).await.unwrap();
        stream.write_all(opening).await.unwrap();
        let mut reply = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut reply)).await;
        String::from_utf8_lossy(&reply).into_owned()
    };
    let malformed = reply(b"NOT HTTP AT ALL HTTP/1.1\r\n\r\n").await;
    assert!(malformed.starts_with("HTTP/1.1 400"), "{malformed:?}");
    // A line naming no HTTP/1 version is no HTTP/1 request: an invalid HTTP/2 preface, closed
    // without an answer (RFC 9113 §3.4).
    assert_eq!(reply(b"NOT HTTP AT ALL\r\n\r\n").await, "");
    let (status, _, _) = get(&client(), proxy.egress.unwrap(), "svc", &[]).await;
    assert_eq!(status, StatusCode::OK);
    proxy.shutdown().await;
}

#[tokio::test]
async fn the_admin_listener_serves_health_and_config() {
    let backend = Backend::start("a", Mode::Ok(Duration::ZERO)).await;
    let proxy = egress(&[&backend], "{}").await;
    let admin = proxy.admin.unwrap();
    let (status, _, body) = get(&client(), admin, "admin", &[]).await;
    assert_eq!((status, body.trim()), (StatusCode::NOT_FOUND, "not found: try /healthz, /metrics or /config"));
    let body = fetch(admin, "/healthz").await;
    assert_eq!(body.trim(), "ok");
    assert!(fetch(admin, "/config").await.contains("upstreams:"));
    proxy.shutdown().await;
}

async fn fetch(addr: SocketAddr, path: &str) -> String {
    let req = Request::get(format!("http://{addr}{path}")).body(Empty::new()).unwrap();
    let response = client().request(req).await.unwrap();
    String::from_utf8_lossy(&response.into_body().collect().await.unwrap().to_bytes()).into_owned()
}

async fn admin_metrics(proxy: &Proxy) -> String {
    fetch(proxy.admin.unwrap(), "/metrics").await
}

/// The value of the sample `series` (name and labels, exactly as exposed) in `metrics`.
fn sample(metrics: &str, series: &str) -> f64 {
    let line = metrics.lines().find(|l| l.strip_prefix(series).is_some_and(|rest| rest.starts_with(' ')));
    let line = line.unwrap_or_else(|| panic!("no {series} in\n{metrics}"));
    line[series.len()..].trim().parse().unwrap()
}

fn egress_with_limits(backend: &Backend, limits: &str) -> String {
    format!(
        "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc:\n      endpoints: [{}]\n      match: {{host: svc}}\nlimits: {limits}\nshutdown_grace: 1s\n",
        backend.addr
    )
}

#[tokio::test]
async fn a_slowloris_client_is_cut_by_the_header_read_timeout() {
    let backend = Backend::start("a", Mode::Ok(Duration::ZERO)).await;
    let proxy = proxy_of(&egress_with_limits(&backend, "{header_read_timeout: 500ms}")).await;
    let stream = TcpStream::connect(proxy.egress.unwrap()).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let started = Instant::now();
    // One byte every 200 ms, forever: the head never completes.
    let slow = tokio::spawn(async move {
        for byte in b"GET /x HTTP/1.1\r\nHost: svc\r\nX-Slow: ".iter().chain(std::iter::repeat(&b'a')) {
            if writer.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let mut reply = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(4), reader.read_to_end(&mut reply)).await;
    assert!(closed.is_ok(), "the connection is still open after 4 s");
    assert!(started.elapsed() >= Duration::from_millis(400), "closed too early: {:?}", started.elapsed());
    slow.abort();
    // The proxy serves on.
    let (status, _, _) = get(&client(), proxy.egress.unwrap(), "svc", &[]).await;
    assert_eq!(status, StatusCode::OK);
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_client_stalling_in_the_h2_preface_is_cut_and_a_split_preface_is_served() {
    let (backend, task) = h2c_backend("grpc").await;
    let text = format!(
        "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc:\n      endpoints: [{backend}]\n      match: {{path_prefix: /}}\n      protocol: h2c\nlimits: {{header_read_timeout: 500ms}}\n"
    );
    let proxy = proxy_of(&text).await;
    let addr = proxy.egress.unwrap();
    // Half the preface, then nothing: closed after the header read timeout.
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    let started = Instant::now();
    let mut reply = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(4), stalled.read_to_end(&mut reply)).await;
    assert!(closed.is_ok(), "the connection is still open after 4 s");
    assert!(started.elapsed() >= Duration::from_millis(400), "closed too early: {:?}", started.elapsed());
    // The preface in two pieces 50 ms apart is HTTP/2 all the same.
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(Prefaced(stream))).await.unwrap();
    let driver = tokio::spawn(conn);
    let req = Request::get(format!("http://{addr}/x")).body(Empty::<Bytes>::new()).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(5), sender.send_request(req)).await.unwrap().unwrap();
    assert_eq!((response.version(), response.status()), (hyper::Version::HTTP_2, StatusCode::OK));
    driver.abort();
    proxy.shutdown().await;
    task.abort();
}

/// A stream whose first 16 preface bytes were already written by hand: hyper's HTTP/2 client
/// writes the whole preface, so the part already sent is skipped once.
struct Prefaced(TcpStream);

impl tokio::io::AsyncRead for Prefaced {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Prefaced {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        const SENT: &[u8] = b"PRI * HTTP/2.0\r\n";
        if let Some(rest) = buf.strip_prefix(SENT) {
            // Claim the bytes already sent as written, and send the rest.
            return match std::pin::Pin::new(&mut self.0).poll_write(cx, rest) {
                std::task::Poll::Ready(Ok(n)) => std::task::Poll::Ready(Ok(n + SENT.len())),
                other => other,
            };
        }
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[tokio::test]
async fn an_oversized_head_gets_431() {
    let backend = Backend::start("a", Mode::Ok(Duration::ZERO)).await;
    let proxy = proxy_of(&egress_with_limits(&backend, "{max_header_bytes: 8192}")).await;
    let mut stream = TcpStream::connect(proxy.egress.unwrap()).await.unwrap();
    let big = "b".repeat(20_000);
    let request = format!("GET /x HTTP/1.1\r\nHost: svc\r\nX-Big: {big}\r\n\r\n");
    let _ = stream.write_all(request.as_bytes()).await;
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), stream.read_to_end(&mut reply)).await;
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 431"), "{reply:?}");
    // A head within the limit passes.
    let (status, _, _) = get(&client(), proxy.egress.unwrap(), "svc", &[("x-small", &"s".repeat(4000))]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(Config::parse(
        "ingress: {listen: 127.0.0.1:0, app: 127.0.0.1:1}\nlimits: {max_header_bytes: 100}",
        Path::new("p.yaml")
    )
    .unwrap_err()
    .to_string()
    .contains("limits.max_header_bytes"));
    proxy.shutdown().await;
}

#[tokio::test]
async fn shutdown_lets_requests_in_flight_finish_and_stops_accepting() {
    // What SIGTERM does (`tailguard proxy` awaits `shutdown_signal`, then `Proxy::shutdown`).
    let backend = Backend::start("a", Mode::Ok(Duration::from_millis(300))).await;
    let proxy = proxy_of(&egress_with_limits(&backend, "{}")).await;
    let addr = proxy.egress.unwrap();
    let mut in_flight = JoinSet::new();
    for _ in 0..10 {
        in_flight.spawn(async move { get(&client(), addr, "svc", &[]).await.0 });
    }
    until("10 requests at the backend", || backend.hits() == 10).await;
    let stopping = tokio::spawn(proxy.shutdown());
    while let Some(status) = in_flight.join_next().await {
        assert_eq!(status.unwrap(), StatusCode::OK, "a request in flight was cut by the shutdown");
    }
    tokio::time::timeout(Duration::from_secs(5), stopping).await.expect("shutdown ended").unwrap();
    assert!(TcpStream::connect(addr).await.is_err(), "still accepting after shutdown");
}

#[tokio::test]
async fn connections_beyond_the_limit_wait_for_a_slot() {
    let backend = Backend::start("a", Mode::Ok(Duration::ZERO)).await;
    let proxy = proxy_of(&egress_with_limits(&backend, "{max_connections: 1}")).await;
    let addr = proxy.egress.unwrap();
    // A client that has begun a request is never closed to make room (a silent one would be).
    let mut holder = TcpStream::connect(addr).await.unwrap();
    holder.write_all(b"GET /x HTTP/1.1\r\n").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let waiting = tokio::spawn(async move { get(&client(), addr, "svc", &[]).await.0 });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "a second connection was served beyond max_connections: 1");
    drop(holder);
    let status = tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("served once the slot frees");
    assert_eq!(status.unwrap(), StatusCode::OK);
    proxy.shutdown().await;
}

#[tokio::test]
async fn at_max_connections_a_new_client_closes_the_oldest_silent_connections() {
    let backend = Backend::start("a", Mode::Ok(Duration::ZERO)).await;
    let proxy = proxy_of(&egress_with_limits(&backend, "{max_connections: 2}")).await;
    let addr = proxy.egress.unwrap();
    // Two connections that send nothing (one of them only part of the HTTP/2 preface) fill the
    // slots; before, every other client waited for them to hit header_read_timeout (10 s).
    let mut idle = TcpStream::connect(addr).await.unwrap();
    let mut preface = TcpStream::connect(addr).await.unwrap();
    preface.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let answered = tokio::time::timeout(Duration::from_secs(2), get(&client(), addr, "svc", &[])).await;
    assert_eq!(answered.expect("a new client waited behind silent connections").0, StatusCode::OK);
    for silent in [&mut idle, &mut preface] {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(1), silent.read(&mut byte)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "a silent connection is still open: {read:?}");
    }
    proxy.shutdown().await;
}

/// Sends one request on a kept-alive connection to an egress with `limits` and checks that it is
/// answered, then closed by the proxy within 4 s but not before 250 ms.
async fn answered_then_closed(limits: &str) {
    let backend = Backend::start("a", Mode::Ok(Duration::ZERO)).await;
    let proxy = proxy_of(&egress_with_limits(&backend, limits)).await;
    let mut stream = TcpStream::connect(proxy.egress.unwrap()).await.unwrap();
    stream.write_all(b"GET /x HTTP/1.1\r\nHost: svc\r\n\r\n").await.unwrap();
    let started = Instant::now();
    let mut reply = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(4), stream.read_to_end(&mut reply)).await;
    assert!(closed.is_ok(), "the kept-alive connection is still open after 4 s");
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 200"), "the request was answered before the close: {reply:?}");
    assert!(started.elapsed() >= Duration::from_millis(250), "{:?}", started.elapsed());
    proxy.shutdown().await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    answered_then_closed("{idle_timeout: 300ms}").await;
}

/// An h2c backend answering `name` with a `grpc-status: 0` trailer and the request's version in
/// `x-version`.
async fn h2c_backend(name: &'static str) -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut conns = JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let service = service_fn(move |req: Request<Incoming>| async move {
                let version = format!("{:?}", req.version());
                let te = req.headers().get("te").map_or("", |v| v.to_str().unwrap_or("")).to_string();
                let body = Full::new(Bytes::from(name)).with_trailers(async {
                    let mut trailers = hyper::HeaderMap::new();
                    trailers.insert("grpc-status", "0".parse().unwrap());
                    Some(Ok(trailers))
                });
                let response = Response::builder().header("x-version", version).header("x-te", te).body(body).unwrap();
                Ok::<_, Infallible>(response)
            });
            conns.spawn(async move {
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, task)
}

#[tokio::test]
async fn h2c_end_to_end_keeps_trailers() {
    let (backend, task) = h2c_backend("grpc").await;
    // No `match`: the only upstream takes every request.
    let text = format!(
        "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc:\n      endpoints: [{backend}]\n      protocol: h2c\n"
    );
    let proxy = proxy_of(&text).await;
    let h2: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new()).http2_only(true).build_http();
    let req = Request::post(format!("http://{}/pkg.Svc/Method", proxy.egress.unwrap()))
        .header("te", "trailers")
        .body(Empty::new())
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(5), h2.request(req)).await.unwrap().unwrap();
    assert_eq!(response.version(), hyper::Version::HTTP_2);
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["x-version"], "HTTP/2.0");
    assert_eq!(response.headers()["x-te"], "trailers");
    let collected =
        tokio::time::timeout(Duration::from_secs(5), response.into_body().collect()).await.unwrap().unwrap();
    let trailers = collected.trailers().cloned().expect("the backend's trailers reach the client");
    assert_eq!(trailers["grpc-status"], "0");
    assert_eq!(collected.to_bytes(), "grpc");
    // An HTTP/1.1 client reaches the same h2c upstream.
    let (status, headers, body) = get(&client(), proxy.egress.unwrap(), "svc", &[]).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "grpc"));
    assert_eq!(headers["x-version"], "HTTP/2.0");
    proxy.shutdown().await;
    task.abort();
}

#[tokio::test]
async fn a_changed_config_moves_new_requests_and_keeps_those_in_flight() {
    let a = Backend::start("a", Mode::Ok(Duration::from_millis(1500))).await;
    let b = Backend::start("b", Mode::Ok(Duration::ZERO)).await;
    let path = std::env::temp_dir().join(format!("tailguard-reload-{}.yaml", std::process::id()));
    let file = |backend: &Backend, version: u32| {
        format!(
            "# version {version}\negress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc:\n      endpoints: [{}]\n      match: {{host: svc}}\nadmin: {{listen: 127.0.0.1:0}}\nshutdown_grace: 1s\n",
            backend.addr
        )
    };
    std::fs::write(&path, file(&a, 1)).unwrap();
    let proxy = Proxy::start(Config::load(&path).unwrap()).await.unwrap();
    let addr = proxy.egress.unwrap();
    let in_flight = tokio::spawn(async move { get(&client(), addr, "svc", &[]).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    std::fs::write(&path, file(&b, 22)).unwrap();
    let started = Instant::now();
    loop {
        let (status, _, body) = get(&client(), addr, "svc", &[]).await;
        assert_eq!(status, StatusCode::OK);
        if body == "b" {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(6), "requests still reach a after 6 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, _, body) = in_flight.await.unwrap();
    assert_eq!((status, body.as_str()), (StatusCode::OK, "a"), "the request in flight across the swap completes");
    assert!(fetch(proxy.admin.unwrap(), "/config").await.contains("# version 22"));
    // An invalid file is ignored.
    std::fs::write(&path, "egress: {listen: 127.0.0.1:0, upstreams: {svc: {endpoints: [], match: {host: svc}}}}\n")
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (status, _, body) = get(&client(), addr, "svc", &[]).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "b"));
    let _ = std::fs::remove_file(&path);
    proxy.shutdown().await;
}

#[tokio::test]
async fn the_ingress_carries_h2c_and_trailers_to_an_h2c_app() {
    let (app, task) = h2c_backend("app").await;
    let proxy = proxy_of(&format!("ingress: {{listen: 127.0.0.1:0, app: {app}, protocol: h2c}}\n")).await;
    let h2: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new()).http2_only(true).build_http();
    let req = Request::get(format!("http://{}/x", proxy.ingress.unwrap())).body(Empty::new()).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(5), h2.request(req)).await.unwrap().unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["x-tailguard-chip"], "1");
    let collected =
        tokio::time::timeout(Duration::from_secs(5), response.into_body().collect()).await.unwrap().unwrap();
    assert_eq!(collected.trailers().expect("trailers")["grpc-status"], "0");
    proxy.shutdown().await;
    task.abort();
    // An h2c caller reaches an HTTP/1.1 application too.
    let app = Backend::start("app1", Mode::Ok(Duration::ZERO)).await;
    let proxy = sidecar(&app, "{kind: none}").await;
    let req = Request::get(format!("http://{}/x", proxy.ingress.unwrap())).body(Empty::new()).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(5), h2.request(req)).await.unwrap().unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    proxy.shutdown().await;
}

#[test]
fn one_worker_runs_the_proxy_on_a_current_thread_runtime() {
    use tokio::runtime::RuntimeFlavor;
    let runtime = tailguard_proxy::runtime(Some(1)).unwrap();
    assert_eq!(runtime.handle().runtime_flavor(), RuntimeFlavor::CurrentThread);
    runtime.block_on(async {
        let backend = Backend::start("a", Mode::Ok(Duration::ZERO)).await;
        let proxy = egress(&[&backend], "{}").await;
        let (status, _, body) = get(&client(), proxy.egress.unwrap(), "svc", &[]).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "a"));
        proxy.shutdown().await;
    });
    let runtime = tailguard_proxy::runtime(Some(3)).unwrap();
    assert_eq!(runtime.handle().runtime_flavor(), RuntimeFlavor::MultiThread);
    assert_eq!(runtime.metrics().num_workers(), 3);
}

#[tokio::test]
async fn a_response_streaming_longer_than_the_header_read_timeout_is_not_cut() {
    // A raw backend that sends its chunked body a piece every 150 ms for about a second.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut head = [0u8; 1024];
        let _ = stream.read(&mut head).await.unwrap();
        stream.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").await.unwrap();
        for _ in 0..7 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            stream.write_all(b"1\r\nx\r\n").await.unwrap();
        }
        stream.write_all(b"0\r\n\r\n").await.unwrap();
        // Hold the connection until the test ends.
        let _ = stream.read(&mut head).await;
    });
    let text = format!(
        "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc:\n      endpoints: [{backend}]\n      match: {{host: svc}}\nlimits: {{header_read_timeout: 300ms}}\nshutdown_grace: 1s\n"
    );
    let proxy = proxy_of(&text).await;
    let mut stream = TcpStream::connect(proxy.egress.unwrap()).await.unwrap();
    stream.write_all(b"GET /x HTTP/1.1\r\nHost: svc\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut reply)).await.unwrap().unwrap();
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply:?}");
    assert_eq!(reply.matches("\r\nx\r\n").count(), 7, "the whole body arrived: {reply:?}");
    assert!(reply.ends_with("0\r\n\r\n"), "{reply:?}");
    proxy.shutdown().await;
    task.abort();
}

#[tokio::test]
async fn an_http_1_0_application_s_answers_keep_the_client_s_connection() {
    // An application that answers in HTTP/1.0 and closes (Python's `http.server` does): each
    // request on its own connection, counted.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    let task = tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            counted.fetch_add(1, Ordering::SeqCst);
            let mut head = [0u8; 1024];
            let _ = stream.read(&mut head).await.unwrap();
            stream.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok").await.unwrap();
        }
    });
    let ingress = proxy_of(&format!("ingress:\n  listen: 127.0.0.1:0\n  app: {app}\nshutdown_grace: 1s\n")).await;
    let to = ingress.ingress.unwrap();
    let egress = proxy_of(&format!(
        "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc:\n      endpoints: [{to}]\nshutdown_grace: 1s\n"
    ))
    .await;
    // Three requests on one client connection, through the egress and the ingress: each answered
    // as HTTP/1.1 on the same connection (before, the first answer said HTTP/1.0 and closed it).
    let mut stream = TcpStream::connect(egress.egress.unwrap()).await.unwrap();
    for _ in 0..3 {
        stream.write_all(b"GET /x HTTP/1.1\r\nHost: svc\r\n\r\n").await.unwrap();
        let mut reply = [0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut reply)).await.unwrap().unwrap();
        let reply = String::from_utf8_lossy(&reply[..n]);
        assert!(reply.starts_with("HTTP/1.1 200") && reply.ends_with("\r\n\r\nok"), "{reply:?}");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 3, "the application closes after each answer");
    egress.shutdown().await;
    ingress.shutdown().await;
    task.abort();
}

#[tokio::test]
async fn a_kept_alive_connection_waiting_for_its_next_request_is_closed_after_the_header_read_timeout() {
    answered_then_closed("{header_read_timeout: 300ms, idle_timeout: 60s}").await;
}

#[tokio::test]
async fn large_bodies_stream_through_intact_both_ways() {
    // An echo backend: the response body is the request body, streamed back.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut conns = JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let service =
                service_fn(|req: Request<Incoming>| async move { Ok::<_, Infallible>(Response::new(req.into_body())) });
            conns.spawn(async move {
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    let text = format!(
        "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc:\n      endpoints: [{backend}]\n      match: {{host: svc}}\nshutdown_grace: 1s\n"
    );
    let proxy = proxy_of(&text).await;
    // 3 MiB: more than the replay buffer, so it is streamed, and many write buffers long.
    let sent: Vec<u8> = (0..3 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let req = Request::post(format!("http://{}/echo", proxy.egress.unwrap()))
        .header("host", "svc")
        .body(Full::new(Bytes::from(sent.clone())))
        .unwrap();
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let response = tokio::time::timeout(Duration::from_secs(20), client.request(req)).await.unwrap().unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let got = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(got.len(), sent.len());
    assert!(got == sent, "the echoed body differs");
    proxy.shutdown().await;
    task.abort();
}

/// Writes `request` to `addr` as it is and reads until the proxy closes the connection (at most
/// `wait`): the raw reply, and whether the connection was closed.
async fn raw(addr: SocketAddr, request: &[u8], wait: Duration) -> (String, bool) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut reply = Vec::new();
    let closed = tokio::time::timeout(wait, stream.read_to_end(&mut reply)).await.is_ok();
    (String::from_utf8_lossy(&reply).into_owned(), closed)
}

#[tokio::test]
async fn a_request_body_that_stalls_is_answered_408_and_its_connection_closed() {
    let backend = Backend::start("a", Mode::Read).await;
    let text = egress_with_limits(&backend, "{body_read_timeout: 300ms}") + "admin: {listen: 127.0.0.1:0}\n";
    let proxy = proxy_of(&text).await;
    let addr = proxy.egress.unwrap();
    // A small body (buffered for replays) that never comes, and a large one (streamed to the
    // backend) that stops after its first bytes: both are the client's fault.
    for (length, sent) in [(1000, ""), (1_000_000, "first bytes")] {
        let started = Instant::now();
        let head = format!("POST /x HTTP/1.1\r\nHost: svc\r\nContent-Length: {length}\r\n\r\n{sent}");
        let (reply, closed) = raw(addr, head.as_bytes(), Duration::from_secs(5)).await;
        assert!(reply.starts_with("HTTP/1.1 408"), "{length}: {reply:?}");
        assert!(closed, "{length}: the connection is still open");
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(3), "{length}: {took:?}");
    }
    // A stalled client is not the upstream's failure.
    let metrics = admin_metrics(&proxy).await;
    assert_eq!(sample(&metrics, "tailguard_egress_failed_total{upstream=\"svc\"}"), 0.0, "{metrics}");
    let (status, _, _) = get(&client(), addr, "svc", &[]).await;
    assert_eq!(status, StatusCode::OK);
    proxy.shutdown().await;
}

#[tokio::test]
async fn heads_breaking_rfc_9112_get_400_and_connection_named_headers_stay_behind() {
    let backend = Backend::start("a", Mode::Read).await;
    let proxy = proxy_of(&(egress_with_limits(&backend, "{}") + "admin: {listen: 127.0.0.1:0}\n")).await;
    let addr = proxy.egress.unwrap();
    let wait = Duration::from_secs(5);
    let two_hosts = "GET /x HTTP/1.1\r\nHost: svc\r\nHost: other\r\n\r\n";
    let no_host = "GET /x HTTP/1.1\r\n\r\n";
    for head in [two_hosts, no_host] {
        let (reply, _) = raw(addr, head.as_bytes(), wait).await;
        assert!(reply.starts_with("HTTP/1.1 400"), "{head:?}: {reply:?}");
    }
    assert_eq!(backend.hits(), 0);
    // Headers `Connection` names are for this hop only, Authorization included.
    let named = "GET /x HTTP/1.1\r\nHost: svc\r\nConnection: close, x-hop, authorization\r\nX-Hop: 1\r\nAuthorization: secret\r\nX-Kept: 1\r\n\r\n";
    let (reply, _) = raw(addr, named.as_bytes(), wait).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply:?}");
    let names = reply.lines().find_map(|l| l.strip_prefix("x-names: ")).expect(&reply);
    assert_eq!(names, "host,x-kept");
    // A malformed chunked body is the client's fault: 400, and nothing counted against the upstream.
    let bad_chunks = "POST /x HTTP/1.1\r\nHost: svc\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nnot a chunk\r\n\r\n";
    let (reply, _) = raw(addr, bad_chunks.as_bytes(), wait).await;
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply:?}");
    let metrics = admin_metrics(&proxy).await;
    assert_eq!(sample(&metrics, "tailguard_egress_failed_total{upstream=\"svc\"}"), 0.0, "{metrics}");
    proxy.shutdown().await;
}

#[tokio::test]
async fn cl_te_and_te_cl_requests_are_framed_by_their_chunks_or_refused_never_smuggled() {
    let backend = Backend::start("a", Mode::Read).await;
    let proxy = proxy_of(&(egress_with_limits(&backend, "{}") + "admin: {listen: 127.0.0.1:0}\n")).await;
    let addr = proxy.egress.unwrap();
    let wait = Duration::from_secs(5);
    let smuggled = "GET /smuggled HTTP/1.1\r\nHost: svc\r\n\r\n";
    // CL.TE: a front end believing Content-Length would pass the rest on as this request's body;
    // TE.CL: a back end believing Content-Length would read the chunk's data as a new request.
    let cl_te = format!(
        "POST /x HTTP/1.1\r\nHost: svc\r\nContent-Length: 60\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}"
    );
    let te_cl = format!("POST /x HTTP/1.1\r\nHost: svc\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{smuggled}\r\n0\r\n\r\n", smuggled.len());
    for (name, request, body) in [("CL.TE", cl_te, 0), ("TE.CL", te_cl, smuggled.len())] {
        let (reply, _) = raw(addr, request.as_bytes(), Duration::from_millis(500)).await;
        let first = reply.split("\r\n\r\n").next().unwrap();
        if first.starts_with("HTTP/1.1 400") {
            continue;
        }
        // Framed by the chunks (RFC 9112 §6.3: Transfer-Encoding wins), and sent on framed by
        // the body alone: the backend read exactly the chunks' bytes, under one framing.
        assert!(first.starts_with("HTTP/1.1 200"), "{name}: {reply:?}");
        let header =
            |h: &str| first.lines().find_map(|l| l.strip_prefix(h)).unwrap_or_else(|| panic!("{name}: {reply:?}"));
        assert_eq!(header("x-body-length: "), body.to_string(), "{name}: {reply:?}");
        let names = header("x-names: ");
        assert!(!(names.contains("content-length") && names.contains("transfer-encoding")), "{name}: {names}");
    }
    // Neither a second request hidden in a body nor a desynchronised upstream connection: the
    // backend saw only /x requests, and the next request on the pooled connection is whole.
    let (status, headers, _) = get(&client(), addr, "svc", &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["x-body-length"], "0");
    // Obfuscated or conflicting framing is refused outright.
    for head in [
        "POST /x HTTP/1.1\r\nHost: svc\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
        "POST /x HTTP/1.1\r\nHost: svc\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
        "POST /x HTTP/1.1\r\nHost: svc\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        "POST /x HTTP/1.0\r\nHost: svc\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ] {
        let (reply, _) = raw(addr, head.as_bytes(), wait).await;
        assert!(reply.starts_with("HTTP/1.1 400") || reply.starts_with("HTTP/1.0 400"), "{head:?}: {reply:?}");
    }
    let metrics = admin_metrics(&proxy).await;
    assert_eq!(sample(&metrics, "tailguard_egress_failed_total{upstream=\"svc\"}"), 0.0, "{metrics}");
    proxy.shutdown().await;
}

/// One HTTP/2 frame (RFC 9113 §4.1).
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut frame = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    frame.extend([kind, flags]);
    frame.extend(stream.to_be_bytes());
    frame.extend(payload);
    frame
}

/// The frames in `bytes` (whole ones): type, flags, stream and payload.
fn h2_frames(bytes: &[u8]) -> Vec<(u8, u8, u32, &[u8])> {
    let mut frames = Vec::new();
    let mut at = 0;
    while at + 9 <= bytes.len() {
        let len = u32::from_be_bytes([0, bytes[at], bytes[at + 1], bytes[at + 2]]) as usize;
        let Some(payload) = bytes.get(at + 9..at + 9 + len) else { break };
        let stream = u32::from_be_bytes(bytes[at + 5..at + 9].try_into().unwrap()) & 0x7fff_ffff;
        frames.push((bytes[at + 3], bytes[at + 4], stream, payload));
        at += 9 + len;
    }
    frames
}

/// The GOAWAY's error code among `frames`, if one was sent.
fn goaway_code(frames: &[(u8, u8, u32, &[u8])]) -> Option<u32> {
    frames.iter().find(|f| f.0 == 0x7 && f.3.len() >= 8).map(|f| u32::from_be_bytes(f.3[4..8].try_into().unwrap()))
}

/// The client preface and an empty SETTINGS frame, then `streams` requests (GET / with authority
/// svc: HPACK static entries 2, 6 and 4, and name 1 with a literal value) each reset at once
/// with CANCEL, on streams 1, 3, 5, ...
fn h2_opened_and_reset(streams: u32) -> Vec<u8> {
    let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    bytes.extend(h2_frame(0x4, 0, 0, &[]));
    for i in 0..streams {
        bytes.extend(h2_frame(0x1, 0x5, 2 * i + 1, H2_GET_SVC));
        bytes.extend(h2_frame(0x3, 0, 2 * i + 1, &8u32.to_be_bytes()));
    }
    bytes
}

/// `GET /` with authority `svc`, HPACK-encoded.
const H2_GET_SVC: &[u8] = &[0x82, 0x86, 0x84, 0x01, 3, b's', b'v', b'c'];

#[tokio::test]
async fn an_h2_rapid_reset_flood_is_ended_with_goaway_and_others_are_served() {
    let backend = Backend::start("a", Mode::Ok(Duration::from_millis(50))).await;
    let proxy = egress(&[&backend], "{}").await;
    let addr = proxy.egress.unwrap();
    // CVE-2023-44487: open a stream, reset it at once, again and again.
    let streams = 5000u32;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    // The proxy may close before reading it all.
    let _ = stream.write_all(&h2_opened_and_reset(streams)).await;
    let mut reply = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut reply)).await.is_ok();
    // A GOAWAY frame with ENHANCE_YOUR_CALM (0xb), then the connection closed.
    let goaway = goaway_code(&h2_frames(&reply));
    assert!(goaway == Some(0xb) && closed, "GOAWAY {goaway:?}, closed: {closed}");
    // No more than a client could have open at once (200) reached the backend.
    assert!(backend.hits() <= 200, "{} of {streams} reset streams reached the backend", backend.hits());
    // The proxy serves on.
    let (status, _, _) = get(&client(), addr, "svc", &[]).await;
    assert_eq!(status, StatusCode::OK);
    proxy.shutdown().await;
}

/// Opens `reset` streams and resets each at once on a new connection to `addr`, then sends one
/// more request: its answer's first header byte, or the GOAWAY's error code that came instead.
async fn answer_after_resets(addr: SocketAddr, reset: u32) -> Result<u8, Option<u32>> {
    let mut bytes = h2_opened_and_reset(reset);
    let last = 2 * reset + 1;
    bytes.extend(h2_frame(0x1, 0x5, last, H2_GET_SVC));
    let mut stream = TcpStream::connect(addr).await.unwrap();
    // A proxy that sends GOAWAY may close before reading it all.
    let _ = stream.write_all(&bytes).await;
    let mut reply = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await;
        let Ok(Ok(n @ 1..)) = read else { return Err(goaway_code(&h2_frames(&reply))) };
        reply.extend(&buf[..n]);
        let frames = h2_frames(&reply);
        if let Some(code) = goaway_code(&frames) {
            return Err(Some(code));
        }
        if let Some(headers) = frames.iter().find(|f| f.0 == 0x1 && f.2 == last) {
            return Ok(headers.3[0]);
        }
    }
}

/// A client whose calls all passed their deadline before a busy proxy read them: as many streams
/// as it may have open, opened and reset in one burst. That is no flood, and its next request
/// on the connection is answered (h2's default took the 21st for an attack and sent GOAWAY,
/// failing the client's other calls on the connection).
#[tokio::test]
async fn an_h2_client_cancelling_every_stream_it_may_open_is_served_on() {
    let backend = Backend::start("a", Mode::Ok(Duration::ZERO)).await;
    let proxy = egress(&[&backend], "{}").await;
    // `:status: 200` is HPACK's static entry 8.
    assert_eq!(answer_after_resets(proxy.egress.unwrap(), 200).await, Ok(0x88));
    proxy.shutdown().await;
}

/// An ingress's trusted callers (sidecar egresses, whose hedges and deadlines cancel streams all
/// the time) are not held to the limits on reset streams: 1,000 reset in one burst, and the next
/// request is answered; a caller it does not trust gets GOAWAY ENHANCE_YOUR_CALM for the same.
#[tokio::test]
async fn an_ingress_holds_strangers_not_trusted_peers_to_the_rapid_reset_limit() {
    let app = Backend::start("app", Mode::Ok(Duration::ZERO)).await;
    let ingress =
        |trusted: &str| format!("ingress: {{listen: 127.0.0.1:0, app: {}{trusted}}}\nshutdown_grace: 1s\n", app.addr);
    // Loopback is trusted by default.
    let trusting = proxy_of(&ingress("")).await;
    assert_eq!(answer_after_resets(trusting.ingress.unwrap(), 1000).await, Ok(0x88));
    trusting.shutdown().await;
    let wary = proxy_of(&ingress(", trusted_peers: [192.0.2.1]")).await;
    assert_eq!(answer_after_resets(wary.ingress.unwrap(), 1000).await, Err(Some(0xb)));
    wary.shutdown().await;
}

/// An h2c application that answers every request `after` it arrived, whether or not its caller
/// reset the stream meanwhile (as an application does whose work was done, or whose answer was
/// on the wire): a bare HTTP/2 server, the answer a HEADERS frame with `:status: 200`, then
/// `messages` DATA frames of 8 bytes (a gRPC server's stream of small messages) and an empty one
/// that ends the stream, or with none the HEADERS frame alone. Also the connections it accepted.
async fn late_h2c_app(after: Duration, messages: usize) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::Relaxed);
            let (mut read, mut write) = stream.into_split();
            let (answers, mut to_write) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
            tokio::spawn(async move {
                while let Some(bytes) = to_write.recv().await {
                    if write.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
            });
            tokio::spawn(async move {
                let mut preface = [0u8; 24];
                if read.read_exact(&mut preface).await.is_err() {
                    return;
                }
                let _ = answers.send(h2_frame(0x4, 0, 0, &[]));
                let mut head = [0u8; 9];
                while read.read_exact(&mut head).await.is_ok() {
                    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
                    let mut payload = vec![0u8; len];
                    if read.read_exact(&mut payload).await.is_err() {
                        return;
                    }
                    let stream = u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff;
                    match (head[3], head[4] & 0x1) {
                        // SETTINGS and PING are acknowledged.
                        (0x4, 0) => drop(answers.send(h2_frame(0x4, 0x1, 0, &[]))),
                        (0x6, 0) => drop(answers.send(h2_frame(0x6, 0x1, 0, &payload))),
                        (0x1, _) => {
                            let answers = answers.clone();
                            tokio::spawn(async move {
                                tokio::time::sleep(after).await;
                                if messages == 0 {
                                    let _ = answers.send(h2_frame(0x1, 0x5, stream, &[0x88]));
                                    return;
                                }
                                let mut answer = h2_frame(0x1, 0x4, stream, &[0x88]);
                                for _ in 0..messages {
                                    answer.extend(h2_frame(0x0, 0, stream, &[0; 8]));
                                }
                                answer.extend(h2_frame(0x0, 0x1, stream, &[]));
                                let _ = answers.send(answer);
                            });
                        }
                        _ => {}
                    }
                }
            });
        }
    });
    (addr, accepted)
}

/// The ingress cancels the application's streams of requests whose deadline passed, and the
/// application answers some of them anyway: each such answer to a stream h2 has forgotten (it
/// remembers a bounded number of resets, for seconds) made h2 reset it again, and after 1,024 of those in a
/// connection's life h2 ended the connection with GOAWAY ENHANCE_YOUR_CALM, failing every request
/// on it as "the application is unreachable" (grpc-go's interop server through an ingress at 20
/// ms deadlines: 84-393 calls of 30,000 a run). Late answers cost the proxy nothing, so its
/// clients set no such limit. The requests without a deadline, in flight meanwhile, are answered.
#[tokio::test]
async fn late_answers_to_cancelled_h2c_streams_do_not_end_the_connection() {
    let (app, _) = late_h2c_app(Duration::from_millis(300), 0).await;
    let (proxy, addr, client) = h2c_ingress(app).await;
    let cancelled: JoinSet<String> = (0..1500).map(|_| h2c_get(client.clone(), addr, Some("20"))).collect();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let waiting: JoinSet<String> = (0..20).map(|_| h2c_get(client.clone(), addr, None)).collect();
    let cancelled = cancelled.join_all().await;
    assert!(cancelled.iter().all(|s| s.starts_with("Ok((504,")), "{:?}", &cancelled[..3]);
    let waited = waiting.join_all().await;
    assert!(waited.iter().all(|s| s == "Ok((200, 0))"), "{waited:?}");
    proxy.shutdown().await;
}

/// An ingress in front of the h2c application `app`, its address, and an h2c client.
async fn h2c_ingress(app: SocketAddr) -> (tailguard_proxy::Proxy, SocketAddr, Client<HttpConnector, Empty<Bytes>>) {
    let proxy =
        proxy_of(&format!("ingress: {{listen: 127.0.0.1:0, app: {app}, protocol: h2c}}\nshutdown_grace: 1s\n")).await;
    let addr = proxy.ingress.unwrap();
    (proxy, addr, Client::builder(TokioExecutor::new()).http2_only(true).build_http())
}

/// GET `/` from `addr` over h2c, with `x-tailguard-deadline-ms` if given: `Ok((status, body
/// length))`, or the error, as text.
async fn h2c_get(client: Client<HttpConnector, Empty<Bytes>>, addr: SocketAddr, deadline: Option<&str>) -> String {
    let mut request = Request::get(format!("http://{addr}/"));
    if let Some(ms) = deadline {
        request = request.header("x-tailguard-deadline-ms", ms);
    }
    let answer = async {
        let response = client.request(request.body(Empty::new()).unwrap()).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>((status, body.len()))
    };
    let answer = tokio::time::timeout(Duration::from_secs(5), answer).await;
    format!("{:?}", answer.expect("an answer within 5 s"))
}

#[tokio::test]
async fn late_small_messages_on_cancelled_h2c_streams_do_not_end_the_connection() {
    let (app, accepted) = late_h2c_app(Duration::from_millis(300), 10).await;
    let (proxy, addr, client) = h2c_ingress(app).await;
    let (mut waiting, mut cancelled) = (JoinSet::new(), JoinSet::new());
    for _ in 0..5 {
        (0..20).for_each(|_| drop(waiting.spawn(h2c_get(client.clone(), addr, None))));
        tokio::time::sleep(Duration::from_millis(10)).await;
        (0..500).for_each(|_| drop(cancelled.spawn(h2c_get(client.clone(), addr, Some("20")))));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cancelled = cancelled.join_all().await;
    assert!(cancelled.iter().all(|s| s.starts_with("Ok((504,")), "{:?}", &cancelled[..3]);
    let waited = waiting.join_all().await;
    assert!(waited.iter().all(|s| s == "Ok((200, 80))"), "{waited:?}");
    assert_eq!(accepted.load(Ordering::Relaxed), 5);
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_deadline_is_believed_from_trusted_peers_only_clamped_and_never_forwarded_spent() {
    let app = Backend::start("app", Mode::Ok(Duration::ZERO)).await;
    let client = client();
    let ingress =
        |trusted: &str| format!("ingress: {{listen: 127.0.0.1:0, app: {}{trusted}}}\nshutdown_grace: 1s\n", app.addr);
    // Loopback is trusted by default.
    let proxy = proxy_of(&ingress("")).await;
    let addr = proxy.ingress.unwrap();
    let (status, _, _) = get(&client, addr, "app", &[("x-tailguard-deadline-ms", "0")]).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    let two = [("x-tailguard-deadline-ms", "100"), ("x-tailguard-deadline-ms", "90000")];
    assert_eq!(get(&client, addr, "app", &two).await.0, StatusCode::BAD_REQUEST);
    assert_eq!(app.hits(), 0, "a spent or doubled deadline reached the application");
    let (status, headers, _) = get(&client, addr, "app", &[("x-tailguard-deadline-ms", &u64::MAX.to_string())]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["x-seen"], "x-tailguard-deadline-ms=3600000");
    proxy.shutdown().await;
    // From a peer outside `trusted_peers`, the deadline is neither believed nor passed on.
    let proxy = proxy_of(&ingress(", trusted_peers: [10.0.0.0/8]")).await;
    let (status, headers, _) = get(&client, proxy.ingress.unwrap(), "app", &[("x-tailguard-deadline-ms", "0")]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["x-seen"], "");
    proxy.shutdown().await;
}

#[tokio::test]
async fn the_egress_answers_a_spent_or_doubled_deadline_without_calling_the_upstream() {
    let backend = Backend::start("a", Mode::Ok(Duration::ZERO)).await;
    let proxy = egress(&[&backend], "{}").await;
    let (status, _, _) = get(&client(), proxy.egress.unwrap(), "svc", &[("x-tailguard-deadline-ms", "0")]).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    let two = [("x-tailguard-deadline-ms", "100"), ("x-tailguard-deadline-ms", "90000")];
    assert_eq!(get(&client(), proxy.egress.unwrap(), "svc", &two).await.0, StatusCode::BAD_REQUEST);
    assert_eq!(backend.hits(), 0);
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_retry_policy_without_a_budget_gets_linkerds_default_budget() {
    let broken = Backend::start("broken", Mode::Status(503)).await;
    let proxy = egress(&[&broken], "{retry: {max_attempts: 10}}").await;
    let client = client();
    let requests = 100;
    for _ in 0..requests {
        assert_eq!(get(&client, proxy.egress.unwrap(), "svc", &[]).await.0, StatusCode::SERVICE_UNAVAILABLE);
    }
    // 20 % of the requests plus the 10-a-second reserve over the 10 s window (100 retries), not
    // the 9 retries a request `max_attempts` allows (900).
    let retries = broken.hits() - requests;
    assert!(retries <= 100 + requests / 5, "{retries} retries for {requests} requests");
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_port_in_use_is_named_in_the_error() {
    let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = taken.local_addr().unwrap();
    let text = format!("ingress: {{listen: {addr}, app: 127.0.0.1:1}}\n");
    let error = Proxy::start(Config::parse(&text, Path::new("test.yaml")).unwrap()).await.err().expect("an error");
    assert_eq!(error.to_string(), format!("cannot listen on {addr}: address in use"));
}

#[tokio::test]
async fn a_network_delay_holds_each_request_and_each_response_for_one_hop_outside_admission() {
    // An app that notes when each request reaches it, and answers at once.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app = listener.local_addr().unwrap();
    let arrivals = Arc::new(std::sync::Mutex::new(Vec::<Instant>::new()));
    let noted = arrivals.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let noted = noted.clone();
            let service = service_fn(move |_req: Request<Incoming>| {
                noted.lock().unwrap().push(Instant::now());
                async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"app")))) }
            });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
        }
    });
    let hop = Duration::from_millis(300);
    let text = format!(
        "ingress: {{listen: 127.0.0.1:0, app: {app}, admission: {{kind: fixed, capacity: 1}}, network_delay: {{delay: 300ms}}}}\nadmin: {{listen: 127.0.0.1:0}}\nshutdown_grace: 1s\n"
    );
    let proxy = proxy_of(&text).await;
    let ingress = proxy.ingress.unwrap();

    // One request: it reaches the app one hop after it was sent, and its answer the caller one
    // hop after the app answered.
    let sent = Instant::now();
    let call = tokio::spawn(async move { get(&client(), ingress, "app", &[]).await.0 });
    // Half way in: the request is on the wire, neither counted nor admitted.
    tokio::time::sleep(hop / 2).await;
    let metrics = admin_metrics(&proxy).await;
    assert_eq!(sample(&metrics, "tailguard_ingress_requests_total"), 0.0, "{metrics}");
    assert!(arrivals.lock().unwrap().is_empty());
    // Half way back: answered and released (capacity 1 is free again), the response on the wire.
    tokio::time::sleep(hop).await;
    let reached = *arrivals.lock().unwrap().first().expect("the request reached the app");
    let metrics = admin_metrics(&proxy).await;
    assert_eq!(sample(&metrics, "tailguard_ingress_requests_total"), 1.0, "{metrics}");
    assert_eq!(sample(&metrics, "tailguard_ingress_in_flight"), 0.0, "{metrics}");
    assert!(!call.is_finished(), "the response is still held");
    assert_eq!(call.await.unwrap(), StatusCode::OK);
    let (there, back) = (reached - sent, sent.elapsed() - (reached - sent));
    assert!(there >= hop && there < hop * 2, "the request took {there:?}");
    assert!(back >= hop && back < hop * 2, "the response took {back:?}");

    // A caller that gives up while its request is on the wire: the held request goes with it.
    let (_, closed) = raw(ingress, b"GET /x HTTP/1.1\r\nHost: app\r\n\r\n", hop / 3).await;
    assert!(!closed, "nothing is answered within a third of a hop");
    tokio::time::sleep(hop).await;
    assert_eq!(arrivals.lock().unwrap().len(), 1, "the abandoned request never reached the app");
    proxy.shutdown().await;
}

/// A sidecar ingress in front of `app` trusting `trusted` peers only.
async fn sidecar_trusting(app: &Backend, trusted: &str) -> Proxy {
    let text = format!(
        "ingress: {{listen: 127.0.0.1:0, app: {}, trusted_peers: {trusted}}}\nadmin: {{listen: 127.0.0.1:0}}\n",
        app.addr
    );
    Proxy::start(Config::parse(&text, Path::new("test.yaml")).unwrap()).await.unwrap()
}

#[tokio::test]
async fn the_ingress_answers_probes_itself_and_prequal_learns_the_slow_replica_from_them() {
    let slow = Backend::start("slow", Mode::Ok(Duration::from_millis(150))).await;
    let fast = Backend::start("fast", Mode::Ok(Duration::ZERO)).await;
    let (slow_side, fast_side) = (sidecar(&slow, "{kind: none}").await, sidecar(&fast, "{kind: none}").await);
    // A probe is answered by the ingress, 204 with its load, and never reaches the application.
    let (status, headers, _) = get(&client(), slow_side.ingress.unwrap(), "app", &[("x-tailguard-probe", "1")]).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(headers["x-tailguard-load"], "rif=0, latency_us=0");
    assert_eq!(slow.hits(), 0);
    // Through an egress balancing with Prequal over both sidecars: once the slow replica has
    // answered once, its probes report ~150 ms and the fast one (~0 ms) wins every pick.
    let (a, b) = (Backend::elsewhere(slow_side.ingress.unwrap()), Backend::elsewhere(fast_side.ingress.unwrap()));
    let proxy = egress(&[&a, &b], "{balancer: {kind: prequal}}").await;
    for _ in 0..20 {
        let (status, _, _) = get(&client(), proxy.egress.unwrap(), "svc", &[]).await;
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(slow.hits() + fast.hits(), 20, "probes are not requests to the application");
    assert!(slow.hits() <= 3, "the slow replica got {} of 20 requests", slow.hits());
    let (_, headers, _) = get(&client(), slow_side.ingress.unwrap(), "app", &[("x-tailguard-probe", "1")]).await;
    let load = headers["x-tailguard-load"].to_str().unwrap();
    let latency_us: u64 = load.split_once("latency_us=").unwrap().1.parse().unwrap();
    assert!(latency_us >= 150_000, "the slow replica's estimate is {latency_us} µs");
    proxy.shutdown().await;
    slow_side.shutdown().await;
    fast_side.shutdown().await;
}

#[tokio::test]
async fn a_prequal_pick_with_a_stale_pool_waits_for_its_probes() {
    let busy = Backend::start("busy", Mode::HangOn("/held")).await;
    let idle = Backend::start("idle", Mode::Ok(Duration::ZERO)).await;
    let (busy_side, idle_side) = (sidecar(&busy, "{kind: none}").await, sidecar(&idle, "{kind: none}").await);
    let endpoints = [Backend::elsewhere(busy_side.ingress.unwrap()), Backend::elsewhere(idle_side.ingress.unwrap())];
    // Reports usable for 1 ms: once both sidecars have shown themselves on a response, every pick
    // finds the pool stale and probes both first, for up to 2 s. A replica above the median RIF of
    // the replies is hot, so the idle one wins each pick once the busy one holds requests.
    let policy = "{balancer: {kind: prequal, probes_per_request: 2, max_age: 1ms, probe_wait: 2s, hot_quantile: 0.5}}";
    let proxy = egress(&endpoints.iter().collect::<Vec<_>>(), policy).await;
    for _ in 0..50 {
        if busy.hits() > 0 && idle.hits() > 0 {
            break;
        }
        let (status, _, _) = get(&client(), proxy.egress.unwrap(), "svc", &[]).await;
        assert_eq!(status, StatusCode::OK);
    }
    let (primed_busy, primed_idle) = (busy.hits(), idle.hits());
    assert!(primed_busy > 0 && primed_idle > 0, "both answered in 50 requests: {primed_busy} {primed_idle}");
    // The busy replica now holds two requests for good.
    let mut held = JoinSet::new();
    for _ in 0..2 {
        let ingress = busy_side.ingress.unwrap();
        held.spawn(async move {
            let req = Request::get(format!("http://{ingress}/held")).header("host", "app").body(Empty::new());
            let _ = client().request(req.unwrap()).await;
        });
    }
    let started = Instant::now();
    while busy.hits() < primed_busy + 2 {
        assert!(started.elapsed() < Duration::from_secs(5), "the held requests never arrived");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Without the probes' replies the two look alike to the egress (nothing of its own in flight,
    // quick answers): picked at random, all ten would go to the idle one one time in 1,024.
    for _ in 0..10 {
        let started = Instant::now();
        let (status, _, _) = get(&client(), proxy.egress.unwrap(), "svc", &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert!(started.elapsed() < Duration::from_millis(500), "answered after {:?}", started.elapsed());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(idle.hits() - primed_idle, 10, "probes are not requests, and the busy replica got none");
    assert_eq!(busy.hits(), primed_busy + 2);
    assert!(sample(&admin_metrics(&proxy).await, "tailguard_egress_probes_total{upstream=\"svc\"}") >= 20.0);
    held.abort_all();
    proxy.shutdown().await;
    busy_side.shutdown().await;
    idle_side.shutdown().await;
}

#[tokio::test]
async fn prequal_never_probes_a_plain_application_and_balances_a_mixed_set() {
    // A plain application (no sidecar) that answers slowly, and one behind a sidecar.
    let plain = Backend::start("plain", Mode::Ok(Duration::from_millis(20))).await;
    let meshed = Backend::start("meshed", Mode::Ok(Duration::ZERO)).await;
    let side = sidecar(&meshed, "{kind: none}").await;
    let endpoints = [Backend::elsewhere(plain.addr), Backend::elsewhere(side.ingress.unwrap())];
    let proxy =
        egress(&endpoints.iter().collect::<Vec<_>>(), "{balancer: {kind: prequal, max_age: 1ms}, outlier: off}").await;
    for _ in 0..60 {
        let (status, headers, _) = get(&client(), proxy.egress.unwrap(), "svc", &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert!(!headers.contains_key("x-tailguard-load"), "the load report is the egress's alone");
        // The sidecar's last report (usable for 1 ms) is stale by the next request.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    // Every request the plain application saw was a real one: no probe reached it. The sidecar's
    // reports went stale between requests, so its endpoint was probed; the plain one, ranked from the
    // egress's own answer times (20 ms against about 0), got few of the requests.
    assert_eq!(plain.hits() + meshed.hits(), 60, "probes are not requests");
    assert!(plain.hits() <= 10, "the slow plain endpoint got {} of 60", plain.hits());
    assert!(sample(&admin_metrics(&proxy).await, "tailguard_egress_probes_total{upstream=\"svc\"}") > 0.0);
    proxy.shutdown().await;
    side.shutdown().await;

    // Plain applications alone: not one probe.
    let (a, b) =
        (Backend::start("a", Mode::Ok(Duration::ZERO)).await, Backend::start("b", Mode::Ok(Duration::ZERO)).await);
    let proxy = egress(&[&a, &b], "{balancer: {kind: prequal}}").await;
    for _ in 0..40 {
        let (status, _, _) = get(&client(), proxy.egress.unwrap(), "svc", &[]).await;
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(a.hits() + b.hits(), 40, "probes are not requests");
    assert_eq!(sample(&admin_metrics(&proxy).await, "tailguard_egress_probes_total{upstream=\"svc\"}"), 0.0);
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_lone_egress_stops_probing_once_its_reports_show_it_alone() {
    let (a, b) = (
        Backend::start("a", Mode::Ok(Duration::from_millis(10))).await,
        Backend::start("b", Mode::Ok(Duration::from_millis(10))).await,
    );
    let (a_side, b_side) = (sidecar(&a, "{kind: none}").await, sidecar(&b, "{kind: none}").await);
    let endpoints = [Backend::elsewhere(a_side.ingress.unwrap()), Backend::elsewhere(b_side.ingress.unwrap())];
    // Reports usable for 1 ms: a caller beside others would probe on nearly every pick.
    let proxy = egress(&endpoints.iter().collect::<Vec<_>>(), "{balancer: {kind: prequal, max_age: 1ms}}").await;
    let addr = proxy.egress.unwrap();
    // Eight callers in a row each: the replicas hold this egress's requests and no one else's,
    // as every response's report shows.
    let requests = |count: usize| async move {
        let mut callers = JoinSet::new();
        for _ in 0..8 {
            callers.spawn(async move {
                let client = client();
                for _ in 0..count / 8 {
                    assert_eq!(get(&client, addr, "svc", &[]).await.0, StatusCode::OK);
                }
            });
        }
        while let Some(done) = callers.join_next().await {
            done.unwrap();
        }
    };
    let probes = async || sample(&admin_metrics(&proxy).await, "tailguard_egress_probes_total{upstream=\"svc\"}");
    requests(400).await;
    let before = probes().await;
    requests(200).await;
    assert_eq!(probes().await, before, "alone, the egress's own counts are the replicas' load");
    assert_eq!(a.hits() + b.hits(), 600, "probes are not requests");
    assert!(a.hits() >= 200 && b.hits() >= 200, "balanced by its own counts: {} and {}", a.hits(), b.hits());
    proxy.shutdown().await;
    a_side.shutdown().await;
    b_side.shutdown().await;
}

#[tokio::test]
async fn a_probe_from_an_untrusted_peer_is_refused() {
    let app = Backend::start("app", Mode::Ok(Duration::ZERO)).await;
    let server = sidecar_trusting(&app, "[10.0.0.0/8]").await;
    let (status, _, _) = get(&client(), server.ingress.unwrap(), "app", &[("x-tailguard-probe", "1")]).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(app.hits(), 0);
    server.shutdown().await;
}

/// Sends a GET with Host `host` to `addr` on a task of its own (its own client connection), for
/// requests that hold a place while a hung backend keeps them waiting.
fn hold(held: &mut JoinSet<()>, addr: SocketAddr, host: &'static str) {
    held.spawn(async move {
        let req = Request::get(format!("http://{addr}/x")).header("host", host).body(Empty::new()).unwrap();
        let _ = client().request(req).await;
    });
}

/// GETs `host` through `addr` and checks it is refused with 503 and `body` within 1 s.
async fn refused_at_once(client: &TestClient, addr: SocketAddr, host: &str, body: &str) {
    let started = Instant::now();
    let (status, _, got) = get(client, addr, host, &[]).await;
    assert_eq!((status, got.as_str()), (StatusCode::SERVICE_UNAVAILABLE, body));
    assert!(started.elapsed() < Duration::from_secs(1), "refused after {:?}", started.elapsed());
}

/// Waits (at most 5 s) until `done` holds.
async fn until(what: &str, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(5), "still not {what} after 5 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn beyond_max_requests_the_egress_answers_503_at_once_and_counts_it() {
    let hung = Backend::start("hung", Mode::Hang).await;
    let ok = Backend::start("ok", Mode::Ok(Duration::ZERO)).await;
    let text = format!(
        "egress:\n  listen: 127.0.0.1:0\n  max_requests: 4\n  upstreams:\n    hung:\n      endpoints: [{}]\n      match: {{host: hung}}\n    ok:\n      endpoints: [{}]\n      match: {{host: ok}}\nadmin: {{listen: 127.0.0.1:0}}\nshutdown_grace: 1s\n",
        hung.addr, ok.addr
    );
    let proxy = proxy_of(&text).await;
    let addr = proxy.egress.unwrap();
    let mut held = JoinSet::new();
    for _ in 0..4 {
        hold(&mut held, addr, "hung");
    }
    until("4 requests at the hung backend", || hung.hits() == 4).await;
    // The cap is the egress's, whatever the upstream: other routes are refused too, at once.
    let client = client();
    for _ in 0..3 {
        refused_at_once(
            &client,
            addr,
            "ok",
            "tailguard: too many concurrent requests in flight at the egress: limit 4 (egress.max_requests)\n",
        )
        .await;
    }
    assert_eq!(ok.hits(), 0);
    assert_eq!(sample(&admin_metrics(&proxy).await, "tailguard_egress_refused_total"), 3.0);
    // The held requests' clients go away: their places are given back.
    held.abort_all();
    let started = Instant::now();
    loop {
        let (status, _, _) = get(&client, addr, "ok", &[]).await;
        if status == StatusCode::OK {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "still refused 5 s after the clients left");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_hung_upstream_at_its_own_max_requests_leaves_the_other_upstreams_served() {
    let hung = Backend::start("hung", Mode::Hang).await;
    let ok = Backend::start("ok", Mode::Ok(Duration::ZERO)).await;
    let text = format!(
        "egress:\n  listen: 127.0.0.1:0\n  max_requests: 8\n  upstreams:\n    hung:\n      endpoints: [{}]\n      match: {{host: hung}}\n      max_requests: 3\n    ok:\n      endpoints: [{}]\n      match: {{host: ok}}\nadmin: {{listen: 127.0.0.1:0}}\nshutdown_grace: 1s\n",
        hung.addr, ok.addr
    );
    let proxy = proxy_of(&text).await;
    let addr = proxy.egress.unwrap();
    let mut held = JoinSet::new();
    for _ in 0..3 {
        hold(&mut held, addr, "hung");
    }
    until("3 requests at the hung backend", || hung.hits() == 3).await;
    let client = client();
    for _ in 0..2 {
        let why = "tailguard: too many concurrent requests in flight to upstream hung: limit 3 (its max_requests)\n";
        refused_at_once(&client, addr, "hung", why).await;
    }
    assert_eq!(hung.hits(), 3);
    // The egress has 5 places left: the other upstream is served, 5 requests at once.
    let mut answers = JoinSet::new();
    for _ in 0..5 {
        let client = client.clone();
        answers.spawn(async move { get(&client, addr, "ok", &[]).await.0 });
    }
    while let Some(status) = answers.join_next().await {
        assert_eq!(status.unwrap(), StatusCode::OK);
    }
    let metrics = admin_metrics(&proxy).await;
    assert_eq!(sample(&metrics, "tailguard_egress_upstream_refused_total{upstream=\"hung\"}"), 2.0);
    assert_eq!(sample(&metrics, "tailguard_egress_upstream_refused_total{upstream=\"ok\"}"), 0.0);
    assert_eq!(sample(&metrics, "tailguard_egress_refused_total"), 0.0);
    held.abort_all();
    proxy.shutdown().await;
}

#[tokio::test]
async fn requests_whose_body_is_still_coming_hold_no_place_under_max_requests() {
    let ok = Backend::start("ok", Mode::Ok(Duration::ZERO)).await;
    let text = format!(
        "egress:\n  listen: 127.0.0.1:0\n  max_requests: 2\n  upstreams:\n    ok:\n      endpoints: [{}]\n      match: {{host: ok}}\n      max_requests: 1\nshutdown_grace: 1s\n",
        ok.addr
    );
    let proxy = proxy_of(&text).await;
    let addr = proxy.egress.unwrap();
    // Three clients announce a body and send none (a body slowloris), more than either cap.
    let mut slow = Vec::new();
    for _ in 0..3 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(b"POST /x HTTP/1.1\r\nHost: ok\r\nContent-Length: 1000\r\n\r\n").await.unwrap();
        slow.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (status, _, body) = get(&client(), addr, "ok", &[]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    proxy.shutdown().await;
}

#[tokio::test]
async fn an_endpoint_at_its_connection_cap_refuses_at_once_without_being_ejected() {
    let hung = Backend::start("hung", Mode::Hang).await;
    let text = format!(
        "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc:\n      endpoints: [{}]\n      match: {{host: svc}}\n      max_connections_per_endpoint: 2\n      policy: {{outlier: {{consecutive_failures: 1}}}}\nadmin: {{listen: 127.0.0.1:0}}\nshutdown_grace: 1s\n",
        hung.addr
    );
    let proxy = proxy_of(&text).await;
    let addr = proxy.egress.unwrap();
    let mut held = JoinSet::new();
    for _ in 0..2 {
        hold(&mut held, addr, "svc");
    }
    until("2 requests at the hung backend", || hung.hits() == 2).await;
    let client = client();
    for _ in 0..20 {
        refused_at_once(
            &client,
            addr,
            "svc",
            "tailguard: no endpoint would take the request: connections to the upstream at their limit (max_connections_per_endpoint 2)\n",
        )
        .await;
    }
    // No connection beyond the cap was opened; each refusal (and its retries) was counted, and
    // none counted as the endpoint's failure.
    assert_eq!(hung.accepted.load(Ordering::SeqCst), 2);
    let metrics = admin_metrics(&proxy).await;
    let overflow = format!("tailguard_egress_upstream_overflow_total{{upstream=\"svc\",endpoint=\"{}\"}}", hung.addr);
    assert!(sample(&metrics, &overflow) >= 20.0, "{metrics}");
    assert_eq!(sample(&metrics, "tailguard_egress_ejections_total{upstream=\"svc\"}"), 0.0);
    held.abort_all();
    proxy.shutdown().await;
}

#[tokio::test]
async fn an_attempt_refused_by_the_connection_cap_is_retried_on_another_endpoint() {
    let hung = Backend::start("hung", Mode::Hang).await;
    let ok = Backend::start("ok", Mode::Ok(Duration::ZERO)).await;
    let text = format!(
        "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc:\n      endpoints: {}\n      match: {{host: svc}}\n      max_connections_per_endpoint: 1\n      policy: {{balancer: {{kind: round-robin}}, retry: {{max_attempts: 2, budget: unlimited}}}}\nadmin: {{listen: 127.0.0.1:0}}\nshutdown_grace: 1s\n",
        endpoints(&[&hung, &ok])
    );
    let proxy = proxy_of(&text).await;
    let addr = proxy.egress.unwrap();
    // Requests until one holds the hung endpoint's only connection.
    let mut held = JoinSet::new();
    while hung.hits() == 0 {
        hold(&mut held, addr, "svc");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let client = client();
    for _ in 0..10 {
        let (status, _, body) = get(&client, addr, "svc", &[]).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    }
    assert_eq!(hung.accepted.load(Ordering::SeqCst), 1);
    let metrics = admin_metrics(&proxy).await;
    let overflow = format!("tailguard_egress_upstream_overflow_total{{upstream=\"svc\",endpoint=\"{}\"}}", hung.addr);
    // Round robin sends half of the ten to the hung endpoint first.
    assert!(sample(&metrics, &overflow) >= 4.0, "{metrics}");
    held.abort_all();
    proxy.shutdown().await;
}

#[tokio::test]
async fn h2c_upstream_requests_share_one_connection_per_endpoint() {
    // An h2c backend that answers after 200 ms and counts its connections.
    let h2 = Backend::start_h2c("h2", Mode::Ok(Duration::from_millis(200))).await;
    let backend = h2.addr;
    let text = format!(
        "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc:\n      endpoints: [{backend}]\n      protocol: h2c\n      max_connections_per_endpoint: 1\n"
    );
    let proxy = proxy_of(&text).await;
    let addr = proxy.egress.unwrap();
    // 50 requests at once, each on its own client connection.
    let mut requests = JoinSet::new();
    for _ in 0..50 {
        requests.spawn(async move { get(&client(), addr, "svc", &[]).await });
    }
    while let Some(answer) = requests.join_next().await {
        let (status, _, body) = answer.unwrap();
        assert_eq!((status, body.as_str()), (StatusCode::OK, "h2"));
    }
    assert_eq!(h2.accepted.load(Ordering::SeqCst), 1);
    // 500 streams cancelled at their 20 ms deadline make the connection due for renewal; at the
    // cap of one connection it carries on, rather than the next requests being refused.
    let client = client();
    let cancelled: JoinSet<StatusCode> = (0..500)
        .map(|_| {
            let client = client.clone();
            async move { get(&client, addr, "svc", &[("x-tailguard-deadline-ms", "20")]).await.0 }
        })
        .collect();
    assert!(cancelled.join_all().await.iter().all(|s| *s == StatusCode::GATEWAY_TIMEOUT));
    let (status, _, body) = get(&client, addr, "svc", &[]).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "h2"));
    assert_eq!(h2.accepted.load(Ordering::SeqCst), 1);
    proxy.shutdown().await;
}
