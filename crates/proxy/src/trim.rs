//! Gives the memory of closed connections back to the operating system.
//!
//! Each connection's buffers come from the heap, and glibc's allocator keeps freed pages for reuse
//! unless they sit at its top: after 2,000 slow clients had come and gone, the proxy kept 4.9×
//! its resident memory from before (bench/reliability.sh), and after a burst of 64 clients, the
//! 170 connections its pools had opened to the endpoints left 8 MB behind once closed. Once a
//! second the process's resident memory is compared with what the allocator has handed out; past
//! [`HELD_FREE`] more, `malloc_trim` hands every whole free page back. (Not the free memory the
//! allocator reports: pages it has given back still count as free there, so a process that
//! trimmed once would trim every second, and fault the same pages in again: three times the
//! sidecars' CPU in examples/peers.yaml's 40x10.)

use std::time::Duration;
use tokio::sync::watch;

/// How often the memory is looked at (a read of /proc/self/statm and a sum of the allocator's
/// lists: microseconds).
const EVERY: Duration = Duration::from_secs(1);

/// The resident free memory worth giving back: twice the 2 MiB that the proxy asks glibc to keep
/// at the heap's top for the next requests (crates/cli's `keep_freed_memory`), so that a steady
/// load never trims what it will fault in again.
const HELD_FREE: usize = 4 << 20;

/// Trims whenever more than [`HELD_FREE`] of resident memory is free, until `stop` turns true.
pub(crate) async fn run(mut stop: watch::Receiver<bool>) {
    let mut interval = tokio::time::interval(EVERY);
    loop {
        tokio::select! {
            _ = interval.tick() => {
                if resident_free() > HELD_FREE {
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

/// The process's resident anonymous memory beyond what the allocator has handed out, in bytes:
/// freed memory still resident, the heap's and (a little) the threads' stacks.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn resident_free() -> usize {
    // SAFETY: mallinfo2 has no preconditions; it only takes the allocator's own locks.
    let info = unsafe { libc::mallinfo2() };
    resident_anonymous().saturating_sub(info.uordblks + info.hblkhd)
}

/// Resident anonymous memory, in bytes: /proc/self/statm's resident pages less its shared
/// (file-backed) ones; 0 if unreadable.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn resident_anonymous() -> usize {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else { return 0 };
    let mut pages = statm.split_whitespace().skip(1).map(|n| n.parse::<usize>().unwrap_or(0));
    let (resident, shared) = (pages.next().unwrap_or(0), pages.next().unwrap_or(0));
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    resident.saturating_sub(shared) * page
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
fn resident_free() -> usize {
    0
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_pages() {}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    #[test]
    fn freed_buffers_count_as_resident_and_free_until_trimmed() {
        // 16 MiB of 8 KiB buffers, each followed by a small allocation that outlives it, so that
        // freeing them leaves free memory inside the heap rather than at its top, as closed
        // connections' buffers do.
        let blocks: Vec<(Vec<u8>, Box<[u8; 64]>)> =
            (0..2048).map(|_| (vec![1u8; 8 << 10], Box::new([0u8; 64]))).collect();
        let before = resident_free();
        let small: Vec<_> = blocks.into_iter().map(|(_, small)| small).collect();
        let freed = resident_free();
        assert!(freed >= before + HELD_FREE, "16 MiB freed: {before} -> {freed} bytes resident and free");
        release_free_pages();
        // Given back, they no longer count: the next look does not trim again.
        let trimmed = resident_free();
        assert!(trimmed + HELD_FREE <= freed, "{freed} -> {trimmed} bytes resident and free after the trim");
        drop(small);
    }
}
