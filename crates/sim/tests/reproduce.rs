//! The seeds' experiments, reproduced in the simulator with the bounds issue #2 asks for.
//! Each runs the example file as a user would (`tailguard sim examples/X.yaml`), with its seed.

use crate::common::{example, get};
use tailguard_sim::{simulate, Options, Results, RunResult};

fn run(name: &str, quick: bool) -> Results {
    let experiment = example(name);
    let seed = experiment.seed().expect("examples carry their seed");
    simulate(&experiment, Options { seed, quick, threads: 2, ..Options::default() }, |_| {})
        .unwrap_or_else(|e| panic!("{e}"))
}

fn range(r: &RunResult) -> f64 {
    r.latency_ms.p90 - r.latency_ms.p10
}

#[test]
fn bloc_narrows_the_distribution_at_40x10() {
    let results = run("bloc.yaml", false);
    let lr = get(&results, "40x10", "least-request");
    let bloc = get(&results, "40x10", "bloc");
    let oracle = get(&results, "40x10", "oracle");
    let lr1 = get(&results, "1x10", "least-request");
    let show = |r: &RunResult| format!("{}/{} {:?} success {}", r.scenario, r.variant, r.latency_ms, r.success_rate);
    let context = [lr, bloc, oracle, lr1].map(show).join("\n");
    assert!(bloc.latency_ms.p99 <= 0.5 * lr.latency_ms.p99, "{context}");
    assert!(range(bloc) <= 0.5 * range(lr), "{context}");
    assert!(bloc.success_rate >= 0.98, "{context}");
    assert!(bloc.latency_ms.p99 <= 1.3 * oracle.latency_ms.p99, "{context}");
    // Little's law pins every policy's mean at 2.5 s (100 clients, 40 requests/s); a capacity of 10
    // held requests bounds bloc at 10 × 250 ms, so its p99 can only be that mean.
    assert!(bloc.latency_ms.p99 <= 2502.0, "{context}");
    assert!(range(lr) >= 1.5 * range(lr1), "{context}");
}

#[test]
fn prequal_beats_least_request_at_40x10_but_not_the_oracle() {
    let results = run("bloc.yaml", false);
    let [lr, prequal, oracle] = ["least-request", "prequal", "oracle"].map(|v| get(&results, "40x10", v));
    let show = |r: &RunResult| format!("{}/{} {:?} success {}", r.scenario, r.variant, r.latency_ms, r.success_rate);
    let context = [lr, prequal, oracle].map(show).join("\n");
    // Measured (seed 42): p99 4.0 s against least-request's 5.25 s and the oracle's 2.5 s. Without
    // admission or retries, 40 frontends with a probe pool each still pile onto the same backends.
    assert_eq!(prequal.success_rate, 1.0, "{context}");
    assert!(prequal.latency_ms.p99 <= 0.8 * lr.latency_ms.p99, "{context}");
    assert!(prequal.latency_ms.p99 <= 1.7 * oracle.latency_ms.p99, "{context}");
}

#[test]
fn adaptive_timeouts_stay_tight_under_every_latency_model() {
    let results = run("timeouts.yaml", false);
    let scenarios = [
        "stable",
        "random-walk",
        "slow-increase",
        "slow-decrease",
        "fast-increase",
        "fast-decrease",
        "spikes",
        "dips",
        "lossy",
    ];
    for scenario in scenarios {
        let a = get(&results, scenario, "adaptive");
        let context = format!("{scenario}: {a:?}");
        // lossy loses 1 % of its answers, each a timeout no policy avoids: issue #18's bound there
        // is the loss + 0.5 % (racing its lost attempts fires on a few answers too).
        let timeouts = if scenario == "lossy" { 1.5 } else { 1.0 };
        assert!(a.timeouts_pct <= timeouts, "{context}");
        assert!(a.closeness_pct <= 25.0, "{context}");
        let bound = if scenario == "spikes" { 1.15 } else { 1.05 };
        assert!(a.time_fraction <= bound, "{context}");
        assert!(a.success_rate >= 0.999, "{context}");
    }
    for scenario in ["slow-increase", "fast-increase", "lossy"] {
        let a = get(&results, scenario, "adaptive").time_fraction;
        let exp = get(&results, scenario, "exp-backoff").time_fraction;
        let ctl = get(&results, scenario, "controller").time_fraction;
        assert!(a < exp && a < ctl, "{scenario}: adaptive {a}, exp-backoff {exp}, controller {ctl}");
    }
}

#[test]
fn speculative_attempts_cut_the_tail() {
    let results = run("speculative.yaml", false);
    let none = get(&results, "default", "none");
    let spec = get(&results, "default", "speculative");
    let context = format!("none {:?}\nspeculative {:?} extra {}", none.latency_ms, spec.latency_ms, spec.extra_load);
    // The unhedged store looks like the post's Redis.
    assert!((14.0..=16.5).contains(&none.latency_ms.p50), "{context}");
    assert!((100.0..=140.0).contains(&none.latency_ms.p99), "{context}");
    assert!((290.0..=420.0).contains(&none.latency_ms.p999), "{context}");
    assert!(spec.latency_ms.p999 <= 0.3 * none.latency_ms.p999, "{context}");
    assert!(spec.latency_ms.p99 <= 0.5 * none.latency_ms.p99, "{context}");
    assert!(spec.extra_load <= 0.05, "{context}");
}

#[test]
fn an_adaptive_timeout_makes_the_case_for_timeouts() {
    let results = run("case-for-timeouts.yaml", false);
    let none = get(&results, "default", "no-timeout");
    let fixed = get(&results, "default", "timeout-3s");
    let adaptive = get(&results, "default", "adaptive");
    let context = format!("{none:?}\n{fixed:?}\n{adaptive:?}");
    assert!(none.latency_ms.p99 >= 9_000.0, "{context}");
    assert!((0.88..=0.92).contains(&fixed.success_rate), "{context}");
    assert!(adaptive.success_rate >= 0.999, "{context}");
    assert!(adaptive.latency_ms.p99 < 500.0, "{context}");
}

#[test]
fn triangle_runs_every_variant() {
    let results = run("triangle.yaml", true);
    assert_eq!(results.runs.len(), 3);
    for r in &results.runs {
        assert!(r.requests > 2_000 && r.success_rate > 0.99, "{r:?}");
    }
    let retried = get(&results, "default", "adaptive");
    assert!(retried.success_rate > get(&results, "default", "no-timeout").success_rate, "{retried:?}");
}

#[test]
fn the_same_seed_gives_byte_identical_json() {
    let a = serde_json::to_string(&run("bloc.yaml", true)).unwrap();
    let b = serde_json::to_string(&run("bloc.yaml", true)).unwrap();
    assert_eq!(a, b);
    let experiment = example("bloc.yaml");
    let other = simulate(&experiment, Options { seed: 43, quick: true, ..Options::default() }, |_| {}).unwrap();
    assert_ne!(a, serde_json::to_string(&other).unwrap(), "another seed gives other results");
}
