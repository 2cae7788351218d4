//! HTTP/2 to an endpoint that speaks it: over cleartext by prior knowledge (`protocol: h2c`),
//! or over TLS when it chooses `h2` by ALPN. One connection carries every request to the
//! endpoint, multiplexed, and holds one place under the pool's connection cap. The first request
//! (and the first after the connection closed, or was due for renewal, [`crate::renewal`]) opens
//! it while the others wait for it, so concurrent first requests share it; a request dropped
//! while opening it hands the work to the next one, which fails none of them. Over TLS what the
//! endpoint speaks is learnt from that handshake: one that chose HTTP/1.1, or no protocol, gets
//! the pool's HTTP/1 connections (the one the handshake opened first among them).

use super::{Error, Pool};
use crate::http::Body;
use crate::renewal::Cancellations;
use hyper::client::conn::http2::{self, SendRequest};
use hyper::header::HOST;
use hyper::http::uri::{Authority, Scheme};
use hyper::{Request, Response, Uri, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::sync::Arc;

/// What an endpoint speaks, as far as is known.
#[derive(Default)]
enum Alpn {
    /// Not learnt yet, or its h2 connection closed.
    #[default]
    Unknown,
    /// HTTP/1.1: the pool's kept-alive connections.
    Http1,
    /// HTTP/2 on this connection, and the streams it has cancelled.
    H2(SendRequest<Body>, Cancellations),
}

/// What the endpoint speaks, read by every request under a short lock; a handshake that learns
/// it (or renews the connection) holds `learning`, which the requests that find nothing usable
/// wait for, so that concurrent first requests share one connection.
#[derive(Default)]
pub(super) struct Negotiated {
    known: std::sync::Mutex<Alpn>,
    learning: tokio::sync::Mutex<()>,
}

/// A usable answer: the endpoint speaks HTTP/1 (`None`), or HTTP/2 on this connection.
type Usable = Option<(SendRequest<Body>, Cancellations)>;

impl Negotiated {
    fn known(&self) -> std::sync::MutexGuard<'_, Alpn> {
        self.known.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What is known, if it can be used as it is: HTTP/1, or an open connection not due for
    /// renewal. Else `Err` with the open connection due for renewal, if any.
    fn usable(&self) -> Result<Usable, Usable> {
        match &*self.known() {
            Alpn::Http1 => Ok(None),
            Alpn::H2(sender, cancelled) if !sender.is_closed() => {
                let open = Some((sender.clone(), cancelled.clone()));
                if cancelled.due() {
                    Err(open)
                } else {
                    Ok(open)
                }
            }
            Alpn::H2(..) | Alpn::Unknown => Err(None),
        }
    }
}

impl Pool {
    /// The HTTP/2 connection to send on if the endpoint chose h2: the open one, or a new one
    /// when a handshake learns it or the open one is due for renewal ([`crate::renewal`]).
    /// `None`: the endpoint speaks HTTP/1.
    pub(super) async fn multiplexed(self: &Arc<Self>) -> Result<Usable, Error> {
        if let Ok(usable) = self.alpn.usable() {
            return Ok(usable);
        }
        let learning = self.alpn.learning.lock().await;
        // Another request may have learnt it meanwhile.
        let due = match self.alpn.usable() {
            Ok(usable) => return Ok(usable),
            Err(due) => due,
        };
        let (place, stream) = match self.dial(crate::tls::Alpn::Any).await {
            Ok(dialed) => dialed,
            // At the connection cap, the connection due for renewal carries on.
            Err(Error::Overflow(..)) if due.is_some() => return Ok(due),
            Err(e) => return Err(e),
        };
        if !self.h2c && !stream.is_h2() {
            *self.alpn.known() = Alpn::Http1;
            drop(learning);
            // Not wasted: the HTTP/1 connection waits idle for the request that learnt it.
            let conn = self.handshake(place, stream).await?;
            self.put(conn);
            return Ok(None);
        }
        let (sender, connection) = http2::Builder::new(TokioExecutor::new())
            .max_local_error_reset_streams(crate::http::LATE_ANSWERS_ALLOWED)
            .handshake(TokioIo::new(stream))
            .await?;
        tokio::spawn(async move {
            // It ends when the endpoint closes it or every sender is dropped (the pool with them).
            let _ = connection.await;
            drop(place);
        });
        let cancelled = Cancellations::default();
        *self.alpn.known() = Alpn::H2(sender.clone(), cancelled.clone());
        Ok(Some((sender, cancelled)))
    }

    /// Forgets what the endpoint speaks (it chose h2 on a connection meant for HTTP/1), unless
    /// a handshake is learning it now.
    pub(super) fn forget_alpn(&self) {
        if let Ok(_learning) = self.alpn.learning.try_lock() {
            *self.alpn.known() = Alpn::Unknown;
        }
    }

    /// Sends `request` (origin-form URI) on the HTTP/2 connection `sender`: its `Host` (or the
    /// endpoint's address) becomes the `:authority`, as Envoy translates HTTP/1 to HTTP/2.
    pub(super) async fn send_h2(
        &self,
        (mut sender, cancelled): (SendRequest<Body>, Cancellations),
        mut request: Request<Body>,
    ) -> Result<Response<Body>, Error> {
        let host = request.headers_mut().remove(HOST);
        let authority = host
            .and_then(|h| Authority::try_from(h.as_bytes()).ok())
            .map_or_else(|| Authority::try_from(self.host.as_bytes()), Ok)
            .map_err(|e| Error::Request(e.into()))?;
        let scheme = if self.h2c { Scheme::HTTP } else { Scheme::HTTPS };
        let mut uri = Uri::builder().scheme(scheme).authority(authority);
        if let Some(path) = request.uri().path_and_query() {
            uri = uri.path_and_query(path.clone());
        }
        *request.uri_mut() = uri.build().map_err(|e| Error::Request(e.into()))?;
        *request.version_mut() = Version::HTTP_2;
        let mut watch = cancelled.watch();
        let sent = async {
            sender.ready().await?;
            sender.send_request(request).await
        };
        match sent.await {
            Ok(response) => Ok(response.map(|body| watch.body(body))),
            Err(e) => {
                watch.done();
                Err(e.into())
            }
        }
    }
}
