//! Retries: whether a failed attempt is tried again, after what backoff, within what budget.

mod backoff;
mod budget;

pub use backoff::Backoff;
pub use budget::RetryBudget;

use crate::{Outcome, Rng, Time};
use std::time::Duration;

/// A caller's retry rules for one upstream service.
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// Attempts a request may make in all, the first included (1 = never retry).
    pub max_attempts: u32,
    /// The wait before each retry of an error or timeout.
    pub backoff: Backoff,
    /// Limits retries to a fraction of requests; `None` means unlimited.
    pub budget: Option<RetryBudget>,
    /// Whether requests that are not idempotent may be retried after being processed.
    pub retry_non_idempotent: bool,
    /// Whether an attempt whose timeout fired keeps running alongside its retry, the first success
    /// winning (Envoy's `hedge_on_per_try_timeout`): a timeout that fires on a merely slow attempt
    /// then costs extra load instead of the time already spent on it.
    pub hedge_on_timeout: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 1,
            backoff: Backoff::none(),
            budget: None,
            retry_non_idempotent: false,
            hedge_on_timeout: false,
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

    /// Whether a request whose attempt number `attempts_made - 1` just ended with `outcome` may be
    /// retried, and after what wait. Rejections and unreachable endpoints are retried at once
    /// (nothing was processed, so it is safe for any request); errors and timeouts only for
    /// idempotent requests (unless allowed), after the backoff. Each retry withdraws from the budget.
    pub fn retry(
        &mut self,
        now: Time,
        attempts_made: u32,
        outcome: Outcome,
        idempotent: bool,
        rng: Rng<'_>,
    ) -> Option<Duration> {
        if attempts_made >= self.max_attempts {
            return None;
        }
        let wait = match outcome {
            Outcome::Success | Outcome::Cancelled => return None,
            o if o.not_processed() => Duration::ZERO,
            _ if !(idempotent || self.retry_non_idempotent) => return None,
            _ => self.backoff.delay(attempts_made, rng),
        };
        let allowed = self.budget.as_mut().is_none_or(|budget| budget.withdraw(now));
        allowed.then_some(wait)
    }
}
