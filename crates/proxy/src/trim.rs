//! Gives the memory of closed connections back to the operating system.
//!
//! Each connection's buffers come from the heap, and glibc's allocator keeps freed pages for reuse
//! unless they sit at its top: after 2,000 slow clients had come and gone, the proxy kept 4.9×
//! its resident memory from before (bench/reliability.sh). After a wave of closed connections,
//! `malloc_trim` hands every whole free page back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// Client connections closed since the process started, on every listener.
static CLOSED: AtomicU64 = AtomicU64::new(0);

/// How often the closes are counted (an atomic load: cheap).
const EVERY: Duration = Duration::from_secs(1);

/// Closes since the last trim that make a wave worth trimming after (a few MB of buffers):
/// ordinary keep-alive traffic closes far fewer, so trims stay rare.
const WAVE: u64 = 256;

/// Counts a client connection that closed.
pub(crate) fn connection_closed() {
    CLOSED.fetch_add(1, Ordering::Relaxed);
}

/// Whether `closed` connections in all, `closed_at_trim` of them before the last trim, make a
/// wave.
fn wave(closed: u64, closed_at_trim: u64) -> bool {
    closed.saturating_sub(closed_at_trim) >= WAVE
}

/// Trims after each wave of closes until `stop` turns true.
pub(crate) async fn run(mut stop: watch::Receiver<bool>) {
    let mut interval = tokio::time::interval(EVERY);
    let mut at_trim = CLOSED.load(Ordering::Relaxed);
    loop {
        tokio::select! {
            _ = interval.tick() => {
                let closed = CLOSED.load(Ordering::Relaxed);
                if wave(closed, at_trim) {
                    at_trim = closed;
                    // It walks the whole heap: off the request threads.
                    let _ = tokio::task::spawn_blocking(release_free_pages).await;
                }
            }
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    return;
                }
            }
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_free_pages() {
    // SAFETY: malloc_trim has no preconditions; it only takes the allocator's own locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Other allocators (musl's, macOS's) return memory themselves.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_pages() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_wave_of_closes_since_the_last_trim_trims() {
        assert!(!wave(WAVE - 1, 0));
        assert!(wave(WAVE, 0));
        assert!(!wave(1000 + WAVE - 1, 1000));
        assert!(wave(1000 + WAVE, 1000));
    }
}
