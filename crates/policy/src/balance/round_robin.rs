//! Round robin: endpoints take turns, in index order.
//!
//! The classic rotation (nginx's and Envoy's `ROUND_ROBIN` without weights). A cursor names the
//! next endpoint in turn; a pick takes the first endpoint at or after the cursor that this request
//! has not tried, and moves the cursor past it. When every endpoint has been tried the rotation
//! continues as if nothing were excluded (the [`eligible`](super::eligible) rule). No randomness and
//! no feedback are used, so the sequence is the same for every seed.

use super::{Balancer, Pick};
use crate::{EndpointId, Feedback, Time};

/// Hands out endpoints in turn, skipping the ones this request already tried.
#[derive(Clone, Debug)]
pub struct RoundRobin {
    endpoints: usize,
    /// The endpoint whose turn is next.
    next: EndpointId,
}

impl RoundRobin {
    /// A rotation over endpoints `0..endpoints`, starting at endpoint 0.
    pub fn new(endpoints: usize) -> Self {
        RoundRobin { endpoints, next: 0 }
    }

    /// The first endpoint in turn from the cursor that `exclude` does not name, if any.
    fn next_allowed(&self, exclude: &[EndpointId]) -> Option<EndpointId> {
        (0..self.endpoints).map(|k| (self.next + k) % self.endpoints).find(|e| !exclude.contains(e))
    }
}

impl Balancer for RoundRobin {
    fn pick(&mut self, pick: &mut Pick<'_>) -> Option<EndpointId> {
        if self.endpoints == 0 {
            return None;
        }
        let chosen = self.next_allowed(pick.exclude).unwrap_or(self.next);
        self.next = (chosen + 1) % self.endpoints;
        Some(chosen)
    }

    fn grow(&mut self, endpoints: usize) {
        self.endpoints = endpoints.max(self.endpoints);
    }
    fn on_send(&mut self, _endpoint: EndpointId, _now: Time) {}

    fn on_feedback(&mut self, _endpoint: EndpointId, _now: Time, _feedback: &Feedback) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_pcg::Pcg64Mcg;

    fn pick_with(b: &mut RoundRobin, exclude: &[EndpointId]) -> Option<EndpointId> {
        let mut rng = Pcg64Mcg::seed_from_u64(0);
        b.pick(&mut Pick { now: Time::ZERO, rng: &mut rng, exclude, true_loads: None })
    }

    #[test]
    fn rotates_in_index_order() {
        let mut b = RoundRobin::new(3);
        let picks: Vec<_> = (0..7).map(|_| pick_with(&mut b, &[])).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2, 0].map(Some));
    }

    #[test]
    fn skips_excluded_endpoints_and_moves_the_cursor_past_the_pick() {
        let mut b = RoundRobin::new(4);
        // Endpoint 0's turn, but the request tried 0 and 1 already: 2 it is.
        assert_eq!(pick_with(&mut b, &[0, 1]), Some(2));
        // The cursor is now past 2: 3 is next.
        assert_eq!(pick_with(&mut b, &[]), Some(3));
        // 0's turn; 0 excluded, so 1.
        assert_eq!(pick_with(&mut b, &[0]), Some(1));
        // Then 2, wrapping around after 3 to 0.
        assert_eq!(pick_with(&mut b, &[3]), Some(2));
        assert_eq!(pick_with(&mut b, &[3]), Some(0));
    }

    #[test]
    fn keeps_rotating_when_every_endpoint_is_excluded() {
        let mut b = RoundRobin::new(2);
        assert_eq!(pick_with(&mut b, &[0, 1]), Some(0));
        assert_eq!(pick_with(&mut b, &[0, 1]), Some(1));
        assert_eq!(pick_with(&mut b, &[1, 0]), Some(0));
    }

    #[test]
    fn no_endpoints_means_no_pick() {
        let mut b = RoundRobin::new(0);
        assert_eq!(pick_with(&mut b, &[]), None);
    }
}
