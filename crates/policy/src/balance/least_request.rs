//! P2C least-request: of two endpoints drawn at random, the one with fewer requests in flight.
//!
//! Envoy's default `LEAST_REQUEST` balancer and tower's `p2c` over a pending-requests load
//! (Mitzenmacher, "The Power of Two Choices in Randomized Load Balancing"); the "P2C Least
//! Connection" baseline of bloc-load-balancing.txt §V-B. The counts are this caller's own: an
//! attempt is counted from [`Balancer::on_send`] until its [`Balancer::on_feedback`], whatever the
//! outcome (a timeout or cancellation ends it too). Ties go to the first endpoint drawn.

use super::{p2c, Balancer, Eligible, InFlight, Pick};
use crate::{EndpointId, Feedback, Time};

/// Power of two choices on this caller's in-flight request counts.
#[derive(Clone, Debug)]
pub struct LeastRequest {
    in_flight: InFlight,
    eligible: Eligible,
}

impl LeastRequest {
    /// A balancer over endpoints `0..endpoints`, none of them with requests in flight.
    pub fn new(endpoints: usize) -> Self {
        LeastRequest { in_flight: InFlight::new(endpoints), eligible: Eligible::new(endpoints) }
    }
}

impl Balancer for LeastRequest {
    fn pick(&mut self, pick: &mut Pick<'_>) -> Option<EndpointId> {
        let in_flight = &self.in_flight;
        let candidates = self.eligible.among(pick.exclude);
        p2c(candidates.len(), |i| candidates.get(i), &mut *pick.rng, |e| f64::from(in_flight.get(e)))
    }

    fn grow(&mut self, endpoints: usize) {
        self.in_flight.grow(endpoints);
        self.eligible.grow(endpoints);
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

    fn pick_with(b: &mut LeastRequest, rng: &mut Pcg64Mcg, exclude: &[EndpointId]) -> Option<EndpointId> {
        b.pick(&mut Pick { now: Time::ZERO, rng, exclude, true_loads: None })
    }

    #[test]
    fn of_two_endpoints_the_less_loaded_always_wins() {
        let mut b = LeastRequest::new(2);
        let mut rng = Pcg64Mcg::seed_from_u64(11);
        // Endpoint 0 has two requests in flight, endpoint 1 one.
        b.on_send(0, Time::ZERO);
        b.on_send(0, Time::ZERO);
        b.on_send(1, Time::ZERO);
        // With two endpoints both are always drawn, so 1 wins every time.
        for _ in 0..10 {
            assert_eq!(pick_with(&mut b, &mut rng, &[]), Some(1));
        }
        // Both of 0's requests end (one fails, one times out): now 0 is the less loaded.
        b.on_feedback(0, Time::ZERO, &Feedback::new(Outcome::Error, Duration::from_millis(3)));
        b.on_feedback(0, Time::ZERO, &Feedback::new(Outcome::TimedOut, Duration::from_millis(9)));
        assert_eq!(pick_with(&mut b, &mut rng, &[]), Some(0));
    }

    #[test]
    fn compares_the_two_drawn_endpoints_only() {
        let mut b = LeastRequest::new(3);
        // Loads 0, 5, 9: endpoint 2 never wins a draw, 0 wins both draws it is in, and 1 wins only
        // against 2.
        (0..5).for_each(|_| b.on_send(1, Time::ZERO));
        (0..9).for_each(|_| b.on_send(2, Time::ZERO));
        let mut rng = Pcg64Mcg::seed_from_u64(5);
        let mut twin = Pcg64Mcg::seed_from_u64(5);
        for _ in 0..30 {
            let expected = p2c(3, |i| i, &mut twin, |e| [0.0, 5.0, 9.0][e]);
            let got = pick_with(&mut b, &mut rng, &[]);
            assert_eq!(got, expected);
            assert_ne!(got, Some(2));
        }
    }

    #[test]
    fn skips_the_endpoints_this_request_tried() {
        let mut b = LeastRequest::new(3);
        let mut rng = Pcg64Mcg::seed_from_u64(2);
        // Endpoint 2 is the busiest but the only one not tried yet.
        (0..4).for_each(|_| b.on_send(2, Time::ZERO));
        assert_eq!(pick_with(&mut b, &mut rng, &[0, 1]), Some(2));
    }

    #[test]
    fn feedback_without_a_send_does_not_underflow() {
        let mut b = LeastRequest::new(2);
        let mut rng = Pcg64Mcg::seed_from_u64(4);
        // A stray end on endpoint 0 leaves its count at 0, not at u32::MAX.
        b.on_feedback(0, Time::ZERO, &Feedback::new(Outcome::Cancelled, Duration::ZERO));
        assert_eq!(b.in_flight.get(0), 0);
        // One send on 0 makes it busier than 1.
        b.on_send(0, Time::ZERO);
        assert_eq!(pick_with(&mut b, &mut rng, &[]), Some(1));
    }
}
