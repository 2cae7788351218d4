//! Collects what a run measures and turns it into a [`RunResult`].

use std::time::Duration;
use tailguard_model::results::{
    imbalance, ratio, round, LatencyRecorder, ReplicaLoad, RouteRecorder, RunResult, Series, ServiceWork, TimeoutSeries,
};
use tailguard_policy::Outcome;

/// Counters and histograms of one run, fed by the world as requests and attempts end.
pub(crate) struct Metrics {
    latency: LatencyRecorder,
    /// Successful requests' latencies not yet in `latency`, recorded a batch at a time
    /// ([`LatencyRecorder::record_batch`]: the same result, fewer cache misses).
    unrecorded: Vec<Duration>,
    /// The refused requests' latencies, from the first refusal.
    refused: Option<LatencyRecorder>,
    requests: u64,
    succeeded: u64,
    failed: u64,
    rejected: u64,
    timed_out: u64,
    calls: u64,
    attempts: u64,
    timeouts: u64,
    observed_sum: f64,
    true_sum: f64,
    closeness_sum: f64,
    closeness_n: u64,
    /// Attempts accepted per (1 s interval, replica) of each service.
    accepted: Vec<Vec<Vec<u32>>>,
    replicas: Vec<usize>,
    /// Service names, for the replica-load series and the work.
    names: Vec<String>,
    /// Per service, (busy, extra) worker time on measured attempts, as in [`ServiceWork`].
    work: Vec<(Duration, Duration)>,
    /// Per call edge with a timeout policy, in the order of the world's series indices.
    edges: Vec<EdgeSeries>,
    /// Prequal's probes sent for measured requests, when a balancer of the run probes.
    probes: Option<u64>,
    /// Outlier ejections while handling measured requests, when a caller of the run ejects.
    ejections: Option<u64>,
    warmup: Duration,
    /// Per route of the workload's target, its requests.
    routes: Vec<RouteRecorder>,
}

/// One timed edge's sums per 1 s interval of measured time.
struct EdgeSeries {
    name: String,
    /// (Σ timeout s, attempts) of the attempts sent in each interval.
    sent: Vec<(f64, u32)>,
    /// (Σ latency s, answers) of the successful answers received in each interval.
    answered: Vec<(f64, u32)>,
}

/// The length of the series' intervals, and of the imbalance's, in whole seconds (whole, so an
/// arrival's interval is an integer division, not a 128-bit one).
const INTERVAL_S: u64 = 1;

impl Metrics {
    /// Metrics of a world whose services (`names`) have `replicas` each and whose timed call edges
    /// are `edges` ("caller->callee").
    pub(crate) fn new(names: Vec<String>, replicas: Vec<usize>, edges: Vec<String>, warmup: Duration) -> Self {
        Metrics {
            latency: LatencyRecorder::new(),
            unrecorded: Vec::with_capacity(LatencyRecorder::BATCH),
            refused: None,
            requests: 0,
            succeeded: 0,
            failed: 0,
            rejected: 0,
            timed_out: 0,
            calls: 0,
            attempts: 0,
            timeouts: 0,
            observed_sum: 0.0,
            true_sum: 0.0,
            closeness_sum: 0.0,
            closeness_n: 0,
            accepted: vec![Vec::new(); replicas.len()],
            work: vec![(Duration::ZERO, Duration::ZERO); replicas.len()],
            replicas,
            names,
            edges: edges.into_iter().map(|name| EdgeSeries { name, sent: Vec::new(), answered: Vec::new() }).collect(),
            probes: None,
            ejections: None,
            warmup,
            routes: Vec::new(),
        }
    }

    /// Also counts the requests of each of the workload target's `routes`.
    pub(crate) fn with_routes(mut self, routes: Vec<String>) -> Self {
        self.routes = routes.into_iter().map(RouteRecorder::new).collect();
        self
    }

    /// The interval `now` falls in, None during the warm-up.
    fn interval(&self, now: Duration) -> Option<usize> {
        let since = now.checked_sub(self.warmup)?;
        Some((since.as_secs() / INTERVAL_S) as usize)
    }

    /// A measured user request (of the target's route `route`, if any) ended.
    pub(crate) fn request(&mut self, outcome: Outcome, latency: Duration, route: Option<usize>) {
        if let Some(r) = route.and_then(|r| self.routes.get_mut(r)) {
            r.record((outcome == Outcome::Success).then_some(latency));
        }
        self.requests += 1;
        match outcome {
            Outcome::Success => {
                self.succeeded += 1;
                self.unrecorded.push(latency);
                if self.unrecorded.len() == LatencyRecorder::BATCH {
                    self.latency.record_batch(&self.unrecorded);
                    self.unrecorded.clear();
                }
            }
            Outcome::Rejected | Outcome::Overloaded => {
                self.rejected += 1;
                self.refused.get_or_insert_with(LatencyRecorder::new).record(latency);
            }
            Outcome::TimedOut | Outcome::Cancelled => self.timed_out += 1,
            Outcome::Error | Outcome::Unavailable => self.failed += 1,
        }
    }

    /// A measured call between services ended; `answer` is the latency of the answering attempt
    /// when it succeeded.
    pub(crate) fn call(&mut self, attempts: u32, latency: Duration, answer: Option<Duration>) {
        if attempts == 0 {
            return; // dropped before any attempt: no load, nothing to time
        }
        self.calls += 1;
        self.attempts += u64::from(attempts);
        if let Some(answer) = answer {
            self.observed_sum += latency.as_secs_f64();
            self.true_sum += answer.as_secs_f64();
        }
    }

    /// A balancer of the run probes: the results count its probes.
    pub(crate) fn count_probes(&mut self) {
        self.probes = Some(0);
    }

    /// A measured request's call sent a probe.
    pub(crate) fn probe(&mut self) {
        if let Some(probes) = &mut self.probes {
            *probes += 1;
        }
    }

    /// A caller of the run ejects outliers: the results count its ejections.
    pub(crate) fn count_ejections(&mut self) {
        self.ejections = Some(0);
    }

    /// A measured request's call ejected an endpoint.
    pub(crate) fn ejection(&mut self) {
        if let Some(ejections) = &mut self.ejections {
            *ejections += 1;
        }
    }

    /// An attempt between services timed out.
    pub(crate) fn attempt_timed_out(&mut self) {
        self.timeouts += 1;
    }

    /// An attempt between services sent with `timeout` succeeded after `rtt`.
    pub(crate) fn attempt_succeeded(&mut self, rtt: Duration, timeout: Duration) {
        let rtt = rtt.as_secs_f64().max(1e-9);
        self.closeness_sum += (timeout.as_secs_f64() - rtt) / rtt;
        self.closeness_n += 1;
    }

    /// An attempt over timed edge `edge` left at `now` with the timeout its policy chose.
    pub(crate) fn timeout_set(&mut self, edge: u16, now: Duration, timeout: Duration) {
        let Some(i) = self.interval(now) else { return };
        add(&mut self.edges[edge as usize].sent, i, timeout);
    }

    /// A successful answer over timed edge `edge` arrived at `now`, `rtt` after its attempt left.
    pub(crate) fn attempt_answered(&mut self, edge: u16, now: Duration, rtt: Duration) {
        let Some(i) = self.interval(now) else { return };
        add(&mut self.edges[edge as usize].answered, i, rtt);
    }

    /// A worker of `service` spent `time` on an attempt (`measured`: sent after the warm-up);
    /// `finished_extra` when the work finished and the attempt was not its call's first.
    pub(crate) fn work(&mut self, service: usize, measured: bool, time: Duration, finished_extra: bool) {
        if measured {
            let work = &mut self.work[service];
            work.0 += time;
            if finished_extra {
                work.1 += time;
            }
        }
    }

    /// A replica of `service` accepted an attempt at `now`: it reached the replica and was not
    /// refused with 429 by its admission control.
    pub(crate) fn accepted(&mut self, service: usize, replica: usize, now: Duration) {
        let Some(second) = self.interval(now) else { return };
        let per_second = &mut self.accepted[service];
        if per_second.len() <= second {
            per_second.resize(second + 1, vec![0; self.replicas[service]]);
        }
        per_second[second][replica] += 1;
    }

    /// The result, for a run whose measurement lasted `measured`; the imbalance and the replica
    /// load are those of service `load` ([`tailguard_model::results::load_service`]).
    pub(crate) fn finish(&mut self, scenario: &str, variant: &str, measured: Duration, load: usize) -> RunResult {
        self.latency.record_batch(&self.unrecorded);
        self.unrecorded.clear();
        RunResult {
            scenario: scenario.to_string(),
            variant: variant.to_string(),
            requests: self.requests,
            succeeded: self.succeeded,
            failed: self.failed,
            rejected: self.rejected,
            timed_out: self.timed_out,
            success_rate: round(ratio(self.succeeded as f64, self.requests as f64)),
            throughput_rps: round(ratio(self.succeeded as f64, measured.as_secs_f64())),
            extra_load: round(if self.calls > 0 { self.attempts as f64 / self.calls as f64 - 1.0 } else { 0.0 }),
            latency_ms: self.latency.summary(),
            rejected_latency_ms: self.refused.as_ref().map(LatencyRecorder::summary),
            time_fraction: round(ratio(self.observed_sum, self.true_sum)),
            timeouts_pct: round(100.0 * ratio(self.timeouts as f64, self.attempts as f64)),
            closeness_pct: round(100.0 * ratio(self.closeness_sum, self.closeness_n as f64)),
            imbalance: round(self.imbalance(load)),
            duration_s: round(measured.as_secs_f64()),
            attempts: self.attempts,
            cdf: self.latency.cdf(),
            series: self.series(measured, load),
            memory: Vec::new(),
            work: self
                .names
                .iter()
                .zip(&self.work)
                .map(|(service, (busy, extra))| ServiceWork {
                    service: service.clone(),
                    busy_s: round(busy.as_secs_f64()),
                    extra_s: round(extra.as_secs_f64()),
                })
                .collect(),
            sidecar: None,
            sidecar_cpu_s_per_1k: None,
            routes: self.routes.iter().map(RouteRecorder::result).collect(),
            probes_per_request: self.probes.map(|p| round(ratio(p as f64, self.requests as f64))),
            ejections: self.ejections,
        }
    }

    /// The time series over the whole intervals of the `measured` time (a last partial interval
    /// would read as a drop in load, and later ones, while in-flight requests drain, are not
    /// measured time); None when it is shorter than one interval.
    fn series(&self, measured: Duration, load: usize) -> Option<Series> {
        let n = (measured.as_secs() / INTERVAL_S) as usize;
        if n == 0 {
            return None;
        }
        let intervals = &self.accepted[load];
        let at = |i: usize, r: usize| intervals.get(i).map_or(0, |counts| u64::from(counts[r]));
        let replica_load = Some(ReplicaLoad {
            service: self.names[load].clone(),
            replicas: (0..self.replicas[load]).map(|r| (0..n).map(|i| at(i, r)).collect()).collect(),
        });
        let timeouts = self
            .edges
            .iter()
            .map(|e| TimeoutSeries {
                edge: e.name.clone(),
                timeout_ms: means_ms(&e.sent, n),
                latency_ms: means_ms(&e.answered, n),
            })
            .collect();
        Some(Series { interval_s: INTERVAL_S as f64, replica_load, timeouts })
    }

    /// The imbalance of `service` over every interval since the warm-up.
    fn imbalance(&self, service: usize) -> f64 {
        imbalance(self.accepted[service].iter().map(|counts| counts.iter().map(|&c| f64::from(c)).collect::<Vec<_>>()))
    }
}

/// Adds `value` to interval `i`'s (sum s, count).
fn add(sums: &mut Vec<(f64, u32)>, i: usize, value: Duration) {
    if sums.len() <= i {
        sums.resize(i + 1, (0.0, 0));
    }
    sums[i].0 += value.as_secs_f64();
    sums[i].1 += 1;
}

/// The mean of each of the first `n` intervals in ms; an empty interval repeats the previous mean
/// (0 before any), so a plot has no gaps and the JSON no NaN.
fn means_ms(sums: &[(f64, u32)], n: usize) -> Vec<f64> {
    let mut last = 0.0;
    (0..n)
        .map(|i| {
            if let Some(&(sum, count)) = sums.get(i).filter(|s| s.1 > 0) {
                last = round(sum * 1000.0 / f64::from(count));
            }
            last
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imbalance_averages_per_second_deviation() {
        let mut m = Metrics::new(vec!["s".into()], vec![2], vec![], Duration::from_secs(1));
        let at = |ms| Duration::from_millis(ms);
        m.accepted(0, 0, at(500)); // in the warm-up: not counted
        m.accepted(0, 0, at(1_100));
        m.accepted(0, 0, at(1_200)); // second 0: [2, 0] → σ = 1
        m.accepted(0, 1, at(2_500)); // second 1: [0, 1] → σ = 0.5
        let r = m.finish("s", "v", Duration::from_secs(2), 0);
        assert_eq!(r.imbalance, 0.75);
    }

    #[test]
    fn empty_intervals_repeat_the_previous_mean() {
        let sums = [(0.0, 0), (0.030, 2), (0.0, 0), (0.010, 1)];
        assert_eq!(means_ms(&sums, 6), vec![0.0, 15.0, 15.0, 10.0, 10.0, 10.0]);
    }
}
