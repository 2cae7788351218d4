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

/// `tailguard sim` on the speculative example (quick), writing its JSON and report.
fn sim_with_report(json: &std::path::Path, html: &std::path::Path) -> Output {
    tailguard(&[
        "sim",
        &example("speculative.yaml"),
        "--quick",
        "--json",
        json.to_str().unwrap(),
        "--report",
        html.to_str().unwrap(),
    ])
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
fn sim_runs_only_the_scenarios_and_variants_named() {
    let out = scratch("picked.json");
    let bloc = example("bloc.yaml");
    let args = ["sim", &bloc, "--quick", "--scenario", "40x10", "--variant", "oracle", "--variant", "bloc"];
    let run = tailguard(&[&args[..], &["--json", out.to_str().unwrap()]].concat());
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap();
    let runs: Vec<(&str, &str)> = json["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["scenario"].as_str().unwrap(), r["variant"].as_str().unwrap()))
        .collect();
    // In file order, whatever the order on the command line.
    assert_eq!(runs, [("40x10", "bloc"), ("40x10", "oracle")]);

    // Refused before the outputs' folders are made.
    let unwritten = scratch("unknown").join("picked.json");
    let unknown = tailguard(&["sim", &bloc, "--scenario", "4x10", "--json", unwritten.to_str().unwrap()]);
    assert!(!unknown.status.success());
    let err = String::from_utf8_lossy(&unknown.stderr);
    assert!(err.contains("bloc.yaml: scenarios: no scenario named \"4x10\"; expected one of: 1x10, 40x10"), "{err}");
    assert!(!scratch("unknown").exists(), "{err}");
}

#[test]
fn demo_sim_runs_the_demo_s_selection_in_the_simulator_and_prints_one_short_table() {
    // `tailguard demo` (the lab, about 3 min) runs the same selection; the lab's own code is
    // tested in crates/cli/tests/lab.rs and lab_real.rs (the peers).
    let out = scratch("demo-sim");
    let _ = std::fs::remove_dir_all(&out);
    let run = tailguard(&["demo", "--sim", "--out", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    let same = "tailguard sim examples/peers.yaml --quick --scenario speculative --scenario failing-replica \
                --variant tailguard --variant haproxy --variant nginx";
    assert!(err.contains(same), "{err}");
    let table = String::from_utf8_lossy(&run.stdout);
    let lines: Vec<&str> = table.lines().filter(|l| !l.is_empty()).collect();
    let cells = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(cells(lines[0]), ["scenario", "variant", "p50", "ms", "p99", "ms", "p99.9", "ms", "success"], "{table}");
    let rows: Vec<(String, String)> = lines[1..].iter().map(|l| (cells(l)[0].clone(), cells(l)[1].clone())).collect();
    let expected: Vec<(String, String)> = ["speculative", "failing-replica"]
        .iter()
        .flat_map(|s| ["tailguard", "haproxy", "nginx"].map(|v| (s.to_string(), v.to_string())))
        .collect();
    assert_eq!(rows, expected, "{table}");
    // Its results and report, where it said.
    assert!(out.join("results.json").is_file() && out.join("report.html").is_file());
    assert!(err.contains(&format!("report written to {}", out.join("report.html").display())), "{err}");
    std::fs::remove_dir_all(&out).unwrap();
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
fn output_paths_get_their_missing_folders_and_a_directory_is_refused_before_simulating() {
    let dir = scratch("outputs");
    let _ = std::fs::remove_dir_all(&dir);
    let (json, html) = (dir.join("new/deeper/spec.json"), dir.join("html/spec.html"));
    let run = sim_with_report(&json, &html);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(json.is_file() && html.is_file());
    let again = dir.join("again/report.html");
    let run = tailguard(&["report", json.to_str().unwrap(), "--out", again.to_str().unwrap()]);
    assert!(run.status.success() && again.is_file(), "{}", String::from_utf8_lossy(&run.stderr));

    // Refused up front: nothing was simulated, so no table was printed.
    let run = tailguard(&["sim", &example("bloc.yaml"), "--report", dir.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success() && err.contains("is a directory, expected a file path"), "{err}");
    assert!(run.stdout.is_empty() && !err.contains("simulating"), "{err}");
    let under_a_file = json.join("r.json");
    let run = tailguard(&["sim", &example("bloc.yaml"), "--json", under_a_file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains(&format!("--json: cannot create the folder {}", json.display())), "{err}");
    assert!(run.stdout.is_empty() && !err.contains("simulating"), "{err}");
}

#[test]
fn demo_refuses_an_out_holding_earlier_results() {
    let out = scratch("demo-earlier");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("results.json"), "{}").unwrap();
    let run = tailguard(&["demo", "--sim", "--out", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success() && err.contains("holds the results of an earlier run"), "{err}");
    assert_eq!(std::fs::read_to_string(out.join("results.json")).unwrap(), "{}");
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn a_bad_flag_is_refused_with_usage() {
    let run = tailguard(&["sim", &example("bloc.yaml"), "--seed", "many"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("--seed"));
}

#[test]
fn lab_calibrate_refuses_an_unknown_sidecar_and_a_bad_rate_before_writing_anything() {
    let out = scratch("calibrate").join("calibration.yaml");
    let cases: [(&[&str], &str); 2] = [
        (&["--sidecar", "nope"], "--sidecar nope: expected one of the sidecars installed here: tailguard"),
        (&["--rate", "0"], "--rate 0: expected a positive number of requests per second"),
    ];
    for (flags, expected) in cases {
        let run = tailguard(&[&["lab", "calibrate", "--out", out.to_str().unwrap()], flags].concat());
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success() && err.contains(expected), "{err}");
        assert!(!scratch("calibrate").exists(), "{err}");
    }
}

#[test]
fn sim_traces_writes_jaeger_json_with_a_sample_per_run() {
    let out = scratch("traces.json");
    let run = tailguard(&[
        "sim",
        &example("speculative.yaml"),
        "--quick",
        "--traces",
        out.to_str().unwrap(),
        "--trace-sample",
        "3",
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(String::from_utf8_lossy(&run.stderr).contains("6 traces written"));
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let traces = json["data"].as_array().unwrap();
    assert_eq!(traces.len(), 6, "3 per run, 2 runs");
    let t = &traces[0];
    let root = t["spans"].as_array().unwrap().iter().find(|s| s["references"] == serde_json::json!([])).unwrap();
    assert_eq!(t["processes"][root["processID"].as_str().unwrap()]["serviceName"], "client");
    let missing = tailguard(&["sim", &example("speculative.yaml"), "--trace-sample", "3"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("--traces"));
}

#[test]
fn collect_refuses_a_busy_address() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let run = tailguard(&["collect", "--listen", &addr, "--out", scratch("never.json").to_str().unwrap()]);
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains(&format!("cannot listen on {addr}")), "{stderr}");
}

#[test]
fn sim_writes_a_report_and_report_renders_the_json_beside_it() {
    let dir = scratch("report");
    std::fs::create_dir_all(&dir).unwrap();
    let (json, html) = (dir.join("spec.json"), dir.join("sim.html"));
    let run = sim_with_report(&json, &html);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let from_sim = std::fs::read_to_string(&html).unwrap();
    assert!(from_sim.starts_with("<!DOCTYPE html>") && from_sim.contains("<svg"));
    // Without --out, the report goes beside the JSON; it is the same page.
    let run = tailguard(&["report", json.to_str().unwrap()]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(std::fs::read_to_string(dir.join("report.html")).unwrap(), from_sim);
}

#[test]
fn report_names_the_file_and_the_problem_of_a_malformed_json() {
    let bad = scratch("bad-results.json");
    std::fs::write(&bad, r#"{"experiment": "x", "mode": "sim", "seed": 1, "runs": [{"scenario": "a"}]}"#).unwrap();
    let run = tailguard(&["report", bad.to_str().unwrap()]);
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("bad-results.json is not a tailguard results JSON"), "{err}");
    assert!(err.contains("runs[0]: missing field `variant`"), "{err}");
}

#[test]
fn load_fails_when_every_request_failed() {
    // A port nobody listens on: every request fails to connect.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let out = tailguard(&["load", &format!("http://{closed}/"), "--requests", "5", "--clients", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("every one of the 5 requests failed"), "{stderr}");
}

/// `tailguard ARGS` with `stdin` piped in (a command that exits before reading it all, as one
/// refusing a bad flag does, closes the pipe: that is not the test's failure).
fn tailguard_with_stdin(args: &[&str], stdin: &str) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_tailguard"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    match child.stdin.take().unwrap().write_all(stdin.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => panic!("writing stdin: {e}"),
        _ => {}
    }
    child.wait_with_output().unwrap()
}

#[test]
fn inject_reads_stdin_writes_stdout_and_names_a_bad_document() {
    let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers: [{name: web, image: web, ports: [{containerPort: 8080}]}]\n";
    let out = tailguard_with_stdin(&["inject", "--image", "example.com/tailguard:test"], deployment);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let options = tailguard_k8s::InjectOptions { image: "example.com/tailguard:test".into(), ..Default::default() };
    assert_eq!(stdout, tailguard_k8s::inject(deployment, "-", &options).unwrap());
    assert!(stdout.contains("image: example.com/tailguard:test") && stdout.contains("name: web-tailguard"));
    // Injected again (stdin named `-`): unchanged.
    let again = tailguard_with_stdin(&["inject", "-", "--image", "example.com/tailguard:test"], &stdout);
    assert_eq!(String::from_utf8(again.stdout).unwrap(), stdout);

    let bad = tailguard_with_stdin(&["inject"], "kind: Service\n---\nkind: Deployment\nmetadata: {name: [\n");
    assert_eq!(bad.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.starts_with("error: -: document 2: "), "{stderr}");

    let proxy = scratch("wrong-port.yaml");
    std::fs::write(&proxy, "egress: {listen: 127.0.0.1:5000, upstreams: {}}\nadmin: {listen: 0.0.0.0:9990}\n").unwrap();
    let wrong = tailguard_with_stdin(&["inject", "--config", proxy.to_str().unwrap()], deployment);
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(stderr.contains("egress.listen: expected port 4140"), "{stderr}");
}

#[test]
fn lab_render_k8s_writes_an_experiment_as_manifests() {
    let out = tailguard(&["lab", "render", "--k8s", &example("triangle.yaml"), "--variant", "adaptive", "--quick"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.matches("kind: StatefulSet").count(), 7, "one per service of the triangle");
    assert_eq!(stdout.matches("kind: Job").count(), 1);
    assert!(stdout.contains("- adaptive\n") && stdout.contains("- --quick\n"), "{stdout}");
    let missing = tailguard(&["lab", "render", &example("triangle.yaml")]);
    assert!(!missing.status.success() && String::from_utf8_lossy(&missing.stderr).contains("--k8s"));
    let unknown = tailguard(&["lab", "render", "--k8s", &example("triangle.yaml"), "--variant", "nope"]);
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(!unknown.status.success() && stderr.contains("nope"), "{stderr}");
}

#[test]
fn proxy_check_reads_the_file_and_its_tls_files_and_serves_nothing() {
    // A listener address in use: checking binds nothing, so it is no error.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap();
    let good = scratch("check-good.yaml");
    std::fs::write(&good, format!("egress: {{listen: {addr}, upstreams: {{app: {{endpoints: [127.0.0.1:9]}}}}}}\n"))
        .unwrap();
    let run = tailguard(&["proxy", "--config", good.to_str().unwrap(), "--check"]);
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(String::from_utf8_lossy(&run.stdout), format!("{}: ok\n", good.display()));
    let missing = scratch("no-such-cert.pem");
    let bad = scratch("check-bad.yaml");
    let text = format!(
        "ingress: {{listen: {addr}, app: 127.0.0.1:9, tls: {{cert: {}, key: {}}}}}\n",
        missing.display(),
        missing.display()
    );
    std::fs::write(&bad, text).unwrap();
    let run = tailguard(&["proxy", "--config", bad.to_str().unwrap(), "--check"]);
    assert_eq!(run.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("ingress.tls.cert") && stderr.contains("no-such-cert.pem"), "{stderr}");
}
