//! The Optimizer (adaptive-timeouts.txt §3.6, §4.3, §5.3): a timeout sequence that minimises the
//! paper's expected-latency model over the latencies it has measured.
//!
//! What it decides: the sequence `t_0 ≤ t_1 ≤ … ≤ t_z`; attempt n gets `t_min(n, z)`.
//!
//! **Sampling.** Latencies observed under a timeout are censored (the slow ones are never seen), so
//! a quantile of them drifts down towards zero (§3.6). Every `sample_every`-th request's first
//! attempt (the first request is one) is therefore a *probe*: the paper sends it with no timeout at
//! all; we give it a generous one, `sample_factor` (10) times the largest timeout in use (the
//! sequence's last, or any handed to a first attempt in the last two recomputations), because a
//! probe that is lost would otherwise wait out the request's whole deadline, or forever without one
//! (issue #18: on a 2 ms service losing 1 %, four clients completed a twelfth of exp-backoff's
//! requests). The probe's latency is kept in a window of the last `window` probes. A probe that
//! times out is kept at its timeout, a lower bound of its latency: for every candidate below it the
//! model is unchanged (the probe outlives the candidate either way), and only the timeout itself is
//! priced optimistically; if the optimum rises to it, the next probes get `sample_factor` times
//! more, so a latency that jumps past the bound is still followed, by factors of `sample_factor`.
//! A probe that timed out but kept running (`hedge_on_timeout`) and answers late adds nothing more.
//! `call` clamps a timeout by the request's deadline and reports that value, so a probe is
//! recognised as a first attempt whose reported timeout is larger than any timeout handed to a
//! timed first attempt since the previous recomputation; a probe whose deadline is below those is
//! indistinguishable from, and behaves exactly like, a timed attempt, and is not kept.
//!
//! **The model.** With the empirical distribution of the samples, for a timeout `t`:
//! `S(t) = P(X > t)`, `M(t) = ∫₀ᵗ x f(x) dx` (the mean of the samples ≤ t times their fraction),
//! `a(t) = M(t) + t·S(t) + g(t)` with the cost `g(t) = cost_per_second·t`, and `b(t) = S(t)`. The
//! expected latency of the sequence is `E_n = a(t_n) + b(t_n)·E_{n+1}` for n < z and
//! `E_z = a(t_z) / (1 − b(t_z))` (§3.6, equations 4–5).
//!
//! **The search.** The paper solves the first-order conditions (equation 6) backwards with a tree
//! search over regularly spaced values between the smallest and largest latency (§4.3). We minimise
//! the same model exactly instead:
//! - *candidates*: between two consecutive samples `S` and `M` are constant and `a` grows with `t`,
//!   so every `E_n` is smallest at the left end of the interval, a sample value; the candidates are
//!   the distinct samples (the largest one included, where `S = 0`), thinned evenly by rank to at
//!   most `grid` values. An even grid of values, as in the paper, becomes uselessly coarse as soon
//!   as one slow sample stretches the range (with one probe at a 20 ms deadline among 0.1 ms
//!   samples, its second point is 0.4 ms);
//! - *backward dynamic programming*: `V_z(t)` is `E_z`, `V_n(t) = a(t) + b(t)·min_{t' ≥ t}
//!   V_{n+1}(t')`, and `t_0 = argmin V_0`. Because `E_0` is increasing in `E_1` (`b ≥ 0`), each
//!   stage's best continuation is optimal for the whole, so the DP is exact over the candidates, with
//!   the sequence constrained non-decreasing as §3.6 asks, in O(`sequence_len`·`grid`) after a sort.
//!   Ties go to the smaller timeout.
//!
//! The model treats retries as independent draws from the same distribution, so its optimum is flat:
//! every `t_n` equals the single-timeout optimum of equation 2 (if `E*` is the least `a/(1 − b)`,
//! then `a(t) + b(t)·E* ≥ E*` for every `t`). The DP finds that flat sequence. A consequence the
//! paper's increasing sequences hid: when the latency jumps above the whole sequence, retries time
//! out too until the window of samples has moved (`adaptive_scenarios.rs` shows it).
//!
//! Until `min_samples` samples are in, every attempt gets `initial`. The sequence is recomputed
//! every `recompute_every` requests, counted as calls of `timeout` for attempt 0.

use super::{AttemptResult, TimeoutPolicy};
use crate::config::{self, Check};
use crate::duration::text;
use crate::stats::{from_nanos, nanos, Window};
use crate::{Rng, Time};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The Optimizer's parameters; [`OptimizerConfig::paper`] gives the paper's values (§5.3), and
/// the default is them from [`super::DEFAULT_INITIAL`]. A file may leave out any of them.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptimizerConfig {
    /// Every this many requests, the first attempt is a probe with a long timeout (5); 0 never
    /// samples.
    pub sample_every: u32,
    /// A probe's timeout is this many times the largest timeout in use (10; fewer than 2 count as
    /// 2). The paper sends probes with none.
    pub sample_factor: u32,
    /// Probe latencies kept (200).
    pub window: usize,
    /// Requests between recomputations of the sequence (20; 0 counts as 1).
    pub recompute_every: u32,
    /// The cost `g(t) = cost_per_second·t` of waiting `t` on an attempt (0.4).
    pub cost_per_second: f64,
    /// Elements of the timeout sequence (3; 0 counts as 1).
    pub sequence_len: usize,
    /// The timeout of every attempt until enough samples are in (1 s by default).
    #[serde(with = "text")]
    pub initial: Duration,
    /// The most candidate timeouts (sample values, thinned by rank) searched (64; fewer than 2
    /// count as 2).
    pub grid: usize,
    /// Samples needed before the first optimisation (20).
    pub min_samples: usize,
}

impl OptimizerConfig {
    /// The paper's parameters (§5.3) starting from `initial`.
    pub fn paper(initial: Duration) -> Self {
        OptimizerConfig {
            sample_every: 5,
            sample_factor: 10,
            window: 200,
            recompute_every: 20,
            cost_per_second: 0.4,
            sequence_len: 3,
            initial,
            grid: 64,
            min_samples: 20,
        }
    }

    /// Checks the parameters; the error names the field. (`sample_every: 0` never sends a probe,
    /// which the Optimizer allows.)
    pub fn validate(&self) -> Check {
        config::positive("initial", self.initial)?;
        config::at_least("sample_factor", f64::from(self.sample_factor), 2.0)?;
        config::at_least_one("window", self.window as u64)?;
        config::at_least_one("recompute_every", self.recompute_every)?;
        config::non_negative("cost_per_second", self.cost_per_second)?;
        config::at_least_one("sequence_len", self.sequence_len as u64)?;
        config::at_least_one("grid", self.grid as u64)
    }
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        OptimizerConfig::paper(super::DEFAULT_INITIAL)
    }
}

/// The Optimizer of adaptive-timeouts.txt §4.3.
#[derive(Clone, Debug)]
pub struct Optimizer {
    config: OptimizerConfig,
    samples: Window,
    sequence: Vec<Duration>,
    requests: u64,
    /// The largest timeout handed to a timed first attempt since, and before, the last recompute.
    handed: [Duration; 2],
}

impl Optimizer {
    /// An Optimizer starting with `config.initial` for every attempt.
    pub fn new(mut config: OptimizerConfig) -> Self {
        config.recompute_every = config.recompute_every.max(1);
        config.sequence_len = config.sequence_len.max(1);
        config.grid = config.grid.max(2);
        config.sample_factor = config.sample_factor.max(2);
        if config.cost_per_second.is_nan() {
            config.cost_per_second = 0.0;
        }
        Optimizer {
            samples: Window::new(config.window),
            sequence: vec![config.initial],
            config,
            requests: 0,
            handed: [Duration::ZERO; 2],
        }
    }

    /// The current timeout sequence.
    pub fn sequence(&self) -> &[Duration] {
        &self.sequence
    }

    /// The probe latencies held.
    pub fn samples(&self) -> usize {
        self.samples.len()
    }

    fn get(&self, attempt: u32) -> Duration {
        let last = self.sequence.len().saturating_sub(1);
        self.sequence[(attempt as usize).min(last)]
    }

    /// The largest timeout handed to a timed first attempt since, and before, the last recompute.
    fn largest_handed(&self) -> Duration {
        self.handed[0].max(self.handed[1])
    }

    /// A probe's timeout: `sample_factor` times the largest timeout in use, so it exceeds every
    /// timed first attempt's of this and the previous recomputation.
    fn probe_timeout(&self) -> Duration {
        let largest = self.get(u32::MAX).max(self.largest_handed());
        largest.checked_mul(self.config.sample_factor).unwrap_or(Duration::MAX)
    }

    fn is_probe(&self, attempt: u32, timeout: Option<Duration>) -> bool {
        attempt == 0 && timeout.is_some_and(|t| t > self.largest_handed())
    }

    fn recompute(&mut self) {
        self.handed = [Duration::ZERO, self.handed[0]];
        if self.samples.len() < self.config.min_samples.max(1) {
            return;
        }
        let model = Model::new(self.samples.sorted(), self.config.cost_per_second);
        self.sequence =
            model.optimise(self.config.grid, self.config.sequence_len).into_iter().map(from_nanos).collect();
    }
}

impl TimeoutPolicy for Optimizer {
    fn timeout(&mut self, _now: Time, attempt: u32, _rng: Rng<'_>) -> Option<Duration> {
        if attempt != 0 {
            return Some(self.get(attempt));
        }
        let n = self.requests;
        self.requests += 1;
        if n > 0 && n % u64::from(self.config.recompute_every) == 0 {
            self.recompute();
        }
        let sample_every = u64::from(self.config.sample_every);
        if sample_every > 0 && n % sample_every == 0 {
            return Some(self.probe_timeout());
        }
        let t = self.get(0);
        self.handed[0] = self.handed[0].max(t);
        Some(t)
    }

    fn on_result(&mut self, _now: Time, attempt: u32, timeout: Option<Duration>, result: AttemptResult) {
        if !self.is_probe(attempt, timeout) {
            return;
        }
        match result {
            // A late answer of a probe already kept at its timeout.
            AttemptResult::Answered(x) if timeout.is_some_and(|t| x > t) => {}
            AttemptResult::Answered(x) | AttemptResult::TimedOut(x) => self.samples.push(nanos(x)),
        }
    }

    fn current(&self) -> Option<Duration> {
        Some(self.get(0))
    }

    fn learned(&self) -> bool {
        true
    }
}

/// The expected-latency model over sorted samples (in nanoseconds).
struct Model<'a> {
    sorted: &'a [f64],
    /// `prefix[i]` is the sum of the `i` smallest samples.
    prefix: Vec<f64>,
    cost: f64,
}

impl<'a> Model<'a> {
    fn new(sorted: &'a [f64], cost: f64) -> Self {
        let prefix = std::iter::once(0.0)
            .chain(sorted.iter().scan(0.0, |sum, &x| {
                *sum += x;
                Some(*sum)
            }))
            .collect();
        Model { sorted, prefix, cost }
    }

    /// `(a(t), b(t))` for a timeout `t`.
    fn terms(&self, t: f64) -> (f64, f64) {
        let n = self.sorted.len() as f64;
        let below = self.sorted.partition_point(|&x| x <= t);
        let survive = (self.sorted.len() - below) as f64 / n;
        let partial_mean = self.prefix[below] / n;
        (partial_mean + t * survive + self.cost * t, survive)
    }

    /// The distinct samples, thinned evenly by rank to at most `most` (the smallest and the largest
    /// always included).
    fn candidates(&self, most: usize) -> Vec<f64> {
        let mut distinct = self.sorted.to_vec();
        distinct.dedup();
        let n = distinct.len();
        if n <= most {
            return distinct;
        }
        (0..most).map(|i| distinct[(i * (n - 1) + (most - 1) / 2) / (most - 1)]).collect()
    }

    /// The non-decreasing sequence of `len` timeouts minimising `E_0`, by backward DP over at most
    /// `most` candidates.
    fn optimise(&self, most: usize, len: usize) -> Vec<f64> {
        let grid = self.candidates(most);
        let terms: Vec<(f64, f64)> = grid.iter().map(|&t| self.terms(t)).collect();
        let last: Vec<f64> = terms.iter().map(|&(a, b)| if b < 1.0 { a / (1.0 - b) } else { f64::INFINITY }).collect();
        // stages[n] holds, per grid index, the best continuation from stage n on at or after it.
        let mut stages = vec![suffix_min(&last)];
        for _ in 1..len {
            let next = &stages[stages.len() - 1];
            let values: Vec<f64> = terms.iter().zip(next).map(|(&(a, b), &(v, _))| a + b * v).collect();
            stages.push(suffix_min(&values));
        }
        stages.reverse();
        let mut at = 0;
        stages
            .iter()
            .map(|stage| {
                at = stage[at].1;
                grid[at]
            })
            .collect()
    }
}

/// For each index i, the smallest value at or after i and its (leftmost) index.
fn suffix_min(values: &[f64]) -> Vec<(f64, usize)> {
    let last = values.len().saturating_sub(1);
    let mut out = vec![(f64::INFINITY, last); values.len()];
    let mut best = (f64::INFINITY, last);
    for i in (0..values.len()).rev() {
        if values[i] <= best.0 {
            best = (values[i], i);
        }
        out[i] = best;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_pcg::Pcg64Mcg;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn config() -> OptimizerConfig {
        OptimizerConfig { min_samples: 4, recompute_every: 4, sample_every: 2, ..OptimizerConfig::paper(ms(50)) }
    }

    /// Runs one request whose every attempt takes `latency`, as `call` would without a deadline.
    fn request(p: &mut Optimizer, rng: &mut Pcg64Mcg, latency: Duration) -> Option<Duration> {
        let mut attempt = 0;
        loop {
            let t = p.timeout(Time::ZERO, attempt, rng);
            match t {
                Some(t) if latency > t => p.on_result(Time::ZERO, attempt, Some(t), AttemptResult::TimedOut(t)),
                _ => {
                    p.on_result(Time::ZERO, attempt, t, AttemptResult::Answered(latency));
                    return t;
                }
            }
            attempt += 1;
        }
    }

    #[test]
    fn every_nth_first_attempt_is_a_probe_with_ten_times_the_timeout() {
        let mut rng = Pcg64Mcg::new(5);
        let mut p = Optimizer::new(OptimizerConfig { sample_every: 3, ..config() });
        let got: Vec<_> = (0..7).map(|_| p.timeout(Time::ZERO, 0, &mut rng)).collect();
        let (probe, some) = (Some(ms(500)), Some(ms(50)));
        assert_eq!(got, vec![probe, some, some, probe, some, some, probe]);
        assert_eq!(p.timeout(Time::ZERO, 1, &mut rng), some);
    }

    #[test]
    fn only_probes_are_sampled() {
        let mut rng = Pcg64Mcg::new(5);
        let mut p = Optimizer::new(config());
        // Request 0 is a probe; request 1 is timed at 50 ms; request 2 a probe again.
        assert_eq!(request(&mut p, &mut rng, ms(10)), Some(ms(500)));
        assert_eq!(request(&mut p, &mut rng, ms(10)), Some(ms(50)));
        assert_eq!(p.samples(), 1);
        // A probe clamped by a 200 ms deadline reports 200 ms: still recognised as a probe.
        assert_eq!(p.timeout(Time::ZERO, 0, &mut rng), Some(ms(500)));
        p.on_result(Time::ZERO, 0, Some(ms(200)), AttemptResult::Answered(ms(30)));
        assert_eq!(p.samples(), 2);
        // A retry is never a probe; nor is a first attempt clamped to the timed attempts' 50 ms.
        p.on_result(Time::ZERO, 1, Some(ms(500)), AttemptResult::Answered(ms(30)));
        p.on_result(Time::ZERO, 0, Some(ms(50)), AttemptResult::Answered(ms(30)));
        assert_eq!(p.samples(), 2);
    }

    #[test]
    fn a_timed_out_probe_is_kept_at_its_timeout_once() {
        let mut rng = Pcg64Mcg::new(5);
        let mut p = Optimizer::new(config());
        assert_eq!(p.timeout(Time::ZERO, 0, &mut rng), Some(ms(500)));
        p.on_result(Time::ZERO, 0, Some(ms(500)), AttemptResult::TimedOut(ms(500)));
        // Kept running beside its retry (hedge_on_timeout), its late answer adds nothing.
        p.on_result(Time::ZERO, 0, Some(ms(500)), AttemptResult::Answered(ms(700)));
        assert_eq!(p.samples(), 1);
    }

    #[test]
    fn probes_outlast_the_previous_sequence_and_rise_past_a_jump() {
        let mut rng = Pcg64Mcg::new(5);
        let mut p = Optimizer::new(config());
        for _ in 0..8 {
            request(&mut p, &mut rng, ms(10));
        }
        // Request 8 recomputes the sequence to 10 ms, but 50 ms went to request 7's first attempt,
        // whose answer might still come: probe 8 gets 10 × 50 ms, above it.
        assert_eq!(request(&mut p, &mut rng, ms(10)), Some(ms(500)));
        assert_eq!(p.sequence(), &[ms(10); 3]);
        assert_eq!(request(&mut p, &mut rng, ms(10)), Some(ms(10)));
        // The latency jumps to 1 s. Probes time out at 500 ms (50 ms is still in use), then at
        // 100 ms (10 × 10 ms); once the samples at 100 ms outweigh those at 10 ms the sequence
        // rises to 100 ms and the probes, now at 1 s, see the latency again.
        let mut probes = Vec::new();
        for i in 0..200 {
            let t = p.timeout(Time::ZERO, 0, &mut rng).unwrap();
            let result = if t < ms(1000) { AttemptResult::TimedOut(t) } else { AttemptResult::Answered(ms(1000)) };
            p.on_result(Time::ZERO, 0, Some(t), result);
            if i % 2 == 0 {
                probes.push(t.as_millis());
            }
        }
        probes.dedup();
        assert_eq!(probes[..3], [500, 100, 1000]);
        assert_eq!(p.sequence(), &[ms(100); 3]);
    }

    #[test]
    fn keeps_initial_until_enough_samples() {
        let mut rng = Pcg64Mcg::new(5);
        let mut p = Optimizer::new(OptimizerConfig { min_samples: 100, ..config() });
        for _ in 0..50 {
            request(&mut p, &mut rng, ms(10));
        }
        assert_eq!(p.sequence(), &[ms(50)]);
    }

    #[test]
    fn a_constant_latency_gives_a_flat_sequence_at_that_latency() {
        let mut rng = Pcg64Mcg::new(5);
        let mut p = Optimizer::new(config());
        for _ in 0..9 {
            request(&mut p, &mut rng, ms(10));
        }
        // Requests 0, 2, 4, 6 were probes; request 8 recomputed over those four samples.
        assert_eq!(p.sequence(), &[ms(10), ms(10), ms(10)]);
        assert_eq!(p.current(), Some(ms(10)));
        assert_eq!(p.timeout(Time::ZERO, 7, &mut rng), Some(ms(10)));
    }

    #[test]
    fn a_rare_slow_mode_is_cut_off_and_retried() {
        // 19 samples at 10 ms and one at 100 ms: waiting for the slow one costs more than a retry.
        let mut samples: Vec<f64> = vec![nanos(ms(10)); 19];
        samples.push(nanos(ms(100)));
        assert_eq!(Model::new(&samples, 0.4).candidates(64), vec![nanos(ms(10)), nanos(ms(100))]);
        let model = Model::new(&samples, 0.4);
        let seq: Vec<Duration> = model.optimise(64, 3).into_iter().map(from_nanos).collect();
        assert_eq!(seq, vec![ms(10); 3]);
        // E(10 ms) = (0.95·10 + 10·0.05 + 4) / 0.95 = 14.736842 ms, vs E(100 ms) = 14.5 + 40 ms.
        let (a, b) = model.terms(nanos(ms(10)));
        assert_eq!(from_nanos(a / (1.0 - b)), Duration::from_nanos(14_736_842));
    }

    #[test]
    fn a_common_slow_mode_is_waited_for() {
        // Half the samples at 10 ms, half at 12 ms: a retry costs more than waiting 2 ms longer.
        let samples: Vec<f64> = [10, 12].iter().flat_map(|&v| vec![nanos(ms(v)); 10]).collect();
        let model = Model::new(&samples, 0.4);
        let seq: Vec<Duration> = model.optimise(64, 2).into_iter().map(from_nanos).collect();
        // Below 12 ms, E(t) = (5 + 0.5t + 0.4t) / 0.5 ≥ 28 ms; at 12 ms, E = 11 + 0.4·12 = 15.8 ms.
        assert_eq!(seq, vec![ms(12); 2]);
        let (a, b) = model.terms(nanos(ms(12)));
        assert_eq!((from_nanos(a), b), (Duration::from_micros(15_800), 0.0));
    }

    #[test]
    fn candidates_are_thinned_by_rank() {
        let samples: Vec<f64> = (1..=10).map(f64::from).collect();
        let model = Model::new(&samples, 0.4);
        assert_eq!(model.candidates(4), vec![1.0, 4.0, 7.0, 10.0]);
        assert_eq!(model.candidates(3), vec![1.0, 6.0, 10.0]);
        assert_eq!(model.candidates(2), vec![1.0, 10.0]);
    }

    #[test]
    fn a_slow_tail_does_not_coarsen_the_candidates() {
        // 99 samples from 100 to 109.8 µs and one probe cut off at a 20 ms deadline.
        let mut samples: Vec<f64> = (0..99).map(|i| 100_000.0 + 100.0 * f64::from(i)).collect();
        samples.push(20_000_000.0);
        let seq = Model::new(&samples, 0.4).optimise(64, 1);
        // The 64 candidates step by ~1.6 ranks through the bulk; the best is its largest candidate,
        // 109.7 µs (109.8 µs is thinned out), not a point between the bulk and 20 ms.
        assert_eq!(from_nanos(seq[0]), Duration::from_nanos(109_700));
    }

    #[test]
    fn degenerate_configs_do_not_panic() {
        let mut rng = Pcg64Mcg::new(5);
        let config = OptimizerConfig {
            sample_every: 0,
            sample_factor: 0,
            window: 0,
            recompute_every: 0,
            cost_per_second: f64::NAN,
            sequence_len: 0,
            initial: Duration::ZERO,
            grid: 0,
            min_samples: 0,
        };
        let mut p = Optimizer::new(config.clone());
        for _ in 0..10 {
            request(&mut p, &mut rng, Duration::ZERO);
        }
        assert_eq!(p.samples(), 0);
        assert_eq!(p.sequence(), &[Duration::ZERO]);
        let mut p = Optimizer::new(OptimizerConfig { sample_every: 1, ..config });
        for _ in 0..10 {
            request(&mut p, &mut rng, Duration::ZERO);
        }
        assert_eq!(p.sequence(), &[Duration::ZERO]);
    }
}
