//! Renewing the proxy's HTTP/2 client connections before h2 ends them over cancelled streams.
//!
//! h2 (0.4.21) charges each small DATA frame it receives to a budget of half the connection
//! window, against peers that flood a connection with tiny frames, and gives the charge back
//! when the frame is read. A frame that arrives for a stream the proxy cancelled (a lost hedge, a
//! passed deadline, a caller gone) is dropped unread and its charge is never given back, so a
//! connection that cancels many streams whose answers are still coming (a gRPC server's small
//! messages) runs the budget out and h2 ends it with GOAWAY ENHANCE_YOUR_CALM
//! `too_many_data_frames`, failing every request on it: grpc-go's interop server through an
//! ingress, 20 ms deadlines, 42 of 30,000 calls; its streams of ten small messages, 107 of 20,000
//! (docs/proxy.md, "HTTP/2 under cancellation"). hyper offers no setting for the budget, and
//! remembering no reset stream does not help (the frames land on the stream h2 recreates to reset
//! again). So each connection's cancelled streams are counted ([`Cancellations`]), and once
//! [`RENEW_AFTER`] have been cancelled the next request opens a fresh connection; the old one
//! finishes the streams it carries and closes. Envoy's `max_requests_per_connection` and
//! HAProxy's `max-reuse` renew connections the same way, by count.

use crate::http::{Body, BoxError};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, SizeHint};
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

/// Cancelled streams after which a connection is renewed. The budget is half of hyper's 5 MB
/// connection window and a small frame costs at most 256 bytes of it, about 10,000 frames: 500
/// cancelled streams leave room for twenty late frames each (a unary gRPC answer brings one or
/// two), and a fresh connection every 500 cancellations costs one handshake.
pub const RENEW_AFTER: u32 = 500;

/// The streams cancelled on one HTTP/2 connection.
#[derive(Clone, Debug, Default)]
pub struct Cancellations(Arc<AtomicU32>);

impl Cancellations {
    /// Whether the connection has cancelled enough streams to be renewed.
    pub fn due(&self) -> bool {
        self.0.load(Ordering::Relaxed) >= RENEW_AFTER
    }

    /// A watch over one stream: it counts a cancellation if dropped before [`Watch::done`].
    pub fn watch(&self) -> Watch {
        Watch(Some(self.clone()))
    }
}

/// One stream, counted as cancelled if dropped before its answer was read to the end or failed.
#[derive(Debug)]
pub struct Watch(Option<Cancellations>);

impl Watch {
    /// The stream ended on its own: nothing to count.
    pub fn done(&mut self) {
        self.0 = None;
    }

    /// `body`, boxed, which ends the watch when it is read to its end or fails.
    pub fn body<B>(mut self, body: B) -> Body
    where
        B: hyper::body::Body<Data = Bytes> + Send + Sync + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        if body.is_end_stream() {
            self.done();
        }
        Watched { body, watch: self }.map_err(Into::into).boxed()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(cancellations) = &self.0 {
            cancellations.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A response body under a [`Watch`].
struct Watched<B> {
    body: B,
    watch: Watch,
}

impl<B: hyper::body::Body<Data = Bytes> + Unpin> hyper::body::Body for Watched<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) || self.body.is_end_stream() {
            self.watch.done();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::StreamBody;

    /// A body of two frames, and how many of them were taken.
    fn two_frames() -> Body {
        let frames = [Bytes::from_static(b"a"), Bytes::from_static(b"b")].map(|b| Ok::<_, BoxError>(Frame::data(b)));
        StreamBody::new(futures::stream::iter(frames)).boxed()
    }

    fn counted(c: &Cancellations) -> u32 {
        c.0.load(Ordering::Relaxed)
    }

    #[tokio::test]
    async fn a_stream_counts_as_cancelled_unless_its_answer_was_read_to_the_end_or_failed() {
        let c = Cancellations::default();
        // Dropped before an answer: cancelled.
        drop(c.watch());
        assert_eq!(counted(&c), 1);
        // Failed, or answered with nothing to read: not.
        c.watch().done();
        drop(c.watch().body(crate::http::empty()));
        assert_eq!(counted(&c), 1);
        // An answer read to its end: not; one dropped after a frame: cancelled.
        let whole = c.watch().body(two_frames());
        assert_eq!(whole.collect().await.unwrap().to_bytes(), "ab");
        assert_eq!(counted(&c), 1);
        let mut half = c.watch().body(two_frames());
        assert!(half.frame().await.is_some());
        drop(half);
        assert_eq!(counted(&c), 2);
    }

    #[test]
    fn a_connection_is_due_for_renewal_after_its_share_of_cancelled_streams() {
        let c = Cancellations::default();
        (1..RENEW_AFTER).for_each(|_| drop(c.watch()));
        assert!(!c.due());
        drop(c.watch());
        assert!(c.due());
    }
}
