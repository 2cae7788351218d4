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
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    run_text(&text, &path, seed, quick, variants)
}

fn run_text(text: &str, path: &Path, seed: u64, quick: bool, variants: &[&str]) -> Vec<RunResult> {
    let experiment = Experiment::parse(text, path).unwrap_or_else(|e| panic!("{e}"));
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
    // The file's variants and outputs stay as they are; the adaptive variant is added here.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/speculative.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let adaptive = "  - name: adaptive\n    edges:\n      app->store:\n        hedge: { kind: adaptive }\n\nquick:";
    let speculative = text.replacen("\nquick:", &format!("\n{adaptive}"), 1);
    assert_ne!(speculative, text, "the variant went in before `quick:`");
    for seed in [3].into_iter().chain(HELD_OUT) {
        let runs = run_text(&speculative, &path, seed, false, &["none", "adaptive"]);
        let (none, adaptive) = (find(&runs, "default", "none"), find(&runs, "default", "adaptive"));
        let (n, a) = (&none.latency_ms, &adaptive.latency_ms);
        assert!(a.p99 <= 0.5 * n.p99, "seed {seed}: p99 {} against {}", a.p99, n.p99);
        assert!(a.p999 <= 0.25 * n.p999, "seed {seed}: p99.9 {} against {}", a.p999, n.p999);
        assert!(adaptive.extra_load <= 0.05, "seed {seed}: extra load {}", adaptive.extra_load);
        assert!(adaptive.extra_load > 0.03, "seed {seed}: it hedges ({})", adaptive.extra_load);
        assert_eq!(adaptive.success_rate, none.success_rate);
    }
}

/// examples/hedging.yaml (quick), every scenario: adaptive never loses success against no
/// hedging, and at utilisations up to 50 % cuts p99.9 to at most 0.3 × no hedging's.
///
/// p99 and p99.9 at most 1.02 × no hedging's: on every seed up to 80 % utilisation. At 90 and 95 %
/// the queue is chaotic (no hedging's p99 ranges from 0.3 to 4 s over seeds on one scenario) and
/// a handful of hedges (0.07 % of requests on seed 3's stall-95) moves a run's p99 by half either
/// way; there the bound holds for the geometric mean of the ratios over the seeds.
#[test]
fn adaptive_never_hurts_across_the_utilisation_sweep() {
    let seeds: Vec<u64> = [17].into_iter().chain(HELD_OUT).collect();
    let runs: Vec<Vec<RunResult>> =
        seeds.iter().map(|&s| runs("hedging.yaml", s, true, &["none", "adaptive"])).collect();
    let scenarios: Vec<&str> = runs[0].iter().filter(|r| r.variant == "none").map(|r| r.scenario.as_str()).collect();
    assert_eq!(scenarios.len(), 21);
    for scenario in scenarios {
        let utilisation: u32 = scenario.rsplit('-').next().unwrap().parse().unwrap();
        let mut log_ratios = [0.0, 0.0];
        for (seed, runs) in seeds.iter().zip(&runs) {
            let (none, adaptive) = (find(runs, scenario, "none"), find(runs, scenario, "adaptive"));
            let (n, a) = (&none.latency_ms, &adaptive.latency_ms);
            let at = format!("seed {seed}, {scenario}: p99 {} / {}, p99.9 {} / {}", a.p99, n.p99, a.p999, n.p999);
            assert!(adaptive.success_rate >= none.success_rate, "{at}");
            if utilisation <= 80 {
                assert!(a.p99 <= 1.02 * n.p99 && a.p999 <= 1.02 * n.p999, "{at}");
            }
            if utilisation <= 50 {
                assert!(a.p999 <= 0.3 * n.p999, "{at}");
            }
            log_ratios[0] += (a.p99 / n.p99).ln();
            log_ratios[1] += (a.p999 / n.p999).ln();
        }
        let mean = log_ratios.map(|x| (x / seeds.len() as f64).exp());
        assert!(mean[0] <= 1.02 && mean[1] <= 1.02, "{scenario}: geometric mean ratios {mean:?}");
    }
}

/// examples/hedging.yaml (quick) with a store that does not stop cancelled work (`cancellable:
/// false`: a losing attempt keeps its worker). Up to 50 % utilisation adaptive never loses
/// success and its p99 and p99.9 stay within 1.02 × no hedging's. Above, it does not hold: at
/// 70–80 % single runs reach 3.8 ×, and no rule tried keeps it without giving up the gains of a
/// store that cancels (docs/policies.md, "Gate signals tried and not adopted").
#[test]
fn adaptive_without_cancellation_never_hurts_up_to_half_load() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hedging.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let uncancellable = text.replacen("    workers: 4\n", "    workers: 4\n    cancellable: false\n", 1);
    assert_ne!(uncancellable, text, "the store's `workers: 4` line is there");
    for seed in [17].into_iter().chain(HELD_OUT) {
        let runs = run_text(&uncancellable, &path, seed, true, &["none", "adaptive"]);
        let mut checked = 0;
        for adaptive in runs.iter().filter(|r| r.variant == "adaptive") {
            let utilisation: u32 = adaptive.scenario.rsplit('-').next().unwrap().parse().unwrap();
            if utilisation > 50 {
                continue;
            }
            let none = find(&runs, &adaptive.scenario, "none");
            let (n, a) = (&none.latency_ms, &adaptive.latency_ms);
            let at =
                format!("seed {seed}, {}: p99 {} / {}, p99.9 {} / {}", adaptive.scenario, a.p99, n.p99, a.p999, n.p999);
            assert!(adaptive.success_rate >= none.success_rate, "{at}");
            assert!(a.p99 <= 1.02 * n.p99 && a.p999 <= 1.02 * n.p999, "{at}");
            checked += 1;
        }
        assert_eq!(checked, 9, "three services at 10, 30 and 50 %");
    }
}
