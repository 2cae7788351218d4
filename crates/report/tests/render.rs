//! The report without a browser: plot counts, notes for missing data, escaping.

use crate::common;

use tailguard_model::results::{ReplicaLoad, Results, Series};
use tailguard_report::{by_scenario, load_service, plot_count, render_html};

fn svg_count(html: &str) -> usize {
    html.matches("<svg").count()
}

#[test]
fn a_simulation_gets_every_plot() {
    let results = common::simulate_quick();
    assert_eq!(results.runs.len(), 6);
    assert!(results.runs.iter().all(|r| !r.cdf.is_empty() && r.series.is_some()));
    let html = render_html(&results);
    let groups = by_scenario(&results.runs);
    // Per scenario: CDF + CCDF, a replica-load plot per variant, a timeout plot per timed variant.
    let expected: Vec<usize> = groups.iter().map(|(_, runs)| plot_count(runs)).collect();
    assert_eq!(expected, vec![2 + 3 + 2, 2 + 3 + 2]);
    assert_eq!(svg_count(&html), 14);
    // Three replicas are drawn as lines, twelve as a heatmap.
    assert_eq!(html.matches("(one line per replica)").count(), 3);
    assert_eq!(html.matches("(heatmap, brighter is busier)").count(), 3);
    assert!(!html.contains("class=\"note\""), "nothing is missing: no note");
    // Two scenarios: an overview row for each, linking to its section.
    assert!(html.contains("Overview: p99 latency"));
    assert!(html.contains("<a href=\"#scenario-1\">twelve replicas</a></td>"));
}

#[test]
fn names_from_the_json_are_escaped() {
    let results = common::simulate_quick();
    let html = render_html(&results);
    assert!(html.contains("<title>tailguard report: report &lt;check&gt;</title>"));
    assert!(html.contains("least &lt;request&gt;"));
    assert!(html.contains("adaptive &amp; retry"));
    assert!(!html.contains("<request>") && !html.contains("<check>"));
    assert!(!html.contains("& retry"));
}

#[test]
fn an_older_or_load_json_degrades_to_notes() {
    // A document without cdf or series, as `tailguard load` and older versions write it.
    let json = r#"{
      "experiment": "load", "mode": "load", "seed": 0,
      "runs": [{
        "scenario": "load", "variant": "<script>alert(1)</script>",
        "requests": 100, "succeeded": 98, "failed": 1, "rejected": 0, "timed_out": 1,
        "success_rate": 0.98, "throughput_rps": 9.8, "extra_load": 0.0,
        "latency_ms": {"p10": 1.0, "p50": 2.0, "p90": 4.0, "p95": 5.0, "p99": 9.0, "p999": 9.5, "max": 10.0, "mean": 2.5},
        "time_fraction": 0.0, "timeouts_pct": 0.0, "closeness_pct": 0.0, "imbalance": 0.0,
        "duration_s": 10.0, "attempts": 0
      }]
    }"#;
    let results: Results = serde_json::from_str(json).unwrap();
    let html = render_html(&results);
    assert_eq!(svg_count(&html), 2, "CDF and CCDF drawn from the percentiles");
    assert!(html.contains("(percentiles)"), "the legend says so");
    assert!(html.contains("No latency distribution was recorded for &lt;script&gt;"));
    assert!(html.contains("No per-replica load was recorded"));
    assert!(!html.contains("<script>"));
    assert!(html.contains("mode <b>load</b>"));
    assert!(!html.contains("Overview"), "one scenario needs no overview");
}

#[test]
fn runs_without_successes_or_without_runs_do_not_panic() {
    let mut results = common::simulate_quick();
    for run in &mut results.runs {
        run.succeeded = 0;
        run.cdf.clear();
        run.series = None;
    }
    let html = render_html(&results);
    assert_eq!(svg_count(&html), 0);
    assert_eq!(html.matches("No request succeeded in this scenario").count(), 2);
    let empty = Results { experiment: "empty".into(), mode: "lab".into(), seed: 1, runs: vec![], calibration: None };
    assert!(render_html(&empty).contains("This results file has no runs."));
}

#[test]
fn odd_but_valid_json_renders_without_panic() {
    // A zero interval, replicas without counts, series of unequal lengths, a huge and a zero latency.
    let mut results = common::simulate_quick();
    for (i, run) in results.runs.iter_mut().enumerate() {
        let series = run.series.as_mut().unwrap();
        series.interval_s = 0.0;
        if let Some(load) = series.replica_load.as_mut() {
            load.replicas.iter_mut().step_by(2).for_each(Vec::clear);
        }
        for edge in &mut series.timeouts {
            edge.latency_ms.truncate(i);
            edge.timeout_ms.iter_mut().for_each(|t| *t = 1e12);
        }
        run.cdf.insert(0, [0.0, 0.0]);
        run.cdf.push([1e9, 1.0]);
    }
    let html = render_html(&results);
    assert_eq!(svg_count(&html), 14);
}

#[test]
fn every_variant_shows_the_load_of_the_same_service() {
    let mut results = common::simulate_quick();
    let groups = by_scenario(&results.runs);
    assert!(groups.iter().all(|(_, runs)| load_service(runs) == Some("back")));
    let html = render_html(&results);
    assert_eq!(html.matches("<h3>Load per replica of back over time</h3>").count(), 2);
    // An older file whose runs chose by their own traffic: one run reports the frontend instead.
    let front = ReplicaLoad { service: "front".into(), replicas: vec![vec![5, 6]] };
    results.runs[1].series.as_mut().unwrap().replica_load = Some(front);
    let groups = by_scenario(&results.runs);
    assert_eq!(load_service(&groups[0].1), Some("back"), "most runs report back");
    assert_eq!(plot_count(&groups[0].1), 2 + 2 + 2, "the front panel is not drawn");
    let html = render_html(&results);
    assert!(html.contains(
        "Not drawn, as they report another service than back and would not compare: least &lt;request&gt; (front)."
    ));
    // Ties go to the first run's service.
    let load = |service: &str| {
        Some(Series {
            replica_load: Some(ReplicaLoad { service: service.into(), replicas: vec![] }),
            ..Series::default()
        })
    };
    let mut a = results.runs[0].clone();
    let mut b = a.clone();
    a.series = load("x");
    b.series = load("y");
    assert_eq!(load_service(&[&a, &b]), Some("x"));
    assert_eq!(load_service(&[&b, &a]), Some("y"));
}

#[test]
fn outcomes_tell_requests_from_attempts_and_explain_a_far_closeness() {
    let mut results = common::simulate_quick();
    let html = render_html(&results);
    assert!(html.contains("<th>requests timed out</th>") && html.contains("<th>attempt timeouts</th>"));
    assert!(!html.contains("<th>timeouts</th>") && !html.contains("<th>timed out</th>"));
    // One percentage format throughout: success, extra load and attempt timeouts.
    let run = &results.runs[0];
    assert!(html.contains(&format!("<td>{:.2} %</td>", 100.0 * run.success_rate)));
    assert!(html.contains(&format!("<td>{:.2} %</td><td>{:.2} %</td>", 100.0 * run.extra_load, run.timeouts_pct)));
    assert!(!html.contains("closeness is the mean"), "no closeness is far above the latency");
    results.runs[1].closeness_pct = 2894.012;
    let html = render_html(&results);
    assert!(html.contains("closeness is the mean of (timeout − latency) / latency"));
    assert!(html.contains("three replicas / least &lt;request&gt;: 2894.01 % (29.94 times the latency)"));
}
