//! Oracle: join the shortest queue, seeing every replica's true load (simulator only).
//!
//! Centralised join-shortest-queue (JSQ), the limit that decentralised balancers approach: the
//! simulator hands [`Pick::true_loads`], the number of requests each replica holds right now, and the
//! oracle sends the attempt to the eligible replica holding the fewest, chosen uniformly at random
//! among equals (so equal replicas share the load instead of the lowest index taking it all). Not a
//! policy from the seeds but the yardstick for them, as an omniscient dispatcher is in the
//! load-balancing literature. Without true loads (a real proxy) it falls back to the fewest requests
//! in flight from this caller, with the same tie-breaking, so it still runs.
//!
//! The loads are a [`LoadIndex`], which keeps the least loaded replicas at hand: a pick costs
//! O(k) for k excluded replicas, not a scan of all of them.

use super::ranked::sorted_exclusions;
use super::{Balancer, LoadIndex, Pick};
use crate::{EndpointId, Feedback, Time};

/// Join-shortest-queue on the true queue lengths, ties broken at random.
#[derive(Clone, Debug)]
pub struct Oracle {
    in_flight: LoadIndex,
    /// The request's tried endpoints, sorted, rebuilt for each pick.
    tried: Vec<EndpointId>,
}

impl Oracle {
    /// An oracle over endpoints `0..endpoints`.
    pub fn new(endpoints: usize) -> Self {
        Oracle { in_flight: LoadIndex::new(endpoints), tried: Vec::new() }
    }
}

impl Balancer for Oracle {
    fn pick(&mut self, pick: &mut Pick<'_>) -> Option<EndpointId> {
        let n = self.in_flight.len();
        // Loads counting other endpoints than this balancer's would answer for the wrong ones.
        let loads = pick.true_loads.filter(|l| l.len() == n).unwrap_or(&self.in_flight);
        sorted_exclusions(pick.exclude, n, &mut self.tried);
        let rng = &mut *pick.rng;
        loads.least(&self.tried, &mut *rng).or_else(|| loads.least(&[], rng))
    }

    fn grow(&mut self, endpoints: usize) {
        self.in_flight.grow(endpoints);
    }
    fn reads_true_loads(&self) -> bool {
        true
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
    use crate::Outcome;
    use rand::{Rng as _, SeedableRng};
    use rand_pcg::Pcg64Mcg;
    use std::time::Duration;

    fn pick_with(
        b: &mut Oracle,
        rng: &mut Pcg64Mcg,
        exclude: &[EndpointId],
        true_loads: Option<&[u32]>,
    ) -> Option<EndpointId> {
        let index = true_loads.map(LoadIndex::from_loads);
        b.pick(&mut Pick { now: Time::ZERO, rng, exclude, true_loads: index.as_ref() })
    }

    #[test]
    fn joins_the_shortest_true_queue() {
        let mut b = Oracle::new(4);
        let mut rng = Pcg64Mcg::seed_from_u64(1);
        // Replica 2 holds the fewest requests.
        assert_eq!(pick_with(&mut b, &mut rng, &[], Some(&[3, 5, 1, 2])), Some(2));
        // The caller's own counts do not matter when the true loads are known.
        (0..10).for_each(|_| b.on_send(3, Time::ZERO));
        assert_eq!(pick_with(&mut b, &mut rng, &[], Some(&[3, 5, 1, 0])), Some(3));
    }

    #[test]
    fn skips_tried_endpoints_unless_all_were_tried() {
        let mut b = Oracle::new(3);
        let mut rng = Pcg64Mcg::seed_from_u64(1);
        let loads: &[u32] = &[0, 4, 2];
        // 0 is shortest but was tried: 2 is next shortest.
        assert_eq!(pick_with(&mut b, &mut rng, &[0], Some(loads)), Some(2));
        // All were tried: back to the shortest of all.
        assert_eq!(pick_with(&mut b, &mut rng, &[0, 1, 2], Some(loads)), Some(0));
    }

    #[test]
    fn ties_are_broken_uniformly_at_random() {
        let mut b = Oracle::new(4);
        let mut rng = Pcg64Mcg::seed_from_u64(8);
        let loads: &[u32] = &[1, 0, 3, 0];
        // Replicas 1 and 3 tie at 0; 3000 picks split between them and never go elsewhere.
        let mut counts = [0u32; 4];
        for _ in 0..3000 {
            counts[pick_with(&mut b, &mut rng, &[], Some(loads)).expect("four endpoints")] += 1;
        }
        assert_eq!(counts, [0, 1498, 0, 1502]);
    }

    #[test]
    fn a_single_least_loaded_replica_costs_no_draw() {
        let mut b = Oracle::new(3);
        let mut rng = Pcg64Mcg::seed_from_u64(21);
        let mut twin = Pcg64Mcg::seed_from_u64(21);
        assert_eq!(pick_with(&mut b, &mut rng, &[], Some(&[4, 1, 2])), Some(1));
        assert_eq!(rng.gen::<u64>(), twin.gen::<u64>());
    }

    #[test]
    fn true_loads_of_other_endpoints_are_ignored() {
        let mut b = Oracle::new(3);
        let mut rng = Pcg64Mcg::seed_from_u64(2);
        (0..2).for_each(|_| b.on_send(0, Time::ZERO));
        (0..2).for_each(|_| b.on_send(2, Time::ZERO));
        // Two loads for three endpoints: the oracle goes by its own counts, where 1 is idle.
        assert_eq!(pick_with(&mut b, &mut rng, &[], Some(&[0, 9])), Some(1));
    }

    #[test]
    fn without_true_loads_falls_back_to_own_in_flight_counts() {
        let mut b = Oracle::new(3);
        let mut rng = Pcg64Mcg::seed_from_u64(3);
        // In flight from this caller: 2, 1, 0.
        (0..2).for_each(|_| b.on_send(0, Time::ZERO));
        b.on_send(1, Time::ZERO);
        assert_eq!(pick_with(&mut b, &mut rng, &[], None), Some(2));
        // 2 takes two attempts; 1's ends (timed out): now 1 is the least loaded.
        (0..2).for_each(|_| b.on_send(2, Time::ZERO));
        b.on_feedback(1, Time::ZERO, &Feedback::new(Outcome::TimedOut, Duration::from_millis(5)));
        assert_eq!(pick_with(&mut b, &mut rng, &[], None), Some(1));
        // A stray end on 1 (nothing in flight there) leaves its count at 0, not at u32::MAX.
        b.on_feedback(1, Time::ZERO, &Feedback::new(Outcome::Cancelled, Duration::ZERO));
        assert_eq!(b.in_flight.get(1), 0);
        assert_eq!(pick_with(&mut b, &mut rng, &[], None), Some(1));
    }

    #[test]
    fn no_endpoints_means_no_pick() {
        let mut b = Oracle::new(0);
        let mut rng = Pcg64Mcg::seed_from_u64(0);
        assert_eq!(pick_with(&mut b, &mut rng, &[], Some(&[])), None);
    }
}
