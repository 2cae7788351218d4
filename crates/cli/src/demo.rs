//! `tailguard demo`: tailguard's recommended policies against HAProxy and nginx as sidecars, on
//! examples/peers.yaml's hedgeable store and failing replicas, in the lab (about 3 min) or with
//! `--sim` in the simulator (seconds). It is `tailguard lab run` (or `tailguard sim`) on the
//! embedded file with the selection below, and prints the command that does the same.

use crate::lab::{default_out, run_lab, timestamp, Outputs};
use std::path::{Path, PathBuf};
use tailguard_lab::{Options, Tracing};
use tailguard_model::schema::SidecarKind;
use tailguard_model::Experiment;
use tailguard_report::table;

/// The file the demo runs, embedded so `tailguard demo` runs anywhere.
const FILE: &str = include_str!("../../../examples/peers.yaml");
const FILE_NAME: &str = "examples/peers.yaml";
/// The hedgeable store and the failing replicas; the file's 40x10 (103 processes) is left out.
const SCENARIOS: [&str; 2] = ["speculative", "failing-replica"];
/// tailguard's recommended policies, then the peers as their documentation configures them.
const VARIANTS: [(&str, SidecarKind); 3] =
    [("tailguard", SidecarKind::Tailguard), ("haproxy", SidecarKind::Haproxy), ("nginx", SidecarKind::Nginx)];

/// Arguments of `tailguard demo`.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Run the simulator instead of the lab.
    #[arg(long)]
    sim: bool,
    /// Run the file's full length (60 s of load per run) instead of its quick one (20 s).
    #[arg(long)]
    full: bool,
    /// Where results.json, report.html and (lab) the sidecar files and logs go
    /// (default: lab-out/demo-TIMESTAMP, or lab-out/demo-sim-TIMESTAMP with --sim).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Write the results JSON here instead of DIR/results.json.
    #[arg(long, value_name = "OUT")]
    json: Option<PathBuf>,
    /// Write the HTML report here instead of DIR/report.html.
    #[arg(long, value_name = "PATH")]
    report: Option<PathBuf>,
}

pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    let name = if args.sim { "demo-sim" } else { "demo" };
    let out = args.out.unwrap_or_else(|| default_out(&format!("{name}-{}", timestamp())));
    let outputs = Outputs::prepare(&out, args.json, args.report)?;
    // The lab's processes read the file, so the embedded text is written out first.
    let file = out.join("peers.yaml");
    std::fs::write(&file, FILE).map_err(|e| anyhow::anyhow!("writing {}: {e}", file.display()))?;
    let experiment = Experiment::parse(FILE, Path::new(FILE_NAME))?;
    let scenarios: Vec<String> = SCENARIOS.iter().map(|s| s.to_string()).collect();
    let variants = if args.sim { VARIANTS.iter().map(|(v, _)| v.to_string()).collect() } else { installed_variants() };
    let mut command = format!("tailguard {} {FILE_NAME}", if args.sim { "sim" } else { "lab run --no-traces" });
    if !args.full {
        command += " --quick";
    }
    for s in &scenarios {
        command += &format!(" --scenario {s}");
    }
    for v in &variants {
        command += &format!(" --variant {v}");
    }
    eprintln!("demo: tailguard's recommended policies against HAProxy and nginx; the same as\n  {command}");
    if args.sim {
        return crate::sim::demo(&experiment, FILE_NAME, scenarios, variants, !args.full, &outputs);
    }
    let seed = experiment.seed().unwrap_or(1);
    let mut options = Options::new(std::env::current_exe()?, file, out, seed);
    options.quick = !args.full;
    options.scenarios = scenarios;
    options.variants = variants;
    // The peers make no spans: tailguard's sidecars make none either, so the CPU compares alike.
    options.tracing = Tracing::Off;
    run_lab(&experiment, options, &outputs, table::summary)
}

/// The demo's variants whose sidecar is installed; says which are not and how to install them.
fn installed_variants() -> Vec<String> {
    let mut variants = Vec::new();
    for (variant, sidecar) in VARIANTS {
        let program = sidecar.name();
        if sidecar != SidecarKind::Tailguard && tailguard_lab::real::find(program).is_err() {
            eprintln!(
                "demo: {program} is not installed, so its variant is left out (`apt-get install {program}`, or \
                 `make demo` as root, installs it)"
            );
            continue;
        }
        variants.push(variant.to_string());
    }
    variants
}
