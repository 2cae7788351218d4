//! A target: one URL with its method and body. A run cycles through its targets round robin.

use crate::LoadError;
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::HeaderValue;
use hyper::{Method, Request, Uri};
use tailguard_model::schema::PRIORITY_HEADER;

/// The header that names a request, the same on every attempt of it (Envoy and nginx use it).
pub const REQUEST_ID: &str = "x-request-id";

/// One request to send, again and again.
#[derive(Clone, Debug)]
pub struct Target {
    pub method: Method,
    pub uri: Uri,
    pub body: Bytes,
    /// Sent as `x-request-id`, when set: a route's request says which request it is, so every
    /// attempt of it does the same work at `tailguard serve` (docs/serve.md).
    pub request_id: Option<u64>,
    /// Sent as `x-tailguard-priority: low`, when set: a route of low priority (its sidecar's
    /// admission refuses it first).
    pub low_priority: bool,
}

impl Target {
    /// Parses `URL` (sent with `default_method`) or `METHOD URL` (vegeta's target format).
    pub fn parse(text: &str, default_method: &Method) -> Result<Self, LoadError> {
        let text = text.trim();
        let (method, url) = match text.split_once(char::is_whitespace) {
            Some((method, url)) => (parse_method(method)?, url.trim()),
            None => (default_method.clone(), text),
        };
        let uri = parse_url(url).map_err(|reason| LoadError::BadTarget { target: text.to_string(), reason })?;
        Ok(Self::new(method, uri))
    }

    /// A target without a body.
    pub fn new(method: Method, uri: Uri) -> Self {
        Self { method, uri, body: Bytes::new(), request_id: None, low_priority: false }
    }

    /// The request for one send; cloning the body is a reference-count increment.
    pub(crate) fn request(&self) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(self.body.clone()));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        if let Some(id) = self.request_id {
            request.headers_mut().insert(REQUEST_ID, id.into());
        }
        if self.low_priority {
            request.headers_mut().insert(PRIORITY_HEADER, HeaderValue::from_static("low"));
        }
        request
    }
}

/// Parses an HTTP method token, e.g. `GET` or `post` (upper-cased).
pub fn parse_method(text: &str) -> Result<Method, LoadError> {
    Method::from_bytes(text.to_ascii_uppercase().as_bytes()).map_err(|_| LoadError::BadMethod(text.to_string()))
}

/// Parses an absolute `http(s)://host[:port]/path` URL, or says what is wrong with it.
fn parse_url(text: &str) -> Result<Uri, String> {
    let uri: Uri = text.parse().map_err(|e| format!("not a URL ({e})"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => return Err(format!("unsupported scheme {other:?}; use http:// or https://")),
        None => return Err("expected an absolute URL such as http://127.0.0.1:8080/".into()),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err("the URL has no host".into());
    }
    Ok(uri)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_url_takes_the_default_method() {
        let target = Target::parse("http://127.0.0.1:8080/a?b=1", &Method::GET).unwrap();
        assert_eq!(target.method, Method::GET);
        assert_eq!(target.uri.path(), "/a");
    }

    #[test]
    fn a_low_priority_target_says_so_and_the_others_say_nothing() {
        let mut target = Target::parse("http://127.0.0.1:8080/", &Method::GET).unwrap();
        assert!(target.request().headers().get(PRIORITY_HEADER).is_none());
        target.low_priority = true;
        assert_eq!(target.request().headers().get(PRIORITY_HEADER).unwrap(), "low");
    }

    #[test]
    fn a_method_may_prefix_the_url() {
        let target = Target::parse("post http://localhost/x", &Method::GET).unwrap();
        assert_eq!(target.method, Method::POST);
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        let reason = |text: &str| Target::parse(text, &Method::GET).unwrap_err().to_string();
        assert!(reason("not a url").contains("not a URL"), "{}", reason("not a url"));
        assert!(reason("/x").contains("absolute URL"), "{}", reason("/x"));
        assert!(reason("ftp://example.com/").contains("unsupported scheme"));
        assert!(reason("http://").contains("not a URL"));
        assert!(reason("G@T http://localhost/").contains("bad method"));
    }
}
