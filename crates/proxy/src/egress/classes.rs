//! Request classes at the egress: which of an upstream's classes ([`tailguard_policy::class`]) a
//! request belongs to, so its timeout, hedge and race record are its route's.
//!
//! An upstream's `routes` come first, in file order (class `i + 1` is `routes[i]`): the first
//! whose method and path prefix match. Any other request gets an automatic class (the upstream's
//! `classes`): its method and its path's first `segments` segments (2 by default: `GET
//! /api/users` for `/api/users/42?x=1`), where a segment that looks like an identifier (digits,
//! hex digits and `-` only, with a digit among them: `42`, `3f2a9c`, a UUID) ends the class, and
//! a gRPC request's (`content-type: application/grpc...`) whole path, its
//! `/package.Service/Method`. The first `max` classes found are kept for the upstream's life; the
//! requests of any class beyond them are pooled in class 0.
//!
//! Per request this is a scan of the routes and a hash of a few bytes compared with at most
//! `max` others, under the upstream's lock already taken to start the call: no allocation.

use crate::config::{self, UpstreamRoute};
use hyper::header::CONTENT_TYPE;
use hyper::{HeaderMap, Method};
use std::hash::{BuildHasher, Hasher};
use tailguard_policy::class::{ClassId, POOLED};

/// Sorts an upstream's requests into its classes; kept with its policy state.
pub(super) struct Classifier {
    routes: Vec<UpstreamRoute>,
    classify: config::Classify,
    /// The automatic classes found so far: their key's hash, by class id − routes − 1.
    found: Vec<u64>,
    hasher: std::collections::hash_map::RandomState,
}

impl Classifier {
    pub(super) fn new(routes: &[UpstreamRoute], classify: config::Classify) -> Classifier {
        Classifier { routes: routes.to_vec(), classify, found: Vec::new(), hasher: Default::default() }
    }

    /// The class of a request of `method` to `path` with `headers`.
    pub(super) fn classify(&mut self, method: &Method, path: &str, headers: &HeaderMap) -> ClassId {
        if let Some(i) = self.routes.iter().position(|r| r.matches.matches(method.as_str(), path)) {
            return class_id(i + 1);
        }
        if self.classify.max == 0 {
            return POOLED;
        }
        let grpc = headers.get(CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
        let key = self.key_hash(method, path, grpc);
        let first = self.routes.len() + 1;
        if let Some(i) = self.found.iter().position(|&h| h == key) {
            return class_id(first + i);
        }
        if self.found.len() >= self.classify.max {
            return POOLED;
        }
        self.found.push(key);
        class_id(first + self.found.len() - 1)
    }

    /// The hash of the request's automatic class key: its method and the leading segments of
    /// its path (all of it for gRPC).
    fn key_hash(&self, method: &Method, path: &str, grpc: bool) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write(method.as_str().as_bytes());
        h.write_u8(0);
        let path = path.split(['?', '#']).next().unwrap_or("");
        if grpc {
            h.write(path.as_bytes());
            return h.finish();
        }
        for segment in path.split('/').filter(|s| !s.is_empty()).take(self.classify.segments) {
            if identifier(segment) {
                break;
            }
            h.write(segment.as_bytes());
            h.write_u8(b'/');
        }
        h.finish()
    }
}

/// Whether a path segment looks like an identifier rather than a name: digits, hex letters and
/// `-` only, with at least one digit.
fn identifier(segment: &str) -> bool {
    let bytes = segment.as_bytes();
    bytes.iter().any(u8::is_ascii_digit) && bytes.iter().all(|b| b.is_ascii_hexdigit() || *b == b'-')
}

fn class_id(i: usize) -> ClassId {
    ClassId::try_from(i).unwrap_or(POOLED)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classifier(routes: &str, classify: config::Classify) -> Classifier {
        let routes: Vec<UpstreamRoute> = serde_yaml_ng::from_str(routes).unwrap();
        Classifier::new(&routes, classify)
    }

    #[test]
    fn routes_first_then_automatic_classes_up_to_the_limit() {
        let routes = "[{name: search, match: {path: /search}}, {name: writes, match: {path: /, method: POST}}]";
        let mut c = classifier(routes, config::Classify { max: 4, segments: 2 });
        let none = HeaderMap::new();
        let mut class = |method: Method, path: &str| c.classify(&method, path, &none);
        assert_eq!(class(Method::GET, "/search?q=x"), 1);
        assert_eq!(class(Method::GET, "/searching"), 3, "a prefix matches whole segments");
        assert_eq!(class(Method::POST, "/api/items"), 2);
        // Automatic classes: method and two segments, identifiers cut.
        assert_eq!(class(Method::GET, "/api/items/42"), 4);
        assert_eq!(class(Method::GET, "/api/items/43"), 4);
        assert_eq!(class(Method::GET, "/api/items"), 4);
        assert_eq!(class(Method::GET, "/users/3f2a9c-11/orders"), 5);
        assert_eq!(class(Method::GET, "/users/4a"), 5);
        assert_eq!(class(Method::HEAD, "/api/items"), 6, "the method is part of the class");
        // The limit is reached: the rest are pooled, the classes found stay.
        assert_eq!(class(Method::GET, "/health"), 0);
        assert_eq!(class(Method::GET, "/api/items/7"), 4);
        assert_eq!(class(Method::GET, "/v1/users"), 0);
    }

    #[test]
    fn a_grpc_request_is_classed_by_its_whole_method_path() {
        let mut c = classifier("[]", config::Classify::default());
        let mut grpc = HeaderMap::new();
        grpc.insert(CONTENT_TYPE, "application/grpc+proto".parse().unwrap());
        let a = c.classify(&Method::POST, "/grpc.testing.TestService/UnaryCall", &grpc);
        let b = c.classify(&Method::POST, "/grpc.testing.TestService/StreamingOutputCall", &grpc);
        assert_ne!(a, b);
        assert_eq!(c.classify(&Method::POST, "/grpc.testing.TestService/UnaryCall", &grpc), a);
    }

    #[test]
    fn no_automatic_classes_pools_what_no_route_matches() {
        let mut c = classifier("[{name: slow, match: {path: /slow}}]", config::Classify { max: 0, segments: 2 });
        let none = HeaderMap::new();
        assert_eq!(c.classify(&Method::GET, "/slow/x", &none), 1);
        assert_eq!(c.classify(&Method::GET, "/fast", &none), 0);
    }

    #[test]
    fn identifiers_are_digits_and_hex_with_a_digit() {
        for id in ["42", "3f2a9c", "123e4567-e89b-12d3-a456-426614174000", "0"] {
            assert!(identifier(id), "{id}");
        }
        for name in ["v1", "users", "beef", "api-v2", ""] {
            assert!(!identifier(name), "{name}");
        }
    }
}
