//! Narrated tests of [`Call`] in virtual time: each test plays the driver, step by step, and checks
//! the exact actions the call asks for.

use super::*;
use crate::balance::{EjectionReason, RoundRobin};
use crate::class::ClassPolicy;
use crate::hedge::{HedgePolicy, PercentileHedge, PercentileHedgeConfig, Speculative, PAST};
use crate::retry::{Backoff, RetryBudget};
use crate::timeout::{AttemptResult, Fixed, NoTimeout, TimeoutPolicy};
use crate::LoadReport;
use rand_pcg::Pcg64Mcg;
use std::sync::{Arc, Mutex};

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// Round robin over `n` endpoints that records the feedback it gets.
struct Recording {
    inner: RoundRobin,
    log: Arc<Mutex<Vec<(EndpointId, Outcome)>>>,
}

impl Balancer for Recording {
    fn pick(&mut self, pick: &mut Pick<'_>) -> Option<EndpointId> {
        self.inner.pick(pick)
    }
    fn on_send(&mut self, endpoint: EndpointId, now: Time) {
        self.inner.on_send(endpoint, now);
    }
    fn on_feedback(&mut self, endpoint: EndpointId, now: Time, feedback: &Feedback) {
        self.log.lock().expect("not poisoned").push((endpoint, feedback.outcome));
        self.inner.on_feedback(endpoint, now, feedback);
    }
    fn grow(&mut self, endpoints: usize) {
        self.inner.grow(endpoints);
    }
}

/// The driver: the caller's policies, a seeded rng and the virtual clock.
struct Driver {
    policy: ClientPolicy,
    rng: Pcg64Mcg,
    now: Time,
    feedback: Arc<Mutex<Vec<(EndpointId, Outcome)>>>,
}

impl Driver {
    /// `endpoints` replicas, the given timeout, no hedging, no retries, no deadline.
    fn new(endpoints: usize, timeout: Box<dyn TimeoutPolicy>) -> Self {
        let feedback = Arc::new(Mutex::new(Vec::new()));
        let balancer = Box::new(Recording { inner: RoundRobin::new(endpoints), log: feedback.clone() });
        let policy = ClientPolicy {
            balancer,
            outlier: None,
            classes: Classes::single(ClassPolicy::new(timeout)),
            retry: RetryPolicy::default(),
            retired: Vec::new(),
            endpoints,
        };
        Driver { policy, rng: Pcg64Mcg::new(0xca11), now: Time::ZERO, feedback }
    }

    fn retries(mut self, max_attempts: u32, backoff: Backoff) -> Self {
        self.policy.retry.max_attempts = max_attempts;
        self.policy.retry.backoff = backoff;
        self
    }

    /// The pooled class's policy, which every request of these tests uses.
    fn class(&mut self) -> &mut ClassPolicy {
        self.policy.classes.pooled()
    }

    fn at(&mut self, t: Duration) -> &mut Self {
        self.now = t;
        self
    }

    fn step(&mut self, f: impl FnOnce(&mut Ctx<'_>)) -> Vec<Action> {
        let mut out = Vec::new();
        let mut ctx =
            Ctx { now: self.now, policy: &mut self.policy, rng: &mut self.rng, true_loads: None, out: &mut out };
        f(&mut ctx);
        out
    }

    fn start(&mut self, idempotent: bool) -> (Call, Vec<Action>) {
        let mut call = None;
        let out = self.step(|ctx| call = Some(Call::start(ctx, idempotent, None)));
        (call.expect("started"), out)
    }

    fn end(&mut self, call: &mut Call, attempt: u32, feedback: Feedback) -> Vec<Action> {
        self.step(|ctx| call.on_attempt_end(ctx, attempt, feedback))
    }

    fn wake(&mut self, call: &mut Call) -> Vec<Action> {
        self.step(|ctx| call.on_wake(ctx))
    }

    fn feedback(&self) -> Vec<(EndpointId, Outcome)> {
        self.feedback.lock().expect("not poisoned").clone()
    }
}

/// The marks of an attempt whose refusal would be retried elsewhere.
const FALLBACK: Marks = Marks { fallback: true, refused_elsewhere: false, race: false };

fn send(attempt: u32, endpoint: EndpointId, timeout: Option<Duration>) -> Action {
    Action::Send { attempt, endpoint, timeout, policy_timeout: timeout, marks: Marks::default() }
}

/// The same, for an attempt whose refusal would cost the request little: it is retried elsewhere.
fn send_with_fallback(attempt: u32, endpoint: EndpointId, timeout: Option<Duration>) -> Action {
    Action::Send { attempt, endpoint, timeout, policy_timeout: timeout, marks: FALLBACK }
}

/// The same, for an attempt that races a live one (a hedge, a retry beside an overdue attempt).
fn send_racing(attempt: u32, endpoint: EndpointId, timeout: Option<Duration>) -> Action {
    let marks = Marks { race: true, ..FALLBACK };
    Action::Send { attempt, endpoint, timeout, policy_timeout: timeout, marks }
}

/// `send` marked as following another endpoint's refusal.
fn after_refusal(send: Action) -> Action {
    match send {
        Action::Send { attempt, endpoint, timeout, policy_timeout, marks } => {
            let marks = Marks { refused_elsewhere: true, ..marks };
            Action::Send { attempt, endpoint, timeout, policy_timeout, marks }
        }
        other => other,
    }
}

/// An attempt whose policy timeout (`policy`) the request's deadline cut to `timeout`.
fn send_clamped(attempt: u32, endpoint: EndpointId, timeout: Duration, policy: Option<Duration>) -> Action {
    Action::Send { attempt, endpoint, timeout: Some(timeout), policy_timeout: policy, marks: Marks::default() }
}

/// The call stopped waiting because the attempt's timeout fired.
fn expire(attempt: u32, endpoint: EndpointId) -> Action {
    Action::Cancel { attempt, endpoint, reason: Outcome::TimedOut }
}

/// The call stopped waiting because another attempt won or the request ended.
fn cancel(attempt: u32, endpoint: EndpointId) -> Action {
    Action::Cancel { attempt, endpoint, reason: Outcome::Cancelled }
}

fn finish(outcome: Outcome, attempts: u32) -> Action {
    Action::Finish(Finish { outcome, attempts })
}

#[test]
fn a_success_finishes_the_request() {
    let mut d = Driver::new(3, Box::new(Fixed::new(ms(100))));
    // t=0: the first attempt goes to endpoint 0 with a 100 ms timeout; wake me when it expires.
    let (mut call, out) = d.start(true);
    assert_eq!(out, vec![send(0, 0, Some(ms(100))), Action::WakeAt(ms(100))]);
    // t=40: endpoint 0 answers: the request succeeded with one attempt.
    let out = d.at(ms(40)).end(&mut call, 0, Feedback::success(ms(40)));
    assert_eq!(out, vec![finish(Outcome::Success, 1)]);
    assert!(call.is_finished());
    assert_eq!(d.feedback(), vec![(0, Outcome::Success)]);
    // t=100: the wake asked for finds nothing to do.
    assert_eq!(d.at(ms(100)).wake(&mut call), vec![]);
}

#[test]
fn an_endpoint_answering_errors_is_picked_three_times_then_not_until_its_ejection_ends() {
    use crate::balance::OutlierConfig;
    let mut d = Driver::new(3, Box::new(NoTimeout));
    let config = OutlierConfig {
        consecutive_failures: 3,
        base_ejection: ms(1000),
        max_ejection: ms(5000),
        max_ejected: 0.5,
        ..OutlierConfig::default()
    };
    d.policy.outlier = Some(config.build(3));
    // One request every 10 ms; endpoint 1 answers each with an error at once, the others succeed.
    // Returns the endpoints picked and the ejections announced.
    let run = |d: &mut Driver, from: u64, to: u64| {
        let (mut picks, mut ejections) = (Vec::new(), Vec::new());
        for t in (from..to).step_by(10) {
            let (mut call, out) = d.at(ms(t)).start(true);
            let Action::Send { endpoint, .. } = out[0] else { panic!("{out:?}") };
            picks.push(endpoint);
            let outcome = if endpoint == 1 { Outcome::Error } else { Outcome::Success };
            let out = d.end(&mut call, 0, Feedback::new(outcome, Duration::ZERO));
            ejections.extend(out.iter().filter_map(|a| if let Action::Eject(e) = a { Some(*e) } else { None }));
        }
        (picks, ejections)
    };
    let (picks, ejections) = run(&mut d, 0, 1000);
    // Round robin picks 1 at 10, 40 and 70 ms; the third error ejects it until 1070 ms.
    assert_eq!(picks.iter().filter(|&&e| e == 1).count(), 3);
    assert_eq!(&picks[..9], [0, 1, 2, 0, 1, 2, 0, 1, 2]);
    assert!(picks[9..].iter().all(|&e| e != 1), "{picks:?}");
    assert_eq!(ejections, [Ejection { endpoint: 1, duration: ms(1000), nth: 1, reason: EjectionReason::Failures }]);
    // At 1070 ms it is back on probation: its next error ejects it again at once, for 2 s.
    let (picks, ejections) = run(&mut d, 1000, 1070);
    assert!(picks.iter().all(|&e| e != 1));
    assert!(ejections.is_empty());
    let (picks, ejections) = run(&mut d, 1070, 3000);
    let first = picks.iter().position(|&e| e == 1).expect("picked again");
    assert_eq!(picks.iter().filter(|&&e| e == 1).count(), 1, "{picks:?}");
    let at = 1070 + 10 * first as u64;
    assert!(at < 1100, "picked at {at} ms");
    assert_eq!(ejections, [Ejection { endpoint: 1, duration: ms(2000), nth: 2, reason: EjectionReason::Failures }]);
}

#[test]
fn a_retry_avoids_an_ejected_endpoint_even_if_it_must_go_where_it_went_before() {
    use crate::balance::OutlierConfig;
    let mut d = Driver::new(2, Box::new(NoTimeout)).retries(2, Backoff::none());
    let config = OutlierConfig { consecutive_failures: 1, max_ejected: 0.5, ..OutlierConfig::default() };
    d.policy.outlier = Some(config.build(2));
    // Endpoint 0 fails (ejected); the retry goes to 1, which fails too (the share is full).
    let (mut call, _) = d.start(true);
    let out = d.end(&mut call, 0, Feedback::new(Outcome::Error, Duration::ZERO));
    let ejection = Ejection { endpoint: 0, duration: ms(30_000), nth: 1, reason: EjectionReason::Failures };
    assert_eq!(out, vec![Action::Eject(ejection), send(1, 1, None)]);
    assert_eq!(d.end(&mut call, 1, Feedback::new(Outcome::Error, Duration::ZERO)), vec![finish(Outcome::Error, 2)]);
    // The next request's retry has tried every endpoint left: it goes to 1 again, not to 0.
    let (mut call, out) = d.start(true);
    assert_eq!(out, vec![send_with_fallback(0, 1, None)]);
    assert_eq!(d.end(&mut call, 0, Feedback::new(Outcome::Error, Duration::ZERO)), vec![send(1, 1, None)]);
}

#[test]
fn a_retired_endpoint_gets_no_new_attempt_while_its_attempt_in_flight_ends_as_usual() {
    let mut d = Driver::new(3, Box::new(NoTimeout)).retries(4, Backoff::none());
    // Request A's first attempt goes to endpoint 0; then endpoint 0 leaves the set.
    let (mut a, out) = d.start(true);
    assert_eq!(out, vec![send_with_fallback(0, 0, None)]);
    d.policy.retire(0);
    // New requests go to 1 and 2 in turn, never to 0.
    for expected in [1, 2, 1, 2] {
        let (mut call, out) = d.start(true);
        assert_eq!(out, vec![send_with_fallback(0, expected, None)]);
        d.end(&mut call, 0, Feedback::success(ms(1)));
    }
    // A's attempt to 0 ends as usual, its feedback to endpoint 0; its retries go to 1 and 2.
    assert_eq!(d.end(&mut a, 0, Feedback::new(Outcome::Error, ms(5))), vec![send_with_fallback(1, 1, None)]);
    assert_eq!(d.feedback().get(4), Some(&(0, Outcome::Error)));
    assert_eq!(d.end(&mut a, 1, Feedback::new(Outcome::Error, ms(5))), vec![send_with_fallback(2, 2, None)]);
    // Every endpoint tried: round robin's turn is 0's, but the retry goes to a live one again.
    assert_eq!(d.end(&mut a, 2, Feedback::new(Outcome::Error, ms(5))), vec![send(3, 1, None)]);
    // Every endpoint retired: no attempt at all. Restored, endpoint 0 is picked again.
    d.policy.retire(1);
    d.policy.retire(2);
    assert_eq!(d.start(true).1, vec![finish(Outcome::Rejected, 0)]);
    d.policy.restore(0);
    assert!(matches!(d.start(true).1[..], [Action::Send { endpoint: 0, .. }]));
}

#[test]
fn a_grown_policy_sends_to_the_new_endpoint_and_keeps_the_old_ones_state() {
    use crate::balance::OutlierConfig;
    let mut d = Driver::new(2, Box::new(NoTimeout));
    let config = OutlierConfig { consecutive_failures: 1, max_ejected: 0.5, ..OutlierConfig::default() };
    d.policy.outlier = Some(config.build(2));
    // Endpoint 0 fails once: ejected for 30 s.
    let (mut call, _) = d.start(true);
    assert!(matches!(d.end(&mut call, 0, Feedback::new(Outcome::Error, ms(1)))[..], [Action::Eject(_), ..]));
    // A third endpoint joins: requests go to 1 and 2; 0 stays ejected.
    d.policy.grow(3);
    let picks: Vec<EndpointId> = (0..4)
        .map(|_| {
            let (mut call, out) = d.start(true);
            d.end(&mut call, 0, Feedback::success(ms(1)));
            match out[..] {
                [Action::Send { endpoint, .. }] => endpoint,
                _ => panic!("{out:?}"),
            }
        })
        .collect();
    assert_eq!(picks, [1, 2, 1, 2]);
}

#[test]
fn a_timeout_is_retried_on_another_endpoint() {
    let mut d = Driver::new(3, Box::new(Fixed::new(ms(100)))).retries(3, Backoff::none());
    let (mut call, _) = d.start(true);
    // t=100: attempt 0 expires; it is cancelled and retried at once on endpoint 1.
    let out = d.at(ms(100)).wake(&mut call);
    assert_eq!(out, vec![expire(0, 0), send_with_fallback(1, 1, Some(ms(100))), Action::WakeAt(ms(200))]);
    // t=130: the retry answers.
    let out = d.at(ms(130)).end(&mut call, 1, Feedback::success(ms(30)));
    assert_eq!(out, vec![finish(Outcome::Success, 2)]);
    // t=150: endpoint 0's late answer is ignored.
    assert_eq!(d.at(ms(150)).end(&mut call, 0, Feedback::success(ms(150))), vec![]);
    assert_eq!(d.feedback(), vec![(0, Outcome::TimedOut), (1, Outcome::Success)]);
}

/// The timeout of an attempt fired, and the call keeps waiting for it (hedge on timeout).
fn overdue(attempt: u32, endpoint: EndpointId) -> Action {
    Action::Overdue { attempt, endpoint }
}

#[test]
fn hedging_on_timeout_keeps_the_slow_attempt_and_its_late_answer_wins() {
    let mut d = Driver::new(3, Box::new(Fixed::new(ms(100)))).retries(3, Backoff::none());
    d.class().hedge_on_timeout = true;
    let (mut call, _) = d.start(true);
    // t=100: attempt 0 is overdue: it keeps running while the retry goes to endpoint 1.
    let out = d.at(ms(100)).wake(&mut call);
    assert_eq!(out, vec![overdue(0, 0), send_racing(1, 1, Some(ms(100))), Action::WakeAt(ms(200))]);
    assert!(call.is_waiting_for(0) && call.is_waiting_for(1));
    // t=120: attempt 0's answer comes first: the request succeeds and the retry is cancelled.
    let out = d.at(ms(120)).end(&mut call, 0, Feedback::success(ms(120)));
    assert_eq!(out, vec![cancel(1, 1), finish(Outcome::Success, 2)]);
    // The balancer hears of each attempt once, as it ended.
    assert_eq!(d.feedback(), vec![(0, Outcome::Success), (1, Outcome::Cancelled)]);
}

#[test]
fn hedging_on_timeout_lets_the_retry_win_and_times_out_each_attempt_once() {
    let mut d = Driver::new(3, Box::new(Fixed::new(ms(100)))).retries(2, Backoff::none());
    d.class().hedge_on_timeout = true;
    let (mut call, _) = d.start(true);
    d.at(ms(100)).wake(&mut call);
    // t=200: the retry is overdue too; no attempts are left, so the call waits for both.
    let out = d.at(ms(200)).wake(&mut call);
    assert_eq!(out, vec![overdue(1, 1)]);
    // t=210: an error from attempt 0 sends no new retry: the one it caused is still running.
    assert_eq!(d.at(ms(210)).end(&mut call, 0, Feedback::new(Outcome::Error, ms(210))), vec![]);
    // t=230: the retry answers.
    let out = d.at(ms(230)).end(&mut call, 1, Feedback::success(ms(130)));
    assert_eq!(out, vec![finish(Outcome::Success, 2)]);
}

#[test]
fn hedging_on_timeout_fails_the_request_with_the_last_attempt_s_failure() {
    let mut d = Driver::new(3, Box::new(Fixed::new(ms(100)))).retries(2, Backoff::none());
    d.class().hedge_on_timeout = true;
    let (mut call, _) = d.start(true);
    d.at(ms(100)).wake(&mut call);
    // t=150: the retry fails, and no attempts are left: the call waits for the overdue one.
    assert_eq!(d.at(ms(150)).end(&mut call, 1, Feedback::new(Outcome::Error, ms(50))), vec![]);
    // t=160: the overdue attempt fails too, and nothing is left: the request fails.
    let out = d.at(ms(160)).end(&mut call, 0, Feedback::new(Outcome::Error, ms(160)));
    assert_eq!(out, vec![finish(Outcome::Error, 2)]);
}

/// A fixed timeout that waits `patience` for an attempt kept past its timeout, and records the
/// waits of the attempts the call gave up unanswered.
struct Patient {
    fixed: Fixed,
    patience: Duration,
    abandoned: Arc<Mutex<Vec<(u32, Duration)>>>,
}

impl TimeoutPolicy for Patient {
    fn timeout(&mut self, now: Time, attempt: u32, rng: Rng<'_>) -> Option<Duration> {
        self.fixed.timeout(now, attempt, rng)
    }
    fn on_result(&mut self, _: Time, _: u32, _: Option<Duration>, _: AttemptResult) {}
    fn current(&self) -> Option<Duration> {
        self.fixed.current()
    }
    fn on_abandoned(&mut self, _now: Time, attempt: u32, waited: Duration) {
        self.abandoned.lock().expect("not poisoned").push((attempt, waited));
    }
    fn patience(&self) -> Option<Duration> {
        Some(self.patience)
    }
}

#[test]
fn an_overdue_attempt_is_abandoned_after_the_policy_s_patience_only_while_another_runs() {
    let abandoned = Arc::new(Mutex::new(Vec::new()));
    let policy = Patient { fixed: Fixed::new(ms(100)), patience: ms(250), abandoned: abandoned.clone() };
    let mut d = Driver::new(3, Box::new(policy)).retries(2, Backoff::none());
    d.class().hedge_on_timeout = true;
    let (mut call, _) = d.start(true);
    // t=100: attempt 0 is overdue, kept until 250 ms after its start; the retry goes out.
    let out = d.at(ms(100)).wake(&mut call);
    assert_eq!(out, vec![overdue(0, 0), send_racing(1, 1, Some(ms(100))), Action::WakeAt(ms(200))]);
    // t=200: the retry is overdue too, kept until t=350; no attempts are left.
    assert_eq!(d.at(ms(200)).wake(&mut call), vec![overdue(1, 1), Action::WakeAt(ms(250))]);
    // t=250: attempt 0 has waited its patience while the retry runs: given up as lost (counted
    // as timed out once, at t=100, so the cancel says Cancelled); the balancer hears it timed out.
    let out = d.at(ms(250)).wake(&mut call);
    let cancelled = Action::Cancel { attempt: 0, endpoint: 0, reason: Outcome::Cancelled };
    assert_eq!(out, vec![cancelled, Action::WakeAt(ms(350))]);
    // t=350: the retry has waited its patience too, but it is the last live attempt: patience is
    // a learned number, and a learned number does not end a request. It is kept.
    assert_eq!(d.at(ms(350)).wake(&mut call), vec![]);
    assert!(call.is_waiting_for(1));
    // t=900: it answers, and the request succeeds.
    let out = d.at(ms(900)).end(&mut call, 1, Feedback::success(ms(800)));
    assert_eq!(out, vec![finish(Outcome::Success, 2)]);
    assert_eq!(d.feedback(), vec![(0, Outcome::TimedOut), (1, Outcome::Success)]);
    // The policy learnt that attempt 0 took at least its wait.
    assert_eq!(*abandoned.lock().expect("not poisoned"), vec![(0, ms(250))]);
}

#[test]
fn a_lost_attempt_is_raced_from_the_budgets_allowance_for_lost_attempts() {
    let patient = || Patient { fixed: Fixed::new(ms(100)), patience: ms(250), abandoned: Arc::default() };
    let mut d = Driver::new(3, Box::new(patient())).retries(2, Backoff::none());
    d.class().hedge_on_timeout = true;
    // One retry in the budget (a floor of 1 a second over a 1 s window, nothing per request), and
    // as much again for attempts lost.
    d.policy.retry.budget = Some(RetryBudget::new(Duration::from_secs(1), 1, 0.0));
    let (mut a, _) = d.start(true);
    let (mut b, _) = d.at(ms(1)).start(true);
    let (mut c, _) = d.at(ms(2)).start(true);
    // t=100: a's timeout fires and its race takes the budget's one retry.
    let out = d.at(ms(100)).wake(&mut a);
    assert_eq!(out, vec![overdue(0, 0), send_racing(1, 1, Some(ms(100))), Action::WakeAt(ms(200))]);
    // t=101, t=102: b's and c's find it spent: each keeps its only attempt.
    assert_eq!(d.at(ms(101)).wake(&mut b), vec![overdue(0, 1), Action::WakeAt(ms(251))]);
    assert_eq!(d.at(ms(102)).wake(&mut c), vec![overdue(0, 2), Action::WakeAt(ms(252))]);
    // t=251: b's attempt has waited its patience unanswered, lost as far as the caller can tell
    // (a hung endpoint): kept, and raced from the allowance for lost attempts.
    assert_eq!(d.at(ms(251)).wake(&mut b), vec![send_racing(1, 2, Some(ms(100))), Action::WakeAt(ms(351))]);
    // t=252: that allowance is spent too: c's attempt is only kept, until it answers or a deadline.
    assert_eq!(d.at(ms(252)).wake(&mut c), vec![]);
    assert!(c.is_waiting_for(0));
    // b's race answers first and wins.
    let out = d.at(ms(300)).end(&mut b, 1, Feedback::success(ms(49)));
    assert_eq!(out, vec![cancel(0, 1), finish(Outcome::Success, 2)]);
}

/// A fixed timeout that says it was learned (as the adaptive timeout, the Controller and the
/// Optimizer do).
struct Learned(Fixed);

impl TimeoutPolicy for Learned {
    fn timeout(&mut self, now: Time, attempt: u32, rng: Rng<'_>) -> Option<Duration> {
        self.0.timeout(now, attempt, rng)
    }
    fn on_result(&mut self, _: Time, _: u32, _: Option<Duration>, _: AttemptResult) {}
    fn current(&self) -> Option<Duration> {
        self.0.current()
    }
    fn learned(&self) -> bool {
        true
    }
}

#[test]
fn a_users_timeout_fails_the_request_with_no_retry_left_as_envoys_per_try_timeout() {
    let mut d = Driver::new(3, Box::new(Fixed::new(ms(100))));
    let (mut call, _) = d.start(true);
    // t=100: the timeout fires and no retry is allowed: the attempt is cancelled, the request
    // fails (a 504 at the proxy).
    let out = d.at(ms(100)).wake(&mut call);
    assert_eq!(out, vec![expire(0, 0), finish(Outcome::TimedOut, 1)]);
}

#[test]
fn a_learned_timeout_never_ends_the_last_attempt() {
    // No retry allowed, timed-out attempts dropped: a learned timeout still keeps the only one.
    let mut d = Driver::new(3, Box::new(Learned(Fixed::new(ms(100)))));
    let (mut call, _) = d.start(true);
    // t=100: it fires: counted as a timeout (overdue), but kept: no retry could stand in for it.
    assert_eq!(d.at(ms(100)).wake(&mut call), vec![overdue(0, 0)]);
    // t=1200: the slow route's answer comes, and the request succeeds.
    let out = d.at(ms(1200)).end(&mut call, 0, Feedback::success(ms(1200)));
    assert_eq!(out, vec![finish(Outcome::Success, 1)]);
    // With a retry allowed it replaces the attempt, as before: the retry is then the last one.
    let mut d = Driver::new(3, Box::new(Learned(Fixed::new(ms(100))))).retries(2, Backoff::none());
    let (mut call, _) = d.start(true);
    let out = d.at(ms(100)).wake(&mut call);
    assert_eq!(out, vec![expire(0, 0), send(1, 1, Some(ms(100))), Action::WakeAt(ms(200))]);
    assert_eq!(d.at(ms(200)).wake(&mut call), vec![overdue(1, 1)]);
    // Only the deadline ends it.
    let mut d = Driver::new(3, Box::new(Learned(Fixed::new(ms(100)))));
    d.class().deadline = Some(ms(300));
    let (mut call, _) = d.start(true);
    assert_eq!(d.at(ms(100)).wake(&mut call), vec![overdue(0, 0), Action::WakeAt(ms(300))]);
    let out = d.at(ms(300)).wake(&mut call);
    assert_eq!(out, vec![cancel(0, 0), finish(Outcome::TimedOut, 1)]);
}

#[test]
fn an_attempt_a_learned_timeout_cut_is_no_failure_to_the_outlier_detector() {
    use crate::balance::OutlierConfig;
    // Two endpoints, ejection after 2 failures in a row, a retry allowed: each of two requests'
    // first attempt goes to endpoint 0 (round robin) and is cut at 100 ms; its retry on 1 wins.
    let ejections = |timeout: Box<dyn TimeoutPolicy>| {
        let mut d = Driver::new(2, timeout).retries(2, Backoff::none());
        let config = OutlierConfig { consecutive_failures: 2, max_ejected: 0.5, ..OutlierConfig::default() };
        d.policy.outlier = Some(config.build(2));
        let mut ejected = Vec::new();
        for i in 0..2 {
            let t = 1000 * i;
            let (mut call, out) = d.at(ms(t)).start(true);
            assert_eq!(out[0], send_with_fallback(0, 0, Some(ms(100))), "request {i}");
            let out = d.at(ms(t + 100)).wake(&mut call);
            ejected.extend(out.iter().filter(|a| matches!(a, Action::Eject(_))).cloned());
            assert_eq!(out.last(), Some(&Action::WakeAt(ms(t + 200))), "request {i}: {out:?}");
            let out = d.at(ms(t + 150)).end(&mut call, 1, Feedback::success(ms(50)));
            assert_eq!(out, vec![finish(Outcome::Success, 2)]);
        }
        ejected
    };
    // A user's timeout says the endpoint failed: the second cut ejects it.
    let user = ejections(Box::new(Fixed::new(ms(100))));
    assert!(matches!(user[..], [Action::Eject(Ejection { endpoint: 0, nth: 1, .. })]), "{user:?}");
    // A learned one only guessed: the endpoint keeps its place.
    assert_eq!(ejections(Box::new(Learned(Fixed::new(ms(100))))), vec![]);
}

#[test]
fn hedges_that_never_win_stop_but_for_probes_and_a_win_brings_them_back() {
    use crate::class::{RACE_PROBE_EVERY, RACE_WINDOW};
    // The work belongs to the request: the first attempt always answers first. A learned hedge
    // (a percentile of 10 ms) races it.
    let mut d = Driver::new(3, Box::new(NoTimeout));
    let mut hedge = PercentileHedge::new(PercentileHedgeConfig { max_extra: 1.0, ..Default::default() });
    (0..20).for_each(|_| hedge.on_latency(Time::ZERO, ms(10)));
    d.class().hedge = Some(Box::new(hedge));
    let mut hedged = 0;
    let request = |d: &mut Driver, i: u64, hedge_wins: bool| -> bool {
        let start = ms(1000 * i);
        let (mut call, _) = d.at(start).start(true);
        let out = d.at(start + ms(10) + PAST).wake(&mut call);
        let sent = out.iter().any(|a| matches!(a, Action::Send { attempt: 1, .. }));
        let winner = if sent && hedge_wins { 1 } else { 0 };
        // (An answer's latency feeds the percentile: a short one keeps it at 10 ms or below.)
        let out = d.at(start + ms(500)).end(&mut call, winner, Feedback::success(ms(5)));
        assert!(matches!(out.last(), Some(Action::Finish(_))), "{out:?}");
        sent
    };
    // Every request races and loses until a whole window of races is lost.
    for i in 0..u64::from(RACE_WINDOW) {
        assert!(request(&mut d, i, false), "request {i} is hedged");
        hedged += 1;
    }
    // Then one request in 16 is hedged, a probe.
    let probes: Vec<u64> = (0..32).filter(|&i| request(&mut d, 100 + i, false)).collect();
    assert_eq!(probes.len(), 2);
    assert_eq!(probes[0], u64::from(RACE_PROBE_EVERY) - 1);
    hedged += probes.len();
    // A probe that wins opens the way again.
    let mut n = 200;
    while !request(&mut d, n, true) {
        n += 1;
    }
    assert!(request(&mut d, n + 1, false), "hedging again after a win");
    assert_eq!(hedged, 34);
}

#[test]
fn a_learned_timeouts_race_stops_where_it_never_wins_and_the_attempt_is_kept() {
    use crate::class::RACE_WINDOW;
    let mut d = Driver::new(3, Box::new(Learned(Fixed::new(ms(100))))).retries(2, Backoff::none());
    d.class().hedge_on_timeout = true;
    let mut raced = 0;
    for i in 0..u64::from(RACE_WINDOW) + 8 {
        let start = ms(1000 * i);
        let (mut call, _) = d.at(start).start(true);
        let out = d.at(start + ms(100)).wake(&mut call);
        let retried = out.iter().any(|a| matches!(a, Action::Send { attempt: 1, .. }));
        raced += usize::from(retried);
        // The first attempt answers first every time (its work is the request's).
        let out = d.at(start + ms(300)).end(&mut call, 0, Feedback::success(ms(300)));
        assert!(matches!(out.last(), Some(Action::Finish(f)) if f.outcome == Outcome::Success), "{out:?}");
    }
    // The timeout fired on every request; its retries stopped after a window of lost races.
    assert_eq!(raced, RACE_WINDOW as usize);
}
#[test]
fn an_attempt_says_whether_its_refusal_would_cost_the_request_little() {
    // Two attempts over three endpoints: the first one's refusal would be retried elsewhere.
    let mut d = Driver::new(3, Box::new(Fixed::new(ms(100)))).retries(2, Backoff::none());
    let (mut call, out) = d.start(true);
    assert_eq!(out, vec![send_with_fallback(0, 0, Some(ms(100))), Action::WakeAt(ms(100))]);
    // Its timeout sends the last attempt: nothing would retry a refusal of that one.
    let out = d.at(ms(100)).wake(&mut call);
    assert_eq!(out, vec![expire(0, 0), send(1, 1, Some(ms(100))), Action::WakeAt(ms(200))]);
    // A last attempt after a refusal has none, but says the service refused the request already.
    let (mut call, _) = d.at(ms(300)).start(true);
    let out = d.at(ms(301)).end(&mut call, 0, Feedback::new(Outcome::Rejected, ms(1)));
    assert_eq!(out, vec![after_refusal(send(1, 0, Some(ms(100))))]);
    // With one endpoint there is nowhere else, however many attempts are allowed.
    let mut d = Driver::new(1, Box::new(NoTimeout)).retries(3, Backoff::none());
    assert_eq!(d.start(true).1, vec![send(0, 0, None)]);
}

#[test]
fn a_429_is_retried_at_once_elsewhere_even_when_not_idempotent() {
    let backoff = Backoff { jitter: false, ..Backoff::exponential(ms(50), ms(500)) };
    let mut d = Driver::new(3, Box::new(NoTimeout)).retries(3, backoff);
    let (mut call, out) = d.start(false);
    assert_eq!(out, vec![send_with_fallback(0, 0, None)]);
    // t=1: endpoint 0 rejects (nothing processed): retry on endpoint 1 with no backoff.
    let out = d.at(ms(1)).end(&mut call, 0, Feedback::new(Outcome::Rejected, ms(1)));
    assert_eq!(out, vec![after_refusal(send_with_fallback(1, 1, None))]);
    // t=2: endpoint 1 is down: endpoint 2 gets the last attempt.
    let out = d.at(ms(2)).end(&mut call, 1, Feedback::new(Outcome::Unavailable, ms(1)));
    assert_eq!(out, vec![send(2, 2, None)]);
    // t=3: endpoint 2 rejects too, and the attempts are spent: the request is rejected.
    let out = d.at(ms(3)).end(&mut call, 2, Feedback::new(Outcome::Rejected, ms(1)));
    assert_eq!(out, vec![finish(Outcome::Rejected, 3)]);
}

#[test]
fn a_refusal_passed_on_from_further_down_is_not_retried_unless_the_policy_says_so() {
    let mut d = Driver::new(3, Box::new(NoTimeout)).retries(3, Backoff::none());
    let (mut call, out) = d.start(true);
    assert_eq!(out, vec![send_with_fallback(0, 0, None)]);
    // Endpoint 0's own call was refused: another endpoint would meet the same overload.
    let out = d.at(ms(1)).end(&mut call, 0, Feedback::new(Outcome::Overloaded, ms(1)));
    assert_eq!(out, vec![finish(Outcome::Overloaded, 1)]);
    // BLOC's gateway retries it on another frontend, as it does an error.
    d.policy.retry.retry_overloaded = true;
    let (mut call, out) = d.at(ms(2)).start(true);
    assert_eq!(out, vec![send_with_fallback(0, 1, None)]);
    let out = d.at(ms(3)).end(&mut call, 0, Feedback::new(Outcome::Overloaded, ms(1)));
    assert_eq!(out, vec![send_with_fallback(1, 2, None)]);
}

#[test]
fn an_error_is_retried_after_the_backoff_only_when_idempotent() {
    let backoff = Backoff { jitter: false, ..Backoff::exponential(ms(10), ms(500)) };
    let mut d = Driver::new(2, Box::new(NoTimeout)).retries(3, backoff.clone());
    // Not idempotent: a 5xx may have done the work, so it is not retried.
    let (mut call, _) = d.start(false);
    let out = d.at(ms(5)).end(&mut call, 0, Feedback::new(Outcome::Error, ms(5)));
    assert_eq!(out, vec![finish(Outcome::Error, 1)]);
    // Idempotent: wait the 10 ms backoff, then retry on the other endpoint.
    let mut d = Driver::new(2, Box::new(NoTimeout)).retries(3, backoff);
    let (mut call, _) = d.start(true);
    let out = d.at(ms(5)).end(&mut call, 0, Feedback::new(Outcome::Error, ms(5)));
    assert_eq!(out, vec![Action::WakeAt(ms(15))]);
    assert_eq!(d.at(ms(15)).wake(&mut call), vec![send_with_fallback(1, 1, None)]);
}

#[test]
fn a_hedge_after_patience_wins_and_the_first_attempt_is_cancelled() {
    let mut d = Driver::new(3, Box::new(NoTimeout));
    d.class().hedge = Some(Box::new(Speculative::new(2, ms(30), None)));
    // t=0: attempt 0 to endpoint 0; wake at 30 ms for the hedge.
    let (mut call, out) = d.start(true);
    assert_eq!(out, vec![send(0, 0, None), Action::WakeAt(ms(30))]);
    // t=30: no answer yet: the hedge goes to endpoint 1; attempts are 2 in all, so nothing else.
    assert_eq!(d.at(ms(30)).wake(&mut call), vec![send_racing(1, 1, None)]);
    // t=45: the hedge answers first: the first attempt is cancelled.
    let out = d.at(ms(45)).end(&mut call, 1, Feedback::success(ms(15)));
    assert_eq!(out, vec![cancel(0, 0), finish(Outcome::Success, 2)]);
    assert_eq!(d.feedback(), vec![(1, Outcome::Success), (0, Outcome::Cancelled)]);
}

#[test]
fn the_deadline_clamps_an_attempt_timeout_and_ends_the_request() {
    let mut d = Driver::new(3, Box::new(Fixed::new(ms(100)))).retries(5, Backoff::none());
    d.class().deadline = Some(ms(150));
    let (mut call, out) = d.start(true);
    assert_eq!(out, vec![send_with_fallback(0, 0, Some(ms(100))), Action::WakeAt(ms(100))]);
    assert_eq!(call.deadline(), Some(ms(150)));
    // t=100: the retry gets only the 50 ms left before the deadline.
    let out = d.at(ms(100)).wake(&mut call);
    assert_eq!(
        out,
        vec![
            expire(0, 0),
            Action::Send {
                attempt: 1,
                endpoint: 1,
                timeout: Some(ms(50)),
                policy_timeout: Some(ms(100)),
                marks: FALLBACK,
            },
            Action::WakeAt(ms(150))
        ]
    );
    // t=150: the deadline passes: the live attempt is cancelled and the request timed out.
    let out = d.at(ms(150)).wake(&mut call);
    assert_eq!(out, vec![cancel(1, 1), finish(Outcome::TimedOut, 2)]);
}

#[test]
fn a_propagated_deadline_tighter_than_the_policy_wins() {
    let mut d = Driver::new(1, Box::new(NoTimeout));
    d.class().deadline = Some(ms(150));
    let out = d.at(ms(10)).step(|ctx| {
        Call::start(ctx, true, Some(ms(60)));
    });
    assert_eq!(out, vec![send_clamped(0, 0, ms(50), None), Action::WakeAt(ms(60))]);
}

#[test]
fn no_endpoint_rejects_the_request() {
    let mut d = Driver::new(0, Box::new(Fixed::new(ms(100))));
    let (call, out) = d.start(true);
    assert_eq!(out, vec![finish(Outcome::Rejected, 0)]);
    assert!(call.is_finished());
}

#[test]
fn an_empty_retry_budget_stops_retries() {
    let mut d = Driver::new(2, Box::new(Fixed::new(ms(100)))).retries(3, Backoff::none());
    d.policy.retry.budget = Some(RetryBudget::new(Duration::from_secs(10), 0, 0.0));
    let (mut call, _) = d.start(true);
    let out = d.at(ms(100)).wake(&mut call);
    assert_eq!(out, vec![expire(0, 0), finish(Outcome::TimedOut, 1)]);
}

#[test]
fn a_hedge_spends_the_budget_a_retry_then_lacks() {
    // Each request earns one retry-or-hedge (ratio 1, no floor); retries and hedges share it.
    let mut d = Driver::new(3, Box::new(Fixed::new(ms(100)))).retries(3, Backoff::none());
    d.policy.retry.budget = Some(RetryBudget::new(Duration::from_secs(10), 0, 1.0));
    d.class().hedge = Some(Box::new(Speculative::new(2, ms(30), None)));
    let (mut call, _) = d.start(true);
    // t=30: the hedge takes the one allowance.
    assert_eq!(d.at(ms(30)).wake(&mut call), vec![send_racing(1, 1, Some(ms(100))), Action::WakeAt(ms(100))]);
    // t=100, t=130: both attempts time out, and neither may be retried: the budget is spent.
    assert_eq!(d.at(ms(100)).wake(&mut call), vec![expire(0, 0), Action::WakeAt(ms(130))]);
    assert_eq!(d.at(ms(130)).wake(&mut call), vec![expire(1, 1), finish(Outcome::TimedOut, 2)]);
}

#[test]
fn once_the_shared_budget_is_spent_neither_retries_nor_hedges_go_out() {
    // A budget of exactly two (a floor of 2 a second over a 1 s window, nothing per request).
    let mut d = Driver::new(3, Box::new(NoTimeout)).retries(3, Backoff::none());
    d.policy.retry.budget = Some(RetryBudget::new(Duration::from_secs(1), 2, 0.0));
    d.class().hedge = Some(Box::new(Speculative::new(2, ms(30), None)));
    let (mut first, _) = d.start(true);
    let (mut second, _) = d.at(ms(1)).start(true);
    let (mut third, _) = d.at(ms(2)).start(true);
    // Allowance 1: the first request's hedge.
    assert_eq!(d.at(ms(30)).wake(&mut first), vec![send_racing(1, 1, None)]);
    // Allowance 2: the second request's attempt fails and is retried; a refusal of the retry
    // would not be (the budget is spent), so it goes out without a fallback.
    let out = d.at(ms(31)).end(&mut second, 0, Feedback::new(Outcome::Error, ms(30)));
    assert_eq!(out, vec![send(1, 2, None)]);
    // The third's hedge finds the budget spent, and so does its retry: the request fails.
    assert_eq!(d.at(ms(32)).wake(&mut third), vec![]);
    let out = d.at(ms(33)).end(&mut third, 0, Feedback::new(Outcome::Error, ms(31)));
    assert_eq!(out, vec![finish(Outcome::Error, 1)]);
}

#[test]
fn without_a_budget_hedges_are_limited_by_their_policy_alone() {
    let mut d = Driver::new(4, Box::new(NoTimeout));
    d.policy.retry.budget = None;
    d.class().hedge = Some(Box::new(Speculative::new(4, ms(30), None)));
    let (mut call, _) = d.start(true);
    assert_eq!(d.at(ms(30)).wake(&mut call), vec![send_racing(1, 1, None), Action::WakeAt(ms(60))]);
    assert_eq!(d.at(ms(60)).wake(&mut call), vec![send_racing(2, 2, None), Action::WakeAt(ms(90))]);
    assert_eq!(d.at(ms(90)).wake(&mut call), vec![send_racing(3, 3, None)]);
}

/// speculative-task.txt's Monix test, "succeed even if the first attempt fails":
/// `speculatively(attempts = 3, patience = 30 ms, timeout = 300 ms)` with attempt 0 failing after
/// 1 ms, attempt 1 succeeding after 1 ms and attempt 2 (never started) taking 100 ms. The result is
/// attempt 1's, and after 250 ms only attempts 0 and 1 have run.
#[test]
fn monix_succeed_even_if_the_first_attempt_fails() {
    let mut d = Driver::new(3, Box::new(NoTimeout));
    d.class().hedge = Some(Box::new(Speculative::new(3, ms(30), None)));
    d.class().deadline = Some(ms(300));
    let mut sent = Vec::new();
    let mut record = |out: &[Action]| {
        sent.extend(out.iter().filter_map(|a| match a {
            Action::Send { attempt, .. } => Some(*attempt),
            _ => None,
        }))
    };
    // t=0: attempt 0 starts, bounded by the 300 ms timeout; the first hedge is due at 30 ms.
    let (mut call, out) = d.start(true);
    assert_eq!(out, vec![send_clamped(0, 0, ms(300), None), Action::WakeAt(ms(30))]);
    record(&out);
    // t=1: attempt 0 fails. Hedges are still to come, so the request goes on.
    let out = d.at(ms(1)).end(&mut call, 0, Feedback::new(Outcome::Error, ms(1)));
    assert_eq!(out, vec![]);
    // t=30: attempt 1 starts; the next hedge is due at 60 ms.
    let out = d.at(ms(30)).wake(&mut call);
    assert_eq!(out, vec![send_clamped(1, 1, ms(270), None), Action::WakeAt(ms(60))]);
    record(&out);
    // t=31: attempt 1 succeeds: "result2".
    let out = d.at(ms(31)).end(&mut call, 1, Feedback::success(ms(1)));
    assert_eq!(out, vec![finish(Outcome::Success, 2)]);
    // t=60 and t=250: the scheduler ticks on; nothing else runs.
    assert_eq!(d.at(ms(60)).wake(&mut call), vec![]);
    assert_eq!(d.at(ms(250)).wake(&mut call), vec![]);
    assert_eq!(sent, vec![0, 1]);
}

#[test]
fn every_speculative_attempt_failing_fails_the_request() {
    let mut d = Driver::new(3, Box::new(NoTimeout));
    d.class().hedge = Some(Box::new(Speculative::new(2, ms(30), None)));
    let (mut call, _) = d.start(true);
    assert_eq!(d.at(ms(1)).end(&mut call, 0, Feedback::new(Outcome::Error, ms(1))), vec![]);
    assert_eq!(d.at(ms(30)).wake(&mut call), vec![send(1, 1, None)]);
    let out = d.at(ms(35)).end(&mut call, 1, Feedback::new(Outcome::Error, ms(5)));
    assert_eq!(out, vec![finish(Outcome::Error, 2)]);
}

#[test]
fn a_hedge_refused_by_its_budget_is_not_asked_again_at_the_same_instant() {
    let mut d = Driver::new(3, Box::new(NoTimeout));
    let mut hedge = PercentileHedge::new(PercentileHedgeConfig { max_extra: 0.0, ..Default::default() });
    (0..20).for_each(|_| hedge.on_latency(Time::ZERO, ms(10)));
    d.class().hedge = Some(Box::new(hedge));
    let (mut call, out) = d.start(true);
    let due = ms(10) + PAST;
    assert_eq!(out, vec![send(0, 0, None), Action::WakeAt(due)]);
    // Just past 10 ms: the hedge is due but the budget is empty: no hedge, and no wake at that
    // instant again (a driver in virtual time would spin on it forever).
    assert_eq!(d.at(due).wake(&mut call), vec![]);
    let out = d.at(ms(25)).end(&mut call, 0, Feedback::success(ms(25)));
    assert_eq!(out, vec![finish(Outcome::Success, 1)]);
}

#[test]
fn a_refused_hedge_with_nothing_live_ends_the_request() {
    let mut d = Driver::new(3, Box::new(NoTimeout));
    let mut hedge = PercentileHedge::new(PercentileHedgeConfig { max_extra: 0.0, ..Default::default() });
    (0..20).for_each(|_| hedge.on_latency(Time::ZERO, ms(10)));
    d.class().hedge = Some(Box::new(hedge));
    let (mut call, _) = d.start(true);
    // t=2: attempt 0 fails while a hedge is pending; past 10 ms the hedge is refused: nothing is
    // left.
    assert_eq!(d.at(ms(2)).end(&mut call, 0, Feedback::new(Outcome::Error, ms(2))), vec![]);
    assert_eq!(d.at(ms(10) + PAST).wake(&mut call), vec![finish(Outcome::Error, 1)]);
}

#[test]
fn a_refusal_from_the_only_endpoint_is_passed_on_not_sent_back() {
    let mut d = Driver::new(1, Box::new(NoTimeout)).retries(3, Backoff::none());
    let (mut call, out) = d.start(true);
    assert_eq!(out, vec![send(0, 0, None)]);
    // Refused, with nowhere else to go: the request is refused now, one attempt spent.
    let out = d.at(ms(1)).end(&mut call, 0, Feedback::new(Outcome::Rejected, ms(1)));
    assert_eq!(out, vec![finish(Outcome::Rejected, 1)]);
    // An error from it is retried there, as before.
    let (mut call, _) = d.start(true);
    let out = d.at(ms(2)).end(&mut call, 0, Feedback::new(Outcome::Unavailable, ms(1)));
    assert_eq!(out, vec![send(1, 0, None)]);
}

#[test]
fn a_refusal_with_nothing_live_sends_the_pending_hedge_at_once() {
    let mut d = Driver::new(3, Box::new(NoTimeout));
    d.class().hedge = Some(Box::new(Speculative::new(2, ms(800), None)));
    let (mut call, out) = d.start(true);
    assert_eq!(out, vec![send(0, 0, None), Action::WakeAt(ms(800))]);
    // t=1: refused, no retry left (one attempt): the hedge due at 800 ms is due now instead.
    assert_eq!(d.at(ms(1)).end(&mut call, 0, Feedback::new(Outcome::Rejected, ms(1))), vec![Action::WakeAt(ms(1))]);
    assert_eq!(d.wake(&mut call), vec![after_refusal(send(1, 1, None))]);
    // Refused again, no hedge left: the request ends now, not 800 ms later.
    let out = d.at(ms(2)).end(&mut call, 1, Feedback::new(Outcome::Rejected, ms(1)));
    assert_eq!(out, vec![finish(Outcome::Rejected, 2)]);
}

#[test]
fn the_percentile_hedge_spends_its_budget_on_late_attempts_only() {
    // Issue #15: every answer takes exactly 10 ms (a constant service time in virtual time), so
    // the live percentile is 10 ms too. 19 requests have deposited 0.95 tokens.
    let mut d = Driver::new(3, Box::new(NoTimeout));
    let mut hedge = PercentileHedge::new(PercentileHedgeConfig::default());
    (0..20).for_each(|_| hedge.on_latency(Time::ZERO, ms(10)));
    (0..19).for_each(|_| hedge.on_request(Time::ZERO));
    d.class().hedge = Some(Box::new(hedge));
    let due = ms(10) + PAST;
    // t=0: the 20th request makes the token whole; its hedge is due just past 10 ms.
    let (mut on_time, out) = d.start(true);
    assert_eq!(out, vec![send(0, 0, None), Action::WakeAt(due)]);
    // t=10: it answers at the percentile, before its hedge is due: no hedge, the token is kept.
    let out = d.at(ms(10)).end(&mut on_time, 0, Feedback::success(ms(10)));
    assert_eq!(out, vec![finish(Outcome::Success, 1)]);
    // The wake the driver had scheduled finds the call over and does nothing.
    assert_eq!(d.at(due).wake(&mut on_time), vec![]);
    // t=20: the next request's attempt is slow; just past 10 ms of waiting the kept token pays
    // for its hedge, which answers in 10 ms and wins.
    let start = ms(20);
    let (mut late, out) = d.at(start).start(true);
    assert_eq!(out, vec![send(0, 1, None), Action::WakeAt(start + due)]);
    assert_eq!(d.at(start + due).wake(&mut late), vec![send_racing(1, 2, None)]);
    let out = d.at(start + due + ms(10)).end(&mut late, 1, Feedback::success(ms(10)));
    assert_eq!(out, vec![cancel(0, 1), finish(Outcome::Success, 2)]);
}

#[test]
fn huge_durations_saturate_instead_of_overflowing() {
    let mut d = Driver::new(2, Box::new(Fixed::new(Duration::MAX)));
    d.class().deadline = Some(Duration::MAX);
    d.class().hedge = Some(Box::new(Speculative::new(2, Duration::MAX, None)));
    let (mut call, out) = d.at(ms(1)).start(true);
    assert_eq!(
        out,
        vec![send_clamped(0, 0, Duration::MAX - ms(1), Some(Duration::MAX)), Action::WakeAt(Duration::MAX)]
    );
    assert_eq!(d.at(ms(2)).end(&mut call, 0, Feedback::success(ms(1))), vec![finish(Outcome::Success, 1)]);
}

#[test]
fn the_same_seed_gives_the_same_actions() {
    let run = || {
        let backoff = Backoff::exponential(ms(10), ms(100));
        let mut d = Driver::new(3, Box::new(Fixed::new(ms(50)))).retries(4, backoff);
        let (mut call, mut all) = d.start(true);
        all.extend(d.at(ms(50)).wake(&mut call));
        let Some(Action::WakeAt(t)) = all.last().copied() else { panic!("{all:?}") };
        all.extend(d.at(t).wake(&mut call));
        all
    };
    let a = run();
    assert_eq!(a, run());
    // Send, wake, expire, a jittered backoff wake, the retry and its wake.
    assert_eq!(a.len(), 6, "{a:?}");
    assert!(matches!(a[4], Action::Send { attempt: 1, endpoint: 1, .. }), "{a:?}");
}

/// Invariants over many random scripts: whatever answers arrive and whenever, a call finishes
/// exactly once, reports as many attempts as it sent, never sends after finishing, ends or
/// cancels every attempt it sent, and never asks for a wake in the past.
#[test]
fn random_scripts_keep_the_call_invariants() {
    use crate::balance::{LeastRequest, OutlierConfig, Prequal, PrequalConfig, ProbeReply};
    use crate::timeout::ExpBackoff;
    use rand::{Rng as _, SeedableRng};
    let outcomes = [Outcome::Success, Outcome::Error, Outcome::Rejected, Outcome::Unavailable];
    let mut script = Pcg64Mcg::seed_from_u64(7);
    let (mut multi_attempt_cases, mut timed_out_cases, mut overdue_cases, mut ejections) = (0, 0, 0, 0);
    let (mut awaited_probes, mut lost_probes) = (0, 0);
    // Every other case ejects an endpoint at its first failure, for 20 to 40 ms.
    let outlier = OutlierConfig {
        consecutive_failures: 1,
        base_ejection: ms(20),
        max_ejection: ms(40),
        max_ejected: 0.5,
        ..OutlierConfig::default()
    };
    for case in 0..2_000u64 {
        let endpoints = script.gen_range(1..4);
        let mut policy = ClientPolicy {
            // Every third case waits for probes before its picks: a pool that ages out in 30 ms.
            balancer: if case % 3 == 2 {
                let prequal = PrequalConfig { max_age: ms(30), probe_wait: ms(5), ..PrequalConfig::default() };
                Box::new(Prequal::new(endpoints, prequal))
            } else {
                Box::new(LeastRequest::new(endpoints))
            },
            outlier: (case % 2 == 0).then(|| outlier.build(endpoints)),
            classes: Classes::single(ClassPolicy {
                timeout: Box::new(ExpBackoff::new(ms(script.gen_range(1..50)), 2.0, 3)),
                hedge: script
                    .gen_bool(0.5)
                    .then(|| Box::new(Speculative::new(3, ms(20), None)) as Box<dyn HedgePolicy>),
                deadline: Some(ms(500)),
                hedge_on_timeout: script.gen_bool(0.3),
                races: crate::class::Races::default(),
            }),
            retry: RetryPolicy {
                max_attempts: script.gen_range(1..5),
                backoff: Backoff::exponential(ms(5), ms(40)),
                ..RetryPolicy::default()
            },
            retired: Vec::new(),
            endpoints,
        };
        // Every endpoint has reported once, at 0, as on a caller's earlier requests: Prequal's
        // reports age out after 10 ms (the quickest latency reported), and a pick probes only the
        // endpoints it may use, so a retry's pick may wait for probes.
        for e in 0..endpoints {
            policy.balancer.on_probe(e, Time::ZERO, LoadReport::Load(ProbeReply { in_flight: 0, latency: ms(10) }));
        }
        let mut rng = Pcg64Mcg::seed_from_u64(case);
        let (mut now, mut out) = (Time::ZERO, Vec::new());
        let idempotent = script.gen_bool(0.8);
        let mut call = {
            let mut ctx = Ctx { now, policy: &mut policy, rng: &mut rng, true_loads: None, out: &mut out };
            Call::start(&mut ctx, idempotent, None)
        };
        // Pending answers (time, attempt, outcome), wakes and probe replies (time, endpoint,
        // awaited), played in time order.
        let (mut answers, mut wakes): (Vec<(Time, u32, Outcome)>, Vec<Time>) = (Vec::new(), Vec::new());
        let mut probes: Vec<(Time, EndpointId, bool)> = Vec::new();
        let (mut sent, mut closed, mut finishes, mut attempts_reported) = (0u32, Vec::new(), 0, 0);
        for _step in 0..1_000 {
            for action in out.drain(..) {
                assert_eq!(finishes, 0, "case {case}: {action:?} after the finish");
                match action {
                    Action::Send { attempt, .. } => {
                        assert_eq!(attempt, sent, "case {case}: attempts are numbered in order");
                        sent += 1;
                        if script.gen_bool(0.9) {
                            let delay = ms(script.gen_range(0..100));
                            answers.push((now + delay, attempt, outcomes[script.gen_range(0..4)]));
                        }
                    }
                    Action::Cancel { attempt, reason, .. } => {
                        closed.push(attempt);
                        timed_out_cases += usize::from(reason == Outcome::TimedOut);
                    }
                    Action::Eject(e) => {
                        assert!(e.endpoint < endpoints && case % 2 == 0, "case {case}: {e:?}");
                        ejections += 1;
                    }
                    Action::Probe { endpoint, awaited } => {
                        assert!(endpoint < endpoints, "case {case}: probed {endpoint}");
                        awaited_probes += usize::from(awaited);
                        // One in five is lost: the call stops waiting for it by itself.
                        if script.gen_bool(0.8) {
                            probes.push((now + ms(script.gen_range(0..3)), endpoint, awaited));
                        } else {
                            lost_probes += usize::from(awaited);
                        }
                    }
                    Action::Overdue { attempt, .. } => {
                        assert!(call.is_waiting_for(attempt), "case {case}: an overdue attempt stays live");
                        overdue_cases += 1;
                    }
                    Action::WakeAt(t) => {
                        assert!(t >= now, "case {case}: a wake in the past");
                        wakes.push(t);
                    }
                    Action::Finish(f) => {
                        finishes += 1;
                        attempts_reported = f.attempts;
                    }
                }
            }
            if call.is_finished() {
                break;
            }
            let next_answer = answers.iter().enumerate().min_by_key(|(_, a)| a.0).map(|(i, a)| (a.0, i));
            let next_wake = wakes.iter().enumerate().min_by_key(|(_, t)| **t).map(|(i, t)| (*t, i));
            let mut ctx = Ctx { now, policy: &mut policy, rng: &mut rng, true_loads: None, out: &mut out };
            let next_probe = probes.iter().enumerate().min_by_key(|(_, p)| p.0).map(|(i, p)| (p.0, i));
            let earliest = [next_answer.map(|a| a.0), next_wake.map(|w| w.0)].into_iter().flatten().min();
            if let Some((t, i)) = next_probe.filter(|p| earliest.is_none_or(|e| p.0 <= e)) {
                let (_, endpoint, awaited) = probes.remove(i);
                now = t;
                ctx.now = t;
                let reply = ProbeReply { in_flight: script.gen_range(0..4), latency: ms(script.gen_range(1..50)) };
                ctx.policy.balancer.on_probe(endpoint, t, LoadReport::Load(reply));
                if awaited {
                    call.on_probe_done(&mut ctx);
                }
                continue;
            }
            let answer_first = match (next_answer, next_wake) {
                (Some((t, _)), Some((wt, _))) => t < wt,
                (answer, _) => answer.is_some(),
            };
            match (next_answer, next_wake) {
                (Some((_, i)), _) if answer_first => {
                    let (t, attempt, outcome) = answers.remove(i);
                    now = t;
                    ctx.now = t;
                    if !call.is_waiting_for(attempt) {
                        continue;
                    }
                    closed.push(attempt);
                    // The endpoints' sidecars report their load on every answer: Prequal probes them.
                    let load = LoadReport::Load(ProbeReply { in_flight: script.gen_range(0..4), latency: ms(3) });
                    call.on_attempt_end(&mut ctx, attempt, Feedback::new(outcome, ms(1)).with_load(load));
                }
                (_, Some((t, i))) => {
                    wakes.remove(i);
                    now = t;
                    ctx.now = t;
                    call.on_wake(&mut ctx);
                }
                _ => panic!("case {case}: the call waits for nothing but is not finished"),
            }
        }
        assert_eq!(finishes, 1, "case {case}: finished exactly once");
        assert_eq!(attempts_reported, sent, "case {case}");
        closed.sort_unstable();
        closed.dedup();
        assert_eq!(closed.len() as u32, sent, "case {case}: every attempt ended or was cancelled");
        assert!(now <= ms(500), "case {case}: the deadline bounds the call");
        multi_attempt_cases += usize::from(sent > 1);
    }
    // The scripts reach the interesting paths: retries, hedges, timeouts and overdue attempts.
    assert!(multi_attempt_cases > 500 && timed_out_cases > 500, "{multi_attempt_cases} {timed_out_cases}");
    assert!(overdue_cases > 100 && ejections > 500, "{overdue_cases} {ejections}");
    // Fewer probes than picks: an endpoint is probed only once it has answered with a report.
    assert!(awaited_probes > 200 && lost_probes > 30, "{awaited_probes} {lost_probes}");
}

#[test]
fn a_pick_that_waits_for_probes_goes_ahead_once_they_answered_or_when_the_wait_is_over() {
    use crate::balance::{Prequal, PrequalConfig, ProbeReply};
    let mut d = Driver::new(4, Box::new(NoTimeout));
    let config = PrequalConfig { probe_wait: ms(5), probes_per_request: 2.0, ..PrequalConfig::default() };
    d.policy.balancer = Box::new(Prequal::new(4, config));
    let report = |in_flight, latency| LoadReport::Load(ProbeReply { in_flight, latency });
    // Every endpoint's sidecar reported at t=0 (100 ms): probed once that report is stale.
    (0..4).for_each(|e| d.policy.balancer.on_probe(e, Time::ZERO, report(0, ms(100))));
    let probed = |out: &[Action]| -> Vec<EndpointId> {
        out.iter()
            .filter_map(|a| match *a {
                Action::Probe { endpoint, awaited } => {
                    assert!(awaited, "{out:?}");
                    Some(endpoint)
                }
                _ => None,
            })
            .collect()
    };
    // t=1 s, a stale pool: two awaited probes and a wake at the end of the wait; nothing sent.
    let t = Duration::from_secs(1);
    let (mut call, out) = d.at(t).start(true);
    let sent = probed(&out);
    assert_eq!((sent.len(), out.len()), (2, 3), "{out:?}");
    assert_eq!(out[2], Action::WakeAt(t + ms(5)));
    // 1 ms on: the first reply (3 in flight) is not enough; the second (idle) sends the attempt
    // there.
    d.at(t + ms(1));
    d.policy.balancer.on_probe(sent[0], t + ms(1), report(3, ms(900)));
    assert_eq!(d.step(|ctx| call.on_probe_done(ctx)), vec![]);
    d.policy.balancer.on_probe(sent[1], t + ms(1), report(0, ms(250)));
    let out = d.step(|ctx| call.on_probe_done(ctx));
    assert_eq!(out, vec![send(0, sent[1], None)]);
    // The wake at 5 ms finds the pick made.
    assert_eq!(d.at(t + ms(5)).wake(&mut call), vec![]);
    assert_eq!(d.at(t + ms(300)).end(&mut call, 0, Feedback::success(ms(299))), vec![finish(Outcome::Success, 1)]);

    // Two seconds on, the pool has aged out: a lost probe leaves the pick to the end of the wait,
    // and it goes ahead with the reply that came.
    let t = Duration::from_secs(3);
    let (mut call, out) = d.at(t).start(true);
    let sent = probed(&out);
    d.at(t + ms(1));
    d.policy.balancer.on_probe(sent[1], t + ms(1), report(1, ms(400)));
    assert_eq!(d.step(|ctx| call.on_probe_done(ctx)), vec![]);
    let out = d.at(t + ms(5)).wake(&mut call);
    assert_eq!(out, vec![send(0, sent[1], None)]);
    // Finished calls ignore late replies.
    d.at(t + ms(300)).end(&mut call, 0, Feedback::success(ms(295)));
    assert_eq!(d.step(|ctx| call.on_probe_done(ctx)), vec![]);
}

/// Answers picks from a script, recording what each pick was asked to avoid.
struct Scripted {
    picks: Vec<EndpointId>,
    asked: Arc<Mutex<Vec<Vec<EndpointId>>>>,
}

impl Balancer for Scripted {
    fn pick(&mut self, pick: &mut Pick<'_>) -> Option<EndpointId> {
        let mut exclude = pick.exclude.to_vec();
        exclude.sort_unstable();
        self.asked.lock().expect("not poisoned").push(exclude);
        Some(self.picks.remove(0))
    }
    fn on_send(&mut self, _endpoint: EndpointId, _now: Time) {}
    fn on_feedback(&mut self, _endpoint: EndpointId, _now: Time, _feedback: &Feedback) {}
    fn grow(&mut self, _endpoints: usize) {}
}

#[test]
fn a_retry_goes_back_to_the_endpoint_that_just_failed_only_when_nothing_else_is_left() {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let mut d = Driver::new(3, Box::new(NoTimeout)).retries(4, Backoff::none());
    // The balancer's picks: 0, 1, then 1 again (it found every other endpoint tried), then 2 when
    // asked to avoid 1 alone; in the second request 0, then 0 again and again.
    let picks = vec![0, 1, 1, 2, 0, 0, 0];
    d.policy.balancer = Box::new(Scripted { picks, asked: asked.clone() });
    let (mut call, out) = d.start(false);
    assert_eq!(out, vec![send_with_fallback(0, 0, None)]);
    // 0 is unreachable: retried at once, on 1.
    assert_eq!(d.end(&mut call, 0, Feedback::new(Outcome::Unavailable, ms(1))), vec![send_with_fallback(1, 1, None)]);
    // 1 refuses: the pick lands on 1 again, so it is made again avoiding 1 alone, and goes to 2.
    assert_eq!(
        d.end(&mut call, 1, Feedback::new(Outcome::Rejected, ms(1))),
        vec![after_refusal(send_with_fallback(2, 2, None))]
    );
    assert_eq!(*asked.lock().unwrap(), [vec![], vec![0], vec![0, 1], vec![1]]);
    d.end(&mut call, 2, Feedback::success(ms(1)));

    // A pick that lands on the failed endpoint again when asked to avoid it alone found nothing
    // else (a balancer avoids what it is told while another endpoint is eligible): it stands.
    asked.lock().unwrap().clear();
    let (mut call, _) = d.start(false);
    assert_eq!(d.end(&mut call, 0, Feedback::new(Outcome::Unavailable, ms(1))), vec![send_with_fallback(1, 0, None)]);
    assert_eq!(*asked.lock().unwrap(), [vec![], vec![0], vec![0]]);
}

#[test]
fn the_endpoint_that_just_failed_is_avoided_before_a_tried_one_but_after_an_ejected_one() {
    use crate::balance::{LeastRequest, OutlierConfig};
    // Three endpoints, one of which (2) gets ejected at its first failure; up to 4 attempts.
    let outlier = OutlierConfig { consecutive_failures: 1, max_ejected: 0.34, ..OutlierConfig::default() };
    let mut d = Driver::new(3, Box::new(NoTimeout)).retries(4, Backoff::none());
    d.policy.balancer = Box::new(LeastRequest::new(3));
    d.policy.outlier = Some(outlier.build(3));
    for request in 0..50 {
        let (mut call, mut out) = d.start(false);
        let mut last = None;
        for attempt in 0..4 {
            let Some(&Action::Send { endpoint, .. }) = out.iter().find(|a| matches!(a, Action::Send { .. })) else {
                break;
            };
            // Every attempt fails; the next one never goes back to the endpoint that just failed.
            assert_ne!(Some(endpoint), last, "request {request}, attempt {attempt}: {out:?}");
            last = Some(endpoint);
            out = d.end(&mut call, attempt, Feedback::new(Outcome::Unavailable, ms(1)));
        }
    }
}

#[test]
fn a_call_stays_under_three_cache_lines() {
    // A simulator keeps one per call in flight (crates/sim's CallState counts on this size).
    assert_eq!(std::mem::size_of::<Call>(), 176);
}
