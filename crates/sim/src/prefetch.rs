//! Cache prefetch hints. With thousands of replicas and requests in flight, the state an event
//! touches (its call, its job, its replica) has left the cache since the request's last event;
//! the event loop asks for the next events' state while it handles the current one, so their
//! memory latencies overlap instead of adding up. A hint changes no result: it only loads lines.

/// Asks the CPU to bring the cache lines of `value` into the cache (up to [`MAX_LINES`] lines).
#[inline(always)]
pub(crate) fn prefetch<T>(value: &T) {
    prefetch_lines(value, MAX_LINES);
}

/// Asks the CPU to bring the first `lines` cache lines of `value` into the cache.
#[inline(always)]
pub(crate) fn prefetch_lines<T>(value: &T, lines: usize) {
    let start = value as *const T as *const u8;
    let len = std::mem::size_of::<T>().min(lines * LINE);
    let mut offset = 0;
    while offset < len {
        line(start.wrapping_add(offset));
        offset += LINE;
    }
}

/// The most lines one hint asks for: a call's slab entry is 4 lines, a replica's hot part 5.
const MAX_LINES: usize = 6;
const LINE: usize = 64;

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn line(at: *const u8) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: a prefetch never faults and reads nothing into the program: any address will do,
    // and SSE, which the instruction needs, is part of every x86-64 CPU.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(at as *const i8) }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn line(_at: *const u8) {}
