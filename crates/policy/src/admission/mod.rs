//! Admission control at a replica: whether an arriving request is admitted or refused with 429,
//! and whether a response carries a BLOC confidence chip.

mod capacity;
mod dynamic;

pub use capacity::FixedCapacity;
pub use dynamic::DynamicCapacity;

use crate::{Rng, Time};

/// Decides admission at one replica from its queue length `q`.
///
/// `q` follows bloc-load-balancing.txt §IV-A/§IV-C ("the number of requests currently queued"):
/// the requests waiting for a worker when the replica's concurrency is known, else every request it
/// holds (a sidecar that does not know its application's concurrency counts requests in flight).
/// The parameter is named `in_system` below for that second, general case.
pub trait Admission: Send {
    /// Whether a request arriving at `now` is admitted, given the `in_system` requests the replica
    /// holds (queued plus in service) before it. `false` means answer 429.
    fn admit(&mut self, now: Time, in_system: u32) -> bool;

    /// The replica's request count changed to `in_system` at `now` (arrivals and departures), so
    /// policies that learn from the load over time can follow it.
    fn observe(&mut self, now: Time, in_system: u32);

    /// The capacity in force at `now`, if any.
    fn capacity(&self, now: Time) -> Option<u32>;

    /// Whether a response leaving at `now` carries a confidence chip (bloc-load-balancing.txt §IV-A):
    /// with `q` requests queued, no chip with probability `q / (0.8 · cap)`. Without a capacity
    /// every response carries a chip.
    fn grant_chip(&mut self, now: Time, in_system: u32, rng: Rng<'_>) -> bool {
        use rand::Rng as _;
        match self.capacity(now) {
            None => true,
            Some(cap) => {
                let r: f64 = 1.0 - rng.gen::<f64>(); // uniform in (0, 1], as the paper draws it
                r >= f64::from(in_system) / (0.8 * f64::from(cap.max(1)))
            }
        }
    }
}

/// Admits everything.
#[derive(Clone, Debug, Default)]
pub struct AdmitAll;

impl Admission for AdmitAll {
    fn admit(&mut self, _now: Time, _in_system: u32) -> bool {
        true
    }
    fn observe(&mut self, _now: Time, _in_system: u32) {}
    fn capacity(&self, _now: Time) -> Option<u32> {
        None
    }
}
