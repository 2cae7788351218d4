//! The open loop's own CPU use, alone in its test binary so that the process's CPU time is the
//! load generator's and its test server's only.

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::Response;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use std::convert::Infallible;
use std::time::Duration;
use tailguard_load::{LoadConfig, Method, Shape, Stop, Target};
use tokio::net::TcpListener;

/// CPU time (user + system) this process has used, from /proc, in clock ticks of 10 ms.
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // The fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let after_command = stat.rsplit(')').next().expect("a stat line");
    let fields: Vec<&str> = after_command.split_whitespace().collect();
    let ticks = |i: usize| fields[i].parse::<u64>().expect("a tick count");
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// A server on 127.0.0.1:0 that answers every request at once.
async fn start_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let ok = service_fn(|_| async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok")))) });
            tokio::spawn(async move {
                let _ = auto::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(stream), ok).await;
            });
        }
    });
    format!("http://{addr}/")
}

/// The load generator shares the machine with what it measures (the lab runs every process on
/// it), so between requests it must wait idle: yielding through the last 2 ms before each start,
/// as it did, kept a core spinning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_open_loop_waits_for_each_start_without_spinning() {
    let target = Target::parse(&start_server().await, &Method::GET).expect("valid URL");
    let mut config = LoadConfig::new(vec![target], Shape::Constant { rate: 400.0 });
    config.stop = Stop { duration: Some(Duration::from_secs(2)), requests: None };
    let before = process_cpu();
    let report = tailguard_load::run(config).await.expect("valid config");
    let used = process_cpu() - before;
    assert_eq!(report.succeeded, 800);
    assert!(used < Duration::from_millis(400), "{used:?} of CPU for 2 s at 400 requests/s");
}
