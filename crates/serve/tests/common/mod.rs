//! What the serve tests share: a test experiment, a server on a free port, and a client.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::StatusCode;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tailguard_model::Experiment;
use tailguard_serve::{Options, Running, Server, Spec};
use tokio::time::Instant;

/// An experiment whose `services:` block is `services` (indented by 2) and whose workload enters
/// its first service.
pub fn experiment(services: &str) -> Experiment {
    let text = format!(
        "name: t\nseed: 5\nservices:\n{services}\nworkload: {{ target: a, open: {{ rate: 1 }}, duration: 10s }}\nvariants: [{{ name: v }}]\n"
    );
    Experiment::parse(&text, Path::new("test.yaml")).expect("a valid experiment")
}

/// Serves `service` of `services` on a free port, with the downstream URLs given.
pub async fn start(services: &str, service: &str, downstream: &[(&str, String)]) -> Running {
    let options = Options {
        service: service.into(),
        downstream: downstream.iter().map(|(n, u)| (n.to_string(), u.clone())).collect(),
        ..Options::default()
    };
    let spec = Spec::from_experiment(&experiment(services), &options).expect("valid options");
    let server = Server::bind(&spec, SocketAddr::from(([127, 0, 0, 1], 0))).await.expect("binds");
    server.spawn().expect("spawns")
}

/// A client speaking HTTP/1.1, or h2c only.
pub fn client(h2: bool) -> Client<HttpConnector, Empty<Bytes>> {
    Client::builder(TokioExecutor::new()).http2_only(h2).build_http()
}

/// GETs `path`, returning the status and how long the answer took.
pub async fn get(client: &Client<HttpConnector, Empty<Bytes>>, addr: SocketAddr, path: &str) -> (StatusCode, Duration) {
    let started = Instant::now();
    let uri = format!("http://{addr}{path}").parse().expect("a URI");
    let fetch = async {
        let response = client.get(uri).await.expect("an answer");
        let status = response.status();
        response.into_body().collect().await.expect("a body");
        status
    };
    let status = tokio::time::timeout(Duration::from_secs(5), fetch).await.expect("an answer within 5 s");
    (status, started.elapsed())
}
