//! Protocol: an attempt on the wire, through each endpoint's own connection
//! [`Pool`](crate::pool::Pool) (origin-form URI, rebuilt for a replay on a fresh HTTP/1
//! connection when the request is replayable; the pool speaks HTTP/2 on one multiplexed
//! connection to an h2c endpoint, and over TLS to one that chooses it by ALPN). Each carries the
//! template's headers, the deadline left for the next hop (a gRPC request's also as
//! `grpc-timeout`) and its trace context; a response loses internal and hop-by-hop headers.

use super::body::Template;
use super::driver::{Attempt, Driver};
use crate::grpc;
use crate::http::{self, Body, BoxError, CHIP, DEADLINE_MS};
use crate::pool;
use crate::probe;
use http_body_util::BodyExt;
use hyper::header::HeaderValue;
use hyper::{HeaderMap, Request, Response, Uri};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tailguard_policy::admission::Marks;
use tailguard_policy::call::Call;
use tailguard_policy::EndpointId;

/// An attempt's response, when it comes.
pub(super) type ResponseFuture = Pin<Box<dyn Future<Output = Result<Response<Body>, AttemptError>> + Send>>;

/// A probe in flight: it ends once its reply, if any, is with the balancer.
pub(super) type ProbeFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Why an attempt got no response: the endpoint's pool says.
pub(crate) type AttemptError = pool::Error;

impl pool::Error {
    /// Whether no connection could be opened (nothing reached the endpoint).
    pub(crate) fn is_connect(&self) -> bool {
        matches!(self, pool::Error::Connect(..))
    }

    /// Whether the endpoint's connection cap refused it locally (nothing was sent).
    pub(crate) fn is_overflow(&self) -> bool {
        matches!(self, pool::Error::Overflow(..))
    }
}

impl Driver<'_> {
    /// Starts attempt `attempt` to `endpoint`, with the `marks` its ingress's admission reads
    /// ([`http::FALLBACK`], [`http::REFUSED`]; [`http::arrival`]).
    pub(super) fn send(
        &mut self,
        call: &Call,
        attempt: u32,
        endpoint: EndpointId,
        policy_timeout: Option<Duration>,
        marks: Marks,
    ) {
        let body = match (&self.template.body, self.streamed.take()) {
            (Some(bytes), _) => http::bytes(bytes),
            (None, Some(body)) => body.map_err(BoxError::from).boxed(),
            (None, None) => {
                self.unsendable.push(attempt);
                return;
            }
        };
        let Some(target) = self.upstream.endpoint(endpoint) else {
            self.unsendable.push(attempt);
            return;
        };
        let now = self.now;
        let remaining = call.deadline().map(|d| d.saturating_sub(now));
        // The trace context, kept apart so that a replay can carry it too.
        let mut traced = HeaderMap::new();
        if let Some(trace) = &self.trace {
            trace.inject(attempt, &mut traced);
        }
        let request = origin_request(&self.template, body, remaining, marks, &traced);
        let rebuild = self.replayable.then(|| {
            let template = self.template.clone();
            move || {
                let body = template.body.as_ref().map_or_else(http::empty, http::bytes);
                origin_request(&template, body, remaining, marks, &traced)
            }
        });
        let pool = target.pool.clone();
        let response: ResponseFuture = match self.template.upgrade {
            true => Box::pin(pool.upgrade(request)),
            false => Box::pin(pool.send(request, rebuild)),
        };
        self.attempts.push(Attempt { attempt, endpoint, sent: now, policy_timeout, response });
    }
}

impl Driver<'_> {
    /// Probes `endpoint` for Prequal: what the answer says goes to the upstream's balancer (a
    /// probe reply, or anything else: no sidecar reports there); a probe that gets no answer is
    /// dropped. `None` when the endpoint is gone.
    pub(super) fn probe(&self, endpoint: EndpointId) -> Option<ProbeFuture> {
        let target = self.upstream.endpoint(endpoint)?;
        let mut request = probe::request();
        *request.uri_mut() = Uri::from_static("/");
        let response: ResponseFuture = Box::pin(target.pool.clone().send(request, None::<fn() -> Request<Body>>));
        let (upstream, epoch) = (self.upstream.clone(), self.egress.epoch);
        Some(Box::pin(async move {
            let Ok(response) = response.await else { return };
            let report = probe::answer(&response);
            let now = epoch.elapsed();
            let mut core = upstream.core();
            core.policy.balancer.on_probe(endpoint, now, report);
        }))
    }
}

/// Room for an attempt's headers: the application's, ours, and then (hyper reuses the map) the
/// response's; a typical response has about ten.
const ATTEMPT_HEADERS: usize = 12;

/// An attempt's request: the template's method, origin-form URI (the pool sets `Host` if the
/// application sent none, and over HTTP/2 makes it the `:authority`) and headers on `body`, plus
/// the deadline left for the next hop (and for gRPC as `grpc-timeout`), the admission's
/// [`Marks`] and the attempt's trace context.
fn origin_request(
    t: &Template,
    body: Body,
    remaining: Option<Duration>,
    marks: Marks,
    traced: &HeaderMap,
) -> Request<Body> {
    // Set in place: each step of `Request::builder()` moves the whole request head.
    let mut request = Request::new(body);
    *request.method_mut() = t.method.clone();
    *request.uri_mut() = Uri::from(t.path.clone());
    let headers = request.headers_mut();
    // Not `t.headers.clone()`: a cloned map's entries have no spare room, and hyper reuses this
    // map for the response's headers, so every request paid for regrowing it twice.
    headers.reserve(ATTEMPT_HEADERS.max(t.headers.len() + 3));
    for (name, value) in &t.headers {
        headers.append(name, value.clone());
    }
    if let Some(r) = remaining {
        headers.insert(DEADLINE_MS, HeaderValue::from(u64::try_from(r.as_millis()).unwrap_or(u64::MAX)));
        if t.grpc {
            headers.insert(grpc::TIMEOUT, grpc::timeout_value(r));
        }
    }
    if marks.fallback {
        headers.insert(http::FALLBACK, HeaderValue::from_static(if marks.race { "race" } else { "1" }));
    }
    if marks.refused_elsewhere {
        headers.insert(http::REFUSED, HeaderValue::from_static("1"));
    }
    for (name, value) in traced {
        headers.insert(name, value.clone());
    }
    request
}

/// Makes an upstream's response what the application gets: no internal or hop-by-hop headers
/// but a 101's `Upgrade` (`found` by a scan of its headers).
pub(super) fn clean(response: &mut Response<Body>, found: http::Found) {
    if found.hop_by_hop {
        http::strip_response_hop_by_hop(response);
    }
    let headers = response.headers_mut();
    if found.internal {
        http::strip_internal(headers, &[]);
    }
    debug_assert!(!headers.contains_key(CHIP));
}
