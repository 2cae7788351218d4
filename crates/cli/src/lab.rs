//! `tailguard lab run`: argument parsing, progress bars, the table and the files written (also
//! for `tailguard demo`); the lab itself is `tailguard_lab`.

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tailguard_lab::{traces, Cancel, Isolation, LabError, Observer, Options, Plan, Results, RunResult, Tracing};
use tailguard_model::{Dur, Experiment};
use tailguard_report::table;
use tailguard_sim::DEFAULT_TRACE_SAMPLE;

/// `tailguard lab`'s subcommands.
#[derive(clap::Subcommand)]
pub enum LabCommand {
    /// Run an experiment file on real processes (serve + proxy sidecars) and print a comparison table.
    Run(LabArgs),
    /// Write one run of an experiment file as Kubernetes manifests (docs/deploy.md).
    Render(RenderArgs),
    /// Measure what a call through real sidecars costs on this machine and write it as a network
    /// model the simulator charges (`network: {calibrated: FILE}`; docs/lab.md, "Calibration").
    Calibrate(CalibrateArgs),
}

/// Arguments of `tailguard lab calibrate`.
#[derive(clap::Args)]
pub struct CalibrateArgs {
    /// Where the calibration goes.
    #[arg(long, value_name = "FILE", default_value = "calibration.yaml")]
    out: PathBuf,
    /// Where the runs' files and logs go (default: lab-out/calibrate-TIMESTAMP).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Requests per second to measure at (repeatable; default 50, 250 and 500).
    #[arg(long = "rate", value_name = "R")]
    rates: Vec<f64>,
    /// Measured time per rate, path and sidecar.
    #[arg(long, value_parser = Dur::parse_duration, default_value = "10s")]
    duration: Duration,
    /// Warm-up before each measurement.
    #[arg(long, value_parser = Dur::parse_duration, default_value = "2s")]
    warmup: Duration,
    /// 3 s per measurement after 1 s of warm-up, at 50 and 500 requests/s: a quick look.
    #[arg(long)]
    quick: bool,
    /// Only this sidecar (repeatable: tailguard, haproxy, nginx; default: every one installed).
    #[arg(long = "sidecar", value_name = "S")]
    sidecars: Vec<String>,
}

/// Arguments of `tailguard lab render`.
#[derive(clap::Args)]
pub struct RenderArgs {
    /// The experiment file (YAML).
    file: PathBuf,
    /// Render Kubernetes manifests (the only format so far), written to stdout.
    #[arg(long, required = true)]
    k8s: bool,
    /// The scenario to render (default: the file's first).
    #[arg(long, value_name = "S")]
    scenario: Option<String>,
    /// The variant to render (default: the file's first).
    #[arg(long, value_name = "V")]
    variant: Option<String>,
    /// Apply the file's `quick` overrides.
    #[arg(long)]
    quick: bool,
    /// Seed of every random stream (default: the file's `seed`, else 1).
    #[arg(long)]
    seed: Option<u64>,
    /// The image with the tailguard binary.
    #[arg(long, default_value = tailguard_k8s::DEFAULT_IMAGE)]
    image: String,
    /// Replica R of service S gets the cluster IP 10.SLOT.(S+1).(R+1): pick a SLOT inside the
    /// cluster's service network (the default 100 is in kubeadm's and kind's 10.96.0.0/12).
    #[arg(long, default_value_t = 100)]
    slot: u8,
    /// The cluster's pod network, whose deadline and trace headers the sidecars believe (repeatable).
    #[arg(long = "pod-network", value_name = "CIDR", default_value = "10.0.0.0/8")]
    pod_networks: Vec<tailguard_proxy::config::Network>,
}

/// Arguments of `tailguard lab run`.
#[derive(clap::Args)]
pub struct LabArgs {
    /// The experiment file (YAML), the same the simulator runs.
    file: PathBuf,
    /// Apply the file's `quick` overrides (shorter runs).
    #[arg(long)]
    quick: bool,
    /// Where results.json, report.html, traces.json, the sidecar files and the process logs go
    /// (default: lab-out/EXPERIMENT-TIMESTAMP); refused when it holds an earlier run's results.json.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// loopback (no privileges; the sidecars delay each hop) or netns (a namespace per replica, tc netem delay; root).
    #[arg(long, value_enum, default_value = "loopback")]
    isolation: IsolationArg,
    /// Seed of every random stream (default: the file's `seed`, else 1).
    #[arg(long)]
    seed: Option<u64>,
    /// Run only this scenario (repeatable).
    #[arg(long = "scenario", value_name = "S")]
    scenarios: Vec<String>,
    /// Run only this variant (repeatable).
    #[arg(long = "variant", value_name = "V")]
    variants: Vec<String>,
    /// Replace the workload's duration (e.g. 30s) for the load generator.
    #[arg(long, value_parser = Dur::parse_duration)]
    duration: Option<Duration>,
    /// Replace the workload's warm-up (e.g. 5s) for the load generator.
    #[arg(long, value_parser = Dur::parse_duration)]
    warmup: Option<Duration>,
    /// Write the collected traces (Jaeger JSON) here instead of DIR/traces.json.
    #[arg(long, value_name = "OUT", conflicts_with_all = ["otlp_endpoint", "no_traces"])]
    traces: Option<PathBuf>,
    /// Send the sidecars' spans to this OTLP/HTTP collector (Jaeger, OpenTelemetry Collector)
    /// instead of collecting them; no traces.json is written.
    #[arg(long, value_name = "URL", value_parser = traces::parse_endpoint, conflicts_with = "no_traces")]
    otlp_endpoint: Option<String>,
    /// Traces kept per run in traces.json: a uniform sample of the measured requests, as
    /// `tailguard sim --trace-sample` keeps.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_TRACE_SAMPLE, conflicts_with_all = ["otlp_endpoint", "no_traces"])]
    trace_sample: usize,
    /// The fraction of requests the sidecars trace (0 to 1), for the lab's collector or --otlp-endpoint.
    #[arg(long, value_name = "RATIO", default_value_t = 1.0, value_parser = traces::parse_ratio, conflicts_with = "no_traces")]
    trace_ratio: f64,
    /// Trace nothing: the sidecars build no tracer.
    #[arg(long)]
    no_traces: bool,
    /// The machine's calibration (`tailguard lab calibrate`) to record in results.json, for
    /// the simulator to charge when it is compared (bench/lab-vs-sim.sh); the file's
    /// `network.calibrated` when not given.
    #[arg(long, value_name = "FILE")]
    calibration: Option<PathBuf>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum IsolationArg {
    Loopback,
    Netns,
}

pub fn run(command: LabCommand) -> anyhow::Result<()> {
    let args = match command {
        LabCommand::Run(args) => args,
        LabCommand::Render(args) => return render(args),
        LabCommand::Calibrate(args) => return calibrate(args),
    };
    let experiment = Experiment::load(&args.file)?;
    // A mistyped --scenario or --variant is reported before the output folder is made.
    experiment.select(&args.scenarios, &args.variants)?;
    let out = args.out.unwrap_or_else(|| default_out(&format!("{}-{}", experiment.file.name, timestamp())));
    let outputs = Outputs::prepare(&out, None, None)?;
    if let Some(traces) = &args.traces {
        crate::output::file("--traces", traces)?;
    }
    let isolation = match args.isolation {
        IsolationArg::Loopback => Isolation::Loopback,
        IsolationArg::Netns => Isolation::Netns,
    };
    let seed = args.seed.or(experiment.seed()).unwrap_or(1);
    let mut options = Options::new(std::env::current_exe()?, args.file.clone(), out, seed);
    options.quick = args.quick;
    options.isolation = isolation;
    options.scenarios = args.scenarios;
    options.variants = args.variants;
    options.duration = args.duration;
    options.warmup = args.warmup;
    if let Some(path) = &args.calibration {
        let calibration = tailguard_model::Calibration::load(path)
            .map_err(|e| anyhow::anyhow!("--calibration {}: {e}", path.display()))?;
        options.calibration = Some(calibration);
    }
    let ratio = args.trace_ratio;
    options.tracing = match (args.no_traces, args.otlp_endpoint, args.traces) {
        (true, _, _) => Tracing::Off,
        (_, Some(endpoint), _) => Tracing::Export { endpoint, ratio },
        (_, None, out) => Tracing::Collect {
            out: out.unwrap_or_else(|| options.out.join("traces.json")),
            ratio,
            per_run: args.trace_sample,
        },
    };
    run_lab(&experiment, options, &outputs, every_table)
}

/// `tailguard lab calibrate`: measures and writes the calibration, and prints its medians.
fn calibrate(args: CalibrateArgs) -> anyhow::Result<()> {
    use tailguard_lab::calibrate::{self, CalibrateOptions};
    let installed = calibrate::installed_sidecars();
    let sidecars = if args.sidecars.is_empty() { installed.clone() } else { args.sidecars.clone() };
    if let Some(missing) = sidecars.iter().find(|s| !installed.contains(s)) {
        anyhow::bail!("--sidecar {missing}: expected one of the sidecars installed here: {}", installed.join(", "));
    }
    let (mut rates, duration, warmup) = match args.quick {
        true => (vec![50.0, 500.0], Duration::from_secs(3), Duration::from_secs(1)),
        false => (calibrate::RATES.to_vec(), args.duration, args.warmup),
    };
    if !args.rates.is_empty() {
        rates = args.rates.clone();
    }
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    if let Some(bad) = rates.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
        anyhow::bail!("--rate {bad}: expected a positive number of requests per second");
    }
    crate::output::file("--out", &args.out)?;
    let dir = args.dir.unwrap_or_else(|| default_out(&format!("calibrate-{}", timestamp())));
    let options = CalibrateOptions {
        exe: std::env::current_exe()?,
        out: std::path::absolute(&dir)?,
        rates,
        seconds: duration,
        warmup,
        sidecars,
        cancel: Cancel::default(),
    };
    watch_signals(options.cancel.clone());
    eprintln!(
        "calibrating {} at {} requests/s, {} s each (load average {:.2}), runs in {}",
        options.sidecars.join(", "),
        options.rates.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", "),
        options.seconds.as_secs_f64(),
        calibrate::load_average(),
        dir.display()
    );
    let progress = Progress::new();
    let calibration = calibrate::calibrate(&options, &progress);
    progress.bar.finish_and_clear();
    let calibration = calibration?;
    std::fs::write(&args.out, calibration.to_yaml()).with_context(|| format!("writing {}", args.out.display()))?;
    println!("sidecar     rate/s  client p50  client p99  service p50  service p99  work p50  work p99   (ms added)");
    for (name, hops) in &calibration.sidecars {
        for p in &hops.points {
            let ms = |d: Duration| d.as_secs_f64() * 1000.0;
            println!(
                "{name:<10} {:>7} {:>11.3} {:>11.3} {:>12.3} {:>12.3} {:>9.3} {:>9.3}",
                p.rate,
                ms(p.client.at(0.5)),
                ms(p.client.at(0.99)),
                ms(p.service.at(0.5)),
                ms(p.service.at(0.99)),
                ms(p.work.at(0.5)),
                ms(p.work.at(0.99))
            );
        }
    }
    let [before, after] = calibration.load_average;
    println!("load average {before:.2} before, {after:.2} after; calibration: {}", args.out.display());
    Ok(())
}

/// Where a lab run's results JSON and report go.
pub(crate) struct Outputs {
    pub json: PathBuf,
    pub report: PathBuf,
}

impl Outputs {
    /// Creates the output folder `out` and the folders of `json` and `report` (default:
    /// results.json and report.html in `out`). An `out` that already holds a results.json is
    /// refused: its sidecar files, logs and traces would be mixed with this run's.
    pub(crate) fn prepare(out: &Path, json: Option<PathBuf>, report: Option<PathBuf>) -> anyhow::Result<Outputs> {
        let earlier = out.join("results.json");
        if earlier.exists() {
            anyhow::bail!(
                "--out {}: holds the results of an earlier run ({}); give another --out, or remove the folder",
                out.display(),
                earlier.display()
            );
        }
        crate::output::folder("--out", out)?;
        let json = json.unwrap_or(earlier);
        let report = report.unwrap_or_else(|| out.join("report.html"));
        crate::output::file("--json", &json)?;
        crate::output::file("--report", &report)?;
        Ok(Outputs { json, report })
    }

    /// Prints `table` and writes the results JSON, the report and (said where) the traces.
    pub(crate) fn save(&self, results: &Results, table: Table, tracing: &Tracing) -> anyhow::Result<()> {
        print!("{}", table(results));
        let json = &self.json;
        std::fs::write(json, serde_json::to_string_pretty(results)? + "\n")
            .with_context(|| format!("writing {}", json.display()))?;
        println!("results: {}", json.display());
        crate::report::write(results, &self.report)?;
        match tracing {
            Tracing::Collect { out, .. } => println!("traces: {}", out.display()),
            Tracing::Export { endpoint, .. } => println!("traces: sent to {endpoint}"),
            Tracing::Off => {}
        }
        Ok(())
    }
}

/// How a command prints its results.
pub(crate) type Table = fn(&Results) -> String;

/// `tailguard lab run`'s tables: every column, the memory and the sidecars' CPU.
fn every_table(results: &Results) -> String {
    format!("{}{}{}", table::render(results), table::memory(results), table::sidecar_cpu(results))
}

pub(crate) fn run_lab(
    experiment: &Experiment,
    options: Options,
    outputs: &Outputs,
    table: Table,
) -> anyhow::Result<()> {
    watch_signals(options.cancel.clone());
    eprintln!(
        "lab: {} ({}{}, seed {}), output in {}",
        options.file.display(),
        match options.isolation {
            Isolation::Loopback => "loopback",
            Isolation::Netns => "netns",
        },
        if options.quick { ", quick" } else { "" },
        options.seed,
        options.out.display()
    );
    let started = std::time::Instant::now();
    let progress = Progress::new();
    let results = tailguard_lab::run(experiment, &options, &progress);
    progress.bar.finish_and_clear();
    match results {
        Ok(results) => {
            eprintln!("done in {:.1} s", started.elapsed().as_secs_f64());
            outputs.save(&results, table, &options.tracing)
        }
        // What finished is kept: an interrupted or failed run does not cost the earlier ones.
        Err(LabError::Unfinished { finished, total, error }) => {
            eprintln!("stopped after {} of {total} runs; saving the finished runs", finished.runs.len());
            outputs.save(&finished, table, &options.tracing)?;
            Err(anyhow::Error::from(*error)
                .context(format!("only {} of {total} runs finished (saved above)", finished.runs.len())))
        }
        Err(error) => Err(error.into()),
    }
}

/// Ctrl-C or SIGTERM sets `cancel`: the lab then stops every process it started and returns.
fn watch_signals(cancel: Cancel) {
    std::thread::spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        runtime.block_on(tailguard_proxy::shutdown_signal());
        eprintln!("\ninterrupted: stopping every process the lab started");
        cancel.cancel();
    });
}

pub(crate) fn default_out(name: &str) -> PathBuf {
    PathBuf::from("lab-out").join(name)
}

/// UTC now as `YYYYMMDD-HHMMSS`.
pub(crate) fn timestamp() -> String {
    let (year, month, day, hour, minute, second) = tailguard_lab::utc_now();
    format!("{year:04}{month:02}{day:02}-{hour:02}{minute:02}{second:02}")
}

/// Progress: one bar per run, counting the seconds of load against the run's length.
struct Progress {
    bar: ProgressBar,
    terminal: bool,
}

impl Progress {
    fn new() -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let bar = if terminal { ProgressBar::new(0) } else { ProgressBar::hidden() };
        let style = ProgressStyle::with_template("{prefix} {bar:30} {pos}/{len} s, eta {eta} {msg}").expect("valid");
        bar.set_style(style);
        Progress { bar, terminal }
    }
}

impl Observer for Progress {
    fn run_started(&self, index: usize, total: usize, scenario: &str, variant: &str, expected: Option<Duration>) {
        self.bar.reset();
        self.bar.set_length(expected.map_or(0, |d| d.as_secs()));
        self.bar.set_prefix(format!("[{}/{total}] {scenario} / {variant}", index + 1));
        if !self.terminal {
            eprintln!("[{}/{total}] {scenario} / {variant}", index + 1);
        }
    }

    fn phase(&self, what: &str) {
        self.bar.set_message(what.to_string());
    }

    fn tick(&self, elapsed: Duration) {
        self.bar.set_position(elapsed.as_secs().min(self.bar.length().unwrap_or(0)));
    }

    fn run_finished(&self, r: &RunResult) {
        let line = format!(
            "  {} / {}: {} requests, {:.2}% success, p50 {:.1} ms, p99 {:.1} ms",
            r.scenario,
            r.variant,
            r.requests,
            100.0 * r.success_rate,
            r.latency_ms.p50,
            r.latency_ms.p99
        );
        self.bar.println(&line);
        if !self.terminal {
            eprintln!("{line}");
        }
    }

    fn note(&self, text: &str) {
        self.bar.println(format!("note: {text}"));
        if !self.terminal {
            eprintln!("note: {text}");
        }
    }

    fn ready(&self, _plan: &Plan) {}
}

/// `tailguard lab render --k8s FILE`: the manifests on stdout.
fn render(args: RenderArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let experiment = Experiment::parse(&text, &args.file)?;
    let options = tailguard_k8s::RenderOptions {
        scenario: args.scenario,
        variant: args.variant,
        quick: args.quick,
        seed: args.seed,
        image: args.image,
        slot: args.slot,
        trusted_peers: args.pod_networks,
    };
    debug_assert!(args.k8s, "clap requires --k8s");
    let manifests = tailguard_k8s::render(&experiment, &text, &options)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.file.display()))?;
    print!("{manifests}");
    Ok(())
}
