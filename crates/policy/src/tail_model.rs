//! The tail of a request's latency when its attempts race (`retry.hedge_on_timeout`): a new
//! attempt starts every `T` while the earlier ones keep running, and the first answer ends the
//! request. What the adaptive timeout minimises when it races a heavy tail; usable by any policy
//! that starts attempts on a schedule (a hedge after a fixed delay is the same race).
//!
//! With `S(t) = P(X > t)` the survival of one attempt's latency `X` (independent draws) and
//! at most `n` attempts, started at `0, T, 2T, …`, the request is still unanswered at `t` when
//! every attempt started by then is:
//!
//! `P(L > t) = ∏_{k < n, kT < t} S(t − kT)`
//!
//! An attempt that never answers (lost) is mass that `S` keeps for ever (`S(∞) > 0`), so loss
//! enters as a floor under each factor. The request's `q`-quantile is the smallest `t` with
//! `P(L > t) ≤ 1 − q`; it is one of the points `x + kT` where a factor steps down, so it is found
//! exactly. The extra attempts a request sends are `Σ_{1 ≤ k < n} P(L > kT)` (attempt `k` starts
//! only if none answered by `kT`).
//!
//! [`best_timeout`] takes, among candidate `T` whose extra attempts fit a budget, the one with the
//! smallest predicted quantile plus a price per extra attempt; ties go to the larger `T` (less
//! load for the same tail).

/// The survival function of one attempt's latency: a discrete distribution (sorted values and
/// their probabilities) plus the probability that the attempt never answers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Survival {
    values: Vec<f64>,
    /// `above[i] = P(X > values[i])`.
    above: Vec<f64>,
    lost: f64,
}

impl Survival {
    /// From sorted values with their probabilities (summing to `1 − lost`) and the probability
    /// `lost` of no answer at all. Non-finite values are dropped.
    pub fn new(distribution: &[(f64, f64)], lost: f64) -> Self {
        let mut survival = Survival::default();
        survival.refill(distribution, lost);
        survival
    }

    /// Becomes [`Survival::new`]'s survival of `distribution` and `lost`, in the room it has.
    pub fn refill(&mut self, distribution: &[(f64, f64)], lost: f64) {
        let lost = if lost.is_finite() { lost.clamp(0.0, 1.0) } else { 0.0 };
        self.values.clear();
        self.above.clear();
        // `above` holds each value's probability until the total is known. A distribution read
        // from a sample is finite throughout, and copies over without a test per value.
        let finite = |&(x, p): &(f64, f64)| x.is_finite() && p.is_finite();
        if distribution.iter().all(finite) {
            self.values.extend(distribution.iter().map(|&(x, _)| x));
            self.above.extend(distribution.iter().map(|&(_, p)| p));
        } else {
            for &(x, p) in distribution.iter().filter(|e| finite(e)) {
                self.values.push(x);
                self.above.push(p);
            }
        }
        let total: f64 = self.above.iter().sum();
        let mut remaining = total + lost;
        for above in &mut self.above {
            remaining -= *above;
            // `lost` is not negative.
            *above = remaining.max(lost);
        }
        self.lost = lost;
    }

    /// The latencies it holds, in order.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// `P(X > t)`.
    pub fn at(&self, t: f64) -> f64 {
        match self.values.partition_point(|&x| x <= t) {
            0 => 1.0,
            i => self.above[i - 1],
        }
    }

    /// `P(L > t)` for a request whose `attempts` start every `every`.
    pub fn request_at(&self, t: f64, every: f64, attempts: u32) -> f64 {
        starts(every, attempts).take_while(|&start| start < t).map(|start| self.at(t - start)).product()
    }

    /// The request's `q`-quantile when `attempts` start every `every`; `None` when more than
    /// `1 − q` of the requests never answer.
    pub fn request_quantile(&self, q: f64, every: f64, attempts: u32) -> Option<f64> {
        let allowed = 1.0 - q + 1e-12;
        // Within each family of points `x + kT` the first that qualifies is found by bisection
        // (`P(L > t)` does not increase with `t`); the quantile is the least of them.
        starts(every, attempts)
            .filter_map(|start| {
                let i = self.values.partition_point(|&x| self.request_at(x + start, every, attempts) > allowed);
                self.values.get(i).map(|&x| x + start)
            })
            .reduce(f64::min)
    }

    /// The extra attempts a request sends on average when `attempts` start every `every`.
    pub fn extra_attempts(&self, every: f64, attempts: u32) -> f64 {
        starts(every, attempts).skip(1).map(|start| self.request_at(start, every, attempts)).sum()
    }

    /// The probability that an attempt never answers.
    pub fn lost(&self) -> f64 {
        self.lost
    }
}

/// When each of `attempts` (at least one) starts: `0, every, 2·every, …`.
fn starts(every: f64, attempts: u32) -> impl Iterator<Item = f64> {
    (0..attempts.max(1)).map(move |k| if k == 0 { 0.0 } else { f64::from(k) * every })
}

/// What a race costs and may cost: [`best_timeout`]'s terms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Race {
    /// The quantile of the request's latency minimised (0.99: its p99).
    pub quantile: f64,
    /// The most attempts a request makes.
    pub attempts: u32,
    /// The most extra attempts a request may send on average (`None`: any number).
    pub budget: Option<f64>,
    /// The price of one extra attempt, in the latency's unit: what the upstream's work for it
    /// weighs against the request's tail.
    pub price: f64,
}

/// The timeout among `candidates` minimising the request's quantile plus the price of its extra
/// attempts, `Q(T) + price·extra(T)`, among those within the budget, with that quantile; ties go
/// to the larger timeout. `None` when no candidate fits the budget or every quantile is
/// unbounded (too much is lost).
pub fn best_timeout(survival: &Survival, candidates: &[f64], race: Race) -> Option<(f64, f64)> {
    let mut best: Option<(f64, f64, f64)> = None;
    for &t in candidates.iter().filter(|t| t.is_finite() && **t > 0.0) {
        let extra = survival.extra_attempts(t, race.attempts);
        if race.budget.is_some_and(|b| extra > b + 1e-12) {
            continue;
        }
        let Some(quantile) = survival.request_quantile(race.quantile, t, race.attempts) else { continue };
        let cost = quantile + race.price * extra;
        if best.is_none_or(|(bt, _, bc)| cost < bc || (cost == bc && t > bt)) {
            best = Some((t, quantile, cost));
        }
    }
    best.map(|(t, quantile, _)| (t, quantile))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn race(quantile: f64, attempts: u32, budget: Option<f64>) -> Race {
        Race { quantile, attempts, budget, price: 0.0 }
    }

    /// A two-point latency: `fast` with probability `p`, else `slow`.
    fn two_point(fast: f64, slow: f64, p: f64) -> Survival {
        Survival::new(&[(fast, p), (slow, 1.0 - p)], 0.0)
    }

    #[test]
    fn survival_steps_at_each_value_and_keeps_the_lost_mass() {
        let s = Survival::new(&[(10.0, 0.5), (20.0, 0.3)], 0.2);
        assert_eq!(s.at(5.0), 1.0);
        assert!((s.at(10.0) - 0.5).abs() < 1e-12);
        assert!((s.at(19.9) - 0.5).abs() < 1e-12);
        assert!((s.at(20.0) - 0.2).abs() < 1e-12);
        assert!((s.at(1e9) - 0.2).abs() < 1e-12);
        assert_eq!(s.lost(), 0.2);
    }

    #[test]
    fn non_finite_values_are_dropped() {
        let s = Survival::new(&[(10.0, 0.5), (f64::NAN, 0.1), (20.0, f64::INFINITY), (30.0, 0.3)], 0.2);
        let finite = Survival::new(&[(10.0, 0.5), (30.0, 0.3)], 0.2);
        assert_eq!(s, finite);
        assert_eq!(s.values(), &[10.0, 30.0]);
        assert!((s.at(10.0) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn a_race_multiplies_the_survivals() {
        // 90 % at 10, 10 % at 100; a second attempt at 15: at 30 the first is unanswered with
        // probability 0.1 and the second with 0.1 too.
        let s = two_point(10.0, 100.0, 0.9);
        assert!((s.request_at(30.0, 15.0, 2) - 0.01).abs() < 1e-12);
        // Before the second attempt starts (and with one attempt), only the first counts.
        assert!((s.request_at(12.0, 15.0, 2) - 0.1).abs() < 1e-12);
        assert!((s.request_at(30.0, 15.0, 1) - 0.1).abs() < 1e-12);
    }

    #[test]
    fn the_quantile_of_a_bimodal_race_is_the_fast_mode_after_the_timeout() {
        // 90 % at 10, 10 % at 100. One attempt: p95 is 100. Racing at T, a request is late past
        // T + 10 only when both draws are slow (1 %), so its p95 is T + 10 for T < 90.
        let s = two_point(10.0, 100.0, 0.9);
        assert_eq!(s.request_quantile(0.95, f64::INFINITY, 1), Some(100.0));
        assert_eq!(s.request_quantile(0.95, 20.0, 2), Some(30.0));
        assert_eq!(s.request_quantile(0.95, 10.0, 2), Some(20.0));
        // Its p99.9 needs a third attempt: T + 10 would leave 1 % late; 2T + 10 leaves 0.1 %.
        assert_eq!(s.request_quantile(0.999, 20.0, 3), Some(50.0));
        // Extra attempts: the second starts on 10 % of requests at 20, the third on 1 % at 40.
        assert!((s.extra_attempts(20.0, 3) - 0.11).abs() < 1e-12);
    }

    #[test]
    fn the_best_timeout_is_the_fast_mode_within_the_budget() {
        let s = two_point(10.0, 100.0, 0.9);
        let candidates = [5.0, 10.0, 100.0];
        // Firing at 5 (p95 15: every request races) costs a second attempt on every request; the
        // budget of 20 % allows 10 (p95 20) but not 5.
        assert_eq!(best_timeout(&s, &candidates, race(0.95, 2, None)), Some((5.0, 15.0)));
        assert_eq!(best_timeout(&s, &candidates, race(0.95, 2, Some(0.2))), Some((10.0, 20.0)));
        // A budget of 5 % allows only 100: never racing, p95 100.
        assert_eq!(best_timeout(&s, &candidates, race(0.95, 2, Some(0.05))), Some((100.0, 100.0)));
        assert_eq!(best_timeout(&s, &[5.0, 10.0], race(0.95, 2, Some(0.0))), None);
    }

    #[test]
    fn a_price_per_extra_attempt_weighs_against_the_tail() {
        // Racing at 10 gains 80 on p95 (20 against 100) for 0.1 extra attempts a request: worth
        // it below a price of 800 an attempt, not above.
        let s = two_point(10.0, 100.0, 0.9);
        let priced = |price| best_timeout(&s, &[10.0, 100.0], Race { price, ..race(0.95, 2, None) });
        assert_eq!(priced(100.0), Some((10.0, 20.0)));
        assert_eq!(priced(1000.0), Some((100.0, 100.0)));
    }

    #[test]
    fn a_tight_latency_is_not_raced_for_nothing() {
        // 10 and 11 equally likely: past 11 nothing is left to race, so 11 and 20 tie on p99 with
        // no extra attempt; the larger wins the tie. Firing at 10 races half the requests for a
        // p99 of 11 too (the fresh attempt cannot end before 20): no better, and dearer.
        let s = two_point(10.0, 11.0, 0.5);
        assert_eq!(s.request_quantile(0.99, 10.0, 2), Some(11.0));
        assert_eq!(best_timeout(&s, &[10.0, 11.0, 20.0], race(0.99, 2, Some(0.6))), Some((20.0, 11.0)));
    }

    #[test]
    fn lost_attempts_set_the_tail() {
        // 5 % lost, the rest at 20: one attempt never reaches p99. Racing at T, a request is
        // late only if both attempts are lost (0.25 %): its p99 is T + 20.
        let s = Survival::new(&[(20.0, 0.95)], 0.05);
        assert_eq!(s.request_quantile(0.99, f64::INFINITY, 1), None);
        assert_eq!(s.request_quantile(0.99, 25.0, 2), Some(45.0));
        // The earliest timeout past the answers wins; firing before them races every request.
        assert_eq!(best_timeout(&s, &[10.0, 20.0, 25.0], race(0.99, 2, Some(0.2))), Some((20.0, 40.0)));
    }
}
