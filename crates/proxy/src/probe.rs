//! Load reports on the wire (Prequal): an ingress sidecar reports its requests in flight (RIF) and
//! latency estimate in one header, `x-tailguard-load: rif=3, latency_us=12345` (the key=value text
//! form of ORCA's `endpoint-load-metrics`, under our own name), on every response it sends a
//! trusted peer, and in its answer to a probe: a `GET /` carrying `x-tailguard-probe: 1`, which the
//! ingress answers itself, without the application or admission, with `204` and the header. Like
//! every `x-tailguard-*` header, both are for trusted peers only: anyone else's probe is refused
//! with 403, and their responses carry no report. The egress reads the header off each response
//! (and strips it, as every internal header, before the application sees it); a response without
//! one, or an answer to a probe that is not a probe reply, tells it the endpoint has no sidecar
//! reporting to it.

use crate::http::{self, Body};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use std::time::Duration;
use tailguard_policy::balance::ProbeReply;
use tailguard_policy::LoadReport;

/// The request header that makes a request a probe.
pub const PROBE: &str = "x-tailguard-probe";
/// The response header carrying the load report.
pub const LOAD: HeaderName = HeaderName::from_static("x-tailguard-load");

/// Whether `headers` make the request a probe.
pub fn is_probe(headers: &HeaderMap) -> bool {
    headers.contains_key(PROBE)
}

/// A probe request (origin-form; the caller sets the URI's authority for h2c).
pub fn request() -> Request<Body> {
    let mut request = Request::new(http::empty());
    request.headers_mut().insert(PROBE, HeaderValue::from_static("1"));
    request
}

/// The ingress's answer to a probe.
pub fn response(reply: ProbeReply) -> Response<Body> {
    let mut response = Response::new(http::empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    add(response.headers_mut(), reply);
    response
}

/// The answer to a probe from a peer whose internal headers are not believed.
pub fn refused() -> Response<Body> {
    http::text(StatusCode::FORBIDDEN, "tailguard: probes are answered to trusted peers only")
}

/// Puts `reply` on a response's headers.
pub fn add(headers: &mut HeaderMap, reply: ProbeReply) {
    let latency_us = u64::try_from(reply.latency.as_micros()).unwrap_or(u64::MAX);
    let (mut rif, mut latency) = (itoa::Buffer::new(), itoa::Buffer::new());
    let parts =
        [b"rif=", rif.format(reply.in_flight).as_bytes(), b", latency_us=", latency.format(latency_us).as_bytes()];
    // At most 4 + 10 + 13 + 20 bytes.
    let (mut text, mut len) = ([0u8; 48], 0);
    for part in parts {
        text[len..len + part.len()].copy_from_slice(part);
        len += part.len();
    }
    headers.insert(LOAD, HeaderValue::from_bytes(&text[..len]).expect("digits, letters and punctuation"));
}

/// The report a response carries ([`LoadReport::Missing`] when it carries none, or a malformed
/// one). `look`: whether to look for one: the headers hold some `x-tailguard-*` header (a scan
/// found it) and the caller's balancer takes reports, so other responses pay for no lookup.
pub fn report(headers: &HeaderMap, look: bool) -> LoadReport {
    let reply = look.then(|| headers.get(LOAD).and_then(parse)).flatten();
    reply.map_or(LoadReport::Missing, LoadReport::Load)
}

/// What an answer to a probe says: its report if it is a probe reply (204 with the header),
/// [`LoadReport::Missing`] for anything else, such as an application answering in place of a
/// sidecar.
pub fn answer(response: &Response<Body>) -> LoadReport {
    if response.status() != StatusCode::NO_CONTENT {
        return LoadReport::Missing;
    }
    report(response.headers(), true)
}

/// `rif=N, latency_us=N`, in any order, other keys ignored (room for more fields). Read as bytes:
/// every response to a Prequal caller carries one, and splitting it as text cost the egress a
/// thousand instructions a response.
fn parse(value: &HeaderValue) -> Option<ProbeReply> {
    let (mut rif, mut latency_us) = (None, None);
    for field in value.as_bytes().split(|&b| b == b',') {
        let field = field.trim_ascii();
        let eq = field.iter().position(|&b| b == b'=')?;
        let (key, number) = (&field[..eq], &field[eq + 1..]);
        let number = || std::str::from_utf8(number).ok();
        match key {
            b"rif" => rif = Some(number()?.parse::<u32>().ok()?),
            b"latency_us" => latency_us = Some(number()?.parse::<u64>().ok()?),
            _ => {}
        }
    }
    Some(ProbeReply { in_flight: rif?, latency: Duration::from_micros(latency_us?) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_round_trips_through_the_header() {
        let reply = ProbeReply { in_flight: 7, latency: Duration::from_micros(12_345) };
        let probed = response(reply);
        assert_eq!(probed.headers()[LOAD], "rif=7, latency_us=12345");
        assert_eq!(answer(&probed), LoadReport::Load(reply));
        assert!(is_probe(request().headers()));
        let mut headers = HeaderMap::new();
        add(&mut headers, reply);
        assert_eq!(report(&headers, true), LoadReport::Load(reply));
        // The longest numbers fit.
        let most = ProbeReply { in_flight: u32::MAX, latency: Duration::from_micros(u64::MAX) };
        add(&mut headers, most);
        assert_eq!(headers[LOAD], "rif=4294967295, latency_us=18446744073709551615");
        assert_eq!(report(&headers, true), LoadReport::Load(most));
        // Fields in another order, spaces and unknown fields are fine.
        headers.insert(LOAD, HeaderValue::from_static("latency_us=5,cpu=0.3 ,  rif=2"));
        let expected = ProbeReply { in_flight: 2, latency: Duration::from_micros(5) };
        assert_eq!(report(&headers, true), LoadReport::Load(expected));
    }

    #[test]
    fn anything_but_a_well_formed_report_is_missing() {
        assert_eq!(answer(&refused()), LoadReport::Missing);
        let plain = http::text(StatusCode::OK, "an application's root page");
        assert_eq!(answer(&plain), LoadReport::Missing);
        assert_eq!(report(plain.headers(), false), LoadReport::Missing);
        let bad = ["rif=many, latency_us=1", "rif=1", "latency_us=1", "rif=1; latency_us=2", "", "rif=1,,latency_us=2"];
        for bad in bad.into_iter().chain(["rif= 1, latency_us=2", "rif=1, latency_us=2,"]) {
            let mut headers = HeaderMap::new();
            headers.insert(LOAD, HeaderValue::from_static(bad));
            assert_eq!(report(&headers, true), LoadReport::Missing, "{bad}");
        }
        // A 204 with a report that is malformed is no probe reply either.
        let mut bad = response(ProbeReply { in_flight: 1, latency: Duration::ZERO });
        bad.headers_mut().insert(LOAD, HeaderValue::from_static("rif=-1, latency_us=0"));
        assert_eq!(answer(&bad), LoadReport::Missing);
    }
}
