//! Spans from the sidecars (docs/traces.md): where the lab tells them to export, and the
//! in-process collector that receives a run's spans when no collector is given.
//!
//! Each run gets its own [`Collector`] (started once the run's network exists, stopped after its
//! processes), so its traces are known to be that run's. Like `tailguard sim --traces`, every
//! process carries the run's `scenario` and `variant` as tags (each sidecar sets them as resource
//! attributes, so an external collector sees them too) and the lab writes all runs to one Jaeger
//! file, which the tuner (python/tailguard_tune) filters by those tags.

use crate::error::LabError;
use crate::plan::{Isolation, Plan};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;
use tailguard_trace::{Collector, CollectorHandle, Trace};

/// The service name of the workload's sidecar in traces, as the simulator names the workload.
pub const CLIENT: &str = "client";
/// How long stopped processes get to exit when their sidecars export spans: the sidecar's
/// shutdown grace (1 s) plus the proxy's wait for its last export (at most 5 s), and a margin.
pub const FLUSH_GRACE: Duration = Duration::from_secs(8);

/// What the sidecars do with spans.
#[derive(Clone, Debug, PartialEq)]
pub enum Tracing {
    /// No `tracing:` section: the sidecars build no tracer (for overhead-sensitive runs).
    Off,
    /// The lab collects spans itself (the sidecars trace a `ratio` of the requests) and writes
    /// at most `per_run` traces of each run to `out` (Jaeger JSON), drawn as
    /// `tailguard sim --trace-sample` draws them ([`keep_measured`]).
    Collect { out: PathBuf, ratio: f64, per_run: usize },
    /// The sidecars export a `ratio` of the requests to this OTLP/HTTP URL (a Jaeger or
    /// OpenTelemetry Collector); the lab writes nothing.
    Export { endpoint: String, ratio: f64 },
}

impl Tracing {
    /// The fraction of requests the sidecars trace, if any are.
    pub fn ratio(&self) -> Option<f64> {
        match self {
            Tracing::Off => None,
            Tracing::Collect { ratio, .. } | Tracing::Export { ratio, .. } => Some(*ratio),
        }
    }
}

/// What the lab keeps of one run's collected traces, as `tailguard sim --trace-sample N` keeps
/// the simulator's: at most `per_run` traces drawn uniformly at random (the `seed`'s stream) from
/// the traces of measured requests, those whose first span started at or after
/// `measured_from_us` (the end of the warm-up, in microseconds since the Unix epoch). Ordered by
/// trace id.
pub fn keep_measured(mut traces: Vec<Trace>, measured_from_us: u64, per_run: usize, seed: u64) -> Vec<Trace> {
    traces.retain(|t| t.spans.iter().map(|s| s.start_us).min().is_some_and(|start| start >= measured_from_us));
    // The collector's order depends on arrival; the draw should not.
    traces.sort_unstable_by_key(|t| t.id);
    if traces.len() <= per_run {
        return traces;
    }
    let mut chosen = vec![false; traces.len()];
    for i in rand::seq::index::sample(&mut StdRng::seed_from_u64(seed), traces.len(), per_run) {
        chosen[i] = true;
    }
    traces.into_iter().zip(chosen).filter_map(|(trace, kept)| kept.then_some(trace)).collect()
}

/// A `--trace-ratio` value: a fraction from 0 to 1.
pub fn parse_ratio(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("expected a fraction from 0 to 1, got {text:?}")),
    }
}

/// An `--otlp-endpoint` value: an `http://` URL (OTLP/HTTP; the proxy adds `/v1/traces` to a
/// URL without a path).
pub fn parse_endpoint(text: &str) -> Result<String, String> {
    match text.strip_prefix("http://") {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') => Ok(text.to_string()),
        _ => Err(format!("expected an http:// URL such as http://127.0.0.1:4318/v1/traces, got {text:?}")),
    }
}

/// One run's collector.
pub(crate) struct RunCollector(CollectorHandle);

impl RunCollector {
    /// Starts a collector the run's sidecars can reach: on loopback at 127.0.0.1, in netns runs
    /// on the bridge's address (the host side of every namespace); a free port either way.
    pub(crate) fn start(plan: &Plan, runtime: &tokio::runtime::Runtime) -> Result<RunCollector, LabError> {
        let ip = match plan.isolation {
            Isolation::Loopback => IpAddr::V4(Ipv4Addr::LOCALHOST),
            Isolation::Netns => plan.isolation.host_address(plan.slot),
        };
        let bind = SocketAddr::new(ip, 0);
        let handle = runtime
            .block_on(Collector::start(bind))
            .map_err(|e| LabError::Network(format!("cannot start the trace collector on {bind}: {e}")))?;
        Ok(RunCollector(handle))
    }

    /// The URL for the sidecars' `tracing.otlp_endpoint`.
    pub(crate) fn endpoint(&self) -> String {
        self.0.endpoint()
    }

    /// Stops the collector (call it once the sidecars have exited and flushed) and returns the
    /// run's traces (each sidecar tags its process with the run's `scenario` and `variant`) and
    /// the count of spans dropped because the collector was full.
    pub(crate) fn finish(self, runtime: &tokio::runtime::Runtime) -> (Vec<Trace>, u64) {
        let dropped = self.0.dropped();
        (runtime.block_on(self.0.shutdown()), dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_checked() {
        assert_eq!(parse_ratio("0.25"), Ok(0.25));
        assert!(parse_ratio("1.5").unwrap_err().contains("fraction"));
        assert!(parse_ratio("x").is_err());
        assert_eq!(parse_endpoint("http://127.0.0.1:4318").as_deref(), Ok("http://127.0.0.1:4318"));
        assert!(parse_endpoint("127.0.0.1:4318").unwrap_err().contains("http://"));
        assert!(parse_endpoint("https://collector:4318").is_err());
        assert!(parse_endpoint("http://").is_err());
    }

    /// A trace of one span started at `start_us`.
    fn trace(id: u128, start_us: u64) -> Trace {
        let span = tailguard_trace::Span {
            id: 1,
            parent: None,
            process: 0,
            operation: "ingress".into(),
            start_us,
            duration_us: 10,
            tags: Vec::new(),
        };
        Trace { id, processes: Vec::new(), spans: vec![span] }
    }

    #[test]
    fn a_run_keeps_a_uniform_sample_of_its_measured_traces() {
        // Ids 0..100 start before the warm-up's end (1000 µs), 100..300 at or after it.
        let traces: Vec<Trace> = (0..300).rev().map(|id| trace(id, if id < 100 { 999 } else { 1000 })).collect();
        let ids = |kept: &[Trace]| kept.iter().map(|t| t.id).collect::<Vec<_>>();
        let all = keep_measured(traces.clone(), 1000, 500, 7);
        assert_eq!(ids(&all), (100..300).collect::<Vec<_>>(), "every measured trace, by id");
        let some = keep_measured(traces.clone(), 1000, 20, 7);
        assert_eq!(some.len(), 20);
        assert!(ids(&some).windows(2).all(|w| w[0] < w[1]) && some.iter().all(|t| t.id >= 100));
        assert_eq!(ids(&some), ids(&keep_measured(traces.iter().rev().cloned().collect(), 1000, 20, 7)));
        assert_ne!(ids(&some), ids(&keep_measured(traces.clone(), 1000, 20, 8)), "another seed, another draw");
        // Uniform: the draw reaches across the measured ids, not just their start.
        assert!(some.iter().any(|t| t.id >= 200), "{:?}", ids(&some));
        assert!(keep_measured(traces, 1000, 0, 7).is_empty());
    }
}
