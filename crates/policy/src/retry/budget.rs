//! A retry budget, after Finagle's and tower's (`tower::retry::budget`) and linkerd's `retryBudget`:
//! retries may be at most `retry_ratio` of the requests of the last `ttl`, plus `min_per_sec` retries
//! per second that are always allowed (so a client with little traffic can still retry).
//!
//! Why a budget and not just a maximum of attempts: when a service is overloaded, every request
//! failing and retried `n` times multiplies its load by `n` exactly when it can least bear it. A
//! budget caps the extra load at a fraction of the real traffic, whatever goes wrong.
//!
//! Sans-IO: the time is passed in. Deposits and withdrawals land in one of [`SLOTS`] slots of
//! `ttl / SLOTS` each; a slot is emptied when the window moves past it, so the balance is the sum
//! over the last `ttl` (to within one slot). Time going backwards counts as no time passing.

use crate::Time;
use std::time::Duration;

/// The number of slots the window is divided into.
pub const SLOTS: usize = 10;

/// A deposit, in fixed-point units: a retry costs `UNIT / retry_ratio` of them.
const UNIT: i64 = 1000;

/// Allows retries up to a ratio of recent requests, plus a floor per second.
#[derive(Clone, Debug)]
pub struct RetryBudget {
    slot_len: Duration,
    slots: [i64; SLOTS],
    /// The index of the current slot since the epoch (`now / slot_len`).
    current: u64,
    deposit: i64,
    withdraw: i64,
    reserve: i64,
}

impl RetryBudget {
    /// Retries may be `retry_ratio` of the requests of the last `ttl` (0.2 = 20% extra load), plus
    /// `min_per_sec` per second. A zero `ttl` counts as `SLOTS` nanoseconds; a ratio that is zero,
    /// negative or NaN allows only the per-second floor.
    pub fn new(ttl: Duration, min_per_sec: u32, retry_ratio: f32) -> Self {
        let ratio = f64::from(retry_ratio);
        let (deposit, withdraw) =
            if ratio > 0.0 { (UNIT, ((UNIT as f64 / ratio).round() as i64).max(1)) } else { (0, 1) };
        let slot_len = (ttl / SLOTS as u32).max(Duration::from_nanos(1));
        let window_secs = slot_len.as_secs_f64() * SLOTS as f64;
        let reserve = (f64::from(min_per_sec) * window_secs * withdraw as f64).round() as i64;
        RetryBudget { slot_len, slots: [0; SLOTS], current: 0, deposit, withdraw, reserve }
    }

    /// A request was made: it adds to the budget.
    pub fn deposit(&mut self, now: Time) {
        self.advance(now);
        let slot = self.slot();
        self.slots[slot] = self.slots[slot].saturating_add(self.deposit);
    }

    /// Whether a retry may be made now; if so, it is charged to the budget.
    pub fn withdraw(&mut self, now: Time) -> bool {
        self.charge(now, 0)
    }

    /// Charges the retry of an attempt given up as lost (kept past its timeout and its patience
    /// without an answer), which may overdraw the budget by its floor once more: races of the
    /// usual tail spend the budget as it fills, and a request stuck on a hung endpoint must not
    /// wait behind them until its deadline. Lost attempts add at most the floor again.
    pub fn withdraw_lost(&mut self, now: Time) -> bool {
        self.charge(now, self.reserve)
    }

    /// Charges one retry if the balance, with `overdraft` more, covers it.
    fn charge(&mut self, now: Time, overdraft: i64) -> bool {
        self.advance(now);
        if self.balance().saturating_add(overdraft) < self.withdraw {
            return false;
        }
        let slot = self.slot();
        self.slots[slot] = self.slots[slot].saturating_sub(self.withdraw);
        true
    }

    /// Whether a retry may be made now, without charging it.
    pub fn allows(&mut self, now: Time) -> bool {
        self.advance(now);
        self.balance() >= self.withdraw
    }

    /// The retries the budget allows now, were no further request made.
    pub fn available(&mut self, now: Time) -> u64 {
        self.advance(now);
        u64::try_from(self.balance() / self.withdraw).unwrap_or(0)
    }

    fn balance(&self) -> i64 {
        self.slots.iter().fold(self.reserve, |sum, &s| sum.saturating_add(s))
    }

    fn slot(&self) -> usize {
        (self.current % SLOTS as u64) as usize
    }

    /// Moves the window to `now`, emptying the slots it passes.
    fn advance(&mut self, now: Time) {
        let index = u64::try_from(now.as_nanos() / self.slot_len.as_nanos()).unwrap_or(u64::MAX);
        if index <= self.current {
            return;
        }
        let passed = (index - self.current).min(SLOTS as u64);
        for i in 1..=passed {
            self.slots[((self.current + i) % SLOTS as u64) as usize] = 0;
        }
        self.current = index;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn secs(v: u64) -> Duration {
        Duration::from_secs(v)
    }

    #[test]
    fn retries_are_a_ratio_of_requests() {
        let mut b = RetryBudget::new(secs(10), 0, 0.2);
        assert!(!b.withdraw(Time::ZERO));
        // 10 requests allow 2 retries.
        (0..10).for_each(|_| b.deposit(Time::ZERO));
        assert_eq!(b.available(Time::ZERO), 2);
        assert!(b.withdraw(ms(1)));
        assert!(b.withdraw(ms(2)));
        assert!(!b.withdraw(ms(3)));
    }

    #[test]
    fn a_lost_attempt_may_overdraw_by_the_floor_once_more() {
        let mut b = RetryBudget::new(secs(10), 1, 0.2);
        assert_eq!((0..12).filter(|_| b.withdraw(Time::ZERO)).count(), 10);
        assert_eq!((0..12).filter(|_| b.withdraw_lost(Time::ZERO)).count(), 10);
        // In debt: nothing else goes out until requests repay it.
        assert!(!b.withdraw(Time::ZERO));
        assert_eq!(b.available(Time::ZERO), 0);
    }

    #[test]
    fn the_floor_allows_min_per_sec_over_the_window() {
        let mut b = RetryBudget::new(secs(10), 1, 0.2);
        assert_eq!(b.available(Time::ZERO), 10);
        assert_eq!((0..12).filter(|_| b.withdraw(Time::ZERO)).count(), 10);
        // A request adds a fifth of a retry: not enough on its own.
        b.deposit(Time::ZERO);
        assert!(!b.withdraw(Time::ZERO));
    }

    #[test]
    fn deposits_expire_after_ttl() {
        let mut b = RetryBudget::new(secs(10), 0, 0.5);
        (0..4).for_each(|_| b.deposit(Time::ZERO));
        assert_eq!(b.available(secs(9)), 2);
        // The slot of time 0 (0–1 s) leaves the window at 10 s.
        assert_eq!(b.available(secs(10)), 0);
    }

    #[test]
    fn withdrawals_expire_too() {
        let mut b = RetryBudget::new(secs(10), 0, 0.5);
        (0..4).for_each(|_| b.deposit(Time::ZERO));
        assert!(b.withdraw(secs(5)));
        assert!(b.withdraw(secs(5)));
        assert!(!b.withdraw(secs(5)));
        (0..4).for_each(|_| b.deposit(secs(12)));
        // At 12 s the deposits of 0 s are gone but the withdrawals of 5 s still count.
        assert_eq!(b.available(secs(12)), 0);
        assert_eq!(b.available(secs(15)), 2);
    }

    #[test]
    fn a_long_gap_empties_the_window() {
        let mut b = RetryBudget::new(secs(1), 0, 1.0);
        b.deposit(ms(50));
        assert_eq!(b.available(ms(999)), 1);
        assert_eq!(b.available(secs(3600)), 0);
    }

    #[test]
    fn time_going_backwards_counts_as_no_time() {
        let mut b = RetryBudget::new(secs(10), 0, 1.0);
        b.deposit(secs(5));
        b.deposit(secs(1));
        assert_eq!(b.available(secs(2)), 2);
    }

    #[test]
    fn a_zero_ratio_allows_only_the_floor() {
        let mut b = RetryBudget::new(secs(2), 3, 0.0);
        (0..100).for_each(|_| b.deposit(Time::ZERO));
        assert_eq!(b.available(Time::ZERO), 6);
        let mut nan = RetryBudget::new(secs(2), 0, f32::NAN);
        nan.deposit(Time::ZERO);
        assert!(!nan.withdraw(Time::ZERO));
    }

    #[test]
    fn degenerate_parameters_do_not_panic() {
        let mut b = RetryBudget::new(Duration::ZERO, u32::MAX, f32::MIN_POSITIVE);
        b.deposit(Duration::MAX);
        assert!(b.withdraw(Duration::MAX));
        let mut b = RetryBudget::new(Duration::MAX, u32::MAX, f32::MAX);
        b.deposit(Time::ZERO);
        assert!(b.withdraw(Duration::MAX));
    }
}
