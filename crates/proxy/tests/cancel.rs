//! An attempt the egress abandons stops the callee's work, over real sockets on 127.0.0.1:
//! client → egress (a 100 ms timeout, no retry) → ingress → `tailguard serve` with one worker and
//! 1 s of work. The egress drops the timed-out attempt (HTTP/1: it closes the connection; h2c:
//! hyper resets the stream), the ingress drops its request to serve in turn, and serve drops the
//! work: a request sent straight to serve afterwards gets the worker at once.

use crate::proxy_of;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::StatusCode;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tailguard_model::Experiment;
use tailguard_serve::{Options, Running, Server, Spec};

/// serve's work time.
const WORK: Duration = Duration::from_secs(1);
/// A request answered before this did not wait for the abandoned one's work (1.9 s at least).
const ONE_WORK_AT_MOST: Duration = Duration::from_millis(1600);

/// A `tailguard serve` replica with one worker and 1 s of work.
async fn serve() -> Running {
    let text = "name: t\nservices:\n  a: { workers: 1, service_time: { dist: constant, value: 1s } }\nworkload: { target: a, open: { rate: 1 }, duration: 10s }\nvariants: [{ name: v }]\n";
    let experiment = Experiment::parse(text, Path::new("t.yaml")).unwrap();
    let options = Options { service: "a".into(), ..Options::default() };
    let spec = Spec::from_experiment(&experiment, &options).unwrap();
    Server::bind(&spec, SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap().spawn().unwrap()
}

/// GETs `/` from `addr`: the status and how long it took.
async fn get(addr: SocketAddr) -> (StatusCode, Duration) {
    let client: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let started = Instant::now();
    let fetch = async {
        let response = client.get(format!("http://{addr}/").parse().unwrap()).await.expect("an answer");
        let status = response.status();
        response.into_body().collect().await.unwrap();
        status
    };
    let status = tokio::time::timeout(Duration::from_secs(5), fetch).await.expect("an answer within 5 s");
    (status, started.elapsed())
}

/// The chain over `protocol` (`http1` or `h2c`) on both hops; checks that the timed-out attempt
/// freed serve's worker.
async fn a_timed_out_attempt_frees_the_worker(protocol: &str) {
    let app = serve().await;
    let sidecar =
        proxy_of(&format!("ingress: {{listen: 127.0.0.1:0, app: {}, protocol: {protocol}}}\n", app.addr())).await;
    let ingress = sidecar.ingress.expect("an ingress");
    let caller = proxy_of(&format!(
        "egress: {{listen: 127.0.0.1:0, upstreams: {{a: {{endpoints: [{ingress}], protocol: {protocol}, policy: {{timeout: {{kind: fixed, value: 100ms}}}}}}}}}}\n"
    ))
    .await;
    let egress = caller.egress.expect("an egress");
    // Step: the request through the egress times out after 100 ms (504) while serve works on it.
    let (status, took) = get(egress).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert!(took < WORK, "took {took:?}");
    // Step: serve's only worker is free at once for a request straight to it.
    let (status, took) = get(app.addr()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(took >= WORK && took < ONE_WORK_AT_MOST, "{protocol}: took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http1_the_closed_connection_frees_the_worker() {
    a_timed_out_attempt_frees_the_worker("http1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_h2c_the_reset_stream_frees_the_worker() {
    a_timed_out_attempt_frees_the_worker("h2c").await;
}
