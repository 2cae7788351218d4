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
    layout(&rows, 2, &mut out);
    out
}

/// The lab's resident memory per service and run: the largest replica's serve and sidecar peak
/// RSS and the most requests one replica held; empty when no run recorded memory (the simulator).
pub fn memory(results: &Results) -> String {
    if results.runs.iter().all(|r| r.memory.is_empty()) {
        return String::new();
    }
    let header = ["scenario", "variant", "service", "serve MB", "sidecar MB", "held"];
    let mut rows = vec![header.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
    for r in &results.runs {
        let mut services: Vec<&str> = Vec::new();
        for m in &r.memory {
            if !services.contains(&m.service.as_str()) {
                services.push(&m.service);
            }
        }
        for service in services {
            let of = |role: &'static str| r.memory.iter().filter(move |m| m.service == service && m.role == role);
            let peak = |role: &'static str| {
                of(role).map(|m| m.peak_rss_mb).reduce(f64::max).map_or("-".to_string(), |mb| format!("{mb:.1}"))
            };
            let held = of("service").filter_map(|m| m.peak_in_flight).max();
            rows.push(vec![
                r.scenario.clone(),
                r.variant.clone(),
                service.to_string(),
                peak("service"),
                peak("sidecar"),
                held.map_or("-".to_string(), |h| h.to_string()),
            ]);
        }
    }
    let mut out =
        "\nresident memory (peak RSS of the largest replica) and requests one replica held at most:\n".to_string();
    layout(&rows, 3, &mut out);
    out
}

/// Aligns `rows` (the first is the header) in columns, the first `left` left-aligned and the
/// rest right-aligned, with a blank line between scenarios.
fn layout(rows: &[Vec<String>], left: usize, out: &mut String) {
    let widths: Vec<usize> = (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
    let mut last_scenario = String::new();
    for (i, row) in rows.iter().enumerate() {
        if i > 1 && row[0] != last_scenario {
            out.push('\n');
        }
        last_scenario = row[0].clone();
        for (c, cell) in row.iter().enumerate() {
            let sep = if c + 1 == row.len() { "" } else { "  " };
            if c < left {
                let _ = write!(out, "{cell:<w$}{sep}", w = widths[c]);
            } else {
                let _ = write!(out, "{cell:>w$}{sep}", w = widths[c]);
            }
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailguard_sim::{ProcessMemory, RunResult};

    #[test]
    fn memory_shows_the_largest_replica_per_service_and_nothing_for_the_simulator() {
        let m = |service: &str, replica, role: &str, peak_rss_mb, held| ProcessMemory {
            service: service.into(),
            replica,
            role: role.into(),
            peak_rss_mb,
            peak_in_flight: held,
            ..ProcessMemory::default()
        };
        let run = RunResult {
            scenario: "default".into(),
            variant: "v".into(),
            memory: vec![
                m("a", 0, "service", 12.0, Some(3)),
                m("a", 0, "sidecar", 8.3, None),
                m("b", 0, "service", 5.0, Some(1)),
                m("a", 1, "service", 20.5, Some(2)),
            ],
            ..RunResult::default()
        };
        let mut results = Results { experiment: "e".into(), mode: "lab".into(), seed: 1, runs: vec![run] };
        let text = memory(&results);
        let lines: Vec<&str> = text.lines().skip(2).collect();
        assert_eq!(lines[1].split_whitespace().collect::<Vec<_>>(), ["default", "v", "a", "20.5", "8.3", "3"]);
        assert_eq!(lines[2].split_whitespace().collect::<Vec<_>>(), ["default", "v", "b", "5.0", "-", "1"]);
        results.runs[0].memory.clear();
        assert_eq!(memory(&results), "");
    }
}
