//! Uniform random choice: every eligible endpoint is equally likely.
//!
//! The baseline every other balancer is measured against, and one of the three algorithms of the
//! published BLOC proxy (bloc-load-balancing.txt §V-B). It keeps no state about the endpoints, so
//! it needs no feedback; excluded endpoints (already tried by this request) are skipped unless
//! every endpoint is excluded (see [`Eligible`]).

use super::{Balancer, Eligible, Pick};
use crate::{EndpointId, Feedback, Time};
use rand::Rng as _;

/// Picks an endpoint uniformly at random among the eligible ones.
#[derive(Clone, Debug)]
pub struct RandomBalancer {
    eligible: Eligible,
}

impl RandomBalancer {
    /// A balancer over endpoints `0..endpoints`.
    pub fn new(endpoints: usize) -> Self {
        RandomBalancer { eligible: Eligible::new(endpoints) }
    }
}

impl Balancer for RandomBalancer {
    fn pick(&mut self, pick: &mut Pick<'_>) -> Option<EndpointId> {
        let candidates = self.eligible.among(pick.exclude);
        if candidates.is_empty() {
            return None;
        }
        Some(candidates.get(pick.rng.gen_range(0..candidates.len())))
    }

    fn grow(&mut self, endpoints: usize) {
        self.eligible.grow(endpoints);
    }
    fn on_send(&mut self, _endpoint: EndpointId, _now: Time) {}

    fn on_feedback(&mut self, _endpoint: EndpointId, _now: Time, _feedback: &Feedback) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_pcg::Pcg64Mcg;

    fn pick_with(b: &mut RandomBalancer, rng: &mut Pcg64Mcg, exclude: &[EndpointId]) -> Option<EndpointId> {
        b.pick(&mut Pick { now: Time::ZERO, rng, exclude, true_loads: None })
    }

    #[test]
    fn picks_the_eligible_endpoint_at_the_drawn_index() {
        let mut b = RandomBalancer::new(4);
        let mut rng = Pcg64Mcg::seed_from_u64(7);
        // A twin of the rng predicts every draw: the pick is eligible[gen_range(0..len)].
        let mut twin = Pcg64Mcg::seed_from_u64(7);
        for _ in 0..20 {
            let expected = twin.gen_range(0..4);
            assert_eq!(pick_with(&mut b, &mut rng, &[]), Some(expected));
        }
        // With 1 and 3 excluded the eligible list is [0, 2]: index 0 means 0, index 1 means 2.
        for _ in 0..20 {
            let expected = [0, 2][twin.gen_range(0..2)];
            assert_eq!(pick_with(&mut b, &mut rng, &[1, 3]), Some(expected));
        }
    }

    #[test]
    fn every_endpoint_is_drawn_about_equally_often() {
        let mut b = RandomBalancer::new(3);
        let mut rng = Pcg64Mcg::seed_from_u64(1);
        let mut counts = [0u32; 3];
        for _ in 0..3000 {
            counts[pick_with(&mut b, &mut rng, &[]).expect("three endpoints")] += 1;
        }
        // 3000 draws with seed 1: each count within 7% of 1000.
        assert_eq!(counts, [1006, 934, 1060]);
    }

    #[test]
    fn falls_back_to_all_endpoints_when_all_are_excluded() {
        let mut b = RandomBalancer::new(2);
        let mut rng = Pcg64Mcg::seed_from_u64(3);
        let mut twin = Pcg64Mcg::seed_from_u64(3);
        // Both tried already: the eligible list is [0, 1] again.
        let expected = twin.gen_range(0..2);
        assert_eq!(pick_with(&mut b, &mut rng, &[0, 1]), Some(expected));
    }

    #[test]
    fn no_endpoints_means_no_pick() {
        let mut b = RandomBalancer::new(0);
        let mut rng = Pcg64Mcg::seed_from_u64(0);
        assert_eq!(pick_with(&mut b, &mut rng, &[]), None);
    }
}
