//! The evaluation of adaptive-timeouts.txt §5.2, replayed on the timeout policies: two services,
//! one request at a time, the callee's latency following a latency model, every timed-out attempt
//! retried at once. It checks that [`Adaptive`] meets our targets on every model and prints the
//! comparison with the paper's policies (`cargo test -p tailguard-policy print_comparison -- --ignored --nocapture`).
//!
//! Our reading of the models (the paper gives only their names and levels, §5.2): 200 warm-up
//! requests at the starting level, then 2000 measured requests; levels are 100 µs and 400 µs
//! (the paper's 0.1 and 0.4 "ms" scaled to the same ratio); each attempt's latency is the model's
//! level times independent log-normal noise (σ = 0.04, as `examples/timeouts.yaml` has it); the random walk is an
//! Ornstein–Uhlenbeck process around 100 µs stepped every 10 requests (reversion 0.3, volatility
//! 10 µs per step), as `examples/timeouts.yaml` has it (1 s steps of ~10 requests);
//! jumps happen at request 1000; spikes and dips last 20 requests every 200; "lossy" is stable with
//! 1% of attempts never answering. An attempt sent without a timeout, and the eighth attempt of a
//! request, wait up to a 20 ms deadline.
//!
//! Metrics as §5.2 defines them: timeouts per attempt; closeness, the mean of
//! `(timeout − latency) / latency` over successful attempts sent with a timeout; time fraction, the
//! sum of the time each request took (timed-out attempts included) over the sum of the latencies
//! its first attempt would have had.

use super::*;
use crate::timeout::{Controller, ControllerConfig, ExpBackoff, Optimizer, OptimizerConfig};
use rand::{Rng as _, SeedableRng};
use rand_pcg::Pcg64Mcg;

const WARMUP: usize = 200;
const REQUESTS: usize = 2000;
const LOW: f64 = 100_000.0;
const HIGH: f64 = 400_000.0;
const DEADLINE: f64 = 20_000_000.0;
const MAX_ATTEMPTS: u32 = 8;

#[derive(Clone, Copy, Debug)]
enum Model {
    Stable,
    RandomWalk,
    SlowIncrease,
    SlowDecrease,
    FastIncrease,
    FastDecrease,
    Spikes,
    Dips,
    Lossy,
}

const MODELS: [Model; 9] = [
    Model::Stable,
    Model::RandomWalk,
    Model::SlowIncrease,
    Model::SlowDecrease,
    Model::FastIncrease,
    Model::FastDecrease,
    Model::Spikes,
    Model::Dips,
    Model::Lossy,
];

impl Model {
    /// The latency level (ns) of every request, warm-up included.
    fn levels(self, rng: &mut Pcg64Mcg) -> Vec<f64> {
        let ramp =
            |from: f64, to: f64, i: usize| from + (to - from) * i.saturating_sub(WARMUP) as f64 / REQUESTS as f64;
        let step = |from: f64, to: f64, i: usize| if i < WARMUP + REQUESTS / 2 { from } else { to };
        let pulse = |base: f64, other: f64, i: usize| {
            let j = i.saturating_sub(WARMUP);
            if i >= WARMUP && j % 200 >= 100 && j % 200 < 120 {
                other
            } else {
                base
            }
        };
        let mut walk = LOW;
        (0..WARMUP + REQUESTS)
            .map(|i| match self {
                Model::Stable | Model::Lossy => LOW,
                Model::RandomWalk => {
                    if i % 10 == 0 {
                        walk += 0.3 * (LOW - walk) + 10_000.0 * normal(rng);
                        walk = walk.max(LOW / 10.0);
                    }
                    walk
                }
                Model::SlowIncrease => ramp(LOW, HIGH, i),
                Model::SlowDecrease => ramp(HIGH, LOW, i),
                Model::FastIncrease => step(LOW, HIGH, i),
                Model::FastDecrease => step(HIGH, LOW, i),
                Model::Spikes => pulse(LOW, HIGH, i),
                Model::Dips => pulse(HIGH, LOW, i),
            })
            .collect()
    }

    fn loss(self) -> f64 {
        if matches!(self, Model::Lossy) {
            0.01
        } else {
            0.0
        }
    }
}

fn normal(rng: &mut Pcg64Mcg) -> f64 {
    let (u, v): (f64, f64) = (rng.gen_range(f64::EPSILON..1.0), rng.gen());
    (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
}

#[derive(Debug, Default)]
struct Metrics {
    attempts: u64,
    timeouts: u64,
    closeness_sum: f64,
    closeness_n: u64,
    observed: f64,
    truth: f64,
}

impl Metrics {
    fn timeouts(&self) -> f64 {
        self.timeouts as f64 / self.attempts as f64
    }
    fn closeness(&self) -> f64 {
        self.closeness_sum / self.closeness_n.max(1) as f64
    }
    fn time_fraction(&self) -> f64 {
        self.observed / self.truth
    }
}

/// Runs one model against one policy; the same seed gives the same latencies to every policy.
fn run(model: Model, sigma: f64, seed: u64, policy: &mut dyn TimeoutPolicy) -> Metrics {
    let mut world = Pcg64Mcg::seed_from_u64(seed);
    let mut policy_rng = Pcg64Mcg::seed_from_u64(seed ^ 0x5eed);
    let levels = model.levels(&mut world);
    let mut m = Metrics::default();
    let mut now = Time::ZERO;
    for (i, &level) in levels.iter().enumerate() {
        let measured = i >= WARMUP;
        let mut spent = 0.0;
        for attempt in 0.. {
            let latency = level * (sigma * normal(&mut world)).exp();
            let lost = world.gen::<f64>() < model.loss();
            if attempt == 0 && measured {
                m.truth += latency;
            }
            let own = policy.timeout(now, attempt, &mut policy_rng);
            // The request's deadline ends it after at most MAX_ATTEMPTS attempts.
            let own = own.filter(|_| attempt + 1 < MAX_ATTEMPTS);
            let limit = own.map_or(DEADLINE, nanos);
            let answered = !lost && latency <= limit;
            let took = if answered { latency } else { limit };
            spent += took;
            now += from_nanos(took);
            let reported = Some(own.unwrap_or(from_nanos(DEADLINE)));
            if measured {
                m.attempts += 1;
            }
            if answered {
                policy.on_result(now, attempt, reported, AttemptResult::Answered(from_nanos(latency)));
                if let (Some(t), true) = (own, measured) {
                    m.closeness_sum += (nanos(t) - latency) / latency;
                    m.closeness_n += 1;
                }
                break;
            }
            policy.on_result(now, attempt, reported, AttemptResult::TimedOut(from_nanos(limit)));
            m.timeouts += u64::from(measured);
        }
        if measured {
            m.observed += spent;
        }
    }
    m
}

/// Builds a policy for a service whose latency starts at the given level (ns).
type Make = Box<dyn Fn(f64) -> Box<dyn TimeoutPolicy>>;

fn policies() -> Vec<(&'static str, Make)> {
    vec![
        ("adaptive", Box::new(|start| Box::new(Adaptive::new(AdaptiveConfig::new(from_nanos(start * 1.2)))))),
        ("controller", Box::new(|start| Box::new(Controller::new(ControllerConfig::paper(from_nanos(start * 1.2)))))),
        ("optimizer", Box::new(|start| Box::new(Optimizer::new(OptimizerConfig::paper(from_nanos(start * 1.2)))))),
        ("exp-backoff", Box::new(|start| Box::new(ExpBackoff::paper(from_nanos(start))))),
    ]
}

fn table(sigma: f64, seed: u64) -> Vec<(Model, &'static str, Metrics)> {
    let mut rows = Vec::new();
    for model in MODELS {
        let start = model.levels(&mut Pcg64Mcg::seed_from_u64(seed))[0];
        for (name, make) in policies() {
            let mut policy = make(start);
            rows.push((model, name, run(model, sigma, seed, policy.as_mut())));
        }
    }
    println!("σ = {sigma}, seed {seed}");
    println!("{:<14}{:<13}{:>9}{:>11}{:>15}", "model", "policy", "timeouts", "closeness", "time fraction");
    for (model, name, m) in &rows {
        let (t, c, f) = (m.timeouts() * 100.0, m.closeness() * 100.0, m.time_fraction());
        println!("{:<14}{:<13}{:>8.2}%{:>10.1}%{:>15.3}", format!("{model:?}"), name, t, c, f);
    }
    rows
}

/// Our targets, as means over five seeds: timeouts ≤ 1% of attempts (on "lossy", ≤ 1% beyond the
/// 1% lost), closeness ≤ 25%, time fraction ≤ 1.05.
#[test]
fn adaptive_meets_the_targets_on_every_model() {
    let seeds = [1, 2, 3, 4, 5];
    for model in MODELS {
        let (mut timeouts, mut closeness, mut fraction) = (0.0, 0.0, 0.0);
        for seed in seeds {
            let start = model.levels(&mut Pcg64Mcg::seed_from_u64(seed))[0];
            let mut policy = Adaptive::new(AdaptiveConfig::new(from_nanos(start * 1.2)));
            let m = run(model, 0.04, seed, &mut policy);
            timeouts += m.timeouts() / seeds.len() as f64;
            closeness += m.closeness() / seeds.len() as f64;
            fraction += m.time_fraction() / seeds.len() as f64;
        }
        assert!(timeouts <= 0.01 + model.loss(), "{model:?}: timeouts {timeouts:.4}");
        assert!(closeness <= 0.25, "{model:?}: closeness {closeness:.4}");
        assert!(fraction <= 1.05, "{model:?}: time fraction {fraction:.4}");
    }
}

#[test]
#[ignore = "prints the comparison with the paper's policies"]
fn print_comparison() {
    for sigma in [0.0, 0.04, 0.1] {
        table(sigma, 1);
    }
}

#[test]
fn the_same_seed_gives_the_same_results() {
    let mut a = Adaptive::new(AdaptiveConfig::new(from_nanos(LOW * 1.2)));
    let mut b = Adaptive::new(AdaptiveConfig::new(from_nanos(LOW * 1.2)));
    let (x, y) = (run(Model::Spikes, 0.04, 9, &mut a), run(Model::Spikes, 0.04, 9, &mut b));
    assert_eq!((x.attempts, x.timeouts, x.observed), (y.attempts, y.timeouts, y.observed));
}
