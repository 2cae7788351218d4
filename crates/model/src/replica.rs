//! What one replica of a service does to the requests it receives: which meet a fault, and how
//! long each one's local work takes. The simulator and `tailguard serve` both use it, so a
//! service behaves the same in virtual time and on a real socket.
//!
//! Random draws are common random numbers, so variants compared on one seed meet the same luck.
//! The simulator keys each request's draws by the request itself ([`ReplicaModel::arrive_as`],
//! [`ReplicaModel::work_time_as`]: the same attempt of the same user request draws the same fate
//! and service time at any replica, whatever the callers' policies did before it);
//! `tailguard serve`, which cannot know the request, draws from one stream per replica in arrival
//! order. Draws happen in a fixed order: one per `error` and `lost` fault on arrival; the service
//! time (the work per attempt), then one per `fraction` slow fault (and one of its `service_time`
//! if it picks the request), when the work starts; chips (by the caller of [`ReplicaModel::rng`])
//! from the replica's stream when the answer leaves. The work per request (`work.per_request`)
//! is drawn from a stream keyed by the request alone, so every attempt of a request, at any
//! replica, draws the same ([`ReplicaModel::work_time_of`]); a request's route
//! ([`pick_route`]) is drawn from its key too. A fault draws whether or not it is active (its window,
//! its replica), so windows change no other request's luck.
//!
//! Windows are checked against the arrival for `error`, `lost` and `down`, against the start of
//! the work for `slow`; a `hang` holds whatever would start or end in it until it closes
//! ([`ReplicaModel::resume_at`]).

use crate::schema::{Fault, FaultKind, Route, Service};
use crate::{LatencyCurve, ModelError, Sampler};
use rand::{Rng as _, SeedableRng};
use rand_pcg::Pcg64Mcg;
use std::path::Path;
use std::time::Duration;

/// The longest local work a request is given: a heavy-tailed draw is capped here.
pub const MAX_WORK: Duration = Duration::from_secs(24 * 3600);

/// What happens to a request after its local work, decided as it arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// It makes its calls and answers.
    Normal,
    /// It answers 500 after its local work, without making its calls (an `error` fault).
    Error,
    /// It answers 500 this long after it arrived, without waiting for a worker or doing any work
    /// (an `error` fault with `after`).
    ErrorAfter(Duration),
    /// It is never answered (a `lost` fault).
    Lost,
}

/// A request as it arrives: its place among the requests the replica received, and its fate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// 1 for the first request received, 2 for the second, …
    pub ordinal: u64,
    /// What happens after its local work.
    pub fate: Fate,
}

/// Service times, latency model and faults of one replica, with its own random stream.
#[derive(Debug)]
pub struct ReplicaModel {
    replica: u32,
    /// Requests the replica works on at once (0: unlimited), from its group if it has one.
    workers: u32,
    /// The work of a request of no route (index 0) and of each route (index r + 1).
    work: Vec<WorkSamplers>,
    curve: LatencyCurve,
    faults: Vec<Fault>,
    /// The sampler of each slow fault that replaces the service time, by fault index.
    slow_samplers: Vec<Option<Sampler>>,
    rng: Pcg64Mcg,
    /// The service's seed for draws keyed by request.
    keyed: u64,
    received: u64,
}

/// Salts that keep a request's arrival and work draws apart.
const ARRIVE_SALT: u64 = 0x3C6E_F372_FE94_F82B;
const WORK_SALT: u64 = 0xA54F_F53A_5F1D_36F1;
const REQUEST_SALT: u64 = 0x510E_527F_ADE6_82D1;
const ROUTE_SALT: u64 = 0x9B05_688C_2B3E_6C1F;

/// The samplers of one kind of request's local work.
#[derive(Debug)]
struct WorkSamplers {
    per_request: Option<Sampler>,
    per_attempt: Option<Sampler>,
}

/// The route of a request whose draws are keyed by `key` (the simulator's request key, the load
/// generator's request number made one: [`child_key`]`(0, n)` for the n-th request), drawn by
/// the routes' weights; `None` when there are no routes.
pub fn pick_route(routes: &[Route], key: u64) -> Option<usize> {
    let total: f64 = routes.iter().map(|r| r.weight).sum();
    if routes.is_empty() || total.is_nan() || total <= 0.0 {
        return None;
    }
    let u = (mix(key ^ ROUTE_SALT) >> 11) as f64 / (1u64 << 53) as f64 * total;
    let mut below = 0.0;
    for (i, r) in routes.iter().enumerate() {
        below += r.weight;
        if u < below {
            return Some(i);
        }
    }
    Some(routes.len() - 1)
}

impl ReplicaModel {
    /// Replica `replica` of `service` (as [`Service::for_replica`] gives it: its group's fields and
    /// faults), the `service_index`-th service of its file, in a run seeded with `seed` whose
    /// measured part ends at `horizon` (for latency-model ramps); `base_dir` resolves empirical
    /// distributions' files.
    pub fn new(
        service: &Service,
        service_index: usize,
        replica: u32,
        seed: u64,
        horizon: Option<Duration>,
        base_dir: &Path,
    ) -> Result<ReplicaModel, ModelError> {
        let service = service.for_replica(replica);
        let stream = seed ^ 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(service_index as u64 + 1);
        let rng = Pcg64Mcg::seed_from_u64(stream ^ (u64::from(replica) + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
        let slow_samplers = service
            .faults
            .iter()
            .map(|f| match &f.kind {
                FaultKind::Slow { service_time: Some(d), .. } => d.sampler(base_dir).map(Some),
                _ => Ok(None),
            })
            .collect::<Result<_, _>>()?;
        let work = (0..=service.routes.len())
            .map(|slot| {
                let w = service.work_of(slot.checked_sub(1));
                let sampler =
                    |d: &Option<crate::schema::Distribution>| d.as_ref().map(|d| d.sampler(base_dir)).transpose();
                Ok(WorkSamplers { per_request: sampler(&w.per_request)?, per_attempt: sampler(&w.per_attempt)? })
            })
            .collect::<Result<_, ModelError>>()?;
        Ok(ReplicaModel {
            replica,
            workers: service.workers,
            work,
            curve: service.latency_model.curve(horizon, stream)?,
            faults: service.faults,
            slow_samplers,
            rng,
            keyed: stream,
            received: 0,
        })
    }

    /// Requests the replica works on at once; 0 means unlimited.
    pub fn workers(&self) -> u32 {
        self.workers
    }

    /// The faults this replica meets at some time (the service's and its group's, less those
    /// for another replica), in file order.
    pub fn faults(&self) -> impl Iterator<Item = &Fault> {
        self.faults.iter().filter(|f| f.applies_to(self.replica))
    }

    /// Whether the replica is down at `now` (since the run started): a `down` fault for it, or for
    /// all replicas, covers `now`.
    pub fn is_down(&self, now: Duration) -> bool {
        self.faults.iter().any(|f| f.kind == FaultKind::Down {} && f.active(self.replica, now))
    }

    /// The first time from `now` on when no `hang` window holds the replica: `now` itself unless
    /// one covers it, else the end of the window (of the next one, if windows chain). Work does
    /// not start, and answers do not leave, before it.
    pub fn resume_at(&self, now: Duration) -> Duration {
        let mut at = now;
        loop {
            let end = self
                .faults
                .iter()
                .filter(|f| f.kind == FaultKind::Hang {} && f.active(self.replica, at))
                .filter_map(|f| f.until.map(|u| u.get()))
                .max();
            match end {
                Some(end) if end > at => at = end,
                _ => return at,
            }
        }
    }

    /// Counts in a request arriving at `now` (since the run started) and draws its fate: one draw
    /// per `error` and `lost` fault, in file order; a lost request stays lost, and the first
    /// active `error` fault that picks it decides how it errs.
    pub fn arrive(&mut self, now: Duration) -> Arrival {
        let fate = fate(&self.faults, self.replica, now, &mut self.rng);
        self.received += 1;
        Arrival { ordinal: self.received, fate }
    }

    /// [`ReplicaModel::arrive`] with the draws keyed by `request` (any number that identifies the
    /// request and attempt in the run) instead of taken from the replica's stream.
    pub fn arrive_as(&mut self, request: u64, now: Duration) -> Arrival {
        // Without faults there is nothing to draw, and no stream to seed.
        let fate = if self.faults.is_empty() {
            Fate::Normal
        } else {
            fate(&self.faults, self.replica, now, &mut self.keyed_rng(request ^ ARRIVE_SALT))
        };
        self.received += 1;
        Arrival { ordinal: self.received, fate }
    }

    /// The local work of the `ordinal`-th request, starting at `now` (since the run started): a
    /// service-time draw × the latency factor at `now`, unless a slow fault active at `now` picks
    /// the request (`every: n` picks ordinals n, 2n, …; `fraction` draws), capped at [`MAX_WORK`].
    pub fn work_time(&mut self, ordinal: u64, now: Duration) -> Duration {
        self.work_time_routed(ordinal, now, None, None)
    }

    /// [`ReplicaModel::work_time`] for a request of `route` (an index into the service's
    /// routes, or none), whose work per request is keyed by `request` (`tailguard serve`: from
    /// the request's id; without one it is drawn from the replica's stream like the rest).
    pub fn work_time_routed(
        &mut self,
        ordinal: u64,
        now: Duration,
        route: Option<usize>,
        request: Option<u64>,
    ) -> Duration {
        // A copy advanced and put back: `work` borrows the rest of the model.
        let mut rng = self.rng.clone();
        let time = self.work(ordinal, now, &mut rng, route, request);
        self.rng = rng;
        time
    }

    /// [`ReplicaModel::work_time`] with the draws keyed by `request`, as in
    /// [`ReplicaModel::arrive_as`].
    pub fn work_time_as(&mut self, ordinal: u64, now: Duration, request: u64) -> Duration {
        let mut rng = self.keyed_rng(request ^ WORK_SALT);
        self.work(ordinal, now, &mut rng, None, None)
    }

    /// [`ReplicaModel::work_time_as`] for an attempt keyed by `attempt` of a request of `route`
    /// keyed by `request` (its work per request is drawn from that key alone).
    pub fn work_time_of(
        &mut self,
        ordinal: u64,
        now: Duration,
        attempt: u64,
        route: Option<usize>,
        request: u64,
    ) -> Duration {
        let mut rng = self.keyed_rng(attempt ^ WORK_SALT);
        self.work(ordinal, now, &mut rng, route, Some(request))
    }

    /// A stream for one request's draws: two mixes of the key make the 128-bit state, cheaper
    /// than `seed_from_u64`'s expansion (one per attempt adds up over millions of requests).
    fn keyed_rng(&self, key: u64) -> Pcg64Mcg {
        let key = self.keyed ^ key;
        Pcg64Mcg::new(u128::from(mix(key)) << 64 | u128::from(mix(!key)))
    }

    fn work(
        &mut self,
        ordinal: u64,
        now: Duration,
        rng: &mut Pcg64Mcg,
        route: Option<usize>,
        request: Option<u64>,
    ) -> Duration {
        let samplers = &self.work[route.map_or(0, |r| r + 1).min(self.work.len() - 1)];
        let mut base = samplers.per_attempt.as_ref().map_or(Duration::ZERO, |s| s.sample(rng));
        if let Some(per_request) = &samplers.per_request {
            base = base.saturating_add(match request {
                Some(key) => per_request.sample(&mut self.keyed_rng(key ^ REQUEST_SALT)),
                None => per_request.sample(rng),
            });
        }
        let mut time = scale(base, self.curve.factor(now));
        for (f, slow) in self.faults.iter().zip(&self.slow_samplers) {
            if let FaultKind::Slow { fraction, every, factor, .. } = &f.kind {
                let hit = match (every, fraction) {
                    (Some(n), _) => *n > 0 && ordinal % u64::from(*n) == 0,
                    (None, Some(p)) => rng.gen::<f64>() < *p,
                    (None, None) => false,
                };
                if hit {
                    // Drawn even outside the window, so the draws after it stay in step.
                    let slowed = match (slow, factor) {
                        (Some(sampler), _) => sampler.sample(rng),
                        (None, Some(k)) => scale(time, *k),
                        (None, None) => time,
                    };
                    if f.active(self.replica, now) {
                        time = slowed;
                    }
                }
            }
        }
        time.min(MAX_WORK)
    }

    /// The replica's random stream, for the draws its driver makes (BLOC chips).
    pub fn rng(&mut self) -> &mut Pcg64Mcg {
        &mut self.rng
    }
}

/// The key of the `n`-th child of `parent` (a request's calls, a call's attempts) for
/// [`ReplicaModel::arrive_as`]: well mixed, so nearby keys draw unrelated luck.
pub fn child_key(parent: u64, n: u64) -> u64 {
    mix(parent ^ n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// splitmix64's finaliser: nearby inputs give unrelated outputs.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The fate of a request arriving at `replica` at `now`: one draw per `error` and `lost` fault, in
/// file order, whether active or not; a lost request stays lost, and the first active `error`
/// fault that picks it decides how it errs.
fn fate(faults: &[Fault], replica: u32, now: Duration, rng: &mut Pcg64Mcg) -> Fate {
    let mut fate = Fate::Normal;
    for f in faults {
        // The draw comes first in each guard: it is made whatever the rest says.
        match &f.kind {
            FaultKind::Error { rate, after }
                if rng.gen::<f64>() < *rate && fate == Fate::Normal && f.active(replica, now) =>
            {
                fate = after.map_or(Fate::Error, |after| Fate::ErrorAfter(after.get()));
            }
            FaultKind::Lost { fraction } if rng.gen::<f64>() < *fraction && f.active(replica, now) => fate = Fate::Lost,
            _ => {}
        }
    }
    fate
}

/// `time × factor`, never panicking: a negative factor or NaN counts as 0, an overflow as
/// [`MAX_WORK`].
fn scale(time: Duration, factor: f64) -> Duration {
    if factor == 1.0 {
        return time.min(MAX_WORK); // exact, and the common case
    }
    let factor = if factor.is_nan() { 0.0 } else { factor.max(0.0) };
    Duration::try_from_secs_f64(time.as_secs_f64() * factor).unwrap_or(MAX_WORK).min(MAX_WORK)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(yaml: &str, index: u32) -> ReplicaModel {
        let service: Service = serde_yaml_ng::from_str(yaml).expect("a service");
        ReplicaModel::new(&service, 0, index, 7, None, Path::new(".")).expect("builds")
    }

    #[test]
    fn keyed_draws_depend_on_the_request_alone() {
        let yaml = "{service_time: {dist: exponential, mean: 10ms}, faults: [{kind: lost, fraction: 0.5}]}";
        let (mut a, mut b) = (replica(yaml, 0), replica(yaml, 1));
        // Replica 1 has seen other requests first; request 42 still meets the same luck there.
        for r in 0..5 {
            b.arrive_as(r, Duration::ZERO);
        }
        let fates_a: Vec<Fate> = (40..60).map(|r| a.arrive_as(r, Duration::ZERO).fate).collect();
        let fates_b: Vec<Fate> = (40..60).map(|r| b.arrive_as(r, Duration::ZERO).fate).collect();
        assert_eq!(fates_a, fates_b);
        assert!(fates_a.contains(&Fate::Lost) && fates_a.contains(&Fate::Normal));
        assert_eq!(a.work_time_as(1, Duration::ZERO, 42), b.work_time_as(9, Duration::ZERO, 42));
        assert_ne!(a.work_time_as(1, Duration::ZERO, 42), a.work_time_as(1, Duration::ZERO, 43));
        // The ordinal still counts the arrivals at this replica.
        assert_eq!(b.arrive_as(42, Duration::ZERO).ordinal, 26);
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn faults_act_in_their_window_on_their_replica_and_draw_outside_it() {
        let yaml = "{service_time: {dist: exponential, mean: 10ms}, faults: [\
            {kind: lost, fraction: 0.5, from: 1s, until: 2s}, {kind: error, after: 5ms, replica: 1}, \
            {kind: slow, fraction: 0.5, factor: 10, from: 1s}]}";
        let (mut zero, mut one) = (replica(yaml, 0), replica(yaml, 1));
        let plain = "{service_time: {dist: exponential, mean: 10ms}}";
        // Outside the lost window, replica 0 loses nothing; inside, about half.
        assert!((0..50).all(|r| zero.arrive_as(r, secs(0.5)).fate == Fate::Normal));
        let lost = (0..50).filter(|&r| zero.arrive_as(r, secs(1.5)).fate == Fate::Lost).count();
        assert!((10..40).contains(&lost), "{lost}");
        // Replica 1 errs at once, unless lost in the window (a lost request stays lost).
        assert_eq!(one.arrive_as(7, secs(0.5)).fate, Fate::ErrorAfter(Duration::from_millis(5)));
        assert!((0..50).all(|r| one.arrive_as(r, secs(1.5)).fate != Fate::Normal));
        // Before the slow window the work is the plain service time, the same draw as a replica
        // without faults makes (the slow fault's draw comes after it).
        let mut clean = replica(plain, 0);
        assert_eq!(zero.work_time_as(1, secs(0.5), 3), clean.work_time_as(1, secs(0.5), 3));
        let slowed = (0..50).filter(|&r| zero.work_time_as(1, secs(1.5), r) > clean.work_time_as(1, secs(1.5), r));
        assert!((10..40).contains(&slowed.count()));
    }

    #[test]
    fn a_hang_holds_the_replica_until_its_windows_close() {
        let yaml = "{faults: [{kind: hang, replica: 0, from: 1s, until: 2s}, {kind: hang, from: 2s, until: 2.5s}, \
            {kind: down, replica: 1, from: 3s, to: 4s}]}";
        let (zero, one) = (replica(yaml, 0), replica(yaml, 1));
        assert_eq!(zero.resume_at(secs(0.5)), secs(0.5));
        // Chained windows: the first ends where the second begins.
        assert_eq!(zero.resume_at(secs(1.25)), secs(2.5));
        assert_eq!(one.resume_at(secs(1.25)), secs(1.25));
        assert_eq!(one.resume_at(secs(2.0)), secs(2.5));
        assert_eq!(zero.resume_at(secs(2.5)), secs(2.5));
        assert!(one.is_down(secs(3.0)) && !one.is_down(secs(4.0)) && !zero.is_down(secs(3.5)));
        assert_eq!(zero.faults().count(), 2);
        assert_eq!(zero.faults().next().unwrap().to_string(), "hang on replica 0 from 1s until 2s");
    }

    #[test]
    fn a_group_gives_its_replicas_their_own_fields_and_faults() {
        let yaml = "{replicas: 4, workers: 8, service_time: {dist: constant, value: 10ms}, faults: [{kind: lost, fraction: 0}], \
            groups: {slow: {replicas: \"1-2\", workers: 2, service_time: {dist: constant, value: 20ms}, faults: [{kind: error}]}}}";
        let (mut zero, mut two) = (replica(yaml, 0), replica(yaml, 2));
        assert_eq!((zero.workers(), two.workers()), (8, 2));
        assert_eq!(zero.work_time_as(1, Duration::ZERO, 1), Duration::from_millis(10));
        assert_eq!(two.work_time_as(1, Duration::ZERO, 1), Duration::from_millis(20));
        assert_eq!(zero.arrive_as(1, Duration::ZERO).fate, Fate::Normal);
        assert_eq!(two.arrive_as(1, Duration::ZERO).fate, Fate::Error);
        assert_eq!(
            two.faults().map(|f| f.to_string()).collect::<Vec<_>>(),
            ["lost (fraction 0) for the whole run", "error (rate 1, after the work) for the whole run"]
        );
    }

    #[test]
    fn scale_never_panics() {
        let second = Duration::from_secs(1);
        assert_eq!(scale(second, f64::NAN), Duration::ZERO);
        assert_eq!(scale(second, -3.0), Duration::ZERO);
        assert_eq!(scale(second, f64::INFINITY), MAX_WORK);
        assert_eq!(scale(Duration::MAX, 1e300), MAX_WORK);
        assert_eq!(scale(second, 2.5), Duration::from_millis(2500));
    }
}
