//! Fixed capacity: a replica holds at most `cap` requests and refuses the rest with 429.
//!
//! The simplest of BLOC's server-side capacities (bloc-load-balancing.txt §IV-D, "a fixed Capacity
//! value for each microservice based on its expected service time and SLO"; §IV-C, "if a node
//! receives a request which would push its queue length above its capacity, then it will reject
//! the request"). Capacity × service time bounds the time a request can spend queued. Chips follow
//! the trait's default rule (§IV-A) with this capacity.

use super::Admission;
use crate::Time;

/// Admits a request only while the replica holds fewer than `cap` requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedCapacity {
    cap: u32,
}

impl FixedCapacity {
    /// A replica that holds at most `cap` requests (queued plus in service). A `cap` of 0 refuses
    /// everything.
    pub fn new(cap: u32) -> Self {
        FixedCapacity { cap }
    }
}

impl Admission for FixedCapacity {
    fn admit(&mut self, _now: Time, in_system: u32) -> bool {
        in_system < self.cap
    }

    fn observe(&mut self, _now: Time, _in_system: u32) {}

    fn capacity(&self, _now: Time) -> Option<u32> {
        Some(self.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_pcg::Pcg64Mcg;

    #[test]
    fn admits_until_the_replica_holds_cap_requests() {
        let mut a = FixedCapacity::new(3);
        let now = Time::ZERO;
        // Holding 0, 1 or 2 requests, one more fits.
        assert!(a.admit(now, 0));
        assert!(a.admit(now, 1));
        assert!(a.admit(now, 2));
        // Holding 3 (the capacity) or more, it is refused with 429.
        assert!(!a.admit(now, 3));
        assert!(!a.admit(now, 40));
        assert_eq!(a.capacity(now), Some(3));
    }

    #[test]
    fn zero_capacity_refuses_everything() {
        let mut a = FixedCapacity::new(0);
        assert!(!a.admit(Time::ZERO, 0));
        assert_eq!(a.capacity(Time::ZERO), Some(0));
    }

    #[test]
    fn chips_follow_the_bloc_rule() {
        let mut a = FixedCapacity::new(10);
        let mut rng = Pcg64Mcg::seed_from_u64(6);
        // q = 0: never refused a chip, since r > 0.
        assert!((0..100).all(|_| a.grant_chip(Time::ZERO, 0, &mut rng)));
        // q = 9 is above 0.8 · cap = 8: every r ≤ 1 is below 9/8, so never a chip.
        assert!((0..100).all(|_| !a.grant_chip(Time::ZERO, 9, &mut rng)));
        // q = 4: no chip when r < 4/8 = 1/2, so about half of 1000 responses carry one.
        let chips = (0..1000).filter(|_| a.grant_chip(Time::ZERO, 4, &mut rng)).count();
        assert_eq!(chips, 507);
    }
}
