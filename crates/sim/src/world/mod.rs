//! The simulated world of one run, split by role:
//! - this file: the world's state, its construction and the event loop, which hands each event
//!   to the part that decides what it does;
//! - [`workload`]: the user requests, open-loop arrivals from the shared
//!   [`ArrivalSchedule`](tailguard_model::ArrivalSchedule) or closed-loop clients, and when
//!   sending stops;
//! - [`calls`]: the calls between services, driven by the policy core's [`Call`] machine, whose
//!   actions become events;
//! - [`replicas`]: the replicas, with workers and FIFO queues, admission, work and downstream
//!   calls;
//! - [`probes`]: Prequal's probes, answered by the replicas with their load.
//!
//! Measurements are recorded where they happen, into [`Metrics`] (crate::metrics) and, with
//! `--traces`, the [`Tracer`] (crate::trace).

mod calls;
mod cancel;
mod probes;
mod replicas;
mod workload;

use crate::metrics::Metrics;
use crate::queue::EventQueue;
use crate::service::{EdgePolicy, Job, ServiceModel};
use crate::slab::{Key, Slab};
use crate::trace::Tracer;
use crate::SimError;
use calls::{CallState, Owner};
use cancel::Pending;
use probes::Carried;
use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;
use std::collections::HashMap;
use std::time::Duration;
use tailguard_model::replica::child_key;
use tailguard_model::results::{load_service, RunResult};
use tailguard_model::schema::Network;
use tailguard_model::{build, ArrivalSchedule, Run};
use tailguard_policy::admission::Marks;
use tailguard_policy::balance::{LoadIndex, ProbeResponder};
use tailguard_policy::call::Action;
use tailguard_policy::{Outcome, PackedTime, Time};
use tailguard_trace::Trace;

/// How long in-flight requests may still finish after the workload stops sending.
const DRAIN: Duration = Duration::from_secs(120);
/// Runaway guard on the event loop.
const MAX_EVENTS: u64 = 2_000_000_000;
/// The replicas' state above which the event loop prefetches: about a core's L2 cache. Below it
/// everything stays cached, and prefetching would only add work (5-25 % at 50 replicas).
const PREFETCH_ABOVE_BYTES: usize = 1 << 20;
/// The key of the network's jitter stream, under the run's seed.
const NETWORK_STREAM: u64 = 0x006E_6574_776F_726B; // "network" in ASCII
/// The key of the calibrated hops' stream, under the run's seed.
const HOPS_STREAM: u64 = 0x686F_7073; // "hops" in ASCII

pub(super) enum Event {
    /// The workload sends its next open-loop request.
    Arrival,
    /// Closed-loop client `client` sends its next request.
    ClientReady { client: u32 },
    /// An attempt reaches a replica, one network hop after it was `sent` (`series`: its edge's
    /// timeout series, if any).
    AttemptArrives {
        call: Key,
        sent: PackedTime,
        attempt: u32,
        service: u16,
        replica: u32,
        timeout: PackedTime,
        series: Option<u16>,
        /// The key of its request's draws (the attempt's derive from it and `attempt`).
        request: u64,
        /// Its request's route at the callee, as a class (0: none, r + 1: route r).
        route: u16,
        /// The job that made the call, if a job did (for prefetching it with the answer).
        caller: Option<Key>,
        /// What its replica's admission reads of it besides its route and deadline.
        marks: Marks,
    },
    /// A replica (replica `replica` of service `service`, for prefetching) finished the local work
    /// of a job.
    WorkDone { job: Key, service: u16, replica: u32 },
    /// The cancel of an attempt its caller abandoned reaches the attempt's replica, one network
    /// delay after the caller cancelled (only for `cancellable` services).
    CancelArrives { call: Key, attempt: u32, job: Option<Key> },
    /// A job answers now: an `error` fault's `after` has passed, or a `hang` that held its answer
    /// has ended.
    Answer { job: Key, outcome: Outcome },
    /// A job makes its next calls now, a `hang` that held them having ended.
    NextCalls { job: Key },
    /// An attempt's answer reaches its caller.
    AttemptEnds(AttemptEnd),
    /// A call asked to be woken.
    Wake { call: Key },
    /// A Prequal probe sent by policy `policy` reaches a replica, one network hop after it left
    /// (`awaited_by`: the call whose pick waits for it, if one does).
    ProbeArrives { policy: u32, service: u16, replica: u32, awaited_by: Option<Key> },
    /// A probe's answer reaches its caller's policy.
    ProbeAnswered { policy: u32, endpoint: u32, report: Carried, awaited_by: Option<Key> },
}

/// An attempt's answer reaching its caller (`timeout` is the one its policy set, for closeness).
pub(super) struct AttemptEnd {
    pub(super) call: Key,
    pub(super) attempt: u32,
    pub(super) sent: PackedTime,
    pub(super) timeout: PackedTime,
    pub(super) series: Option<u16>,
    pub(super) outcome: Outcome,
    pub(super) chip: bool,
    /// What the answer says of the replica's load.
    pub(super) load: Carried,
    /// The job that made the call, if a job did: the answer may end the call, and the job then
    /// goes on, so it is prefetched with the call.
    pub(super) caller: Option<Key>,
}

/// One run of the simulator.
pub(crate) struct World {
    now: Time,
    events: EventQueue<Event>,
    services: Vec<ServiceModel>,
    /// Requests sent to each replica of each service and not yet answered (or refused): what a
    /// central dispatcher would count, handed to the oracle; kept only for the services an oracle
    /// picks among (three random writes a request that nothing else reads).
    loads: Vec<Option<LoadIndex>>,
    policies: Vec<EdgePolicy>,
    calls: Slab<CallState>,
    jobs: Slab<Job>,
    /// Cancels sent while their attempt was still travelling (cancel.rs).
    pending: HashMap<(Key, u32), Pending>,
    actions: Vec<Action>,
    /// Open-loop arrivals (`None` in a closed loop).
    arrivals: Option<ArrivalSchedule>,
    /// Every policy decision (balancers, chips drawn by callers, jitter).
    policy_rng: Pcg64Mcg,
    /// Each hop's one-way delay.
    network: Network,
    /// The network's jitter draws: a stream of its own, drawn only when the file gives a jitter,
    /// so files without one repeat their runs exactly.
    network_rng: Pcg64Mcg,
    /// The calibrated round trips of the lab's sidecars, if the file names a calibration.
    hops: Option<crate::hops::Hops>,
    target: u16,
    /// The service whose per-replica load the results report.
    load_service: usize,
    user_policy: usize,
    idempotent: bool,
    think: Duration,
    warmup: Duration,
    send_until: Option<Time>,
    measured_limit: Option<u64>,
    measured_sent: u64,
    /// User requests started, warm-up included: the root of the draw keys.
    started: u64,
    stopped_sending: Option<Time>,
    metrics: Metrics,
    events_run: u64,
    /// Whether the replicas' state outgrows the cache, so that prefetching pays
    /// ([`World::prefetch_upcoming`]).
    prefetch: bool,
    /// Spans of a sample of requests, with `--traces` (crate::trace); `None` costs one branch.
    tracer: Option<Box<Tracer>>,
}

impl World {
    pub(crate) fn new(run: &Run, seed: u64) -> Result<World, SimError> {
        let names: Vec<&String> = run.services.keys().collect();
        let index = |name: &str| names.iter().position(|n| *n == name).expect("validated reference") as u16;
        let w = &run.workload;
        let horizon = run.horizon();
        let mut policies = Vec::new();
        let mut services = Vec::new();
        for (i, svc) in run.services.values().enumerate() {
            services.push(ServiceModel::build(run, svc, seed, i, &index, &mut policies)?);
        }
        let target = index(&w.target);
        let user_policy = policies.len();
        let endpoints = services[target as usize].replicas.len();
        policies.push(EdgePolicy { policy: build::workload_policy(run, endpoints), timed: false, series: None });
        // The balancers that pick among each service's replicas, by what they read of them.
        let (mut oracle_picks, mut probed) = (vec![false; services.len()], vec![false; services.len()]);
        let mut callers = vec![(target, user_policy..user_policy + 1)];
        for svc in &services {
            for (&base, &callee) in svc.edge_policy_base.iter().zip(&svc.edge_callee) {
                callers.push((callee, base..base + svc.replicas.len()));
            }
        }
        for (callee, edge) in callers {
            for balancer in policies[edge].iter().map(|p| &p.policy.balancer) {
                oracle_picks[callee as usize] |= balancer.reads_true_loads();
                probed[callee as usize] |= balancer.sends_probes();
            }
        }
        let probes = probed.iter().any(|p| *p);
        for (svc, probed) in services.iter_mut().zip(probed) {
            if probed {
                svc.probes = vec![ProbeResponder::default(); svc.replicas.len()];
            }
        }
        let loads = services
            .iter()
            .zip(oracle_picks)
            .map(|(s, oracle)| oracle.then(|| LoadIndex::new(s.replicas.len())))
            .collect();
        let replicas: Vec<usize> = services.iter().map(|s| s.replicas.len()).collect();
        let mut timed_edges = Vec::new();
        for (s, svc) in services.iter().enumerate() {
            for (&base, &callee) in svc.edge_policy_base.iter().zip(&svc.edge_callee) {
                if policies[base].timed {
                    let series = Some(timed_edges.len() as u16);
                    policies[base..base + svc.replicas.len()].iter_mut().for_each(|p| p.series = series);
                    timed_edges.push(format!("{}->{}", names[s], names[callee as usize]));
                }
            }
        }
        let prefetch =
            replicas.iter().sum::<usize>() * std::mem::size_of::<crate::service::Replica>() > PREFETCH_ABOVE_BYTES;
        let mut world = World {
            now: Duration::ZERO,
            // Most events follow the one being handled by a network hop or at once.
            events: EventQueue::new(&[run.network.delay.get(), Duration::ZERO]),
            services,
            loads,
            policies,
            calls: Slab::new(),
            jobs: Slab::new(),
            pending: HashMap::new(),
            actions: Vec::new(),
            arrivals: w.open.as_ref().map(|o| ArrivalSchedule::new(o.arrival, o.rate, seed)),
            policy_rng: Pcg64Mcg::seed_from_u64(seed.rotate_left(17) ^ 0xA5A5_A5A5),
            network: run.network.clone(),
            network_rng: Pcg64Mcg::seed_from_u64(child_key(seed, NETWORK_STREAM)),
            hops: crate::hops::Hops::new(run, child_key(seed, HOPS_STREAM))?,
            target,
            load_service: index(load_service(run)) as usize,
            user_policy,
            idempotent: w.idempotent,
            think: w.closed.as_ref().map_or(Duration::ZERO, |c| c.think_time.get()),
            warmup: w.warmup.get(),
            send_until: horizon,
            measured_limit: w.requests,
            measured_sent: 0,
            started: 0,
            stopped_sending: None,
            metrics: Metrics::new(names.iter().map(|n| n.to_string()).collect(), replicas, timed_edges, w.warmup.get())
                .with_routes(run.services[target as usize].route_names()),
            events_run: 0,
            prefetch,
            tracer: None,
        };
        if probes {
            world.metrics.count_probes();
        }
        if world.policies.iter().any(|p| p.policy.outlier.is_some()) {
            world.metrics.count_ejections();
        }
        match &w.closed {
            Some(c) => {
                (0..c.clients).for_each(|client| world.events.push(Duration::ZERO, Event::ClientReady { client }))
            }
            None => {
                let first = world.arrivals.as_ref().expect("an open loop without closed clients").peek();
                world.events.push(first, Event::Arrival)
            }
        }
        Ok(world)
    }

    /// Records the spans of up to `sample` measured requests (crate::trace).
    pub(crate) fn trace(&mut self, run: &Run, seed: u64, sample: usize) {
        let names: Vec<&String> = run.services.keys().collect();
        self.tracer = Some(Box::new(Tracer::new(sample, seed, &run.scenario, &run.variant, &names)));
    }

    /// Runs the event loop to the end; returns the run's result and the number of events run.
    pub(crate) fn run(self, scenario: &str, variant: &str) -> Result<(RunResult, u64), SimError> {
        self.run_traced(scenario, variant).map(|(result, events, _)| (result, events))
    }

    /// [`World::run`], also returning the traces kept when [`World::trace`] was called.
    pub(crate) fn run_traced(
        mut self,
        scenario: &str,
        variant: &str,
    ) -> Result<(RunResult, u64, Vec<Trace>), SimError> {
        let drained = self.send_until.map(|end| end + DRAIN);
        while let Some((at, event)) = self.events.pop() {
            if self.stopped_sending.is_some_and(|stop| at > stop + DRAIN) {
                break;
            }
            if self.stopped_sending.is_none() {
                match drained {
                    // Past its planned end and the drain with no request sent since (every
                    // closed-loop client waits on one): it ended there, as a drain does.
                    Some(drained) if at > drained => {
                        self.stopped_sending = self.send_until;
                        break;
                    }
                    // A run of `requests` has no end planned in time (crate::bounded checks the
                    // others' length).
                    None if at > crate::MAX_VIRTUAL_TIME => {
                        let what = "the workload had not sent its `workload.requests` after".to_string();
                        return Err(SimError::TooLong { what, length: tailguard_model::Dur(crate::MAX_VIRTUAL_TIME) });
                    }
                    _ => {}
                }
            }
            self.events_run += 1;
            if self.events_run > MAX_EVENTS {
                return Err(SimError::Runaway { events: MAX_EVENTS });
            }
            self.now = at;
            if self.prefetch {
                self.prefetch_upcoming();
            }
            self.handle(event);
        }
        for route in self.unanswered_users() {
            self.metrics.request(Outcome::TimedOut, Duration::ZERO, route);
        }
        let end = self.stopped_sending.unwrap_or(self.now);
        let measured = end.saturating_sub(self.warmup);
        let traces = self.tracer.take().map_or_else(Vec::new, |t| t.finish());
        Ok((self.metrics.finish(scenario, variant, measured, self.load_service), self.events_run, traces))
    }

    /// Hints the cache to load the calls, jobs and replicas the next events will touch, so that
    /// their memory latencies overlap the current event's work (crate::prefetch).
    fn prefetch_upcoming(&self) {
        for event in self.events.upcoming() {
            match event {
                Event::AttemptArrives { call, service, replica, .. } => {
                    // Only a cancellable service's arrivals, an adaptive admission's (its
                    // deadline) or a tracer read the call.
                    let reads = |s: &ServiceModel| s.cancellable || s.reads_deadlines;
                    if self.tracer.is_some() || self.services.get(*service as usize).is_some_and(reads) {
                        self.calls.prefetch(*call);
                    }
                    self.prefetch_replica(*service, *replica);
                }
                Event::WorkDone { job, service, replica } => {
                    self.jobs.prefetch(*job);
                    self.prefetch_replica(*service, *replica);
                    self.prefetch_probes(*service, *replica);
                }
                Event::Answer { job, .. } | Event::NextCalls { job } => self.jobs.prefetch(*job),
                Event::AttemptEnds(AttemptEnd { call, caller, .. }) => {
                    self.calls.prefetch(*call);
                    if let Some(job) = caller {
                        self.jobs.prefetch(*job);
                    }
                }
                Event::Wake { call } => self.calls.prefetch(*call),
                Event::ProbeArrives { service, replica, .. } => {
                    self.prefetch_replica(*service, *replica);
                    self.prefetch_probes(*service, *replica);
                }
                _ => {}
            }
        }
    }

    fn prefetch_replica(&self, service: u16, replica: u32) {
        if let Some(rep) = self.services.get(service as usize).and_then(|s| s.replicas.get(replica as usize)) {
            rep.prefetch();
        }
    }

    fn prefetch_probes(&self, service: u16, replica: u32) {
        if let Some(svc) = self.services.get(service as usize) {
            svc.prefetch_probes(replica as usize);
        }
    }

    /// One request fewer at replica `r` of service `s`.
    fn load_dec(&mut self, s: usize, r: usize) {
        if let Some(loads) = &mut self.loads[s] {
            loads.dec(r);
        }
    }

    /// The one-way delay of the next message on the network (an attempt or its answer).
    fn hop(&mut self) -> Duration {
        self.network.hop(&mut self.network_rng)
    }

    /// The delay of an attempt on its way to `service`: a hop, plus the calibrated round trip
    /// of the sidecars it passes (crate::hops), if any.
    fn hop_to(&mut self, service: u16, between_services: bool) -> Duration {
        let calibrated = self.hops.as_mut().map_or(Duration::ZERO, |h| h.draw(service.into(), between_services));
        self.hop() + calibrated
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Arrival => self.arrival(),
            Event::ClientReady { client } => self.client_ready(client),
            Event::AttemptArrives {
                call,
                sent,
                attempt,
                service,
                replica,
                timeout,
                series,
                request,
                route,
                caller,
                marks,
            } => self.attempt_arrives(
                call,
                attempt,
                service,
                replica,
                (sent, timeout, series, request, route, caller, marks),
            ),
            Event::WorkDone { job, .. } => self.work_done(job),
            Event::CancelArrives { call, attempt, job } => self.cancel_arrives(call, attempt, job),
            Event::Answer { job, outcome } => self.respond(job, outcome),
            Event::NextCalls { job } => self.make_calls(job),
            Event::AttemptEnds(end) => self.attempt_ends(end),
            Event::Wake { call } => self.step_call(call, |call, ctx| call.on_wake(ctx)),
            Event::ProbeArrives { policy, service, replica, awaited_by } => {
                self.probe_arrives(policy, service, replica, awaited_by)
            }
            Event::ProbeAnswered { policy, endpoint, report, awaited_by } => {
                self.probe_answered(policy, endpoint, report, awaited_by)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sizes the event loop's cache footprint was measured with (bench/RESULTS.md, scale3):
    /// a call's slab entry fills four cache lines, a job's two, and an event one.
    #[test]
    fn a_call_fills_four_cache_lines_a_job_two_and_an_event_one() {
        assert_eq!(Slab::<CallState>::entry_size(), 256);
        assert_eq!(Slab::<Job>::entry_size(), 128);
        assert_eq!(std::mem::size_of::<Event>(), 64);
    }
}
