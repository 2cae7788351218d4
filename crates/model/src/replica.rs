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
//! time, then one per `fraction` slow fault, when the work starts; chips (by the caller of
//! [`ReplicaModel::rng`]) from the replica's stream when the answer leaves.

use crate::schema::{Fault, Service};
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
    /// It answers 500 without making its calls (an `error` fault).
    Error,
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
    sampler: Sampler,
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

impl ReplicaModel {
    /// Replica `replica` of `service`, the `service_index`-th service of its file, in a run seeded
    /// with `seed` whose measured part ends at `horizon` (for latency-model ramps); `base_dir`
    /// resolves empirical distributions' files.
    pub fn new(
        service: &Service,
        service_index: usize,
        replica: u32,
        seed: u64,
        horizon: Option<Duration>,
        base_dir: &Path,
    ) -> Result<ReplicaModel, ModelError> {
        let stream = seed ^ 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(service_index as u64 + 1);
        let rng = Pcg64Mcg::seed_from_u64(stream ^ (u64::from(replica) + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
        let slow_samplers = service
            .faults
            .iter()
            .map(|f| match f {
                Fault::Slow { service_time: Some(d), .. } => d.sampler(base_dir).map(Some),
                _ => Ok(None),
            })
            .collect::<Result<_, _>>()?;
        Ok(ReplicaModel {
            replica,
            sampler: service.service_time.sampler(base_dir)?,
            curve: service.latency_model.curve(horizon, stream)?,
            faults: service.faults.clone(),
            slow_samplers,
            rng,
            keyed: stream,
            received: 0,
        })
    }

    /// Whether the replica is down at `now` (since the run started): a `down` fault for it, or for
    /// all replicas, covers `now`.
    pub fn is_down(&self, now: Duration) -> bool {
        self.faults.iter().any(|f| match f {
            Fault::Down { replica, from, to } => {
                replica.is_none_or(|x| x == self.replica) && from.get() <= now && now < to.get()
            }
            _ => false,
        })
    }

    /// Counts a request in and draws its fate: one draw per `error` and `lost` fault, in file
    /// order; a lost request stays lost.
    pub fn arrive(&mut self) -> Arrival {
        let fate = fate(&self.faults, &mut self.rng);
        self.received += 1;
        Arrival { ordinal: self.received, fate }
    }

    /// [`ReplicaModel::arrive`] with the draws keyed by `request` (any number that identifies the
    /// request and attempt in the run) instead of taken from the replica's stream.
    pub fn arrive_as(&mut self, request: u64) -> Arrival {
        // Without faults there is nothing to draw, and no stream to seed.
        let fate = if self.faults.is_empty() {
            Fate::Normal
        } else {
            fate(&self.faults, &mut self.keyed_rng(request ^ ARRIVE_SALT))
        };
        self.received += 1;
        Arrival { ordinal: self.received, fate }
    }

    /// The local work of the `ordinal`-th request, starting at `now` (since the run started): a
    /// service-time draw × the latency factor at `now`, unless a slow fault picks the request
    /// (`every: n` picks ordinals n, 2n, …; `fraction` draws), capped at [`MAX_WORK`].
    pub fn work_time(&mut self, ordinal: u64, now: Duration) -> Duration {
        // A copy advanced and put back: `work` borrows the rest of the model.
        let mut rng = self.rng.clone();
        let time = self.work(ordinal, now, &mut rng);
        self.rng = rng;
        time
    }

    /// [`ReplicaModel::work_time`] with the draws keyed by `request`, as in
    /// [`ReplicaModel::arrive_as`].
    pub fn work_time_as(&mut self, ordinal: u64, now: Duration, request: u64) -> Duration {
        let mut rng = self.keyed_rng(request ^ WORK_SALT);
        self.work(ordinal, now, &mut rng)
    }

    /// A stream for one request's draws: two mixes of the key make the 128-bit state, cheaper
    /// than `seed_from_u64`'s expansion (one per attempt adds up over millions of requests).
    fn keyed_rng(&self, key: u64) -> Pcg64Mcg {
        let key = self.keyed ^ key;
        Pcg64Mcg::new(u128::from(mix(key)) << 64 | u128::from(mix(!key)))
    }

    fn work(&mut self, ordinal: u64, now: Duration, rng: &mut Pcg64Mcg) -> Duration {
        let mut time = scale(self.sampler.sample(rng), self.curve.factor(now));
        for (f, slow) in self.faults.iter().zip(&self.slow_samplers) {
            if let Fault::Slow { fraction, every, factor, .. } = f {
                let hit = match (every, fraction) {
                    (Some(n), _) => *n > 0 && ordinal % u64::from(*n) == 0,
                    (None, Some(p)) => rng.gen::<f64>() < *p,
                    (None, None) => false,
                };
                if hit {
                    time = match (slow, factor) {
                        (Some(sampler), _) => sampler.sample(rng),
                        (None, Some(k)) => scale(time, *k),
                        (None, None) => time,
                    };
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

/// A request's fate: one draw per `error` and `lost` fault, in file order; a lost request stays
/// lost.
fn fate(faults: &[Fault], rng: &mut Pcg64Mcg) -> Fate {
    let mut fate = Fate::Normal;
    for f in faults {
        match f {
            Fault::Error { rate } if rng.gen::<f64>() < *rate && fate != Fate::Lost => fate = Fate::Error,
            Fault::Lost { fraction } if rng.gen::<f64>() < *fraction => fate = Fate::Lost,
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
            b.arrive_as(r);
        }
        let fates_a: Vec<Fate> = (40..60).map(|r| a.arrive_as(r).fate).collect();
        let fates_b: Vec<Fate> = (40..60).map(|r| b.arrive_as(r).fate).collect();
        assert_eq!(fates_a, fates_b);
        assert!(fates_a.contains(&Fate::Lost) && fates_a.contains(&Fate::Normal));
        assert_eq!(a.work_time_as(1, Duration::ZERO, 42), b.work_time_as(9, Duration::ZERO, 42));
        assert_ne!(a.work_time_as(1, Duration::ZERO, 42), a.work_time_as(1, Duration::ZERO, 43));
        // The ordinal still counts the arrivals at this replica.
        assert_eq!(b.arrive_as(42).ordinal, 26);
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
