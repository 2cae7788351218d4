//! Sequential timeouts (adaptive-timeouts.txt §3.4): an increasing sequence `a_0, a_1, …`; attempt
//! n gets `a_n`, and once the sequence runs out the last value repeats.
//!
//! A retry after a timeout waits longer than the attempt before it, so a short rise in latency (load,
//! a slow replica) costs one retry instead of a string of timeouts, and a persistent failure shows
//! itself by outlasting the longest value. The values are used as given; the paper asks for an
//! increasing sequence but nothing here depends on it.

use super::{AttemptResult, TimeoutPolicy};
use crate::{Rng, Time};
use std::time::Duration;

/// Gives attempt n the n-th value of a fixed sequence (the last one repeats).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sequential {
    values: Vec<Duration>,
}

impl Sequential {
    /// Attempt n gets `values[min(n, len − 1)]`; an empty sequence means no timeout at all.
    pub fn new(values: Vec<Duration>) -> Self {
        Sequential { values }
    }

    /// The sequence.
    pub fn values(&self) -> &[Duration] {
        &self.values
    }

    /// The value for attempt number `attempt`.
    pub fn get(&self, attempt: u32) -> Option<Duration> {
        let i = (attempt as usize).min(self.values.len().saturating_sub(1));
        self.values.get(i).copied()
    }
}

impl TimeoutPolicy for Sequential {
    fn timeout(&mut self, _now: Time, attempt: u32, _rng: Rng<'_>) -> Option<Duration> {
        self.get(attempt)
    }

    fn on_result(&mut self, _: Time, _: u32, _: Option<Duration>, _: AttemptResult) {}

    fn current(&self) -> Option<Duration> {
        self.get(0)
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
    fn attempt_n_gets_the_nth_value_and_the_last_repeats() {
        let mut rng = Pcg64Mcg::new(7);
        let mut p = Sequential::new(vec![ms(10), ms(25), ms(60)]);
        assert_eq!(p.current(), Some(ms(10)));
        assert_eq!(p.timeout(Time::ZERO, 0, &mut rng), Some(ms(10)));
        assert_eq!(p.timeout(Time::ZERO, 1, &mut rng), Some(ms(25)));
        assert_eq!(p.timeout(Time::ZERO, 2, &mut rng), Some(ms(60)));
        assert_eq!(p.timeout(Time::ZERO, 3, &mut rng), Some(ms(60)));
        assert_eq!(p.timeout(Time::ZERO, u32::MAX, &mut rng), Some(ms(60)));
    }

    #[test]
    fn results_do_not_change_the_sequence() {
        let mut rng = Pcg64Mcg::new(7);
        let mut p = Sequential::new(vec![ms(10), ms(25)]);
        p.on_result(ms(10), 0, Some(ms(10)), AttemptResult::TimedOut(ms(10)));
        p.on_result(ms(12), 1, Some(ms(25)), AttemptResult::Answered(ms(2)));
        assert_eq!(p.timeout(ms(12), 0, &mut rng), Some(ms(10)));
        assert_eq!(p.values(), &[ms(10), ms(25)]);
    }

    #[test]
    fn an_empty_sequence_means_no_timeout() {
        let mut rng = Pcg64Mcg::new(7);
        let mut p = Sequential::new(Vec::new());
        assert_eq!(p.timeout(Time::ZERO, 0, &mut rng), None);
        assert_eq!(p.timeout(Time::ZERO, 5, &mut rng), None);
        assert_eq!(p.current(), None);
    }
}
