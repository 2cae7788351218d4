//! The open loop's schedule: each request's *intended* start, as an offset from the run's start.
//!
//! Why intended starts: a load generator that waits for slow responses before sending more (or
//! measures from when it got round to sending) hides exactly the stalls it should report; Gil
//! Tene named this *coordinated omission*. Like wrk2 and oha, tailguard fixes every request's
//! start time in advance, never moves it, and measures latency from it, so a request that was
//! due during a stall is charged for the whole wait.

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use std::time::Duration;

/// Intended start times at a constant rate or as a seeded Poisson process.
#[derive(Clone, Debug)]
pub struct Schedule {
    rate: f64,
    /// `Some` for a Poisson process: the source of its exponential gaps.
    poisson: Option<Pcg64>,
    index: u64,
    /// The next request's intended start, in seconds since the start of the run.
    next: f64,
}

impl Schedule {
    /// `rate` evenly spaced requests per second, the first at offset zero.
    pub fn constant(rate: f64) -> Self {
        Self { rate, poisson: None, index: 0, next: 0.0 }
    }

    /// A Poisson process of `rate` requests per second; the same seed gives the same times.
    pub fn poisson(rate: f64, seed: u64) -> Self {
        let mut schedule = Self { rate, poisson: Some(Pcg64::seed_from_u64(seed)), index: 0, next: 0.0 };
        schedule.next = schedule.gap();
        schedule
    }

    /// The next request's intended start, without consuming it.
    pub fn peek(&self) -> Duration {
        Duration::from_secs_f64(self.next)
    }

    /// Consumes the next intended start and returns it.
    pub fn advance(&mut self) -> Duration {
        let current = self.peek();
        self.index += 1;
        self.next = match self.poisson {
            // From the index, not by summing gaps, so rounding never drifts.
            None => self.index as f64 / self.rate,
            Some(_) => self.next + self.gap(),
        };
        current
    }

    /// One exponential gap with mean 1 / rate.
    fn gap(&mut self) -> f64 {
        let rng = self.poisson.as_mut().expect("only Poisson schedules draw gaps");
        // 1 - u lies in (0, 1], so the logarithm is finite.
        let u: f64 = rng.gen();
        -(1.0 - u).ln() / self.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_starts_are_evenly_spaced_from_zero() {
        let mut s = Schedule::constant(4.0);
        let starts: Vec<Duration> = (0..5).map(|_| s.advance()).collect();
        let ms: Vec<u128> = starts.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [0, 250, 500, 750, 1000]);
        assert_eq!(s.peek(), Duration::from_millis(1250));
    }

    #[test]
    fn peek_does_not_consume() {
        let mut s = Schedule::poisson(10.0, 3);
        let first = s.peek();
        assert_eq!(s.peek(), first);
        assert_eq!(s.advance(), first);
        assert!(s.peek() > first);
    }

    #[test]
    fn poisson_is_seeded_and_has_the_right_mean_rate() {
        let starts = |seed| {
            let mut s = Schedule::poisson(1000.0, seed);
            (0..10_000).map(|_| s.advance()).collect::<Vec<_>>()
        };
        let a = starts(7);
        assert_eq!(a, starts(7));
        assert_ne!(a, starts(8));
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
        let rate = 10_000.0 / a[9_999].as_secs_f64();
        assert!((950.0..1050.0).contains(&rate), "rate {rate}");
    }
}
