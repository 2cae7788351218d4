//! Timeout policies: how long one attempt of a request may take before the caller gives up on it.
//!
//! The [`call`](crate::call) state machine asks the policy for each attempt's timeout (attempt 0
//! is the first try, attempt 1 the first retry, …) and clamps it by the request's remaining
//! deadline; it reports every attempt's result back so adaptive policies can learn.

mod adaptive;
mod controller;
mod exp_backoff;
mod fixed;
mod optimizer;
mod sequential;

pub use adaptive::{Adaptive, AdaptiveConfig};
pub use controller::{Controller, ControllerConfig};
pub use exp_backoff::ExpBackoff;
pub use fixed::Fixed;
pub use optimizer::{Optimizer, OptimizerConfig};
pub use sequential::Sequential;

use crate::{Rng, Time};
use std::time::Duration;

/// How an attempt sent under a timeout ended, as the timeout policy needs to know it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AttemptResult {
    /// An answer (success or error) arrived after this latency.
    Answered(Duration),
    /// No answer within the timeout (the attempt's timeout value).
    TimedOut(Duration),
}

/// Sets the timeout of each attempt and learns from the results.
pub trait TimeoutPolicy: Send {
    /// The timeout for attempt number `attempt` (0 = first try) of a request starting at `now`;
    /// `None` means wait without a timeout (still bounded by the request's deadline), which the
    /// Optimizer uses to sample the true latency distribution.
    fn timeout(&mut self, now: Time, attempt: u32, rng: Rng<'_>) -> Option<Duration>;

    /// The result of attempt number `attempt`, which was sent with `timeout`. An attempt kept
    /// running past its timeout (`hedge_on_timeout`) reports `TimedOut` when the timeout fires and
    /// `Answered` if its answer still comes first: the true latency of a slow attempt.
    fn on_result(&mut self, now: Time, attempt: u32, timeout: Option<Duration>, result: AttemptResult);

    /// The timeout a first attempt would get now, for metrics and plots.
    fn current(&self) -> Option<Duration>;
}

/// Never times out: attempts are bounded only by the request's deadline.
#[derive(Clone, Debug, Default)]
pub struct NoTimeout;

impl TimeoutPolicy for NoTimeout {
    fn timeout(&mut self, _now: Time, _attempt: u32, _rng: Rng<'_>) -> Option<Duration> {
        None
    }
    fn on_result(&mut self, _: Time, _: u32, _: Option<Duration>, _: AttemptResult) {}
    fn current(&self) -> Option<Duration> {
        None
    }
}
