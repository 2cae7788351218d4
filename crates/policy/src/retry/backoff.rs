//! Backoff between retries: exponential, capped, with optional full jitter (AWS Architecture Blog,
//! "Exponential Backoff and Jitter": `sleep = random_between(0, min(cap, base·2^attempt))`).
//!
//! What it decides: how long a failed attempt waits before its retry. Jitter spreads the retries of
//! requests that failed together (a replica restart, a spike) so they do not arrive together again.
//! Rejections and unreachable endpoints skip the backoff altogether (see [`RetryPolicy`]).
//!
//! [`RetryPolicy`]: super::RetryPolicy

use crate::{nanos, Rng};
use rand::Rng as _;
use std::time::Duration;

/// Retry n (1 = the first retry) waits `min(base·2ⁿ⁻¹, max)`, or a uniform draw in `[0, that]` with
/// jitter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The wait before the first retry.
    pub base: Duration,
    /// The longest wait.
    pub max: Duration,
    /// Whether the wait is drawn uniformly between zero and the exponential value (full jitter).
    pub jitter: bool,
}

impl Backoff {
    /// Retry at once.
    pub fn none() -> Self {
        Backoff { base: Duration::ZERO, max: Duration::ZERO, jitter: false }
    }

    /// Exponential backoff from `base`, capped at `max`, with full jitter.
    pub fn exponential(base: Duration, max: Duration) -> Self {
        Backoff { base, max, jitter: true }
    }

    /// The exponential wait before retry number `retry` (0 counts as 1), before jitter.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let doubling = 1u32.checked_shl(retry.saturating_sub(1));
        doubling.and_then(|m| self.base.checked_mul(m)).map_or(self.max, |d| d.min(self.max))
    }

    /// The wait before retry number `retry` (1 = the first retry).
    pub fn delay(&self, retry: u32, rng: Rng<'_>) -> Duration {
        let ceiling = self.ceiling(retry);
        if !self.jitter || ceiling.is_zero() {
            return ceiling;
        }
        let top = nanos(ceiling);
        Duration::from_nanos(rng.gen_range(0..=top))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_pcg::Pcg64Mcg;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn none_retries_at_once() {
        let mut rng = Pcg64Mcg::new(1);
        assert_eq!(Backoff::none().delay(1, &mut rng), Duration::ZERO);
        assert_eq!(Backoff::none().delay(30, &mut rng), Duration::ZERO);
    }

    #[test]
    fn the_ceiling_doubles_up_to_max() {
        let b = Backoff::exponential(ms(10), ms(100));
        let got: Vec<_> = (0..7).map(|n| b.ceiling(n)).collect();
        assert_eq!(got, vec![ms(10), ms(10), ms(20), ms(40), ms(80), ms(100), ms(100)]);
        // Shifts and products that overflow give the cap.
        assert_eq!(b.ceiling(33), ms(100));
        assert_eq!(Backoff::exponential(Duration::MAX, Duration::MAX).ceiling(3), Duration::MAX);
    }

    #[test]
    fn without_jitter_the_delay_is_the_ceiling() {
        let mut rng = Pcg64Mcg::new(1);
        let b = Backoff { jitter: false, ..Backoff::exponential(ms(10), ms(100)) };
        assert_eq!(b.delay(3, &mut rng), ms(40));
        assert_eq!(b.delay(u32::MAX, &mut rng), ms(100));
    }

    #[test]
    fn full_jitter_draws_below_the_ceiling_by_seed() {
        let b = Backoff::exponential(ms(10), ms(100));
        let draw = |seed| {
            let mut rng = Pcg64Mcg::new(seed);
            (1..=5).map(|n| b.delay(n, &mut rng)).collect::<Vec<_>>()
        };
        let got = draw(42);
        assert_eq!(got, draw(42));
        let ceilings = [10, 20, 40, 80, 100].map(ms);
        assert!(got.iter().zip(ceilings).all(|(&d, c)| d <= c), "{got:?}");
        assert_eq!(got, GOLDEN.map(Duration::from_nanos).to_vec());
    }

    /// The draws of seed 42 (rand 0.8's uniform `gen_range` over nanoseconds).
    const GOLDEN: [u64; 5] = [3_894_751, 13_124_244, 33_606_664, 30_245_590, 51_862_964];

    #[test]
    fn the_jittered_mean_is_half_the_ceiling() {
        let mut rng = Pcg64Mcg::new(7);
        let b = Backoff::exponential(ms(100), ms(100));
        let total: Duration = (0..10_000).map(|_| b.delay(1, &mut rng)).sum();
        let mean_ms = total.as_secs_f64() * 1000.0 / 10_000.0;
        assert!((mean_ms - 50.0).abs() < 1.0, "{mean_ms}");
    }
}
