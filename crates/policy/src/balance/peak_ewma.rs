//! P2C peak-EWMA: of two endpoints drawn at random, the one with the lower `rtt × (pending + 1)`.
//!
//! Linkerd's default balancer, from Finagle's `PeakEwma` via tower's `load::PeakEwma`. Each endpoint
//! keeps an RTT estimate that is *peak-sensitive*: a sample above the estimate replaces it at once,
//! so one slow answer makes the endpoint look slow straight away, while a sample below it only pulls
//! the estimate down exponentially, weighted by how long ago the estimate was last updated:
//!
//! ```text
//! w = exp(-elapsed / decay);  estimate = w · estimate + (1 - w) · sample
//! ```
//!
//! The cost of an endpoint is `estimate × (pending + 1)`, where `pending` counts this caller's
//! attempts in flight to it, and two endpoints drawn at random are compared on it (P2C).
//!
//! As in the sources, reading an endpoint's cost (for the two endpoints P2C draws) first decays
//! its estimate towards zero for the time since it was last touched — a zero "sample" — so an
//! endpoint avoided after a slow answer looks cheaper and cheaper until it is tried again, and the
//! estimate between reads is the peak of recent answers fading with `decay`. Every attempt that
//! ends is a sample of its time, as a tower `Handle` dropped at the response, the timeout or the
//! cancellation is; only an unreachable endpoint measures nothing (it is not "ready" in tower).
//!
//! Differences from the sources, on purpose: time is the `now` passed in (linkerd2-proxy's own
//! `ewma` does the same for testability), and every endpoint starts as if `default_rtt` had been
//! measured at the epoch (`Time::ZERO`), which is what tower does when the balancer is built at the
//! driver's epoch.
//!
//! Until issue 19 the estimate changed only on samples, never on reads, and only answers were
//! samples: an endpoint that had one slow answer kept its estimate, lost every P2C draw, and so
//! got no answer to bring it down (examples/balancing.yaml, docs/policies.md).

use super::{p2c, Balancer, Eligible, InFlight, Pick};
use crate::config::{self, Check};
use crate::duration::text;
use crate::{EndpointId, Feedback, Outcome, Time};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Settings of [`PeakEwma`]; a file may leave out any of them.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PeakEwmaConfig {
    /// The time constant with which the estimate decays towards lower samples (default 10 s,
    /// Linkerd's).
    #[serde(with = "text")]
    pub decay: Duration,
    /// The estimate an endpoint starts with, before its first answer (default 30 ms, Linkerd's).
    #[serde(with = "text")]
    pub default_rtt: Duration,
}

impl PeakEwmaConfig {
    /// Checks the parameters; the error names the field.
    pub fn validate(&self) -> Check {
        config::positive("decay", self.decay)
    }
}

impl Default for PeakEwmaConfig {
    fn default() -> Self {
        PeakEwmaConfig { decay: Duration::from_secs(10), default_rtt: Duration::from_millis(30) }
    }
}

/// A peak-sensitive exponentially weighted moving average of one endpoint's RTT.
#[derive(Clone, Copy, Debug, PartialEq)]
struct RttEstimate {
    /// The estimate, in seconds.
    secs: f64,
    /// When it was last updated.
    updated: Time,
}

impl RttEstimate {
    /// Folds `sample` in at `now`: a new peak is taken as is, a lower sample is averaged in (a
    /// zero sample is how a read decays the estimate).
    fn update(&mut self, now: Time, sample: Duration, decay: Duration) {
        let sample = sample.as_secs_f64();
        if sample >= self.secs {
            self.secs = sample;
        } else {
            let w = decay_weight(now.saturating_sub(self.updated), decay);
            self.secs = w * self.secs + (1.0 - w) * sample;
        }
        self.updated = now;
    }
}

/// `exp(-elapsed / decay)`: how much of the old estimate survives `elapsed`. A zero `decay` keeps
/// nothing of it, so the estimate follows every sample.
fn decay_weight(elapsed: Duration, decay: Duration) -> f64 {
    if decay.is_zero() {
        return 0.0;
    }
    (-elapsed.as_secs_f64() / decay.as_secs_f64()).exp()
}

/// Power of two choices on peak-EWMA RTT × (pending + 1).
#[derive(Clone, Debug)]
pub struct PeakEwma {
    config: PeakEwmaConfig,
    rtt: Vec<RttEstimate>,
    pending: InFlight,
    eligible: Eligible,
}

impl PeakEwma {
    /// A balancer over endpoints `0..endpoints`, each starting at `config.default_rtt`.
    pub fn new(endpoints: usize, config: PeakEwmaConfig) -> Self {
        let start = RttEstimate { secs: config.default_rtt.as_secs_f64(), updated: Time::ZERO };
        PeakEwma {
            config,
            rtt: vec![start; endpoints],
            pending: InFlight::new(endpoints),
            eligible: Eligible::new(endpoints),
        }
    }

    /// `estimate × (pending + 1)` at `now`, in seconds, after decaying the estimate to `now`.
    fn cost(&mut self, endpoint: EndpointId, now: Time) -> f64 {
        let rtt = &mut self.rtt[endpoint];
        rtt.update(now, Duration::ZERO, self.config.decay);
        rtt.secs * (f64::from(self.pending.get(endpoint)) + 1.0)
    }
}

impl Balancer for PeakEwma {
    fn pick(&mut self, pick: &mut Pick<'_>) -> Option<EndpointId> {
        // Out of `self` for the pick, so the cost may borrow the rest.
        let mut eligible = std::mem::take(&mut self.eligible);
        let now = pick.now;
        let candidates = eligible.among(pick.exclude);
        let chosen = p2c(candidates.len(), |i| candidates.get(i), &mut *pick.rng, |e| self.cost(e, now));
        self.eligible = eligible;
        chosen
    }

    fn grow(&mut self, endpoints: usize) {
        let start = RttEstimate { secs: self.config.default_rtt.as_secs_f64(), updated: Time::ZERO };
        self.rtt.resize(endpoints.max(self.rtt.len()), start);
        self.pending.grow(endpoints);
        self.eligible.grow(endpoints);
    }
    fn on_send(&mut self, endpoint: EndpointId, _now: Time) {
        self.pending.inc(endpoint);
    }

    fn on_feedback(&mut self, endpoint: EndpointId, now: Time, feedback: &Feedback) {
        self.pending.dec(endpoint);
        if feedback.outcome != Outcome::Unavailable {
            self.rtt[endpoint].update(now, feedback.rtt, self.config.decay);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_pcg::Pcg64Mcg;

    const MS: Duration = Duration::from_millis(1);
    const SEC: Duration = Duration::from_secs(1);

    fn balancer(endpoints: usize) -> PeakEwma {
        PeakEwma::new(endpoints, PeakEwmaConfig::default())
    }

    /// A pick at t = 1 s.
    fn pick_with(b: &mut PeakEwma, rng: &mut Pcg64Mcg, exclude: &[EndpointId]) -> Option<EndpointId> {
        b.pick(&mut Pick { now: SEC, rng, exclude, true_loads: None })
    }

    fn secs(b: &PeakEwma, endpoint: EndpointId) -> f64 {
        b.rtt[endpoint].secs
    }

    #[test]
    fn the_defaults_are_linkerds() {
        let c = PeakEwmaConfig::default();
        assert_eq!((c.decay, c.default_rtt), (10 * SEC, 30 * MS));
        assert_eq!(secs(&balancer(1), 0), 0.030);
    }

    #[test]
    fn a_new_peak_is_taken_at_once() {
        let mut b = balancer(1);
        // At t = 5 s an answer after 80 ms, above the 30 ms default: the estimate is 80 ms.
        b.on_send(0, 5 * SEC);
        b.on_feedback(0, 5 * SEC, &Feedback::success(80 * MS));
        assert_eq!(secs(&b, 0), 0.080);
        assert_eq!(b.rtt[0].updated, 5 * SEC);
    }

    #[test]
    fn a_lower_sample_pulls_the_estimate_down_by_elapsed_time() {
        let mut b = balancer(1);
        // A 100 ms peak at t = 1 s.
        b.on_feedback(0, SEC, &Feedback::success(100 * MS));
        // One decay constant (10 s) later a 20 ms answer: w = e^-1, so the estimate becomes
        // e^-1 · 100 ms + (1 - e^-1) · 20 ms.
        b.on_feedback(0, 11 * SEC, &Feedback::success(20 * MS));
        let w = (-1.0f64).exp();
        assert_eq!(secs(&b, 0), w * 0.100 + (1.0 - w) * 0.020);
        // Another 20 ms answer at the same instant: nothing elapsed, w = 1, the estimate stays.
        let before = secs(&b, 0);
        b.on_feedback(0, 11 * SEC, &Feedback::success(20 * MS));
        assert_eq!(secs(&b, 0), before);
    }

    #[test]
    fn the_default_decays_from_the_epoch() {
        let mut b = balancer(1);
        // The first answer, 10 ms at t = 20 s (two decay constants after the epoch):
        // e^-2 · 30 ms + (1 - e^-2) · 10 ms.
        b.on_feedback(0, 20 * SEC, &Feedback::success(10 * MS));
        let w = (-2.0f64).exp();
        assert_eq!(secs(&b, 0), w * 0.030 + (1.0 - w) * 0.010);
    }

    #[test]
    fn every_ended_attempt_is_a_sample_but_an_unreachable_endpoint() {
        let mut b = balancer(1);
        // Unreachable: pending goes up and back down, the estimate stays.
        b.on_send(0, SEC);
        assert_eq!(b.pending.get(0), 1);
        b.on_feedback(0, SEC, &Feedback::new(Outcome::Unavailable, 5 * SEC));
        assert_eq!((b.pending.get(0), secs(&b, 0)), (0, 0.030));
        // A timeout after 2 s is a 2 s peak, as tower's dropped handle measures it; so are a
        // cancellation, a 429 and an error, each above the last.
        for (outcome, ms) in [(Outcome::TimedOut, 2000), (Outcome::Cancelled, 2100), (Outcome::Rejected, 2200)] {
            b.on_send(0, SEC);
            b.on_feedback(0, SEC, &Feedback::new(outcome, ms * MS));
            assert_eq!((b.pending.get(0), secs(&b, 0)), (0, ms as f64 / 1000.0), "{outcome:?}");
        }
        b.on_feedback(0, SEC, &Feedback::new(Outcome::Error, 2300 * MS));
        assert_eq!(secs(&b, 0), 2.3);
    }

    #[test]
    fn reading_the_cost_decays_the_estimate_towards_zero() {
        let mut b = balancer(2);
        // A 1 s peak at t = 1 s.
        b.on_feedback(0, SEC, &Feedback::success(SEC));
        // Read ten seconds later (one decay constant): e^-1 × 1 s, and the estimate is now that.
        assert_eq!(b.cost(0, 11 * SEC), (-1.0f64).exp());
        assert_eq!(b.rtt[0], RttEstimate { secs: (-1.0f64).exp(), updated: 11 * SEC });
        // A 100 ms answer at once: nothing elapsed since the read, so the estimate stays.
        b.on_feedback(0, 11 * SEC, &Feedback::success(100 * MS));
        assert_eq!(secs(&b, 0), (-1.0f64).exp());
        // So an endpoint avoided after a slow answer wins again once it has faded below the other:
        // endpoint 1 answered in 200 ms at 40 s; at 41 s endpoint 0 is at e^-3 ≈ 50 ms.
        b.on_feedback(1, 40 * SEC, &Feedback::success(200 * MS));
        let mut rng = Pcg64Mcg::seed_from_u64(3);
        assert_eq!(b.pick(&mut Pick { now: 41 * SEC, rng: &mut rng, exclude: &[], true_loads: None }), Some(0));
    }

    #[test]
    fn cost_is_estimate_times_pending_plus_one() {
        // Start every endpoint at 1 ms so that the first answers are peaks, taken as they are.
        let config = PeakEwmaConfig { default_rtt: MS, ..PeakEwmaConfig::default() };
        let mut b = PeakEwma::new(2, config);
        let mut rng = Pcg64Mcg::seed_from_u64(9);
        // Endpoint 0 answers in 10 ms, endpoint 1 in 40 ms.
        b.on_feedback(0, SEC, &Feedback::success(10 * MS));
        b.on_feedback(1, SEC, &Feedback::success(40 * MS));
        assert_eq!((b.cost(0, SEC), b.cost(1, SEC)), (0.010, 0.040));
        // Idle, 0 is cheaper (with two endpoints P2C always compares both).
        assert_eq!(pick_with(&mut b, &mut rng, &[]), Some(0));
        // Three attempts in flight to 0: 10 ms × 4 = 40 ms ties with 1; still 0 or 1 as drawn first.
        (0..3).for_each(|_| b.on_send(0, SEC));
        assert_eq!(b.cost(0, SEC), 0.040);
        // A fourth: 10 ms × 5 = 50 ms > 40 ms, so 1 wins.
        b.on_send(0, SEC);
        assert_eq!(pick_with(&mut b, &mut rng, &[]), Some(1));
        // One in flight to 1 as well: 50 ms vs 80 ms, so 0 wins again.
        b.on_send(1, SEC);
        assert_eq!(pick_with(&mut b, &mut rng, &[]), Some(0));
        // Unless this request already tried 0.
        assert_eq!(pick_with(&mut b, &mut rng, &[0]), Some(1));
    }

    #[test]
    fn zero_decay_follows_every_sample() {
        let mut b = PeakEwma::new(1, PeakEwmaConfig { decay: Duration::ZERO, ..PeakEwmaConfig::default() });
        b.on_feedback(0, SEC, &Feedback::success(100 * MS));
        b.on_feedback(0, SEC, &Feedback::success(7 * MS));
        assert_eq!(secs(&b, 0), 0.007);
    }

    #[test]
    fn feedback_without_a_send_does_not_underflow() {
        let mut b = balancer(2);
        let mut rng = Pcg64Mcg::seed_from_u64(4);
        b.on_feedback(0, Time::ZERO, &Feedback::new(Outcome::Cancelled, Duration::ZERO));
        assert_eq!(b.pending.get(0), 0);
        b.on_send(0, Time::ZERO);
        assert_eq!(pick_with(&mut b, &mut rng, &[]), Some(1));
    }
}
