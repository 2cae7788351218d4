//! The tailguard report: one self-contained HTML page (inline SVG plots, no scripts, no external
//! URLs) drawn from a results JSON of any mode, the simulator's, the lab's or the load generator's.
//!
//! Per scenario it shows what the papers plot: the latency distribution of every variant as a CDF
//! and as a tail CCDF (so p99 and p99.9 are visible), a percentile table, the requests' outcomes,
//! the calls between services, the load of each replica of one service ([`load_service`], the
//! same for every variant) over time (bloc-load-balancing.txt Fig. 4) and, per call edge with a
//! timeout policy, the timeout against the callee's latency (adaptive-timeouts.txt Fig. 7–14).
//! Data a results file lacks (no CDF, no series: mode "load" or older JSON) is replaced by a note,
//! never a panic. [`table`] prints the same results as text, in the same number formats
//! ([`format`]).

pub mod format;
mod html;
mod palette;
mod plots;
pub mod table;

use html::Page;
use tailguard_model::results::{Results, RunResult};

/// The whole report for `results` as one HTML document.
pub fn render_html(results: &Results) -> String {
    let variants = variant_names(results);
    let scenarios = by_scenario(&results.runs);
    let mut page = Page::new(results, &scenarios, &variants);
    for (index, (scenario, runs)) in scenarios.iter().enumerate() {
        page.scenario(index, scenario, runs, &variants);
    }
    page.finish()
}

/// The number of `<svg>` plots [`render_html`] draws for `runs` of one scenario: two latency plots
/// (CDF and tail CCDF) when any run has a successful request, one replica-load plot per run whose
/// replica load is of the scenario's [`load_service`] with two replicas or more, and one plot per
/// timed call edge of each run.
pub fn plot_count(runs: &[&RunResult]) -> usize {
    let latency = if runs.iter().any(|r| r.succeeded > 0) { 2 } else { 0 };
    let service = load_service(runs);
    let per_run = |r: &&RunResult| {
        r.series.as_ref().map_or(0, |s| {
            let load =
                s.replica_load.as_ref().is_some_and(|l| Some(l.service.as_str()) == service && l.replicas.len() >= 2);
            usize::from(load) + s.timeouts.len()
        })
    };
    latency + runs.iter().map(per_run).sum::<usize>()
}

/// The service whose per-replica load the report draws for `runs` of one scenario, so every
/// variant's panel shows the same tier: the one most runs report (ties: the first run's). The
/// simulator and the lab choose it from the model
/// ([`load_service`](tailguard_model::results::load_service)), so all runs of a scenario agree
/// unless a variant changed the calls or service times, or the file is older.
pub fn load_service<'a>(runs: &[&'a RunResult]) -> Option<&'a str> {
    let reported: Vec<&str> =
        runs.iter().filter_map(|r| r.series.as_ref()?.replica_load.as_ref().map(|l| l.service.as_str())).collect();
    let count = |name: &str| reported.iter().filter(|s| **s == name).count();
    // max_by_key keeps the last of equals: scan in reverse so ties go to the first.
    reported.iter().rev().copied().max_by_key(|s| count(s))
}

/// Runs grouped by scenario, in first-appearance order.
pub fn by_scenario(runs: &[RunResult]) -> Vec<(String, Vec<&RunResult>)> {
    let mut groups: Vec<(String, Vec<&RunResult>)> = Vec::new();
    for run in runs {
        match groups.iter_mut().find(|(name, _)| *name == run.scenario) {
            Some((_, group)) => group.push(run),
            None => groups.push((run.scenario.clone(), vec![run])),
        }
    }
    groups
}

/// Every variant name in first-appearance order: a variant keeps its color in every scenario.
fn variant_names(results: &Results) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for run in &results.runs {
        if !names.contains(&run.variant) {
            names.push(run.variant.clone());
        }
    }
    names
}
