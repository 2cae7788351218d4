//! `tailguard` as a user runs it: the binary, real files, exit codes and messages.

use std::path::PathBuf;
use std::process::{Command, Output};

fn tailguard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tailguard")).args(args).output().expect("the binary runs")
}

fn example(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name);
    path.to_string_lossy().into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tailguard-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

#[test]
fn sim_prints_a_table_and_writes_identical_json_for_the_same_seed() {
    let (a, b) = (scratch("a.json"), scratch("b.json"));
    for out in [&a, &b] {
        let run = tailguard(&[
            "sim",
            &example("speculative.yaml"),
            "--quick",
            "--seed",
            "9",
            "--json",
            out.to_str().unwrap(),
        ]);
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        let table = String::from_utf8_lossy(&run.stdout);
        assert!(table.contains("speculative") && table.contains("p99 ms"), "{table}");
    }
    let (a, b) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    assert_eq!(a, b, "same seed, same bytes");
    let json: serde_json::Value = serde_json::from_slice(&a).unwrap();
    assert_eq!(json["mode"], "sim");
    assert_eq!(json["seed"], 9);
    assert_eq!(json["runs"].as_array().unwrap().len(), 2);
}

#[test]
fn demo_sim_runs_the_embedded_default_in_the_simulator() {
    // `tailguard demo` (the lab, about 2 min) runs the same code as crates/cli/tests/lab.rs.
    let run = tailguard(&["demo", "--sim"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let table = String::from_utf8_lossy(&run.stdout);
    assert!(table.contains("40x10") && table.contains("bloc") && table.contains("oracle"), "{table}");
}

#[test]
fn a_bad_file_is_an_error_naming_the_file_and_the_field() {
    let bad = scratch("bad.yaml");
    let text =
        std::fs::read_to_string(example("case-for-timeouts.yaml")).unwrap().replace("value: 100ms", "value: 100");
    std::fs::write(&bad, text).unwrap();
    let run = tailguard(&["sim", bad.to_str().unwrap()]);
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("bad.yaml") && err.contains("services.server2.service_time"), "{err}");
    let missing = tailguard(&["sim", "/nonexistent/file.yaml"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/file.yaml"));
}

#[test]
fn a_bad_flag_is_refused_with_usage() {
    let run = tailguard(&["sim", &example("bloc.yaml"), "--seed", "many"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("--seed"));
}
