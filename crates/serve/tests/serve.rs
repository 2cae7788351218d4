//! `tailguard serve` over real sockets on 127.0.0.1, port 0: service times, the worker queue,
//! faults, downstream calls and option errors. Bounds are generous: the machine may be noisy.

use crate::common::{client, experiment, get, start};
use hyper::StatusCode;
use std::net::SocketAddr;
use std::time::Duration;
use tailguard_serve::{Options, ServeError, Server, Spec, SERVED_BY};
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constant_service_time_is_observed() {
    let server = start("  a: { service_time: { dist: constant, value: 50ms } }", "a", &[]).await;
    let client = client(false);
    for _ in 0..3 {
        let (status, took) = get(&client, server.addr(), "/").await;
        // Step: each request sleeps its 50 ms, and not much more.
        assert_eq!(status, StatusCode::OK);
        assert!(took >= 50 * MS && took < 400 * MS, "took {took:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_serialises_concurrent_requests() {
    let server = start("  a: { workers: 1, service_time: { dist: constant, value: 100ms } }", "a", &[]).await;
    let client = client(false);
    let addr = server.addr();
    // Step: three requests at once; one worker takes them one after another.
    let (one, two, three) = tokio::join!(get(&client, addr, "/"), get(&client, addr, "/"), get(&client, addr, "/"));
    let mut took = [one.1, two.1, three.1];
    took.sort();
    assert!([one.0, two.0, three.0].iter().all(|s| *s == StatusCode::OK));
    assert!(took[0] >= 100 * MS && took[0] < 250 * MS, "first {took:?}");
    assert!(took[2] >= 280 * MS && took[2] < 1500 * MS, "last {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlimited_workers_do_not_queue() {
    let server = start("  a: { service_time: { dist: constant, value: 100ms } }", "a", &[]).await;
    let client = client(false);
    let addr = server.addr();
    let (one, two, three) = tokio::join!(get(&client, addr, "/"), get(&client, addr, "/"), get(&client, addr, "/"));
    assert!([one.1, two.1, three.1].iter().all(|t| *t < 280 * MS), "{one:?} {two:?} {three:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_fault_rate_one_answers_500() {
    let server = start("  a: { faults: [{ kind: error, rate: 1.0 }] }", "a", &[]).await;
    let client = client(false);
    for _ in 0..10 {
        assert_eq!(get(&client, server.addr(), "/").await.0, StatusCode::INTERNAL_SERVER_ERROR);
    }
    // Step: health checks are not requests of the service; they see no fault.
    assert_eq!(get(&client, server.addr(), "/healthz").await.0, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_third_request_is_slow() {
    let services = "  a:\n    service_time: { dist: constant, value: 1ms }\n    faults: [{ kind: slow, every: 3, service_time: { dist: constant, value: 200ms } }]";
    let server = start(services, "a", &[]).await;
    let client = client(false);
    for n in 1..=6 {
        let (status, took) = get(&client, server.addr(), "/").await;
        assert_eq!(status, StatusCode::OK);
        if n % 3 == 0 {
            assert!(took >= 200 * MS && took < 600 * MS, "request {n} took {took:?}");
        } else {
            assert!(took < 150 * MS, "request {n} took {took:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_requests_are_never_answered() {
    let server = start("  a: { faults: [{ kind: lost, fraction: 1.0 }] }", "a", &[]).await;
    let uri = format!("http://{}/", server.addr()).parse().expect("a URI");
    let answer = tokio::time::timeout(300 * MS, client(false).get(uri)).await;
    assert!(answer.is_err(), "a lost request was answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_replica_answers_503() {
    let services = "  a: { replicas: 2, faults: [{ kind: down, replica: 0, from: 0s, to: 1h }] }";
    let server = start(services, "a", &[]).await;
    let client = client(false);
    assert_eq!(get(&client, server.addr(), "/").await.0, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(get(&client, server.addr(), "/healthz").await.0, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_replica_answers_only_when_the_window_ends() {
    let t0 = Instant::now();
    let services = "  a:\n    service_time: { dist: constant, value: 20ms }\n    faults: [{ kind: hang, from: 200ms, until: 700ms }]";
    let server = start(services, "a", &[]).await;
    let client = client(false);
    // Step: before the window, the usual 20 ms.
    let (status, took) = get(&client, server.addr(), "/").await;
    assert!(status == StatusCode::OK && took < 150 * MS, "{status} in {took:?}");
    // Step: sent at 300 ms, in the window: held until 700 ms (the server's clock started after
    // t0, so its 700 ms is at least 700 ms from t0), then 20 ms of work.
    tokio::time::sleep_until(t0 + 300 * MS).await;
    let (status, _) = get(&client, server.addr(), "/").await;
    let answered = t0.elapsed();
    assert_eq!(status, StatusCode::OK);
    assert!(answered >= 720 * MS && answered < 1100 * MS, "answered {answered:?} from t0");
    // Step: after the window, the usual 20 ms again.
    let (_, took) = get(&client, server.addr(), "/").await;
    assert!(took < 150 * MS, "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_count_from_the_clock_s_last_restart() {
    let text = "  a:\n    service_time: { dist: constant, value: 1ms }\n    faults: [{ kind: hang, until: 300ms }]";
    let spec = Spec::from_experiment(&experiment(text), &Options { service: "a".into(), ..Options::default() })
        .expect("valid options");
    let server = Server::bind(&spec, SocketAddr::from(([127, 0, 0, 1], 0))).await.expect("binds");
    let clock = server.clock();
    let server = server.spawn().expect("spawns");
    let client = client(false);
    // Step: past the window, answers are quick.
    tokio::time::sleep(400 * MS).await;
    let (_, took) = get(&client, server.addr(), "/").await;
    assert!(took < 150 * MS, "took {took:?}");
    // Step: the run starts again (the lab's SIGUSR1): the window is back, for 300 ms.
    clock.restart();
    let (_, took) = get(&client, server.addr(), "/").await;
    assert!(took >= 290 * MS && took < 700 * MS, "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_error_answers_500_without_waiting_for_the_worker() {
    let t0 = Instant::now();
    let services = "  a:\n    workers: 1\n    service_time: { dist: constant, value: 600ms }\n    faults: [{ kind: error, after: 0s, from: 200ms }]";
    let server = start(services, "a", &[]).await;
    let client = client(false);
    let addr = server.addr();
    // Step: the first request takes the only worker for 600 ms; from 200 ms on, requests fail at
    // once, without queueing behind it.
    let busy = get(&client, addr, "/");
    let fast = async {
        tokio::time::sleep_until(t0 + 300 * MS).await;
        get(&client, addr, "/").await
    };
    let (busy, fast) = tokio::join!(busy, fast);
    assert_eq!(busy.0, StatusCode::OK);
    assert!(busy.1 >= 600 * MS, "{busy:?}");
    assert_eq!(fast.0, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(fast.1 < 200 * MS, "the fast error took {:?}", fast.1);
}

const CHAIN: &str =
    "  a: { calls: [{ service: b, count: 2 }] }\n  b: { service_time: { dist: constant, value: 30ms } }";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calls_b_through_its_url() {
    let b = start(CHAIN, "b", &[]).await;
    let a = start(CHAIN, "a", &[("b", format!("http://{}/", b.addr()))]).await;
    let client = client(false);
    let uri = format!("http://{}/", a.addr()).parse().expect("a URI");
    let response = client.get(uri).await.expect("an answer");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()[SERVED_BY], "a/0");
    // Step: two sequential calls of 30 ms each.
    let (status, took) = get(&client, a.addr(), "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(took >= 60 * MS && took < 500 * MS, "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_fanout_calls_at_once() {
    let services = "  a: { fanout: parallel, calls: [{ service: b, count: 3 }] }\n  b: { service_time: { dist: constant, value: 100ms } }";
    let b = start(services, "b", &[]).await;
    let a = start(services, "a", &[("b", format!("http://{}/", b.addr()))]).await;
    let (status, took) = get(&client(false), a.addr(), "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(took >= 100 * MS && took < 280 * MS, "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_downstream_gives_500() {
    // Step: a port that was free a moment ago and has no listener now.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("binds").local_addr().expect("an address");
    let a = start(CHAIN, "a", &[("b", format!("http://{dead}/"))]).await;
    assert_eq!(get(&client(false), a.addr(), "/").await.0, StatusCode::INTERNAL_SERVER_ERROR);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erroring_downstream_gives_500() {
    let services = "  a: { calls: [{ service: b }] }\n  b: { faults: [{ kind: error, rate: 1.0 }] }";
    let b = start(services, "b", &[]).await;
    let a = start(services, "a", &[("b", format!("http://{}/", b.addr()))]).await;
    assert_eq!(get(&client(false), a.addr(), "/").await.0, StatusCode::INTERNAL_SERVER_ERROR);
}

/// A downstream that answers every request 429 (its service over capacity), for `connections`
/// connections.
async fn refusing_downstream(connections: usize) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move {
        for _ in 0..connections {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let mut head = [0u8; 4096];
            let _ = socket.read(&mut head).await;
            let _ = socket
                .write_all(b"HTTP/1.1 429 Too Many Requests\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .await;
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_downstream_call_is_passed_on_as_429_unless_another_call_erred() {
    let refusing = refusing_downstream(2).await;
    let a = start(CHAIN, "a", &[("b", format!("http://{refusing}/"))]).await;
    assert_eq!(get(&client(false), a.addr(), "/").await.0, StatusCode::TOO_MANY_REQUESTS);
    // Parallel calls, one refused and one failed: the error is what the caller hears.
    let services = "  a: { fanout: parallel, calls: [{ service: b }, { service: c }] }\n  b: {}\n  c: {}";
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("binds").local_addr().expect("an address");
    let (b, c) = (format!("http://{refusing}/"), format!("http://{dead}/"));
    let a = start(services, "a", &[("b", b), ("c", c)]).await;
    assert_eq!(get(&client(false), a.addr(), "/").await.0, StatusCode::INTERNAL_SERVER_ERROR);
}

fn options_error(service: &str, replica: u32, downstream: &[(&str, &str)]) -> String {
    let options = Options {
        service: service.into(),
        replica,
        downstream: downstream.iter().map(|(n, u)| (n.to_string(), u.to_string())).collect(),
        ..Options::default()
    };
    match Spec::from_experiment(&experiment(CHAIN), &options) {
        Err(ServeError::Options(message)) => message,
        other => panic!("expected an options error, got {other:?}"),
    }
}

#[test]
fn bad_options_are_named() {
    let message = options_error("nosuch", 0, &[]);
    assert!(message.contains("no service named \"nosuch\"") && message.contains("expected one of: a, b"), "{message}");
    let message = options_error("a", 0, &[]);
    assert!(message.contains("calls \"b\" but no URL") && message.contains("--downstream b="), "{message}");
    let message = options_error("b", 0, &[("c", "http://127.0.0.1:1/")]);
    assert!(message.contains("does not call \"c\""), "{message}");
    let message = options_error("a", 0, &[("b", "ftp://x/")]);
    assert!(message.contains("only http://"), "{message}");
    let message = options_error("b", 1, &[]);
    assert!(message.contains("--replica must be below 1"), "{message}");
}
