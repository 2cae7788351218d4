//! The fixed timeout: every attempt, first try and retries alike, gets the same configured value.
//!
//! The baseline every other policy is measured against, and what most clients ship with
//! (adaptive-timeouts.txt §2.1: "retrying with constant time backoffs").

use super::{AttemptResult, TimeoutPolicy};
use crate::{Rng, Time};
use std::time::Duration;

/// Gives every attempt the same timeout and learns nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fixed {
    timeout: Duration,
}

impl Fixed {
    /// Every attempt times out after `timeout` (zero makes every attempt time out at once).
    pub fn new(timeout: Duration) -> Self {
        Fixed { timeout }
    }
}

impl TimeoutPolicy for Fixed {
    fn timeout(&mut self, _now: Time, _attempt: u32, _rng: Rng<'_>) -> Option<Duration> {
        Some(self.timeout)
    }

    fn on_result(&mut self, _: Time, _: u32, _: Option<Duration>, _: AttemptResult) {}

    fn current(&self) -> Option<Duration> {
        Some(self.timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_pcg::Pcg64Mcg;

    #[test]
    fn every_attempt_gets_the_same_timeout() {
        let mut rng = Pcg64Mcg::new(1);
        let mut p = Fixed::new(Duration::from_millis(250));
        let ms = |d: Option<Duration>| d.map(|d| d.as_millis());
        assert_eq!(ms(p.timeout(Time::ZERO, 0, &mut rng)), Some(250));
        p.on_result(
            Time::from_millis(250),
            0,
            Some(Duration::from_millis(250)),
            AttemptResult::TimedOut(Duration::from_millis(250)),
        );
        assert_eq!(ms(p.timeout(Time::from_millis(250), 1, &mut rng)), Some(250));
        assert_eq!(ms(p.timeout(Time::from_millis(900), u32::MAX, &mut rng)), Some(250));
        assert_eq!(ms(p.current()), Some(250));
    }
}
