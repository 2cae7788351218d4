//! The outcome of a run: counts, an HDR histogram of successful latencies, a human summary like
//! vegeta's, and the results JSON of docs/results.md (mode "load").

use crate::{ErrorKind, Outcome, Sample};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;
use tailguard_model::results::{ratio, round, Latency, LatencyRecorder, Results, RouteRecorder, RunResult};

/// Everything a run measured. Only requests whose intended start followed the warm-up count.
#[derive(Clone, Debug)]
pub struct LoadReport {
    /// The load's shape, as [`Shape::describe`](crate::Shape::describe) says it.
    pub shape: String,
    /// The seed of the schedule.
    pub seed: u64,
    /// Measured requests started.
    pub requests: u64,
    /// Those that got a 2xx or 3xx response.
    pub succeeded: u64,
    /// Responses by status code.
    pub statuses: BTreeMap<u16, u64>,
    /// Unsuccessful requests by kind (a 5xx or 429 counts here and under its status).
    pub errors: BTreeMap<ErrorKind, u64>,
    /// Latencies of successful requests (an HDR histogram, as the simulator keeps them).
    pub latency: LatencyRecorder,
    /// Latencies of refused requests (429), from the first refusal.
    pub refused: Option<LatencyRecorder>,
    /// From the end of the warm-up until the last measured request was due (open loop: the
    /// schedule's span; closed loop: until the last one was sent).
    pub sending: Duration,
    /// From the end of the warm-up until the last measured request ended (at least `sending`).
    pub total: Duration,
    /// Every measured request, in completion order, when the configuration asked to keep them.
    pub samples: Vec<Sample>,
    /// Per route of the run (when it has routes), its measured requests.
    pub routes: Vec<RouteRecorder>,
}

impl LoadReport {
    pub(crate) fn new(shape: String, seed: u64) -> Self {
        Self {
            shape,
            seed,
            requests: 0,
            succeeded: 0,
            statuses: BTreeMap::new(),
            errors: BTreeMap::new(),
            latency: LatencyRecorder::new(),
            refused: None,
            sending: Duration::ZERO,
            total: Duration::ZERO,
            samples: Vec::new(),
            routes: Vec::new(),
        }
    }

    /// Also counts the requests of each of `routes`.
    pub(crate) fn with_routes(mut self, routes: Vec<String>) -> Self {
        self.routes = routes.into_iter().map(RouteRecorder::new).collect();
        self
    }

    /// Counts one measured request that ended `end` after the warm-up.
    pub(crate) fn record(&mut self, sample: Sample, end: Duration, keep: bool) {
        self.requests += 1;
        self.total = self.total.max(end);
        if let Outcome::Status(status) = sample.outcome {
            *self.statuses.entry(status.as_u16()).or_default() += 1;
        }
        if let Some(kind) = sample.outcome.error() {
            *self.errors.entry(kind).or_default() += 1;
            if kind == ErrorKind::TooManyRequests {
                self.refused.get_or_insert_with(LatencyRecorder::new).record(sample.latency);
            }
        }
        if sample.outcome.is_success() {
            self.succeeded += 1;
            self.latency.record(sample.latency);
        }
        if let Some(route) = sample.route.and_then(|r| self.routes.get_mut(usize::from(r))) {
            route.record(sample.outcome.is_success().then_some(sample.latency));
        }
        if keep {
            self.samples.push(sample);
        }
    }

    /// Errors of one kind.
    pub fn errors_of(&self, kind: ErrorKind) -> u64 {
        self.errors.get(&kind).copied().unwrap_or(0)
    }

    /// `succeeded / requests`.
    pub fn success_ratio(&self) -> f64 {
        ratio(self.succeeded as f64, self.requests as f64)
    }

    /// Measured requests per second of sending.
    pub fn rate(&self) -> f64 {
        ratio(self.requests as f64, self.sending.as_secs_f64())
    }

    /// Successful requests per second of the whole measurement.
    pub fn throughput(&self) -> f64 {
        ratio(self.succeeded as f64, self.total.as_secs_f64())
    }

    /// The percentiles the results JSON holds, in ms.
    pub fn latency_ms(&self) -> Latency {
        self.latency.summary()
    }

    /// This run as one entry of the results JSON. A 429 counts as `rejected`, a timeout as
    /// `timed_out`, every other error as `failed`. The fields about calls between services
    /// (`extra_load`, `time_fraction`, `timeouts_pct`, `closeness_pct`, `imbalance`,
    /// `attempts`) have no meaning for a load generator, which sees only its own requests: 0.
    pub fn to_run(&self, scenario: &str, variant: &str) -> RunResult {
        let rejected = self.errors_of(ErrorKind::TooManyRequests);
        let timed_out = self.errors_of(ErrorKind::Timeout);
        RunResult {
            scenario: scenario.to_string(),
            variant: variant.to_string(),
            requests: self.requests,
            succeeded: self.succeeded,
            failed: self.requests - self.succeeded - rejected - timed_out,
            rejected,
            timed_out,
            success_rate: round(self.success_ratio()),
            throughput_rps: round(self.throughput()),
            extra_load: 0.0,
            latency_ms: self.latency_ms(),
            rejected_latency_ms: self.refused.as_ref().map(LatencyRecorder::summary),
            time_fraction: 0.0,
            timeouts_pct: 0.0,
            closeness_pct: 0.0,
            imbalance: 0.0,
            duration_s: round(self.total.as_secs_f64()),
            attempts: 0,
            routes: self.routes.iter().map(RouteRecorder::result).collect(),
            ..RunResult::default()
        }
    }

    /// The results JSON document (mode "load") with this run as its only entry; its scenario is
    /// the load's shape.
    pub fn to_results(&self, experiment: &str, variant: &str) -> Results {
        Results {
            experiment: experiment.to_string(),
            mode: "load".to_string(),
            seed: self.seed,
            runs: vec![self.to_run(&self.shape, variant)],
            calibration: None,
        }
    }

    /// A human summary in the style of vegeta's text report.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        let row = |out: &mut String, name: &str, fields: &str, values: String| {
            let _ = writeln!(out, "{name:<13} {fields:<36} {values}");
        };
        row(&mut out, "Load", "[shape, seed]", format!("{}, {}", self.shape, self.seed));
        let rates = format!("{}, {:.2}, {:.2}", self.requests, self.rate(), self.throughput());
        row(&mut out, "Requests", "[total, rate, throughput]", rates);
        let wait = self.total.saturating_sub(self.sending);
        let spans = format!("{}, {}, {}", human(self.total), human(self.sending), human(wait));
        row(&mut out, "Duration", "[total, sending, wait]", spans);
        row(&mut out, "Latencies", "[mean, 50, 90, 95, 99, 99.9, max]", self.latency_line());
        row(&mut out, "Success", "[ratio]", format!("{:.2}%", self.success_ratio() * 100.0));
        row(&mut out, "Status Codes", "[code:count]", counts(&self.statuses));
        row(&mut out, "Errors", "[kind:count]", counts(&self.errors));
        out
    }

    fn latency_line(&self) -> String {
        let l = &self.latency;
        if l.is_empty() {
            return "- (no successful request)".to_string();
        }
        let mut parts = vec![human(l.mean())];
        parts.extend([0.5, 0.9, 0.95, 0.99, 0.999].map(|q| human(l.quantile(q))));
        parts.push(human(l.max()));
        parts.join(", ")
    }
}

/// `key:count` pairs, or `-` when there are none.
fn counts<K: std::fmt::Display>(map: &BTreeMap<K, u64>) -> String {
    if map.is_empty() {
        return "-".to_string();
    }
    map.iter().map(|(k, n)| format!("{k}:{n}")).collect::<Vec<_>>().join(" ")
}

/// A duration in the most readable unit: `850µs`, `12.345ms`, `1.002s`.
fn human(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.0}µs")
    } else if us < 1e6 {
        format!("{:.3}ms", us / 1e3)
    } else {
        format!("{:.3}s", us / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::StatusCode;

    fn sample(ms: u64, outcome: Outcome) -> Sample {
        Sample { intended: Duration::ZERO, latency: Duration::from_millis(ms), outcome, route: None }
    }

    #[test]
    fn counts_split_into_the_results_fields() {
        let mut report = LoadReport::new("constant 10/s".into(), 1);
        let ok = Outcome::Status(StatusCode::OK);
        for ms in [10, 20, 30] {
            report.record(sample(ms, ok), Duration::from_millis(500), false);
        }
        report.record(sample(4, Outcome::Status(StatusCode::TOO_MANY_REQUESTS)), Duration::ZERO, false);
        report.record(sample(1, Outcome::Status(StatusCode::BAD_GATEWAY)), Duration::ZERO, false);
        report.record(sample(100, Outcome::Failed(ErrorKind::Timeout)), Duration::from_secs(1), true);
        report.sending = Duration::from_millis(600);
        let run = report.to_results("x", "direct").runs.remove(0);
        assert_eq!((run.requests, run.succeeded, run.failed, run.rejected, run.timed_out), (6, 3, 1, 1, 1));
        assert_eq!(run.latency_ms.p50, 20.0);
        assert_eq!(run.latency_ms.mean, 20.0);
        // The refusal's latency, apart from the successes'.
        assert_eq!(run.rejected_latency_ms.map(|l| (l.p50, l.max)), Some((4.0, 4.0)));
        assert_eq!(run.duration_s, 1.0);
        assert_eq!(run.throughput_rps, 3.0);
        assert_eq!(report.samples.len(), 1);
        let summary = report.summary();
        assert!(summary.contains("200:3 429:1 502:1"), "{summary}");
        assert!(summary.contains("timeout:1 5xx:1 429:1"), "{summary}");
        assert!(summary.contains("50.00%"), "{summary}");
    }

    #[test]
    fn durations_read_in_their_unit() {
        assert_eq!(human(Duration::from_micros(850)), "850µs");
        assert_eq!(human(Duration::from_micros(12_345)), "12.345ms");
        assert_eq!(human(Duration::from_millis(1002)), "1.002s");
    }
}
