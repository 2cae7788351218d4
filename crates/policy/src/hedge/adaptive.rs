//! Adaptive hedging: a hedge once the request has waited longer than the live 96th percentile of
//! its upstream's recent request latencies, only while a load gate says the upstream has idle
//! capacity. The defaults are the recommendation: `hedge: {kind: adaptive}` needs no parameter.
//!
//! Sources and what each gives:
//! - **When** (Dean & Barroso, "The Tail at Scale", CACM 2013): "defer sending a secondary request
//!   until the first request has been outstanding for more than the 95th-percentile expected
//!   latency", which bounds the extra load near 5 %. Just past it ([`PAST`]), as `percentile`.
//!   The 96th by default: a percentile estimated from a window overshoots as often as it
//!   undershoots, and with the 95th the hedged share settled just above 5 % (5.06–5.10 % on
//!   examples/speculative.yaml, seeds 3–6; 4.05–4.10 % with the 96th).
//! - **Whether** (Primorac, Argyraki, Bugnion, "When to Hedge in Interactive Services", LÆDGE,
//!   NSDI 2021): a hedge helps only when it lands on idle capacity; under load the extra attempts
//!   queue, lengthen everyone's wait and make the tail worse. LÆDGE's coordinator sees idle
//!   workers; a caller does not, so the gate infers queueing from what the caller has, as TCP
//!   Vegas and concurrency limiters do: the median latency against its unloaded level (by Little's
//!   law, the caller's in-flight count over the learnt no-queueing concurrency `rate ×
//!   base latency` is the same ratio). While the recent median is within `max_inflation` (1.25)
//!   of the base, the typical request does not wait for a worker and a hedge finds one free; past
//!   it, hedging stops until the queue drains, and opens again only within half the margin
//!   (1.125), so a queue that drains for a moment does not let a burst of hedges refill it.
//! - **How much** (gRFC A6 retry throttling, Finagle's `RetryBudget`): no budget of its own. The
//!   edge's shared retry budget ([`crate::retry::RetryPolicy::budget_allows`], checked by the
//!   [`Call`](crate::call::Call)) caps retries and hedges together; the gate keeps hedges off
//!   while they could hurt, so a small private bucket (`percentile`'s) would only refuse the
//!   hedges of a burst of slow requests, the tail hedging exists for (issue #17).
//! - **Where**: the [`Call`](crate::call::Call) sends a hedge through the balancer with every
//!   endpoint the request tried excluded, so it goes to an endpoint other than those in flight
//!   while one is eligible.
//!
//! The latencies it learns are whole requests' (from the request's start to its success), not the
//! winning attempt's: a hedged request's latency is at least its hedge delay, so it counts as a
//! tail sample, and the hedged share settles at `100 − percentile` % of requests. (Winning hedges'
//! own latencies are fast draws and would pull the percentile down, hedging more and more.)
//!
//! The base latency is the lowest window median seen (recomputed every `min_samples` requests),
//! which relaxes upwards towards higher medians with time constant `base_memory` (5 min), so a
//! service that has really become slower reopens the gate after a few minutes, while a
//! utilisation surge of a minute keeps it shut. Until `min_samples` latencies are in, it does not
//! hedge. `max_inflation` 1.25 was chosen on examples/hedging.yaml (seeds 1–4 and 17), where the
//! bimodal store's median grows 8 % at 70 % utilisation and 31 % at 80 %.
//!
//! Where it falls short (docs/policies.md): when servers do not stop cancelled work, the gate
//! reacts too late to a latency that climbs, and the live percentile lags it, so hedges can still
//! feed a growing queue at 70–90 % utilisation.

use super::{HedgePolicy, RequestEnd, PAST};
use crate::config::{self, Check, ConfigError};
use crate::duration::text;
use crate::stats::{from_nanos, nanos, Window};
use crate::{Outcome, Time};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Adaptive hedging's parameters; [`AdaptiveHedgeConfig::default`] gives the values in brackets,
/// which are the recommendation. A file may leave out any of them.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdaptiveHedgeConfig {
    /// The percentile of recent request latencies after which a hedge goes out (96).
    pub percentile: f64,
    /// Request latencies kept for the percentile and the median (1000).
    pub window: usize,
    /// Latencies needed before hedging starts, and the spacing of base-latency updates (200).
    pub min_samples: usize,
    /// The gate is open while the recent median is at most this times the base latency (1.25).
    pub max_inflation: f64,
    /// How slowly the base latency follows a higher median (5 min).
    #[serde(with = "text")]
    pub base_memory: Duration,
}

impl Default for AdaptiveHedgeConfig {
    fn default() -> Self {
        AdaptiveHedgeConfig {
            percentile: 96.0,
            window: 1000,
            min_samples: 200,
            max_inflation: 1.25,
            base_memory: Duration::from_secs(300),
        }
    }
}

impl AdaptiveHedgeConfig {
    /// Checks the parameters; the error names the field.
    pub fn validate(&self) -> Check {
        let p = self.percentile;
        if !(p.is_finite() && p > 0.0 && p < 100.0) {
            return Err(ConfigError::at("percentile", format!("expected a percentile between 0 and 100, got {p}")));
        }
        config::at_least_one("window", self.window as u64)?;
        config::at_least_one("min_samples", self.min_samples as u64)?;
        config::at_least("max_inflation", self.max_inflation, 1.0)?;
        config::positive("base_memory", self.base_memory)
    }
}

/// Hedges past a live latency percentile while the upstream shows no queueing.
#[derive(Clone, Debug)]
pub struct AdaptiveHedge {
    config: AdaptiveHedgeConfig,
    latencies: Window,
    /// Latencies since the base was last updated.
    fresh: usize,
    /// The base (unloaded) median latency in nanoseconds, and when it was last updated.
    base: Option<(f64, Time)>,
    /// Whether the gate is open.
    open: bool,
}

impl AdaptiveHedge {
    /// Adaptive hedging that has seen nothing yet (so it does not hedge).
    pub fn new(config: AdaptiveHedgeConfig) -> Self {
        AdaptiveHedge { latencies: Window::new(config.window), fresh: 0, base: None, open: false, config }
    }

    /// The live percentile, once enough latencies are in: the hedge goes out once the request has
    /// waited longer than this.
    pub fn patience(&self) -> Option<Duration> {
        if self.latencies.len() < self.config.min_samples.max(1) {
            return None;
        }
        self.latencies.quantile(self.config.percentile / 100.0).map(from_nanos)
    }

    /// The recent median over the base latency (1 when unloaded), once both are known.
    pub fn inflation(&self) -> Option<f64> {
        let (base, _) = self.base?;
        Some(self.latencies.median()? / base)
    }

    /// Whether the load gate lets hedges out. Closed until enough latencies are in; it closes when
    /// the recent median exceeds `max_inflation` × the base latency, and opens again once the
    /// median is back within half that margin (hysteresis: a queue that only briefly drains
    /// does not let a burst of hedges refill it).
    pub fn gate_open(&self) -> bool {
        self.open
    }

    fn update_gate(&mut self) {
        let Some(x) = self.inflation() else { return };
        let reopen = 1.0 + (self.config.max_inflation - 1.0) / 2.0;
        self.open = if self.open { x <= self.config.max_inflation } else { x <= reopen };
    }

    /// Moves the base towards the current median: down at once, up by `elapsed / base_memory` of
    /// the gap (an exponential forgetting of old lows).
    fn update_base(&mut self, now: Time) {
        let Some(median) = self.latencies.median() else { return };
        self.base = Some(match self.base {
            Some((base, since)) if median > base => {
                let elapsed = now.saturating_sub(since).as_secs_f64();
                let step = (elapsed / self.config.base_memory.as_secs_f64()).min(1.0);
                (base + (median - base) * step, now)
            }
            _ => (median, now),
        });
    }
}

impl HedgePolicy for AdaptiveHedge {
    fn on_request(&mut self, _now: Time) {}

    /// Only one hedge per request, and only while the gate is open when the request starts.
    fn delay(&mut self, _now: Time, hedge: u32) -> Option<Duration> {
        if hedge != 1 || !self.gate_open() {
            return None;
        }
        Some(self.patience()?.saturating_add(PAST))
    }

    /// The gate is asked again when the hedge is due: it may have closed since the start.
    fn try_send(&mut self, _now: Time, _hedge: u32) -> bool {
        self.gate_open()
    }

    /// Attempt latencies are not used: the whole request's latency comes with [`Self::on_finish`].
    fn on_latency(&mut self, _now: Time, _latency: Duration) {}

    fn on_finish(&mut self, now: Time, end: RequestEnd) {
        if end.outcome != Outcome::Success {
            return;
        }
        self.latencies.push(nanos(end.elapsed));
        self.fresh += 1;
        if self.fresh >= self.config.min_samples.max(1) {
            self.fresh = 0;
            self.update_base(now);
        }
        self.update_gate();
    }

    fn gate(&self) -> Option<bool> {
        Some(self.gate_open())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn at(s: u64) -> Time {
        Time::from_secs(s)
    }

    fn success(elapsed: Duration) -> RequestEnd {
        RequestEnd { outcome: Outcome::Success, elapsed }
    }

    /// A small policy: window 10, base updated every 5 requests.
    fn small() -> AdaptiveHedge {
        AdaptiveHedge::new(AdaptiveHedgeConfig { window: 10, min_samples: 5, ..Default::default() })
    }

    fn feed(h: &mut AdaptiveHedge, now: Time, latencies: impl IntoIterator<Item = u64>) {
        latencies.into_iter().for_each(|v| h.on_finish(now, success(ms(v))));
    }

    #[test]
    fn no_hedge_until_min_samples_then_just_past_the_percentile() {
        let mut h = small();
        feed(&mut h, at(0), 1..=4);
        assert_eq!(h.delay(at(0), 1), None);
        assert!(!h.try_send(at(0), 1));
        assert_eq!(h.gate(), Some(false));
        // The fifth sets the base (median of 1..=5 = 3 ms) and opens the gate.
        feed(&mut h, at(0), [5]);
        assert_eq!(h.inflation(), Some(1.0));
        assert_eq!(h.delay(at(0), 1), Some(ms(5) + PAST));
        assert!(h.try_send(at(0), 1));
        // One hedge per request.
        assert_eq!(h.delay(at(0), 2), None);
        assert_eq!(h.delay(at(0), 0), None);
    }

    #[test]
    fn failures_and_attempt_latencies_teach_nothing() {
        let mut h = small();
        (0..20).for_each(|_| h.on_latency(at(0), ms(1)));
        (0..20).for_each(|_| h.on_finish(at(0), RequestEnd { outcome: Outcome::Error, elapsed: ms(1) }));
        assert_eq!(h.patience(), None);
        assert_eq!(h.gate(), Some(false));
    }

    #[test]
    fn the_gate_closes_when_the_median_inflates_past_the_bound_and_reopens_when_it_drains() {
        let mut h = small();
        // Unloaded: ten requests of 10 ms. Base 10 ms.
        feed(&mut h, at(0), [10; 10]);
        assert_eq!(h.inflation(), Some(1.0));
        assert!(h.gate_open());
        // Queueing: requests take 12 ms (1.2 × the base): still open.
        feed(&mut h, at(0), [12; 10]);
        assert_eq!(h.inflation(), Some(1.2));
        assert!(h.gate_open());
        // 13 ms is 1.3 × the base: closed; a request starting now gets no hedge, and one whose
        // hedge is due now is refused. The base did not follow (no time passed).
        feed(&mut h, at(0), [13; 10]);
        assert_eq!(h.inflation(), Some(1.3));
        assert_eq!(h.delay(at(0), 1), None);
        assert!(!h.try_send(at(0), 1));
        assert_eq!(h.gate(), Some(false));
        // Back to 12 ms: within the bound, but not within half its margin (1.125): still closed.
        feed(&mut h, at(0), [12; 10]);
        assert!(!h.gate_open());
        // The queue drains: back to 10 ms, the gate opens again.
        feed(&mut h, at(0), [10; 10]);
        assert!(h.gate_open());
    }

    #[test]
    fn the_base_drops_at_once_and_rises_with_base_memory() {
        let mut h = small();
        feed(&mut h, at(0), [20; 10]);
        feed(&mut h, at(0), [10; 10]);
        // Down at once to 10 ms.
        assert_eq!(h.inflation(), Some(1.0));
        // The service becomes 2× slower for good. 60 s later the base has moved 60/300 of the
        // way from 10 ms to 20 ms: 12 ms, and the gate is still closed (20/12 > 1.25).
        feed(&mut h, at(0), [20; 5]);
        feed(&mut h, at(60), [20; 5]);
        assert_eq!(h.base.map(|(b, _)| from_nanos(b)), Some(ms(12)));
        assert!(!h.gate_open());
        // After base_memory (300 s) more, the base has reached the new level and the gate opens.
        feed(&mut h, at(360), [20; 5]);
        assert_eq!(h.inflation(), Some(1.0));
        assert!(h.gate_open());
    }

    #[test]
    fn hedged_requests_count_as_tail_samples() {
        // 96 requests of 10 ms and 4 hedged ones that ended 40 ms after their start: the 96th
        // percentile stays 10 ms, so the hedged share stays 4 %.
        let mut h = AdaptiveHedge::new(AdaptiveHedgeConfig { window: 100, min_samples: 100, ..Default::default() });
        feed(&mut h, at(0), [10; 96]);
        (0..4).for_each(|_| h.on_finish(at(0), RequestEnd { outcome: Outcome::Success, elapsed: ms(40) }));
        assert_eq!(h.patience(), Some(ms(10)));
        assert_eq!(h.delay(at(0), 1), Some(ms(10) + PAST));
    }

    #[test]
    fn the_defaults_validate_and_bad_values_are_named() {
        assert_eq!(AdaptiveHedgeConfig::default().validate(), Ok(()));
        let bad = |c: AdaptiveHedgeConfig| c.validate().unwrap_err().path;
        assert_eq!(bad(AdaptiveHedgeConfig { percentile: 100.0, ..Default::default() }), "percentile");
        assert_eq!(bad(AdaptiveHedgeConfig { max_inflation: 0.5, ..Default::default() }), "max_inflation");
        assert_eq!(bad(AdaptiveHedgeConfig { min_samples: 0, ..Default::default() }), "min_samples");
        assert_eq!(bad(AdaptiveHedgeConfig { base_memory: Duration::ZERO, ..Default::default() }), "base_memory");
    }
}
