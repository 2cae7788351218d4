//! Construction of policy-core objects (`tailguard_policy`) from their configuration.
//!
//! The configuration is assumed validated ([`crate::Experiment`] does it); these functions do not
//! fail. Parameters left out of the file (`None`) take the policy's own defaults, so the defaults
//! live in one place, beside the policy that documents them.

use crate::schema;
use std::time::Duration;
use tailguard_policy::admission::{self, AdmitAll, DynamicCapacity, FixedCapacity};
use tailguard_policy::balance::{self, Bloc, BlocConfig, LeastRequest, Oracle, PeakEwma, PeakEwmaConfig};
use tailguard_policy::balance::{RandomBalancer, RoundRobin};
use tailguard_policy::call;
use tailguard_policy::hedge::{HedgePolicy, PercentileHedge, PercentileHedgeConfig, Speculative};
use tailguard_policy::retry::{Backoff, RetryBudget, RetryPolicy};
use tailguard_policy::timeout::{self, Adaptive, AdaptiveConfig, Controller, ControllerConfig, ExpBackoff, Fixed};
use tailguard_policy::timeout::{NoTimeout, Optimizer, OptimizerConfig, Sequential};

/// The window of BLOC's dynamic capacity when the file gives none (bloc-load-balancing.txt §IV-D).
pub const DEFAULT_DYNAMIC_WINDOW: Duration = Duration::from_secs(30);
/// `max_backoff` is this many times `backoff` when the file gives none (Envoy's default).
pub const DEFAULT_BACKOFF_CAP: u32 = 10;
/// The window over which a retry budget counts requests (Linkerd's and tower's default).
pub const BUDGET_TTL: Duration = Duration::from_secs(10);
/// Retries a second a budget always allows, so a client with little traffic can still retry.
pub const BUDGET_MIN_PER_SEC: u32 = 10;

/// A caller's policies towards a service of `endpoints` replicas.
pub fn client_policy(config: &schema::ClientPolicy, endpoints: usize) -> call::ClientPolicy {
    call::ClientPolicy {
        balancer: balancer(&config.balancer, endpoints),
        timeout: timeout(&config.timeout, config.retry.hedge_on_timeout),
        hedge: hedge(&config.hedge),
        retry: retry(&config.retry),
        deadline: deadline(config),
    }
}

/// The request deadline: the policy's own, shortened by a speculative hedge's overall `timeout`.
pub fn deadline(config: &schema::ClientPolicy) -> Option<Duration> {
    let own = config.deadline.map(|d| d.get());
    let hedge = match &config.hedge {
        schema::Hedge::Speculative { timeout, .. } => timeout.map(|d| d.get()),
        _ => None,
    };
    match (own, hedge) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Admission control at one replica.
pub fn admission(config: &schema::Admission) -> Box<dyn admission::Admission> {
    match config {
        schema::Admission::None => Box::new(AdmitAll),
        schema::Admission::Fixed { capacity } => Box::new(FixedCapacity::new(*capacity)),
        schema::Admission::Dynamic { window } => {
            Box::new(DynamicCapacity::new(window.map_or(DEFAULT_DYNAMIC_WINDOW, |w| w.get())))
        }
    }
}

/// A balancer over endpoints `0..endpoints`.
pub fn balancer(config: &schema::Balancer, endpoints: usize) -> Box<dyn balance::Balancer> {
    match config {
        schema::Balancer::Random => Box::new(RandomBalancer::new(endpoints)),
        schema::Balancer::RoundRobin => Box::new(RoundRobin::new(endpoints)),
        schema::Balancer::LeastRequest => Box::new(LeastRequest::new(endpoints)),
        schema::Balancer::PeakEwma { decay } => {
            let mut c = PeakEwmaConfig::default();
            if let Some(d) = decay {
                c.decay = d.get();
            }
            Box::new(PeakEwma::new(endpoints, c))
        }
        schema::Balancer::Bloc { reset } => {
            let mut c = BlocConfig::default();
            if let Some(r) = reset {
                c.reset = r.get();
            }
            Box::new(Bloc::new(endpoints, c))
        }
        schema::Balancer::Oracle => Box::new(Oracle::new(endpoints)),
    }
}

/// A timeout policy; adaptive ones start from the paper's (or their own) default parameters.
/// `hedge_on_timeout` is the retry policy's: with it, the adaptive timeout learns its escalation.
pub fn timeout(config: &schema::Timeout, hedge_on_timeout: bool) -> Box<dyn timeout::TimeoutPolicy> {
    match config {
        schema::Timeout::None => Box::new(NoTimeout),
        schema::Timeout::Fixed { value } => Box::new(Fixed::new(value.get())),
        schema::Timeout::ExpBackoff { first, factor, steps } => Box::new(ExpBackoff::new(first.get(), *factor, *steps)),
        schema::Timeout::Sequential { values } => Box::new(Sequential::new(values.iter().map(|v| v.get()).collect())),
        schema::Timeout::Controller { initial, factor, tolerance, buffer } => {
            let mut c = ControllerConfig::paper(initial.get());
            set(&mut c.factor, *factor);
            set(&mut c.tolerance, *tolerance);
            set(&mut c.buffer, *buffer);
            Box::new(Controller::new(c))
        }
        schema::Timeout::Optimizer {
            initial,
            sample_every,
            window,
            recompute_every,
            cost_per_second,
            sequence_len,
        } => {
            let mut c = OptimizerConfig::paper(initial.get());
            set(&mut c.sample_every, *sample_every);
            set(&mut c.window, window.map(|n| n as usize));
            set(&mut c.recompute_every, *recompute_every);
            set(&mut c.cost_per_second, *cost_per_second);
            set(&mut c.sequence_len, sequence_len.map(|n| n as usize));
            Box::new(Optimizer::new(c))
        }
        schema::Timeout::Adaptive { initial, k, margin, escalation } => {
            let mut c = AdaptiveConfig { hedge_on_timeout, ..AdaptiveConfig::new(initial.get()) };
            set(&mut c.k, *k);
            set(&mut c.margin, *margin);
            set(&mut c.escalation, *escalation);
            Box::new(Adaptive::new(c))
        }
    }
}

/// A hedging policy, if any. A speculative hedge's overall `timeout` is not part of the hedge
/// policy: it shortens the request's deadline (see [`deadline`]).
pub fn hedge(config: &schema::Hedge) -> Option<Box<dyn HedgePolicy>> {
    match config {
        schema::Hedge::None => None,
        schema::Hedge::Speculative { attempts, patience, .. } => {
            Some(Box::new(Speculative::new(*attempts, patience.get())))
        }
        schema::Hedge::Percentile { percentile, max_extra, max_hedges } => {
            let mut c = PercentileHedgeConfig::default();
            // The file writes a percentile (95); the policy takes a quantile (0.95).
            set(&mut c.percentile, percentile.map(|p| p / 100.0));
            set(&mut c.max_extra, *max_extra);
            set(&mut c.max_hedges, *max_hedges);
            Some(Box::new(PercentileHedge::new(c)))
        }
    }
}

/// Retry rules. Without `backoff`, retries go at once; `max_backoff` defaults to ten times
/// `backoff` (Envoy's default); a `budget` is a ratio of the requests of the last
/// [`BUDGET_TTL`], with [`BUDGET_MIN_PER_SEC`] retries a second always allowed.
pub fn retry(config: &schema::Retry) -> RetryPolicy {
    let backoff = match config.backoff {
        Some(base) if !base.get().is_zero() => {
            let base = base.get();
            let max = config.max_backoff.map_or(base.saturating_mul(DEFAULT_BACKOFF_CAP), |m| m.get());
            Backoff { jitter: config.jitter, ..Backoff::exponential(base, max) }
        }
        _ => Backoff::none(),
    };
    RetryPolicy {
        max_attempts: config.max_attempts,
        backoff,
        budget: config.budget.map(|ratio| RetryBudget::new(BUDGET_TTL, BUDGET_MIN_PER_SEC, ratio as f32)),
        retry_non_idempotent: config.non_idempotent,
        hedge_on_timeout: config.hedge_on_timeout,
    }
}

/// Overwrites `field` when the file gives a value.
fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *field = v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_pcg::Pcg64Mcg;
    use tailguard_policy::balance::Pick;

    fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> T {
        serde_yaml_ng::from_str(text).unwrap()
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn admission_kinds_have_their_capacities() {
        assert_eq!(admission(&yaml("{kind: none}")).capacity(Duration::ZERO), None);
        let mut fixed = admission(&yaml("{kind: fixed, capacity: 10}"));
        assert_eq!(fixed.capacity(Duration::ZERO), Some(10));
        assert!(fixed.admit(Duration::ZERO, 9));
        assert!(!fixed.admit(Duration::ZERO, 10));
        // Dynamic capacity admits everything during its first window (30 s by default).
        let mut dynamic = admission(&yaml("{kind: dynamic}"));
        dynamic.observe(Duration::ZERO, 5);
        assert_eq!(dynamic.capacity(Duration::from_secs(29)), None);
        assert_eq!(dynamic.capacity(Duration::from_secs(30)), Some(5));
        let mut short = admission(&yaml("{kind: dynamic, window: 1s}"));
        short.observe(Duration::ZERO, 3);
        assert_eq!(short.capacity(Duration::from_secs(1)), Some(3));
    }

    #[test]
    fn every_balancer_picks_one_of_its_endpoints() {
        let kinds = [
            "{kind: random}",
            "{kind: round-robin}",
            "{kind: least-request}",
            "{kind: peak-ewma, decay: 1s}",
            "{kind: bloc}",
            "{kind: oracle}",
        ];
        let mut rng = Pcg64Mcg::new(1);
        for kind in kinds {
            let mut b = balancer(&yaml(kind), 3);
            let loads = [4, 0, 2];
            let mut pick = Pick { now: Duration::ZERO, rng: &mut rng, exclude: &[], true_loads: Some(&loads) };
            let chosen = b.pick(&mut pick);
            assert!(chosen.is_some_and(|e| e < 3), "{kind}: {chosen:?}");
            if kind == "{kind: oracle}" {
                assert_eq!(chosen, Some(1), "the oracle takes the shortest queue");
            }
        }
    }

    #[test]
    fn timeouts_follow_their_configuration() {
        let mut rng = Pcg64Mcg::new(1);
        let mut first =
            |text: &str, attempt: u32| timeout(&yaml(text), false).timeout(Duration::ZERO, attempt, &mut rng);
        assert_eq!(first("{kind: none}", 0), None);
        assert_eq!(first("{kind: fixed, value: 50ms}", 3), Some(ms(50)));
        assert_eq!(first("{kind: exp-backoff, first: 10ms}", 2), Some(ms(40)));
        assert_eq!(first("{kind: exp-backoff, first: 10ms, factor: 3, steps: 2}", 5), Some(ms(30)));
        assert_eq!(first("{kind: sequential, values: [10ms, 20ms]}", 1), Some(ms(20)));
        assert_eq!(first("{kind: controller, initial: 20ms, factor: 2}", 0), Some(ms(20)));
        assert_eq!(first("{kind: adaptive, initial: 20ms, k: 3}", 0), Some(ms(20)));
        assert_eq!(first("{kind: adaptive, initial: 20ms}", 1), Some(ms(80)), "retries escalate ×4");
        assert_eq!(first("{kind: adaptive, initial: 20ms, escalation: 2}", 1), Some(ms(40)));
        // The Optimizer's first request is an untimed sample; with sampling off it uses `initial`.
        assert_eq!(first("{kind: optimizer, initial: 20ms}", 0), None);
        assert_eq!(first("{kind: optimizer, initial: 20ms, sample_every: 0}", 0), Some(ms(20)));
    }

    #[test]
    fn a_speculative_timeout_shortens_the_deadline() {
        let policy = |text: &str| client_policy(&yaml(text), 2);
        assert_eq!(policy("{}").deadline, None);
        assert_eq!(policy("{deadline: 2s}").deadline, Some(ms(2000)));
        let spec = "{hedge: {kind: speculative, attempts: 2, patience: 10ms, timeout: 1s}";
        assert_eq!(policy(&format!("{spec}}}")).deadline, Some(ms(1000)));
        assert_eq!(policy(&format!("{spec}, deadline: 500ms}}")).deadline, Some(ms(500)));
        assert_eq!(policy(&format!("{spec}, deadline: 3s}}")).deadline, Some(ms(1000)));
    }

    #[test]
    fn hedges_are_built_with_their_parameters() {
        assert!(hedge(&yaml("{kind: none}")).is_none());
        let mut spec = hedge(&yaml("{kind: speculative, attempts: 3, patience: 30ms}")).unwrap();
        spec.on_request(Duration::ZERO);
        assert_eq!(spec.delay(Duration::ZERO, 1), Some(ms(30)));
        assert_eq!(spec.delay(Duration::ZERO, 2), Some(ms(60)));
        assert_eq!(spec.delay(Duration::ZERO, 3), None, "three attempts in all");
        // Percentile hedging waits for latencies before it hedges.
        let mut p = hedge(&yaml("{kind: percentile, percentile: 50, max_extra: 1}")).unwrap();
        p.on_request(Duration::ZERO);
        assert_eq!(p.delay(Duration::ZERO, 1), None);
        for i in 1..=20 {
            p.on_latency(Duration::ZERO, ms(i));
        }
        p.on_request(Duration::ZERO);
        let median = p.delay(Duration::ZERO, 1).unwrap();
        assert!(median >= ms(10) && median <= ms(11), "the 50th percentile of 1..=20 ms: {median:?}");
    }

    #[test]
    fn retry_rules_carry_over() {
        let r = retry(&yaml("{max_attempts: 3, non_idempotent: true, hedge_on_timeout: true}"));
        assert_eq!(r.max_attempts, 3);
        assert!(r.retry_non_idempotent && r.hedge_on_timeout);
        assert_eq!(r.backoff, Backoff::none());
        assert!(r.budget.is_none());
        let r = retry(&schema::Retry::default());
        assert_eq!(r.max_attempts, 1);
        assert!(!r.retry_non_idempotent && !r.hedge_on_timeout);
    }

    #[test]
    fn backoff_defaults_to_a_cap_of_ten_bases_with_jitter() {
        let r = retry(&yaml("{max_attempts: 5, backoff: 10ms}"));
        assert_eq!(r.backoff, Backoff { base: ms(10), max: ms(100), jitter: true });
        let r = retry(&yaml("{max_attempts: 5, backoff: 10ms, max_backoff: 30ms, jitter: false}"));
        assert_eq!(r.backoff, Backoff { base: ms(10), max: ms(30), jitter: false });
        let mut rng = Pcg64Mcg::new(1);
        assert_eq!(r.backoff.delay(1, &mut rng), ms(10));
        assert_eq!(r.backoff.delay(2, &mut rng), ms(20));
        assert_eq!(r.backoff.delay(3, &mut rng), ms(30));
    }

    #[test]
    fn a_budget_limits_retries_beyond_its_floor() {
        let mut r = retry(&yaml("{max_attempts: 2, budget: 0.1}"));
        let budget = r.budget.as_mut().unwrap();
        // No requests yet: only the floor of 10 a second over the 10 s window is available.
        assert_eq!(budget.available(Duration::ZERO), 100);
        for _ in 0..100 {
            budget.deposit(Duration::ZERO);
        }
        assert_eq!(budget.available(Duration::ZERO), 110, "100 requests add 10% of a retry each");
    }
}
