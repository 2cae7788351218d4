//! The ingress: other services' requests to the local application, through admission control.
//!
//! It counts the requests the application holds (`q` is that count, or the count beyond
//! `workers` when the application's concurrency is known: bloc-load-balancing.txt §IV-A), refuses
//! with 429 when the admission policy says so, and puts a BLOC confidence chip
//! (`x-tailguard-chip: 1|0`) on every response, decided before the response head is sent (the
//! published BLOC proxy sets it too late, so its callers never see one).
//!
//! Headers from outside: `x-tailguard-*` headers are stripped from requests, except
//! `x-tailguard-deadline-ms` from a trusted peer (`trusted_peers`, or a client certificate valid
//! for one of `trusted_identities`: docs/security.md), which is
//! honoured (the application is given that long, at most an hour, then the caller gets 504) and
//! passed on so the application's own calls can propagate it; a deadline spent on arrival is
//! answered 504 at once. A gRPC request's `grpc-timeout` is a deadline too, from any caller.
//! To a gRPC request the ingress's own replies are gRPC's (`crate::grpc`): its 429 is
//! RESOURCE_EXHAUSTED, its 504 DEADLINE_EXCEEDED.
//!
//! Every response to a trusted peer carries the ingress's load report (`x-tailguard-load`,
//! [`crate::probe`]): the requests the application holds and the latency estimate at that count
//! (Prequal). A probe (`x-tailguard-probe`) from a trusted peer is answered by the ingress itself
//! with the same report; from anyone else, with 403, and their responses carry none.
//!
//! With a `network_delay` ([`crate::wire`]) it holds each request before anything else, and each
//! response after everything else, for one network hop.

use crate::body::ClientBody;
use crate::config;
use crate::http::{self, Body, BoxError, CHIP, DEADLINE_MS};
use crate::metrics::{Metrics, ResponseCounters};
use crate::pool::{self, Pool};
use crate::tls::{self, TlsError};
use crate::trace::{ServerSpan, Tracing};
use crate::wire::Wire;
use http_body_util::BodyExt;
use hyper::header::HeaderValue;
use hyper::http::uri::PathAndQuery;
use hyper::{Request, Response, StatusCode, Uri, Version};
use rand_pcg::Pcg64Mcg;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tailguard_model::build;
use tailguard_policy::admission::{Admission, AdmissionConfig, AdmissionState, Arrival};
use tailguard_policy::balance::{ProbeReply, ProbeResponder};
use tailguard_policy::Time;

/// The random stream of the ingress's network-delay jitter: far from the egress's upstream streams
/// (1, 2, …), so a jitter changes no other draw.
const WIRE_STREAM: u64 = u64::MAX;

/// The inbound side.
pub struct Ingress {
    /// The application's connections: kept-alive HTTP/1 ones, or one HTTP/2 connection by prior
    /// knowledge (`protocol: h2c`) or over TLS if the application chooses `h2` by ALPN (the
    /// egress's endpoint pool).
    client: Arc<Pool>,
    state: Arc<Mutex<State>>,
    epoch: Instant,
    metrics: Arc<Metrics>,
    /// The responses' per-class counters, resolved once.
    responses: ResponseCounters,
    tracing: Option<Arc<Tracing>>,
    /// Whose deadline and sampled trace context are believed.
    trusted_peers: Vec<config::Network>,
    /// The hop the sidecar delays itself, if any.
    wire: Option<Wire>,
    /// The cap on HTTP/1 connections to the application, for the 503 that names it.
    max_app_connections: usize,
}

/// Admission state: the policy, the requests the application holds, the random source, and
/// the latency estimate probes are answered with.
struct State {
    admission: Box<dyn Admission>,
    in_flight: u32,
    rng: Pcg64Mcg,
    probes: ProbeResponder,
}

impl Ingress {
    /// The ingress of `config`; `epoch` is the proxy's time zero, `seed` its seed (the ingress
    /// draws from stream 0, its network delay's jitter from [`WIRE_STREAM`], [`crate::rng`]). An
    /// error if the TLS files towards the application (`app_tls`) cannot be used.
    pub fn new(
        config: &config::Ingress,
        epoch: Instant,
        metrics: Arc<Metrics>,
        seed: u64,
    ) -> Result<Ingress, TlsError> {
        let state = State {
            admission: build::admission(&config.admission),
            in_flight: 0,
            rng: crate::rng(seed, 0),
            probes: ProbeResponder::default(),
        };
        Ok(Ingress {
            client: {
                let tls = match &config.app_tls {
                    Some(t) => Some(Arc::new(tls::Connector::new(t, "ingress.app_tls")?)),
                    None => None,
                };
                let pool = Pool::new(config.app, config.max_app_connections)
                    .with_h2c(config.protocol == config::Protocol::H2c)
                    .with_tls(tls)
                    .counting(metrics.ingress_app_connections_opened.clone())
                    .counting_stalls(matches!(config.admission, AdmissionConfig::Adaptive));
                Arc::new(pool)
            },
            state: Arc::new(Mutex::new(state)),
            epoch,
            responses: metrics.ingress_response_counters(),
            metrics,
            tracing: None,
            trusted_peers: config.trusted_peers.clone(),
            wire: config.network_delay.clone().map(|network| Wire::new(network, crate::rng(seed, WIRE_STREAM))),
            max_app_connections: config.max_app_connections,
        })
    }

    /// Makes a span per request when `tracing` is set.
    pub fn traced(mut self, tracing: Option<Arc<Tracing>>) -> Ingress {
        self.tracing = tracing;
        self
    }

    fn now(&self) -> Time {
        self.epoch.elapsed()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Answers one request from `peer`.
    pub async fn handle(&self, req: Request<ClientBody>, peer: SocketAddr) -> Response<Body> {
        if let Some(wire) = &self.wire {
            wire.cross().await;
        }
        let identity = req.extensions().get::<crate::tls::TrustedIdentity>().is_some();
        let trusted = config::Network::trusts(&self.trusted_peers, peer.ip(), identity);
        let response = if crate::probe::is_probe(req.headers()) {
            match trusted {
                true => crate::probe::response(self.load()),
                false => crate::probe::refused(),
            }
        } else {
            let mut response = match &self.tracing {
                None => self.serve(req, trusted, None).await,
                Some(tracing) => {
                    let span = tracing.ingress(req.headers(), trusted);
                    let response = self.serve(req, trusted, Some(&span)).await;
                    span.end(response.status());
                    response
                }
            };
            if trusted {
                crate::probe::add(response.headers_mut(), self.load());
            }
            response
        };
        self.responses.count(response.status());
        if let Some(wire) = &self.wire {
            wire.cross().await;
        }
        response
    }

    /// Answers a request from a `trusted` caller or not.
    async fn serve(&self, req: Request<ClientBody>, trusted: bool, span: Option<&ServerSpan>) -> Response<Body> {
        self.metrics.ingress_requests.inc();
        let found = http::scan(req.headers());
        // An untrusted caller's deadline header is not believed, nor passed on; a gRPC caller's
        // grpc-timeout is, from anyone (it can only shorten its own request).
        let deadline = match http::deadline(req.headers(), found, trusted) {
            Ok(Some(left)) if left.is_zero() => return http::deadline_spent(),
            Ok(left) => left,
            Err(e) => return http::text(StatusCode::BAD_REQUEST, &e),
        };
        let upgrade = found.hop_by_hop && http::upgrade(req.headers()).is_some();
        if upgrade && self.client.is_h2c() {
            let why =
                "tailguard: a protocol upgrade (WebSocket) needs HTTP/1.1 to the application (ingress.protocol: http1)";
            return http::text(StatusCode::NOT_IMPLEMENTED, why);
        }
        let arrival = http::arrival(req.headers(), found, deadline, trusted);
        let Some(held) = self.admit(arrival) else {
            self.metrics.ingress_rejected.inc();
            if !arrival.marks.fallback {
                self.metrics.ingress_rejected_without_fallback.inc();
            }
            let mut response = http::text(StatusCode::TOO_MANY_REQUESTS, "tailguard: over capacity");
            response.headers_mut().insert(CHIP, HeaderValue::from_static("0"));
            response.headers_mut().insert(http::REFUSED, HeaderValue::from_static("1"));
            return response;
        };
        let fault = req.body().fault();
        let mut request = match self.app_request(req, found, deadline) {
            Ok(r) => r,
            Err(e) => return http::text(StatusCode::BAD_REQUEST, &format!("tailguard: {e}")),
        };
        if let Some(span) = span {
            span.inject(request.headers_mut());
        }
        let (arrived, rif, at_app) = (Instant::now(), held.rif, held.at_app);
        // An upgrade's deadline ends at the switch: the tunnel after it is the connection's.
        let answer = match deadline {
            Some(d) => tokio::time::timeout(d, self.call(request, upgrade)).await.ok(),
            None => Some(self.call(request, upgrade).await),
        };
        drop(held);
        let deadline_passed = || http::text(StatusCode::GATEWAY_TIMEOUT, "tailguard: the deadline passed");
        let mut response = match (answer, fault.get()) {
            (None, _) => deadline_passed(),
            // Nothing was sent: the application's connections are at their cap, all in use.
            (Some(Err(e)), _) if matches!(e.downcast_ref(), Some(pool::Error::Overflow(..))) => {
                self.metrics.ingress_app_overflow.inc();
                let why = format!(
                    "tailguard: the application has its limit of connections open, all in use (ingress.max_app_connections {})",
                    self.max_app_connections
                );
                return http::text(StatusCode::SERVICE_UNAVAILABLE, &why);
            }
            // The client's body failed, not the application.
            (Some(Err(_)), Some(fault)) => return fault.response(),
            // The application gave up on a request whose deadline had passed (a gRPC server resets
            // the stream at its deadline): the deadline failed it, not the application.
            (Some(Err(_)), None) if deadline.is_some_and(|d| arrived.elapsed() >= d) => deadline_passed(),
            (Some(Err(_)), None) => http::text(StatusCode::BAD_GATEWAY, "tailguard: the application is unreachable"),
            (Some(Ok(r)), _) => {
                let (now, latency) = (self.now(), arrived.elapsed());
                let mut state = self.lock();
                state.probes.on_answer(rif, latency);
                if !r.status().is_server_error() {
                    state.admission.answered(now, at_app, latency);
                }
                drop(state);
                r
            }
        };
        http::strip_response_hop_by_hop(&mut response);
        http::strip_internal(response.headers_mut(), &[]);
        let chip = if self.chip() { "1" } else { "0" };
        response.headers_mut().insert(CHIP, HeaderValue::from_static(chip));
        response
    }

    /// Sends `request` to the application (never twice: its body is streamed); an `upgrade` on a
    /// connection of its own, which becomes the tunnel if the application switches.
    async fn call(&self, request: Request<Body>, upgrade: bool) -> Result<Response<Body>, BoxError> {
        match upgrade {
            true => self.client.clone().upgrade(request).await,
            false => self.client.clone().send(request, None::<fn() -> Request<Body>>).await,
        }
    }

    /// Admits a request (`arrival`), counting it until the returned guard drops; `None` means
    /// 429.
    fn admit(&self, arrival: Arrival) -> Option<Held<'_>> {
        let now = self.now();
        let mut state = self.lock();
        let (rif, at_app) = (state.in_flight, self.at_app(state.in_flight));
        let State { admission, in_flight, .. } = &mut *state;
        let admitted = admission.admit_as(now, at_app, arrival);
        self.report(admission.state(now));
        if !admitted {
            return None;
        }
        *in_flight += 1;
        admission.observe(now, at_app + 1);
        self.metrics.ingress_in_flight.set(i64::from(state.in_flight));
        Some(Held { ingress: self, rif, at_app })
    }

    /// Sets the admission metrics to `state`.
    fn report(&self, state: AdmissionState) {
        let m = &self.metrics;
        m.ingress_admission_limit.set(state.limit.map_or(0, i64::from));
        m.ingress_admission_enforced.set(i64::from(state.enforced));
        m.ingress_admission_base_seconds.set(state.base.map_or(0.0, |b| b.as_secs_f64()));
    }

    /// Of `in_flight` requests, those admission decides on. Adaptive admission judges the
    /// application's queue, so its pool counts stalled connects and they are left out: a request
    /// whose connection has been opening for longer than [`pool::STALLED_DIAL`] is not in that
    /// queue (a SYN its full backlog dropped waits a second for the kernel's retry; counted, a few
    /// such held the count at the limit while the application idled). A younger connect counts:
    /// left out, every request that arrived while the application was busy was admitted to a
    /// connect of its own, a hundred at once to a Python application with a backlog of five
    /// (bench/admission-plain-app.sh). Admission learns each answer at the same count: at every
    /// request in flight, the stalled connects kept the count above zero, so the idle latency it
    /// measures from was never seen. A capacity a user wrote (or BLOC's, which counts every
    /// request) bounds every request sent to the application, as HAProxy's `maxconn`: its pool
    /// counts no stalls.
    fn at_app(&self, in_flight: u32) -> u32 {
        in_flight.saturating_sub(self.client.stalled_dials())
    }

    /// The load report of a response or probe reply leaving now: the requests the application
    /// holds and the latency estimate at that count.
    fn load(&self) -> ProbeReply {
        let state = self.lock();
        state.probes.reply(state.in_flight)
    }

    /// Whether the response leaving now carries a chip.
    fn chip(&self) -> bool {
        let now = self.now();
        let mut state = self.lock();
        let State { admission, rng, in_flight, .. } = &mut *state;
        admission.grant_chip(now, *in_flight, rng)
    }

    /// The request as the application gets it (`found` by a scan of its headers): no hop-by-hop
    /// headers, no spoofed internal ones, and the believed deadline (clamped), if any, in
    /// milliseconds and, to a gRPC application, as `grpc-timeout`.
    fn app_request(
        &self,
        req: Request<ClientBody>,
        found: http::Found,
        deadline: Option<Duration>,
    ) -> Result<Request<Body>, BoxError> {
        let (mut parts, body) = req.into_parts();
        let path = parts.uri.path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/"));
        // Origin-form: the pool's connections go to the application only (over HTTP/2 it makes
        // the `Host` the `:authority`).
        parts.uri = Uri::from(path);
        parts.version = Version::HTTP_11;
        http::forwardable(&mut parts.headers, found);
        if let Some(left) = deadline {
            parts.headers.insert(DEADLINE_MS, HeaderValue::from(u64::try_from(left.as_millis()).unwrap_or(u64::MAX)));
            if found.grpc {
                parts.headers.insert(crate::grpc::TIMEOUT, crate::grpc::timeout_value(left));
            }
        }
        Ok(Request::from_parts(parts, body.map_err(BoxError::from).boxed()))
    }
}

/// A request the application holds; dropping it (answered or abandoned) releases it.
struct Held<'a> {
    ingress: &'a Ingress,
    /// The requests the application held when this one arrived.
    rif: u32,
    /// Of those, the ones admission counted ([`Ingress::at_app`]): the count its answer is
    /// learnt at.
    at_app: u32,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let now = self.ingress.now();
        let mut state = self.ingress.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        let at_app = self.ingress.at_app(state.in_flight);
        state.admission.observe(now, at_app);
        self.ingress.metrics.ingress_in_flight.set(i64::from(state.in_flight));
    }
}
