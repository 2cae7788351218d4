//! tailguard experiment files: the schema ([`schema`]), loading with overrides and validation
//! ([`Experiment`]), service-time distributions ([`Sampler`]), latency models ([`LatencyCurve`])
//! and the construction of policy-core objects from their configuration ([`build`]).
//!
//! docs/experiment-files.md is the user reference of the format. The API:
//! - [`Experiment::load`]`(path)` / [`Experiment::parse`]`(text, origin)` read, parse and validate a
//!   file (every override list is checked against it too); `experiment.file` is the file as
//!   written; [`Experiment::scenario_names`] (`["default"]` when the file has none),
//!   [`Experiment::variant_names`], [`Experiment::seed`].
//! - [`Experiment::resolve`]`(scenario, variant, quick)` applies the `quick` overrides (if quick),
//!   the scenario's `set`, the variant's `set`, `client`, `edges` and `admission`, validates, and
//!   returns a self-contained [`Run`] (`services`, `network`, `workload`, `base_dir`) with every
//!   edge's `policy` final; [`Run::horizon`] is warm-up + duration.
//! - [`Distribution::sampler`]`(base_dir)` → [`Sampler`]: `sample(rng) -> Duration`, `mean()`.
//! - [`LatencyModel::curve`]`(horizon, seed)` → [`LatencyCurve`]: `factor(t)` for any `t`, in any
//!   order.
//! - [`build::client_policy`]`(config, endpoints)` and [`build::admission`]`(config)` build the
//!   policy core's objects; config left out takes each policy's defaults.
//! - [`replica::ReplicaModel`]: what one replica does to the requests it receives (faults, work
//!   time), shared by the simulator and `tailguard serve`.
//! - [`results`]: the results-JSON schema ([`Results`], [`RunResult`]) and its maths, one
//!   implementation for the simulator, the lab and the load generator.
//! - [`ArrivalSchedule`]: open-loop intended start times (constant or seeded Poisson), shared by
//!   the simulator and the load generator.
//! - [`Calibration`]: a machine's hops through real sidecars (`tailguard lab calibrate`), which
//!   `network: {calibrated: FILE}` makes the simulator charge.
//! - [`fuzz`]: the experiment file's fuzz entry point and the seeded mutator tests run them with.
//! - [`Dur`]: a `Duration` written with a unit (`250ms`, `1.5s`); a bare number is an error.
//! - [`ModelError`]: `FILE: PATH: what was wrong, what was expected`.

pub mod arrivals;
pub mod build;
pub mod calibration;
pub mod dist;
pub mod duration;
pub mod error;
pub mod experiment;
pub mod fuzz;
pub mod latency;
pub mod overrides;
pub mod real;
pub mod replica;
pub mod results;
pub mod schema;
pub mod validate;

pub use arrivals::ArrivalSchedule;
pub use calibration::Calibration;
pub use dist::Sampler;
pub use duration::Dur;
pub use error::ModelError;
pub use experiment::{Experiment, Run, DEFAULT_SCENARIO};
pub use latency::LatencyCurve;
pub use real::{Kind, Program};
pub use results::{
    Latency, LatencyRecorder, ProcessMemory, ReplicaLoad, Results, RunResult, Series, ServiceWork, TimeoutSeries,
};
pub use schema::*;
