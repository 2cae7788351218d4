//! Hedging: when to send a speculative extra attempt while earlier ones are still pending.
//! The first success wins; the [`call`](crate::call) machine cancels the others.

mod percentile;
mod speculative;

pub use percentile::{PercentileHedge, PercentileHedgeConfig, PAST};
pub use speculative::Speculative;

use crate::Time;
use std::time::Duration;

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
}
