//! Speculative attempts (speculative-task.txt, after Spark's speculative execution): hedge k is sent
//! `k·patience` after the request started, while `k < attempts`; every attempt keeps running and
//! the first success wins.
//!
//! What it decides: when each hedge goes out. Without a `budget` it never refuses one; with one, a
//! [`HedgeBucket`] keeps hedges below `budget` per request (beside the shared retry budget the
//! [`Call`](crate::call::Call) asks first). The overall timeout of the blog's `speculatively(attempts, patience, timeout)` is the request's
//! deadline ([`ClientPolicy::deadline`](crate::call::ClientPolicy)), not part of this policy.

use super::{HedgeBucket, HedgePolicy};
use crate::Time;
use std::time::Duration;

/// Up to `attempts` attempts in all, the k-th hedge `k·patience` after the start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Speculative {
    attempts: u32,
    patience: Duration,
    budget: Option<HedgeBucket>,
}

impl Speculative {
    /// `attempts` attempts in all, the first included (0 and 1 both mean no hedge), spaced by
    /// `patience` (zero sends them all at the start), within `budget` if any.
    pub fn new(attempts: u32, patience: Duration, budget: Option<HedgeBucket>) -> Self {
        Speculative { attempts, patience, budget }
    }
}

impl HedgePolicy for Speculative {
    fn on_request(&mut self, _now: Time) {
        if let Some(budget) = &mut self.budget {
            budget.deposit();
        }
    }

    /// `k·patience` for hedge k < attempts; `None` past the last, or if the delay would overflow.
    fn delay(&mut self, _now: Time, hedge: u32) -> Option<Duration> {
        if hedge == 0 || hedge >= self.attempts {
            return None;
        }
        self.patience.checked_mul(hedge)
    }

    fn try_send(&mut self, _now: Time, _hedge: u32) -> bool {
        self.budget.as_mut().is_none_or(HedgeBucket::withdraw)
    }

    fn on_latency(&mut self, _now: Time, _latency: Duration) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn hedges_are_spaced_by_patience_up_to_attempts() {
        // The blog's test: 3 attempts, 30 ms patience.
        let mut s = Speculative::new(3, ms(30), None);
        s.on_request(Time::ZERO);
        assert_eq!(s.delay(Time::ZERO, 1), Some(ms(30)));
        assert_eq!(s.delay(ms(30), 2), Some(ms(60)));
        assert_eq!(s.delay(ms(60), 3), None);
        assert!(s.try_send(ms(30), 1));
        s.on_latency(ms(31), ms(1));
        assert!(s.try_send(ms(60), 2));
    }

    #[test]
    fn one_attempt_or_none_means_no_hedge() {
        assert_eq!(Speculative::new(1, ms(30), None).delay(Time::ZERO, 1), None);
        assert_eq!(Speculative::new(0, ms(30), None).delay(Time::ZERO, 1), None);
        assert_eq!(Speculative::new(3, ms(30), None).delay(Time::ZERO, 0), None);
    }

    #[test]
    fn zero_patience_sends_every_hedge_at_once_and_overflow_sends_none() {
        let mut s = Speculative::new(4, Duration::ZERO, None);
        assert_eq!((1..4).map(|k| s.delay(Time::ZERO, k)).collect::<Vec<_>>(), vec![Some(Duration::ZERO); 3]);
        assert_eq!(Speculative::new(3, Duration::MAX, None).delay(Time::ZERO, 2), None);
    }

    #[test]
    fn a_budget_limits_hedges_per_request() {
        // 10 % of requests: nine requests deposit 0.9 hedges, not enough; the tenth makes one.
        let mut s = Speculative::new(2, ms(30), Some(HedgeBucket::new(0.1)));
        (0..9).for_each(|_| s.on_request(Time::ZERO));
        assert!(!s.try_send(ms(30), 1));
        s.on_request(Time::ZERO);
        assert!(s.try_send(ms(30), 1));
        assert!(!s.try_send(ms(30), 1));
    }
}
