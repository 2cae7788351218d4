//! Admission control at a replica: whether an arriving request is admitted or refused with 429,
//! and whether a response carries a BLOC confidence chip.

mod capacity;
mod dynamic;

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
        /// The capacity is the last window's average load times this (1 is the paper's rule).
        #[serde(default = "default_headroom")]
        headroom: f64,
    },
}

fn default_dynamic_window() -> Duration {
    DEFAULT_DYNAMIC_WINDOW
}

fn default_headroom() -> f64 {
    DEFAULT_HEADROOM
}

/// The factor over the last window's average load that dynamic capacity admits by default.
pub const DEFAULT_HEADROOM: f64 = 1.5;

impl AdmissionConfig {
    /// Checks the parameters; the error names the field.
    pub fn validate(&self) -> Check {
        match self {
            AdmissionConfig::None => Ok(()),
            AdmissionConfig::Fixed { capacity } => config::at_least_one("capacity", *capacity),
            AdmissionConfig::Dynamic { window, headroom } => {
                config::positive("window", *window)?;
                config::at_least("headroom", *headroom, 1.0)
            }
        }
    }

    /// The policy at one replica.
    pub fn build(&self) -> Box<dyn Admission> {
        match self {
            AdmissionConfig::None => Box::new(AdmitAll),
            AdmissionConfig::Fixed { capacity } => Box::new(FixedCapacity::new(*capacity)),
            AdmissionConfig::Dynamic { window, headroom } => {
                Box::new(DynamicCapacity::new(*window).with_headroom(*headroom))
            }
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

    /// The replica's request count changed to `in_system` at `now` (arrivals and departures), so
    /// policies that learn from the load over time can follow it.
    fn observe(&mut self, now: Time, in_system: u32);

    /// The capacity in force at `now`, if any.
    fn capacity(&self, now: Time) -> Option<u32>;

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
