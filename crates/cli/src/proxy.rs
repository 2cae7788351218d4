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
}

/// Loads the file, serves until ctrl-c or SIGTERM, then shuts down gracefully.
pub fn run(args: ProxyArgs) -> anyhow::Result<()> {
    let config = tailguard_proxy::Config::load(&args.config)?;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the runtime")?;
    runtime.block_on(async {
        let proxy = tailguard_proxy::Proxy::start(config).await.context("cannot bind the proxy's listeners")?;
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
