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
