//! The proxy's metrics, registered once in one [`Metrics`] and rendered in the Prometheus text
//! format by the admin listener. Label sets: `upstream` (per called service), `endpoint` (per
//! replica address) and `class` (a response's status class, `1xx` to `5xx`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// Labels of per-upstream metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabels {
    /// The upstream's name in the config.
    pub upstream: String,
}

/// Labels of per-endpoint metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    /// The upstream's name in the config.
    pub upstream: String,
    /// The replica's address.
    pub endpoint: String,
}

/// Labels of per-address metrics (an endpoint's connections are the same whichever upstreams list
/// it).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AddressLabels {
    /// The replica's address.
    pub endpoint: String,
}

/// Labels of the egress's responses to the application, per upstream and status class.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamClassLabels {
    /// The upstream's name in the config.
    pub upstream: String,
    /// `1xx` to `5xx`.
    pub class: String,
}

/// Labels of the ingress's responses to its callers.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabels {
    /// `1xx` to `5xx`.
    pub class: String,
}

/// The five status classes, in the order [`ResponseCounters`] holds them.
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// One counter per status class, resolved from a family once so that counting a response costs
/// no label lookup.
#[derive(Clone, Debug)]
pub struct ResponseCounters([Counter; 5]);

impl ResponseCounters {
    fn resolve(counter: impl Fn(&str) -> Counter) -> ResponseCounters {
        ResponseCounters(CLASSES.map(counter))
    }

    /// Counts a response of `status` (hyper's codes are 100 to 999; above 599 counts as 5xx).
    pub fn count(&self, status: hyper::StatusCode) {
        let class = usize::from(status.as_u16() / 100).clamp(1, 5) - 1;
        self.0[class].inc();
    }
}

fn latency_histogram() -> Histogram {
    // 0.5 ms to ~16 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// Timeout headroom ratios from 1 % to ~10× the latency.
fn headroom_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 11))
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Every metric the proxy exports.
pub struct Metrics {
    registry: Registry,
    /// Requests from the application, per upstream.
    pub requests: Family<UpstreamLabels, Counter>,
    /// Whole-request latency (all attempts), per upstream.
    pub request_latency: Histograms<UpstreamLabels>,
    /// Attempts sent, per endpoint.
    pub attempts: Family<EndpointLabels, Counter>,
    /// Attempt latency until the response head, per endpoint.
    pub attempt_latency: Histograms<EndpointLabels>,
    /// Attempts cut by their timeout, per endpoint.
    pub timeouts: Family<EndpointLabels, Counter>,
    /// 429 answers, per endpoint.
    pub rejected: Family<EndpointLabels, Counter>,
    /// Attempts refused locally because the endpoint had `max_connections_per_endpoint`
    /// connections open, per endpoint.
    pub overflow: Family<EndpointLabels, Counter>,
    /// Connections the egress opened, per endpoint address. A kept-alive pool opens as many as
    /// it once had requests in flight; the rest replace connections closed under an attempt (a
    /// race lost or a timeout: HTTP/1 cancels only by closing) or by the endpoint.
    pub connections_opened: Family<AddressLabels, Counter>,
    /// Requests answered 503 at once because the egress had `max_requests` in flight.
    pub egress_refused: Counter,
    /// Requests answered 503 at once because their upstream had its `max_requests` in flight,
    /// per upstream.
    pub upstream_refused: Family<UpstreamLabels, Counter>,
    /// Responses to the application by status class, per upstream (the proxy's own 502, 503
    /// and 504 included).
    pub responses: Family<UpstreamClassLabels, Counter>,
    /// Requests that ended without a successful answer (an error, a timeout, refusals or
    /// unreachable endpoints on every attempt), per upstream.
    pub failed: Family<UpstreamLabels, Counter>,
    /// Retries sent, per upstream.
    pub retries: Family<UpstreamLabels, Counter>,
    /// Hedged (speculative) attempts sent, per upstream.
    pub hedges: Family<UpstreamLabels, Counter>,
    /// Hedged attempts whose success answered the request, per upstream.
    pub hedges_won: Family<UpstreamLabels, Counter>,
    /// 1 when the budget retries and hedges share allowed neither at the latest request's start,
    /// else 0 (always 0 with `budget: unlimited`), per upstream.
    pub budget_exhausted: Family<UpstreamLabels, Gauge>,
    /// 1 when the hedge policy let hedges out at the latest request's start: an adaptive hedge's
    /// load gate open, or any other hedge policy (they have no gate); 0 when the gate was closed
    /// (an adaptive hedge for a cancelling callee then hedges only requests slower than every
    /// recent one) or the upstream does not hedge; per upstream.
    pub hedge_gate: Family<UpstreamLabels, Gauge>,
    /// Endpoints ejected by outlier detection, per upstream.
    pub ejections: Family<UpstreamLabels, Counter>,
    /// Endpoints out by outlier detection at the latest request's start, per upstream.
    pub ejected: Family<UpstreamLabels, Gauge>,
    /// Prequal's probes sent (to endpoints whose sidecar's last load report is stale), per
    /// upstream.
    pub probes: Family<UpstreamLabels, Counter>,
    /// Endpoints in the set (listed, or found by discovery), per upstream.
    pub endpoints: Family<UpstreamLabels, Gauge>,
    /// Discovery answers that failed or named no endpoint (the last set was kept), per upstream.
    pub discovery_errors: Family<UpstreamLabels, Counter>,
    /// The timeout policy's latest value in seconds, per upstream (0 when untimed).
    pub timeout_seconds: Family<UpstreamLabels, Gauge<f64, AtomicU64>>,
    /// Σ latency of the requests answered with success, timed-out attempts and waits included,
    /// per upstream: the numerator of adaptive-timeouts.txt §5.2's time fraction.
    pub answered_seconds: Family<UpstreamLabels, Counter<f64, AtomicU64>>,
    /// Σ latency of the attempt that answered each of those requests: the denominator.
    pub answer_seconds: Family<UpstreamLabels, Counter<f64, AtomicU64>>,
    /// (timeout − latency) / latency of each successful attempt sent with the policy's timeout,
    /// per upstream: its mean is §5.2's closeness.
    pub timeout_headroom: Histograms<UpstreamLabels>,
    /// Requests that reached the ingress.
    pub ingress_requests: Counter,
    /// Requests the ingress refused with 429.
    pub ingress_rejected: Counter,
    /// Of those, the ones whose caller had no fallback (its last attempt, or a plain client):
    /// the refusals that fail a request rather than move it to another replica.
    pub ingress_rejected_without_fallback: Counter,
    /// Responses the ingress sent back by status class (its own 429, 502 and 504 included).
    pub ingress_responses: Family<ClassLabels, Counter>,
    /// Requests the local application holds through the ingress.
    pub ingress_in_flight: Gauge,
    /// The admission policy's limit at the latest request's arrival (0 while none is known).
    pub ingress_admission_limit: Gauge,
    /// 1 when the admission policy refused requests beyond its limit at the latest request's
    /// arrival, else 0.
    pub ingress_admission_enforced: Gauge,
    /// The application's latency when idle as adaptive admission learnt it (or near idle, for an
    /// application that serves several at once), in seconds (0 before it has, and for the other
    /// policies).
    pub ingress_admission_base_seconds: Gauge<f64, AtomicU64>,
    /// Requests answered 503 at once because the application had `max_app_connections`
    /// connections open, none idle.
    pub ingress_app_overflow: Counter,
    /// Connections the ingress opened to the application.
    pub ingress_app_connections_opened: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("tailguard");
        let m = Metrics {
            requests: Family::default(),
            request_latency: Family::new_with_constructor(latency_histogram),
            attempts: Family::default(),
            attempt_latency: Family::new_with_constructor(latency_histogram),
            timeouts: Family::default(),
            rejected: Family::default(),
            overflow: Family::default(),
            connections_opened: Family::default(),
            egress_refused: Counter::default(),
            upstream_refused: Family::default(),
            responses: Family::default(),
            failed: Family::default(),
            retries: Family::default(),
            hedges: Family::default(),
            hedges_won: Family::default(),
            budget_exhausted: Family::default(),
            hedge_gate: Family::default(),
            ejections: Family::default(),
            probes: Family::default(),
            ejected: Family::default(),
            endpoints: Family::default(),
            discovery_errors: Family::default(),
            timeout_seconds: Family::default(),
            answered_seconds: Family::default(),
            answer_seconds: Family::default(),
            timeout_headroom: Family::new_with_constructor(headroom_histogram),
            ingress_requests: Counter::default(),
            ingress_rejected: Counter::default(),
            ingress_rejected_without_fallback: Counter::default(),
            ingress_responses: Family::default(),
            ingress_in_flight: Gauge::default(),
            ingress_admission_limit: Gauge::default(),
            ingress_admission_enforced: Gauge::default(),
            ingress_admission_base_seconds: Gauge::default(),
            ingress_app_overflow: Counter::default(),
            ingress_app_connections_opened: Counter::default(),
            registry: Registry::default(),
        };
        registry.register("egress_requests", "Requests from the application", m.requests.clone());
        registry.register("egress_request_seconds", "Whole-request latency", m.request_latency.clone());
        registry.register("egress_attempts", "Attempts sent to an endpoint", m.attempts.clone());
        registry.register("egress_attempt_seconds", "Attempt latency to the response head", m.attempt_latency.clone());
        registry.register("egress_timeouts", "Attempts cut by their timeout", m.timeouts.clone());
        registry.register("egress_rejected", "429 answers from an endpoint", m.rejected.clone());
        registry.register(
            "egress_upstream_overflow",
            "Attempts refused locally: the endpoint had max_connections_per_endpoint connections open",
            m.overflow.clone(),
        );
        registry.register(
            "egress_connections_opened",
            "Connections opened to an endpoint (TCP, with TLS if any)",
            m.connections_opened.clone(),
        );
        registry.register(
            "egress_refused",
            "Requests answered 503 at once: the egress had max_requests in flight",
            m.egress_refused.clone(),
        );
        registry.register(
            "egress_upstream_refused",
            "Requests answered 503 at once: their upstream had its max_requests in flight",
            m.upstream_refused.clone(),
        );
        registry.register("egress_responses", "Responses to the application by status class", m.responses.clone());
        registry.register("egress_failed", "Requests that ended without a successful answer", m.failed.clone());
        registry.register("egress_retries", "Retries sent", m.retries.clone());
        registry.register("egress_hedges", "Hedged attempts sent", m.hedges.clone());
        registry.register(
            "egress_hedges_won",
            "Hedged attempts whose success answered the request",
            m.hedges_won.clone(),
        );
        registry.register(
            "egress_budget_exhausted",
            "1 when the retry and hedge budget allowed neither at the latest request's start",
            m.budget_exhausted.clone(),
        );
        registry.register(
            "egress_hedge_gate",
            "1 when the hedge policy's load gate was open (or it has none) at the latest request's start",
            m.hedge_gate.clone(),
        );
        registry.register("egress_ejections", "Endpoints ejected by outlier detection", m.ejections.clone());
        registry.register("egress_ejected", "Endpoints ejected at the latest request's start", m.ejected.clone());
        registry.register("egress_probes", "Load probes sent to endpoints' sidecars", m.probes.clone());
        registry.register("egress_endpoints", "Endpoints in the upstream's set", m.endpoints.clone());
        registry.register(
            "egress_discovery_errors",
            "Discovery answers that failed or named no endpoint; the last set was kept",
            m.discovery_errors.clone(),
        );
        registry.register("egress_timeout_seconds", "Latest attempt timeout of the policy", m.timeout_seconds.clone());
        registry.register(
            "egress_answered_seconds",
            "Total latency of requests answered with success",
            m.answered_seconds.clone(),
        );
        registry.register(
            "egress_answer_seconds",
            "Total latency of the attempts that answered them",
            m.answer_seconds.clone(),
        );
        registry.register(
            "egress_timeout_headroom",
            "(timeout - latency) / latency of successful attempts sent with a timeout",
            m.timeout_headroom.clone(),
        );
        registry.register("ingress_requests", "Requests arriving at the ingress", m.ingress_requests.clone());
        registry.register("ingress_rejected", "Requests refused with 429", m.ingress_rejected.clone());
        registry.register(
            "ingress_rejected_without_fallback",
            "Requests refused with 429 that their caller would not retry on another replica",
            m.ingress_rejected_without_fallback.clone(),
        );
        registry.register("ingress_responses", "Responses of the ingress by status class", m.ingress_responses.clone());
        registry.register("ingress_in_flight", "Requests held by the application", m.ingress_in_flight.clone());
        registry.register(
            "ingress_admission_limit",
            "Admission's limit at the latest arrival (0: none known)",
            m.ingress_admission_limit.clone(),
        );
        registry.register(
            "ingress_admission_enforced",
            "1 when admission refused beyond its limit at the latest arrival",
            m.ingress_admission_enforced.clone(),
        );
        registry.register(
            "ingress_admission_base_seconds",
            "The application's idle (or near-idle) latency as adaptive admission learnt it (0: not yet)",
            m.ingress_admission_base_seconds.clone(),
        );
        registry.register(
            "ingress_app_overflow",
            "Requests answered 503 at once: the application had max_app_connections connections open",
            m.ingress_app_overflow.clone(),
        );
        registry.register(
            "ingress_app_connections_opened",
            "Connections opened to the application",
            m.ingress_app_connections_opened.clone(),
        );
        // The ingress's classes exist from the start, as every upstream's series do.
        let _ = m.ingress_response_counters();
        Metrics { registry, ..m }
    }

    /// The ingress's per-class response counters.
    pub fn ingress_response_counters(&self) -> ResponseCounters {
        ResponseCounters::resolve(|class| {
            self.ingress_responses.get_or_create(&ClassLabels { class: class.into() }).clone()
        })
    }

    /// The per-upstream metrics of `upstream`, resolved once so requests skip the label lookup.
    pub fn upstream(&self, upstream: &str) -> UpstreamMetrics {
        let labels = UpstreamLabels { upstream: upstream.to_string() };
        UpstreamMetrics {
            requests: self.requests.get_or_create(&labels).clone(),
            refused: self.upstream_refused.get_or_create(&labels).clone(),
            responses: ResponseCounters::resolve(|class| {
                let labels = UpstreamClassLabels { upstream: upstream.to_string(), class: class.into() };
                self.responses.get_or_create(&labels).clone()
            }),
            failed: self.failed.get_or_create(&labels).clone(),
            request_latency: self.request_latency.get_or_create(&labels).clone(),
            retries: self.retries.get_or_create(&labels).clone(),
            hedges: self.hedges.get_or_create(&labels).clone(),
            hedges_won: self.hedges_won.get_or_create(&labels).clone(),
            budget_exhausted: self.budget_exhausted.get_or_create(&labels).clone(),
            hedge_gate: self.hedge_gate.get_or_create(&labels).clone(),
            ejections: self.ejections.get_or_create(&labels).clone(),
            ejected: self.ejected.get_or_create(&labels).clone(),
            probes: self.probes.get_or_create(&labels).clone(),
            endpoints: self.endpoints.get_or_create(&labels).clone(),
            discovery_errors: self.discovery_errors.get_or_create(&labels).clone(),
            timeout_seconds: self.timeout_seconds.get_or_create(&labels).clone(),
            answered_seconds: self.answered_seconds.get_or_create(&labels).clone(),
            answer_seconds: self.answer_seconds.get_or_create(&labels).clone(),
            timeout_headroom: self.timeout_headroom.get_or_create(&labels).clone(),
        }
    }

    /// The per-endpoint metrics of `endpoint` of `upstream`, resolved once.
    pub fn endpoint(&self, upstream: &str, endpoint: &str) -> EndpointMetrics {
        let labels = EndpointLabels { upstream: upstream.to_string(), endpoint: endpoint.to_string() };
        EndpointMetrics {
            attempts: self.attempts.get_or_create(&labels).clone(),
            attempt_latency: self.attempt_latency.get_or_create(&labels).clone(),
            timeouts: self.timeouts.get_or_create(&labels).clone(),
            rejected: self.rejected.get_or_create(&labels).clone(),
            overflow: self.overflow.get_or_create(&labels).clone(),
        }
    }

    /// The count of connections opened to `endpoint`, resolved once for its pool.
    pub fn connections_opened(&self, endpoint: &str) -> Counter {
        self.connections_opened.get_or_create(&AddressLabels { endpoint: endpoint.to_string() }).clone()
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// One upstream's metrics: handles sharing their values with the registered families (a clone of
/// a prometheus-client metric is the same metric), so counting costs no hashing or locking.
#[derive(Clone, Debug)]
pub struct UpstreamMetrics {
    /// See [`Metrics::requests`].
    pub requests: Counter,
    /// See [`Metrics::upstream_refused`].
    pub refused: Counter,
    /// See [`Metrics::responses`].
    pub responses: ResponseCounters,
    /// See [`Metrics::failed`].
    pub failed: Counter,
    /// See [`Metrics::request_latency`].
    pub request_latency: Histogram,
    /// See [`Metrics::retries`].
    pub retries: Counter,
    /// See [`Metrics::hedges`].
    pub hedges: Counter,
    /// See [`Metrics::hedges_won`].
    pub hedges_won: Counter,
    /// See [`Metrics::budget_exhausted`].
    pub budget_exhausted: Gauge,
    /// See [`Metrics::hedge_gate`].
    pub hedge_gate: Gauge,
    /// See [`Metrics::ejections`].
    pub ejections: Counter,
    /// See [`Metrics::ejected`].
    pub ejected: Gauge,
    /// See [`Metrics::probes`].
    pub probes: Counter,
    /// See [`Metrics::endpoints`].
    pub endpoints: Gauge,
    /// See [`Metrics::discovery_errors`].
    pub discovery_errors: Counter,
    /// See [`Metrics::timeout_seconds`].
    pub timeout_seconds: Gauge<f64, AtomicU64>,
    /// See [`Metrics::answered_seconds`].
    pub answered_seconds: Counter<f64, AtomicU64>,
    /// See [`Metrics::answer_seconds`].
    pub answer_seconds: Counter<f64, AtomicU64>,
    /// See [`Metrics::timeout_headroom`].
    pub timeout_headroom: Histogram,
}

/// One endpoint's metrics, resolved like [`UpstreamMetrics`].
#[derive(Clone, Debug)]
pub struct EndpointMetrics {
    /// See [`Metrics::attempts`].
    pub attempts: Counter,
    /// See [`Metrics::attempt_latency`].
    pub attempt_latency: Histogram,
    /// See [`Metrics::timeouts`].
    pub timeouts: Counter,
    /// See [`Metrics::rejected`].
    pub rejected: Counter,
    /// See [`Metrics::overflow`].
    pub overflow: Counter,
}

/// Seconds as the float Prometheus histograms take.
pub fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}
