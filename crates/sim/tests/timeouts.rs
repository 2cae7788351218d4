//! Issue #18: timeouts that hold on any latency distribution, and after an outage. Each check runs
//! an example over five seeds that are not the file's own, so no constant fits one draw.

use std::path::PathBuf;
use tailguard_model::Experiment;
use tailguard_sim::{simulate, Options, RunResult};

const SEEDS: [u64; 5] = [101, 102, 103, 104, 105];

fn example(name: &str) -> Experiment {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name);
    Experiment::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// Every run of `name` for each seed, with `variants` only (all when empty).
fn runs(name: &str, seeds: &[u64], variants: &[&str]) -> Vec<Vec<RunResult>> {
    let experiment = example(name);
    let variants = variants.iter().map(|v| v.to_string()).collect();
    seeds
        .iter()
        .map(|&seed| {
            let options = Options { seed, threads: 2, variants: Vec::clone(&variants), ..Options::default() };
            simulate(&experiment, options, |_| {}).unwrap_or_else(|e| panic!("{e}")).runs
        })
        .collect()
}

fn show(r: &RunResult) -> String {
    let l = &r.latency_ms;
    format!(
        "{:<14}{:<12} p99 {:>8.1} p99.9 {:>8.1} max {:>8.1} success {:.4} timeouts {:>5.2}% frac {:.3} close {:>6.1}% extra {:.3} goodput {:.1}",
        r.scenario, r.variant, l.p99, l.p999, l.max, r.success_rate, r.timeouts_pct, r.time_fraction, r.closeness_pct, r.extra_load, r.throughput_rps
    )
}

#[test]
#[ignore = "prints the runs"]
fn print_timeouts() {
    let name = std::env::var("EXAMPLE").unwrap_or("timeouts.yaml".into());
    let seeds: Vec<u64> = std::env::var("SEEDS").map(|s| s.split(',').map(|x| x.parse().unwrap()).collect()).unwrap_or(SEEDS.to_vec());
    for (seed, runs) in seeds.iter().zip(runs(&name, &seeds, &[])) {
        println!("seed {seed}");
        for r in &runs {
            println!("{}", show(r));
        }
    }
}
