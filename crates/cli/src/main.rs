//! The `tailguard` command: argument parsing and wiring only; the work happens in the libraries.

mod collect;
mod demo;
mod inject;
mod lab;
mod load;
mod output;
mod proxy;
mod report;
mod serve;
mod sim;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Adaptive tail-latency control for microservices: simulator, sidecar proxy, synthetic service, load.
#[derive(Parser)]
#[command(name = "tailguard", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run an experiment file in the simulator (virtual time) and print a comparison table.
    Sim(sim::SimArgs),
    /// Run experiment files on real processes (tailguard serve + tailguard proxy sidecars).
    #[command(subcommand)]
    Lab(lab::LabCommand),
    /// tailguard's recommended policies against HAProxy and nginx as sidecars, on a hedgeable store
    /// and failing replicas: in the lab (about 3 min), or with --sim in the simulator.
    Demo(demo::DemoArgs),
    /// Run the sidecar proxy (egress balancing, timeouts, retries, hedging; ingress admission).
    Proxy(proxy::ProxyArgs),
    /// Serve one service of an experiment file as a real synthetic HTTP service.
    Serve(serve::ServeArgs),
    /// Send HTTP load (open or closed loop) and report exact percentiles.
    Load(load::LoadArgs),
    /// Receive OTLP/HTTP spans until ctrl-c, then write them as Jaeger JSON.
    Collect(collect::CollectArgs),
    /// Add the tailguard sidecar to Kubernetes manifests (files or stdin) and write them to stdout.
    Inject(inject::InjectArgs),
    /// Render a results JSON as one self-contained HTML report (plots and tables).
    Report(report::ReportArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim::run(args),
        Command::Lab(command) => lab::run(command),
        Command::Demo(args) => demo::run(args),
        Command::Proxy(args) => proxy::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Load(args) => load::run(args),
        Command::Collect(args) => collect::run(args),
        Command::Report(args) => report::run(args),
        Command::Inject(args) => inject::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
