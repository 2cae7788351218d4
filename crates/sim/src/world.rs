//! The simulated world of one run: replicas with workers and FIFO queues, the calls between them
//! driven by the policy core's [`Call`] machine, the workload, and the event loop.

use crate::metrics::Metrics;
use crate::queue::EventQueue;
use crate::service::{EdgePolicy, Job, ServiceModel};
use crate::slab::{Key, Slab};
use crate::trace::Tracer;
use crate::SimError;
use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;
use std::time::Duration;
use tailguard_model::replica::{child_key, Fate};
use tailguard_model::results::{load_service, RunResult};
use tailguard_model::schema::Fanout;
use tailguard_model::{build, ArrivalSchedule, Run};
use tailguard_policy::call::{Action, Call, Ctx};
use tailguard_policy::{Feedback, Outcome, Time};
use tailguard_trace::Trace;

/// How long in-flight requests may still finish after the workload stops sending.
const DRAIN: Duration = Duration::from_secs(120);
/// A closed-loop client whose request ended at the instant it started waits this long before its
/// next one, so a balancer that drops everything cannot spin virtual time to a halt.
const MIN_CYCLE: Duration = Duration::from_millis(1);
/// Runaway guard on the event loop.
const MAX_EVENTS: u64 = 2_000_000_000;

enum Event {
    /// The workload sends its next open-loop request.
    Arrival,
    /// Closed-loop client `client` sends its next request.
    ClientReady { client: u32 },
    /// An attempt reaches a replica, one network delay after it was sent (`series`: its edge's
    /// timeout series, if any).
    AttemptArrives {
        call: Key,
        attempt: u32,
        service: u16,
        replica: u32,
        timeout: Option<Duration>,
        series: Option<u16>,
        /// The key of the attempt's draws at the replica.
        draws: u64,
    },
    /// A replica finished the local work of a job.
    WorkDone { job: Key },
    /// An attempt's answer reaches its caller (`timeout` is the one its policy set, for closeness).
    AttemptEnds {
        call: Key,
        attempt: u32,
        sent: Time,
        timeout: Option<Duration>,
        series: Option<u16>,
        outcome: Outcome,
        chip: bool,
    },
    /// A call asked to be woken.
    Wake { call: Key },
}

/// Who waits for a call's end.
#[derive(Clone, Copy)]
enum Owner {
    /// A user request from the workload (closed-loop client index, if any).
    User { client: Option<u32> },
    /// A job at a replica, calling downstream.
    Job(Key),
}

struct CallState {
    call: Call,
    owner: Owner,
    policy: usize,
    callee: u16,
    measured: bool,
    /// Latency of the attempt that answered successfully, for the time fraction.
    answer: Option<Duration>,
    /// The key its attempts' draws derive from: the user request's number, then the path of
    /// calls to it, so a request meets the same luck under every variant.
    draws: u64,
}

/// One run of the simulator.
pub(crate) struct World {
    now: Time,
    events: EventQueue<Event>,
    services: Vec<ServiceModel>,
    /// Requests sent to each replica of each service and not yet answered (or refused): what a
    /// central dispatcher would count, handed to the oracle.
    loads: Vec<Vec<u32>>,
    policies: Vec<EdgePolicy>,
    calls: Slab<CallState>,
    jobs: Slab<Job>,
    actions: Vec<Action>,
    /// Open-loop arrivals (`None` in a closed loop).
    arrivals: Option<ArrivalSchedule>,
    /// Every policy decision (balancers, chips drawn by callers, jitter).
    policy_rng: Pcg64Mcg,
    delay: Duration,
    target: u16,
    /// The service whose per-replica load the results report.
    load_service: usize,
    user_policy: usize,
    idempotent: bool,
    think: Duration,
    warmup: Duration,
    send_until: Option<Time>,
    measured_limit: Option<u64>,
    measured_sent: u64,
    /// User requests started, warm-up included: the root of the draw keys.
    started: u64,
    stopped_sending: Option<Time>,
    metrics: Metrics,
    events_run: u64,
    /// Spans of a sample of requests, with `--traces` (crate::trace); `None` costs one branch.
    tracer: Option<Box<Tracer>>,
}

impl World {
    pub(crate) fn new(run: &Run, seed: u64) -> Result<World, SimError> {
        let names: Vec<&String> = run.services.keys().collect();
        let index = |name: &str| names.iter().position(|n| *n == name).expect("validated reference") as u16;
        let w = &run.workload;
        let horizon = run.horizon();
        let mut policies = Vec::new();
        let mut services = Vec::new();
        for (i, svc) in run.services.values().enumerate() {
            services.push(ServiceModel::build(run, svc, seed, i, &index, &mut policies)?);
        }
        let target = index(&w.target);
        let user_policy = policies.len();
        let endpoints = services[target as usize].replicas.len();
        policies.push(EdgePolicy { policy: build::client_policy(&w.client, endpoints), timed: false, series: None });
        let loads = services.iter().map(|s| vec![0; s.replicas.len()]).collect();
        let replicas = services.iter().map(|s| s.replicas.len()).collect();
        let mut timed_edges = Vec::new();
        for (s, svc) in services.iter().enumerate() {
            for (&base, &callee) in svc.edge_policy_base.iter().zip(&svc.edge_callee) {
                if policies[base].timed {
                    let series = Some(timed_edges.len() as u16);
                    policies[base..base + svc.replicas.len()].iter_mut().for_each(|p| p.series = series);
                    timed_edges.push(format!("{}->{}", names[s], names[callee as usize]));
                }
            }
        }
        let mut world = World {
            now: Duration::ZERO,
            // Most events follow the one being handled by a network hop or at once.
            events: EventQueue::new(&[run.network.delay.get(), Duration::ZERO]),
            services,
            loads,
            policies,
            calls: Slab::new(),
            jobs: Slab::new(),
            actions: Vec::new(),
            arrivals: w.open.as_ref().map(|o| ArrivalSchedule::new(o.arrival, o.rate, seed)),
            policy_rng: Pcg64Mcg::seed_from_u64(seed.rotate_left(17) ^ 0xA5A5_A5A5),
            delay: run.network.delay.get(),
            target,
            load_service: index(load_service(run)) as usize,
            user_policy,
            idempotent: w.idempotent,
            think: w.closed.as_ref().map_or(Duration::ZERO, |c| c.think.get()),
            warmup: w.warmup.get(),
            send_until: horizon,
            measured_limit: w.requests,
            measured_sent: 0,
            started: 0,
            stopped_sending: None,
            metrics: Metrics::new(names.iter().map(|n| n.to_string()).collect(), replicas, timed_edges, w.warmup.get()),
            events_run: 0,
            tracer: None,
        };
        match &w.closed {
            Some(c) => {
                (0..c.clients).for_each(|client| world.events.push(Duration::ZERO, Event::ClientReady { client }))
            }
            None => {
                let first = world.arrivals.as_ref().expect("an open loop without closed clients").peek();
                world.events.push(first, Event::Arrival)
            }
        }
        Ok(world)
    }

    /// Records the spans of up to `sample` measured requests (crate::trace).
    pub(crate) fn trace(&mut self, run: &Run, seed: u64, sample: usize) {
        let names: Vec<&String> = run.services.keys().collect();
        self.tracer = Some(Box::new(Tracer::new(sample, seed, &run.scenario, &run.variant, &names)));
    }

    /// Runs the event loop to the end; returns the run's result and the number of events run.
    pub(crate) fn run(self, scenario: &str, variant: &str) -> Result<(RunResult, u64), SimError> {
        self.run_traced(scenario, variant).map(|(result, events, _)| (result, events))
    }

    /// [`World::run`], also returning the traces kept when [`World::trace`] was called.
    pub(crate) fn run_traced(
        mut self,
        scenario: &str,
        variant: &str,
    ) -> Result<(RunResult, u64, Vec<Trace>), SimError> {
        while let Some((at, event)) = self.events.pop() {
            if self.stopped_sending.is_some_and(|stop| at > stop + DRAIN) {
                break;
            }
            self.events_run += 1;
            if self.events_run > MAX_EVENTS {
                return Err(SimError::Runaway { events: MAX_EVENTS });
            }
            self.now = at;
            self.handle(event);
        }
        let unanswered = self.count_unanswered_users();
        for _ in 0..unanswered {
            self.metrics.request(Outcome::TimedOut, Duration::ZERO);
        }
        let end = self.stopped_sending.unwrap_or(self.now);
        let measured = end.saturating_sub(self.warmup);
        let traces = self.tracer.take().map_or_else(Vec::new, |t| t.finish());
        Ok((self.metrics.finish(scenario, variant, measured, self.load_service), self.events_run, traces))
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Arrival => {
                if self.may_send() {
                    self.start_user(None);
                    let arrivals = self.arrivals.as_mut().expect("arrivals only in open loop");
                    arrivals.advance();
                    self.events.push(arrivals.peek(), Event::Arrival);
                }
            }
            Event::ClientReady { client } => {
                if self.may_send() {
                    self.start_user(Some(client));
                }
            }
            Event::AttemptArrives { call, attempt, service, replica, timeout, series, draws } => {
                self.attempt_arrives(call, attempt, service, replica, (timeout, series, draws))
            }
            Event::WorkDone { job } => self.work_done(job),
            Event::AttemptEnds { call, attempt, sent, timeout, series, outcome, chip } => {
                let rtt = self.now.saturating_sub(sent);
                // Every answer counts, also one its caller stopped waiting for: the series shows
                // the callee's actual latency against the timeout (adaptive-timeouts.txt Fig. 7–14).
                if let (Some(edge), Outcome::Success) = (series, outcome) {
                    self.metrics.attempt_answered(edge, self.now, rtt);
                }
                let Some(state) = self.calls.get_mut(call) else { return };
                let timed = self.policies[state.policy].timed && matches!(state.owner, Owner::Job(_));
                if outcome == Outcome::Success && state.call.is_waiting_for(attempt) {
                    state.answer = Some(rtt);
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
                let feedback = Feedback { outcome, rtt, chip };
                self.step_call(call, |call, ctx| call.on_attempt_end(ctx, attempt, feedback));
            }
            Event::Wake { call } => self.step_call(call, |call, ctx| call.on_wake(ctx)),
        }
    }

    /// Whether the workload may send another request now (and records when it stops).
    fn may_send(&mut self) -> bool {
        let within_time = self.send_until.is_none_or(|end| self.now < end);
        let within_count = self.measured_limit.is_none_or(|n| self.measured_sent < n);
        let ok = within_time && within_count && self.stopped_sending.is_none();
        if !ok && self.stopped_sending.is_none() {
            self.stopped_sending = Some(self.now);
        }
        ok
    }

    fn start_user(&mut self, client: Option<u32>) {
        let measured = self.now >= self.warmup;
        if measured {
            self.measured_sent += 1;
        }
        let (policy, callee, idempotent) = (self.user_policy, self.target, self.idempotent);
        self.started += 1;
        let draws = child_key(0, self.started);
        self.start_call(Owner::User { client }, policy, callee, idempotent, measured, draws);
    }

    fn start_call(&mut self, owner: Owner, policy: usize, callee: u16, idempotent: bool, measured: bool, draws: u64) {
        let mut actions = std::mem::take(&mut self.actions);
        let mut ctx = Ctx {
            now: self.now,
            policy: &mut self.policies[policy].policy,
            rng: &mut self.policy_rng,
            true_loads: Some(&self.loads[callee as usize]),
            out: &mut actions,
        };
        // Built in its slot: a call is a few hundred bytes, not worth moving.
        let key = self.calls.insert_with(|| {
            let call = Call::start(&mut ctx, idempotent, None);
            CallState { call, owner, policy, callee, measured, answer: None, draws }
        });
        if let Some(t) = &mut self.tracer {
            let job = if let Owner::Job(job) = owner { Some(job) } else { None };
            t.call_started(key, job, measured, callee as usize, self.now);
        }
        self.apply(key, &mut actions);
        self.actions = actions;
    }

    fn step_call(&mut self, key: Key, step: impl FnOnce(&mut Call, &mut Ctx<'_>)) {
        let Some(state) = self.calls.get_mut(key) else { return };
        let mut actions = std::mem::take(&mut self.actions);
        {
            let mut ctx = Ctx {
                now: self.now,
                policy: &mut self.policies[state.policy].policy,
                rng: &mut self.policy_rng,
                true_loads: Some(&self.loads[state.callee as usize]),
                out: &mut actions,
            };
            step(&mut state.call, &mut ctx);
        }
        self.apply(key, &mut actions);
        self.actions = actions;
    }

    /// Carries out a call's actions.
    fn apply(&mut self, key: Key, actions: &mut Vec<Action>) {
        for action in actions.drain(..) {
            let state = self.calls.get_mut(key).expect("the call is live while it acts");
            let between_services = matches!(state.owner, Owner::Job(_));
            match action {
                Action::Send { attempt, endpoint, policy_timeout, .. } => {
                    if let Some(t) = &mut self.tracer {
                        t.attempt_sent(key, attempt, endpoint, policy_timeout, self.now);
                    }
                    self.loads[state.callee as usize][endpoint] += 1;
                    let series = self.policies[state.policy].series;
                    if let (Some(edge), Some(timeout)) = (series, policy_timeout) {
                        self.metrics.timeout_set(edge, self.now, timeout);
                    }
                    let event = Event::AttemptArrives {
                        call: key,
                        attempt,
                        service: state.callee,
                        replica: endpoint as u32,
                        timeout: policy_timeout,
                        series,
                        draws: child_key(state.draws, attempt.into()),
                    };
                    self.events.push(self.now + self.delay, event);
                }
                Action::Cancel { attempt, reason, .. } => {
                    if let Some(t) = &mut self.tracer {
                        t.attempt_ended(key, attempt, reason, self.now);
                    }
                    if reason == Outcome::TimedOut && between_services && state.measured {
                        self.metrics.attempt_timed_out();
                    }
                }
                Action::Overdue { attempt, .. } => {
                    if let Some(t) = &mut self.tracer {
                        t.attempt_overdue(key, attempt);
                    }
                    if between_services && state.measured {
                        self.metrics.attempt_timed_out();
                    }
                }
                Action::WakeAt(at) => self.events.push(at, Event::Wake { call: key }),
                Action::Finish(finish) => {
                    let (owner, measured, answer) = (state.owner, state.measured, state.answer);
                    let latency = self.now.saturating_sub(state.call.started());
                    // Dropped where it lies: a call is a few hundred bytes, not worth moving out.
                    self.calls.delete(key);
                    if let Some(t) = &mut self.tracer {
                        let user = matches!(owner, Owner::User { .. });
                        t.call_finished(key, user, finish.outcome, finish.attempts, self.now);
                    }
                    match owner {
                        Owner::User { client } => self.user_done(client, measured, finish.outcome, latency),
                        Owner::Job(job) => {
                            if measured {
                                let answer = (finish.outcome == Outcome::Success).then_some(answer).flatten();
                                self.metrics.call(finish.attempts, latency, answer);
                            }
                            self.call_done(job, finish.outcome == Outcome::Success);
                        }
                    }
                }
            }
        }
    }

    fn user_done(&mut self, client: Option<u32>, measured: bool, outcome: Outcome, latency: Duration) {
        if measured {
            self.metrics.request(outcome, latency);
        }
        if let Some(client) = client {
            let pause = if latency.is_zero() { self.think.max(MIN_CYCLE) } else { self.think };
            self.events.push(self.now + pause, Event::ClientReady { client });
        }
    }

    fn attempt_arrives(
        &mut self,
        call: Key,
        attempt: u32,
        service: u16,
        replica: u32,
        (timeout, series, draws): (Option<Duration>, Option<u16>, u64),
    ) {
        let (s, r) = (service as usize, replica as usize);
        let now = self.now;
        let sent = now - self.delay;
        let refuse = |world: &mut World, outcome| {
            if let Some(t) = &mut world.tracer {
                t.visit(call, attempt, s, replica, Err(outcome), now);
            }
            world.loads[s][r] -= 1;
            let event = Event::AttemptEnds { call, attempt, sent, timeout, series, outcome, chip: false };
            world.events.push(now + world.delay, event);
        };
        if self.services[s].replicas[r].model.is_down(now) {
            // Accepted and answered with an error, as a lab replica's sidecar admits it and its
            // `tailguard serve` answers 503: only a 429 is not load (docs/results.md, imbalance).
            self.metrics.accepted(s, r, now);
            return refuse(self, Outcome::Unavailable);
        }
        let rep = &mut self.services[s].replicas[r];
        if !rep.admission.admit(now, rep.held) {
            return refuse(self, Outcome::Rejected);
        }
        self.metrics.accepted(s, r, now);
        rep.held += 1;
        let arrival = rep.model.arrive_as(draws);
        let job = Job {
            service,
            replica,
            reply: (call, attempt),
            sent,
            timeout,
            series,
            fate: arrival.fate,
            nth: arrival.ordinal,
            draws,
            next_call: 0,
            outstanding: 0,
            failed: false,
        };
        let key = self.jobs.insert(job);
        if let Some(t) = &mut self.tracer {
            t.visit(call, attempt, s, replica, Ok(key), now);
        }
        let svc = &mut self.services[s];
        let rep = &mut svc.replicas[r];
        if svc.workers == 0 || rep.busy < svc.workers {
            self.begin_work(key, s, r);
        } else {
            rep.queue.push_back(key);
        }
        let rep = &mut self.services[s].replicas[r];
        rep.admission.observe(now, rep.held);
    }

    fn begin_work(&mut self, key: Key, s: usize, r: usize) {
        let job = self.jobs.get_mut(key).expect("a job starting work exists");
        let (nth, draws) = (job.nth, job.draws);
        let svc = &mut self.services[s];
        svc.replicas[r].busy += 1;
        let time = svc.replicas[r].model.work_time_as(nth, self.now, draws);
        if let Some(t) = &mut self.tracer {
            t.work_started(key, self.now);
        }
        self.events.push(self.now + time, Event::WorkDone { job: key });
    }

    fn work_done(&mut self, key: Key) {
        let Some(job) = self.jobs.get_mut(key) else { return };
        let (s, r, fate) = (job.service as usize, job.replica as usize, job.fate);
        if let Some(t) = &mut self.tracer {
            t.work_done(key, self.now);
        }
        let svc = &mut self.services[s];
        svc.replicas[r].busy -= 1;
        if let Some(next) = svc.replicas[r].queue.pop_front() {
            self.begin_work(next, s, r);
        }
        match fate {
            Fate::Lost => {
                if let Some(t) = &mut self.tracer {
                    t.visit_ended(key, None, self.now);
                }
                self.jobs.delete(key);
                self.release(s, r);
            }
            Fate::Error => self.respond(key, Outcome::Error),
            Fate::Normal if self.services[s].plan.is_empty() => self.respond(key, Outcome::Success),
            Fate::Normal => self.make_calls(key),
        }
    }

    /// Starts a job's downstream calls: the next one (sequential) or all (parallel).
    fn make_calls(&mut self, key: Key) {
        let job = self.jobs.get_mut(key).expect("caller checked");
        let s = job.service as usize;
        let svc = &self.services[s];
        let count = match svc.fanout {
            Fanout::Sequential => 1,
            Fanout::Parallel => svc.plan.len() - job.next_call as usize,
        };
        let first = job.next_call as usize;
        job.next_call += count as u16;
        job.outstanding += count as u16;
        let replica = job.replica as usize;
        let measured = job.sent >= self.warmup;
        let (idempotent, draws) = (self.idempotent, job.draws);
        for i in first..first + count {
            let svc = &self.services[s];
            let edge = svc.plan[i] as usize;
            let (policy, callee) = (svc.edge_policy_base[edge] + replica, svc.edge_callee[edge]);
            self.start_call(Owner::Job(key), policy, callee, idempotent, measured, child_key(draws, i as u64));
        }
    }

    fn call_done(&mut self, key: Key, success: bool) {
        let Some(job) = self.jobs.get_mut(key) else { return };
        job.outstanding -= 1;
        job.failed |= !success;
        if job.outstanding > 0 {
            return;
        }
        let more = (job.next_call as usize) < self.services[job.service as usize].plan.len();
        match (job.failed, more) {
            (true, _) => self.respond(key, Outcome::Error),
            (false, true) => self.make_calls(key),
            (false, false) => self.respond(key, Outcome::Success),
        }
    }

    fn respond(&mut self, key: Key, outcome: Outcome) {
        let job = self.jobs.remove(key).expect("responding job exists");
        if let Some(t) = &mut self.tracer {
            t.visit_ended(key, Some(outcome), self.now);
        }
        let (s, r) = (job.service as usize, job.replica as usize);
        let held = self.release(s, r);
        let replica = &mut self.services[s].replicas[r];
        let chip = replica.admission.grant_chip(self.now, held, replica.model.rng());
        let (call, attempt) = job.reply;
        let (sent, timeout, series) = (job.sent, job.timeout, job.series);
        let event = Event::AttemptEnds { call, attempt, sent, timeout, series, outcome, chip };
        self.events.push(self.now + self.delay, event);
    }

    /// A replica no longer holds a request; returns how many it still holds.
    fn release(&mut self, s: usize, r: usize) -> u32 {
        let rep = &mut self.services[s].replicas[r];
        rep.held -= 1;
        rep.admission.observe(self.now, rep.held);
        self.loads[s][r] -= 1;
        rep.held
    }

    /// Measured user requests still waiting when the run ended: they never got an answer.
    fn count_unanswered_users(&self) -> usize {
        self.calls.values().filter(|state| matches!(state.owner, Owner::User { .. }) && state.measured).count()
    }
}
