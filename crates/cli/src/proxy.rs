//! `tailguard proxy --config FILE`: runs the sidecar proxy until ctrl-c or SIGTERM.

use anyhow::Context;
use clap::Args;
use std::path::PathBuf;

/// Arguments of `tailguard proxy`.
#[derive(Args, Debug)]
pub struct ProxyArgs {
    /// The proxy's configuration file (YAML, docs/proxy.md).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// The proxy's threads, overriding the file's `workers` (1: everything on one thread).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub workers: Option<u16>,
    /// Check the file and the TLS files it names, then exit (0: ok) without serving.
    #[arg(long)]
    pub check: bool,
}

/// Loads the file, serves until ctrl-c or SIGTERM, then shuts down gracefully; with `--check`,
/// only loads it and reads its TLS files.
pub fn run(args: ProxyArgs) -> anyhow::Result<()> {
    let config = tailguard_proxy::Config::load(&args.config)?;
    for warning in config.warnings() {
        eprintln!("tailguard proxy: warning: {warning}");
    }
    if args.check {
        tailguard_proxy::check(&config)?;
        println!("{}: ok", args.config.display());
        return Ok(());
    }
    keep_freed_memory();
    let workers = args.workers.map(usize::from).or(config.workers);
    let runtime = tailguard_proxy::runtime(workers).context("cannot start the runtime")?;
    runtime.block_on(async {
        let proxy = tailguard_proxy::Proxy::start(config).await?;
        eprintln!("tailguard proxy: seed {} (set `seed:` in the file to repeat the run's draws)", proxy.seed);
        for (name, addr) in [("egress", proxy.egress), ("ingress", proxy.ingress), ("admin", proxy.admin)] {
            if let Some(addr) = addr {
                eprintln!("tailguard proxy: {name} listening on {addr}");
            }
        }
        tailguard_proxy::shutdown_signal().await;
        eprintln!("tailguard proxy: shutting down");
        proxy.shutdown().await;
        Ok(())
    })
}

/// glibc's malloc gives the top of its heap back to the kernel whenever more than 128 KiB is
/// free there, and the proxy's per-request allocations then fault the same pages in again: 0.05
/// to 0.18 page faults per request, measured, and 1-2 µs of system time per request. Keeping up
/// to 2 MiB of freed memory brings that to 0.002 (1 MiB was enough, measured).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_freed_memory() {
    // SAFETY: mallopt only sets a malloc parameter; no other thread exists yet.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 2 << 20);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn keep_freed_memory() {}
