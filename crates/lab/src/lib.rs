//! The lab (`tailguard lab run`, docs/lab.md): an experiment file, the very one the simulator
//! runs, run on real processes.
//!
//! For each scenario × variant it starts one `tailguard serve` per replica and beside each a
//! `tailguard proxy` sidecar ([`plan`]: addresses and the generated sidecar files), waits until
//! all answer `/healthz` ([`process`]), drives the file's workload with the load generator
//! (`tailguard_load`, in process), samples the sidecars' `/metrics` ([`measure`], [`scrape`]) and
//! the processes' resident memory ([`memory`]) each second, stops every process by its PID, and
//! gives the run's [`RunResult`] in the simulator's schema (mode "lab"). [`netns`] puts each replica in its own network namespace with
//! the file's per-hop delay.
//!
//! The sidecars export spans to a collector the lab runs ([`traces`]) or to one the user gives.
//! Services of `kind: nginx|redis|memcached` run Debian's real program instead of serve
//! ([`real`]); variants with `sidecar: haproxy|nginx` run Debian's HAProxy or nginx in place of
//! every `tailguard proxy`, configured from their policies ([`peers`]), and [`cpu`] measures every
//! sidecar's CPU time.
//!
//! Every fault is realised by serve itself, timed from the load's start ([`faults`] logs, per
//! replica, each fault and how).
//!
//! Runs that need the simulator's oracle balancer are skipped (no real process sees every queue).

pub mod calibrate;
pub mod cpu;
mod error;
pub mod faults;
mod http;
pub mod measure;
pub mod memory;
pub mod netns;
pub mod peers;
pub mod plan;
pub mod process;
pub mod real;
mod runner;
pub mod scrape;
pub mod traces;

pub use error::LabError;
pub use plan::{Isolation, Plan};
pub use runner::{run, Options};
pub use traces::Tracing;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
pub use tailguard_sim::{Results, RunResult};

/// A flag that stops the lab: set it (from a signal handler, a test) and the lab stops every
/// process it started and returns [`LabError::Interrupted`].
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// What the lab tells its caller as it goes (progress bars, tests that watch the PIDs). Every
/// method has a default that does nothing.
pub trait Observer: Sync {
    /// Run `index` of `total` starts; its load lasts about `expected` (warm-up included).
    fn run_started(&self, _index: usize, _total: usize, _scenario: &str, _variant: &str, _expected: Option<Duration>) {}
    /// What the current run is doing ("starting 103 processes", "measuring", "stopping").
    fn phase(&self, _what: &str) {}
    /// Time since the load started: about every 100 ms while it runs, and once when it has ended,
    /// before any process is stopped.
    fn tick(&self, _elapsed: Duration) {}
    /// A process was started.
    fn spawned(&self, _name: &str, _pid: u32) {}
    /// Every process of the run is ready; `plan` says where each listens. This is where trace
    /// collection (crates/trace) can attach to the sidecars before the load starts.
    fn ready(&self, _plan: &Plan) {}
    /// A run ended.
    fn run_finished(&self, _result: &RunResult) {}
    /// Something the user should know (a skipped run, a delay not applied).
    fn note(&self, _text: &str) {}
}

/// An observer that ignores everything.
pub struct Quiet;
impl Observer for Quiet {}

/// UTC now as (year, month, day, hour, minute, second).
pub fn utc_now() -> (i64, i64, i64, u64, u64, u64) {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil-from-days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, rem / 3600, rem % 3600 / 60, rem % 60)
}

/// UTC now as RFC 3339 (`2026-11-28T13:40:00Z`).
pub fn utc_now_rfc3339() -> String {
    let (y, mo, d, h, mi, s) = utc_now();
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}
