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
//! - [`config`]: what the policies' configuration types share (each family's config type,
//!   `BalancerConfig`, `TimeoutConfig`, ..., is the schema of files that set it), and
//!   [`duration`]: durations as files write them (`250ms`).

pub mod admission;
pub mod balance;
pub mod call;
pub mod config;
pub mod duration;
pub mod hedge;
pub mod retry;
pub mod stats;
pub mod tail_model;
pub mod timeout;

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

/// How an attempt ended, as its caller saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The endpoint answered with success.
    Success,
    /// The endpoint refused the attempt with 429 (admission control); nothing was processed.
    Rejected,
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
}

impl Feedback {
    /// A successful answer after `rtt`, without a chip.
    pub fn success(rtt: Duration) -> Self {
        Feedback { outcome: Outcome::Success, rtt, chip: false }
    }

    /// An attempt that ended with `outcome` after `rtt`, without a chip.
    pub fn new(outcome: Outcome, rtt: Duration) -> Self {
        Feedback { outcome, rtt, chip: false }
    }

    /// The same feedback carrying a chip.
    pub fn with_chip(mut self, chip: bool) -> Self {
        self.chip = chip;
        self
    }
}
