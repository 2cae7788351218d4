//! The text comparison tables `tailguard sim` and `tailguard lab run` print, in the formats of
//! [`crate::format`].

use crate::format::{closeness_note, fraction, number, percent, variant_label};
use std::fmt::Write;
use tailguard_model::results::{Latency, Results, RunResult};

/// One line per run, grouped by scenario, then a note for any closeness far above the latency.
/// "goodput/s" (successful requests per second, `throughput_rps`) stands beside the success rate:
/// a closed loop that resends at once can have a poor rate and a high goodput, or the reverse.
/// "max ms" is the slowest successful request: a request held through an outage shows there
/// when the percentiles hide it. "requests timed out" counts requests; "attempt timeouts" is the share of attempts between
/// services that timed out, which retries and hedges may have made good.
pub fn render(results: &Results) -> String {
    let mut out = String::new();
    let header = [
        "scenario",
        "variant",
        "requests",
        "success",
        "goodput/s",
        "requests timed out",
        "p10 ms",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "p99.9 ms",
        "max ms",
        "extra load",
        "attempt timeouts",
        "time frac",
        "closeness",
        "imbalance",
    ];
    let mut rows = vec![header.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
    for r in &results.runs {
        let l = &r.latency_ms;
        rows.push(vec![
            r.scenario.clone(),
            variant_label(r),
            r.requests.to_string(),
            fraction(r.success_rate),
            number(r.throughput_rps),
            r.timed_out.to_string(),
            number(l.p10),
            number(l.p50),
            number(l.p90),
            number(l.p99),
            number(l.p999),
            number(l.max),
            fraction(r.extra_load),
            percent(r.timeouts_pct),
            number(r.time_fraction),
            percent(r.closeness_pct),
            number(r.imbalance),
        ]);
    }
    layout(&rows, 2, &mut out);
    let runs: Vec<&RunResult> = results.runs.iter().collect();
    if let Some(note) = closeness_note(&runs) {
        let _ = writeln!(out, "\nnote: {note}");
    }
    out.push_str(&refusals(results));
    out
}

/// The refused requests of each run and how long their users waited for the 429; empty when no
/// run refused any.
fn refusals(results: &Results) -> String {
    if results.runs.iter().all(|r| r.rejected_latency_ms.is_none()) {
        return String::new();
    }
    let header = ["scenario", "variant", "refused", "p50 ms", "p99 ms", "max ms"];
    let mut rows = vec![header.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
    for r in &results.runs {
        let at = |ms: fn(&Latency) -> f64| r.rejected_latency_ms.as_ref().map_or("-".to_string(), |l| number(ms(l)));
        rows.push(vec![
            r.scenario.clone(),
            variant_label(r),
            r.rejected.to_string(),
            at(|l| l.p50),
            at(|l| l.p99),
            at(|l| l.max),
        ]);
    }
    let mut out = "\nrefused requests (429) and how long their users waited for the refusal:\n".to_string();
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
                variant_label(r),
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

/// The lab's CPU time of all sidecars per 1,000 measured requests, per run; empty when no run
/// measured it (the simulator).
pub fn sidecar_cpu(results: &Results) -> String {
    if results.runs.iter().all(|r| r.sidecar_cpu_s_per_1k.is_none()) {
        return String::new();
    }
    let header = ["scenario", "variant", "sidecar", "sidecar CPU s / 1k requests"];
    let mut rows = vec![header.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
    for r in &results.runs {
        rows.push(vec![
            r.scenario.clone(),
            r.variant.clone(),
            r.sidecar.clone().unwrap_or_else(|| "tailguard".to_string()),
            r.sidecar_cpu_s_per_1k.map_or("-".to_string(), |s| format!("{s:.3}")),
        ]);
    }
    let mut out = "\nCPU time of every sidecar (user + system) per 1,000 measured requests:\n".to_string();
    layout(&rows, 3, &mut out);
    out
}

/// The short table `tailguard demo` prints: one line per run with what a user compares proxies
/// on (p50, p99, p99.9, success) and, from the lab, the CPU of every sidecar per request
/// (`sidecar_cpu_s_per_1k` read as milliseconds per request).
pub fn summary(results: &Results) -> String {
    let cpu = results.runs.iter().any(|r| r.sidecar_cpu_s_per_1k.is_some());
    let mut header = vec!["scenario", "variant", "p50 ms", "p99 ms", "p99.9 ms", "success"];
    if cpu {
        header.push("sidecar CPU ms/request");
    }
    let mut rows = vec![header.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
    for r in &results.runs {
        let l = &r.latency_ms;
        let mut row = vec![
            r.scenario.clone(),
            r.variant.clone(),
            number(l.p50),
            number(l.p99),
            number(l.p999),
            fraction(r.success_rate),
        ];
        if cpu {
            row.push(r.sidecar_cpu_s_per_1k.map_or("-".to_string(), |s| format!("{s:.2}")));
        }
        rows.push(row);
    }
    let mut out = String::new();
    layout(&rows, 2, &mut out);
    out
}

/// Aligns `rows` (the first is the header) in columns, the first `left` left-aligned and the
/// rest right-aligned, with a blank line between scenarios.
fn layout(rows: &[Vec<String>], left: usize, out: &mut String) {
    let width = |cell: &str| cell.chars().count();
    let widths: Vec<usize> = (0..rows[0].len()).map(|c| rows.iter().map(|r| width(&r[c])).max().unwrap_or(0)).collect();
    let mut last_scenario = String::new();
    for (i, row) in rows.iter().enumerate() {
        if i > 1 && row[0] != last_scenario {
            out.push('\n');
        }
        last_scenario = row[0].clone();
        for (c, cell) in row.iter().enumerate() {
            let sep = if c + 1 == row.len() { "" } else { "  " };
            let pad = " ".repeat(widths[c] - width(cell));
            if c < left {
                let _ = write!(out, "{cell}{pad}{sep}");
            } else {
                let _ = write!(out, "{pad}{cell}{sep}");
            }
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailguard_model::results::{Latency, ProcessMemory};

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
        let mut results =
            Results { experiment: "e".into(), mode: "lab".into(), seed: 1, runs: vec![run], calibration: None };
        let text = memory(&results);
        let lines: Vec<&str> = text.lines().skip(2).collect();
        assert_eq!(lines[1].split_whitespace().collect::<Vec<_>>(), ["default", "v", "a", "20.5", "8.3", "3"]);
        assert_eq!(lines[2].split_whitespace().collect::<Vec<_>>(), ["default", "v", "b", "5.0", "-", "1"]);
        results.runs[0].memory.clear();
        assert_eq!(memory(&results), "");
    }

    #[test]
    fn the_summary_has_the_sidecars_cpu_per_request_only_when_measured() {
        let run = |variant: &str, cpu| RunResult {
            scenario: "store".into(),
            variant: variant.into(),
            success_rate: 0.9995,
            latency_ms: Latency { p50: 15.04, p99: 43.6, p999: 120.26, ..Latency::default() },
            sidecar_cpu_s_per_1k: cpu,
            ..RunResult::default()
        };
        let mut results = Results {
            experiment: "e".into(),
            mode: "lab".into(),
            seed: 1,
            calibration: None,
            runs: vec![run("tailguard", Some(0.943)), run("nginx", None)],
        };
        let text = summary(&results);
        let lines: Vec<Vec<&str>> =
            text.lines().map(|l| l.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect()).collect();
        assert_eq!(
            lines[0],
            ["scenario", "variant", "p50 ms", "p99 ms", "p99.9 ms", "success", "sidecar CPU ms/request"]
        );
        assert_eq!(lines[1], ["store", "tailguard", "15.04", "43.6", "120.3", "99.95 %", "0.94"]);
        assert_eq!(lines[2], ["store", "nginx", "15.04", "43.6", "120.3", "99.95 %", "-"]);
        // The simulator measures no CPU: no column.
        results.runs.iter_mut().for_each(|r| r.sidecar_cpu_s_per_1k = None);
        assert!(!summary(&results).contains("CPU"));
    }

    #[test]
    fn each_kind_of_column_has_one_format_and_requests_are_told_from_attempts() {
        let run = |variant: &str, timed_out, timeouts_pct, closeness_pct| RunResult {
            scenario: "slow-increase".into(),
            variant: variant.into(),
            requests: 1000,
            success_rate: 1.0,
            throughput_rps: 99.5,
            timed_out,
            extra_load: 0.5,
            timeouts_pct,
            closeness_pct,
            latency_ms: Latency {
                p10: 0.9123,
                p50: 102.0,
                p90: 12.5,
                p99: 1500.25,
                p999: 2000.0,
                max: 2600.5,
                ..Latency::default()
            },
            ..RunResult::default()
        };
        let results = Results {
            experiment: "e".into(),
            mode: "sim".into(),
            seed: 1,
            runs: vec![run("exp-backoff", 0, 57.2833, 45.1423), run("timeout-3s", 3, 10.0, 2894.012)],
            calibration: None,
        };
        let text = render(&results);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("requests timed out") && lines[0].contains("attempt timeouts"), "{text}");
        let cells = |line: &str| {
            line.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(String::from).collect::<Vec<_>>()
        };
        assert_eq!(
            cells(lines[1]),
            [
                "slow-increase",
                "exp-backoff",
                "1000",
                "100.00 %",
                "99.5",
                "0",
                "0.9123",
                "102",
                "12.5",
                "1500.2",
                "2000",
                "2600.5",
                "50.00 %",
                "57.28 %",
                "0",
                "45.14 %",
                "0"
            ]
        );
        assert_eq!(cells(lines[2])[5], "3");
        // The columns line up, and the far closeness gets its note.
        assert_eq!(lines[1].chars().count(), lines[0].chars().count());
        assert!(text.contains("note: closeness") && text.contains("slow-increase / timeout-3s: 2894.01 %"), "{text}");
        assert!(!text.contains("exp-backoff: 45.14"), "{text}");
    }
}
