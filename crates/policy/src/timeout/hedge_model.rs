//! The expected cost of an attempt timeout when the timed-out attempt keeps running beside a fresh
//! one (`retry.hedge_on_timeout`), over a sample of latencies: what the adaptive timeout minimises.
//!
//! With the latency `X` of an attempt drawn from the sample and a timeout `t`, the request ends at
//! `L = min(X₁, t + X₂)`: the first attempt keeps running, the second races it. This is the
//! Optimizer's expected-latency model (adaptive-timeouts.txt §3.6) with `hedge_on_timeout`'s
//! semantics instead of a restart. `E[L]` alone only falls as `t` falls (firing at once is
//! fastest), so the second attempt's time is priced too: it runs for `(L − t)⁺`, and
//!
//! `J(t) = E[L] + cost·E[(L − t)⁺] = E[min(X, t)] + (1 + cost)·E[(L − t)⁺]`.
//!
//! With `cost` 1 (a second of the upstream's work weighs as a second of the caller's wait),
//! `dJ/dt = 0` where a fresh attempt started at `t` beats the running one with probability one
//! half: on a heavy tail `J` fires where a fresh attempt is as likely as not to win (around twice
//! the median on a log-normal of σ 1 or a Pareto of shape 1.5, a fifth to a quarter of attempts);
//! on a tight distribution no fresh attempt ever wins and `J` falls until the largest sample, so
//! the timeout sits just above the bulk; when attempts are lost, it fires just past the bulk.
//!
//! The candidates are the distinct samples thinned evenly by rank, as the Optimizer's; each is
//! evaluated exactly on the sample in `O(n log n)` with prefix sums.

/// Candidate timeouts evaluated at most (the sample values, thinned by rank).
const GRID: usize = 64;

/// The timeout minimising `J` over a sorted, non-empty sample (any unit), and its `J`; ties go
/// to the larger timeout (fewer extra attempts for the same cost). `None` for an empty sample.
pub fn best_timeout(sorted: &[f64], cost: f64) -> Option<(f64, f64)> {
    let model = Model::new(sorted);
    let mut best: Option<(f64, f64)> = None;
    for t in model.candidates(GRID).into_iter().rev() {
        let j = model.cost(t, cost);
        if best.is_none_or(|(_, b)| j < b) {
            best = Some((t, j));
        }
    }
    best
}

struct Model<'a> {
    sorted: &'a [f64],
    /// `prefix[i]` is the sum of the `i` smallest samples.
    prefix: Vec<f64>,
}

impl<'a> Model<'a> {
    fn new(sorted: &'a [f64]) -> Self {
        let mut prefix = Vec::with_capacity(sorted.len() + 1);
        prefix.push(0.0);
        for &x in sorted {
            prefix.push(prefix[prefix.len() - 1] + x);
        }
        Model { sorted, prefix }
    }

    /// `Σ_j min(a, x_j)`.
    fn sum_min(&self, a: f64) -> f64 {
        let below = self.sorted.partition_point(|&x| x <= a);
        self.prefix[below] + a * (self.sorted.len() - below) as f64
    }

    /// `J(t)` with the second attempt's time weighted by `cost`.
    fn cost(&self, t: f64, cost: f64) -> f64 {
        let n = self.sorted.len() as f64;
        let survivors = &self.sorted[self.sorted.partition_point(|&x| x <= t)..];
        let waited = self.sum_min(t) / n;
        let raced: f64 = survivors.iter().map(|&x| self.sum_min(x - t)).sum::<f64>() / (n * n);
        waited + (1.0 + cost) * raced
    }

    /// The distinct samples, thinned evenly by rank to at most `most` (the smallest and the largest
    /// always included).
    fn candidates(&self, most: usize) -> Vec<f64> {
        let mut distinct = self.sorted.to_vec();
        distinct.dedup();
        let n = distinct.len();
        if n <= most || most < 2 {
            return distinct;
        }
        (0..most).map(|i| distinct[(i * (n - 1) + (most - 1) / 2) / (most - 1)]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tight_sample_waits_for_its_largest_latency() {
        let sample: Vec<f64> = (0..100).map(|i| 100.0 + f64::from(i) / 10.0).collect();
        let (t, j) = best_timeout(&sample, 1.0).unwrap();
        assert_eq!(t, 109.9);
        // Nothing is raced: J is the mean.
        assert!((j - 104.95).abs() < 1e-9, "{j}");
    }

    #[test]
    fn a_rare_slow_mode_is_raced_at_the_fast_one() {
        // 9 in 10 at 10, 1 in 10 at 100. Firing at 10: E[min(X, 10)] = 10, the slow tenth races a
        // fresh attempt that ends at 20 with probability 0.9: E[(L − 10)⁺] = 0.1·(0.9·10 + 0.1·90).
        let mut sample = vec![10.0; 9];
        sample.push(100.0);
        let (t, j) = best_timeout(&sample, 1.0).unwrap();
        assert_eq!(t, 10.0);
        assert!((j - (10.0 + 2.0 * 0.1 * 18.0)).abs() < 1e-9, "{j}");
        // Waiting for the slow mode costs its mean, 19.
        assert!(j < 19.0);
    }

    #[test]
    fn lost_attempts_are_raced_just_past_the_bulk() {
        // 98 answers between 100 and 109.7, two lost (a 10 000 stands in for the deadline).
        let mut sample: Vec<f64> = (0..98).map(|i| 100.0 + f64::from(i) / 10.0).collect();
        sample.extend([10_000.0, 10_000.0]);
        let (t, _) = best_timeout(&sample, 1.0).unwrap();
        assert_eq!(t, 109.7);
    }

    #[test]
    fn a_higher_cost_fires_later() {
        // A Pareto-like sample: x_i = (1 − i/n)^(−1/1.5).
        let n = 256;
        let sample: Vec<f64> = (0..n).map(|i| (1.0 - f64::from(i) / f64::from(n)).powf(-1.0 / 1.5)).collect();
        let (cheap, _) = best_timeout(&sample, 1.0).unwrap();
        let (dear, _) = best_timeout(&sample, 4.0).unwrap();
        let median = sample[128];
        assert!(cheap > median && cheap < 3.0 * median, "{cheap} vs median {median}");
        assert!(dear > cheap, "{dear} vs {cheap}");
    }

    #[test]
    fn an_empty_sample_has_no_timeout() {
        assert_eq!(best_timeout(&[], 1.0), None);
    }
}
