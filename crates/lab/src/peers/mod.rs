//! Peer sidecars (docs/lab.md, "Peer sidecars"): Debian's HAProxy or nginx beside every replica
//! in place of `tailguard proxy`, for variants with `sidecar: haproxy|nginx`.
//!
//! The lab writes the tailguard sidecar file of every replica as usual ([`crate::plan::ProxyFile`]);
//! [`Sidecar::from_config`] reads it down to what both peers can express (the same listeners, and
//! per called service a balancer, a per-attempt timeout, retries, passive ejection, an ingress
//! connection limit), refusing with [`Refused`] whatever they cannot (hedging, chips, adaptive
//! timeouts, budgets, backoff, per-hop delays). [`haproxy`] and [`nginx`] write the peer's own
//! configuration from it. Every line of the translation and the peer's documentation behind it is
//! in docs/lab.md's table.

pub mod haproxy;
pub mod nginx;

use std::net::SocketAddr;
use std::time::Duration;
use tailguard_model::schema::{
    AdmissionConfig, BalancerConfig, ClientPolicy, HedgeConfig, OutlierSetting, SidecarKind, TimeoutConfig,
};
use tailguard_proxy::config::{Config, Route};

/// A policy field a peer cannot express: the lab refuses the variant before starting anything,
/// never drops the field silently.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("sidecar: {peer} cannot express `{field}`: {why}")]
pub struct Refused {
    /// `haproxy` or `nginx`.
    pub peer: &'static str,
    /// Where the field is, as the variant writes it: `frontend->backend.hedge`,
    /// `admission.backend`, `network.delay`.
    pub field: String,
    pub why: String,
}

/// How a peer picks an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Balance {
    /// In turn (`round-robin`).
    RoundRobin,
    /// Uniformly at random (`random`).
    Random,
    /// The fewer in-flight requests of two drawn at random (`least-request`, power of two choices).
    TwoChoices,
}

/// Passive ejection: an endpoint that fails `failures` times is taken out for about `duration`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Eject {
    pub failures: u32,
    pub duration: Duration,
}

/// One called service as a peer's egress routes to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    /// The called service.
    pub name: String,
    /// The path prefix routed to it (`/backend/`), forwarded unchanged.
    pub prefix: String,
    /// Its replicas' ingresses.
    pub endpoints: Vec<SocketAddr>,
    pub balance: Balance,
    /// Per attempt; `None` leaves the peer's long default ([`NO_TIMEOUT`]).
    pub timeout: Option<Duration>,
    /// Attempts in all, the first included.
    pub attempts: u32,
    pub eject: Option<Eject>,
    /// The whole request's limit (nginx's `proxy_next_upstream_timeout`; HAProxy refuses it).
    pub deadline: Option<Duration>,
}

/// A peer's ingress: the replica's callers reach `listen`, which passes to the app at `app`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ingress {
    pub listen: SocketAddr,
    pub app: SocketAddr,
    /// The most requests the app is given at once (`admission: {kind: fixed}`'s capacity).
    pub max_connections: Option<u32>,
}

/// Everything a peer sidecar of one replica (or of the load generator) does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sidecar {
    pub ingress: Option<Ingress>,
    /// The egress's listener and the services it routes to.
    pub egress: Option<(SocketAddr, Vec<Edge>)>,
    /// Where `/healthz` (and the peer's own statistics page) answers.
    pub admin: SocketAddr,
}

/// The attempt timeout a peer gets when the policy has none: longer than the load generator's
/// 30 s per request, so it never decides an outcome (HAProxy needs one; nginx's default is 60 s).
pub const NO_TIMEOUT: Duration = Duration::from_secs(60);

impl Sidecar {
    /// What `config`, the tailguard sidecar file of a replica of `service` (or `workload`), asks
    /// of `peer`; an error names the first field it cannot express.
    pub fn from_config(peer: SidecarKind, service: &str, config: &Config) -> Result<Sidecar, Refused> {
        let peer = peer.name();
        let refuse = |field: String, why: &str| Refused { peer, field, why: why.to_string() };
        let admin =
            config.admin.as_ref().map(|a| a.listen).ok_or_else(|| refuse("admin".into(), "no admin listener"))?;
        let ingress = match &config.ingress {
            None => None,
            Some(i) => {
                if i.network_delay.is_some() {
                    return Err(refuse(
                        "network.delay".into(),
                        "a peer cannot hold each hop's delay as tailguard's ingress does; set no delay, or run with \
                         --isolation netns where the kernel delays packets",
                    ));
                }
                let max_connections = match &i.admission {
                    AdmissionConfig::None => None,
                    AdmissionConfig::Fixed { capacity } => Some(*capacity),
                    AdmissionConfig::Dynamic { .. } => {
                        return Err(refuse(
                            format!("admission.{service}"),
                            "a `dynamic` capacity is recomputed from the load; a peer's connection limit is fixed",
                        ))
                    }
                };
                Some(Ingress { listen: i.listen, app: i.app, max_connections })
            }
        };
        let egress = match &config.egress {
            None => None,
            Some(e) => {
                let edges = e
                    .upstreams
                    .iter()
                    .map(|(name, u)| {
                        let Route::PathPrefix(prefix) = &u.route else {
                            return Err(refuse(format!("{service}->{name}"), "the lab routes by path prefix only"));
                        };
                        edge(&u.policy, &format!("{service}->{name}"), peer).map(|edge| Edge {
                            name: name.clone(),
                            prefix: prefix.clone(),
                            endpoints: u.endpoints.clone(),
                            ..edge
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Some((e.listen, edges))
            }
        };
        Ok(Sidecar { ingress, egress, admin })
    }
}

/// The edge's policy (`at` is `caller->callee`) in `peer`'s terms, its name, prefix and
/// endpoints left for the caller to fill in.
fn edge(policy: &ClientPolicy, at: &str, peer: &'static str) -> Result<Edge, Refused> {
    let field = |name: &str| format!("{at}.{name}");
    let refuse = |field: String, why: &str| Refused { peer, field, why: why.to_string() };
    // nginx bounds the whole request (`proxy_next_upstream_timeout`); HAProxy cannot.
    if policy.deadline.is_some() && peer == "haproxy" {
        return Err(refuse(
            field("deadline"),
            "HAProxy times each attempt out (`timeout server`), never the whole request",
        ));
    }
    let balance = match policy.balancer {
        BalancerConfig::RoundRobin => Balance::RoundRobin,
        BalancerConfig::Random => Balance::Random,
        BalancerConfig::LeastRequest => Balance::TwoChoices,
        _ => {
            return Err(refuse(
                field("balancer"),
                "only round-robin, random and least-request (two random choices) have a peer counterpart; \
                 peak-ewma, bloc's chips and prequal's probes do not",
            ))
        }
    };
    if policy.hedge != HedgeConfig::None {
        return Err(refuse(field("hedge"), "a peer sends one attempt at a time; it cannot hedge"));
    }
    let timeout = match &policy.timeout {
        TimeoutConfig::None => None,
        TimeoutConfig::Fixed { value } => Some(*value),
        _ => return Err(refuse(
            field("timeout"),
            "a peer has one fixed per-attempt timeout; adaptive, learned or per-attempt sequences are not expressible",
        )),
    };
    let retry = &policy.retry;
    if retry.max_attempts > 1 {
        if retry.backoff.is_some() {
            return Err(refuse(field("retry.backoff"), "a peer retries at once, with no backoff"));
        }
        if retry.budget.is_some() {
            return Err(refuse(
                field("retry.budget"),
                "a peer has no retry budget; write `budget: unlimited` to retry up to max_attempts",
            ));
        }
        if retry.hedge_on_timeout == Some(true) {
            return Err(refuse(field("retry.hedge_on_timeout"), "a peer abandons a timed-out attempt"));
        }
    }
    // Left out, a peer's variant has no tailguard ejection (the variant resolves it to `off`).
    let eject = match policy.outlier.config().filter(|_| policy.outlier != OutlierSetting::Default) {
        None => None,
        Some(o) => {
            if o.latency_factor.is_some() {
                return Err(refuse(
                    field("outlier.latency_factor"),
                    "a peer ejects on errors only; write `latency_factor: null`",
                ));
            }
            if o.max_ejected < 1.0 {
                return Err(refuse(
                    field("outlier.max_ejected"),
                    "a peer ejects any number of endpoints; write `max_ejected: 1`",
                ));
            }
            if o.max_ejection != o.base_ejection {
                return Err(refuse(
                    field("outlier.max_ejection"),
                    "a peer's ejections do not grow; write `max_ejection` equal to `base_ejection`",
                ));
            }
            Some(Eject { failures: o.consecutive_failures, duration: o.base_ejection })
        }
    };
    Ok(Edge {
        name: String::new(),
        prefix: String::new(),
        endpoints: Vec::new(),
        balance,
        timeout,
        attempts: retry.max_attempts,
        eject,
        deadline: policy.deadline.map(|d| d.get()),
    })
}

/// A duration as both peers write it: whole milliseconds (at least 1), `250ms`.
pub fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis().max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Isolation, Plan, ProxyFile};
    use std::path::Path;
    use tailguard_model::Experiment;

    /// front (1 replica) calls back (2 replicas); the variant's edge is spliced in.
    pub(crate) fn sidecars(peer: SidecarKind, edge: &str, extra: &str) -> Result<Vec<Sidecar>, Refused> {
        let peer = peer.name();
        let text = format!(
            "name: t\nservices:\n  front:\n    calls: [{{service: back}}]\n  back:\n    replicas: 2\n{extra}workload: {{target: front, open: {{rate: 10}}, duration: 1s}}\nvariants:\n  - name: v\n    sidecar: {peer}\n    edges:\n      front->back: {edge}\n"
        );
        let run = Experiment::parse(&text, Path::new("t.yaml")).unwrap().resolve("default", "v", false).unwrap();
        let plan = Plan::new(&run, Isolation::Loopback, 7);
        plan.replicas
            .iter()
            .map(|r| Sidecar::from_config(run.sidecar, &r.service, &ProxyFile::sidecar(&run, &plan, r, 1).0))
            .collect()
    }

    #[test]
    fn an_edge_becomes_balance_timeout_retries_and_ejection() {
        let all = sidecars(
            SidecarKind::Nginx,
            "{balancer: {kind: least-request}, timeout: {kind: fixed, value: 250ms}, retry: {max_attempts: 3, budget: unlimited}, outlier: {consecutive_failures: 3, base_ejection: 10s, max_ejection: 10s, max_ejected: 1, latency_factor: null}, deadline: 2s}",
            "",
        )
        .unwrap();
        let (listen, edges) = all[0].egress.clone().unwrap();
        assert_eq!(listen.to_string(), "127.7.1.1:4140");
        assert_eq!(
            edges,
            [Edge {
                name: "back".into(),
                prefix: "/back/".into(),
                endpoints: vec!["127.7.2.1:4143".parse().unwrap(), "127.7.2.2:4143".parse().unwrap()],
                balance: Balance::TwoChoices,
                timeout: Some(Duration::from_millis(250)),
                attempts: 3,
                eject: Some(Eject { failures: 3, duration: Duration::from_secs(10) }),
                deadline: Some(Duration::from_secs(2)),
            }]
        );
        let ingress = all[1].ingress.clone().unwrap();
        assert_eq!(
            (ingress.listen.to_string(), ingress.app.to_string()),
            ("127.7.2.1:4143".into(), "127.7.2.1:8080".into())
        );
        assert_eq!((ingress.max_connections, all[1].egress.clone()), (None, None));
        assert_eq!(all[1].admin.to_string(), "127.7.2.1:9990");
    }

    #[test]
    fn a_fixed_admission_becomes_a_connection_limit() {
        let all = sidecars(SidecarKind::Nginx, "{}", "    admission: {kind: fixed, capacity: 4}\n").unwrap();
        assert_eq!(all[1].ingress.as_ref().unwrap().max_connections, Some(4));
    }

    #[test]
    fn what_a_peer_cannot_express_is_refused_naming_the_field() {
        let refused = |edge: &str, extra: &str| sidecars(SidecarKind::Haproxy, edge, extra).unwrap_err().field;
        let outlier = "consecutive_failures: 3, base_ejection: 10s, max_ejection: 10s";
        for (edge, extra, field) in [
            ("{hedge: {kind: adaptive}}", "", "front->back.hedge"),
            ("{balancer: {kind: bloc}}", "", "front->back.balancer"),
            ("{balancer: {kind: peak-ewma}}", "", "front->back.balancer"),
            ("{timeout: {kind: adaptive}}", "", "front->back.timeout"),
            ("{retry: {max_attempts: 2}}", "", "front->back.retry.budget"),
            ("{retry: {max_attempts: 2, budget: unlimited, backoff: 5ms}}", "", "front->back.retry.backoff"),
            ("{outlier: {}}", "", "front->back.outlier.latency_factor"),
            (
                &format!("{{outlier: {{{outlier}, max_ejected: 0.5, latency_factor: null}}}}"),
                "",
                "front->back.outlier.max_ejected",
            ),
            (
                "{outlier: {base_ejection: 10s, max_ejected: 1, latency_factor: null}}",
                "",
                "front->back.outlier.max_ejection",
            ),
            ("{}", "    admission: {kind: dynamic}\n", "admission.back"),
            ("{}", "network: {delay: 1ms}\n", "network.delay"),
            ("{deadline: 1s}", "", "front->back.deadline"),
        ] {
            assert_eq!(refused(edge, extra), field, "{edge} {extra}");
        }
        let error = sidecars(SidecarKind::Haproxy, "{hedge: {kind: adaptive}}", "").unwrap_err().to_string();
        assert_eq!(
            error,
            "sidecar: haproxy cannot express `front->back.hedge`: a peer sends one attempt at a time; it cannot hedge"
        );
        // One attempt within the default budget retries nothing: nothing to refuse. nginx bounds
        // the whole request, HAProxy refuses to.
        assert!(sidecars(SidecarKind::Haproxy, "{retry: {max_attempts: 1}}", "").is_ok());
        assert!(sidecars(SidecarKind::Nginx, "{deadline: 1s}", "").is_ok());
    }
}
