//! The egress: the local application's outbound requests, routed to an upstream by Host or path
//! prefix and carried out by a [`Call`] driven in real time.
//!
//! Each request's future owns its `Call` and polls its attempts' response futures itself (a
//! `Cancel` drops one; no task per attempt, so an answer wakes the request directly), and one
//! `sleep_until` serves the call's `WakeAt`s. The upstream's `ClientPolicy` sits behind a mutex,
//! held only for the policy's (fast, sans-IO) steps. Time is the time since the proxy started.
//!
//! Bodies up to `max_replay_body` are buffered so retries and hedges can replay them; larger ones
//! (or of unknown length) are streamed once, and such a request is neither retried nor hedged.
//!
//! HTTP/1 attempts go through each endpoint's own connection [`Pool`]; h2c attempts through
//! hyper-util's client (one multiplexed connection per endpoint).

use crate::config;
use crate::http::{self, Body, BoxError, CHIP, DEADLINE_MS};
use crate::metrics::{seconds, EndpointMetrics, Metrics, UpstreamMetrics};
use crate::pool::{self, Pool};
use crate::trace::{CallTrace, Tracing};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Body as _;
// The client's body with its read timeout, under hyper's name for it.
use crate::body::ClientBody as Incoming;
use hyper::header::HeaderValue;
use hyper::http::uri::{Authority, PathAndQuery, Scheme};
use hyper::{HeaderMap, Method, Request, Response, StatusCode, Uri, Version};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use rand_pcg::Pcg64Mcg;
use std::collections::BTreeSet;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::task::Poll;
use std::time::{Duration, Instant};
use tailguard_model::build;
use tailguard_policy::call::{Action, Call, ClientPolicy, Ctx, Finish};
use tailguard_policy::{EndpointId, Feedback, Outcome, Time};

type HttpClient = Client<HttpConnector, Body>;

/// The outbound side: routes and upstreams.
pub struct Egress {
    /// Swapped whole on reload; each request keeps the routes it started with.
    routes: RwLock<Arc<Routes>>,
    h2c: HttpClient,
    epoch: Instant,
    metrics: Arc<Metrics>,
    tracing: Option<Arc<Tracing>>,
    /// The proxy's seed; upstream n draws from its stream n + 1 ([`crate::rng`]).
    seed: u64,
}

/// The upstreams of one version of the file.
struct Routes {
    upstreams: Vec<Arc<Upstream>>,
    max_replay_body: usize,
}

/// One called service and the caller's policy state towards it.
struct Upstream {
    name: String,
    config: config::Upstream,
    metrics: UpstreamMetrics,
    /// Per endpoint, in the order of `config.endpoints`.
    endpoints: Vec<Endpoint>,
    core: Mutex<Core>,
}

/// What a request needs of an endpoint, prepared once: its URI authority, its HTTP/1
/// connections and its metrics.
struct Endpoint {
    addr: SocketAddr,
    /// `None` if the address is no URI authority (then no h2c attempt can be sent there).
    authority: Option<Authority>,
    /// Kept across reloads for as long as some upstream lists the address.
    pool: Arc<Pool>,
    metrics: EndpointMetrics,
}

/// What a policy step needs: the policy and the random source.
struct Core {
    policy: ClientPolicy,
    rng: Pcg64Mcg,
}

/// The request as every attempt replays it; shared with the attempts, which may rebuild it.
struct Template {
    method: Method,
    path: PathAndQuery,
    headers: HeaderMap,
    /// The body when buffered (replayable); `None` when it is streamed once.
    body: Option<Bytes>,
}

/// An attempt's response, when it comes.
type ResponseFuture = Pin<Box<dyn Future<Output = Result<Response<Body>, AttemptError>> + Send>>;

/// An attempt in flight: its response, when it comes, is fed back to the call.
struct Attempt {
    attempt: u32,
    endpoint: EndpointId,
    sent: Time,
    /// The timeout policy's value for it, if the upstream has one (for closeness).
    policy_timeout: Option<Duration>,
    response: ResponseFuture,
}

/// How an attempt ended.
struct AttemptEnd {
    attempt: u32,
    endpoint: EndpointId,
    sent: Time,
    policy_timeout: Option<Duration>,
    result: Result<Response<Body>, AttemptError>,
}

/// Why an attempt got no response.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AttemptError {
    #[error(transparent)]
    Http1(#[from] pool::Error),
    #[error(transparent)]
    H2c(#[from] hyper_util::client::legacy::Error),
}

impl AttemptError {
    /// Whether no connection could be opened (nothing reached the endpoint).
    pub(crate) fn is_connect(&self) -> bool {
        match self {
            AttemptError::Http1(e) => matches!(e, pool::Error::Connect(..)),
            AttemptError::H2c(e) => e.is_connect(),
        }
    }
}

impl Egress {
    /// The egress of `config`; `epoch` is the proxy's time zero, `seed` its seed.
    pub fn new(config: &config::Egress, epoch: Instant, metrics: Arc<Metrics>, seed: u64) -> Egress {
        let routes = RwLock::new(Arc::new(Routes::new(config, None, &metrics, seed)));
        let h2c = Client::builder(TokioExecutor::new()).http2_only(true).build_http();
        Egress { routes, h2c, epoch, metrics, tracing: None, seed }
    }

    /// Makes spans per call and attempt when `tracing` is set.
    pub fn traced(mut self, tracing: Option<Arc<Tracing>>) -> Egress {
        self.tracing = tracing;
        self
    }

    /// Swaps in the upstreams of `config` for new requests; requests in flight finish with the
    /// old ones. An upstream whose name and settings are unchanged keeps its policy state.
    pub fn reload(&self, config: &config::Egress) {
        let mut routes = self.routes.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        *routes = Arc::new(Routes::new(config, Some(&routes), &self.metrics, self.seed));
    }

    fn routes(&self) -> Arc<Routes> {
        self.routes.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Answers one request from the application.
    pub async fn handle(&self, req: Request<Incoming>) -> Response<Body> {
        let routes = self.routes();
        let Some(upstream) = routes.route(&req) else {
            return http::text(StatusCode::NOT_FOUND, "tailguard: no upstream matches this request");
        };
        let response = self.forward(&routes, upstream, req).await;
        upstream.metrics.responses.count(response.status());
        response
    }

    /// Sends `req` to `upstream` under its policy.
    async fn forward(&self, routes: &Routes, upstream: &Arc<Upstream>, req: Request<Incoming>) -> Response<Body> {
        let found = http::scan(req.headers());
        // The deadline header is internal: without any, no lookup.
        let deadline = match found.internal.then(|| http::deadline_ms(req.headers())).transpose() {
            Ok(Some(Some(0))) => return http::deadline_spent(),
            Ok(ms) => ms.flatten().map(|ms| self.now().saturating_add(Duration::from_millis(ms))),
            Err(e) => return http::text(StatusCode::BAD_REQUEST, &e),
        };
        let trace = self.tracing.as_ref().map(|t| t.call(req.headers(), &upstream.name));
        let fault = req.body().fault();
        let (template, streamed) = match template(req, found, routes.max_replay_body).await {
            Ok(t) => t,
            Err(e) => {
                let cannot = || http::text(StatusCode::BAD_REQUEST, &format!("tailguard: cannot read the body: {e}"));
                return fault.get().map_or_else(cannot, |fault| fault.response());
            }
        };
        upstream.metrics.requests.inc();
        let mut driver = Driver::new(self, upstream.clone(), Arc::new(template), streamed);
        driver.trace = trace;
        let (response, answer, latency) = driver.run(deadline).await;
        if let Some(fault) = fault.get() {
            // The client's body failed, not the upstream: no failure counted against it.
            return fault.response();
        }
        let m = &upstream.metrics;
        let latency = seconds(latency);
        m.request_latency.observe(latency);
        match answer {
            Some(answer) => {
                m.answered_seconds.inc_by(latency);
                m.answer_seconds.inc_by(seconds(answer));
            }
            None => {
                m.failed.inc();
            }
        }
        response
    }

    fn now(&self) -> Time {
        self.epoch.elapsed()
    }
}

impl Routes {
    fn new(config: &config::Egress, old: Option<&Routes>, metrics: &Metrics, seed: u64) -> Routes {
        let upstreams = config
            .upstreams
            .iter()
            .enumerate()
            .map(|(i, (name, u))| {
                let same = old.and_then(|old| old.upstreams.iter().find(|o| o.name == *name && o.config == *u));
                same.cloned()
                    .unwrap_or_else(|| Arc::new(Upstream::new(name, u, crate::rng(seed, i as u64 + 1), metrics, old)))
            })
            .collect();
        Routes { upstreams, max_replay_body: config.max_replay_body }
    }

    /// The upstream for `req`: a Host match first, else the longest matching path prefix.
    fn route(&self, req: &Request<Incoming>) -> Option<&Arc<Upstream>> {
        let host = req.headers().get(hyper::header::HOST).and_then(|h| h.to_str().ok()).or(req.uri().host());
        let host = host.map(|h| h.rsplit_once(':').map_or(h, |(name, _)| name));
        let by_host = self
            .upstreams
            .iter()
            .find(|u| matches!(&u.config.route, config::Route::Host(h) if Some(h.as_str()) == host));
        by_host.or_else(|| {
            let path = req.uri().path();
            self.upstreams
                .iter()
                .filter_map(|u| match &u.config.route {
                    config::Route::PathPrefix(p) if path.starts_with(p.as_str()) => Some((p.len(), u)),
                    _ => None,
                })
                .max_by_key(|(len, _)| *len)
                .map(|(_, u)| u)
        })
    }
}

/// Splits `req` into what each attempt replays, buffering a body up to `max_replay_body`; a
/// larger body (or one of unknown length) comes back apart, to be streamed once.
async fn template(
    req: Request<Incoming>,
    found: http::Found,
    max_replay_body: usize,
) -> Result<(Template, Option<Incoming>), BoxError> {
    let (parts, body) = req.into_parts();
    let mut headers = parts.headers;
    if found.hop_by_hop {
        // `te: trailers` is the one hop-by-hop header HTTP/2 keeps: gRPC servers expect it.
        let te_trailers =
            headers.get(hyper::header::TE).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
        http::strip_hop_by_hop(&mut headers);
        if te_trailers {
            headers.insert(hyper::header::TE, HeaderValue::from_static("trailers"));
        }
    }
    if found.internal {
        http::strip_internal(&mut headers, &[]);
    }
    let small = body.size_hint().upper().is_some_and(|n| n <= max_replay_body as u64);
    let (body, streamed) = if body.is_end_stream() {
        (Some(Bytes::new()), None)
    } else if small {
        (Some(Limited::new(body, max_replay_body).collect().await?.to_bytes()), None)
    } else {
        (None, Some(body))
    };
    let path = parts.uri.path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/"));
    Ok((Template { method: parts.method, path, headers, body }, streamed))
}

impl Upstream {
    /// The upstream `name`, drawing from `rng`; its endpoints keep their connection pools from
    /// `old` routes.
    fn new(name: &str, config: &config::Upstream, rng: Pcg64Mcg, metrics: &Metrics, old: Option<&Routes>) -> Upstream {
        let policy = build::client_policy(&config.policy, config.endpoints.len());
        let old_pool = |addr: &SocketAddr| {
            let mut endpoints = old.into_iter().flat_map(|r| r.upstreams.iter()).flat_map(|u| u.endpoints.iter());
            endpoints.find(|e| e.addr == *addr).map(|e| e.pool.clone())
        };
        let endpoints = config
            .endpoints
            .iter()
            .map(|addr| Endpoint {
                addr: *addr,
                authority: Authority::try_from(addr.to_string()).ok(),
                pool: old_pool(addr).unwrap_or_else(|| Arc::new(Pool::new(*addr))),
                metrics: metrics.endpoint(name, &addr.to_string()),
            })
            .collect();
        Upstream {
            name: name.to_string(),
            config: config.clone(),
            metrics: metrics.upstream(name),
            endpoints,
            core: Mutex::new(Core { policy, rng }),
        }
    }
}

/// Whether a method may be sent more than once without changing its effect (RFC 9110 §9.2.2).
fn idempotent(method: &Method) -> bool {
    [Method::GET, Method::HEAD, Method::OPTIONS, Method::PUT, Method::DELETE].contains(method)
}

/// The outcome of an answered attempt: 429 is a refusal, 5xx an error, anything else an answer.
pub(crate) fn outcome(status: StatusCode) -> Outcome {
    if status == StatusCode::TOO_MANY_REQUESTS {
        Outcome::Rejected
    } else if status.is_server_error() {
        Outcome::Error
    } else {
        Outcome::Success
    }
}

/// One request in flight: its call, its attempts and its pending wakes.
struct Driver<'a> {
    egress: &'a Egress,
    upstream: Arc<Upstream>,
    template: Arc<Template>,
    /// The body when streamed once (taken by the first attempt).
    streamed: Option<Incoming>,
    /// Whether an attempt's request may be rebuilt and sent again (idempotent, buffered body).
    replayable: bool,
    out: Vec<Action>,
    /// When the last policy step ran: the time its actions are carried out at (one clock read
    /// per step, none per action).
    now: Time,
    wakes: BTreeSet<Time>,
    attempts: Vec<Attempt>,
    /// Sends the call asked for that the driver could not carry out (a streamed body, spent).
    unsendable: Vec<u32>,
    /// The answer that won, and its attempt's latency.
    winner: Option<(Response<Body>, Duration)>,
    last_error: Option<Response<Body>>,
    /// The call's spans, when tracing.
    trace: Option<CallTrace>,
}

impl<'a> Driver<'a> {
    fn new(
        egress: &'a Egress,
        upstream: Arc<Upstream>,
        template: Arc<Template>,
        streamed: Option<Incoming>,
    ) -> Driver<'a> {
        let replayable = template.body.is_some() && idempotent(&template.method);
        Driver {
            egress,
            upstream,
            template,
            streamed,
            replayable,
            out: Vec::new(),
            now: Time::ZERO,
            wakes: BTreeSet::new(),
            attempts: Vec::new(),
            unsendable: Vec::new(),
            winner: None,
            last_error: None,
            trace: None,
        }
    }

    /// Runs one policy step on the call with the upstream's policy, at the current time.
    fn step<R>(&mut self, f: impl FnOnce(&mut Ctx<'_>) -> R) -> R {
        self.step_at(self.egress.now(), f)
    }

    /// Runs one policy step at `now`, a clock reading just taken.
    fn step_at<R>(&mut self, now: Time, f: impl FnOnce(&mut Ctx<'_>) -> R) -> R {
        self.now = now;
        let mut core = self.upstream.core.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let Core { policy, rng } = &mut *core;
        let mut ctx = Ctx { now, policy, rng, true_loads: None, out: &mut self.out };
        f(&mut ctx)
    }

    /// The response, the answering attempt's latency when the call succeeded, and the call's
    /// latency (from its first policy step to its last).
    async fn run(mut self, deadline: Option<Time>) -> (Response<Body>, Option<Duration>, Duration) {
        let replayable = self.replayable;
        let mut call = self.step(|ctx| Call::start(ctx, replayable, deadline));
        let started = self.now;
        loop {
            if let Some(finish) = self.apply(&call) {
                let answer = self.winner.as_ref().filter(|_| finish.outcome == Outcome::Success).map(|w| w.1);
                let latency = self.now.saturating_sub(started);
                let trace = self.trace.take();
                let response = self.respond(finish);
                if let Some(trace) = trace {
                    trace.finish(finish.outcome, finish.attempts, response.status());
                }
                return (response, answer, latency);
            }
            for attempt in std::mem::take(&mut self.unsendable) {
                if let Some(trace) = &mut self.trace {
                    trace.on_cancel(attempt, Outcome::Cancelled);
                }
                // Reported as cancelled: no retry follows, and the balancer's count is released.
                let feedback = Feedback::new(Outcome::Cancelled, Duration::ZERO);
                self.step(|ctx| call.on_attempt_end(ctx, attempt, feedback));
            }
            if !self.out.is_empty() {
                continue;
            }
            let wake = self.wakes.first().map(|t| tokio::time::Instant::from_std(self.egress.epoch + *t));
            tokio::select! {
                end = next_end(&mut self.attempts), if !self.attempts.is_empty() => {
                    self.on_end(&mut call, end);
                }
                () = sleep_until(wake), if wake.is_some() => {
                    let now = self.egress.now();
                    self.wakes.retain(|t| *t > now);
                    self.step_at(now, |ctx| call.on_wake(ctx));
                }
                else => {
                    let latency = self.egress.now().saturating_sub(started);
                    return (http::text(StatusCode::BAD_GATEWAY, "tailguard: the call stalled"), None, latency);
                }
            }
        }
    }

    /// Carries out the call's pending actions; the finish, if one came.
    fn apply(&mut self, call: &Call) -> Option<Finish> {
        // Drained, not dropped: the next policy step reuses its room.
        let mut out = std::mem::take(&mut self.out);
        let mut finished = None;
        for action in out.drain(..) {
            match action {
                Action::Send { attempt, endpoint, policy_timeout, .. } => {
                    if let Some(trace) = &mut self.trace {
                        let addr = self.upstream.config.endpoints.get(endpoint);
                        trace.on_send(attempt, addr, policy_timeout, !self.attempts.is_empty());
                    }
                    self.count_send(attempt, endpoint, policy_timeout);
                    self.send(call, attempt, endpoint, policy_timeout);
                }
                Action::Cancel { attempt, endpoint, reason } => {
                    if let Some(trace) = &mut self.trace {
                        trace.on_cancel(attempt, reason);
                    }
                    // Dropping the response future abandons the exchange.
                    self.attempts.retain(|a| a.attempt != attempt);
                    if reason == Outcome::TimedOut {
                        self.metrics_endpoint(endpoint, |m| m.timeouts.inc());
                    }
                }
                Action::Overdue { attempt, endpoint } => {
                    if let Some(trace) = &self.trace {
                        trace.on_overdue(attempt);
                    }
                    self.metrics_endpoint(endpoint, |m| m.timeouts.inc());
                }
                Action::WakeAt(t) => {
                    self.wakes.insert(t);
                }
                Action::Finish(finish) => {
                    finished = Some(finish);
                    break;
                }
            }
        }
        self.out = out;
        finished
    }

    fn count_send(&self, attempt: u32, endpoint: EndpointId, policy_timeout: Option<Duration>) {
        let m = &self.upstream.metrics;
        if attempt > 0 {
            // Another attempt still in flight means this one is speculative.
            if self.attempts.is_empty() {
                m.retries.inc();
            } else {
                m.hedges.inc();
            }
        }
        m.timeout_seconds.set(policy_timeout.map_or(0.0, seconds));
        self.metrics_endpoint(endpoint, |m| m.attempts.inc());
    }

    fn metrics_endpoint<R>(&self, endpoint: EndpointId, f: impl FnOnce(&EndpointMetrics) -> R) {
        if let Some(e) = self.upstream.endpoints.get(endpoint) {
            f(&e.metrics);
        }
    }

    /// Starts attempt `attempt` to `endpoint`.
    fn send(&mut self, call: &Call, attempt: u32, endpoint: EndpointId, policy_timeout: Option<Duration>) {
        let body = match (&self.template.body, self.streamed.take()) {
            (Some(bytes), _) => http::bytes(bytes),
            (None, Some(body)) => body.map_err(BoxError::from).boxed(),
            (None, None) => {
                self.unsendable.push(attempt);
                return;
            }
        };
        let Some(target) = self.upstream.endpoints.get(endpoint) else {
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
        let response: ResponseFuture = match self.upstream.config.protocol {
            config::Protocol::Http1 => {
                let request = http1_request(&self.template, body, remaining, &traced);
                let rebuild = self.replayable.then(|| {
                    let template = self.template.clone();
                    move || {
                        let body = template.body.as_ref().map_or_else(http::empty, http::bytes);
                        http1_request(&template, body, remaining, &traced)
                    }
                });
                let pool = target.pool.clone();
                Box::pin(pool.send(request, rebuild))
            }
            config::Protocol::H2c => {
                let Some(request) = target
                    .authority
                    .clone()
                    .and_then(|a| h2c_request(&self.template, a, body, remaining, &traced).ok())
                else {
                    self.unsendable.push(attempt);
                    return;
                };
                let response = self.egress.h2c.request(request);
                Box::pin(async move { Ok(response.await?.map(|b| b.map_err(BoxError::from).boxed())) })
            }
        };
        self.attempts.push(Attempt { attempt, endpoint, sent: now, policy_timeout, response });
    }

    /// Feeds an attempt's end back to the call, keeping the response it may return.
    fn on_end(&mut self, call: &mut Call, end: AttemptEnd) {
        if let Some(trace) = &mut self.trace {
            trace.on_end(end.attempt, &end.result);
        }
        if !call.is_waiting_for(end.attempt) {
            return;
        }
        let now = self.egress.now();
        let rtt = now.saturating_sub(end.sent);
        self.metrics_endpoint(end.endpoint, |m| m.attempt_latency.observe(seconds(rtt)));
        let feedback = match end.result {
            Ok(mut response) => {
                let found = http::scan(response.headers());
                let chip = found.internal && http::has_chip(response.headers());
                clean(&mut response, found);
                let feedback = Feedback::new(outcome(response.status()), rtt).with_chip(chip);
                match feedback.outcome {
                    Outcome::Success => {
                        self.winner = Some((response, rtt));
                        // An answer past its timeout (hedge on timeout) counted as a timeout.
                        if let Some(t) = end.policy_timeout.filter(|t| rtt <= *t) {
                            let rtt = rtt.as_secs_f64().max(1e-9);
                            self.upstream.metrics.timeout_headroom.observe((t.as_secs_f64() - rtt) / rtt);
                        }
                    }
                    Outcome::Rejected => self.metrics_endpoint(end.endpoint, |m| m.rejected.inc()),
                    _ => self.last_error = Some(response),
                }
                feedback
            }
            Err(e) if e.is_connect() => Feedback::new(Outcome::Unavailable, rtt),
            Err(e) if crate::body::client_fault(&e).is_some() => Feedback::new(Outcome::Cancelled, rtt),
            Err(_) => Feedback::new(Outcome::Error, rtt),
        };
        self.step_at(now, |ctx| call.on_attempt_end(ctx, end.attempt, feedback));
    }

    /// The response to the application once the call finished.
    fn respond(self, finish: Finish) -> Response<Body> {
        let upstream_response = match finish.outcome {
            Outcome::Success => self.winner.map(|(response, _)| response),
            Outcome::Error => self.last_error,
            _ => None,
        };
        if let Some(response) = upstream_response {
            return response;
        }
        match finish.outcome {
            Outcome::TimedOut => http::text(StatusCode::GATEWAY_TIMEOUT, "tailguard: the request timed out"),
            Outcome::Rejected => {
                http::text(StatusCode::SERVICE_UNAVAILABLE, "tailguard: no endpoint would take the request")
            }
            _ => http::text(StatusCode::BAD_GATEWAY, "tailguard: the upstream failed"),
        }
    }
}

/// An HTTP/1 attempt's request (origin-form URI; the pool sets `Host` if the application sent
/// none) with the remaining deadline for the next hop and the attempt's trace context.
fn http1_request(t: &Template, body: Body, remaining: Option<Duration>, traced: &HeaderMap) -> Request<Body> {
    let mut request = attempt_request(t, body, remaining, traced);
    *request.uri_mut() = Uri::from(t.path.clone());
    request
}

/// An h2c attempt's request (absolute URI to `authority`).
fn h2c_request(
    t: &Template,
    authority: Authority,
    body: Body,
    remaining: Option<Duration>,
    traced: &HeaderMap,
) -> Result<Request<Body>, BoxError> {
    let uri = Uri::builder().scheme(Scheme::HTTP).authority(authority).path_and_query(t.path.clone()).build()?;
    let mut request = attempt_request(t, body, remaining, traced);
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_2;
    Ok(request)
}

/// Room for an attempt's headers: the application's, ours, and then (hyper reuses the map) the
/// response's; a typical response has about ten.
const ATTEMPT_HEADERS: usize = 12;

/// The template's method and headers on `body`, plus the deadline left and the trace context.
fn attempt_request(t: &Template, body: Body, remaining: Option<Duration>, traced: &HeaderMap) -> Request<Body> {
    // Set in place: each step of `Request::builder()` moves the whole request head.
    let mut request = Request::new(body);
    *request.method_mut() = t.method.clone();
    let headers = request.headers_mut();
    // Not `t.headers.clone()`: a cloned map's entries have no spare room, and hyper reuses this
    // map for the response's headers, so every request paid for regrowing it twice.
    headers.reserve(ATTEMPT_HEADERS.max(t.headers.len() + 2));
    for (name, value) in &t.headers {
        headers.append(name, value.clone());
    }
    if let Some(r) = remaining {
        headers.insert(DEADLINE_MS, HeaderValue::from(u64::try_from(r.as_millis()).unwrap_or(u64::MAX)));
    }
    for (name, value) in traced {
        headers.insert(name, value.clone());
    }
    request
}

/// Makes an upstream's response what the application gets: no internal or hop-by-hop headers
/// (`found` by a scan of its headers).
fn clean(response: &mut Response<Body>, found: http::Found) {
    let headers = response.headers_mut();
    if found.hop_by_hop {
        http::strip_hop_by_hop(headers);
    }
    if found.internal {
        http::strip_internal(headers, &[]);
    }
    debug_assert!(!headers.contains_key(CHIP));
}

/// The first of `attempts` to end, removed from them.
async fn next_end(attempts: &mut Vec<Attempt>) -> AttemptEnd {
    std::future::poll_fn(|cx| {
        for i in 0..attempts.len() {
            if let Poll::Ready(result) = Pin::new(&mut attempts[i].response).poll(cx) {
                let Attempt { attempt, endpoint, sent, policy_timeout, .. } = attempts.swap_remove(i);
                return Poll::Ready(AttemptEnd { attempt, endpoint, sent, policy_timeout, result });
            }
        }
        Poll::Pending
    })
    .await
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_outcomes() {
        assert_eq!(outcome(StatusCode::OK), Outcome::Success);
        assert_eq!(outcome(StatusCode::NOT_FOUND), Outcome::Success);
        assert_eq!(outcome(StatusCode::TOO_MANY_REQUESTS), Outcome::Rejected);
        assert_eq!(outcome(StatusCode::SERVICE_UNAVAILABLE), Outcome::Error);
    }

    #[test]
    fn only_idempotent_methods_are_replayed() {
        assert!(idempotent(&Method::GET) && idempotent(&Method::PUT) && idempotent(&Method::DELETE));
        assert!(!idempotent(&Method::POST) && !idempotent(&Method::PATCH));
    }
}
