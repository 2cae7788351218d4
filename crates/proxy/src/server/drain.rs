//! A listener's graceful shutdown (drain), as Envoy's drain sequence and HAProxy's
//! `idle-close-on-response`: once the listener has closed, requests already read are served,
//! HTTP/2 connections are sent GOAWAY (with the last stream id, by hyper) and HTTP/1 responses
//! carry `Connection: close`, so that every client leaves the connection after its answer.
//!
//! An idle kept-alive HTTP/1 connection cannot be told anything: closing it is the only signal,
//! and a client may be writing its next request on it at that moment (RFC 9112 §9.6). The
//! request, unread, is then lost to a reset. Closing idle connections at once was the one cut of
//! issue #21's SIGTERM run (a client's request arrived 2.3 ms after the SIGTERM on a connection
//! idle for 0.9 s, and the proxy reset it unread). So idle HTTP/1 connections stay open while the
//! listener has requests in flight (a client that is sending has connections in use, and uses its
//! idle ones next, each then answered with `Connection: close`), and close once none is; with
//! nothing in flight, at once, so a quiet shutdown is as prompt as before.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{watch, Notify};

/// Where a listener's shutdown stands; connections watch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Phase {
    /// Accepting and keeping connections alive.
    Serving,
    /// The listener has closed: HTTP/2 connections go away, HTTP/1 ones close after their next
    /// response.
    Draining,
    /// No request is in flight: idle HTTP/1 connections (and those that never sent a byte) close.
    Closing,
}

/// A listener's drain: its phase, and the requests in flight that hold it in [`Phase::Draining`].
pub(super) struct Drain {
    phase: watch::Sender<Phase>,
    /// Set with [`Phase::Draining`]; read on every response, so an atomic and not the channel.
    draining: AtomicBool,
    in_flight: AtomicUsize,
    /// Notified when the last request in flight ends while draining.
    quiet: Notify,
}

impl Drain {
    pub(super) fn new() -> Arc<Drain> {
        Arc::new(Drain {
            phase: watch::Sender::new(Phase::Serving),
            draining: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            quiet: Notify::new(),
        })
    }

    /// A connection's view of the phase; [`Drain::run`] waits until every one is dropped.
    pub(super) fn watch(&self) -> watch::Receiver<Phase> {
        self.phase.subscribe()
    }

    /// Counts a request as in flight until the guard (held by its response body) is dropped.
    pub(super) fn request(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// Drains, the listener closed: returns once every connection has closed (the caller bounds
    /// the wait by the grace period).
    pub(super) async fn run(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.phase.send_replace(Phase::Draining);
        // `notify_one` keeps a permit when nobody waits yet: an end between the check and the
        // wait is not missed.
        while self.in_flight.load(Ordering::SeqCst) > 0 {
            self.quiet.notified().await;
        }
        self.phase.send_replace(Phase::Closing);
        self.phase.closed().await;
    }
}

/// One request in flight on a listener.
pub(super) struct InFlight(Arc<Drain>);

impl InFlight {
    /// Whether the listener is draining: an HTTP/1 response then carries `Connection: close`.
    pub(super) fn is_draining(&self) -> bool {
        self.0.draining.load(Ordering::Relaxed)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 && self.0.draining.load(Ordering::SeqCst) {
            self.0.quiet.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    fn poll(f: std::pin::Pin<&mut impl Future<Output = ()>>) -> Poll<()> {
        f.poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn idle_connections_close_only_once_no_request_is_in_flight() {
        let drain = Drain::new();
        let mut connection = drain.watch();
        let request = drain.request();
        let mut run = pin!(drain.run());
        // The listener closed with a request in flight: draining, and it holds the phase there.
        assert!(poll(run.as_mut()).is_pending());
        assert!(request.is_draining());
        assert_eq!(*connection.borrow_and_update(), Phase::Draining);
        // Another arrives on a kept-alive connection and ends; the first is still in flight.
        drop(drain.request());
        assert!(poll(run.as_mut()).is_pending());
        assert_eq!(*connection.borrow(), Phase::Draining);
        // The last one ends: idle connections close, and the drain waits for them.
        drop(request);
        assert!(poll(run.as_mut()).is_pending());
        assert_eq!(*connection.borrow(), Phase::Closing);
        drop(connection);
        assert!(poll(run.as_mut()).is_ready());
    }

    #[test]
    fn with_nothing_in_flight_the_drain_closes_at_once() {
        let drain = Drain::new();
        let connection = drain.watch();
        let mut run = pin!(drain.run());
        assert!(poll(run.as_mut()).is_pending());
        assert_eq!(*connection.borrow(), Phase::Closing);
        drop(connection);
        assert!(poll(run.as_mut()).is_ready());
    }
}
