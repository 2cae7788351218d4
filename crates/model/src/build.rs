//! Construction of policy-core objects (`tailguard_policy`) from their configuration.
//!
//! The configuration is assumed validated ([`crate::Experiment`] does it); these functions do not
//! fail. Each policy family's config type builds its own policy (`BalancerConfig::build`, ...);
//! what is here combines a caller's sections, which only the experiment's [`ClientPolicy`] holds.

use crate::schema::{self, ClientPolicy, SidecarKind};
use crate::Run;
use std::time::Duration;
use tailguard_policy::admission;
use tailguard_policy::call;
use tailguard_policy::class::{ClassPolicy, Classes};
use tailguard_policy::peer::{Peer, PeerPolicy, Refusal};
use tailguard_policy::timeout::UpstreamRequests;

/// A caller's policies towards a service of `endpoints` replicas, every request in one class.
pub fn client_policy(config: &ClientPolicy, endpoints: usize) -> call::ClientPolicy {
    client_policy_routed(config, endpoints, &[])
}

/// A caller's policies towards a service of `endpoints` replicas whose routes are `routes`:
/// class `i + 1` is the requests of `routes[i]`, with the route's entry of `config.routes`
/// applied ([`ClientPolicy::for_route`]); class 0 and any class beyond (the proxy's automatic
/// ones) follow `config` itself. Each class keeps its own learned models.
pub fn client_policy_routed(config: &ClientPolicy, endpoints: usize, routes: &[String]) -> call::ClientPolicy {
    let mut configs = vec![config.clone()];
    configs.extend(routes.iter().map(|name| config.for_route(name)));
    let upstream = UpstreamRequests::default();
    call::ClientPolicy {
        balancer: config.balancer.build(endpoints),
        outlier: config.outlier.build(endpoints),
        classes: Classes::new(Box::new(move |class| {
            class_policy(configs.get(usize::from(class)).unwrap_or(&configs[0]), &upstream)
        })),
        retry: config.retry.build(),
        retired: Vec::new(),
        endpoints,
    }
}

/// One class's policies, from the caller's policy as its route sees it; its timeout counts its
/// requests with the upstream's other classes in `upstream`, whose retry budget they share.
pub fn class_policy(config: &ClientPolicy, upstream: &UpstreamRequests) -> ClassPolicy {
    ClassPolicy {
        timeout: config.timeout.build_for(&config.retry, upstream),
        hedge: config.hedge.build(),
        deadline: deadline(config),
        hedge_on_timeout: config.retry.hedges_on_timeout(&config.timeout),
        races: Default::default(),
    }
}

/// A caller's policies towards a service of `endpoints` replicas whose routes are `routes`, as
/// the variant's `sidecar` runs them: a peer's own policy ([`peer_policy`], the table the lab's
/// translation reads; one class) in a process of `peer_threads` threads, else tailguard's ([`client_policy_routed`]). A policy the peer
/// cannot express ([`check_peers`] refuses the run) is built as tailguard's.
pub fn client_policy_as(
    sidecar: SidecarKind,
    peer_threads: u32,
    config: &ClientPolicy,
    endpoints: usize,
    routes: &[String],
) -> call::ClientPolicy {
    match sidecar.peer_kind().map(|peer| peer_policy(peer, config)) {
        Some(Ok(policy)) => policy.build(endpoints, peer_threads),
        _ => client_policy_routed(config, endpoints, routes),
    }
}

/// The workload's client towards the entry service's `endpoints` replicas: the load generator's
/// own round robin when the file leaves `client` at its default (the lab then starts no sidecar
/// for it), else the client as the variant's sidecar runs it.
pub fn workload_policy(run: &Run, endpoints: usize) -> call::ClientPolicy {
    let client = &run.workload.client;
    let sidecar = if *client == ClientPolicy::default() { SidecarKind::Tailguard } else { run.sidecar };
    let routes = run.services.get(&run.workload.target).map(|s| s.route_names()).unwrap_or_default();
    client_policy_as(sidecar, run.peer_threads(), client, endpoints, &routes)
}

/// What `peer` makes of a caller's policy: the one table of docs/lab.md, "Peer sidecars".
pub fn peer_policy(peer: Peer, config: &ClientPolicy) -> Result<PeerPolicy, Refusal> {
    PeerPolicy::translate(
        peer,
        &config.balancer,
        // A peer's variant gets no ejection of tailguard's unless the policy writes it.
        config.outlier.config().filter(|_| !config.outlier.is_default()).as_ref(),
        &config.timeout,
        &config.hedge,
        &config.retry,
        config.deadline.map(|d| d.get()),
    )
}

/// A policy field a peer sidecar cannot express, at `caller->callee.FIELD`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("sidecar: {peer} cannot express `{field}`: {why}")]
pub struct PeerRefused {
    /// `haproxy` or `nginx`.
    pub peer: &'static str,
    /// Where the field is, as the variant writes it: `frontend->backend.hedge`.
    pub field: String,
    pub why: String,
}

impl PeerRefused {
    /// `refusal` of the edge `at` (`caller->callee`) by `peer`.
    pub fn new(peer: Peer, at: &str, refusal: Refusal) -> PeerRefused {
        PeerRefused { peer: peer.name(), field: format!("{at}.{}", refusal.field), why: refusal.why.to_string() }
    }
}

/// Checks that a peer variant's every policy has a peer counterpart: its call edges, and the
/// workload's client when it is not the load generator's own round robin (then a peer sidecar
/// carries it, as in the lab). Tailguard's own sidecar expresses everything.
pub fn check_peers(run: &Run) -> Result<(), PeerRefused> {
    let Some(peer) = run.sidecar.peer_kind() else { return Ok(()) };
    let edges = run.services.iter().flat_map(|(name, s)| s.calls.iter().map(move |c| (name, &c.service, &c.policy)));
    for (caller, callee, policy) in edges {
        peer_policy(peer, policy).map_err(|r| PeerRefused::new(peer, &format!("{caller}->{callee}"), r))?;
    }
    let client = &run.workload.client;
    if *client != ClientPolicy::default() {
        let at = format!("workload->{}", run.workload.target);
        peer_policy(peer, client).map_err(|r| PeerRefused::new(peer, &at, r))?;
    }
    Ok(())
}

/// The request deadline: the policy's own, shortened by a speculative hedge's overall `timeout`.
pub fn deadline(config: &ClientPolicy) -> Option<Duration> {
    let own = config.deadline.map(|d| d.get());
    match (own, config.hedge.deadline()) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Admission control at one replica.
pub fn admission(config: &schema::AdmissionConfig) -> Box<dyn admission::Admission> {
    config.build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_pcg::Pcg64Mcg;
    use tailguard_policy::balance::{LoadIndex, Pick};
    use tailguard_policy::retry::Backoff;

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
        // Dynamic capacity admits everything during its first window (30 s by default), then
        // 1.5 × its average load by default (7.5, rounded up).
        let mut dynamic = admission(&yaml("{kind: dynamic}"));
        dynamic.observe(Duration::ZERO, 5);
        assert_eq!(dynamic.capacity(Duration::from_secs(29)), None);
        assert_eq!(dynamic.capacity(Duration::from_secs(30)), Some(8));
        let mut short = admission(&yaml("{kind: dynamic, window: 1s, headroom: 1}"));
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
            let mut b = yaml::<schema::BalancerConfig>(kind).build(3);
            let loads = LoadIndex::from_loads(&[4, 0, 2]);
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
        let alone =
            tailguard_policy::retry::RetryConfig { hedge_on_timeout: Some(false), budget: None, ..Default::default() };
        let mut first = |text: &str, attempt: u32| {
            yaml::<schema::TimeoutConfig>(text).build(&alone).timeout(Duration::ZERO, attempt, &mut rng)
        };
        assert_eq!(first("{kind: none}", 0), None);
        assert_eq!(first("{kind: fixed, value: 50ms}", 3), Some(ms(50)));
        assert_eq!(first("{kind: exp-backoff, first: 10ms}", 2), Some(ms(40)));
        assert_eq!(first("{kind: exp-backoff, first: 10ms, factor: 3, steps: 2}", 5), Some(ms(30)));
        assert_eq!(first("{kind: sequential, values: [10ms, 20ms]}", 1), Some(ms(20)));
        assert_eq!(first("{kind: controller, initial: 20ms, factor: 2}", 0), Some(ms(20)));
        assert_eq!(first("{kind: adaptive, initial: 20ms, k: 3}", 0), Some(ms(20)));
        assert_eq!(first("{kind: adaptive, initial: 20ms}", 1), Some(ms(80)), "retries escalate ×4");
        assert_eq!(first("{kind: adaptive, initial: 20ms, escalation: 2}", 1), Some(ms(40)));
        // The Optimizer's first request is a probe with ten times the timeout (`sample_factor`);
        // with sampling off it uses `initial`.
        assert_eq!(first("{kind: optimizer, initial: 20ms}", 0), Some(ms(200)));
        assert_eq!(first("{kind: optimizer, initial: 20ms, sample_factor: 3}", 0), Some(ms(60)));
        assert_eq!(first("{kind: optimizer, initial: 20ms, sample_every: 0}", 0), Some(ms(20)));
    }

    #[test]
    fn a_speculative_timeout_shortens_the_deadline() {
        let policy = |text: &str| client_policy(&yaml(text), 2);
        assert_eq!(policy("{}").classes.pooled().deadline, None);
        assert_eq!(policy("{deadline: 2s}").classes.pooled().deadline, Some(ms(2000)));
        let spec = "{hedge: {kind: speculative, attempts: 2, patience: 10ms, timeout: 1s}";
        assert_eq!(policy(&format!("{spec}}}")).classes.pooled().deadline, Some(ms(1000)));
        assert_eq!(policy(&format!("{spec}, deadline: 500ms}}")).classes.pooled().deadline, Some(ms(500)));
        assert_eq!(policy(&format!("{spec}, deadline: 3s}}")).classes.pooled().deadline, Some(ms(1000)));
    }

    #[test]
    fn hedges_are_built_with_their_parameters() {
        let hedge = |text: &str| yaml::<schema::HedgeConfig>(text).build();
        assert!(hedge("{kind: none}").is_none());
        let mut spec = hedge("{kind: speculative, attempts: 3, patience: 30ms}").unwrap();
        spec.on_request(Duration::ZERO);
        assert_eq!(spec.delay(Duration::ZERO, 1), Some(ms(30)));
        assert_eq!(spec.delay(Duration::ZERO, 2), Some(ms(60)));
        assert_eq!(spec.delay(Duration::ZERO, 3), None, "three attempts in all");
        // Percentile hedging waits for latencies before it hedges.
        let mut p = hedge("{kind: percentile, percentile: 50, max_extra: 1}").unwrap();
        p.on_request(Duration::ZERO);
        assert_eq!(p.delay(Duration::ZERO, 1), None);
        for i in 1..=20 {
            p.on_latency(Duration::ZERO, ms(i));
        }
        p.on_request(Duration::ZERO);
        let median = p.delay(Duration::ZERO, 1).unwrap();
        assert!(median >= ms(10) && median <= ms(11), "the 50th percentile of 1..=20 ms: {median:?}");
        // A speculative budget refuses hedges until requests have paid for one.
        let mut budgeted = hedge("{kind: speculative, attempts: 2, patience: 30ms, budget: 0.5}").unwrap();
        budgeted.on_request(Duration::ZERO);
        assert!(!budgeted.try_send(ms(30), 1));
        budgeted.on_request(Duration::ZERO);
        assert!(budgeted.try_send(ms(30), 1));
        // Adaptive hedging needs no parameter, and its gate is shut until it has learnt.
        let adaptive = hedge("{kind: adaptive}").unwrap();
        assert_eq!(adaptive.gate(), Some(false));
        assert_eq!(hedge("{kind: percentile}").unwrap().gate(), None);
    }

    fn retry(config: &schema::RetryConfig) -> tailguard_policy::retry::RetryPolicy {
        config.build()
    }

    #[test]
    fn routes_get_their_own_classes_with_their_overrides() {
        let config = yaml::<ClientPolicy>(
            "{timeout: {kind: adaptive}, deadline: 2s, routes: {slow: {timeout: {kind: fixed, value: 3s}, deadline: 5s}}}",
        );
        let mut policy = client_policy_routed(&config, 2, &["fast".to_string(), "slow".to_string()]);
        let (pooled, fast) = (policy.classes.get(0).deadline, policy.classes.get(1).deadline);
        assert_eq!((pooled, fast), (Some(ms(2000)), Some(ms(2000))));
        let slow = policy.classes.get(2);
        assert_eq!(
            (slow.deadline, slow.timeout.current(), slow.hedge_on_timeout),
            (Some(ms(5000)), Some(ms(3000)), false)
        );
        // A class beyond the routes (the proxy's automatic ones) follows the policy itself.
        let auto = policy.classes.get(7);
        assert!(auto.hedge_on_timeout && auto.timeout.learned());
    }

    #[test]
    fn adaptive_timeouts_hedge_on_timeout_unless_the_file_says_otherwise() {
        let policy = |text: &str| client_policy(&yaml::<ClientPolicy>(text), 1).classes.pooled().hedge_on_timeout;
        assert!(policy("{timeout: {kind: adaptive}, retry: {max_attempts: 3}}"));
        assert!(!policy("{timeout: {kind: adaptive}, retry: {max_attempts: 3, hedge_on_timeout: false}}"));
        assert!(!policy("{timeout: {kind: fixed, value: 10ms}, retry: {max_attempts: 3}}"));
        assert!(policy("{timeout: {kind: fixed, value: 10ms}, retry: {max_attempts: 3, hedge_on_timeout: true}}"));
    }

    #[test]
    fn retry_rules_carry_over() {
        let r = retry(&yaml::<schema::RetryConfig>("{max_attempts: 3, non_idempotent: true, hedge_on_timeout: true}"));
        assert_eq!(r.max_attempts, 3);
        assert!(r.retry_non_idempotent);
        assert_eq!(r.backoff, Backoff::none());
        // No budget written: the default one (tailguard_policy::retry::DEFAULT_BUDGET).
        assert!(r.budget.is_some());
        assert!(retry(&yaml::<schema::RetryConfig>("{max_attempts: 3, budget: unlimited}")).budget.is_none());
        let r = retry(&schema::RetryConfig::default());
        assert_eq!(r.max_attempts, 1);
        assert!(!r.retry_non_idempotent);
    }

    #[test]
    fn backoff_defaults_to_a_cap_of_ten_bases_with_jitter() {
        let r = retry(&yaml::<schema::RetryConfig>("{max_attempts: 5, backoff: 10ms}"));
        assert_eq!(r.backoff, Backoff { base: ms(10), max: ms(100), jitter: true });
        let r =
            retry(&yaml::<schema::RetryConfig>("{max_attempts: 5, backoff: 10ms, max_backoff: 30ms, jitter: false}"));
        assert_eq!(r.backoff, Backoff { base: ms(10), max: ms(30), jitter: false });
        let mut rng = Pcg64Mcg::new(1);
        assert_eq!(r.backoff.delay(1, &mut rng), ms(10));
        assert_eq!(r.backoff.delay(2, &mut rng), ms(20));
        assert_eq!(r.backoff.delay(3, &mut rng), ms(30));
    }

    #[test]
    fn a_budget_limits_retries_beyond_its_floor() {
        let mut r = retry(&yaml::<schema::RetryConfig>("{max_attempts: 2, budget: 0.1}"));
        let budget = r.budget.as_mut().unwrap();
        // No requests yet: only the floor of 10 a second over the 10 s window is available.
        assert_eq!(budget.available(Duration::ZERO), 100);
        for _ in 0..100 {
            budget.deposit(Duration::ZERO);
        }
        assert_eq!(budget.available(Duration::ZERO), 110, "100 requests add 10% of a retry each");
    }
}
