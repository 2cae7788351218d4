//! The `tailguard` command: argument parsing and wiring only; the work happens in the libraries.

mod sim;
mod table;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Adaptive tail-latency control for microservices: simulator, and soon proxy, lab and load.
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
    /// Run the embedded default experiment (examples/bloc.yaml, quick) and print its table.
    Demo(sim::DemoArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim::run(args),
        Command::Demo(args) => sim::demo(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
