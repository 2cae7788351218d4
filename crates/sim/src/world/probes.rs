//! Prequal's probes: a probe travels one network hop to its replica, which answers at once (no
//! worker, no queue place) with the requests it holds and its latency estimate
//! ([`ProbeResponder`](tailguard_policy::balance::ProbeResponder)); the reply travels one hop
//! back to the caller's balancer, and to the call whose pick waits for it, if one does. A replica
//! that is down answers nothing and the probe is lost.

use super::{Event, World};
use crate::slab::Key;
use tailguard_policy::balance::ProbeReply;

impl World {
    pub(super) fn probe_arrives(&mut self, policy: u32, service: u16, replica: u32, awaited_by: Option<Key>) {
        let svc = &self.services[service as usize];
        let rep = &svc.replicas[replica as usize];
        if rep.model.is_down(self.now) {
            return;
        }
        // Only a prequal balancer probes, and its callee's replicas answer probes (World::new).
        let Some(probes) = svc.probes.get(replica as usize) else { return };
        let reply = probes.reply(rep.held);
        let hop = self.hop();
        self.events.push(self.now + hop, Event::ProbeAnswered { policy, endpoint: replica, reply, awaited_by });
    }

    pub(super) fn probe_answered(&mut self, policy: u32, endpoint: u32, reply: ProbeReply, awaited_by: Option<Key>) {
        self.policies[policy as usize].policy.balancer.on_probe(endpoint as usize, self.now, reply);
        if let Some(call) = awaited_by {
            // A call that finished meanwhile is gone: step_call skips it.
            self.step_call(call, |call, ctx| call.on_probe_done(ctx));
        }
    }
}
