//! How the report writes numbers: one format per kind of column, shared by the HTML page and the
//! text table, so a percentage or a latency reads the same wherever it appears.

use tailguard_model::results::RunResult;

/// A number with at most 4 significant decimals, without trailing zeros: latencies (ms), rates and
/// ratios. "–" when it is not finite (a hand-edited file).
pub fn number(x: f64) -> String {
    if !x.is_finite() {
        return "–".to_string();
    }
    let digits = if x.abs() >= 100.0 {
        1
    } else if x.abs() >= 1.0 {
        2
    } else {
        4
    };
    let s = format!("{x:.digits$}");
    let s = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.') } else { &s };
    s.to_string()
}

/// A share already in percent, two decimals: `99.95 %`.
pub fn percent(x: f64) -> String {
    if !x.is_finite() {
        return "–".to_string();
    }
    format!("{x:.2} %")
}

/// A fraction (0..=1) as a percentage: `0.9995` → `99.95 %`.
pub fn fraction(x: f64) -> String {
    percent(100.0 * x)
}

/// The closeness above which the report explains it.
pub const FAR_CLOSENESS_PCT: f64 = 1000.0;

/// A note for the runs whose closeness is at least [`FAR_CLOSENESS_PCT`]: such a figure is no
/// error but a timeout far above the latency it allowed, which reads better as a multiple.
pub fn closeness_note(runs: &[&RunResult]) -> Option<String> {
    let far: Vec<String> = runs
        .iter()
        .filter(|r| r.closeness_pct >= FAR_CLOSENESS_PCT)
        .map(|r| {
            let times = 1.0 + r.closeness_pct / 100.0;
            format!(
                "{} / {}: {} ({} times the latency)",
                r.scenario,
                r.variant,
                percent(r.closeness_pct),
                number(times)
            )
        })
        .collect();
    (!far.is_empty()).then(|| {
        format!(
            "closeness is the mean of (timeout − latency) / latency over attempts answered in time; above {} % the \
             timeout was far above the latency it allowed, so a slow or hung callee would have been waited for that \
             long: {}.",
            number(FAR_CLOSENESS_PCT),
            far.join("; ")
        )
    })
}

/// A run's variant as tables and the report show it: its name, and its sidecar in brackets when
/// that is a peer's (`haproxy-best [haproxy]`), so a peer variant is never read as tailguard's.
pub fn variant_label(run: &RunResult) -> String {
    match &run.sidecar {
        Some(peer) => format!("{} [{peer}]", run.variant),
        None => run.variant.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_drop_trailing_zeros() {
        assert_eq!(number(102.0), "102");
        assert_eq!(number(2500.25), "2500.2");
        assert_eq!(number(12.345), "12.35"); // rounds half to even on the binary value
        assert_eq!(number(0.5), "0.5");
        assert_eq!(number(f64::NAN), "–");
    }

    #[test]
    fn percentages_have_two_decimals() {
        assert_eq!(percent(57.2833), "57.28 %");
        assert_eq!(fraction(1.0), "100.00 %");
        assert_eq!(percent(f64::INFINITY), "–");
    }

    #[test]
    fn only_a_far_closeness_gets_a_note() {
        let run = |variant: &str, closeness_pct| RunResult {
            scenario: "default".into(),
            variant: variant.into(),
            closeness_pct,
            ..RunResult::default()
        };
        let (tight, far) = (run("adaptive", 83.3425), run("timeout-3s", 2894.012));
        assert_eq!(closeness_note(&[&tight]), None);
        let note = closeness_note(&[&tight, &far]).unwrap();
        assert!(note.contains("default / timeout-3s: 2894.01 % (29.94 times the latency)"), "{note}");
        assert!(!note.contains("adaptive"), "{note}");
    }
}
