//! The engine on small worlds whose results can be worked out by hand.

use std::path::Path;
use tailguard_model::Experiment;
use tailguard_sim::{simulate, Options, RunResult};

fn run(yaml: &str) -> Vec<RunResult> {
    let experiment = Experiment::parse(yaml, Path::new("inline.yaml")).unwrap_or_else(|e| panic!("{e}"));
    simulate(&experiment, Options { seed: 1, quick: false, threads: 1 }, |_| {}).unwrap_or_else(|e| panic!("{e}")).runs
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
    assert_eq!(r.extra_load, 1.0);
    // 2 ms to the front and back, 2 ms to the down replica and back, 2 + 10 ms at replica 1.
    assert_eq!((r.latency_ms.p10, r.latency_ms.max), (16.0, 16.0));
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
    // 5 requests at once on one worker with capacity 2 queued: 1 in service + 2 queued are
    // admitted, 2 are refused.
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
    assert_eq!((r.requests, r.succeeded, r.rejected), (5, 3, 2));
}
