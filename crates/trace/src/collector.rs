//! An OTLP/HTTP trace receiver the lab runs in-process, so a lab run collects its proxies' spans
//! without a Jaeger or OpenTelemetry Collector installed.
//!
//! It serves `POST /v1/traces` with the OTLP/HTTP encodings (opentelemetry-proto's messages):
//! binary protobuf (`application/x-protobuf`, what opentelemetry-otlp's HTTP exporter sends)
//! and JSON (`application/json`). Spans are grouped by trace id; each resource's `service.name`
//! becomes the span's process, its other attributes the process's tags.
//!
//! Memory is bounded: beyond [`MAX_SPANS`] spans, further spans are counted and dropped.

use crate::model::{Span, Tag, Trace, Value};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, status::StatusCode as OtlpStatus};
use prost::Message as _;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The path OTLP/HTTP exporters post traces to.
pub const TRACES_PATH: &str = "/v1/traces";
/// The most spans kept; later ones are dropped (and counted).
pub const MAX_SPANS: usize = 2_000_000;
/// The largest export request accepted, in bytes.
pub const MAX_REQUEST_BYTES: usize = 32 << 20;
/// How long open connections may finish their requests on shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// The receiver; see [`Collector::start`].
pub struct Collector;

/// A running collector: its address, what it holds so far, and the handle that stops it.
pub struct CollectorHandle {
    addr: SocketAddr,
    store: Arc<Mutex<Store>>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// Spans received so far, grouped by trace.
#[derive(Default)]
struct Store {
    traces: HashMap<u128, Trace>,
    /// Trace ids in order of first arrival, so results come out in a stable order.
    order: Vec<u128>,
    spans: usize,
    dropped: u64,
}

impl Collector {
    /// Binds `bind` (port 0 picks a free port) and serves OTLP/HTTP until the handle is shut
    /// down. Must run inside a tokio runtime. Boxed, so that its server is compiled in this crate
    /// once: an async fn's body is compiled again into every crate that awaits it.
    pub fn start(
        bind: SocketAddr,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<CollectorHandle>> + Send>> {
        Box::pin(Collector::bind(bind))
    }

    async fn bind(bind: SocketAddr) -> std::io::Result<CollectorHandle> {
        let listener = TcpListener::bind(bind).await?;
        let addr = listener.local_addr()?;
        let store = Arc::new(Mutex::new(Store::default()));
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(serve(listener, store.clone(), stopped));
        Ok(CollectorHandle { addr, store, stop, task })
    }
}

impl CollectorHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL an OTLP/HTTP exporter is given (`http://ADDR/v1/traces`).
    pub fn endpoint(&self) -> String {
        format!("http://{}{TRACES_PATH}", self.addr)
    }

    /// Spans received so far.
    pub fn span_count(&self) -> usize {
        lock(&self.store).spans
    }

    /// Spans dropped because the store was full.
    pub fn dropped(&self) -> u64 {
        lock(&self.store).dropped
    }

    /// A copy of the traces received so far, in order of first arrival.
    pub fn traces(&self) -> Vec<Trace> {
        let store = lock(&self.store);
        store.order.iter().filter_map(|id| store.traces.get(id).cloned()).collect()
    }

    /// Stops serving (open requests get a short grace) and returns every trace received.
    pub async fn shutdown(self) -> Vec<Trace> {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        let mut store = std::mem::take(&mut *lock(&self.store));
        store.order.iter().filter_map(|id| store.traces.remove(id)).collect()
    }
}

fn lock(store: &Mutex<Store>) -> std::sync::MutexGuard<'_, Store> {
    store.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn serve(listener: TcpListener, store: Arc<Mutex<Store>>, mut stopped: watch::Receiver<bool>) {
    let graceful = GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of file descriptors and the like: back off instead of spinning.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = stopped.changed() => break,
        };
        let store = store.clone();
        let service = service_fn(move |req| {
            let store = store.clone();
            async move { Ok::<_, std::convert::Infallible>(handle(req, &store).await) }
        });
        let conn = builder.serve_connection(TokioIo::new(stream), service).into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await;
}

/// The two OTLP/HTTP encodings.
#[derive(Clone, Copy, PartialEq)]
enum Encoding {
    Protobuf,
    Json,
}

async fn handle(req: Request<Incoming>, store: &Mutex<Store>) -> Response<Full<Bytes>> {
    if req.uri().path() != TRACES_PATH {
        return text(StatusCode::NOT_FOUND, "only POST /v1/traces is served");
    }
    if req.method() != Method::POST {
        return text(StatusCode::METHOD_NOT_ALLOWED, "expected POST");
    }
    let content_type = req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let encoding = match content_type.split(';').next().unwrap_or("").trim() {
        "application/x-protobuf" | "application/protobuf" => Encoding::Protobuf,
        "application/json" => Encoding::Json,
        other => {
            let message = format!("unsupported content-type {other:?}: expected application/x-protobuf or json");
            return text(StatusCode::UNSUPPORTED_MEDIA_TYPE, &message);
        }
    };
    if req.headers().get(hyper::header::CONTENT_ENCODING).is_some_and(|v| v != "identity") {
        return text(StatusCode::UNSUPPORTED_MEDIA_TYPE, "compressed requests are not supported");
    }
    let body = match Limited::new(req.into_body(), MAX_REQUEST_BYTES).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return text(StatusCode::PAYLOAD_TOO_LARGE, &format!("cannot read the request: {e}")),
    };
    let request = match encoding {
        Encoding::Protobuf => ExportTraceServiceRequest::decode(body).map_err(|e| e.to_string()),
        Encoding::Json => serde_json::from_slice::<ExportTraceServiceRequest>(&body).map_err(|e| e.to_string()),
    };
    let request = match request {
        Ok(r) => r,
        Err(e) => return text(StatusCode::BAD_REQUEST, &format!("not an OTLP trace export: {e}")),
    };
    ingest(&mut lock(store), request);
    // Full success: an empty ExportTraceServiceResponse.
    let (body, content_type) = match encoding {
        Encoding::Protobuf => (ExportTraceServiceResponse::default().encode_to_vec(), "application/x-protobuf"),
        Encoding::Json => (b"{}".to_vec(), "application/json"),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn text(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(format!("{message}\n"))));
    *response.status_mut() = status;
    response
}

/// Files an export's spans under their traces.
fn ingest(store: &mut Store, request: ExportTraceServiceRequest) {
    for resource_spans in request.resource_spans {
        let attributes = resource_spans.resource.map(|r| r.attributes).unwrap_or_default();
        let mut service = "unknown_service".to_string();
        let mut process_tags = Vec::new();
        for kv in attributes {
            match (kv.key.as_str(), kv.value.as_ref().and_then(|v| v.value.as_ref())) {
                ("service.name", Some(any_value::Value::StringValue(s))) => service = s.clone(),
                _ => process_tags.push(tag(kv)),
            }
        }
        for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans) {
            if store.spans >= MAX_SPANS {
                store.dropped += 1;
                continue;
            }
            let (Some(trace_id), Some(span_id)) = (id::<16>(&span.trace_id), id::<8>(&span.span_id)) else {
                store.dropped += 1;
                continue;
            };
            let trace_id = u128::from_be_bytes(trace_id);
            let trace = store.traces.entry(trace_id).or_insert_with(|| {
                store.order.push(trace_id);
                Trace { id: trace_id, processes: Vec::new(), spans: Vec::new() }
            });
            let process = trace.process_index(&service, &process_tags);
            let mut tags: Vec<Tag> = span.attributes.into_iter().map(tag).collect();
            if let Some(kind) = span_kind(span.kind) {
                tags.push(Tag::new("span.kind", kind));
            }
            if let Some(status) = &span.status {
                if status.code == OtlpStatus::Error as i32 {
                    tags.push(Tag::new("error", true));
                    if !status.message.is_empty() {
                        tags.push(Tag::new("otel.status_description", status.message.clone()));
                    }
                }
            }
            trace.spans.push(Span {
                id: u64::from_be_bytes(span_id),
                parent: id::<8>(&span.parent_span_id).map(u64::from_be_bytes).filter(|p| *p != 0),
                process,
                operation: span.name,
                start_us: span.start_time_unix_nano / 1000,
                duration_us: span.end_time_unix_nano.saturating_sub(span.start_time_unix_nano) / 1000,
                tags,
            });
            store.spans += 1;
        }
    }
}

/// An id of exactly `N` bytes, if `bytes` is one.
fn id<const N: usize>(bytes: &[u8]) -> Option<[u8; N]> {
    bytes.try_into().ok()
}

/// Jaeger's name for an OTLP span kind (what Jaeger itself shows as `span.kind`).
fn span_kind(kind: i32) -> Option<&'static str> {
    match SpanKind::try_from(kind).ok()? {
        SpanKind::Server => Some("server"),
        SpanKind::Client => Some("client"),
        SpanKind::Producer => Some("producer"),
        SpanKind::Consumer => Some("consumer"),
        SpanKind::Internal => Some("internal"),
        SpanKind::Unspecified => None,
    }
}

fn tag(kv: KeyValue) -> Tag {
    Tag { key: kv.key, value: kv.value.map_or(Value::Str(String::new()), value) }
}

fn value(v: AnyValue) -> Value {
    match v.value {
        Some(any_value::Value::StringValue(s)) => Value::Str(s),
        Some(any_value::Value::BoolValue(b)) => Value::Bool(b),
        Some(any_value::Value::IntValue(i)) => Value::Int(i),
        Some(any_value::Value::DoubleValue(f)) => Value::Float(f),
        // Arrays, maps and bytes have no Jaeger tag type: kept as their JSON text.
        Some(other) => Value::Str(serde_json::to_string(&AnyValue { value: Some(other) }).unwrap_or_default()),
        None => Value::Str(String::new()),
    }
}
