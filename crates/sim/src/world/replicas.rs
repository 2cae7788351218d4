//! The replicas: an attempt arriving at a replica is admitted or refused, waits in its FIFO queue
//! for a worker, does its local work (fate and work time from the replica's model), makes its
//! downstream calls (sequential or parallel) and answers, with a BLOC chip if admission grants one.
//! An `error` fault with `after` answers without a worker; a `hang` window holds the start and end
//! of work, the next calls and the answers until it closes.

use super::{AttemptEnd, Carried, Event, Owner, World};
use crate::service::{Job, Stage};
use crate::slab::Key;
use tailguard_model::replica::{child_key, Fate};
use tailguard_model::schema::Fanout;
use tailguard_policy::admission::{Arrival, Marks, Priority};
use tailguard_policy::{Outcome, PackedTime};

impl World {
    pub(super) fn attempt_arrives(
        &mut self,
        call: Key,
        attempt: u32,
        service: u16,
        replica: u32,
        (sent, timeout, series, request, route, caller, marks): (
            PackedTime,
            PackedTime,
            Option<u16>,
            u64,
            u16,
            Option<Key>,
            Marks,
        ),
    ) {
        let (s, r) = (service as usize, replica as usize);
        if !self.arrives_uncancelled(call, attempt, s, r) {
            return;
        }
        let now = self.now;
        let refuse = |world: &mut World, outcome| {
            if let Some(t) = &mut world.tracer {
                t.visit(call, attempt, s, replica, Err(outcome), now);
            }
            world.load_dec(s, r);
            world.visit_started(call, attempt, s, None);
            // A replica down without a sidecar refuses the connection: no answer at all.
            let load = if world.services[s].replicas[r].sidecar { world.report(s, r) } else { Carried::NONE };
            let end = AttemptEnd { call, attempt, sent, timeout, series, outcome, chip: false, load, caller };
            let event = Event::AttemptEnds(end);
            let hop = world.hop();
            world.events.push(now + hop, event);
        };
        if self.services[s].replicas[r].model.is_down(now) {
            // Accepted and answered with an error, as a lab replica's sidecar admits it and its
            // `tailguard serve` answers 503: only a 429 is not load (docs/results.md, imbalance).
            self.metrics.accepted(s, r, now);
            return refuse(self, Outcome::Unavailable);
        }
        let reads = self.services[s].reads_deadlines;
        let deadline = reads.then(|| self.calls.get_mut(call)?.call.deadline()).flatten();
        let deadline = deadline.map(|d| d.saturating_sub(now));
        let svc = &mut self.services[s];
        let priority = usize::from(route).checked_sub(1).map_or(Priority::Normal, |i| svc.routes[i].priority);
        let rep = &mut svc.replicas[r];
        if !rep.admission.admit_as(now, rep.held, Arrival { priority, marks, deadline }) {
            return refuse(self, Outcome::Rejected);
        }
        self.metrics.accepted(s, r, now);
        let rif = rep.held;
        rep.held += 1;
        let arrival = rep.model.arrive_as(child_key(request, attempt.into()), now);
        let job = Job {
            service,
            replica,
            reply: (call, attempt),
            caller,
            sent,
            arrived: PackedTime::at(now),
            rif,
            timeout,
            series,
            fate: arrival.fate,
            nth: arrival.ordinal,
            request,
            route,
            next_call: 0,
            outstanding: 0,
            failure: None,
            stage: Stage::Queued,
        };
        let key = self.jobs.insert(job);
        self.visit_started(call, attempt, s, Some(key));
        if let Some(t) = &mut self.tracer {
            t.visit(call, attempt, s, replica, Ok(key), now);
        }
        let rep = &mut self.services[s].replicas[r];
        let workers = rep.model.workers();
        if let Fate::ErrorAfter(after) = arrival.fate {
            // Neither queued nor working: a cancel before the answer only drops it.
            self.jobs.get_mut(key).expect("inserted above").stage = Stage::Calling;
            self.events.push(now + after, Event::Answer { job: key, outcome: Outcome::Error });
        } else if workers == 0 || rep.busy < workers {
            self.begin_work(key, s, r);
        } else {
            rep.queue.push_back(key);
        }
        let rep = &mut self.services[s].replicas[r];
        rep.admission.observe(now, rep.held);
    }

    /// Gives a job a worker: its work starts now, or when a `hang` holding the replica ends, and
    /// ends after its work time, or when a `hang` covering that moment ends.
    pub(super) fn begin_work(&mut self, key: Key, s: usize, r: usize) {
        let job = self.jobs.get_mut(key).expect("a job starting work exists");
        let (nth, draws, route, request) = (job.nth, job.draws(), job.route(), job.request);
        job.stage = Stage::Working(self.now);
        let rep = &mut self.services[s].replicas[r];
        rep.busy += 1;
        let start = rep.model.resume_at(self.now);
        let time = rep.model.work_time_of(nth, start, draws, route, request);
        let end = rep.model.resume_at(start + time);
        if let Some(t) = &mut self.tracer {
            t.work_started(key, start);
        }
        self.events.push(end, Event::WorkDone { job: key, service: s as u16, replica: r as u32 });
    }

    pub(super) fn work_done(&mut self, key: Key) {
        let Some(job) = self.jobs.get_mut(key) else { return };
        let (s, r, fate, job_route) = (job.service as usize, job.replica as usize, job.fate, job.route);
        if let Stage::Working(started) = job.stage {
            let extra = job.reply.1 > 0;
            self.metrics.work(s, job.sent() >= self.warmup, self.now - started, extra);
        }
        job.stage = Stage::Calling;
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
            Fate::Error | Fate::ErrorAfter(_) => self.respond(key, Outcome::Error),
            Fate::Normal if self.services[s].plans[usize::from(job_route)].is_empty() => {
                self.respond(key, Outcome::Success)
            }
            Fate::Normal => self.make_calls(key),
        }
    }

    /// Starts a job's downstream calls: the next one (sequential) or all (parallel); when a `hang`
    /// holds the replica, once it ends.
    pub(super) fn make_calls(&mut self, key: Key) {
        let Some(job) = self.jobs.get_mut(key) else { return };
        let s = job.service as usize;
        let resume = self.services[s].replicas[job.replica as usize].model.resume_at(self.now);
        if resume > self.now {
            return self.events.push(resume, Event::NextCalls { job: key });
        }
        let svc = &self.services[s];
        let plan = &svc.plans[usize::from(job.route)];
        let count = match svc.fanout {
            Fanout::Sequential => 1,
            Fanout::Parallel => plan.len() - job.next_call as usize,
        };
        let first = job.next_call as usize;
        job.next_call += count as u16;
        job.outstanding += count as u16;
        let replica = job.replica as usize;
        let measured = job.sent() >= self.warmup;
        let (idempotent, draws, route) = (self.idempotent, job.draws(), usize::from(job.route));
        for i in first..first + count {
            let svc = &self.services[s];
            let edge = svc.plans[route][i] as usize;
            let (policy, callee, fixed) =
                (svc.edge_policy_base[edge] + replica, svc.edge_callee[edge], svc.edge_route[edge]);
            let call_draws = child_key(draws, i as u64);
            let callee_route = self.services[callee as usize].route_of(fixed, call_draws);
            self.start_call(Owner::Job(key), policy, callee, idempotent, measured, call_draws, callee_route);
        }
    }

    /// A job's call ended with `outcome`. A call refused (by every endpoint tried, or further
    /// down) makes the job answer 429 as `tailguard serve` does, a refusal its caller passes on
    /// and does not retry; any other failure makes it answer an error.
    pub(super) fn call_done(&mut self, key: Key, outcome: Outcome) {
        let Some(job) = self.jobs.get_mut(key) else { return };
        job.outstanding -= 1;
        job.failure = match outcome {
            Outcome::Success => job.failure,
            Outcome::Rejected | Outcome::Overloaded if job.failure != Some(Outcome::Error) => Some(Outcome::Overloaded),
            _ => Some(Outcome::Error),
        };
        if job.outstanding > 0 {
            return;
        }
        let more = (job.next_call as usize) < self.services[job.service as usize].plans[usize::from(job.route)].len();
        match (job.failure, more) {
            (Some(failure), _) => self.respond(key, failure),
            (None, true) => self.make_calls(key),
            (None, false) => self.respond(key, Outcome::Success),
        }
    }

    /// A job answers: now, or when a `hang` holding the replica ends.
    pub(super) fn respond(&mut self, key: Key, outcome: Outcome) {
        // A deferred answer's job may have gone since (its attempt abandoned).
        let Some(job) = self.jobs.get_mut(key) else { return };
        let resume = self.services[job.service as usize].replicas[job.replica as usize].model.resume_at(self.now);
        if resume > self.now {
            return self.events.push(resume, Event::Answer { job: key, outcome });
        }
        let job = self.jobs.remove(key).expect("responding job exists");
        if let Some(t) = &mut self.tracer {
            t.visit_ended(key, Some(outcome), self.now);
        }
        let (s, r) = (job.service as usize, job.replica as usize);
        let held = self.release(s, r);
        let svc = &mut self.services[s];
        if let Some(probes) = svc.probes.get_mut(r) {
            probes.on_answer(job.rif, self.now - job.arrived());
        }
        let replica = &mut svc.replicas[r];
        if outcome == Outcome::Success {
            replica.admission.answered(self.now, job.rif, self.now - job.arrived());
        }
        let chip = replica.admission.grant_chip(self.now, held, replica.model.rng());
        let load = self.report(s, r);
        let (call, attempt) = job.reply;
        let (sent, timeout, series, caller) = (job.sent, job.timeout, job.series, job.caller);
        let end = AttemptEnd { call, attempt, sent, timeout, series, outcome, chip, load, caller };
        let event = Event::AttemptEnds(end);
        let hop = self.hop();
        self.events.push(self.now + hop, event);
    }

    /// A replica no longer holds a request; returns how many it still holds.
    pub(super) fn release(&mut self, s: usize, r: usize) -> u32 {
        let rep = &mut self.services[s].replicas[r];
        rep.held -= 1;
        rep.admission.observe(self.now, rep.held);
        let held = rep.held;
        self.load_dec(s, r);
        held
    }
}
