//! Prequal: probe a few random replicas for their requests in flight (RIF) and latency, keep the
//! replies in a small pool, and send each request to the best of the pool by the hot-cold
//! lexicographic (HCL) rule.
//!
//! Wydrowski, Kleinberg, Rumble, "Load is not what you should balance: Introducing Prequal",
//! NSDI 2024 (§3–§4). Per caller:
//! - **Probes.** Each pick asks for `probes_per_request` probes (fractions accumulate from pick to
//!   pick), to distinct replicas drawn uniformly at random. The driver sends them asynchronously
//!   ([`Balancer::take_probe`], the proxy and the simulator alike) and hands each reply to
//!   [`Balancer::on_probe`]: the replica's RIF and its latency estimate ([`ProbeResponder`]).
//! - **The pool** holds at most `pool_size` replies, at most one per replica (a newer reply
//!   replaces an older one); a reply older than `max_age`, or than the quickest nonzero latency
//!   estimate among the last [`RECENT_RIFS`] replies, is dropped, and a new reply into a full pool
//!   evicts the oldest.
//! - **HCL.** A replica is *hot* when its RIF is above the `hot_quantile` quantile of the RIFs of the
//!   last [`RECENT_RIFS`] probe replies, *cold* otherwise. Among cold replicas in the pool the one
//!   with the lowest latency estimate wins (ties: lower RIF, then the older reply); if every one is
//!   hot, the one with the lowest RIF (ties: lower latency, then older).
//! - **Reuse.** A reply serves at most `reuse_budget` picks. Each use also adds one to the reply's
//!   RIF, as the request just sent is one more in flight there, so a reused reply degrades instead
//!   of attracting a burst.
//! - With no usable reply (the pool empty, aged out, or holding only endpoints this request
//!   avoids), the pick's probes go out before it and it waits for their replies, at most
//!   `probe_wait` ([`Balancer::probe_before_pick`]); with still none, it is uniform at random
//!   among the eligible endpoints, as the paper falls back to a random replica.
//!
//! Where we differ from or fill in the paper:
//! - The paper's clients also probe on a timer when idle, so the pool is fresh when a request
//!   comes; a balancer here has no timers, so a pick that finds the pool stale waits one round
//!   trip for its own probes instead (a caller sending under one request per reply lifetime
//!   would otherwise always pick at random).
//! - The paper derives the reuse budget from the probe rate, the pool's turnover and `hot_quantile`
//!   and periodically removes the worst probe; we use a fixed budget and the age limit.
//! - The paper's replicas report the median latency of recent requests that arrived at the current
//!   RIF; our [`ProbeResponder`] keeps a moving average per RIF instead of a median (the same code
//!   in the simulator and the proxy).
//! - A refusal (429) or an unreachable replica drops that replica's reply from the pool.

use super::{Balancer, Eligible, Pick};
use crate::config::{self, Check};
use crate::duration::text;
use crate::{EndpointId, Feedback, Outcome, Time};
use rand::Rng as _;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How many recent probe replies the hot threshold is the quantile of.
pub const RECENT_RIFS: usize = 64;

/// Settings of [`Prequal`]; a file may leave out any of them.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PrequalConfig {
    /// Probes sent per pick, on average (default 3, the paper's r_probe in YouTube).
    pub probes_per_request: f64,
    /// The most probe replies kept (default 16, the paper's pool size).
    pub pool_size: u32,
    /// The longest a probe reply stays usable (default 1 s). A reply is stale sooner, once it is
    /// older than the quickest latency estimate among the last [`RECENT_RIFS`] replies (zeros
    /// aside): by then even the quickest replica has finished a request, and queues have moved.
    #[serde(with = "text")]
    pub max_age: Duration,
    /// How many picks one probe reply may serve (default 2).
    pub reuse_budget: u32,
    /// The quantile of recent RIFs above which a replica is hot (default 0.84, the paper's Q_RIF).
    pub hot_quantile: f64,
    /// How long a pick whose pool holds no usable reply waits for its probes, sent before it
    /// rather than after (default 5 ms; 0: never, the pick is random as in the paper).
    #[serde(with = "text")]
    pub probe_wait: Duration,
}

impl Default for PrequalConfig {
    fn default() -> Self {
        PrequalConfig {
            probes_per_request: 3.0,
            pool_size: 16,
            max_age: Duration::from_secs(1),
            reuse_budget: 2,
            hot_quantile: 0.84,
            probe_wait: Duration::from_millis(5),
        }
    }
}

impl PrequalConfig {
    /// Checks the parameters; the error names the field.
    pub fn validate(&self) -> Check {
        config::non_negative("probes_per_request", self.probes_per_request)?;
        config::at_least_one("pool_size", self.pool_size)?;
        config::positive("max_age", self.max_age)?;
        config::at_least_one("reuse_budget", self.reuse_budget)?;
        config::fraction("hot_quantile", self.hot_quantile)
    }
}

/// What a replica answers a probe with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeReply {
    /// Requests the replica holds right now (queued or in service).
    pub in_flight: u32,
    /// Its latency estimate for a request arriving now.
    pub latency: Duration,
}

/// The replica's side of Prequal: it learns its latency at each RIF from its own answers and
/// answers probes with the estimate for its current RIF (the simulator's replica model and the
/// proxy's ingress sidecar).
///
/// As in the paper, latency is conditioned on the RIF a request found on arrival: one moving average
/// (weight [`ProbeResponder::WEIGHT`]) per RIF up to [`ProbeResponder::RIFS`] − 1, the last one
/// shared by every higher RIF. A RIF not seen yet borrows the nearest RIF seen below it, else above
/// it; a replica that has answered nothing reports 0 (an unused replica is the one to try).
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeResponder {
    /// Per RIF on arrival, the moving average of latency in seconds (`None`: no answer yet).
    by_rif: [Option<f64>; ProbeResponder::RIFS],
}

impl Default for ProbeResponder {
    fn default() -> Self {
        ProbeResponder { by_rif: [None; ProbeResponder::RIFS] }
    }
}

impl ProbeResponder {
    /// The weight of each new latency in its RIF's average (1/4: recent answers count).
    pub const WEIGHT: f64 = 0.25;
    /// RIFs told apart (0 to 62, and 63 or more).
    pub const RIFS: usize = 64;

    fn bucket(rif: u32) -> usize {
        (rif as usize).min(Self::RIFS - 1)
    }

    /// A request that found `rif` requests on arrival was answered `latency` after it arrived.
    pub fn on_answer(&mut self, rif: u32, latency: Duration) {
        let sample = latency.as_secs_f64();
        let slot = &mut self.by_rif[Self::bucket(rif)];
        *slot = Some(match *slot {
            Some(avg) => avg + Self::WEIGHT * (sample - avg),
            None => sample,
        });
    }

    /// The reply to a probe while the replica holds `in_flight` requests.
    pub fn reply(&self, in_flight: u32) -> ProbeReply {
        let at = Self::bucket(in_flight);
        let below = self.by_rif[..=at].iter().rev().find_map(|x| *x);
        let estimate = below.or_else(|| self.by_rif[at..].iter().find_map(|x| *x));
        ProbeReply { in_flight, latency: estimate.map_or(Duration::ZERO, Duration::from_secs_f64) }
    }
}

/// One probe reply in the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Probe {
    endpoint: EndpointId,
    /// The replica's RIF as it answered, plus the picks this reply has served since.
    in_flight: u32,
    latency: Duration,
    received: Time,
    uses_left: u32,
}

/// The Prequal balancer: a pool of probe replies and the HCL rule.
#[derive(Clone, Debug)]
pub struct Prequal {
    config: PrequalConfig,
    endpoints: usize,
    pool: Vec<Probe>,
    /// RIFs of the last [`RECENT_RIFS`] replies, a ring written at `recent_next`.
    recent: Vec<u32>,
    /// Their latency estimates, in the same ring.
    recent_latencies: Vec<Duration>,
    recent_next: usize,
    /// Probes owed: the fraction of `probes_per_request` not sent yet.
    credit: f64,
    /// Probes asked for by the last pick and not yet taken by the driver.
    due: Vec<EndpointId>,
    /// The next pick's probes went out before it ([`Balancer::probe_before_pick`]).
    probed_ahead: bool,
    eligible: Eligible,
}

impl Prequal {
    /// A balancer over endpoints `0..endpoints`, with an empty pool.
    pub fn new(endpoints: usize, config: PrequalConfig) -> Self {
        Prequal {
            config,
            endpoints,
            pool: Vec::with_capacity(config.pool_size as usize),
            recent: Vec::with_capacity(RECENT_RIFS),
            recent_latencies: Vec::with_capacity(RECENT_RIFS),
            recent_next: 0,
            credit: 0.0,
            due: Vec::new(),
            probed_ahead: false,
            eligible: Eligible::new(endpoints),
        }
    }

    /// The RIF above which a replica is hot: the `hot_quantile` quantile of the recent replies'
    /// RIFs (the smallest value with at least that share of them at or below it).
    fn hot_threshold(&self) -> u32 {
        let mut sorted = [0u32; RECENT_RIFS];
        let sorted = &mut sorted[..self.recent.len()];
        sorted.copy_from_slice(&self.recent);
        sorted.sort_unstable();
        let rank = (self.config.hot_quantile * sorted.len() as f64).ceil() as usize;
        sorted.get(rank.max(1) - 1).copied().unwrap_or(u32::MAX)
    }

    /// The pool index of the HCL choice among replies whose endpoint is not in `exclude`.
    fn hcl(&self, exclude: &[EndpointId]) -> Option<usize> {
        let threshold = self.hot_threshold();
        let usable = self.pool.iter().enumerate().filter(|(_, p)| !exclude.contains(&p.endpoint));
        // Cold before hot; among cold, latency then RIF; among hot, RIF then latency. Older
        // replies come first in the pool, and `min_by_key` keeps the first of equals.
        usable
            .min_by_key(|(_, p)| {
                let hot = p.in_flight > threshold;
                if hot {
                    (true, Duration::ZERO, p.in_flight, p.latency)
                } else {
                    (false, p.latency, p.in_flight, Duration::ZERO)
                }
            })
            .map(|(i, _)| i)
    }

    /// Spends one use of the reply at `index`: one more request in flight there; gone when spent.
    fn use_probe(&mut self, index: usize) -> EndpointId {
        let probe = &mut self.pool[index];
        probe.in_flight = probe.in_flight.saturating_add(1);
        probe.uses_left -= 1;
        let endpoint = probe.endpoint;
        if probe.uses_left == 0 {
            self.pool.remove(index);
        }
        endpoint
    }

    /// How long a reply stays usable: `max_age`, or less, the quickest nonzero latency estimate
    /// among the recent replies.
    fn max_age(&self) -> Duration {
        let quickest = self.recent_latencies.iter().filter(|l| !l.is_zero()).min();
        quickest.map_or(self.config.max_age, |q| self.config.max_age.min(*q))
    }

    /// Drops the replies older than [`Prequal::max_age`].
    fn age_out(&mut self, now: Time) {
        let max_age = self.max_age();
        self.pool.retain(|p| now.saturating_sub(p.received) <= max_age);
    }

    /// Draws this pick's probes: distinct endpoints, uniformly at random.
    fn draw_probes(&mut self, rng: crate::Rng<'_>) {
        self.credit += self.config.probes_per_request;
        let count = (self.credit.floor() as usize).min(self.endpoints);
        self.credit -= count as f64;
        sample_into(rng, self.endpoints, count, &mut self.due);
        // Taken from the end: reversed so the driver sends them in the order drawn.
        self.due.reverse();
    }
}

/// `amount` distinct indices below `length`, drawn uniformly at random into `out`: rand's
/// `seq::index::sample`, to the draw (the simulator's runs depend on it), without its allocation
/// for the few a pick asks for: below 12 it uses Floyd's algorithm, written out here.
fn sample_into(rng: crate::Rng<'_>, length: usize, amount: usize, out: &mut Vec<EndpointId>) {
    out.clear();
    let (Ok(length), Ok(amount)) = (u32::try_from(length), u32::try_from(amount)) else {
        out.extend(rand::seq::index::sample(rng, length, amount).iter());
        return;
    };
    if amount >= 12 {
        out.extend(rand::seq::index::sample(rng, length as usize, amount as usize).iter());
        return;
    }
    for j in length - amount..length {
        let t = rng.gen_range(0..=j);
        match out.iter().position(|&x| x == t as usize) {
            Some(at) => out.insert(at, j as usize),
            None => out.push(t as usize),
        }
    }
}

impl Balancer for Prequal {
    fn pick(&mut self, pick: &mut Pick<'_>) -> Option<EndpointId> {
        self.age_out(pick.now);
        let chosen = match self.hcl(pick.exclude) {
            Some(index) => Some(self.use_probe(index)),
            None => {
                let candidates = self.eligible.among(pick.exclude);
                (!candidates.is_empty()).then(|| candidates.get(pick.rng.gen_range(0..candidates.len())))
            }
        };
        if !std::mem::take(&mut self.probed_ahead) {
            self.draw_probes(&mut *pick.rng);
        }
        chosen
    }

    fn probe_before_pick(&mut self, now: Time, rng: crate::Rng<'_>, exclude: &[EndpointId]) -> Option<Duration> {
        if self.config.probe_wait.is_zero() {
            return None;
        }
        self.age_out(now);
        if self.pool.iter().any(|p| !exclude.contains(&p.endpoint)) {
            return None;
        }
        self.draw_probes(rng);
        self.probed_ahead = !self.due.is_empty();
        self.probed_ahead.then_some(self.config.probe_wait)
    }

    fn grow(&mut self, endpoints: usize) {
        self.endpoints = endpoints.max(self.endpoints);
        self.eligible.grow(endpoints);
    }
    fn on_send(&mut self, _endpoint: EndpointId, _now: Time) {}

    fn on_feedback(&mut self, endpoint: EndpointId, _now: Time, feedback: &Feedback) {
        if matches!(feedback.outcome, Outcome::Rejected | Outcome::Unavailable) {
            self.pool.retain(|p| p.endpoint != endpoint);
        }
    }

    fn take_probe(&mut self) -> Option<EndpointId> {
        self.due.pop()
    }

    fn sends_probes(&self) -> bool {
        true
    }

    fn on_probe(&mut self, endpoint: EndpointId, now: Time, reply: ProbeReply) {
        if endpoint >= self.endpoints {
            return;
        }
        if self.recent.len() < RECENT_RIFS {
            self.recent.push(reply.in_flight);
            self.recent_latencies.push(reply.latency);
        } else {
            self.recent[self.recent_next] = reply.in_flight;
            self.recent_latencies[self.recent_next] = reply.latency;
        }
        self.recent_next = (self.recent_next + 1) % RECENT_RIFS;
        self.pool.retain(|p| p.endpoint != endpoint);
        if self.pool.len() >= self.config.pool_size as usize {
            // The pool is in arrival order: the oldest reply is first.
            self.pool.remove(0);
        }
        let uses_left = self.config.reuse_budget;
        self.pool.push(Probe {
            endpoint,
            in_flight: reply.in_flight,
            latency: reply.latency,
            received: now,
            uses_left,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_pcg::Pcg64Mcg;

    const MS: Duration = Duration::from_millis(1);
    const SEC: Duration = Duration::from_secs(1);

    fn prequal(endpoints: usize, config: PrequalConfig) -> (Prequal, Pcg64Mcg) {
        (Prequal::new(endpoints, config), Pcg64Mcg::seed_from_u64(7))
    }

    fn no_probes() -> PrequalConfig {
        PrequalConfig { probes_per_request: 0.0, ..PrequalConfig::default() }
    }

    fn pick_at(b: &mut Prequal, rng: &mut Pcg64Mcg, now: Time, exclude: &[EndpointId]) -> Option<EndpointId> {
        b.pick(&mut Pick { now, rng, exclude, true_loads: None })
    }

    fn reply(in_flight: u32, latency_ms: u32) -> ProbeReply {
        ProbeReply { in_flight, latency: MS * latency_ms }
    }

    fn probes(b: &mut Prequal) -> Vec<EndpointId> {
        std::iter::from_fn(|| b.take_probe()).collect()
    }

    #[test]
    fn the_defaults_are_the_papers_where_it_gives_them() {
        let c = PrequalConfig::default();
        assert_eq!((c.probes_per_request, c.pool_size, c.hot_quantile), (3.0, 16, 0.84));
        assert_eq!((c.max_age, c.reuse_budget, c.probe_wait), (SEC, 2, 5 * MS));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn validation_names_the_field() {
        let bad = PrequalConfig { hot_quantile: 1.5, ..PrequalConfig::default() };
        assert!(bad.validate().unwrap_err().to_string().contains("hot_quantile"));
        let bad = PrequalConfig { reuse_budget: 0, ..PrequalConfig::default() };
        assert!(bad.validate().unwrap_err().to_string().contains("reuse_budget"));
        let bad = PrequalConfig { probes_per_request: -1.0, ..PrequalConfig::default() };
        assert!(bad.validate().unwrap_err().to_string().contains("probes_per_request"));
    }

    #[test]
    fn each_pick_asks_for_distinct_random_probes_and_fractions_accumulate() {
        let config = PrequalConfig { probes_per_request: 1.5, ..PrequalConfig::default() };
        let (mut b, mut rng) = prequal(10, config);
        let mut twin = Pcg64Mcg::seed_from_u64(7);
        // Empty pool: the pick is uniform (one draw), then one probe (credit 1.5 → 0.5).
        let first = pick_at(&mut b, &mut rng, Time::ZERO, &[]);
        assert_eq!(first, Some(twin.gen_range(0..10)));
        let expected: Vec<usize> = rand::seq::index::sample(&mut twin, 10, 1).into_vec();
        assert_eq!(probes(&mut b), expected);
        // The next pick owes two (0.5 + 1.5), distinct, in the order drawn.
        let _ = pick_at(&mut b, &mut rng, Time::ZERO, &[]);
        let _ = twin.gen_range(0..10);
        let expected: Vec<usize> = rand::seq::index::sample(&mut twin, 10, 2).into_vec();
        assert_eq!(probes(&mut b), expected);
        assert_ne!(expected[0], expected[1]);
        assert_eq!(b.take_probe(), None);
    }

    #[test]
    fn probes_are_drawn_as_rand_draws_them() {
        for (length, amount) in [(3, 3), (3, 2), (10, 1), (10, 11 - 1), (50, 11), (50, 12), (1000, 30)] {
            let (mut ours, mut theirs) =
                (Pcg64Mcg::seed_from_u64(length as u64), Pcg64Mcg::seed_from_u64(length as u64));
            let mut out = Vec::new();
            for _ in 0..50 {
                sample_into(&mut ours, length, amount, &mut out);
                assert_eq!(out, rand::seq::index::sample(&mut theirs, length, amount).into_vec());
            }
        }
    }

    #[test]
    fn never_more_probes_than_endpoints() {
        let config = PrequalConfig { probes_per_request: 5.0, ..PrequalConfig::default() };
        let (mut b, mut rng) = prequal(3, config);
        let _ = pick_at(&mut b, &mut rng, Time::ZERO, &[]);
        let mut sent = probes(&mut b);
        sent.sort_unstable();
        assert_eq!(sent, [0, 1, 2]);
    }

    #[test]
    fn among_cold_replicas_the_lowest_latency_wins() {
        let (mut b, mut rng) = prequal(4, no_probes());
        // RIFs 1, 2, 3, 9: the 0.84 quantile of four is the 4th (⌈3.36⌉), 9, so none is hot; the
        // latencies pick 2.
        b.on_probe(0, Time::ZERO, reply(1, 40));
        b.on_probe(1, Time::ZERO, reply(2, 30));
        b.on_probe(2, Time::ZERO, reply(3, 10));
        b.on_probe(3, Time::ZERO, reply(9, 20));
        assert_eq!(b.hot_threshold(), 9);
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(2));
    }

    #[test]
    fn a_hot_replica_loses_to_any_cold_one_whatever_its_latency() {
        let config = PrequalConfig { hot_quantile: 0.5, ..no_probes() };
        let (mut b, mut rng) = prequal(4, config);
        // RIFs 1, 2, 5, 8: the median (2nd of 4) is 2, so 2 and 3 are hot despite their latency.
        b.on_probe(0, Time::ZERO, reply(1, 40));
        b.on_probe(1, Time::ZERO, reply(2, 30));
        b.on_probe(2, Time::ZERO, reply(5, 1));
        b.on_probe(3, Time::ZERO, reply(8, 2));
        assert_eq!(b.hot_threshold(), 2);
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(1));
        // 1's reply now counts 3 in flight (hot) with one use left; 0 is the only cold one.
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(0));
        // 0 (RIF 2) is still cold: its second and last use.
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(0));
        // Left: 1 (RIF 3), 2 (RIF 5), 3 (RIF 8), all hot: the lowest RIF wins.
        assert_eq!(b.pool.iter().map(|p| (p.endpoint, p.in_flight)).collect::<Vec<_>>(), [(1, 3), (2, 5), (3, 8)]);
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(1));
    }

    #[test]
    fn a_reply_serves_at_most_its_reuse_budget() {
        let config = PrequalConfig { reuse_budget: 3, ..no_probes() };
        let (mut b, mut rng) = prequal(5, config);
        b.on_probe(4, Time::ZERO, reply(0, 5));
        for _ in 0..3 {
            assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(4));
        }
        assert!(b.pool.is_empty());
        // Nothing left: uniform among all five.
        let mut twin = Pcg64Mcg::seed_from_u64(7);
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(twin.gen_range(0..5)));
    }

    #[test]
    fn replies_age_out_and_newer_ones_replace_older() {
        let (mut b, mut rng) = prequal(3, no_probes());
        // Estimates of 5 s and more: the 1 s `max_age` is the limit.
        b.on_probe(0, Time::ZERO, reply(0, 5000));
        b.on_probe(1, 500 * MS, reply(0, 9000));
        // At 1.2 s, 0's reply (1.2 s old) is gone, 1's (0.7 s) remains.
        assert_eq!(pick_at(&mut b, &mut rng, 1200 * MS, &[]), Some(1));
        assert_eq!(b.pool.len(), 1);
        // A new reply from 1 replaces its old one, with a fresh budget.
        b.on_probe(1, 1300 * MS, reply(4, 9000));
        let fresh = Probe { endpoint: 1, in_flight: 4, latency: 9 * SEC, received: 1300 * MS, uses_left: 2 };
        assert_eq!(b.pool, [fresh]);
    }

    #[test]
    fn a_reply_is_stale_once_older_than_the_quickest_recent_estimate() {
        let (mut b, mut rng) = prequal(3, no_probes());
        // A replica that answers at once (0) says nothing of the time scale; 300 ms is the quickest.
        b.on_probe(0, Time::ZERO, reply(0, 0));
        b.on_probe(1, Time::ZERO, reply(1, 300));
        b.on_probe(2, 100 * MS, reply(2, 700));
        assert_eq!(b.max_age(), 300 * MS);
        // At 350 ms the replies of 0 and 1 (350 ms old) are gone; 2's (250 ms) is left.
        assert_eq!(pick_at(&mut b, &mut rng, 350 * MS, &[]), Some(2));
        assert_eq!(b.pool.iter().map(|p| p.endpoint).collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn a_pick_with_no_usable_reply_has_its_probes_sent_first() {
        let config = PrequalConfig { probe_wait: 5 * MS, ..PrequalConfig::default() };
        let (mut b, mut rng) = prequal(10, config);
        // Empty pool: three distinct probes are due before the pick, which may wait 5 ms for them.
        assert_eq!(b.probe_before_pick(Time::ZERO, &mut rng, &[]), Some(5 * MS));
        let mut sent = probes(&mut b);
        sent.sort_unstable();
        sent.dedup();
        assert_eq!(sent.len(), 3);
        // Their replies come; the pick takes the best and sends no probes of its own (it had them).
        for (rif, &e) in sent.iter().enumerate() {
            b.on_probe(e, MS, reply(rif as u32, 250 * (rif as u32 + 1)));
        }
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(sent[0]));
        assert_eq!(b.take_probe(), None);
        // The pool now has usable replies: the next pick does not wait, and probes after itself.
        assert_eq!(b.probe_before_pick(MS, &mut rng, &[]), None);
        let _ = pick_at(&mut b, &mut rng, MS, &[]);
        assert_eq!(probes(&mut b).len(), 3);
        // A pool holding only replicas this request avoids is as good as empty.
        assert!(b.probe_before_pick(MS, &mut rng, &sent).is_some());
        // `probe_wait: 0` never waits.
        let (mut b, mut rng) = prequal(10, PrequalConfig { probe_wait: Duration::ZERO, ..config });
        assert_eq!(b.probe_before_pick(Time::ZERO, &mut rng, &[]), None);
    }

    #[test]
    fn a_full_pool_evicts_its_oldest_reply() {
        let config = PrequalConfig { pool_size: 2, ..no_probes() };
        let (mut b, _) = prequal(3, config);
        b.on_probe(0, Time::ZERO, reply(0, 1));
        b.on_probe(1, MS, reply(0, 2));
        b.on_probe(2, 2 * MS, reply(0, 3));
        assert_eq!(b.pool.iter().map(|p| p.endpoint).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn the_hot_threshold_is_over_the_last_replies() {
        let (mut b, _) = prequal(2, no_probes());
        assert_eq!(b.hot_threshold(), u32::MAX);
        // 64 replies with RIF 0, then 64 with RIF 7: only the last 64 count.
        (0..RECENT_RIFS).for_each(|_| b.on_probe(0, Time::ZERO, reply(0, 1)));
        assert_eq!(b.hot_threshold(), 0);
        (0..RECENT_RIFS).for_each(|_| b.on_probe(1, Time::ZERO, reply(7, 1)));
        assert_eq!(b.hot_threshold(), 7);
    }

    #[test]
    fn excluded_and_refusing_replicas_are_skipped() {
        let (mut b, mut rng) = prequal(3, no_probes());
        b.on_probe(0, Time::ZERO, reply(0, 1));
        b.on_probe(1, Time::ZERO, reply(0, 2));
        // A retry that tried 0 takes 1.
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[0]), Some(1));
        // 0 refuses: its reply goes, and 1 (one use left) is the choice.
        b.on_feedback(0, MS, &Feedback::new(Outcome::Rejected, MS));
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(1));
        // A reply from an endpoint the balancer does not have is ignored.
        b.on_probe(9, MS, reply(0, 1));
        assert!(b.pool.is_empty());
    }

    #[test]
    fn the_responder_reports_the_latency_learnt_at_the_current_rif() {
        let mut r = ProbeResponder::default();
        assert_eq!(r.reply(3), ProbeReply { in_flight: 3, latency: Duration::ZERO });
        // Requests that found 2 in flight took 300 ms, then 500 ms: 300 + (500 - 300) / 4 = 350.
        r.on_answer(2, 300 * MS);
        r.on_answer(2, 500 * MS);
        assert_eq!(r.reply(2), ProbeReply { in_flight: 2, latency: 350 * MS });
        // RIF 5 was never seen: the nearest below (2) answers; RIF 0 borrows from above.
        assert_eq!(r.reply(5).latency, 350 * MS);
        assert_eq!(r.reply(0).latency, 350 * MS);
        r.on_answer(0, 100 * MS);
        assert_eq!((r.reply(0).latency, r.reply(1).latency), (100 * MS, 100 * MS));
        // RIFs of 63 and more share one average.
        r.on_answer(900, 9 * SEC);
        assert_eq!(r.reply(63).latency, 9 * SEC);
        assert_eq!(r.reply(70).latency, 9 * SEC);
    }
}
