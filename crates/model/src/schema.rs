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
    /// Time a worker spends on one attempt, before any downstream calls (the same as `work:
    /// {per_attempt: ...}`).
    #[serde(default)]
    pub service_time: Distribution,
    /// The local work split between the request and the attempt, instead of `service_time`.
    #[serde(default)]
    pub work: Option<Work>,
    /// The routes the service serves, each with its own share of the requests, work and calls;
    /// none: every request is alike (the service's `service_time` and `calls`).
    #[serde(default)]
    pub routes: Vec<Route>,
    /// How the service time changes over the run (a multiplier on it).
    #[serde(default)]
    pub latency_model: LatencyModel,
    /// Admission control at each replica.
    #[serde(default)]
    pub admission: AdmissionConfig,
    /// Faults injected at this service.
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// Replicas that differ from the rest, by group name (their own service time, workers,
    /// latency model, admission, added faults).
    #[serde(default)]
    pub groups: IndexMap<String, Group>,
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
    /// Whether the replicas run tailguard's sidecar beside them (default): `false` models
    /// endpoints outside the mesh (a database proxy, another team's service), whose callers see
    /// no load reports, chips or admission from them. Such a service makes no calls.
    #[serde(default = "yes")]
    pub sidecar: bool,
    /// Whether a replica stops working on a request its caller abandoned (a lost hedge, a
    /// timed-out attempt, an ended request): the cancel reaches it one network delay later, as a
    /// reset stream reaches a real server through its sidecar. `false` models a server that
    /// notices nothing and finishes the work.
    #[serde(default = "yes")]
    pub cancellable: bool,
}

fn one() -> u32 {
    1
}

fn yes() -> bool {
    true
}

impl Service {
    /// The local work of a request of `route` (an index into `routes`), or of no route: the
    /// route's own `work` or `service_time`, else the service's.
    pub fn work_of(&self, route: Option<usize>) -> Work {
        let own = route.and_then(|r| self.routes.get(r)).and_then(|r| r.own_work());
        own.unwrap_or_else(|| {
            self.work.clone().unwrap_or(Work { per_request: None, per_attempt: Some(self.service_time.clone()) })
        })
    }

    /// The calls a request of `route` (an index into `routes`), or of no route, makes: the
    /// route's own, else the service's.
    pub fn calls_of(&self, route: Option<usize>) -> &[CallEdge] {
        match route.and_then(|r| self.routes.get(r)).and_then(|r| r.calls.as_ref()) {
            Some(calls) => calls,
            None => &self.calls,
        }
    }

    /// Every call edge: the service's, then each route's own, in file order.
    pub fn all_calls(&self) -> impl Iterator<Item = &CallEdge> {
        self.calls.iter().chain(self.routes.iter().flat_map(|r| r.calls.iter().flatten()))
    }

    /// [`Service::all_calls`], to change their policies.
    pub fn all_calls_mut(&mut self) -> impl Iterator<Item = &mut CallEdge> {
        self.calls.iter_mut().chain(self.routes.iter_mut().flat_map(|r| r.calls.iter_mut().flatten()))
    }

    /// The mean local work of its requests: over its routes by weight, or the service's own.
    pub fn mean_work(&self, base_dir: &std::path::Path) -> std::time::Duration {
        let mean = |d: &Option<Distribution>| {
            d.as_ref().and_then(|d| d.sampler(base_dir).ok()).map_or(0.0, |s| s.mean().as_secs_f64())
        };
        let of = |route: Option<usize>| {
            let w = self.work_of(route);
            mean(&w.per_request) + mean(&w.per_attempt)
        };
        let total: f64 = self.routes.iter().map(|r| r.weight).sum();
        let secs = if self.routes.is_empty() || total.is_nan() || total <= 0.0 {
            of(None)
        } else {
            self.routes.iter().enumerate().map(|(i, r)| r.weight / total * of(Some(i))).sum()
        };
        std::time::Duration::from_secs_f64(secs.max(0.0))
    }

    /// The names of its routes, in file order.
    pub fn route_names(&self) -> Vec<String> {
        self.routes.iter().map(|r| r.name.clone()).collect()
    }

    /// The service as replica `replica` runs it: the fields of the group that holds it (if any)
    /// in place of the service's, its faults after the service's, and no groups.
    pub fn for_replica(&self, replica: u32) -> Service {
        let mut service = Service { groups: IndexMap::new(), ..self.clone() };
        for group in self.groups.values().filter(|g| g.replicas.contains(replica)) {
            service.workers = group.workers.unwrap_or(service.workers);
            if let Some(d) = &group.service_time {
                service.service_time = d.clone();
                service.work = None;
            }
            if let Some(m) = &group.latency_model {
                service.latency_model = m.clone();
            }
            if let Some(a) = &group.admission {
                service.admission = a.clone();
            }
            service.sidecar = group.sidecar.unwrap_or(service.sidecar);
            service.faults.extend(group.faults.iter().cloned());
        }
        service
    }

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
    /// The called service's route each call takes (by name); left out, a route drawn by the
    /// routes' weights for each call (when the called service has routes).
    #[serde(default)]
    pub route: Option<String>,
    /// The caller's policies towards the called service (variants may replace them).
    #[serde(default)]
    pub policy: ClientPolicy,
}

/// A caller's policies towards one called service; each section is the policy family's own
/// config type (crates/policy), so a new policy parameter is added there alone.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClientPolicy {
    /// Endpoint choice.
    #[serde(default)]
    pub balancer: BalancerConfig,
    /// Outlier ejection of endpoints that keep failing or answer far more slowly than the
    /// others, for any balancer: on at its defaults when left out, `off` to opt out.
    #[serde(default, skip_serializing_if = "OutlierSetting::is_default")]
    pub outlier: OutlierSetting,
    /// Per-attempt timeouts.
    #[serde(default)]
    pub timeout: TimeoutConfig,
    /// Speculative attempts.
    #[serde(default)]
    pub hedge: HedgeConfig,
    /// Retries of failed attempts.
    #[serde(default)]
    pub retry: RetryConfig,
    /// The longest a request may take in all; attempts are clamped by what remains of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Dur>,
    /// Per route of the called service (by name), what that route's requests use instead of the
    /// timeout, hedge and deadline above (Gateway API's HTTPRoute timeouts, Linkerd's per-route
    /// policy). Each route keeps its own learned models whether or not it is listed here.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub routes: IndexMap<String, RoutePolicy>,
}

/// What one route changes of its caller's [`ClientPolicy`]; what is left out is the policy's.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RoutePolicy {
    /// The route's per-attempt timeouts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<TimeoutConfig>,
    /// The route's hedging.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hedge: Option<HedgeConfig>,
    /// The route's request deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Dur>,
}

impl ClientPolicy {
    /// The policy the requests of route `name` follow: this one with the route's entry in
    /// `routes` applied, if it has one.
    pub fn for_route(&self, name: &str) -> ClientPolicy {
        let mut policy = ClientPolicy { routes: IndexMap::new(), ..self.clone() };
        if let Some(route) = self.routes.get(name) {
            policy.timeout = route.timeout.clone().unwrap_or(policy.timeout);
            policy.hedge = route.hedge.clone().unwrap_or(policy.hedge);
            policy.deadline = route.deadline.or(policy.deadline);
        }
        policy
    }
}

/// A service's local work, split between what belongs to the request and what to each attempt:
/// the part per request is drawn once and every attempt of that request (a retry, a hedge, on
/// any replica) does it; the part per attempt is drawn afresh for each. Either may be left out
/// (no work of that kind); an attempt works for their sum (times the latency model's factor).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Work {
    /// Work every attempt of a request does alike: its route's, its payload's, a cold key's.
    #[serde(default)]
    pub per_request: Option<Distribution>,
    /// Work drawn for each attempt: queueing aside, a replica's own noise.
    #[serde(default)]
    pub per_attempt: Option<Distribution>,
}

/// One route of a service: which requests it is (`match`), how many of them (`weight`), and what
/// they cost (their own `service_time` or `work`, and `calls`; left out, the service's).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Its name, in results and in policies' `routes`.
    pub name: String,
    /// The requests it is; the load generator sends its path and method.
    #[serde(rename = "match", default)]
    pub matches: RouteMatch,
    /// Its share of the requests the service receives, relative to the other routes' (1).
    #[serde(default = "one_f")]
    pub weight: f64,
    /// Time a worker spends on one attempt (the same as `work: {per_attempt: ...}`).
    #[serde(default)]
    pub service_time: Option<Distribution>,
    /// The local work split between the request and the attempt.
    #[serde(default)]
    pub work: Option<Work>,
    /// The calls its requests make instead of the service's.
    #[serde(default)]
    pub calls: Option<Vec<CallEdge>>,
    /// Its requests' priority at the service's admission (`low` is refused first by `adaptive`
    /// admission): on real processes, requests of a low route carry [`PRIORITY_HEADER`].
    #[serde(default)]
    pub priority: Priority,
}

impl Route {
    /// The route's own work, if it sets one.
    fn own_work(&self) -> Option<Work> {
        self.work
            .clone()
            .or_else(|| self.service_time.clone().map(|d| Work { per_request: None, per_attempt: Some(d) }))
    }
}

/// Which requests a route is: a path prefix (for gRPC the `/package.Service/Method` path) and,
/// if given, a method. The load generator sends the path itself.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RouteMatch {
    /// The path prefix (`/search`), from the root.
    #[serde(default = "root")]
    pub path: String,
    /// The HTTP method (`GET`, `POST`); left out, any (the load generator sends GET).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
}

impl Default for RouteMatch {
    fn default() -> Self {
        RouteMatch { path: root(), method: None }
    }
}

impl RouteMatch {
    /// Whether a request of `method` to `path` is this route's.
    pub fn matches(&self, method: &str, path: &str) -> bool {
        self.method.as_deref().is_none_or(|m| m.eq_ignore_ascii_case(method)) && prefix_matches(&self.path, path)
    }
}

/// Whether `path` starts with `prefix` at a segment boundary (`/search` matches `/search` and
/// `/search/x`, not `/searching`), or `prefix` ends with `/`.
pub fn prefix_matches(prefix: &str, path: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/') || rest.starts_with('?'),
        None => false,
    }
}

fn root() -> String {
    "/".to_string()
}

impl ClientPolicy {
    /// Whether the load generator applies it itself, so that no sidecar runs for it in the lab:
    /// round robin and nothing else, ejection left out or off (it calls the entry replicas
    /// directly, as users would, and so ejects nothing).
    pub fn is_plain(&self) -> bool {
        matches!(self.outlier, OutlierSetting::Default | OutlierSetting::Off)
            && ClientPolicy { outlier: OutlierSetting::Default, ..self.clone() } == ClientPolicy::default()
    }
}

// The policies' own configuration types, re-exported under their own names for the experiment
// schema's users: each is its policy's schema (deserialisation, defaults and `validate()`), in
// crates/policy.
pub use tailguard_policy::admission::{AdmissionConfig, Priority, PRIORITY_HEADER};
pub use tailguard_policy::balance::{BalancerConfig, OutlierConfig, OutlierSetting};
pub use tailguard_policy::hedge::HedgeConfig;
pub use tailguard_policy::retry::RetryConfig;
pub use tailguard_policy::timeout::TimeoutConfig;

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

/// A fault injected at a service: what it does ([`FaultKind`]), on which replica and when.
///
/// A fault is active for a request at replica `r` and time `t` (since the run started) when
/// `replica` is absent or `r`, and `from ≤ t < until` (each bound optional). `t` is the request's
/// arrival for `error`, `lost` and `down`, its work's start for `slow`; `hang` holds the replica
/// for the whole window. A fault that is not active still makes its random draws, so a request
/// meets the same luck whatever the windows.
// No `deny_unknown_fields` here: serde refuses the flattened `kind` with it; each kind denies
// the fields it does not know instead.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Fault {
    /// What the fault does.
    #[serde(flatten)]
    pub kind: FaultKind,
    /// The one replica it applies to (index from 0); all of the service's (or group's) if absent.
    #[serde(default)]
    pub replica: Option<u32>,
    /// When it starts (since the run started); the start of the run if absent.
    #[serde(default)]
    pub from: Option<Dur>,
    /// When it ends (`to` is accepted too, as `down` faults have always written it); never if
    /// absent.
    #[serde(default, alias = "to")]
    pub until: Option<Dur>,
}

/// What a fault does to the requests it meets.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum FaultKind {
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
    /// A fraction `rate` (default all) of requests answer with an error (500): after their local
    /// work, or, with `after`, that long after they arrive without taking a worker (a "black
    /// hole" that answers at once with `after: 0s`).
    Error {
        #[serde(default = "one_f")]
        rate: f64,
        #[serde(default)]
        after: Option<Dur>,
    },
    /// A `fraction` (default all) of requests are never answered.
    Lost {
        #[serde(default = "one_f")]
        fraction: f64,
    },
    /// The replica neither starts nor finishes anything: requests that arrive are admitted and
    /// wait for the window's end to start their work; work and answers due in the window happen
    /// as it closes.
    Hang {},
    /// The replica is unreachable: every request is answered 503 at once.
    Down {},
}

impl Fault {
    /// Whether the fault applies to `replica` at `now` (since the run started).
    pub fn active(&self, replica: u32, now: std::time::Duration) -> bool {
        self.replica.is_none_or(|r| r == replica)
            && self.from.is_none_or(|from| from.get() <= now)
            && self.until.is_none_or(|until| now < until.get())
    }

    /// Whether the fault applies to `replica` at any time.
    pub fn applies_to(&self, replica: u32) -> bool {
        self.replica.is_none_or(|r| r == replica)
    }
}

/// For logs: `hang from 10s until 20s`, `error (rate 0.5, after 0s)`, `slow (fraction 0.1,
/// factor 3) on replica 2`.
impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut params = Vec::new();
        let name = match &self.kind {
            FaultKind::Slow { fraction, every, service_time, factor } => {
                params.extend(fraction.map(|x| format!("fraction {x}")));
                params.extend(every.map(|n| format!("every {n}")));
                params.extend(factor.map(|k| format!("factor {k}")));
                params.extend(service_time.as_ref().map(|_| "own service_time".to_string()));
                "slow"
            }
            FaultKind::Error { rate, after } => {
                params.push(format!("rate {rate}"));
                params.push(after.map_or("after the work".to_string(), |a| format!("after {a}")));
                "error"
            }
            FaultKind::Lost { fraction } => {
                params.push(format!("fraction {fraction}"));
                "lost"
            }
            FaultKind::Hang {} => "hang",
            FaultKind::Down {} => "down",
        };
        write!(f, "{name}")?;
        if !params.is_empty() {
            write!(f, " ({})", params.join(", "))?;
        }
        if let Some(r) = self.replica {
            write!(f, " on replica {r}")?;
        }
        match (self.from, self.until) {
            (None, None) => write!(f, " for the whole run"),
            (Some(from), None) => write!(f, " from {from}"),
            (None, Some(until)) => write!(f, " until {until}"),
            (Some(from), Some(until)) => write!(f, " from {from} until {until}"),
        }
    }
}

/// Replicas of a service that differ from the rest: each field set here replaces the service's
/// for these replicas, and `faults` are added to the service's.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Group {
    /// The replicas: an index, a list of indices, or a range `"A-B"` (both ends included).
    pub replicas: ReplicaSet,
    /// Requests a replica of the group processes at once (0: unlimited).
    #[serde(default)]
    pub workers: Option<u32>,
    /// Time a worker spends on one request.
    #[serde(default)]
    pub service_time: Option<Distribution>,
    /// How the service time changes over the run.
    #[serde(default)]
    pub latency_model: Option<LatencyModel>,
    /// Admission control at each replica of the group.
    #[serde(default)]
    pub admission: Option<AdmissionConfig>,
    /// Whether the group's replicas run tailguard's sidecar (the service's `sidecar` when left
    /// out): a mixed set, part of it outside the mesh.
    #[serde(default)]
    pub sidecar: Option<bool>,
    /// Faults of these replicas, after the service's own.
    #[serde(default)]
    pub faults: Vec<Fault>,
}

/// Replica indices, written as one index (`3`), a list (`[0, 4]`) or a range (`"0-2"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaSet(pub Vec<u32>);

impl ReplicaSet {
    /// Whether `replica` is in the set.
    pub fn contains(&self, replica: u32) -> bool {
        self.0.contains(&replica)
    }
}

impl<'de> Deserialize<'de> for ReplicaSet {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<ReplicaSet, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = ReplicaSet;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a replica index, a list of indices or a range \"A-B\"")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<ReplicaSet, E> {
                index(n).map(|n| ReplicaSet(vec![n]))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<ReplicaSet, E> {
                Err(E::custom(format!("expected a replica index (0 or more), got {n}")))
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<ReplicaSet, E> {
                let bad = || E::custom(format!("expected a range such as \"0-2\", got {text:?}"));
                let (low, high) = text.split_once('-').unwrap_or((text, text));
                let low: u32 = low.trim().parse().map_err(|_| bad())?;
                let high: u32 = high.trim().parse().map_err(|_| bad())?;
                if high < low {
                    return Err(E::custom(format!("expected a range from low to high, got {text:?}")));
                }
                Ok(ReplicaSet((low..=high).collect()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<ReplicaSet, A::Error> {
                let mut all = Vec::new();
                while let Some(n) = seq.next_element::<u32>()? {
                    all.push(n);
                }
                Ok(ReplicaSet(all))
            }
        }
        fn index<E: serde::de::Error>(n: u64) -> Result<u32, E> {
            u32::try_from(n).map_err(|_| E::custom(format!("expected a replica index, got {n}")))
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// The network between services. The proxy's file embeds it too (a sidecar's
/// `ingress.network_delay`, where the lab's sidecars delay each hop themselves).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// One-way delay of each hop (client → service, service → service, and back).
    #[serde(default)]
    pub delay: Dur,
    /// A uniform extra delay in [0, jitter) drawn for each hop, each way.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub jitter: Dur,
    /// A calibration file (`tailguard lab calibrate`, relative to the experiment file): the
    /// simulator adds to every call the round trip the lab's sidecars and processes add on the
    /// machine it describes. The lab adds nothing for it (its calls cost what they cost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibrated: Option<String>,
}

fn is_zero(d: &Dur) -> bool {
    d.get().is_zero()
}

impl Network {
    /// Whether no hop is delayed (a calibration aside, which only the simulator charges).
    pub fn is_zero(&self) -> bool {
        is_zero(&self.delay) && is_zero(&self.jitter)
    }

    /// One hop's one-way delay: `delay`, plus a uniform draw in [0, `jitter`) from `rng` when a
    /// jitter is given (without one nothing is drawn, so a file without jitter repeats its runs
    /// draw for draw). The simulator and the lab's sidecars both call it.
    pub fn hop(&self, rng: &mut impl rand::Rng) -> std::time::Duration {
        let jitter = self.jitter.get().as_nanos() as u64;
        if jitter == 0 {
            return self.delay.get();
        }
        self.delay.get() + std::time::Duration::from_nanos(rng.gen_range(0..jitter))
    }
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
    /// Pause between a response and the client's next request (`think` is an older spelling).
    #[serde(default, alias = "think")]
    pub think_time: Dur,
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
    pub admission: IndexMap<String, AdmissionConfig>,
    /// Any other overrides, as path → value.
    #[serde(default)]
    pub set: IndexMap<String, serde_yaml_ng::Value>,
    /// The proxy the lab runs beside every replica for this variant: tailguard's own, or a peer
    /// (HAProxy, nginx) configured from the variant's policies (docs/lab.md, "Peer sidecars").
    #[serde(default)]
    pub sidecar: SidecarKind,
}

/// Which proxy runs beside every replica in the lab.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SidecarKind {
    /// `tailguard proxy`: every policy of the schema.
    #[default]
    Tailguard,
    /// Debian's HAProxy, its configuration translated from the variant's policies.
    Haproxy,
    /// Debian's nginx, its configuration translated from the variant's policies.
    Nginx,
}

impl SidecarKind {
    /// The name files and results use: `tailguard`, `haproxy`, `nginx`.
    pub fn name(self) -> &'static str {
        match self {
            SidecarKind::Tailguard => "tailguard",
            SidecarKind::Haproxy => "haproxy",
            SidecarKind::Nginx => "nginx",
        }
    }

    /// The peer whose policies the variant runs (`None` for tailguard's own).
    pub fn peer_kind(self) -> Option<tailguard_policy::peer::Peer> {
        match self {
            SidecarKind::Tailguard => None,
            SidecarKind::Haproxy => Some(tailguard_policy::peer::Peer::Haproxy),
            SidecarKind::Nginx => Some(tailguard_policy::peer::Peer::Nginx),
        }
    }

    /// The peer's name for results (`None` for tailguard's own sidecar, which results leave
    /// unlabelled).
    pub fn peer(self) -> Option<String> {
        (self != SidecarKind::Tailguard).then(|| self.name().to_string())
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use std::time::Duration;

    #[test]
    fn a_hop_is_the_delay_plus_a_jitter_drawn_only_when_given() {
        let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(1);
        let fixed = Network { delay: Dur::from_millis(5), jitter: Dur::ZERO, calibrated: None };
        let before = rng.clone();
        assert_eq!(fixed.hop(&mut rng), Duration::from_millis(5));
        assert_eq!(format!("{rng:?}"), format!("{before:?}"), "no jitter, no draw");

        let jittered = Network { delay: Dur::from_millis(5), jitter: Dur::from_millis(2), calibrated: None };
        let hops: Vec<Duration> = (0..1000).map(|_| jittered.hop(&mut rng)).collect();
        assert!(hops.iter().all(|h| (Duration::from_millis(5)..Duration::from_millis(7)).contains(h)));
        let mean = hops.iter().sum::<Duration>() / 1000;
        assert!((Duration::from_micros(5900)..Duration::from_micros(6100)).contains(&mean), "{mean:?}");
    }

    #[test]
    fn the_network_reads_and_writes_its_jitter_only_when_given() {
        let n: Network = serde_yaml_ng::from_str("{delay: 5ms, jitter: 1ms}").unwrap();
        assert_eq!(n, Network { delay: Dur::from_millis(5), jitter: Dur::from_millis(1), calibrated: None });
        let plain: Network = serde_yaml_ng::from_str("{delay: 5ms}").unwrap();
        assert!(!serde_yaml_ng::to_string(&plain).unwrap().contains("jitter"));
        assert!(Network::default().is_zero() && !plain.is_zero());
    }
}
