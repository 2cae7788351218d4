//! Open-loop arrivals: each request's *intended* start, as an offset from the run's start, at a
//! constant rate or as a seeded Poisson process. One schedule for the simulator (virtual time)
//! and the load generator (real time), so both offer the same arrivals for the same rate and seed.
//!
//! The times are fixed in advance and never moved: a load generator that waits for slow responses
//! before sending more (or measures from when it got round to sending) hides exactly the stalls it
//! should report; Gil Tene named this *coordinated omission*. Like wrk2 and oha, the load
//! generator sends each request at its intended start and measures latency from it.
//!
//! The first request is due at offset zero; each next one follows by a gap of 1 / rate (constant)
//! or an exponential gap of mean 1 / rate (Poisson), rounded to the nanosecond and added to the
//! previous start. The simulator's outputs depend on these exact times: change the arithmetic and
//! every result changes.

use crate::schema::Arrival;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use std::time::Duration;

/// Intended start times of open-loop requests, drawn one at a time.
#[derive(Clone, Debug)]
pub struct ArrivalSchedule {
    /// The mean gap, in seconds (the gap itself when constant).
    mean_gap: f64,
    /// `Some` for a Poisson process: the source of its exponential gaps.
    poisson: Option<Pcg64Mcg>,
    /// The next request's intended start.
    next: Duration,
}

impl ArrivalSchedule {
    /// `rate` evenly spaced requests per second, the first at offset zero.
    pub fn constant(rate: f64) -> Self {
        Self { mean_gap: 1.0 / rate, poisson: None, next: Duration::ZERO }
    }

    /// A Poisson process of `rate` requests per second, the first at offset zero; the same seed
    /// gives the same times.
    pub fn poisson(rate: f64, seed: u64) -> Self {
        Self { mean_gap: 1.0 / rate, poisson: Some(Pcg64Mcg::seed_from_u64(seed)), next: Duration::ZERO }
    }

    /// The schedule an experiment file's `open: {rate, arrival}` asks for.
    pub fn new(arrival: Arrival, rate: f64, seed: u64) -> Self {
        match arrival {
            Arrival::Constant => Self::constant(rate),
            Arrival::Poisson => Self::poisson(rate, seed),
        }
    }

    /// The next request's intended start, without consuming it.
    pub fn peek(&self) -> Duration {
        self.next
    }

    /// Consumes the next intended start and returns it.
    pub fn advance(&mut self) -> Duration {
        let current = self.next;
        let gap = match &mut self.poisson {
            None => self.mean_gap,
            // 1 - u lies in (0, 1], so the logarithm is finite and the gap not negative.
            Some(rng) => -self.mean_gap * (1.0 - rng.gen::<f64>()).ln(),
        };
        self.next = current + Duration::from_secs_f64(gap);
        current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nanos(schedule: &mut ArrivalSchedule, n: usize) -> Vec<u128> {
        (0..n).map(|_| schedule.advance().as_nanos()).collect()
    }

    #[test]
    fn constant_starts_are_evenly_spaced_from_zero() {
        let mut s = ArrivalSchedule::constant(4.0);
        assert_eq!(nanos(&mut s, 5), [0, 250_000_000, 500_000_000, 750_000_000, 1_000_000_000]);
        assert_eq!(s.peek(), Duration::from_millis(1250));
        // A gap that is no whole number of nanoseconds is rounded once per gap.
        let mut s = ArrivalSchedule::new(Arrival::Constant, 3.0, 9);
        assert_eq!(nanos(&mut s, 4), [0, 333_333_333, 666_666_666, 999_999_999]);
    }

    #[test]
    fn poisson_starts_are_exact_for_a_seed() {
        let mut s = ArrivalSchedule::poisson(100.0, 7);
        let expected = [0, 11_708_521, 18_175_589, 21_332_865, 48_067_151];
        assert_eq!(nanos(&mut s, 5), expected);
        assert_eq!(nanos(&mut ArrivalSchedule::new(Arrival::Poisson, 100.0, 7), 5), expected);
        assert_ne!(nanos(&mut ArrivalSchedule::poisson(100.0, 8), 5), expected);
    }

    #[test]
    fn peek_does_not_consume() {
        let mut s = ArrivalSchedule::poisson(10.0, 3);
        let first = s.peek();
        assert_eq!(s.peek(), first);
        assert_eq!(s.advance(), first);
        assert!(s.peek() > first);
    }

    #[test]
    fn poisson_has_the_right_mean_rate() {
        let mut s = ArrivalSchedule::poisson(1000.0, 7);
        let starts: Vec<Duration> = (0..10_001).map(|_| s.advance()).collect();
        assert!(starts.windows(2).all(|w| w[0] <= w[1]));
        let rate = 10_000.0 / starts[10_000].as_secs_f64();
        assert!((950.0..1050.0).contains(&rate), "rate {rate}");
    }
}
