//! Issue #17: `hedge: {kind: adaptive}` with its defaults, against no hedging, on the example
//! files. The defaults (the 96th percentile sliding to none as the median reaches 1.5 × its base;
//! with `callee_cancels: false` the gate on the 90th percentile at 1.25 ×) were chosen on
//! examples/speculative.yaml with seeds 3–6 and on examples/hedging.yaml with seeds 1–4 and 17;
//! the bounds are asserted on the files' seeds and on seeds that played no part in the choice.

use std::path::Path;
use tailguard_model::Experiment;
use tailguard_sim::{simulate, Options, RunResult};

/// Seeds never looked at while the defaults were chosen.
const HELD_OUT: [u64; 3] = [101, 202, 303];

/// Seeds first run after the rule for a shut gate (the sliding percentile stops at the 100th) was
/// found on seed 101's stall-90: it has no constant of its own, and these check it.
const FRESH: [u64; 3] = [404, 505, 606];

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
/// quarter, for at most 5 % extra attempts (measured 0.42 × and 0.17–0.21 × at 3.7–3.8 %). The
/// issue asks p99.9 ≤ 0.15 ×: out of reach within 5 % extra attempts for one hedge or for two or
/// three (0.170 × at best on the store's distribution); docs/policies.md works it out.
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

/// The utilisation a scenario of examples/hedging.yaml is named for (`bimodal-70` → 70).
fn utilisation(scenario: &str) -> u32 {
    scenario.rsplit('-').next().and_then(|u| u.parse().ok()).unwrap_or_else(|| panic!("{scenario}: no utilisation"))
}

/// examples/hedging.yaml (quick), every scenario and every run (seeds 17, 101, 202, 303, 404, 505
/// and 606): adaptive never loses success against no hedging, its p99 and p99.9 are at most 1.02
/// × no hedging's, and at utilisations up to 50 % its p99.9 is at most 0.3 × no hedging's.
///
/// Measured: the worst run is 0.90 × (seed 101's bimodal-95); at most 0.56 × up to 80 %. When the
/// gate shut hedging altogether, seed 101's stall-90 was 1.022 × and seed 606's stall-95 1.235 ×:
/// the requests stuck behind the stalled replica and its backlog, none hedged (docs/policies.md).
#[test]
fn adaptive_never_hurts_across_the_utilisation_sweep() {
    for seed in [17].into_iter().chain(HELD_OUT).chain(FRESH) {
        let runs = runs("hedging.yaml", seed, true, &["none", "adaptive"]);
        assert_eq!(runs.len(), 42, "21 scenarios, two variants");
        for adaptive in runs.iter().filter(|r| r.variant == "adaptive") {
            let scenario = adaptive.scenario.as_str();
            let none = find(&runs, scenario, "none");
            let (n, a) = (&none.latency_ms, &adaptive.latency_ms);
            let at = format!("seed {seed}, {scenario}: p99 {} / {}, p99.9 {} / {}", a.p99, n.p99, a.p999, n.p999);
            assert!(adaptive.success_rate >= none.success_rate, "{at}");
            assert!(a.p99 <= 1.02 * n.p99 && a.p999 <= 1.02 * n.p999, "{at}");
            if utilisation(scenario) <= 50 {
                assert!(a.p999 <= 0.3 * n.p999, "{at}");
            }
        }
    }
}

/// examples/hedging.yaml (quick) with a store that does not stop cancelled work (`cancellable:
/// false`: a losing attempt keeps its worker), seeds 17, 101, 202 and 303.
fn uncancellable_runs(declared: bool) -> Vec<(u64, Vec<RunResult>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hedging.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut uncancellable = text.replacen("    workers: 4\n", "    workers: 4\n    cancellable: false\n", 1);
    assert_ne!(uncancellable, text, "the store's `workers: 4` line is there");
    if declared {
        let adaptive = "hedge: { kind: adaptive }";
        assert_eq!(uncancellable.matches(adaptive).count(), 1, "one adaptive variant");
        uncancellable = uncancellable.replace(adaptive, "hedge: { kind: adaptive, callee_cancels: false }");
    }
    let seeds = [17].into_iter().chain(HELD_OUT);
    seeds.map(|seed| (seed, run_text(&uncancellable, &path, seed, true, &["none", "adaptive"]))).collect()
}

/// The worst of p99 and p99.9 over no hedging's, for every adaptive run whose utilisation passes
/// `keep`; success is never below no hedging's.
fn ratios(runs: &[(u64, Vec<RunResult>)], keep: impl Fn(u32) -> bool) -> Vec<(String, u32, f64)> {
    let mut out = Vec::new();
    for (seed, runs) in runs {
        for adaptive in runs.iter().filter(|r| r.variant == "adaptive" && keep(utilisation(&r.scenario))) {
            let none = find(runs, &adaptive.scenario, "none");
            let (n, a) = (&none.latency_ms, &adaptive.latency_ms);
            let at = format!("seed {seed}, {}", adaptive.scenario);
            assert!(adaptive.success_rate >= none.success_rate, "{at}: success");
            out.push((at, utilisation(&adaptive.scenario), (a.p99 / n.p99).max(a.p999 / n.p999)));
        }
    }
    out
}

/// A store that does not stop cancelled work, declared (`callee_cancels: false`): success never
/// below no hedging's, p99 and p99.9 within 1.02 × no hedging's up to 50 % utilisation, and above
/// it within the worst measured (1.25 × at 70 %, 1.56 × at 80 %, 1.17 × at 90 %, 1.30 × at 95 %,
/// all on held-out seeds; no hedging at all is the only rule found that stays within 1.02 there,
/// docs/policies.md).
#[test]
fn a_declared_callee_that_does_not_cancel_is_hedged_within_measured_bounds() {
    let bound = |u: u32| match u {
        ..=50 => 1.02,
        70 => 1.25,
        80 => 1.6,
        90 => 1.2,
        _ => 1.35,
    };
    let ratios = ratios(&uncancellable_runs(true), |_| true);
    assert_eq!(ratios.len(), 84, "21 scenarios, four seeds");
    for (at, u, ratio) in ratios {
        assert!(ratio <= bound(u), "{at}: {ratio} × no hedging's");
    }
}

/// The same store, undeclared (the default rule for a callee that cancels): up to 30 %
/// utilisation it never hurts (at most 0.55 ×); from 50 % it does (seed 17's heavy-50: p99 3.35 ×
/// no hedging's; up to 3.5–8 × at 70–95 %), which is what `callee_cancels: false` is for.
#[test]
fn an_undeclared_callee_that_does_not_cancel_is_safe_at_low_load_only() {
    let ratios = ratios(&uncancellable_runs(false), |u| u <= 50);
    assert_eq!(ratios.len(), 36, "three services at 10, 30 and 50 %, four seeds");
    for (at, u, ratio) in &ratios {
        assert!(*u == 50 || *ratio <= 1.02, "{at}: {ratio} × no hedging's");
    }
    let worst = ratios.iter().map(|r| r.2).fold(0.0, f64::max);
    assert!(worst > 2.0, "the undeclared rule hurts at 50 % (worst {worst}): update the docs if it no longer does");
}
