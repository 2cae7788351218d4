//! The sans-IO policy core of tailguard.
//!
//! Every policy here is a plain state machine: it is handed the current time (`now`, a
//! [`Time`] measured from the driver's own epoch) and a random source, returns decisions and is
//! told outcomes. Nothing in this crate reads a clock, sleeps, spawns or does I/O, so the proxy
//! drives it with real time and the simulator with virtual time, and unit tests are exact.
//!
//! Modules, one concept each:
//! - [`balance`]: which endpoint gets the next attempt;
//! - [`admission`]: whether a replica admits a request, and whether it grants a BLOC chip;
//! - [`timeout`]: how long an attempt may take;
//! - [`hedge`]: when to send a speculative (hedged) attempt;
//! - [`retry`]: whether and when a failed attempt is retried, within a budget;
//! - [`call`]: one request's attempts, driven by all of the above;
//! - [`class`]: request classes (routes), each with its own timeout, hedge and race record;
//! - [`peer`]: what HAProxy and nginx do in tailguard's place, as policies of this core;
//! - [`config`]: what the policies' configuration types share (each family's config type,
//!   `BalancerConfig`, `TimeoutConfig`, ..., is the schema of files that set it), and
//!   [`duration`]: durations as files write them (`250ms`).

pub mod admission;
pub mod balance;
pub mod call;
pub mod class;
pub mod config;
pub mod duration;
pub mod hedge;
pub mod peer;
pub mod retry;
pub mod stats;
pub mod tail_model;
pub mod timeout;

use balance::ProbeReply;
use std::time::Duration;

/// A point in time, as the time elapsed since the driver's epoch (virtual or real).
pub type Time = Duration;

/// The random source every randomised decision draws from; drivers seed it.
pub type Rng<'a> = &'a mut dyn rand::RngCore;

/// Index of an endpoint (a replica of the called service) in the caller's endpoint list.
pub type EndpointId = usize;

/// `t` in whole nanoseconds, saturating at `u64::MAX` (584 years).
pub fn nanos(t: Time) -> u64 {
    u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)
}

/// An `Option<Time>` in 8 bytes instead of 16: whole nanoseconds, `u64::MAX` for none. A driver
/// keeps several times per request in flight (a simulator thousands of requests), and each
/// cache line a request's state spans is a miss when its next event comes. Every time below
/// 2^64 - 2 ns (584 years) is kept exactly; later ones read back as `Time::MAX`, which is what a
/// saturating addition gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedTime(u64);

impl PackedTime {
    /// No time.
    pub const NONE: PackedTime = PackedTime(u64::MAX);
    /// What `Time::MAX`, and every time from it down to this many nanoseconds, is kept as.
    const FAR: u64 = u64::MAX - 1;

    /// `t`, or none.
    pub fn new(t: Option<Time>) -> PackedTime {
        t.map_or(PackedTime::NONE, PackedTime::at)
    }

    /// The time `t`.
    pub fn at(t: Time) -> PackedTime {
        PackedTime(u64::try_from(t.as_nanos()).map_or(Self::FAR, |n| n.min(Self::FAR)))
    }

    /// The time kept, if any.
    pub fn get(self) -> Option<Time> {
        match self.0 {
            u64::MAX => None,
            Self::FAR => Some(Time::MAX),
            n => Some(Duration::from_nanos(n)),
        }
    }

    /// Whether no time is kept.
    pub fn is_none(self) -> bool {
        self == PackedTime::NONE
    }
}

/// How an attempt ended, as its caller saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The endpoint answered with success.
    Success,
    /// The endpoint refused the attempt with 429 (admission control); nothing was processed.
    Rejected,
    /// The endpoint passed on a refusal from further down (its application answered 429 because
    /// a call of its own was refused): the service it depends on is over capacity, so retrying
    /// on another endpoint would only repeat the work and meet the same refusal (Google SRE's
    /// "overloaded; don't retry"). Never retried; not the endpoint's failure.
    Overloaded,
    /// The endpoint answered with an error (5xx).
    Error,
    /// The endpoint could not be reached (connection refused, replica down); nothing was processed.
    Unavailable,
    /// The attempt's timeout fired before an answer.
    TimedOut,
    /// The caller stopped waiting because another attempt already won (hedging) or the request ended.
    Cancelled,
}

impl Outcome {
    /// Whether the endpoint did not process the attempt, so retrying elsewhere is always safe.
    pub fn not_processed(self) -> bool {
        matches!(self, Outcome::Rejected | Outcome::Unavailable)
    }

    /// The outcome's name in span tags and logs ("timed_out", ...).
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Rejected => "rejected",
            Outcome::Overloaded => "overloaded",
            Outcome::Error => "error",
            Outcome::Unavailable => "unavailable",
            Outcome::TimedOut => "timed_out",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// What a caller learns when an attempt to an endpoint ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Feedback {
    /// How the attempt ended.
    pub outcome: Outcome,
    /// Time from sending the attempt to its end.
    pub rtt: Duration,
    /// Whether the response carried a BLOC confidence chip.
    pub chip: bool,
    /// What the response said of the endpoint's load ([`LoadReport::None`] without a response).
    pub load: LoadReport,
}

impl Feedback {
    /// A successful answer after `rtt`, without a chip or a load report.
    pub fn success(rtt: Duration) -> Self {
        Feedback::new(Outcome::Success, rtt)
    }

    /// An attempt that ended with `outcome` after `rtt`, without a chip or a load report.
    pub fn new(outcome: Outcome, rtt: Duration) -> Self {
        Feedback { outcome, rtt, chip: false, load: LoadReport::None }
    }

    /// The same feedback carrying a chip.
    pub fn with_chip(mut self, chip: bool) -> Self {
        self.chip = chip;
        self
    }

    /// The same feedback with what the response said of the endpoint's load.
    pub fn with_load(mut self, load: LoadReport) -> Self {
        self.load = load;
        self
    }
}

/// What an endpoint's answer (to a request or to a probe) said of its load: the endpoint's
/// sidecar reports its requests in flight and latency estimate on every response it forwards
/// (the proxy's `x-tailguard-load`), and answers probes with the same; a plain application says
/// nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LoadReport {
    /// Nothing is known: no answer came (a timeout, an unreachable endpoint, a cancellation).
    #[default]
    None,
    /// An answer without a report: no sidecar reports this endpoint's load (to this caller).
    Missing,
    /// The endpoint's sidecar reported its load.
    Load(ProbeReply),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_time_keeps_every_time_to_the_nanosecond_and_saturates_at_the_top() {
        for t in [Duration::ZERO, Duration::new(1, 1), Duration::from_nanos(u64::MAX - 2)] {
            assert_eq!(PackedTime::at(t).get(), Some(t));
            assert_eq!(PackedTime::new(Some(t)).get(), Some(t));
        }
        assert_eq!(PackedTime::at(Duration::MAX).get(), Some(Duration::MAX));
        assert_eq!(PackedTime::at(Duration::from_nanos(u64::MAX)).get(), Some(Duration::MAX));
        assert_eq!(PackedTime::new(None).get(), None);
        assert!(PackedTime::NONE.is_none());
        assert!(!PackedTime::at(Duration::ZERO).is_none());
        assert_eq!(std::mem::size_of::<PackedTime>(), 8);
    }
}
