//! The tailguard simulator: runs an experiment file in virtual time, driving the very policy
//! code the proxy runs ([`tailguard_policy`]) with a discrete-event engine.
//!
//! Each scenario × variant is one [`world`] run: replicas with workers and FIFO queues, calls
//! between services through per-caller [`ClientPolicy`](tailguard_policy::call::ClientPolicy)
//! instances, and the workload. The same seed gives the same results, byte for byte; variants of
//! one scenario share their random streams' seeds, so they face the same luck.

mod hops;
mod job_queue;
mod metrics;
mod prefetch;
mod queue;
mod service;
mod slab;
mod trace;
mod world;

/// The results schema and its maths live in the model crate, shared with the lab and `tailguard load`.
pub use tailguard_model::results::{
    self, Latency, ProcessMemory, ReplicaLoad, Results, RunResult, Series, ServiceWork, TimeoutSeries,
};
pub use tailguard_trace::Trace;
pub use trace::CLIENT as TRACE_CLIENT;

/// Traces kept per run by `tailguard sim --traces` unless `--trace-sample` says otherwise.
pub const DEFAULT_TRACE_SAMPLE: usize = 200;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tailguard_model::{Dur, Experiment, ModelError, Run};

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The experiment file is invalid for this scenario and variant.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The event loop ran away (a model that never lets virtual time advance).
    #[error("the simulation ran more than {events} events without finishing; check for a zero-delay loop")]
    Runaway { events: u64 },
    /// A peer variant's policy that the peer cannot express (the lab refuses it too).
    #[error(transparent)]
    Peer(#[from] tailguard_model::build::PeerRefused),
    /// A service runs real software, which only the lab can run.
    #[error("service {service:?} is `kind: {kind}`: the simulator has no model of real {kind}; run the file with `tailguard lab run`, or make the service synthetic (a service_time shaped like it)")]
    RealService { service: String, kind: &'static str },
    /// The run would last longer in virtual time than [`MAX_VIRTUAL_TIME`].
    #[error("{what} {length} of virtual time; the simulator runs at most {max} (it keeps a count per second of the run): shorten `workload.duration` or `workload.requests`", max = Dur(MAX_VIRTUAL_TIME))]
    TooLong { what: String, length: Dur },
}

/// The longest run the simulator accepts, warm-up included: its series and imbalance keep a count
/// per second of the run, so a run of a year at a request a day would take gigabytes.
pub const MAX_VIRTUAL_TIME: Duration = Duration::from_secs(24 * 3600);

/// Refuses, before it starts, a run planned to last longer than [`MAX_VIRTUAL_TIME`]: its
/// `duration`, or its open loop's `requests` at its rate, after the warm-up. (A closed loop's
/// `requests` take what the services make them take; the run stops at the limit instead.)
fn bounded(run: &Run) -> Result<(), SimError> {
    let w = &run.workload;
    let (what, length) = match (w.duration, w.requests, &w.open) {
        (Some(d), _, _) => ("the warm-up and `workload.duration` last", w.warmup.get() + d.get()),
        (None, Some(n), Some(open)) => (
            "the warm-up and `workload.requests` at `workload.open.rate` last",
            w.warmup.get().saturating_add(Duration::try_from_secs_f64(n as f64 / open.rate).unwrap_or(Duration::MAX)),
        ),
        _ => return Ok(()),
    };
    if length > MAX_VIRTUAL_TIME {
        return Err(SimError::TooLong { what: what.to_string(), length: Dur(length) });
    }
    Ok(())
}

/// Refuses the runs the simulator cannot run: with real programs (it models only synthetic
/// services, and a guessed service time would pass a model off as a measurement), longer than
/// [`MAX_VIRTUAL_TIME`], or with a peer variant's policies that have no peer counterpart (the lab
/// refuses those too).
fn runnable(run: &Run) -> Result<(), SimError> {
    if let Some((name, s)) = run.services.iter().find(|(_, s)| s.kind != tailguard_model::Kind::Synthetic) {
        return Err(SimError::RealService { service: name.clone(), kind: s.kind.name() });
    }
    bounded(run)?;
    Ok(tailguard_model::build::check_peers(run)?)
}

/// How to run an experiment.
#[derive(Clone, Debug)]
pub struct Options {
    /// The seed of every random stream.
    pub seed: u64,
    /// Apply the file's `quick` overrides (shorter runs).
    pub quick: bool,
    /// Runs simulated at once (each run is single-threaded).
    pub threads: usize,
    /// Simulate only these scenarios (all when empty).
    pub scenarios: Vec<String>,
    /// Simulate only these variants (all when empty).
    pub variants: Vec<String>,
    /// Charge this calibration's hops in every run, in place of the file's
    /// `network.calibrated` (`tailguard sim --calibration`, bench/lab-vs-sim.sh).
    pub calibration: Option<tailguard_model::Calibration>,
}

impl Default for Options {
    /// Seed 1, full-length runs, one thread, every scenario and variant.
    fn default() -> Self {
        Options { seed: 1, quick: false, threads: 1, scenarios: Vec::new(), variants: Vec::new(), calibration: None }
    }
}

/// A run that finished, for progress reporting.
#[derive(Clone, Debug)]
pub struct Progress<'a> {
    /// Runs finished so far, this one included.
    pub done: usize,
    /// Runs in all.
    pub total: usize,
    /// The finished run's result.
    pub result: &'a RunResult,
    /// Events the run processed.
    pub events: u64,
}

/// Runs one resolved scenario × variant with `seed`; returns its result and its event count.
pub fn run_one(run: &Run, seed: u64) -> Result<(RunResult, u64), SimError> {
    runnable(run)?;
    let seed = run.stream_seed(seed);
    let (result, events) = world::World::new(run, seed)?.run(&run.scenario, &run.variant)?;
    Ok((labelled(run, result), events))
}

/// The result labelled with the run's peer sidecar, if any: the simulator runs a peer variant's
/// policies as the peer does (crates/policy/src/peer, docs/lab.md).
fn labelled(run: &Run, result: RunResult) -> RunResult {
    RunResult { sidecar: run.sidecar.peer(), ..result }
}

/// [`run_one`], also keeping the spans of up to `sample` measured requests (docs/traces.md).
/// The result is the same as without traces: tracing draws from a random stream of its own.
pub fn run_one_traced(run: &Run, seed: u64, sample: usize) -> Result<(RunResult, u64, Vec<Trace>), SimError> {
    runnable(run)?;
    let seed = run.stream_seed(seed);
    let mut world = world::World::new(run, seed)?;
    world.trace(run, seed, sample);
    let (result, events, traces) = world.run_traced(&run.scenario, &run.variant)?;
    Ok((labelled(run, result), events, traces))
}

/// Runs every scenario × variant of `experiment` and collects the results in file order.
pub fn simulate(
    experiment: &Experiment,
    options: Options,
    progress: impl FnMut(Progress<'_>) + Send,
) -> Result<Results, SimError> {
    simulate_inner(experiment, options, None, progress).map(|(results, _)| results)
}

/// [`simulate`], also keeping the spans of up to `sample` measured requests per run, every
/// run's traces in file order (each process tagged with its run's scenario and variant).
pub fn simulate_traced(
    experiment: &Experiment,
    options: Options,
    sample: usize,
    progress: impl FnMut(Progress<'_>) + Send,
) -> Result<(Results, Vec<Trace>), SimError> {
    simulate_inner(experiment, options, Some(sample), progress)
}

fn simulate_inner(
    experiment: &Experiment,
    options: Options,
    sample: Option<usize>,
    mut progress: impl FnMut(Progress<'_>) + Send,
) -> Result<(Results, Vec<Trace>), SimError> {
    let mut runs = Vec::new();
    let (scenarios, variants) = experiment.select(&options.scenarios, &options.variants)?;
    for scenario in &scenarios {
        for variant in &variants {
            let mut run = experiment.resolve(scenario, variant, options.quick)?;
            if let Some(calibration) = &options.calibration {
                run.calibration = Some(calibration.clone());
            }
            runnable(&run)?;
            runs.push(run);
        }
    }
    let total = runs.len();
    let calibration = runs.iter().find_map(|r: &Run| r.calibration.clone());
    type Slot = Option<Result<(RunResult, Vec<Trace>), SimError>>;
    let slots: Vec<Mutex<Slot>> = (0..total).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let done = Mutex::new((0usize, &mut progress));
    std::thread::scope(|scope| {
        for _ in 0..options.threads.clamp(1, total.max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(run) = runs.get(i) else { break };
                let outcome = match sample {
                    Some(n) => run_one_traced(run, options.seed, n),
                    None => run_one(run, options.seed).map(|(r, e)| (r, e, Vec::new())),
                };
                if let Ok((result, events, _)) = &outcome {
                    let mut done = done.lock().expect("progress lock");
                    done.0 += 1;
                    let n = done.0;
                    (done.1)(Progress { done: n, total, result, events: *events });
                }
                *slots[i].lock().expect("slot lock") = Some(outcome.map(|(r, _, t)| (r, t)));
            });
        }
    });
    let mut runs = Vec::with_capacity(total);
    let mut traces = Vec::new();
    for slot in slots {
        let (run, t) = slot.into_inner().expect("slot lock").expect("every run was simulated")?;
        runs.push(run);
        traces.extend(t);
    }
    let results = Results {
        experiment: experiment.file.name.clone(),
        mode: "sim".to_string(),
        seed: options.seed,
        runs,
        calibration,
    };
    Ok((results, traces))
}
