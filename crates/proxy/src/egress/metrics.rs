//! Metrics hooks: what a request and its attempts add to the proxy's metrics (crate::metrics):
//! attempts, retries and hedges, timeouts, the timeout set, and a request's latency, answer
//! latency or failure.

use super::driver::Driver;
use crate::metrics::{seconds, EndpointMetrics, UpstreamMetrics};
use std::time::Duration;
use tailguard_policy::EndpointId;

/// A request's end: its latency, and the answering attempt's latency or a failure.
pub(super) fn request_done(m: &UpstreamMetrics, latency: Duration, answer: Option<Duration>) {
    let latency = seconds(latency);
    m.request_latency.observe(latency);
    match answer {
        Some(answer) => {
            m.answered_seconds.inc_by(latency);
            m.answer_seconds.inc_by(seconds(answer));
        }
        None => {
            m.failed.inc();
        }
    }
}

impl Driver<'_> {
    pub(super) fn count_send(&mut self, attempt: u32, endpoint: EndpointId, policy_timeout: Option<Duration>) {
        let m = &self.upstream.metrics;
        if attempt > 0 {
            // Another attempt still in flight means this one is speculative.
            if self.attempts.is_empty() {
                m.retries.inc();
            } else {
                m.hedges.inc();
                self.hedged.push(attempt);
            }
        }
        m.timeout_seconds.set(policy_timeout.map_or(0.0, seconds));
        self.metrics_endpoint(endpoint, |m| m.attempts.inc());
    }

    /// Attempt number `attempt` answered the request with success.
    pub(super) fn count_win(&self, attempt: u32) {
        if self.hedged.contains(&attempt) {
            self.upstream.metrics.hedges_won.inc();
        }
    }

    pub(super) fn metrics_endpoint<R>(&self, endpoint: EndpointId, f: impl FnOnce(&EndpointMetrics) -> R) {
        if let Some(e) = self.upstream.endpoint(endpoint) {
            f(&e.metrics);
        }
    }
}
