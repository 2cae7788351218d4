//! Timeout policies: how long one attempt of a request may take before the caller gives up on it.
//!
//! The [`call`](crate::call) state machine asks the policy for each attempt's timeout (attempt 0
//! is the first try, attempt 1 the first retry, …) and clamps it by the request's remaining
//! deadline; it reports every attempt's result back so adaptive policies can learn.

mod adaptive;
mod controller;
mod exp_backoff;
mod fixed;
mod hedge_model;
mod optimizer;
mod sequential;

pub use adaptive::{Adaptive, AdaptiveConfig, UpstreamRequests};
pub use controller::{Controller, ControllerConfig};
pub use exp_backoff::ExpBackoff;
pub use fixed::Fixed;
pub use optimizer::{Optimizer, OptimizerConfig};
pub use sequential::Sequential;

use crate::config::{self, Check, ConfigError};
use crate::duration::text;
use crate::{Rng, Time};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The timeout an adaptive policy gives attempts before it has measured anything, when the file
/// names none: RFC 6298 §2.1's initial retransmission timeout for TCP, whose timer the adaptive
/// timeout and the Controller follow. Set `initial` near the expected latency to adapt sooner.
pub const DEFAULT_INITIAL: Duration = Duration::from_secs(1);

/// A timeout policy and its parameters, as experiment and proxy files write it (`kind:` names
/// the policy, docs/policies.md); [`TimeoutConfig::build`] makes the policy.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum TimeoutConfig {
    /// No timeout (the request's deadline still applies).
    #[default]
    None,
    /// The same timeout for every attempt.
    Fixed {
        #[serde(with = "text")]
        value: Duration,
    },
    /// `first·factorⁿ` for attempt n, `steps` values (factor 2 and 5 steps unless given).
    ExpBackoff {
        #[serde(with = "text")]
        first: Duration,
        #[serde(default = "two")]
        factor: f64,
        #[serde(default = "five")]
        steps: u32,
    },
    /// An explicit increasing sequence (adaptive-timeouts.txt §3.4).
    Sequential {
        #[serde(with = "text::list")]
        values: Vec<Duration>,
    },
    /// The TCP-inspired Controller (§3.7, §4.4).
    Controller(ControllerConfig),
    /// The expected-latency Optimizer (§3.6, §4.3).
    Optimizer(OptimizerConfig),
    /// tailguard's own adaptive timeout (docs/policies.md).
    Adaptive(AdaptiveConfig),
}

fn two() -> f64 {
    2.0
}

fn five() -> u32 {
    5
}

impl TimeoutConfig {
    /// Checks the parameters; the error names the field.
    pub fn validate(&self) -> Check {
        match self {
            TimeoutConfig::None => Ok(()),
            TimeoutConfig::Fixed { value } => config::positive("value", *value),
            TimeoutConfig::ExpBackoff { first, factor, steps } => {
                config::positive("first", *first)?;
                config::at_least("factor", *factor, 1.0)?;
                config::at_least_one("steps", *steps)
            }
            TimeoutConfig::Sequential { values } => {
                if values.is_empty() {
                    return Err(ConfigError::at("values", "expected at least one timeout"));
                }
                for (i, v) in values.iter().enumerate() {
                    config::positive(&format!("values.{i}"), *v)?;
                    if i > 0 && *v < values[i - 1] {
                        let (at_least, got) = (crate::duration::Dur(values[i - 1]), crate::duration::Dur(*v));
                        return Err(ConfigError::at(
                            format!("values.{i}"),
                            format!("expected an increasing sequence (at least {at_least}), got {got}"),
                        ));
                    }
                }
                Ok(())
            }
            TimeoutConfig::Controller(c) => c.validate(),
            TimeoutConfig::Optimizer(c) => c.validate(),
            TimeoutConfig::Adaptive(c) => c.validate(),
        }
    }

    /// The policy, for attempts made under `retry`: with its `hedge_on_timeout`, the adaptive
    /// timeout races the tail it sees within the retry budget and `max_attempts`.
    pub fn build(&self, retry: &crate::retry::RetryConfig) -> Box<dyn TimeoutPolicy> {
        self.build_for(retry, &UpstreamRequests::default())
    }

    /// [`TimeoutConfig::build`] for one class of requests of an upstream whose classes count
    /// their requests together in `upstream`, as they share its retry budget.
    pub fn build_for(&self, retry: &crate::retry::RetryConfig, upstream: &UpstreamRequests) -> Box<dyn TimeoutPolicy> {
        match self {
            TimeoutConfig::None => Box::new(NoTimeout),
            TimeoutConfig::Fixed { value } => Box::new(Fixed::new(*value)),
            TimeoutConfig::ExpBackoff { first, factor, steps } => Box::new(ExpBackoff::new(*first, *factor, *steps)),
            TimeoutConfig::Sequential { values } => Box::new(Sequential::new(values.clone())),
            TimeoutConfig::Controller(c) => Box::new(Controller::new(c.clone())),
            TimeoutConfig::Optimizer(c) => Box::new(Optimizer::new(c.clone())),
            TimeoutConfig::Adaptive(c) => Box::new(
                Adaptive::new(AdaptiveConfig {
                    hedge_on_timeout: retry.hedges_on_timeout(self),
                    budget: retry.budget,
                    attempts: retry.max_attempts,
                    budget_floor: f64::from(crate::retry::BUDGET_MIN_PER_SEC),
                    ..c.clone()
                })
                .sharing(upstream.clone()),
            ),
        }
    }
}

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
    /// `None` means wait without a timeout (still bounded by the request's deadline); only `none`
    /// gives it (the Optimizer's probes get a long timeout instead, issue #18).
    fn timeout(&mut self, now: Time, attempt: u32, rng: Rng<'_>) -> Option<Duration>;

    /// The result of attempt number `attempt`, which was sent with `timeout`. An attempt kept
    /// running past its timeout (`hedge_on_timeout`) reports `TimedOut` when the timeout fires and
    /// `Answered` if its answer still comes first: the true latency of a slow attempt.
    fn on_result(&mut self, now: Time, attempt: u32, timeout: Option<Duration>, result: AttemptResult);

    /// The timeout a first attempt would get now, for metrics and plots.
    fn current(&self) -> Option<Duration>;

    /// The caller stopped waiting for attempt number `attempt`, sent `waited` ago and unanswered:
    /// another attempt won, the request ended, or it was abandoned. Its latency is at least
    /// `waited` (a censored observation). Ignored by default.
    fn on_abandoned(&mut self, _now: Time, _attempt: u32, _waited: Duration) {}

    /// How long after its start an attempt kept past its timeout (`hedge_on_timeout`) is still
    /// waited for; past it the attempt is abandoned as lost. `None` (the default): until the
    /// request ends.
    fn patience(&self) -> Option<Duration> {
        None
    }

    /// Whether the timeout is learned from the latencies seen (the adaptive timeout, the
    /// Controller, the Optimizer) rather than the user's own number (`fixed`, `sequential`,
    /// `exp-backoff`). A user's timeout is Envoy's `per_try_timeout`: when it fires with no retry
    /// left, the request fails. A learned one may race another attempt, never end the last one
    /// ([`Call`](crate::call::Call)): only a deadline or an error fails a request.
    fn learned(&self) -> bool {
        false
    }
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
