//! One experiment in the lab: every selected scenario × variant in turn, each on its own set of
//! processes that is started, measured and stopped before the next.

use crate::cpu;
use crate::error::LabError;
use crate::faults;
use crate::measure;
use crate::memory;
use crate::netns::Network;
use crate::peers::{self, Sidecar};
use crate::plan::{self, Isolation, Plan, ProxyFile, Replica, MAX_REPLICAS, MAX_SERVICES};
use crate::process::Processes;
use crate::real::{self, Probe};
use crate::traces::{keep_measured, RunCollector, Tracing, CLIENT, FLUSH_GRACE};
use crate::{Cancel, Observer};
use rand::Rng;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tailguard_load::{LoadConfig, Shape, Stop, Target};
use tailguard_model::results::round;
use tailguard_model::schema::{Arrival, SidecarKind};
use tailguard_model::{Experiment, Kind, Run};
use tailguard_sim::{Results, RunResult};
use tailguard_trace::{jaeger, JaegerError, Trace};

/// How long one request of the load generator may take before it counts as timed out (the
/// simulator lets requests drain for 120 s; no example comes near this).
const LOAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts at finding a free address block.
const SLOT_TRIES: usize = 32;

/// How to run an experiment.
#[derive(Clone, Debug)]
pub struct Options {
    /// The `tailguard` binary the processes run (the CLI passes its own, `current_exe`).
    pub exe: PathBuf,
    /// The experiment file the processes read (the one the lab was given).
    pub file: PathBuf,
    /// Where generated sidecar files and process logs go (`runs/SCENARIO/VARIANT/`).
    pub out: PathBuf,
    pub seed: u64,
    pub quick: bool,
    pub isolation: Isolation,
    /// Only these scenarios (all when empty).
    pub scenarios: Vec<String>,
    /// Only these variants (all when empty).
    pub variants: Vec<String>,
    /// Replaces the workload's duration and warm-up for the load generator (a shorter demo;
    /// latency models keep the file's horizon).
    pub duration: Option<Duration>,
    pub warmup: Option<Duration>,
    /// How long every process of a run has to become ready.
    pub ready_timeout: Duration,
    pub cancel: Cancel,
    /// What the sidecars do with spans (docs/traces.md).
    pub tracing: Tracing,
    /// The machine's calibration the run is recorded under (`results.json`'s `calibration`):
    /// the lab adds nothing for it, bench/lab-vs-sim.sh hands it to the simulator.
    pub calibration: Option<tailguard_model::Calibration>,
}

impl Options {
    /// Defaults: loopback, not quick, every scenario and variant, 20 s to become ready, every
    /// request traced and 200 of each run's measured requests kept in `OUT/traces.json`.
    pub fn new(exe: PathBuf, file: PathBuf, out: PathBuf, seed: u64) -> Options {
        let tracing =
            Tracing::Collect { out: out.join("traces.json"), ratio: 1.0, per_run: tailguard_sim::DEFAULT_TRACE_SAMPLE };
        Options {
            exe,
            file,
            out,
            seed,
            quick: false,
            isolation: Isolation::Loopback,
            scenarios: Vec::new(),
            variants: Vec::new(),
            duration: None,
            warmup: None,
            ready_timeout: Duration::from_secs(20),
            cancel: Cancel::default(),
            tracing,
            calibration: None,
        }
    }
}

/// Runs the selected scenarios × variants of `experiment` and returns their results (mode "lab"),
/// in file order. Runs needing the oracle are skipped with a note; when that leaves nothing,
/// [`LabError::NothingToRun`]. A failure or an interruption after some runs finished is
/// [`LabError::Unfinished`], which carries their results (their traces are written). Every
/// process started is stopped before this returns, whatever happens.
pub fn run(experiment: &Experiment, options: &Options, observer: &dyn Observer) -> Result<Results, LabError> {
    // Absolute once, here: a program given a prefix (nginx's -p and -c) would resolve a relative
    // path against it a second time.
    let out =
        std::path::absolute(&options.out).map_err(|error| LabError::Write { path: options.out.clone(), error })?;
    let options = &Options { out, ..options.clone() };
    let (scenarios, variants) = experiment.select(&options.scenarios, &options.variants)?;
    if options.isolation == Isolation::Netns {
        crate::netns::available()?;
    }
    let mut runs = Vec::new();
    let mut skipped = Vec::new();
    for scenario in &scenarios {
        for variant in &variants {
            let mut run = experiment.resolve(scenario, variant, options.quick)?;
            if plan::needs_oracle(&run) {
                observer.note(&format!(
                    "{scenario} / {variant}: skipped, its oracle balancer exists only in the simulator"
                ));
                skipped.push(format!("{scenario} / {variant}"));
                continue;
            }
            run.workload.duration = options.duration.map(Into::into).or(run.workload.duration);
            run.workload.warmup = options.warmup.map(Into::into).unwrap_or(run.workload.warmup);
            runs.push(run);
        }
    }
    if runs.is_empty() {
        return Err(LabError::NothingToRun { skipped });
    }
    // A peer that cannot express a variant's policy is refused before any process starts.
    for run in &runs {
        check_peer(run, &Plan::new(run, options.isolation, 0))?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| LabError::Network(format!("cannot start the async runtime: {e}")))?;
    let mut results = Vec::new();
    let mut traces = Vec::new();
    let mut stopped = None;
    let total = runs.len();
    for (i, run) in runs.iter().enumerate() {
        let outcome = if options.cancel.is_cancelled() {
            Err(LabError::Interrupted)
        } else {
            observer.run_started(i, total, &run.scenario, &run.variant, run.horizon());
            run_one(run, options, observer, &runtime, &mut traces)
        };
        match outcome {
            Ok(result) => {
                observer.run_finished(&result);
                results.push(result);
            }
            Err(error) => {
                stopped = Some(error);
                break;
            }
        }
    }
    if results.is_empty() {
        if let Some(error) = stopped {
            return Err(error);
        }
    }
    // The finished runs' traces, also when a later run failed or was interrupted.
    if let Tracing::Collect { out, .. } = &options.tracing {
        jaeger::write_file(&traces, out).map_err(|e| match e {
            JaegerError::Io { source, .. } => LabError::Write { path: out.clone(), error: source },
            JaegerError::Format { message, .. } => {
                LabError::Write { path: out.clone(), error: std::io::Error::other(message) }
            }
        })?;
    }
    let finished = Results {
        experiment: experiment.file.name.clone(),
        mode: "lab".to_string(),
        seed: options.seed,
        runs: results,
        calibration: options.calibration.clone().or_else(|| runs.iter().find_map(|r| r.calibration.clone())),
    };
    match stopped {
        None => Ok(finished),
        Some(error) => Err(LabError::Unfinished { finished: Box::new(finished), total, error: Box::new(error) }),
    }
}

/// One scenario × variant: processes up, load, measurements, processes down; the run's traces
/// (when the lab collects them) are added to `traces`.
fn run_one(
    run: &Run,
    options: &Options,
    observer: &dyn Observer,
    runtime: &tokio::runtime::Runtime,
    traces: &mut Vec<Trace>,
) -> Result<RunResult, LabError> {
    check_size(run)?;
    let mut plan = choose_plan(run, options.isolation)?;
    let dir = options.out.join("runs").join(&run.scenario).join(&run.variant);
    std::fs::create_dir_all(&dir).map_err(|error| LabError::Write { path: dir.clone(), error })?;
    // Declared before the processes, so it is dropped (torn down) after they are stopped.
    let _network = match options.isolation {
        Isolation::Netns => {
            observer.phase("creating network namespaces");
            let network = Network::create(&plan, &run.network)?;
            if network.kernel_delays {
                // netem delays every packet: the sidecars must not delay them again.
                plan.network_delay = None;
            } else if plan.network_delay.is_some() {
                observer.note("the kernel cannot delay packets (no sch_netem): the sidecars hold each hop's delay");
            }
            Some(network)
        }
        Isolation::Loopback => None,
    };
    // Started after the network (netns runs bind it on the bridge), stopped after the processes.
    let collector = match options.tracing {
        Tracing::Collect { .. } => Some(RunCollector::start(&plan, runtime)?),
        _ => None,
    };
    let endpoint = match &options.tracing {
        Tracing::Export { endpoint, .. } => Some(endpoint.clone()),
        _ => collector.as_ref().map(RunCollector::endpoint),
    };
    let mut processes = Processes::default();
    let count = plan.replicas.len()
        + plan.replicas.iter().filter(|r| r.sidecar).count()
        + usize::from(plan.workload_proxy.is_some());
    observer.phase(&format!("starting {count} processes"));
    let checks = start(run, &plan, options, endpoint.as_deref(), &dir, &mut processes, observer)?;
    processes.wait_ready(&checks, options.ready_timeout, &options.cancel)?;
    if run.sidecar == SidecarKind::Haproxy {
        await_haproxy_checks(run, &plan, options, observer)?;
    }
    observer.ready(&plan);
    for line in faults::realisations(run, &plan) {
        observer.note(&line);
    }

    observer.phase("measuring");
    let config = load_config(run, &plan, options.seed)?;
    // A peer has no tailguard `/metrics`: its between-services fields stay unmeasured.
    let sidecars = if run.sidecar == SidecarKind::Tailguard { measure::sidecars(&plan) } else { Vec::new() };
    let mut proxies: Vec<String> = plan.replicas.iter().filter(|r| r.sidecar).map(proxy_name).collect();
    proxies.push(WORKLOAD_PROXY.to_string());
    let proxy_pids: Vec<u32> = proxies.iter().filter_map(|name| processes.pid_of(name)).collect();
    let done = AtomicBool::new(false);
    // Every serve's clock starts with the load, as the simulator's does: fault windows and
    // latency models count from here, not from when each process happened to start.
    for replica in plan.replicas.iter().filter(|r| run.services[&r.service].kind == Kind::Synthetic) {
        processes.signal(&serve_name(replica), libc::SIGUSR1);
    }
    let start = Instant::now();
    let warmup = run.workload.warmup.get();
    // The traces' clock: the sidecars stamp spans with the wall clock.
    let measured_from_us = (SystemTime::now() + warmup).duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
    let cancel = options.cancel.clone();
    let mut rss = memory::Samples::new(memory::watched(&plan, |name| processes.pid_of(name)));
    let (report, (periodic, last), cpu_s) = std::thread::scope(|scope| {
        let sampler =
            scope.spawn(|| measure::sample(&sidecars, start, warmup, &done, &options.cancel, &|t| observer.tick(t)));
        scope.spawn(|| memory::sample(&mut rss, start, warmup, &done, &options.cancel));
        let cpu = scope.spawn(|| cpu::measure(&proxy_pids, start, warmup, &done, &options.cancel));
        let report = runtime.block_on(async {
            tokio::select! {
                report = tailguard_load::run(config) => report.map_err(LabError::from),
                () = cancelled(&cancel) => Err(LabError::Interrupted),
            }
        });
        done.store(true, Ordering::Release);
        (report, sampler.join().unwrap_or_else(rethrow), cpu.join().unwrap_or_else(rethrow))
    });
    let report = report?;
    processes.check_alive()?;
    keep_metrics(run.sidecar, &plan, &dir);
    observer.phase("stopping");
    // SIGTERM lets the sidecars send their last spans before they exit.
    processes.stop_within(if endpoint.is_some() { FLUSH_GRACE } else { crate::process::STOP_GRACE });
    if let Some(collector) = collector {
        let (run_traces, dropped) = collector.finish(runtime);
        if dropped > 0 {
            observer
                .note(&format!("{} / {}: {dropped} spans dropped (the collector was full)", run.scenario, run.variant));
        }
        if let Tracing::Collect { per_run, .. } = options.tracing {
            traces.extend(keep_measured(run_traces, measured_from_us, per_run, options.seed));
        }
    }
    let mut result = measure::result(run, &report, &sidecars, &periodic, last.as_ref(), rss.entries());
    result.sidecar = run.sidecar.peer();
    result.sidecar_cpu_s_per_1k =
        cpu_s.filter(|_| result.requests > 0).map(|s| round(1000.0 * s / result.requests as f64));
    Ok(result)
}

/// Waits until no HAProxy sidecar has a server down ([`peers::haproxy::servers_down`]), for at
/// most twice the longest check interval of the run's policies; a server still down then (a
/// `down` fault's replica fails its check) is noted, and the load starts.
fn await_haproxy_checks(run: &Run, plan: &Plan, options: &Options, observer: &dyn Observer) -> Result<(), LabError> {
    let policies = run.services.values().flat_map(|s| s.calls.iter().map(|c| &c.policy));
    let longest = policies
        .chain([&run.workload.client])
        .filter_map(|p| tailguard_model::build::peer_policy(tailguard_policy::peer::Peer::Haproxy, p).ok()?.health)
        .map(|h| h.duration)
        .max();
    let Some(inter) = longest else { return Ok(()) };
    let admins: Vec<_> =
        plan.replicas.iter().filter(|r| r.sidecar).map(Replica::admin).chain(plan.workload_admin).collect();
    let deadline = Instant::now() + 2 * inter;
    loop {
        let down: Vec<String> = admins
            .iter()
            .filter_map(|&admin| crate::http::get(admin, "/stats;csv").ok())
            .flat_map(|(_, csv)| peers::haproxy::servers_down(&csv))
            .collect();
        if down.is_empty() {
            return Ok(());
        }
        if options.cancel.is_cancelled() {
            return Err(LabError::Interrupted);
        }
        if Instant::now() >= deadline {
            observer.note(&format!(
                "{} / {}: {} HAProxy servers still down after their checks (e.g. {}): the load starts without them",
                run.scenario,
                run.variant,
                down.len(),
                down[0]
            ));
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Saves each sidecar's final counters as `metrics-NAME.txt` beside its logs, for a closer look
/// at a run: tailguard's `/metrics` (per-endpoint attempt histograms, rejections), HAProxy's
/// statistics as CSV, nginx's `stub_status`; a sidecar that cannot be read is skipped.
fn keep_metrics(kind: SidecarKind, plan: &Plan, dir: &Path) {
    let path = match kind {
        SidecarKind::Tailguard => "/metrics",
        SidecarKind::Haproxy => "/stats;csv",
        SidecarKind::Nginx => "/stub_status",
    };
    let admins = plan.replicas.iter().filter(|r| r.sidecar).map(|r| (r.name(), r.admin()));
    for (name, admin) in admins.chain(plan.workload_admin.map(|a| ("workload".to_string(), a))) {
        if let Ok((200, text)) = crate::http::get(admin, path) {
            let _ = std::fs::write(dir.join(format!("metrics-{name}.txt")), text);
        }
    }
}

/// A sampling thread's panic, raised again in the lab's.
fn rethrow<T>(panic: Box<dyn std::any::Any + Send>) -> T {
    std::panic::resume_unwind(panic)
}

/// Completes once `cancel` is set.
async fn cancelled(cancel: &Cancel) {
    while !cancel.is_cancelled() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn check_size(run: &Run) -> Result<(), LabError> {
    if run.services.len() > MAX_SERVICES {
        return Err(LabError::Network(format!("the lab runs at most {MAX_SERVICES} services")));
    }
    if let Some((name, s)) = run.services.iter().find(|(_, s)| s.replicas > MAX_REPLICAS) {
        return Err(LabError::Network(format!(
            "service {name} has {} replicas; the lab runs at most {MAX_REPLICAS} per service",
            s.replicas
        )));
    }
    Ok(())
}

/// A layout whose address block is free: on loopback every listen address can be bound; in
/// netns runs no interface and no namespace already uses the block. The slots are taken in turn
/// from a random start, so that runs of one process (tests run labs side by side) never draw the
/// same block: two of them had, checked it free at once, and collided on its addresses.
fn choose_plan(run: &Run, isolation: Isolation) -> Result<Plan, LabError> {
    static NEXT: std::sync::OnceLock<std::sync::atomic::AtomicUsize> = std::sync::OnceLock::new();
    let next = NEXT.get_or_init(|| std::sync::atomic::AtomicUsize::new(rand::thread_rng().gen_range(0..249)));
    for _ in 0..SLOT_TRIES {
        let slot = 2 + (next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 249) as u8;
        let plan = Plan::new(run, isolation, slot);
        let free = match isolation {
            Isolation::Loopback => plan.listen_addresses().iter().all(|a| TcpListener::bind(a).is_ok()),
            Isolation::Netns => netns_block_free(slot),
        };
        if free {
            return Ok(plan);
        }
    }
    Err(LabError::Network(format!("no free address block found in {SLOT_TRIES} tries")))
}

fn netns_block_free(slot: u8) -> bool {
    let out =
        |args: &[&str]| Command::new("ip").args(args).output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let (Ok(addrs), Ok(spaces)) = (out(&["-4", "-o", "addr"]), out(&["netns", "list"])) else { return false };
    !addrs.contains(&format!(" 10.{slot}.")) && !spaces.lines().any(|l| l.starts_with(&format!("tg{slot}-")))
}

/// Writes the sidecar files (exporting spans to `endpoint`, if any) and starts every process;
/// returns the health checks to wait for.
fn start(
    run: &Run,
    plan: &Plan,
    options: &Options,
    endpoint: Option<&str>,
    dir: &Path,
    processes: &mut Processes,
    observer: &dyn Observer,
) -> Result<Vec<(usize, Probe)>, LabError> {
    let mut checks = Vec::new();
    let mut spawn = |name: String, command: Command, replica: Option<&Replica>, health| {
        let command = match (options.isolation, replica) {
            (Isolation::Netns, Some(r)) => Network::wrap(plan, r, &command),
            _ => command,
        };
        let pid = processes.spawn(&name, command, dir)?;
        observer.spawned(&name, pid);
        checks.push((checks.len(), health));
        Ok::<(), LabError>(())
    };
    let traced = |file: ProxyFile, service: &str| match (endpoint, options.tracing.ratio()) {
        (Some(endpoint), Some(ratio)) => file.traced(run, endpoint, service, ratio),
        _ => file,
    };
    for r in &plan.replicas {
        match real::program(run, r, dir)? {
            Some(program) => spawn(program.name, program.command, Some(r), program.probe)?,
            None => spawn(serve_name(r), serve_command(run, plan, r, options), Some(r), Probe::Http(r.serve()))?,
        }
        if !r.sidecar {
            continue;
        }
        let file = ProxyFile::sidecar(run, plan, r, options.seed);
        let command = match run.sidecar {
            SidecarKind::Tailguard => {
                let file = traced(file, &r.service);
                proxy_command(options, &write(dir, &format!("sidecar-{}.yaml", r.name()), &file.to_yaml())?)
            }
            peer => peer_command(run, peer, &r.service, &file, dir, &r.name())?,
        };
        spawn(proxy_name(r), command, Some(r), Probe::Http(r.admin()))?;
    }
    if let (Some(file), Some(admin)) = (ProxyFile::workload(run, plan, options.seed), plan.workload_admin) {
        let command = match run.sidecar {
            SidecarKind::Tailguard => {
                proxy_command(options, &write(dir, "sidecar-workload.yaml", &traced(file, CLIENT).to_yaml())?)
            }
            peer => peer_command(run, peer, CLIENT, &file, dir, CLIENT)?,
        };
        spawn(WORKLOAD_PROXY.to_string(), command, None, Probe::Http(admin))?;
    }
    if run.sidecar != SidecarKind::Tailguard && endpoint.is_some() {
        observer.note(&format!(
            "{} / {}: {} sidecars export no spans: this run has no traces",
            run.scenario,
            run.variant,
            run.sidecar.name()
        ));
    }
    Ok(checks)
}

/// The name the lab gives replica `r`'s sidecar process, whichever proxy it is.
fn proxy_name(r: &Replica) -> String {
    format!("proxy {}", r.name())
}

/// The name of the load generator's sidecar process.
const WORKLOAD_PROXY: &str = "proxy workload";

/// Whether `run`'s peer sidecars (if any) can express every policy of its sidecar files laid out
/// as `plan`; the error names the first field one cannot.
fn check_peer(run: &Run, plan: &Plan) -> Result<(), LabError> {
    if run.sidecar == SidecarKind::Tailguard {
        return Ok(());
    }
    let mut plan = plan.clone();
    if plan.isolation == Isolation::Netns {
        // netem delays the packets there (without it, starting the run refuses the delay).
        plan.network_delay = None;
    }
    let replicas = plan.replicas.iter().filter(|r| r.sidecar);
    let files = replicas.map(|r| (r.service.as_str(), ProxyFile::sidecar(run, &plan, r, 0)));
    for (service, file) in files.chain(ProxyFile::workload(run, &plan, 0).map(|f| (CLIENT, f))) {
        Sidecar::from_config(run.sidecar, service, &file.0).map_err(|refused| peer_error(run, refused))?;
    }
    Ok(())
}

fn peer_error(run: &Run, refused: peers::Refused) -> LabError {
    LabError::Peer { scenario: run.scenario.clone(), variant: run.variant.clone(), refused }
}

/// Writes `peer`'s configuration for the sidecar `file` of a replica of `service` (named `name`)
/// under `dir` and gives the command that runs it in the foreground.
fn peer_command(
    run: &Run,
    peer: SidecarKind,
    service: &str,
    file: &ProxyFile,
    dir: &Path,
    name: &str,
) -> Result<Command, LabError> {
    let sidecar = Sidecar::from_config(peer, service, &file.0).map_err(|refused| peer_error(run, refused))?;
    match peer {
        SidecarKind::Haproxy => {
            let path = write(dir, &format!("haproxy-{name}.cfg"), &peers::haproxy::config(&sidecar))?;
            let mut c = Command::new(real::find("haproxy")?);
            c.arg("-db").arg("-f").arg(path);
            Ok(c)
        }
        SidecarKind::Nginx => {
            let prefix = dir.join(format!("nginx-sidecar-{name}"));
            // SAFETY: geteuid has no preconditions.
            let conf = peers::nginx::config(&sidecar, unsafe { libc::geteuid() } == 0);
            let path =
                peers::nginx::write(&prefix, &conf).map_err(|error| LabError::Write { path: prefix.clone(), error })?;
            let mut c = Command::new(real::find("nginx")?);
            c.arg("-p").arg(&prefix).arg("-c").arg(path).args(["-e", "stderr"]);
            Ok(c)
        }
        SidecarKind::Tailguard => unreachable!("tailguard's own sidecar is not a peer"),
    }
}

/// The name the lab gives replica `r`'s `tailguard serve` process.
fn serve_name(r: &Replica) -> String {
    format!("serve {}", r.name())
}

fn write(dir: &Path, name: &str, text: &str) -> Result<PathBuf, LabError> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|error| LabError::Write { path: path.clone(), error })?;
    Ok(path)
}

/// `tailguard serve FILE --service S --replica R --scenario .. --variant .. [--quick] --seed N
/// --listen ADDR --downstream CALLEE=URL-of-its-sidecar's-egress...`
fn serve_command(run: &Run, plan: &Plan, replica: &Replica, options: &Options) -> Command {
    let mut c = Command::new(&options.exe);
    c.arg("serve").arg(&options.file);
    c.args(["--service", &replica.service, "--replica", &replica.index.to_string()]);
    c.args(["--scenario", &run.scenario, "--variant", &run.variant, "--seed", &options.seed.to_string()]);
    if options.quick {
        c.arg("--quick");
    }
    c.args(["--listen", &replica.serve().to_string()]);
    for call in run.services[&replica.service].calls.iter().filter(|c| c.count > 0) {
        c.arg("--downstream").arg(format!("{}={}", call.service, real::downstream(run, plan, replica, &call.service)));
    }
    c
}

fn proxy_command(options: &Options, config: &Path) -> Command {
    let mut c = Command::new(&options.exe);
    c.arg("proxy").arg("--config").arg(config);
    c
}

/// The file's workload as the load generator's configuration.
fn load_config(run: &Run, plan: &Plan, seed: u64) -> Result<LoadConfig, LabError> {
    let w = &run.workload;
    let shape = match (&w.open, &w.closed) {
        (Some(open), _) if open.arrival == Arrival::Constant => Shape::Constant { rate: open.rate },
        (Some(open), _) => Shape::Poisson { rate: open.rate },
        (None, Some(closed)) => Shape::Closed { clients: closed.clients as usize, think: closed.think_time.get() },
        (None, None) => unreachable!("validated: a workload is open or closed"),
    };
    let targets = plan
        .load_targets(run)
        .iter()
        .map(|url| Target::parse(url, &tailguard_load::Method::GET))
        .collect::<Result<Vec<_>, _>>()?;
    let mut config = LoadConfig::new(targets, shape);
    config.stop = Stop { duration: w.duration.map(|d| d.get()), requests: w.requests };
    config.warmup = w.warmup.get();
    config.timeout = LOAD_TIMEOUT;
    // The simulator's arrival stream: the same seed offers the same requests at the same times.
    config.seed = run.stream_seed(seed);
    // The target's routes: their paths under the target's, drawn as the simulator draws them.
    config.routes = run.services[&w.target].routes.clone();
    Ok(config)
}
