//! Which requests the egress sends more than once, over real sockets: with hedging and retries on,
//! a request mix in which every first copy of a request is slow (a hedge goes out) or fails (a
//! retry would follow) reaches the application exactly once per non-idempotent request (a POST
//! or PATCH without an `Idempotency-Key`), as Envoy and gRPC require, while idempotent and keyed
//! requests are hedged and retried (twice or more); an unreachable endpoint is passed over for
//! any method.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailguard_proxy::{Config, Proxy};
use tokio::net::TcpListener;

use tailguard_testkit::Refusing;

/// Copies of each request (by its `x-request` header) that reached the application.
type Copies = Arc<Mutex<HashMap<String, usize>>>;

/// An application replica: the first copy of request `n` waits 300 ms (a hedge goes out at 50 ms)
/// when `n` is even, and is answered 503 (a retry would follow) when odd; later copies are answered
/// at once. Replicas share `copies`.
async fn replica(copies: Copies) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let copies = copies.clone();
            let service = service_fn(move |req: Request<Incoming>| {
                let copies = copies.clone();
                async move {
                    let id = req.headers()["x-request"].to_str().unwrap().to_string();
                    let n: usize = id.rsplit('-').next().unwrap().parse().unwrap();
                    let copy = {
                        let mut copies = copies.lock().unwrap();
                        let copy = copies.entry(id).or_default();
                        *copy += 1;
                        *copy
                    };
                    let _ = req.into_body().collect().await;
                    let status = match (copy, n % 2) {
                        (1, 0) => {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            200
                        }
                        (1, _) => 503,
                        _ => 200,
                    };
                    let response = Response::builder().status(status).body(Full::new(Bytes::new())).unwrap();
                    Ok::<_, Infallible>(response)
                }
            });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
        }
    });
    addr
}

#[tokio::test]
async fn non_idempotent_requests_reach_the_application_once_while_the_others_are_hedged_and_retried() {
    let copies = Copies::default();
    let refusing = Refusing::bind();
    let endpoints = [replica(copies.clone()).await, replica(copies.clone()).await, refusing.addr];
    let endpoints: Vec<String> = endpoints.iter().map(SocketAddr::to_string).collect();
    let text = format!(
        "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc:\n      endpoints: [{}]\n      policy:\n        \
         balancer: {{kind: round-robin}}\n        hedge: {{kind: speculative, attempts: 2, patience: 50ms}}\n        \
         retry: {{max_attempts: 3, budget: unlimited}}\nshutdown_grace: 1s\n",
        endpoints.join(", ")
    );
    let proxy = Proxy::start(Config::parse(&text, Path::new("replay.yaml")).unwrap()).await.unwrap();
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let kinds: [(&str, Method, Option<&str>); 5] = [
        ("get", Method::GET, None),
        ("put", Method::PUT, None),
        ("post", Method::POST, None),
        ("patch", Method::PATCH, None),
        ("keyed-post", Method::POST, Some("a5f0c1")),
    ];
    let mut statuses: HashMap<String, StatusCode> = HashMap::new();
    let mut calls = tokio::task::JoinSet::new();
    for (kind, method, key) in &kinds {
        for n in 0..12 {
            let id = format!("{kind}-{n}");
            let mut req = Request::builder()
                .method(method.clone())
                .uri(format!("http://{}/x", proxy.egress.unwrap()))
                .header("x-request", &id);
            if let Some(key) = key {
                req = req.header("idempotency-key", format!("{key}-{n}"));
            }
            let request = client.request(req.body(Full::new(Bytes::from_static(b"{\"order\": 1}"))).unwrap());
            calls.spawn(async move { (id, tokio::time::timeout(Duration::from_secs(5), request).await) });
        }
    }
    while let Some(done) = calls.join_next().await {
        let (id, response) = done.unwrap();
        statuses.insert(id.clone(), response.expect("answered within 5 s").expect("answered").status());
    }
    let copies = copies.lock().unwrap().clone();
    for (kind, _, key) in &kinds {
        let replayed = matches!(*kind, "get" | "put") || key.is_some();
        for n in 0..12 {
            let id = format!("{kind}-{n}");
            let (sent, status) = (copies.get(&id).copied().unwrap_or(0), statuses[&id]);
            if replayed {
                // Hedged past its slow first copy, or retried past its failed one (and perhaps
                // hedged while its retry waited out the backoff).
                assert!(sent >= 2 && status == StatusCode::OK, "{id}: {sent} copies, {status}");
            } else {
                // Once, whatever became of it: a slow answer waited for, a 503 passed back.
                let expected = if n % 2 == 0 { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
                assert_eq!((sent, status), (1, expected), "{id}");
            }
        }
    }
    proxy.shutdown().await;
}
