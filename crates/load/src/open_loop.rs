//! The open loop: requests start at their [`Schedule`]d times whatever the server does.
//!
//! Each request is spawned at its intended start and measured from it. The dispatcher never
//! waits for a response; only when `max_in_flight` requests are outstanding does it wait for a
//! permit, and the requests it then sends late are still charged from their intended start, so
//! the wait shows in their latency instead of vanishing (no coordinated omission).

use crate::config::Window;
use crate::run::Context;
use crate::Schedule;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::{sleep_until, Instant};

/// Runs the schedule to the end of `window`; returns the offset at which sending ended.
pub(crate) async fn drive(ctx: Arc<Context>, mut schedule: Schedule, window: Window, max_in_flight: usize) -> Duration {
    let permits = Arc::new(Semaphore::new(max_in_flight));
    let mut measured = 0u64;
    loop {
        let offset = schedule.peek();
        if window.is_over(offset, measured) {
            return window.stop.duration.map_or(offset, |d| offset.min(window.warmup + d));
        }
        schedule.advance();
        measured += u64::from(window.is_measured(offset));
        let due = ctx.start + offset;
        if Instant::now() < due {
            sleep_until(due).await;
        }
        let permit = Arc::clone(&permits).acquire_owned().await.expect("the semaphore is never closed");
        let ctx = Arc::clone(&ctx);
        tokio::spawn(async move {
            ctx.send(offset).await;
            drop(permit);
        });
    }
}
