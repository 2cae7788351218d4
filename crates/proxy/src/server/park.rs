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
//! service. A connection that keeps sending is never parked, and one that serves a long request
//! is not woken for it: the timer runs only while the connection is idle.

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

/// Decides, after each poll of a hyper connection, whether it has fallen idle, and whether it has
/// stayed so for [`PARK_AFTER`] (a timer the connection arms when told to): idle is no request
/// waiting for its response or sending it, no request body still being read, and no write waiting
/// for the client to read; it stays so while no byte moves either way. The connection must also
/// have served a request: hyper holds a connection idle (and closes it, rather than answering the
/// next request with `Connection: close`, when shut down) only between two. The timer runs only
/// while the connection is idle, so a connection serving long requests is never woken for it.
#[derive(Debug)]
pub(super) struct Parker {
    /// `Activity::heads` when the hyper connection was made.
    heads: u64,
    /// `Activity::moved` when the timer was armed, while it is.
    armed: Option<u64>,
}

/// What a connection does about parking after a poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Not idle: no timer.
    Busy,
    /// Idle from now (newly, or again after bytes moved): arm the timer for [`PARK_AFTER`].
    Arm,
    /// Idle since the timer was armed: park once it fires.
    Wait,
}

impl Parker {
    /// A parker for a hyper connection made now.
    pub(super) fn new(activity: &Activity) -> Parker {
        Parker { heads: activity.heads.load(Ordering::Relaxed), armed: None }
    }

    /// What to do about parking, seen after a poll.
    pub(super) fn step(&mut self, activity: &Activity) -> Step {
        let idle = activity.heads.load(Ordering::Relaxed) != self.heads
            && activity.awaiting.load(Ordering::Relaxed) == 0
            && activity.open.load(Ordering::Relaxed) == 0
            && activity.reading.load(Ordering::Relaxed) == 0
            && !activity.write_blocked.load(Ordering::Relaxed);
        if !idle {
            self.armed = None;
            return Step::Busy;
        }
        let moved = activity.moved.load(Ordering::Relaxed);
        if self.armed == Some(moved) {
            return Step::Wait;
        }
        self.armed = Some(moved);
        Step::Arm
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::{Awaiting, Held};
    use std::sync::Arc;

    #[test]
    fn the_timer_runs_only_while_a_connection_that_served_a_request_stays_idle() {
        let activity = Arc::new(Activity::default());
        let mut parker = Parker::new(&activity);
        // No request served yet, and then one awaiting its response: busy however quiet.
        assert_eq!(parker.step(&activity), Step::Busy);
        let awaiting = Awaiting::new(activity.clone());
        assert_eq!(parker.step(&activity), Step::Busy);
        drop(awaiting);
        // Its response is out: idle from now, and still so at the next poll.
        assert_eq!(parker.step(&activity), Step::Arm);
        assert_eq!(parker.step(&activity), Step::Wait);
        // Bytes moved (a request head arriving): idle again from now.
        activity.moved.fetch_add(1, Ordering::Relaxed);
        assert_eq!(parker.step(&activity), Step::Arm);
        // A response being sent, a request body being read, a response the client is not reading:
        // busy, and armed afresh once over.
        for busy in 0..3 {
            let guards = match busy {
                0 => (Some(Held::open(activity.clone())), None),
                1 => (None, Some(Held::reading(activity.clone()))),
                _ => {
                    activity.write_blocked.store(true, Ordering::Relaxed);
                    (None, None)
                }
            };
            assert_eq!(parker.step(&activity), Step::Busy, "case {busy}");
            drop(guards);
            activity.write_blocked.store(false, Ordering::Relaxed);
            assert_eq!(parker.step(&activity), Step::Arm, "case {busy}");
            assert_eq!(parker.step(&activity), Step::Wait, "case {busy}");
        }
    }
}
