//! The human-readable comparison table of a results document.

use std::fmt::Write;
use tailguard_sim::Results;

/// One line per run, grouped by scenario.
pub fn render(results: &Results) -> String {
    let mut out = String::new();
    let header = [
        "scenario",
        "variant",
        "requests",
        "success",
        "p10 ms",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "p99.9 ms",
        "extra",
        "timeouts",
        "time frac",
        "closeness",
        "imbalance",
    ];
    let mut rows = vec![header.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
    for r in &results.runs {
        let l = &r.latency_ms;
        rows.push(vec![
            r.scenario.clone(),
            r.variant.clone(),
            r.requests.to_string(),
            format!("{:.2}%", 100.0 * r.success_rate),
            format!("{:.1}", l.p10),
            format!("{:.1}", l.p50),
            format!("{:.1}", l.p90),
            format!("{:.1}", l.p99),
            format!("{:.1}", l.p999),
            format!("{:.3}", r.extra_load),
            format!("{:.2}%", r.timeouts_pct),
            format!("{:.3}", r.time_fraction),
            format!("{:.1}%", r.closeness_pct),
            format!("{:.2}", r.imbalance),
        ]);
    }
    let widths: Vec<usize> = (0..header.len()).map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
    let mut last_scenario = String::new();
    for (i, row) in rows.iter().enumerate() {
        if i > 1 && row[0] != last_scenario {
            out.push('\n');
        }
        last_scenario = row[0].clone();
        for (c, cell) in row.iter().enumerate() {
            let sep = if c + 1 == row.len() { "" } else { "  " };
            if c < 2 {
                let _ = write!(out, "{cell:<w$}{sep}", w = widths[c]);
            } else {
                let _ = write!(out, "{cell:>w$}{sep}", w = widths[c]);
            }
        }
        out.push('\n');
    }
    out
}
