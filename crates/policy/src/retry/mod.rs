//! Retries: whether a failed attempt is tried again, after what backoff, within what budget.

mod backoff;
mod budget;

pub use backoff::Backoff;
pub use budget::RetryBudget;

use crate::config::{self, Check};
use crate::duration::text;
use crate::timeout::TimeoutConfig;
use crate::{Outcome, Rng, Time};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `max_backoff` is this many times `backoff` when the file gives none (Envoy's default).
pub const DEFAULT_BACKOFF_CAP: u32 = 10;
/// The window over which a retry budget counts requests (Linkerd's and tower's default).
pub const BUDGET_TTL: Duration = Duration::from_secs(10);
/// Retries a second a budget always allows, so a client with little traffic can still retry.
pub const BUDGET_MIN_PER_SEC: u32 = 10;
/// The budget of a retry policy that names none: retries up to 20 % of the requests (plus
/// [`BUDGET_MIN_PER_SEC`]), Linkerd's default `retryBudget` (`retryRatio: 0.2`,
/// `minRetriesPerSecond: 10`, `ttl: 10s`), so an always-failing upstream sees about 1.2 times
/// the requests, not `max_attempts` times. `budget: unlimited` turns it off.
pub const DEFAULT_BUDGET: f64 = 0.2;

/// Retry rules as experiment and proxy files write them; [`RetryConfig::build`] makes the
/// policy. A file may leave out any of them.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    /// Attempts in all, the first included (1 = no retries).
    pub max_attempts: u32,
    /// Base of the exponential backoff between retries of errors and timeouts; none retries at
    /// once.
    #[serde(with = "text::option", skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Duration>,
    /// Cap of the backoff ([`DEFAULT_BACKOFF_CAP`] times `backoff` when none).
    #[serde(with = "text::option", skip_serializing_if = "Option::is_none")]
    pub max_backoff: Option<Duration>,
    /// Full jitter on the backoff.
    pub jitter: bool,
    /// Retries allowed as a fraction of the requests of the last [`BUDGET_TTL`], with
    /// [`BUDGET_MIN_PER_SEC`] retries a second always allowed ([`DEFAULT_BUDGET`] when the file
    /// names none); `None` (written `unlimited`) means no limit but `max_attempts`.
    #[serde(with = "budget_text", skip_serializing_if = "budget_text::is_default")]
    pub budget: Option<f64>,
    /// Whether requests that are not idempotent may be retried and hedged.
    pub non_idempotent: bool,
    /// Whether a refusal passed on from further down ([`Outcome::Overloaded`]) is retried too,
    /// on another endpoint: for a caller whose endpoints each reach the overloaded service their
    /// own way (BLOC's gateway tries a request its frontend could not place on other frontends).
    /// Off by default: the hop next to the refusing service retries, those above pass it on.
    pub overloaded: bool,
    /// Whether an attempt whose timeout fired keeps running alongside its retry; left out, true
    /// with the `adaptive` timeout (which chooses its timeout for it) and false with any other
    /// ([`RetryConfig::hedges_on_timeout`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hedge_on_timeout: Option<bool>,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_attempts: 1,
            backoff: None,
            max_backoff: None,
            jitter: true,
            budget: Some(DEFAULT_BUDGET),
            non_idempotent: false,
            overloaded: false,
            hedge_on_timeout: None,
        }
    }
}

impl RetryConfig {
    /// Whether timed-out attempts keep running beside their retries with this `timeout`: as the
    /// file says, else with the adaptive timeout only, whose defaults are chosen for it
    /// (docs/policies.md).
    pub fn hedges_on_timeout(&self, timeout: &TimeoutConfig) -> bool {
        self.hedge_on_timeout.unwrap_or(matches!(timeout, TimeoutConfig::Adaptive(_)))
    }

    /// Checks the parameters; the error names the field.
    pub fn validate(&self) -> Check {
        config::at_least_one("max_attempts", self.max_attempts)?;
        if let (Some(base), Some(max)) = (self.backoff, self.max_backoff) {
            config::ordered("backoff", base, "max_backoff", max)?;
        }
        self.budget.map_or(Ok(()), |x| config::fraction("budget", x))
    }

    /// The policy (`hedge_on_timeout` is resolved per class, beside its timeout:
    /// [`RetryConfig::hedges_on_timeout`]).
    pub fn build(&self) -> RetryPolicy {
        let backoff = match self.backoff {
            Some(base) if !base.is_zero() => {
                let max = self.max_backoff.unwrap_or(base.saturating_mul(DEFAULT_BACKOFF_CAP));
                Backoff { jitter: self.jitter, ..Backoff::exponential(base, max) }
            }
            _ => Backoff::none(),
        };
        RetryPolicy {
            max_attempts: self.max_attempts,
            backoff,
            budget: self.budget.map(|ratio| RetryBudget::new(BUDGET_TTL, BUDGET_MIN_PER_SEC, ratio as f32)),
            retry_non_idempotent: self.non_idempotent,
            retry_overloaded: self.overloaded,
        }
    }
}

/// A budget as files write it: a fraction, or `unlimited`.
mod budget_text {
    use serde::{Deserialize, Deserializer, Serializer};

    const UNLIMITED: &str = "unlimited";

    pub fn is_default(budget: &Option<f64>) -> bool {
        *budget == Some(super::DEFAULT_BUDGET)
    }

    pub fn serialize<S: Serializer>(budget: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        match budget {
            Some(fraction) => s.serialize_f64(*fraction),
            None => s.serialize_str(UNLIMITED),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Fraction(f64),
            Word(String),
        }
        match Written::deserialize(d) {
            Ok(Written::Fraction(fraction)) => Ok(Some(fraction)),
            Ok(Written::Word(word)) if word == UNLIMITED => Ok(None),
            _ => Err(serde::de::Error::custom("expected a fraction from 0 to 1, or `unlimited`")),
        }
    }
}

/// A caller's retry rules for one upstream service.
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// Attempts a request may make in all, the first included (1 = never retry).
    pub max_attempts: u32,
    /// The wait before each retry of an error or timeout.
    pub backoff: Backoff,
    /// Limits retries and hedges together to a fraction of requests; `None` means unlimited.
    pub budget: Option<RetryBudget>,
    /// Whether requests that are not idempotent may be retried after being processed.
    pub retry_non_idempotent: bool,
    /// Whether a refusal passed on from further down is retried (as an error is).
    pub retry_overloaded: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 1,
            backoff: Backoff::none(),
            budget: None,
            retry_non_idempotent: false,
            retry_overloaded: false,
        }
    }
}

impl RetryPolicy {
    /// A new request starts (deposits into the budget).
    pub fn on_request(&mut self, now: Time) {
        if let Some(budget) = &mut self.budget {
            budget.deposit(now);
        }
    }

    /// Whether the budget allows one more retry or hedge now (always, without a budget); nothing
    /// is charged.
    pub fn budget_allows(&mut self, now: Time) -> bool {
        self.budget.as_mut().is_none_or(|budget| budget.allows(now))
    }

    /// Charges a hedge to the budget, which retries and hedges share (gRPC's retry throttling and
    /// Finagle's `RetryBudget` count both): once it is spent, neither goes out.
    pub fn charge_hedge(&mut self, now: Time) {
        if let Some(budget) = &mut self.budget {
            budget.withdraw(now);
        }
    }

    /// Whether a request whose attempt number `attempts_made - 1` just ended with `outcome` may be
    /// retried, and after what wait. Rejections and unreachable endpoints are retried at once
    /// (nothing was processed, so it is safe for any request); errors and timeouts only for
    /// idempotent requests (unless allowed), after the backoff; a refusal passed on from further
    /// down ([`Outcome::Overloaded`]) only if allowed, as an error. Each retry withdraws from the
    /// budget.
    pub fn retry(
        &mut self,
        now: Time,
        attempts_made: u32,
        outcome: Outcome,
        idempotent: bool,
        rng: Rng<'_>,
    ) -> Option<Duration> {
        if !self.eligible(attempts_made, outcome, idempotent) {
            return None;
        }
        let wait = if outcome.not_processed() { Duration::ZERO } else { self.backoff.delay(attempts_made, rng) };
        let allowed = self.budget.as_mut().is_none_or(|budget| budget.withdraw(now));
        allowed.then_some(wait)
    }

    /// Whether a request whose attempt number `attempts_made - 1` is lost (kept past its timeout
    /// and its patience) is retried now, as a timed-out one would be but at once and within the
    /// budget's allowance for lost attempts ([`RetryBudget::withdraw_lost`]); charged if so.
    pub fn retry_lost(&mut self, now: Time, attempts_made: u32, idempotent: bool) -> bool {
        self.eligible(attempts_made, Outcome::TimedOut, idempotent)
            && self.budget.as_mut().is_none_or(|budget| budget.withdraw_lost(now))
    }

    /// Whether [`RetryPolicy::retry`] would allow the retry now; nothing is charged or drawn.
    pub fn would_retry(&mut self, now: Time, attempts_made: u32, outcome: Outcome, idempotent: bool) -> bool {
        self.eligible(attempts_made, outcome, idempotent) && self.budget_allows(now)
    }

    /// Whether the rules, the budget aside, allow a retry after `outcome`.
    fn eligible(&self, attempts_made: u32, outcome: Outcome, idempotent: bool) -> bool {
        attempts_made < self.max_attempts
            && match outcome {
                Outcome::Success | Outcome::Cancelled => false,
                Outcome::Overloaded if !self.retry_overloaded => false,
                o if o.not_processed() => true,
                _ => idempotent || self.retry_non_idempotent,
            }
    }
}
