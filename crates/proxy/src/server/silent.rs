//! Connections that have not yet shown which protocol they speak (no byte yet, or only part of
//! the HTTP/2 preface), oldest first. When a listener at `max_connections` accepts one more
//! connection, it closes the oldest of them to make room, as nginx closes its "reusable"
//! connections (those awaiting a first request) when it runs out (`ngx_drain_connections`).
//! Without it, connections that send nothing hold every slot until `header_read_timeout` and
//! every other client waits in the listen backlog (issue #21: 10,000 idle connections delayed
//! normal requests by up to 7 s). A client that has sent a request's first byte is never closed
//! this way.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::oneshot;

/// The most silent connections one arrival closes (nginx drains 32 at a time): a burst of new
/// connections takes fewer turns of the accept loop, and an attacker's reconnects gain nothing.
pub(super) const CLOSED_PER_ARRIVAL: usize = 32;

/// A listener's silent connections.
#[derive(Default)]
pub(super) struct Silent {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The next connection's number: numbers grow with age, so the first key is the oldest.
    next: u64,
    /// Each silent connection's number and how to tell it to close.
    by_age: BTreeMap<u64, oneshot::Sender<()>>,
}

/// One connection's place among the silent ones, left when dropped.
pub(super) struct Entry {
    silent: Arc<Silent>,
    number: u64,
    /// Resolves when the connection is chosen to close.
    pub(super) closing: oneshot::Receiver<()>,
}

impl Silent {
    /// Enters a connection just accepted, as the newest.
    pub(super) fn enter(self: &Arc<Self>) -> Entry {
        let (tell, closing) = oneshot::channel();
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let number = inner.next;
        inner.next += 1;
        inner.by_age.insert(number, tell);
        Entry { silent: self.clone(), number, closing }
    }

    /// Tells the `n` oldest silent connections to close; how many there were.
    pub(super) fn close_oldest(&self, n: usize) -> usize {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut closed = 0;
        while closed < n {
            let Some((_, tell)) = inner.by_age.pop_first() else { break };
            let _ = tell.send(());
            closed += 1;
        }
        closed
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let mut inner = self.silent.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.by_age.remove(&self.number);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_still_silent_connections_are_told_to_close_first() {
        let silent = Arc::new(Silent::default());
        let mut entries: Vec<Entry> = (0..4).map(|_| silent.enter()).collect();
        // The oldest spoke: it is no longer a candidate.
        drop(entries.remove(0));
        assert_eq!(silent.close_oldest(2), 2);
        let told: Vec<bool> = entries.iter_mut().map(|e| e.closing.try_recv().is_ok()).collect();
        assert_eq!(told, [true, true, false]);
        assert_eq!(silent.close_oldest(5), 1);
        assert!(entries[2].closing.try_recv().is_ok());
        assert_eq!(silent.close_oldest(5), 0);
    }
}
