//! examples/balancing.yaml (issue 19): the balancers under open and closed loop, unlike backends,
//! a gray failure, a lost replica and a fast-erroring one.

use std::path::PathBuf;
use tailguard_model::Experiment;
use tailguard_sim::{simulate, Options, Results, RunResult};

fn example() -> Experiment {
    let name = std::env::var("BALANCING_FILE").unwrap_or_else(|_| "balancing.yaml".into());
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name);
    Experiment::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn run(seed: u64, quick: bool) -> Results {
    simulate(&example(), Options { seed, quick, threads: 2, ..Options::default() }, |_| {})
        .unwrap_or_else(|e| panic!("{e}"))
}

fn get<'a>(results: &'a Results, scenario: &str, variant: &str) -> &'a RunResult {
    results
        .runs
        .iter()
        .find(|r| r.scenario == scenario && r.variant == variant)
        .unwrap_or_else(|| panic!("no run {scenario}/{variant}"))
}

/// Prints every run's p99, p99.9 and success (`BALANCING_SEEDS=1,2,3 cargo test --release -p
/// tailguard-sim --test balancing -- --ignored --nocapture`).
#[test]
#[ignore]
fn explore() {
    let seeds = std::env::var("BALANCING_SEEDS").unwrap_or_else(|_| "19".into());
    let quick = std::env::var("BALANCING_FULL").is_err();
    for seed in seeds.split(',').map(|s| s.parse::<u64>().expect("a seed")) {
        let results = run(seed, quick);
        let mut scenario = String::new();
        for r in &results.runs {
            if r.scenario != scenario {
                scenario = r.scenario.clone();
                println!("== seed {seed} {scenario}");
            }
            let oracle = results.runs.iter().find(|o| o.scenario == r.scenario && o.variant == "oracle");
            let ratio = oracle.map_or(f64::NAN, |o| r.latency_ms.p99 / o.latency_ms.p99);
            println!(
                "  {:22} p99 {:9.1} p999 {:9.1} success {:7.3} % x{:.2}",
                r.variant,
                r.latency_ms.p99,
                r.latency_ms.p999,
                100.0 * r.success_rate,
                ratio
            );
        }
    }
}
