//! What the simulator's example tests share: loading an example file and finding one run.

use std::path::{Path, PathBuf};
use tailguard_model::Experiment;
use tailguard_sim::{simulate, Options, Results, RunResult};

/// examples/`name`, as a user would load it.
pub fn example(name: &str) -> Experiment {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name);
    Experiment::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// The run of `scenario` × `variant`; panics naming it when there is none.
pub fn get<'a>(results: &'a Results, scenario: &str, variant: &str) -> &'a RunResult {
    results
        .runs
        .iter()
        .find(|r| r.scenario == scenario && r.variant == variant)
        .unwrap_or_else(|| panic!("no run {scenario}/{variant}"))
}

/// An experiment written in a test (`text`, named `name` in its errors), simulated with `seed` on
/// two threads.
pub fn simulate_text(text: &str, name: &str, seed: u64) -> Results {
    let experiment = Experiment::parse(text, Path::new(name)).unwrap_or_else(|e| panic!("{e}"));
    let options = Options { seed, threads: 2, ..Options::default() };
    simulate(&experiment, options, |_| {}).unwrap_or_else(|e| panic!("{e}"))
}

/// The head of an experiment written in a test: one client calling `app`, `replicas` replicas of
/// `workers` workers serving exponential 20 ms, Poisson arrivals at `rate` a second, 5 s of
/// warm-up and 60 s measured. The test appends its variants and scenarios.
pub fn one_caller(name: &str, replicas: u32, workers: u32, rate: u32) -> String {
    format!(
        "name: {name}
services:
  client:
    replicas: 1
    workers: 0
    calls: [ {{ service: app }} ]
  app:
    replicas: {replicas}
    workers: {workers}
    service_time: {{ dist: exponential, mean: 20ms }}
workload:
  target: client
  open: {{ rate: {rate}, arrival: poisson }}
  warmup: 5s
  duration: 60s
"
    )
}
