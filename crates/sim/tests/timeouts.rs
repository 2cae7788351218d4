//! Issue #18: timeouts that hold on any latency distribution, and after an outage. Each check runs
//! an example over two sets of five seeds that are not the file's own, and the adaptive timeout's
//! constants were chosen on other seeds ([`TRAINING`]), so no constant fits the draws it is
//! checked on.

use crate::common::example;
use tailguard_sim::{simulate, simulate_traced, Options, RunResult};

/// The seeds the adaptive timeout's racing constants were chosen on (the sample's size, the price
/// per extra attempt, the target read two standard errors short): what `print_timeouts` runs by
/// default, never asserted.
const TRAINING: [u64; 5] = [1, 2, 3, 4, 5];

/// The seeds the checks assert on, each set as means over its five: 101–105 (the earlier rule
/// was chosen on them; nothing has been since) and 201–205 (never looked at while choosing).
const CHECKED: [[u64; 5]; 2] = [[101, 102, 103, 104, 105], [201, 202, 203, 204, 205]];

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
    let seeds: Vec<u64> =
        std::env::var("SEEDS").map(|s| s.split(',').map(|x| x.parse().unwrap()).collect()).unwrap_or(TRAINING.to_vec());
    let variants = std::env::var("VARIANTS").unwrap_or_default();
    let variants: Vec<&str> = variants.split(',').filter(|v| !v.is_empty()).collect();
    for (seed, runs) in seeds.iter().zip(runs(&name, &seeds, &variants)) {
        println!("seed {seed}");
        for r in &runs {
            println!("{}", show(r));
        }
    }
}

/// The hang scenario of examples/timeouts-tails.yaml with the hang lasting each of `HANGS`
/// (seconds, default 5, 9.5, 10, 10.5, 11, 13 and 20) instead of 10 s: per variant, the mean
/// over the seeds (`SEEDS`, default [`TRAINING`]) of the slowest success and of the success rate.
/// The slowest success measures when the requests that fail in the hang end, a phase against
/// its length (see [`OPEN`]).
#[test]
#[ignore = "prints the runs"]
fn print_hang_lengths() {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/timeouts-tails.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
    let list = |name: &str, default: &str| -> Vec<String> {
        std::env::var(name).unwrap_or(default.into()).split(',').map(String::from).collect()
    };
    let seeds: Vec<u64> =
        std::env::var("SEEDS").map(|s| s.split(',').map(|x| x.parse().unwrap()).collect()).unwrap_or(TRAINING.to_vec());
    for hang in list("HANGS", "5,9.5,10,10.5,11,13,20") {
        let until: f64 = 30.0 + hang.parse::<f64>().expect("a length in seconds");
        let hang_of_10s = "{ kind: hang, from: 30s, until: 40s }";
        assert!(text.contains(hang_of_10s), "the example's hang is no longer from 30 s until 40 s");
        let hung = text.replace(hang_of_10s, &format!("{{ kind: hang, from: 30s, until: {until}s }}"));
        let experiment = tailguard_model::Experiment::parse(&hung, &path).unwrap_or_else(|e| panic!("{e}"));
        let runs: Vec<Vec<RunResult>> = seeds
            .iter()
            .map(|&seed| {
                let options = Options {
                    seed,
                    threads: 2,
                    scenarios: vec!["hang".into()],
                    variants: TAILS.iter().map(|v| v.to_string()).collect(),
                    ..Options::default()
                };
                simulate(&experiment, options, |_| {}).unwrap_or_else(|e| panic!("{e}")).runs
            })
            .collect();
        for variant in TAILS {
            let max = mean(&runs, "hang", variant, |r| r.latency_ms.max);
            let success = mean(&runs, "hang", variant, |r| r.success_rate);
            println!("hang {hang:>4} s {variant:<12} slowest success {max:>8.1} ms success {:.2} %", 100.0 * success);
        }
    }
}

/// The mean over the seeds of `stat` for one scenario × variant.
fn mean(runs: &[Vec<RunResult>], scenario: &str, variant: &str, stat: impl Fn(&RunResult) -> f64) -> f64 {
    let picked: Vec<f64> = runs
        .iter()
        .map(|seed| {
            let r = seed.iter().find(|r| r.scenario == scenario && r.variant == variant);
            stat(r.unwrap_or_else(|| panic!("no run {scenario}/{variant}")))
        })
        .collect();
    picked.iter().sum::<f64>() / picked.len() as f64
}

fn scenarios(runs: &[Vec<RunResult>]) -> Vec<String> {
    let mut names: Vec<String> = runs[0].iter().map(|r| r.scenario.clone()).collect();
    names.dedup();
    names
}

/// examples/timeouts.yaml: the adaptive timeout's defaults keep the paper's metrics tight on a
/// tight latency distribution, as means over the seeds.
#[test]
fn adaptive_defaults_stay_tight_on_the_papers_latency_models() {
    for seeds in CHECKED {
        adaptive_stays_tight(&seeds);
    }
}

fn adaptive_stays_tight(seeds: &[u64]) {
    let runs = runs("timeouts.yaml", seeds, &["adaptive"]);
    for scenario in scenarios(&runs) {
        let m = |stat: fn(&RunResult) -> f64| mean(&runs, &scenario, "adaptive", stat);
        let (timeouts, fraction, success) = (m(|r| r.timeouts_pct), m(|r| r.time_fraction), m(|r| r.success_rate));
        let context = format!(
            "seeds {seeds:?}, {scenario}: timeouts {timeouts:.2} %, time fraction {fraction:.3}, success {success}"
        );
        // lossy loses 1 % of its answers: each is a timeout no policy avoids.
        let loss = if scenario == "lossy" { 1.0 } else { 0.0 };
        assert!(timeouts <= loss + if loss > 0.0 { 0.5 } else { 1.0 }, "{context}");
        assert!(fraction <= 1.02, "{context}");
        assert!(success >= 0.999, "{context}");
    }
}

const TAILS: [&str; 3] = ["adaptive", "fixed-best", "exp-backoff"];

/// Where the adaptive timeout is still outside issue #18's bounds (means over each set of seeds):
/// on `hang` its slowest success is 2.1 (101–105) and 2.7 (201–205) times the best fixed
/// timeout's (the bound is 1.5) and 1.2 and 1.8 times exp-backoff's. The hang holds every attempt
/// sent into it and answers it when it ends, so the slowest success is the request that
/// straddles the hang's end, and its latency is how long before the end it started: the length
/// of the requests that fail in the hang. The best fixed timeout waits out the 10 s deadline,
/// which is the hang's length, so its straddler started within one service time of the end;
/// exp-backoff spends its budget on 1.1 s requests early in the hang and fails in 24 ms once it
/// is dry, near the end. Both are phases: over hang lengths of 5, 9.5, 10, 10.5, 11, 13 and 20 s
/// (seeds 1–5, [`print_hang_lengths`]) the best fixed timeout's slowest success is 5.0, 9.5,
/// 0.03, 0.53, 1.03, 3.0 and 0.03 s, exp-backoff's 0.53, 0.05, 0.10, 0.59, 1.05, 0.87 and 0.07 s,
/// the adaptive timeout's 0.48, 0.09, 0.05, 0.10, 0.05, 0.45 and 0.07 s. Failing fast in an
/// outage shortens the straddler but fails more of the closed clients' requests: with every
/// wait cut to the spread's timeout once nothing has answered for a ceiling, its slowest success
/// at 10 s is 50 ms (the bound: 51) and its success 90.1 %, under exp-backoff's 96.7 % (which the
/// success check asserts). docs/policies.md has the numbers. No request waits more than 2 s past
/// the hang's end ([`no_request_waits_past_the_hang`]).
const OPEN: [(&str, Check); 1] = [("hang", Check::Max)];

#[derive(Clone, Copy, PartialEq, Debug)]
enum Check {
    /// p99 ≤ 1.05 × the best fixed timeout's and ≤ exp-backoff's.
    P99,
    /// max ≤ 1.5 × the best fixed timeout's and ≤ exp-backoff's.
    Max,
}

/// Whether `scenario` meets `check` for the adaptive timeout, with the figures.
fn meets(runs: &[Vec<RunResult>], scenario: &str, check: Check) -> (bool, String) {
    let stat =
        |v, check| mean(runs, scenario, v, |r| if check == Check::P99 { r.latency_ms.p99 } else { r.latency_ms.max });
    let (factor, name) = if check == Check::P99 { (1.05, "p99") } else { (1.5, "max") };
    let (a, f, e) = (stat("adaptive", check), stat("fixed-best", check), stat("exp-backoff", check));
    let context = format!("{scenario} {name}: adaptive {a:.1}, fixed-best {f:.1}, exp-backoff {e:.1}");
    (a <= factor * f && a <= e, context)
}

/// examples/timeouts-tails.yaml: in every scenario the adaptive timeout's p99 is within 5 % of the
/// best fixed timeout's and its worst latency within 1.5 times, both no worse than exp-backoff's,
/// and its success no worse than exp-backoff's: except where issue #18 is still open ([`OPEN`]).
#[test]
fn adaptive_defaults_hold_on_any_latency_distribution() {
    for seeds in CHECKED {
        let runs = runs("timeouts-tails.yaml", &seeds, &TAILS);
        for scenario in scenarios(&runs) {
            for check in [Check::P99, Check::Max] {
                if OPEN.contains(&(scenario.as_str(), check)) {
                    continue;
                }
                let (ok, context) = meets(&runs, &scenario, check);
                assert!(ok, "seeds {seeds:?}, {context}");
            }
            let success = |v| mean(&runs, &scenario, v, |r| r.success_rate);
            let (a, e) = (success("adaptive"), success("exp-backoff"));
            assert!(a >= e.min(0.999), "seeds {seeds:?}, {scenario}: success {a} vs exp-backoff {e}");
        }
    }
}

/// The bounds of issue #18 not met yet ([`OPEN`]).
#[test]
#[ignore = "issue #18 is open there: see OPEN"]
fn adaptive_meets_the_bounds_still_open() {
    let mut failed = Vec::new();
    for seeds in CHECKED {
        let runs = runs("timeouts-tails.yaml", &seeds, &TAILS);
        let open = OPEN.iter().map(|&(s, c)| meets(&runs, s, c));
        failed.extend(open.filter(|(ok, _)| !ok).map(|(_, c)| format!("seeds {seeds:?}, {c}")));
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// After back's 10 s hang (30 s to 40 s into the run), no request waits more than 2 s beyond its
/// end: attempts lost in the hang are abandoned within a bound tied to the live latency, not
/// awaited until the 10 s deadline.
#[test]
fn no_request_waits_past_the_hang() {
    let experiment = example("timeouts-tails.yaml");
    let (hang_end, slack) = (40_000_000u64, 2_000_000u64);
    for seed in CHECKED.into_iter().flatten() {
        let options = Options {
            seed,
            threads: 2,
            scenarios: vec!["hang".into()],
            variants: vec!["adaptive".into()],
            ..Options::default()
        };
        let (results, traces) =
            simulate_traced(&experiment, options, 1_000_000, |_| {}).unwrap_or_else(|e| panic!("{e}"));
        let requests = results.runs[0].requests as usize;
        assert_eq!(traces.len(), requests, "every request traced");
        let mut through = 0;
        for trace in &traces {
            let root = trace.spans.iter().find(|s| s.parent.is_none()).expect("a root span");
            let end = root.start_us + root.duration_us;
            if root.start_us < hang_end && end > hang_end {
                through += 1;
                assert!(end <= hang_end + slack, "seed {seed}: a request from {} µs ended at {end} µs", root.start_us);
            }
        }
        assert!(through > 0, "seed {seed}: some requests were in flight when the hang ended");
    }
}
