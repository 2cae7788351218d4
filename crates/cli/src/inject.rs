//! `tailguard inject [FILE...]`: Kubernetes manifests with the tailguard sidecar added, written
//! to stdout (docs/deploy.md); the work is `tailguard_k8s::inject`.

use anyhow::Context;
use clap::Args;
use std::io::Read;
use std::path::PathBuf;
use tailguard_k8s::InjectOptions;
use tailguard_proxy::config::Network;

/// Arguments of `tailguard inject`.
#[derive(Args)]
pub struct InjectArgs {
    /// Manifest files (YAML, several documents each); none or `-` reads stdin.
    #[arg(value_name = "FILE")]
    files: Vec<PathBuf>,
    /// The sidecar's image.
    #[arg(long, default_value = tailguard_k8s::DEFAULT_IMAGE)]
    image: String,
    /// The sidecar file every injected pod gets (docs/proxy.md; egress on port 4140, ingress on
    /// 4143, admin on 0.0.0.0:9990); default: one per workload in front of its first port.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The callers whose deadline and trace headers the generated ingress believes, e.g. the
    /// pod network 10.244.0.0/16 (repeatable; default: loopback only; docs/security.md).
    #[arg(long = "trusted-peer", value_name = "CIDR")]
    trusted_peers: Vec<Network>,
    /// Also point the application's HTTP_PROXY (and http_proxy) at the egress.
    #[arg(long)]
    http_proxy: bool,
}

pub fn run(args: InjectArgs) -> anyhow::Result<()> {
    let mut options = InjectOptions { image: args.image, http_proxy: args.http_proxy, ..InjectOptions::default() };
    if !args.trusted_peers.is_empty() {
        options.trusted_peers = args.trusted_peers;
    }
    if let Some(path) = &args.config {
        let config = tailguard_proxy::Config::load(path)?;
        tailguard_k8s::inject::check_sidecar_file(&config)
            .map_err(|e| anyhow::anyhow!("--config {}: {e}", path.display()))?;
        options.proxy_file = Some(config);
    }
    let files = if args.files.is_empty() { vec![PathBuf::from("-")] } else { args.files };
    let mut outputs = Vec::new();
    for file in &files {
        let (text, origin) = if file.as_os_str() == "-" {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).context("reading stdin")?;
            (text, "-".to_string())
        } else {
            let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
            (text, file.display().to_string())
        };
        outputs.push(tailguard_k8s::inject(&text, &origin, &options)?);
    }
    print!("{}", outputs.join("---\n"));
    Ok(())
}
