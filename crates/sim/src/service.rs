//! A simulated service: its replicas (workers, FIFO queue, admission, own random stream), its
//! service times, latency model and faults, and the client policies of its outgoing call edges.

use crate::SimError;
use rand::{Rng as _, SeedableRng};
use rand_pcg::Pcg64Mcg;
use std::collections::VecDeque;
use std::time::Duration;
use tailguard_model::schema::{Fanout, Fault, Service, Timeout};
use tailguard_model::{build, LatencyCurve, Run, Sampler};
use tailguard_policy::admission::Admission;
use tailguard_policy::call::ClientPolicy;
use tailguard_policy::Time;

use crate::slab::Key;

/// A caller's policy towards one callee, with what the metrics need to know of it.
pub(crate) struct EdgePolicy {
    pub(crate) policy: ClientPolicy,
    /// Whether it sets attempt timeouts itself (not only through a deadline), for closeness.
    pub(crate) timed: bool,
}

/// A request being handled at a replica.
pub(crate) struct Job {
    pub(crate) service: u16,
    pub(crate) replica: u32,
    pub(crate) reply: (Key, u32),
    pub(crate) sent: Time,
    pub(crate) timeout: Option<Duration>,
    pub(crate) fate: Fate,
    /// Its arrival number at the replica (1 = first), for `every`-th request faults.
    pub(crate) nth: u64,
    pub(crate) next_call: u16,
    pub(crate) outstanding: u16,
    pub(crate) failed: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    Normal,
    Error,
    Lost,
}

pub(crate) struct ServiceModel {
    pub(crate) workers: u32,
    pub(crate) sampler: Sampler,
    pub(crate) curve: LatencyCurve,
    pub(crate) fanout: Fanout,
    /// Edge index per downstream call, `count` repeats expanded.
    pub(crate) plan: Vec<u16>,
    pub(crate) faults: Vec<Fault>,
    pub(crate) slow_samplers: Vec<Option<Sampler>>,
    /// First policy index of each edge; replica r's policy is `base + r`.
    pub(crate) edge_policy_base: Vec<usize>,
    pub(crate) edge_callee: Vec<u16>,
    pub(crate) replicas: Vec<Replica>,
    pub(crate) called: bool,
}

pub(crate) struct Replica {
    /// This replica's own random stream for service times, faults and chips. Streams per replica
    /// (common random numbers) make the n-th request a replica receives meet the same luck in
    /// every variant, so variants differ by their choices, not by the draw.
    pub(crate) rng: Pcg64Mcg,
    pub(crate) queue: VecDeque<Key>,
    pub(crate) busy: u32,
    /// Requests admitted and not yet answered: queued, in service, or waiting for downstream calls.
    pub(crate) held: u32,
    pub(crate) received: u64,
    pub(crate) admission: Box<dyn Admission>,
}

impl ServiceModel {
    /// The model of `svc`, with the policies of its call edges appended to `policies` (one per
    /// replica and edge: each calling replica balances on its own, as a sidecar would).
    pub(crate) fn build(
        run: &Run,
        svc: &Service,
        stream: u64,
        horizon: Option<Duration>,
        index: &impl Fn(&str) -> u16,
        policies: &mut Vec<EdgePolicy>,
    ) -> Result<ServiceModel, SimError> {
        let mut plan = Vec::new();
        let mut edge_policy_base = Vec::new();
        let mut edge_callee = Vec::new();
        for (e, edge) in svc.calls.iter().enumerate() {
            plan.extend(std::iter::repeat_n(e as u16, edge.count as usize));
            let callee = index(&edge.service);
            let endpoints = run.services[callee as usize].replicas as usize;
            edge_policy_base.push(policies.len());
            edge_callee.push(callee);
            let timed = edge.policy.timeout != Timeout::None;
            for _ in 0..svc.replicas {
                policies.push(EdgePolicy { policy: build::client_policy(&edge.policy, endpoints), timed });
            }
        }
        let slow_samplers = svc
            .faults
            .iter()
            .map(|f| match f {
                Fault::Slow { service_time: Some(d), .. } => d.sampler(&run.base_dir).map(Some),
                _ => Ok(None),
            })
            .collect::<Result<_, _>>()?;
        let replica = |r: u32| Replica {
            rng: Pcg64Mcg::seed_from_u64(stream ^ (u64::from(r) + 1).wrapping_mul(0xD1B5_4A32_D192_ED03)),
            queue: VecDeque::new(),
            busy: 0,
            held: 0,
            received: 0,
            admission: build::admission(&svc.admission),
        };
        Ok(ServiceModel {
            workers: svc.workers,
            sampler: svc.service_time.sampler(&run.base_dir)?,
            curve: svc.latency_model.curve(horizon, stream)?,
            fanout: svc.fanout,
            plan,
            faults: svc.faults.clone(),
            slow_samplers,
            edge_policy_base,
            edge_callee,
            replicas: (0..svc.replicas).map(replica).collect(),
            called: false,
        })
    }

    /// Whether replica `r` is down at `now` (a `down` fault).
    pub(crate) fn is_down(&self, r: usize, now: Duration) -> bool {
        self.faults.iter().any(|f| match f {
            Fault::Down { replica, from, to } => {
                replica.is_none_or(|x| x as usize == r) && from.get() <= now && now < to.get()
            }
            _ => false,
        })
    }

    /// Error and loss faults, decided as a request arrives at replica `r` (one draw per fault).
    pub(crate) fn fate(&mut self, r: usize) -> Fate {
        let rng = &mut self.replicas[r].rng;
        let mut fate = Fate::Normal;
        for f in &self.faults {
            match f {
                Fault::Error { rate } if rng.gen::<f64>() < *rate && fate != Fate::Lost => fate = Fate::Error,
                Fault::Lost { fraction } if rng.gen::<f64>() < *fraction => fate = Fate::Lost,
                _ => {}
            }
        }
        fate
    }

    /// The local work of the `nth` request replica `r` received starts at `now`: a service time
    /// scaled by the latency model, unless a slow fault replaces it (counted by arrival, as
    /// `tailguard serve` counts).
    pub(crate) fn service_time(&mut self, r: usize, now: Duration, nth: u64) -> Duration {
        let rng = &mut self.replicas[r].rng;
        let mut time = self.sampler.sample(rng).mul_f64(self.curve.factor(now).max(0.0));
        for (f, slow) in self.faults.iter().zip(&self.slow_samplers) {
            if let Fault::Slow { fraction, every, factor, .. } = f {
                let hit = match (every, fraction) {
                    (Some(n), _) => *n > 0 && nth % u64::from(*n) == 0,
                    (None, Some(p)) => rng.gen::<f64>() < *p,
                    (None, None) => false,
                };
                if hit {
                    time = match (slow, factor) {
                        (Some(sampler), _) => sampler.sample(rng),
                        (None, Some(k)) => time.mul_f64(k.max(0.0)),
                        (None, None) => time,
                    };
                }
            }
        }
        time
    }
}

impl Replica {
    /// The queue length admission control sees (BLOC's q, bloc-load-balancing.txt §IV-A): requests
    /// waiting for a worker, or every request held when the replica has no worker limit.
    pub(crate) fn queue_len(&self, workers: u32) -> u32 {
        if workers == 0 {
            self.held
        } else {
            self.queue.len() as u32
        }
    }
}
