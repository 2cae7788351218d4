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
use tailguard_model::build::{self, PeerRefused};
use tailguard_model::schema::{AdmissionConfig, SidecarKind};
use tailguard_proxy::config::{Config, Route};

pub use tailguard_policy::peer::{PassiveHealth, PeerBalance, PeerPolicy, NO_TIMEOUT};

/// A policy field a peer cannot express: the lab refuses the variant before starting anything,
/// never drops the field silently (the simulator refuses it too).
pub type Refused = PeerRefused;

/// One called service as a peer's egress routes to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    /// The called service.
    pub name: String,
    /// The path prefix routed to it (`/backend/`), forwarded unchanged.
    pub prefix: String,
    /// Its replicas' ingresses.
    pub endpoints: Vec<SocketAddr>,
    /// What the peer does towards it: the table the simulator's model reads too.
    pub policy: PeerPolicy,
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

impl Sidecar {
    /// What `config`, the tailguard sidecar file of a replica of `service` (or `workload`), asks
    /// of `peer`; an error names the first field it cannot express.
    pub fn from_config(peer: SidecarKind, service: &str, config: &Config) -> Result<Sidecar, Refused> {
        let kind = peer.peer_kind().expect("a peer sidecar");
        let peer = kind.name();
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
                let max_connections =
                    match &i.admission {
                        AdmissionConfig::None => None,
                        AdmissionConfig::Fixed { capacity } => Some(*capacity),
                        AdmissionConfig::Dynamic { .. } | AdmissionConfig::Adaptive => return Err(refuse(
                            format!("admission.{service}"),
                            "a `dynamic` or `adaptive` capacity follows the load; a peer's connection limit is fixed",
                        )),
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
                        let at = format!("{service}->{name}");
                        let policy = build::peer_policy(kind, &u.policy).map_err(|r| Refused::new(kind, &at, r))?;
                        Ok(Edge { name: name.clone(), prefix: prefix.clone(), endpoints: u.endpoints.clone(), policy })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Some((e.listen, edges))
            }
        };
        Ok(Sidecar { ingress, egress, admin })
    }
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
    fn an_edge_becomes_the_peer_s_policy() {
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
                policy: PeerPolicy {
                    peer: tailguard_policy::peer::Peer::Nginx,
                    balance: PeerBalance::TwoChoices,
                    timeout: Some(Duration::from_millis(250)),
                    attempts: 3,
                    health: Some(PassiveHealth { failures: 3, duration: Duration::from_secs(10) }),
                    deadline: Some(Duration::from_secs(2)),
                },
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
        // The edge's fields are the table's (crates/policy/src/peer has every case); the sidecar's
        // own are the lab's.
        let refused = |edge: &str, extra: &str| sidecars(SidecarKind::Haproxy, edge, extra).unwrap_err().field;
        for (edge, extra, field) in [
            ("{hedge: {kind: adaptive}}", "", "front->back.hedge"),
            ("{deadline: 1s}", "", "front->back.deadline"),
            ("{}", "    admission: {kind: dynamic}\n", "admission.back"),
            ("{}", "network: {delay: 1ms}\n", "network.delay"),
        ] {
            assert_eq!(refused(edge, extra), field, "{edge} {extra}");
        }
        let error = sidecars(SidecarKind::Haproxy, "{hedge: {kind: adaptive}}", "").unwrap_err().to_string();
        assert_eq!(
            error,
            "sidecar: haproxy cannot express `front->back.hedge`: a peer sends one attempt at a time; it cannot hedge"
        );
    }
}
