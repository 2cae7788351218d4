//! The behaviour's draws: faults picked as the simulator picks them, reproducible by seed.

use super::*;
use crate::spec::{Options, Spec};
use std::path::Path;
use tailguard_model::Experiment;

fn spec(service_yaml: &str, seed: u64) -> Spec {
    let text = format!(
        "name: t\nservices:\n  svc:\n{service_yaml}\nworkload: {{ target: svc, open: {{ rate: 1 }}, duration: 10s }}\nvariants: [{{ name: v }}]\n"
    );
    let experiment = Experiment::parse(&text, Path::new("test.yaml")).expect("valid experiment");
    let options = Options { service: "svc".into(), seed: Some(seed), ..Options::default() };
    Spec::from_experiment(&experiment, &options).expect("valid options")
}

#[test]
fn every_nth_slow_fault_picks_ordinals_n_2n() {
    let spec = spec(
        "    service_time: { dist: constant, value: 1ms }\n    faults: [{ kind: slow, every: 3, service_time: { dist: constant, value: 50ms } }]",
        1,
    );
    let behaviour = Behaviour::new(&spec).expect("builds");
    let times: Vec<u64> =
        (1..=7).map(|n| behaviour.work_time(n, Duration::ZERO, None, None).as_millis() as u64).collect();
    assert_eq!(times, [1, 1, 50, 1, 1, 50, 1]);
}

#[test]
fn error_rate_one_errors_every_request_and_lost_wins() {
    let behaviour = Behaviour::new(&spec("    faults: [{ kind: error, rate: 1.0 }]", 1)).expect("builds");
    assert!((0..10).all(|_| behaviour.arrive(Duration::ZERO).fate == Fate::Error));
    let both = Behaviour::new(&spec("    faults: [{ kind: lost, fraction: 1.0 }, { kind: error, rate: 1.0 }]", 1))
        .expect("builds");
    assert_eq!(both.arrive(Duration::ZERO), Arrival { ordinal: 1, fate: Fate::Lost });
    assert_eq!(both.arrive(Duration::ZERO).ordinal, 2);
}

#[test]
fn same_seed_same_draws_other_seed_others() {
    let yaml = "    service_time: { dist: exponential, mean: 10ms }";
    let draws = |seed| {
        let b = Behaviour::new(&spec(yaml, seed)).expect("builds");
        (1..=20).map(|n| b.work_time(n, Duration::ZERO, None, None)).collect::<Vec<_>>()
    };
    assert_eq!(draws(7), draws(7));
    assert_ne!(draws(7), draws(8));
}

#[test]
fn down_covers_from_to_exclusive_for_its_replica() {
    let yaml = "    replicas: 2\n    faults: [{ kind: down, replica: 1, from: 1s, to: 2s }]";
    let mut s = spec(yaml, 1);
    let zero = Behaviour::new(&s).expect("builds");
    s.replica = 1;
    let one = Behaviour::new(&s).expect("builds");
    assert!(!zero.is_down(Duration::from_millis(1500)));
    assert!(!one.is_down(Duration::from_millis(999)));
    assert!(one.is_down(Duration::from_secs(1)));
    assert!(!one.is_down(Duration::from_secs(2)));
}

#[test]
fn latency_factor_scales_the_service_time() {
    let yaml = "    service_time: { dist: constant, value: 10ms }\n    latency_model: { kind: fast-increase, from: 1, to: 4, at: 1s, ramp: 0s }";
    let behaviour = Behaviour::new(&spec(yaml, 1)).expect("builds");
    assert_eq!(behaviour.work_time(1, Duration::ZERO, None, None), Duration::from_millis(10));
    assert_eq!(behaviour.work_time(2, Duration::from_secs(2), None, None), Duration::from_millis(40));
}

#[test]
fn a_replica_in_a_group_runs_the_group_s_fields_and_faults() {
    let yaml = "    replicas: 3\n    workers: 8\n    groups:\n      slow: { replicas: \"1-2\", workers: 2, faults: [{ kind: hang, from: 1s, until: 2s }] }";
    let mut s = spec(yaml, 1);
    assert_eq!((s.service.workers, Behaviour::new(&s).expect("builds").faults().len()), (8, 0));
    s = {
        let text = format!(
            "name: t\nservices:\n  svc:\n{yaml}\nworkload: {{ target: svc, open: {{ rate: 1 }}, duration: 10s }}\nvariants: [{{ name: v }}]\n"
        );
        let experiment = Experiment::parse(&text, Path::new("test.yaml")).expect("valid experiment");
        let options = Options { service: "svc".into(), replica: 2, ..Options::default() };
        Spec::from_experiment(&experiment, &options).expect("valid options")
    };
    let behaviour = Behaviour::new(&s).expect("builds");
    assert_eq!(s.service.workers, 2);
    assert_eq!(behaviour.faults().iter().map(ToString::to_string).collect::<Vec<_>>(), ["hang from 1s until 2s"]);
    assert_eq!(behaviour.resume_at(Duration::from_millis(1500)), Duration::from_secs(2));
}

#[test]
fn draws_are_the_simulator_s_for_the_same_seed() {
    // Two scenarios of one file: the simulator seeds each run's replicas with the run's
    // `stream_seed` (the seed mixed with the scenario's name), so serve must too, or its n-th
    // draw is not the simulator's n-th.
    let text = "name: t\nservices:\n  svc:\n    service_time: { dist: exponential, mean: 10ms }\n\
        workload: { target: svc, open: { rate: 1 }, duration: 10s }\nvariants: [{ name: v }]\n\
        scenarios: [{ name: calm }, { name: busy }]\n";
    let experiment = Experiment::parse(text, Path::new("test.yaml")).expect("valid experiment");
    for scenario in ["calm", "busy"] {
        let options =
            Options { service: "svc".into(), scenario: Some(scenario.into()), seed: Some(7), ..Options::default() };
        let spec = Spec::from_experiment(&experiment, &options).expect("valid options");
        let served = Behaviour::new(&spec).expect("builds");
        // What the simulator builds for replica 0 of service 0 of this run (crates/sim's
        // ServiceModel::build).
        let run = experiment.resolve(scenario, "v", false).expect("resolves");
        let mut simulated = ReplicaModel::new(&run.services[0], 0, 0, run.stream_seed(7), run.horizon(), &run.base_dir)
            .expect("builds");
        let served: Vec<Duration> = (1..=20).map(|n| served.work_time(n, Duration::ZERO, None, None)).collect();
        let simulated: Vec<Duration> = (1..=20).map(|n| simulated.work_time(n, Duration::ZERO)).collect();
        assert_eq!(served, simulated, "scenario {scenario}");
        // The run's seed is still the one printed.
        assert_eq!(spec.seed, 7);
    }
}
