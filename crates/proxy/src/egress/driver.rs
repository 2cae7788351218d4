//! The request driver: one request in flight, carried out by the policy core's [`Call`] in real
//! time. Each request's future owns its `Call` and polls its attempts' response futures itself (a
//! `Cancel` drops one; no task per attempt, so an answer wakes the request directly), and one
//! timer per request serves the call's `WakeAt`s: the call tracks every attempt's timeout, its
//! hedge and retry times and its deadline, and asks only for its earliest, so the timer is set
//! again only when that changes. The upstream's `ClientPolicy` sits behind a mutex, held only for
//! the policy's (fast, sans-IO) steps. Time is the time since the proxy started. What a request
//! keeps (its attempts, probes, actions) has room inline for the usual counts.

use super::body::{idempotent, Template};
use super::protocol::{clean, AttemptError, ProbeFuture, ResponseFuture};
use super::routes::{Core, Upstream};
use super::Egress;
use crate::body::ClientBody;
use crate::http::{self, Body};
use crate::metrics::seconds;
use crate::trace::CallTrace;
use hyper::{Response, StatusCode};
use smallvec::SmallVec;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tailguard_policy::call::{Action, Call, Ctx, Finish};
use tailguard_policy::duration::Dur;
use tailguard_policy::{EndpointId, Feedback, Outcome, Time};

/// The outcome of an answered attempt: 429 is a refusal (by the endpoint's sidecar if
/// `refused_there`, else one passed on from further down), 5xx an error, anything else an answer.
pub(crate) fn outcome(status: StatusCode, refused_there: bool) -> Outcome {
    if status == StatusCode::TOO_MANY_REQUESTS {
        if refused_there {
            Outcome::Rejected
        } else {
            Outcome::Overloaded
        }
    } else if status.is_server_error() {
        Outcome::Error
    } else {
        Outcome::Success
    }
}

/// An attempt in flight: its response, when it comes, is fed back to the call.
pub(super) struct Attempt {
    pub(super) attempt: u32,
    pub(super) endpoint: EndpointId,
    pub(super) sent: Time,
    /// The timeout policy's value for it, if the upstream has one (for closeness).
    pub(super) policy_timeout: Option<Duration>,
    pub(super) response: ResponseFuture,
}

/// How an attempt ended.
pub(super) struct AttemptEnd {
    pub(super) attempt: u32,
    pub(super) endpoint: EndpointId,
    pub(super) sent: Time,
    pub(super) policy_timeout: Option<Duration>,
    pub(super) result: Result<Response<Body>, AttemptError>,
}

/// One request in flight: its call, its attempts and its pending wakes.
pub(super) struct Driver<'a> {
    pub(super) egress: &'a Egress,
    pub(super) upstream: Arc<Upstream>,
    pub(super) template: Arc<Template>,
    /// The body when streamed once (taken by the first attempt).
    pub(super) streamed: Option<ClientBody>,
    /// Whether an attempt's request may be rebuilt and sent again (idempotent, buffered body).
    pub(super) replayable: bool,
    pub(super) out: Vec<Action>,
    /// When the last policy step ran: the time its actions are carried out at (one clock read
    /// per step, none per action).
    pub(super) now: Time,
    /// The earliest wake the call asked for and has not had. The call asks again for its next
    /// one after each wake (a later wake only supersedes an earlier one), so one is enough.
    pub(super) wake: Option<Time>,
    pub(super) attempts: SmallVec<[Attempt; 2]>,
    /// The probes the call's next pick waits for (Prequal with a stale pool).
    pub(super) probes: SmallVec<[ProbeFuture; 3]>,
    /// The attempts sent as hedges (for `hedges_won`).
    pub(super) hedged: SmallVec<[u32; 2]>,
    /// Sends the call asked for that the driver could not carry out (a streamed body, spent).
    pub(super) unsendable: SmallVec<[u32; 2]>,
    /// The answer that won, and its attempt's latency.
    pub(super) winner: Option<(Response<Body>, Duration)>,
    pub(super) last_error: Option<Response<Body>>,
    /// The connection cap of the last endpoint that refused an attempt locally, if any did.
    pub(super) overflowed: Option<usize>,
    /// Whether an endpoint's sidecar refused an attempt (a 429 of its own admission).
    pub(super) refused: bool,
    /// The call's spans, when tracing.
    pub(super) trace: Option<CallTrace>,
}

impl<'a> Driver<'a> {
    pub(super) fn new(
        egress: &'a Egress,
        upstream: Arc<Upstream>,
        template: Arc<Template>,
        streamed: Option<ClientBody>,
    ) -> Driver<'a> {
        let replayable =
            template.body.is_some() && !template.upgrade && idempotent(&template.method, &template.headers);
        Driver {
            egress,
            upstream,
            template,
            streamed,
            replayable,
            // Room for a step's actions: a send, its probes, a wake and a finish.
            out: Vec::with_capacity(8),
            now: Time::ZERO,
            wake: None,
            attempts: SmallVec::new(),
            probes: SmallVec::new(),
            hedged: SmallVec::new(),
            unsendable: SmallVec::new(),
            winner: None,
            last_error: None,
            overflowed: None,
            refused: false,
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
        let mut core = self.upstream.core();
        let Core { policy, rng, .. } = &mut *core;
        let mut ctx = Ctx { now, policy, rng, true_loads: None, out: &mut self.out };
        f(&mut ctx)
    }

    /// Starts the call in the request's class (the upstream's [`Classifier`](super::classes)),
    /// with the caller's `deadline`: the first policy step. Also returns whether the budget
    /// allows a retry, the endpoints ejected and whether the class's hedge gate is open, for the
    /// upstream's gauges.
    fn start(&mut self, deadline: Option<Time>) -> (Call, bool, usize, bool) {
        let now = self.egress.now();
        self.now = now;
        let mut core = self.upstream.core();
        let Core { policy, rng, classes, .. } = &mut *core;
        let template = &*self.template;
        let class = classes.classify(&template.method, template.path.path(), &template.headers);
        let mut ctx = Ctx { now, policy, rng, true_loads: None, out: &mut self.out };
        let ejected = ctx.policy.outlier.as_mut().map_or(0, |o| o.ejected_count(now));
        let hedge = &ctx.policy.classes.get(class).hedge;
        let gate = hedge.as_ref().is_some_and(|h| h.gate().unwrap_or(true));
        let call = Call::start_for(&mut ctx, class, self.replayable, deadline);
        (call, ctx.policy.retry.budget_allows(now), ejected, gate)
    }

    /// The response, the answering attempt's latency when the call succeeded, and the call's
    /// latency (from its first policy step to its last).
    pub(super) async fn run(mut self, deadline: Option<Time>) -> (Response<Body>, Option<Duration>, Duration) {
        let (mut call, allows, ejected, gate) = self.start(deadline);
        self.upstream.metrics.budget_exhausted.set(i64::from(!allows));
        self.upstream.metrics.hedge_gate.set(i64::from(gate));
        self.upstream.metrics.ejected.set(ejected as i64);
        let started = self.now;
        // The request's one timer, set to the call's earliest wake (registered with the runtime's
        // timer wheel once polled; reset only when the wake changes).
        let timer = tokio::time::sleep_until(tokio::time::Instant::from_std(self.egress.epoch));
        let mut timer = std::pin::pin!(timer);
        let mut timer_at = None;
        loop {
            if let Some(finish) = self.apply(&call) {
                let answer = self.winner.as_ref().filter(|_| finish.outcome == Outcome::Success).map(|w| w.1);
                let latency = self.now.saturating_sub(started);
                let trace = self.trace.take();
                let past_deadline = call.deadline().is_some_and(|d| d <= self.now);
                let response = self.respond(finish, past_deadline);
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
            if self.wake != timer_at {
                if let Some(t) = self.wake {
                    timer.as_mut().reset(tokio::time::Instant::from_std(self.egress.epoch + t));
                }
                timer_at = self.wake;
            }
            tokio::select! {
                end = next_end(&mut self.attempts), if !self.attempts.is_empty() => {
                    self.on_end(&mut call, end);
                }
                () = next_probe(&mut self.probes), if !self.probes.is_empty() => {
                    self.step(|ctx| call.on_probe_done(ctx));
                }
                () = timer.as_mut(), if self.wake.is_some() => {
                    (self.wake, timer_at) = (None, None);
                    self.step(|ctx| call.on_wake(ctx));
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
                Action::Send { attempt, endpoint, policy_timeout, marks, .. } => {
                    if let Some(trace) = &mut self.trace {
                        let addr = self.upstream.endpoint(endpoint).map(|e| e.addr);
                        trace.on_send(attempt, addr.as_ref(), policy_timeout, !self.attempts.is_empty());
                    }
                    self.count_send(attempt, endpoint, policy_timeout);
                    self.send(call, attempt, endpoint, policy_timeout, marks);
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
                Action::Eject(ejection) => {
                    self.upstream.metrics.ejections.inc();
                    let addr =
                        self.upstream.endpoint(ejection.endpoint).map_or("?".to_string(), |e| e.addr.to_string());
                    eprintln!(
                        "tailguard proxy: upstream {}: ejected {addr} for {} (ejection {} in a row, {})",
                        self.upstream.name,
                        Dur(ejection.duration),
                        ejection.nth,
                        ejection.reason.as_str()
                    );
                }
                Action::Probe { endpoint, awaited } => match self.probe(endpoint) {
                    Some(probe) => {
                        self.upstream.metrics.probes.inc();
                        if awaited {
                            self.probes.push(probe);
                        } else {
                            drop(tokio::spawn(probe));
                        }
                    }
                    // Nothing to wait for: done at once.
                    None if awaited => self.probes.push(Box::pin(std::future::ready(()))),
                    None => {}
                },
                Action::WakeAt(t) => {
                    self.wake = Some(self.wake.map_or(t, |w| w.min(t)));
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
                let chip = found.internal && self.upstream.reads_chips && http::has_chip(response.headers());
                let load = crate::probe::report(response.headers(), found.internal && self.upstream.reads_load);
                clean(&mut response, found);
                // A gRPC error sent trailers-only is judged by its status, as its HTTP kin is.
                let status = match self.template.grpc {
                    true => crate::grpc::http_status(response.headers()).unwrap_or(response.status()),
                    false => response.status(),
                };
                let feedback = Feedback::new(outcome(status, found.refused), rtt).with_chip(chip).with_load(load);
                match feedback.outcome {
                    Outcome::Success => {
                        self.count_win(end.attempt);
                        self.winner = Some((response, rtt));
                        // An answer past its timeout (hedge on timeout) counted as a timeout.
                        if let Some(t) = end.policy_timeout.filter(|t| rtt <= *t) {
                            let rtt = rtt.as_secs_f64().max(1e-9);
                            self.upstream.metrics.timeout_headroom.observe((t.as_secs_f64() - rtt) / rtt);
                        }
                    }
                    Outcome::Rejected => {
                        self.refused = true;
                        self.metrics_endpoint(end.endpoint, |m| m.rejected.inc());
                    }
                    _ => self.last_error = Some(response),
                }
                feedback
            }
            Err(e) if e.is_connect() => Feedback::new(Outcome::Unavailable, rtt),
            // The endpoint's connection cap, reached here: a refusal, as a 429 is (retried
            // elsewhere at once, never a failure that ejects the endpoint).
            Err(e) if e.is_overflow() => {
                self.metrics_endpoint(end.endpoint, |m| m.overflow.inc());
                self.overflowed = Some(self.upstream.config.max_connections_per_endpoint);
                Feedback::new(Outcome::Rejected, rtt)
            }
            Err(e) if crate::body::client_fault(&e).is_some() => Feedback::new(Outcome::Cancelled, rtt),
            Err(_) => Feedback::new(Outcome::Error, rtt),
        };
        self.step_at(now, |ctx| call.on_attempt_end(ctx, end.attempt, feedback));
    }

    /// The response to the application once the call finished (`past_deadline`: its deadline had
    /// passed then).
    fn respond(self, finish: Finish, past_deadline: bool) -> Response<Body> {
        let upstream_response = match finish.outcome {
            Outcome::Success => self.winner.map(|(response, _)| response),
            // A refusal from further down is passed on as it came.
            Outcome::Error | Outcome::Overloaded => self.last_error,
            _ => None,
        };
        if let Some(response) = upstream_response {
            return response;
        }
        match finish.outcome {
            Outcome::TimedOut if past_deadline => http::text(StatusCode::GATEWAY_TIMEOUT, "tailguard: the deadline passed"),
            Outcome::TimedOut => http::text(StatusCode::GATEWAY_TIMEOUT, "tailguard: the request timed out"),
            Outcome::Rejected => match self.overflowed {
                Some(max) => http::text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!("tailguard: no endpoint would take the request: connections to the upstream at their limit (max_connections_per_endpoint {max})"),
                ),
                // The endpoints' sidecars refused it: the service is over capacity, a refusal the
                // application passes on (so its callers do not retry it).
                None if self.refused => {
                    http::text(StatusCode::TOO_MANY_REQUESTS, "tailguard: every endpoint refused the request (over capacity)")
                }
                None => http::text(StatusCode::SERVICE_UNAVAILABLE, "tailguard: no endpoint would take the request"),
            },
            Outcome::Unavailable => http::text(StatusCode::BAD_GATEWAY, "tailguard: no endpoint could be reached"),
            _ => http::text(StatusCode::BAD_GATEWAY, "tailguard: the upstream failed"),
        }
    }
}

/// The first of `attempts` to end, removed from them.
async fn next_end(attempts: &mut SmallVec<[Attempt; 2]>) -> AttemptEnd {
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

/// Waits for the first of `probes` to end, and removes it.
async fn next_probe(probes: &mut SmallVec<[ProbeFuture; 3]>) {
    std::future::poll_fn(|cx| match probes.iter_mut().position(|p| p.as_mut().poll(cx).is_ready()) {
        Some(i) => {
            drop(probes.swap_remove(i));
            Poll::Ready(())
        }
        None => Poll::Pending,
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_outcomes() {
        assert_eq!(outcome(StatusCode::OK, false), Outcome::Success);
        assert_eq!(outcome(StatusCode::NOT_FOUND, false), Outcome::Success);
        assert_eq!(outcome(StatusCode::TOO_MANY_REQUESTS, true), Outcome::Rejected);
        assert_eq!(outcome(StatusCode::TOO_MANY_REQUESTS, false), Outcome::Overloaded);
        assert_eq!(outcome(StatusCode::SERVICE_UNAVAILABLE, false), Outcome::Error);
    }
}
