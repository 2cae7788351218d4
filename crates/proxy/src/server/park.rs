//! Idle HTTP/1 connections parked: hyper's buffers handed back while a kept-alive connection
//! waits for its next request.
//!
//! hyper gives every HTTP/1 connection an 8 KiB read and an 8 KiB write buffer for its whole
//! life, sizes it does not let a server change: 14 KB of resident memory per kept-alive
//! connection, where HAProxy, which takes a buffer only while a request moves, spends 1.2 KB
//! (bench/RESULTS.md, issue #34). A plaintext connection that has served a request and been quiet
//! for [`PARK_AFTER`] since, with nothing in flight, is taken from hyper instead:
//! `graceful_shutdown` closes an idle hyper connection (polled without shutting its stream down),
//! and `into_parts` hands back the stream and any bytes read that are not a request yet. The connection then waits on its socket's readiness
//! alone, and its next bytes start a new hyper connection on the same stream, with the same
//! service. A connection that keeps sending is never parked, so a busy one pays nothing but a
//! check every [`PARK_AFTER`].

use super::Activity;
use std::future::Future;
use std::io;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

/// How long a connection stays quiet, with no request in flight, before it is parked: a client
/// that sends again within it keeps its connection's buffers and pays no new hyper connection,
/// one that waits longer (a keep-alive pool's spare connection, a client polling once a second)
/// holds none.
pub(super) const PARK_AFTER: Duration = Duration::from_millis(100);

/// A client stream an idle HTTP/1 connection can wait on without hyper.
pub(super) trait Park: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// Whether it can: a TLS stream cannot tell that a request is coming without decrypting
    /// what arrives, so it is never parked.
    fn parks(&self) -> bool;

    /// Waits until the client has sent something (or left, or failed).
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send + '_;

    /// Puts `bytes` (read by hyper, not a whole request head yet) back in front of the stream.
    fn unread(&mut self, bytes: &[u8]);
}

impl Park for super::preface::Opened {
    fn parks(&self) -> bool {
        true
    }

    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send + '_ {
        self.readable()
    }

    fn unread(&mut self, bytes: &[u8]) {
        self.unread(bytes);
    }
}

impl Park for tokio_rustls::server::TlsStream<tokio::net::TcpStream> {
    fn parks(&self) -> bool {
        false
    }

    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send + '_ {
        std::future::pending()
    }

    fn unread(&mut self, _bytes: &[u8]) {
        unreachable!("a TLS connection is never parked")
    }
}

/// Decides, at checks [`PARK_AFTER`] apart (or the connection watchdog's ticks, if closer),
/// whether a hyper connection has been idle since the
/// last one: no byte moved either way, no write waiting for the client to read, no request
/// waiting for its response or sending its response, and no request body still being read. It
/// must also have served a request: hyper holds a connection idle (and closes it, rather than
/// answering the next request with `Connection: close`, when shut down) only between two.
#[derive(Debug)]
pub(super) struct Parker {
    /// `Activity::moved` at the last check.
    moved: u64,
    /// `Activity::heads` when the hyper connection was made.
    heads: u64,
}

impl Parker {
    /// A parker for a hyper connection made now, whose first check counts from `activity` as it
    /// is now.
    pub(super) fn new(activity: &Activity) -> Parker {
        Parker { moved: activity.moved.load(Ordering::Relaxed), heads: activity.heads.load(Ordering::Relaxed) }
    }

    /// Whether the connection is idle and has been since the last check.
    pub(super) fn idle(&mut self, activity: &Activity) -> bool {
        let moved = activity.moved.load(Ordering::Relaxed);
        let quiet = std::mem::replace(&mut self.moved, moved) == moved;
        quiet
            && activity.heads.load(Ordering::Relaxed) != self.heads
            && activity.awaiting.load(Ordering::Relaxed) == 0
            && activity.open.load(Ordering::Relaxed) == 0
            && activity.reading.load(Ordering::Relaxed) == 0
            && !activity.write_blocked.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::{Awaiting, Open, Reading};
    use std::sync::Arc;

    #[test]
    fn only_a_connection_that_served_a_request_and_is_quiet_since_the_last_check_parks() {
        let activity = Arc::new(Activity::default());
        let mut parker = Parker::new(&activity);
        // No request served yet, and then one awaiting its response: not idle however quiet.
        assert!(!parker.idle(&activity) && !parker.idle(&activity));
        let awaiting = Awaiting::new(activity.clone());
        assert!(!parker.idle(&activity) && !parker.idle(&activity));
        drop(awaiting);
        // Its response went out (the head moved bytes): idle from the next check.
        assert!(!parker.idle(&activity));
        assert!(parker.idle(&activity));
        // Bytes moved since the last check: not yet, but at the next one.
        activity.moved.fetch_add(1, Ordering::Relaxed);
        assert!(!parker.idle(&activity));
        assert!(parker.idle(&activity));
        let open = Open::new(activity.clone());
        assert!(!parker.idle(&activity) && !parker.idle(&activity));
        drop(open);
        assert!(parker.idle(&activity));
        // So does a request body still being read, and a response the client is not reading.
        let reading = Reading::new(activity.clone());
        assert!(!parker.idle(&activity));
        drop(reading);
        assert!(parker.idle(&activity));
        activity.write_blocked.store(true, Ordering::Relaxed);
        assert!(!parker.idle(&activity));
    }
}
