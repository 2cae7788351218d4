//! Faults with windows and replica groups, in virtual time: latencies worked out by hand.

use std::path::Path;
use tailguard_model::Experiment;
use tailguard_sim::{simulate, simulate_traced, Options, RunResult};

fn run(yaml: &str) -> RunResult {
    let experiment = Experiment::parse(yaml, Path::new("inline.yaml")).unwrap_or_else(|e| panic!("{e}"));
    simulate(&experiment, Options::default(), |_| {}).unwrap_or_else(|e| panic!("{e}")).runs.remove(0)
}

/// (start, duration) in µs of every request of the file's one run, in the order they started.
fn requests(yaml: &str) -> Vec<(u64, u64)> {
    let experiment = Experiment::parse(yaml, Path::new("inline.yaml")).unwrap_or_else(|e| panic!("{e}"));
    let traces = simulate_traced(&experiment, Options::default(), 1000, |_| {}).unwrap().1;
    let mut all: Vec<(u64, u64)> =
        traces.iter().flat_map(|t| t.roots().map(|s| (s.start_us, s.duration_us)).collect::<Vec<_>>()).collect();
    all.sort_unstable();
    all
}

/// Two replicas taking turns (round robin), 10 ms of work, 1 ms each way, a request every 250 ms
/// from 0 s: replica 0 gets those sent at 0, 0.5, 1, 1.5 s…
const PAIR: &str = r#"
name: pair
services:
  back:
    replicas: 2
    service_time: { dist: constant, value: 10ms }
    faults: []
network: { delay: 1ms }
workload:
  target: back
  open: { rate: 4, arrival: constant }
  duration: 3s
  client: { balancer: { kind: round-robin } }
variants: [ { name: v } ]
"#;

#[test]
fn a_hang_holds_work_until_its_window_ends() {
    let yaml = PAIR.replace("faults: []", "faults: [ { kind: hang, replica: 0, from: 1s, until: 2s } ]");
    let all = requests(&yaml);
    assert_eq!(all.len(), 12);
    for (k, &(start, duration)) in all.iter().enumerate() {
        assert_eq!(start, 250_000 * k as u64);
        let arrives = start + 1_000;
        let expected = if k % 2 == 0 && (1_000_000..2_000_000).contains(&arrives) {
            // Held until 2 s, then 10 ms of work and 1 ms back: 1.5 s → 0.511 s.
            2_000_000 - start + 11_000
        } else {
            12_000
        };
        assert_eq!(duration, expected, "request {k} sent at {start} µs");
    }
    assert_eq!(all[6], (1_500_000, 511_000));
}

#[test]
fn work_running_into_a_hang_ends_as_it_closes() {
    // The request sent at 0.5 s starts its 600 ms of work at 0.501 s; the hang from 1 s to 2 s
    // holds its end until 2 s.
    let yaml = PAIR
        .replace("value: 10ms", "value: 600ms")
        .replace("faults: []", "faults: [ { kind: hang, replica: 0, from: 1s, until: 2s } ]");
    let all = requests(&yaml);
    assert_eq!(all[2], (500_000, 1_501_000));
    // Sent at 1 s, held until 2 s, 600 ms of work: answered 2.601 s.
    assert_eq!(all[4], (1_000_000, 1_601_000));
    assert_eq!(all[3], (750_000, 602_000), "replica 1 is not held");
}

#[test]
fn a_fast_error_answers_in_two_hops_without_a_worker() {
    // One worker busy for 1 s per request would queue the second client; errors with `after`
    // take no worker, so every answer is one hop there and one back (+ `after`).
    let file = |after: &str| {
        format!(
            r#"
name: hole
services:
  s: {{ workers: 1, service_time: {{ dist: constant, value: 1s }}, faults: [ {{ kind: error, after: {after} }} ] }}
network: {{ delay: 1ms }}
workload: {{ target: s, closed: {{ clients: 2 }}, requests: 20 }}
variants: [ {{ name: v }} ]
"#
        )
    };
    // The latency summary counts successes only: the traces time the errors.
    let r = run(&file("0s"));
    assert_eq!((r.requests, r.succeeded), (20, 0));
    let all = requests(&file("0s"));
    assert_eq!(all.len(), 20);
    assert!(all.iter().all(|&(_, d)| d == 2_000), "{all:?}");
    assert!(requests(&file("5ms")).iter().all(|&(_, d)| d == 7_000));
    // Outside its window the replica works as usual (1 s of work, the clients' turns queueing).
    let r = run(&file("0s, from: 1h"));
    assert_eq!((r.requests, r.succeeded), (20, 20));
    assert!(r.latency_ms.mean > 1000.0);
}

#[test]
fn an_error_after_the_work_and_lost_requests_follow_their_windows() {
    // Replica 1 answers 500 after its work while it is in the window; replica 0 loses every
    // request that arrives from 2 s on (each meets the 1 s deadline).
    let yaml = PAIR
        .replace(
            "faults: []",
            "faults: [ { kind: error, replica: 1, from: 1s, until: 2s }, { kind: lost, replica: 0, from: 2s } ]",
        )
        .replace("round-robin }", "round-robin }, deadline: 1s");
    let r = run(&yaml);
    // Sent at 1.25 and 1.75 s (replica 1): errors; sent at 2, 2.5 s (replica 0): lost.
    assert_eq!((r.requests, r.succeeded), (12, 8));
}

#[test]
fn a_group_has_its_own_workers_and_service_time() {
    // One replica, 100 ms per request, two clients: with unlimited workers every request takes
    // 100 ms; the group gives it one worker, so each waits for the other client's (as a FIFO).
    let file = r#"
name: group
services:
  s:
    service_time: { dist: constant, value: 100ms }
    groups:
      only: { replicas: 0, workers: 1 }
workload: { target: s, closed: { clients: 2 }, requests: 20 }
variants: [ { name: v } ]
"#;
    let r = run(file);
    assert_eq!((r.latency_ms.p10, r.latency_ms.max), (200.0, 200.0));
    assert_eq!(r.latency_ms.mean, 195.0, "(100 + 19 × 200) / 20");
    let r = run(&file.replace("workers: 1", "service_time: { dist: constant, value: 100ms }"));
    assert_eq!((r.latency_ms.mean, r.latency_ms.max), (100.0, 100.0));
    // Two replicas, the second slower: turns alternate 12 and 32 ms.
    let yaml = PAIR.replace(
        "faults: []",
        "groups: { slow: { replicas: \"1-1\", service_time: { dist: constant, value: 30ms } } }",
    );
    let all = requests(&yaml);
    assert!(all.iter().enumerate().all(|(k, &(_, d))| d == if k % 2 == 0 { 12_000 } else { 32_000 }), "{all:?}");
}

/// examples/failures.yaml (quick): the 500 ms timeout and one retry bound what the 3 s hang costs
/// a request, and the black hole's fast errors are retried: round-robin, which sends every tenth
/// attempt to each, loses almost nothing and waits at most about one timeout more than the work.
#[test]
fn the_failures_example_bounds_the_hang_by_the_timeout() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/failures.yaml");
    let experiment = Experiment::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let options = Options { quick: true, ..Options::default() };
    let results = simulate(&experiment, options, |_| {}).unwrap_or_else(|e| panic!("{e}"));
    let rr = results.runs.iter().find(|r| r.variant == "round-robin").expect("a round-robin run");
    // A request that met the hang timed out once (500 ms) and was answered by another replica.
    assert!(rr.latency_ms.max > 500.0 && rr.latency_ms.max < 1000.0, "max {} ms", rr.latency_ms.max);
    assert!(rr.latency_ms.p999 > 500.0, "the hang shows in the tail: p99.9 {} ms", rr.latency_ms.p999);
    assert!(rr.success_rate > 0.995, "success {}", rr.success_rate);
}

/// examples/failures.yaml (quick): with outlier ejection at its defaults the black hole is out
/// after five errors in a row. Round-robin and least-request then lose nothing; BLOC does as well
/// as with the black hole taken out of the file (its remaining losses are its own drops at
/// capacity 4). Even without ejection the black hole costs BLOC under a point: only a success
/// earns a chip, so its instant 500s do not make it look idle (when they did, it cost 5 points).
#[test]
fn the_failures_example_with_ejection_loses_nothing_to_the_black_hole() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/failures.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let success = |text: &str| {
        let experiment = Experiment::parse(text, &path).unwrap_or_else(|e| panic!("{e}"));
        let options = Options { quick: true, ..Options::default() };
        let results = simulate(&experiment, options, |_| {}).unwrap_or_else(|e| panic!("{e}"));
        move |name: &str| results.runs.iter().find(|r| r.variant == name).expect("the variant ran").success_rate
    };
    let with_black_hole = success(&text);
    let without = text.replace("replicas: 10", "replicas: 9");
    let without: String = without.lines().filter(|l| !l.contains("black-hole:")).map(|l| format!("{l}\n")).collect();
    let without_black_hole = success(&without);
    for balancer in ["round-robin", "least-request"] {
        let ejecting = with_black_hole(&format!("{balancer}-eject"));
        assert_eq!(ejecting, 1.0, "{balancer}");
        assert!(with_black_hole(balancer) < 1.0, "{balancer}: the black hole costs something without ejection");
    }
    let (bloc, ejecting, alone) = (with_black_hole("bloc"), with_black_hole("bloc-eject"), without_black_hole("bloc"));
    assert!(
        ejecting >= alone && bloc > alone - 0.01,
        "bloc {bloc}, ejecting {ejecting}, without the black hole {alone}"
    );
}

/// An error fault's `after` holds no worker and no queue place, so the cancel of an attempt
/// abandoned before its error answers only drops it (it once looked for it in the queue).
#[test]
fn a_cancel_before_a_delayed_error_answers_drops_it() {
    let yaml = r#"
name: t
services:
  back:
    workers: 1
    service_time: { dist: constant, value: 10ms }
    faults: [ { kind: error, after: 50ms, from: 0s, until: 1s } ]
network: { delay: 1ms }
workload:
  target: back
  open: { rate: 4, arrival: constant }
  duration: 2s
  client: { timeout: { kind: fixed, value: 20ms } }
variants: [ { name: v } ]
"#;
    let run = run(yaml);
    // Sent at 0, 0.25, 0.5, 0.75 s: timed out at 20 ms; then 1, 1.25, 1.5, 1.75 s: 12 ms each.
    assert_eq!((run.requests, run.succeeded), (8, 4));
    assert_eq!(run.latency_ms.max, 12.0);
}
