//! Simulated time per request at 50 and at 10,000 replicas, for every balancer: a pick must cost
//! O(1) or O(log n) in the number of replicas n, so 10,000 replicas should run at no less than half
//! the per-request speed of 50 (issue #19). Run with `bench/sim-throughput.sh` or
//! `cargo bench -p tailguard-sim --bench scale`. `SCALE_RUNS` sets the samples per cell (default
//! 5), `SCALE_REQUESTS` the requests per run (default 200,000), `SCALE_BALANCERS` a comma-separated
//! subset of the balancers, `SCALE_LOAD` the backends' utilisation (default 0.7).
//!
//! The model: a gateway (one replica, unlimited workers) balances Poisson arrivals at 70 % (`SCALE_LOAD`)
//! of the backends' capacity over n backends of one worker each, exponential service of 10 ms; 200,000
//! requests per run, no warm-up. Prints the median nanoseconds per simulated request: the thread's CPU
//! time where Linux tells it, so that other work on a shared machine counts less, else wall time.

use std::path::Path;
use std::time::Instant;
use tailguard_model::Experiment;

const BALANCERS: [&str; 7] = ["round-robin", "random", "least-request", "peak-ewma", "bloc", "prequal", "oracle"];
const REPLICAS: [u32; 2] = [50, 10_000];
const SERVICE_S: f64 = 0.010;

fn experiment(replicas: u32, requests: f64, load: f64) -> Experiment {
    let rate = load * f64::from(replicas) / SERVICE_S;
    let duration = requests / rate;
    let variants: String = BALANCERS
        .iter()
        .map(|b| format!("  - name: {b}\n    edges:\n      gateway->backend:\n        balancer: {{ kind: {b} }}\n"))
        .collect();
    let text = format!(
        "name: scale\nseed: 1\nservices:\n  gateway:\n    replicas: 1\n    workers: 0\n    calls:\n      - service: backend\n  backend:\n    replicas: {replicas}\n    workers: 1\n    service_time: {{ dist: exponential, mean: 10ms }}\nnetwork:\n  delay: 250us\nworkload:\n  target: gateway\n  open: {{ rate: {rate}, arrival: poisson }}\n  warmup: 0s\n  duration: {duration}s\nvariants:\n{variants}"
    );
    Experiment::parse(&text, Path::new("scale.yaml")).expect("the bench's experiment parses")
}

/// The nanoseconds this thread has run on a CPU (Linux's schedstat), if the system tells.
fn cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// Median nanoseconds per simulated request of `runs` runs: CPU time where the system tells it
/// (on a shared machine, wall time also counts the waits for a core), else wall time.
fn ns_per_request(experiment: &Experiment, variant: &str, runs: usize) -> f64 {
    let run = experiment.resolve("default", variant, false).expect("resolves");
    let mut samples: Vec<f64> = (0..runs)
        .map(|i| {
            let (started, cpu) = (Instant::now(), cpu_ns());
            let (result, _) = tailguard_sim::run_one(&run, 1 + i as u64).expect("runs");
            let ns = match (cpu, cpu_ns()) {
                (Some(before), Some(after)) => (after - before) as f64,
                _ => started.elapsed().as_secs_f64() * 1e9,
            };
            ns / result.requests as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[runs / 2]
}

fn main() {
    let env = |name: &str| std::env::var(name).ok();
    let runs: usize = env("SCALE_RUNS").and_then(|r| r.parse().ok()).unwrap_or(5);
    let requests: f64 = env("SCALE_REQUESTS").and_then(|r| r.parse().ok()).unwrap_or(200_000.0);
    let load: f64 = env("SCALE_LOAD").and_then(|r| r.parse().ok()).unwrap_or(0.7);
    let only = env("SCALE_BALANCERS").unwrap_or_default();
    let experiments: Vec<Experiment> = REPLICAS.iter().map(|&n| experiment(n, requests, load)).collect();
    let clock = if cpu_ns().is_some() { "CPU time" } else { "wall time" };
    println!("ns of {clock} per simulated request, median of {runs} runs of {requests} requests, one thread");
    println!("{:<14} {:>12} {:>12} {:>22}", "balancer", "50 replicas", "10,000", "speed at 10,000 / 50");
    for balancer in BALANCERS.into_iter().filter(|b| only.is_empty() || only.split(',').any(|o| o == *b)) {
        let [small, large] = [0, 1].map(|i| ns_per_request(&experiments[i], balancer, runs));
        println!("{balancer:<14} {small:>12.0} {large:>12.0} {:>22.2}", small / large);
    }
}
