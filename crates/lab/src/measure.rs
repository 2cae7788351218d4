//! What a run measured, as the simulator's [`RunResult`]: the user-side numbers come from the
//! load generator's report (counts, HDR percentiles, CDF), the between-services numbers from the
//! sidecars' counters, scraped when the warm-up ends, every second after, and when the load ends.

use crate::plan::Plan;
use crate::scrape::{self, Counts};
use crate::Cancel;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tailguard_load::LoadReport;
use tailguard_model::results::{load_service, round, ProcessMemory, ReplicaLoad, RunResult, Series, TimeoutSeries};
use tailguard_model::schema::TimeoutConfig;
use tailguard_model::Run;

/// The interval of the time series and of the imbalance, as the simulator's.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// One sidecar whose counters are read.
#[derive(Clone, Debug)]
pub struct Sidecar {
    pub service: String,
    pub replica: u32,
    pub admin: SocketAddr,
}

/// Every sidecar's counters at one moment.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// In the order of the sidecars.
    pub counts: Vec<Counts>,
}

/// The sidecars of the services of `plan` (not the load generator's).
pub fn sidecars(plan: &Plan) -> Vec<Sidecar> {
    plan.replicas
        .iter()
        .filter(|r| r.sidecar)
        .map(|r| Sidecar { service: r.service.clone(), replica: r.index, admin: r.admin() })
        .collect()
}

/// Scrapes every sidecar; one that cannot be read keeps its previous counts.
fn snapshot(sidecars: &[Sidecar], previous: Option<&Snapshot>) -> Snapshot {
    let counts = sidecars
        .iter()
        .enumerate()
        .map(|(i, s)| {
            scrape::scrape(s.admin).unwrap_or_else(|_| previous.map(|p| p.counts[i].clone()).unwrap_or_default())
        })
        .collect();
    Snapshot { counts }
}

/// Samples the sidecars from `start + warmup` every [`INTERVAL`] until `done` is set, then once
/// more. Returns the periodic snapshots (the first is the baseline) and the final one; `tick` is
/// told the time since `start` at each sample.
pub fn sample(
    sidecars: &[Sidecar],
    start: Instant,
    warmup: Duration,
    done: &AtomicBool,
    cancel: &Cancel,
    tick: &dyn Fn(Duration),
) -> (Vec<Snapshot>, Option<Snapshot>) {
    let mut periodic: Vec<Snapshot> = Vec::new();
    let origin = start + warmup;
    // Bounded: one sample a second, and the load generator's own limits end the run.
    for k in 0..u32::MAX {
        let due = origin + INTERVAL * k;
        while Instant::now() < due {
            if done.load(Ordering::Acquire) || cancel.is_cancelled() {
                // Once more with the load over and every process still up: a short run may have
                // ended before the first 100 ms wait.
                tick(start.elapsed());
                let last = snapshot(sidecars, periodic.last());
                return (periodic, Some(last).filter(|_| k > 0));
            }
            tick(start.elapsed());
            std::thread::sleep(due.saturating_duration_since(Instant::now()).min(Duration::from_millis(100)));
        }
        let snap = snapshot(sidecars, periodic.last());
        periodic.push(snap);
    }
    (periodic, None)
}

/// The run's result: the load report's user-side numbers, the sidecars' between-services ones,
/// and the processes' `memory` with the requests each service held.
pub fn result(
    run: &Run,
    report: &LoadReport,
    sidecars: &[Sidecar],
    periodic: &[Snapshot],
    last: Option<&Snapshot>,
    memory: Vec<ProcessMemory>,
) -> RunResult {
    let mut result = report.to_run(&run.scenario, &run.variant);
    // As the simulator counts: the measured time is the sending window (the workload's duration),
    // not until the slowest request came back, so a 10 s straggler at the end does not dilute
    // the throughput of requests that were all answered.
    let sending = report.sending.as_secs_f64();
    if sending > 0.0 {
        result.duration_s = round(sending);
        result.throughput_rps = round(report.succeeded as f64 / sending);
    }
    result.cdf = report.latency.cdf();
    between_services(run, sidecars, periodic, last, &mut result);
    result.memory = with_in_flight(memory, sidecars, periodic, last);
    result
}

/// Adds to each "service" entry the peak and mean of its sidecar's ingress in-flight gauge over
/// the snapshots: the requests that replica held, the resource a missing timeout piles up.
fn with_in_flight(
    mut memory: Vec<ProcessMemory>,
    sidecars: &[Sidecar],
    periodic: &[Snapshot],
    last: Option<&Snapshot>,
) -> Vec<ProcessMemory> {
    let snaps: Vec<&Snapshot> = periodic.iter().chain(last).collect();
    for m in memory.iter_mut().filter(|m| m.role == "service") {
        let Some(i) = sidecars.iter().position(|s| s.service == m.service && s.replica == m.replica) else { continue };
        let held: Vec<f64> = snaps.iter().map(|s| s.counts[i].ingress_in_flight).collect();
        if !held.is_empty() {
            m.peak_in_flight = Some(held.iter().copied().fold(0.0, f64::max) as u64);
            m.mean_in_flight = Some(round(held.iter().sum::<f64>() / held.len() as f64));
        }
    }
    memory
}

/// Fills the fields about calls between services from the sidecars' counters: from the first
/// periodic snapshot (the end of the warm-up) to the last snapshot.
fn between_services(
    run: &Run,
    sidecars: &[Sidecar],
    periodic: &[Snapshot],
    last: Option<&Snapshot>,
    result: &mut RunResult,
) {
    let (Some(base), Some(end)) = (periodic.first(), last.or(periodic.last())) else { return };
    if sidecars.is_empty() {
        // A peer's sidecars: nothing was read.
        return;
    }
    let (mut extra, mut attempts, mut timeouts) = (0.0, 0.0, 0.0);
    let (mut answered, mut answer, mut headroom, mut headroom_n) = (0.0, 0.0, 0.0, 0.0);
    let mut ejections = 0.0;
    for i in 0..sidecars.len() {
        for (upstream, e) in &end.counts[i].egress {
            let b = base.counts[i].egress.get(upstream).cloned().unwrap_or_default();
            extra += e.extra - b.extra;
            attempts += e.attempts - b.attempts;
            timeouts += e.timeouts - b.timeouts;
            answered += e.answered_seconds - b.answered_seconds;
            answer += e.answer_seconds - b.answer_seconds;
            headroom += e.headroom_sum - b.headroom_sum;
            headroom_n += e.headroom_count - b.headroom_count;
            ejections += e.ejections - b.ejections;
        }
    }
    result.attempts = attempts.max(0.0) as u64;
    result.ejections = Some(ejections.max(0.0) as u64);
    // As the simulator counts: calls that sent no attempt (dropped by the balancer) are not load,
    // so the calls are the first attempts, and the extra load the retries and hedges per call.
    let calls = attempts - extra;
    result.extra_load = round(if calls > 0.0 { extra / calls } else { 0.0 });
    result.timeouts_pct = round(if attempts > 0.0 { 100.0 * timeouts / attempts } else { 0.0 });
    // adaptive-timeouts.txt §5.2, as the simulator computes them (crates/sim/src/metrics.rs).
    result.time_fraction = round(if answer > 0.0 { answered / answer } else { 0.0 });
    result.closeness_pct = round(if headroom_n > 0.0 { 100.0 * headroom / headroom_n } else { 0.0 });
    let load = replica_load(run, sidecars, periodic);
    result.imbalance = round(load.as_ref().map_or(0.0, ReplicaLoad::imbalance));
    let timeouts = timeout_series(run, sidecars, periodic);
    if load.is_some() || !timeouts.is_empty() {
        result.series = Some(Series { interval_s: INTERVAL.as_secs_f64(), replica_load: load, timeouts });
    }
}

/// Attempts each replica of the run's [`load_service`] accepted per interval: those that reached
/// its sidecar's ingress less those the ingress refused with 429, as the simulator counts them.
fn replica_load(run: &Run, sidecars: &[Sidecar], periodic: &[Snapshot]) -> Option<ReplicaLoad> {
    if periodic.len() < 2 {
        return None;
    }
    let service = load_service(run);
    let accepted = |c: &Counts| c.ingress_requests - c.ingress_rejected;
    let replicas = (0..sidecars.len())
        .filter(|&i| sidecars[i].service == service)
        .map(|i| {
            periodic
                .windows(2)
                .map(|w| (accepted(&w[1].counts[i]) - accepted(&w[0].counts[i])).max(0.0) as u64)
                .collect()
        })
        .collect();
    Some(ReplicaLoad { service: service.to_string(), replicas })
}

/// For each edge with a timeout policy: the mean over its callers of the latest timeout, and the
/// mean attempt latency, per interval (an interval without attempts repeats the last value).
fn timeout_series(run: &Run, sidecars: &[Sidecar], periodic: &[Snapshot]) -> Vec<TimeoutSeries> {
    let mut out = Vec::new();
    for (caller, service) in &run.services {
        for call in service.calls.iter().filter(|c| c.count > 0 && c.policy.timeout != TimeoutConfig::None) {
            let callers: Vec<usize> = (0..sidecars.len()).filter(|&i| &sidecars[i].service == caller).collect();
            let edge =
                |snap: &Snapshot, i: usize| snap.counts[i].egress.get(&call.service).cloned().unwrap_or_default();
            let (mut timeout_ms, mut latency_ms) = (Vec::new(), Vec::new());
            let (mut last_t, mut last_l) = (0.0, 0.0);
            for w in periodic.windows(2) {
                let set: Vec<f64> =
                    callers.iter().map(|&i| edge(&w[1], i).timeout_seconds).filter(|t| *t > 0.0).collect();
                if !set.is_empty() {
                    last_t = round(1000.0 * set.iter().sum::<f64>() / set.len() as f64);
                }
                let (sum, count) = callers.iter().fold((0.0, 0.0), |(s, c), &i| {
                    let (a, b) = (edge(&w[0], i), edge(&w[1], i));
                    (s + b.attempt_seconds - a.attempt_seconds, c + b.attempt_count - a.attempt_count)
                });
                if count > 0.0 {
                    last_l = round(1000.0 * sum / count);
                }
                timeout_ms.push(last_t);
                latency_ms.push(last_l);
            }
            out.push(TimeoutSeries { edge: format!("{caller}->{}", call.service), timeout_ms, latency_ms });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrape::EgressCounts;
    use std::path::Path;
    use tailguard_model::Experiment;

    const FILE: &str = "name: t\nservices:\n  front:\n    calls: [{service: back, policy: {timeout: {kind: fixed, value: 50ms}}}]\n  back:\n    replicas: 2\nworkload: {target: front, open: {rate: 10}, duration: 1s}\nvariants: [{name: v}]\n";

    /// Counters of front-0 (egress to back) and back-0, back-1 (ingress).
    fn snap(egress: (f64, f64, f64, f64, f64), ingress: [f64; 2]) -> Snapshot {
        let (attempts, extra, timeouts, seconds, count) = egress;
        let e = EgressCounts {
            requests: attempts,
            attempts,
            timeouts,
            extra,
            attempt_seconds: seconds,
            attempt_count: count,
            timeout_seconds: 0.05,
            // As if every attempt answered and each timeout cost 50 ms more; each answer with
            // a headroom of 0.25.
            answered_seconds: seconds + 0.05 * timeouts,
            answer_seconds: seconds,
            headroom_sum: 0.25 * count,
            headroom_count: count,
            // One ejection in the warm-up, one after it.
            ejections: if attempts < 15.0 { 1.0 } else { 2.0 },
        };
        let front = Counts { egress: [("back".to_string(), e)].into(), ..Counts::default() };
        // Each back replica also refused twice as many requests with 429: not load.
        let back = |n: f64| Counts {
            ingress_requests: 3.0 * n,
            ingress_rejected: 2.0 * n,
            ingress_in_flight: n / 3.0,
            egress: Default::default(),
        };
        Snapshot { counts: vec![front, back(ingress[0]), back(ingress[1])] }
    }

    #[test]
    fn counters_become_extra_load_timeouts_imbalance_and_series() {
        let run = Experiment::parse(FILE, Path::new("t.yaml")).unwrap().resolve("default", "v", false).unwrap();
        let sidecar = |service: &str, replica| Sidecar {
            service: service.into(),
            replica,
            admin: "127.0.0.1:1".parse().unwrap(),
        };
        let sidecars = [sidecar("front", 0), sidecar("back", 0), sidecar("back", 1)];
        // Warm-up traffic (5 attempts) is subtracted; then 10 and 12 attempts a second.
        let periodic = [
            snap((5.0, 0.0, 0.0, 0.1, 5.0), [3.0, 2.0]),
            snap((15.0, 1.0, 1.0, 0.3, 14.0), [9.0, 6.0]),
            snap((27.0, 2.0, 1.0, 0.54, 26.0), [15.0, 12.0]),
        ];
        let last = snap((30.0, 3.0, 2.0, 0.6, 28.0), [16.0, 14.0]);
        let mut r = RunResult::default();
        between_services(&run, &sidecars, &periodic, Some(&last), &mut r);
        // 25 attempts, 3 of them retries or hedges: 22 calls.
        assert_eq!((r.attempts, r.extra_load, r.timeouts_pct), (25, round(3.0 / 22.0), 8.0));
        // (0.6 + 0.1 − 0.1 − 0) s answered over (0.6 − 0.1) s of answering attempts.
        assert_eq!((r.time_fraction, r.closeness_pct), (round(0.6 / 0.5), 25.0));
        assert_eq!(r.ejections, Some(1));
        let series = r.series.unwrap();
        let load = series.replica_load.unwrap();
        assert_eq!((load.service.as_str(), load.replicas.clone()), ("back", vec![vec![6, 6], vec![4, 6]]));
        // Interval 0: [6, 4] → σ 1; interval 1: [6, 6] → σ 0.
        assert_eq!(r.imbalance, 0.5);
        let t = &series.timeouts[0];
        assert_eq!(t.edge, "front->back");
        assert_eq!(t.timeout_ms, vec![50.0, 50.0]);
        // (0.3 − 0.1) s over 9 attempts, then 0.24 s over 12.
        assert_eq!(t.latency_ms, vec![round(200.0 / 9.0), 20.0]);

        // back-0 held 1, 3, 5 and 16/3 requests at the four snapshots; sidecars hold none.
        let entry = |service: &str, role: &str| ProcessMemory {
            service: service.into(),
            role: role.into(),
            peak_rss_mb: 10.0,
            mean_rss_mb: 8.0,
            ..ProcessMemory::default()
        };
        let memory = vec![entry("back", "service"), entry("back", "sidecar"), entry("gone", "service")];
        let memory = with_in_flight(memory, &sidecars, &periodic, Some(&last));
        assert_eq!((memory[0].peak_in_flight, memory[0].mean_in_flight), (Some(5), Some(round(43.0 / 12.0))));
        assert_eq!((memory[1].peak_in_flight, memory[2].peak_in_flight), (None, None));
    }
}
