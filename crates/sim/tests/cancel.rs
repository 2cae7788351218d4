//! Cancellation reaching the callee (`cancellable`, docs/experiment-files.md#cancellation), on
//! small worlds worked out by hand: each file runs as scenario `cancel` (the default) and `keep`
//! (`cancellable: false` where the scenario says), so the two can be compared exactly.

use std::path::Path;
use tailguard_model::Experiment;
use tailguard_sim::{simulate, Options, RunResult};

fn run(yaml: &str) -> Vec<RunResult> {
    let experiment = Experiment::parse(yaml, Path::new("inline.yaml")).unwrap_or_else(|e| panic!("{e}"));
    simulate(&experiment, Options::default(), |_| {}).unwrap_or_else(|e| panic!("{e}")).runs
}

/// Seconds service `service`'s workers were busy, and those of finished extra attempts.
fn work(r: &RunResult, service: &str) -> (f64, f64) {
    let w = r.work.iter().find(|w| w.service == service).expect("every service reports its work");
    (w.busy_s, w.extra_s)
}

#[test]
fn a_cancelled_attempt_frees_its_worker_one_delay_later_for_the_next_in_the_queue() {
    // One worker, 2 ms of work, but the replica's 2nd request takes 1 s. Requests leave every
    // 5 ms with a 50 ms deadline; the network takes 1 ms each way.
    // #1: sent at 0, works 1..3 ms, answered at 4 ms.
    // #2: sent at 5, works from 6 ms for 1 s; its deadline passes at 55 ms.
    // #3: sent at 10, queued at 11 ms behind #2.
    // With cancellation #2's cancel reaches the replica at 56 ms: its worker is free then, #3
    // works 56..58 ms and is answered at 59 ms, 49 ms after it left, within its deadline.
    // Without, #3 waits for #2's second and misses its deadline too.
    let runs = run(r#"
name: queue
services:
  s:
    workers: 1
    service_time: { dist: constant, value: 2ms }
    faults: [ { kind: slow, every: 2, service_time: { dist: constant, value: 1s } } ]
network: { delay: 1ms }
workload:
  target: s
  open: { rate: 200, arrival: constant }
  requests: 3
  client: { deadline: 50ms }
scenarios:
  - name: cancel
  - name: keep
    set: { services.s.cancellable: false }
variants: [ { name: v } ]
"#);
    let (cancel, keep) = (&runs[0], &runs[1]);
    assert_eq!((cancel.succeeded, cancel.timed_out), (2, 1));
    assert_eq!((cancel.latency_ms.p10, cancel.latency_ms.max), (4.0, 49.0));
    assert_eq!(work(cancel, "s"), (0.054, 0.0), "2 ms + 50 ms of #2 (6..56 ms) + 2 ms");
    assert_eq!((keep.succeeded, keep.timed_out), (1, 2));
    assert_eq!(keep.latency_ms.max, 4.0);
    assert_eq!(work(keep, "s"), (1.004, 0.0), "#2's whole second, and #3 after its caller left");
}

#[test]
fn a_lost_hedge_leaves_the_queue_or_frees_its_worker() {
    // Two replicas of one worker, 100 ms of work; a hedge after 10 ms of patience; requests at 0
    // and 5 ms; 1 ms each way.
    // #1 works on r0 1..101 ms, #2 on r1 6..106 ms. #1's hedge queues on r1 (11 ms), #2's on r0
    // (16 ms), which starts it at 101 ms. Both primaries win: #1 answered at 102 ms, #2 at 107.
    // With cancellation #1's hedge leaves r1's queue at 103 ms without working, and #2's hedge
    // stops at 108 ms after 7 ms of work: 207 ms of work in all. Without, both hedges do their
    // 100 ms and answer a caller that left.
    let runs = run(r#"
name: hedge
services:
  s:
    replicas: 2
    workers: 1
    service_time: { dist: constant, value: 100ms }
network: { delay: 1ms }
workload:
  target: s
  open: { rate: 200, arrival: constant }
  requests: 2
  client:
    balancer: { kind: round-robin }
    hedge: { kind: speculative, attempts: 2, patience: 10ms }
scenarios:
  - name: cancel
  - name: keep
    set: { services.s.cancellable: false }
variants: [ { name: v } ]
"#);
    for r in &runs {
        assert_eq!(r.succeeded, 2, "{}", r.scenario);
        assert_eq!((r.latency_ms.p10, r.latency_ms.max), (102.0, 102.0), "{}", r.scenario);
    }
    assert_eq!(work(&runs[0], "s"), (0.207, 0.0));
    assert_eq!(work(&runs[1], "s"), (0.4, 0.2), "both hedges finished");
}

#[test]
fn a_cancel_travels_down_to_the_calls_of_the_abandoned_request() {
    // front calls back (one worker, 100 ms); the user gives up after 50 ms; 1 ms each way.
    // The request reaches front at 1 ms and back at 2 ms. The user's cancel reaches front at
    // 51 ms, which abandons its call; that cancel reaches back at 52 ms: 50 ms of work. If either
    // service ignores cancels, back does its 100 ms.
    let runs = run(r#"
name: cascade
services:
  front:
    calls: [ { service: back } ]
  back:
    workers: 1
    service_time: { dist: constant, value: 100ms }
network: { delay: 1ms }
workload:
  target: front
  open: { rate: 1, arrival: constant }
  requests: 1
  client: { deadline: 50ms }
scenarios:
  - name: cancel
  - name: front-keeps
    set: { services.front.cancellable: false }
  - name: back-keeps
    set: { services.back.cancellable: false }
variants: [ { name: v } ]
"#);
    let busy: Vec<f64> = runs.iter().map(|r| work(r, "back").0).collect();
    assert_eq!(busy, [0.05, 0.1, 0.1]);
    assert!(runs.iter().all(|r| r.timed_out == 1));
}

#[test]
fn an_answered_attempt_is_not_affected_by_its_late_cancel() {
    // back answers at 11 ms and the answer reaches front at 12 ms, but the user's 11 ms deadline
    // cancels the request at 11 ms: the cancel reaches front at 12 ms, when back has nothing left
    // to stop. back did its whole 9 ms either way, and front's late answer is ignored.
    let yaml = r#"
name: late
services:
  front:
    calls: [ { service: back } ]
  back:
    workers: 1
    service_time: { dist: constant, value: 9ms }
network: { delay: 1ms }
workload:
  target: front
  open: { rate: 1, arrival: constant }
  requests: 1
  client: { deadline: 11ms }
scenarios:
  - name: cancel
  - name: keep
    set: { services.front.cancellable: false, services.back.cancellable: false }
variants: [ { name: v } ]
"#;
    let runs = run(yaml);
    for r in &runs {
        assert_eq!((r.timed_out, work(r, "back").0), (1, 0.009), "{}", r.scenario);
    }
}
