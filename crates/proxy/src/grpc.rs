//! gRPC as the proxy sees it (gRPC over HTTP/2, grpc/grpc's PROTOCOL-HTTP2.md): which requests
//! are gRPC, `grpc-timeout` as a deadline, the proxy's own replies in gRPC's trailers-only form,
//! and a trailers-only `grpc-status` read as an attempt's outcome.
//!
//! A gRPC client reads an HTTP status other than 200 as a transport failure and maps it itself
//! (404 becomes UNIMPLEMENTED, 429 and every 5xx UNAVAILABLE), so a 504 from the proxy would reach
//! the application as UNAVAILABLE. Like Envoy's local replies, the proxy answers a gRPC request
//! with HTTP 200, `content-type` as the request's, and `grpc-status`/`grpc-message` in the head,
//! which ends the stream (trailers-only): a passed deadline is DEADLINE_EXCEEDED, admission
//! RESOURCE_EXHAUSTED, no endpoint or an unreachable one UNAVAILABLE.

use crate::http::Body;
use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use std::time::Duration;

/// The request header carrying the caller's deadline.
pub const TIMEOUT: &str = "grpc-timeout";
/// The response header (or trailer) carrying the call's status code.
pub const STATUS: &str = "grpc-status";
/// The response header (or trailer) carrying the status's message, percent-encoded.
pub const MESSAGE: &str = "grpc-message";

/// gRPC status codes (grpc/grpc's doc/statuscodes.md).
pub mod code {
    pub const OK: u8 = 0;
    pub const CANCELLED: u8 = 1;
    pub const UNKNOWN: u8 = 2;
    pub const INVALID_ARGUMENT: u8 = 3;
    pub const DEADLINE_EXCEEDED: u8 = 4;
    pub const NOT_FOUND: u8 = 5;
    pub const ALREADY_EXISTS: u8 = 6;
    pub const PERMISSION_DENIED: u8 = 7;
    pub const RESOURCE_EXHAUSTED: u8 = 8;
    pub const FAILED_PRECONDITION: u8 = 9;
    pub const ABORTED: u8 = 10;
    pub const OUT_OF_RANGE: u8 = 11;
    pub const UNIMPLEMENTED: u8 = 12;
    pub const INTERNAL: u8 = 13;
    pub const UNAVAILABLE: u8 = 14;
    pub const DATA_LOSS: u8 = 15;
    pub const UNAUTHENTICATED: u8 = 16;
}

/// Whether a `content-type` value is gRPC's: `application/grpc`, alone or with a `+format`,
/// parameters, or gRPC-Web's `-web` (whose trailers-only replies have the same form).
pub fn is_grpc(content_type: &[u8]) -> bool {
    content_type
        .strip_prefix(b"application/grpc")
        .is_some_and(|rest| matches!(rest.first(), None | Some(b'+' | b';' | b'-')))
}

/// The `content-type` of a gRPC request, if `headers` are one's.
pub fn content_type(headers: &HeaderMap) -> Option<&HeaderValue> {
    headers.get(CONTENT_TYPE).filter(|v| is_grpc(v.as_bytes()))
}

/// The request's `grpc-timeout` (1 to 8 digits and a unit: `H`, `M`, `S`, `m`, `u` or `n`), at
/// most [`crate::http::MAX_DEADLINE_MS`]: `Ok(None)` when absent, `Err` naming the header when
/// malformed or repeated.
pub fn timeout(headers: &HeaderMap) -> Result<Option<Duration>, String> {
    let mut values = headers.get_all(TIMEOUT).iter();
    let Some(value) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err(format!("{TIMEOUT}: expected one value, got several"));
    }
    let max = Duration::from_millis(crate::http::MAX_DEADLINE_MS);
    parse_timeout(value.as_bytes())
        .map(|d| Some(d.min(max)))
        .ok_or_else(|| format!("{TIMEOUT}: expected 1 to 8 digits and a unit (H, M, S, m, u, n), got {value:?}"))
}

fn parse_timeout(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// `remaining` as a `grpc-timeout` value: in the finest unit whose 8 digits hold it (rounded
/// down, as time has passed since it was read).
pub fn timeout_value(remaining: Duration) -> HeaderValue {
    const MAX: u128 = 99_999_999;
    let text = if remaining.as_micros() <= MAX {
        format!("{}u", remaining.as_micros())
    } else if remaining.as_millis() <= MAX {
        format!("{}m", remaining.as_millis())
    } else {
        format!("{}S", remaining.as_secs().min(MAX as u64))
    };
    HeaderValue::from_str(&text).expect("digits and a unit are a header value")
}

/// The status code a reply of the proxy's own with HTTP `status` carries to a gRPC caller:
/// Envoy's mapping of HTTP statuses to gRPC codes (that of gRPC's clients,
/// doc/http-grpc-status-mapping.md), except that a refusal by admission (429) is
/// RESOURCE_EXHAUSTED and a timeout or passed deadline (504) DEADLINE_EXCEEDED.
pub fn status_of(status: StatusCode) -> u8 {
    match status.as_u16() {
        400 => code::INTERNAL,
        401 => code::UNAUTHENTICATED,
        403 => code::PERMISSION_DENIED,
        404 => code::UNIMPLEMENTED,
        429 => code::RESOURCE_EXHAUSTED,
        504 => code::DEADLINE_EXCEEDED,
        502 | 503 => code::UNAVAILABLE,
        _ => code::UNKNOWN,
    }
}

/// The HTTP status that an answer's trailers-only `grpc-status` stands for when its outcome is
/// judged (429 a refusal, 5xx an error, anything else an answer): Envoy's mapping of gRPC codes
/// to HTTP statuses. `None` when the head carries no status (a stream whose status comes in its
/// trailers, after the head the outcome is judged on) or an unknown one.
pub fn http_status(headers: &HeaderMap) -> Option<StatusCode> {
    let code: u8 = std::str::from_utf8(headers.get(STATUS)?.as_bytes()).ok()?.parse().ok()?;
    let status = match code {
        code::OK => 200,
        code::CANCELLED => 499,
        code::UNKNOWN | code::INTERNAL | code::DATA_LOSS => 500,
        code::INVALID_ARGUMENT | code::FAILED_PRECONDITION | code::OUT_OF_RANGE => 400,
        code::DEADLINE_EXCEEDED => 504,
        code::NOT_FOUND => 404,
        code::ALREADY_EXISTS | code::ABORTED => 409,
        code::PERMISSION_DENIED => 403,
        code::RESOURCE_EXHAUSTED => 429,
        code::UNIMPLEMENTED => 501,
        code::UNAVAILABLE => 503,
        code::UNAUTHENTICATED => 401,
        _ => return None,
    };
    StatusCode::from_u16(status).ok()
}

/// Marks a response as the proxy's own reply ([`crate::http::text`]), with its message.
#[derive(Clone)]
pub(crate) struct LocalReply(pub(crate) Bytes);

/// Makes `response`, if it is the proxy's own reply to a gRPC request of `content_type`, that
/// reply in gRPC's form: HTTP 200, trailers-only, its status mapped by [`status_of`] and its
/// message as `grpc-message`. Other headers (an ingress's chip) stay. An upstream's response is
/// left as it is.
pub fn local_reply(response: &mut Response<Body>, content_type: HeaderValue) {
    let Some(LocalReply(message)) = response.extensions_mut().remove::<LocalReply>() else { return };
    let status = status_of(response.status());
    *response.status_mut() = StatusCode::OK;
    *response.body_mut() = crate::http::empty();
    let headers = response.headers_mut();
    headers.remove(CONTENT_LENGTH);
    headers.insert(CONTENT_TYPE, content_type);
    headers.insert(STATUS, HeaderValue::from(u16::from(status)));
    let message = message.strip_suffix(b"\n").unwrap_or(&message);
    if let Ok(message) = HeaderValue::from_str(&percent_encode(message)) {
        headers.insert(MESSAGE, message);
    }
}

/// `message` as `grpc-message` carries it: bytes outside printable ASCII, and `%`, as `%XX`.
fn percent_encode(message: &[u8]) -> String {
    let mut out = String::with_capacity(message.len());
    for &b in message {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use hyper::body::Body as _;

    #[test]
    fn grpc_content_types_are_told_from_look_alikes() {
        for ct in
            ["application/grpc", "application/grpc+proto", "application/grpc;charset=x", "application/grpc-web+proto"]
        {
            assert!(is_grpc(ct.as_bytes()), "{ct}");
        }
        for ct in ["application/json", "application/grpcx", "text/plain", "application/grp"] {
            assert!(!is_grpc(ct.as_bytes()), "{ct}");
        }
    }

    #[test]
    fn timeouts_parse_in_every_unit_and_malformed_ones_are_refused() {
        let cases = [
            ("1H", Duration::from_secs(3600)),
            ("2M", Duration::from_secs(120)),
            ("3S", Duration::from_secs(3)),
            ("250m", Duration::from_millis(250)),
            ("997u", Duration::from_micros(997)),
            ("12345678n", Duration::from_nanos(12_345_678)),
            ("0m", Duration::ZERO),
        ];
        for (text, d) in cases {
            assert_eq!(parse_timeout(text.as_bytes()), Some(d), "{text}");
        }
        for text in ["", "m", "123456789m", "10s", "-1S", "1.5S", "10 m"] {
            assert_eq!(parse_timeout(text.as_bytes()), None, "{text}");
        }
        let mut headers = HeaderMap::new();
        assert_eq!(timeout(&headers), Ok(None));
        headers.insert(TIMEOUT, HeaderValue::from_static("99999999H"));
        assert_eq!(timeout(&headers), Ok(Some(Duration::from_millis(crate::http::MAX_DEADLINE_MS))));
        headers.append(TIMEOUT, HeaderValue::from_static("1S"));
        assert!(timeout(&headers).unwrap_err().contains("several"));
    }

    #[test]
    fn a_remaining_time_is_written_in_the_finest_unit_that_holds_it() {
        let written = |d| timeout_value(d).to_str().unwrap().to_string();
        assert_eq!(written(Duration::from_micros(1500)), "1500u");
        assert_eq!(written(Duration::from_secs(99)), "99000000u");
        assert_eq!(written(Duration::from_secs(100)), "100000m");
        assert_eq!(written(Duration::from_secs(200_000)), "200000S");
        for d in [Duration::from_nanos(1), Duration::from_millis(1234), Duration::from_secs(3600)] {
            let back = parse_timeout(written(d).as_bytes()).unwrap();
            assert!(back <= d && d - back < Duration::from_micros(1), "{d:?}");
        }
    }

    #[test]
    fn trailers_only_statuses_map_to_the_outcomes_of_their_http_kin() {
        let status = |code: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(STATUS, HeaderValue::from_str(code).unwrap());
            http_status(&headers).map(|s| s.as_u16())
        };
        assert_eq!(status("0"), Some(200));
        assert_eq!(status("8"), Some(429));
        assert_eq!(status("14"), Some(503));
        assert_eq!(status("4"), Some(504));
        assert_eq!(status("5"), Some(404));
        assert_eq!(status("17"), None);
        assert_eq!(status("x"), None);
        assert_eq!(http_status(&HeaderMap::new()), None);
    }

    #[tokio::test]
    async fn a_local_reply_becomes_trailers_only_and_an_upstream_answer_is_left_alone() {
        let mut reply = crate::http::text(StatusCode::TOO_MANY_REQUESTS, "tailguard: over capacity 100%");
        reply.headers_mut().insert(crate::http::CHIP, HeaderValue::from_static("0"));
        local_reply(&mut reply, HeaderValue::from_static("application/grpc+proto"));
        assert_eq!(reply.status(), StatusCode::OK);
        let h = reply.headers();
        assert_eq!(h[CONTENT_TYPE], "application/grpc+proto");
        assert_eq!(h[STATUS], "8");
        assert_eq!(h[MESSAGE], "tailguard: over capacity 100%25");
        assert_eq!(h[crate::http::CHIP], "0");
        assert!(reply.body().is_end_stream());

        let mut answer = Response::new(crate::http::full("from the upstream"));
        *answer.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        local_reply(&mut answer, HeaderValue::from_static("application/grpc"));
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(answer.headers().get(STATUS).is_none());
        assert_eq!(answer.into_body().collect().await.unwrap().to_bytes(), "from the upstream");
    }

    #[test]
    fn messages_outside_printable_ascii_are_percent_encoded() {
        assert_eq!(percent_encode("délai 5%\n".as_bytes()), "d%C3%A9lai 5%25%0A");
    }
}
