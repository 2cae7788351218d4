//! The service's behaviour, as the simulator models it (crates/sim/src/service.rs): which
//! requests meet a fault, and how long each request's local work takes.
//!
//! Random draws come from one stream per replica, seeded as the simulator seeds it (the run's seed,
//! the service's index and the replica's index), behind a mutex: with the same seed the n-th draw
//! is the same, though on real sockets the order in which requests make their draws depends on
//! their timing.

use rand::{Rng as _, SeedableRng};
use rand_pcg::Pcg64Mcg;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tailguard_model::schema::Fault;
use tailguard_model::{LatencyCurve, Sampler};

use crate::error::ServeError;
use crate::spec::Spec;

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

/// A request as it arrives: its place among the requests this replica received, and its fate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// 1 for the first request received, 2 for the second, …
    pub ordinal: u64,
    /// What happens after its local work.
    pub fate: Fate,
}

/// Service times, latency model and faults of one replica.
#[derive(Debug)]
pub struct Behaviour {
    replica: u32,
    sampler: Sampler,
    faults: Vec<Fault>,
    /// The sampler of each slow fault that replaces the service time, by fault index.
    slow_samplers: Vec<Option<Sampler>>,
    state: Mutex<State>,
}

/// What changes as requests arrive.
#[derive(Debug)]
struct State {
    rng: Pcg64Mcg,
    curve: LatencyCurve,
    received: u64,
}

impl Behaviour {
    /// The behaviour of `spec`'s replica, its random streams seeded as the simulator's.
    pub fn new(spec: &Spec) -> Result<Behaviour, ServeError> {
        let service = &spec.service;
        let stream = spec.seed ^ 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(spec.index as u64 + 1);
        let rng = Pcg64Mcg::seed_from_u64(stream ^ (u64::from(spec.replica) + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
        let slow_samplers = service
            .faults
            .iter()
            .map(|f| match f {
                Fault::Slow { service_time: Some(d), .. } => d.sampler(&spec.base_dir).map(Some),
                _ => Ok(None),
            })
            .collect::<Result<_, _>>()?;
        Ok(Behaviour {
            replica: spec.replica,
            sampler: service.service_time.sampler(&spec.base_dir)?,
            faults: service.faults.clone(),
            slow_samplers,
            state: Mutex::new(State { rng, curve: service.latency_model.curve(spec.horizon, stream)?, received: 0 }),
        })
    }

    /// Whether this replica is down at `now` (since the server started): a `down` fault for it,
    /// or for all replicas, covers `now`.
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
    pub fn arrive(&self) -> Arrival {
        let mut state = self.lock();
        state.received += 1;
        let ordinal = state.received;
        let mut fate = Fate::Normal;
        for f in &self.faults {
            match f {
                Fault::Error { rate } if state.rng.gen::<f64>() < *rate && fate != Fate::Lost => fate = Fate::Error,
                Fault::Lost { fraction } if state.rng.gen::<f64>() < *fraction => fate = Fate::Lost,
                _ => {}
            }
        }
        Arrival { ordinal, fate }
    }

    /// The local work of the `ordinal`-th request, starting at `now` (since the server started):
    /// a service-time draw × the latency factor at `now`, unless a slow fault picks the request
    /// (`every: n` picks ordinals n, 2n, …; `fraction` draws), capped at [`MAX_WORK`].
    pub fn work_time(&self, ordinal: u64, now: Duration) -> Duration {
        let mut state = self.lock();
        let State { rng, curve, .. } = &mut *state;
        let mut time = scale(self.sampler.sample(rng), curve.factor(now));
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

    /// The state; a panic elsewhere while it was held leaves it usable (it holds no invariant a
    /// half-finished draw could break).
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// `time × factor`, never panicking: a negative factor or NaN counts as 0, an overflow as
/// [`MAX_WORK`].
fn scale(time: Duration, factor: f64) -> Duration {
    let factor = if factor.is_nan() { 0.0 } else { factor.max(0.0) };
    Duration::try_from_secs_f64(time.as_secs_f64() * factor).unwrap_or(MAX_WORK).min(MAX_WORK)
}

#[cfg(test)]
mod tests;
