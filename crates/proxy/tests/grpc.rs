//! gRPC through the proxy over real sockets, with exact heads: its own replies to a gRPC request
//! are trailers-only (HTTP 200, `grpc-status`, `grpc-message`), `grpc-timeout` is a deadline and is
//! propagated, and an upstream's trailers-only status is judged as its HTTP kin is. (grpc-go's
//! own client reads the same replies in tests/grpc_interop.rs.)

use crate::proxy_of;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper::{HeaderMap, Request, Response, StatusCode};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tailguard_proxy::Proxy;
use tokio::net::TcpListener;

use tailguard_testkit::{Backend, Mode, Refusing};

/// An egress with the upstream `svc` (h2c, matched by host) over `endpoints` with `policy`.
async fn egress(endpoints: &[SocketAddr], policy: &str) -> Proxy {
    let endpoints: Vec<String> = endpoints.iter().map(SocketAddr::to_string).collect();
    proxy_of(&format!(
        "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc:\n      endpoints: [{}]\n      match: {{host: svc}}\n      protocol: h2c\n      policy: {policy}\nshutdown_grace: 1s\n",
        endpoints.join(", ")
    ))
    .await
}

/// An ingress in front of `app` (h2c) with `admission`.
async fn ingress(app: SocketAddr, admission: &str) -> Proxy {
    proxy_of(&format!(
        "ingress:\n  listen: 127.0.0.1:0\n  app: {app}\n  protocol: h2c\n  admission: {admission}\nshutdown_grace: 1s\n"
    ))
    .await
}

/// A unary gRPC call's head (an empty message, length-prefixed) to `addr` with Host `host` and
/// extra headers, over h2c as gRPC clients send it; its status and headers, and how long it took.
async fn call(addr: SocketAddr, host: &str, headers: &[(&str, &str)]) -> (StatusCode, HeaderMap, Duration) {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).http2_only(true).build_http();
    let mut req = Request::post(format!("http://{addr}/grpc.testing.TestService/EmptyCall"))
        .header("host", host)
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let started = Instant::now();
    let body = Full::new(Bytes::from_static(&[0, 0, 0, 0, 0]));
    let response = tokio::time::timeout(Duration::from_secs(5), client.request(req.body(body).unwrap()))
        .await
        .expect("the proxy answers within 5 s")
        .unwrap();
    let took = started.elapsed();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    assert!(body.is_empty() || parts.headers.get("grpc-status").is_none(), "a trailers-only reply has no body");
    (parts.status, parts.headers, took)
}

/// The `grpc-status` and `grpc-message` of a trailers-only reply, which must be HTTP 200 with the
/// request's content type.
fn grpc_status(status: StatusCode, headers: &HeaderMap) -> (String, String) {
    assert_eq!(status, StatusCode::OK, "{headers:?}");
    assert_eq!(headers["content-type"], "application/grpc");
    let text = |name| headers.get(name).map_or("", |v| v.to_str().unwrap()).to_string();
    (text("grpc-status"), text("grpc-message"))
}

/// An h2c application that answers every request at once with the `grpc-timeout` and
/// `x-tailguard-deadline-ms` it was sent, in `x-grpc-timeout` and `x-deadline-ms`, and status 0.
async fn echo_deadlines() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = service_fn(|req: Request<Incoming>| async move {
                let seen =
                    |name| req.headers().get(name).cloned().unwrap_or(hyper::header::HeaderValue::from_static(""));
                let response = Response::builder()
                    .header("content-type", "application/grpc")
                    .header("grpc-status", "0")
                    .header("x-grpc-timeout", seen("grpc-timeout"))
                    .header("x-deadline-ms", seen("x-tailguard-deadline-ms"))
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                Ok::<_, Infallible>(response)
            });
            tokio::spawn(http2::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(stream), service));
        }
    });
    addr
}

#[tokio::test]
async fn the_egress_answers_grpc_requests_in_grpcs_form() {
    let backend = Backend::start_h2c("grpc", Mode::Ok(Duration::ZERO)).await;
    let proxy = egress(&[backend.addr], "{}").await;
    let addr = proxy.egress.unwrap();
    // No upstream for this host: UNIMPLEMENTED, as Envoy answers a gRPC request without a route.
    let (status, headers, _) = call(addr, "nowhere", &[]).await;
    assert_eq!(grpc_status(status, &headers), ("12".into(), "tailguard: no upstream matches this request".into()));
    // A deadline spent on arrival, and a malformed grpc-timeout (INTERNAL, as grpc-go's servers).
    let (status, headers, _) = call(addr, "svc", &[("grpc-timeout", "0m")]).await;
    assert_eq!(grpc_status(status, &headers).0, "4");
    let (status, headers, _) = call(addr, "svc", &[("grpc-timeout", "5 s")]).await;
    let (code, message) = grpc_status(status, &headers);
    assert_eq!(code, "13");
    assert!(message.starts_with("grpc-timeout: expected 1 to 8 digits and a unit"), "{message}");
    // The same request without a gRPC content type is answered in HTTP's form.
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).http2_only(true).build_http();
    let req = Request::get(format!("http://{addr}/x")).header("host", "nowhere").body(Full::default()).unwrap();
    let response = client.request(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert!(response.headers().get("grpc-status").is_none());
    // A call the upstream answers is its answer.
    let (status, headers, _) = call(addr, "svc", &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers.get("grpc-status").is_none());
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_refused_connect_is_unavailable_and_a_passed_grpc_timeout_deadline_exceeded() {
    let refusing = Refusing::bind();
    let proxy = egress(&[refusing.addr], "{}").await;
    let (status, headers, _) = call(proxy.egress.unwrap(), "svc", &[]).await;
    assert_eq!(grpc_status(status, &headers), ("14".into(), "tailguard: no endpoint could be reached".into()));
    proxy.shutdown().await;

    let hung = Backend::start_h2c("hung", Mode::Hang).await;
    let proxy = egress(&[hung.addr], "{}").await;
    let (status, headers, took) = call(proxy.egress.unwrap(), "svc", &[("grpc-timeout", "150m")]).await;
    assert_eq!(grpc_status(status, &headers), ("4".into(), "tailguard: the deadline passed".into()));
    assert!(took >= Duration::from_millis(150) && took < Duration::from_secs(2), "answered after {took:?}");
    proxy.shutdown().await;
}

#[tokio::test]
async fn grpc_timeout_is_propagated_as_the_time_left_with_the_sooner_deadline_winning() {
    let app = echo_deadlines().await;
    let proxy = egress(&[app], "{deadline: 2s}").await;
    let addr = proxy.egress.unwrap();
    let left = |headers: &HeaderMap| {
        let text = headers["x-grpc-timeout"].to_str().unwrap().to_string();
        let (digits, unit) = text.split_at(text.len() - 1);
        let n: u64 = digits.parse().unwrap();
        let d = match unit {
            "u" => Duration::from_micros(n),
            "m" => Duration::from_millis(n),
            other => panic!("unit {other}"),
        };
        let ms: u64 = headers["x-deadline-ms"].to_str().unwrap().parse().unwrap();
        (d, Duration::from_millis(ms))
    };
    // The caller's 500 ms are sooner than the policy's 2 s: the attempt carries what is left.
    let (_, headers, _) = call(addr, "svc", &[("grpc-timeout", "500m")]).await;
    let (grpc, ms) = left(&headers);
    assert!(grpc <= Duration::from_millis(500) && grpc > Duration::from_millis(100), "{grpc:?}");
    assert!(ms <= grpc && grpc - ms < Duration::from_millis(1), "{ms:?} beside {grpc:?}");
    // Without one, the policy's deadline is sent as grpc-timeout too.
    let (_, headers, _) = call(addr, "svc", &[]).await;
    let (grpc, _) = left(&headers);
    assert!(grpc <= Duration::from_secs(2) && grpc > Duration::from_millis(1000), "{grpc:?}");
    // The application's own deadline header, sooner still, wins over grpc-timeout.
    let (_, headers, _) = call(addr, "svc", &[("grpc-timeout", "1S"), ("x-tailguard-deadline-ms", "300")]).await;
    let (grpc, _) = left(&headers);
    assert!(grpc <= Duration::from_millis(300) && grpc > Duration::from_millis(50), "{grpc:?}");
    proxy.shutdown().await;

    // The ingress gives the application the caller's grpc-timeout, from any peer.
    let sidecar = ingress(app, "{kind: none}").await;
    let (_, headers, _) = call(sidecar.ingress.unwrap(), "app", &[("grpc-timeout", "700m")]).await;
    let (grpc, ms) = left(&headers);
    assert!(grpc <= Duration::from_millis(700) && grpc > Duration::from_millis(300), "{grpc:?}");
    assert!(ms <= grpc, "{ms:?} beside {grpc:?}");
    sidecar.shutdown().await;
}

#[tokio::test]
async fn the_ingress_refuses_in_grpcs_form_and_the_egress_takes_that_as_a_refusal() {
    // A replica at its capacity of 1: one call held by its hung application.
    let hung = Backend::start_h2c("hung", Mode::Hang).await;
    let full = ingress(hung.addr, "{kind: fixed, capacity: 1}").await;
    let held = tokio::spawn(call(full.ingress.unwrap(), "app", &[]));
    let mut refused = None;
    for _ in 0..200 {
        if hung.hits() == 1 {
            refused = Some(call(full.ingress.unwrap(), "app", &[]).await);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, headers, _) = refused.expect("the held call reaches the application within 2 s");
    assert_eq!(grpc_status(status, &headers), ("8".into(), "tailguard: over capacity".into()));
    assert_eq!(headers["x-tailguard-chip"], "0");

    // The deadline passing at the ingress is DEADLINE_EXCEEDED.
    let waiting = ingress(hung.addr, "{kind: none}").await;
    let (status, headers, _) = call(waiting.ingress.unwrap(), "app", &[("grpc-timeout", "100m")]).await;
    assert_eq!(grpc_status(status, &headers), ("4".into(), "tailguard: the deadline passed".into()));

    // Behind an egress: the full replica's RESOURCE_EXHAUSTED is a refusal, retried at once on
    // the other replica (this request's body has a length, so it can be sent again).
    let app = Backend::start_h2c("app", Mode::Ok(Duration::ZERO)).await;
    let open = ingress(app.addr, "{kind: none}").await;
    let proxy = egress(
        &[full.ingress.unwrap(), open.ingress.unwrap()],
        "{balancer: {kind: round-robin}, retry: {max_attempts: 2}}",
    )
    .await;
    for _ in 0..4 {
        let (status, headers, _) = call(proxy.egress.unwrap(), "svc", &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert!(headers.get("grpc-status").is_none(), "{headers:?}");
    }
    assert_eq!(app.hits(), 4, "each call answered once, by the open replica");
    held.abort();
    for p in [proxy, full, waiting, open] {
        p.shutdown().await;
    }
}
