//! The page: header, one section per scenario with its plots and tables, and the stylesheet.
//! Every string that comes from the results JSON goes through [`escape`].

use crate::format::{closeness_note, fraction, number, percent, variant_label};
use crate::{palette, plots};
use std::fmt::Write as _;
use tailguard_model::results::{ReplicaLoad, Results, RunResult, Series, TimeoutSeries};

/// Makes `s` safe as HTML text and as a quoted attribute value.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = r#"
body { font-family: "DejaVu Sans", "Helvetica Neue", Arial, sans-serif; color: #222; background: #fff;
       margin: 0 auto; max-width: 1240px; padding: 24px 32px 48px; line-height: 1.4; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 21px; margin: 40px 0 8px; padding-top: 12px; border-top: 2px solid #ddd; }
h3 { font-size: 15px; margin: 20px 0 6px; color: #444; }
.meta { color: #555; margin: 0 0 12px; }
.meta b { color: #222; }
nav { font-size: 14px; margin: 8px 0 0; }
a { color: #1f5f9f; text-decoration: none; }
nav a { margin-right: 14px; }
.grid { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 12px 20px; }
figure { margin: 0; }
figure svg { width: 100%; height: auto; display: block; }
figure svg rect { shape-rendering: crispEdges; }
figcaption { font-size: 12.5px; color: #555; margin: 2px 4px 0; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0 10px; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 10px; text-align: right; border-bottom: 1px solid #e4e4e4; }
th { background: #f4f4f4; font-weight: 600; border-bottom: 1px solid #bbb; }
th:first-child, td:first-child { text-align: left; }
td.best { font-weight: 700; }
.dim { color: #8a8a8a; font-size: 12px; font-weight: 400; }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 6px;
          vertical-align: -1px; }
.note { font-size: 13px; color: #7a5a00; background: #fff8e1; border-left: 3px solid #e0b000;
        padding: 6px 10px; margin: 8px 0; }
footer { margin-top: 40px; font-size: 12px; color: #888; }
"#;

/// The HTML document being written.
pub(crate) struct Page {
    out: String,
}

impl Page {
    /// The head and the header of `results`' report, whose runs are grouped into `scenarios`;
    /// `variants` fixes each variant's color.
    pub(crate) fn new(results: &Results, scenarios: &[(String, Vec<&RunResult>)], variants: &[String]) -> Page {
        let mut out = String::with_capacity(1 << 20);
        let title = escape(&results.experiment);
        let _ = write!(
            out,
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <title>tailguard report: {title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
             <header>\n<h1>{title}</h1>\n<p class=\"meta\">mode <b>{}</b> · seed <b>{}</b> · {} run{}</p>\n",
            escape(&results.mode),
            results.seed,
            results.runs.len(),
            if results.runs.len() == 1 { "" } else { "s" },
        );
        if scenarios.len() > 1 {
            out.push_str("<nav>scenarios: ");
            for (i, (name, _)) in scenarios.iter().enumerate() {
                let _ = write!(out, "<a href=\"#scenario-{i}\">{}</a>", escape(name));
            }
            out.push_str("</nav>\n");
            overview(&mut out, scenarios, variants);
        }
        if results.runs.is_empty() {
            out.push_str("<p class=\"note\">This results file has no runs.</p>\n");
        }
        out.push_str("</header>\n");
        Page { out }
    }

    /// The section of one scenario; `variants` fixes each variant's color.
    pub(crate) fn scenario(&mut self, index: usize, name: &str, runs: &[&RunResult], variants: &[String]) {
        let out = &mut self.out;
        let color =
            |run: &RunResult| palette::series(variants.iter().position(|v| *v == run.variant).unwrap_or_default());
        let _ = writeln!(out, "<section id=\"scenario-{index}\">\n<h2>scenario: {}</h2>", escape(name));

        out.push_str("<h3>Latency of successful requests</h3>\n");
        let lines: Vec<plots::Line<'_>> = runs.iter().map(|r| plots::Line::of(r, color(r))).collect();
        if runs.iter().any(|r| r.succeeded > 0) {
            out.push_str("<div class=\"grid\">\n");
            figure(
                out,
                &plots::latency_cdf(&lines),
                "CDF: the fraction of successful requests at or below each latency.",
            );
            figure(
                out,
                &plots::latency_ccdf(&lines),
                "Tail (CCDF): the fraction slower than each latency, log scale; \
                 the dotted lines mark p99 and p99.9.",
            );
            out.push_str("</div>\n");
            let approximate: Vec<&str> =
                runs.iter().filter(|r| r.cdf.is_empty() && r.succeeded > 0).map(|r| r.variant.as_str()).collect();
            if !approximate.is_empty() {
                note(
                    out,
                    &format!(
                        "No latency distribution was recorded for {}: its curve joins the percentiles of the \
                         table below.",
                        approximate.join(", ")
                    ),
                );
            }
        } else {
            note(out, "No request succeeded in this scenario: there is no latency to plot.");
        }
        percentile_table(out, runs, &color);

        out.push_str("<h3>Outcomes of the requests</h3>\n");
        outcome_table(out, runs, &color);
        out.push_str("<h3>Calls between services</h3>\n");
        between_services_table(out, runs, &color);

        replica_load(out, runs);
        timeouts(out, runs);
        out.push_str("</section>\n");
    }

    /// The complete document.
    pub(crate) fn finish(mut self) -> String {
        let _ = writeln!(
            self.out,
            "<footer>Written by tailguard {} (tailguard report). Latencies are over successful requests \
             as the user saw them; see docs/results.md for every field.</footer>\n</body>\n</html>",
            env!("CARGO_PKG_VERSION")
        );
        self.out
    }
}

/// Scenario × variant: p99 latency, the best of each scenario in bold, and the success rate where
/// it is below 100 %; the figures below explain each row.
fn overview(out: &mut String, scenarios: &[(String, Vec<&RunResult>)], variants: &[String]) {
    out.push_str("<h3>Overview: p99 latency (ms) per scenario, and success where below 100 %</h3>\n<table>\n<tr><th>scenario</th>");
    for (i, variant) in variants.iter().enumerate() {
        let run = scenarios.iter().flat_map(|(_, runs)| runs).find(|r| r.variant == *variant);
        let label = run.map_or_else(|| variant.clone(), |r| variant_label(r));
        let _ = write!(out, "<th>{}{}</th>", swatch(palette::series(i)), escape(&label));
    }
    out.push_str("</tr>\n");
    for (i, (scenario, runs)) in scenarios.iter().enumerate() {
        let _ = write!(out, "<tr><td><a href=\"#scenario-{i}\">{}</a></td>", escape(scenario));
        let p99s: Vec<f64> = runs.iter().filter(|r| r.succeeded > 0).map(|r| r.latency_ms.p99).collect();
        for variant in variants {
            let Some(run) = runs.iter().find(|r| r.variant == *variant) else {
                out.push_str("<td>–</td>");
                continue;
            };
            if run.succeeded == 0 {
                out.push_str("<td>no successes</td>");
                continue;
            }
            let p99 = run.latency_ms.p99;
            let class = if best(p99, &p99s) { " class=\"best\"" } else { "" };
            let success = if run.success_rate < 0.99995 {
                format!(" <span class=\"dim\">{}</span>", fraction(run.success_rate))
            } else {
                String::new()
            };
            let _ = write!(out, "<td{class}>{}{success}</td>", number(p99));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

fn figure(out: &mut String, svg: &Result<String, String>, caption: &str) {
    out.push_str("<figure>\n");
    match svg {
        Ok(svg) => out.push_str(svg),
        Err(why) => note(out, &format!("This plot could not be drawn: {why}")),
    }
    let _ = writeln!(out, "<figcaption>{}</figcaption>\n</figure>", escape(caption));
}

fn note(out: &mut String, text: &str) {
    let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(text));
}

fn swatch(color: plotters::style::RGBColor) -> String {
    format!("<span class=\"swatch\" style=\"background:{}\"></span>", palette::css(color))
}

fn variant_cell(run: &RunResult, color: &dyn Fn(&RunResult) -> plotters::style::RGBColor) -> String {
    format!("<td>{}{}</td>", swatch(color(run)), escape(&variant_label(run)))
}

/// Whether `value` is the lowest of `all` (which holds it) and not merely equal to all of them.
fn best(value: f64, all: &[f64]) -> bool {
    all.iter().all(|&o| value <= o) && all.iter().any(|&o| value < o)
}

/// p10 … p99.9, max and mean per variant; the lowest of each column in bold.
fn percentile_table(out: &mut String, runs: &[&RunResult], color: &dyn Fn(&RunResult) -> plotters::style::RGBColor) {
    type Column = (&'static str, fn(&RunResult) -> f64);
    let columns: [Column; 8] = [
        ("p10", |r| r.latency_ms.p10),
        ("p50", |r| r.latency_ms.p50),
        ("p90", |r| r.latency_ms.p90),
        ("p95", |r| r.latency_ms.p95),
        ("p99", |r| r.latency_ms.p99),
        ("p99.9", |r| r.latency_ms.p999),
        ("max", |r| r.latency_ms.max),
        ("mean", |r| r.latency_ms.mean),
    ];
    out.push_str("<table>\n<tr><th>variant (ms)</th>");
    for (name, _) in &columns {
        let _ = write!(out, "<th>{name}</th>");
    }
    out.push_str("</tr>\n");
    let with_latency: Vec<&&RunResult> = runs.iter().filter(|r| r.succeeded > 0).collect();
    let columns_of: Vec<Vec<f64>> =
        columns.iter().map(|(_, value)| with_latency.iter().map(|r| value(r)).collect()).collect();
    for run in runs {
        out.push_str("<tr>");
        out.push_str(&variant_cell(run, color));
        for ((_, value), column) in columns.iter().zip(&columns_of) {
            if run.succeeded == 0 {
                out.push_str("<td>–</td>");
                continue;
            }
            let class = if best(value(run), column) { " class=\"best\"" } else { "" };
            let _ = write!(out, "<td{class}>{}</td>", number(value(run)));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

/// Requests by their outcome as the user saw it, success rate and goodput per variant.
fn outcome_table(out: &mut String, runs: &[&RunResult], color: &dyn Fn(&RunResult) -> plotters::style::RGBColor) {
    out.push_str(
        "<table>\n<tr><th>variant</th><th>requests</th><th>succeeded</th><th>rejected (429)</th>\
         <th>requests timed out</th><th>failed</th><th>success</th><th>goodput (req/s)</th></tr>\n",
    );
    for run in runs {
        out.push_str("<tr>");
        out.push_str(&variant_cell(run, color));
        let _ = writeln!(
            out,
            "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            run.requests,
            run.succeeded,
            run.rejected,
            run.timed_out,
            run.failed,
            fraction(run.success_rate),
            number(run.throughput_rps),
        );
    }
    out.push_str("</table>\n");
}

/// What happened between services per variant: attempts, the load retries and hedges added, the
/// share of attempts that timed out (attempts, not requests: a retry may have made them good), time
/// fraction, closeness and imbalance; a note explains a closeness far above the latency.
fn between_services_table(
    out: &mut String,
    runs: &[&RunResult],
    color: &dyn Fn(&RunResult) -> plotters::style::RGBColor,
) {
    if runs.iter().all(|r| r.attempts == 0) {
        note(out, "No call between services was measured (tailguard load sees only its own requests).");
        return;
    }
    out.push_str(
        "<table>\n<tr><th>variant</th><th>attempts</th><th>extra load</th><th>attempt timeouts</th>\
         <th>time fraction</th><th>closeness</th><th>imbalance</th></tr>\n",
    );
    for run in runs {
        out.push_str("<tr>");
        out.push_str(&variant_cell(run, color));
        let _ = writeln!(
            out,
            "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            run.attempts,
            fraction(run.extra_load),
            percent(run.timeouts_pct),
            number(run.time_fraction),
            percent(run.closeness_pct),
            number(run.imbalance),
        );
    }
    out.push_str("</table>\n");
    if let Some(text) = closeness_note(runs) {
        note(out, &text);
    }
}

/// Per-replica load of the scenario's [`load_service`](crate::load_service), one plot per run;
/// a run that reports another service (an older results file) is named in a note, not drawn.
fn replica_load(out: &mut String, runs: &[&RunResult]) {
    let Some(service) = crate::load_service(runs) else {
        out.push_str("<h3>Load per replica over time</h3>\n");
        note(out, "No per-replica load was recorded (the load generator and older results have none).");
        return;
    };
    let _ = writeln!(out, "<h3>Load per replica of {} over time</h3>", escape(service));
    let loads: Vec<(&RunResult, &ReplicaLoad, f64)> = runs
        .iter()
        .filter_map(|r| r.series.as_ref().and_then(|s| s.replica_load.as_ref().map(|l| (*r, l, interval(s)))))
        .collect();
    let other: Vec<String> = loads
        .iter()
        .filter(|(_, l, _)| l.service != service)
        .map(|(r, l, _)| format!("{} ({})", r.variant, l.service))
        .collect();
    if !other.is_empty() {
        note(
            out,
            &format!(
                "Not drawn, as they report another service than {service} and would not compare: {}.",
                other.join(", ")
            ),
        );
    }
    let loads: Vec<_> = loads.into_iter().filter(|(_, l, _)| l.service == service).collect();
    let plotted: Vec<_> = loads.iter().filter(|(_, l, _)| l.replicas.len() >= 2).collect();
    if plotted.len() < loads.len() {
        note(out, &format!("{service} has a single replica: there is no balance to show."));
    }
    if plotted.is_empty() {
        return;
    }
    // One color scale (or y axis) for all variants, so their plots compare at a glance.
    let peak = plotted.iter().flat_map(|(_, l, _)| l.replicas.iter().flatten()).copied().max().unwrap_or(0);
    out.push_str("<div class=\"grid\">\n");
    for (run, load, interval) in &plotted {
        let (svg, kind) = plots::replica_load(run, load, *interval, peak);
        let caption = format!(
            "{}: attempts each replica of {} accepted per {} s ({kind}); imbalance (mean σ across replicas) {}.",
            run.variant,
            load.service,
            number(*interval),
            number(run.imbalance)
        );
        figure(out, &svg, &caption);
    }
    out.push_str("</div>\n");
}

/// The timeout against the callee's latency, per timed edge of each run.
fn timeouts(out: &mut String, runs: &[&RunResult]) {
    let edges: Vec<(&RunResult, &TimeoutSeries, f64)> = runs
        .iter()
        .filter_map(|r| r.series.as_ref().map(|s| (*r, s)))
        .flat_map(|(r, s)| s.timeouts.iter().map(move |t| (r, t, interval(s))))
        .collect();
    if edges.is_empty() {
        return;
    }
    out.push_str("<h3>Timeout against latency over time</h3>\n<div class=\"grid\">\n");
    for (run, edge, interval) in edges {
        let caption = format!(
            "{}, edge {}: the mean timeout set and the mean latency of the answers, per {} s; \
             attempt timeouts {}, closeness {}.",
            run.variant,
            edge.edge,
            number(interval),
            percent(run.timeouts_pct),
            percent(run.closeness_pct)
        );
        figure(out, &plots::timeout(run, edge, interval), &caption);
    }
    out.push_str("</div>\n");
}

/// The series' interval, 1 s when a hand-edited file has a useless one.
fn interval(series: &Series) -> f64 {
    if series.interval_s.is_finite() && series.interval_s > 0.0 {
        series.interval_s
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_covers_text_and_attributes() {
        assert_eq!(escape(r#"<b a="x">'&'</b>"#), "&lt;b a=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/b&gt;");
    }

    #[test]
    fn only_a_strictly_lower_value_is_best() {
        assert!(best(1.0, &[1.0, 2.0, 1.5]));
        assert!(!best(1.0, &[1.0, 1.0]), "a tie of all is no best");
        assert!(!best(1.5, &[1.0, 1.5]));
    }
}
