//! The results-JSON schema (docs/results.md), written by `tailguard sim`, the lab (mode "lab") and
//! `tailguard load` (mode "load"): one [`Results`] per experiment, one [`RunResult`] per scenario ×
//! variant. Its maths live here once, so every mode computes a field alike: the latency summary
//! and CDF of successful requests ([`LatencyRecorder`]), the per-replica [`imbalance`], the
//! service whose replicas it is measured on ([`load_service`]) and the rounding ([`round`]).

use crate::Run;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::time::Duration;

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
    /// The machine's calibration (docs/lab.md, "Calibration"): the one the simulator charged, or
    /// the one the lab ran under (`tailguard lab run --calibration`); absent when none was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<crate::Calibration>,
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
    /// Requests whose outcome, as the user saw it, was a timeout: ended by a deadline or an attempt
    /// timeout with no retry left, or unanswered at the end. A count of requests, unlike
    /// `timeouts_pct`.
    pub timed_out: u64,
    /// succeeded / requests.
    pub success_rate: f64,
    /// Successful requests per second of measured time.
    pub throughput_rps: f64,
    /// Attempts sent between services / calls between services that sent one − 1 (hedges, retries).
    pub extra_load: f64,
    pub latency_ms: Latency,
    /// Of the refused requests (`rejected`), how long the user waited for the refusal: an
    /// admission control earns its keep by answering them at once. Absent when none was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_latency_ms: Option<Latency>,
    /// adaptive-timeouts.txt §5.2: Σ call latency / Σ latency of the answering attempt, over
    /// successful calls between services.
    pub time_fraction: f64,
    /// Attempts between services that timed out, in % of such attempts: a timed-out attempt that a
    /// retry or hedge made good is counted here but not in `timed_out`.
    pub timeouts_pct: f64,
    /// Mean of (timeout − latency) / latency over successful attempts sent with a timeout, in %.
    pub closeness_pct: f64,
    /// Mean over 1 s intervals of the standard deviation, across the replicas of [`load_service`],
    /// of the attempts each accepted (not those it refused with 429); bloc-load-balancing.txt
    /// Fig. 4b. See [`imbalance`].
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
    /// The simulator only: the worker time each service spent on measured requests; empty
    /// elsewhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub work: Vec<ServiceWork>,
    /// The variant's sidecar when it is a peer's (`haproxy`, `nginx`; docs/lab.md, "Peer
    /// sidecars"); absent for tailguard's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sidecar: Option<String>,
    /// The lab only: CPU seconds (user + system, from `/proc/PID/stat`) that every sidecar of the
    /// run used from the end of the warm-up to the end of the load, per 1,000 measured requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sidecar_cpu_s_per_1k: Option<f64>,
    /// The simulator only: Prequal's probes sent for measured requests, per measured request;
    /// absent when no balancer of the run probes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probes_per_request: Option<f64>,
    /// Endpoints the callers' outlier detectors ejected (for failures or for latency) in measured
    /// time: in the simulator by measured requests' calls (absent when no caller of the run
    /// ejects), in the lab from the egress sidecars' counters (absent for a peer's sidecars).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ejections: Option<u64>,
    /// Per route of the workload's target (when it has `routes`), its measured requests: the
    /// same figures as the run's, for that route's requests alone. Empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteResult>,
}

/// The measured requests of one route of the workload's target.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RouteResult {
    pub route: String,
    pub requests: u64,
    pub succeeded: u64,
    /// succeeded / requests.
    pub success_rate: f64,
    /// Of its successful requests.
    pub latency_ms: Latency,
}

/// Counts and latencies of one route's measured requests, as a run goes; the simulator's and the
/// load generator's [`RouteResult`]s come from it.
#[derive(Clone, Debug)]
pub struct RouteRecorder {
    pub route: String,
    pub requests: u64,
    pub succeeded: u64,
    pub latency: LatencyRecorder,
}

impl RouteRecorder {
    /// A route with nothing recorded.
    pub fn new(route: String) -> RouteRecorder {
        RouteRecorder { route, requests: 0, succeeded: 0, latency: LatencyRecorder::new() }
    }

    /// A measured request ended, after `latency` if it succeeded.
    pub fn record(&mut self, success: Option<Duration>) {
        self.requests += 1;
        if let Some(latency) = success {
            self.succeeded += 1;
            self.latency.record(latency);
        }
    }

    /// What the route's requests came to.
    pub fn result(&self) -> RouteResult {
        RouteResult {
            route: self.route.clone(),
            requests: self.requests,
            succeeded: self.succeeded,
            success_rate: round(ratio(self.succeeded as f64, self.requests as f64)),
            latency_ms: self.latency.summary(),
        }
    }
}

/// The worker time one service spent on the attempts sent to it after the warm-up, over their
/// whole work (also when it ends after the measurement, while in-flight requests drain).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ServiceWork {
    pub service: String,
    /// Seconds its workers were busy: every finished piece of local work, and the part done of
    /// work a cancel cut short.
    pub busy_s: f64,
    /// Seconds of finished local work for attempts after a call's first (hedges and retries):
    /// what hedging and retrying cost the service when cancelled attempts stop.
    pub extra_s: f64,
}

/// Resident memory of one lab process (a replica's `tailguard serve` or its sidecar), read from
/// `/proc/PID/status` every second of measured time; case-for-timeouts.txt shows requests held
/// without a timeout piling up in the caller's memory.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ProcessMemory {
    pub service: String,
    pub replica: u32,
    /// "service" (the replica's own work: `tailguard serve`) or "sidecar" (its proxy: tailguard's,
    /// HAProxy or nginx).
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
    /// Attempts each replica of [`load_service`] accepted, per interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_load: Option<ReplicaLoad>,
    /// For each call edge with a timeout policy: the timeout it set and the latency it observed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeouts: Vec<TimeoutSeries>,
}

/// Attempts accepted per replica and interval: `replicas[r][i]` is replica r in interval i.
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

/// Rounds to 4 decimals, as every number of the results JSON is, so it stays readable.
pub fn round(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// `a / b`, or 0 when `b` is 0 (a run without requests has no rate).
pub fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// The latencies of successful requests, from which [`Latency`] and the `cdf` points are drawn:
/// an HDR histogram of microseconds with 4 significant digits (so a 102 ms latency is reported as
/// 102.0, not 102.015) and their exact sum, for the mean.
#[derive(Clone, Debug)]
pub struct LatencyRecorder {
    histogram: Histogram<u64>,
    /// Σ latency, seconds.
    sum_s: f64,
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        LatencyRecorder {
            histogram: Histogram::new_with_bounds(1, 24 * 3600 * 1_000_000, 4).expect("valid bounds"),
            sum_s: 0.0,
        }
    }
}

impl LatencyRecorder {
    /// No latency yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one successful request's latency (under 1 µs counts as 1 µs, over a day as a day).
    pub fn record(&mut self, latency: Duration) {
        self.sum_s += latency.as_secs_f64();
        self.histogram.saturating_record(Self::micros(latency));
    }

    /// Records `latencies` as [`LatencyRecorder::record`] would one by one, with the same result
    /// to the bit (the sum is taken in their order), but with the histogram's counters touched in
    /// ascending order, [`BATCH`](Self::BATCH) at a time. For a driver that keeps a large state
    /// (a simulator of thousands of replicas), where the histogram has left the cache between two
    /// requests: the counters' misses then overlap, and neighbours share their lines.
    pub fn record_batch(&mut self, latencies: &[Duration]) {
        for chunk in latencies.chunks(Self::BATCH) {
            let mut micros = [0u64; Self::BATCH];
            for (us, &latency) in micros.iter_mut().zip(chunk) {
                self.sum_s += latency.as_secs_f64();
                *us = Self::micros(latency);
            }
            let micros = &mut micros[..chunk.len()];
            micros.sort_unstable();
            micros.iter().for_each(|&us| self.histogram.saturating_record(us));
        }
    }

    /// The latencies [`LatencyRecorder::record_batch`] sorts at a time.
    pub const BATCH: usize = 64;

    fn micros(latency: Duration) -> u64 {
        (latency.as_micros() as u64).max(1)
    }

    /// Latencies recorded.
    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// Whether none was recorded.
    pub fn is_empty(&self) -> bool {
        self.histogram.is_empty()
    }

    /// The latency at quantile `q` (0..=1): the lowest value of its histogram bucket, so exact
    /// values stay exact; zero when none was recorded.
    pub fn quantile(&self, q: f64) -> Duration {
        let h = &self.histogram;
        if h.is_empty() {
            return Duration::ZERO;
        }
        Duration::from_micros(h.lowest_equivalent(h.value_at_quantile(q)))
    }

    /// The largest latency (the lowest value of its bucket).
    pub fn max(&self) -> Duration {
        let h = &self.histogram;
        if h.is_empty() {
            return Duration::ZERO;
        }
        Duration::from_micros(h.lowest_equivalent(h.max()))
    }

    /// The mean latency, exact (not from the histogram).
    pub fn mean(&self) -> Duration {
        Duration::from_secs_f64(ratio(self.sum_s, self.count() as f64))
    }

    /// The results' percentiles, max and mean in ms, rounded; all 0 when none was recorded.
    pub fn summary(&self) -> Latency {
        let h = &self.histogram;
        // One scan of the counts for all the percentiles.
        let mut ms = [0.0; 6];
        if !h.is_empty() {
            let values = h.value_at_quantiles([0.10, 0.50, 0.90, 0.95, 0.99, 0.999]);
            ms.iter_mut().zip(values).for_each(|(ms, v)| *ms = round(h.lowest_equivalent(v) as f64 / 1000.0));
        }
        let [p10, p50, p90, p95, p99, p999] = ms;
        Latency {
            p10,
            p50,
            p90,
            p95,
            p99,
            p999,
            max: if h.is_empty() { 0.0 } else { round(h.lowest_equivalent(h.max()) as f64 / 1000.0) },
            mean: round(ratio(self.sum_s * 1000.0, self.count() as f64)),
        }
    }

    /// The latency distribution as (ms, fraction at or below) points: the buckets where the
    /// cumulative fraction reaches each target of [`cdf_targets`], plus the maximum (fraction 1),
    /// with the exact fraction at or below each; empty when none was recorded. Two scans of the
    /// counts (quantiles, then counts between the points, from the minimum up), each about as fast
    /// as one percentile lookup. Buckets are reported by their lowest value, like the percentiles.
    pub fn cdf(&self) -> Vec<[f64; 2]> {
        let h = &self.histogram;
        if h.is_empty() {
            return Vec::new();
        }
        let mut values: Vec<u64> = h.value_at_quantiles(cdf_targets()).map(|v| h.lowest_equivalent(v)).collect();
        values.push(h.lowest_equivalent(h.max()));
        values.dedup();
        let total = h.len() as f64;
        // Nothing lies below the minimum: the scan starts there.
        let (mut below, mut from) = (0, h.min());
        values
            .into_iter()
            .map(|v| {
                below += h.count_between(from, v);
                from = h.next_non_equivalent(v);
                [round(v as f64 / 1000.0), below as f64 / total]
            })
            .collect()
    }
}

/// Fractions at which [`LatencyRecorder::cdf`] places a point: every percent up to 90 %, then 20
/// per decade of the tail up to 1 − 10⁻⁵, so p99 and p99.9 are as visible as the median.
fn cdf_targets() -> impl Iterator<Item = f64> {
    let body = (0..=90).map(|i| f64::from(i) / 100.0);
    let tail = (1..=80).map(|k| 1.0 - 10f64.powf(-1.0 - f64::from(k) / 20.0));
    body.chain(tail)
}

/// The mean over intervals of the population standard deviation of the per-replica counts:
/// `intervals[i][r]` is what replica r accepted in interval i (bloc-load-balancing.txt Fig. 4b
/// counts requests per backend). 0 without intervals.
pub fn imbalance<C: AsRef<[f64]>>(intervals: impl IntoIterator<Item = C>) -> f64 {
    let (mut total, mut n) = (0.0, 0usize);
    for counts in intervals {
        total += std_dev(counts.as_ref());
        n += 1;
    }
    if n == 0 {
        0.0
    } else {
        total / n as f64
    }
}

/// Population standard deviation (0 for no values).
fn std_dev(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt()
}

impl ReplicaLoad {
    /// [`imbalance`] over these intervals.
    pub fn imbalance(&self) -> f64 {
        let intervals = self.replicas.iter().map(Vec::len).min().unwrap_or(0);
        imbalance((0..intervals).map(|i| self.replicas.iter().map(|r| r[i] as f64).collect::<Vec<f64>>()))
    }
}

/// The service whose replicas `imbalance` and `series.replica_load` describe: of the services
/// another calls (the workload's target when none is), the one whose replicas do the most work per
/// user request, that is the calls it receives per request (the product of the `count`s along
/// every path from the target; retries and hedges, which the variants change, aside) times its
/// mean service time. Ties (such as real programs, which have no service time) go to the most
/// calls, then to the later in the file. A property of the model, not of a run's luck, so every
/// variant of an experiment shows the same tier (unless a variant changes the calls or service
/// times), in the simulator and in the lab alike.
pub fn load_service(run: &Run) -> &str {
    let names: Vec<&String> = run.services.keys().collect();
    let n = names.len();
    let edges: Vec<(usize, usize, f64)> = run
        .services
        .values()
        .enumerate()
        .flat_map(|(caller, s)| {
            let names = &names;
            s.calls.iter().filter(|c| c.count > 0).filter_map(move |c| {
                let callee = names.iter().position(|name| **name == c.service)?;
                Some((caller, callee, f64::from(c.count)))
            })
        })
        .collect();
    let target = names.iter().position(|name| **name == run.workload.target);
    // Calls per user request; the graph has no cycle, so n rounds reach every depth.
    let mut calls = vec![0.0; n];
    for _ in 0..n {
        let mut next = vec![0.0; n];
        if let Some(t) = target {
            next[t] = 1.0;
        }
        for &(caller, callee, count) in &edges {
            next[callee] += calls[caller] * count;
        }
        calls = next;
    }
    let called: Vec<usize> = (0..n).filter(|&s| edges.iter().any(|e| e.1 == s)).collect();
    let candidates = if called.is_empty() { target.into_iter().collect() } else { called };
    let work = |s: usize| calls[s] * run.services[s].mean_work(&run.base_dir).as_secs_f64();
    candidates
        .into_iter()
        .max_by(|&a, &b| work(a).total_cmp(&work(b)).then(calls[a].total_cmp(&calls[b])).then(a.cmp(&b)))
        .map_or(run.workload.target.as_str(), |s| names[s].as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_records_what_single_records_do_to_the_bit() {
        // 200 latencies from 0.3 µs to about 2 s in no order, several batches and a part batch.
        let latencies: Vec<Duration> =
            (0..200u64).map(|i| Duration::from_nanos(300 + (i * 7_919_993 % 200) * 10_123_457)).collect();
        let (mut single, mut batched) = (LatencyRecorder::new(), LatencyRecorder::new());
        latencies.iter().for_each(|&l| single.record(l));
        batched.record_batch(&latencies[..150]);
        batched.record_batch(&latencies[150..]);
        assert_eq!(batched.sum_s.to_bits(), single.sum_s.to_bits());
        assert_eq!(batched.count(), 200);
        assert_eq!(batched.summary(), single.summary());
        assert_eq!(batched.cdf(), single.cdf());
        assert_eq!(batched.histogram, single.histogram);
    }

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
        let results =
            Results { experiment: String::new(), mode: "sim".into(), seed: 0, runs: vec![], calibration: None };
        assert_eq!(keys(serde_json::to_value(&results).unwrap()), names(&schema["required"]));

        // Every field a run may write (the optional ones set) is a property of the schema and is
        // explained in docs/results.md (CONTRIBUTING.md: "A new results field").
        let full = RunResult {
            cdf: vec![[1.0, 1.0]],
            series: Some(Series::default()),
            memory: vec![ProcessMemory::default()],
            work: vec![ServiceWork::default()],
            sidecar: Some("nginx".into()),
            sidecar_cpu_s_per_1k: Some(1.0),
            rejected_latency_ms: Some(Latency::default()),
            ..run
        };
        let written = keys(serde_json::to_value(&full).unwrap());
        assert_eq!(written, keys(schema["$defs"]["run"]["properties"].clone()), "docs/results.schema.json");
        let docs = include_str!("../../../docs/results.md");
        let undocumented: Vec<&String> = written.iter().filter(|k| !docs.contains(&format!("| `{k}` |"))).collect();
        assert!(undocumented.is_empty(), "docs/results.md has no row for {undocumented:?}");
    }
    #[test]
    fn the_summary_reports_bucket_floors_and_the_exact_mean() {
        let mut recorder = LatencyRecorder::new();
        assert_eq!(recorder.summary(), Latency::default());
        assert!(recorder.cdf().is_empty());
        for ms in [10, 20, 30] {
            recorder.record(Duration::from_millis(ms));
        }
        recorder.record(Duration::from_micros(102_015));
        let l = recorder.summary();
        // 4 significant digits: 102.015 ms lies in the 8 µs bucket that starts at 102.012 ms.
        assert_eq!((l.p10, l.p50, l.p99, l.max), (10.0, 20.0, 102.012, 102.012));
        assert_eq!(l.mean, round(162.015 / 4.0));
        assert_eq!(recorder.quantile(0.5), Duration::from_millis(20));
        assert_eq!(recorder.max(), Duration::from_micros(102_012));
    }

    #[test]
    fn the_cdf_shows_the_tail() {
        // 1 µs … 10 ms, one request each of 10,000 latencies (exact in the histogram): the points
        // reach 0.9999 and then the max.
        let mut recorder = LatencyRecorder::new();
        (1..=10_000u64).for_each(|us| recorder.record(Duration::from_micros(us)));
        let points = recorder.cdf();
        assert_eq!(points[0], [0.001, 0.0001]);
        assert_eq!(*points.last().unwrap(), [10.0, 1.0]);
        let at = |f: f64| points.iter().find(|p| p[1] >= f).unwrap()[0];
        assert_eq!(at(0.5), 5.0);
        assert_eq!(at(0.99), 9.9);
        assert_eq!(at(0.999), 9.99);
        assert_eq!(at(0.9999), 9.999);
        assert!((140..=200).contains(&points.len()), "{} points", points.len());
        assert!(points.windows(2).all(|w| w[0][0] < w[1][0] && w[0][1] < w[1][1]));
    }

    #[test]
    fn imbalance_is_the_mean_per_interval_population_deviation() {
        assert_eq!(std_dev(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]), 2.0);
        assert_eq!(std_dev(&[3.0, 3.0, 3.0]), 0.0);
        // Interval 0: [2, 0] → σ 1; interval 1: [0, 1] → σ 0.5.
        assert_eq!(imbalance([[2.0, 0.0], [0.0, 1.0]]), 0.75);
        assert_eq!(imbalance(Vec::<Vec<f64>>::new()), 0.0);
        // The same counts per replica: replica 0 had [2, 0], replica 1 [0, 1].
        let load = ReplicaLoad { service: "s".into(), replicas: vec![vec![2, 0], vec![0, 1]] };
        assert_eq!(load.imbalance(), 0.75);
        assert_eq!(ReplicaLoad::default().imbalance(), 0.0);
    }

    fn run(yaml: &str) -> Run {
        crate::Experiment::parse(yaml, std::path::Path::new("t.yaml")).unwrap().resolve("default", "v", false).unwrap()
    }

    #[test]
    fn the_load_service_does_the_most_work_per_request() {
        // A chain: the frontend does no work of its own, the backend 250 ms a call.
        let chain = "name: t\nservices:\n  gateway: {calls: [{service: frontend}]}\n  frontend: {replicas: 40, calls: [{service: backend}]}\n  backend: {replicas: 10, workers: 1, service_time: {dist: constant, value: 250ms}}\nworkload: {target: gateway, closed: {clients: 1}, duration: 1s}\nvariants: [{name: v}]\n";
        assert_eq!(load_service(&run(chain)), "backend");
        // Calls multiply along paths: c gets 2 × 3 + 1 = 7 calls of 1 ms, b 2 calls of 2 ms.
        let fanout = "name: t\nservices:\n  a: {calls: [{service: b, count: 2}, {service: c}]}\n  b: {service_time: {dist: constant, value: 2ms}, calls: [{service: c, count: 3}]}\n  c: {service_time: {dist: constant, value: 1ms}}\nworkload: {target: a, open: {rate: 1}, duration: 1s}\nvariants: [{name: v}]\n";
        assert_eq!(load_service(&run(fanout)), "c");
        // Without service times: the most calls, then the later in the file.
        let idle = "name: t\nservices:\n  a: {calls: [{service: b, count: 2}, {service: c}]}\n  b: {}\n  c: {}\nworkload: {target: a, open: {rate: 1}, duration: 1s}\nvariants: [{name: v}]\n";
        assert_eq!(load_service(&run(idle)), "b");
        let tie = idle.replace("count: 2", "count: 1");
        assert_eq!(load_service(&run(&tie)), "c");
        // Nothing called: the target itself.
        let alone = "name: t\nservices:\n  a: {replicas: 3}\nworkload: {target: a, open: {rate: 1}, duration: 1s}\nvariants: [{name: v}]\n";
        assert_eq!(load_service(&run(alone)), "a");
    }
}
