//! Gives the memory of closed connections back to the operating system.
//!
//! Each connection's buffers come from the heap, and glibc's allocator keeps freed pages for reuse
//! unless they sit at its top: after 2,000 slow clients had come and gone, the proxy kept 4.9×
//! its resident memory from before (bench/reliability.sh), and after a burst of 64 clients, the
//! 170 connections its pools had opened to the endpoints left 8 MB behind once closed. Once a
//! second the allocator is asked how much it holds free; past [`HELD_FREE`], `malloc_trim` hands
//! every whole free page back.

use std::time::Duration;
use tokio::sync::watch;

/// How often the allocator is asked (it sums its free lists: microseconds).
const EVERY: Duration = Duration::from_secs(1);

/// The free heap memory worth giving back: twice the 2 MiB that the proxy asks glibc to keep at
/// the heap's top for the next requests (crates/cli's `keep_freed_memory`), so that a steady load
/// never trims what it will fault in again.
const HELD_FREE: usize = 4 << 20;

/// Trims whenever the allocator holds more than [`HELD_FREE`] free, until `stop` turns true.
pub(crate) async fn run(mut stop: watch::Receiver<bool>) {
    let mut interval = tokio::time::interval(EVERY);
    loop {
        tokio::select! {
            _ = interval.tick() => {
                if held_free() > HELD_FREE {
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

/// The bytes the allocator holds free, in every arena.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn held_free() -> usize {
    // SAFETY: mallinfo2 has no preconditions; it only takes the allocator's own locks.
    unsafe { libc::mallinfo2() }.fordblks
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
fn held_free() -> usize {
    0
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_pages() {}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    fn resident_anonymous_kb() -> usize {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn freed_buffers_are_counted_and_trimming_gives_their_pages_back() {
        // 16 MiB of 8 KiB buffers, each followed by a small allocation that outlives it, so that
        // freeing them leaves free memory inside the heap rather than at its top, as closed
        // connections' buffers do.
        let blocks: Vec<(Vec<u8>, Box<[u8; 64]>)> =
            (0..2048).map(|_| (vec![1u8; 8 << 10], Box::new([0u8; 64]))).collect();
        let free_before = held_free();
        let small: Vec<_> = blocks.into_iter().map(|(_, small)| small).collect();
        assert!(held_free() >= free_before + HELD_FREE, "16 MiB freed, {} bytes free", held_free());
        let resident = resident_anonymous_kb();
        release_free_pages();
        let released = resident.saturating_sub(resident_anonymous_kb());
        assert!(released >= 4 << 10, "{released} KiB released of 16 MiB freed");
        drop(small);
    }
}
