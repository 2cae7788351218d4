//! HAProxy's backend balancers with `observe layer7` + `on-error mark-down` passive health, as
//! HAProxy 2.6 runs them (configuration manual: `balance`, `observe`, `error-limit`, `on-error`,
//! `inter`, `rise`, `option redispatch`; source: `backend.c`, `lb_chash.c`, `lb_fwrr.c`,
//! `lb_fwlc.c`), every server at weight 1, one state for all threads.
//!
//! - `roundrobin`: in turn.
//! - `leastconn`: the fewest requests served now; among equals the one whose count changed
//!   longest ago (`lb_fwlc.c` re-inserts a server behind its equals on every change), which the
//!   manual calls round robin among servers of the same load.
//! - `random(N)`: each draw is a random 32-bit key looked up on the consistent-hash ring, the
//!   ring holding 16 points per server (`BE_WEIGHT_SCALE` × weight 1) at
//!   `full_hash(puid × 4096 + n)` (Bob Jenkins' integer hash times 3221225473; `puid` the server's
//!   1-based place in the backend); the point nearest the key wins (the earlier one on a tie). Of
//!   the N draws the server serving fewer requests wins (the later draw on ties). The ring's
//!   points are not evenly spread, so with few servers their shares of the draws differ: with 10
//!   servers from 7.1 % to 13.4 % of single draws (and a draw may repeat the first), which P2C
//!   over two distinct, equally likely endpoints does not show. The keys are not random between
//!   processes: they come from `statistical_prng` (`tools.h`), xorshift32 (shifts 13, 17, 5)
//!   from a fixed state per thread, 2463534242 + 64·t for thread t, the same in every HAProxy
//!   process. Every sidecar's first requests therefore go to the same servers, and its later ones
//!   to the same sequence of servers; bench/haproxy-ring.py checks the sequence. A request's
//!   thread is its client connection's: HAProxy hands new connections to its threads in turn, and
//!   the caller's pool (hyper's) reuses the connection freed last, which [`Connections`] follows.
//!
//! A retry goes to another server than the previous attempt's (`option redispatch 1`, which the
//! lab writes with `retries`; HAProxy skips the server it avoids and takes it only when no other
//! is left). `observe layer7` counts consecutive errors (5xx other than 501 and 505, timeouts,
//! connection failures); `error-limit` of them mark the server down (`on-error mark-down`) and out
//! of every pick and of the ring. The health check (`check inter T rise 1`) brings it back at its
//! next run: server i of n checks at `i·T/n + k·T` from the start (HAProxy staggers its first
//! checks over one interval). The model's checks pass: a server whose `/healthz` fails (a `down`
//! replica) stays down in the lab and comes back at each check here, to be marked down again
//! after `error-limit` errors. With every server down the pick is `None` (HAProxy's 503).

use super::{PassiveHealth, PeerBalance};
use crate::balance::{Balancer, Pick};
use crate::{EndpointId, Feedback, Outcome, Time};
use std::time::Duration;

/// Ring points per server of weight 1 (`BE_WEIGHT_SCALE`).
const POINTS: u32 = 16;
/// `SRV_EWGHT_RANGE`: the stride between two servers' point keys.
const KEY_STRIDE: u32 = 256 * 16;

/// HAProxy's `full_hash`: Bob Jenkins' full-avalanche 32-bit integer hash, spread by a large
/// prime (`include/haproxy/intops.h`).
fn full_hash(mut a: u32) -> u32 {
    a = a.wrapping_add(0x7ed5_5d16).wrapping_add(a << 12);
    a = (a ^ 0xc761_c23c) ^ (a >> 19);
    a = a.wrapping_add(0x1656_67b1).wrapping_add(a << 5);
    a = a.wrapping_add(0xd3a2_646c) ^ (a << 9);
    a = a.wrapping_add(0xfd70_46c5).wrapping_add(a << 3);
    a = (a ^ 0xb55a_4f09) ^ (a >> 16);
    a.wrapping_mul(3_221_225_473)
}

#[derive(Clone, Debug, Default)]
struct Server {
    served: u32,
    /// Consecutive errors `observe layer7` counted.
    errors: u32,
    /// When `on-error mark-down` took it down, while it is down.
    down_since: Option<Time>,
    /// When its count last changed (`leastconn`'s order among equals).
    moved: u64,
}

/// `statistical_prng`'s state of HAProxy's thread `thread` at start (`tools.c` and the per-thread
/// start; found by matching Debian's HAProxy 2.6's draws, bench/haproxy-ring.py).
fn prng_start(thread: u32) -> u32 {
    2_463_534_242u32.wrapping_add(64u32.wrapping_mul(thread))
}

/// One step of `statistical_prng`: xorshift32 with shifts 13, 17 and 5.
fn xorshift32(state: &mut u32) -> u32 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    *state = x;
    x
}

/// The caller's keep-alive connections to its HAProxy sidecar, as far as they decide which thread
/// draws a request's keys: HAProxy gives new connections to its threads in turn; the caller reuses
/// the connection freed last (hyper's pool keeps idle connections as a stack) and opens one when
/// none is idle. An attempt keeps its connection until its answer, which frees the oldest attempt
/// in flight at that server (answers in order).
#[derive(Clone, Debug)]
struct Connections {
    /// Each thread's `statistical_prng` state.
    prng: Vec<u32>,
    /// The threads of the idle connections, the one freed last on top.
    idle: Vec<u32>,
    opened: u32,
    /// Per server, the threads of the attempts it holds, oldest first.
    holding: Vec<std::collections::VecDeque<u32>>,
}

impl Connections {
    fn new(threads: u32, servers: usize) -> Connections {
        Connections {
            prng: (0..threads.max(1)).map(prng_start).collect(),
            idle: Vec::new(),
            opened: 0,
            holding: vec![Default::default(); servers],
        }
    }

    /// The thread a new connection goes to: the threads in turn.
    fn new_thread(&self) -> u32 {
        self.opened % self.prng.len() as u32
    }

    /// The thread the next attempt's connection belongs to.
    fn next_thread(&self) -> u32 {
        self.idle.last().copied().unwrap_or_else(|| self.new_thread())
    }

    /// The next key the thread of the next attempt draws.
    fn draw(&mut self) -> u32 {
        let thread = self.next_thread() as usize;
        xorshift32(&mut self.prng[thread])
    }

    fn send(&mut self, server: usize) {
        let thread = self.idle.pop().unwrap_or_else(|| {
            let thread = self.new_thread();
            self.opened += 1;
            thread
        });
        self.holding[server].push_back(thread);
    }

    fn answer(&mut self, server: usize) {
        if let Some(thread) = self.holding[server].pop_front() {
            self.idle.push(thread);
        }
    }
}

/// A HAProxy backend's balancer.
#[derive(Clone, Debug)]
pub struct Haproxy {
    balance: PeerBalance,
    servers: Vec<Server>,
    /// The ring of the servers up, `(key, server)` sorted by key (`random`).
    ring: Vec<(u32, u32)>,
    /// The next server in turn (`roundrobin`).
    next: usize,
    health: Option<PassiveHealth>,
    changes: u64,
    connections: Connections,
}

impl Haproxy {
    /// The backend of `endpoints` servers (`server NAME-i`, puid i + 1) in a HAProxy of `threads`
    /// threads (`nbthread`); `health` sets `error-limit` and the check's `inter`.
    pub fn new(endpoints: usize, balance: PeerBalance, health: Option<PassiveHealth>, threads: u32) -> Haproxy {
        let mut b = Haproxy {
            balance,
            servers: vec![Server::default(); endpoints],
            ring: Vec::new(),
            next: 0,
            health,
            changes: 0,
            connections: Connections::new(threads, endpoints),
        };
        b.rebuild_ring();
        b
    }

    fn up(&self, i: usize) -> bool {
        self.servers[i].down_since.is_none()
    }

    fn rebuild_ring(&mut self) {
        self.ring.clear();
        for (i, s) in self.servers.iter().enumerate() {
            if s.down_since.is_none() {
                let puid = i as u32 + 1;
                let base = puid.wrapping_mul(KEY_STRIDE);
                self.ring.extend((0..POINTS).map(|n| (full_hash(base.wrapping_add(n)), i as u32)));
            }
        }
        self.ring.sort_unstable();
    }

    /// Brings back the servers whose health check ran since they were marked down.
    fn run_checks(&mut self, now: Time) {
        let Some(health) = self.health else { return };
        let (n, inter) = (self.servers.len() as u32, health.duration);
        let mut changed = false;
        for (i, s) in self.servers.iter_mut().enumerate() {
            let Some(since) = s.down_since else { continue };
            if now >= next_check(inter * i as u32 / n, inter, since) {
                s.down_since = None;
                s.errors = 0;
                changed = true;
            }
        }
        if changed {
            self.rebuild_ring();
        }
    }

    /// The server at the ring point nearest `key` (the earlier on a tie), skipping `avoid` by
    /// walking on (`chash_get_server_hash`).
    fn ring_lookup(&self, key: u32, avoid: Option<usize>) -> Option<usize> {
        let len = self.ring.len();
        if len == 0 {
            return None;
        }
        let at = self.ring.partition_point(|&(k, _)| k < key) % len;
        let before = (at + len - 1) % len;
        let (next, prev) = (self.ring[at], self.ring[before]);
        let mut i = if key.wrapping_sub(prev.0) <= next.0.wrapping_sub(key) { before } else { at };
        for _ in 0..len {
            if Some(self.ring[i].1 as usize) != avoid {
                break;
            }
            i = (i + 1) % len;
        }
        Some(self.ring[i].1 as usize)
    }

    fn random(&mut self, draws: u32, avoid: Option<usize>) -> Option<usize> {
        let mut best: Option<usize> = None;
        for _ in 0..draws {
            let key = self.connections.draw();
            let current = self.ring_lookup(key, avoid)?;
            best = Some(match best {
                Some(prev) if prev != current && self.servers[current].served > self.servers[prev].served => prev,
                _ => current,
            });
        }
        best
    }

    fn round_robin(&mut self, avoid: Option<usize>) -> Option<usize> {
        let n = self.servers.len();
        let order = (0..n).map(|k| (self.next + k) % n).filter(|&i| self.up(i));
        let chosen = order.clone().find(|&i| Some(i) != avoid).or_else(|| order.clone().next())?;
        self.next = (chosen + 1) % n;
        Some(chosen)
    }

    fn least_conn(&self, avoid: Option<usize>) -> Option<usize> {
        let up = (0..self.servers.len()).filter(|&i| self.up(i));
        let by_load = |&i: &usize| (self.servers[i].served, self.servers[i].moved);
        up.clone().filter(|&i| Some(i) != avoid).min_by_key(by_load).or_else(|| up.min_by_key(by_load))
    }

    fn moved(&mut self, endpoint: EndpointId) {
        self.changes += 1;
        self.servers[endpoint].moved = self.changes;
    }
}

/// The first run after `since` of a check that runs at `phase + k·inter`.
fn next_check(phase: Duration, inter: Duration, since: Time) -> Time {
    if since < phase {
        return phase;
    }
    let k = (since - phase).as_nanos() / inter.as_nanos().max(1) + 1;
    phase + Duration::from_nanos(u64::try_from(k * inter.as_nanos()).unwrap_or(u64::MAX))
}

impl Balancer for Haproxy {
    fn pick(&mut self, pick: &mut Pick<'_>) -> Option<EndpointId> {
        self.run_checks(pick.now);
        // `option redispatch 1`: a retry avoids the server of the attempt before it.
        let avoid = pick.exclude.last().copied();
        match self.balance {
            PeerBalance::RoundRobin => self.round_robin(avoid),
            PeerBalance::LeastConnections => self.least_conn(avoid),
            PeerBalance::Random => self.random(1, avoid),
            PeerBalance::TwoChoices => self.random(2, avoid),
        }
    }

    fn on_send(&mut self, endpoint: EndpointId, _now: Time) {
        self.servers[endpoint].served += 1;
        self.connections.send(endpoint);
        self.moved(endpoint);
    }

    fn on_feedback(&mut self, endpoint: EndpointId, now: Time, feedback: &Feedback) {
        self.connections.answer(endpoint);
        let s = &mut self.servers[endpoint];
        s.served = s.served.saturating_sub(1);
        self.moved(endpoint);
        let Some(health) = self.health else { return };
        let s = &mut self.servers[endpoint];
        match feedback.outcome {
            Outcome::Error | Outcome::TimedOut | Outcome::Unavailable => {
                s.errors += 1;
                if s.errors >= health.failures && s.down_since.is_none() {
                    s.down_since = Some(now);
                    s.errors = 0;
                    self.rebuild_ring();
                }
            }
            Outcome::Success | Outcome::Rejected | Outcome::Overloaded => s.errors = 0,
            Outcome::Cancelled => {}
        }
    }

    fn grow(&mut self, endpoints: usize) {
        self.servers.resize(endpoints.max(self.servers.len()), Server::default());
        self.connections.holding.resize(self.servers.len(), Default::default());
        self.rebuild_ring();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::tests::{fail, pick, succeed};
    use rand::RngCore as _;

    fn ms(n: u64) -> Time {
        Duration::from_millis(n)
    }

    #[test]
    fn full_hash_is_haproxy_s() {
        // intops.h's steps written out in C (gcc, 32-bit unsigned arithmetic).
        assert_eq!(full_hash(0), 2_874_071_335);
        assert_eq!(full_hash(4096), 1_237_450_891);
        assert_eq!(full_hash(4096 * 10 + 15), 1_609_685_223);
    }

    /// Each server's exact share of the 2^32 keys: every point owns the keys nearer to it than
    /// to its neighbours (the earlier point on a tie).
    fn shares(b: &Haproxy) -> Vec<f64> {
        let mut owned = vec![0u64; b.servers.len()];
        for key in (0..=u32::MAX).step_by(1 << 12) {
            owned[b.ring_lookup(key, None).unwrap()] += 1;
        }
        owned.iter().map(|&n| n as f64 / (1u64 << 20) as f64).collect()
    }

    #[test]
    fn the_ring_s_shares_are_uneven_and_draws_follow_them() {
        let b = Haproxy::new(10, PeerBalance::Random, None, 1);
        assert_eq!(b.ring.len(), 160);
        let shares = shares(&b);
        let percent: Vec<u32> = shares.iter().map(|s| (s * 1000.0).round() as u32).collect();
        // Per mille of single draws, servers 1 to 10 of a 10-server backend: 7.1 % to 13.4 %.
        assert_eq!(percent, [121, 80, 90, 94, 109, 115, 71, 82, 105, 134]);
        let mut counts = [0u32; 10];
        let mut rng = rand_pcg::Pcg64Mcg::new(7);
        for _ in 0..100_000 {
            counts[b.ring_lookup(rng.next_u32(), None).unwrap()] += 1;
        }
        for (count, share) in counts.iter().zip(&shares) {
            assert!((f64::from(*count) / 100_000.0 - share).abs() < 0.005, "{counts:?} {shares:?}");
        }
    }

    /// The servers `b` sends `n` requests to, one after another on one connection.
    fn in_turn(b: &mut Haproxy, n: usize) -> String {
        (0..n)
            .map(|_| {
                let e = pick(b, ms(0), &[], 0).unwrap();
                succeed(b, e, ms(0));
                e.to_string()
            })
            .collect()
    }

    #[test]
    fn every_process_draws_the_same_keys_thread_by_thread() {
        // Debian's HAProxy 2.6.12, `balance random(1)` over 10 servers (numbered from 0), 40
        // requests one after another on one connection: the same servers in every process.
        const THREAD_0: &str = "8719522383277957709238228479675320918581";
        let mut b = Haproxy::new(10, PeerBalance::Random, None, 2);
        assert_eq!(in_turn(&mut b, 40), THREAD_0);
        assert_eq!(in_turn(&mut Haproxy::new(10, PeerBalance::Random, None, 1), 40), THREAD_0);
        // Four connections one after another, 15 requests each: new connections go to the
        // threads in turn, and each thread goes on with its own sequence (HAProxy, nbthread 2).
        let mut b = Haproxy::new(10, PeerBalance::Random, None, 2);
        let mut per_connection = Vec::new();
        for _ in 0..4 {
            // A new connection: the pool's idle ones are in use (here: forgotten).
            b.connections.idle.clear();
            per_connection.push(in_turn(&mut b, 15));
        }
        assert_eq!(per_connection, ["871952238327795", "392098996772966", "770923822847967", "542229528841935"]);
    }

    #[test]
    fn a_request_draws_on_the_thread_of_the_connection_freed_last() {
        let mut b = Haproxy::new(10, PeerBalance::Random, None, 2);
        // Two requests at once: two connections, threads 0 and 1 (their first draws: 8 and 3).
        let first = pick(&mut b, ms(0), &[], 0).unwrap();
        b.on_send(first, ms(0));
        let second = pick(&mut b, ms(0), &[], 0).unwrap();
        b.on_send(second, ms(0));
        assert_eq!((first, second), (8, 3));
        // Thread 1's connection is freed, then thread 0's: the next request reuses thread 0's
        // (its second draw: 7), the one after it thread 1's (its second: 9).
        b.on_feedback(second, ms(1), &Feedback::success(Duration::ZERO));
        b.on_feedback(first, ms(2), &Feedback::success(Duration::ZERO));
        let third = pick(&mut b, ms(3), &[], 0).unwrap();
        b.on_send(third, ms(3));
        assert_eq!((third, pick(&mut b, ms(3), &[], 0).unwrap()), (7, 9));
    }

    #[test]
    fn of_two_draws_the_less_served_wins_the_later_on_ties_and_a_server_may_be_drawn_twice() {
        let mut b = Haproxy::new(2, PeerBalance::TwoChoices, None, 1);
        let share = shares(&b)[0];
        b.on_send(0, ms(0));
        // The busier server 0 is picked only when both draws land on it.
        let zero = (0..4000).filter(|&seed| pick(&mut b, ms(0), &[], seed) == Some(0)).count();
        assert!((zero as f64 / 4000.0 - share * share).abs() < 0.03, "{zero} {share}");
        // Equal loads: the later draw wins, so each is picked as often as it is drawn.
        b.on_feedback(0, ms(0), &Feedback::success(Duration::ZERO));
        let zero = (0..4000).filter(|&seed| pick(&mut b, ms(0), &[], seed) == Some(0)).count();
        assert!((zero as f64 / 4000.0 - share).abs() < 0.03, "{zero} {share}");
    }

    #[test]
    fn leastconn_takes_the_least_served_and_in_turn_among_equals() {
        let mut b = Haproxy::new(3, PeerBalance::LeastConnections, None, 1);
        let mut sent = Vec::new();
        for _ in 0..3 {
            let e = pick(&mut b, ms(0), &[], 0).unwrap();
            b.on_send(e, ms(0));
            sent.push(e);
        }
        assert_eq!(sent, [0, 1, 2]);
        b.on_feedback(1, ms(1), &Feedback::success(Duration::ZERO));
        b.on_feedback(0, ms(2), &Feedback::success(Duration::ZERO));
        // 0 and 1 are at zero; 1 changed first.
        assert_eq!(pick(&mut b, ms(2), &[], 0), Some(1));
    }

    #[test]
    fn a_retry_avoids_the_previous_server_unless_it_is_the_only_one() {
        let mut b = Haproxy::new(2, PeerBalance::RoundRobin, None, 1);
        assert_eq!(pick(&mut b, ms(0), &[], 0), Some(0));
        assert_eq!(pick(&mut b, ms(0), &[1], 0), Some(0), "its turn is 1, which the retry avoids");
        let mut one = Haproxy::new(1, PeerBalance::TwoChoices, None, 1);
        assert_eq!(pick(&mut one, ms(0), &[0], 0), Some(0));
    }

    #[test]
    fn error_limit_errors_in_a_row_mark_down_until_the_next_check() {
        let health = PassiveHealth { failures: 3, duration: Duration::from_secs(2) };
        let mut b = Haproxy::new(2, PeerBalance::RoundRobin, Some(health), 1);
        // Step: a success between errors resets the count.
        fail(&mut b, 1, ms(100));
        fail(&mut b, 1, ms(200));
        succeed(&mut b, 1, ms(300));
        fail(&mut b, 1, ms(400));
        fail(&mut b, 1, ms(500));
        assert!(b.up(1));
        // Step: the third in a row marks server 1 down: every pick goes to 0.
        fail(&mut b, 1, ms(600));
        assert!((0..4).all(|_| pick(&mut b, ms(700), &[], 0) == Some(0)));
        // Step: server 1 of 2 checks at 1 s + k·2 s: its check at 1 s brings it back.
        assert_eq!(pick(&mut b, ms(999), &[], 0), Some(0));
        assert_eq!(pick(&mut b, ms(999), &[], 0), Some(0));
        assert!((0..2).any(|_| pick(&mut b, ms(1000), &[], 0) == Some(1)));
        // Step: with both down, nothing is picked.
        for t in [3100, 3200, 3300] {
            fail(&mut b, 0, ms(t));
            fail(&mut b, 1, ms(t));
        }
        assert_eq!(pick(&mut b, ms(3300), &[], 0), None);
        assert_eq!(next_check(ms(1000), Duration::from_secs(2), ms(600)), ms(1000));
        assert_eq!(next_check(ms(1000), Duration::from_secs(2), ms(1000)), ms(3000));
    }
}
