//! `tailguard report`: render a results JSON (of any mode) as one self-contained HTML page.

use anyhow::Context;
use std::path::{Path, PathBuf};
use tailguard_model::results::Results;
use tailguard_report::render_html;

/// Arguments of `tailguard report`.
#[derive(clap::Args)]
pub struct ReportArgs {
    /// The results JSON (written by `tailguard sim --json`, the lab or `tailguard load`).
    results: PathBuf,
    /// Write the HTML here (default: report.html beside the JSON).
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(args: ReportArgs) -> anyhow::Result<()> {
    let path = &args.results;
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let results: Results = serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(&text))
        .with_context(|| format!("{} is not a tailguard results JSON", path.display()))?;
    let out = args.out.unwrap_or_else(|| path.with_file_name("report.html"));
    crate::output::file("--out", &out)?;
    write(&results, &out)
}

/// Writes the report of `results` to `out`.
pub fn write(results: &Results, out: &Path) -> anyhow::Result<()> {
    std::fs::write(out, render_html(results)).with_context(|| format!("writing {}", out.display()))?;
    eprintln!("report written to {}", out.display());
    Ok(())
}
