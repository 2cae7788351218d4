//! Cancellation: an attempt its caller abandons (a lost hedge, a timed-out attempt, an ended
//! request) is stopped at a `cancellable` callee one network delay later, as a real server hears
//! its sidecar reset the stream: a queued job leaves the queue, a working job frees its worker,
//! a job waiting for downstream calls abandons them in turn, and no answer goes back.
//!
//! A cancel carries its job's key when the attempt had reached its replica before the caller gave
//! it up ([`Reached`], kept in the call's state); one sent while its attempt was still travelling
//! is tracked until it arrives ([`Pending`]), so it finds the job the attempt became meanwhile.
//! A cancel travels one hop like any message; one that overtook its attempt (only a `jitter` can
//! reorder them) still stops it on arrival, and a stopped job's late events find nothing
//! (generation-checked keys).

use super::{Event, Owner, World};
use crate::service::Stage;
use crate::slab::Key;
use tailguard_policy::Outcome;

/// How far an attempt got, as its call's state keeps it.
#[derive(Clone, Copy)]
pub(super) enum Reached {
    /// Sent, not arrived (as far as the call knows).
    Travelling,
    /// Refused on arrival: nothing to stop.
    Refused,
    /// A job at its replica (which may have answered since: its key then finds nothing).
    Job(Key),
}

/// A cancel sent while its attempt was travelling, keyed by (call, attempt).
pub(super) enum Pending {
    /// The attempt has not arrived.
    Sent,
    /// The attempt arrived: its job, or none if refused.
    Arrived(Option<Key>),
    /// The cancel arrived first: the attempt is dropped on arrival.
    Overtaken,
}

impl World {
    /// The caller abandoned attempt `attempt` of `call` to `callee`, which had `reached` so far:
    /// the cancel travels to a cancellable callee.
    pub(super) fn cancel_sent(&mut self, call: Key, attempt: u32, callee: u16, reached: Reached) {
        if !self.services[callee as usize].cancellable {
            return;
        }
        let job = match reached {
            Reached::Refused => return,
            Reached::Job(job) => Some(job),
            Reached::Travelling => {
                self.pending.insert((call, attempt), Pending::Sent);
                None
            }
        };
        let hop = self.hop();
        self.events.push(self.now + hop, Event::CancelArrives { call, attempt, job });
    }

    /// Attempt `attempt` of `call` reached replica `r` of service `s`; false when its cancel came
    /// first, in which case it is dropped here.
    pub(super) fn arrives_uncancelled(&mut self, call: Key, attempt: u32, s: usize, r: usize) -> bool {
        if self.pending.is_empty() || !self.services[s].cancellable {
            return true;
        }
        match self.pending.get_mut(&(call, attempt)) {
            Some(Pending::Overtaken) => {
                self.pending.remove(&(call, attempt));
                self.load_dec(s, r);
                if let Some(t) = &mut self.tracer {
                    t.visit(call, attempt, s, r as u32, Err(Outcome::Cancelled), self.now);
                }
                false
            }
            Some(pending @ Pending::Sent) => {
                *pending = Pending::Arrived(None);
                true
            }
            _ => true,
        }
    }

    /// Attempt `attempt` of `call`, at service `s`, became job `job` (`None`: it was refused).
    pub(super) fn visit_started(&mut self, call: Key, attempt: u32, s: usize, job: Option<Key>) {
        if !self.services[s].cancellable {
            return;
        }
        if let Some(reached) = self.calls.get_mut(call).and_then(|state| state.reached.get_mut(attempt as usize)) {
            *reached = job.map_or(Reached::Refused, Reached::Job);
        }
        if let Some(Pending::Arrived(pending)) = self.pending.get_mut(&(call, attempt)) {
            *pending = job;
        }
    }

    /// The cancel of attempt `attempt` of `call` (of job `job`, if its caller knew it) reached
    /// the attempt's replica.
    pub(super) fn cancel_arrives(&mut self, call: Key, attempt: u32, job: Option<Key>) {
        let job = job.or_else(|| match self.pending.remove(&(call, attempt)) {
            Some(Pending::Arrived(job)) => job,
            Some(Pending::Sent) => {
                self.pending.insert((call, attempt), Pending::Overtaken);
                None
            }
            Some(Pending::Overtaken) | None => None,
        });
        if let Some(job) = job {
            self.stop_job(job);
        }
    }

    /// Stops job `key` where it is, unless it answered already; it never answers.
    fn stop_job(&mut self, key: Key) {
        let Some(job) = self.jobs.remove(key) else { return };
        let (s, r) = (job.service as usize, job.replica as usize);
        if let Some(t) = &mut self.tracer {
            t.visit_ended(key, Some(Outcome::Cancelled), self.now);
        }
        match job.stage {
            Stage::Queued => {
                let queued = self.services[s].replicas[r].queue.remove(key);
                assert!(queued, "a queued job is in its queue");
            }
            Stage::Working(started) => {
                self.metrics.work(s, job.sent() >= self.warmup, self.now - started, false);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::time::Duration;
    use tailguard_model::{Experiment, DEFAULT_SCENARIO};

    #[test]
    fn a_cancel_that_overtakes_its_attempt_leaves_no_ghost_job() {
        let yaml = "name: t\nservices:\n  s: { workers: 1, service_time: { dist: constant, value: 10ms } }\nnetwork: { delay: 1ms }\nworkload: { target: s, open: { rate: 1, arrival: constant }, requests: 1, client: { balancer: { kind: oracle } } }\nvariants: [ { name: v } ]\n";
        let experiment = Experiment::parse(yaml, Path::new("t.yaml")).unwrap();
        let run = experiment.resolve(DEFAULT_SCENARIO, "v", false).unwrap();
        let mut world = World::new(&run, 1).unwrap();
        let step = |world: &mut World| {
            let (at, event) = world.events.pop()?;
            world.now = at;
            world.handle(event);
            Some(())
        };
        // Step: the request starts; its attempt travels (it arrives at 1 ms).
        step(&mut world).unwrap();
        let (call, _) = world.calls.iter().next().expect("the request's call");
        // Step: its caller cancels it at once, and the cancel arrives first (as if the network
        // had reordered them: a fixed delay cannot).
        world.pending.insert((call, 0), Pending::Sent);
        world.cancel_arrives(call, 0, None);
        // Step: the attempt arrives and is dropped: no job, no work, no load, nothing pending.
        while step(&mut world).is_some() {}
        assert_eq!(world.jobs.values().count(), 0);
        assert_eq!(
            (world.loads[0].as_ref().expect("an oracle reads the loads").get(0), world.services[0].replicas[0].held),
            (0, 0)
        );
        assert!(world.pending.is_empty());
        let result = world.metrics.finish("s", "v", Duration::from_secs(1), 0);
        assert_eq!(result.work[0].busy_s, 0.0);
    }
}
