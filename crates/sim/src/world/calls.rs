//! The calls: each user request and each downstream call of a job is one policy-core [`Call`],
//! driven here. Its actions become events (attempts sent over the network, timers), and the
//! answers coming back are fed to it; attempt timeouts, closeness and the timeout series are
//! recorded as they happen.

use super::cancel::Reached;
use super::{AttemptEnd, Event, World};
use crate::slab::Key;
use smallvec::SmallVec;
use std::time::Duration;
use tailguard_policy::call::{Action, Call, Ctx};
use tailguard_policy::{Feedback, Outcome, PackedTime};

/// Who waits for a call's end.
#[derive(Clone, Copy)]
pub(super) enum Owner {
    /// A user request from the workload (closed-loop client index, if any).
    User { client: Option<u32> },
    /// A job at a replica, calling downstream.
    Job(Key),
}

/// A call in flight and what the world keeps about it: 240 bytes, so that with its slab
/// generation it fills four cache lines (the run keeps thousands in flight, and every line one
/// spans is a miss when its next event comes).
pub(super) struct CallState {
    pub(super) call: Call,
    pub(super) owner: Owner,
    policy: u32,
    callee: u16,
    measured: bool,
    /// The key its attempts' draws derive from: the user request's number, then the path of
    /// calls to it, so a request meets the same luck under every variant.
    draws: u64,
    /// How far each of its attempts got, by attempt number, for its cancels to find their job.
    pub(super) reached: SmallVec<[Reached; 2]>,
}

impl World {
    #[allow(clippy::too_many_arguments)] // a call's whole identity: owner, edge, callee, route, draws
    pub(super) fn start_call(
        &mut self,
        owner: Owner,
        policy: usize,
        callee: u16,
        idempotent: bool,
        measured: bool,
        draws: u64,
        route: u16,
    ) {
        let mut actions = std::mem::take(&mut self.actions);
        let mut ctx = Ctx {
            now: self.now,
            policy: &mut self.policies[policy].policy,
            rng: &mut self.policy_rng,
            true_loads: self.loads[callee as usize].as_ref(),
            out: &mut actions,
        };
        // Built in its slot: a call is a few hundred bytes, not worth moving.
        let key = self.calls.insert_with(|| {
            let call = Call::start_for(&mut ctx, route, idempotent, None);
            CallState { call, owner, policy: policy as u32, callee, measured, draws, reached: SmallVec::new() }
        });
        if let Some(t) = &mut self.tracer {
            let job = if let Owner::Job(job) = owner { Some(job) } else { None };
            t.call_started(key, job, measured, callee as usize, self.now);
        }
        self.apply(key, &mut actions, None);
        self.actions = actions;
    }

    pub(super) fn step_call(&mut self, key: Key, step: impl FnOnce(&mut Call, &mut Ctx<'_>)) {
        self.step_answered_call(key, None, step);
    }

    /// [`World::step_call`] for a step that hands the call the successful `answer` (its latency)
    /// of an attempt it waits for, if it is one.
    fn step_answered_call(&mut self, key: Key, answer: Option<Duration>, step: impl FnOnce(&mut Call, &mut Ctx<'_>)) {
        let Some(state) = self.calls.get_mut(key) else { return };
        let mut actions = std::mem::take(&mut self.actions);
        {
            let mut ctx = Ctx {
                now: self.now,
                policy: &mut self.policies[state.policy as usize].policy,
                rng: &mut self.policy_rng,
                true_loads: self.loads[state.callee as usize].as_ref(),
                out: &mut actions,
            };
            step(&mut state.call, &mut ctx);
        }
        self.apply(key, &mut actions, answer);
        self.actions = actions;
    }

    /// Carries out a call's actions; `answer` is the latency of the successful attempt whose
    /// answer the call just got, if any (a call finishes with success only then), kept here
    /// rather than in the call's state to keep that small.
    pub(super) fn apply(&mut self, key: Key, actions: &mut Vec<Action>, answer: Option<Duration>) {
        for action in actions.drain(..) {
            let state = self.calls.get_mut(key).expect("the call is live while it acts");
            let between_services = matches!(state.owner, Owner::Job(_));
            match action {
                Action::Send { attempt, endpoint, policy_timeout, marks, .. } => {
                    if let Some(t) = &mut self.tracer {
                        t.attempt_sent(key, attempt, endpoint, policy_timeout, self.now);
                    }
                    if let Some(loads) = &mut self.loads[state.callee as usize] {
                        loads.inc(endpoint);
                    }
                    let series = self.policies[state.policy as usize].series;
                    if let (Some(edge), Some(timeout)) = (series, policy_timeout) {
                        self.metrics.timeout_set(edge, self.now, timeout);
                    }
                    let event = Event::AttemptArrives {
                        call: key,
                        sent: PackedTime::at(self.now),
                        attempt,
                        service: state.callee,
                        replica: endpoint as u32,
                        timeout: PackedTime::new(policy_timeout),
                        series,
                        request: state.draws,
                        route: state.call.class(),
                        caller: if let Owner::Job(job) = state.owner { Some(job) } else { None },
                        marks,
                    };
                    state.reached.push(Reached::Travelling);
                    let callee = state.callee;
                    let hop = self.hop_to(callee, between_services);
                    self.events.push(self.now + hop, event);
                }
                Action::Cancel { attempt, reason, .. } => {
                    if let Some(t) = &mut self.tracer {
                        t.attempt_ended(key, attempt, reason, self.now);
                    }
                    if reason == Outcome::TimedOut && between_services && state.measured {
                        self.metrics.attempt_timed_out();
                    }
                    let (callee, reached) = (state.callee, state.reached[attempt as usize]);
                    self.cancel_sent(key, attempt, callee, reached);
                }
                Action::Overdue { attempt, .. } => {
                    if let Some(t) = &mut self.tracer {
                        t.attempt_overdue(key, attempt);
                    }
                    if between_services && state.measured {
                        self.metrics.attempt_timed_out();
                    }
                }
                // Ejections change the policy's later picks; the results count them.
                Action::Eject(_) => {
                    if state.measured {
                        self.metrics.ejection();
                    }
                }
                Action::Probe { endpoint, awaited } => {
                    if state.measured {
                        self.metrics.probe();
                    }
                    let event = Event::ProbeArrives {
                        policy: state.policy,
                        service: state.callee,
                        replica: endpoint as u32,
                        awaited_by: awaited.then_some(key),
                    };
                    let hop = self.hop();
                    self.events.push(self.now + hop, event);
                }
                Action::WakeAt(at) => self.events.push(at, Event::Wake { call: key }),
                Action::Finish(finish) => {
                    let (owner, measured) = (state.owner, state.measured);
                    let route = usize::from(state.call.class()).checked_sub(1);
                    let latency = self.now.saturating_sub(state.call.started());
                    // Dropped where it lies: a call is a few hundred bytes, not worth moving out.
                    self.calls.delete(key);
                    if let Some(t) = &mut self.tracer {
                        let user = matches!(owner, Owner::User { .. });
                        t.call_finished(key, user, finish.outcome, finish.attempts, self.now);
                    }
                    match owner {
                        Owner::User { client } => self.user_done(client, measured, route, finish.outcome, latency),
                        Owner::Job(job) => {
                            if measured {
                                let answer = (finish.outcome == Outcome::Success).then_some(answer).flatten();
                                self.metrics.call(finish.attempts, latency, answer);
                            }
                            self.call_done(job, finish.outcome);
                        }
                    }
                }
            }
        }
    }

    /// An attempt's answer reached its caller: records it and hands it to the call.
    pub(super) fn attempt_ends(&mut self, end: AttemptEnd) {
        let AttemptEnd { call, attempt, sent, timeout, series, outcome, chip, load, .. } = end;
        let (sent, timeout) = (sent.get().expect("an attempt has a send time"), timeout.get());
        let rtt = self.now.saturating_sub(sent);
        // Every answer counts, also one its caller stopped waiting for: the series shows
        // the callee's actual latency against the timeout (adaptive-timeouts.txt Fig. 7–14).
        if let (Some(edge), Outcome::Success) = (series, outcome) {
            self.metrics.attempt_answered(edge, self.now, rtt);
        }
        let Some(state) = self.calls.get_mut(call) else { return };
        let timed = self.policies[state.policy as usize].timed && matches!(state.owner, Owner::Job(_));
        let mut answer = None;
        if outcome == Outcome::Success && state.call.is_waiting_for(attempt) {
            answer = Some(rtt);
            // An answer past its timeout (hedge on timeout) counted as a timeout already.
            if let (Some(t), true, true) = (timeout, state.measured, timed) {
                if rtt <= t {
                    self.metrics.attempt_succeeded(rtt, t);
                }
            }
        }
        if let Some(t) = &mut self.tracer {
            t.attempt_ended(call, attempt, outcome, self.now);
        }
        let feedback = Feedback { outcome, rtt, chip, load: load.get() };
        self.step_answered_call(call, answer, |call, ctx| call.on_attempt_end(ctx, attempt, feedback));
    }

    /// The routes (of the target, if any) of the measured user requests still waiting when the
    /// run ended: they never got an answer.
    pub(super) fn unanswered_users(&self) -> Vec<Option<usize>> {
        let waiting = self.calls.values().filter(|state| matches!(state.owner, Owner::User { .. }) && state.measured);
        waiting.map(|state| usize::from(state.call.class()).checked_sub(1)).collect()
    }
}
