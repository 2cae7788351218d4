//! Which of the service's routes a request is, and which request: its route decides its work
//! and calls, and its `x-request-id` keys its work per request, so every attempt of one request
//! (a retry, a hedge, on any replica) does the same work, as in the simulator.
//!
//! A path is matched without a leading `/{service}` segment, the prefix the lab's sidecars route
//! a service's requests by (`/backend/search` is `backend`'s `/search`). The first route whose
//! method and path prefix match is the request's; none matching, the request follows the
//! service's own `service_time` and `calls`.

use hyper::header::HeaderMap;
use hyper::Request;
use tailguard_model::schema::RouteMatch;

use crate::spec::Spec;

/// The header that names a request (the load generator's request number; a caller's id with
/// its call's number appended, for the calls it makes).
pub const REQUEST_ID: &str = "x-request-id";

/// The service's routes, as requests are matched against them.
#[derive(Debug)]
pub struct Routes {
    /// `/{service}`, which a path may start with.
    prefix: String,
    matches: Vec<RouteMatch>,
}

/// A request, as its work and calls need it.
#[derive(Clone, Debug, Default)]
pub struct Routed {
    /// Its route (an index into the service's routes), if one matched.
    pub route: Option<usize>,
    /// The key of its work per request: its id's hash, if it has an id.
    pub key: Option<u64>,
    /// Its id, passed on (with each call's number) to its calls.
    pub id: Option<String>,
}

impl Routes {
    pub fn new(spec: &Spec) -> Routes {
        Routes {
            prefix: format!("/{}", spec.name),
            matches: spec.service.routes.iter().map(|r| r.matches.clone()).collect(),
        }
    }

    /// What `request` is.
    pub fn route<B>(&self, request: &Request<B>) -> Routed {
        let path = request.uri().path();
        let own = path.strip_prefix(&self.prefix).filter(|rest| rest.is_empty() || rest.starts_with('/'));
        let path = match own {
            Some("") => "/",
            Some(rest) => rest,
            None => path,
        };
        let method = request.method().as_str();
        let route = self.matches.iter().position(|m| m.matches(method, path));
        let id = id(request.headers());
        Routed { route, key: id.as_deref().map(key), id }
    }
}

fn id(headers: &HeaderMap) -> Option<String> {
    headers.get(REQUEST_ID).and_then(|v| v.to_str().ok()).map(str::to_string)
}

/// A request id's key: FNV-1a, the same on every platform and run.
pub fn key(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}
