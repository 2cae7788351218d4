//! The tailguard report: one self-contained HTML page (inline SVG plots, no scripts, no external
//! URLs) drawn from a results JSON of any mode, the simulator's, the lab's or the load generator's.
//!
//! Per scenario it shows what the papers plot: the latency distribution of every variant as a CDF
//! and as a tail CCDF (so p99 and p99.9 are visible), a percentile table, outcome counts, the load
//! of each replica of the busiest service over time (bloc-load-balancing.txt Fig. 4) and, per call
//! edge with a timeout policy, the timeout against the callee's latency (adaptive-timeouts.txt
//! Fig. 7–14). Data a results file lacks (no CDF, no series: mode "load" or older JSON) is replaced
//! by a note, never a panic.

mod html;
mod palette;
mod plots;

use html::Page;
use tailguard_sim::{Results, RunResult};

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
/// busiest service has two replicas or more, and one plot per timed call edge of each run.
pub fn plot_count(runs: &[&RunResult]) -> usize {
    let latency = if runs.iter().any(|r| r.succeeded > 0) { 2 } else { 0 };
    let per_run = |r: &&RunResult| {
        r.series.as_ref().map_or(0, |s| {
            let load = s.replica_load.as_ref().is_some_and(|l| l.replicas.len() >= 2);
            usize::from(load) + s.timeouts.len()
        })
    };
    latency + runs.iter().map(per_run).sum::<usize>()
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
