//! Exponential-backoff timeouts: the sequential timeouts `first·factorⁿ` for n < steps, after
//! which the last value repeats.
//!
//! This is the baseline adaptive-timeouts.txt §5.2 compares against: "a sequence whose first
//! element is 20% higher than the starting latency, whose factor is 2, and has 5 elements"
//! ([`ExpBackoff::paper`]). It never adapts: a lasting rise in latency above the first value makes
//! every request time out at least once (the paper's 49% timeouts on "slow increase").

use super::{AttemptResult, Sequential, TimeoutPolicy};
use crate::stats::{from_nanos, nanos};
use crate::{Rng, Time};
use std::time::Duration;

/// Attempt n gets `first·factor^min(n, steps − 1)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpBackoff {
    sequence: Sequential,
}

impl ExpBackoff {
    /// The sequence `first, first·factor, …` with `steps` elements (0 counts as 1). Values are
    /// rounded to the nanosecond and saturate at `u64::MAX` ns; a negative or NaN `factor` gives
    /// zero after the first element.
    pub fn new(first: Duration, factor: f64, steps: u32) -> Self {
        let values = (0..steps.max(1) as i32).map(|n| from_nanos(nanos(first) * factor.powi(n))).collect();
        ExpBackoff { sequence: Sequential::new(values) }
    }

    /// The paper's baseline (§5.2) for a service whose latency starts at `start_latency`: first
    /// element 20% above it, factor 2, 5 elements.
    pub fn paper(start_latency: Duration) -> Self {
        ExpBackoff::new(from_nanos(nanos(start_latency) * 1.2), 2.0, 5)
    }

    /// The sequence.
    pub fn values(&self) -> &[Duration] {
        self.sequence.values()
    }
}

impl TimeoutPolicy for ExpBackoff {
    fn timeout(&mut self, now: Time, attempt: u32, rng: Rng<'_>) -> Option<Duration> {
        self.sequence.timeout(now, attempt, rng)
    }

    fn on_result(&mut self, _: Time, _: u32, _: Option<Duration>, _: AttemptResult) {}

    fn current(&self) -> Option<Duration> {
        self.sequence.current()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_pcg::Pcg64Mcg;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn the_paper_baseline_starts_20_percent_above_and_doubles_five_times() {
        let p = ExpBackoff::paper(ms(100));
        assert_eq!(p.values(), &[ms(120), ms(240), ms(480), ms(960), ms(1920)]);
    }

    #[test]
    fn attempts_walk_the_sequence_and_the_last_value_repeats() {
        let mut rng = Pcg64Mcg::new(3);
        let mut p = ExpBackoff::new(ms(10), 3.0, 3);
        let got: Vec<_> = (0..5).map(|n| p.timeout(Time::ZERO, n, &mut rng)).collect();
        assert_eq!(got, vec![Some(ms(10)), Some(ms(30)), Some(ms(90)), Some(ms(90)), Some(ms(90))]);
        assert_eq!(p.current(), Some(ms(10)));
    }

    #[test]
    fn degenerate_parameters_do_not_panic() {
        assert_eq!(ExpBackoff::new(ms(10), 2.0, 0).values(), &[ms(10)]);
        assert_eq!(ExpBackoff::new(ms(10), -1.0, 2).values(), &[ms(10), Duration::ZERO]);
        assert_eq!(ExpBackoff::new(ms(10), f64::NAN, 2).values(), &[ms(10), Duration::ZERO]);
        let huge = ExpBackoff::new(Duration::MAX, 1e300, 2);
        assert_eq!(huge.values(), &[Duration::from_nanos(u64::MAX); 2]);
        assert_eq!(ExpBackoff::new(Duration::ZERO, 2.0, 2).values(), &[Duration::ZERO; 2]);
    }
}
