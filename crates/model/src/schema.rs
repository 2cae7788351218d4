//! The experiment-file schema: plain, `Clone + Debug` configuration types, deserialised from YAML
//! (docs/experiment-files.md describes every field). Validation lives in [`crate::validate`];
//! behaviour (sampling, latency models, policies) lives beside it, not here.

use crate::duration::Dur;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

/// A whole experiment file: a topology, a workload, and the variants compared over scenarios.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentFile {
    /// Short name, used in results.
    pub name: String,
    /// What the experiment shows, for people.
    #[serde(default)]
    pub description: String,
    /// The seed used when the command line gives none.
    #[serde(default)]
    pub seed: Option<u64>,
    /// Services by name, in file order.
    pub services: IndexMap<String, Service>,
    /// The network between any two services.
    #[serde(default)]
    pub network: Network,
    /// The load offered to the entry service.
    pub workload: Workload,
    /// Policy sets to compare; at least one.
    pub variants: Vec<Variant>,
    /// Conditions to run every variant under; none means one scenario named `default`.
    #[serde(default)]
    pub scenarios: Vec<Scenario>,
    /// Overrides applied when the run is `--quick` (shorter, smaller), as path → value.
    #[serde(default)]
    pub quick: IndexMap<String, serde_yaml_ng::Value>,
}

/// One service: identical replicas, each with workers and a FIFO queue.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    /// Number of replicas (at least 1).
    #[serde(default = "one", deserialize_with = "positive")]
    pub replicas: u32,
    /// Requests a replica processes at once; 0 means unlimited (no queueing).
    #[serde(default)]
    pub workers: u32,
    /// Time a worker spends on one request, before any downstream calls.
    #[serde(default)]
    pub service_time: Distribution,
    /// How the service time changes over the run (a multiplier on it).
    #[serde(default)]
    pub latency_model: LatencyModel,
    /// Admission control at each replica.
    #[serde(default)]
    pub admission: Admission,
    /// Faults injected at this service.
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// Calls made to other services after the local work, for each request.
    #[serde(default)]
    pub calls: Vec<CallEdge>,
    /// Whether `calls` run one after another or all at once.
    #[serde(default)]
    pub fanout: Fanout,
    /// What runs as each replica: `tailguard serve` (synthetic) or a real program (lab only).
    #[serde(default)]
    pub kind: crate::real::Kind,
    /// The real program's own parameters (docs/experiment-files.md lists them per kind).
    #[serde(default)]
    pub config: IndexMap<String, serde_yaml_ng::Value>,
}

fn one() -> u32 {
    1
}

impl Service {
    /// The kind with its parameters (checked when the file was read, so this cannot fail then).
    pub fn program(&self) -> Result<crate::real::Program, crate::ModelError> {
        crate::real::Program::parse(self.kind, &self.config)
    }
}

/// A count that must be at least 1, with the error people expect for 0 and negative numbers
/// (raised inside the visitor, so the YAML location is the value's).
fn positive<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    struct Positive;
    impl serde::de::Visitor<'_> for Positive {
        type Value = u32;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a positive integer")
        }
        fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<u32, E> {
            u32::try_from(n)
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| E::custom(format!("expected a positive integer, got {n}")))
        }
        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<u32, E> {
            u32::try_from(n)
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| E::custom(format!("expected a positive integer, got {n}")))
        }
    }
    deserializer.deserialize_u32(Positive)
}

/// Whether a service's downstream calls run one after another or in parallel.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Fanout {
    /// Each call starts when the previous one has answered.
    #[default]
    Sequential,
    /// All calls start together; the request answers when all have.
    Parallel,
}

/// A call from a service to another, with the caller's policies for it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallEdge {
    /// The called service.
    pub service: String,
    /// How many such calls each request makes.
    #[serde(default = "one")]
    pub count: u32,
    /// The caller's policies towards the called service (variants may replace them).
    #[serde(default)]
    pub policy: ClientPolicy,
}

/// A caller's policies towards one called service.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClientPolicy {
    /// Endpoint choice.
    #[serde(default)]
    pub balancer: Balancer,
    /// Per-attempt timeouts.
    #[serde(default)]
    pub timeout: Timeout,
    /// Speculative attempts.
    #[serde(default)]
    pub hedge: Hedge,
    /// Retries of failed attempts.
    #[serde(default)]
    pub retry: Retry,
    /// The longest a request may take in all; attempts are clamped by what remains of it.
    #[serde(default)]
    pub deadline: Option<Dur>,
}

/// Load balancer choice (docs/policies.md).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Balancer {
    /// Uniformly at random.
    Random,
    /// In turn.
    #[default]
    RoundRobin,
    /// P2C on this caller's in-flight requests (Envoy's default).
    LeastRequest,
    /// P2C on RTT × (pending + 1) (Linkerd's default).
    PeakEwma {
        /// Decay time of the RTT estimate.
        #[serde(default)]
        decay: Option<Dur>,
    },
    /// BLOC confidence chips (bloc-load-balancing.txt §IV).
    Bloc {
        /// How long a rejecting or chipless endpoint waits before it is probed again.
        #[serde(default)]
        reset: Option<Dur>,
    },
    /// Join-shortest-queue on true queue lengths (simulator only).
    Oracle,
}

/// Timeout policy choice (adaptive-timeouts.txt).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Timeout {
    /// No timeout (the deadline still applies).
    #[default]
    None,
    /// The same timeout for every attempt.
    Fixed { value: Dur },
    /// first · factor^n for attempt n, `steps` values.
    ExpBackoff {
        first: Dur,
        #[serde(default = "two")]
        factor: f64,
        #[serde(default = "five")]
        steps: u32,
    },
    /// An explicit increasing sequence (§3.4).
    Sequential { values: Vec<Dur> },
    /// The TCP-inspired Controller (§3.7, §4.4).
    Controller {
        initial: Dur,
        #[serde(default)]
        factor: Option<f64>,
        #[serde(default)]
        tolerance: Option<f64>,
        #[serde(default)]
        buffer: Option<f64>,
    },
    /// The expected-latency Optimizer (§3.6, §4.3).
    Optimizer {
        initial: Dur,
        #[serde(default)]
        sample_every: Option<u32>,
        #[serde(default)]
        window: Option<u32>,
        #[serde(default)]
        recompute_every: Option<u32>,
        #[serde(default)]
        cost_per_second: Option<f64>,
        #[serde(default)]
        sequence_len: Option<u32>,
    },
    /// tailguard's own adaptive timeout (docs/policies.md).
    Adaptive {
        initial: Dur,
        #[serde(default)]
        k: Option<f64>,
        #[serde(default)]
        margin: Option<f64>,
        #[serde(default)]
        escalation: Option<f64>,
    },
}

fn two() -> f64 {
    2.0
}
fn five() -> u32 {
    5
}

/// Hedging choice.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Hedge {
    /// No hedged attempts.
    #[default]
    None,
    /// speculative-task.txt: up to `attempts` in all, one more every `patience`; `timeout` bounds the whole.
    Speculative {
        attempts: u32,
        patience: Dur,
        #[serde(default)]
        timeout: Option<Dur>,
    },
    /// A hedge after the live `percentile` of latency, at most `max_extra` extra load.
    Percentile {
        #[serde(default)]
        percentile: Option<f64>,
        #[serde(default)]
        max_extra: Option<f64>,
        #[serde(default)]
        max_hedges: Option<u32>,
    },
}

/// Retry rules.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Retry {
    /// Attempts in all, the first included (1 = no retries).
    #[serde(default = "one")]
    pub max_attempts: u32,
    /// Base of the exponential backoff between retries of errors and timeouts.
    #[serde(default)]
    pub backoff: Option<Dur>,
    /// Cap of the backoff.
    #[serde(default)]
    pub max_backoff: Option<Dur>,
    /// Full jitter on the backoff.
    #[serde(default = "yes")]
    pub jitter: bool,
    /// Retries allowed as a fraction of requests (a budget); none means unlimited.
    #[serde(default)]
    pub budget: Option<f64>,
    /// Whether requests that are not idempotent may be retried and hedged.
    #[serde(default)]
    pub non_idempotent: bool,
    /// Whether an attempt whose timeout fired keeps running alongside its retry.
    #[serde(default)]
    pub hedge_on_timeout: bool,
}

fn yes() -> bool {
    true
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            max_attempts: 1,
            backoff: None,
            max_backoff: None,
            jitter: true,
            budget: None,
            non_idempotent: false,
            hedge_on_timeout: false,
        }
    }
}

/// Admission control at a replica.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Admission {
    /// Admit everything.
    #[default]
    None,
    /// Refuse with 429 above `capacity` requests held.
    Fixed { capacity: u32 },
    /// BLOC's running-mean capacity, recomputed every `window` (§IV-D).
    Dynamic {
        #[serde(default)]
        window: Option<Dur>,
    },
}

/// A distribution of durations.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "dist", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Distribution {
    /// Always `value`.
    Constant { value: Dur },
    /// Uniform between `low` and `high`.
    Uniform { low: Dur, high: Dur },
    /// Exponential with this mean.
    Exponential { mean: Dur },
    /// Log-normal with this median and shape `sigma`.
    Lognormal { median: Dur, sigma: f64 },
    /// Pareto with this scale (minimum) and shape.
    Pareto { scale: Dur, shape: f64 },
    /// A mixture: `slow` with probability `slow_fraction`, else `fast`.
    Bimodal { fast: Box<Distribution>, slow: Box<Distribution>, slow_fraction: f64 },
    /// Values read from a file (one duration per line, e.g. `12.5ms`; bare numbers are ms),
    /// sampled uniformly. The path is relative to the experiment file.
    Empirical { file: String },
}

impl Default for Distribution {
    fn default() -> Self {
        Distribution::Constant { value: Dur::ZERO }
    }
}

/// How a service's latency changes over the run: a factor on its service time
/// (adaptive-timeouts.txt §5.2's eight models). Times are from the start of the run.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum LatencyModel {
    /// Factor 1 throughout.
    #[default]
    Stable,
    /// Mean-reverting random walk around `mean`, stepped every `step`.
    RandomWalk {
        #[serde(default = "one_f")]
        mean: f64,
        volatility: f64,
        reversion: f64,
        #[serde(default)]
        step: Option<Dur>,
    },
    /// Linear change from `from` to `to` between `start` and `end`.
    SlowIncrease {
        from: f64,
        to: f64,
        #[serde(default)]
        start: Option<Dur>,
        #[serde(default)]
        end: Option<Dur>,
    },
    /// Linear change from `from` to `to` between `start` and `end`.
    SlowDecrease {
        from: f64,
        to: f64,
        #[serde(default)]
        start: Option<Dur>,
        #[serde(default)]
        end: Option<Dur>,
    },
    /// A jump from `from` to `to` at `at` (over `ramp`).
    FastIncrease {
        from: f64,
        to: f64,
        #[serde(default)]
        at: Option<Dur>,
        #[serde(default)]
        ramp: Option<Dur>,
    },
    /// A drop from `from` to `to` at `at` (over `ramp`).
    FastDecrease {
        from: f64,
        to: f64,
        #[serde(default)]
        at: Option<Dur>,
        #[serde(default)]
        ramp: Option<Dur>,
    },
    /// `base`, rising to `peak` for `length` every `every`.
    Spikes { base: f64, peak: f64, every: Dur, length: Dur },
    /// `base`, falling to `low` for `length` every `every`.
    Dips { base: f64, low: f64, every: Dur, length: Dur },
}

fn one_f() -> f64 {
    1.0
}

/// A fault injected at a service.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Fault {
    /// Some requests take `service_time` (or `factor` × the usual) instead: a `fraction` of them
    /// at random, or every `every`-th request a replica receives.
    Slow {
        #[serde(default)]
        fraction: Option<f64>,
        #[serde(default)]
        every: Option<u32>,
        #[serde(default)]
        service_time: Option<Distribution>,
        #[serde(default)]
        factor: Option<f64>,
    },
    /// A fraction of requests answer with an error (500).
    Error { rate: f64 },
    /// A fraction of requests are never answered.
    Lost { fraction: f64 },
    /// Replica `replica` (or all, if absent) is down from `from` to `to`: unreachable.
    Down {
        #[serde(default)]
        replica: Option<u32>,
        from: Dur,
        to: Dur,
    },
}

/// The network between services.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// One-way delay of each hop (client → service, service → service, and back).
    #[serde(default)]
    pub delay: Dur,
}

/// The load offered to the entry service.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// The service requests enter.
    pub target: String,
    /// Open-loop arrivals; exactly one of `open` and `closed`.
    #[serde(default)]
    pub open: Option<OpenLoop>,
    /// Closed-loop clients.
    #[serde(default)]
    pub closed: Option<ClosedLoop>,
    /// How long the load runs (after the warm-up).
    #[serde(default)]
    pub duration: Option<Dur>,
    /// Or how many requests are sent (after the warm-up).
    #[serde(default)]
    pub requests: Option<u64>,
    /// Time at the start whose requests are not measured.
    #[serde(default)]
    pub warmup: Dur,
    /// Whether requests are idempotent (retries and hedges need it by default).
    #[serde(default = "yes")]
    pub idempotent: bool,
    /// The load generator's own policies towards the target.
    #[serde(default)]
    pub client: ClientPolicy,
}

/// Open-loop arrivals at a rate.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OpenLoop {
    /// Requests per second.
    pub rate: f64,
    /// Arrival process.
    #[serde(default)]
    pub arrival: Arrival,
}

/// Open-loop arrival process.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Arrival {
    /// Exponential inter-arrival times.
    #[default]
    Poisson,
    /// Evenly spaced.
    Constant,
}

/// Closed-loop clients: each sends its next request when the previous one ends.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClosedLoop {
    /// Number of clients.
    pub clients: u32,
    /// Pause between a response and the client's next request.
    #[serde(default)]
    pub think: Dur,
}

/// A policy set compared against the others.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    /// Name in results.
    pub name: String,
    /// Replaces the policy of every call edge not named in `edges` (not the workload's `client`).
    #[serde(default)]
    pub client: Option<ClientPolicy>,
    /// Policies of particular edges, keyed `caller->callee` (`workload->TARGET` for the workload's client).
    #[serde(default)]
    pub edges: IndexMap<String, ClientPolicy>,
    /// Admission control per service name.
    #[serde(default)]
    pub admission: IndexMap<String, Admission>,
    /// Any other overrides, as path → value.
    #[serde(default)]
    pub set: IndexMap<String, serde_yaml_ng::Value>,
}

/// A condition every variant is run under.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name in results.
    pub name: String,
    /// Overrides, as path → value (e.g. `services.frontend.replicas: 40`).
    #[serde(default)]
    pub set: IndexMap<String, serde_yaml_ng::Value>,
}
