//! Resident memory of a run's processes: each replica's `tailguard serve` and its sidecar, read
//! from `/proc/PID/status` (`VmRSS` now, `VmHWM` the peak since the process started) every
//! [`INTERVAL`] of measured time and once when the load ends. case-for-timeouts.txt's server1
//! runs out of memory holding requests that never time out; this is where the lab shows whether
//! ours does. Where `/proc` is missing (not Linux) nothing is recorded.

use crate::measure::INTERVAL;
use crate::plan::Plan;
use crate::Cancel;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tailguard_sim::ProcessMemory;

/// One process whose memory is read.
#[derive(Clone, Debug)]
pub struct Watched {
    pub service: String,
    pub replica: u32,
    /// "service" or "sidecar", as [`ProcessMemory::role`].
    pub role: &'static str,
    pub pid: u32,
}

/// What `/proc/PID/status` says about a process's memory, in kB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    pub rss_kb: u64,
    pub hwm_kb: u64,
}

/// Parses the `VmRSS` and `VmHWM` lines of a `/proc/PID/status` text; `None` when either is
/// missing (a kernel thread, a zombie).
pub fn parse_status(text: &str) -> Option<Status> {
    let field = |name: &str| {
        let line = text.lines().find(|l| l.starts_with(name))?;
        line[name.len()..].trim().trim_end_matches("kB").trim().parse().ok()
    };
    Some(Status { rss_kb: field("VmRSS:")?, hwm_kb: field("VmHWM:")? })
}

/// Reads the memory of process `pid`.
pub fn status(pid: u32) -> Option<Status> {
    parse_status(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

/// The serve and sidecar processes of every replica of `plan`, given `pid_of` (process name to
/// PID, as the runner named them: "serve S-R", "proxy S-R").
pub fn watched(plan: &Plan, pid_of: impl Fn(&str) -> Option<u32>) -> Vec<Watched> {
    let mut out = Vec::new();
    for r in &plan.replicas {
        for (role, prefix) in [("service", "serve"), ("sidecar", "proxy")] {
            if let Some(pid) = pid_of(&format!("{prefix} {}", r.name())) {
                out.push(Watched { service: r.service.clone(), replica: r.index, role, pid });
            }
        }
    }
    out
}

/// The readings of every watched process so far.
#[derive(Clone, Debug)]
pub struct Samples {
    watched: Vec<Watched>,
    /// Per process: Σ VmRSS (kB), readings, largest VmHWM (kB).
    sums: Vec<(u64, u32, u64)>,
}

impl Samples {
    pub fn new(watched: Vec<Watched>) -> Samples {
        let sums = vec![(0, 0, 0); watched.len()];
        Samples { watched, sums }
    }

    /// Reads every process once; one that cannot be read (exited) is skipped this time.
    pub fn read(&mut self) {
        for (w, sum) in self.watched.iter().zip(&mut self.sums) {
            if let Some(s) = status(w.pid) {
                *sum = (sum.0 + s.rss_kb, sum.1 + 1, sum.2.max(s.hwm_kb).max(s.rss_kb));
            }
        }
    }

    /// One entry per process read at least once (in-flight counts are the measurer's to add).
    pub fn entries(&self) -> Vec<ProcessMemory> {
        let mb = |kb: f64| tailguard_model::results::round(kb / 1024.0);
        self.watched
            .iter()
            .zip(&self.sums)
            .filter(|(_, (_, n, _))| *n > 0)
            .map(|(w, &(sum, n, hwm))| ProcessMemory {
                service: w.service.clone(),
                replica: w.replica,
                role: w.role.to_string(),
                peak_rss_mb: mb(hwm as f64),
                mean_rss_mb: mb(sum as f64 / f64::from(n)),
                ..ProcessMemory::default()
            })
            .collect()
    }
}

/// Reads `samples` at `start + warmup` and every [`INTERVAL`] after until `done` is set (or the
/// run is cancelled), then once more: at least one reading, however short the load.
pub fn sample(samples: &mut Samples, start: Instant, warmup: Duration, done: &AtomicBool, cancel: &Cancel) {
    let origin = start + warmup;
    // Bounded: one reading a second, and the load generator's own limits end the run.
    for k in 0..u32::MAX {
        let due = origin + INTERVAL * k;
        while Instant::now() < due {
            if done.load(Ordering::Acquire) || cancel.is_cancelled() {
                samples.read();
                return;
            }
            std::thread::sleep(due.saturating_duration_since(Instant::now()).min(Duration::from_millis(100)));
        }
        samples.read();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_give_rss_and_peak() {
        let text = "Name:\ttailguard\nVmPeak:\t  900000 kB\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(parse_status(text), Some(Status { rss_kb: 10240, hwm_kb: 20480 }));
        assert_eq!(parse_status("Name:\tkthreadd\n"), None);
    }

    #[test]
    fn this_process_has_resident_memory() {
        let me = status(std::process::id()).expect("/proc/self/status readable on Linux");
        assert!(me.rss_kb > 100 && me.hwm_kb >= me.rss_kb, "{me:?}");
        let watched = vec![Watched { service: "s".into(), replica: 0, role: "service", pid: std::process::id() }];
        let mut samples = Samples::new(watched);
        samples.read();
        samples.read();
        let [entry] = &samples.entries()[..] else { panic!("one entry expected") };
        assert!(entry.peak_rss_mb >= entry.mean_rss_mb && entry.mean_rss_mb > 0.1, "{entry:?}");
        // A PID that does not exist leaves no entry.
        let mut gone = Samples::new(vec![Watched { service: "s".into(), replica: 0, role: "sidecar", pid: u32::MAX }]);
        gone.read();
        assert!(gone.entries().is_empty());
    }
}
