//! Percentile hedging (Dean & Barroso, "The Tail at Scale": "defer sending a secondary request until
//! the first request has been outstanding for more than the 95th-percentile expected latency"),
//! with the extra load held down by a token budget, as DESIGN.md asks ("patience from a live latency
//! percentile, limited by a budget").
//!
//! What it decides: hedge k goes out just after `k·p` (one nanosecond, [`PAST`]) after the request
//! started, where `p` is the `percentile` of the last `window` successful latencies (at least
//! `min_delay`), for k ≤ `max_hedges`; and whether a due hedge may really go: a [`HedgeBucket`]
//! holds hedges below `max_extra` per request over time while a burst of slow requests can still
//! be hedged.
//! Until `min_samples` latencies are in it does not hedge: a percentile of nothing would hedge
//! everything at once.
//!
//! Why just after and not at `k·p`: Dean and Barroso hedge a request "outstanding for *more than*"
//! the percentile. The percentile is one of the latencies seen, so when latencies repeat exactly
//! (a constant service time in the simulator, where time is exact) the typical attempt answers at
//! the very instant `p` and a hedge at `p` would go out for every request: the budget then goes to
//! requests that were on time and the slow ones find it empty (issue #15: p99.9 201 ms in the
//! simulator, 23 ms in the lab, whose real latencies never repeat to the nanosecond).

use super::{HedgeBucket, HedgePolicy};
use crate::config::{self, Check, ConfigError};
use crate::duration::text;
use crate::stats::{from_nanos, nanos, Window};
use crate::Time;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How far past `k·p` hedge k goes out: the smallest step of [`Time`], so that an attempt
/// answering at exactly the percentile is on time.
pub const PAST: Duration = Duration::from_nanos(1);

/// Percentile hedging's parameters; [`PercentileHedgeConfig::default`] gives the values in
/// brackets. A file may leave out any of them.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PercentileHedgeConfig {
    /// The latency percentile after which a hedge goes out, from 0 to 100 (95).
    pub percentile: f64,
    /// Hedges allowed per request, on average (0.05, so at most 5% extra attempts).
    pub max_extra: f64,
    /// Successful latencies kept (1000).
    pub window: usize,
    /// Latencies needed before hedging starts (20).
    pub min_samples: usize,
    /// Hedges per request at most (1).
    pub max_hedges: u32,
    /// The shortest hedge delay (zero).
    #[serde(with = "text")]
    pub min_delay: Duration,
}

impl PercentileHedgeConfig {
    /// Checks the parameters; the error names the field.
    pub fn validate(&self) -> Check {
        let p = self.percentile;
        if !(p.is_finite() && p > 0.0 && p < 100.0) {
            return Err(ConfigError::at("percentile", format!("expected a percentile between 0 and 100, got {p}")));
        }
        config::fraction("max_extra", self.max_extra)?;
        config::at_least_one("window", self.window as u64)?;
        config::at_least_one("max_hedges", self.max_hedges)
    }
}

impl Default for PercentileHedgeConfig {
    fn default() -> Self {
        PercentileHedgeConfig {
            percentile: 95.0,
            max_extra: 0.05,
            window: 1000,
            min_samples: 20,
            max_hedges: 1,
            min_delay: Duration::ZERO,
        }
    }
}

/// Hedges after a live latency percentile, within a token budget.
#[derive(Clone, Debug)]
pub struct PercentileHedge {
    config: PercentileHedgeConfig,
    latencies: Window,
    bucket: HedgeBucket,
}

impl PercentileHedge {
    /// Percentile hedging with an empty bucket and no latencies yet ([`HedgeBucket::new`] says
    /// how `max_extra` is clamped).
    pub fn new(config: PercentileHedgeConfig) -> Self {
        PercentileHedge { latencies: Window::new(config.window), bucket: HedgeBucket::new(config.max_extra), config }
    }

    /// The tokens in the bucket, in hedges.
    pub fn tokens(&self) -> f64 {
        self.bucket.tokens()
    }

    /// The current percentile (at least `min_delay`), once enough latencies are in: hedge k goes
    /// out once the request has waited longer than `k` times this.
    pub fn patience(&self) -> Option<Duration> {
        if self.latencies.len() < self.config.min_samples.max(1) {
            return None;
        }
        let p = self.latencies.quantile(self.config.percentile / 100.0)?;
        Some(from_nanos(p).max(self.config.min_delay))
    }
}

impl HedgePolicy for PercentileHedge {
    fn on_request(&mut self, _now: Time) {
        self.bucket.deposit();
    }

    fn delay(&mut self, _now: Time, hedge: u32) -> Option<Duration> {
        if hedge == 0 || hedge > self.config.max_hedges {
            return None;
        }
        Some(self.patience()?.checked_mul(hedge)?.saturating_add(PAST))
    }

    fn try_send(&mut self, _now: Time, _hedge: u32) -> bool {
        self.bucket.withdraw()
    }

    fn on_latency(&mut self, _now: Time, latency: Duration) {
        self.latencies.push(nanos(latency));
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

    /// Just past `v` ms: when a hedge due after `v` ms of waiting goes out.
    fn past(v: u64) -> Duration {
        ms(v) + PAST
    }

    /// A policy that has seen latencies 1..=100 ms.
    fn warmed(config: PercentileHedgeConfig) -> PercentileHedge {
        let mut h = PercentileHedge::new(config);
        (1..=100).for_each(|v| h.on_latency(Time::ZERO, ms(v)));
        h
    }

    #[test]
    fn no_hedge_until_enough_latencies() {
        let mut h = PercentileHedge::new(PercentileHedgeConfig::default());
        (1..20).for_each(|v| h.on_latency(Time::ZERO, ms(v)));
        assert_eq!(h.delay(Time::ZERO, 1), None);
        h.on_latency(Time::ZERO, ms(20));
        assert_eq!(h.delay(Time::ZERO, 1), Some(past(19)));
    }

    #[test]
    fn the_delay_is_the_live_percentile() {
        let mut h = warmed(PercentileHedgeConfig { max_hedges: 2, ..Default::default() });
        assert_eq!(h.delay(Time::ZERO, 1), Some(past(95)));
        assert_eq!(h.delay(Time::ZERO, 2), Some(past(190)));
        assert_eq!(h.delay(Time::ZERO, 3), None);
        assert_eq!(h.delay(Time::ZERO, 0), None);
        // The window slides: 1000 more latencies of 10 ms push the old ones out.
        (0..1000).for_each(|_| h.on_latency(Time::ZERO, ms(10)));
        assert_eq!(h.delay(Time::ZERO, 1), Some(past(10)));
    }

    #[test]
    fn an_attempt_answering_at_the_percentile_is_not_hedged() {
        // Every latency is 10 ms, so the percentile is 10 ms: a hedge at 10 ms would race the
        // typical answer, due at that very instant. It goes out only once 10 ms have passed.
        let mut h = PercentileHedge::new(PercentileHedgeConfig::default());
        (0..100).for_each(|_| h.on_latency(Time::ZERO, ms(10)));
        assert_eq!(h.patience(), Some(ms(10)));
        assert_eq!(h.delay(Time::ZERO, 1), Some(ms(10) + Duration::from_nanos(1)));
    }

    #[test]
    fn min_delay_is_a_floor() {
        let mut h = warmed(PercentileHedgeConfig { min_delay: ms(120), ..Default::default() });
        assert_eq!(h.delay(Time::ZERO, 1), Some(past(120)));
    }

    #[test]
    fn hedges_are_limited_to_max_extra_per_request() {
        let mut h = warmed(PercentileHedgeConfig::default());
        assert!(!h.try_send(Time::ZERO, 1));
        // 19 requests deposit 0.95 tokens: not enough; the 20th makes exactly one.
        (0..19).for_each(|_| h.on_request(Time::ZERO));
        assert!(!h.try_send(Time::ZERO, 1));
        h.on_request(Time::ZERO);
        assert!(h.try_send(Time::ZERO, 1));
        assert!(!h.try_send(Time::ZERO, 1));
        assert_eq!(h.tokens(), 0.0);
    }

    #[test]
    fn the_bucket_is_capped() {
        let mut h = warmed(PercentileHedgeConfig::default());
        (0..1000).for_each(|_| h.on_request(Time::ZERO));
        assert_eq!(h.tokens(), 10.0);
        assert_eq!((0..12).filter(|_| h.try_send(Time::ZERO, 1)).count(), 10);
    }

    #[test]
    fn degenerate_parameters_do_not_panic() {
        let config = PercentileHedgeConfig {
            percentile: f64::NAN,
            max_extra: f64::INFINITY,
            window: 0,
            min_samples: 0,
            max_hedges: u32::MAX,
            min_delay: Duration::MAX,
        };
        let mut h = PercentileHedge::new(config);
        assert_eq!(h.delay(Time::ZERO, 1), None);
        h.on_latency(Time::ZERO, ms(5));
        h.on_request(Time::ZERO);
        assert_eq!(h.tokens(), 10.0);
        assert_eq!(h.delay(Time::ZERO, 1), Some(Duration::MAX));
        assert_eq!(h.delay(Time::ZERO, 2), None);
        let mut never = PercentileHedge::new(PercentileHedgeConfig { max_extra: f64::NAN, ..Default::default() });
        never.on_request(Time::ZERO);
        assert!(!never.try_send(Time::ZERO, 1));
    }
}
