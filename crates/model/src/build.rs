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
use tailguard_policy::hedge::HedgePolicy;
use tailguard_policy::retry::{Backoff, RetryPolicy};
use tailguard_policy::timeout::{self, Adaptive, AdaptiveConfig, Controller, ControllerConfig, ExpBackoff, Fixed};
use tailguard_policy::timeout::{NoTimeout, Optimizer, OptimizerConfig, Sequential};

/// The window of BLOC's dynamic capacity when the file gives none (bloc-load-balancing.txt §IV-D).
pub const DEFAULT_DYNAMIC_WINDOW: Duration = Duration::from_secs(30);

/// A caller's policies towards a service of `endpoints` replicas.
pub fn client_policy(config: &schema::ClientPolicy, endpoints: usize) -> call::ClientPolicy {
    call::ClientPolicy {
        balancer: balancer(&config.balancer, endpoints),
        timeout: timeout(&config.timeout),
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
pub fn timeout(config: &schema::Timeout) -> Box<dyn timeout::TimeoutPolicy> {
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
        schema::Timeout::Adaptive { initial, k, margin } => {
            let mut c = AdaptiveConfig::new(initial.get());
            set(&mut c.k, *k);
            set(&mut c.margin, *margin);
            Box::new(Adaptive::new(c))
        }
    }
}

/// A hedging policy, if any.
pub fn hedge(config: &schema::Hedge) -> Option<Box<dyn HedgePolicy>> {
    match config {
        schema::Hedge::None => None,
        // PENDING: the hedge policies are being written in tailguard-policy.
        schema::Hedge::Speculative { .. } | schema::Hedge::Percentile { .. } => None,
    }
}

/// Retry rules.
pub fn retry(config: &schema::Retry) -> RetryPolicy {
    RetryPolicy {
        max_attempts: config.max_attempts,
        // PENDING: backoff and budget are being written in tailguard-policy.
        backoff: Backoff::none(),
        budget: None,
        retry_non_idempotent: config.non_idempotent,
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
    use crate::Dur;
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
        let mut first = |text: &str, attempt: u32| timeout(&yaml(text)).timeout(Duration::ZERO, attempt, &mut rng);
        assert_eq!(first("{kind: none}", 0), None);
        assert_eq!(first("{kind: fixed, value: 50ms}", 3), Some(ms(50)));
        assert_eq!(first("{kind: exp-backoff, first: 10ms}", 2), Some(ms(40)));
        assert_eq!(first("{kind: exp-backoff, first: 10ms, factor: 3, steps: 2}", 5), Some(ms(30)));
        assert_eq!(first("{kind: sequential, values: [10ms, 20ms]}", 1), Some(ms(20)));
        assert_eq!(first("{kind: controller, initial: 20ms, factor: 2}", 0), Some(ms(20)));
        assert_eq!(first("{kind: adaptive, initial: 20ms, k: 3}", 0), Some(ms(20)));
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
    fn retry_rules_carry_over() {
        let r = retry(&yaml("{max_attempts: 3, non_idempotent: true}"));
        assert_eq!(r.max_attempts, 3);
        assert!(r.retry_non_idempotent);
        let r = retry(&schema::Retry::default());
        assert_eq!(r.max_attempts, 1);
        assert!(!r.retry_non_idempotent);
        let _ = Dur::ZERO;
    }
}
