//! `tailguard sim`: load the file, simulate every scenario × variant, print and save results.

use crate::table;
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use tailguard_model::Experiment;
use tailguard_sim::{simulate, Options};

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
}

/// `tailguard demo --sim`: the embedded default experiment `text` in the simulator.
pub fn demo(text: &str, json: Option<PathBuf>, full: bool) -> anyhow::Result<()> {
    let experiment = Experiment::parse(text, Path::new("examples/bloc.yaml"))?;
    let sim =
        SimArgs { file: PathBuf::from("examples/bloc.yaml (embedded)"), seed: None, json, quick: !full, threads: None };
    simulate_and_report(&experiment, &sim)
}

pub fn run(args: SimArgs) -> anyhow::Result<()> {
    let experiment = Experiment::load(&args.file)?;
    simulate_and_report(&experiment, &args)
}

fn simulate_and_report(experiment: &Experiment, args: &SimArgs) -> anyhow::Result<()> {
    let seed = args.seed.or(experiment.seed()).unwrap_or(1);
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let total = experiment.scenario_names().len() * experiment.variant_names().len();
    let quick = if args.quick { ", quick" } else { "" };
    eprintln!("simulating {} ({total} runs, seed {seed}{quick})", args.file.display());
    let bar = progress_bar(total as u64);
    let started = std::time::Instant::now();
    let results = simulate(experiment, Options { seed, quick: args.quick, threads }, |p| {
        bar.set_message(format!("{}/{}", p.result.scenario, p.result.variant));
        bar.inc(1);
        if bar.is_hidden() {
            eprintln!("  [{}/{}] {} / {} done", p.done, p.total, p.result.scenario, p.result.variant);
        }
    })?;
    bar.finish_and_clear();
    eprintln!("done in {:.1} s", started.elapsed().as_secs_f64());
    print!("{}", table::render(&results));
    if let Some(out) = &args.json {
        let json = serde_json::to_string_pretty(&results)? + "\n";
        std::fs::write(out, json).with_context(|| format!("writing {}", out.display()))?;
        eprintln!("results written to {}", out.display());
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
