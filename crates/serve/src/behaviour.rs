//! The service's behaviour: [`tailguard_model::replica::ReplicaModel`], the very model the
//! simulator runs, behind a mutex so concurrent requests share the replica's random stream. With
//! the same seed the n-th draw is the same as in the simulator, though on real sockets the order in
//! which requests make their draws depends on their timing.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tailguard_model::replica::ReplicaModel;
pub use tailguard_model::replica::{Arrival, Fate, MAX_WORK};
use tailguard_model::schema::Fault;

use crate::error::ServeError;
use crate::spec::Spec;

/// Service times, latency model and faults of one replica.
#[derive(Debug)]
pub struct Behaviour(Mutex<ReplicaModel>);

impl Behaviour {
    /// The behaviour of `spec`'s replica, its random streams seeded as the simulator's.
    pub fn new(spec: &Spec) -> Result<Behaviour, ServeError> {
        let model =
            ReplicaModel::new(&spec.service, spec.index, spec.replica, spec.stream_seed, spec.horizon, &spec.base_dir)?;
        Ok(Behaviour(Mutex::new(model)))
    }

    /// Whether this replica is down at `now` (since the server started).
    pub fn is_down(&self, now: Duration) -> bool {
        self.lock().is_down(now)
    }

    /// Counts in a request arriving at `now` (since the server started) and draws its fate.
    pub fn arrive(&self, now: Duration) -> Arrival {
        self.lock().arrive(now)
    }

    /// The first time from `now` on when no `hang` window holds this replica.
    pub fn resume_at(&self, now: Duration) -> Duration {
        self.lock().resume_at(now)
    }

    /// The faults this replica realises, for the log: `hang from 10s until 20s`.
    pub fn faults(&self) -> Vec<Fault> {
        self.lock().faults().cloned().collect()
    }

    /// The local work of the `ordinal`-th request, of `route` (an index into the service's
    /// routes) if any, starting at `now` (since the server started); its work per request is
    /// keyed by `request` (from its id) when it has one.
    pub fn work_time(&self, ordinal: u64, now: Duration, route: Option<usize>, request: Option<u64>) -> Duration {
        self.lock().work_time_routed(ordinal, now, route, request)
    }

    /// The model; a panic elsewhere while it was held leaves it usable (it holds no invariant a
    /// half-finished draw could break).
    fn lock(&self) -> MutexGuard<'_, ReplicaModel> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests;
