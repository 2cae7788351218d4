//! Oracle: join the shortest queue, seeing every replica's true load (simulator only).
//!
//! Centralised join-shortest-queue (JSQ), the limit that decentralised balancers approach: the
//! simulator hands [`Pick::true_loads`], the number of requests each replica holds right now, and the
//! oracle sends the attempt to the eligible replica holding the fewest, breaking ties uniformly at
//! random (so equal replicas share the load instead of the lowest index taking it all). Not a
//! policy from the seeds but the yardstick for them, as an omniscient dispatcher is in the
//! load-balancing literature. Without true loads (a real proxy) it falls back to the fewest requests
//! in flight from this caller, with the same tie-breaking, so it still runs.

use super::{Balancer, Eligible, InFlight, Pick};
use crate::{EndpointId, Feedback, Rng, Time};
use rand::Rng as _;

/// Join-shortest-queue on the true queue lengths, ties broken at random.
#[derive(Clone, Debug)]
pub struct Oracle {
    in_flight: InFlight,
    eligible: Eligible,
}

impl Oracle {
    /// An oracle over endpoints `0..endpoints`.
    pub fn new(endpoints: usize) -> Self {
        Oracle { in_flight: InFlight::new(endpoints), eligible: Eligible::new(endpoints) }
    }
}

/// The candidate with the lowest `load`, chosen uniformly at random among equal lowest ones
/// (reservoir sampling: the k-th tie replaces the choice with probability 1/k).
fn least_loaded(candidates: &[EndpointId], rng: Rng<'_>, load: impl Fn(EndpointId) -> u32) -> Option<EndpointId> {
    let mut best: Option<(EndpointId, u32)> = None;
    let mut ties = 0u32;
    for &e in candidates {
        let l = load(e);
        match best {
            Some((_, b)) if l > b => {}
            Some((_, b)) if l == b => {
                ties += 1;
                if rng.gen_range(0..ties) == 0 {
                    best = Some((e, l));
                }
            }
            _ => {
                best = Some((e, l));
                ties = 1;
            }
        }
    }
    best.map(|(e, _)| e)
}

impl Balancer for Oracle {
    fn pick(&mut self, pick: &mut Pick<'_>) -> Option<EndpointId> {
        let candidates = self.eligible.among(pick.exclude);
        let rng = &mut *pick.rng;
        match pick.true_loads {
            // A replica the simulator reports no load for is taken only when nothing else is left.
            Some(loads) => least_loaded(candidates, rng, |e| loads.get(e).copied().unwrap_or(u32::MAX)),
            None => least_loaded(candidates, rng, |e| self.in_flight.get(e)),
        }
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
    use rand::SeedableRng;
    use rand_pcg::Pcg64Mcg;
    use std::time::Duration;

    fn pick_with(
        b: &mut Oracle,
        rng: &mut Pcg64Mcg,
        exclude: &[EndpointId],
        true_loads: Option<&[u32]>,
    ) -> Option<EndpointId> {
        b.pick(&mut Pick { now: Time::ZERO, rng, exclude, true_loads })
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
        assert_eq!(counts, [0, 1531, 0, 1469]);
    }

    #[test]
    fn the_tie_break_draws_once_per_later_tie() {
        // Ties at 0 among [1, 2, 3]: the second tie is kept with probability 1/2, the third with 1/3.
        let mut rng = Pcg64Mcg::seed_from_u64(21);
        let mut twin = Pcg64Mcg::seed_from_u64(21);
        for _ in 0..20 {
            let mut expected = 1;
            if twin.gen_range(0..2) == 0 {
                expected = 2;
            }
            if twin.gen_range(0..3) == 0 {
                expected = 3;
            }
            assert_eq!(least_loaded(&[1, 2, 3], &mut rng, |_| 0), Some(expected));
        }
    }

    #[test]
    fn a_replica_without_a_reported_load_is_the_last_resort() {
        let mut b = Oracle::new(3);
        let mut rng = Pcg64Mcg::seed_from_u64(2);
        // The simulator reported two loads for three endpoints: 2 counts as full.
        assert_eq!(pick_with(&mut b, &mut rng, &[], Some(&[7, 9])), Some(0));
        assert_eq!(pick_with(&mut b, &mut rng, &[0, 1], Some(&[7, 9])), Some(2));
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
