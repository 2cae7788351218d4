//! Prequal's probes on the wire: the egress asks an endpoint's ingress sidecar for its load with a
//! `GET /` carrying `x-tailguard-probe: 1`; the ingress answers it itself, without the application
//! or admission, with `204` and its requests in flight (`x-tailguard-probe-in-flight`) and latency
//! estimate in microseconds (`x-tailguard-probe-latency-us`). Like every `x-tailguard-*` header,
//! the probe header is believed only from a trusted peer; anyone else's probe is refused with 403.

use crate::http::{self, Body};
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};
use std::time::Duration;
use tailguard_policy::balance::ProbeReply;

/// The request header that makes a request a probe.
pub const PROBE: &str = "x-tailguard-probe";
/// The reply's requests in flight.
pub const IN_FLIGHT: &str = "x-tailguard-probe-in-flight";
/// The reply's latency estimate, in whole microseconds.
pub const LATENCY_US: &str = "x-tailguard-probe-latency-us";

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
    let headers = response.headers_mut();
    headers.insert(IN_FLIGHT, HeaderValue::from(reply.in_flight));
    headers.insert(LATENCY_US, HeaderValue::from(u64::try_from(reply.latency.as_micros()).unwrap_or(u64::MAX)));
    response
}

/// The answer to a probe from a peer whose internal headers are not believed.
pub fn refused() -> Response<Body> {
    http::text(StatusCode::FORBIDDEN, "tailguard: probes are answered to trusted peers only")
}

/// The reply a probe's response carries, if it is one (`None` for anything else, such as an
/// application answering in place of a sidecar).
pub fn parse(response: &Response<Body>) -> Option<ProbeReply> {
    if response.status() != StatusCode::NO_CONTENT {
        return None;
    }
    let number = |name: &str| response.headers().get(name)?.to_str().ok()?.trim().parse::<u64>().ok();
    let in_flight = u32::try_from(number(IN_FLIGHT)?).ok()?;
    Some(ProbeReply { in_flight, latency: Duration::from_micros(number(LATENCY_US)?) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_round_trips_through_the_headers() {
        let reply = ProbeReply { in_flight: 7, latency: Duration::from_micros(12_345) };
        assert_eq!(parse(&response(reply)), Some(reply));
        assert!(is_probe(request().headers()));
    }

    #[test]
    fn anything_but_a_well_formed_reply_is_none() {
        assert_eq!(parse(&refused()), None);
        let mut bad = response(ProbeReply { in_flight: 1, latency: Duration::ZERO });
        bad.headers_mut().insert(IN_FLIGHT, HeaderValue::from_static("many"));
        assert_eq!(parse(&bad), None);
        let mut missing = response(ProbeReply { in_flight: 1, latency: Duration::ZERO });
        missing.headers_mut().remove(LATENCY_US);
        assert_eq!(parse(&missing), None);
    }
}
