//! Collects what a run measures and turns it into a [`RunResult`].

use crate::results::{Latency, ReplicaLoad, RunResult, Series, TimeoutSeries};
use hdrhistogram::Histogram;
use std::time::Duration;
use tailguard_policy::Outcome;

/// Counters and histograms of one run, fed by the world as requests and attempts end.
pub(crate) struct Metrics {
    latency_us: Histogram<u64>,
    latency_sum: f64,
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
    /// Attempts arrived per (1 s interval, replica) of each service.
    arrived: Vec<Vec<Vec<u32>>>,
    replicas: Vec<usize>,
    /// Service names, for the replica-load series.
    names: Vec<String>,
    /// Per call edge with a timeout policy, in the order of the world's series indices.
    edges: Vec<EdgeSeries>,
    warmup: Duration,
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
            // 4 significant digits: a 102 ms latency is reported as 102.0, not 102.015.
            latency_us: Histogram::new_with_bounds(1, 24 * 3600 * 1_000_000, 4).expect("valid bounds"),
            latency_sum: 0.0,
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
            arrived: vec![Vec::new(); replicas.len()],
            replicas,
            names,
            edges: edges.into_iter().map(|name| EdgeSeries { name, sent: Vec::new(), answered: Vec::new() }).collect(),
            warmup,
        }
    }

    /// The interval `now` falls in, None during the warm-up.
    fn interval(&self, now: Duration) -> Option<usize> {
        let since = now.checked_sub(self.warmup)?;
        Some((since.as_secs() / INTERVAL_S) as usize)
    }

    /// A measured user request ended.
    pub(crate) fn request(&mut self, outcome: Outcome, latency: Duration) {
        self.requests += 1;
        match outcome {
            Outcome::Success => {
                self.succeeded += 1;
                self.latency_sum += latency.as_secs_f64();
                let us = (latency.as_micros() as u64).max(1);
                self.latency_us.saturating_record(us);
            }
            Outcome::Rejected => self.rejected += 1,
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

    /// An attempt reached a replica of `service` at `now` (admitted or not).
    pub(crate) fn arrived(&mut self, service: usize, replica: usize, now: Duration) {
        let Some(second) = self.interval(now) else { return };
        let per_second = &mut self.arrived[service];
        if per_second.len() <= second {
            per_second.resize(second + 1, vec![0; self.replicas[service]]);
        }
        per_second[second][replica] += 1;
    }

    /// The result, for a run whose measurement lasted `measured`; the imbalance is reported for the
    /// one of the `called` services that received most attempts (ties: the later one).
    pub(crate) fn finish(&self, scenario: &str, variant: &str, measured: Duration, called: &[usize]) -> RunResult {
        let arrivals = |s: usize| self.arrived[s].iter().flatten().map(|&n| u64::from(n)).sum::<u64>();
        let busiest = called.iter().copied().max_by_key(|&s| (arrivals(s), s));
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let h = &self.latency_us;
        // The lowest value of the bucket the quantile falls in, so exact values stay exact; one
        // scan of the counts for all of them.
        let mut ms = [0.0; 6];
        if !h.is_empty() {
            let values = h.value_at_quantiles([0.10, 0.50, 0.90, 0.95, 0.99, 0.999]);
            ms.iter_mut().zip(values).for_each(|(ms, v)| *ms = round(h.lowest_equivalent(v) as f64 / 1000.0));
        }
        let [p10, p50, p90, p95, p99, p999] = ms;
        let latency = Latency {
            p10,
            p50,
            p90,
            p95,
            p99,
            p999,
            max: if h.is_empty() { 0.0 } else { round(h.lowest_equivalent(h.max()) as f64 / 1000.0) },
            mean: round(ratio(self.latency_sum * 1000.0, self.succeeded as f64)),
        };
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
            latency_ms: latency,
            time_fraction: round(ratio(self.observed_sum, self.true_sum)),
            timeouts_pct: round(100.0 * ratio(self.timeouts as f64, self.attempts as f64)),
            closeness_pct: round(100.0 * ratio(self.closeness_sum, self.closeness_n as f64)),
            imbalance: round(busiest.map_or(0.0, |s| self.imbalance(s))),
            duration_s: round(measured.as_secs_f64()),
            attempts: self.attempts,
            cdf: cdf(h),
            series: self.series(measured, busiest),
            memory: Vec::new(),
        }
    }

    /// The time series over the whole intervals of the `measured` time (a last partial interval
    /// would read as a drop in load, and later ones, while in-flight requests drain, are not
    /// measured time); None when it is shorter than one interval.
    fn series(&self, measured: Duration, busiest: Option<usize>) -> Option<Series> {
        let n = (measured.as_secs() / INTERVAL_S) as usize;
        if n == 0 {
            return None;
        }
        let replica_load = busiest.map(|s| {
            let intervals = &self.arrived[s];
            let at = |i: usize, r: usize| intervals.get(i).map_or(0, |counts| u64::from(counts[r]));
            ReplicaLoad {
                service: self.names[s].clone(),
                replicas: (0..self.replicas[s]).map(|r| (0..n).map(|i| at(i, r)).collect()).collect(),
            }
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

    fn imbalance(&self, service: usize) -> f64 {
        let intervals = &self.arrived[service];
        if intervals.is_empty() {
            return 0.0;
        }
        let total: f64 = intervals.iter().map(|counts| std_dev(counts)).sum();
        total / intervals.len() as f64
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

/// Fractions at which [`cdf`] places a point: every percent up to 90 %, then 20 per decade of the
/// tail up to 1 − 10⁻⁵, so p99 and p99.9 are as visible as the median.
fn cdf_targets() -> impl Iterator<Item = f64> {
    let body = (0..=90).map(|i| f64::from(i) / 100.0);
    let tail = (1..=80).map(|k| 1.0 - 10f64.powf(-1.0 - f64::from(k) / 20.0));
    body.chain(tail)
}

/// The latency distribution as (ms, fraction at or below) points: the buckets where the
/// cumulative fraction reaches each target of [`cdf_targets`], plus the maximum (fraction 1), with
/// the exact fraction at or below each. Two scans of the counts (quantiles, then counts between
/// the points, from the minimum up), each about as fast as one percentile lookup. Buckets are
/// reported by their lowest value, like the percentiles.
fn cdf(h: &Histogram<u64>) -> Vec<[f64; 2]> {
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

/// Population standard deviation.
fn std_dev(counts: &[u32]) -> f64 {
    let n = counts.len() as f64;
    let mean = counts.iter().map(|&c| f64::from(c)).sum::<f64>() / n;
    (counts.iter().map(|&c| (f64::from(c) - mean).powi(2)).sum::<f64>() / n).sqrt()
}

/// Rounds to 4 decimals, so results JSON stays readable.
fn round(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn std_dev_is_the_population_one() {
        assert_eq!(std_dev(&[2, 4, 4, 4, 5, 5, 7, 9]), 2.0);
        assert_eq!(std_dev(&[3, 3, 3]), 0.0);
    }

    #[test]
    fn imbalance_averages_per_second_deviation() {
        let mut m = Metrics::new(vec!["s".into()], vec![2], vec![], Duration::from_secs(1));
        let at = |ms| Duration::from_millis(ms);
        m.arrived(0, 0, at(500)); // in the warm-up: not counted
        m.arrived(0, 0, at(1_100));
        m.arrived(0, 0, at(1_200)); // second 0: [2, 0] → σ = 1
        m.arrived(0, 1, at(2_500)); // second 1: [0, 1] → σ = 0.5
        let r = m.finish("s", "v", Duration::from_secs(2), &[0]);
        assert_eq!(r.imbalance, 0.75);
    }

    #[test]
    fn the_cdf_shows_the_tail() {
        // 1 µs … 10 ms, one request each of 10,000 latencies (exact in the histogram): the points
        // reach 0.9999 and then the max.
        let mut h = Histogram::<u64>::new_with_bounds(1, 24 * 3600 * 1_000_000, 4).unwrap();
        (1..=10_000u64).for_each(|us| h.record(us).unwrap());
        let points = cdf(&h);
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
    fn empty_intervals_repeat_the_previous_mean() {
        let sums = [(0.0, 0), (0.030, 2), (0.0, 0), (0.010, 1)];
        assert_eq!(means_ms(&sums, 6), vec![0.0, 15.0, 15.0, 10.0, 10.0, 10.0]);
    }
}
