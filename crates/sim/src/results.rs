//! The results-JSON schema (docs/results.md), written by `tailguard sim` and, with mode "lab",
//! by the lab. One [`Results`] per experiment, one [`RunResult`] per scenario × variant.

use serde::{Deserialize, Serialize};

/// The results of every run of one experiment.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Results {
    /// The experiment's name.
    pub experiment: String,
    /// "sim", "lab" or "load".
    pub mode: String,
    /// The seed the runs used.
    pub seed: u64,
    /// One entry per scenario × variant, scenarios outermost, in file order.
    pub runs: Vec<RunResult>,
}

/// What one variant did under one scenario; latencies are over successful requests as the user
/// saw them.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RunResult {
    pub scenario: String,
    pub variant: String,
    /// Measured requests (started after the warm-up).
    pub requests: u64,
    pub succeeded: u64,
    /// Ended with an error or an unreachable service.
    pub failed: u64,
    /// Refused (429) or dropped because no endpoint would take them.
    pub rejected: u64,
    /// Ended by a deadline or a timeout with no retry left, or unanswered at the end.
    pub timed_out: u64,
    /// succeeded / requests.
    pub success_rate: f64,
    /// Successful requests per second of measured time.
    pub throughput_rps: f64,
    /// Attempts sent between services / calls between services that sent one − 1 (hedges, retries).
    pub extra_load: f64,
    pub latency_ms: Latency,
    /// adaptive-timeouts.txt §5.2: Σ call latency / Σ latency of the answering attempt, over
    /// successful calls between services.
    pub time_fraction: f64,
    /// Attempts between services that timed out, in % of such attempts.
    pub timeouts_pct: f64,
    /// Mean of (timeout − latency) / latency over successful attempts sent with a timeout, in %.
    pub closeness_pct: f64,
    /// Mean over 1 s intervals of the standard deviation of attempts sent to each replica of the
    /// busiest called service (bloc-load-balancing.txt Fig. 4b).
    pub imbalance: f64,
    /// Virtual seconds the measurement covered.
    pub duration_s: f64,
    /// Attempts sent between services.
    pub attempts: u64,
    /// The latency distribution of successful requests as (latency ms, fraction at or below) points,
    /// increasing in both; empty when not recorded. The report draws its CDFs from it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cdf: Vec<[f64; 2]>,
    /// What changed over the run, one value per interval; absent when not recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<Series>,
    /// The lab only: resident memory of every service's processes over the run; empty elsewhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory: Vec<ProcessMemory>,
}

/// Resident memory of one lab process (a replica's `tailguard serve` or its sidecar), read from
/// `/proc/PID/status` every second of measured time; case-for-timeouts.txt shows requests held
/// without a timeout piling up in the caller's memory.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ProcessMemory {
    pub service: String,
    pub replica: u32,
    /// "service" (the replica's own work: `tailguard serve`) or "sidecar" (its `tailguard proxy`).
    pub role: String,
    /// The most resident memory the process ever had (VmHWM), MB.
    pub peak_rss_mb: f64,
    /// The mean of the resident memory (VmRSS) sampled over the measured time, MB.
    pub mean_rss_mb: f64,
    /// "service" entries: the most requests the replica held at a sample (its sidecar's ingress
    /// in-flight gauge), and their mean over the samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_in_flight: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_in_flight: Option<f64>,
}

/// Time series of one run, sampled every `interval_s` seconds of measured time (index 0 is the
/// first interval after the warm-up).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Series {
    pub interval_s: f64,
    /// Attempts started at each replica of the busiest called service, per interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_load: Option<ReplicaLoad>,
    /// For each call edge with a timeout policy: the timeout it set and the latency it observed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeouts: Vec<TimeoutSeries>,
}

/// Attempts started per replica and interval: `replicas[r][i]` is replica r in interval i.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ReplicaLoad {
    pub service: String,
    pub replicas: Vec<Vec<u64>>,
}

/// One call edge's timeout against the latency of its attempts (adaptive-timeouts.txt Fig. 7–14),
/// per interval; NaN-free: an interval without attempts repeats the previous value (0 before any).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TimeoutSeries {
    /// "caller->callee".
    pub edge: String,
    /// Mean timeout of the attempts sent in the interval, ms.
    pub timeout_ms: Vec<f64>,
    /// Mean latency of the attempts answered in the interval, ms.
    pub latency_ms: Vec<f64>,
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/results.schema.json requires exactly the fields this crate writes.
    #[test]
    fn the_json_schema_lists_every_field() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../../../docs/results.schema.json")).expect("valid JSON");
        let names = |v: &serde_json::Value| -> Vec<String> {
            let mut names: Vec<String> =
                v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect();
            names.sort();
            names
        };
        let keys = |v: serde_json::Value| -> Vec<String> {
            let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            keys.sort();
            keys
        };
        let run = RunResult {
            scenario: String::new(),
            variant: String::new(),
            requests: 0,
            succeeded: 0,
            failed: 0,
            rejected: 0,
            timed_out: 0,
            success_rate: 0.0,
            throughput_rps: 0.0,
            extra_load: 0.0,
            latency_ms: Latency::default(),
            time_fraction: 0.0,
            timeouts_pct: 0.0,
            closeness_pct: 0.0,
            imbalance: 0.0,
            duration_s: 0.0,
            attempts: 0,
            ..RunResult::default()
        };
        let run_json = serde_json::to_value(&run).unwrap();
        assert_eq!(keys(run_json.clone()), names(&schema["$defs"]["run"]["required"]));
        assert_eq!(
            keys(run_json["latency_ms"].clone()),
            names(&schema["$defs"]["run"]["properties"]["latency_ms"]["required"])
        );
        let results = Results { experiment: String::new(), mode: "sim".into(), seed: 0, runs: vec![] };
        assert_eq!(keys(serde_json::to_value(&results).unwrap()), names(&schema["required"]));
    }
}
