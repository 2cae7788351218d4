//! Admission control at a replica: whether an arriving request is admitted or refused with 429,
//! and whether a response carries a BLOC confidence chip.

mod adaptive;
mod capacity;
mod dynamic;

pub use adaptive::{AdaptiveAdmission, Arrival, Marks, Priority, FALLBACK_HEADER, PRIORITY_HEADER};
pub use capacity::FixedCapacity;
pub use dynamic::DynamicCapacity;

use crate::config::{self, Check};
use crate::duration::text;
use crate::{Rng, Time};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The window of BLOC's dynamic capacity when the file gives none (bloc-load-balancing.txt §IV-D).
pub const DEFAULT_DYNAMIC_WINDOW: Duration = Duration::from_secs(30);

/// Admission control at a replica, as experiment and proxy files write it (`kind:`);
/// [`AdmissionConfig::build`] makes the policy.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum AdmissionConfig {
    /// Admit everything.
    #[default]
    None,
    /// Refuse with 429 above `capacity` requests held.
    Fixed { capacity: u32 },
    /// BLOC's running-mean capacity, recomputed every `window` (§IV-D).
    Dynamic {
        #[serde(default = "default_dynamic_window", with = "text")]
        window: Duration,
        /// The capacity is the last window's level of load times this (1 is the paper's rule).
        #[serde(default = "default_headroom")]
        headroom: f64,
        /// The level of load is its mean plus this many standard deviations (0 is the paper's
        /// rule).
        #[serde(default = "default_deviations")]
        deviations: f64,
        /// Whether the capacity never falls below the count of requests the replica was seen to
        /// hold without queueing ([`DynamicCapacity::with_floor`]; `false` is the paper's rule).
        #[serde(default = "default_floor")]
        floor: bool,
    },
    /// Refuses, while a queue stands, the requests that would wait more than about half a
    /// service, low priority first ([`AdaptiveAdmission`]); nothing to set.
    Adaptive,
}

fn default_floor() -> bool {
    true
}

fn default_dynamic_window() -> Duration {
    DEFAULT_DYNAMIC_WINDOW
}

fn default_headroom() -> f64 {
    DEFAULT_HEADROOM
}

fn default_deviations() -> f64 {
    DEFAULT_DEVIATIONS
}

/// The factor over the last window's level of load that dynamic capacity admits by default.
pub const DEFAULT_HEADROOM: f64 = 1.5;

/// The standard deviations of the load over its mean that dynamic capacity allows for by default:
/// the normal approximation of its 99th percentile, so that at a steady load about 1 % of the
/// arrivals would find the replica at that level (docs/policies.md).
pub const DEFAULT_DEVIATIONS: f64 = 2.33;

impl AdmissionConfig {
    /// Checks the parameters; the error names the field.
    pub fn validate(&self) -> Check {
        match self {
            AdmissionConfig::None | AdmissionConfig::Adaptive => Ok(()),
            AdmissionConfig::Fixed { capacity } => config::at_least_one("capacity", *capacity),
            AdmissionConfig::Dynamic { window, headroom, deviations, .. } => {
                config::positive("window", *window)?;
                config::at_least("headroom", *headroom, 1.0)?;
                config::at_least("deviations", *deviations, 0.0)
            }
        }
    }

    /// The policy at one replica.
    pub fn build(&self) -> Box<dyn Admission> {
        match self {
            AdmissionConfig::None => Box::new(AdmitAll),
            AdmissionConfig::Fixed { capacity } => Box::new(FixedCapacity::new(*capacity)),
            AdmissionConfig::Adaptive => Box::new(AdaptiveAdmission::new()),
            AdmissionConfig::Dynamic { window, headroom, deviations, floor } => Box::new(
                DynamicCapacity::new(*window).with_headroom(*headroom).with_deviations(*deviations).with_floor(*floor),
            ),
        }
    }
}

/// Decides admission at one replica from the requests it holds.
///
/// BLOC's `q` (bloc-load-balancing.txt §IV-A, §IV-C) is "the number of requests currently queued";
/// §IV-D speaks of "active requests", and the published BLOC proxy counts every request between
/// its ingress and the application. We count the same: `in_system` is every request the replica
/// holds, waiting or in service, which is also all a sidecar can see (Envoy's and HAProxy's
/// per-endpoint limits count the same way). A capacity is then a bound on the whole time a request
/// spends at the replica, not only on its wait.
pub trait Admission: Send {
    /// Whether a request arriving at `now` is admitted, given the `in_system` requests the replica
    /// holds (queued plus in service) before it. `false` means answer 429.
    fn admit(&mut self, now: Time, in_system: u32) -> bool;

    /// The same for a request `arrival` says more of; policies that do not read it admit it as any
    /// other.
    fn admit_as(&mut self, now: Time, in_system: u32, _arrival: Arrival) -> bool {
        self.admit(now, in_system)
    }

    /// The replica's request count changed to `in_system` at `now` (arrivals and departures), so
    /// policies that learn from the load over time can follow it.
    fn observe(&mut self, now: Time, in_system: u32);

    /// A request that arrived when the replica held `rif` others was answered with success at
    /// `now`, `latency` after it was admitted, so policies that learn how much the replica holds
    /// without queueing can follow it.
    fn answered(&mut self, _now: Time, _rif: u32, _latency: Duration) {}

    /// The capacity in force at `now`, if any.
    fn capacity(&self, now: Time) -> Option<u32>;

    /// What the policy knows and enforces at `now`, for metrics: by default its capacity, in
    /// force whenever it has one.
    fn state(&self, now: Time) -> AdmissionState {
        let limit = self.capacity(now);
        AdmissionState { limit, enforced: limit.is_some(), base: None }
    }

    /// Whether a response leaving at `now` carries a confidence chip (bloc-load-balancing.txt §IV-A):
    /// with `in_system` requests still held, no chip with probability `in_system / (0.8 · cap)`.
    /// Without a capacity every response carries a chip.
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

/// What an admission policy knows and enforces at a moment ([`Admission::state`]): the proxy's
/// ingress reports it as metrics, as Envoy's adaptive concurrency filter reports its limit and
/// minimum round trip.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AdmissionState {
    /// While the limit is enforced, a request is admitted only if the replica holds fewer than
    /// this (a capacity); once known.
    pub limit: Option<u32>,
    /// Whether requests beyond the limit are refused now.
    pub enforced: bool,
    /// The replica's latency when idle, once learnt (adaptive admission).
    pub base: Option<Duration>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_pcg::Pcg64Mcg;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn the_default_dynamic_capacity_admits_and_grants_chips_at_the_usual_load() {
        let config: AdmissionConfig = serde_yaml_ng::from_str("{kind: dynamic}").unwrap();
        let mut a = config.build();
        // A replica with no queue at about 2 requests held, as a Poisson count of mean 2 would
        // be: 0, 1, 2, 3, 4 and 5 held for 4, 8, 8, 5, 3 and 2 s of the 30 s window.
        let mut at = Duration::ZERO;
        for (load, secs) in [(0, 4), (1, 8), (2, 8), (3, 5), (4, 3), (5, 2)] {
            a.observe(at, load);
            at += secs * SEC;
        }
        // Mean 63/30 = 2.1, mean square 177/30 = 5.9, sd √(5.9 - 4.41) = 1.22: the capacity is
        // 1.5 × (2.1 + 2.33 × 1.22) = 7.41 → 8 (1.5 × the mean alone would be 4).
        assert_eq!(a.capacity(30 * SEC), Some(8));
        assert!(a.admit(30 * SEC, 5));
        // A response leaving 3 held carries a chip unless r < 3 / 6.4: about 53 % of them do
        // (with a capacity of 4, none would: 3 > 0.8 × 4).
        let mut rng = Pcg64Mcg::seed_from_u64(3);
        let chips = (0..1000).filter(|_| a.grant_chip(30 * SEC, 3, &mut rng)).count();
        assert_eq!(chips, 535);
    }
}
