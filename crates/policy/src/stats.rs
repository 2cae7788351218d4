//! Small estimators the adaptive policies share: a sliding [`Window`] of the last N samples with
//! exact quantiles, and an exponentially weighted moving average ([`Ewma`]).
//!
//! Both work on `f64` so they serve latencies and dimensionless ratios alike. Latencies go in as
//! nanoseconds ([`nanos`]) and come back out with [`from_nanos`]: whole nanoseconds are exact in an
//! `f64` up to 2^53 ns (104 days), so quantiles and means of latencies are exact too.
//! Neither estimator reads a clock; a caller that wants time-based decay passes its own weights.

use std::collections::VecDeque;
use std::time::Duration;

/// A duration as `f64` nanoseconds.
pub fn nanos(d: Duration) -> f64 {
    d.as_nanos() as f64
}

/// `f64` nanoseconds as a duration, rounded to the nearest nanosecond; negative values and NaN
/// give zero, values beyond `u64::MAX` nanoseconds (584 years) saturate there.
pub fn from_nanos(ns: f64) -> Duration {
    // `as` saturates and maps NaN to 0, so this never panics.
    Duration::from_nanos(ns.round() as u64)
}

/// The last `cap` samples pushed, with their mean and quantiles.
///
/// Keeps the samples both in arrival order (to evict the oldest) and sorted (so a quantile is one
/// index). A push costs O(cap) memory moves, a quantile O(1): good for the windows of a few hundred
/// to a few thousand samples the policies use, queried once per request.
#[derive(Clone, Debug)]
pub struct Window {
    cap: usize,
    order: VecDeque<f64>,
    sorted: Vec<f64>,
}

impl Window {
    /// A window of the last `cap` samples; a capacity of 0 is treated as 1.
    pub fn new(cap: usize) -> Self {
        let cap = cap.max(1);
        Window { cap, order: VecDeque::with_capacity(cap), sorted: Vec::with_capacity(cap) }
    }

    /// Adds a sample, evicting the oldest when full. Non-finite samples are ignored.
    pub fn push(&mut self, x: f64) {
        if !x.is_finite() {
            return;
        }
        let at = self.sorted.partition_point(|v| v.total_cmp(&x).is_le());
        let evicted = if self.order.len() == self.cap { self.order.pop_front() } else { None };
        self.order.push_back(x);
        match evicted {
            // The evicted sample's place and the new one's are joined by shifting only what lies
            // between them (as removing, then inserting, would leave it).
            Some(old) => {
                let i = self.sorted.partition_point(|v| v.total_cmp(&old).is_lt());
                if at > i {
                    self.sorted.copy_within(i + 1..at, i);
                    self.sorted[at - 1] = x;
                } else {
                    self.sorted.copy_within(at..i, at + 1);
                    self.sorted[at] = x;
                }
            }
            None => self.sorted.insert(at, x),
        }
    }

    /// The number of samples held (at most the capacity).
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether no sample is held.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The capacity.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Forgets every sample.
    pub fn clear(&mut self) {
        self.order.clear();
        self.sorted.clear();
    }

    /// The `q`-quantile by nearest rank: the smallest sample with at least a fraction `q` of the
    /// samples at or below it (`q` is clamped to `[0, 1]`; NaN counts as 0). `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let n = self.sorted.len();
        let rank = (q.clamp(0.0, 1.0) * n as f64).ceil() as usize;
        self.sorted.get(rank.clamp(1, n.max(1)) - 1).copied()
    }

    /// The median (the 0.5-quantile by nearest rank, so always one of the samples).
    pub fn median(&self) -> Option<f64> {
        self.quantile(0.5)
    }

    /// The arithmetic mean, `None` when empty.
    pub fn mean(&self) -> Option<f64> {
        let n = self.order.len();
        (n > 0).then(|| self.order.iter().sum::<f64>() / n as f64)
    }

    /// The samples in ascending order.
    pub fn sorted(&self) -> &[f64] {
        &self.sorted
    }

    /// The samples from oldest to newest.
    pub fn iter(&self) -> impl Iterator<Item = f64> + '_ {
        self.order.iter().copied()
    }
}

/// An exponentially weighted moving average: `value ← value + alpha·(x − value)`, seeded by the
/// first sample (so it has no bias towards an arbitrary start value).
#[derive(Clone, Debug, PartialEq)]
pub struct Ewma {
    alpha: f64,
    value: Option<f64>,
}

impl Ewma {
    /// An average that gives each new sample weight `alpha`, clamped to `[0, 1]` (NaN counts as 1:
    /// the average is the last sample).
    pub fn new(alpha: f64) -> Self {
        let alpha = if alpha.is_nan() { 1.0 } else { alpha.clamp(0.0, 1.0) };
        Ewma { alpha, value: None }
    }

    /// Adds a sample and returns the new average. Non-finite samples are ignored.
    pub fn update(&mut self, x: f64) -> Option<f64> {
        if x.is_finite() {
            self.value = Some(match self.value {
                Some(v) => v + self.alpha * (x - v),
                None => x,
            });
        }
        self.value
    }

    /// The current average, `None` before the first sample.
    pub fn value(&self) -> Option<f64> {
        self.value
    }

    /// Replaces the average by `x` (for example when a regime change is detected).
    pub fn set(&mut self, x: f64) {
        if x.is_finite() {
            self.value = Some(x);
        }
    }

    /// Forgets the average.
    pub fn reset(&mut self) {
        self.value = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(cap: usize, xs: &[f64]) -> Window {
        let mut w = Window::new(cap);
        xs.iter().for_each(|&x| w.push(x));
        w
    }

    #[test]
    fn empty_window_has_no_statistics() {
        let w = Window::new(4);
        assert_eq!(w.quantile(0.5), None);
        assert_eq!(w.mean(), None);
        assert!(w.is_empty());
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let w = window(10, &[5.0, 1.0, 4.0, 2.0, 3.0]);
        assert_eq!(w.quantile(0.0), Some(1.0));
        assert_eq!(w.quantile(0.2), Some(1.0));
        assert_eq!(w.quantile(0.21), Some(2.0));
        assert_eq!(w.median(), Some(3.0));
        assert_eq!(w.quantile(0.95), Some(5.0));
        assert_eq!(w.quantile(1.0), Some(5.0));
        // Out-of-range and NaN quantiles are clamped.
        assert_eq!(w.quantile(7.0), Some(5.0));
        assert_eq!(w.quantile(-1.0), Some(1.0));
        assert_eq!(w.quantile(f64::NAN), Some(1.0));
        assert_eq!(w.mean(), Some(3.0));
    }

    #[test]
    fn a_full_window_stays_sorted_as_a_sort_would_leave_it() {
        use rand::{Rng, SeedableRng};
        // Repeated values and both zeros, so equal samples and their order count.
        let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(3);
        for cap in [1, 2, 3, 50] {
            let mut w = Window::new(cap);
            for _ in 0..500 {
                let x = match rng.gen_range(0..12u32) {
                    0 => -0.0,
                    1 => 0.0,
                    k => f64::from(k % 5),
                };
                w.push(x);
                let mut expected: Vec<f64> = w.iter().collect();
                expected.sort_by(f64::total_cmp);
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(w.sorted()), bits(&expected), "cap {cap}");
            }
        }
    }

    #[test]
    fn window_evicts_the_oldest_sample() {
        let w = window(3, &[10.0, 1.0, 2.0, 3.0]);
        assert_eq!(w.len(), 3);
        assert_eq!(w.sorted(), &[1.0, 2.0, 3.0]);
        assert_eq!(w.iter().collect::<Vec<_>>(), vec![1.0, 2.0, 3.0]);
        assert_eq!(w.quantile(1.0), Some(3.0));
        assert_eq!(w.mean(), Some(2.0));
    }

    #[test]
    fn window_evicts_one_of_equal_samples() {
        let w = window(2, &[2.0, 2.0, 1.0]);
        assert_eq!(w.sorted(), &[1.0, 2.0]);
    }

    #[test]
    fn window_ignores_non_finite_samples_and_zero_capacity() {
        let mut w = window(0, &[f64::NAN, f64::INFINITY, 4.0, 6.0]);
        assert_eq!(w.capacity(), 1);
        assert_eq!(w.sorted(), &[6.0]);
        w.clear();
        assert!(w.is_empty());
    }

    #[test]
    fn durations_round_trip_through_nanoseconds() {
        let d = Duration::new(3, 141_592_653);
        assert_eq!(from_nanos(nanos(d)), d);
        assert_eq!(from_nanos(-5.0), Duration::ZERO);
        assert_eq!(from_nanos(f64::NAN), Duration::ZERO);
        assert_eq!(from_nanos(f64::INFINITY), Duration::from_nanos(u64::MAX));
        assert_eq!(from_nanos(2.5), Duration::from_nanos(3));
    }

    #[test]
    fn ewma_starts_at_the_first_sample_and_moves_by_alpha() {
        let mut e = Ewma::new(0.25);
        assert_eq!(e.value(), None);
        assert_eq!(e.update(8.0), Some(8.0));
        assert_eq!(e.update(16.0), Some(10.0));
        assert_eq!(e.update(f64::NAN), Some(10.0));
        e.set(2.0);
        assert_eq!(e.update(6.0), Some(3.0));
        e.reset();
        assert_eq!(e.value(), None);
    }

    #[test]
    fn ewma_clamps_alpha() {
        let mut e = Ewma::new(f64::NAN);
        e.update(1.0);
        assert_eq!(e.update(5.0), Some(5.0));
        let mut e = Ewma::new(-3.0);
        e.update(1.0);
        assert_eq!(e.update(5.0), Some(1.0));
    }
}
