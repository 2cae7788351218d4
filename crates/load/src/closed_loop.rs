//! The closed loop: `clients` clients, each sending its next request when its last one has
//! ended and its think time has passed. At most `clients` requests are ever in flight.
//!
//! A closed loop measures what its clients see; by construction it slows down with the server
//! (that is what "closed" means), so use the open loop to measure a server's tail under a
//! given offered load.

use crate::config::Window;
use crate::run::Context;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// Runs the clients to the end of `window`; returns the offset at which the last one stopped.
pub(crate) async fn drive(ctx: Arc<Context>, clients: usize, think: Duration, window: Window) -> Duration {
    let tickets = Arc::new(AtomicU64::new(0));
    let mut set = JoinSet::new();
    for _ in 0..clients {
        set.spawn(client(Arc::clone(&ctx), Arc::clone(&tickets), think, window));
    }
    drop(ctx);
    let mut end = Duration::ZERO;
    while let Some(stopped) = set.join_next().await {
        match stopped {
            Ok(offset) => end = end.max(offset),
            Err(err) => std::panic::resume_unwind(err.into_panic()),
        }
    }
    end
}

/// One client's loop, bounded by the window's duration or its share of the request count;
/// returns the offset of its last request (the sending ended there, not when its answer came).
async fn client(ctx: Arc<Context>, tickets: Arc<AtomicU64>, think: Duration, window: Window) -> Duration {
    let mut last = Duration::ZERO;
    loop {
        let offset = ctx.start.elapsed();
        if !claim(&window, &tickets, offset) {
            return last;
        }
        last = offset;
        ctx.send(offset).await;
        if !think.is_zero() {
            tailguard_serve::precise::sleep(think).await;
        }
    }
}

/// Whether a request may start at `offset`: the run is not over, and after the warm-up one of
/// the counted requests is still free (taken atomically, so the count is exact).
fn claim(window: &Window, tickets: &AtomicU64, offset: Duration) -> bool {
    if window.is_over(offset, 0) {
        return false;
    }
    if !window.is_measured(offset) {
        return true;
    }
    let taken = tickets.fetch_add(1, Ordering::Relaxed);
    !window.is_over(offset, taken)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stop;

    #[test]
    fn tickets_limit_measured_requests_only() {
        let window = Window { warmup: Duration::from_secs(1), stop: Stop { duration: None, requests: Some(2) } };
        let tickets = AtomicU64::new(0);
        // Warm-up requests take no ticket.
        assert!(claim(&window, &tickets, Duration::from_millis(10)));
        assert!(claim(&window, &tickets, Duration::from_millis(20)));
        // Two measured requests, then no more.
        assert!(claim(&window, &tickets, Duration::from_secs(1)));
        assert!(claim(&window, &tickets, Duration::from_secs(2)));
        assert!(!claim(&window, &tickets, Duration::from_secs(3)));
    }
}
