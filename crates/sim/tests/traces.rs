//! `tailguard sim --traces`: spans of simulated requests, checked against virtual times worked
//! out by hand.

use std::path::Path;
use tailguard_model::Experiment;
use tailguard_sim::{simulate, simulate_traced, Options, Trace};
use tailguard_trace::{Span, Value};

/// front (1 worker, 10 ms) calls back (1 worker, 20 ms); 1 ms each way; one client, 3 requests.
const CHAIN: &str = r#"
name: chain
services:
  front: { workers: 1, service_time: { dist: constant, value: 10ms }, calls: [ { service: back } ] }
  back: { workers: 1, service_time: { dist: constant, value: 20ms } }
network: { delay: 1ms }
workload: { target: front, closed: { clients: 1 }, requests: 3 }
variants: [ { name: a }, { name: b } ]
"#;

fn options() -> Options {
    Options::default()
}

fn traces(yaml: &str, sample: usize) -> Vec<Trace> {
    let experiment = Experiment::parse(yaml, Path::new("inline.yaml")).unwrap();
    simulate_traced(&experiment, options(), sample, |_| {}).unwrap().1
}

/// (service, operation, start µs, duration µs) of `span`.
fn shape(t: &Trace, s: &Span) -> (String, String, u64, u64) {
    (t.service(s).to_string(), s.operation.clone(), s.start_us, s.duration_us)
}

fn only_child<'a>(t: &'a Trace, parent: &Span) -> &'a Span {
    let children = t.children(parent.id);
    assert_eq!(children.len(), 1, "children of {parent:?}");
    children[0]
}

fn tag<'a>(s: &'a Span, key: &str) -> &'a Value {
    Trace::tag(s, key).unwrap_or_else(|| panic!("{} has no {key}", s.operation))
}

#[test]
fn spans_carry_the_virtual_times() {
    let all = traces(CHAIN, 200);
    // Two variants × three requests, every request kept.
    assert_eq!(all.len(), 6);
    for (i, t) in all[..3].iter().enumerate() {
        // Each request takes 34 ms: 1 there, 10 of work, 1 + 20 + 1 for the call to back, 1 back.
        let at = 34_000 * i as u64;
        let s = |service: &str, op: &str, start: u64, duration: u64| {
            (service.to_string(), op.to_string(), at + start, duration)
        };
        let roots: Vec<&Span> = t.roots().collect();
        assert_eq!(roots.len(), 1);
        let call = roots[0];
        assert_eq!(shape(t, call), s("client", "call front", 0, 34_000));
        let attempt = only_child(t, call);
        assert_eq!(shape(t, attempt), s("client", "attempt", 0, 34_000));
        assert_eq!(tag(attempt, "attempt.kind"), &Value::Str("first".into()));
        assert_eq!(tag(attempt, "outcome"), &Value::Str("success".into()));
        let front = only_child(t, attempt);
        assert_eq!(shape(t, front), s("front", "front", 1_000, 32_000));
        assert_eq!((tag(front, "queue_us"), tag(front, "work_us")), (&Value::Int(0), &Value::Int(10_000)));
        let call = only_child(t, front);
        assert_eq!(shape(t, call), s("front", "call back", 11_000, 22_000));
        let attempt = only_child(t, call);
        assert_eq!(shape(t, attempt), s("front", "attempt", 11_000, 22_000));
        let back = only_child(t, attempt);
        assert_eq!(shape(t, back), s("back", "back", 12_000, 20_000));
        assert_eq!(tag(back, "span.kind"), &Value::Str("server".into()));
        assert!(t.children(back.id).is_empty());
        assert_eq!(t.spans.len(), 6);
        let process = &t.processes[back.process];
        assert_eq!(process.tags[0].value, Value::Str("default".into()), "the scenario (the file has none)");
        assert_eq!(process.tags[1].value, Value::Str("a".into()), "the variant");
    }
    let ids: std::collections::BTreeSet<u128> = all.iter().map(|t| t.id).collect();
    assert_eq!(ids.len(), 6, "trace ids are unique across runs");
}

#[test]
fn the_sample_is_bounded_deterministic_and_changes_nothing() {
    let yaml = CHAIN.replace("requests: 3", "requests: 50");
    let a = traces(&yaml, 7);
    assert_eq!(a.len(), 14, "7 per run");
    assert!(a.iter().any(|t| t.id as u64 > 7), "a sample of all 50 requests, not the first 7");
    assert_eq!(a, traces(&yaml, 7), "the same seed keeps the same traces");
    let experiment = Experiment::parse(&yaml, Path::new("inline.yaml")).unwrap();
    let plain = simulate(&experiment, options(), |_| {}).unwrap();
    let (traced, _) = simulate_traced(&experiment, options(), 7, |_| {}).unwrap();
    assert_eq!(serde_json::to_string(&plain).unwrap(), serde_json::to_string(&traced).unwrap());
}

#[test]
fn retries_are_tagged_and_warmup_requests_are_not_traced() {
    // back's replica 0 is down: round robin sends each first attempt there, retries on replica 1
    // (no outlier ejection, which would take replica 0 out during the warm-up).
    let yaml = r#"
name: retry
services:
  front:
    calls:
      - service: back
        policy: { balancer: { kind: round-robin }, outlier: off, retry: { max_attempts: 2, budget: unlimited } }
  back:
    replicas: 2
    service_time: { dist: constant, value: 5ms }
    faults: [ { kind: down, replica: 0, from: 0s, to: 1h } ]
network: { delay: 1ms }
workload: { target: front, closed: { clients: 1 }, duration: 1s, warmup: 500ms }
variants: [ { name: v } ]
"#;
    let all = traces(yaml, 1000);
    assert!(!all.is_empty());
    for t in &all {
        let root = t.roots().next().unwrap();
        assert!(root.start_us >= 500_000, "a warmup request was traced: {root:?}");
        let front = only_child(t, only_child(t, root));
        let call = only_child(t, front);
        let attempts = t.children(call.id);
        let kinds: Vec<(&Value, &Value)> =
            attempts.iter().map(|a| (tag(a, "attempt.kind"), tag(a, "outcome"))).collect();
        let v = |s: &str| Value::Str(s.into());
        assert_eq!(kinds, vec![(&v("first"), &v("unavailable")), (&v("retry"), &v("success"))]);
        // The refused visit is an instant; the retried one is the 5 ms of work.
        let visits: Vec<u64> = attempts.iter().map(|a| only_child(t, a).duration_us).collect();
        assert_eq!(visits, vec![0, 5_000]);
    }
}

#[test]
fn an_attempt_kept_past_its_timeout_is_tagged_overdue() {
    // 30 ms of work against a 20 ms timeout: the first attempt is overdue at 21 ms, its retry goes
    // out beside it, and the first attempt's answer at 32 ms wins; the retry is cancelled.
    let yaml = r#"
name: overdue
services:
  front:
    calls:
      - service: back
        policy: { timeout: { kind: fixed, value: 20ms }, retry: { max_attempts: 2, hedge_on_timeout: true } }
  back:
    replicas: 2
    service_time: { dist: constant, value: 30ms }
network: { delay: 1ms }
workload: { target: front, closed: { clients: 1 }, requests: 2 }
variants: [ { name: v } ]
"#;
    let all = traces(yaml, 10);
    assert_eq!(all.len(), 2);
    for t in &all {
        let root = t.roots().next().unwrap();
        let call = only_child(t, only_child(t, only_child(t, root)));
        let attempts = t.children(call.id);
        let v = |s: &str| Value::Str(s.into());
        let seen: Vec<(&Value, &Value, Option<&Value>, u64)> = attempts
            .iter()
            .map(|a| (tag(a, "attempt.kind"), tag(a, "outcome"), Trace::tag(a, "overdue"), a.duration_us))
            .collect();
        let yes = Value::Bool(true);
        assert_eq!(
            seen,
            vec![(&v("first"), &v("success"), Some(&yes), 32_000), (&v("hedge"), &v("cancelled"), None, 12_000)]
        );
    }
}
