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

use crate::tail_model::{self, Race, Survival};
use std::collections::VecDeque;

/// Candidate timeouts evaluated at most (the sample values, thinned by rank).
const GRID: usize = 64;

/// The last `cap` attempt latencies, each answered or censored: the caller stopped waiting
/// before an answer (another attempt won, or it was abandoned), so the latency is at least that.
/// With `hedge_on_timeout` the slow attempts that lose their race are never answered: without
/// their lower bounds the sample would lose its tail and the timeout would drift up.
///
/// The latencies are kept in arrival order (to evict the oldest) and in the Kaplan–Meier order
/// (ascending, answers before bounds at the same value), so a reading ([`Sample::read_into`]) is
/// one pass, not a sort. The order takes the latencies pushed and evicted since the last reading
/// in one merge when read, so a push costs no memory moves (a reading comes every few pushes).
#[derive(Clone, Debug)]
pub struct Sample {
    cap: usize,
    observed: VecDeque<(f64, bool)>,
    /// In the Kaplan–Meier order: the latencies held at the last reading (or merge).
    sorted: Vec<(f64, bool)>,
    /// Pushed since, and still held.
    added: Vec<(f64, bool)>,
    /// Evicted since, out of `sorted`.
    removed: Vec<(f64, bool)>,
    /// Room for the merge.
    merged: Vec<(f64, bool)>,
}

/// The Kaplan–Meier order: ascending latencies, answers before bounds at the same value (a bound
/// there was still at risk). Two latencies it calls equal are the same bits.
fn km_order(a: &(f64, bool), b: &(f64, bool)) -> std::cmp::Ordering {
    a.0.total_cmp(&b.0).then(b.1.cmp(&a.1))
}

/// Pushes and evictions held for a merge: beyond the larger of this and the sample's size a push
/// merges them at once, else the next reading does. A merge is a pass over the whole sample, and
/// the adaptive timeout reads at most every 50 ms: at thousands of answers a second, merging
/// every 32 pushes was 0.6 % of the egress's CPU, merging at readings 0.2 % (perf, CHANGELOG).
const UNMERGED: usize = 64;

impl Sample {
    /// An empty sample keeping the last `cap` latencies.
    pub fn new(cap: usize) -> Self {
        let cap = cap.max(1);
        Sample {
            cap,
            observed: VecDeque::with_capacity(cap),
            sorted: Vec::with_capacity(cap),
            added: Vec::with_capacity(cap.max(UNMERGED) + 1),
            removed: Vec::with_capacity(cap.max(UNMERGED) + 1),
            merged: Vec::with_capacity(cap),
        }
    }

    /// A latency, `answered` or a lower bound.
    pub fn push(&mut self, x: f64, answered: bool) {
        if self.observed.len() == self.cap {
            if let Some(old) = self.observed.pop_front() {
                // `added` holds the latest pushes, so the oldest latency held is among them only
                // when every latency held is (a sample smaller than a merge's batch).
                let unmerged = if self.added.len() >= self.cap {
                    self.added.iter().position(|a| km_order(a, &old).is_eq())
                } else {
                    None
                };
                match unmerged {
                    Some(i) => drop(self.added.swap_remove(i)),
                    None => self.removed.push(old),
                }
            }
        }
        let new = (x, answered);
        self.observed.push_back(new);
        self.added.push(new);
        if self.added.len() + self.removed.len() > self.cap.max(UNMERGED) {
            self.merge();
        }
    }

    /// Brings `sorted` up to date: every latency held, in order.
    fn merge(&mut self) {
        if self.added.is_empty() && self.removed.is_empty() {
            return;
        }
        self.added.sort_unstable_by(km_order);
        self.removed.sort_unstable_by(km_order);
        let (mut added, mut removed) = (self.added.iter().peekable(), self.removed.iter().peekable());
        self.merged.clear();
        let mut rest = &self.sorted[..];
        while let Some((held, after)) = rest.split_first() {
            // The held latencies before the next eviction and up to the next push go over in one
            // copy (a sample of a thousand takes a few dozen pushes and evictions between two
            // readings).
            let (next_removed, next_added) = (removed.peek().copied(), added.peek().copied());
            let run = rest.partition_point(|h| {
                next_removed.is_none_or(|r| km_order(h, r).is_lt())
                    && next_added.is_none_or(|a| !km_order(a, h).is_lt())
            });
            if run > 0 {
                self.merged.extend_from_slice(&rest[..run]);
                rest = &rest[run..];
                continue;
            }
            rest = after;
            // Every evicted latency is in `sorted`, and equal ones are the same bits.
            if removed.next_if(|r| km_order(r, held).is_eq()).is_some() {
                continue;
            }
            while let Some(new) = added.next_if(|a| km_order(a, held).is_lt()) {
                self.merged.push(*new);
            }
            self.merged.push(*held);
        }
        self.merged.extend(added);
        debug_assert!(removed.next().is_none(), "an evicted latency was not held");
        std::mem::swap(&mut self.sorted, &mut self.merged);
        self.added.clear();
        self.removed.clear();
    }

    /// Latencies held.
    pub fn len(&self) -> usize {
        self.observed.len()
    }

    /// The largest answered latency held: unlike the distribution's largest value, lower bounds
    /// cannot raise it, so attempts given up in an outage do not.
    pub fn largest_answered(&mut self) -> Option<f64> {
        self.merge();
        self.sorted.iter().rev().find(|&&(x, answered)| answered && !x.is_nan()).map(|&(x, _)| x)
    }

    /// The sample's distribution and survival now.
    #[cfg(test)]
    fn estimate(&mut self) -> Estimate {
        let mut estimate = Estimate::default();
        self.read_into(&mut estimate);
        estimate
    }

    /// Makes `estimate` [`Sample::estimate`], in the room it has (no allocation once it has held
    /// a full sample).
    pub fn read_into(&mut self, estimate: &mut Estimate) {
        self.merge();
        estimate.len = self.len();
        let distribution = &mut estimate.distribution;
        // The Kaplan–Meier estimate: the answered values with their probabilities; what it
        // cannot place (beyond the largest latency, when that one is censored) goes to that
        // latency, a lower bound, in the distribution, and counts as lost in the survival.
        distribution.clear();
        let finite = |&&(x, _): &&(f64, bool)| x.is_finite();
        let (mut survival, mut at_risk) = (1.0, self.sorted.iter().filter(finite).count() as f64);
        for &(x, answered) in self.sorted.iter().filter(finite) {
            if answered {
                let mass = survival / at_risk;
                survival -= mass;
                match distribution.last_mut() {
                    Some(last) if last.0 == x => last.1 += mass,
                    _ => distribution.push((x, mass)),
                }
            }
            at_risk -= 1.0;
        }
        let unplaced = if survival > 1e-12 { survival } else { 0.0 };
        estimate.survival.refill(distribution, unplaced);
        if unplaced > 1e-12 {
            let largest = self.sorted.iter().rfind(finite).map(|&(x, _)| x);
            match distribution.last_mut() {
                Some(last) if Some(last.0) == largest => last.1 += unplaced,
                _ => distribution.extend(largest.map(|x| (x, unplaced))),
            }
        }
        let mut cumulative = 0.0;
        estimate.cumulative.clear();
        estimate.cumulative.extend(distribution.iter().map(|&(_, p)| {
            cumulative += p;
            cumulative
        }));
    }
}

/// One reading of a [`Sample`] ([`Sample::read_into`]): its distribution, the Kaplan–Meier
/// estimate as sorted values with their probabilities, what it cannot place (beyond the largest
/// latency, when that one is censored) given to that latency, a lower bound; and the survival of
/// an attempt's latency for [`tail_model`], what it cannot place counted as never answering (an
/// attempt abandoned beyond every answer is taken as lost). With room for the minimisations read
/// from it, which a policy keeps from one reading to the next.
#[derive(Clone, Debug, Default)]
pub struct Estimate {
    distribution: Vec<(f64, f64)>,
    /// The distribution's cumulative probabilities, for its quantiles.
    cumulative: Vec<f64>,
    survival: Survival,
    /// Latencies in the sample.
    len: usize,
    candidates: Vec<f64>,
    moments: Vec<(f64, f64)>,
}

impl Estimate {
    /// Whether the sample held no latency.
    pub fn is_empty(&self) -> bool {
        self.distribution.is_empty()
    }

    /// The survival of an attempt's latency.
    pub fn survival(&self) -> &Survival {
        &self.survival
    }

    /// The timeout racing attempts as `race` says ([`tail_model::best_timeout`]), among the
    /// sample's values thinned as `J`'s candidates and the smallest the budget affords. The
    /// quantile is read two standard errors of the sample's tail mass short of `race.quantile`
    /// (`q − 2·√(q(1 − q)/n)`), so a loss rate at `1 − q` itself does not set off a race by the
    /// sample's noise. `None` when none fits or too much is lost.
    pub fn tail_timeout(&mut self, race: Race) -> Option<f64> {
        let q = race.quantile.clamp(0.0, 1.0);
        let slack = 2.0 * (q * (1.0 - q) / self.len.max(1) as f64).sqrt();
        let race = Race { quantile: race.quantile - slack, ..race };
        let (survival, candidates) = (&self.survival, &mut self.candidates);
        let values = survival.values();
        candidates.clear();
        candidates.extend(thinned(values.len(), GRID).map(|i| values[i]));
        // A heavy tail's quantile falls as the timeout falls, down to the smallest the budget
        // affords: that one is a candidate exactly, not only to the grid's step (the extra
        // attempts fall as the timeout grows, so it is found by bisection).
        if let Some(budget) = race.budget {
            let i = values.partition_point(|&t| survival.extra_attempts(t, race.attempts) > budget + 1e-12);
            if let Some(&affordable) = values.get(i) {
                let at = candidates.partition_point(|&c| c < affordable);
                if candidates.get(at) != Some(&affordable) {
                    candidates.insert(at, affordable);
                }
            }
        }
        tail_model::best_timeout(survival, candidates, race).map(|(t, _)| t)
    }

    /// The `q`-quantile of the distribution.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        // The smallest value at or below which lies at least `q` of the probability, by
        // bisection: the probabilities are not negative.
        let i = self.cumulative.partition_point(|&c| c < q - 1e-12);
        self.distribution.get(i).or(self.distribution.last()).map(|&(x, _)| x)
    }

    /// The timeout minimising `J`, and whether it is the largest latency held (no fresh attempt
    /// pays below it). Below the largest, it is raised until it fires on at most `budget` of the
    /// attempts (the quantile `1 − budget`): a race the budget cannot pay for is refused to the
    /// slowest attempts, which need it most. `None` for an empty sample.
    pub fn best_timeout(&mut self, cost: f64, budget: Option<f64>) -> Option<(f64, bool)> {
        let distribution = &self.distribution;
        let largest = distribution.last()?.0;
        let (t, _) = Model::new(distribution, &mut self.moments).best_timeout(cost)?;
        if t == largest {
            return Some((t, true));
        }
        let affordable = budget.and_then(|b| self.quantile(1.0 - b)).unwrap_or(t);
        Some((t.max(affordable), false))
    }
}

/// The smallest value at or below which lies at least `q` of a distribution's probability, by a
/// scan: what [`Estimate::quantile`] finds by bisection.
#[cfg(test)]
fn quantile(distribution: &[(f64, f64)], q: f64) -> Option<f64> {
    let mut cumulative = 0.0;
    for &(x, p) in distribution {
        cumulative += p;
        if cumulative >= q - 1e-12 {
            return Some(x);
        }
    }
    distribution.last().map(|&(x, _)| x)
}

/// The timeout minimising `J` over a distribution (sorted values and their probabilities, any
/// unit), and its `J`; ties go to the larger timeout (fewer extra attempts for the same cost).
/// `None` for an empty distribution.
#[cfg(test)]
fn best_timeout(distribution: &[(f64, f64)], cost: f64) -> Option<(f64, f64)> {
    Model::new(distribution, &mut Vec::new()).best_timeout(cost)
}

struct Model<'a> {
    distribution: &'a [(f64, f64)],
    /// For the `i` smallest values: their first moment and the probability of the others
    /// (`E[X; X ≤ xᵢ₋₁]`, `P(X > xᵢ₋₁)`), side by side for `J`'s inner loop.
    moments: &'a [(f64, f64)],
}

impl<'a> Model<'a> {
    /// The model of `distribution`, its moments kept in `room`.
    fn new(distribution: &'a [(f64, f64)], room: &'a mut Vec<(f64, f64)>) -> Self {
        let total: f64 = distribution.iter().fold(0.0, |mass, &(_, p)| mass + p);
        room.clear();
        let (mut mass, mut first) = (0.0, 0.0);
        room.push((first, total - mass));
        for &(x, p) in distribution {
            mass += p;
            first += p * x;
            room.push((first, total - mass));
        }
        Model { distribution, moments: room }
    }

    /// The candidate minimising `J`, and its `J` ([`best_timeout`]).
    fn best_timeout(&self, cost: f64) -> Option<(f64, f64)> {
        let mut best: Option<(f64, f64)> = None;
        for i in thinned(self.distribution.len(), GRID).rev() {
            let t = self.distribution[i].0;
            let j = self.cost(t, cost);
            if best.is_none_or(|(_, b)| j < b) {
                best = Some((t, j));
            }
        }
        best
    }

    /// `E[min(a, X)]`.
    fn mean_min(&self, a: f64) -> f64 {
        let (first, rest) = self.moments[self.distribution.partition_point(|&(x, _)| x <= a)];
        first + a * rest
    }

    /// `J(t)` with the second attempt's time weighted by `cost`.
    fn cost(&self, t: f64, cost: f64) -> f64 {
        let (d, moments) = (self.distribution, self.moments);
        let survivors = &d[d.partition_point(|&(x, _)| x <= t)..];
        // `x − t` grows with the survivor `x`, so the values at or below it are counted by one
        // walk over the distribution rather than a search per survivor (the same counts).
        let mut below = 0;
        let raced: f64 = survivors
            .iter()
            .map(|&(x, p)| {
                let a = x - t;
                while d.get(below).is_some_and(|&(v, _)| v <= a) {
                    below += 1;
                }
                let (first, rest) = moments[below];
                p * (first + a * rest)
            })
            .sum();
        self.mean_min(t) + (1.0 + cost) * raced
    }
}

/// The indices of `n` sorted values thinned evenly by rank to at most `most` (the smallest and
/// the largest always included).
fn thinned(n: usize, most: usize) -> impl DoubleEndedIterator<Item = usize> {
    let keep_all = n <= most || most < 2;
    let (count, step) = if keep_all { (n, 1) } else { (most, most - 1) };
    (0..count).map(move |i| if keep_all { i } else { (i * (n - 1) + step / 2) / step })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng as _;

    /// Equal probabilities for sorted values.
    fn even(values: &[f64]) -> Vec<(f64, f64)> {
        values.iter().map(|&x| (x, 1.0 / values.len() as f64)).collect()
    }

    #[test]
    fn a_tight_sample_waits_for_its_largest_latency() {
        let sample: Vec<f64> = (0..100).map(|i| 100.0 + f64::from(i) / 10.0).collect();
        let (t, j) = best_timeout(&even(&sample), 1.0).unwrap();
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
        let (t, j) = best_timeout(&even(&sample), 1.0).unwrap();
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
        // A fresh attempt beats a lost one for sure and the slowest answer (109.7) almost never:
        // race past the answer below it.
        let (t, _) = best_timeout(&even(&sample), 1.0).unwrap();
        assert_eq!(t, 109.6);
    }

    #[test]
    fn a_higher_cost_fires_later() {
        // A Pareto-like sample: x_i = (1 − i/n)^(−1/1.5).
        let n = 256;
        let sample: Vec<f64> = (0..n).map(|i| (1.0 - f64::from(i) / f64::from(n)).powf(-1.0 / 1.5)).collect();
        let (cheap, _) = best_timeout(&even(&sample), 1.0).unwrap();
        let (dear, _) = best_timeout(&even(&sample), 4.0).unwrap();
        let median = sample[128];
        assert!(cheap > median && cheap < 3.0 * median, "{cheap} vs median {median}");
        assert!(dear > cheap, "{dear} vs {cheap}");
    }

    #[test]
    fn a_heavy_tail_is_raced_at_the_smallest_timeout_the_budget_affords() {
        // 1000 latencies of a Pareto of shape 1.5, by quantile: the quantile of the race falls
        // as the timeout falls, so the budget sets it, to the value, not to the grid's step (64
        // candidates are 16 values apart here).
        let n = 1000;
        let mut sample = Sample::new(n);
        for i in 0..n {
            sample.push((1.0 - (i as f64 + 0.5) / n as f64).powf(-1.0 / 1.5), true);
        }
        let race = Race { quantile: 0.99, attempts: 2, budget: Some(0.2), price: 0.0 };
        let survival = sample.estimate().survival().clone();
        let values = survival.values();
        let affordable = values.iter().copied().find(|&t| survival.extra_attempts(t, 2) <= 0.2).unwrap();
        assert_eq!(sample.estimate().tail_timeout(race), Some(affordable));
        // Every value as a candidate gives the same.
        let read = 0.99 - 2.0 * (0.99 * 0.01 / n as f64).sqrt();
        let exact = tail_model::best_timeout(&survival, values, Race { quantile: read, ..race });
        assert_eq!(exact.map(|(t, _)| t), Some(affordable));
        // On the grid alone it would fire later.
        assert!(!thinned(values.len(), GRID).any(|i| values[i] == affordable));
    }

    /// The distribution by a sort of the whole sample, as the sample read it before keeping its
    /// order.
    fn sorted_from_scratch(observed: &VecDeque<(f64, bool)>) -> Vec<(f64, f64)> {
        let mut sorted: Vec<(f64, bool)> = observed.iter().copied().filter(|(x, _)| x.is_finite()).collect();
        sorted.sort_by(km_order);
        let (mut out, mut survival, mut at_risk) = (Vec::<(f64, f64)>::new(), 1.0, sorted.len() as f64);
        for &(x, answered) in &sorted {
            if answered {
                let mass = survival / at_risk;
                survival -= mass;
                match out.last_mut() {
                    Some(last) if last.0 == x => last.1 += mass,
                    _ => out.push((x, mass)),
                }
            }
            at_risk -= 1.0;
        }
        let largest = sorted.last().map(|&(x, _)| x);
        if survival > 1e-12 {
            match out.last_mut() {
                Some(last) if Some(last.0) == largest => last.1 += survival,
                _ => out.extend(largest.map(|x| (x, survival))),
            }
        }
        out
    }

    /// A latency for the sample tests: repeated values, bounds among answers at the same value,
    /// non-finite values.
    fn draw(rng: &mut rand_pcg::Pcg64Mcg, i: u32) -> (f64, bool) {
        let x = match rng.gen_range(0..20u32) {
            0 => f64::INFINITY,
            1 => f64::NAN,
            k => f64::from(k % 7) + f64::from(i % 3) / 4.0,
        };
        (x, rng.gen_bool(0.8))
    }

    #[test]
    fn readings_between_many_pushes_merge_them_as_a_sort_would() {
        // Read every 1 to 40 pushes, into samples of 8 (more pushes than it holds between two
        // readings) to 200 latencies.
        let mut rng = rand_pcg::Pcg64Mcg::new(11);
        for cap in [8, 50, 200] {
            let mut sample = Sample::new(cap);
            let mut i = 0;
            for _ in 0..100 {
                for _ in 0..rng.gen_range(1..=40) {
                    let (x, answered) = draw(&mut rng, i);
                    sample.push(x, answered);
                    i += 1;
                }
                let estimate = sample.estimate();
                assert_eq!(estimate.distribution, sorted_from_scratch(&sample.observed), "{cap}: {i} pushes");
                // The quantiles by bisection are the scan's, and the largest answer is the
                // largest of those held in arrival order (not a number, it is none).
                for q in [0.0, 0.01, 0.5, 0.99, 1.0] {
                    assert_eq!(estimate.quantile(q), quantile(&estimate.distribution, q), "{cap}: {i} pushes, {q}");
                }
                let answered = sample.observed.iter().filter(|&&(x, a)| a && !x.is_nan()).map(|&(x, _)| x);
                let largest = answered.reduce(f64::max);
                assert_eq!(sample.largest_answered(), largest, "{cap}: {i} pushes");
            }
        }
    }

    #[test]
    fn the_kept_order_reads_as_a_sort_of_the_whole_sample_and_j_as_searched() {
        let mut rng = rand_pcg::Pcg64Mcg::new(7);
        let mut sample = Sample::new(100);
        for i in 0..1000 {
            let (x, answered) = draw(&mut rng, i);
            sample.push(x, answered);
            let distribution = sample.estimate().distribution;
            assert_eq!(distribution, sorted_from_scratch(&sample.observed), "after {i} pushes");
            // J by its walk is J by a search per survivor, to the bit.
            let (mut mass, mut first) = (vec![0.0], vec![0.0]);
            for &(x, p) in &distribution {
                mass.push(mass[mass.len() - 1] + p);
                first.push(first[first.len() - 1] + p * x);
            }
            let total = mass[mass.len() - 1];
            let mean_min = |a: f64| {
                let below = distribution.partition_point(|&(x, _)| x <= a);
                first[below] + a * (total - mass[below])
            };
            let mut room = Vec::new();
            let model = Model::new(&distribution, &mut room);
            for t in distribution.iter().map(|&(x, _)| x) {
                let survivors = &distribution[distribution.partition_point(|&(x, _)| x <= t)..];
                let raced: f64 = survivors.iter().map(|&(x, p)| p * mean_min(x - t)).sum();
                let searched = mean_min(t) + 2.0 * raced;
                assert_eq!(model.cost(t, 1.0).to_bits(), searched.to_bits());
            }
        }
    }

    #[test]
    fn an_empty_sample_has_no_timeout() {
        assert_eq!(best_timeout(&[], 1.0), None);
        assert_eq!(Sample::new(4).estimate().best_timeout(1.0, None), None);
    }

    #[test]
    fn censored_latencies_keep_the_tail() {
        // Four answers at 10, and four attempts given up at 20 without an answer: Kaplan–Meier
        // puts half the mass at 10 and the other half at 20, their lower bound.
        let mut sample = Sample::new(8);
        for _ in 0..4 {
            sample.push(10.0, true);
            sample.push(20.0, false);
        }
        assert_eq!(sample.estimate().distribution, vec![(10.0, 0.5), (20.0, 0.5)]);
        // A bound below an answer shares the answer's mass out among those still at risk.
        let mut sample = Sample::new(3);
        sample.push(5.0, false);
        sample.push(10.0, true);
        sample.push(30.0, true);
        assert_eq!(sample.estimate().distribution, vec![(10.0, 0.5), (30.0, 0.5)]);
        assert_eq!(sample.estimate().quantile(0.5), Some(10.0));
        assert_eq!(sample.estimate().quantile(0.51), Some(30.0));
        // The oldest latency leaves a full sample.
        sample.push(30.0, true);
        assert_eq!(sample.len(), 3);
        let d = sample.estimate().distribution;
        assert_eq!(d.iter().map(|&(x, _)| x).collect::<Vec<_>>(), [10.0, 30.0]);
        assert!((d[0].1 - 1.0 / 3.0).abs() < 1e-12 && (d[1].1 - 2.0 / 3.0).abs() < 1e-12, "{d:?}");
    }
}
