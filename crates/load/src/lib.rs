//! `tailguard load`: an HTTP load generator with exact percentiles.
//!
//! - **Open loop** ([`Shape::Constant`], [`Shape::Poisson`]): requests start at the times an
//!   [`ArrivalSchedule`] fixes in advance, whatever the server does, and each request's latency counts
//!   from its *intended* start, so a stall is charged to every request that was due during it
//!   (no coordinated omission, as in wrk2 and oha).
//! - **Closed loop** ([`Shape::Closed`]): N clients, each sending its next request when its
//!   last one ended, with an optional think time.
//!
//! A run stops after a duration or a request count (or the first of both), optionally after a
//! warm-up that is sent but not recorded. Targets are used round robin; every request has a
//! timeout. The [`LoadReport`] holds an HDR histogram of successful latencies, status codes and
//! errors by kind; it prints a vegeta-style [`summary`](LoadReport::summary) and converts to
//! the results JSON of docs/results.md ([`to_results`](LoadReport::to_results), mode "load").
//!
//! ```no_run
//! # async fn example() -> Result<(), tailguard_load::LoadError> {
//! use tailguard_load::{LoadConfig, Shape, Target};
//! let target = Target::parse("http://127.0.0.1:8080/", &hyper::Method::GET)?;
//! let report = tailguard_load::run(LoadConfig::new(vec![target], Shape::Constant { rate: 100.0 })).await?;
//! println!("{}", report.summary());
//! # Ok(()) }
//! ```

mod client;
mod closed_loop;
mod config;
mod error;
mod open_loop;
mod outcome;
mod report;
mod run;
mod target;

pub use config::{ClientTls, LoadConfig, Shape, Stop};
pub use error::LoadError;
pub use outcome::{ErrorKind, Outcome, Sample};
pub use report::LoadReport;
pub use run::run;
/// The open loop's intended start times, shared with the simulator.
pub use tailguard_model::ArrivalSchedule;
pub use target::{parse_method, Target};

/// Re-exported so callers can name methods and URIs without depending on hyper themselves.
pub use hyper::{Method, Uri};
