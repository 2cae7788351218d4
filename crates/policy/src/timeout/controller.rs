//! The Controller (adaptive-timeouts.txt §3.7, §4.4, §5.3): a TCP-inspired timeout that shrinks
//! towards the observed latency on every success and backs off exponentially on every timeout.
//!
//! What it decides: the timeout `T` of a first attempt; retry n gets `T·factorⁿ`.
//!
//! The paper's rules, as implemented here:
//! - a *streak* counts the consecutive answered attempts whose latency lies within `tolerance`
//!   (relative) of the mean of the streak so far; a latency outside it starts a new streak of one;
//! - on a timeout, `T` is multiplied by `factor` (exponential backoff) and the streak resets to 0;
//! - on an answer with latency `x`, `T` moves towards `x` in proportion to `T − x`, divided by a
//!   logarithm of the streak to stabilise it, and `ε = mean(streak latencies)·buffer` is added back
//!   so the timeout does not sink onto the latency.
//!
//! The paper's Python listing stops after computing `ε`, so these are our decisions, chosen to match
//! its text and its reported closeness (~10–25% above the latency):
//! - **the step**: `T ← T − k·(T − (x + ε))` with `k = gain / (1 + ln streak)`. The listing's PID
//!   has a proportional gain of 0.1, which is `gain`'s default. `1 + ln streak` is 1 for a streak of
//!   one (a fresh streak moves fastest) and never 0 (the paper's bare `ln streak` is 0 there).
//!   Adding `ε` inside the step, rather than after it, gives the fixed point `T = x·(1 + buffer)`
//!   for a steady latency; adding a whole `ε` after every step would settle at
//!   `x·(1 + buffer·(1 + ln streak)/gain)`, several times the latency, contradicting §5.4.
//! - **the tolerance test** compares with the streak's own mean (its sum is kept, so the "mean of
//!   the last `streak` latencies" needs no history buffer).
//! - **concurrent timeouts**: with many requests in flight one latency rise times out many attempts
//!   sent under the same `T`; multiplying once per timeout would compound (`1.5ᵏ`). A timeout of
//!   attempt n fired at `d` instead lifts `T` to at least `factor·d/factorⁿ` (the base it was sent
//!   under, times `factor`), which is the paper's `T·factor` for one request at a time.
//! - **bounds**: `T` stays within `[min, max]`; `factor` below 1 counts as 1, negative `tolerance`,
//!   `buffer` as 0, `gain` is clamped to `[0, 1]`.

use super::{AttemptResult, TimeoutPolicy};
use crate::config::{self, Check};
use crate::duration::text;
use crate::stats::{from_nanos, nanos};
use crate::{Rng, Time};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The Controller's parameters; [`ControllerConfig::paper`] gives the paper's values, and the
/// default is them from [`super::DEFAULT_INITIAL`]. A file may leave out any of them.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ControllerConfig {
    /// The timeout before any result (the listing starts at 20 ms; 1 s by default).
    #[serde(with = "text")]
    pub initial: Duration,
    /// The backoff factor on a timeout, and between retries (1.5).
    pub factor: f64,
    /// How far (relative) a latency may be from the streak's mean and extend it (0.2).
    pub tolerance: f64,
    /// `ε` as a fraction of the streak's mean latency (0.1).
    pub buffer: f64,
    /// The proportional gain of a step on a fresh streak (0.1, the listing's PID gain).
    pub gain: f64,
    /// The smallest timeout (1 µs by default; keep it above zero so backoff can grow it).
    #[serde(with = "text")]
    pub min: Duration,
    /// The largest timeout (60 s by default).
    #[serde(with = "text")]
    pub max: Duration,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig::paper(super::DEFAULT_INITIAL)
    }
}

impl ControllerConfig {
    /// The paper's parameters (§4.4, §5.3) starting from `initial`.
    pub fn paper(initial: Duration) -> Self {
        ControllerConfig {
            initial,
            factor: 1.5,
            tolerance: 0.2,
            buffer: 0.1,
            gain: 0.1,
            min: Duration::from_micros(1),
            max: Duration::from_secs(60),
        }
    }

    /// Checks the parameters; the error names the field.
    pub fn validate(&self) -> Check {
        config::positive("initial", self.initial)?;
        config::at_least("factor", self.factor, 1.0)?;
        config::non_negative("tolerance", self.tolerance)?;
        config::non_negative("buffer", self.buffer)?;
        config::fraction("gain", self.gain)?;
        config::positive("min", self.min)?;
        config::ordered("min", self.min, "max", self.max)
    }
}

/// The Controller of adaptive-timeouts.txt §4.4.
#[derive(Clone, Debug)]
pub struct Controller {
    factor: f64,
    tolerance: f64,
    buffer: f64,
    gain: f64,
    min: f64,
    max: f64,
    /// The first attempt's timeout, in nanoseconds.
    timeout: f64,
    streak: u32,
    /// The sum of the streak's latencies, in nanoseconds.
    streak_sum: f64,
}

impl Controller {
    /// A Controller with the given (sanitised) parameters.
    pub fn new(config: ControllerConfig) -> Self {
        let non_negative = |v: f64| if v.is_nan() { 0.0 } else { v.max(0.0) };
        let min = nanos(config.min);
        let max = nanos(config.max).max(min);
        Controller {
            factor: if config.factor.is_nan() { 1.0 } else { config.factor.max(1.0) },
            tolerance: non_negative(config.tolerance),
            buffer: non_negative(config.buffer),
            gain: non_negative(config.gain).min(1.0),
            min,
            max,
            timeout: nanos(config.initial).clamp(min, max),
            streak: 0,
            streak_sum: 0.0,
        }
    }

    /// The current streak of consistent answers.
    pub fn streak(&self) -> u32 {
        self.streak
    }

    fn set(&mut self, timeout: f64) {
        self.timeout = timeout.clamp(self.min, self.max);
    }

    fn on_answer(&mut self, x: f64) {
        self.extend_streak(x);
        let mean = self.streak_sum / f64::from(self.streak);
        let eps = mean * self.buffer;
        let k = self.gain / (1.0 + f64::from(self.streak).ln());
        self.set(self.timeout - k * (self.timeout - (x + eps)));
    }

    /// Extends the streak with `x` if it is within tolerance of the streak's mean, else restarts it.
    fn extend_streak(&mut self, x: f64) {
        let consistent = self.streak > 0 && {
            let mean = self.streak_sum / f64::from(self.streak);
            (x - mean).abs() <= self.tolerance * mean
        };
        if consistent {
            self.streak = self.streak.saturating_add(1);
            self.streak_sum += x;
        } else {
            self.streak = 1;
            self.streak_sum = x;
        }
    }

    fn on_timeout(&mut self, attempt: u32, fired: f64) {
        let base = fired / self.factor.powi(attempt.min(i32::MAX as u32) as i32);
        self.set(self.timeout.max(base * self.factor));
        self.streak = 0;
        self.streak_sum = 0.0;
    }
}

impl TimeoutPolicy for Controller {
    fn timeout(&mut self, _now: Time, attempt: u32, _rng: Rng<'_>) -> Option<Duration> {
        let scaled = self.timeout * self.factor.powi(attempt.min(i32::MAX as u32) as i32);
        Some(from_nanos(scaled.min(self.max)))
    }

    fn on_result(&mut self, _now: Time, attempt: u32, _timeout: Option<Duration>, result: AttemptResult) {
        match result {
            AttemptResult::Answered(x) => self.on_answer(nanos(x)),
            AttemptResult::TimedOut(d) => self.on_timeout(attempt, nanos(d)),
        }
    }

    fn current(&self) -> Option<Duration> {
        Some(from_nanos(self.timeout))
    }

    fn learned(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_pcg::Pcg64Mcg;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn us(v: u64) -> Duration {
        Duration::from_micros(v)
    }

    fn answered(c: &mut Controller, attempt: u32, latency: Duration) {
        c.on_result(Time::ZERO, attempt, None, AttemptResult::Answered(latency));
    }

    fn timed_out(c: &mut Controller, attempt: u32, after: Duration) {
        c.on_result(Time::ZERO, attempt, Some(after), AttemptResult::TimedOut(after));
    }

    #[test]
    fn retries_back_off_by_factor() {
        let mut rng = Pcg64Mcg::new(1);
        let mut c = Controller::new(ControllerConfig::paper(ms(20)));
        assert_eq!(c.timeout(Time::ZERO, 0, &mut rng), Some(ms(20)));
        assert_eq!(c.timeout(Time::ZERO, 1, &mut rng), Some(ms(30)));
        assert_eq!(c.timeout(Time::ZERO, 2, &mut rng), Some(ms(45)));
    }

    #[test]
    fn a_success_moves_the_timeout_towards_latency_plus_buffer() {
        let mut c = Controller::new(ControllerConfig::paper(ms(100)));
        // Streak 1, eps = 50 ms · 0.1 = 5 ms, k = 0.1: T = 100 − 0.1·(100 − 55) = 95.5 ms.
        answered(&mut c, 0, ms(50));
        assert_eq!(c.streak(), 1);
        assert_eq!(c.current(), Some(us(95_500)));
        // 55 ms is within 20% of the streak mean (50 ms): streak 2, mean 52.5, eps 5.25 ms,
        // k = 0.1 / (1 + ln 2) = 0.0590616…: T = 95.5 − k·(95.5 − 60.25) = 93.418078 ms.
        answered(&mut c, 0, ms(55));
        assert_eq!(c.streak(), 2);
        assert_eq!(c.current(), Some(Duration::from_nanos(93_418_078)));
        // 80 ms is 52% above the mean: a new streak of one.
        answered(&mut c, 0, ms(80));
        assert_eq!(c.streak(), 1);
    }

    #[test]
    fn a_steady_latency_settles_at_latency_plus_buffer() {
        let mut c = Controller::new(ControllerConfig::paper(ms(20)));
        for _ in 0..20_000 {
            answered(&mut c, 0, ms(10));
        }
        assert_eq!(c.current(), Some(ms(11)));
        assert_eq!(c.streak(), 20_000);
    }

    #[test]
    fn a_timeout_multiplies_by_factor_and_resets_the_streak() {
        let mut c = Controller::new(ControllerConfig::paper(ms(20)));
        answered(&mut c, 0, ms(10));
        answered(&mut c, 0, ms(10));
        // 20 − 0.1·(20 − 11) = 19.1 ms, then 19.1 − 0.0590616…·(19.1 − 11) = 18.621601 ms.
        assert_eq!(c.current(), Some(Duration::from_nanos(18_621_601)));
        assert_eq!(c.streak(), 2);
        timed_out(&mut c, 0, Duration::from_nanos(18_621_601));
        assert_eq!(c.current(), Some(Duration::from_nanos(27_932_402)));
        assert_eq!(c.streak(), 0);
    }

    #[test]
    fn concurrent_timeouts_under_the_same_timeout_back_off_once() {
        let mut c = Controller::new(ControllerConfig::paper(ms(20)));
        timed_out(&mut c, 0, ms(20));
        timed_out(&mut c, 0, ms(20));
        timed_out(&mut c, 0, ms(20));
        assert_eq!(c.current(), Some(ms(30)));
        // The retry (sent under 30 ms · 1.5) times out too: the base it was sent under, 30 ms,
        // backs off to 45 ms.
        timed_out(&mut c, 1, ms(45));
        assert_eq!(c.current(), Some(ms(45)));
    }

    #[test]
    fn a_deadline_clamped_timeout_never_lowers_the_timeout() {
        let mut c = Controller::new(ControllerConfig::paper(ms(20)));
        timed_out(&mut c, 0, ms(2));
        assert_eq!(c.current(), Some(ms(20)));
    }

    #[test]
    fn the_timeout_stays_within_bounds() {
        let mut rng = Pcg64Mcg::new(1);
        let config = ControllerConfig { min: ms(5), max: ms(40), ..ControllerConfig::paper(ms(30)) };
        let mut c = Controller::new(config);
        timed_out(&mut c, 0, ms(30));
        assert_eq!(c.current(), Some(ms(40)));
        assert_eq!(c.timeout(Time::ZERO, 3, &mut rng), Some(ms(40)));
        for _ in 0..1000 {
            answered(&mut c, 0, Duration::ZERO);
        }
        assert_eq!(c.current(), Some(ms(5)));
    }

    #[test]
    fn degenerate_parameters_do_not_panic() {
        let mut rng = Pcg64Mcg::new(1);
        let config = ControllerConfig {
            initial: Duration::MAX,
            factor: f64::NAN,
            tolerance: -1.0,
            buffer: f64::NAN,
            gain: 7.0,
            min: ms(50),
            max: ms(10),
        };
        let mut c = Controller::new(config);
        assert_eq!(c.current(), Some(ms(50)));
        timed_out(&mut c, u32::MAX, Duration::MAX);
        answered(&mut c, u32::MAX, Duration::MAX);
        assert_eq!(c.timeout(Time::ZERO, u32::MAX, &mut rng), Some(ms(50)));
    }
}
