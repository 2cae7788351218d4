//! The fuzz entry points of the parsers the proxy owns (`tailguard_model::fuzz` says how they
//! are run): the proxy file, the header rules it adds to hyper's HTTP/1 parsing, and the
//! deadline header. Each takes arbitrary bytes and panics only if a promise is broken.
//!
//! Not here: HTTP/1 and HTTP/2 framing (hyper and h2, fuzzed by their projects; the proxy's
//! answers to bad framing are tested over sockets in tests/proxy.rs), `traceparent`
//! (OpenTelemetry's propagator) and the h2c preface check (`server::preface`, a comparison with
//! a constant, tested over sockets).

use crate::config::Config;
use crate::http;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Version};
use std::path::Path;

/// The proxy file on `data`: [`Config::parse`], then what [`crate::Proxy::start`] builds from it
/// before binding (each upstream's policy, the ingress's admission). A refused file's error names
/// the file; an accepted one reads back equal from [`Config::to_yaml`]. Whether it was accepted.
pub fn config(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else { return false };
    let origin = Path::new("fuzz.yaml");
    let config = match Config::parse(text, origin) {
        Ok(config) => config,
        Err(e) => {
            assert!(e.file == origin && !e.message.is_empty(), "an error without its file or message: {e:?}");
            return false;
        }
    };
    for upstream in config.egress.iter().flat_map(|egress| egress.upstreams.values()) {
        tailguard_model::build::client_policy(&upstream.policy, upstream.endpoints.len());
    }
    if let Some(ingress) = &config.ingress {
        tailguard_model::build::admission(&ingress.admission);
    }
    let _ = config.warnings();
    let written = config.to_yaml();
    let again = Config::parse(&written, origin).unwrap_or_else(|e| panic!("{written}\nreads back as: {e}"));
    assert_eq!(Config { source: config.source.clone(), ..again }, config, "{written}");
    true
}

/// The header rules on the request head in `data` (parsed by httparse, as hyper parses it): the
/// server's [`http::malformed_head`] (one `Host`, and one in HTTP/1.1), the listeners'
/// [`http::deadline_ms`], and [`http::forwardable`], after which no hop-by-hop header (but
/// `TE: trailers`), no header `Connection` names and no `x-tailguard-*` header but a low priority
/// is left, and every
/// other header keeps all its values in order. Whether the head was forwarded.
pub fn request_head(data: &[u8]) -> bool {
    let Some(req) = parse_head(data) else { return false };
    let hosts = req.headers().get_all(hyper::header::HOST).iter().count();
    let refused = http::malformed_head(&req).is_some();
    assert_eq!(refused, hosts > 1 || (hosts == 0 && req.version() == Version::HTTP_11), "{hosts} Host headers");
    if refused {
        return false;
    }
    let deadline = check_deadline(req.headers());
    let named: Vec<Vec<u8>> = req
        .headers()
        .get_all(hyper::header::CONNECTION)
        .iter()
        .flat_map(|list| list.as_bytes().split(|b| *b == b','))
        .map(|name| name.trim_ascii().to_ascii_lowercase())
        .collect();
    let mut headers = req.headers().clone();
    let found = http::scan(&headers);
    http::forwardable(&mut headers, found);
    for (name, value) in &headers {
        let name = name.as_str();
        let low_priority = name == http::PRIORITY && value == "low";
        assert!(!name.starts_with(http::INTERNAL_PREFIX) || low_priority, "{name} forwarded");
        if name == "te" {
            assert_eq!(value, "trailers", "TE forwarded with another value");
            continue;
        }
        assert!(!HOP_BY_HOP.contains(&name), "{name} forwarded");
        assert!(!named.iter().any(|n| n == name.as_bytes()), "{name}, named in Connection, forwarded");
    }
    for name in req.headers().keys() {
        let dropped = HOP_BY_HOP.contains(&name.as_str())
            || name.as_str().starts_with(http::INTERNAL_PREFIX)
            || named.iter().any(|n| n == name.as_str().as_bytes());
        if !dropped {
            let before: Vec<_> = req.headers().get_all(name).iter().collect();
            let after: Vec<_> = headers.get_all(name).iter().collect();
            assert_eq!(before, after, "{name} changed on its way");
        }
    }
    deadline.is_ok()
}

/// The hop-by-hop headers of RFC 9110 §7.6.1 and the two older ones proxies drop.
const HOP_BY_HOP: [&str; 7] =
    ["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"];

/// The head in `data` as hyper would hand it to the proxy, or `None` where hyper would answer
/// 400 itself (not a whole head, a name or value hyper refuses).
fn parse_head(data: &[u8]) -> Option<Request<()>> {
    let mut slots = [httparse::EMPTY_HEADER; 100];
    let mut parsed = httparse::Request::new(&mut slots);
    let Ok(httparse::Status::Complete(_)) = parsed.parse(data) else { return None };
    let mut req = Request::new(());
    *req.version_mut() = if parsed.version == Some(0) { Version::HTTP_10 } else { Version::HTTP_11 };
    for header in parsed.headers.iter() {
        let name = HeaderName::from_bytes(header.name.as_bytes()).ok()?;
        req.headers_mut().append(name, HeaderValue::from_bytes(header.value).ok()?);
    }
    Some(req)
}

/// The deadline header on `data`: its lines are the values of `x-tailguard-deadline-ms` (the
/// first three, each that is a valid header value). One value of whole milliseconds is believed,
/// cut to [`http::MAX_DEADLINE_MS`]; anything else is an error naming the header. Whether a
/// deadline was believed.
pub fn deadline_header(data: &[u8]) -> bool {
    let mut headers = HeaderMap::new();
    for line in data.split(|b| *b == b'\n').take(3) {
        if let Ok(value) = HeaderValue::from_bytes(line) {
            headers.append(http::DEADLINE_MS, value);
        }
    }
    let values: Vec<&HeaderValue> = headers.get_all(http::DEADLINE_MS).iter().collect();
    let got = check_deadline(&headers);
    let expected = match values[..] {
        [] => Some(None),
        [one] => {
            one.to_str().ok().and_then(|t| t.trim().parse::<u64>().ok()).map(|ms| Some(ms.min(http::MAX_DEADLINE_MS)))
        }
        _ => None,
    };
    assert_eq!(got.ok(), expected, "{values:?}");
    matches!(expected, Some(Some(_)))
}

/// [`http::deadline_ms`] on `headers`, checked for what holds whatever they are: a believed
/// deadline is at most [`http::MAX_DEADLINE_MS`], an error names the header.
fn check_deadline(headers: &HeaderMap) -> Result<Option<u64>, String> {
    let got = http::deadline_ms(headers);
    match &got {
        Ok(Some(ms)) => assert!(*ms <= http::MAX_DEADLINE_MS, "{ms} ms believed"),
        Ok(None) => {}
        Err(e) => assert!(e.starts_with(http::DEADLINE_MS.as_str()), "{e:?} does not name the header"),
    }
    got
}
