//! One request's life as its caller sees it: the first attempt, hedged attempts, retries, attempt
//! timeouts and the request's deadline, driven by a [`ClientPolicy`].
//!
//! [`Call`] is sans-IO: the driver (the proxy, or the simulator) calls [`Call::start`],
//! [`Call::on_attempt_end`] and [`Call::on_wake`], and carries out the [`Action`]s they push:
//! send an attempt, stop waiting for one, wake the call at a time, report an ejection, probe an
//! endpoint, or finish the request.
//! Attempt timeouts are tracked here, so the driver needs one timer per call, not per attempt.
//!
//! **Only a deadline or an error fails a request.** A timeout the user wrote (`fixed`,
//! `sequential`, `exp-backoff`) is Envoy's `per_try_timeout`: it ends its attempt, a retry goes
//! out if the retry policy allows one, and a request with no retry left fails with 504. A learned
//! number (a learned timeout, its patience, a learned hedge) may race another attempt; it never
//! ends the last live attempt of a request whose deadline has not passed: such an attempt is kept
//! until it answers or the deadline ends the request.
//!
//! A request belongs to a class ([`crate::class`]): its timeout, hedge and deadline are its
//! class's, and so is the record of whether its races win.

use crate::admission::Marks;
use crate::balance::{Balancer, Ejection, Outlier, Pick};
use crate::class::{ClassId, Classes, POOLED};
use crate::hedge::RequestEnd;
use crate::retry::RetryPolicy;
use crate::timeout::AttemptResult;
use crate::{EndpointId, Feedback, Outcome, PackedTime, Rng, Time};
use smallvec::SmallVec;
use std::time::Duration;

/// A caller's policies towards one upstream service.
pub struct ClientPolicy {
    /// Chooses the endpoint of each attempt.
    pub balancer: Box<dyn Balancer>,
    /// Leaves endpoints that keep failing out of the balancer's choice, if set.
    pub outlier: Option<Outlier>,
    /// Per class of requests: the timeout, the hedge and the deadline, and what each learnt.
    pub classes: Classes,
    /// Retries failed attempts (one budget for every class).
    pub retry: RetryPolicy,
    /// Endpoints taken out of the set (sorted): no attempt goes to them ([`ClientPolicy::retire`]).
    pub retired: Vec<EndpointId>,
    /// Endpoints in the set, retired ones included ([`ClientPolicy::grow`]).
    pub endpoints: usize,
}

/// Endpoint discovery: endpoints join and leave while requests are in flight. Ids never shift, so
/// an attempt in flight reports its end to the endpoint it was sent to, and an endpoint that stays
/// keeps its balancer and outlier state; a left endpoint keeps its id (retired) until it is back.
impl ClientPolicy {
    /// Makes room for endpoints up to `endpoints`; the new ones start as a new policy's would.
    pub fn grow(&mut self, endpoints: usize) {
        self.endpoints = self.endpoints.max(endpoints);
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
    /// `marks` are what the callee's adaptive admission reads of it.
    Send {
        attempt: u32,
        endpoint: EndpointId,
        timeout: Option<Duration>,
        policy_timeout: Option<Duration>,
        marks: Marks,
    },
    /// Stop waiting for attempt number `attempt`: `reason` is `TimedOut` when its timeout fired,
    /// `Cancelled` when another attempt won, the request ended, or an overdue attempt outlived the
    /// timeout policy's patience ([`TimeoutPolicy::patience`](crate::timeout::TimeoutPolicy::patience))
    /// while another attempt runs.
    Cancel { attempt: u32, endpoint: EndpointId, reason: Outcome },
    /// The timeout of attempt number `attempt` fired, but the call keeps waiting for it: a retry
    /// races it ([`ClassPolicy::hedge_on_timeout`](crate::class::ClassPolicy::hedge_on_timeout)),
    /// or it is the last live attempt and the timeout was learned. Count it as a timeout, keep the
    /// exchange.
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

/// One attempt of a call, in 32 bytes (times as [`PackedTime`], the endpoint as a `u32`, its
/// timeout index and state in one `u32`): a simulator keeps thousands of calls in flight, and a
/// smaller call is fewer cache misses; three fit a call without an allocation.
#[derive(Clone, Debug)]
struct Attempt {
    sent: PackedTime,
    timeout: PackedTime,
    /// When an overdue attempt is given up as lost (the timeout policy's patience), if ever.
    abandon_at: PackedTime,
    endpoint: u32,
    tag: Tag,
}

/// An attempt's timeout index (0 for the first try and its hedges, n for retry n) and its state
/// flags in one word: the index stays far below 2^28 (each attempt takes 32 bytes).
#[derive(Clone, Copy, Debug)]
struct Tag(u32);

impl Tag {
    /// Still waited for.
    const LIVE: u32 = 1 << 31;
    /// Its timeout fired and it was kept running (hedge on timeout, or the last live attempt).
    const OVERDUE: u32 = 1 << 30;
    /// When its timeout fired, the call asked for a retry to stand in for it.
    const REPLACED: u32 = 1 << 29;
    /// It was sent while another attempt of the request was live: a race (a hedge, or a retry
    /// beside an overdue attempt).
    const RACED: u32 = 1 << 28;
    const INDEX: u32 = Self::RACED - 1;

    fn live(index: u32, raced: bool) -> Tag {
        assert!(index <= Self::INDEX, "fewer than 2^28 retries");
        Tag(index | Self::LIVE | if raced { Self::RACED } else { 0 })
    }
}

impl Attempt {
    fn endpoint(&self) -> EndpointId {
        self.endpoint as EndpointId
    }

    /// The index the timeout policy got for it.
    fn index(&self) -> u32 {
        self.tag.0 & Tag::INDEX
    }

    fn has(&self, flag: u32) -> bool {
        self.tag.0 & flag != 0
    }

    fn live(&self) -> bool {
        self.has(Tag::LIVE)
    }

    fn overdue(&self) -> bool {
        self.has(Tag::OVERDUE)
    }

    fn end(&mut self) {
        self.tag.0 &= !Tag::LIVE;
    }

    fn set(&mut self, flag: u32) {
        self.tag.0 |= flag;
    }

    fn sent(&self) -> Time {
        self.sent.get().expect("an attempt has a send time")
    }

    /// When its timeout fires, or, once overdue, when it is abandoned, if it is still waited for.
    fn expires_at(&self) -> Option<Time> {
        if !self.live() {
            return None;
        }
        if self.overdue() {
            return self.abandon_at.get();
        }
        self.timeout.get().map(|t| self.sent().saturating_add(t))
    }
}

/// The state of one request at its caller: 176 bytes, under three cache lines (its times are
/// [`PackedTime`]s), as a simulator keeps one per call in flight.
#[derive(Clone, Debug)]
pub struct Call {
    start: PackedTime,
    idempotent: bool,
    /// The request's class ([`crate::class`]).
    class: ClassId,
    deadline: PackedTime,
    // Inline room for a try, a hedge and a retry keeps a call allocation-free.
    attempts: SmallVec<[Attempt; 3]>,
    /// Retries sent so far; also the index the timeout policy gets for the next retry.
    retries: u32,
    retry_at: PackedTime,
    hedges: u16,
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
    /// Starts a request of the pooled class ([`Call::start_for`]).
    pub fn start(ctx: &mut Ctx<'_>, idempotent: bool, deadline: Option<Time>) -> Call {
        Call::start_for(ctx, POOLED, idempotent, deadline)
    }

    /// Starts a request of class `class` at `ctx.now`; `deadline` is the caller's own deadline,
    /// if it has one (for example propagated from upstream), and is combined with the class's.
    pub fn start_for(ctx: &mut Ctx<'_>, class: ClassId, idempotent: bool, deadline: Option<Time>) -> Call {
        let now = ctx.now;
        let own = ctx.policy.classes.get(class).deadline.map(|d| now.saturating_add(d));
        let deadline = match (deadline, own) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut call = Call {
            start: PackedTime::at(now),
            idempotent,
            class,
            deadline: PackedTime::new(deadline),
            attempts: SmallVec::new(),
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
            let hedge = ctx.policy.classes.get(class).hedge.as_mut().expect("may_hedge checked it");
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

    /// The request's class.
    pub fn class(&self) -> ClassId {
        self.class
    }

    /// When the request started.
    pub fn started(&self) -> Time {
        self.start.get().expect("a call has a start")
    }

    /// Whether the call still waits for attempt number `attempt` (it neither ended, timed out nor
    /// was cancelled); a late answer to an abandoned attempt is ignored.
    pub fn is_waiting_for(&self, attempt: u32) -> bool {
        !self.finished && self.attempts.get(attempt as usize).is_some_and(Attempt::live)
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
        if self.finished || !a.live() {
            return;
        }
        a.end();
        let (endpoint, index, timeout) = (a.endpoint(), a.index(), a.timeout.get());
        let (replaced, raced) = (a.overdue() && a.has(Tag::REPLACED), a.has(Tag::RACED));
        feed_back(ctx, self.class, endpoint, &feedback);
        let class = ctx.policy.classes.get(self.class);
        if matches!(feedback.outcome, Outcome::Success | Outcome::Error) {
            class.timeout.on_result(now, index, timeout, AttemptResult::Answered(feedback.rtt));
        }
        if feedback.outcome == Outcome::Success {
            if let Some(hedge) = class.hedge.as_mut() {
                hedge.on_latency(now, feedback.rtt);
            }
            self.finish_won(ctx, Outcome::Success, raced);
            return;
        }
        if replaced {
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
            let (endpoint, index, sent) = (a.endpoint(), a.index(), a.sent());
            if a.overdue() {
                if !self.others_live(i) {
                    // The last live attempt: patience is learned, and a learned number does not
                    // end a request. It is waited for until it answers or the deadline passes,
                    // and, lost as far as the caller can tell (a hung endpoint), raced now if no
                    // retry could go out when its timeout fired: from the budget's allowance for
                    // lost attempts, as the races of the usual tail may have spent the rest.
                    self.attempts[i].abandon_at = PackedTime::NONE;
                    if self.retry_at.is_none() && ctx.policy.retry.retry_lost(now, self.retries + 1, self.idempotent) {
                        self.last_failed = u32::try_from(endpoint).unwrap_or(NO_ENDPOINT);
                        self.retries += 1;
                        self.send(ctx, self.retries);
                    }
                    continue;
                }
                // Kept past its timeout beyond the policy's patience while another attempt runs:
                // lost, as in an outage; the request waits no more for it. (Counted as timed out
                // once, when it became overdue.)
                self.attempts[i].end();
                ctx.out.push(Action::Cancel { attempt: i as u32, endpoint, reason: Outcome::Cancelled });
                feed_back(ctx, self.class, endpoint, &Feedback::new(Outcome::TimedOut, now.saturating_sub(sent)));
                ctx.policy.classes.get(self.class).timeout.on_abandoned(now, index, now.saturating_sub(sent));
                continue;
            }
            let timeout = a.timeout.get().expect("expired implies a timeout");
            let class = ctx.policy.classes.get(self.class);
            let (hedging, learned) = (class.hedge_on_timeout, class.timeout.learned());
            let retry = self.retry_possible(ctx, Outcome::TimedOut);
            // A learned timeout with no retry to stand in for the last live attempt keeps it.
            let alone = learned && !hedging && !retry && !self.others_live(i);
            let class = ctx.policy.classes.get(self.class);
            if hedging || alone {
                // Still in flight for the balancer, which hears of it once it ends.
                let patience = class.timeout.patience().filter(|_| hedging);
                self.attempts[i].set(Tag::OVERDUE);
                self.attempts[i].abandon_at = PackedTime::new(patience.map(|p| sent.saturating_add(p.max(timeout))));
                ctx.out.push(Action::Overdue { attempt: i as u32, endpoint });
            } else {
                self.attempts[i].end();
                ctx.out.push(Action::Cancel { attempt: i as u32, endpoint, reason: Outcome::TimedOut });
                feed_back(ctx, self.class, endpoint, &Feedback::new(Outcome::TimedOut, timeout));
            }
            let class = ctx.policy.classes.get(self.class);
            class.timeout.on_result(now, index, Some(timeout), AttemptResult::TimedOut(timeout));
            // The retry beside a kept attempt is a race: a learned timeout's goes out only where
            // the class's races win.
            let refused = hedging && learned && retry && !class.races.allow();
            if alone || refused {
                self.last_failure = Outcome::TimedOut;
                continue;
            }
            self.attempts[i].set(Tag::REPLACED);
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
            let n = self.hedges.saturating_add(1);
            // The budget and the class's races are asked first so that a hedge they refuse costs
            // the hedge policy nothing.
            let budget = ctx.policy.retry.budget_allows(now);
            let class = ctx.policy.classes.get(self.class);
            let hedge = class.hedge.as_mut().expect("hedge_at is set only with a hedge policy");
            let races = !hedge.learned() || class.races.allow();
            if budget && races && hedge.try_send(now, u32::from(n)) {
                ctx.policy.retry.charge_hedge(now);
                self.hedges = n;
                self.send(ctx, self.retries);
                let hedge = ctx.policy.classes.get(self.class).hedge.as_mut().expect("checked above");
                let start = self.started();
                self.hedge_at =
                    PackedTime::new(hedge.delay(now, u32::from(n) + 1).map(|d| start.saturating_add(d).max(now)));
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

    /// The endpoints its attempts went to, each once, in the order first tried.
    fn tried(&self) -> SmallVec<[EndpointId; 3]> {
        let mut tried = SmallVec::new();
        for endpoint in self.attempts.iter().map(Attempt::endpoint) {
            if !tried.contains(&endpoint) {
                tried.push(endpoint);
            }
        }
        tried
    }

    fn may_hedge(&self, policy: &mut ClientPolicy) -> bool {
        policy.classes.get(self.class).hedge.is_some() && (self.idempotent || policy.retry.retry_non_idempotent)
    }

    fn any_live(&self) -> bool {
        self.attempts.iter().any(Attempt::live)
    }

    /// Whether an attempt other than number `attempt` is live, or a pick waits for its probes.
    fn others_live(&self, attempt: usize) -> bool {
        self.probing.waits() || self.attempts.iter().enumerate().any(|(i, a)| i != attempt && a.live())
    }

    /// Whether a retry is pending, or one would go out after `outcome` now ([`Call::on_failure`]).
    fn retry_possible(&self, ctx: &mut Ctx<'_>, outcome: Outcome) -> bool {
        !self.retry_at.is_none() || ctx.policy.retry.would_retry(ctx.now, self.retries + 1, outcome, self.idempotent)
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
        let pending_hedge = !self.hedge_at.is_none() && self.retry_at.is_none();
        if outcome.not_processed() && pending_hedge && !self.any_live() && !self.probing.waits() {
            // Refused with nothing left in flight, the request would wait out the hedge's delay for
            // no slow attempt to race: the hedge goes out now, as a refusal's retry does (gRPC's
            // hedging sends the next attempt at once after a failure). An error keeps the delay,
            // as speculative-task.txt's `speculatively` does.
            self.hedge_at = PackedTime::at(ctx.now);
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
            let tried = self.tried();
            let exclude = match &mut policy.outlier {
                Some(outlier) => outlier.exclude(now, &tried),
                None => &tried,
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
        let tried = self.tried();
        let exclude = match &mut policy.outlier {
            Some(outlier) => outlier.exclude(now, &tried),
            None => &tried,
        };
        let endpoint = if policy.retired.is_empty() {
            let mut pick = Pick { now, rng: &mut *ctx.rng, exclude, true_loads: ctx.true_loads };
            policy.balancer.pick(&mut pick)
        } else {
            // Balancers avoid excluded endpoints only while another is left: a pick that lands on
            // a retired one found nothing else, and is made again avoiding the retired alone.
            let retired = &policy.retired;
            let avoid: SmallVec<[EndpointId; 8]> = exclude.iter().chain(retired).copied().collect();
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
                let other = elsewhere(now, policy, &mut *ctx.rng, ctx.true_loads, e);
                // A refusal is not sent back to the endpoint that refused it: its queue stands
                // (issue #36), and the attempt would only be refused again and count as an arrival.
                Some(other).filter(|&o| o != e || self.last_failure != Outcome::Rejected)
            }
            chosen => chosen,
        };
        let Some(endpoint) = endpoint else { return false };
        let own = policy.classes.get(self.class).timeout.timeout(now, index, &mut *ctx.rng);
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
        let raced = self.any_live();
        self.attempts.push(Attempt {
            sent: PackedTime::at(now),
            timeout: PackedTime::new(timeout),
            abandon_at: PackedTime::NONE,
            endpoint: u32::try_from(endpoint).expect("fewer than 2^32 endpoints"),
            tag: Tag::live(index, raced),
        });
        let others = policy.endpoints.saturating_sub(policy.retired.len()) > 1;
        // A refusal's retry is promised only if the budget would pay for it now: the recommended
        // policy's hedges spend the budget below capacity, and a refusal on a promise its caller
        // then did not keep failed the request (2-6 % of them for a pair of replicas at 75-90 %).
        let fallback = raced || (others && policy.retry.would_retry(now, self.retries + 1, Outcome::Rejected, false));
        let refused_elsewhere = self.last_failed != NO_ENDPOINT && self.last_failure == Outcome::Rejected;
        let marks = Marks { fallback, refused_elsewhere, race: raced };
        ctx.out.push(Action::Send { attempt, endpoint, timeout, policy_timeout: own, marks });
        while let Some(probe) = policy.balancer.take_probe() {
            ctx.out.push(Action::Probe { endpoint: probe, awaited: false });
        }
        true
    }

    fn finish(&mut self, ctx: &mut Ctx<'_>, outcome: Outcome) {
        self.finish_won(ctx, outcome, false);
    }

    /// Finishes the request; `by_race` when an attempt sent as a race won it.
    fn finish_won(&mut self, ctx: &mut Ctx<'_>, outcome: Outcome, by_race: bool) {
        let now = ctx.now;
        for (i, a) in self.attempts.iter_mut().enumerate() {
            if a.live() {
                a.end();
                ctx.out.push(Action::Cancel { attempt: i as u32, endpoint: a.endpoint(), reason: Outcome::Cancelled });
                let feedback = Feedback::new(Outcome::Cancelled, now.saturating_sub(a.sent()));
                feed_back(ctx, self.class, a.endpoint(), &feedback);
                ctx.policy.classes.get(self.class).timeout.on_abandoned(now, a.index(), feedback.rtt);
            }
        }
        self.finished = true;
        let class = ctx.policy.classes.get(self.class);
        if self.attempts.iter().any(|a| a.has(Tag::RACED)) {
            class.races.record(by_race);
        }
        if self.hedging {
            let end = RequestEnd { outcome, elapsed: now.saturating_sub(self.started()) };
            class.hedge.as_mut().expect("hedging implies a hedge policy").on_finish(now, end);
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

/// Tells the balancer, and the outlier detector if any, how an attempt of a request of `class`
/// to `endpoint` ended.
///
/// An attempt that a learned timeout (or its patience) gave up on is no failure of the endpoint
/// to the outlier detector: a learned number does not take capacity away. (On examples/routes.yaml
/// at 200 requests/s, five such attempts in a row ejected one of two replicas, and the other
/// failed 0.8 % of the requests at the deadline.) A timeout the user wrote counts, as Envoy's
/// gateway failures do.
fn feed_back(ctx: &mut Ctx<'_>, class: ClassId, endpoint: EndpointId, feedback: &Feedback) {
    ctx.policy.balancer.on_feedback(endpoint, ctx.now, feedback);
    let learned = feedback.outcome == Outcome::TimedOut && ctx.policy.classes.get(class).timeout.learned();
    if let Some(outlier) = &mut ctx.policy.outlier {
        let verdict = if learned { Outcome::Cancelled } else { feedback.outcome };
        let mut ejection = outlier.on_outcome(endpoint, ctx.now, verdict);
        if feedback.outcome == Outcome::Success && ejection.is_none() {
            ejection = outlier.on_answer(endpoint, class, ctx.now, feedback.rtt);
        }
        if let Some(ejection) = ejection {
            ctx.out.push(Action::Eject(ejection));
        }
    }
}

#[cfg(test)]
#[path = "call_tests.rs"]
mod tests;
