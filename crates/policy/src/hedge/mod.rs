//! Hedging: when to send a speculative extra attempt while earlier ones are still pending.
//! The first success wins; the [`call`](crate::call) machine cancels the others.

mod adaptive;
mod bucket;
mod percentile;
mod speculative;

pub use adaptive::{AdaptiveHedge, AdaptiveHedgeConfig, AdaptiveRule};
pub use bucket::{HedgeBucket, BUCKET_CAP};
pub use percentile::{PercentileHedge, PercentileHedgeConfig, PAST};
pub use speculative::Speculative;

use crate::config::{self, Check};
use crate::duration::text;
use crate::{Outcome, Time};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A hedging policy and its parameters, as experiment and proxy files write it (`kind:`);
/// [`HedgeConfig::build`] makes the policy.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum HedgeConfig {
    /// No hedged attempts.
    #[default]
    None,
    /// speculative-task.txt: up to `attempts` in all, one more every `patience`; `timeout` bounds
    /// the whole request.
    Speculative {
        attempts: u32,
        #[serde(with = "text")]
        patience: Duration,
        /// The blog's overall timeout: not part of the hedge policy, it shortens the request's
        /// deadline ([`HedgeConfig::deadline`]).
        #[serde(default, with = "text::option", skip_serializing_if = "Option::is_none")]
        timeout: Option<Duration>,
        /// Hedges allowed per request on average, its own limit beside the shared retry budget
        /// (a [`HedgeBucket`]); none by default: the shared budget alone.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget: Option<f64>,
    },
    /// A hedge after the live `percentile` of latency, at most `max_extra` extra load.
    Percentile(PercentileHedgeConfig),
    /// A hedge after the live 96th percentile while the upstream shows no queueing.
    Adaptive(AdaptiveHedgeConfig),
}

impl HedgeConfig {
    /// Checks the parameters; the error names the field.
    pub fn validate(&self) -> Check {
        match self {
            HedgeConfig::None => Ok(()),
            HedgeConfig::Speculative { attempts, timeout, budget, .. } => {
                config::at_least_one("attempts", *attempts)?;
                config::positive_or_none("timeout", *timeout)?;
                budget.map_or(Ok(()), |x| config::fraction("budget", x))
            }
            HedgeConfig::Percentile(c) => c.validate(),
            HedgeConfig::Adaptive(c) => c.validate(),
        }
    }

    /// The policy, if any.
    pub fn build(&self) -> Option<Box<dyn HedgePolicy>> {
        match self {
            HedgeConfig::None => None,
            HedgeConfig::Speculative { attempts, patience, budget, .. } => {
                Some(Box::new(Speculative::new(*attempts, *patience, budget.map(HedgeBucket::new))))
            }
            HedgeConfig::Percentile(c) => Some(Box::new(PercentileHedge::new(c.clone()))),
            HedgeConfig::Adaptive(c) => Some(Box::new(AdaptiveHedge::new(c.clone()))),
        }
    }

    /// The bound this hedging puts on a whole request: a speculative hedge's `timeout`.
    pub fn deadline(&self) -> Option<Duration> {
        match self {
            HedgeConfig::Speculative { timeout, .. } => *timeout,
            _ => None,
        }
    }
}

/// Decides the delays at which hedged attempts go out.
pub trait HedgePolicy: Send {
    /// A new request starts at `now` (policies with a budget count requests here).
    fn on_request(&mut self, now: Time);

    /// How long after the request's start hedge number `hedge` (1 = first hedge) may be sent, or
    /// `None` when no more hedges may be sent for this request.
    fn delay(&mut self, now: Time, hedge: u32) -> Option<Duration>;

    /// Whether hedge number `hedge`, due now, may really be sent (a budget may refuse it).
    /// Sending it is recorded by the policy.
    fn try_send(&mut self, now: Time, hedge: u32) -> bool;

    /// A successful answer's latency, measured from its own attempt's start.
    fn on_latency(&mut self, now: Time, latency: Duration);

    /// The request ended (only requests that were given to [`HedgePolicy::on_request`]).
    fn on_finish(&mut self, _now: Time, _end: RequestEnd) {}

    /// Whether the policy's load gate lets hedges out now; `None` for a policy without one.
    fn gate(&self) -> Option<bool> {
        None
    }

    /// Whether its delays are learned from the latencies (`percentile`, `adaptive`) rather than
    /// the user's own (`speculative`): a learned hedge stops where its class's races do not win
    /// ([`Races`](crate::class::Races)).
    fn learned(&self) -> bool {
        false
    }
}

/// How a request ended, for [`HedgePolicy::on_finish`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestEnd {
    /// `Success`, or the failure that ended it.
    pub outcome: Outcome,
    /// From the request's start to its end.
    pub elapsed: Duration,
}
