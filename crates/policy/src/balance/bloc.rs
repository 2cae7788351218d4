//! BLOC: spend confidence chips on Active endpoints, back off from endpoints that refuse, probe the
//! rest after a reset interval, and drop the request only when every endpoint is unreachable.
//!
//! Follows bloc-load-balancing.txt §IV-B (Active and Inactive lists) and §IV-C (back-off, retries
//! and probes). Per endpoint this caller keeps a chip count, the end of its back-off (`reset` after
//! its last rejection) and a probe timer (due `reset` after its last probe or rejection). An
//! endpoint is **Active** while it holds at least one chip and has not refused a request within the
//! last `reset` interval; otherwise it is **Inactive**. A pick:
//! 1. takes the Active endpoint with fewer requests in flight from this caller, of two drawn at
//!    random (P2C least-request, as the paper routes among the Active list), and spends one chip;
//! 2. else *probes* an Inactive endpoint whose probe timer has run for `reset`, drawn uniformly at
//!    random: the probe restarts its timer and does not make it Active;
//! 3. else takes the endpoint with fewer requests in flight, of two drawn at random among those
//!    not backing off (Inactive for want of a chip, its probe not yet due), spending nothing and
//!    restarting no timer;
//! 4. else the same among those backing off after a 429;
//! 5. else (every endpoint was unreachable within `reset`) returns `None`: the request is dropped.
//!
//! Feedback: a response carrying a chip adds one (an endpoint with chips is Active again once any
//! back-off is over); a 429 ([`Outcome::Rejected`]) drops all of the endpoint's chips and starts both
//! its back-off and its probe timer at `now`. An unreachable endpoint ([`Outcome::Unavailable`]) is
//! treated the same way. Every outcome ends one attempt in flight. Initially no endpoint has a chip
//! and every probe timer has expired, so the first requests are probes.
//!
//! Where we differ from or fill in the paper:
//! - **No chip is no reason to drop.** §IV-B drops a request when nothing is Active and no probe is
//!   due ("a form of AQM"); we send it to an endpoint that has not refused anything (step 3). The
//!   queue bound is the replicas' admission: a replica over capacity answers 429, is backed off
//!   and the request retried elsewhere, so a chipless request costs at worst that 429. Chips run
//!   out without any replica being full: each pick spends one and a response brings back at most
//!   one, granted with odds that fall with the load, so under a steady load a caller's chips drain
//!   and the paper's rule drops requests no replica refused. Measured with the drop: bench/
//!   reliability.sh failed 0.9 % of requests with no fault (issue #21), examples/peers.yaml's
//!   store succeeded 43 % (#23), examples/failures.yaml's one frontend 89 % and
//!   examples/bloc.yaml's 1x10 0.25 %. The paper's own footnote 2 suspects that its gateway
//!   "incorrectly drop[s] requests even though the downstream nodes are not full".
//! - **A 429 is a last resort, not a wall.** An endpoint that answered 429 is still backed off
//!   (tried after every endpoint that is not), but when all are, the request goes to the least
//!   loaded of them rather than being dropped: a 429 is a live replica's cheap answer about one
//!   moment, and with one caller (a single frontend, reliability.sh's one egress proxy) the
//!   occasional 429 of a replica that is not overloaded backs it off entirely for `reset`; with a
//!   replica lost, the other two were then both backed off often enough that the simulator dropped
//!   18 % of the requests (a 2 ms store at 200 req/s). An unreachable endpoint is no such resort.
//! - **Chips arrive on every response.** A chip only helps if the caller sees it, so our replicas
//!   decide the chip ([`Admission::grant_chip`](crate::admission::Admission::grant_chip)) and put it
//!   on every response, success or error, before the response head is sent. The published BLOC
//!   proxy sets its chip header after the response headers have gone out, so its callers never
//!   receive a chip and its Active list stays empty.
//! - **Only a success earns a chip.** A replica that fails every request at once (a black hole)
//!   has an empty queue, so its sidecar grants a chip on each 500; counted, those chips would make
//!   it the Active endpoint with the fewest requests in flight, and it would draw nearly every
//!   request. An error keeps the chips already held, a chip it carries is ignored.
//! - A chip that arrives while the endpoint is backing off (a response to an attempt sent before the
//!   429) is kept, but counts only once the back-off is over: a fresh refusal outweighs an older
//!   grant.
//! - Excluded endpoints (already tried by this request) are avoided as long as any other endpoint
//!   is Active, may be probed or is not backing off, as the paper retries "on a different Active
//!   list server if possible"; only then are the tried ones considered, in the same order (Active,
//!   probes, not backing off).

use super::ranked::{sorted_exclusions, RankedSet};
use super::{p2c, Balancer, InFlight, Pick};
use crate::config::{self, Check};
use crate::duration::text;
use crate::{nanos, EndpointId, Feedback, Outcome, Rng, Time};
use rand::Rng as _;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

/// Settings of [`Bloc`]; a file may leave out any of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BlocConfig {
    /// How long an endpoint that refused a request is backed off from, and how long an Inactive
    /// endpoint waits between probes (default 1 s).
    #[serde(with = "text")]
    pub reset: Duration,
}

impl BlocConfig {
    /// Checks the parameters; the error names the field.
    pub fn validate(&self) -> Check {
        config::positive("reset", self.reset)
    }
}

impl Default for BlocConfig {
    fn default() -> Self {
        BlocConfig { reset: Duration::from_secs(1) }
    }
}

/// What this caller knows of one endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Endpoint {
    /// Confidence chips received and not yet spent.
    chips: u32,
    /// Until when it is backed off: `reset` after it last refused a request (429 or unreachable).
    backoff_until: Nanos,
    /// When its probe timer expires: `reset` after it was last probed or refused a request.
    probe_at: Nanos,
    /// Whether its last refusal was being unreachable rather than a 429.
    unreachable: bool,
}

/// A time in nanoseconds: an endpoint's state in 32 bytes, so a pick reads fewer cache lines.
type Nanos = u64;

impl Endpoint {
    fn is_active(&self, now: Nanos) -> bool {
        self.chips > 0 && !self.backing_off(now)
    }

    /// Whether it refused a request (429 or unreachable) within the last `reset`.
    fn backing_off(&self, now: Nanos) -> bool {
        now < self.backoff_until
    }

    /// Whether its probe timer has run out (which matters only while it is Inactive).
    fn probe_due(&self, now: Nanos) -> bool {
        now >= self.probe_at
    }
}

/// The BLOC balancer: confidence chips, Active/Inactive endpoints, back-off and probes.
///
/// The Active and the probe-ready endpoints are kept as [`RankedSet`]s, up to date as of the last
/// pick (`as_of`), with a timer for each moment an endpoint's class changes by time alone (its
/// back-off or probe timer running out). A pick then reads "the i-th Active endpoint the request
/// has not tried" in O(k log n) for k tried endpoints, instead of sorting every endpoint into
/// lists, and draws exactly as that sort would have.
#[derive(Clone, Debug)]
pub struct Bloc {
    config: BlocConfig,
    endpoints: Vec<Endpoint>,
    in_flight: InFlight,
    active: RankedSet,
    /// Inactive endpoints whose probe timer has run out.
    probe_ready: RankedSet,
    /// Endpoints not backing off (Active or not): where a request goes when no endpoint is Active
    /// and none may be probed.
    open: RankedSet,
    /// Endpoints backing off after a 429, not after being unreachable: the last resort.
    refused: RankedSet,
    /// When endpoints may change class with time alone (stale entries are harmless).
    timers: BinaryHeap<Reverse<(Nanos, EndpointId)>>,
    /// The time the sets are up to date for.
    as_of: Nanos,
    /// Reused per pick: the tried endpoints, sorted, and those in each of the [`TIERS`].
    exclusions: Vec<EndpointId>,
    tried: [Vec<EndpointId>; 4],
}

/// The sets a pick reads, in order of preference, and how it draws from each: the Active endpoints
/// by P2C least-request, a probe uniformly, then the endpoints not backing off and those backing
/// off after a 429, by P2C least-request.
const TIERS: [Tier; 4] = [Tier::Active, Tier::ProbeReady, Tier::Open, Tier::Refused];

/// A class of endpoints a pick may choose from (an endpoint may be in more than one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tier {
    Active,
    ProbeReady,
    Open,
    Refused,
}

/// How a pick reached its endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Choice {
    /// An Active endpoint, paid for with a chip.
    Chip(EndpointId),
    /// A probe of an Inactive endpoint whose probe timer had expired.
    Probe(EndpointId),
    /// An endpoint neither Active nor due a probe, when nothing is: no chip to spend, no timer to
    /// restart.
    Free(EndpointId),
}

impl Bloc {
    /// A balancer over endpoints `0..endpoints`, all Inactive and ready to be probed.
    pub fn new(endpoints: usize, config: BlocConfig) -> Self {
        Bloc {
            config,
            endpoints: vec![Endpoint::default(); endpoints],
            in_flight: InFlight::new(endpoints),
            active: RankedSet::new(endpoints, false),
            probe_ready: RankedSet::new(endpoints, true),
            open: RankedSet::new(endpoints, true),
            refused: RankedSet::new(endpoints, false),
            timers: BinaryHeap::new(),
            as_of: 0,
            exclusions: Vec::new(),
            tried: Default::default(),
        }
    }

    /// Puts `e` in the set its state gives it as of `as_of`.
    fn classify(&mut self, e: EndpointId) {
        let state = self.endpoints[e];
        let active = state.is_active(self.as_of);
        let probe = !active && state.probe_due(self.as_of);
        let open = !state.backing_off(self.as_of);
        let refused = !open && !state.unreachable;
        let sets = [
            (&mut self.active, active),
            (&mut self.probe_ready, probe),
            (&mut self.open, open),
            (&mut self.refused, refused),
        ];
        for (set, member) in sets {
            if member {
                set.insert(e);
            } else {
                set.remove(e);
            }
        }
    }

    /// Changes `e`'s state, with timers for its new back-off and probe times.
    fn update(&mut self, e: EndpointId, change: impl FnOnce(&mut Endpoint)) {
        let before = self.endpoints[e];
        change(&mut self.endpoints[e]);
        let after = self.endpoints[e];
        for (old, new) in [(before.backoff_until, after.backoff_until), (before.probe_at, after.probe_at)] {
            if new != old && new > self.as_of {
                self.timers.push(Reverse((new, e)));
            }
        }
        self.classify(e);
    }

    /// Brings the sets up to `now`: the endpoints whose timers ran out change class. Time going
    /// back (a proxy's requests read the clock before taking the policy's lock) rebuilds them.
    fn advance(&mut self, now: Nanos) {
        if now < self.as_of {
            self.as_of = now;
            for e in 0..self.endpoints.len() {
                let Endpoint { backoff_until, probe_at, .. } = self.endpoints[e];
                self.timers.extend([backoff_until, probe_at].into_iter().filter(|&t| t > now).map(|t| Reverse((t, e))));
                self.classify(e);
            }
            return;
        }
        self.as_of = now;
        while let Some(&Reverse((t, e))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            self.classify(e);
        }
    }

    /// The choice: the first of the [`TIERS`] with an endpoint not in `exclude`, then the first
    /// with an excluded one. A tier is read only when the earlier ones offer nothing, so the Open
    /// tier gives an Inactive endpoint not due a probe. Each list is in id order, and only the list
    /// chosen from draws randomness.
    fn choose(&mut self, now: Time, rng: Rng<'_>, exclude: &[EndpointId]) -> Option<Choice> {
        self.advance(nanos(now));
        sorted_exclusions(exclude, self.endpoints.len(), &mut self.exclusions);
        // In the order of `TIERS`.
        let sets = [&self.active, &self.probe_ready, &self.open, &self.refused];
        for (set, tried) in sets.into_iter().zip(&mut self.tried) {
            tried.clear();
            tried.extend(self.exclusions.iter().copied().filter(|&e| set.contains(e)));
        }
        let in_flight = &self.in_flight;
        let draw = |tier: Tier, len: usize, at: &dyn Fn(usize) -> EndpointId, rng: Rng<'_>| match tier {
            Tier::Active => p2c(len, at, rng, |e| f64::from(in_flight.get(e))).map(Choice::Chip),
            Tier::ProbeReady => uniform(len, at, rng).map(Choice::Probe),
            Tier::Open | Tier::Refused => p2c(len, at, rng, |e| f64::from(in_flight.get(e))).map(Choice::Free),
        };
        for ((tier, set), tried) in TIERS.into_iter().zip(sets).zip(&self.tried) {
            let fresh = set.without(tried);
            if let Some(choice) = draw(tier, fresh.len(), &|i| fresh.get(i), &mut *rng) {
                return Some(choice);
            }
        }
        TIERS.into_iter().zip(&self.tried).find_map(|(tier, tried)| draw(tier, tried.len(), &|i| tried[i], &mut *rng))
    }

    /// Pays for a pick: a chip for an Active endpoint, a restarted probe timer for a probe, nothing
    /// otherwise.
    fn commit(&mut self, choice: Choice, now: Time) -> EndpointId {
        match choice {
            Choice::Chip(e) => {
                self.update(e, |state| state.chips -= 1);
                e
            }
            Choice::Probe(e) => {
                let probe_at = nanos(now.saturating_add(self.config.reset));
                self.update(e, |state| state.probe_at = probe_at);
                e
            }
            Choice::Free(e) => e,
        }
    }
}

/// One of a list of `len` read with `at`, uniformly at random.
fn uniform(len: usize, at: impl Fn(usize) -> EndpointId, rng: Rng<'_>) -> Option<EndpointId> {
    (len > 0).then(|| at(rng.gen_range(0..len)))
}

impl Balancer for Bloc {
    fn pick(&mut self, pick: &mut Pick<'_>) -> Option<EndpointId> {
        let choice = self.choose(pick.now, &mut *pick.rng, pick.exclude)?;
        Some(self.commit(choice, pick.now))
    }

    fn takes_chips(&self) -> bool {
        true
    }

    fn grow(&mut self, endpoints: usize) {
        let old = self.endpoints.len();
        if endpoints <= old {
            return;
        }
        self.endpoints.resize(endpoints, Endpoint::default());
        self.in_flight.grow(endpoints);
        self.active.grow(endpoints);
        self.probe_ready.grow(endpoints);
        self.open.grow(endpoints);
        self.refused.grow(endpoints);
        // New endpoints start Inactive and ready to be probed, as in `Bloc::new`.
        (old..endpoints).for_each(|e| self.classify(e));
    }
    fn on_send(&mut self, endpoint: EndpointId, _now: Time) {
        self.in_flight.inc(endpoint);
    }

    fn on_feedback(&mut self, endpoint: EndpointId, now: Time, feedback: &Feedback) {
        self.in_flight.dec(endpoint);
        if matches!(feedback.outcome, Outcome::Rejected | Outcome::Unavailable) {
            let until = nanos(now.saturating_add(self.config.reset));
            let unreachable = feedback.outcome == Outcome::Unavailable;
            self.update(endpoint, |state| {
                *state = Endpoint { chips: 0, backoff_until: until, probe_at: until, unreachable }
            });
        } else if feedback.chip && feedback.outcome == Outcome::Success {
            self.update(endpoint, |state| state.chips = state.chips.saturating_add(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_pcg::Pcg64Mcg;

    const MS: Duration = Duration::from_millis(1);
    const SEC: Duration = Duration::from_secs(1);

    /// A BLOC balancer with the default 1 s reset, and its seeded rng.
    fn bloc(endpoints: usize) -> (Bloc, Pcg64Mcg) {
        (Bloc::new(endpoints, BlocConfig::default()), Pcg64Mcg::seed_from_u64(17))
    }

    fn pick_at(b: &mut Bloc, rng: &mut Pcg64Mcg, now: Time, exclude: &[EndpointId]) -> Option<EndpointId> {
        b.pick(&mut Pick { now, rng, exclude, true_loads: None })
    }

    /// A successful answer from `endpoint` at `now`, carrying a chip or not.
    fn answer(b: &mut Bloc, endpoint: EndpointId, now: Time, chip: bool) {
        b.on_feedback(endpoint, now, &Feedback::success(MS).with_chip(chip));
    }

    /// Gives `endpoint` `chips` chips, through answers at `now`.
    fn grant(b: &mut Bloc, endpoint: EndpointId, now: Time, chips: u32) {
        (0..chips).for_each(|_| answer(b, endpoint, now, true));
    }

    #[test]
    fn the_default_reset_is_one_second() {
        assert_eq!(BlocConfig::default().reset, SEC);
    }

    /// The probe timers of every endpoint, in nanoseconds.
    fn probe_timers(b: &Bloc) -> Vec<Nanos> {
        b.endpoints.iter().map(|state| state.probe_at).collect()
    }

    #[test]
    fn the_first_requests_probe_each_endpoint_once() {
        let (mut b, mut rng) = bloc(3);
        // No chips anywhere, every probe timer expired: three picks probe three distinct endpoints.
        let mut probed: Vec<_> = (0..3).filter_map(|_| pick_at(&mut b, &mut rng, Time::ZERO, &[])).collect();
        probed.sort_unstable();
        assert_eq!(probed, [0, 1, 2]);
        assert_eq!(probe_timers(&b), [nanos(SEC); 3]);
        // Every timer restarted at 0 and no chip came back: the fourth request is still sent (no
        // endpoint refused one), without restarting a timer.
        assert!(pick_at(&mut b, &mut rng, 999 * MS, &[]).is_some());
        assert_eq!(probe_timers(&b), [nanos(SEC); 3]);
        // One reset interval later the endpoints are probed again.
        assert!(pick_at(&mut b, &mut rng, SEC, &[]).is_some());
        assert_eq!(probe_timers(&b).iter().filter(|&&t| t == nanos(2 * SEC)).count(), 1);
    }

    #[test]
    fn without_a_chip_or_a_due_probe_a_request_is_sent_unless_every_endpoint_is_unreachable() {
        let (mut b, mut rng) = bloc(2);
        // Both probed at t = 0; 0 answers at 5 ms without a chip, 1's probe is still out.
        for _ in 0..2 {
            let e = pick_at(&mut b, &mut rng, Time::ZERO, &[]).expect("both may be probed");
            b.on_send(e, Time::ZERO);
        }
        answer(&mut b, 0, 5 * MS, false);
        // Nothing Active, no probe due before 1 s, and neither refused a request: not a drop (the
        // paper's §IV-B would drop it) but P2C least-request, which compares both: 0 has nothing
        // in flight, 1 one. No chip is spent and no timer restarts.
        assert_eq!(pick_at(&mut b, &mut rng, 10 * MS, &[]), Some(0));
        assert_eq!(probe_timers(&b), [nanos(SEC); 2]);
        b.on_send(0, 10 * MS);
        // A retry of that request avoids 0, which it tried.
        assert_eq!(pick_at(&mut b, &mut rng, 10 * MS, &[0]), Some(1));
        // 0 refuses at 20 ms: backed off until 1.02 s, so 1 is the only endpoint not backing off.
        b.on_feedback(0, 20 * MS, &Feedback::new(Outcome::Rejected, MS));
        assert_eq!(pick_at(&mut b, &mut rng, 30 * MS, &[]), Some(1));
        // A retry that tried 1 goes to 0 rather than back to 1: a 429 is a live replica's answer,
        // and 0 is the last resort only after the untried endpoints.
        assert_eq!(pick_at(&mut b, &mut rng, 30 * MS, &[1]), Some(0));
        // 1 refuses too: both are backing off after a 429, and the one with fewer requests in
        // flight (0: none, 1: one) takes the request, without a chip or a probe.
        b.on_feedback(1, 40 * MS, &Feedback::new(Outcome::Rejected, MS));
        b.on_send(1, 40 * MS);
        assert_eq!(pick_at(&mut b, &mut rng, 50 * MS, &[]), Some(0));
        assert_eq!(probe_timers(&b), [nanos(1020 * MS), nanos(1040 * MS)]);
        // 0 becomes unreachable at 60 ms: 1, backing off after a 429, is the one endpoint left.
        b.on_feedback(0, 60 * MS, &Feedback::new(Outcome::Unavailable, MS));
        assert_eq!(pick_at(&mut b, &mut rng, 70 * MS, &[]), Some(1));
        // 1 becomes unreachable too: nothing may be tried, and only now is the request dropped.
        b.on_feedback(1, 80 * MS, &Feedback::new(Outcome::Unavailable, MS));
        assert_eq!(pick_at(&mut b, &mut rng, 90 * MS, &[]), None);
        assert_eq!(pick_at(&mut b, &mut rng, 1059 * MS, &[]), None);
        // At 1.06 s 0's back-off is over and its probe is due: a probe, which restarts its timer.
        assert_eq!(pick_at(&mut b, &mut rng, 1060 * MS, &[]), Some(0));
        assert_eq!(probe_timers(&b), [nanos(2060 * MS), nanos(1080 * MS)]);
        // Until 1.08 s, 0 is the one endpoint not backing off.
        assert_eq!(pick_at(&mut b, &mut rng, 1070 * MS, &[]), Some(0));
    }

    #[test]
    fn a_chip_makes_an_endpoint_active_and_a_pick_spends_it() {
        let (mut b, mut rng) = bloc(3);
        // Probe all three at t = 0.
        (0..3).for_each(|_| assert!(pick_at(&mut b, &mut rng, Time::ZERO, &[]).is_some()));
        // Endpoint 1's probe comes back with a chip at 10 ms: 1 is Active.
        answer(&mut b, 1, 10 * MS, true);
        assert!(b.endpoints[1].is_active(nanos(10 * MS)));
        // The next request goes to 1, the only Active endpoint, and spends the chip.
        assert_eq!(pick_at(&mut b, &mut rng, 20 * MS, &[]), Some(1));
        assert_eq!(b.endpoints[1].chips, 0);
    }

    #[test]
    fn a_probe_does_not_make_an_endpoint_active() {
        let (mut b, mut rng) = bloc(1);
        // The probe at t = 0 succeeds at 5 ms, but without a chip.
        assert_eq!(pick_at(&mut b, &mut rng, Time::ZERO, &[]), Some(0));
        b.on_send(0, Time::ZERO);
        answer(&mut b, 0, 5 * MS, false);
        // Still Inactive, and its probe timer runs from the probe: at 0.5 s a request still goes
        // there (it refused nothing), but that is not a probe.
        assert!(!b.endpoints[0].is_active(nanos(500 * MS)));
        assert_eq!(pick_at(&mut b, &mut rng, 500 * MS, &[]), Some(0));
        assert_eq!(b.endpoints[0].probe_at, nanos(SEC));
        // At 1 s it is probed again.
        assert_eq!(pick_at(&mut b, &mut rng, SEC, &[]), Some(0));
        assert_eq!(b.endpoints[0].probe_at, nanos(2 * SEC));
    }

    #[test]
    fn active_endpoints_are_chosen_by_p2c_least_request() {
        let (mut b, mut rng) = bloc(2);
        // Both endpoints hold chips; 0 has two attempts in flight, 1 has one.
        grant(&mut b, 0, Time::ZERO, 5);
        grant(&mut b, 1, Time::ZERO, 5);
        (0..2).for_each(|_| b.on_send(0, Time::ZERO));
        b.on_send(1, Time::ZERO);
        // P2C over two compares both: 1 wins, and pays a chip.
        assert_eq!(pick_at(&mut b, &mut rng, Time::ZERO, &[]), Some(1));
        assert_eq!((b.endpoints[0].chips, b.endpoints[1].chips), (5, 4));
        // Both of 0's attempts end (without chips): 0 wins now.
        (0..2).for_each(|_| answer(&mut b, 0, MS, false));
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(0));
        assert_eq!((b.endpoints[0].chips, b.endpoints[1].chips), (4, 4));
    }

    #[test]
    fn active_endpoints_come_before_probes() {
        let (mut b, mut rng) = bloc(2);
        let mut twin = Pcg64Mcg::seed_from_u64(17);
        // 1 holds one chip; 0 is Inactive with an expired probe timer.
        grant(&mut b, 1, Time::ZERO, 1);
        // The only Active endpoint is taken (one candidate: no draw).
        assert_eq!(pick_at(&mut b, &mut rng, Time::ZERO, &[]), Some(1));
        // 1 is spent. Neither was ever probed, so both may be: one drawn uniformly from [0, 1].
        let expected = [0, 1][twin.gen_range(0..2)];
        assert_eq!(pick_at(&mut b, &mut rng, Time::ZERO, &[]), Some(expected));
        assert_eq!(b.endpoints[expected].probe_at, nanos(SEC));
        // The other one is probed next.
        assert_eq!(pick_at(&mut b, &mut rng, Time::ZERO, &[]), Some(1 - expected));
        assert_eq!(probe_timers(&b), [nanos(SEC); 2]);
    }

    #[test]
    fn a_429_drops_the_chips_and_backs_off_for_the_reset_interval() {
        let (mut b, mut rng) = bloc(2);
        // 0 holds three chips, 1 none and was probed at t = 1.5 s.
        grant(&mut b, 0, Time::ZERO, 3);
        b.update(1, |state| state.probe_at = nanos(2500 * MS));
        // At t = 2 s, 0 answers 429: its chips are gone and its back-off and probe timer start.
        b.on_send(0, 2 * SEC);
        b.on_feedback(0, 2 * SEC, &Feedback::new(Outcome::Rejected, MS).with_chip(true));
        assert_eq!(
            b.endpoints[0],
            Endpoint { chips: 0, backoff_until: nanos(3 * SEC), probe_at: nanos(3 * SEC), unreachable: false }
        );
        // Nothing Active and no probe timer expired: 1, which is not backing off, takes it.
        assert_eq!(pick_at(&mut b, &mut rng, 2 * SEC, &[]), Some(1));
        assert_eq!(b.endpoints[1].probe_at, nanos(2500 * MS));
        // At 2.2 s a chip arrives from 0 on an older attempt: kept, but 0 is still backing off.
        answer(&mut b, 0, 2200 * MS, true);
        assert_eq!(b.endpoints[0].chips, 1);
        // At 2.5 s, 1's probe timer has expired: 1 is probed, 0 is still avoided.
        assert_eq!(pick_at(&mut b, &mut rng, 2500 * MS, &[]), Some(1));
        assert_eq!(b.endpoints[1].probe_at, nanos(3500 * MS));
        assert_eq!(pick_at(&mut b, &mut rng, 2999 * MS, &[]), Some(1));
        // At 3 s the back-off is over and 0 holds a chip: Active again.
        assert_eq!(pick_at(&mut b, &mut rng, 3 * SEC, &[]), Some(0));
    }

    #[test]
    fn an_unreachable_endpoint_is_backed_off_like_a_429() {
        let (mut b, mut rng) = bloc(1);
        grant(&mut b, 0, Time::ZERO, 2);
        b.on_feedback(0, SEC, &Feedback::new(Outcome::Unavailable, MS));
        let unreachable =
            Endpoint { chips: 0, backoff_until: nanos(2 * SEC), probe_at: nanos(2 * SEC), unreachable: true };
        assert_eq!(b.endpoints[0], unreachable);
        // Unlike one that answered 429, it is no last resort: the request is dropped.
        assert_eq!(pick_at(&mut b, &mut rng, 1999 * MS, &[]), None);
        // After the reset interval it is probed, not Active.
        assert_eq!(pick_at(&mut b, &mut rng, 2 * SEC, &[]), Some(0));
        assert_eq!(b.endpoints[0].chips, 0);
    }

    #[test]
    fn errors_and_timeouts_keep_the_chips_but_an_error_brings_none() {
        let (mut b, _) = bloc(1);
        grant(&mut b, 0, Time::ZERO, 2);
        b.on_feedback(0, SEC, &Feedback::new(Outcome::TimedOut, SEC));
        b.on_feedback(0, SEC, &Feedback::new(Outcome::Error, MS).with_chip(true));
        assert_eq!(b.endpoints[0], Endpoint { chips: 2, ..Endpoint::default() });
    }

    #[test]
    fn a_retry_prefers_an_untried_endpoint_even_a_probe() {
        let (mut b, mut rng) = bloc(3);
        // 0 and 1 Active, 2 Inactive with an expired probe timer.
        grant(&mut b, 0, Time::ZERO, 2);
        grant(&mut b, 1, Time::ZERO, 2);
        // A retry after trying 0 goes to the other Active endpoint.
        assert_eq!(pick_at(&mut b, &mut rng, Time::ZERO, &[0]), Some(1));
        // After trying 0 and 1: a probe of 2 rather than a second try of an Active endpoint.
        assert_eq!(pick_at(&mut b, &mut rng, Time::ZERO, &[0, 1]), Some(2));
        // Tried everything, nothing to probe: back to a tried Active endpoint, 0 or 1.
        let again = pick_at(&mut b, &mut rng, Time::ZERO, &[0, 1, 2]).expect("0 and 1 hold chips");
        assert!(again < 2);
        // Tried 0 only, 1 spent, 2 probed: an untried endpoint without a chip, the less loaded
        // of 1 and 2, comes before the tried 0.
        b.update(1, |state| *state = Endpoint { chips: 0, probe_at: nanos(SEC), ..*state });
        b.update(0, |state| state.chips = 1);
        b.on_send(2, Time::ZERO);
        assert_eq!(pick_at(&mut b, &mut rng, Time::ZERO, &[0]), Some(1));
        // 1 and 2 are unreachable: the tried 0, the one Active endpoint, is the only option left.
        b.on_feedback(1, Time::ZERO, &Feedback::new(Outcome::Unavailable, MS));
        b.on_feedback(2, Time::ZERO, &Feedback::new(Outcome::Unavailable, MS));
        assert_eq!(pick_at(&mut b, &mut rng, Time::ZERO, &[0]), Some(0));
    }

    #[test]
    fn feedback_without_a_send_does_not_underflow() {
        let (mut b, mut rng) = bloc(2);
        grant(&mut b, 0, Time::ZERO, 5);
        grant(&mut b, 1, Time::ZERO, 5);
        // Those answers had no matching sends: both counts stay at 0.
        assert_eq!((b.in_flight.get(0), b.in_flight.get(1)), (0, 0));
        b.on_send(0, Time::ZERO);
        assert_eq!(pick_at(&mut b, &mut rng, Time::ZERO, &[]), Some(1));
    }

    #[test]
    fn no_endpoints_means_no_pick() {
        let (mut b, mut rng) = bloc(0);
        assert_eq!(pick_at(&mut b, &mut rng, Time::ZERO, &[]), None);
    }
}
