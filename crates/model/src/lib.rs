//! tailguard experiment files: the schema ([`schema`]), loading with overrides and validation
//! ([`Experiment`]), service-time distributions ([`Sampler`]), latency models ([`LatencyCurve`])
//! and the construction of policy-core objects from their configuration ([`build`]).
//!
//! PLANNED API (being written; the simulator codes against it):
//! - `Experiment::load(path) -> Result<Experiment, ModelError>`; `Experiment::parse(text, origin: &Path)`
//! - `experiment.file: ExperimentFile` (as written), `experiment.scenario_names() -> Vec<String>`
//!   (`["default"]` when the file has none), `experiment.variant_names() -> Vec<String>`,
//!   `experiment.seed() -> Option<u64>`
//! - `experiment.resolve(scenario, variant, quick: bool) -> Result<Run, ModelError>`: applies the
//!   `quick` overrides (if quick), the scenario's `set`, the variant's `set`, `client`, `edges` and
//!   `admission`, then validates; a `Run` is self-contained.
//! - `Run { scenario: String, variant: String, services: IndexMap<String, Service>, network: Network,
//!   workload: Workload, base_dir: PathBuf }` with every edge's `policy` final.
//! - `Distribution::sampler(&self, base_dir: &Path) -> Result<Sampler, ModelError>`;
//!   `Sampler::sample(&self, rng: &mut dyn RngCore) -> Duration`; `Sampler::mean() -> Duration`.
//! - `LatencyModel::curve(&self, horizon: Option<Duration>, seed: u64) -> Result<LatencyCurve, ModelError>`;
//!   `LatencyCurve::factor(&mut self, t: Duration) -> f64` (t from the run's start, any order).
//! - `build::client_policy(&ClientPolicy, endpoints: usize) -> tailguard_policy::call::ClientPolicy`;
//!   `build::admission(&Admission) -> Box<dyn tailguard_policy::admission::Admission>`.
//! - `Dur`: a `Duration` newtype that deserialises from "250ms", "1.5s", "10us", "2m" (bare numbers
//!   need a unit: a clear error says so), with `Dur::ZERO`, `.get() -> Duration`, `Display` in the same syntax.

pub mod schema;
