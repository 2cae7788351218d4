//! The table's tests, and the helpers the peers' balancer tests share.

use super::*;
use crate::balance::Pick;
use crate::{EndpointId, Feedback, Outcome, Time};
use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;

/// `b`'s pick at `now` for a request that tried `tried`, with a random stream seeded `seed`.
pub(crate) fn pick(b: &mut dyn Balancer, now: Time, tried: &[EndpointId], seed: u64) -> Option<EndpointId> {
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    b.pick(&mut Pick { now, rng: &mut rng, exclude: tried, true_loads: None })
}

/// An attempt to `endpoint` sent and answered with an error at `now`.
pub(crate) fn fail(b: &mut dyn Balancer, endpoint: EndpointId, now: Time) {
    b.on_send(endpoint, now);
    b.on_feedback(endpoint, now, &Feedback::new(Outcome::Error, Duration::ZERO));
}

/// An attempt to `endpoint` sent and answered with success at `now`.
pub(crate) fn succeed(b: &mut dyn Balancer, endpoint: EndpointId, now: Time) {
    b.on_send(endpoint, now);
    b.on_feedback(endpoint, now, &Feedback::success(Duration::ZERO));
}

fn translate(peer: Peer, text: &str) -> Result<PeerPolicy, Refusal> {
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct Edge {
        balancer: BalancerConfig,
        outlier: Option<OutlierConfig>,
        timeout: TimeoutConfig,
        hedge: HedgeConfig,
        retry: RetryConfig,
        #[serde(with = "crate::duration::text::option")]
        deadline: Option<Duration>,
    }
    let e: Edge = serde_yaml_ng::from_str(text).unwrap();
    PeerPolicy::translate(peer, &e.balancer, e.outlier.as_ref(), &e.timeout, &e.hedge, &e.retry, e.deadline)
}

#[test]
fn an_edge_becomes_a_balance_a_timeout_retries_and_passive_health() {
    let text = "{balancer: {kind: least-request}, timeout: {kind: fixed, value: 250ms}, retry: {max_attempts: 3, budget: unlimited}, outlier: {consecutive_failures: 3, base_ejection: 10s, max_ejection: 10s, max_ejected: 1, latency_factor: null}, deadline: 2s}";
    assert_eq!(
        translate(Peer::Nginx, text),
        Ok(PeerPolicy {
            peer: Peer::Nginx,
            balance: PeerBalance::TwoChoices,
            timeout: Some(Duration::from_millis(250)),
            attempts: 3,
            health: Some(PassiveHealth { failures: 3, duration: Duration::from_secs(10) }),
            deadline: Some(Duration::from_secs(2)),
        })
    );
    let plain = translate(Peer::Haproxy, "{balancer: {kind: least-connections}}").unwrap();
    assert_eq!(
        (plain.balance, plain.timeout, plain.attempts, plain.health),
        (PeerBalance::LeastConnections, None, 1, None)
    );
}

#[test]
fn what_a_peer_cannot_express_is_refused_naming_the_field() {
    let outlier = "consecutive_failures: 3, base_ejection: 10s, max_ejection: 10s";
    for (text, field) in [
        ("{hedge: {kind: adaptive}}", "hedge"),
        ("{balancer: {kind: bloc}}", "balancer"),
        ("{balancer: {kind: peak-ewma}}", "balancer"),
        ("{timeout: {kind: adaptive}}", "timeout"),
        ("{retry: {max_attempts: 2}}", "retry.budget"),
        ("{retry: {max_attempts: 2, budget: unlimited, backoff: 5ms}}", "retry.backoff"),
        ("{retry: {max_attempts: 2, budget: unlimited, hedge_on_timeout: true}}", "retry.hedge_on_timeout"),
        ("{outlier: {}}", "outlier.latency_factor"),
        (&format!("{{outlier: {{{outlier}, max_ejected: 0.5, latency_factor: null}}}}"), "outlier.max_ejected"),
        ("{outlier: {base_ejection: 10s, max_ejected: 1, latency_factor: null}}", "outlier.max_ejection"),
        ("{deadline: 1s}", "deadline"),
    ] {
        assert_eq!(translate(Peer::Haproxy, text).unwrap_err().field, field, "{text}");
    }
    // One attempt within the default budget retries nothing: nothing to refuse. nginx bounds the
    // whole request, HAProxy refuses to.
    assert!(translate(Peer::Haproxy, "{retry: {max_attempts: 1}}").is_ok());
    assert!(translate(Peer::Nginx, "{deadline: 1s}").is_ok());
}

#[test]
fn the_built_policy_is_the_peer_s_and_never_tailguard_s_outlier_detector() {
    let text = "{timeout: {kind: fixed, value: 5s}, retry: {max_attempts: 2, budget: unlimited}, outlier: {consecutive_failures: 1, base_ejection: 10s, max_ejection: 10s, max_ejected: 1, latency_factor: null}}";
    let mut policy = translate(Peer::Nginx, text).unwrap().build(3, 1);
    assert!(policy.outlier.is_none() && policy.retry.budget.is_none());
    assert_eq!(policy.retry.max_attempts, 2);
    let class = policy.classes.get(crate::class::POOLED);
    assert!(class.hedge.is_none() && !class.hedge_on_timeout);
    let mut rng = Pcg64Mcg::seed_from_u64(1);
    assert_eq!(class.timeout.timeout(Time::ZERO, 1, &mut rng), Some(Duration::from_secs(5)));
    let mut none = translate(Peer::Haproxy, "{}").unwrap().build(3, 1);
    let none = &mut none.classes.get(crate::class::POOLED).timeout;
    assert_eq!(none.timeout(Time::ZERO, 0, &mut rng), Some(NO_TIMEOUT));
}
