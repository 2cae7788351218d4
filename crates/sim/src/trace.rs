//! Spans of simulated requests (`tailguard sim --traces`, docs/traces.md): the simulator's
//! equivalent of the lab's proxy spans, so the tuner reads both the same way.
//!
//! A measured user request becomes one trace shaped like the lab's: the workload's call (process
//! `client`) with a span per attempt; each attempt that reaches a replica has a visit span in the
//! callee's process covering queueing, work and downstream calls until the answer leaves; a
//! visit's downstream calls are call spans with attempt spans again. Times are virtual
//! microseconds since the run started.
//!
//! Which requests are kept is a reservoir sample of `sample` (Vitter's Algorithm R) over the
//! measured requests in the order they start, drawn when each starts, so only the requests that
//! enter the reservoir are recorded (about `sample × (1 + ln(requests / sample))` of them, not
//! every request). A request that a later one pushes out of the reservoir is dropped when it
//! finishes. The draws use a random stream of their own: tracing never changes what the simulation
//! does, and the same seed keeps the same traces. Requests unfinished when the run ends (every
//! span ended, hedge losers included) are not exported.

use crate::slab::Key;
use rand::{Rng as _, SeedableRng};
use rand_pcg::Pcg64Mcg;
use std::collections::HashMap;
use std::time::Duration;
use tailguard_policy::{Outcome, Time};
use tailguard_trace::{Process, Span, Tag, Trace};

/// The process of the workload's own calls.
pub const CLIENT: &str = "client";

/// Traces of one run.
pub(crate) struct Tracer {
    sample: usize,
    rng: Pcg64Mcg,
    /// High 64 bits of every trace id of this run.
    run_id: u64,
    /// Measured requests started so far (the low 64 bits of their trace ids).
    started: u64,
    /// The reservoir: per slot, the trace that holds it and, once finished, the trace.
    slots: Vec<(u128, Option<Trace>)>,
    open: HashMap<u128, Building>,
    calls: HashMap<Key, CallRec>,
    /// Attempts on their way to a replica: their trace and span.
    sent: HashMap<(Key, u32), (u128, usize)>,
    jobs: HashMap<Key, JobRec>,
    /// Process 0 is the client, process 1 + s is service s.
    processes: Vec<Process>,
}

/// A trace still in flight.
struct Building {
    spans: Vec<Span>,
    /// Spans started and not yet ended, and attempts not yet arrived (their visits will start).
    open: u32,
    /// Whether the user's call has finished (the trace may still have work in flight).
    done: bool,
    /// Its reservoir slot (a later request may take it over).
    slot: usize,
}

/// A traced call: its span and its attempts' spans still open.
struct CallRec {
    trace: u128,
    span: usize,
    callee: usize,
    attempts: Vec<(u32, usize)>,
}

/// A traced job at a replica: its visit span and when its work started.
struct JobRec {
    trace: u128,
    span: usize,
    work_started: Option<Time>,
}

fn micros(t: Time) -> u64 {
    t.as_micros() as u64
}

impl Tracer {
    /// A tracer keeping `sample` traces of the run `scenario` × `variant` seeded by `seed`.
    pub(crate) fn new(sample: usize, seed: u64, scenario: &str, variant: &str, services: &[&String]) -> Tracer {
        let run_tags = vec![Tag::new("scenario", scenario), Tag::new("variant", variant)];
        let process = |name: &str| Process { service: name.to_string(), tags: run_tags.clone() };
        let mut processes = vec![process(CLIENT)];
        processes.extend(services.iter().map(|s| process(s)));
        // FNV-1a over the run's names, so runs in one file never share trace ids.
        let run_id = format!("{scenario}\u{0}{variant}")
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325 ^ seed, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
        Tracer {
            sample,
            rng: Pcg64Mcg::seed_from_u64(seed ^ 0x7ACE_7ACE),
            run_id,
            started: 0,
            slots: Vec::new(),
            open: HashMap::new(),
            calls: HashMap::new(),
            sent: HashMap::new(),
            jobs: HashMap::new(),
            processes,
        }
    }

    /// Starts a span of `kind` (OpenTelemetry's, as Jaeger's `span.kind` tag) in `trace`;
    /// returns its index.
    fn start(
        &mut self,
        trace: u128,
        parent: Option<usize>,
        process: usize,
        kind: &str,
        operation: String,
        now: Time,
    ) -> usize {
        let b = self.open.get_mut(&trace).expect("a traced record's trace is open");
        let parent = parent.map(|p| b.spans[p].id);
        // Unique within the trace (the low bits count its spans) and, very likely, in the file.
        let (run, request) = ((trace >> 64) as u64, trace as u64);
        let id = (request.wrapping_mul(0x9E37_79B9_7F4A_7C15) << 16) ^ (run << 32) ^ (b.spans.len() as u64 + 1);
        b.spans.push(Span {
            id,
            parent,
            process,
            operation,
            start_us: micros(now),
            duration_us: 0,
            tags: vec![Tag::new("span.kind", kind)],
        });
        b.open += 1;
        b.spans.len() - 1
    }

    /// Ends span `span` of `trace` at `now` with `tags` added; files the trace if it is complete.
    fn end(&mut self, trace: u128, span: usize, now: Time, tags: impl IntoIterator<Item = Tag>) {
        let b = self.open.get_mut(&trace).expect("a traced record's trace is open");
        let s = &mut b.spans[span];
        s.duration_us = micros(now).saturating_sub(s.start_us);
        s.tags.extend(tags);
        b.open -= 1;
        self.file_if_complete(trace);
    }

    fn file_if_complete(&mut self, trace: u128) {
        if !self.open.get(&trace).is_some_and(|b| b.done && b.open == 0) {
            return;
        }
        let b = self.open.remove(&trace).expect("checked");
        let slot = &mut self.slots[b.slot];
        if slot.0 == trace {
            slot.1 = Some(Trace { id: trace, processes: self.processes.clone(), spans: b.spans });
        }
    }

    /// Whether measured request number `n` (from 1) enters the reservoir, and in which slot.
    fn draw_slot(&mut self, n: u64) -> Option<usize> {
        if self.slots.len() < self.sample {
            return Some(self.slots.len());
        }
        let j = self.rng.gen_range(0..n) as usize;
        (j < self.sample).then_some(j)
    }

    /// A call started: a measured user request's call starts a trace; a traced job's call joins
    /// its job's trace.
    pub(crate) fn call_started(&mut self, key: Key, job: Option<Key>, measured: bool, callee: usize, now: Time) {
        let (trace, parent, process) = match job {
            None if measured => {
                self.started += 1;
                let Some(slot) = self.draw_slot(self.started) else { return };
                let trace = u128::from(self.run_id) << 64 | u128::from(self.started);
                if slot == self.slots.len() {
                    self.slots.push((trace, None));
                } else {
                    self.slots[slot] = (trace, None);
                }
                self.open.insert(trace, Building { spans: Vec::new(), open: 0, done: false, slot });
                (trace, None, 0)
            }
            None => return,
            Some(job) => match self.jobs.get(&job) {
                Some(j) => (j.trace, Some(j.span), self.processes_of(j.trace, j.span)),
                None => return,
            },
        };
        let upstream = self.processes[1 + callee].service.clone();
        let span = self.start(trace, parent, process, "internal", format!("call {upstream}"), now);
        self.open.get_mut(&trace).expect("open").spans[span].tags.push(Tag::new("upstream", upstream));
        self.calls.insert(key, CallRec { trace, span, callee, attempts: Vec::new() });
    }

    /// The process of span `span` of `trace`.
    fn processes_of(&self, trace: u128, span: usize) -> usize {
        self.open[&trace].spans[span].process
    }

    /// Attempt `attempt` of call `key` was sent to replica `replica`.
    pub(crate) fn attempt_sent(
        &mut self,
        key: Key,
        attempt: u32,
        replica: usize,
        timeout: Option<Duration>,
        now: Time,
    ) {
        let Some(rec) = self.calls.get(&key) else { return };
        let (trace, parent, callee) = (rec.trace, rec.span, rec.callee);
        let kind = match (attempt, rec.attempts.is_empty()) {
            (0, _) => "first",
            (_, false) => "hedge",
            (_, true) => "retry",
        };
        let process = self.processes_of(trace, parent);
        let upstream = Tag::new("upstream", self.processes[1 + callee].service.clone());
        let span = self.start(trace, Some(parent), process, "client", "attempt".to_string(), now);
        let b = self.open.get_mut(&trace).expect("open");
        // The visit this attempt will start keeps the trace open until it arrives.
        b.open += 1;
        let tags = &mut b.spans[span].tags;
        tags.extend([upstream, Tag::new("attempt", attempt), Tag::new("attempt.kind", kind)]);
        tags.push(Tag::new("replica", replica as u32));
        if let Some(t) = timeout {
            tags.push(Tag::new("timeout_ms", t.as_secs_f64() * 1e3));
        }
        self.calls.get_mut(&key).expect("checked").attempts.push((attempt, span));
        self.sent.insert((key, attempt), (trace, span));
    }

    /// Attempt `attempt` of call `key` outlived its timeout and was kept running
    /// (`hedge_on_timeout`): its span gets `overdue: true`.
    pub(crate) fn attempt_overdue(&mut self, key: Key, attempt: u32) {
        let Some(rec) = self.calls.get(&key) else { return };
        let Some(&(_, span)) = rec.attempts.iter().find(|(a, _)| *a == attempt) else { return };
        let b = self.open.get_mut(&rec.trace).expect("a traced call's trace is open");
        b.spans[span].tags.push(Tag::new("overdue", true));
    }

    /// Attempt `attempt` of call `key` ended (answered, refused, timed out or cancelled).
    pub(crate) fn attempt_ended(&mut self, key: Key, attempt: u32, outcome: Outcome, now: Time) {
        let Some(rec) = self.calls.get_mut(&key) else { return };
        let Some(i) = rec.attempts.iter().position(|(a, _)| *a == attempt) else { return };
        let (_, span) = rec.attempts.swap_remove(i);
        let trace = rec.trace;
        self.end(trace, span, now, [Tag::new("outcome", outcome.name())]);
    }

    /// Call `key` finished; for the user's call the trace is filed once its last span ends.
    pub(crate) fn call_finished(&mut self, key: Key, user: bool, outcome: Outcome, attempts: u32, now: Time) {
        let Some(rec) = self.calls.remove(&key) else { return };
        for (_, span) in rec.attempts {
            self.end(rec.trace, span, now, [Tag::new("outcome", Outcome::Cancelled.name())]);
        }
        if user {
            self.open.get_mut(&rec.trace).expect("open").done = true;
        }
        let tags = [Tag::new("outcome", outcome.name()), Tag::new("attempts", attempts)];
        self.end(rec.trace, rec.span, now, tags);
    }

    /// Attempt `attempt` of call `call` reached replica `replica` of service `service`: a visit
    /// starts (`job` is the replica's job, or the outcome the replica refused it with).
    pub(crate) fn visit(
        &mut self,
        call: Key,
        attempt: u32,
        service: usize,
        replica: u32,
        job: Result<Key, Outcome>,
        now: Time,
    ) {
        let Some((trace, parent)) = self.sent.remove(&(call, attempt)) else { return };
        let name = self.processes[1 + service].service.clone();
        let span = self.start(trace, Some(parent), 1 + service, "server", name, now);
        let b = self.open.get_mut(&trace).expect("open");
        b.open -= 1;
        b.spans[span].tags.push(Tag::new("replica", replica));
        match job {
            Ok(job) => {
                self.jobs.insert(job, JobRec { trace, span, work_started: None });
            }
            Err(outcome) => self.end(trace, span, now, [Tag::new("outcome", outcome.name())]),
        }
    }

    /// Job `job` got a worker.
    pub(crate) fn work_started(&mut self, job: Key, now: Time) {
        if let Some(j) = self.jobs.get_mut(&job) {
            j.work_started = Some(now);
        }
    }

    /// Job `job` finished its local work.
    pub(crate) fn work_done(&mut self, job: Key, now: Time) {
        let Some(j) = self.jobs.get(&job) else { return };
        let (trace, span) = (j.trace, j.span);
        let started = j.work_started.unwrap_or(now);
        let s = &mut self.open.get_mut(&trace).expect("open").spans[span];
        let arrived = Duration::from_micros(s.start_us);
        s.tags.push(Tag::new("queue_us", micros(started.saturating_sub(arrived)) as i64));
        s.tags.push(Tag::new("work_us", micros(now.saturating_sub(started)) as i64));
    }

    /// Job `job` answered with `outcome` (`None`: it was lost and never answers).
    pub(crate) fn visit_ended(&mut self, job: Key, outcome: Option<Outcome>, now: Time) {
        let Some(j) = self.jobs.remove(&job) else { return };
        let name = outcome.map_or("lost", Outcome::name);
        self.end(j.trace, j.span, now, [Tag::new("outcome", name)]);
    }

    /// The kept traces, in the order their requests started.
    pub(crate) fn finish(self) -> Vec<Trace> {
        let mut kept: Vec<Trace> = self.slots.into_iter().filter_map(|(_, t)| t).collect();
        kept.sort_by_key(|t| t.id);
        kept
    }
}
