//! Adaptive hedging: a hedge once the request has waited longer than a live high percentile of
//! its upstream's recent request latencies, while a load gate says the upstream has idle capacity
//! (and, with a callee that stops cancelled work, past the gate only for a request slower than
//! every recent one). The defaults are the recommendation: `hedge: {kind: adaptive}` needs no
//! parameter; a callee that cannot stop abandoned work is declared with `callee_cancels: false`.
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
//!   Vegas and concurrency limiters do: a recent latency quantile against its unloaded level (by
//!   Little's law, the caller's in-flight count over the learnt no-queueing concurrency is the
//!   same ratio), the *inflation*. Past `max_inflation` hedging stops until the queue drains, and
//!   opens again only within half the margin, so a queue that drains for a moment does not let a
//!   burst of hedges refill it.
//! - **How far, by callee** ([`AdaptiveRule`]): where the callee stops cancelled work (the
//!   default), a winning hedge frees the loser's worker and hedging the tail helps up to high
//!   load, so the percentile *slides*: the hedged share shrinks from `100 − percentile` % at no
//!   inflation to none as the window's median reaches 1.5 × its base, and while the gate is shut
//!   the percentile stays at the 100th: only a request slower than every one in the window (one
//!   stuck behind a stalled endpoint or its backlog) is hedged, and the loser it cancels gives its
//!   place back. Where the callee runs abandoned work to the end, every hedge adds its whole
//!   service time: the gate reads the window's 90th percentile (which rises before the median
//!   does) and shuts past 1.25 × its base, with a fixed percentile, and a shut gate stops hedging.
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
//! The base is the lowest value of the load signal seen (recomputed every `min_samples` requests),
//! which relaxes upwards towards higher values with time constant `base_memory` (5 min), so a
//! service that has really become slower reopens the gate after a few minutes, while a
//! utilisation surge of a minute keeps it shut. Until `min_samples` latencies are in, it does not
//! hedge. The rules and limits were chosen on examples/hedging.yaml (seeds 1–4 and 17) and
//! checked on seeds 101, 202 and 303 (docs/policies.md, crates/sim/tests/hedging.rs).

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
    /// The percentile of recent request latencies after which a hedge goes out with no queueing
    /// (96).
    pub percentile: f64,
    /// Request latencies kept for the percentile and the load signal (1000).
    pub window: usize,
    /// Latencies needed before hedging starts, and the spacing of base updates (200).
    pub min_samples: usize,
    /// Whether the callee stops the work of an attempt the caller cancels (true). Say `false` for
    /// a service that runs abandoned requests to the end: hedges then add their whole service
    /// time, and the gate becomes stricter ([`AdaptiveRule`]).
    pub callee_cancels: bool,
    /// The load signal's limit over its base: the gate shuts past it (1.5 when the callee
    /// cancels, where the hedged share slides to none at it; 1.25 when it does not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_inflation: Option<f64>,
    /// How slowly the base follows a higher load signal (5 min).
    #[serde(with = "text")]
    pub base_memory: Duration,
}

impl Default for AdaptiveHedgeConfig {
    fn default() -> Self {
        AdaptiveHedgeConfig {
            percentile: 96.0,
            window: 1000,
            min_samples: 200,
            callee_cancels: true,
            max_inflation: None,
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
        self.max_inflation.map_or(Ok(()), |x| config::at_least("max_inflation", x, 1.0))?;
        config::positive("base_memory", self.base_memory)
    }

    /// The rule for the declared callee.
    pub fn rule(&self) -> AdaptiveRule {
        if self.callee_cancels {
            AdaptiveRule::Sliding { max_inflation: self.max_inflation.unwrap_or(1.5) }
        } else {
            AdaptiveRule::Strict { max_inflation: self.max_inflation.unwrap_or(1.25) }
        }
    }
}

/// How the load gate reads queueing and what it does with it, chosen by
/// [`AdaptiveHedgeConfig::callee_cancels`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AdaptiveRule {
    /// The callee stops cancelled work: the load signal is the window's median, and the hedge
    /// percentile slides from `percentile` at no inflation to the 100th at `max_inflation`
    /// (linearly in the hedged share), past which the gate shuts and the percentile stays at the
    /// 100th until it opens again.
    Sliding { max_inflation: f64 },
    /// The callee runs abandoned work to the end: the load signal is the window's 90th percentile,
    /// which rises with the first queueing, and the gate shuts past `max_inflation`, stopping
    /// hedges; the hedge percentile stays `percentile`.
    Strict { max_inflation: f64 },
}

impl AdaptiveRule {
    fn max_inflation(self) -> f64 {
        match self {
            AdaptiveRule::Sliding { max_inflation } | AdaptiveRule::Strict { max_inflation } => max_inflation,
        }
    }

    /// The quantile of the window that measures load.
    fn signal_quantile(self) -> f64 {
        match self {
            AdaptiveRule::Sliding { .. } => 0.5,
            AdaptiveRule::Strict { .. } => 0.9,
        }
    }
}

/// Hedges past a live latency percentile while the upstream shows no queueing.
#[derive(Clone, Debug)]
pub struct AdaptiveHedge {
    config: AdaptiveHedgeConfig,
    rule: AdaptiveRule,
    latencies: Window,
    /// Latencies since the base was last updated.
    fresh: usize,
    /// The base (unloaded) load signal in nanoseconds, and when it was last updated.
    base: Option<(f64, Time)>,
    /// Whether the gate is open.
    open: bool,
}

impl AdaptiveHedge {
    /// Adaptive hedging that has seen nothing yet (so it does not hedge).
    pub fn new(config: AdaptiveHedgeConfig) -> Self {
        let rule = config.rule();
        AdaptiveHedge { latencies: Window::new(config.window), fresh: 0, base: None, open: false, rule, config }
    }

    /// The percentile the hedge waits for now: `percentile`, or with [`AdaptiveRule::Sliding`] the
    /// point that leaves `(100 − percentile) × (max_inflation − inflation) / (max_inflation − 1)` %
    /// of requests to hedge, and the 100th (slower than every request in the window) while the
    /// gate is shut.
    pub fn hedge_percentile(&self) -> f64 {
        let p = self.config.percentile;
        let AdaptiveRule::Sliding { max_inflation } = self.rule else { return p };
        if !self.open {
            return 100.0;
        }
        let x = self.inflation().unwrap_or(1.0);
        let room = if max_inflation > 1.0 { (max_inflation - x) / (max_inflation - 1.0) } else { f64::from(x <= 1.0) };
        100.0 - (100.0 - p) * room.clamp(0.0, 1.0)
    }

    /// The live percentile, once enough latencies are in: the hedge goes out once the request has
    /// waited longer than this.
    pub fn patience(&self) -> Option<Duration> {
        if self.latencies.len() < self.config.min_samples.max(1) {
            return None;
        }
        self.latencies.quantile(self.hedge_percentile() / 100.0).map(from_nanos)
    }

    /// The load signal (the window's median, or its 90th percentile with [`AdaptiveRule::Strict`])
    /// over its base (1 when unloaded), once both are known.
    pub fn inflation(&self) -> Option<f64> {
        let (base, _) = self.base?;
        Some(self.signal()? / base)
    }

    fn signal(&self) -> Option<f64> {
        self.latencies.quantile(self.rule.signal_quantile())
    }

    /// Whether the load gate is open. Closed until enough latencies are in; it closes when the
    /// inflation exceeds `max_inflation`, and opens again once it is back within half that margin
    /// (hysteresis: a queue that only briefly drains does not let a burst of hedges refill it).
    pub fn gate_open(&self) -> bool {
        self.open
    }

    /// Whether a hedge may go out now: while the gate is open, or with [`AdaptiveRule::Sliding`]
    /// once enough latencies are in, for a request slower than every one in the window (a shut
    /// gate stops the sliding percentile at the 100th, it does not stop hedging).
    fn hedges(&self) -> bool {
        match self.rule {
            AdaptiveRule::Sliding { .. } => self.latencies.len() >= self.config.min_samples.max(1),
            AdaptiveRule::Strict { .. } => self.open,
        }
    }

    fn update_gate(&mut self) {
        let Some(x) = self.inflation() else { return };
        let limit = self.rule.max_inflation();
        let reopen = 1.0 + (limit - 1.0) / 2.0;
        self.open = if self.open { x <= limit } else { x <= reopen };
    }

    /// Moves the base towards the current load signal: down at once, up by `elapsed /
    /// base_memory` of the gap (an exponential forgetting of old lows).
    fn update_base(&mut self, now: Time) {
        let Some(signal) = self.signal() else { return };
        self.base = Some(match self.base {
            Some((base, since)) if signal > base => {
                let elapsed = now.saturating_sub(since).as_secs_f64();
                let step = (elapsed / self.config.base_memory.as_secs_f64()).min(1.0);
                (base + (signal - base) * step, now)
            }
            _ => (signal, now),
        });
    }
}

impl HedgePolicy for AdaptiveHedge {
    fn on_request(&mut self, _now: Time) {}

    /// Only one hedge per request, past the percentile of the moment the request starts.
    fn delay(&mut self, _now: Time, hedge: u32) -> Option<Duration> {
        if hedge != 1 || !self.hedges() {
            return None;
        }
        Some(self.patience()?.saturating_add(PAST))
    }

    /// Asked again when the hedge is due: a [`AdaptiveRule::Strict`] gate may have shut since the
    /// start. (A sliding percentile near the gate's limit is already near the 100th.)
    fn try_send(&mut self, _now: Time, _hedge: u32) -> bool {
        self.hedges()
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

    fn learned(&self) -> bool {
        true
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
        // Queueing: requests take 14 ms (1.4 × the base): still open.
        feed(&mut h, at(0), [14; 10]);
        assert_eq!(h.inflation(), Some(1.4));
        assert!(h.gate_open());
        // 16 ms is 1.6 × the base, past the default limit 1.5: closed, and only a request slower
        // than every one in the window (16 ms) is hedged. The base did not follow (no time
        // passed).
        feed(&mut h, at(0), [16; 10]);
        assert_eq!(h.inflation(), Some(1.6));
        assert_eq!(h.gate(), Some(false));
        assert_eq!(h.hedge_percentile(), 100.0);
        assert_eq!(h.delay(at(0), 1), Some(ms(16) + PAST));
        assert!(h.try_send(at(0), 1));
        // Back to 14 ms: within the bound, but not within half its margin (1.25): still closed.
        feed(&mut h, at(0), [14; 10]);
        assert!(!h.gate_open());
        assert_eq!(h.hedge_percentile(), 100.0);
        // The queue drains to 12 ms, the gate opens again: 1.2 × the base, the 97.6th percentile.
        feed(&mut h, at(0), [12; 10]);
        assert!(h.gate_open());
        assert!((h.hedge_percentile() - 97.6).abs() < 1e-9, "{}", h.hedge_percentile());
    }

    /// A policy with a window of 100, the base set every 100 requests, fed 1..=100 ms at time 0
    /// (base: the median 50 ms, or the 90th percentile 90 ms without cancellation).
    fn hundred(callee_cancels: bool) -> AdaptiveHedge {
        let config = AdaptiveHedgeConfig { window: 100, min_samples: 100, callee_cancels, ..Default::default() };
        let mut h = AdaptiveHedge::new(config);
        feed(&mut h, at(0), 1..=100);
        h
    }

    #[test]
    fn the_hedged_share_slides_to_none_as_the_median_reaches_one_and_a_half_times_its_base() {
        let mut h = hundred(true);
        assert_eq!(h.rule, AdaptiveRule::Sliding { max_inflation: 1.5 });
        // No inflation: the 96th percentile, 4 % of requests hedged.
        assert_eq!(h.inflation(), Some(1.0));
        assert_eq!(h.hedge_percentile(), 96.0);
        assert_eq!(h.delay(at(0), 1), Some(ms(96) + PAST));
        // Every latency 10 ms slower (11..=110): the median is 60 ms, 1.2 × its base, so 0.6 of the
        // room is left: 2.4 % hedged, past the 97.6th percentile (the 98th sample, 108 ms).
        feed(&mut h, at(0), 11..=110);
        assert_eq!(h.inflation(), Some(1.2));
        assert!((h.hedge_percentile() - 97.6).abs() < 1e-9, "{}", h.hedge_percentile());
        assert_eq!(h.delay(at(0), 1), Some(ms(108) + PAST));
        // 26..=125: the median is 75 ms, 1.5 × the base: the gate is still open but only a request
        // slower than every one in the window (125 ms) is hedged.
        feed(&mut h, at(0), 26..=125);
        assert_eq!(h.inflation(), Some(1.5));
        assert_eq!(h.hedge_percentile(), 100.0);
        assert_eq!(h.delay(at(0), 1), Some(ms(125) + PAST));
        // Past the limit the gate shuts and the percentile stays at the 100th: a request stuck
        // behind a stalled endpoint is still hedged. The gate reopens within half the margin (1.25
        // × the base).
        feed(&mut h, at(0), 31..=130);
        assert!(!h.gate_open());
        assert_eq!(h.delay(at(0), 1), Some(ms(130) + PAST));
        feed(&mut h, at(0), 21..=120);
        assert_eq!(h.inflation(), Some(1.4));
        assert!(!h.gate_open());
        assert_eq!(h.delay(at(0), 1), Some(ms(120) + PAST));
        feed(&mut h, at(0), 11..=110);
        assert_eq!(h.delay(at(0), 1), Some(ms(108) + PAST));
    }

    #[test]
    fn a_callee_that_does_not_cancel_gets_a_fixed_percentile_gated_on_the_ninetieth() {
        let mut h = hundred(false);
        assert_eq!(h.rule, AdaptiveRule::Strict { max_inflation: 1.25 });
        // 11..=110: the 90th percentile is 100 ms, 1.11 × its base of 90 ms; the hedge still waits
        // for the 96th percentile (106 ms).
        feed(&mut h, at(0), 11..=110);
        assert_eq!(h.inflation(), Some(100.0 / 90.0));
        assert_eq!(h.hedge_percentile(), 96.0);
        assert_eq!(h.delay(at(0), 1), Some(ms(106) + PAST));
        // The median is unchanged but the slowest tenth is slower: a cancelling callee's gate stays
        // open, this one shuts (the 90th percentile, 116 ms, is 1.29 × its base).
        let mut cancelling = hundred(true);
        let tail = (1..=89).chain([116; 11]);
        feed(&mut cancelling, at(0), tail.clone());
        feed(&mut h, at(0), 1..=100);
        feed(&mut h, at(0), tail);
        assert_eq!(cancelling.inflation(), Some(1.0));
        assert!(cancelling.gate_open());
        assert_eq!(h.inflation(), Some(116.0 / 90.0));
        assert_eq!(h.delay(at(0), 1), None);
        assert!(!h.try_send(at(0), 1));
    }

    #[test]
    fn the_callee_is_declared_once_and_the_limit_can_still_be_set() {
        let parse = |yaml: &str| serde_yaml_ng::from_str::<AdaptiveHedgeConfig>(yaml).unwrap().rule();
        assert_eq!(parse("{}"), AdaptiveRule::Sliding { max_inflation: 1.5 });
        assert_eq!(parse("{callee_cancels: false}"), AdaptiveRule::Strict { max_inflation: 1.25 });
        assert_eq!(parse("{callee_cancels: false, max_inflation: 1.4}"), AdaptiveRule::Strict { max_inflation: 1.4 });
        assert_eq!(parse("{max_inflation: 1.75}"), AdaptiveRule::Sliding { max_inflation: 1.75 });
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
        assert_eq!(bad(AdaptiveHedgeConfig { max_inflation: Some(0.5), ..Default::default() }), "max_inflation");
        assert_eq!(bad(AdaptiveHedgeConfig { min_samples: 0, ..Default::default() }), "min_samples");
        assert_eq!(bad(AdaptiveHedgeConfig { base_memory: Duration::ZERO, ..Default::default() }), "base_memory");
    }
}
