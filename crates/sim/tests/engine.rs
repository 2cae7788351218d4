//! The engine on small worlds whose results can be worked out by hand.

use std::path::Path;
use tailguard_model::Experiment;
use tailguard_sim::{simulate, Options, RunResult};

fn run(yaml: &str) -> Vec<RunResult> {
    let experiment = Experiment::parse(yaml, Path::new("inline.yaml")).unwrap_or_else(|e| panic!("{e}"));
    simulate(&experiment, Options::default(), |_| {}).unwrap_or_else(|e| panic!("{e}")).runs
}

#[test]
fn one_client_one_server_is_exact() {
    // Each request: 1 ms there, 100 ms of work, 1 ms back: 102 ms, so 10 s hold 98 whole requests
    // (the 99th starts at 9.996 s and is measured too).
    let runs = run(r#"
name: exact
services:
  s: { workers: 1, service_time: { dist: constant, value: 100ms } }
network: { delay: 1ms }
workload: { target: s, closed: { clients: 1 }, duration: 10s }
variants: [ { name: v } ]
"#);
    let r = &runs[0];
    assert_eq!((r.requests, r.succeeded), (99, 99));
    assert_eq!((r.latency_ms.p10, r.latency_ms.max), (102.0, 102.0));
    assert_eq!(r.extra_load, 0.0);
}

#[test]
fn a_second_client_waits_in_the_fifo_queue() {
    // Two clients, one worker of 100 ms, no network delay: the first request takes 100 ms, and
    // from then on each request waits for the other client's 100 ms: 200 ms.
    let runs = run(r#"
name: queue
services:
  s: { workers: 1, service_time: { dist: constant, value: 100ms } }
workload: { target: s, closed: { clients: 2 }, requests: 20 }
variants: [ { name: v } ]
"#);
    let r = &runs[0];
    assert_eq!(r.requests, 20);
    assert_eq!((r.latency_ms.p10, r.latency_ms.max), (200.0, 200.0));
    assert_eq!(r.latency_ms.mean, 195.0, "(100 + 19 × 200) / 20");
    assert_eq!(r.cdf, vec![[100.0, 0.05], [200.0, 1.0]]);
}

#[test]
fn a_down_replica_sends_the_retry_elsewhere() {
    // Replica 0 is down for the whole run; round robin starts every request on it (the retry moved
    // the turn on to replica 1, the next request's turn is 0 again), gets "unavailable" after 2 ms
    // and retries at once on replica 1: nothing is lost, every call takes two attempts.
    let runs = run(r#"
name: down
services:
  front:
    calls:
      - service: back
        policy: { balancer: { kind: round-robin }, retry: { max_attempts: 2 } }
  back:
    replicas: 2
    service_time: { dist: constant, value: 10ms }
    faults: [ { kind: down, replica: 0, from: 0s, to: 1h } ]
network: { delay: 1ms }
workload: { target: front, open: { rate: 10, arrival: constant }, duration: 10s }
variants: [ { name: v } ]
"#);
    let r = &runs[0];
    assert_eq!(r.requests, 100);
    assert_eq!(r.success_rate, 1.0);
    // Outlier ejection (on by default) takes replica 0 out after its fifth failure in a row: the
    // first five calls take two attempts, the others one.
    assert_eq!(r.extra_load, 0.05);
    // 2 ms to the front and back, 2 ms to the down replica and back, 2 + 10 ms at replica 1.
    assert_eq!((r.latency_ms.p90, r.latency_ms.max), (14.0, 16.0));
}

#[test]
fn lost_answers_end_at_the_deadline_without_a_timeout_policy() {
    let runs = run(r#"
name: lost
services:
  front:
    calls:
      - service: back
        policy: { deadline: 1s }
  back:
    service_time: { dist: constant, value: 10ms }
    faults: [ { kind: lost, fraction: 1.0 } ]
workload: { target: front, open: { rate: 10, arrival: constant }, duration: 5s }
variants: [ { name: v } ]
"#);
    let r = &runs[0];
    assert_eq!(r.requests, 50);
    assert_eq!(r.succeeded, 0);
    assert_eq!(r.failed, 50, "the front answers 500 when its call times out");
}

#[test]
fn fixed_capacity_refuses_with_429_above_it() {
    // 5 requests at once on one worker with capacity 2: 1 in service + 1 queued are admitted, 3
    // are refused.
    let runs = run(r#"
name: cap
services:
  s:
    workers: 1
    service_time: { dist: constant, value: 1s }
    admission: { kind: fixed, capacity: 2 }
workload: { target: s, closed: { clients: 5 }, requests: 5 }
variants: [ { name: v } ]
"#);
    let r = &runs[0];
    assert_eq!((r.requests, r.succeeded, r.rejected), (5, 2, 3));
}

#[test]
fn the_cdf_and_the_series_are_exact() {
    // 10 requests/s for 3 s, balanced round robin over two replicas of `back`, so each replica
    // receives 5 a second; each replica's 5th, 10th, 15th request takes 40 ms instead of 10 ms.
    // An answer over front → back takes 1 + 10 + 1 = 12 ms, or 42 ms: per second 8 × 12 and 2 × 42,
    // a mean of 18 ms, all within the fixed 50 ms timeout. The user sees 2 ms more.
    let runs = run(r#"
name: series
services:
  front:
    workers: 0
    calls:
      - service: back
        policy: { balancer: { kind: round-robin }, timeout: { kind: fixed, value: 50ms } }
  back:
    replicas: 2
    workers: 0
    service_time: { dist: constant, value: 10ms }
    faults: [ { kind: slow, every: 5, service_time: { dist: constant, value: 40ms } } ]
network: { delay: 1ms }
workload: { target: front, open: { rate: 10, arrival: constant }, duration: 3s }
variants: [ { name: v } ]
"#);
    let r = &runs[0];
    assert_eq!((r.requests, r.succeeded, r.duration_s), (30, 30, 3.0));
    assert_eq!(r.cdf, vec![[14.0, 0.8], [44.0, 1.0]]);
    let series = r.series.as_ref().expect("a series");
    assert_eq!(series.interval_s, 1.0);
    let load = series.replica_load.as_ref().expect("replica load");
    assert_eq!(load.service, "back");
    assert_eq!(load.replicas, vec![vec![5, 5, 5], vec![5, 5, 5]]);
    assert_eq!(series.timeouts.len(), 1);
    let edge = &series.timeouts[0];
    assert_eq!(edge.edge, "front->back");
    assert_eq!(edge.timeout_ms, vec![50.0; 3]);
    assert_eq!(edge.latency_ms, vec![18.0; 3]);
}

#[test]
fn a_deadline_alone_makes_no_timeout_series() {
    let runs = run(r#"
name: deadline
services:
  front:
    calls:
      - service: back
        policy: { deadline: 1s }
  back:
    service_time: { dist: constant, value: 10ms }
workload: { target: front, open: { rate: 10, arrival: constant }, duration: 2s }
variants: [ { name: v } ]
"#);
    let series = runs[0].series.as_ref().expect("a series");
    assert!(series.timeouts.is_empty());
    assert_eq!(series.replica_load.as_ref().expect("replica load").replicas, vec![vec![10, 10]]);
}

#[test]
fn hedging_on_timeout_keeps_the_slow_attempt_running() {
    // Every answer takes 100 ms against a 60 ms timeout. Dropping the timed-out attempt fails
    // every request after its two attempts; keeping it running (hedge on timeout) lets it answer
    // at 100 ms, 40 ms before its retry would, which is cancelled then: half the attempts timed out.
    let runs = run(r#"
name: overdue
services:
  front:
    calls: [ { service: back } ]
  back:
    replicas: 2
    service_time: { dist: constant, value: 100ms }
network: { delay: 1ms }
workload: { target: front, open: { rate: 10, arrival: constant }, duration: 5s }
variants:
  - name: cancel
    edges:
      front->back: { timeout: { kind: fixed, value: 60ms }, retry: { max_attempts: 2 } }
  - name: hedge
    edges:
      front->back:
        timeout: { kind: fixed, value: 60ms }
        retry: { max_attempts: 2, hedge_on_timeout: true }
"#);
    let (cancel, hedge) = (&runs[0], &runs[1]);
    assert_eq!((cancel.requests, cancel.succeeded), (50, 0));
    assert_eq!((hedge.requests, hedge.succeeded), (50, 50));
    // 1 ms to the front, 1 + 100 + 1 ms over front -> back, 1 ms back to the user.
    assert_eq!((hedge.latency_ms.p10, hedge.latency_ms.max), (104.0, 104.0));
    assert_eq!((hedge.extra_load, hedge.timeouts_pct), (1.0, 50.0));
    assert_eq!(hedge.time_fraction, 1.0, "the user waited exactly the first attempt's latency");
}

#[test]
fn a_percentile_hedge_spends_its_budget_on_the_slow_attempts_only() {
    // Issue #15. Every store answer takes exactly 10 ms except each replica's every 50th, 200 ms.
    // The live 95th percentile is then 10 ms, and the hedge goes out once a request has waited
    // longer than that: the on-time answers, due at that very instant, are not hedged; the 20 slow
    // ones are (1000 first attempts and 20 hedges make 510 arrivals a replica, so 10 slow ones
    // each; the budget holds 4.95 tokens by the first, request 99), and each hedge answers 10 ms
    // later. When the hedge went out *at* the percentile, the simulator ran its wake before the
    // answer scheduled for the same instant: every request asked for a hedge, the budget (0.05 a
    // request) went to on-time ones, and the slow ones kept their 200 ms.
    let runs = run(r#"
name: hedge-at-the-percentile
services:
  front:
    calls:
      - service: store
        policy: { hedge: { kind: percentile } }
  store:
    replicas: 2
    service_time: { dist: constant, value: 10ms }
    faults:
      - { kind: slow, every: 50, service_time: { dist: constant, value: 200ms } }
workload: { target: front, open: { rate: 100, arrival: constant }, duration: 10s }
variants: [ { name: v } ]
"#);
    let r = &runs[0];
    assert_eq!((r.requests, r.succeeded, r.attempts), (1000, 1000, 1020));
    assert_eq!(r.extra_load, 0.02);
    assert_eq!(r.cdf, vec![[10.0, 0.98], [20.0, 1.0]]);
}

#[test]
fn variants_meet_the_same_luck() {
    // A request's draws are keyed by the request and attempt, not by the replica or the order of
    // arrival: two balancers over the same replicas lose exactly the same attempts.
    let runs = run(r#"
name: luck
services:
  front:
    calls: [ { service: back } ]
  back:
    replicas: 3
    workers: 0
    service_time: { dist: exponential, mean: 20ms }
    faults: [ { kind: lost, fraction: 0.2 } ]
workload: { target: front, open: { rate: 50, arrival: poisson }, duration: 20s }
variants:
  - name: round-robin
    edges:
      front->back: { balancer: { kind: round-robin }, timeout: { kind: fixed, value: 500ms }, retry: { max_attempts: 3 } }
  - name: random
    edges:
      front->back: { balancer: { kind: random }, timeout: { kind: fixed, value: 500ms }, retry: { max_attempts: 3 } }
"#);
    let (a, b) = (&runs[0], &runs[1]);
    assert!(a.timeouts_pct > 10.0, "{a:?}");
    assert_eq!(
        (a.requests, a.succeeded, a.extra_load, a.timeouts_pct),
        (b.requests, b.succeeded, b.extra_load, b.timeouts_pct)
    );
    assert_eq!(a.latency_ms, b.latency_ms);
}

#[test]
fn a_jitter_adds_a_uniform_draw_to_every_hop_and_only_when_given() {
    // Two hops (client → front → back), 5 ms each way, no work: 20 ms exactly without jitter;
    // with a 2 ms jitter each of the four hops takes 5 to 7 ms, so 20 to 28 ms, 24 ms on average.
    let file = |network: &str| {
        format!(
            "name: jitter\nseed: 3\nservices:\n  front: {{ calls: [ {{ service: back }} ] }}\n  back: {{}}\n{network}\nworkload: {{ target: front, open: {{ rate: 100 }}, duration: 20s }}\nvariants: [ {{ name: v }} ]\n"
        )
    };
    let plain = &run(&file("network: { delay: 5ms }"))[0];
    assert_eq!((plain.latency_ms.p10, plain.latency_ms.max), (20.0, 20.0));
    let zero = &run(&file("network: { delay: 5ms, jitter: 0s }"))[0];
    assert_eq!(zero, plain, "a zero jitter is no jitter");

    let jittered = &run(&file("network: { delay: 5ms, jitter: 2ms }"))[0];
    let l = &jittered.latency_ms;
    assert!(l.p10 > 20.0 && l.max < 28.0, "{l:?}");
    assert!((l.mean - 24.0).abs() < 0.1, "{l:?}");
    // The sum of four uniform draws is spread, but not flat: its median is near the mean.
    assert!((l.p50 - 24.0).abs() < 0.2 && l.p90 > 25.0, "{l:?}");
    assert_eq!(&run(&file("network: { delay: 5ms, jitter: 2ms }"))[0], jittered, "seeded");
}

#[test]
fn a_calibration_charges_its_hops_on_every_attempt() {
    // Constant hops: a user request's 1 ms, a call between services 2 ms, a working replica's
    // lateness 0.5 ms. front works 10 ms and calls back, which does no work (no lateness):
    // 1 + 0.5 + 10 + 2 = 13.5 ms, where the uncalibrated run takes 10 ms.
    use tailguard_model::calibration::{Calibration, Hop, RatePoint, SidecarHops, FRACTIONS};
    let constant =
        |ms: f64| Hop { quantiles: vec![std::time::Duration::from_secs_f64(ms / 1000.0).into(); FRACTIONS.len()] };
    let point = RatePoint { rate: 100.0, client: constant(1.0), service: constant(2.0), work: constant(0.5) };
    let calibration = Calibration {
        measured: "2026-01-01T00:00:00Z".to_string(),
        host: "test".to_string(),
        load_average: [0.0, 0.0],
        seconds: 1.0,
        cores: None,
        sidecars: [("tailguard".to_string(), SidecarHops { points: vec![point] })].into_iter().collect(),
    };
    let yaml = r#"
name: calibrated
services:
  front: { service_time: { dist: constant, value: 10ms }, calls: [ { service: back } ] }
  back: {}
workload: { target: front, open: { rate: 100 }, duration: 1s }
variants: [ { name: v } ]
"#;
    let experiment = Experiment::parse(yaml, Path::new("inline.yaml")).unwrap();
    let plain = simulate(&experiment, Options::default(), |_| {}).unwrap().runs;
    assert_eq!((plain[0].latency_ms.p10, plain[0].latency_ms.max), (10.0, 10.0));
    let options = Options { calibration: Some(calibration), ..Options::default() };
    let runs = simulate(&experiment, options, |_| {}).unwrap().runs;
    assert_eq!(runs[0].succeeded, runs[0].requests);
    assert_eq!((runs[0].latency_ms.p10, runs[0].latency_ms.max), (13.5, 13.5));
}

#[test]
fn a_run_longer_than_a_day_of_virtual_time_is_refused_naming_the_field() {
    let simulate_err = |workload: &str| {
        let yaml = format!(
            "name: long\nservices:\n  s: {{ workers: 1, service_time: {{ dist: constant, value: 1000s }} }}\nworkload: {workload}\nvariants: [ {{ name: v }} ]\n"
        );
        let experiment = Experiment::parse(&yaml, Path::new("inline.yaml")).unwrap_or_else(|e| panic!("{e}"));
        simulate(&experiment, Options::default(), |_| {}).unwrap_err().to_string()
    };
    // Planned too long: refused before it starts (a request every 10^6 s for 10^8 hours took
    // every byte of memory the machine had: a count per second of virtual time).
    let err = simulate_err("{ target: s, open: { rate: 0.00001 }, warmup: 1h, duration: 24h }");
    assert!(err.contains("`workload.duration` last 25h of virtual time") && err.contains("at most 24h"), "{err}");
    let err = simulate_err("{ target: s, open: { rate: 0.001 }, requests: 100 }");
    assert!(err.contains("`workload.requests` at `workload.open.rate` last 100000s"), "{err}");
    // A closed loop's requests take what the service makes them take: stopped at the limit.
    let err = simulate_err("{ target: s, closed: { clients: 1 }, requests: 1000 }");
    assert!(err.contains("had not sent its `workload.requests` after 24h"), "{err}");
}

#[test]
fn a_closed_loop_held_past_its_end_ends_with_the_drain() {
    // One client, 1 ms requests until a hang holds the replica from 5 s for 8,000 hours: the run
    // ends 20 s in, as planned, its held request timed out (it had run to the hang's end and
    // measured 8,000 hours).
    let runs = run(r#"
name: held
services:
  s: { workers: 1, service_time: { dist: constant, value: 1ms }, faults: [ { kind: hang, from: 5s, until: 8000h } ] }
workload: { target: s, closed: { clients: 1 }, duration: 20s }
variants: [ { name: v } ]
"#);
    let r = &runs[0];
    assert_eq!((r.requests, r.succeeded, r.timed_out), (5000, 4999, 1));
    assert_eq!(r.duration_s, 20.0);
}
