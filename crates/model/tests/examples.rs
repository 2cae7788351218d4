//! Every example experiment loads, and every scenario × variant of it resolves, quick or not.

use std::path::Path;
use tailguard_model::Experiment;

#[test]
fn every_example_resolves() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let experiment = Experiment::load(&path).unwrap_or_else(|e| panic!("{e}"));
            for scenario in experiment.scenario_names() {
                for variant in experiment.variant_names() {
                    for quick in [false, true] {
                        experiment.resolve(&scenario, &variant, quick).unwrap_or_else(|e| panic!("{e}"));
                    }
                }
            }
            seen += 1;
        }
    }
    assert!(seen > 0, "no examples in {}", dir.display());
}

#[test]
fn outlier_ejection_is_tailguards_default_and_not_a_peers() {
    use tailguard_model::schema::{OutlierConfig, OutlierSetting};
    let text = r#"
name: eject
services:
  front:
    calls:
      - service: back
  back:
    replicas: 3
    service_time: { dist: constant, value: 1ms }
workload: { target: front, open: { rate: 10 }, duration: 1s }
variants:
  - name: tailguard
  - name: off
    client: { outlier: off }
  - name: haproxy
    sidecar: haproxy
  - name: haproxy-eject
    sidecar: haproxy
    client: { outlier: { consecutive_failures: 3, latency_factor: null } }
"#;
    let experiment = Experiment::parse(text, Path::new("eject.yaml")).unwrap();
    let edge = |variant: &str| {
        let run = experiment.resolve("default", variant, false).unwrap_or_else(|e| panic!("{e}"));
        (run.services["front"].calls[0].policy.outlier, run.workload.client.outlier)
    };
    // Left out: failures in a row eject, latency does not; the plain load generator ejects nothing.
    let (tailguard, generator) = edge("tailguard");
    assert_eq!(tailguard.config(), Some(OutlierConfig { latency_factor: None, ..OutlierConfig::default() }));
    assert_eq!(generator, OutlierSetting::Off);
    assert_eq!(edge("off").0, OutlierSetting::Off);
    // A peer gets none unless its variant writes it.
    assert_eq!(edge("haproxy").0, OutlierSetting::Off);
    let written = OutlierConfig { consecutive_failures: 3, latency_factor: None, ..OutlierConfig::default() };
    assert_eq!(edge("haproxy-eject").0, OutlierSetting::On(written));
    // A word that is neither `off` nor `default` is an error naming what it expects.
    let bad = text.replace("client: { outlier: off }", "client: { outlier: of }");
    let error = Experiment::parse(&bad, Path::new("eject.yaml")).unwrap_err().to_string();
    assert!(error.contains("outlier") && error.contains("`off`"), "{error}");
}
