//! Bodies and replay: what every attempt of a request sends again (method, path, headers without
//! hop-by-hop or internal ones, and the body buffered when it is at most `max_replay_body`), and
//! which requests may be replayed at all. A larger body, or one of unknown length, is streamed
//! once, and such a request is neither retried nor hedged. A request that is not idempotent
//! ([`idempotent`]) is never hedged, and retried only where nothing was processed (a 429, an
//! unreachable endpoint), unless the policy says `retry.non_idempotent`.

use crate::body::ClientBody;
use crate::http::{self, BoxError};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Body as _;
use hyper::http::uri::PathAndQuery;
use hyper::{HeaderMap, Method, Request};

/// The request as every attempt replays it; shared with the attempts, which may rebuild it.
pub(super) struct Template {
    pub(super) method: Method,
    pub(super) path: PathAndQuery,
    pub(super) headers: HeaderMap,
    /// The body when buffered (replayable); `None` when it is streamed once.
    pub(super) body: Option<Bytes>,
    /// A gRPC request: each attempt carries the time left as `grpc-timeout`, and a trailers-only
    /// `grpc-status` decides its outcome.
    pub(super) grpc: bool,
    /// A request to switch protocols (a WebSocket handshake): not replayed as an idempotent
    /// request is, and sent on a connection of its own that becomes the tunnel if the endpoint
    /// switches.
    pub(super) upgrade: bool,
}

/// Splits `req` (an `upgrade` or not) into what each attempt replays, buffering a body up to
/// `max_replay_body`; a larger body (or one of unknown length) comes back apart, to be streamed
/// once.
pub(super) async fn template(
    req: Request<ClientBody>,
    found: http::Found,
    upgrade: bool,
    max_replay_body: usize,
) -> Result<(Template, Option<ClientBody>), BoxError> {
    let (parts, body) = req.into_parts();
    let mut headers = parts.headers;
    http::forwardable(&mut headers, found);
    let small = body.size_hint().upper().is_some_and(|n| n <= max_replay_body as u64);
    let (body, streamed) = if body.is_end_stream() {
        (Some(Bytes::new()), None)
    } else if small {
        (Some(Limited::new(body, max_replay_body).collect().await?.to_bytes()), None)
    } else {
        (None, Some(body))
    };
    let path = parts.uri.path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/"));
    Ok((Template { method: parts.method, path, headers, body, grpc: found.grpc, upgrade }, streamed))
}

/// Whether a request may be sent more than once without changing its effect: its method is
/// idempotent (RFC 9110 §9.2.2), or it carries an `Idempotency-Key` (the IETF httpapi draft: the
/// server answers a repeated key once). A POST without one is sent once, as Envoy and gRPC do.
pub(super) fn idempotent(method: &Method, headers: &HeaderMap) -> bool {
    [Method::GET, Method::HEAD, Method::OPTIONS, Method::PUT, Method::DELETE].contains(method)
        || headers.contains_key(IDEMPOTENCY_KEY)
}

/// The header that makes a request of any method safe to repeat.
const IDEMPOTENCY_KEY: &str = "idempotency-key";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_idempotent_methods_and_keyed_requests_are_replayed() {
        let none = HeaderMap::new();
        assert!(
            idempotent(&Method::GET, &none) && idempotent(&Method::PUT, &none) && idempotent(&Method::DELETE, &none)
        );
        assert!(!idempotent(&Method::POST, &none) && !idempotent(&Method::PATCH, &none));
        let mut keyed = HeaderMap::new();
        keyed.insert(IDEMPOTENCY_KEY, hyper::header::HeaderValue::from_static("\"8e03978e\""));
        assert!(idempotent(&Method::POST, &keyed) && idempotent(&Method::PATCH, &keyed));
    }
}
