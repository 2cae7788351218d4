//! Simulated requests per second of one core on BLOC 40x10 (issue #2 aims at over a million).
//! Run with `cargo bench -p tailguard-sim --bench throughput` or `bench/sim-throughput.sh`.
//! Prints the median of several runs of each variant, single-threaded.

use std::path::PathBuf;
use std::time::Instant;
use tailguard_model::Experiment;

const RUNS: usize = 5;

fn main() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/bloc.yaml");
    let experiment = Experiment::load(&path).expect("examples/bloc.yaml loads");
    println!("bloc 40x10 (examples/bloc.yaml, no warm-up), median of {RUNS} samples of >= 0.5 s each, one thread");
    println!("{:<14} {:>14} {:>14} {:>12}", "variant", "requests/s", "events/s", "virtual/wall");
    for variant in experiment.variant_names() {
        let mut run = experiment.resolve("40x10", &variant, false).expect("resolves");
        // Without the file's 20 s warm-up, as the SimPy peer runs: every request simulated is then
        // counted (with it, 320 s were simulated and 300 s of requests counted).
        run.workload.warmup = tailguard_model::Dur::ZERO;
        let mut samples = Vec::new();
        for _ in 0..RUNS {
            // Repeat the run for at least half a second of wall time, so timer noise stays small.
            let (mut requests, mut events, mut virtual_s, mut reps) = (0.0, 0.0, 0.0, 0);
            let started = Instant::now();
            while reps == 0 || started.elapsed().as_secs_f64() < 0.5 {
                let (result, n) = tailguard_sim::run_one(&run, 42 + reps).expect("runs");
                requests += result.requests as f64;
                events += n as f64;
                virtual_s += result.duration_s;
                reps += 1;
            }
            let wall = started.elapsed().as_secs_f64();
            samples.push((requests / wall, events / wall, virtual_s / wall));
        }
        samples.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (rps, eps, speedup) = samples[RUNS / 2];
        println!("{variant:<14} {rps:>14.0} {eps:>14.0} {speedup:>11.0}x");
    }
}
