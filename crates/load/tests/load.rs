//! `tailguard load` against a real hyper server on 127.0.0.1, port 0.

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailguard_load::{ArrivalSchedule, ErrorKind, LoadConfig, Method, Shape, Stop, Target};
use tokio::net::TcpListener;
use tokio::time::Instant;

/// How the test server answers.
#[derive(Clone, Copy)]
struct Behaviour {
    delay: Duration,
    status: StatusCode,
    /// Request number `n` (from 0) makes every request stall until `stall` after it arrived.
    stall: Option<(u64, Duration)>,
}

impl Default for Behaviour {
    fn default() -> Self {
        Self { delay: Duration::ZERO, status: StatusCode::OK, stall: None }
    }
}

/// What the test server saw.
#[derive(Default)]
struct Seen {
    received: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    stalled_until: Mutex<Option<Instant>>,
}

/// A server on 127.0.0.1:0 speaking HTTP/1.1 and h2c.
struct TestServer {
    addr: SocketAddr,
    seen: Arc<Seen>,
}

impl TestServer {
    async fn start(behaviour: Behaviour) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let seen = Arc::new(Seen::default());
        tokio::spawn(serve(listener, behaviour, Arc::clone(&seen)));
        Self { addr, seen }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn target(&self) -> Target {
        Target::parse(&self.url("/"), &Method::GET).expect("valid URL")
    }

    fn received(&self) -> u64 {
        self.seen.received.load(Ordering::SeqCst)
    }
}

async fn serve(listener: TcpListener, behaviour: Behaviour, seen: Arc<Seen>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { return };
        let seen = Arc::clone(&seen);
        tokio::spawn(async move {
            let service = service_fn(move |_: Request<Incoming>| answer(behaviour, Arc::clone(&seen)));
            let _ = auto::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// Counts a request in flight until dropped (also when the client gives up).
struct InFlight(Arc<Seen>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn answer(behaviour: Behaviour, seen: Arc<Seen>) -> Result<Response<Full<Bytes>>, Infallible> {
    let n = seen.received.fetch_add(1, Ordering::SeqCst);
    let now = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    seen.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let _guard = InFlight(Arc::clone(&seen));
    let stall_end = {
        let mut until = seen.stalled_until.lock().expect("not poisoned");
        if let Some((at, stall)) = behaviour.stall.filter(|&(at, _)| at == n) {
            *until = Some(Instant::now() + stall);
            let _ = at;
        }
        *until
    };
    if let Some(end) = stall_end {
        tokio::time::sleep_until(end).await;
    }
    tokio::time::sleep(behaviour.delay).await;
    let mut response = Response::new(Full::new(Bytes::from_static(b"ok")));
    *response.status_mut() = behaviour.status;
    Ok(response)
}

fn config(targets: Vec<Target>, shape: Shape, stop: Stop) -> LoadConfig {
    let mut config = LoadConfig::new(targets, shape);
    config.stop = stop;
    config.timeout = Duration::from_secs(3);
    config
}

fn requests(n: u64) -> Stop {
    Stop { duration: None, requests: Some(n) }
}

fn lasting(d: Duration) -> Stop {
    Stop { duration: Some(d), requests: None }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_count_run_sends_exactly_that_many() {
    let server = TestServer::start(Behaviour::default()).await;
    // Open loop: 50 requests at 1000/s.
    let report = tailguard_load::run(config(vec![server.target()], Shape::Constant { rate: 1000.0 }, requests(50)))
        .await
        .expect("valid config");
    assert_eq!((report.requests, report.succeeded), (50, 50));
    assert_eq!(report.statuses.get(&200), Some(&50));
    assert_eq!(server.received(), 50);
    // Closed loop: 37 requests over 3 clients, exactly 37 however they interleave.
    let closed = Shape::Closed { clients: 3, think: Duration::ZERO };
    let report = tailguard_load::run(config(vec![server.target()], closed, requests(37))).await.expect("valid config");
    assert_eq!((report.requests, report.succeeded), (37, 37));
    assert_eq!(server.received(), 87);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_warmup_is_sent_but_not_counted() {
    let server = TestServer::start(Behaviour::default()).await;
    let mut config = config(vec![server.target()], Shape::Constant { rate: 200.0 }, requests(30));
    // Intended starts 0, 5, ..., 95 ms fall in the warm-up: 20 requests.
    config.warmup = Duration::from_millis(100);
    let report = tailguard_load::run(config).await.expect("valid config");
    assert_eq!(report.requests, 30);
    assert_eq!(server.received(), 50);
    let results = report.to_results("warmup", "direct");
    assert_eq!((results.mode.as_str(), results.runs[0].requests), ("load", 30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_constant_rate_sends_rate_times_duration() {
    let server = TestServer::start(Behaviour::default()).await;
    let shape = Shape::Constant { rate: 200.0 };
    let report = tailguard_load::run(config(vec![server.target()], shape, lasting(Duration::from_secs(1))))
        .await
        .expect("valid config");
    assert!((199..=201).contains(&report.requests), "{} requests", report.requests);
    assert_eq!(report.succeeded, report.requests);
    assert!((190.0..=210.0).contains(&report.rate()), "rate {}", report.rate());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_take_turns() {
    let (a, b) = (TestServer::start(Behaviour::default()).await, TestServer::start(Behaviour::default()).await);
    let targets = vec![a.target(), Target::parse(&format!("POST {}", b.url("/x")), &Method::GET).expect("valid")];
    let closed = Shape::Closed { clients: 1, think: Duration::ZERO };
    let report = tailguard_load::run(config(targets, closed, requests(10))).await.expect("valid config");
    assert_eq!(report.succeeded, 10);
    assert_eq!((a.received(), b.received()), (5, 5));
}

/// 100/s for 1.5 s; request 20 (due at 200 ms) makes the server stall for 1 s. The ~100 requests
/// due during the stall must be charged for it, measured from their intended starts.
async fn a_stall_is_charged_to_every_request_due_during_it(max_in_flight: usize) {
    let stall = Behaviour { stall: Some((20, Duration::from_secs(1))), ..Behaviour::default() };
    let server = TestServer::start(stall).await;
    let mut config =
        config(vec![server.target()], Shape::Constant { rate: 100.0 }, lasting(Duration::from_millis(1500)));
    config.max_in_flight = max_in_flight;
    config.keep_samples = true;
    let report = tailguard_load::run(config).await.expect("valid config");
    assert_eq!(report.succeeded, 150);
    // Requests due at 200 ms .. 1100 ms end at ~1200 ms: each waits at least ~(1200 − due) ms.
    let due_during_stall: Vec<_> = report
        .samples
        .iter()
        .filter(|s| (Duration::from_millis(250)..Duration::from_millis(1000)).contains(&s.intended))
        .collect();
    assert!(due_during_stall.len() >= 70, "{} samples", due_during_stall.len());
    for s in &due_during_stall {
        let waited = Duration::from_millis(1150).saturating_sub(s.intended);
        assert!(s.latency >= waited, "due at {:?}, latency {:?} < {:?}", s.intended, s.latency, waited);
    }
    // At least half the stall (500 ms) shows at p90 and the whole stall (~1 s) at the top.
    assert!(report.latency.quantile(0.9) >= Duration::from_millis(500), "p90 {:?}", report.latency.quantile(0.9));
    assert!(report.latency.quantile(0.99) >= Duration::from_millis(900), "p99 {:?}", report.latency.quantile(0.99));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinated_omission_is_avoided_when_requests_are_spawned() {
    a_stall_is_charged_to_every_request_due_during_it(10_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinated_omission_is_avoided_when_the_in_flight_pool_is_full() {
    // With one request in flight, the dispatcher itself is held up by the stall; requests due
    // during it go out late but are still measured from their intended starts.
    a_stall_is_charged_to_every_request_due_during_it(1).await;
}

/// One client, answers after 400 ms, 1 s: requests sent at 0, 0.4 and 0.8 s, the last answered
/// at 1.2 s. The sending ended at 0.8 s (throughput counts over it, as the simulator counts over
/// the window), the measurement at 1.2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_loop_s_sending_ends_with_its_last_request_not_its_last_answer() {
    let slow = TestServer::start(Behaviour { delay: Duration::from_millis(400), ..Behaviour::default() }).await;
    let closed = Shape::Closed { clients: 1, think: Duration::ZERO };
    let report = tailguard_load::run(config(vec![slow.target()], closed, lasting(Duration::from_secs(1))))
        .await
        .expect("valid config");
    // (A machine slower by 100 ms per request sends two.)
    assert!((2..=3).contains(&report.succeeded), "{} answered", report.succeeded);
    assert!(
        report.sending >= Duration::from_millis(400) && report.sending < Duration::from_secs(1),
        "{:?}",
        report.sending
    );
    assert!(report.total >= report.sending + Duration::from_millis(400), "{:?} {:?}", report.total, report.sending);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_loop_keeps_at_most_n_in_flight() {
    let server = TestServer::start(Behaviour { delay: Duration::from_millis(10), ..Behaviour::default() }).await;
    let closed = Shape::Closed { clients: 4, think: Duration::ZERO };
    let report = tailguard_load::run(config(vec![server.target()], closed, lasting(Duration::from_millis(400))))
        .await
        .expect("valid config");
    let max = server.seen.max_in_flight.load(Ordering::SeqCst);
    assert!((1..=4).contains(&max), "{max} in flight");
    // 4 clients × 400 ms / ≥ 10 ms each: at most 4 × 40 plus the 4 started last.
    assert!((20..=164).contains(&report.requests), "{} requests", report.requests);
    assert_eq!(report.succeeded, report.requests);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_a_connect_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local address");
    drop(listener);
    let target = Target::parse(&format!("http://{addr}/"), &Method::GET).expect("valid URL");
    let started = std::time::Instant::now();
    let report = tailguard_load::run(config(vec![target], Shape::Constant { rate: 100.0 }, requests(5)))
        .await
        .expect("valid config");
    assert_eq!((report.requests, report.succeeded), (5, 0));
    assert_eq!(report.errors_of(ErrorKind::Connect), 5);
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
    assert_eq!(report.to_run("s", "v").failed, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_and_timeouts_are_counted_by_kind() {
    let shed = TestServer::start(Behaviour { status: StatusCode::TOO_MANY_REQUESTS, ..Behaviour::default() }).await;
    let broken = TestServer::start(Behaviour { status: StatusCode::SERVICE_UNAVAILABLE, ..Behaviour::default() }).await;
    let hung = TestServer::start(Behaviour { delay: Duration::from_secs(30), ..Behaviour::default() }).await;
    let targets = vec![shed.target(), broken.target(), hung.target()];
    let mut config = config(targets, Shape::Constant { rate: 100.0 }, requests(6));
    config.timeout = Duration::from_millis(200);
    let started = std::time::Instant::now();
    let report = tailguard_load::run(config).await.expect("valid config");
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
    assert_eq!(report.errors_of(ErrorKind::TooManyRequests), 2);
    assert_eq!(report.errors_of(ErrorKind::ServerError), 2);
    assert_eq!(report.errors_of(ErrorKind::Timeout), 2);
    let run = report.to_run("s", "v");
    assert_eq!((run.succeeded, run.failed, run.rejected, run.timed_out), (0, 2, 2, 2));
}

/// The open loop's requests are due exactly when the shared [`ArrivalSchedule`] says, the one the
/// simulator draws its arrivals from: the same rate and seed give the same intended starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_requests_are_due_at_the_shared_schedule_times() {
    let server = TestServer::start(Behaviour::default()).await;
    for (shape, mut schedule) in [
        (Shape::Poisson { rate: 400.0 }, ArrivalSchedule::poisson(400.0, 7)),
        (Shape::Constant { rate: 400.0 }, ArrivalSchedule::constant(400.0)),
    ] {
        let mut config = config(vec![server.target()], shape, requests(20));
        config.seed = 7;
        config.keep_samples = true;
        let report = tailguard_load::run(config).await.expect("valid config");
        let mut intended: Vec<Duration> = report.samples.iter().map(|s| s.intended).collect();
        intended.sort();
        let expected: Vec<Duration> = (0..20).map(|_| schedule.advance()).collect();
        assert_eq!(intended, expected, "{shape:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_works_with_prior_knowledge() {
    let server = TestServer::start(Behaviour::default()).await;
    let mut config = config(vec![server.target()], Shape::Poisson { rate: 500.0 }, requests(40));
    config.h2c = true;
    let report = tailguard_load::run(config).await.expect("valid config");
    assert_eq!(report.succeeded, 40);
}

#[tokio::test]
async fn a_bad_configuration_is_refused_before_sending() {
    let err = Target::parse("localhost:8080", &Method::GET).unwrap_err();
    assert!(err.to_string().contains("bad target"), "{err}");
    let target = Target::parse("http://127.0.0.1:1/", &Method::GET).expect("valid URL");
    let err = tailguard_load::run(config(vec![target], Shape::Constant { rate: -1.0 }, requests(1))).await.unwrap_err();
    assert!(err.to_string().contains("bad rate"), "{err}");
}
