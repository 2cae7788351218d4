//! Least connections: of every endpoint, the one with the fewest requests in flight from this
//! caller, in turn among equals.
//!
//! HAProxy's `leastconn` and nginx's `least_conn` (both "round-robin within groups of servers of
//! the same load"), and Envoy's `LEAST_REQUEST` with every host compared; the full scan that
//! [`LeastRequest`](super::LeastRequest)'s two random choices approximate. A single caller sees
//! every request it sent, so the scan is exact for it; many callers each see only their own (the
//! "herd" that two random choices avoid: bloc-load-balancing.txt §V). A cursor breaks ties: the
//! first endpoint at or after it with the fewest requests wins, and it moves past the winner.

use super::{Balancer, Eligible, InFlight, Pick};
use crate::{EndpointId, Feedback, Time};

/// The fewest in-flight requests of all endpoints, ties in turn.
#[derive(Clone, Debug)]
pub struct LeastConnections {
    in_flight: InFlight,
    eligible: Eligible,
    endpoints: usize,
    /// Where the search for the fewest starts.
    next: EndpointId,
}

impl LeastConnections {
    /// A balancer over endpoints `0..endpoints`, none of them with requests in flight.
    pub fn new(endpoints: usize) -> Self {
        LeastConnections { in_flight: InFlight::new(endpoints), eligible: Eligible::new(endpoints), endpoints, next: 0 }
    }
}

impl Balancer for LeastConnections {
    fn pick(&mut self, pick: &mut Pick<'_>) -> Option<EndpointId> {
        let candidates = self.eligible.among(pick.exclude);
        let n = self.endpoints;
        let start = (0..candidates.len()).position(|i| candidates.get(i) >= self.next).unwrap_or(0);
        let order = (0..candidates.len()).map(|k| candidates.get((start + k) % candidates.len()));
        let in_flight = &self.in_flight;
        let chosen = order.min_by_key(|&e| in_flight.get(e))?;
        self.next = (chosen + 1) % n.max(1);
        Some(chosen)
    }

    fn grow(&mut self, endpoints: usize) {
        self.in_flight.grow(endpoints);
        self.eligible.grow(endpoints);
        self.endpoints = endpoints.max(self.endpoints);
    }

    fn on_send(&mut self, endpoint: EndpointId, _now: Time) {
        self.in_flight.inc(endpoint);
    }

    fn on_feedback(&mut self, endpoint: EndpointId, _now: Time, _feedback: &Feedback) {
        self.in_flight.dec(endpoint);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_pcg::Pcg64Mcg;

    fn pick_with(b: &mut LeastConnections, exclude: &[EndpointId]) -> Option<EndpointId> {
        let mut rng = Pcg64Mcg::seed_from_u64(0);
        b.pick(&mut Pick { now: Time::ZERO, rng: &mut rng, exclude, true_loads: None })
    }

    #[test]
    fn the_fewest_in_flight_wins_and_equals_take_turns() {
        let mut b = LeastConnections::new(3);
        // Step: all idle: in turn.
        assert_eq!(
            [pick_with(&mut b, &[]), pick_with(&mut b, &[]), pick_with(&mut b, &[])],
            [Some(0), Some(1), Some(2)]
        );
        // Step: 0 and 2 busy: 1 every time.
        b.on_send(0, Time::ZERO);
        b.on_send(2, Time::ZERO);
        assert_eq!([pick_with(&mut b, &[]), pick_with(&mut b, &[])], [Some(1), Some(1)]);
        // Step: a retry that tried 1 takes the next of the equals after the cursor.
        assert_eq!(pick_with(&mut b, &[1]), Some(2));
        assert_eq!(pick_with(&mut LeastConnections::new(0), &[]), None);
    }
}
