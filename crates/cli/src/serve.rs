//! `tailguard serve`: one replica of one service of an experiment file, as a real HTTP service
//! (docs/serve.md).

use anyhow::Context;
use std::net::SocketAddr;
use std::path::PathBuf;
use tailguard_model::Experiment;
use tailguard_serve::{shutdown_signal, Options, Server, Spec};

/// Arguments of `tailguard serve`.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// The experiment file (YAML).
    file: PathBuf,
    /// The service to be, by its name in the file.
    #[arg(long)]
    service: String,
    /// The scenario whose overrides apply (default: the file's first).
    #[arg(long)]
    scenario: Option<String>,
    /// The variant whose overrides apply (default: the file's first).
    #[arg(long)]
    variant: Option<String>,
    /// Apply the file's `quick` overrides.
    #[arg(long)]
    quick: bool,
    /// Which replica of the service this is, from 0 (selects `down` faults and the random stream).
    #[arg(long, default_value_t = 0)]
    replica: u32,
    /// The address to listen on; port 0 picks a free port (printed on start).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Where a called service is reached: NAME=URL (in the lab, this replica's sidecar egress).
    /// Repeat for each called service.
    #[arg(long, value_name = "NAME=URL", value_parser = parse_downstream)]
    downstream: Vec<(String, String)>,
    /// Seed of the random streams (default: the file's `seed`, else 1).
    #[arg(long)]
    seed: Option<u64>,
}

fn parse_downstream(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, url)) if !name.is_empty() && !url.is_empty() => Ok((name.to_string(), url.to_string())),
        _ => Err(format!("expected NAME=URL, such as backend=http://127.0.0.1:8080/, got \"{text}\"")),
    }
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let experiment = Experiment::load(&args.file)?;
    let options = Options {
        service: args.service,
        scenario: args.scenario,
        variant: args.variant,
        quick: args.quick,
        replica: args.replica,
        downstream: args.downstream,
        seed: args.seed,
    };
    let spec = Spec::from_experiment(&experiment, &options)?;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(async {
        // Installed before binding, so a SIGUSR1 never finds its default action (to terminate).
        #[cfg(unix)]
        let mut run_starts = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
            .context("cannot handle SIGUSR1")?;
        let server = Server::bind(&spec, args.listen).await?;
        let addr = server.local_addr()?;
        // On stdout, one line, so a launcher can read the address a port 0 got.
        println!(
            "serving {} replica {} of {} on http://{addr} (seed {})",
            spec.name,
            spec.replica,
            args.file.display(),
            spec.seed
        );
        // On stderr, one line per fault this replica realises (`backend replica 2: hang from 10s
        // until 20s`); windows log again as they open and close.
        for fault in server.faults() {
            eprintln!("{} replica {}: {fault}", spec.name, spec.replica);
        }
        // SIGUSR1: the run starts now (the lab's load); fault windows and latency models count
        // from here.
        #[cfg(unix)]
        {
            let clock = server.clock();
            tokio::spawn(async move {
                while run_starts.recv().await.is_some() {
                    clock.restart();
                }
            });
        }
        server.run_until(shutdown_signal()).await?;
        anyhow::Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::parse_downstream;

    #[test]
    fn downstream_is_name_equals_url() {
        assert_eq!(parse_downstream("b=http://127.0.0.1:1/x=y"), Ok(("b".into(), "http://127.0.0.1:1/x=y".into())));
        assert!(parse_downstream("b").is_err());
        assert!(parse_downstream("=http://x/").is_err());
    }
}
