//! A client's request body as the listeners hand it on: hyper's body with a read timeout, and a
//! record of the client's own faults so that neither is blamed on an upstream.
//!
//! The timeout is nginx's `client_body_timeout` (and close to Envoy's stream idle timeout): a body
//! that sends no byte for `limits.body_read_timeout` fails. Timed between reads, not over the
//! whole body, so a large upload on a slow link is not cut while it moves.

use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::StatusCode;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Why a client's request body failed: the client's fault, answered 408 or 400.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ClientFault {
    /// No byte of the body came for the read timeout.
    #[error("the request body sent nothing for {0:?}")]
    TimedOut(Duration),
    /// The body was malformed (bad chunked framing) or cut short by the client.
    #[error("the request body is malformed or incomplete: {0}")]
    Malformed(String),
}

impl ClientFault {
    /// The status the client gets: 408 for a stalled body, else 400.
    pub fn status(&self) -> StatusCode {
        match self {
            ClientFault::TimedOut(_) => StatusCode::REQUEST_TIMEOUT,
            ClientFault::Malformed(_) => StatusCode::BAD_REQUEST,
        }
    }

    /// The response to the client.
    pub fn response(&self) -> hyper::Response<crate::http::Body> {
        crate::http::text(self.status(), &format!("tailguard: {self}"))
    }
}

/// Where a body records its fault, shared with whoever forwards it: once the body has moved into
/// an upstream request, a failed exchange is told apart from a failed upstream by looking here.
#[derive(Clone, Debug, Default)]
pub struct FaultCell(Arc<OnceLock<ClientFault>>);

impl FaultCell {
    /// The client's fault, if its body failed.
    pub fn get(&self) -> Option<&ClientFault> {
        self.0.get()
    }
}

/// A request body from a client, failing with [`ClientFault`] if it stalls or is malformed.
pub struct ClientBody {
    inner: Incoming,
    timeout: Duration,
    /// Armed at the first read that found nothing.
    stall: Option<Pin<Box<Sleep>>>,
    /// A frame came since the timer was armed: it restarts at the next read that finds nothing.
    moved: bool,
    fault: FaultCell,
    /// Holds the connection as reading a request body until the body ends (server/park.rs).
    reading: Option<crate::server::Held>,
}

impl ClientBody {
    /// `inner` with the read timeout; `reading` is let go when the body ends or fails.
    pub(crate) fn new(inner: Incoming, timeout: Duration, reading: Option<crate::server::Held>) -> ClientBody {
        ClientBody { inner, timeout, stall: None, moved: false, fault: FaultCell::default(), reading }
    }

    /// The cell this body records its fault in.
    pub fn fault(&self) -> FaultCell {
        self.fault.clone()
    }

    fn fail(&mut self, fault: ClientFault) -> Poll<Option<Result<Frame<bytes::Bytes>, ClientFault>>> {
        self.reading = None;
        let _ = self.fault.0.set(fault.clone());
        Poll::Ready(Some(Err(fault)))
    }
}

impl Body for ClientBody {
    type Data = bytes::Bytes;
    type Error = ClientFault;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<bytes::Bytes>, ClientFault>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                // Re-armed lazily: a body that keeps flowing never reads the clock.
                self.moved = true;
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => self.fail(ClientFault::Malformed(e.to_string())),
            Poll::Ready(None) => {
                self.reading = None;
                Poll::Ready(None)
            }
            Poll::Pending => {
                let (timeout, moved) = (self.timeout, std::mem::take(&mut self.moved));
                let stall = match &mut self.stall {
                    Some(stall) => {
                        if moved {
                            stall.as_mut().reset(Instant::now() + timeout);
                        }
                        stall
                    }
                    None => self.stall.insert(Box::pin(tokio::time::sleep(timeout))),
                };
                match stall.as_mut().poll(cx) {
                    Poll::Ready(()) => self.fail(ClientFault::TimedOut(timeout)),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The client's fault behind `error`, if a [`ClientBody`] failed somewhere in its chain.
pub fn client_fault<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a ClientFault> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(fault) = e.downcast_ref::<ClientFault>() {
            return Some(fault);
        }
        next = e.source();
    }
    None
}
