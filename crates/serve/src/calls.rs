//! A request's downstream calls: plain HTTP GETs to each called service's URL (in the lab, the
//! replica's sidecar egress, which balances, times out, retries and hedges; this side does none
//! of that), or a command to a redis or memcached callee ([`crate::store`]), one after another or
//! all at once, each edge `count` times. A request of a route makes the route's calls (if it has
//! its own); a call to a service with routes goes to one of them, the call's own (`route:`) or
//! one drawn by their weights, with the route's method and its path under the callee's URL, and
//! carries the request's id with the call's number appended (`x-request-id: 7.0`).

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Method, StatusCode};
use hyper::{Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tailguard_model::replica::{child_key, pick_route};
use tailguard_model::schema::{Fanout, Priority, Route, PRIORITY_HEADER};
use tokio::task::JoinSet;

use crate::routes::{Routed, REQUEST_ID};
use crate::spec::{Downstream, Spec};
use crate::store::Store;

/// The most of a downstream answer's body that is read (and thrown away).
const MAX_BODY: usize = 1 << 20;

/// The W3C trace-context headers (`traceparent`, `tracestate`) copied from a request onto its
/// downstream calls, so a sidecar's spans for those calls join the trace of the request
/// (docs/traces.md). The service makes no spans itself: its sidecar's ingress span covers it.
#[derive(Clone, Debug, Default)]
pub struct TraceContext {
    traceparent: Option<HeaderValue>,
    tracestate: Option<HeaderValue>,
}

impl TraceContext {
    /// The trace context of a request with `headers`, if it has one.
    pub fn of(headers: &HeaderMap) -> TraceContext {
        TraceContext {
            traceparent: headers.get("traceparent").cloned(),
            tracestate: headers.get("tracestate").cloned(),
        }
    }
}

/// The calls every request makes, and the client that makes them.
#[derive(Clone, Debug)]
pub struct Calls {
    /// Per route (index 0: a request of no route; r + 1: of route r), (callee, where) per call,
    /// each edge repeated `count` times, in file order.
    plans: Vec<Vec<(String, Target)>>,
    fanout: Fanout,
    client: Client<HttpConnector, Empty<Bytes>>,
}

impl Calls {
    /// The call plans of `spec`: edges with `count: 0` are left out.
    pub fn new(spec: &Spec) -> Calls {
        let mut edges = spec.service.all_calls().zip(spec.downstream.iter().zip(&spec.callee_routes));
        let mut plan = |calls: usize| {
            let mut plan = Vec::new();
            for (edge, (down, routes)) in edges.by_ref().take(calls) {
                let fixed = edge.route.as_ref().and_then(|name| routes.iter().position(|r| r.name == *name));
                let target = match down {
                    Some(Downstream::Http(url)) => {
                        Target::Http(url.clone(), CalleeRoutes { routes: routes.clone(), fixed })
                    }
                    // One store (one connection pool) per edge, shared by its `count` calls.
                    Some(Downstream::Store(protocol, addrs)) => Target::Store(Store::new(*protocol, addrs.clone())),
                    None => continue,
                };
                plan.extend(std::iter::repeat_n((edge.service.clone(), target), edge.count as usize));
            }
            plan
        };
        let mut plans = vec![plan(spec.service.calls.len())];
        for route in &spec.service.routes {
            match &route.calls {
                Some(calls) => plans.push(plan(calls.len())),
                None => plans.push(plans[0].clone()),
            }
        }
        let client = Client::builder(TokioExecutor::new()).build_http();
        Calls { plans, fanout: spec.service.fanout, client }
    }

    /// Makes every call of `request`'s route; the first failure (sequential: the calls after it
    /// are not made; parallel: all are waited for, and an error outranks a refusal) is returned.
    pub async fn make(&self, context: &TraceContext, request: &Routed) -> Result<(), CallFailure> {
        let plan = &self.plans[request.route.map_or(0, |r| r + 1).min(self.plans.len() - 1)];
        let out = |i: usize| Outgoing::of(request, i);
        match self.fanout {
            Fanout::Sequential => {
                for (i, (callee, target)) in plan.iter().enumerate() {
                    call(&self.client, callee, target, context, &out(i)).await?;
                }
                Ok(())
            }
            Fanout::Parallel => {
                let mut set = JoinSet::new();
                for (i, (callee, target)) in plan.iter().enumerate() {
                    let (client, callee, target) = (self.client.clone(), callee.clone(), target.clone());
                    let (context, out) = (context.clone(), out(i));
                    set.spawn(async move { call(&client, &callee, &target, &context, &out).await });
                }
                let mut first_failure: Option<CallFailure> = None;
                while let Some(joined) = set.join_next().await {
                    let outcome =
                        joined.unwrap_or_else(|e| Err(CallFailure::error(format!("a call task failed: {e}"))));
                    if let Err(e) = outcome {
                        if first_failure.as_ref().is_none_or(|f| f.refused && !e.refused) {
                            first_failure = Some(e);
                        }
                    }
                }
                first_failure.map_or(Ok(()), Err)
            }
        }
    }
}

/// Why a call failed: a message naming the callee, and whether the callee refused it (answered
/// 429: its service is over capacity), a refusal the caller passes on as its own 429.
#[derive(Debug)]
pub struct CallFailure {
    pub message: String,
    pub refused: bool,
}

impl CallFailure {
    fn error(message: String) -> CallFailure {
        CallFailure { message, refused: false }
    }
}

/// Where one call goes.
#[derive(Clone, Debug)]
enum Target {
    Http(Uri, CalleeRoutes),
    Store(Store),
}

/// The callee's routes, and the one a call names, if any.
#[derive(Clone, Debug)]
struct CalleeRoutes {
    routes: Vec<Route>,
    fixed: Option<usize>,
}

impl CalleeRoutes {
    /// The URL, method and priority of a call keyed by `key` to `url`: the route's path under
    /// `url`'s.
    fn request(&self, url: &Uri, key: u64) -> (Uri, Method, Priority) {
        let Some(route) = self.fixed.or_else(|| pick_route(&self.routes, key)).and_then(|r| self.routes.get(r)) else {
            return (url.clone(), Method::GET, Priority::Normal);
        };
        let method = route.matches.method.as_deref().and_then(|m| Method::from_bytes(m.as_bytes()).ok());
        let base = url.path();
        let slash = if base.ends_with('/') { "" } else { "/" };
        let mut parts = url.clone().into_parts();
        parts.path_and_query = format!("{base}{slash}{}", route.matches.path.trim_start_matches('/')).parse().ok();
        (Uri::from_parts(parts).unwrap_or_else(|_| url.clone()), method.unwrap_or(Method::GET), route.priority)
    }
}

/// What a request's `i`-th call carries of it: its id, with the call's number, and the key its
/// callee's route is drawn with.
struct Outgoing {
    id: Option<String>,
    key: u64,
}

impl Outgoing {
    fn of(request: &Routed, i: usize) -> Outgoing {
        let id = request.id.as_ref().map(|id| format!("{id}.{i}"));
        Outgoing { key: child_key(request.key.unwrap_or(0), i as u64), id }
    }
}

/// One call: an HTTP GET (success is a 2xx status with its body read, so the connection can be
/// reused) or one store command exchange.
async fn call(
    client: &Client<HttpConnector, Empty<Bytes>>,
    callee: &str,
    target: &Target,
    context: &TraceContext,
    out: &Outgoing,
) -> Result<(), CallFailure> {
    let failed = |e: &dyn std::fmt::Display| CallFailure::error(format!("{callee}: {e}"));
    let (url, method, priority) = match target {
        Target::Http(url, routes) => routes.request(url, out.key),
        Target::Store(store) => return store.call().await.map_err(|e| failed(&e)),
    };
    let mut request = Request::builder().method(method).uri(url);
    if let Some(id) = &out.id {
        request = request.header(REQUEST_ID, id.as_str());
    }
    if priority == Priority::Low {
        request = request.header(PRIORITY_HEADER, "low");
    }
    let mut request = request.body(Empty::new()).map_err(|e| failed(&e))?;
    for (name, value) in [("traceparent", &context.traceparent), ("tracestate", &context.tracestate)] {
        if let Some(value) = value {
            request.headers_mut().insert(name, value.clone());
        }
    }
    let response = client.request(request).await.map_err(|e| failed(&e))?;
    let status = response.status();
    Limited::new(response.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| failed(&format_args!("reading the answer: {e}")))?;
    if status.is_success() {
        return Ok(());
    }
    let refused = status == StatusCode::TOO_MANY_REQUESTS;
    Err(CallFailure { message: format!("{callee}: answered {status}"), refused })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailguard_model::schema::RouteMatch;

    #[test]
    fn a_call_takes_its_route_s_path_method_and_priority() {
        let route = |path: &str, method: Option<&str>, priority| Route {
            name: path.into(),
            matches: RouteMatch { path: path.into(), method: method.map(String::from) },
            weight: 1.0,
            service_time: None,
            work: None,
            calls: None,
            priority,
        };
        let routes = vec![route("/a", Some("POST"), Priority::Normal), route("/b", None, Priority::Low)];
        let url: Uri = "http://127.0.0.1:4140/backend".parse().unwrap();
        let to = |fixed| CalleeRoutes { routes: routes.clone(), fixed: Some(fixed) }.request(&url, 7);
        assert_eq!(to(0), ("http://127.0.0.1:4140/backend/a".parse().unwrap(), Method::POST, Priority::Normal));
        assert_eq!(to(1), ("http://127.0.0.1:4140/backend/b".parse().unwrap(), Method::GET, Priority::Low));
    }
}
