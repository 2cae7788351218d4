//! The proxy's OTLP spans over real sockets on 127.0.0.1: client → egress → ingress →
//! `tailguard serve` → egress → ingress → serve, with tailguard-trace's collector receiving.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::StatusCode;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tailguard_model::Experiment;
use tailguard_proxy::{Config, Proxy};
use tailguard_serve::{Options, Running, Server, Spec};
use tailguard_trace::{Collector, Process, Span, Trace, Value};

const LOCAL: ([u8; 4], u16) = ([127, 0, 0, 1], 0);

/// A `tailguard serve` replica of `service` in a two-service file (frontend calls backend).
async fn serve(service: &str, downstream: Option<SocketAddr>, backend_time: &str) -> Running {
    let text = format!(
        "name: t\nservices:\n  frontend: {{ service_time: {{dist: constant, value: 1ms}}, calls: [{{service: backend}}] }}\n  backend: {{ service_time: {{dist: constant, value: {backend_time}}} }}\nworkload: {{ target: frontend, open: {{ rate: 1 }}, duration: 10s }}\nvariants: [{{ name: v }}]\n"
    );
    let experiment = Experiment::parse(&text, Path::new("t.yaml")).unwrap();
    let options = Options {
        service: service.into(),
        downstream: downstream.map(|a| ("backend".to_string(), format!("http://{a}/"))).into_iter().collect(),
        ..Options::default()
    };
    let spec = Spec::from_experiment(&experiment, &options).unwrap();
    Server::bind(&spec, SocketAddr::from(LOCAL)).await.unwrap().spawn().unwrap()
}

/// A proxy from YAML, with a `tracing:` section sending to `otlp` as `service`.
async fn proxy(yaml: &str, otlp: &str, service: &str) -> Proxy {
    let text = format!("{yaml}\ntracing: {{otlp_endpoint: '{otlp}', service_name: {service}}}\n");
    Proxy::start(Config::parse(&text, Path::new("proxy.yaml")).unwrap()).await.unwrap()
}

fn egress_to(upstream: &str, endpoints: &[SocketAddr], policy: &str) -> String {
    let endpoints: Vec<String> = endpoints.iter().map(|e| e.to_string()).collect();
    format!(
        "egress: {{listen: 127.0.0.1:0, upstreams: {{{upstream}: {{endpoints: [{}], match: {{path_prefix: /}}, policy: {policy}}}}}}}",
        endpoints.join(", ")
    )
}

fn ingress_to(app: SocketAddr) -> String {
    format!("ingress: {{listen: 127.0.0.1:0, app: {app}}}")
}

/// An ingress in front of `app` that admits one request at a time.
fn ingress_admitting_one(app: SocketAddr) -> String {
    format!("ingress: {{listen: 127.0.0.1:0, app: {app}, admission: {{kind: fixed, capacity: 1}}}}")
}

async fn get(addr: SocketAddr) -> StatusCode {
    let client: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let fetch = async {
        let response = client.get(format!("http://{addr}/").parse().unwrap()).await.expect("an answer");
        let status = response.status();
        response.into_body().collect().await.unwrap();
        status
    };
    tokio::time::timeout(Duration::from_secs(10), fetch).await.expect("an answer within 10 s")
}

fn str_tag<'a>(span: &'a Span, key: &str) -> &'a str {
    Trace::tag(span, key).and_then(Value::as_str).unwrap_or_else(|| panic!("{} has no tag {key}", span.operation))
}

fn int_tag(span: &Span, key: &str) -> i64 {
    Trace::tag(span, key).and_then(Value::as_i64).unwrap_or_else(|| panic!("{} has no tag {key}", span.operation))
}

/// The only child of `parent` in `trace`, checked to be `operation` in `service`.
fn only_child<'a>(trace: &'a Trace, parent: &Span, service: &str, operation: &str) -> &'a Span {
    let children = trace.children(parent.id);
    assert_eq!(children.len(), 1, "children of {}: {children:?}", parent.operation);
    let child = children[0];
    assert_eq!((trace.service(child), child.operation.as_str()), (service, operation));
    assert!(child.start_us >= parent.start_us, "{} starts before its parent", child.operation);
    assert!(child.start_us + child.duration_us <= parent.start_us + parent.duration_us + 1);
    child
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_through_two_hops_is_one_trace_with_the_right_tree() {
    let collector = Collector::start(SocketAddr::from(LOCAL)).await.unwrap();
    let otlp = collector.endpoint();
    let backend = serve("backend", None, "5ms").await;
    let backend_sidecar = proxy(&ingress_to(backend.addr()), &otlp, "backend").await;
    let frontend_egress =
        proxy(&egress_to("backend", &[backend_sidecar.ingress.unwrap()], "{}"), &otlp, "frontend").await;
    let frontend = serve("frontend", frontend_egress.egress, "5ms").await;
    let frontend_ingress = proxy(&ingress_to(frontend.addr()), &otlp, "frontend").await;
    let frontend_addr = frontend_ingress.ingress.unwrap();
    let client_sidecar = proxy(&egress_to("frontend", &[frontend_addr], "{}"), &otlp, "client").await;

    assert_eq!(get(client_sidecar.egress.unwrap()).await, StatusCode::OK);
    for p in [client_sidecar, frontend_ingress, frontend_egress, backend_sidecar] {
        p.shutdown().await;
    }
    let traces = collector.shutdown().await;
    assert_eq!(traces.len(), 1, "{traces:#?}");
    let t = &traces[0];
    assert_eq!(t.spans.len(), 6, "{t:#?}");

    let roots: Vec<&Span> = t.roots().collect();
    assert_eq!(roots.len(), 1);
    let call = roots[0];
    assert_eq!((t.service(call), call.operation.as_str()), ("client", "egress frontend"));
    assert_eq!((str_tag(call, "outcome"), int_tag(call, "http.response.status_code")), ("success", 200));
    assert_eq!(int_tag(call, "attempts"), 1);
    let attempt = only_child(t, call, "client", "attempt");
    assert_eq!(str_tag(attempt, "attempt.kind"), "first");
    assert_eq!(str_tag(attempt, "upstream"), "frontend");
    assert_eq!(str_tag(attempt, "endpoint"), frontend_addr.to_string());
    assert_eq!(str_tag(attempt, "span.kind"), "client");
    assert_eq!((str_tag(attempt, "outcome"), int_tag(attempt, "http.response.status_code")), ("success", 200));

    let ingress = only_child(t, attempt, "frontend", "ingress");
    assert_eq!(str_tag(ingress, "span.kind"), "server");
    assert_eq!(int_tag(ingress, "http.response.status_code"), 200);
    // serve copied the ingress span's traceparent onto its call, so the egress continues it.
    let call = only_child(t, ingress, "frontend", "egress backend");
    let attempt = only_child(t, call, "frontend", "attempt");
    assert_eq!(str_tag(attempt, "upstream"), "backend");
    let backend_ingress = only_child(t, attempt, "backend", "ingress");
    assert!(backend_ingress.duration_us >= 5_000, "the backend works 5 ms: {backend_ingress:?}");
    assert!(t.children(backend_ingress.id).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_deep_down_reaches_the_client_as_a_429_and_is_not_retried() {
    let collector = Collector::start(SocketAddr::from(LOCAL)).await.unwrap();
    let otlp = collector.endpoint();
    // A backend whose ingress admits one request at a time, held 500 ms.
    let backend = serve("backend", None, "500ms").await;
    let backend_sidecar = proxy(&ingress_admitting_one(backend.addr()), &otlp, "backend").await;
    let retry = "{retry: {max_attempts: 3, budget: unlimited}}";
    let frontend_egress =
        proxy(&egress_to("backend", &[backend_sidecar.ingress.unwrap()], retry), &otlp, "frontend").await;
    let frontend = serve("frontend", frontend_egress.egress, "500ms").await;
    let frontend_ingress = proxy(&ingress_to(frontend.addr()), &otlp, "frontend").await;
    let client_sidecar =
        proxy(&egress_to("frontend", &[frontend_ingress.ingress.unwrap()], retry), &otlp, "client").await;
    let client = client_sidecar.egress.unwrap();

    // Two at once: one holds the backend's slot; for the other the backend's sidecar refuses, the
    // frontend's egress does not send it back there (its only endpoint, whose queue stands), the
    // frontend answers 429, and the client's egress passes it on.
    let (a, b) = tokio::join!(get(client), get(client));
    let mut statuses = [a, b];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::TOO_MANY_REQUESTS]);
    for p in [client_sidecar, frontend_ingress, frontend_egress, backend_sidecar] {
        p.shutdown().await;
    }
    let traces = collector.shutdown().await;
    let refused = traces
        .iter()
        .find(|t| t.roots().any(|r| str_tag(r, "outcome") != "success"))
        .unwrap_or_else(|| panic!("no refused request in {traces:#?}"));
    let call = refused.roots().next().unwrap();
    assert_eq!((str_tag(call, "outcome"), int_tag(call, "http.response.status_code")), ("overloaded", 429));
    assert_eq!(int_tag(call, "attempts"), 1, "the client's egress did not retry the frontend's 429");
    let attempt = only_child(refused, call, "client", "attempt");
    let ingress = only_child(refused, attempt, "frontend", "ingress");
    let inner = only_child(refused, ingress, "frontend", "egress backend");
    assert_eq!((str_tag(inner, "outcome"), int_tag(inner, "attempts")), ("rejected", 1));
    assert_eq!(int_tag(inner, "http.response.status_code"), 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_and_hedges_are_tagged() {
    let collector = Collector::start(SocketAddr::from(LOCAL)).await.unwrap();
    let otlp = collector.endpoint();
    // A port nothing listens on: every attempt is refused.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let retrying = proxy(&egress_to("nowhere", &[dead], "{retry: {max_attempts: 2}}"), &otlp, "c").await;
    assert!(get(retrying.egress.unwrap()).await.is_server_error());
    let slow = serve("backend", None, "150ms").await;
    let hedge = "{hedge: {kind: speculative, attempts: 2, patience: 30ms}}";
    let hedging = proxy(&egress_to("slow", &[slow.addr()], hedge), &otlp, "c").await;
    assert_eq!(get(hedging.egress.unwrap()).await, StatusCode::OK);
    retrying.shutdown().await;
    hedging.shutdown().await;
    let traces = collector.shutdown().await;
    assert_eq!(traces.len(), 2);

    let attempts = |t: &Trace| {
        let call = t.roots().next().unwrap().clone();
        let mut a: Vec<(String, String)> = t
            .children(call.id)
            .iter()
            .map(|s| (str_tag(s, "attempt.kind").to_string(), str_tag(s, "outcome").to_string()))
            .collect();
        a.sort();
        (str_tag(&call, "outcome").to_string(), a)
    };
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    let (outcome, retried) = attempts(&traces[0]);
    assert_eq!(outcome, "unavailable");
    assert_eq!(retried, vec![pair("first", "unavailable"), pair("retry", "unavailable")]);
    let (outcome, hedged) = attempts(&traces[1]);
    assert_eq!(outcome, "success");
    assert_eq!(hedged, vec![pair("first", "success"), pair("hedge", "cancelled")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_kept_past_its_timeout_is_tagged_overdue() {
    let collector = Collector::start(SocketAddr::from(LOCAL)).await.unwrap();
    let slow = serve("backend", None, "150ms").await;
    let policy = "{timeout: {kind: fixed, value: 50ms}, retry: {max_attempts: 2, hedge_on_timeout: true}}";
    let sidecar = proxy(&egress_to("slow", &[slow.addr()], policy), &collector.endpoint(), "c").await;
    assert_eq!(get(sidecar.egress.unwrap()).await, StatusCode::OK);
    sidecar.shutdown().await;
    let traces = collector.shutdown().await;
    assert_eq!(traces.len(), 1);
    let t = &traces[0];
    let call = t.roots().next().unwrap();
    let mut attempts: Vec<(String, String, Option<Value>)> = t
        .children(call.id)
        .iter()
        .map(|s| (str_tag(s, "attempt.kind").into(), str_tag(s, "outcome").into(), Trace::tag(s, "overdue").cloned()))
        .collect();
    attempts.sort_by(|a, b| a.0.cmp(&b.0));
    // 150 ms of work against 50 ms timeouts: the first attempt is overdue at 50 ms, its retry at
    // 100 ms, and the first one's answer wins at 150 ms.
    let overdue = Some(Value::Bool(true));
    let first = ("first".to_string(), "success".to_string(), overdue.clone());
    assert_eq!(attempts, vec![first, ("hedge".into(), "cancelled".into(), overdue)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_never_blocks_or_fails_requests() {
    let backend = serve("backend", None, "1ms").await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let sidecar = proxy(&egress_to("backend", &[backend.addr()], "{}"), &format!("http://{dead}"), "c").await;
    let started = Instant::now();
    for _ in 0..200 {
        assert_eq!(get(sidecar.egress.unwrap()).await, StatusCode::OK);
    }
    // 200 requests of ~1 ms each: generous, but far below one export timeout per request.
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    let stopping = Instant::now();
    sidecar.shutdown().await;
    assert!(stopping.elapsed() < Duration::from_secs(10), "shutdown took {:?}", stopping.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingress_refusal_is_a_rejected_server_span() {
    let collector = Collector::start(SocketAddr::from(LOCAL)).await.unwrap();
    let app = serve("backend", None, "500ms").await;
    let sidecar = proxy(&ingress_admitting_one(app.addr()), &collector.endpoint(), "backend").await;
    let addr = sidecar.ingress.unwrap();
    let first = tokio::spawn(get(addr));
    // The first request holds the application's one admitted slot for 500 ms.
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(get(addr).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(first.await.unwrap(), StatusCode::OK);
    sidecar.shutdown().await;
    let traces = collector.shutdown().await;
    let mut outcomes: Vec<(String, i64)> = traces
        .iter()
        .flat_map(|t| t.spans.iter())
        .map(|s| (str_tag(s, "outcome").to_string(), int_tag(s, "http.response.status_code")))
        .collect();
    outcomes.sort();
    assert_eq!(outcomes, vec![("rejected".to_string(), 429), ("success".to_string(), 200)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_attributes_tag_the_process() {
    let collector = Collector::start(SocketAddr::from(LOCAL)).await.unwrap();
    let app = serve("backend", None, "1ms").await;
    let text = format!(
        "{}\ntracing: {{otlp_endpoint: '{}', service_name: backend, resource: {{scenario: 40x10, variant: bloc}}}}\n",
        ingress_to(app.addr()),
        collector.endpoint()
    );
    let sidecar = Proxy::start(Config::parse(&text, Path::new("proxy.yaml")).unwrap()).await.unwrap();
    assert_eq!(get(sidecar.ingress.unwrap()).await, StatusCode::OK);
    sidecar.shutdown().await;
    let traces = collector.shutdown().await;
    let processes: Vec<&Process> = traces.iter().flat_map(|t| &t.processes).collect();
    assert_eq!(processes.len(), 1, "{traces:#?}");
    assert_eq!(processes[0].service, "backend");
    let tag = |key: &str| processes[0].tags.iter().find(|t| t.key == key).map(|t| t.value.clone());
    assert_eq!((tag("scenario"), tag("variant")), (Some(Value::from("40x10")), Some(Value::from("bloc"))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampled_traceparent_forces_recording_only_from_a_trusted_peer() {
    let app = serve("backend", None, "1ms").await;
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let client: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    // At `sample: 0`, only a believed sampled parent gets a span recorded.
    for (trusted, spans) in [("", 1), (", trusted_peers: [10.0.0.0/8]", 0)] {
        let collector = Collector::start(SocketAddr::from(LOCAL)).await.unwrap();
        let text = format!(
            "ingress: {{listen: 127.0.0.1:0, app: {}{trusted}}}\ntracing: {{otlp_endpoint: '{}', sample: 0}}\n",
            app.addr(),
            collector.endpoint()
        );
        let sidecar = Proxy::start(Config::parse(&text, Path::new("proxy.yaml")).unwrap()).await.unwrap();
        let request = hyper::Request::get(format!("http://{}/", sidecar.ingress.unwrap()))
            .header("traceparent", traceparent)
            .body(Empty::new())
            .unwrap();
        let response = client.request(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.into_body().collect().await.unwrap();
        sidecar.shutdown().await;
        let traces = collector.shutdown().await;
        assert_eq!(traces.iter().map(|t| t.spans.len()).sum::<usize>(), spans, "{trusted}: {traces:#?}");
    }
}
