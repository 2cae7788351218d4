//! The peers' policies: what HAProxy (2.6) and nginx (1.22) do with the settings a variant's
//! policies translate to, as policies of this core, so that `tailguard sim` runs a
//! `sidecar: haproxy|nginx` variant as the peer runs in the lab.
//!
//! [`PeerPolicy::translate`] is the one table both sides read: the lab writes the peer's
//! configuration from the [`PeerPolicy`] it returns (crates/lab/src/peers/), the simulator builds
//! [`PeerPolicy::build`] from the same value. What a peer cannot express is refused
//! ([`Refusal`]), never dropped. docs/lab.md ("Peer sidecars") has the table with the peers'
//! documentation behind each line, and says where the model is not exact.
//!
//! - [`nginx::Nginx`]: `round_robin` (smooth weighted), `least_conn`, `random`, `random two
//!   least_conn`, with `max_fails`/`fail_timeout` passive health;
//! - [`haproxy::Haproxy`]: `roundrobin`, `leastconn`, `random(N)` (draws from the consistent-hash
//!   ring), with `observe layer7` + `on-error mark-down` and the health check that brings a server
//!   back.
//!
//! Retries are the [`Call`](crate::call::Call)'s: at once, no budget, within `attempts`; each peer
//! balancer excludes what its peer excludes on a retry (nginx: every server tried; HAProxy with
//! `option redispatch 1`: the previous one). The peer's passive health lives in its balancer: a
//! peer variant never gets tailguard's outlier detector.

pub mod haproxy;
pub mod nginx;

use crate::balance::{Balancer, BalancerConfig, OutlierConfig};
use crate::call::ClientPolicy;
use crate::class::{ClassPolicy, Classes};
use crate::hedge::HedgeConfig;
use crate::retry::{Backoff, RetryConfig, RetryPolicy};
use crate::timeout::{Fixed, TimeoutConfig};
use std::time::Duration;

/// A proxy users run as a sidecar in tailguard's place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    Haproxy,
    Nginx,
}

impl Peer {
    /// `haproxy` or `nginx`.
    pub fn name(self) -> &'static str {
        match self {
            Peer::Haproxy => "haproxy",
            Peer::Nginx => "nginx",
        }
    }
}

/// How a peer picks a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerBalance {
    /// In turn: HAProxy `roundrobin`, nginx's default (`round-robin`).
    RoundRobin,
    /// Uniformly at random: HAProxy `random(1)`, nginx `random` (`random`).
    Random,
    /// The less loaded of two random draws: HAProxy `random(2)`, nginx `random two least_conn`
    /// (`least-request`).
    TwoChoices,
    /// The least loaded of all, in turn among equals: HAProxy `leastconn`, nginx `least_conn`
    /// (`least-connections`).
    LeastConnections,
}

/// Passive health: a server that fails `failures` times is taken out for about `duration`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassiveHealth {
    pub failures: u32,
    pub duration: Duration,
}

/// Everything a peer does towards one called service, in the peers' own terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerPolicy {
    pub peer: Peer,
    pub balance: PeerBalance,
    /// Per attempt; `None` leaves the peer's long default ([`NO_TIMEOUT`]).
    pub timeout: Option<Duration>,
    /// Attempts in all, the first included.
    pub attempts: u32,
    pub health: Option<PassiveHealth>,
    /// nginx's `proxy_next_upstream_timeout` (HAProxy refuses it).
    pub deadline: Option<Duration>,
}

/// The attempt timeout a peer gets when the policy has none: longer than the load generator's
/// 30 s per request, so it never decides an outcome (HAProxy needs one; nginx's default is 60 s).
pub const NO_TIMEOUT: Duration = Duration::from_secs(60);

/// A policy field a peer cannot express: `field` is relative to the edge's policy
/// (`hedge`, `retry.budget`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub field: &'static str,
    pub why: &'static str,
}

impl PeerPolicy {
    /// The table: what `peer` makes of an edge's policy sections, or the first it cannot express.
    pub fn translate(
        peer: Peer,
        balancer: &BalancerConfig,
        outlier: Option<&OutlierConfig>,
        timeout: &TimeoutConfig,
        hedge: &HedgeConfig,
        retry: &RetryConfig,
        deadline: Option<Duration>,
    ) -> Result<PeerPolicy, Refusal> {
        let refuse = |field, why| Err(Refusal { field, why });
        if deadline.is_some() && peer == Peer::Haproxy {
            return refuse("deadline", "HAProxy times each attempt out (`timeout server`), never the whole request");
        }
        let balance = match balancer {
            BalancerConfig::RoundRobin => PeerBalance::RoundRobin,
            BalancerConfig::Random => PeerBalance::Random,
            BalancerConfig::LeastRequest => PeerBalance::TwoChoices,
            BalancerConfig::LeastConnections => PeerBalance::LeastConnections,
            _ => {
                return refuse(
                    "balancer",
                    "only round-robin, random, least-request (two random choices) and least-connections have a \
                     peer counterpart; peak-ewma, bloc's chips and prequal's probes do not",
                )
            }
        };
        if *hedge != HedgeConfig::None {
            return refuse("hedge", "a peer sends one attempt at a time; it cannot hedge");
        }
        let timeout = match timeout {
            TimeoutConfig::None => None,
            TimeoutConfig::Fixed { value } => Some(*value),
            _ => {
                return refuse(
                    "timeout",
                    "a peer has one fixed per-attempt timeout; adaptive, learned or per-attempt sequences are not \
                     expressible",
                )
            }
        };
        if retry.max_attempts > 1 {
            if retry.backoff.is_some() {
                return refuse("retry.backoff", "a peer retries at once, with no backoff");
            }
            if retry.budget.is_some() {
                return refuse(
                    "retry.budget",
                    "a peer has no retry budget; write `budget: unlimited` to retry up to max_attempts",
                );
            }
            if retry.hedge_on_timeout == Some(true) {
                return refuse("retry.hedge_on_timeout", "a peer abandons a timed-out attempt");
            }
        }
        let health = match outlier {
            None => None,
            Some(o) => {
                if o.latency_factor.is_some() {
                    return refuse(
                        "outlier.latency_factor",
                        "a peer ejects on errors only; write `latency_factor: null`",
                    );
                }
                if o.max_ejected < 1.0 {
                    return refuse(
                        "outlier.max_ejected",
                        "a peer ejects any number of endpoints; write `max_ejected: 1`",
                    );
                }
                if o.max_ejection != o.base_ejection {
                    return refuse(
                        "outlier.max_ejection",
                        "a peer's ejections do not grow; write `max_ejection` equal to `base_ejection`",
                    );
                }
                Some(PassiveHealth { failures: o.consecutive_failures, duration: o.base_ejection })
            }
        };
        Ok(PeerPolicy { peer, balance, timeout, attempts: retry.max_attempts, health, deadline })
    }

    /// The peer's balancer over endpoints `0..endpoints`, its passive health inside, in a peer
    /// process of `threads` threads (HAProxy's `nbthread`, by default one per core: each thread
    /// draws its own fixed key sequence; nginx's workers seed theirs apart, as the model's random
    /// stream does).
    pub fn balancer(&self, endpoints: usize, threads: u32) -> Box<dyn Balancer> {
        match self.peer {
            Peer::Haproxy => Box::new(haproxy::Haproxy::new(endpoints, self.balance, self.health, threads)),
            Peer::Nginx => Box::new(nginx::Nginx::new(endpoints, self.balance, self.health)),
        }
    }

    /// The caller's policies towards a service of `endpoints` replicas, as a peer of `threads`
    /// threads ([`PeerPolicy::balancer`]) runs them:
    /// its balancer, its fixed attempt timeout, retries at once with no budget, no hedge and no
    /// outlier detector of tailguard's. nginx's `proxy_next_upstream_timeout` is run as the
    /// request's deadline (nginx stops trying other servers then; it does not cut the attempt
    /// in flight: docs/lab.md).
    pub fn build(&self, endpoints: usize, threads: u32) -> ClientPolicy {
        ClientPolicy {
            balancer: self.balancer(endpoints, threads),
            outlier: None,
            classes: Classes::single(ClassPolicy {
                deadline: self.deadline,
                ..ClassPolicy::new(Box::new(Fixed::new(self.timeout.unwrap_or(NO_TIMEOUT))))
            }),
            retry: RetryPolicy {
                max_attempts: self.attempts,
                backoff: Backoff::none(),
                budget: None,
                retry_non_idempotent: false,
                // A server's 429 is passed on: neither peer retries it by default.
                retry_overloaded: false,
            },
            retired: Vec::new(),
            endpoints,
        }
    }
}

#[cfg(test)]
mod tests;
