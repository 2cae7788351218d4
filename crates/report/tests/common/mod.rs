//! A quick real simulation whose report has every kind of plot: two scenarios (3 replicas drawn
//! as lines, 12 as a heatmap) × three variants, two of them with a timeout policy; the names
//! carry characters HTML must escape.

use std::path::Path;
use tailguard_model::Experiment;
use tailguard_sim::{simulate, Options, Results};

pub const EXPERIMENT: &str = r#"
name: report <check>
services:
  front:
    workers: 0
    calls:
      - service: back
  back:
    replicas: 3
    workers: 2
    service_time: { dist: lognormal, median: 10ms, sigma: 0.6 }
network: { delay: 1ms }
workload: { target: front, open: { rate: 300, arrival: poisson }, warmup: 1s, duration: 6s }
variants:
  - name: round-robin
    edges:
      front->back: { balancer: { kind: round-robin } }
  - name: least <request>
    edges:
      front->back:
        balancer: { kind: least-request }
        timeout: { kind: fixed, value: 40ms }
        retry: { max_attempts: 2 }
  - name: adaptive & retry
    edges:
      front->back:
        balancer: { kind: least-request }
        timeout: { kind: adaptive, initial: 40ms }
        retry: { max_attempts: 2 }
scenarios:
  - name: three replicas
  - name: twelve replicas
    set: { services.back.replicas: 12 }
"#;

pub fn simulate_quick() -> Results {
    let experiment = Experiment::parse(EXPERIMENT, Path::new("report-check.yaml")).unwrap_or_else(|e| panic!("{e}"));
    simulate(&experiment, Options { seed: 3, threads: 2, ..Options::default() }, |_| {})
        .unwrap_or_else(|e| panic!("{e}"))
}
