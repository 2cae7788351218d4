//! The policy path allocates nothing per request: under the recommended policies (docs/policies.md:
//! Prequal with outlier ejection, the adaptive timeout and hedge, a second attempt within the retry
//! budget), once they have warmed up, a request's whole life through the policy core's `Call`
//! (its probes, picks, attempts, hedges, timeouts, retries and end, and every model update they
//! set off) makes no heap allocation. A global allocator counts the allocations made on the
//! test's thread while a small event loop drives the calls in virtual time, as the proxy and the
//! simulator do; the loop's own queues have their room reserved beforehand.

use rand::Rng as _;
use rand_distr::{Distribution, Exp, LogNormal};
use rand_pcg::Pcg64Mcg;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tailguard_model::{build, schema};
use tailguard_policy::balance::ProbeReply;
use tailguard_policy::call::{Action, Call, ClientPolicy, Ctx};
use tailguard_policy::{Feedback, LoadReport, Outcome, Time};

/// Counts the allocations (and reallocations) of a thread while its flag is up.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

/// The allocations `f` makes on this thread.
fn allocations(f: impl FnOnce()) -> u64 {
    ALLOCATIONS.store(0, Ordering::Relaxed);
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.load(Ordering::Relaxed)
}

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// docs/policies.md's recommendation, as examples/peers.yaml's `tailguard` variant writes it.
const RECOMMENDED: &str =
    "{balancer: {kind: prequal}, outlier: {}, timeout: {kind: adaptive}, hedge: {kind: adaptive}, retry: {max_attempts: 2}}";

const ENDPOINTS: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum What {
    Arrive,
    /// An endpoint answers an attempt (whether or not its call still waits for it).
    End {
        call: usize,
        generation: u32,
        attempt: u32,
        endpoint: usize,
        sent: Time,
        failed: bool,
    },
    Wake {
        call: usize,
        generation: u32,
    },
    /// A probe's reply arrives.
    Probe {
        call: usize,
        generation: u32,
        endpoint: usize,
        awaited: bool,
    },
}

/// What the requests of a phase went through.
#[derive(Debug, Default)]
struct Seen {
    finished: u64,
    sends: u64,
    probes_awaited: u64,
    timeouts: u64,
    cancels: u64,
    failed_attempts: u64,
}

/// Requests arriving at three endpoints through one `ClientPolicy`.
struct World {
    policy: ClientPolicy,
    rng: Pcg64Mcg,
    draws: Pcg64Mcg,
    service: LogNormal<f64>,
    out: Vec<Action>,
    /// The calls in flight by slot, with each slot's generation (a finished call's late events
    /// find a newer generation).
    calls: Vec<(u32, Option<Call>)>,
    free: Vec<usize>,
    events: BinaryHeap<Reverse<(Time, u64, What)>>,
    seq: u64,
    now: Time,
    in_flight: [u32; ENDPOINTS],
    /// Requests of other callers each endpoint holds besides this caller's (none: this caller
    /// is alone, and Prequal needs no probe).
    others: u32,
    /// Gaps between arrivals (Poisson, 2,000 requests a second).
    gaps: Exp<f64>,
    seen: Seen,
}

impl World {
    fn new(others: u32) -> World {
        let config: schema::ClientPolicy = serde_yaml_ng::from_str(RECOMMENDED).unwrap();
        tailguard_model::validate::client_policy(&config).unwrap();
        let mut world = World {
            policy: build::client_policy(&config, ENDPOINTS),
            rng: Pcg64Mcg::new(1),
            draws: Pcg64Mcg::new(2),
            service: LogNormal::new(0.0, 0.4).unwrap(),
            out: Vec::with_capacity(64),
            calls: Vec::with_capacity(4096),
            free: Vec::with_capacity(4096),
            events: BinaryHeap::with_capacity(1 << 16),
            seq: 0,
            now: Time::ZERO,
            in_flight: [0; ENDPOINTS],
            others,
            gaps: Exp::new(2000.0).unwrap(),
            seen: Seen::default(),
        };
        world.schedule(Time::ZERO, What::Arrive);
        world
    }

    fn schedule(&mut self, at: Time, what: What) {
        self.seq += 1;
        self.events.push(Reverse((at, self.seq, what)));
    }

    /// An attempt's service time: a log-normal around 1 ms, 3 % of them 20 times slower (a tail
    /// hedges and racing timeouts cut), and endpoint 2 three times slower than the others (for
    /// outlier ejection's latency rule); 1 % of answers fail.
    fn serve(&mut self, endpoint: usize) -> (Duration, bool) {
        let mut ms = self.service.sample(&mut self.draws);
        if self.draws.gen_bool(0.03) {
            ms *= 20.0;
        }
        if endpoint == 2 {
            ms *= 3.0;
        }
        (Duration::from_secs_f64(ms / 1e3), self.draws.gen_bool(0.01))
    }

    /// Runs a policy step on the call in `slot` (if it is still generation `generation`).
    fn step(&mut self, slot: usize, generation: u32, f: impl FnOnce(&mut Call, &mut Ctx<'_>)) {
        let Some((current, Some(call))) = self.calls.get_mut(slot) else { return };
        if *current != generation {
            return;
        }
        let mut ctx =
            Ctx { now: self.now, policy: &mut self.policy, rng: &mut self.rng, true_loads: None, out: &mut self.out };
        f(call, &mut ctx);
        self.carry_out(slot, generation);
    }

    /// Carries out the actions the last step pushed.
    fn carry_out(&mut self, slot: usize, generation: u32) {
        let mut out = std::mem::take(&mut self.out);
        for action in out.drain(..) {
            match action {
                Action::Send { attempt, endpoint, .. } => {
                    self.seen.sends += 1;
                    self.in_flight[endpoint] += 1;
                    let (took, failed) = self.serve(endpoint);
                    let sent = self.now;
                    self.schedule(sent + took, What::End { call: slot, generation, attempt, endpoint, sent, failed });
                }
                Action::Cancel { reason, .. } => {
                    self.seen.cancels += 1;
                    self.seen.timeouts += u64::from(reason == Outcome::TimedOut);
                }
                Action::Overdue { .. } => self.seen.timeouts += 1,
                Action::Probe { endpoint, awaited } => {
                    self.seen.probes_awaited += u64::from(awaited);
                    let at = self.now + Duration::from_micros(100);
                    self.schedule(at, What::Probe { call: slot, generation, endpoint, awaited });
                }
                Action::WakeAt(at) => self.schedule(at, What::Wake { call: slot, generation }),
                Action::Finish(_) => {
                    self.seen.finished += 1;
                    self.calls[slot] = (generation + 1, None);
                    self.free.push(slot);
                }
                Action::Eject(_) => {}
            }
        }
        self.out = out;
    }

    /// Runs events until `requests` more requests have finished.
    fn run(&mut self, requests: u64) {
        let until = self.seen.finished + requests;
        while self.seen.finished < until {
            let Reverse((at, _, what)) = self.events.pop().expect("arrivals never stop");
            self.now = at;
            match what {
                What::Arrive => {
                    let gap = Duration::from_secs_f64(self.gaps.sample(&mut self.draws));
                    self.schedule(at + gap, What::Arrive);
                    let slot = self.free.pop().unwrap_or_else(|| {
                        self.calls.push((0, None));
                        self.calls.len() - 1
                    });
                    let generation = self.calls[slot].0;
                    let mut ctx = Ctx {
                        now: at,
                        policy: &mut self.policy,
                        rng: &mut self.rng,
                        true_loads: None,
                        out: &mut self.out,
                    };
                    let call = Call::start(&mut ctx, true, None);
                    self.calls[slot].1 = Some(call);
                    self.carry_out(slot, generation);
                }
                What::End { call, generation, attempt, endpoint, sent, failed } => {
                    self.in_flight[endpoint] -= 1;
                    self.seen.failed_attempts += u64::from(failed);
                    let outcome = if failed { Outcome::Error } else { Outcome::Success };
                    // The callee's sidecar reports its load on every answer, as an ingress does.
                    let load = ProbeReply {
                        in_flight: self.in_flight[endpoint] + self.others,
                        latency: Duration::from_micros(400),
                    };
                    let feedback = Feedback { load: LoadReport::Load(load), ..Feedback::new(outcome, at - sent) };
                    self.step(call, generation, |c, ctx| c.on_attempt_end(ctx, attempt, feedback));
                }
                What::Wake { call, generation } => self.step(call, generation, |c, ctx| c.on_wake(ctx)),
                What::Probe { call, generation, endpoint, awaited } => {
                    // Replies last as long as the quickest latency estimate (Prequal's pool): here
                    // shorter than the mean gap between requests, so some picks wait for probes.
                    let reply = ProbeReply {
                        in_flight: self.in_flight[endpoint] + self.others,
                        latency: Duration::from_micros(400),
                    };
                    self.policy.balancer.on_probe(endpoint, at, LoadReport::Load(reply));
                    if awaited {
                        self.step(call, generation, |c, ctx| c.on_probe_done(ctx));
                    }
                }
            }
        }
    }
}

/// The allocations of 20,000 requests after a warm-up of as many, and what they went through.
fn measured(others: u32) -> (u64, Seen) {
    let mut world = World::new(others);
    // Warm-up: every window and sample of the adaptive models fills (1,000 latencies), every
    // buffer reaches its working size.
    world.run(20_000);
    world.seen = Seen::default();
    let allocations = allocations(|| world.run(20_000));
    (allocations, world.seen)
}

#[test]
fn a_request_s_whole_life_under_the_recommended_policies_allocates_nothing() {
    // The count sees an allocation (a test that cannot fail proves nothing).
    assert_eq!(allocations(|| drop(std::hint::black_box(vec![0u8; 16]))), 1);
    // Beside another caller, Prequal probes, and some picks wait for their probes.
    let (allocations, seen) = measured(1);
    // The measured requests went through every part of a request's life.
    assert!(seen.sends > seen.finished, "{seen:?}");
    assert!(seen.probes_awaited > 0 && seen.timeouts > 0 && seen.cancels > 0 && seen.failed_attempts > 0, "{seen:?}");
    assert_eq!(allocations, 0, "allocations in {} requests ({seen:?})", seen.finished);
    // Alone, it ranks by its own counts and sends none.
    let (allocations, seen) = measured(0);
    assert!(seen.probes_awaited == 0 && seen.timeouts > 0 && seen.cancels > 0, "{seen:?}");
    assert_eq!(allocations, 0, "allocations in {} requests ({seen:?})", seen.finished);
}
