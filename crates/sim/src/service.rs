//! A simulated service: its replicas (workers, FIFO queue, admission, own random stream), its
//! service times, latency model and faults, and the client policies of its outgoing call edges.

use crate::job_queue::JobQueue;
use crate::SimError;
use tailguard_model::replica::{child_key, pick_route};
use tailguard_model::replica::{Fate, ReplicaModel};
use tailguard_model::schema::{Fanout, Route, Service, TimeoutConfig};
use tailguard_model::{build, Run};
use tailguard_policy::admission::{Admission, AdmissionConfig};
use tailguard_policy::balance::ProbeResponder;
use tailguard_policy::call::ClientPolicy;
use tailguard_policy::{Outcome, PackedTime, Time};

use crate::slab::Key;

/// A caller's policy towards one callee, with what the metrics need to know of it.
pub(crate) struct EdgePolicy {
    pub(crate) policy: ClientPolicy,
    /// Whether it sets attempt timeouts itself (not only through a deadline), for closeness.
    pub(crate) timed: bool,
    /// The edge's index among the timeout series the metrics keep (edges that are `timed`).
    pub(crate) series: Option<u16>,
}

/// A request being handled at a replica: its times packed, so that with its slab generation it
/// fits two cache lines (thousands are in flight at once in a large run).
pub(crate) struct Job {
    pub(crate) service: u16,
    pub(crate) replica: u32,
    pub(crate) reply: (Key, u32),
    /// The job that made the call this job answers, if a job did (passed on for prefetching).
    pub(crate) caller: Option<Key>,
    pub(crate) sent: PackedTime,
    /// When it reached the replica, and the requests the replica held then (for the latency it
    /// reports to probes).
    pub(crate) arrived: PackedTime,
    pub(crate) rif: u32,
    pub(crate) timeout: PackedTime,
    /// The timeout series of the edge the request came over, if any.
    pub(crate) series: Option<u16>,
    pub(crate) fate: Fate,
    /// Its arrival number at the replica (1 = first), for `every`-th request faults.
    pub(crate) nth: u64,
    /// The key of its request's draws (its attempts' keys, and its own calls', derive from it:
    /// [`Job::draws`]; common random numbers).
    pub(crate) request: u64,
    /// Its route at this service, as a class: 0 for none, r + 1 for route r.
    pub(crate) route: u16,
    pub(crate) next_call: u16,
    pub(crate) outstanding: u16,
    /// What it answers once its calls end, if one failed: an error, or a refusal passed on
    /// ([`Outcome::Overloaded`]) when its calls were only refused.
    pub(crate) failure: Option<Outcome>,
    pub(crate) stage: Stage,
}

impl Job {
    /// When its caller sent it.
    pub(crate) fn sent(&self) -> Time {
        self.sent.get().expect("a job has a send time")
    }

    /// When it reached its replica.
    pub(crate) fn arrived(&self) -> Time {
        self.arrived.get().expect("a job has an arrival time")
    }

    /// The key of its attempt's draws and of its own calls' draws.
    pub(crate) fn draws(&self) -> u64 {
        child_key(self.request, self.reply.1.into())
    }

    /// Its route, as an index into its service's routes.
    pub(crate) fn route(&self) -> Option<usize> {
        usize::from(self.route).checked_sub(1)
    }
}

/// Where a job is, for a cancel to know what to stop.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Waiting in its replica's queue for a worker.
    Queued,
    /// A worker is on its local work, since this time.
    Working(Time),
    /// It holds no worker and no queue place: its local work is done (or skipped, by an `error`
    /// fault's `after`) and it waits for its downstream calls or its answer.
    Calling,
}

pub(crate) struct ServiceModel {
    /// Whether its replicas stop the requests their callers abandon (docs/experiment-files.md).
    pub(crate) cancellable: bool,
    /// Whether a replica's admission reads its arrivals' deadlines (adaptive admission's).
    pub(crate) reads_deadlines: bool,
    pub(crate) fanout: Fanout,
    /// Edge index per downstream call, `count` repeats expanded, for a request of each route
    /// (index 0: of no route; r + 1: of route r).
    pub(crate) plans: Vec<Vec<u16>>,
    /// First policy index of each edge (the service's calls, then its routes' own); replica r's
    /// policy is `base + r`.
    pub(crate) edge_policy_base: Vec<usize>,
    pub(crate) edge_callee: Vec<u16>,
    /// The callee's route each edge's calls take (r + 1), or 0 when drawn by its routes' weights.
    pub(crate) edge_route: Vec<u16>,
    /// The service's own routes, which its callers' requests are drawn among.
    pub(crate) routes: Vec<Route>,
    pub(crate) replicas: Vec<Replica>,
    /// Each replica's answers to Prequal's probes (1 kB, written on every answer), by replica;
    /// empty unless a balancer probes the service. Beside the replicas rather than in them, so a
    /// probe's or an answer's table is found (and prefetched) without reading its replica first.
    pub(crate) probes: Vec<ProbeResponder>,
}

pub(crate) struct Replica {
    /// Faults, service times, workers and this replica's own random stream, as `tailguard serve`
    /// has them (its group's, if it is in one).
    pub(crate) model: ReplicaModel,
    pub(crate) queue: JobQueue,
    pub(crate) busy: u32,
    /// Requests admitted and not yet answered: queued, in service, or waiting for downstream calls.
    pub(crate) held: u32,
    pub(crate) admission: Box<dyn Admission>,
    /// Whether tailguard's sidecar runs beside it (`sidecar:`): without one, its answers carry no
    /// load report, and a probe reaches the application, which answers it as any request.
    pub(crate) sidecar: bool,
}

impl Replica {
    /// Hints the cache to load what an event at this replica reads (crate::prefetch): its model,
    /// counters and queue.
    pub(crate) fn prefetch(&self) {
        crate::prefetch::prefetch(&self.model);
        crate::prefetch::prefetch(&self.queue);
        crate::prefetch::prefetch(&self.held);
    }
}

/// The lines of a probe table [`ServiceModel::prefetch_probes`] asks for: the estimates for up to
/// 7 requests in flight.
const PROBE_LINES: usize = 2;

impl ServiceModel {
    /// The model of `svc`, the `index`-th service, with the policies of its call edges appended to
    /// `policies` (one per replica and edge: each calling replica balances on its own, as a sidecar
    /// would).
    pub(crate) fn build(
        run: &Run,
        svc: &Service,
        seed: u64,
        index: usize,
        service_index: &impl Fn(&str) -> u16,
        policies: &mut Vec<EdgePolicy>,
    ) -> Result<ServiceModel, SimError> {
        let mut edge_policy_base = Vec::new();
        let mut edge_callee = Vec::new();
        let mut edge_route = Vec::new();
        for edge in svc.all_calls() {
            let callee = service_index(&edge.service);
            let callee_service = &run.services[callee as usize];
            let endpoints = callee_service.replicas as usize;
            edge_policy_base.push(policies.len());
            edge_callee.push(callee);
            let route = edge.route.as_ref().and_then(|name| callee_service.routes.iter().position(|r| r.name == *name));
            edge_route.push(route.map_or(0, |r| r as u16 + 1));
            let timed = edge.policy.timeout != TimeoutConfig::None;
            let routes = callee_service.route_names();
            for _ in 0..svc.replicas {
                policies.push(EdgePolicy {
                    policy: build::client_policy_as(run.sidecar, run.peer_threads(), &edge.policy, endpoints, &routes),
                    timed,
                    series: None,
                });
            }
        }
        // The service's calls are edges 0.., each route's own follow in file order.
        let expand = |first: usize, calls: &[tailguard_model::schema::CallEdge]| -> Vec<u16> {
            let edges = calls.iter().enumerate();
            edges.flat_map(|(e, c)| std::iter::repeat_n((first + e) as u16, c.count as usize)).collect()
        };
        let mut plans = vec![expand(0, &svc.calls)];
        let mut next = svc.calls.len();
        for route in &svc.routes {
            match &route.calls {
                Some(calls) => {
                    plans.push(expand(next, calls));
                    next += calls.len();
                }
                None => plans.push(plans[0].clone()),
            }
        }
        let replicas = (0..svc.replicas)
            .map(|r| {
                let own = svc.for_replica(r);
                Ok(Replica {
                    model: ReplicaModel::new(svc, index, r, seed, run.horizon(), &run.base_dir)?,
                    queue: JobQueue::default(),
                    busy: 0,
                    held: 0,
                    admission: build::admission(&own.admission),
                    sidecar: own.sidecar,
                })
            })
            .collect::<Result<_, SimError>>()?;
        let reads_deadlines = (0..svc.replicas).any(|r| svc.for_replica(r).admission == AdmissionConfig::Adaptive);
        Ok(ServiceModel {
            cancellable: svc.cancellable,
            reads_deadlines,
            fanout: svc.fanout,
            plans,
            edge_policy_base,
            edge_callee,
            edge_route,
            routes: svc.routes.clone(),
            replicas,
            probes: Vec::new(),
        })
    }

    /// The route (as a class: r + 1, or 0 for none) of a request to this service keyed by `draws`,
    /// unless the call names one (`fixed`, a class too).
    pub(crate) fn route_of(&self, fixed: u16, draws: u64) -> u16 {
        if fixed > 0 {
            return fixed;
        }
        pick_route(&self.routes, draws).map_or(0, |r| r as u16 + 1)
    }

    /// Hints the cache to load the start of replica `r`'s probe table, if it has one: where the
    /// estimates for the few requests in flight that a replica mostly holds lie.
    pub(crate) fn prefetch_probes(&self, r: usize) {
        if let Some(table) = self.probes.get(r) {
            crate::prefetch::prefetch_lines(table, PROBE_LINES);
        }
    }
}
