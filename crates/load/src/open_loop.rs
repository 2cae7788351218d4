//! The open loop: requests start at their [`ArrivalSchedule`]d times whatever the server does.
//!
//! Each request is spawned at its intended start and measured from it. The dispatcher never
//! waits for a response; only when `max_in_flight` requests are outstanding does it wait for a
//! permit, and the requests it then sends late are still charged from their intended start, so
//! the wait shows in their latency instead of vanishing (no coordinated omission).

use crate::config::Window;
use crate::run::Context;
use crate::ArrivalSchedule;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// Waits until `due`, precisely and without spinning. Every request is charged from its intended
/// start, so lateness here is added to every latency: tokio's timer wakes up to a millisecond late,
/// and yielding through the last stretch instead (as this did) kept a core busy, 40 % of one at
/// 441 requests/s, more than all the lab's sidecars together, on the machine whose latency it
/// measures. `precise::sleep` is a timerfd on Linux: the kernel's timer slack (50 µs) late, idle.
async fn wait_until(due: Instant) {
    tailguard_serve::precise::sleep(due.saturating_duration_since(Instant::now())).await;
}

/// Runs the schedule to the end of `window`; returns the offset at which sending ended.
pub(crate) async fn drive(
    ctx: Arc<Context>,
    mut schedule: ArrivalSchedule,
    window: Window,
    max_in_flight: usize,
) -> Duration {
    let permits = Arc::new(Semaphore::new(max_in_flight));
    let mut measured = 0u64;
    loop {
        let offset = schedule.peek();
        if window.is_over(offset, measured) {
            return window.stop.duration.map_or(offset, |d| offset.min(window.warmup + d));
        }
        schedule.advance();
        measured += u64::from(window.is_measured(offset));
        wait_until(ctx.start + offset).await;
        let permit = Arc::clone(&permits).acquire_owned().await.expect("the semaphore is never closed");
        let ctx = Arc::clone(&ctx);
        tokio::spawn(async move {
            ctx.send(offset).await;
            drop(permit);
        });
    }
}
