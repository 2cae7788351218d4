//! Spans over OTLP/HTTP (docs/traces.md), when the file has a `tracing:` section.
//!
//! The ingress makes a server span per request, a child of the caller's `traceparent`, and hands
//! the application its own context; the egress makes an internal span per call, a child of the
//! application's `traceparent` (which `tailguard serve` copies from the request it is serving),
//! with a client span per attempt whose context the upstream request carries. Spans go through
//! opentelemetry_sdk's batch processor on tokio to opentelemetry-otlp's HTTP/protobuf exporter:
//! ending a span only queues it (a full queue drops it), so a slow or unreachable collector never
//! delays a request.
//!
//! Without `tracing:` none of this exists: the listeners hold `None` and skip it with a branch.

use crate::config;
use crate::http::Body;
use hyper::{HeaderMap, Response, StatusCode};
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{BatchConfigBuilder, Sampler, SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::{runtime, Resource};
use std::net::SocketAddr;
use std::time::Duration;
use tailguard_policy::Outcome;

/// OTLP/HTTP's path for traces.
const TRACES_PATH: &str = "/v1/traces";
/// How long one export request may take before it is abandoned (its spans are lost).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);
/// How often queued spans are sent.
const EXPORT_EVERY: Duration = Duration::from_millis(500);
/// Spans queued for export at most; beyond it new spans are dropped.
const QUEUE: usize = 16 * 1024;
/// How long shutdown waits for the last spans to go out.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// The proxy's tracer and the exporter behind it.
pub(crate) struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

/// The OTLP/HTTP URL of `url`: an `http://` URL, given `/v1/traces` when it has no path.
pub(crate) fn endpoint(url: &str) -> Result<String, String> {
    let uri: hyper::Uri = url.parse().map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    match (uri.scheme_str(), uri.authority()) {
        (Some("http"), Some(authority)) if matches!(uri.path(), "" | "/") => {
            Ok(format!("http://{authority}{TRACES_PATH}"))
        }
        (Some("http"), Some(_)) => Ok(url.to_string()),
        _ => Err(format!("expected an http:// URL such as http://127.0.0.1:4318/v1/traces, got {url:?}")),
    }
}

impl Tracing {
    /// The tracer of `config`, exporting from a task on the current tokio runtime.
    pub(crate) fn new(config: &config::Tracing) -> Result<Tracing, String> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(endpoint(&config.otlp_endpoint)?)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot build the OTLP exporter: {e}"))?;
        let batch = BatchConfigBuilder::default().with_max_queue_size(QUEUE).with_scheduled_delay(EXPORT_EVERY).build();
        let processor = BatchSpanProcessor::builder(exporter, runtime::Tokio).with_batch_config(batch).build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(config.sample))))
            .with_resource(
                Resource::builder_empty()
                    .with_service_name(config.service_name.clone())
                    .with_attributes(config.resource.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone())))
                    .build(),
            )
            .build();
        let tracer = provider.tracer("tailguard-proxy");
        Ok(Tracing { provider, tracer })
    }

    /// Sends the spans still queued (within a bound) and stops the exporter.
    pub(crate) async fn shutdown(&self) {
        let provider = self.provider.clone();
        // The SDK's shutdown blocks on the export task, which runs on this runtime.
        let flush = tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(FLUSH_TIMEOUT));
        let _ = tokio::time::timeout(FLUSH_TIMEOUT + Duration::from_secs(1), flush).await;
    }

    /// The server span of a request arriving at the ingress with `headers`: in the caller's trace
    /// if the caller is `trusted`, else in a new trace sampled afresh (an untrusted caller's
    /// sampled `traceparent` would otherwise force recording at any `sample`).
    pub(crate) fn ingress(&self, headers: &HeaderMap, trusted: bool) -> ServerSpan {
        let parent = match trusted {
            true => TraceContextPropagator::new().extract(&HeaderExtractor(headers)),
            false => Context::new(),
        };
        let span =
            self.tracer.span_builder("ingress").with_kind(SpanKind::Server).start_with_context(&self.tracer, &parent);
        ServerSpan(parent.with_span(span))
    }

    /// The span of an egress call to `upstream` by a request with `headers`.
    pub(crate) fn call(&self, headers: &HeaderMap, upstream: &str) -> CallTrace {
        let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
        let span = self
            .tracer
            .span_builder(format!("egress {upstream}"))
            .with_kind(SpanKind::Internal)
            .with_attributes([KeyValue::new("upstream", upstream.to_string())])
            .start_with_context(&self.tracer, &parent);
        CallTrace {
            tracer: self.tracer.clone(),
            upstream: upstream.to_string(),
            cx: parent.with_span(span),
            attempts: Vec::new(),
        }
    }
}

/// An ingress request's span.
pub(crate) struct ServerSpan(Context);

impl ServerSpan {
    /// Puts this span's context on the request to the application.
    pub(crate) fn inject(&self, headers: &mut HeaderMap) {
        TraceContextPropagator::new().inject_context(&self.0, &mut HeaderInjector(headers));
    }

    /// Ends the span with the status the caller gets.
    pub(crate) fn end(self, status: StatusCode) {
        let outcome = match status {
            StatusCode::TOO_MANY_REQUESTS => "rejected",
            StatusCode::GATEWAY_TIMEOUT => "timed_out",
            s if s.is_server_error() => "error",
            _ => "success",
        };
        end(&self.0, outcome, Some(status));
    }
}

/// An egress call's span and its attempts' spans.
pub(crate) struct CallTrace {
    tracer: SdkTracer,
    upstream: String,
    cx: Context,
    /// Attempts in flight, by number.
    attempts: Vec<(u32, Context)>,
}

/// Why an attempt was sent: Jaeger's `attempt.kind` tag.
fn attempt_kind(attempt: u32, others_in_flight: bool) -> &'static str {
    match (attempt, others_in_flight) {
        (0, _) => "first",
        (_, true) => "hedge",
        (_, false) => "retry",
    }
}

impl CallTrace {
    /// Starts attempt `attempt`'s span; `others_in_flight` tells a hedge from a retry.
    pub(crate) fn on_send(
        &mut self,
        attempt: u32,
        endpoint: Option<&SocketAddr>,
        policy_timeout: Option<Duration>,
        others_in_flight: bool,
    ) {
        let mut tags = vec![
            KeyValue::new("upstream", self.upstream.clone()),
            KeyValue::new("attempt", i64::from(attempt)),
            KeyValue::new("attempt.kind", attempt_kind(attempt, others_in_flight)),
        ];
        if let Some(e) = endpoint {
            tags.push(KeyValue::new("endpoint", e.to_string()));
        }
        if let Some(t) = policy_timeout {
            tags.push(KeyValue::new("timeout_ms", t.as_secs_f64() * 1e3));
        }
        let span = self
            .tracer
            .span_builder("attempt")
            .with_kind(SpanKind::Client)
            .with_attributes(tags)
            .start_with_context(&self.tracer, &self.cx);
        self.attempts.push((attempt, self.cx.with_span(span)));
    }

    /// Puts attempt `attempt`'s context on its request.
    pub(crate) fn inject(&self, attempt: u32, headers: &mut HeaderMap) {
        if let Some((_, cx)) = self.attempts.iter().find(|(a, _)| *a == attempt) {
            TraceContextPropagator::new().inject_context(cx, &mut HeaderInjector(headers));
        }
    }

    /// Ends attempt `attempt` with its answer (or transport error).
    pub(crate) fn on_end(&mut self, attempt: u32, result: &Result<Response<Body>, crate::egress::AttemptError>) {
        let (outcome, status) = match result {
            Ok(r) => {
                let found = crate::http::scan(r.headers());
                (crate::egress::outcome(r.status(), found.refused), Some(r.status()))
            }
            Err(e) if e.is_connect() => (Outcome::Unavailable, None),
            Err(_) => (Outcome::Error, None),
        };
        self.end_attempt(attempt, outcome, status);
    }

    /// Marks attempt `attempt` as kept running past its timeout (`hedge_on_timeout`).
    pub(crate) fn on_overdue(&self, attempt: u32) {
        if let Some((_, cx)) = self.attempts.iter().find(|(a, _)| *a == attempt) {
            cx.span().set_attribute(KeyValue::new("overdue", true));
        }
    }

    /// Ends attempt `attempt`, abandoned for `reason` (its timeout, or another attempt won).
    pub(crate) fn on_cancel(&mut self, attempt: u32, reason: Outcome) {
        self.end_attempt(attempt, reason, None);
    }

    fn end_attempt(&mut self, attempt: u32, outcome: Outcome, status: Option<StatusCode>) {
        if let Some(i) = self.attempts.iter().position(|(a, _)| *a == attempt) {
            let (_, cx) = self.attempts.swap_remove(i);
            end(&cx, outcome.name(), status);
        }
    }

    /// Ends the call (and any attempt still open) with its outcome and the status the
    /// application gets.
    pub(crate) fn finish(mut self, outcome: Outcome, attempts: u32, status: StatusCode) {
        for (_, cx) in std::mem::take(&mut self.attempts) {
            end(&cx, Outcome::Cancelled.name(), None);
        }
        self.cx.span().set_attribute(KeyValue::new("attempts", i64::from(attempts)));
        end(&self.cx, outcome.name(), Some(status));
    }
}

/// Tags a span with its outcome and status code, marks failures as errors, and ends it.
fn end(cx: &Context, outcome: &'static str, status: Option<StatusCode>) {
    let span = cx.span();
    span.set_attribute(KeyValue::new("outcome", outcome));
    if let Some(s) = status {
        span.set_attribute(KeyValue::new("http.response.status_code", i64::from(s.as_u16())));
    }
    if !matches!(outcome, "success" | "cancelled") {
        span.set_status(Status::error(outcome));
    }
    span.end();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_http_urls_with_the_traces_path() {
        assert_eq!(endpoint("http://127.0.0.1:4318").unwrap(), "http://127.0.0.1:4318/v1/traces");
        assert_eq!(endpoint("http://collector:4318/").unwrap(), "http://collector:4318/v1/traces");
        assert_eq!(endpoint("http://collector:4318/custom").unwrap(), "http://collector:4318/custom");
        assert!(endpoint("https://collector:4318").is_err());
        assert!(endpoint("collector:4318").is_err());
    }

    #[test]
    fn attempt_kinds() {
        assert_eq!(attempt_kind(0, false), "first");
        assert_eq!(attempt_kind(1, true), "hedge");
        assert_eq!(attempt_kind(2, false), "retry");
    }
}
