//! Prequal's probes: a probe travels one network hop to its replica, which answers at once (no
//! worker, no queue place) with the requests it holds and its latency estimate
//! ([`ProbeResponder`](tailguard_policy::balance::ProbeResponder)); the reply travels one hop
//! back to the caller's balancer. A replica that is down answers nothing and the probe is lost.

use super::{Event, World};
use tailguard_policy::balance::ProbeReply;

impl World {
    pub(super) fn probe_arrives(&mut self, policy: u32, service: u16, replica: u32) {
        let svc = &self.services[service as usize];
        let rep = &svc.replicas[replica as usize];
        if rep.model.is_down(self.now) {
            return;
        }
        // Only a prequal balancer probes, and its callee's replicas answer probes (World::new).
        let Some(probes) = svc.probes.get(replica as usize) else { return };
        let reply = probes.reply(rep.held);
        let hop = self.hop();
        self.events.push(self.now + hop, Event::ProbeAnswered { policy, endpoint: replica, reply });
    }

    pub(super) fn probe_answered(&mut self, policy: u32, endpoint: u32, reply: ProbeReply) {
        self.policies[policy as usize].policy.balancer.on_probe(endpoint as usize, self.now, reply);
    }
}
