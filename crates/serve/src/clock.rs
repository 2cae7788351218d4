//! The run's clock: what fault windows and latency models are timed against. It starts when the
//! server is bound, and again whenever [`Clock::restart`] is called: `tailguard serve` does so on
//! SIGUSR1, which the lab sends every replica as its load starts, so that `from: 10s` means ten
//! seconds into the load in the lab as in the simulator, however long the processes took to start.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// Time since the run started.
#[derive(Debug)]
pub struct Clock {
    base: Instant,
    /// When the run started, in nanoseconds after `base`.
    started: AtomicU64,
}

impl Clock {
    /// A clock started now.
    pub fn new() -> Clock {
        Clock { base: Instant::now(), started: AtomicU64::new(0) }
    }

    /// Starts the run again now.
    pub fn restart(&self) {
        self.started.store(self.base.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// Time since the run started.
    pub fn elapsed(&self) -> Duration {
        self.base.elapsed().saturating_sub(self.start_offset())
    }

    /// The instant the run's clock reads `at`.
    pub fn instant(&self, at: Duration) -> Instant {
        self.base + self.start_offset() + at
    }

    fn start_offset(&self) -> Duration {
        Duration::from_nanos(self.started.load(Ordering::Relaxed))
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_counts_from_zero_again() {
        let clock = Clock::new();
        std::thread::sleep(Duration::from_millis(100));
        assert!(clock.elapsed() >= Duration::from_millis(100));
        clock.restart();
        let elapsed = clock.elapsed();
        assert!(elapsed < Duration::from_millis(50), "{elapsed:?}");
        let until = clock.instant(Duration::from_secs(1)) - Instant::now();
        assert!(until > Duration::from_millis(900) && until <= Duration::from_secs(1), "{until:?}");
    }
}
