//! The lab on real processes: `tailguard serve` and `tailguard proxy` started from this very
//! binary, on loopback, for the two-service fixture (a few seconds per run).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;
use tailguard_lab::{Cancel, LabError, Observer, Options, Plan, Results, Tracing};
use tailguard_model::Experiment;
use tailguard_trace::{jaeger, Collector, Trace};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn options(test: &str, file: &Path) -> Options {
    let out = std::env::temp_dir().join(format!("tailguard-lab-test-{test}-{}", std::process::id()));
    Options::new(PathBuf::from(env!("CARGO_BIN_EXE_tailguard")), file.to_path_buf(), out, 9)
}

/// Records every PID the lab starts, and can cancel the run once its processes are ready.
#[derive(Default)]
struct Pids {
    pids: Mutex<Vec<(String, u32)>>,
    cancel_when_ready: Option<Cancel>,
}

impl Observer for Pids {
    fn spawned(&self, name: &str, pid: u32) {
        self.pids.lock().unwrap().push((name.to_string(), pid));
    }
    fn ready(&self, _plan: &Plan) {
        if let Some(cancel) = &self.cancel_when_ready {
            cancel.cancel();
        }
    }
}

impl Pids {
    /// Every recorded process is gone (reaped: no /proc entry, not even a zombie).
    fn assert_all_gone(&self, expected: usize) {
        let pids = self.pids.lock().unwrap();
        assert_eq!(pids.len(), expected, "{pids:?}");
        for (name, pid) in pids.iter() {
            assert!(!Path::new(&format!("/proc/{pid}")).exists(), "{name} (pid {pid}) outlived the lab");
        }
    }
}

fn run(test: &str, file: &Path, observer: &Pids, tweak: impl FnOnce(&mut Options)) -> Result<Results, LabError> {
    run_and_look(test, file, observer, tweak, |_| {})
}

/// [`run`], with a look at the output directory (`look` gets the options) before it is removed.
fn run_and_look(
    test: &str,
    file: &Path,
    observer: &Pids,
    tweak: impl FnOnce(&mut Options),
    look: impl FnOnce(&Options),
) -> Result<Results, LabError> {
    let experiment = Experiment::load(fixture("lab-two-tier.yaml")).unwrap();
    let mut options = options(test, file);
    tweak(&mut options);
    let result = tailguard_lab::run(&experiment, &options, observer);
    look(&options);
    let _ = std::fs::remove_dir_all(&options.out);
    result
}

/// One request of the fixture's `plain` variant: front's ingress (the root: the load generator
/// sends no `traceparent`) → its call to back → one attempt → back's ingress.
fn assert_two_tier_tree(trace: &Trace) {
    let kind = |s| Trace::tag(s, "span.kind").and_then(|v| v.as_str());
    let roots: Vec<_> = trace.roots().collect();
    let [root] = roots[..] else { panic!("one root expected: {trace:?}") };
    assert_eq!((trace.service(root), root.operation.as_str(), kind(root)), ("front", "ingress", Some("server")));
    // The root covers back's 20 ms of work.
    assert!(root.duration_us >= 20_000, "{root:?}");
    let [call] = trace.children(root.id)[..] else { panic!("one call expected: {trace:?}") };
    assert_eq!((trace.service(call), call.operation.as_str()), ("front", "egress back"));
    let [attempt] = trace.children(call.id)[..] else { panic!("one attempt expected: {trace:?}") };
    assert_eq!(
        (trace.service(attempt), attempt.operation.as_str(), kind(attempt)),
        ("front", "attempt", Some("client"))
    );
    let [visit] = trace.children(attempt.id)[..] else { panic!("one visit expected: {trace:?}") };
    assert_eq!((trace.service(visit), visit.operation.as_str(), kind(visit)), ("back", "ingress", Some("server")));
    assert!(trace.children(visit.id).is_empty() && trace.spans.len() == 4, "{trace:?}");
}

#[test]
fn the_two_tier_fixture_runs_with_exact_counts_and_the_429_path() {
    let pids = Pids::default();
    let results = run("counts", &fixture("lab-two-tier.yaml"), &pids, |_| {}).unwrap();
    // Two runs × (front + 2 backends) × (serve + sidecar); no workload sidecar (plain round robin).
    pids.assert_all_gone(12);
    assert_eq!((results.experiment.as_str(), results.mode.as_str(), results.seed), ("lab-two-tier", "lab", 9));
    let [plain, capped] = &results.runs[..] else { panic!("two runs expected: {results:?}") };
    assert_eq!((plain.variant.as_str(), capped.variant.as_str()), ("plain", "capped"));
    for r in [plain, capped] {
        assert_eq!((r.requests, r.succeeded, r.failed, r.rejected, r.timed_out), (120, 120, 0, 0, 0), "{r:?}");
        assert_eq!(r.success_rate, 1.0);
        // Floors that hold on any schedule: every request does back's 20 ms of work (less the
        // histogram's bucket floor), and four closed-loop clients on two single-worker backends
        // of 20 ms make a mean of at least 40 ms (Little's law), less what the measured window's
        // edges cut off (a few requests of 120). The p50 need not reach 40 ms: round robin and
        // random leave a backend idle now and then. The ceiling leaves room for a loaded machine
        // (scripts/flaky.sh with both cores busy: docs/measured.md).
        let l = &r.latency_ms;
        assert!(l.p10 >= 19.5 && l.mean >= 36.0 && l.p50 < 150.0, "{l:?}");
        assert!(r.throughput_rps > 0.0 && r.duration_s > 0.0);
        assert!(!r.cdf.is_empty() && r.cdf.last().unwrap()[1] == 1.0);
        assert!(r.cdf.windows(2).all(|w| w[0][0] < w[1][0] && w[0][1] < w[1][1]), "{:?}", r.cdf);
    }
    // Every serve and sidecar's resident memory was read from /proc while it ran: a few MB, far
    // from zero and from a runaway; the serve entries carry the requests their replica held.
    for r in [plain, capped] {
        let mut seen: Vec<(&str, u32, &str)> =
            r.memory.iter().map(|m| (m.service.as_str(), m.replica, m.role.as_str())).collect();
        seen.sort();
        let roles = |s, i| [(s, i, "service"), (s, i, "sidecar")];
        let expected: Vec<_> = [roles("back", 0), roles("back", 1), roles("front", 0)].concat();
        assert_eq!(seen, expected, "{:?}", r.memory);
        for m in &r.memory {
            assert!(m.mean_rss_mb > 1.0 && m.peak_rss_mb >= m.mean_rss_mb && m.peak_rss_mb < 1024.0, "{m:?}");
            assert_eq!(m.peak_in_flight.is_some(), m.role == "service", "{m:?}");
            assert!(m.peak_in_flight.unwrap_or(0) <= 4, "four clients: {m:?}");
        }
    }
    // Without admission nothing is refused, so nothing is retried.
    assert_eq!(plain.extra_load, 0.0);
    assert!(plain.attempts >= 100, "{plain:?}");
    // With room for one waiting request per backend, a third arrival gets 429 and is retried at
    // once on the other backend: extra attempts, and still every request answered.
    assert!(capped.extra_load > 0.0 && capped.attempts > plain.attempts / 2, "{capped:?}");
}

#[test]
fn results_json_has_every_field_the_schema_requires() {
    let pids = Pids::default();
    let tweak = |o: &mut Options| {
        o.variants = vec!["plain".into()];
        o.tracing = Tracing::Off;
    };
    let look = |o: &Options| {
        let yaml = std::fs::read_to_string(o.out.join("runs/default/plain/sidecar-front-0.yaml")).unwrap();
        assert!(!yaml.contains("tracing") && !o.out.join("traces.json").exists(), "{yaml}");
    };
    let results = run_and_look("schema", &fixture("lab-two-tier.yaml"), &pids, tweak, look).unwrap();
    pids.assert_all_gone(6);
    let json = serde_json::to_value(&results).unwrap();
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../../../docs/results.schema.json")).expect("valid schema");
    let required = |v: &serde_json::Value| -> Vec<String> {
        v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
    };
    for key in required(&schema["required"]) {
        assert!(json.get(&key).is_some(), "results lack {key}");
    }
    let run = &json["runs"][0];
    for key in required(&schema["$defs"]["run"]["required"]) {
        assert!(run.get(&key).is_some(), "a run lacks {key}");
    }
    for key in required(&schema["$defs"]["run"]["properties"]["latency_ms"]["required"]) {
        assert!(run["latency_ms"][&key].is_number(), "latency_ms lacks {key}");
    }
    assert_eq!(json["mode"], "lab");
}

#[test]
fn the_lab_collects_one_trace_per_request_into_traces_json() {
    let pids = Pids::default();
    let mut traces = Vec::new();
    // No warm-up: the load generator sends exactly the 120 measured requests.
    let tweak = |o: &mut Options| {
        o.variants = vec!["plain".into()];
        o.warmup = Some(Duration::ZERO);
    };
    let look = |o: &Options| {
        let Tracing::Collect { out, ratio, per_run } = &o.tracing else { panic!("collecting is the default: {o:?}") };
        assert_eq!((out, *ratio, *per_run), (&o.out.join("traces.json"), 1.0, 200));
        let yaml = std::fs::read_to_string(o.out.join("runs/default/plain/sidecar-back-0.yaml")).unwrap();
        assert!(yaml.contains("service_name: back"), "{yaml}");
        traces = jaeger::read_file(out).unwrap();
    };
    let results = run_and_look("traces", &fixture("lab-two-tier.yaml"), &pids, tweak, look).unwrap();
    pids.assert_all_gone(6);
    assert_eq!(results.runs[0].requests, 120);
    // Every request, its spans all flushed by the sidecars' SIGTERM exit, with unique trace ids.
    assert_eq!(traces.len(), 120);
    let mut ids: Vec<u128> = traces.iter().map(|t| t.id).collect();
    ids.dedup();
    assert_eq!(ids.len(), 120);
    for trace in &traces {
        assert_two_tier_tree(trace);
        assert_tagged_with_the_run(trace);
    }
}

/// Every process carries its run's tags exactly once, as `tailguard sim --traces` tags its processes.
fn assert_tagged_with_the_run(trace: &Trace) {
    for p in &trace.processes {
        let tag = |k| p.tags.iter().filter(|t| t.key == k).map(|t| t.value.as_str()).collect::<Vec<_>>();
        assert_eq!((tag("scenario"), tag("variant")), (vec![Some("default")], vec![Some("plain")]), "{p:?}");
    }
}

#[test]
fn otlp_endpoint_sends_sampled_spans_elsewhere_and_writes_no_traces_json() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let collector = runtime.block_on(Collector::start("127.0.0.1:0".parse().unwrap())).unwrap();
    let pids = Pids::default();
    let tweak = |o: &mut Options| {
        o.variants = vec!["plain".into()];
        o.warmup = Some(Duration::ZERO);
        o.tracing = Tracing::Export { endpoint: collector.endpoint(), ratio: 0.5 };
    };
    let look = |o: &Options| assert!(!o.out.join("traces.json").exists(), "no traces.json with an endpoint");
    run_and_look("otlp", &fixture("lab-two-tier.yaml"), &pids, tweak, look).unwrap();
    pids.assert_all_gone(6);
    let traces = runtime.block_on(collector.shutdown());
    // About half of the 120 requests (binomial: outside 25..95 once in 10^10 runs), each trace
    // whole: the entry sidecar decides, the callee follows its `traceparent`.
    assert!((25..95).contains(&traces.len()), "{} traces", traces.len());
    traces.iter().for_each(assert_two_tier_tree);
    // The collector is not the lab's, yet it can tell the run apart.
    traces.iter().for_each(assert_tagged_with_the_run);
}

#[test]
fn a_process_that_fails_to_start_is_named_and_nothing_outlives_it() {
    let pids = Pids::default();
    // The processes read a file without the `back` service: serve for front (told to call back)
    // and for back (unknown) exit at once.
    let err = run("fail", &fixture("lab-other.yaml"), &pids, |o| o.ready_timeout = Duration::from_secs(10))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("serve "), "{err}");
    assert!(err.contains("exited"), "{err}");
    assert!(err.contains("stderr") && err.contains("error: ") && err.contains("\"back\""), "quotes its stderr: {err}");
    // The first run's six processes were all started before the failure was seen.
    pids.assert_all_gone(6);
}

#[test]
fn cancelling_stops_every_process() {
    let cancel = Cancel::default();
    let pids = Pids { cancel_when_ready: Some(cancel.clone()), ..Pids::default() };
    let err = run("cancel", &fixture("lab-two-tier.yaml"), &pids, |o| o.cancel = cancel.clone()).unwrap_err();
    assert!(matches!(err, LabError::Interrupted), "{err}");
    pids.assert_all_gone(6);
}

#[test]
fn unknown_scenarios_and_variants_are_errors_that_list_the_names() {
    let pids = Pids::default();
    let err = run("select", &fixture("lab-two-tier.yaml"), &pids, |o| o.variants = vec!["nope".into()]).unwrap_err();
    let message = err.to_string();
    assert!(
        message.ends_with("lab-two-tier.yaml: variants: no variant named \"nope\"; expected one of: plain, capped"),
        "{message}"
    );
    pids.assert_all_gone(0);
}

/// `--isolation netns` needs root and iproute2; elsewhere this test says so and passes.
#[test]
fn netns_isolation_runs_the_fixture_and_removes_its_namespaces() {
    let root = std::process::Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if !root || tailguard_lab::netns::available().is_err() {
        eprintln!("skipped: --isolation netns needs root and iproute2");
        return;
    }
    let pids = Pids::default();
    let results = run("netns", &fixture("lab-two-tier.yaml"), &pids, |o| {
        o.isolation = tailguard_lab::Isolation::Netns;
        o.variants = vec!["plain".into()];
    })
    .unwrap();
    pids.assert_all_gone(6);
    let r = &results.runs[0];
    assert_eq!((r.requests, r.succeeded), (120, 120), "{r:?}");
    let spaces = std::process::Command::new("ip").args(["netns", "list"]).output().unwrap().stdout;
    let spaces = String::from_utf8_lossy(&spaces);
    assert!(!spaces.lines().any(|l| l.starts_with("tg")), "namespaces left behind: {spaces}");
}

/// `tailguard lab run FILE ARGS...`, the binary as a user runs it.
fn lab_run(file: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tailguard"));
    command.args(["lab", "run"]).arg(file).args(args);
    command
}

#[test]
fn an_out_holding_earlier_results_a_selection_with_nothing_to_run_and_a_mistyped_one_are_refused() {
    let out = std::env::temp_dir().join(format!("tailguard-lab-test-refused-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("results.json"), "{}").unwrap();
    let run = lab_run(&fixture("lab-two-tier.yaml"), &["--out", out.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success() && err.contains("holds the results of an earlier run"), "{err}");
    assert_eq!(std::fs::read_to_string(out.join("results.json")).unwrap(), "{}");

    // Only the oracle, which the lab skips: nothing runs, and the message says why.
    let bloc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/bloc.yaml");
    let fresh = out.join("oracle");
    let run = lab_run(&bloc, &["--quick", "--variant", "oracle", "--out", fresh.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{err}");
    assert!(
        err.contains("error: nothing was run: 1x10 / oracle, 40x10 / oracle need the oracle balancer, which exists only in the simulator"),
        "{err}"
    );
    assert!(!err.contains("cannot write") && !fresh.join("results.json").exists(), "{err}");

    // A mistyped variant is refused before the output folder is made.
    let typo = out.join("typo");
    let run = lab_run(&fixture("lab-two-tier.yaml"), &["--variant", "nope", "--out", typo.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success() && err.contains("no variant named \"nope\""), "{err}");
    assert!(!typo.exists(), "{err}");
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn ctrl_c_after_a_finished_run_saves_its_results_report_and_traces() {
    let out = std::env::temp_dir().join(format!("tailguard-lab-test-ctrl-c-{}", std::process::id()));
    // No warm-up: the load generator sends exactly the 120 measured requests of each run.
    let mut child = lab_run(&fixture("lab-two-tier.yaml"), &["--warmup", "0s", "--out", out.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines().map(Result::unwrap);
    // Without a terminal the lab prints a line per finished run.
    let first = stderr.by_ref().find(|l| l.starts_with("  default / plain: ")).expect("the first run finishes");
    assert!(first.contains("120 requests"), "{first}");
    let kill = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let rest: Vec<String> = stderr.collect();
    let status = child.wait().unwrap();
    let rest = rest.join("\n");
    assert!(!status.success(), "{rest}");
    assert!(rest.contains("stopped after 1 of 2 runs; saving the finished runs"), "{rest}");
    assert!(rest.contains("error: only 1 of 2 runs finished (saved above): interrupted"), "{rest}");

    let results: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    let runs = results["runs"].as_array().unwrap();
    assert_eq!((runs.len(), &runs[0]["variant"], &runs[0]["requests"]), (1, &"plain".into(), &120.into()));
    assert!(std::fs::read_to_string(out.join("report.html")).unwrap().contains("plain"));
    let traces = jaeger::read_file(&out.join("traces.json")).unwrap();
    assert_eq!(traces.len(), 120, "every request of the finished run is traced");
    traces.iter().for_each(assert_tagged_with_the_run);
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn trace_sample_keeps_n_measured_traces_per_run_as_the_simulator_does() {
    let out = std::env::temp_dir().join(format!("tailguard-lab-test-trace-sample-{}", std::process::id()));
    // The warm-up's requests are traced by the sidecars but not kept.
    let args = ["--variant", "plain", "--warmup", "300ms", "--trace-sample", "7", "--out", out.to_str().unwrap()];
    let run = lab_run(&fixture("lab-two-tier.yaml"), &args).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let traces = jaeger::read_file(&out.join("traces.json")).unwrap();
    assert_eq!(traces.len(), 7);
    traces.iter().for_each(assert_two_tier_tree);
    std::fs::remove_dir_all(&out).unwrap();

    // A count, not a ratio; and nothing to keep when the spans go elsewhere.
    let run = lab_run(&fixture("lab-two-tier.yaml"), &["--trace-sample", "0.5"]).output().unwrap();
    assert_eq!(run.status.code(), Some(2), "{}", String::from_utf8_lossy(&run.stderr));
    let elsewhere = ["--otlp-endpoint", "http://127.0.0.1:4318", "--trace-sample", "5"];
    let run = lab_run(&fixture("lab-two-tier.yaml"), &elsewhere).output().unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.code() == Some(2) && err.contains("--otlp-endpoint"), "{err}");
}

#[test]
fn an_open_loop_offers_the_simulator_s_arrivals_for_the_same_seed() {
    let file = fixture("lab-open.yaml");
    let experiment = Experiment::load(&file).unwrap();
    let pids = Pids::default();
    let options = options("open", &file);
    let lab = tailguard_lab::run(&experiment, &options, &pids);
    let _ = std::fs::remove_dir_all(&options.out);
    let lab = lab.unwrap();
    // Two runs × front × (serve + sidecar).
    pids.assert_all_gone(4);
    // Each scenario draws its own Poisson schedule from the seed, as in the simulator: the same
    // measured requests on both sides (156 and 153 with seed 9; the seed alone would give 140 in
    // both), all answered.
    let counts =
        |runs: &[tailguard_model::RunResult]| runs.iter().map(|r| (r.scenario.clone(), r.requests)).collect::<Vec<_>>();
    let sim = tailguard_sim::simulate(&experiment, tailguard_sim::Options { seed: 9, ..Default::default() }, |_| {});
    let sim = sim.unwrap();
    assert_eq!(counts(&lab.runs), counts(&sim.runs));
    assert_eq!(counts(&lab.runs), [("calm".to_string(), 156), ("busy".to_string(), 153)]);
    assert!(lab.runs.iter().all(|r| r.succeeded == r.requests), "{:?}", lab.runs);
}
