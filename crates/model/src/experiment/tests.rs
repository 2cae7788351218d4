use super::*;
use crate::schema::{AdmissionConfig, BalancerConfig, ClosedLoop, TimeoutConfig};
use crate::Dur;

const DEMO: &str = r#"
name: demo
seed: 7
services:
  frontend:
    replicas: 2
    workers: 4
    service_time: {dist: constant, value: 1ms}
    calls:
      - service: backend
        count: 2
  backend:
    replicas: 3
    service_time: {dist: exponential, mean: 5ms}
workload:
  target: frontend
  open: {rate: 100}
  duration: 10s
  warmup: 1s
variants:
  - name: baseline
  - name: bloc
    client: {balancer: {kind: bloc}}
    admission:
      backend: {kind: fixed, capacity: 10}
  - name: edge
    edges:
      frontend->backend: {timeout: {kind: fixed, value: 50ms}}
      workload->frontend: {balancer: {kind: random}}
    set:
      services.backend.workers: 2
scenarios:
  - name: normal
  - name: big
    set:
      services.backend.replicas: 6
quick:
  workload.duration: 1s
"#;

fn demo() -> Experiment {
    Experiment::parse(DEMO, Path::new("examples/demo.yaml")).unwrap()
}

/// The error `text` gives, with `from` replaced by `to` in the demo file.
fn error_with(from: &str, to: &str) -> String {
    assert!(DEMO.contains(from), "the demo has {from:?}");
    let text = DEMO.replacen(from, to, 1);
    Experiment::parse(&text, Path::new("examples/demo.yaml")).unwrap_err().to_string()
}

#[test]
fn lists_names_and_the_seed() {
    let e = demo();
    assert_eq!(e.scenario_names(), ["normal", "big"]);
    assert_eq!(e.variant_names(), ["baseline", "bloc", "edge"]);
    assert_eq!(e.seed(), Some(7));
    assert_eq!(e.base_dir(), Path::new("examples"));
}

#[test]
fn a_file_without_scenarios_has_one_named_default() {
    let text = DEMO.split("scenarios:").next().unwrap();
    let e = Experiment::parse(text, Path::new("demo.yaml")).unwrap();
    assert_eq!(e.scenario_names(), ["default"]);
    assert_eq!(e.base_dir(), Path::new("."));
    let run = e.resolve("default", "baseline", false).unwrap();
    assert_eq!(run.scenario, "default");
}

#[test]
fn the_baseline_is_the_file_as_written() {
    let run = demo().resolve("normal", "baseline", false).unwrap();
    assert_eq!((run.scenario.as_str(), run.variant.as_str()), ("normal", "baseline"));
    assert_eq!(run.services["backend"].replicas, 3);
    assert_eq!(run.services["frontend"].calls[0].count, 2);
    assert_eq!(run.services["frontend"].calls[0].policy.balancer, BalancerConfig::RoundRobin);
    assert_eq!(run.horizon(), Some(Duration::from_secs(11)));
    assert_eq!(run.base_dir, Path::new("examples"));
}

#[test]
fn quick_scenario_and_variant_apply_in_order() {
    let run = demo().resolve("big", "bloc", true).unwrap();
    assert_eq!(run.workload.duration, Some(Dur::from_millis(1000)), "quick");
    assert_eq!(run.services["backend"].replicas, 6, "scenario");
    // The variant's client policy goes on every call edge, not on the load generator's.
    assert_eq!(run.services["frontend"].calls[0].policy.balancer, BalancerConfig::Bloc(Default::default()));
    assert_eq!(run.workload.client.balancer, BalancerConfig::RoundRobin);
    assert_eq!(run.services["backend"].admission, AdmissionConfig::Fixed { capacity: 10 });
    assert_eq!(run.services["frontend"].admission, AdmissionConfig::None);
}

#[test]
fn edges_set_the_policy_of_one_edge() {
    let run = demo().resolve("normal", "edge", false).unwrap();
    let policy = &run.services["frontend"].calls[0].policy;
    assert_eq!(policy.timeout, TimeoutConfig::Fixed { value: std::time::Duration::from_millis(50) });
    assert_eq!(policy.balancer, BalancerConfig::RoundRobin);
    assert_eq!(run.workload.client.balancer, BalancerConfig::Random);
    assert_eq!(run.services["backend"].workers, 2, "the variant's set");
}

#[test]
fn unknown_scenarios_and_variants_are_named() {
    let e = demo();
    let err = e.resolve("huge", "baseline", false).unwrap_err().to_string();
    assert_eq!(err, "examples/demo.yaml: scenarios: no scenario named \"huge\"; expected one of: normal, big");
    let err = e.resolve("normal", "hedge", false).unwrap_err().to_string();
    assert_eq!(err, "examples/demo.yaml: variants: no variant named \"hedge\"; expected one of: baseline, bloc, edge");
}

#[test]
fn a_selection_keeps_file_order_and_names_what_is_missing() {
    let e = demo();
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(e.select(&[], &[]).unwrap(), (names(&["normal", "big"]), names(&["baseline", "bloc", "edge"])));
    let picked = e.select(&names(&["big"]), &names(&["edge", "baseline"])).unwrap();
    assert_eq!(picked, (names(&["big"]), names(&["baseline", "edge"])));
    let err = e.select(&[], &names(&["bloc", "hedge"])).unwrap_err().to_string();
    assert_eq!(err, "examples/demo.yaml: variants: no variant named \"hedge\"; expected one of: baseline, bloc, edge");
}

#[test]
fn a_negative_replica_count_is_refused_with_the_field_and_line() {
    let err = error_with("replicas: 3", "replicas: -1");
    assert_eq!(
        err,
        "examples/demo.yaml: services.backend.replicas: expected a positive integer, got -1 (line 13, column 15)"
    );
}

#[test]
fn a_bad_duration_unit_names_file_field_and_units() {
    let err = error_with("duration: 10s", "duration: 10 sec");
    assert!(err.starts_with("examples/demo.yaml: workload.duration: expected a duration with a unit"), "{err}");
    assert!(err.contains("unknown unit \"sec\"") && err.contains("(line 18, column 13)"), "{err}");
    let err = error_with("warmup: 1s", "warmup: 1000");
    assert!(err.starts_with("examples/demo.yaml: workload.warmup: expected a duration with a unit"), "{err}");
    assert!(err.contains("bare number 1000 (write 1000ms or 1000s)"), "{err}");
}

#[test]
fn an_unknown_field_lists_the_known_ones() {
    let err = error_with("workers: 4", "worker: 4");
    assert!(
        err.starts_with("examples/demo.yaml: services.frontend.worker: unknown field \"worker\"; expected one of: replicas, workers,"),
        "{err}"
    );
    assert!(err.ends_with("(line 7, column 5)"), "{err}");
}

#[test]
fn a_bad_distribution_field_is_found_inside_the_tagged_value() {
    let err = error_with("{dist: exponential, mean: 5ms}", "{dist: exponential, mean: 5}");
    assert!(err.starts_with("examples/demo.yaml: services.backend.service_time"), "{err}");
    assert!(err.contains("bare number 5"), "{err}");
    let err = error_with("{dist: exponential, mean: 5ms}", "{dist: gaussian, mean: 5ms}");
    assert!(
        err.contains("services.backend.service_time")
            && err.contains("unknown value \"gaussian\"; expected one of: constant, uniform"),
        "{err}"
    );
}

#[test]
fn a_missing_service_is_named_with_the_known_ones() {
    let err = error_with("- service: backend", "- service: backnd");
    assert_eq!(
        err,
        "examples/demo.yaml: services.frontend.calls.0.service: no service named \"backnd\"; expected one of: frontend, backend"
    );
    let err = error_with("target: frontend", "target: front");
    assert_eq!(
        err,
        "examples/demo.yaml: workload.target: no service named \"front\"; expected one of: frontend, backend"
    );
}

#[test]
fn a_call_cycle_is_shown() {
    let err = error_with(
        "    service_time: {dist: exponential, mean: 5ms}",
        "    service_time: {dist: exponential, mean: 5ms}\n    calls: [{service: frontend}]",
    );
    assert_eq!(
        err,
        "examples/demo.yaml: services.backend.calls.0.service: calls form a cycle (frontend -> backend -> frontend); expected calls that never lead back to their caller"
    );
}

#[test]
fn a_bad_override_path_is_reported_at_load() {
    let err = error_with("services.backend.replicas: 6", "services.backnd.replicas: 6");
    assert_eq!(
        err,
        "examples/demo.yaml: scenarios.1.set: no such path \"services.backnd.replicas\": services has no key \"backnd\"; it has: frontend, backend"
    );
    let err = error_with("workload.duration: 1s", "variants.0.name: x");
    assert!(
        err.starts_with("examples/demo.yaml: quick: override variants.0.name: overrides cannot change `variants`"),
        "{err}"
    );
}

#[test]
fn an_override_that_makes_the_file_invalid_is_reported_at_resolve_with_its_origin() {
    let text = DEMO.replace("services.backend.replicas: 6", "services.backend.replicas: 0");
    let e = Experiment::parse(&text, Path::new("examples/demo.yaml")).unwrap();
    let err = e.resolve("big", "baseline", false).unwrap_err().to_string();
    assert_eq!(
        err,
        "examples/demo.yaml: services.backend.replicas: expected a positive integer, got 0 (with scenario \"big\" and variant \"baseline\" applied)"
    );
}

#[test]
fn edge_and_admission_keys_must_name_real_edges_and_services() {
    let err = error_with("frontend->backend:", "backend->frontend:");
    assert_eq!(err, "examples/demo.yaml: variants.2.edges.backend->frontend: backend does not call \"frontend\"; it calls no service");
    let err = error_with("frontend->backend:", "frontend=>backend:");
    assert!(err.contains("variants.2.edges.frontend=>backend: expected a key of the form caller->callee"), "{err}");
    let err = error_with("      backend: {kind: fixed", "      db: {kind: fixed");
    assert!(err.starts_with("examples/demo.yaml: variants.1.admission.db: no service named \"db\""), "{err}");
}

#[test]
fn workload_needs_exactly_one_load_and_one_length() {
    let err = error_with("  open: {rate: 100}", "  open: {rate: 100}\n  closed: {clients: 4}");
    assert_eq!(err, "examples/demo.yaml: workload: expected exactly one of `open` (a rate) and `closed` (clients)");
    let err = error_with("  duration: 10s", "  requests: 1000\n  duration: 10s");
    assert_eq!(err, "examples/demo.yaml: workload: expected exactly one of `duration` and `requests`");
    let err = error_with("rate: 100", "rate: 0");
    assert_eq!(err, "examples/demo.yaml: workload.open.rate: expected requests per second > 0, got 0");
}

#[test]
fn names_must_be_unique_and_non_empty() {
    let err = error_with("- name: edge", "- name: bloc");
    assert_eq!(err, "examples/demo.yaml: variants.2.name: expected a unique name, got \"bloc\" a second time");
    let err = error_with("- name: normal", "- name: \"\"");
    assert_eq!(err, "examples/demo.yaml: scenarios.0.name: expected a non-empty name");
}

#[test]
fn fractions_and_policies_are_checked_with_their_paths() {
    let err = error_with("replicas: 3\n", "replicas: 3\n    faults: [{kind: error, rate: 1.5}]\n");
    assert_eq!(err, "examples/demo.yaml: services.backend.faults.0.rate: expected a fraction between 0 and 1, got 1.5");
    let err = error_with("client: {balancer: {kind: bloc}}", "client: {retry: {max_attempts: 0}}");
    assert_eq!(err, "examples/demo.yaml: variants.1.client.retry.max_attempts: expected a positive integer, got 0");
    let err =
        error_with("{timeout: {kind: fixed, value: 50ms}}", "{timeout: {kind: sequential, values: [20ms, 10ms]}}");
    assert_eq!(
        err,
        "examples/demo.yaml: variants.2.edges.frontend->backend.timeout.values.1: expected an increasing sequence (at least 20ms), got 10ms"
    );
}

#[test]
fn yaml_syntax_errors_have_a_location() {
    let err = Experiment::parse("name: [unclosed\n", Path::new("x.yaml")).unwrap_err();
    assert!(err.to_string().starts_with("x.yaml: invalid YAML: "), "{err}");
    assert!(err.location.is_some());
}

#[test]
fn load_reads_the_file_and_names_it_when_it_cannot() {
    let dir = std::env::temp_dir().join(format!("tailguard-exp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("demo.yaml");
    std::fs::write(&path, DEMO).unwrap();
    let e = Experiment::load(&path).unwrap();
    assert_eq!(e.origin(), path);
    assert_eq!(e.resolve("normal", "baseline", false).unwrap().base_dir, dir);
    // Empirical data is read relative to the experiment file, and its errors name both files.
    std::fs::write(dir.join("lat.txt"), "1ms\nfast\n").unwrap();
    let text = DEMO.replace("{dist: exponential, mean: 5ms}", "{dist: empirical, file: lat.txt}");
    std::fs::write(&path, text).unwrap();
    let err = Experiment::load(&path).unwrap_err().to_string();
    let expected = format!(
        "{}: services.backend.service_time.file: {}: line 2: expected a duration",
        path.display(),
        dir.join("lat.txt").display()
    );
    assert!(err.starts_with(&expected), "{err}");
    let err = Experiment::load(dir.join("none.yaml")).unwrap_err().to_string();
    assert!(err.contains("none.yaml: cannot read the experiment file"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn anchors_under_extension_keys_are_shared_and_merged() {
    let text = DEMO.replace(
        "variants:\n  - name: baseline",
        "x-policy: &p {balancer: {kind: least-request}, deadline: 1s}\nvariants:\n  - name: baseline\n    client: {<<: *p, deadline: 2s}",
    );
    let run = Experiment::parse(&text, Path::new("d.yaml")).unwrap().resolve("normal", "baseline", false).unwrap();
    let policy = &run.services["frontend"].calls[0].policy;
    assert_eq!(policy.balancer, BalancerConfig::LeastRequest);
    assert_eq!(policy.deadline, Some(Dur::from_millis(2000)));
    let err = Experiment::parse(&DEMO.replace("seed: 7", "seed: 7\nextra: 1"), Path::new("d.yaml")).unwrap_err();
    assert_eq!(err.path, "extra");
    assert!(err.message.starts_with("unknown field \"extra\"; expected one of: name, description, seed"), "{err}");
}

#[test]
fn a_scenario_switches_the_workload_between_open_and_closed_loop() {
    // The demo is open loop; a scenario that nulls `open` and sets `closed` makes it closed loop.
    let closed =
        "  - name: closed\n    set:\n      workload.open: null\n      workload.closed: {clients: 8, think_time: 5ms}\n";
    let text = DEMO.replace("quick:\n", &format!("{closed}quick:\n"));
    let run = Experiment::parse(&text, Path::new("examples/demo.yaml"))
        .unwrap()
        .resolve("closed", "baseline", false)
        .unwrap();
    assert_eq!(run.workload.open, None);
    assert_eq!(run.workload.closed, Some(ClosedLoop { clients: 8, think_time: Dur::from_millis(5) }));

    // And back: a closed-loop file made open loop by a scenario.
    let text = DEMO
        .replace("  open: {rate: 100}", "  closed: {clients: 4, think: 1ms}")
        .replace("services.backend.replicas: 6", "{workload.closed: null, workload.open: {rate: 50}}");
    let e = Experiment::parse(&text, Path::new("examples/demo.yaml")).unwrap();
    assert_eq!(
        e.file.workload.closed,
        Some(ClosedLoop { clients: 4, think_time: Dur::from_millis(1) }),
        "`think` still reads"
    );
    let run = e.resolve("big", "baseline", false).unwrap();
    assert_eq!((run.workload.open.map(|o| o.rate), run.workload.closed), (Some(50.0), None));
}

#[test]
fn a_scenario_that_leaves_both_loops_or_neither_is_refused_naming_it() {
    let both = DEMO.replace("services.backend.replicas: 6", "workload.closed: {clients: 8}");
    let err = Experiment::parse(&both, Path::new("examples/demo.yaml"))
        .unwrap()
        .resolve("big", "baseline", false)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "examples/demo.yaml: workload: expected exactly one of `open` (a rate) and `closed` (clients) (with scenario \"big\" and variant \"baseline\" applied)"
    );
    let neither = DEMO.replace("services.backend.replicas: 6", "workload.open: null");
    let err = Experiment::parse(&neither, Path::new("examples/demo.yaml"))
        .unwrap()
        .resolve("big", "baseline", false)
        .unwrap_err();
    assert!(
        err.to_string().contains("workload: expected exactly one of `open` (a rate) and `closed` (clients)"),
        "{err}"
    );
}

#[test]
fn groups_are_overridden_by_path_and_checked_against_the_resolved_replica_count() {
    // The group names replicas 3-5, which exist only in the `big` scenario (6 replicas).
    let text = DEMO.replace(
        "    service_time: {dist: exponential, mean: 5ms}\nworkload:",
        "    service_time: {dist: exponential, mean: 5ms}\n    groups:\n      slow: {replicas: \"3-5\", workers: 1}\nworkload:",
    );
    let text = text.replace("      services.backend.workers: 2", "      services.backend.groups.slow.workers: 3");
    let e = Experiment::parse(&text, Path::new("examples/demo.yaml")).unwrap();
    let big = e.resolve("big", "edge", false).unwrap();
    let backend = &big.services["backend"];
    assert_eq!(backend.groups["slow"].workers, Some(3), "the variant's set reaches into the group");
    assert_eq!((backend.for_replica(2).workers, backend.for_replica(3).workers), (0, 3));
    let err = e.resolve("normal", "edge", false).unwrap_err().to_string();
    assert_eq!(
        err,
        "examples/demo.yaml: services.backend.groups.slow.replicas: expected a replica index from 0 to 2 (the service has 3 replicas), got 3 (with scenario \"normal\" and variant \"edge\" applied)"
    );
    // A variant's admission is the whole service's, its groups' included.
    let text = text
        .replace("slow: {replicas: \"3-5\", workers: 1}", "slow: {replicas: 0, admission: {kind: fixed, capacity: 2}}");
    let e = Experiment::parse(&text, Path::new("examples/demo.yaml")).unwrap();
    let bloc = e.resolve("normal", "bloc", false).unwrap();
    assert_eq!(bloc.services["backend"].for_replica(0).admission, AdmissionConfig::Fixed { capacity: 10 });
    let baseline = e.resolve("normal", "baseline", false).unwrap();
    assert_eq!(baseline.services["backend"].for_replica(0).admission, AdmissionConfig::Fixed { capacity: 2 });
    assert_eq!(baseline.services["backend"].for_replica(1).admission, AdmissionConfig::None);
}

#[test]
fn a_run_s_stream_seed_mixes_in_the_scenario_not_the_variant() {
    let e = demo();
    let seed = |scenario, variant| e.resolve(scenario, variant, false).unwrap().stream_seed(7);
    // FNV-1a of the scenario's name over the seed: the simulator's every output depends on these
    // exact values, and serve and the lab's load generator must draw the same.
    assert_eq!(seed("normal", "baseline"), 13_350_063_073_432_686_513);
    assert_eq!(seed("big", "baseline"), 14_041_944_469_298_010_916);
    assert_eq!(seed("normal", "bloc"), seed("normal", "baseline"));
}
