//! nginx's upstream balancers with `max_fails`/`fail_timeout` passive health, as nginx 1.22 runs
//! them (`ngx_http_upstream_round_robin.c`, `ngx_http_upstream_least_conn_module.c`,
//! `ngx_http_upstream_random_module.c`; documented in ngx_http_upstream_module), every server at
//! weight 1 and the group's state shared by the workers (`zone`, which the lab writes).
//!
//! - `round_robin` (the default): smooth weighted round robin. Each pick adds every usable
//!   server's effective weight to its current weight and takes the highest (the first on ties),
//!   which then loses the total; with equal weights, a rotation.
//! - `least_conn`: the fewest active connections; among equals, the smooth round robin above.
//! - `random`: a uniform draw among the usable servers (a server drawn that is not usable is drawn
//!   again, 20 times at most, then round robin).
//! - `random two least_conn`: two draws of distinct usable servers, the one with fewer connections
//!   (the second drawn on ties, as `ngx_http_upstream_get_random2_peer` compares); round robin
//!   with fewer than two servers or after 20 draws.
//!
//! A server is usable unless this request tried it already (`proxy_next_upstream` never sends a
//! retry to a server tried: at most as many tries as servers) or it failed `max_fails` times and
//! its last failure is at most `fail_timeout` ago. Failures are what `proxy_next_upstream` lists
//! (errors, timeouts, 5xx): each counts, and sets `checked`; a success resets the count only when
//! a pick after `fail_timeout` marked the server `checked` since its last failure (so one request
//! probes a server whose time is up, and a failure takes it out for another `fail_timeout`). A
//! failure also lowers the server's effective weight by `weight / max_fails`, which each pick
//! restores by 1. nginx keeps time in whole seconds (`ngx_time()`), and so does this model. A
//! group of one server ignores `max_fails` and is never retried. With no usable server nginx
//! answers 502 at once: the pick is `None`.

use super::{PassiveHealth, PeerBalance};
use crate::balance::{Balancer, Pick};
use crate::{EndpointId, Feedback, Outcome, Time};
use rand::Rng as _;

/// Draws `random` makes before it falls back to round robin.
const RANDOM_TRIES: u32 = 20;

/// One server of an nginx upstream group.
#[derive(Clone, Debug, Default)]
struct Server {
    conns: u32,
    fails: u32,
    /// When it last failed (whole seconds).
    accessed: u64,
    /// When it last failed or was picked after `fail_timeout` (whole seconds).
    checked: u64,
    current_weight: i64,
    effective_weight: i64,
}

/// An nginx upstream group's balancer.
#[derive(Clone, Debug)]
pub struct Nginx {
    balance: PeerBalance,
    servers: Vec<Server>,
    /// 0: never taken out (`max_fails=0`).
    max_fails: u32,
    fail_timeout: u64,
}

/// Every server's weight (the lab writes none).
const WEIGHT: i64 = 1;

impl Nginx {
    /// The group of `endpoints` servers; `health` sets `max_fails` and `fail_timeout` (in whole
    /// seconds, rounded up as the lab writes them), none is `max_fails=0`.
    pub fn new(endpoints: usize, balance: PeerBalance, health: Option<PassiveHealth>) -> Nginx {
        let (max_fails, fail_timeout) = match health {
            Some(h) => (h.failures, h.duration.as_secs_f64().ceil().max(1.0) as u64),
            None => (0, 10),
        };
        let server = Server { effective_weight: WEIGHT, ..Server::default() };
        Nginx { balance, servers: vec![server; endpoints], max_fails, fail_timeout }
    }

    fn usable(&self, i: usize, now: u64, tried: &[EndpointId]) -> bool {
        let s = &self.servers[i];
        let failed = self.max_fails > 0 && s.fails >= self.max_fails && now - s.checked <= self.fail_timeout;
        !failed && !tried.contains(&i)
    }

    /// Smooth weighted round robin among the usable servers that `among` admits.
    fn round_robin(&mut self, now: u64, tried: &[EndpointId], among: impl Fn(&Server) -> bool) -> Option<usize> {
        let mut best: Option<usize> = None;
        let mut total = 0;
        for i in 0..self.servers.len() {
            if !self.usable(i, now, tried) || !among(&self.servers[i]) {
                continue;
            }
            let s = &mut self.servers[i];
            s.current_weight += s.effective_weight;
            total += s.effective_weight;
            if s.effective_weight < WEIGHT {
                s.effective_weight += 1;
            }
            let weight = s.current_weight;
            if best.is_none_or(|b| weight > self.servers[b].current_weight) {
                best = Some(i);
            }
        }
        let best = best?;
        self.servers[best].current_weight -= total;
        Some(best)
    }

    fn least_conn(&mut self, now: u64, tried: &[EndpointId]) -> Option<usize> {
        let fewest =
            (0..self.servers.len()).filter(|&i| self.usable(i, now, tried)).map(|i| self.servers[i].conns).min()?;
        self.round_robin(now, tried, |s| s.conns == fewest)
    }

    fn random(&mut self, now: u64, tried: &[EndpointId], rng: crate::Rng<'_>, draws: u32) -> Option<usize> {
        let n = self.servers.len();
        let mut first: Option<usize> = None;
        for _ in 0..RANDOM_TRIES {
            let i = rng.gen_range(0..n);
            if first == Some(i) || !self.usable(i, now, tried) {
                continue;
            }
            match first {
                Some(prev) if draws == 2 => {
                    // The second drawn wins ties.
                    return Some(if self.servers[i].conns > self.servers[prev].conns { prev } else { i });
                }
                _ if draws == 1 => return Some(i),
                _ => first = Some(i),
            }
        }
        self.round_robin(now, tried, |_| true)
    }
}

impl Balancer for Nginx {
    fn pick(&mut self, pick: &mut Pick<'_>) -> Option<EndpointId> {
        let now = pick.now.as_secs();
        let tried = pick.exclude;
        let chosen = if self.servers.len() == 1 {
            // A single server: no max_fails, and no second try.
            tried.is_empty().then_some(0)?
        } else {
            match self.balance {
                PeerBalance::RoundRobin => self.round_robin(now, tried, |_| true),
                PeerBalance::LeastConnections => self.least_conn(now, tried),
                PeerBalance::Random => self.random(now, tried, &mut *pick.rng, 1),
                PeerBalance::TwoChoices => self.random(now, tried, &mut *pick.rng, 2),
            }?
        };
        let s = &mut self.servers[chosen];
        if now - s.checked > self.fail_timeout {
            s.checked = now;
        }
        Some(chosen)
    }

    fn on_send(&mut self, endpoint: EndpointId, _now: Time) {
        self.servers[endpoint].conns += 1;
    }

    fn on_feedback(&mut self, endpoint: EndpointId, now: Time, feedback: &Feedback) {
        let single = self.servers.len() == 1;
        let max_fails = self.max_fails;
        let s = &mut self.servers[endpoint];
        s.conns = s.conns.saturating_sub(1);
        if single {
            return;
        }
        let failed = matches!(feedback.outcome, Outcome::Error | Outcome::TimedOut | Outcome::Unavailable);
        if failed {
            let now = now.as_secs();
            s.fails += 1;
            s.accessed = now;
            s.checked = now;
            if max_fails > 0 {
                s.effective_weight = (s.effective_weight - WEIGHT / i64::from(max_fails)).max(0);
            }
        } else if s.accessed < s.checked {
            s.fails = 0;
        }
    }

    fn grow(&mut self, endpoints: usize) {
        let server = Server { effective_weight: WEIGHT, ..Server::default() };
        self.servers.resize(endpoints.max(self.servers.len()), server);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::tests::{fail, pick, succeed};
    use std::time::Duration;

    fn s(n: u64) -> Time {
        Duration::from_secs(n)
    }

    #[test]
    fn round_robin_rotates_and_a_retry_skips_every_server_tried() {
        let mut b = Nginx::new(3, PeerBalance::RoundRobin, None);
        let picks: Vec<_> = (0..6).map(|_| pick(&mut b, s(0), &[], 1)).collect();
        assert_eq!(picks, [Some(0), Some(1), Some(2), Some(0), Some(1), Some(2)]);
        // A retry of a request that tried 0 and 1 goes to 2; one that tried all three has none.
        assert_eq!(pick(&mut b, s(0), &[0, 1], 1), Some(2));
        assert_eq!(pick(&mut b, s(0), &[0, 1, 2], 1), None);
    }

    #[test]
    fn max_fails_takes_a_server_out_for_fail_timeout_then_one_request_probes_it() {
        let health = PassiveHealth { failures: 2, duration: Duration::from_secs(10) };
        let mut b = Nginx::new(2, PeerBalance::RoundRobin, Some(health));
        // Step: two failures of server 0 within the window take it out.
        fail(&mut b, 0, s(1));
        assert_eq!(pick(&mut b, s(1), &[], 1), Some(0), "one failure of two: still in");
        fail(&mut b, 0, s(2));
        for t in [2, 5, 12] {
            assert_eq!(pick(&mut b, s(t), &[], 1), Some(1), "out until 10 s after its last failure (t = {t})");
        }
        // Step: 11 s after, it is picked again (and marked checked); its failure takes it out again.
        let back = (0..2).map(|_| pick(&mut b, s(13), &[], 1)).collect::<Vec<_>>();
        assert!(back.contains(&Some(0)), "{back:?}");
        fail(&mut b, 0, s(13));
        assert_eq!(pick(&mut b, s(14), &[], 1), Some(1));
        // Step: its next probe succeeds: the count resets, and one failure no longer takes it out.
        assert!((0..2).any(|_| pick(&mut b, s(24), &[], 1) == Some(0)));
        succeed(&mut b, 0, s(24));
        fail(&mut b, 0, s(25));
        assert!((0..2).any(|_| pick(&mut b, s(25), &[], 1) == Some(0)));
    }

    #[test]
    fn with_every_server_out_nginx_answers_at_once_and_one_server_is_never_out_nor_retried() {
        let health = PassiveHealth { failures: 1, duration: Duration::from_secs(10) };
        let mut b = Nginx::new(2, PeerBalance::TwoChoices, Some(health));
        fail(&mut b, 0, s(0));
        fail(&mut b, 1, s(0));
        assert_eq!(pick(&mut b, s(5), &[], 1), None);
        let mut one = Nginx::new(1, PeerBalance::RoundRobin, Some(health));
        fail(&mut one, 0, s(0));
        assert_eq!(pick(&mut one, s(0), &[], 1), Some(0));
        assert_eq!(pick(&mut one, s(0), &[0], 1), None);
    }

    #[test]
    fn least_conn_takes_the_fewest_connections_in_turn_among_equals() {
        let mut b = Nginx::new(3, PeerBalance::LeastConnections, None);
        b.on_send(0, s(0));
        // 1 and 2 tie at 0: in turn.
        assert_eq!(pick(&mut b, s(0), &[], 1), Some(1));
        assert_eq!(pick(&mut b, s(0), &[], 1), Some(2));
        assert_eq!(pick(&mut b, s(0), &[], 1), Some(1));
        b.on_send(1, s(0));
        b.on_send(2, s(0));
        b.on_send(2, s(0));
        assert_eq!(pick(&mut b, s(0), &[], 1), Some(0), "0 and 1 hold one each, 2 two");
    }

    #[test]
    fn random_two_takes_the_fewer_connections_of_two_distinct_draws() {
        let mut b = Nginx::new(2, PeerBalance::TwoChoices, None);
        b.on_send(1, s(0));
        for seed in 0..50 {
            assert_eq!(pick(&mut b, s(0), &[], seed), Some(0));
        }
        let mut b = Nginx::new(4, PeerBalance::TwoChoices, None);
        b.on_send(3, s(0));
        let mut counts = [0; 4];
        for seed in 0..4000 {
            counts[pick(&mut b, s(0), &[], seed).unwrap()] += 1;
        }
        // 3 loses every draw it is in: it is never picked; the others share evenly.
        assert_eq!(counts[3], 0);
        assert!(counts[..3].iter().all(|&c| (1150..1520).contains(&c)), "{counts:?}");
    }
}
