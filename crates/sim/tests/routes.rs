//! Requests that carry their own work (routes, work per request): a learned number never fails a
//! request that a policy without timeouts serves, and a hedge that cannot win stops paying.
//! Nothing here was fitted to the seeds it asserts on: the race record's window and probe rate
//! ([`tailguard_policy::class`]) were chosen on seeds 1–5 of examples/routes.yaml; the checks run
//! seeds 101–103 and conditions outside that file.

use crate::common::example;
use std::path::Path;
use tailguard_model::Experiment;
use tailguard_sim::{simulate, Options, RunResult};

/// The seeds the checks assert on (never looked at while choosing a constant).
const CHECKED: [u64; 3] = [101, 102, 103];

fn run(experiment: &Experiment, seed: u64, variants: &[&str]) -> Vec<RunResult> {
    let variants = variants.iter().map(|v| v.to_string()).collect();
    let options = Options { seed, threads: 2, variants, ..Options::default() };
    simulate(experiment, options, |_| {}).unwrap_or_else(|e| panic!("{e}")).runs
}

fn find<'a>(runs: &'a [RunResult], scenario: &str, variant: &str) -> &'a RunResult {
    runs.iter()
        .find(|r| r.scenario == scenario && r.variant == variant)
        .unwrap_or_else(|| panic!("no {scenario}/{variant}"))
}

fn show(r: &RunResult) -> String {
    let routes: Vec<String> =
        r.routes.iter().map(|x| format!("{} {:.4} p99 {:.1}", x.route, x.success_rate, x.latency_ms.p99)).collect();
    let extra = extra_attempts(r);
    format!(
        "{:<12}{:<18} success {:.4} extra attempts {:.4} | {}",
        r.scenario,
        r.variant,
        r.success_rate,
        extra,
        routes.join(" | ")
    )
}

/// Attempts the replicas accepted per measured request, − 1: the hedges and retries sent.
fn extra_attempts(r: &RunResult) -> f64 {
    let load = r.series.as_ref().and_then(|s| s.replica_load.as_ref()).expect("a run has its target's replica load");
    let accepted: u64 = load.replicas.iter().flatten().sum();
    accepted as f64 / r.requests.max(1) as f64 - 1.0
}

#[test]
#[ignore = "prints the runs"]
fn print_routes() {
    let seeds: Vec<u64> = std::env::var("SEEDS")
        .map(|s| s.split(',').map(|x| x.parse().unwrap()).collect())
        .unwrap_or(vec![1, 2, 3, 4, 5]);
    let experiment = example("routes.yaml");
    for seed in seeds {
        println!("seed {seed}");
        for r in run(&experiment, seed, &[]) {
            println!("{}", show(&r));
        }
    }
}

/// examples/routes.yaml: in every scenario, the recommended policy succeeds at least as often as
/// P2C least-request without timeouts (− 0.1 point), overall and on each route, and where all
/// the work belongs to the request it sends at most 2 % extra attempts.
#[test]
fn the_recommended_policy_fails_no_route_that_no_timeout_serves() {
    let experiment = example("routes.yaml");
    for seed in CHECKED {
        let runs = run(&experiment, seed, &["no-timeout", "recommended"]);
        for scenario in experiment.scenario_names() {
            let (plain, recommended) = (find(&runs, &scenario, "no-timeout"), find(&runs, &scenario, "recommended"));
            let context = format!("seed {seed}\n{}\n{}", show(plain), show(recommended));
            // Per scenario, as the bound is stated, and per route.
            assert!(recommended.success_rate >= plain.success_rate - 0.001, "{context}");
            for (route, plain_route) in recommended.routes.iter().zip(&plain.routes) {
                assert_eq!(route.route, plain_route.route);
                assert!(route.success_rate >= plain_route.success_rate - 0.001, "{}: {context}", route.route);
            }
        }
        let per_request = find(&runs, "per-request", "recommended");
        assert!(extra_attempts(per_request) <= 0.02, "seed {seed}: {}", show(per_request));
    }
}

/// Issue #32's bound on each route's tail, not met yet: the recommended policy's p99 on every route
/// of examples/routes.yaml at most 1.05 × the static per-route setting's and at most no-timeout's
/// (means over the checked seeds, runs of 300 s for a steadier tail). On 2026-12-06, since Prequal
/// ranks by its own counts when its reports show it alone: `light` and `per-request`, every route
/// within 0.2 % of no-timeout's (the first seconds, before the proof; 1–2 % above it before);
/// `busy`, the quick route within the bound, the search 1.01 × no-timeout's and the report
/// 1.005 ×; `lossy`, the quick route and the search 1.2 × and 1.6 × no-timeout's, which instead
/// fails the 1 % of requests whose attempt is lost (the static setting's: 1.9 × and 1.1 × the
/// recommended's); `gray`, the quick route 1.004 × no-timeout's, the search and the report within
/// the bound (the search's p99 is 1.7–1.9 s or 2.4 s by seed, as more than 1 % of the searches
/// meet the gray replica or not; docs/policies.md, Prequal).
#[test]
#[ignore = "issue #32 is open there: see the doc comment"]
fn each_routes_tail_meets_the_static_settings() {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/routes.yaml");
    let text = std::fs::read_to_string(&path).unwrap().replace("  duration: 60s", "  duration: 300s");
    let experiment = Experiment::parse(&text, &path).unwrap_or_else(|e| panic!("{e}"));
    let runs: Vec<Vec<RunResult>> = CHECKED.iter().map(|&seed| run(&experiment, seed, &[])).collect();
    let p99 = |scenario: &str, variant: &str, route: &str| {
        let of = |runs: &[RunResult]| {
            let r = find(runs, scenario, variant);
            r.routes.iter().find(|x| x.route == route).map(|x| x.latency_ms.p99).expect("the route ran")
        };
        runs.iter().map(|r| of(r)).sum::<f64>() / runs.len() as f64
    };
    let mut failed = Vec::new();
    for scenario in experiment.scenario_names() {
        for route in ["items", "search", "report"] {
            let (recommended, fixed, plain) = (
                p99(&scenario, "recommended", route),
                p99(&scenario, "static-per-route", route),
                p99(&scenario, "no-timeout", route),
            );
            if recommended > 1.05 * fixed || recommended > plain {
                failed.push(format!(
                    "{scenario} {route}: recommended {recommended:.1}, static {fixed:.1}, no timeout {plain:.1}"
                ));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// A fast route and a slow one (1.2 s of work on any replica, 4 % of the requests) on two
/// replicas, all work per request, as a new user meets it: a learned timeout, alone or in the
/// recommended policy, fails none of the slow route's requests that least-request serves, and
/// its races of the slow route stop once they do not win.
#[test]
fn a_learned_timeout_never_fails_a_slow_route() {
    let text = r#"
name: slow-route
services:
  app:
    replicas: 2
    workers: 8
    routes:
      - { name: fast, match: { path: /fast }, weight: 0.96, work: { per_request: { dist: lognormal, median: 3ms, sigma: 0.5 } } }
      - { name: slow, match: { path: /slow }, weight: 0.04, work: { per_request: { dist: constant, value: 1200ms } } }
workload:
  target: app
  open: { rate: 100, arrival: poisson }
  warmup: 5s
  duration: 30s
variants:
  - name: least-request
    edges: { workload->app: { balancer: { kind: least-request } } }
  - name: adaptive
    edges: { workload->app: { balancer: { kind: least-request }, timeout: { kind: adaptive } } }
  - name: recommended
    edges:
      workload->app:
        balancer: { kind: prequal }
        outlier: {}
        timeout: { kind: adaptive }
        hedge: { kind: adaptive }
        retry: { max_attempts: 2 }
"#;
    let experiment = Experiment::parse(text, Path::new("slow-route.yaml")).unwrap_or_else(|e| panic!("{e}"));
    for seed in CHECKED {
        let runs = run(&experiment, seed, &[]);
        let plain = find(&runs, "default", "least-request");
        assert_eq!(plain.success_rate, 1.0, "{}", show(plain));
        for variant in ["adaptive", "recommended"] {
            let r = find(&runs, "default", variant);
            assert_eq!(r.success_rate, 1.0, "seed {seed}: {}", show(r));
            assert!(extra_attempts(r) <= 0.02, "seed {seed}: {}", show(r));
        }
    }
}

/// The recommended policy (and the adaptive timeout alone) beside least-request without
/// timeouts: `variants` for one edge, `edge` written as a file's `edges:` key.
fn policies(edge: &str, deadline: &str) -> String {
    format!(
        r#"
variants:
  - name: least-request
    edges: {{ {edge}: {{ balancer: {{ kind: least-request }}, deadline: {deadline} }} }}
  - name: adaptive
    edges:
      {edge}: {{ balancer: {{ kind: least-request }}, timeout: {{ kind: adaptive }}, retry: {{ max_attempts: 2 }}, deadline: {deadline} }}
  - name: recommended
    edges:
      {edge}:
        balancer: {{ kind: prequal }}
        outlier: {{}}
        timeout: {{ kind: adaptive }}
        hedge: {{ kind: adaptive }}
        retry: {{ max_attempts: 2 }}
        deadline: {deadline}
"#
    )
}

/// Conditions no example has, where a learned number used to fail requests that least-request
/// without timeouts serves: three tiers of exponential 250 ms work (per attempt, and per request
/// where no race can win) at 20 % and 50 % load under a 2 s deadline; a service whose latency
/// jumps 20-fold for 300 ms every 7 s; one of three replicas hanging for 10 s. In each, the
/// adaptive timeout and the recommended policy succeed at least as often as least-request
/// (− 0.1 point).
#[test]
fn a_learned_number_fails_no_request_on_conditions_outside_the_examples() {
    let tiers = |work: &str| {
        let tier = |name: &str, next: &str| {
            format!("  {name}:\n    replicas: 2\n    workers: 8\n    {work}\n    calls: [ {{ service: {next} }} ]\n")
        };
        format!(
            "name: three-tiers\nservices:\n{}{}  c:\n    replicas: 2\n    workers: 8\n    {work}\n\
             network: {{ delay: 100us }}\nworkload: {{ target: a, open: {{ rate: 12.8, arrival: poisson }}, warmup: 10s, duration: 60s }}\n\
             {}scenarios:\n  - name: load-20\n  - name: load-50\n    set: {{ workload.open.rate: 32 }}\n",
            tier("a", "b"),
            tier("b", "c"),
            policies("workload->a", "2s")
        )
    };
    let back = format!(
        r#"
name: one-back
services:
  front:
    workers: 64
    service_time: {{ dist: constant, value: 0s }}
    calls: [ {{ service: back }} ]
  back:
    replicas: 3
    workers: 8
    service_time: {{ dist: lognormal, median: 20ms, sigma: 0.5 }}
network: {{ delay: 100us }}
workload: {{ target: front, open: {{ rate: 100, arrival: poisson }}, warmup: 10s, duration: 60s }}
{}
scenarios:
  - name: spikes
    set:
      services.back.latency_model: {{ kind: spikes, base: 1, peak: 20, every: 7s, length: 300ms }}
  - name: hang
    set:
      services.back.faults: [ {{ kind: hang, replica: 0, from: 20s, until: 30s }} ]
"#,
        policies("front->back", "2s")
    );
    let files = [
        tiers("service_time: { dist: exponential, mean: 250ms }"),
        tiers("work: { per_request: { dist: exponential, mean: 250ms } }"),
        back,
    ];
    for text in files {
        let experiment = Experiment::parse(&text, Path::new("outside.yaml")).unwrap_or_else(|e| panic!("{e}\n{text}"));
        for seed in CHECKED {
            let runs = run(&experiment, seed, &[]);
            for scenario in experiment.scenario_names() {
                let plain = find(&runs, &scenario, "least-request");
                for variant in ["adaptive", "recommended"] {
                    let r = find(&runs, &scenario, variant);
                    let context = format!("{} seed {seed}\n{}\n{}", experiment.file.name, show(plain), show(r));
                    assert!(r.success_rate >= plain.success_rate - 0.001, "{context}");
                }
            }
        }
    }
}

/// Three replicas, one doing all its work 3 times slower, serving a quick route and a slow one
/// (5 %, about 0.5 s): Prequal's reports are each replica's median latency, which a slow route's
/// answers do not sway, so it steers both routes off the gray replica where least-request, which
/// counts requests only, does not. (With a moving average, each slow answer made a healthy replica
/// look slow for many answers after, and Prequal did no better than least-request: quick route's
/// p99 0.88–0.97 × least-request's, slow route's 0.85–1.09 ×.)
#[test]
fn a_slow_route_does_not_hide_a_gray_replica_from_prequal() {
    let text = r#"
name: gray-routes
services:
  app:
    replicas: 3
    workers: 8
    routes:
      - { name: quick, match: { path: /quick }, weight: 0.95, work: { per_request: { dist: lognormal, median: 5ms, sigma: 0.5 } } }
      - { name: slow, match: { path: /slow }, weight: 0.05, work: { per_request: { dist: lognormal, median: 500ms, sigma: 0.3 } } }
    faults: [ { kind: slow, replica: 2, fraction: 1, factor: 3 } ]
network: { delay: 100us }
workload: { target: app, open: { rate: 120, arrival: poisson }, warmup: 10s, duration: 120s }
variants:
  - name: least-request
    edges: { workload->app: { balancer: { kind: least-request } } }
  - name: prequal
    edges: { workload->app: { balancer: { kind: prequal } } }
scenarios:
  - name: rate-120
  - name: rate-200
    set: { workload.open.rate: 200 }
"#;
    let experiment = Experiment::parse(text, Path::new("gray-routes.yaml")).unwrap_or_else(|e| panic!("{e}"));
    let p99 = |r: &RunResult, route: &str| {
        r.routes.iter().find(|x| x.route == route).map(|x| x.latency_ms.p99).expect("the run has the route")
    };
    for seed in CHECKED {
        let runs = run(&experiment, seed, &[]);
        for scenario in ["rate-120", "rate-200"] {
            let (plain, prequal) = (find(&runs, scenario, "least-request"), find(&runs, scenario, "prequal"));
            let context = format!("seed {seed}\n{}\n{}", show(plain), show(prequal));
            assert!(p99(prequal, "quick") <= 0.75 * p99(plain, "quick"), "{context}");
            assert!(p99(prequal, "slow") <= 0.85 * p99(plain, "slow"), "{context}");
        }
    }
}
