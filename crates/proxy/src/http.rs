//! Bodies and header helpers shared by the listeners.

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode, Version};
use std::time::Duration;
use tailguard_policy::admission::{Arrival, Marks, Priority, FALLBACK_HEADER};

/// Any error a body may fail with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body type every listener and client uses.
pub type Body = BoxBody<Bytes, BoxError>;

/// How many times in its life an HTTP/2 client connection may reset a stream over the server's
/// frames before h2 ends it with GOAWAY: no limit. A proxy cancels streams all the time (a lost
/// hedge, a passed deadline, a caller gone), and a server's answer already on its way then
/// reaches a stream h2 no longer remembers (it keeps a bounded number of resets, for seconds)
/// and is reset again. h2 counts those against a server attacking its client (1,024 by default),
/// and the 1,025th failed every request on the connection. A server gains nothing by it against a
/// client: the reset costs one frame.
pub const LATE_ANSWERS_ALLOWED: Option<usize> = None;

/// The header carrying a BLOC confidence chip (`1` or `0`) on responses.
pub const CHIP: HeaderName = HeaderName::from_static("x-tailguard-chip");
/// The header carrying a request's remaining deadline in milliseconds.
pub const DEADLINE_MS: HeaderName = HeaderName::from_static("x-tailguard-deadline-ms");
/// The header that lowers a request's priority at the ingress's admission (`low`; anything else
/// is the default): any caller may lower its own.
pub const PRIORITY: HeaderName = HeaderName::from_static(tailguard_policy::admission::PRIORITY_HEADER);
/// The header (`1`) on an ingress's own 429: its replica is over capacity, another may not be, so
/// the caller retries elsewhere at once. A 429 without it was answered by an application, which
/// passes on a refusal from further down: the service behind is over capacity, and the caller
/// does not retry it ([`tailguard_policy::Outcome::Overloaded`]). On a request, an egress's mark
/// that another endpoint's ingress refused it already ([`arrival`]).
pub const REFUSED: HeaderName = HeaderName::from_static("x-tailguard-refused");
/// Every tailguard header starts with this.
pub const INTERNAL_PREFIX: &str = "x-tailguard-";

/// Headers that belong to one connection and are never forwarded (RFC 9110 §7.6.1). Parsed
/// names, not strings: a `&str` key is parsed and hashed again on every lookup.
const HOP_BY_HOP: [HeaderName; 7] = [
    hyper::header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    hyper::header::TE,
    hyper::header::TRAILER,
    hyper::header::TRANSFER_ENCODING,
    hyper::header::UPGRADE,
];

/// A body holding `bytes`.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed()
}

/// An empty body: no allocation (boxing a zero-sized body allocates nothing).
pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}

/// A body holding a copy of `bytes` (a reference count), empty ones without an allocation.
pub fn bytes(bytes: &Bytes) -> Body {
    if bytes.is_empty() {
        empty()
    } else {
        full(bytes.clone())
    }
}

/// A plain-text response of the proxy's own with `status`: to a gRPC request the listener sends
/// it in gRPC's form instead ([`crate::grpc::local_reply`]).
pub fn text(status: StatusCode, message: &str) -> Response<Body> {
    let message = Bytes::from(format!("{message}\n"));
    let mut response = Response::new(full(message.clone()));
    *response.status_mut() = status;
    response.headers_mut().insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response.extensions_mut().insert(crate::grpc::LocalReply(message));
    response
}

/// What one pass over a message's header names found. Most messages have neither hop-by-hop
/// nor `x-tailguard-*` headers, and then nothing needs removing or looking up (each lookup or
/// removal hashes a name).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Found {
    pub hop_by_hop: bool,
    pub internal: bool,
    /// A gRPC `content-type` ([`crate::grpc::is_grpc`]).
    pub grpc: bool,
    /// An ingress's mark on its own refusal ([`REFUSED`]).
    pub refused: bool,
}

/// One pass over the names of `headers`.
pub fn scan(headers: &HeaderMap) -> Found {
    let mut found = Found::default();
    for (name, value) in headers {
        found.grpc |= name == hyper::header::CONTENT_TYPE && crate::grpc::is_grpc(value.as_bytes());
        let name = name.as_str();
        found.hop_by_hop |= hop_by_hop(name).is_some();
        if name.starts_with(INTERNAL_PREFIX) {
            found.internal = true;
            found.refused |= name == REFUSED;
        }
    }
    found
}

/// Where `name` (lowercase, as parsed) is in [`HOP_BY_HOP`], if it is: matched by length, then
/// bytes, no hashing.
fn hop_by_hop(name: &str) -> Option<usize> {
    let i = match name {
        "connection" => 0,
        "keep-alive" => 1,
        "proxy-connection" => 2,
        "te" => 3,
        "trailer" => 4,
        "transfer-encoding" => 5,
        "upgrade" => 6,
        _ => return None,
    };
    Some(i)
}

/// Whether a `Connection` token (in any case) names a header of [`HOP_BY_HOP`].
fn hop_by_hop_token(token: &[u8]) -> bool {
    let mut lower = [0u8; "transfer-encoding".len()];
    let Some(lower) = lower.get_mut(..token.len()) else { return false };
    lower.copy_from_slice(token);
    lower.make_ascii_lowercase();
    std::str::from_utf8(lower).is_ok_and(|name| hop_by_hop(name).is_some())
}

/// Removes hop-by-hop headers: the standard set and every header `Connection` names (RFC 9110
/// §7.6.1), only those present, since each removal hashes its name.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Split as bytes: one non-ASCII byte in the list must not hide the names beside it. A name of
    // the standard set (`keep-alive`, `upgrade`) is removed below with the rest of it; any other
    // (`close`, the usual one) is made a name only if such a header is there, so an application's
    // `Connection: keep-alive` or `close` costs no allocation.
    let named: Vec<HeaderName> = headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .flat_map(|list| list.as_bytes().split(|b| *b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|token| !hop_by_hop_token(token))
        .filter(|token| std::str::from_utf8(token).is_ok_and(|token| headers.contains_key(token)))
        .filter_map(|name| HeaderName::from_bytes(name).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    let present = headers.keys().filter_map(|name| hop_by_hop(name.as_str())).fold(0u8, |set, i| set | 1 << i);
    for (i, name) in HOP_BY_HOP.iter().enumerate() {
        if present & 1 << i != 0 {
            headers.remove(name);
        }
    }
}

/// The protocol an HTTP/1.1 request asks to switch its connection to (RFC 9110 §7.8: `Upgrade`,
/// named in `Connection`), as a WebSocket handshake does; `None` for any other request.
pub fn upgrade(headers: &HeaderMap) -> Option<&HeaderValue> {
    let named = headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .flat_map(|list| list.as_bytes().split(|b| *b == b','))
        .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"upgrade"));
    named.then(|| headers.get(hyper::header::UPGRADE)).flatten()
}

/// Puts back the `Upgrade: protocol` and `Connection: upgrade` that hop-by-hop stripping took: the
/// next hop is asked for the same switch (a request), or told of it (a 101).
fn keep_upgrade(headers: &mut HeaderMap, protocol: Option<HeaderValue>) {
    if let Some(protocol) = protocol {
        headers.insert(hyper::header::UPGRADE, protocol);
        headers.insert(hyper::header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
}

/// Removes a response's hop-by-hop headers, except the `Upgrade` of a 101 (Switching Protocols),
/// which the client needs to see the switch it asked for. Its version is the connection's too:
/// an HTTP/1.0 server's answer goes out as HTTP/1.1, as Envoy and HAProxy send it, since hyper
/// closes the connection after an HTTP/1.0 response (every hop back to the client then opened a
/// connection a request).
pub fn strip_response_hop_by_hop<B>(response: &mut Response<B>) {
    if response.version() < Version::HTTP_11 {
        *response.version_mut() = Version::HTTP_11;
    }
    let switched = response.status() == StatusCode::SWITCHING_PROTOCOLS;
    let protocol = switched.then(|| response.headers().get(hyper::header::UPGRADE).cloned()).flatten();
    strip_hop_by_hop(response.headers_mut());
    keep_upgrade(response.headers_mut(), protocol);
}

/// Makes a request's headers fit to forward (`found` is their [`scan`]): no hop-by-hop header
/// but `TE: trailers`, which HTTP/2 keeps because gRPC servers expect it, and an upgrade's
/// `Upgrade` and `Connection: upgrade`, which the next hop must see to switch; and no
/// `x-tailguard-*` header (the listener adds back what it believes) but a low [`PRIORITY`], which
/// belongs to the request on every hop, as a deadline does, and which any caller may set for
/// itself.
pub fn forwardable(headers: &mut HeaderMap, found: Found) {
    if found.hop_by_hop {
        let te_trailers =
            headers.get(hyper::header::TE).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
        let protocol = upgrade(headers).cloned();
        strip_hop_by_hop(headers);
        if te_trailers {
            headers.insert(hyper::header::TE, HeaderValue::from_static("trailers"));
        }
        keep_upgrade(headers, protocol);
    }
    if found.internal {
        let low = priority(headers) == Priority::Low;
        strip_internal(headers, &[]);
        if low {
            headers.insert(PRIORITY, HeaderValue::from_static("low"));
        }
    }
}

/// What is wrong with a request's head that hyper lets through, if anything (RFC 9112 §3.2): more
/// than one `Host`, or an HTTP/1.1 request without one.
pub fn malformed_head<B>(req: &Request<B>) -> Option<&'static str> {
    let mut hosts = req.headers().get_all(hyper::header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (_, Some(_)) => Some("more than one Host header"),
        (None, None) if req.version() == Version::HTTP_11 => Some("an HTTP/1.1 request needs a Host header"),
        _ => None,
    }
}

/// Removes every `x-tailguard-*` header except those in `keep`: one name at a time, so a
/// response's usual one or two cost no list of names.
pub fn strip_internal(headers: &mut HeaderMap, keep: &[&str]) {
    let doomed = |name: &&HeaderName| name.as_str().starts_with(INTERNAL_PREFIX) && !keep.contains(&name.as_str());
    while let Some(name) = headers.keys().find(doomed).cloned() {
        headers.remove(name);
    }
}

/// The longest deadline believed: a larger one is cut to it, so a caller cannot pin a request
/// (and its admission slot) for ever with `u64::MAX`.
pub const MAX_DEADLINE_MS: u64 = 3_600_000;

/// The deadline header's milliseconds, at most [`MAX_DEADLINE_MS`]: `Ok(None)` when absent,
/// `Err` when malformed or repeated (two deadlines are one too many to guess between).
pub fn deadline_ms(headers: &HeaderMap) -> Result<Option<u64>, String> {
    let mut values = headers.get_all(DEADLINE_MS).iter();
    let Some(value) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err(format!("{DEADLINE_MS}: expected one value, got several"));
    }
    let text = value.to_str().map_err(|_| format!("{DEADLINE_MS}: expected milliseconds"))?;
    let ms = text.trim().parse::<u64>().map_err(|_| format!("{DEADLINE_MS}: expected milliseconds, got {text:?}"))?;
    Ok(Some(ms.min(MAX_DEADLINE_MS)))
}

/// A request's deadline from its headers (`found` by their [`scan`]): the time left in
/// [`DEADLINE_MS`] if `believed`, and a gRPC request's `grpc-timeout`; the sooner of the two.
/// `Err` names the malformed header.
pub fn deadline(headers: &HeaderMap, found: Found, believed: bool) -> Result<Option<Duration>, String> {
    let own = match believed && found.internal {
        true => deadline_ms(headers)?.map(Duration::from_millis),
        false => None,
    };
    let grpc = if found.grpc { crate::grpc::timeout(headers)? } else { None };
    Ok(match (own, grpc) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

/// The answer to a request whose deadline was spent on arrival: never forwarded.
pub fn deadline_spent() -> Response<Body> {
    text(StatusCode::GATEWAY_TIMEOUT, "tailguard: the deadline had passed on arrival")
}

/// The request's priority at admission: `low` when its [`PRIORITY`] header says so.
pub fn priority(headers: &HeaderMap) -> Priority {
    match headers.get(PRIORITY) {
        Some(v) if v.as_bytes().eq_ignore_ascii_case(b"low") => Priority::Low,
        _ => Priority::Normal,
    }
}

/// The egress's mark on an attempt whose refusal costs the request little (`1`; `race` when it
/// races a live attempt of its request), which adaptive admission at the ingress reads; named
/// once, as a `&str` name is parsed on every use.
pub const FALLBACK: HeaderName = HeaderName::from_static(FALLBACK_HEADER);

/// What admission reads of a request besides the load: its [`priority`], whether its caller's
/// egress marked it as having a fallback ([`FALLBACK`]`: 1`, or `race`: it races a live attempt)
/// or as refused by another replica already ([`REFUSED`]`: 1`), and what remains of its
/// `deadline`. A refusal elsewhere and a race are believed from a `trusted` caller only: the one
/// lets a request past the limit short of an overload beyond doubt, the other keeps it out of
/// the arrivals that judge one. All of them are `x-tailguard-*` headers: where the request's
/// [`scan`] (`found`) saw none, none is looked up.
pub fn arrival(headers: &HeaderMap, found: Found, deadline: Option<Duration>, trusted: bool) -> Arrival {
    if !found.internal {
        return Arrival { deadline, ..Arrival::default() };
    }
    let value = |name| headers.get(name).map(HeaderValue::as_bytes);
    let fallback = value(FALLBACK);
    let marks = Marks {
        fallback: matches!(fallback, Some(b"1" | b"race")),
        refused_elsewhere: trusted && value(REFUSED) == Some(b"1"),
        race: trusted && fallback == Some(b"race"),
    };
    Arrival { priority: priority(headers), marks, deadline }
}

/// Whether the response carries a chip (`x-tailguard-chip: 1`).
pub fn has_chip(headers: &HeaderMap) -> bool {
    headers.get(CHIP).is_some_and(|v| v.as_bytes() == b"1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailguard_policy::admission::PRIORITY_HEADER;

    #[test]
    fn admission_believes_a_refusal_elsewhere_and_a_race_only_from_a_trusted_caller() {
        let mut headers = HeaderMap::new();
        headers.insert(FALLBACK, HeaderValue::from_static("1"));
        headers.insert(REFUSED, HeaderValue::from_static("1"));
        let trusted = arrival(&headers, scan(&headers), None, true);
        assert_eq!(trusted.marks, Marks { fallback: true, refused_elsewhere: true, race: false });
        // Anyone may say a refusal costs it little (that only lets it be refused sooner), but
        // not that another replica refused it (which would let it past the limit).
        let stranger = arrival(&headers, scan(&headers), None, false);
        assert_eq!(stranger.marks, Marks { fallback: true, refused_elsewhere: false, race: false });
        headers.insert(REFUSED, HeaderValue::from_static("yes"));
        assert!(!arrival(&headers, scan(&headers), None, true).marks.refused_elsewhere);
        // A race is a fallback from anyone, but kept out of the overload's count only when a
        // trusted caller says so.
        headers.insert(FALLBACK, HeaderValue::from_static("race"));
        assert_eq!(
            arrival(&headers, scan(&headers), None, true).marks,
            Marks { fallback: true, refused_elsewhere: false, race: true }
        );
        assert_eq!(
            arrival(&headers, scan(&headers), None, false).marks,
            Marks { fallback: true, refused_elsewhere: false, race: false }
        );
    }

    #[test]
    fn a_low_priority_is_forwarded_and_nothing_else_internal() {
        let forwarded = |pairs: &[(&'static str, &'static str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.append(*name, HeaderValue::from_static(value));
            }
            let found = scan(&headers);
            forwardable(&mut headers, found);
            headers
        };
        let low = forwarded(&[(PRIORITY_HEADER, "LOW"), ("x-tailguard-deadline-ms", "5")]);
        assert_eq!(priority(&low), Priority::Low);
        assert_eq!(low.get(PRIORITY).unwrap(), "low");
        assert!(!low.contains_key(DEADLINE_MS));
        let other = forwarded(&[(PRIORITY_HEADER, "high")]);
        assert_eq!(priority(&other), Priority::Normal);
        assert!(!other.contains_key(PRIORITY));
        // A connection that names it drops it, as any hop-by-hop header.
        let named = forwarded(&[(PRIORITY_HEADER, "low"), ("connection", "x-tailguard-priority")]);
        assert_eq!(priority(&named), Priority::Normal);
    }

    #[test]
    fn a_scan_finds_hop_by_hop_and_internal_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        headers.insert("x-tailguard", HeaderValue::from_static("not internal: no dash"));
        assert_eq!(scan(&headers), Found::default());
        for name in &HOP_BY_HOP {
            let mut h = headers.clone();
            h.insert(name, HeaderValue::from_static("x"));
            assert_eq!(scan(&h), Found { hop_by_hop: true, ..Found::default() }, "{name}");
            strip_hop_by_hop(&mut h);
            assert_eq!(h, headers, "{name}");
        }
        headers.insert(CHIP, HeaderValue::from_static("1"));
        assert_eq!(scan(&headers), Found { hop_by_hop: false, internal: true, grpc: false, refused: false });
        headers.insert("content-type", HeaderValue::from_static("application/grpc+proto"));
        assert_eq!(scan(&headers), Found { hop_by_hop: false, internal: true, grpc: true, refused: false });
        headers.insert(REFUSED, HeaderValue::from_static("1"));
        assert_eq!(scan(&headers), Found { hop_by_hop: false, internal: true, grpc: true, refused: true });
    }

    #[test]
    fn headers_named_in_connection_are_removed() {
        let mut headers = HeaderMap::new();
        headers.append("connection", HeaderValue::from_static("keep-alive, X-Hop"));
        headers.append("connection", HeaderValue::from_static("authorization"));
        for name in ["x-hop", "authorization", "x-kept", "keep-alive"] {
            headers.insert(name, HeaderValue::from_static("1"));
        }
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["x-kept"]);
        // A byte outside ASCII in the list does not hide the names beside it.
        headers.append("connection", HeaderValue::from_bytes(b"authorization, x-\xff").unwrap());
        headers.insert("authorization", HeaderValue::from_static("secret"));
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["x-kept"]);
        // Names in any case; `close` names a header too when there is one.
        headers.append("connection", HeaderValue::from_static("Close, KEEP-ALIVE"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["x-kept"]);
        headers.append("connection", HeaderValue::from_static("close"));
        headers.insert("close", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["x-kept"]);
    }

    #[test]
    fn a_head_needs_exactly_one_host_in_http_1_1() {
        let req = |version, hosts: &[&str]| {
            let mut req = Request::new(());
            *req.version_mut() = version;
            for h in hosts {
                req.headers_mut().append("host", HeaderValue::from_str(h).unwrap());
            }
            req
        };
        assert_eq!(malformed_head(&req(Version::HTTP_11, &["a"])), None);
        assert_eq!(malformed_head(&req(Version::HTTP_10, &[])), None);
        assert_eq!(malformed_head(&req(Version::HTTP_2, &[])), None);
        assert!(malformed_head(&req(Version::HTTP_11, &[])).is_some());
        assert!(malformed_head(&req(Version::HTTP_11, &["a", "b"])).is_some());
    }
}
