//! Endpoints without a sidecar and load carried on responses: Prequal over a mixed set, and the
//! probes it needs.

use crate::common;

use tailguard_sim::{simulate, Options};

/// Prints the results JSON of `MESH_FILE` (an example's name) for the variants in `MESH_VARIANTS`
/// (comma-separated) on the seeds in `MESH_SEEDS`, one file per seed `MESH_OUT-sSEED.json`: what
/// the numbers in docs/policies.md were read from.
#[test]
#[ignore = "a printer, not a test: MESH_FILE=balancing.yaml MESH_SEEDS=1,2 MESH_OUT=/tmp/x cargo test ... -- --ignored"]
fn print_results() {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("set {name}"));
    let experiment = common::example(&var("MESH_FILE"));
    let variants = var("MESH_VARIANTS").split(',').map(str::to_string).collect();
    for seed in var("MESH_SEEDS").split(',').map(|s| s.parse::<u64>().expect("a seed")) {
        let options = Options { seed, threads: 2, variants: Vec::clone(&variants), ..Options::default() };
        let results = simulate(&experiment, options, |_| {}).unwrap_or_else(|e| panic!("{e}"));
        let out = format!("{}-s{seed}.json", var("MESH_OUT"));
        std::fs::write(&out, serde_json::to_string(&results).expect("serialisable")).expect("writable");
    }
}

/// Ten frontends calling eight backends of 20 ms (one worker each) at 70 % of their capacity: all
/// with tailguard's sidecar, half without (a mixed set), and none.
const MESH: &str = r#"
name: mesh
seed: 33
services:
  frontend:
    replicas: 10
    workers: 0
    calls:
      - service: backend
  backend:
    replicas: 8
    workers: 1
    service_time: { dist: exponential, mean: 20ms }
network:
  delay: 250us
workload:
  target: frontend
  open: { rate: 280 }
  warmup: 5s
  duration: 60s
variants:
  - name: prequal
    edges:
      frontend->backend: { balancer: { kind: prequal } }
scenarios:
  - name: sidecars
  - name: mixed
    set: { services.backend.groups: { outside: { replicas: "0-3", sidecar: false } } }
  - name: plain
    set: { services.backend.sidecar: false }
"#;

fn mesh(seed: u64) -> tailguard_sim::Results {
    let experiment = tailguard_model::Experiment::parse(MESH, std::path::Path::new("mesh.yaml")).unwrap();
    simulate(&experiment, Options { seed, threads: 2, ..Options::default() }, |_| {}).unwrap()
}

#[test]
fn prequal_over_a_mixed_set_probes_only_the_sidecars_and_gains_from_them() {
    for seed in [1, 2] {
        let results = mesh(seed);
        let [sidecars, mixed, plain] =
            ["sidecars", "mixed", "plain"].map(|s| common::get(&results, s, "prequal").clone());
        let p99 = |r: &tailguard_sim::RunResult| r.latency_ms.p99;
        let probes = |r: &tailguard_sim::RunResult| r.probes_per_request.expect("prequal probes");
        let show = format!(
            "seed {seed}: p99 {} {} {} ms, probes {} {} {}",
            p99(&sidecars),
            p99(&mixed),
            p99(&plain),
            probes(&sidecars),
            probes(&mixed),
            probes(&plain)
        );
        assert!(sidecars.success_rate == 1.0 && mixed.success_rate == 1.0 && plain.success_rate == 1.0, "{show}");
        // The replicas outside the mesh are ranked from each frontend's own view, which sees
        // a tenth of their load: the fewer sidecars, the higher the p99.
        assert!(p99(&sidecars) < p99(&mixed) && p99(&mixed) < p99(&plain), "{show}");
        eprintln!("{show}");
        // Nothing is probed that has no sidecar, and fewer probes go out the more the set has.
        assert_eq!(probes(&plain), 0.0, "{show}");
        assert!(probes(&mixed) < probes(&sidecars), "{show}");
    }
}
