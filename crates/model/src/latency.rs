//! Latency models: how a service's latency changes over a run, as a factor on its service time.
//!
//! These are the eight scenarios of adaptive-timeouts.txt §5.2 (stable, mean-reverting random
//! walk, slow increase and decrease, fast increase and decrease, spikes, dips), with the paper's
//! absolute latencies (0.1 ms → 0.4 ms) written as factors (1 → 4) so one model fits any service.
//!
//! Defaults where the paper gives none, chosen so a model without times fits any run:
//! - slow changes ramp over the whole run: `start` 0, `end` the run's horizon (warm-up +
//!   duration); a run sized by `requests` has no horizon, so `end` must then be given;
//! - fast changes happen at half the horizon (`at`) and take `ramp` = 1 s, linearly;
//! - spikes and dips: the first one starts at `every` (the run starts at `base`, so adaptive
//!   policies first learn the base), each lasts `length`;
//! - the random walk starts at `mean`, is stepped every `step` (1 s) and is constant in between.

use crate::duration::Dur;
use crate::error::ModelError;
use crate::schema::LatencyModel;
use rand::SeedableRng;
use rand_distr::{Distribution as _, StandardNormal};
use rand_pcg::Pcg64Mcg;
use std::time::Duration;

/// The default step of the random walk.
pub const DEFAULT_WALK_STEP: Duration = Duration::from_secs(1);
/// The default duration of a fast increase or decrease.
pub const DEFAULT_FAST_RAMP: Duration = Duration::from_secs(1);

/// A service's latency factor over time, built from a [`LatencyModel`].
#[derive(Clone, Debug)]
pub struct LatencyCurve {
    shape: Shape,
}

#[derive(Clone, Debug)]
enum Shape {
    Stable,
    /// `from` until `start`, `to` from `end`, linear in between (seconds).
    Ramp {
        from: f64,
        to: f64,
        start: f64,
        end: f64,
    },
    /// `base`, and `other` during `[k·every, k·every + length)` for k ≥ 1.
    Periodic {
        base: f64,
        other: f64,
        every: Duration,
        length: Duration,
    },
    Walk(Walk),
}

/// The random walk's path, computed lazily and kept, so any order of queries sees one path.
#[derive(Clone, Debug)]
struct Walk {
    mean: f64,
    volatility: f64,
    reversion: f64,
    step: Duration,
    floor: f64,
    rng: Pcg64Mcg,
    /// `path[k]` is the factor during step k.
    path: Vec<f64>,
}

impl Walk {
    fn at(&mut self, k: usize) -> f64 {
        let dt = self.step.as_secs_f64();
        while self.path.len() <= k {
            let x = *self.path.last().expect("the path starts at the mean");
            let z: f64 = StandardNormal.sample(&mut self.rng);
            let next = x + self.reversion * (self.mean - x) * dt + self.volatility * dt.sqrt() * z;
            self.path.push(next.max(self.floor));
        }
        self.path[k]
    }
}

impl LatencyCurve {
    /// Factor 1 throughout.
    pub fn stable() -> LatencyCurve {
        LatencyCurve { shape: Shape::Stable }
    }

    /// The factor on the service time at `t` from the run's start. Queries may come in any order;
    /// the random walk computes its path up to `t` once and keeps it.
    pub fn factor(&mut self, t: Duration) -> f64 {
        match &mut self.shape {
            Shape::Stable => 1.0,
            Shape::Ramp { from, to, start, end } => {
                let t = t.as_secs_f64();
                if t < *start {
                    *from
                } else if t >= *end {
                    *to
                } else {
                    *from + (*to - *from) * (t - *start) / (*end - *start)
                }
            }
            Shape::Periodic { base, other, every, length } => {
                let k = t.as_nanos() / every.as_nanos();
                let into = t.as_nanos() % every.as_nanos();
                if k >= 1 && into < length.as_nanos() {
                    *other
                } else {
                    *base
                }
            }
            Shape::Walk(walk) => {
                let k = t.as_nanos() / walk.step.as_nanos();
                walk.at(usize::try_from(k).unwrap_or(usize::MAX))
            }
        }
    }
}

impl LatencyModel {
    /// Checks the parameters and builds the curve. `horizon` is the run's length (warm-up +
    /// duration) when known, for the defaults of the time-less models; `seed` seeds the random
    /// walk's own generator. Errors name the parameter at fault, relative to the model.
    pub fn curve(&self, horizon: Option<Duration>, seed: u64) -> Result<LatencyCurve, ModelError> {
        let shape = match self {
            LatencyModel::Stable => Shape::Stable,
            LatencyModel::RandomWalk { mean, volatility, reversion, step } => {
                if !(mean.is_finite() && *mean > 0.0) {
                    return Err(ModelError::at("mean", format!("expected a factor > 0, got {mean}")));
                }
                non_negative("volatility", *volatility)?;
                non_negative("reversion", *reversion)?;
                let step = step.map_or(DEFAULT_WALK_STEP, |s| s.get());
                if step.is_zero() {
                    return Err(ModelError::at("step", "expected a positive duration, got 0s"));
                }
                Shape::Walk(Walk {
                    mean: *mean,
                    volatility: *volatility,
                    reversion: *reversion,
                    step,
                    floor: 0.05 * mean,
                    rng: Pcg64Mcg::seed_from_u64(seed),
                    path: vec![*mean],
                })
            }
            LatencyModel::SlowIncrease { from, to, start, end }
            | LatencyModel::SlowDecrease { from, to, start, end } => {
                factors([("from", *from), ("to", *to)])?;
                let start = start.map_or(Duration::ZERO, |s| s.get());
                let end = match (end, horizon) {
                    (Some(end), _) => end.get(),
                    (None, Some(h)) => h,
                    (None, None) => {
                        return Err(ModelError::at(
                            "end",
                            "expected a duration: the run has no fixed length (it counts requests), so the end of the change must be given",
                        ))
                    }
                };
                if end < start {
                    return Err(ModelError::at(
                        "end",
                        format!("expected a time after start ({}), got {}", Dur(start), Dur(end)),
                    ));
                }
                Shape::Ramp { from: *from, to: *to, start: start.as_secs_f64(), end: end.as_secs_f64() }
            }
            LatencyModel::FastIncrease { from, to, at, ramp } | LatencyModel::FastDecrease { from, to, at, ramp } => {
                factors([("from", *from), ("to", *to)])?;
                let at = match (at, horizon) {
                    (Some(at), _) => at.get(),
                    (None, Some(h)) => h / 2,
                    (None, None) => {
                        return Err(ModelError::at(
                            "at",
                            "expected a duration: the run has no fixed length (it counts requests), so the time of the change must be given",
                        ))
                    }
                };
                let ramp = ramp.map_or(DEFAULT_FAST_RAMP, |r| r.get());
                let (start, end) = (at.as_secs_f64(), (at + ramp).as_secs_f64());
                Shape::Ramp { from: *from, to: *to, start, end }
            }
            LatencyModel::Spikes { base, peak: other, every, length } => {
                periodic([("base", *base), ("peak", *other)], *every, *length)?
            }
            LatencyModel::Dips { base, low: other, every, length } => {
                periodic([("base", *base), ("low", *other)], *every, *length)?
            }
        };
        Ok(LatencyCurve { shape })
    }
}

fn periodic(levels: [(&str, f64); 2], every: Dur, length: Dur) -> Result<Shape, ModelError> {
    factors(levels)?;
    if every.get().is_zero() {
        return Err(ModelError::at("every", "expected a positive duration, got 0s"));
    }
    if length > every {
        return Err(ModelError::at("length", format!("expected at most every ({every}), got {length}")));
    }
    Ok(Shape::Periodic { base: levels[0].1, other: levels[1].1, every: every.get(), length: length.get() })
}

fn non_negative(field: &str, x: f64) -> Result<(), ModelError> {
    if !(x.is_finite() && x >= 0.0) {
        return Err(ModelError::at(field, format!("expected a number >= 0, got {x}")));
    }
    Ok(())
}

/// Both factors of a two-level model must be usable multipliers.
fn factors(levels: [(&str, f64); 2]) -> Result<(), ModelError> {
    for (field, x) in levels {
        if !(x.is_finite() && x >= 0.0) {
            return Err(ModelError::at(field, format!("expected a factor >= 0, got {x}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(text: &str) -> LatencyModel {
        serde_yaml_ng::from_str(text).unwrap()
    }

    fn curve(text: &str, horizon: Option<u64>) -> LatencyCurve {
        model(text).curve(horizon.map(Duration::from_secs), 42).unwrap()
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn stable_is_one() {
        let mut c = curve("{kind: stable}", None);
        assert_eq!(c.factor(secs(0.0)), 1.0);
        assert_eq!(c.factor(secs(1e6)), 1.0);
    }

    #[test]
    fn slow_increase_ramps_over_the_horizon_by_default() {
        let mut c = curve("{kind: slow-increase, from: 1, to: 4}", Some(100));
        assert_eq!(c.factor(secs(0.0)), 1.0);
        assert_eq!(c.factor(secs(50.0)), 2.5);
        assert_eq!(c.factor(secs(100.0)), 4.0);
        assert_eq!(c.factor(secs(200.0)), 4.0);
    }

    #[test]
    fn slow_decrease_honours_start_and_end() {
        let mut c = curve("{kind: slow-decrease, from: 4, to: 1, start: 10s, end: 20s}", None);
        assert_eq!(c.factor(secs(5.0)), 4.0);
        assert_eq!(c.factor(secs(15.0)), 2.5);
        assert_eq!(c.factor(secs(20.0)), 1.0);
    }

    #[test]
    fn fast_changes_happen_at_half_the_horizon_over_one_second() {
        let mut c = curve("{kind: fast-increase, from: 1, to: 4}", Some(60));
        assert_eq!(c.factor(secs(29.9)), 1.0);
        assert_eq!(c.factor(secs(30.5)), 2.5);
        assert_eq!(c.factor(secs(31.0)), 4.0);
        let mut c = curve("{kind: fast-decrease, from: 4, to: 1, at: 5s, ramp: 0s}", None);
        assert_eq!(c.factor(secs(4.999)), 4.0);
        assert_eq!(c.factor(secs(5.0)), 1.0);
    }

    #[test]
    fn spikes_and_dips_repeat_from_the_first_period() {
        let mut c = curve("{kind: spikes, base: 1, peak: 4, every: 10s, length: 2s}", None);
        let got: Vec<f64> = [0.0, 1.0, 9.9, 10.0, 11.9, 12.0, 20.5, 25.0].iter().map(|&t| c.factor(secs(t))).collect();
        assert_eq!(got, [1.0, 1.0, 1.0, 4.0, 4.0, 1.0, 4.0, 1.0]);
        let mut c = curve("{kind: dips, base: 4, low: 1, every: 10s, length: 2s}", None);
        assert_eq!(c.factor(secs(3.0)), 4.0);
        assert_eq!(c.factor(secs(31.0)), 1.0);
    }

    #[test]
    fn random_walk_is_deterministic_in_any_query_order() {
        let text = "{kind: random-walk, volatility: 0.5, reversion: 0.3}";
        let mut forward = curve(text, None);
        let ahead: Vec<f64> = (0..50).map(|s| forward.factor(secs(f64::from(s) + 0.5))).collect();
        let mut backward = curve(text, None);
        let mut behind: Vec<f64> = (0..50).rev().map(|s| backward.factor(secs(f64::from(s)))).collect();
        behind.reverse();
        assert_eq!(ahead, behind);
        assert_eq!(ahead[0], 1.0, "the walk starts at its mean");
        assert!(ahead.iter().all(|&x| x >= 0.05), "floored at 0.05 · mean");
        assert!(ahead.windows(2).any(|w| w[0] != w[1]), "it moves");
        // Another seed gives another path.
        let mut other = model(text).curve(None, 43).unwrap();
        assert_ne!(other.factor(secs(10.0)), ahead[10]);
    }

    #[test]
    fn random_walk_follows_the_update_rule() {
        // With no volatility the walk is the deterministic reversion x += 0.5·(2 − x)·1.
        let mut c = curve("{kind: random-walk, mean: 2, volatility: 0, reversion: 0.5, step: 1s}", None);
        c = match c.shape {
            Shape::Walk(mut w) => {
                w.path = vec![0.0];
                LatencyCurve { shape: Shape::Walk(w) }
            }
            _ => unreachable!(),
        };
        assert_eq!(c.factor(secs(1.0)), 1.0);
        assert_eq!(c.factor(secs(2.0)), 1.5);
        assert_eq!(c.factor(secs(3.0)), 1.75);
    }

    #[test]
    fn the_walk_is_floored() {
        // Strong reversion to the mean overshoots below zero; the floor stops it at 0.05 · mean.
        let mut c = curve("{kind: random-walk, mean: 2, volatility: 0, reversion: 3, step: 1s}", None);
        c = match c.shape {
            Shape::Walk(mut w) => {
                w.path = vec![10.0];
                LatencyCurve { shape: Shape::Walk(w) }
            }
            _ => unreachable!(),
        };
        assert_eq!(c.factor(secs(1.0)), 0.1);
    }

    #[test]
    fn bad_parameters_are_named() {
        let err = |text: &str, horizon: Option<u64>| {
            model(text).curve(horizon.map(Duration::from_secs), 0).unwrap_err().to_string()
        };
        assert!(err("{kind: slow-increase, from: 1, to: 4}", None).starts_with("end: expected a duration"));
        assert!(err("{kind: fast-increase, from: 1, to: 4}", None).starts_with("at: expected a duration"));
        assert_eq!(
            err("{kind: slow-increase, from: 1, to: 4, start: 20s, end: 10s}", None),
            "end: expected a time after start (20s), got 10s"
        );
        assert_eq!(
            err("{kind: spikes, base: 1, peak: 4, every: 1s, length: 2s}", None),
            "length: expected at most every (1s), got 2s"
        );
        assert_eq!(
            err("{kind: random-walk, volatility: -1, reversion: 0.3}", None),
            "volatility: expected a number >= 0, got -1"
        );
        assert_eq!(
            err("{kind: dips, base: 1, low: -2, every: 1s, length: 0s}", Some(1)),
            "low: expected a factor >= 0, got -2"
        );
    }
}
