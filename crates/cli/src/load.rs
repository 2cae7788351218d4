//! `tailguard load`: parse the arguments into a [`LoadConfig`], run it, print the summary and
//! save the results JSON. The work happens in `tailguard_load`.

use anyhow::Context;
use std::path::PathBuf;
use std::time::Duration;
use tailguard_load::{parse_method, LoadConfig, LoadReport, Shape, Stop, Target};
use tailguard_model::Dur;

/// Arguments of `tailguard load`.
#[derive(clap::Args, Debug)]
pub struct LoadArgs {
    /// Target URLs (http:// or https://), used round robin; a quoted "METHOD URL" sets its own method.
    #[arg(required = true, value_name = "URL")]
    urls: Vec<String>,
    /// Open loop: start this many requests per second, whatever the responses do.
    #[arg(long, conflicts_with = "clients")]
    rate: Option<f64>,
    /// With --rate: Poisson arrivals (exponential gaps) instead of evenly spaced ones.
    #[arg(long, requires = "rate")]
    poisson: bool,
    /// Closed loop: this many clients, each waiting for its response before the next request
    /// (the default, with 10 clients, when --rate is not given).
    #[arg(long)]
    clients: Option<usize>,
    /// Closed loop: each client's pause between a response and its next request.
    #[arg(long, value_parser = Dur::parse_duration, value_name = "DURATION")]
    think: Option<Duration>,
    /// Measure for this long, e.g. 10s, 500ms, 2m (default 10s unless --requests is given).
    #[arg(long, value_parser = Dur::parse_duration)]
    duration: Option<Duration>,
    /// Stop after this many measured requests (with --duration: whichever comes first).
    #[arg(long)]
    requests: Option<u64>,
    /// Send load for this long first without recording it.
    #[arg(long, value_parser = Dur::parse_duration, default_value = "0s")]
    warmup: Duration,
    /// The method of targets given without one.
    #[arg(long, default_value = "GET")]
    method: String,
    /// Each request's limit, from sending it to the end of its response.
    #[arg(long, value_parser = Dur::parse_duration, default_value = "5s")]
    timeout: Duration,
    /// Speak HTTP/2 instead of HTTP/1.1: with prior knowledge (h2c), or by ALPN over TLS.
    #[arg(long)]
    h2c: bool,
    /// https:// targets: the CA certificates (PEM) to verify them with.
    #[arg(long, value_name = "FILE")]
    cacert: Option<PathBuf>,
    /// https:// targets: a client certificate (PEM) to present (mTLS); needs --key.
    #[arg(long, value_name = "FILE", requires = "key", requires = "cacert")]
    cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "cert")]
    key: Option<PathBuf>,
    /// Open loop: the most requests outstanding at once (later ones are sent late but still
    /// measured from their intended start).
    #[arg(long, default_value_t = 10_000)]
    max_in_flight: usize,
    /// Seed of the Poisson arrivals.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the results JSON (docs/results.md, mode "load") here.
    #[arg(long, value_name = "OUT")]
    json: Option<PathBuf>,
    /// The results JSON's experiment name.
    #[arg(long, default_value = "load")]
    name: String,
    /// The results JSON's variant name (e.g. what is under test: "direct", "proxy").
    #[arg(long, default_value = "direct")]
    variant: String,
}

pub fn run(args: LoadArgs) -> anyhow::Result<()> {
    let config = config(&args)?;
    if let Some(path) = &args.json {
        crate::output::file("--json", path)?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime")?;
    let report = runtime.block_on(tailguard_load::run(config))?;
    print!("{}", report.summary());
    if let Some(path) = &args.json {
        write_json(&report, &args, path)?;
    }
    if report.requests > 0 && report.succeeded == 0 {
        anyhow::bail!("every one of the {} requests failed (see the errors above)", report.requests);
    }
    Ok(())
}

/// The library's configuration from the arguments; errors name the bad argument.
fn config(args: &LoadArgs) -> anyhow::Result<LoadConfig> {
    let method = parse_method(&args.method).context("--method")?;
    let targets = args.urls.iter().map(|url| Target::parse(url, &method)).collect::<Result<Vec<_>, _>>()?;
    let think = args.think.unwrap_or(Duration::ZERO);
    let shape = match (args.rate, args.poisson) {
        (Some(rate), false) => Shape::Constant { rate },
        (Some(rate), true) => Shape::Poisson { rate },
        (None, _) => Shape::Closed { clients: args.clients.unwrap_or(10), think },
    };
    let mut config = LoadConfig::new(targets, shape);
    config.stop = match (args.duration, args.requests) {
        (None, None) => Stop { duration: Some(Duration::from_secs(10)), requests: None },
        (duration, requests) => Stop { duration, requests },
    };
    config.warmup = args.warmup;
    config.timeout = args.timeout;
    config.h2c = args.h2c;
    config.tls =
        args.cacert.clone().map(|ca| tailguard_load::ClientTls { ca, cert: args.cert.clone(), key: args.key.clone() });
    config.max_in_flight = args.max_in_flight;
    config.seed = args.seed;
    config.validate()?;
    Ok(config)
}

fn write_json(report: &LoadReport, args: &LoadArgs, path: &PathBuf) -> anyhow::Result<()> {
    let results = report.to_results(&args.name, &args.variant);
    let json = serde_json::to_string_pretty(&results).context("serialising the results")?;
    std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    eprintln!("results written to {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }

    fn parse(args: &[&str]) -> anyhow::Result<LoadConfig> {
        let cli = Cli::try_parse_from(std::iter::once("load").chain(args.iter().copied()))?;
        config(&cli.load)
    }

    #[test]
    fn arguments_become_a_configuration() {
        let config = parse(&["http://127.0.0.1:8080/", "--rate", "100", "--poisson", "--requests", "500"]).unwrap();
        assert_eq!(config.shape, Shape::Poisson { rate: 100.0 });
        assert_eq!(config.stop, Stop { duration: None, requests: Some(500) });
        let config = parse(&["http://127.0.0.1:8080/", "--clients", "4", "--warmup", "2s"]).unwrap();
        assert_eq!(config.shape, Shape::Closed { clients: 4, think: Duration::ZERO });
        assert_eq!(config.stop.duration, Some(Duration::from_secs(10)));
        assert_eq!(config.warmup, Duration::from_secs(2));
    }

    #[test]
    fn bad_arguments_are_errors() {
        assert!(parse(&["127.0.0.1:8080"]).unwrap_err().to_string().contains("bad target"));
        assert!(parse(&["http://127.0.0.1/", "--rate", "0"]).unwrap_err().to_string().contains("bad rate"));
        assert!(parse(&["http://127.0.0.1/", "--rate", "1", "--clients", "2"]).is_err());
        assert!(parse(&["http://127.0.0.1/", "--method", "G T"]).is_err());
        let e = parse(&["http://127.0.0.1/", "--duration", "10"]).unwrap_err().to_string();
        assert!(e.contains("without a unit"), "{e}");
    }
}
