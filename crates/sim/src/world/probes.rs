//! Prequal's load reports: a replica's sidecar reports the requests it holds and its latency
//! estimate ([`ProbeResponder`](tailguard_policy::balance::ProbeResponder)) on every answer it
//! sends, and in reply to probes. A probe travels one network hop to its replica, which answers at
//! once (no worker, no queue place); the reply travels one hop back to the caller's balancer, and
//! to the call whose pick waits for it, if one does. A replica that is down answers nothing and the
//! probe is lost. A replica without a sidecar reports nothing, and answers a probe (which Prequal
//! never sends it: it probes only replicas that have reported) with something that is not a
//! probe reply.

use super::{Event, World};
use crate::slab::Key;
use std::time::Duration;
use tailguard_policy::balance::ProbeReply;
use tailguard_policy::LoadReport;

/// A [`LoadReport`] as it travels with an answer, in 8 bytes (an event fills one cache line): the
/// latency in whole microseconds, as the proxy's `x-tailguard-load` header carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Carried {
    /// The RIF, or [`Carried::NO_ANSWER`] or [`Carried::NO_REPORT`].
    in_flight: u32,
    latency_us: u32,
}

impl Carried {
    const NO_ANSWER: u32 = u32::MAX;
    const NO_REPORT: u32 = u32::MAX - 1;
    /// Nothing known ([`LoadReport::None`]).
    pub(super) const NONE: Carried = Carried { in_flight: Carried::NO_ANSWER, latency_us: 0 };
    /// An answer without a report ([`LoadReport::Missing`]).
    pub(super) const MISSING: Carried = Carried { in_flight: Carried::NO_REPORT, latency_us: 0 };

    /// A sidecar's report.
    pub(super) fn load(reply: ProbeReply) -> Carried {
        let latency_us = u32::try_from(reply.latency.as_micros()).unwrap_or(u32::MAX);
        Carried { in_flight: reply.in_flight.min(Carried::NO_REPORT - 1), latency_us }
    }

    pub(super) fn get(self) -> LoadReport {
        match self.in_flight {
            Carried::NO_ANSWER => LoadReport::None,
            Carried::NO_REPORT => LoadReport::Missing,
            in_flight => {
                LoadReport::Load(ProbeReply { in_flight, latency: Duration::from_micros(self.latency_us.into()) })
            }
        }
    }
}

impl World {
    /// What an answer from replica `replica` of service `service` says of its load now: its
    /// sidecar's report, kept only where Prequal picks among the service's replicas, or nothing
    /// from a replica without one.
    pub(super) fn report(&self, service: usize, replica: usize) -> Carried {
        let svc = &self.services[service];
        let rep = &svc.replicas[replica];
        if !rep.sidecar {
            return Carried::MISSING;
        }
        svc.probes.get(replica).map_or(Carried::NONE, |probes| Carried::load(probes.reply(rep.held)))
    }

    pub(super) fn probe_arrives(&mut self, policy: u32, service: u16, replica: u32, awaited_by: Option<Key>) {
        let (s, r) = (service as usize, replica as usize);
        if self.services[s].replicas[r].model.is_down(self.now) {
            return;
        }
        let report = self.report(s, r);
        let hop = self.hop();
        self.events.push(self.now + hop, Event::ProbeAnswered { policy, endpoint: replica, report, awaited_by });
    }

    pub(super) fn probe_answered(&mut self, policy: u32, endpoint: u32, report: Carried, awaited_by: Option<Key>) {
        self.policies[policy as usize].policy.balancer.on_probe(endpoint as usize, self.now, report.get());
        if let Some(call) = awaited_by {
            // A call that finished meanwhile is gone: step_call skips it.
            self.step_call(call, |call, ctx| call.on_probe_done(ctx));
        }
    }
}
