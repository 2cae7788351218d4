//! The OTLP/HTTP collector over a real socket on 127.0.0.1: protobuf and JSON exports are grouped
//! by trace with their resource's service as process; bad requests get clear errors.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message as _;
use std::net::SocketAddr;
use tailguard_trace::{Collector, Trace, Value};

fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue { key: key.into(), value: Some(AnyValue { value: Some(v) }), ..KeyValue::default() }
}

fn span(trace: u128, id: u64, parent: Option<u64>, name: &str, start_ns: u64, end_ns: u64) -> Span {
    Span {
        trace_id: trace.to_be_bytes().to_vec(),
        span_id: id.to_be_bytes().to_vec(),
        parent_span_id: parent.map(|p| p.to_be_bytes().to_vec()).unwrap_or_default(),
        name: name.into(),
        kind: 2,
        start_time_unix_nano: start_ns,
        end_time_unix_nano: end_ns,
        attributes: vec![kv("attempt.kind", any_value::Value::StringValue("first".into()))],
        ..Span::default()
    }
}

fn export(service: &str, spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", any_value::Value::StringValue(service.into())),
                    kv("replica", any_value::Value::IntValue(3)),
                ],
                ..Resource::default()
            }),
            scope_spans: vec![ScopeSpans { spans, ..ScopeSpans::default() }],
            ..ResourceSpans::default()
        }],
    }
}

async fn post(addr: SocketAddr, path: &str, content_type: &str, body: Vec<u8>) -> (StatusCode, Bytes) {
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let req = Request::post(format!("http://{addr}{path}"))
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = client.request(req).await.expect("the collector answers");
    let status = response.status();
    (status, response.into_body().collect().await.unwrap().to_bytes())
}

#[tokio::test]
async fn protobuf_and_json_exports_are_grouped_by_trace() {
    let collector = Collector::start(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
    let addr = collector.addr();
    assert_eq!(collector.endpoint(), format!("http://{addr}/v1/traces"));
    let (t1, t2) = (0x11u128 << 64 | 1, 0x22u128);
    let frontend = export("frontend", vec![span(t1, 1, None, "ingress", 5_000_000, 9_000_000)]);
    let (status, _) = post(addr, "/v1/traces", "application/x-protobuf", frontend.encode_to_vec()).await;
    assert_eq!(status, StatusCode::OK);
    let backend =
        export("backend", vec![span(t1, 2, Some(1), "attempt", 6_000_000, 7_500_000), span(t2, 7, None, "x", 0, 0)]);
    let json = serde_json::to_vec(&backend).unwrap();
    let (status, body) = post(addr, "/v1/traces", "application/json; charset=utf-8", json).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&body[..], b"{}");
    assert_eq!(collector.span_count(), 3);

    let traces = collector.shutdown().await;
    assert_eq!(traces.iter().map(|t| t.id).collect::<Vec<_>>(), vec![t1, t2]);
    let t = &traces[0];
    let root = t.roots().collect::<Vec<_>>();
    assert_eq!(root.len(), 1);
    assert_eq!((t.service(root[0]), root[0].operation.as_str()), ("frontend", "ingress"));
    assert_eq!((root[0].start_us, root[0].duration_us), (5_000, 4_000));
    let children = t.children(1);
    assert_eq!(children.len(), 1);
    assert_eq!(t.service(children[0]), "backend");
    assert_eq!((children[0].start_us, children[0].duration_us), (6_000, 1_500));
    assert_eq!(Trace::tag(children[0], "attempt.kind"), Some(&Value::Str("first".into())));
    assert_eq!(Trace::tag(children[0], "span.kind"), Some(&Value::Str("server".into())));
    assert_eq!(t.processes[children[0].process].tags[0].value, Value::Int(3));
}

#[tokio::test]
async fn bad_requests_are_refused_with_a_reason() {
    let collector = Collector::start(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
    let addr = collector.addr();
    let (status, body) = post(addr, "/v1/traces", "application/x-protobuf", vec![0xff, 0xff, 0xff]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(String::from_utf8_lossy(&body).contains("not an OTLP trace export"));
    let (status, _) = post(addr, "/v1/traces", "text/plain", b"hi".to_vec()).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let (status, _) = post(addr, "/v1/metrics", "application/x-protobuf", vec![]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(collector.shutdown().await.is_empty());
}

#[tokio::test]
async fn otlp_json_as_the_specification_writes_it_is_understood() {
    let collector = Collector::start(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
    // Hex ids, 64-bit integers as strings, camelCase: OTLP/HTTP JSON as exporters send it.
    let body = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"svc"}}]},
        "scopeSpans":[{"scope":{"name":"x"},"spans":[{"traceId":"5b8efff798038103d269b633813fc60c",
        "spanId":"eee19b7ec3c1b174","parentSpanId":"eee19b7ec3c1b173","name":"op","kind":3,
        "startTimeUnixNano":"1544712660000000000","endTimeUnixNano":"1544712661000000000",
        "attributes":[{"key":"n","value":{"intValue":"42"}},{"key":"ok","value":{"boolValue":true}}],
        "status":{"code":2,"message":"boom"}}]}]}]}"#;
    let (status, _) = post(collector.addr(), "/v1/traces", "application/json", body.as_bytes().to_vec()).await;
    assert_eq!(status, StatusCode::OK);
    let traces = collector.shutdown().await;
    assert_eq!(traces.len(), 1);
    let t = &traces[0];
    assert_eq!(t.id, 0x5b8efff798038103d269b633813fc60c);
    let s = &t.spans[0];
    assert_eq!((s.id, s.parent), (0xeee19b7ec3c1b174, Some(0xeee19b7ec3c1b173)));
    assert_eq!((t.service(s), s.start_us, s.duration_us), ("svc", 1_544_712_660_000_000, 1_000_000));
    assert_eq!(Trace::tag(s, "n"), Some(&Value::Int(42)));
    assert_eq!(Trace::tag(s, "ok"), Some(&Value::Bool(true)));
    assert_eq!(Trace::tag(s, "span.kind"), Some(&Value::Str("client".into())));
    assert_eq!(Trace::tag(s, "error"), Some(&Value::Bool(true)));
}
