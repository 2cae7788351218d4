//! Cancellation: an attempt its caller abandons (a lost hedge, a timed-out attempt, an ended
//! request) is stopped at a `cancellable` callee one network delay later, as a real server hears
//! its sidecar reset the stream: a queued job leaves the queue, a working job frees its worker,
//! a job waiting for downstream calls abandons them in turn, and no answer goes back.
//!
//! The world tracks every attempt to a cancellable service from its sending to its job's end
//! ([`Visit`]), so a cancel finds its job, and a cancel that overtook its attempt (impossible
//! with one fixed network delay, as both travel in the same FIFO lane) still stops it on arrival.

use super::{Event, Owner, World};
use crate::service::Stage;
use crate::slab::Key;

/// Where an attempt to a cancellable service is, keyed by (call, attempt).
pub(super) enum Visit {
    /// Sent, not arrived yet.
    InFlight,
    /// Cancelled before it arrived: it is dropped on arrival.
    Cancelled,
    /// A job at its replica.
    Job(Key),
}

impl World {
    /// Attempt `attempt` of `call`, to `callee`, was sent.
    pub(super) fn attempt_sent(&mut self, call: Key, attempt: u32, callee: u16) {
        if self.services[callee as usize].cancellable {
            self.visits.insert((call, attempt), Visit::InFlight);
        }
    }

    /// The caller abandoned attempt `attempt` of `call` to `callee`: the cancel travels.
    pub(super) fn cancel_sent(&mut self, call: Key, attempt: u32, callee: u16) {
        if self.services[callee as usize].cancellable {
            self.events.push(self.now + self.delay, Event::CancelArrives { call, attempt });
        }
    }

    /// An attempt reached replica `r` of service `s`; false when a cancel arrived before it, in
    /// which case it is dropped here.
    pub(super) fn arrives_uncancelled(&mut self, call: Key, attempt: u32, s: usize, r: usize) -> bool {
        if !self.services[s].cancellable {
            return true;
        }
        if let Some(Visit::Cancelled) = self.visits.remove(&(call, attempt)) {
            self.loads[s][r] -= 1;
            return false;
        }
        true
    }

    /// Attempt `attempt` of `call` became job `job` at a replica of service `s`.
    pub(super) fn visit_started(&mut self, call: Key, attempt: u32, s: usize, job: Key) {
        if self.services[s].cancellable {
            self.visits.insert((call, attempt), Visit::Job(job));
        }
    }

    /// The job of attempt `reply` at service `s` ended (answered or lost).
    pub(super) fn visit_ended(&mut self, reply: (Key, u32), s: usize) {
        if self.services[s].cancellable {
            self.visits.remove(&reply);
        }
    }

    /// The cancel of attempt `attempt` of `call` reached its replica.
    pub(super) fn cancel_arrives(&mut self, call: Key, attempt: u32) {
        match self.visits.remove(&(call, attempt)) {
            // Answered already: nothing to stop.
            None => {}
            Some(Visit::InFlight | Visit::Cancelled) => {
                self.visits.insert((call, attempt), Visit::Cancelled);
            }
            Some(Visit::Job(job)) => self.stop_job(job),
        }
    }

    /// Stops job `key` where it is; it never answers.
    fn stop_job(&mut self, key: Key) {
        let job = self.jobs.remove(key).expect("a visit's job lives until it ends");
        let (s, r) = (job.service as usize, job.replica as usize);
        if let Some(t) = &mut self.tracer {
            t.visit_ended(key, Some(tailguard_policy::Outcome::Cancelled), self.now);
        }
        match job.stage {
            Stage::Queued => {
                let queue = &mut self.services[s].replicas[r].queue;
                let at = queue.iter().position(|&k| k == key).expect("a queued job is in its queue");
                queue.remove(at);
            }
            Stage::Working(started) => {
                self.metrics.work(s, job.sent >= self.warmup, self.now - started, false);
                let replica = &mut self.services[s].replicas[r];
                replica.busy -= 1;
                if let Some(next) = replica.queue.pop_front() {
                    self.begin_work(next, s, r);
                }
            }
            Stage::Calling => {
                let calls: Vec<Key> = self
                    .calls
                    .iter()
                    .filter(|(_, state)| matches!(state.owner, Owner::Job(owner) if owner == key))
                    .map(|(call, _)| call)
                    .collect();
                for call in calls {
                    self.step_call(call, |call, ctx| call.abandon(ctx));
                }
            }
        }
        self.release(s, r);
    }
}
