//! One request's life as its caller sees it: the first attempt, hedged attempts, retries, attempt
//! timeouts and the request's deadline, driven by a [`ClientPolicy`].
//!
//! [`Call`] is sans-IO: the driver (the proxy, or the simulator) calls [`Call::start`],
//! [`Call::on_attempt_end`] and [`Call::on_wake`], and carries out the [`Action`]s they push:
//! send an attempt, stop waiting for one, wake the call at a time, report an ejection, probe an
//! endpoint, or finish the request.
//! Attempt timeouts are tracked here, so the driver needs one timer per call, not per attempt.

use crate::balance::{Balancer, Ejection, Outlier, Pick};
use crate::hedge::{HedgePolicy, RequestEnd};
use crate::retry::RetryPolicy;
use crate::timeout::{AttemptResult, TimeoutPolicy};
use crate::{EndpointId, Feedback, Outcome, PackedTime, Rng, Time};
use smallvec::SmallVec;
use std::time::Duration;

/// A caller's policies towards one upstream service.
pub struct ClientPolicy {
    /// Chooses the endpoint of each attempt.
    pub balancer: Box<dyn Balancer>,
    /// Leaves endpoints that keep failing out of the balancer's choice, if set.
    pub outlier: Option<Outlier>,
    /// Sets each attempt's timeout.
    pub timeout: Box<dyn TimeoutPolicy>,
    /// Sends speculative attempts, if any.
    pub hedge: Option<Box<dyn HedgePolicy>>,
    /// Retries failed attempts.
    pub retry: RetryPolicy,
    /// The longest a request may take in all, from its start (its deadline), if any.
    pub deadline: Option<Duration>,
    /// Endpoints taken out of the set (sorted): no attempt goes to them ([`ClientPolicy::retire`]).
    pub retired: Vec<EndpointId>,
}

/// Endpoint discovery: endpoints join and leave while requests are in flight. Ids never shift, so
/// an attempt in flight reports its end to the endpoint it was sent to, and an endpoint that stays
/// keeps its balancer and outlier state; a left endpoint keeps its id (retired) until it is back.
impl ClientPolicy {
    /// Makes room for endpoints up to `endpoints`; the new ones start as a new policy's would.
    pub fn grow(&mut self, endpoints: usize) {
        self.balancer.grow(endpoints);
        if let Some(outlier) = &mut self.outlier {
            outlier.grow(endpoints);
        }
    }

    /// Takes `endpoint` out of every pick from now on (drained: attempts in flight to it end as
    /// usual).
    pub fn retire(&mut self, endpoint: EndpointId) {
        if let Err(at) = self.retired.binary_search(&endpoint) {
            self.retired.insert(at, endpoint);
        }
        if let Some(outlier) = &mut self.outlier {
            outlier.retire(endpoint);
        }
    }

    /// Puts a retired `endpoint` back among the picks.
    pub fn restore(&mut self, endpoint: EndpointId) {
        if let Ok(at) = self.retired.binary_search(&endpoint) {
            self.retired.remove(at);
        }
        if let Some(outlier) = &mut self.outlier {
            outlier.restore(endpoint);
        }
    }
}

/// What the driver must do for a call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Action {
    /// Send attempt number `attempt` of this call to `endpoint`, and report its end with
    /// [`Call::on_attempt_end`]. The call enforces `timeout` itself (through a wake); it is the
    /// timeout policy's value (`policy_timeout`) clamped by the request's remaining deadline.
    Send { attempt: u32, endpoint: EndpointId, timeout: Option<Duration>, policy_timeout: Option<Duration> },
    /// Stop waiting for attempt number `attempt`: `reason` is `TimedOut` when its timeout fired,
    /// `Cancelled` when another attempt won, the request ended, or an overdue attempt outlived the
    /// timeout policy's patience ([`TimeoutPolicy::patience`](crate::timeout::TimeoutPolicy::patience)).
    Cancel { attempt: u32, endpoint: EndpointId, reason: Outcome },
    /// The timeout of attempt number `attempt` fired, but the call keeps waiting for it while a
    /// retry goes out ([`RetryPolicy::hedge_on_timeout`]): count it as a timeout, keep the exchange.
    Overdue { attempt: u32, endpoint: EndpointId },
    /// An endpoint was ejected by the outlier detector (for the driver's logs and metrics).
    Eject(Ejection),
    /// Probe `endpoint` for its load and hand the reply to the balancer ([`Balancer::on_probe`]);
    /// a probe that gets no reply is simply lost (Prequal). When `awaited`, the call's next pick
    /// waits for it: once the reply is handed over, or the probe failed, tell the call with
    /// [`Call::on_probe_done`] (a lost one it stops waiting for by itself).
    Probe { endpoint: EndpointId, awaited: bool },
    /// Call [`Call::on_wake`] at this time, unless the call has finished. Later wakes supersede
    /// earlier ones only in being later: a wake that finds nothing due is harmless.
    WakeAt(Time),
    /// The request is over.
    Finish(Finish),
}

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finish {
    /// `Success`, or the outcome of the failure that ended it (`TimedOut` when the deadline passed,
    /// `Rejected` when no endpoint would take it).
    pub outcome: Outcome,
    /// Attempts sent in all (first try, retries and hedges).
    pub attempts: u32,
}

/// One attempt of a call, in 40 bytes (times as [`PackedTime`], the endpoint as a `u32`): a
/// simulator keeps thousands of calls in flight, and a smaller call is fewer cache misses.
#[derive(Clone, Debug)]
struct Attempt {
    endpoint: u32,
    /// The index the timeout policy got for it: 0 for the first try and its hedges, n for retry n.
    index: u32,
    sent: PackedTime,
    timeout: PackedTime,
    /// When an overdue attempt is given up as lost (the timeout policy's patience), if ever.
    abandon_at: PackedTime,
    live: bool,
    /// Its timeout fired and it was kept running (hedge on timeout).
    overdue: bool,
}

impl Attempt {
    fn endpoint(&self) -> EndpointId {
        self.endpoint as EndpointId
    }

    fn sent(&self) -> Time {
        self.sent.get().expect("an attempt has a send time")
    }

    /// When its timeout fires, or, once overdue, when it is abandoned, if it is still waited for.
    fn expires_at(&self) -> Option<Time> {
        if !self.live {
            return None;
        }
        if self.overdue {
            return self.abandon_at.get();
        }
        self.timeout.get().map(|t| self.sent().saturating_add(t))
    }
}

/// The state of one request at its caller: 184 bytes, under three cache lines (its times are
/// [`PackedTime`]s), as a simulator keeps one per call in flight.
#[derive(Clone, Debug)]
pub struct Call {
    start: PackedTime,
    idempotent: bool,
    deadline: PackedTime,
    // Inline room for the common case (a try, a retry or a hedge) keeps a call allocation-free.
    attempts: SmallVec<[Attempt; 2]>,
    tried: SmallVec<[EndpointId; 2]>,
    /// Retries sent so far; also the index the timeout policy gets for the next retry.
    retries: u32,
    retry_at: PackedTime,
    hedges: u32,
    hedge_at: PackedTime,
    /// Whether the hedge policy heard of this request ([`HedgePolicy::on_request`]), so it hears
    /// of its end too.
    hedging: bool,
    /// The earliest wake requested from the driver and not yet delivered.
    armed: PackedTime,
    last_failure: Outcome,
    /// The endpoint of the attempt that failed last ([`NO_ENDPOINT`] before any did): a retry
    /// goes elsewhere while another endpoint is available.
    last_failed: u32,
    finished: bool,
    /// An attempt whose pick waits for probes ([`Balancer::probe_before_pick`]), if `until` is set.
    probing: Probing,
}

/// An attempt waiting for the probes its pick needs.
#[derive(Clone, Copy, Debug)]
struct Probing {
    /// The attempt's timeout index.
    index: u32,
    /// Probes not yet answered.
    left: u32,
    /// When the pick goes ahead with what has answered; none when no pick waits.
    until: PackedTime,
}

impl Probing {
    const NONE: Probing = Probing { index: 0, left: 0, until: PackedTime::NONE };

    /// Whether a pick waits for probes.
    fn waits(&self) -> bool {
        !self.until.is_none()
    }
}

/// The inputs every step of a call needs besides the event itself.
pub struct Ctx<'a> {
    /// The current time.
    pub now: Time,
    /// The caller's policies towards the called service.
    pub policy: &'a mut ClientPolicy,
    /// The random source.
    pub rng: Rng<'a>,
    /// True queue lengths per endpoint (simulator only, for the oracle balancer).
    pub true_loads: Option<&'a crate::balance::LoadIndex>,
    /// Where the call pushes its actions.
    pub out: &'a mut Vec<Action>,
}

impl Call {
    /// Starts a request at `ctx.now`; `deadline` is the caller's own deadline, if it has one (for
    /// example propagated from upstream), and is combined with the policy's.
    pub fn start(ctx: &mut Ctx<'_>, idempotent: bool, deadline: Option<Time>) -> Call {
        let now = ctx.now;
        let own = ctx.policy.deadline.map(|d| now.saturating_add(d));
        let deadline = match (deadline, own) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut call = Call {
            start: PackedTime::at(now),
            idempotent,
            deadline: PackedTime::new(deadline),
            attempts: SmallVec::new(),
            tried: SmallVec::new(),
            retries: 0,
            retry_at: PackedTime::NONE,
            hedges: 0,
            hedge_at: PackedTime::NONE,
            hedging: false,
            armed: PackedTime::NONE,
            last_failure: Outcome::Rejected,
            last_failed: NO_ENDPOINT,
            finished: false,
            probing: Probing::NONE,
        };
        ctx.policy.retry.on_request(now);
        if !call.send(ctx, 0) {
            call.finish(ctx, Outcome::Rejected);
            return call;
        }
        if call.may_hedge(ctx.policy) {
            let hedge = ctx.policy.hedge.as_mut().expect("may_hedge checked it");
            hedge.on_request(now);
            call.hedging = true;
            call.hedge_at = PackedTime::new(hedge.delay(now, 1).map(|d| now.saturating_add(d)));
        }
        call.arm(ctx);
        call
    }

    /// Whether the call is over (its `Finish` action was pushed).
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// When the request started.
    pub fn started(&self) -> Time {
        self.start.get().expect("a call has a start")
    }

    /// Whether the call still waits for attempt number `attempt` (it neither ended, timed out nor
    /// was cancelled); a late answer to an abandoned attempt is ignored.
    pub fn is_waiting_for(&self, attempt: u32) -> bool {
        !self.finished && self.attempts.get(attempt as usize).is_some_and(|a| a.live)
    }

    /// The caller gave the request up (its own caller cancelled it): every live attempt is
    /// cancelled and the call finishes as `Cancelled`. Nothing happens if it already finished.
    pub fn abandon(&mut self, ctx: &mut Ctx<'_>) {
        if !self.finished {
            self.finish(ctx, Outcome::Cancelled);
        }
    }

    /// The request's deadline, if any (for propagation to the next hop).
    pub fn deadline(&self) -> Option<Time> {
        self.deadline.get()
    }

    /// Attempt number `attempt` ended with `feedback` (as the endpoint answered, or `Unavailable`
    /// when it could not be reached). Ends of attempts the call stopped waiting for are ignored.
    pub fn on_attempt_end(&mut self, ctx: &mut Ctx<'_>, attempt: u32, feedback: Feedback) {
        let now = ctx.now;
        let Some(a) = self.attempts.get_mut(attempt as usize) else { return };
        if self.finished || !a.live {
            return;
        }
        a.live = false;
        let (endpoint, index, timeout, overdue) = (a.endpoint(), a.index, a.timeout.get(), a.overdue);
        feed_back(ctx, endpoint, &feedback);
        if matches!(feedback.outcome, Outcome::Success | Outcome::Error) {
            ctx.policy.timeout.on_result(now, index, timeout, AttemptResult::Answered(feedback.rtt));
        }
        if feedback.outcome == Outcome::Success {
            if let Some(hedge) = ctx.policy.hedge.as_mut() {
                hedge.on_latency(now, feedback.rtt);
            }
            self.finish(ctx, Outcome::Success);
            return;
        }
        if overdue {
            // Its timeout already sent the retry that stands in for it.
            self.last_failure = feedback.outcome;
            if self.idle() {
                self.finish(ctx, feedback.outcome);
            }
        } else {
            self.on_failure(ctx, endpoint, feedback.outcome);
        }
        self.arm(ctx);
    }

    /// A wake requested with [`Action::WakeAt`] is due: expire attempts, enforce the deadline,
    /// send due retries and hedges.
    pub fn on_wake(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        if self.finished {
            return;
        }
        if self.armed.get().is_some_and(|t| t <= now) {
            self.armed = PackedTime::NONE;
        }
        if self.deadline.get().is_some_and(|d| d <= now) {
            self.finish(ctx, Outcome::TimedOut);
            return;
        }
        for i in 0..self.attempts.len() {
            let a = &self.attempts[i];
            let expired = a.expires_at().is_some_and(|t| t <= now);
            if !expired {
                continue;
            }
            let (endpoint, index, sent) = (a.endpoint(), a.index, a.sent());
            if a.overdue {
                // Kept past its timeout beyond the policy's patience: lost, as in an outage. Its
                // retry is already out; the request waits no more for it. (Counted as timed out
                // once, when it became overdue.)
                self.attempts[i].live = false;
                ctx.out.push(Action::Cancel { attempt: i as u32, endpoint, reason: Outcome::Cancelled });
                feed_back(ctx, endpoint, &Feedback::new(Outcome::TimedOut, now.saturating_sub(sent)));
                ctx.policy.timeout.on_abandoned(now, index, now.saturating_sub(sent));
                continue;
            }
            let timeout = a.timeout.get().expect("expired implies a timeout");
            if ctx.policy.retry.hedge_on_timeout {
                // Still in flight for the balancer, which hears of it once it ends.
                let patience = ctx.policy.timeout.patience().map(|p| sent.saturating_add(p.max(timeout)));
                self.attempts[i].overdue = true;
                self.attempts[i].abandon_at = PackedTime::new(patience);
                ctx.out.push(Action::Overdue { attempt: i as u32, endpoint });
            } else {
                self.attempts[i].live = false;
                ctx.out.push(Action::Cancel { attempt: i as u32, endpoint, reason: Outcome::TimedOut });
                feed_back(ctx, endpoint, &Feedback::new(Outcome::TimedOut, timeout));
            }
            ctx.policy.timeout.on_result(now, index, Some(timeout), AttemptResult::TimedOut(timeout));
            self.on_failure(ctx, endpoint, Outcome::TimedOut);
            if self.finished {
                return;
            }
        }
        if self.probing.until.get().is_some_and(|until| until <= now) {
            self.pick_after_probes(ctx);
            if self.finished {
                return;
            }
        }
        if self.retry_at.get().is_some_and(|t| t <= now) {
            self.retry_at = PackedTime::NONE;
            self.retries += 1;
            if !self.send(ctx, self.retries) && self.idle() {
                self.finish(ctx, self.last_failure);
                return;
            }
        }
        if self.hedge_at.get().is_some_and(|t| t <= now) {
            self.hedge_at = PackedTime::NONE;
            let hedge = ctx.policy.hedge.as_mut().expect("hedge_at is set only with a hedge policy");
            let n = self.hedges + 1;
            // The budget is asked first so that a hedge it refuses costs the hedge policy nothing.
            if ctx.policy.retry.budget_allows(now) && hedge.try_send(now, n) {
                ctx.policy.retry.charge_hedge(now);
                self.hedges = n;
                self.send(ctx, self.retries);
                let hedge = ctx.policy.hedge.as_mut().expect("checked above");
                let start = self.started();
                self.hedge_at = PackedTime::new(hedge.delay(now, n + 1).map(|d| start.saturating_add(d).max(now)));
            }
            // A refused hedge (by the hedge policy or by the budget retries and hedges share) ends
            // hedging for this request: asking again at once would be refused again, and a
            // virtual-time driver would spin on the same instant.
        }
        if self.idle() {
            self.finish(ctx, self.last_failure);
            return;
        }
        self.arm(ctx);
    }

    /// One probe the waiting pick sent ([`Action::Probe`] with `awaited`) was answered (its reply
    /// already handed to the balancer) or failed: once all have, the pick goes ahead.
    pub fn on_probe_done(&mut self, ctx: &mut Ctx<'_>) {
        if self.finished || !self.probing.waits() {
            return;
        }
        let probing = &mut self.probing;
        probing.left = probing.left.saturating_sub(1);
        if probing.left == 0 {
            self.pick_after_probes(ctx);
            self.arm(ctx);
        }
    }

    /// The waiting pick goes ahead with the replies it has.
    fn pick_after_probes(&mut self, ctx: &mut Ctx<'_>) {
        if !self.probing.waits() {
            return;
        }
        let index = std::mem::replace(&mut self.probing, Probing::NONE).index;
        if !self.pick_and_send(ctx, index) && self.idle() {
            self.finish(ctx, self.last_failure);
        }
    }

    fn may_hedge(&self, policy: &ClientPolicy) -> bool {
        policy.hedge.is_some() && (self.idempotent || policy.retry.retry_non_idempotent)
    }

    fn any_live(&self) -> bool {
        self.attempts.iter().any(|a| a.live)
    }

    /// Nothing is in flight or scheduled: no live attempt, no pending retry, hedge or pick.
    fn idle(&self) -> bool {
        !self.any_live() && self.retry_at.is_none() && self.hedge_at.is_none() && !self.probing.waits()
    }

    /// An attempt to `endpoint` failed: schedule a retry if the policy allows, else finish when
    /// nothing is left.
    fn on_failure(&mut self, ctx: &mut Ctx<'_>, endpoint: EndpointId, outcome: Outcome) {
        self.last_failure = outcome;
        self.last_failed = u32::try_from(endpoint).unwrap_or(NO_ENDPOINT);
        if self.retry_at.is_none() {
            let made = self.retries + 1;
            let wait = ctx.policy.retry.retry(ctx.now, made, outcome, self.idempotent, &mut *ctx.rng);
            match wait {
                Some(w) if w.is_zero() => {
                    self.retries += 1;
                    if self.send(ctx, self.retries) {
                        return;
                    }
                }
                Some(w) => {
                    self.retry_at = PackedTime::at(ctx.now.saturating_add(w));
                    return;
                }
                None => {}
            }
        }
        if self.idle() {
            self.finish(ctx, outcome);
        }
    }

    /// Sends an attempt with timeout index `index`, or first the probes its pick waits for; false
    /// when the balancer found no endpoint.
    fn send(&mut self, ctx: &mut Ctx<'_>, index: u32) -> bool {
        let now = ctx.now;
        if !self.probing.waits() && ctx.policy.balancer.sends_probes() {
            let policy = &mut *ctx.policy;
            let exclude = match &mut policy.outlier {
                Some(outlier) => outlier.exclude(now, &self.tried),
                None => &self.tried,
            };
            if let Some(wait) = policy.balancer.probe_before_pick(now, &mut *ctx.rng, exclude) {
                let mut left = 0;
                while let Some(endpoint) = policy.balancer.take_probe() {
                    ctx.out.push(Action::Probe { endpoint, awaited: true });
                    left += 1;
                }
                if left > 0 {
                    self.probing = Probing { index, left, until: PackedTime::at(now.saturating_add(wait)) };
                    return true;
                }
            }
        }
        self.pick_and_send(ctx, index)
    }

    /// Picks an endpoint and sends an attempt with timeout index `index` to it; false when the
    /// balancer found no endpoint.
    fn pick_and_send(&mut self, ctx: &mut Ctx<'_>, index: u32) -> bool {
        let now = ctx.now;
        let policy = &mut *ctx.policy;
        let exclude = match &mut policy.outlier {
            Some(outlier) => outlier.exclude(now, &self.tried),
            None => &self.tried,
        };
        let endpoint = if policy.retired.is_empty() {
            let mut pick = Pick { now, rng: &mut *ctx.rng, exclude, true_loads: ctx.true_loads };
            policy.balancer.pick(&mut pick)
        } else {
            // Balancers avoid excluded endpoints only while another is left: a pick that lands on
            // a retired one found nothing else, and is made again avoiding the retired alone.
            let retired = &policy.retired;
            let avoid: Vec<EndpointId> = exclude.iter().chain(retired).copied().collect();
            let mut pick = Pick { now, rng: &mut *ctx.rng, exclude: &avoid, true_loads: ctx.true_loads };
            match policy.balancer.pick(&mut pick) {
                Some(e) if retired.binary_search(&e).is_ok() => {
                    let mut pick = Pick { now, rng: &mut *ctx.rng, exclude: retired, true_loads: ctx.true_loads };
                    policy.balancer.pick(&mut pick).filter(|e| retired.binary_search(e).is_err())
                }
                chosen => chosen,
            }
        };
        let endpoint = match endpoint {
            Some(e) if e == self.last_failed as EndpointId => {
                Some(elsewhere(now, policy, &mut *ctx.rng, ctx.true_loads, e))
            }
            chosen => chosen,
        };
        let Some(endpoint) = endpoint else { return false };
        let own = policy.timeout.timeout(now, index, &mut *ctx.rng);
        let remaining = self.deadline.get().map(|d| d.saturating_sub(now));
        let timeout = match (own, remaining) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        policy.balancer.on_send(endpoint, now);
        if let Some(outlier) = &mut policy.outlier {
            outlier.on_send(endpoint);
        }
        let attempt = self.attempts.len() as u32;
        self.attempts.push(Attempt {
            endpoint: u32::try_from(endpoint).expect("fewer than 2^32 endpoints"),
            index,
            sent: PackedTime::at(now),
            timeout: PackedTime::new(timeout),
            abandon_at: PackedTime::NONE,
            live: true,
            overdue: false,
        });
        if !self.tried.contains(&endpoint) {
            self.tried.push(endpoint);
        }
        ctx.out.push(Action::Send { attempt, endpoint, timeout, policy_timeout: own });
        while let Some(probe) = policy.balancer.take_probe() {
            ctx.out.push(Action::Probe { endpoint: probe, awaited: false });
        }
        true
    }

    fn finish(&mut self, ctx: &mut Ctx<'_>, outcome: Outcome) {
        let now = ctx.now;
        for (i, a) in self.attempts.iter_mut().enumerate() {
            if a.live {
                a.live = false;
                ctx.out.push(Action::Cancel { attempt: i as u32, endpoint: a.endpoint(), reason: Outcome::Cancelled });
                let feedback = Feedback::new(Outcome::Cancelled, now.saturating_sub(a.sent()));
                feed_back(ctx, a.endpoint(), &feedback);
                ctx.policy.timeout.on_abandoned(now, a.index, feedback.rtt);
            }
        }
        self.finished = true;
        if self.hedging {
            let end = RequestEnd { outcome, elapsed: now.saturating_sub(self.started()) };
            ctx.policy.hedge.as_mut().expect("hedging implies a hedge policy").on_finish(now, end);
        }
        let attempts = self.attempts.len() as u32;
        ctx.out.push(Action::Finish(Finish { outcome, attempts }));
    }

    /// Asks the driver for a wake at the earliest pending time, unless one at or before it is due.
    fn arm(&mut self, ctx: &mut Ctx<'_>) {
        if self.finished {
            return;
        }
        let timeouts = self.attempts.iter().filter_map(Attempt::expires_at);
        let probing = self.probing.until.get();
        let pending = [self.deadline.get(), self.retry_at.get(), self.hedge_at.get(), probing];
        let next = pending.into_iter().flatten().chain(timeouts).min();
        if let Some(t) = next {
            if self.armed.get().is_none_or(|armed| t < armed) {
                self.armed = PackedTime::at(t);
                ctx.out.push(Action::WakeAt(t));
            }
        }
    }
}

/// No endpoint, in [`Call`]'s `u32` fields.
const NO_ENDPOINT: u32 = u32::MAX;

/// Another endpoint than `failed`, whose attempt just failed, if one is available (Envoy's
/// previous-hosts retry predicate): a pick lands on `failed` only when every other endpoint was
/// tried, ejected or retired, and is then made again avoiding `failed` and the ejected and retired
/// ones alone, so a retry goes to an endpoint the request tried before rather than back to the
/// one that just failed. With nothing else left, `failed`.
fn elsewhere(
    now: Time,
    policy: &mut ClientPolicy,
    rng: Rng<'_>,
    true_loads: Option<&crate::balance::LoadIndex>,
    failed: EndpointId,
) -> EndpointId {
    let mut avoid: SmallVec<[EndpointId; 4]> = SmallVec::new();
    if let Some(outlier) = &mut policy.outlier {
        avoid.extend_from_slice(outlier.exclude(now, &[]));
    }
    avoid.extend_from_slice(&policy.retired);
    avoid.push(failed);
    let mut pick = Pick { now, rng, exclude: &avoid, true_loads };
    // A pick that lands in `avoid` found nothing outside it.
    policy.balancer.pick(&mut pick).filter(|e| !avoid.contains(e)).unwrap_or(failed)
}

/// Tells the balancer, and the outlier detector if any, how an attempt to `endpoint` ended.
fn feed_back(ctx: &mut Ctx<'_>, endpoint: EndpointId, feedback: &Feedback) {
    ctx.policy.balancer.on_feedback(endpoint, ctx.now, feedback);
    if let Some(outlier) = &mut ctx.policy.outlier {
        let mut ejection = outlier.on_outcome(endpoint, ctx.now, feedback.outcome);
        if feedback.outcome == Outcome::Success && ejection.is_none() {
            ejection = outlier.on_answer(endpoint, ctx.now, feedback.rtt);
        }
        if let Some(ejection) = ejection {
            ctx.out.push(Action::Eject(ejection));
        }
    }
}

#[cfg(test)]
#[path = "call_tests.rs"]
mod tests;
