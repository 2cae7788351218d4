//! The processes of one run: spawned with their output in log files, watched while they start,
//! and stopped by their own PIDs (SIGTERM, then SIGKILL after a bounded wait) when the run ends,
//! fails or is interrupted. [`Processes`] stops everything it holds when dropped, so an early
//! return or a panic leaves no orphan behind.

use crate::error::LabError;
use crate::real::Probe;
use crate::Cancel;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long stopped processes get to exit after SIGTERM before they are killed.
pub const STOP_GRACE: Duration = Duration::from_secs(3);
/// How much of a failed process's stderr an error quotes.
const TAIL_BYTES: u64 = 2000;
/// How often readiness is polled.
const POLL: Duration = Duration::from_millis(25);

/// One started process.
struct Proc {
    name: String,
    child: Child,
    stderr: PathBuf,
}

/// The processes of one run, stopped on drop.
#[derive(Default)]
pub struct Processes {
    procs: Vec<Proc>,
}

impl Processes {
    /// Starts `command` as `name`, its stdout and stderr in `logs/NAME.out` and `.err`. The child
    /// gets its own process group (a terminal's Ctrl-C reaches the lab, which stops the children
    /// in order) and is killed by the kernel if the lab's spawning thread dies (PR_SET_PDEATHSIG),
    /// so even a `kill -9` of the lab leaves no orphan. Returns the PID.
    pub fn spawn(&mut self, name: &str, mut command: Command, logs: &Path) -> Result<u32, LabError> {
        let file = |ext: &str| {
            let path = logs.join(format!("{name}.{ext}"));
            File::create(&path).map(|f| (f, path.clone())).map_err(|error| LabError::Write { path, error })
        };
        let (out, _) = file("out")?;
        let (err, stderr) = file("err")?;
        command.stdin(Stdio::null()).stdout(out).stderr(err).process_group(0);
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command.spawn().map_err(|error| LabError::Spawn {
            name: name.to_string(),
            command: format!("{command:?}"),
            error,
        })?;
        let pid = child.id();
        self.procs.push(Proc { name: name.to_string(), child, stderr });
        Ok(pid)
    }

    /// The PIDs of every process started, in order.
    pub fn pids(&self) -> Vec<u32> {
        self.procs.iter().map(|p| p.child.id()).collect()
    }

    /// The PID of the process started as `name`.
    pub fn pid_of(&self, name: &str) -> Option<u32> {
        self.procs.iter().find(|p| p.name == name).map(|p| p.child.id())
    }

    /// Sends `signal` to the process started as `name`; whether there was one to send it to.
    pub fn signal(&self, name: &str, signal: libc::c_int) -> bool {
        let Some(pid) = self.pid_of(name) else { return false };
        // SAFETY: kill(2) with the PID of a child this value still owns (not yet reaped).
        unsafe { libc::kill(pid as libc::pid_t, signal) == 0 }
    }

    /// An error if any process has exited.
    pub fn check_alive(&mut self) -> Result<(), LabError> {
        for p in &mut self.procs {
            if let Ok(Some(status)) = p.child.try_wait() {
                return Err(p.failure(format!("exited ({status})")));
            }
        }
        Ok(())
    }

    /// Waits until every `(process index, probe)` succeeds (`GET /healthz` answers 200, or a
    /// real program's own ping), at most `timeout`; an error names the first process that exited
    /// or is still not ready.
    pub fn wait_ready(
        &mut self,
        checks: &[(usize, Probe)],
        timeout: Duration,
        cancel: &Cancel,
    ) -> Result<(), LabError> {
        let start = Instant::now();
        let mut pending: Vec<(usize, Probe)> = checks.to_vec();
        loop {
            pending.retain(|&(_, probe)| !probe.ready());
            if pending.is_empty() {
                return Ok(());
            }
            self.check_alive()?;
            if cancel.is_cancelled() {
                return Err(LabError::Interrupted);
            }
            if start.elapsed() > timeout {
                let (i, probe) = pending[0];
                let what = format!(
                    "was not ready within {:.0} s ({}; {} of {} processes not ready)",
                    timeout.as_secs_f64(),
                    probe.describe(),
                    pending.len(),
                    checks.len()
                );
                return Err(self.procs[i].failure(what));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Stops every process: SIGTERM to each by its PID, up to [`STOP_GRACE`] for all to exit,
    /// then SIGKILL to those left; every child is reaped, and whatever is left in its process
    /// group is killed.
    pub fn stop_all(&mut self) {
        self.stop_within(STOP_GRACE);
    }

    /// [`stop_all`](Self::stop_all) with `grace` between SIGTERM and SIGKILL (sidecars that
    /// export spans need longer: they send their last batch on SIGTERM).
    pub fn stop_within(&mut self, grace: Duration) {
        for p in &mut self.procs {
            if matches!(p.child.try_wait(), Ok(None)) {
                // SAFETY: kill(2) on the PID of a child we have not reaped yet: it cannot be reused.
                unsafe {
                    libc::kill(p.child.id() as libc::pid_t, libc::SIGTERM);
                }
            }
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && self.procs.iter_mut().any(|p| matches!(p.child.try_wait(), Ok(None))) {
            std::thread::sleep(POLL);
        }
        for p in &mut self.procs {
            if matches!(p.child.try_wait(), Ok(None)) {
                let _ = p.child.kill();
            }
            let _ = p.child.wait();
            // What the child started itself (nginx's workers) is in its process group, and
            // outlives a master that was killed: the group goes too. The group's ID cannot be
            // another's while one of its members lives (Linux reuses no PID in use as a group's).
            // SAFETY: kill(2) on our child's own process group (spawn's `process_group(0)`).
            unsafe {
                libc::kill(-(p.child.id() as libc::pid_t), libc::SIGKILL);
            }
        }
        self.procs.clear();
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        self.stop_all();
    }
}

impl Proc {
    fn failure(&self, what: String) -> LabError {
        LabError::Process { name: self.name.clone(), what, log: self.stderr.clone(), tail: tail(&self.stderr) }
    }
}

/// The last [`TAIL_BYTES`] of a file, or a note that it is empty.
fn tail(path: &Path) -> String {
    let Ok(mut file) = File::open(path) else { return "(no stderr file)".to_string() };
    let len = file.metadata().map_or(0, |m| m.len());
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES)));
    let mut text = String::new();
    let _ = file.read_to_string(&mut text);
    let text = text.trim_end();
    if text.is_empty() {
        "(empty)".to_string()
    } else {
        text.to_string()
    }
}
