//! CPU time of a run's sidecars (tailguard's or a peer's), read from `/proc/PID/stat` (user +
//! system time) when the warm-up ends and when the load ends: what the proxies cost, per request,
//! whichever proxy it is. A process's live descendants are counted with it (nginx's workers under
//! its master; HAProxy's and tailguard's threads are in the process itself). Where `/proc` is
//! missing (not Linux) nothing is measured.

use crate::Cancel;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// User + system clock ticks of the `stat` text of a process (fields 14 and 15, counted after
/// the parenthesised command name, which may hold spaces).
pub fn parse_ticks(stat: &str) -> Option<u64> {
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
    // Field 3 (state) is the first after the name: utime is field 14, stime 15.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Clock ticks used by `pid` and its live descendants; 0 for a process that is gone.
fn ticks(pid: u32) -> u64 {
    let own = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().as_deref().and_then(parse_ticks).unwrap_or(0);
    own + children(pid).into_iter().map(ticks).sum::<u64>()
}

/// The children of every thread of `pid` (`/proc/PID/task/TID/children`).
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|text| text.split_whitespace().filter_map(|n| n.parse().ok()).collect::<Vec<u32>>())
        .collect()
}

/// CPU seconds used so far by `pids` and their descendants.
pub fn seconds(pids: &[u32]) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    pids.iter().map(|&pid| ticks(pid)).sum::<u64>() as f64 / hz
}

/// The CPU seconds `pids` used from `start + warmup` until `done` is set; `None` when the load
/// ended (or the run was cancelled) before the warm-up did.
pub fn measure(pids: &[u32], start: Instant, warmup: Duration, done: &AtomicBool, cancel: &Cancel) -> Option<f64> {
    let over = || done.load(Ordering::Acquire) || cancel.is_cancelled();
    let origin = start + warmup;
    while Instant::now() < origin {
        if over() {
            return None;
        }
        std::thread::sleep(origin.saturating_duration_since(Instant::now()).min(Duration::from_millis(100)));
    }
    let begin = seconds(pids);
    while !over() {
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(seconds(pids) - begin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_gives_user_plus_system_ticks_whatever_the_name() {
        let stat = "4242 (tail guard) S 1 4242 4242 0 -1 4194560 100 0 0 0 37 5 0 0 20 0 3 0 99 0 0";
        assert_eq!(parse_ticks(stat), Some(42));
        assert_eq!(parse_ticks("4242 (x) S 1"), None);
    }

    #[test]
    fn a_busy_child_s_time_counts_with_its_parent() {
        // This process spins for a while: its own time grows.
        let me = std::process::id();
        let before = seconds(&[me]);
        let spin = Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < Duration::from_millis(300) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(seconds(&[me]) - before >= 0.1, "{} s", seconds(&[me]) - before);
        // A child that spins is counted under its parent (us, asleep) while it runs.
        let before_child = seconds(&[me]);
        let mut child = std::process::Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let (alone, with_child) = (seconds(&[child.id()]), seconds(&[me]) - before_child);
        let _ = child.kill();
        let _ = child.wait();
        // Within one 10 ms tick: the two reads are differences of tick counts in seconds.
        assert!(alone >= 0.1 && with_child >= alone - 0.01, "child {alone} s, us with it {with_child} s");
    }
}
