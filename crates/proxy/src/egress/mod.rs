//! The egress: the local application's outbound requests, routed to an upstream by Host or path
//! prefix and carried out by a [`Call`](tailguard_policy::call::Call) driven in real time.
//!
//! The parts, one file per role:
//! - this file: the [`Egress`] itself (current routes, reload, one request from arrival to
//!   response);
//! - [`routes`]: which upstream a request goes to (Host, then longest path prefix), and the
//!   upstreams' endpoints and policy state, kept across reloads when unchanged;
//! - [`classes`]: which of its upstream's classes (routes) a request is, for the timeout, hedge
//!   and latency models it learns with;
//! - [`body`]: what every attempt replays (method, path, headers, a buffered body) and which
//!   requests may be replayed at all;
//! - [`driver`]: one request in flight, the policy core's `Call` run in real time: its actions
//!   carried out, its attempts' ends fed back, the response chosen;
//! - [`protocol`]: an attempt on the wire through the endpoint's pool (HTTP/1, h2c, or HTTP/2
//!   over TLS), and the headers it carries (remaining deadline, trace context);
//! - [`discovery`]: endpoint sets found by DNS or in a file, re-read on an interval and applied
//!   to an upstream in place (joined endpoints added, left ones drained);
//! - `kubernetes` (the `kube` feature): endpoint sets from a Service's EndpointSlices, watched
//!   through the Kubernetes API and applied the same way;
//! - [`metrics`]: what a request and its attempts add to the proxy's metrics.
//!
//! Trace spans are [`CallTrace`](crate::trace::CallTrace)'s, made per call when tracing is on.

mod body;
mod classes;
mod discovery;
mod driver;
#[cfg(feature = "kube")]
mod kubernetes;
mod metrics;
mod protocol;
mod routes;

use crate::body::ClientBody;
use crate::cap::{Count, Place};
use crate::config;
use crate::http::{self, Body};
use crate::metrics::Metrics;
use crate::tls::TlsError;
use crate::trace::Tracing;
use body::template;
use driver::Driver;
use hyper::{Request, Response, StatusCode};
use routes::{Routes, Upstream};
use std::sync::{Arc, RwLock};
use std::time::Instant;
use tailguard_policy::Time;

pub(crate) use driver::outcome;
pub(crate) use protocol::AttemptError;

/// The outbound side: routes and upstreams.
pub struct Egress {
    /// Swapped whole on reload; each request keeps the routes it started with.
    routes: RwLock<Arc<Routes>>,
    epoch: Instant,
    metrics: Arc<Metrics>,
    tracing: Option<Arc<Tracing>>,
    /// The proxy's seed; upstream n draws from its stream n + 1 ([`crate::rng`]).
    seed: u64,
    /// Requests in flight, against the routes' `max_requests`.
    in_flight: Count,
}

impl Egress {
    /// The egress of `config`; `epoch` is the proxy's time zero, `seed` its seed. An error if an
    /// upstream's TLS files cannot be used.
    pub fn new(config: &config::Egress, epoch: Instant, metrics: Arc<Metrics>, seed: u64) -> Result<Egress, TlsError> {
        let routes = RwLock::new(Arc::new(Routes::new(config, None, &metrics, seed)?));
        Ok(Egress { routes, epoch, metrics, tracing: None, seed, in_flight: Count::default() })
    }

    /// Waits until every upstream with discovery has had its first answer (or failure), so a
    /// proxy serves its first requests with the endpoints found.
    pub async fn discovered(&self) {
        for upstream in &self.routes().upstreams {
            let _ = upstream.discovered.subscribe().wait_for(|done| *done).await;
        }
    }

    /// Makes spans per call and attempt when `tracing` is set.
    pub fn traced(mut self, tracing: Option<Arc<Tracing>>) -> Egress {
        self.tracing = tracing;
        self
    }

    /// Swaps in the upstreams of `config` for new requests; requests in flight finish with the
    /// old ones. An upstream whose name and settings are unchanged keeps its policy state. If an
    /// upstream's TLS files cannot be used, nothing changes.
    pub fn reload(&self, config: &config::Egress) -> Result<(), TlsError> {
        let mut routes = self.routes.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        *routes = Arc::new(Routes::new(config, Some(&routes), &self.metrics, self.seed)?);
        Ok(())
    }

    fn routes(&self) -> Arc<Routes> {
        self.routes.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Answers one request from the application.
    pub async fn handle(&self, req: Request<ClientBody>) -> Response<Body> {
        let routes = self.routes();
        let Some(upstream) = routes.route(&req) else {
            return http::text(StatusCode::NOT_FOUND, "tailguard: no upstream matches this request");
        };
        let response = self.forward(&routes, upstream, req).await;
        upstream.metrics.responses.count(response.status());
        response
    }

    /// A place for one request at the egress (`egress.max_requests`) and at `upstream` (its
    /// `max_requests`, a bulkhead: a hung upstream holds at most its own places), given back when
    /// dropped; else why the request is answered 503 at once: requests are refused, not queued,
    /// so a hung upstream cannot pile them up without bound.
    fn admit(&self, routes: &Routes, upstream: &Upstream) -> Result<(Place, Place), String> {
        let max = routes.max_requests;
        let Some(egress) = self.in_flight.take(max) else {
            self.metrics.egress_refused.inc();
            return Err(format!(
                "tailguard: too many concurrent requests in flight at the egress: limit {max} (egress.max_requests)"
            ));
        };
        let max = upstream.config.max_requests;
        let Some(own) = upstream.in_flight.take(max) else {
            upstream.metrics.refused.inc();
            return Err(format!(
                "tailguard: too many concurrent requests in flight to upstream {}: limit {max} (its max_requests)",
                upstream.name
            ));
        };
        Ok((egress, own))
    }

    /// Sends `req` to `upstream` under its policy.
    async fn forward(&self, routes: &Routes, upstream: &Arc<Upstream>, req: Request<ClientBody>) -> Response<Body> {
        let found = http::scan(req.headers());
        // The application's own deadline header, or a gRPC request's grpc-timeout.
        let deadline = match http::deadline(req.headers(), found, true) {
            Ok(Some(left)) if left.is_zero() => return http::deadline_spent(),
            Ok(left) => left.map(|left| self.now().saturating_add(left)),
            Err(e) => return http::text(StatusCode::BAD_REQUEST, &e),
        };
        let upgrade = found.hop_by_hop && http::upgrade(req.headers()).is_some();
        if upgrade && upstream.config.protocol == config::Protocol::H2c {
            let why = format!(
                "tailguard: a protocol upgrade (WebSocket) needs HTTP/1.1 to upstream {}, which speaks h2c",
                upstream.name
            );
            return http::text(StatusCode::NOT_IMPLEMENTED, &why);
        }
        let trace = self.tracing.as_ref().map(|t| t.call(req.headers(), &upstream.name));
        let fault = req.body().fault();
        let (template, streamed) = match template(req, found, upgrade, routes.max_replay_body).await {
            Ok(t) => t,
            Err(e) => {
                let cannot = || http::text(StatusCode::BAD_REQUEST, &format!("tailguard: cannot read the body: {e}"));
                return fault.get().map_or_else(cannot, |fault| fault.response());
            }
        };
        // Places are taken once the body is read (or starts streaming): a client sending its
        // body slowly holds its connection (bounded by max_connections and body_read_timeout),
        // never a place that requests to an upstream need.
        let _places = match self.admit(routes, upstream) {
            Ok(places) => places,
            Err(why) => return http::text(StatusCode::SERVICE_UNAVAILABLE, &why),
        };
        upstream.metrics.requests.inc();
        let mut driver = Driver::new(self, upstream.clone(), Arc::new(template), streamed);
        driver.trace = trace;
        let (response, answer, latency) = driver.run(deadline).await;
        if let Some(fault) = fault.get() {
            // The client's body failed, not the upstream: no failure counted against it.
            return fault.response();
        }
        metrics::request_done(&upstream.metrics, latency, answer);
        response
    }

    fn now(&self) -> Time {
        self.epoch.elapsed()
    }
}
