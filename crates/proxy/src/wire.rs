//! The network a sidecar stands in for where the kernel delays nothing: the lab without
//! `tc netem` (docs/lab.md). The ingress holds each request it receives, and each response it
//! sends back, for one hop's one-way delay ([`Network::hop`], the simulator's own draw), so every
//! hop between two services, and the load generator's hop to the entry service, is delayed once
//! each way, as in the simulator.
//!
//! A held message holds nothing a real wire would not: it is not yet admitted (nor counted in
//! flight) on its way in, and already released on its way out; only the caller's connection
//! waits, as it would for packets in flight. The hold is a timer future, dropped with the request
//! when the caller goes away.

use rand_pcg::Pcg64Mcg;
use std::sync::Mutex;
use tailguard_model::schema::Network;

/// One sidecar's side of the network: the hop delay and its jitter draws.
pub(crate) struct Wire {
    network: Network,
    rng: Mutex<Pcg64Mcg>,
}

impl Wire {
    /// The wire of `network`, drawing its jitter from `rng`.
    pub(crate) fn new(network: Network, rng: Pcg64Mcg) -> Wire {
        Wire { network, rng: Mutex::new(rng) }
    }

    /// Completes one hop's delay from now (to the kernel timer's precision: tokio's millisecond
    /// wheel would add 0.5–1 ms to every hop).
    pub(crate) async fn cross(&self) {
        let hop = {
            let mut rng = self.rng.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            self.network.hop(&mut *rng)
        };
        tailguard_serve::precise::sleep(hop).await;
    }
}
