//! Real programs (nginx, redis, memcached nodes) are the lab's: the simulator refuses them,
//! naming the service.

use std::path::Path;
use tailguard_model::Experiment;
use tailguard_sim::{run_one, simulate, Options, SimError};

const FILE: &str = "name: t\nservices:\n  front:\n    calls: [{service: cache}]\n  cache:\n    kind: redis\n    config: {hz: 20}\nworkload: {target: front, open: {rate: 10}, duration: 1s}\nvariants: [{name: v}]\n";

#[test]
fn a_real_service_is_an_error_naming_it() {
    let experiment = Experiment::parse(FILE, Path::new("t.yaml")).unwrap();
    let options = Options::default();
    let err = simulate(&experiment, options, |_| {}).unwrap_err();
    assert!(matches!(&err, SimError::RealService { service, kind: "redis" } if service == "cache"), "{err}");
    assert!(err.to_string().contains("tailguard lab run"), "{err}");
    let run = experiment.resolve("default", "v", false).unwrap();
    assert!(matches!(run_one(&run, 1), Err(SimError::RealService { .. })));
}
