//! `tailguard sim`: load the file, simulate every scenario × variant, print and save results.

use crate::lab::{Outputs, Table};
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::PathBuf;
use tailguard_model::Experiment;
use tailguard_report::table;
use tailguard_sim::{simulate_traced, Options, DEFAULT_TRACE_SAMPLE};

/// Arguments of `tailguard sim`.
#[derive(clap::Args)]
pub struct SimArgs {
    /// The experiment file (YAML).
    file: PathBuf,
    /// Seed of every random stream (default: the file's `seed`, else 1).
    #[arg(long)]
    seed: Option<u64>,
    /// Write the results JSON here.
    #[arg(long, value_name = "OUT")]
    json: Option<PathBuf>,
    /// Apply the file's `quick` overrides (shorter runs).
    #[arg(long)]
    quick: bool,
    /// Runs simulated at once (default: the number of cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Simulate only this scenario (repeatable).
    #[arg(long = "scenario", value_name = "S")]
    scenarios: Vec<String>,
    /// Simulate only this variant (repeatable).
    #[arg(long = "variant", value_name = "V")]
    variants: Vec<String>,
    /// Write spans of sampled requests here as Jaeger JSON (docs/traces.md).
    #[arg(long, value_name = "OUT")]
    traces: Option<PathBuf>,
    /// Traces kept per run with --traces: a uniform sample of the measured requests (the lab's
    /// --trace-sample means the same).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_TRACE_SAMPLE, requires = "traces")]
    trace_sample: usize,
    /// Write the HTML report (plots and tables, see docs/report.md) here.
    #[arg(long, value_name = "PATH")]
    report: Option<PathBuf>,
    /// Charge this machine calibration's hops (`tailguard lab calibrate`) in every run, in place
    /// of the file's `network.calibrated`.
    #[arg(long, value_name = "FILE")]
    calibration: Option<PathBuf>,
}

/// `tailguard demo --sim`: the embedded demo file's `scenarios` × `variants` in the simulator,
/// printed as the demo's short table, its results and report written to `outputs`.
pub fn demo(
    experiment: &Experiment,
    file: &str,
    scenarios: Vec<String>,
    variants: Vec<String>,
    quick: bool,
    outputs: &Outputs,
) -> anyhow::Result<()> {
    let sim = SimArgs {
        file: PathBuf::from(format!("{file} (embedded)")),
        seed: None,
        json: Some(outputs.json.clone()),
        quick,
        threads: None,
        scenarios,
        variants,
        traces: None,
        trace_sample: DEFAULT_TRACE_SAMPLE,
        report: Some(outputs.report.clone()),
        calibration: None,
    };
    simulate_and_report(experiment, &sim, table::summary)
}

pub fn run(args: SimArgs) -> anyhow::Result<()> {
    let experiment = Experiment::load(&args.file)?;
    simulate_and_report(&experiment, &args, table::render)
}

fn simulate_and_report(experiment: &Experiment, args: &SimArgs, table: Table) -> anyhow::Result<()> {
    let (scenarios, variants) = experiment.select(&args.scenarios, &args.variants)?;
    // Prepared before simulating, so a path that cannot be written does not cost the results.
    for (flag, out) in [("--json", &args.json), ("--traces", &args.traces), ("--report", &args.report)] {
        if let Some(out) = out {
            crate::output::file(flag, out)?;
        }
    }
    let seed = args.seed.or(experiment.seed()).unwrap_or(1);
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let total = scenarios.len() * variants.len();
    let quick = if args.quick { ", quick" } else { "" };
    eprintln!("simulating {} ({total} runs, seed {seed}{quick})", args.file.display());
    let bar = progress_bar(total as u64);
    let started = std::time::Instant::now();
    let calibration = match &args.calibration {
        None => None,
        Some(path) => Some(
            tailguard_model::Calibration::load(path)
                .map_err(|e| anyhow::anyhow!("--calibration {}: {e}", path.display()))?,
        ),
    };
    let options = Options { seed, quick: args.quick, threads, scenarios, variants, calibration };
    // Without --traces no run records spans (the tracer is never built).
    let sample = args.traces.as_ref().map(|_| args.trace_sample);
    let progress = |p: tailguard_sim::Progress<'_>| {
        bar.set_message(format!("{}/{}", p.result.scenario, p.result.variant));
        bar.inc(1);
        if bar.is_hidden() {
            eprintln!("  [{}/{}] {} / {} done", p.done, p.total, p.result.scenario, p.result.variant);
        }
    };
    let (results, traces) = match sample {
        Some(n) => simulate_traced(experiment, options, n, progress)?,
        None => (tailguard_sim::simulate(experiment, options, progress)?, Vec::new()),
    };
    bar.finish_and_clear();
    eprintln!("done in {:.1} s", started.elapsed().as_secs_f64());
    print!("{}", table(&results));
    if let Some(out) = &args.json {
        let json = serde_json::to_string_pretty(&results)? + "\n";
        std::fs::write(out, json).with_context(|| format!("writing {}", out.display()))?;
        eprintln!("results written to {}", out.display());
    }
    if let Some(out) = &args.traces {
        tailguard_trace::jaeger::write_file(&traces, out)?;
        eprintln!("{} traces written to {}", traces.len(), out.display());
    }
    if let Some(out) = &args.report {
        crate::report::write(&results, out)?;
    }
    Ok(())
}

fn progress_bar(total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    let style = ProgressStyle::with_template("{bar:30} {pos}/{len} runs, eta {eta} {msg}").expect("valid template");
    bar.set_style(style);
    bar
}
