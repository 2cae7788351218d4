//! Issue #17: `hedge: {kind: adaptive}` with its defaults, against no hedging, on the example
//! files. The defaults (the 96th percentile, the gate at 1.25 × the base median) were chosen on
//! examples/speculative.yaml with seeds 3–6 and on examples/hedging.yaml with seeds 1–4 and 17;
//! the bounds are asserted on the files' seeds and on seeds that played no part in the choice.

use std::path::Path;
use tailguard_model::Experiment;
use tailguard_sim::{simulate, Options, RunResult};

/// Seeds never looked at while the defaults were chosen.
const HELD_OUT: [u64; 3] = [101, 202, 303];

fn runs(file: &str, seed: u64, quick: bool, variants: &[&str]) -> Vec<RunResult> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(file);
    let experiment = Experiment::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let variants = variants.iter().map(|v| v.to_string()).collect();
    let options = Options { seed, quick, threads: 2, variants, ..Options::default() };
    simulate(&experiment, options, |_| {}).unwrap_or_else(|e| panic!("{e}")).runs
}

fn find<'a>(runs: &'a [RunResult], scenario: &str, variant: &str) -> &'a RunResult {
    runs.iter().find(|r| r.scenario == scenario && r.variant == variant).expect("every run is there")
}

/// examples/speculative.yaml (full length): p99 at most half of no hedging's and p99.9 at most a
/// quarter, for at most 5 % extra attempts. (The issue asks p99.9 ≤ 0.15 ×: out of reach for any
/// single hedge within 5 %; docs/policies.md works it out.)
#[test]
fn adaptive_cuts_the_speculative_stores_tail_within_five_percent() {
    for seed in [3].into_iter().chain(HELD_OUT) {
        let runs = runs("speculative.yaml", seed, false, &["none", "adaptive"]);
        let (none, adaptive) = (find(&runs, "default", "none"), find(&runs, "default", "adaptive"));
        let (n, a) = (&none.latency_ms, &adaptive.latency_ms);
        assert!(a.p99 <= 0.5 * n.p99, "seed {seed}: p99 {} against {}", a.p99, n.p99);
        assert!(a.p999 <= 0.25 * n.p999, "seed {seed}: p99.9 {} against {}", a.p999, n.p999);
        assert!(adaptive.extra_load <= 0.05, "seed {seed}: extra load {}", adaptive.extra_load);
        assert!(adaptive.extra_load > 0.03, "seed {seed}: it hedges ({})", adaptive.extra_load);
        assert_eq!(adaptive.success_rate, none.success_rate);
    }
}

/// examples/hedging.yaml (quick), every scenario: adaptive never makes p99 or p99.9 more than 2 %
/// worse than no hedging nor loses success, and at utilisations up to 50 % cuts p99.9 to at most
/// 0.3 × no hedging's.
#[test]
fn adaptive_never_hurts_across_the_utilisation_sweep() {
    for seed in [17].into_iter().chain(HELD_OUT) {
        let runs = runs("hedging.yaml", seed, true, &["none", "adaptive"]);
        let scenarios: Vec<&str> = runs.iter().filter(|r| r.variant == "none").map(|r| r.scenario.as_str()).collect();
        assert_eq!(scenarios.len(), 21);
        for scenario in scenarios {
            let (none, adaptive) = (find(&runs, scenario, "none"), find(&runs, scenario, "adaptive"));
            let (n, a) = (&none.latency_ms, &adaptive.latency_ms);
            let at = format!("seed {seed}, {scenario}: p99 {} / {}, p99.9 {} / {}", a.p99, n.p99, a.p999, n.p999);
            assert!(a.p99 <= 1.02 * n.p99 && a.p999 <= 1.02 * n.p999, "{at}");
            assert!(adaptive.success_rate >= none.success_rate, "{at}");
            let utilisation: u32 = scenario.rsplit('-').next().unwrap().parse().unwrap();
            if utilisation <= 50 {
                assert!(a.p999 <= 0.3 * n.p999, "{at}");
            }
        }
    }
}
