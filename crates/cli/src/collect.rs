//! `tailguard collect`: the lab's OTLP/HTTP collector on its own, for sidecars started by hand.
//! Runs until ctrl-c or SIGTERM, then writes what it received as Jaeger JSON (docs/traces.md).

use anyhow::Context;
use std::net::SocketAddr;
use std::path::PathBuf;
use tailguard_trace::{jaeger, Collector};

/// Arguments of `tailguard collect`.
#[derive(clap::Args, Debug)]
pub struct CollectArgs {
    /// Where to serve OTLP/HTTP (POST /v1/traces).
    #[arg(long, default_value = "127.0.0.1:4318")]
    listen: SocketAddr,
    /// Where to write the traces (Jaeger JSON) on exit.
    #[arg(long, value_name = "OUT")]
    out: PathBuf,
}

pub fn run(args: CollectArgs) -> anyhow::Result<()> {
    crate::output::file("--out", &args.out)?;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the runtime")?;
    let traces = runtime.block_on(async {
        let collector =
            Collector::start(args.listen).await.with_context(|| format!("cannot listen on {}", args.listen))?;
        eprintln!("tailguard collect: OTLP/HTTP on {} until ctrl-c", collector.endpoint());
        tailguard_proxy::shutdown_signal().await;
        let dropped = collector.dropped();
        let traces = collector.shutdown().await;
        if dropped > 0 {
            eprintln!("tailguard collect: {dropped} spans dropped (the store was full)");
        }
        anyhow::Ok(traces)
    })?;
    jaeger::write_file(&traces, &args.out)?;
    let spans: usize = traces.iter().map(|t| t.spans.len()).sum();
    eprintln!("tailguard collect: {} traces ({spans} spans) written to {}", traces.len(), args.out.display());
    Ok(())
}
