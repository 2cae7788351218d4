//! Adaptive admission: refuse with 429, at once, the requests that would wait a long time in the
//! replica's queue, but only while a queue stands; admit everything otherwise. No number to set.
//!
//! What it decides, and from what a sidecar sees (the requests its replica holds, and how long
//! each answer took after it arrived, by how many the replica held then):
//! - **The limit** (the target of Breakwater's and CoDel's queueing delay, derived instead of
//!   set): the base is the mean latency of the answers that found the replica idle; the first
//!   count of held requests whose answers took on average [`QUEUED`] times the base (they waited
//!   half a service) is the most a request may find held and still be admitted. An admitted
//!   request then waits about half a service, a one-worker replica's one request, so the median
//!   success stays near the unloaded median while the replica never runs dry (a request waits
//!   to take the place of the one in service). A replica whose latency does not grow with what
//!   it holds has no limit and is never refused. The means are per count and move with the last
//!   [`LEVEL_MEMORY`] answers, so a replica that gets faster or slower is followed.
//! - **When** (CoDel's standing queue, Nichols & Jacobson 2012): a burst that fills the queue and
//!   drains is not overload. A limit is enforced only once the replica has held at least the
//!   limit for a whole interval ([`INTERVAL_BASES`] times the base: a queue at the limit drains in
//!   about one base at capacity, so one that stands several means arrivals keep pace with the
//!   service; and at least [`MIN_INTERVAL`]) and ended it either holding more than it began with
//!   (arrivals outpaced the service) or well above the limit (a burst still draining): a
//!   one-worker replica just below capacity often stands at its limit, or one above, without
//!   growing. It stays enforced while arrivals keep finding the replica at the limit: an interval
//!   with no request refused ends it. Below capacity the queue drains or holds and nothing is
//!   refused; above it, the excess is refused as it arrives, where every static policy lets it
//!   wait to its deadline.
//! - **Only while arrivals outpace the service**: a queue also stands below capacity when the
//!   replica stalls. A request is refused only while the arrivals of about the last interval
//!   (admitted or refused) outnumber what the replica serves at its limit in an interval, by
//!   Little's law the requests held there over their latency.
//! - **A cold start in overload**: a replica overloaded from its first request never finds itself
//!   idle, so its base is unknown. When two held have stood for an interval of its quickest
//!   answers, it admits only at an idle replica for such an interval (extended by each answer
//!   that found it idle), as Envoy's filter pins its limit to measure, but only then: the queue
//!   drains, requests that find the replica idle give the base, and the limit takes over.
//! - **A replica of several workers** is seldom idle below capacity, and holds two without a
//!   queue: until enough answers found it idle, its base is the mean of the answers near idle
//!   once the next counts up were answered alike (a one-worker replica's take half as long
//!   again behind one as behind none), so it is not measured as a cold start.
//! - **Priorities** (DAGOR's admission level and TopFull's business priority: shed the least
//!   important first, and the more important only if that was not enough): where low-priority
//!   requests arrive, the first interval a queue stands holds them to their limit, the count
//!   whose answers waited a quarter of a service ([`LOW_PRIORITY_QUEUED`] times the base); only
//!   if the queue still stands a whole interval more are the others held to theirs. Each
//!   priority's limit stays enforced while its own requests keep being refused, so a replica
//!   whose excess is low-priority work sheds that work alone. A request's priority is its
//!   route's `priority:` in experiment files and the `x-tailguard-priority: low` header at the
//!   proxy (which forwards it on every hop).
//! - **Only where a refusal costs little** (issue #36): below capacity a queue stands at its
//!   limit now and then by chance, and a refusal then fails a request no admission would have
//!   served unless its caller sends it elsewhere. So the rules above refuse only a request that
//!   has a fallback ([`Marks::fallback`]: its caller would retry a refusal on another replica
//!   at once, its retry budget allowing); one without (a service of one replica, a caller that
//!   does not retry) is refused only when doomed: the mean latency of a request finding as many
//!   held reaches what remains of its deadline, which it would miss anyway after taking a place
//!   in the queue. Telling 90 % of capacity from 110 % takes a few hundred services' worth of
//!   arrivals (docs/policies.md), and a lone replica refused on less loses requests below
//!   capacity. Once the arrivals outnumber the service beyond doubt ([`OVERLOAD_WINDOWS`]; races
//!   aside, [`Marks::race`]: a caller's hedges are work it can do without), such a
//!   request is held to the depth that keeps the replica busy at that overload instead
//!   ([`IDLE_SHARE`]): deeper than the limit, which would idle a lone one-worker replica a fifth
//!   of the time at 150 %, far shorter than the deadline. A request another replica refused
//!   already ([`Marks::refused_elsewhere`]) with no fallback left is held to the limit in such
//!   an overload, and otherwise admitted as one without a fallback: two replicas near capacity
//!   often stand at their limits at once by chance.
//!
//! Envoy's adaptive concurrency filter, the nearest deployed peer, finds its limit from a minimum
//! RTT it measures by pinning the limit low every few seconds, refusing requests then even when
//! idle; this policy learns the base from the requests that found the replica idle, which
//! happen on their own below capacity, and refuses to measure only in a cold start in overload,
//! where refusals are due anyway.

use super::{Admission, AdmissionState};
use crate::stats::nanos;
use crate::Time;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::time::Duration;

/// Answers each count's mean latency moves with (an EWMA of this weight after as many answers).
pub const LEVEL_MEMORY: u32 = 64;

/// Answers at a count before its mean is trusted.
const MIN_ANSWERS: u32 = 16;

/// The interval a queue must stand for before the limit is enforced, in bases.
pub const INTERVAL_BASES: u32 = 4;

/// The shortest interval a queue must stand for, and the time over which arrivals are counted:
/// CoDel's interval (RFC 8289 §4.2). A replica of a few milliseconds on a busy machine stands at
/// its limit for a few bases below capacity (the scheduler's stalls, a caller catching up in a
/// burst), and four of its bases hold too few arrivals to tell their rate.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// The latency over the base that says a count queues: its answers waited half a service on
/// average. A one-worker replica's answers behind one request take twice the base, clear of it
/// however noisy the means; one of `w` workers reaches it `w / 2` requests past its workers.
pub const QUEUED: f64 = 1.5;

/// The latency over the base at the count where lower priorities are refused while the limit is
/// enforced: a quarter of a service waited.
pub const LOW_PRIORITY_QUEUED: f64 = 1.25;

/// The most held, on average, that the answers at the fewest held may have found for the base to
/// be taken from them before enough answers found the replica idle. Behind so few, a one-worker
/// replica's answers at the next counts up take at least [`QUEUED`] times as long (found at two or
/// more held against one and a half: three services or more against two and a half), so such a
/// replica never passes for one that serves several at once.
const NEAR_IDLE: f64 = 1.5;

/// The services' worth of arrivals over which a replica's overload is judged beyond doubt (the
/// time constants of two counts of arrivals, in the replica's time per answer where it queues):
/// the longer tells 150 % of capacity from 90 %, the shorter twice the capacity within a few
/// dozen services of its onset.
pub const OVERLOAD_WINDOWS: [f64; 2] = [128.0, 16.0];

/// The error allowed for in the pace's estimate (the mean of some sixty busy intervals).
const PACE_ERROR: f64 = 0.1;

/// How far above what the replica serves the arrivals of `services` must be for an overload
/// beyond doubt: three standard deviations of such a count of Poisson arrivals at capacity (a
/// decaying count's variance is half its mean: 19 % over 128 services, 53 % over 16) and the
/// pace's error.
fn overload_margin(services: f64) -> f64 {
    1.0 + 3.0 / (2.0 * services).sqrt() + PACE_ERROR
}

/// The share of time a replica whose requests have no fallback may idle when its queue is held
/// short in an overload beyond doubt: the depth it is held to keeps its goodput at capacity.
pub const IDLE_SHARE: f64 = 0.01;

/// The counts of held requests whose answers it tracks: a limit beyond this is moot, and it
/// bounds the memory a flood of held requests could make it take.
const MOST_TRACKED: usize = 1024;

/// The header that carries a low priority on a request (`x-tailguard-priority: low`): read by the
/// proxy's ingress, kept by both listeners, sent by the lab's load generator and `serve`.
pub const PRIORITY_HEADER: &str = "x-tailguard-priority";

/// The header by which a caller's egress says a refusal of this request costs it little
/// (`x-tailguard-fallback: 1`, [`Marks::fallback`]); the ingress reads it and strips it.
pub const FALLBACK_HEADER: &str = "x-tailguard-fallback";

/// What admission knows of an arriving request besides what the replica holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Arrival {
    /// Lower priorities are refused first.
    pub priority: Priority,
    /// What its caller says of it.
    pub marks: Marks,
    /// What remains of its deadline, if it has one.
    pub deadline: Option<Duration>,
}

/// What a caller says of an attempt to the callee's admission: the proxy's egress sends it as
/// headers ([`FALLBACK_HEADER`], `x-tailguard-refused`), the simulator carries it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Marks {
    /// A refusal costs the request little: its caller would retry a refusal on another replica
    /// at once, its retry budget allowing, or it races an attempt still live. Without one it is
    /// refused only when it would miss its deadline, or past the depth that keeps the replica
    /// busy in an overload beyond doubt (module docs).
    pub fallback: bool,
    /// Another replica refused it already. Without a fallback it is held to the limit only in an
    /// overload beyond doubt (or a cold start in overload): two replicas refusing one request
    /// are a service over capacity as a whole only then, and a pair below capacity often stands
    /// at its limits at once by chance.
    pub refused_elsewhere: bool,
    /// It races an attempt of its request still live (a hedge, a retry beside an overdue
    /// attempt): work its caller may do without, which the limit sheds first. Races are not
    /// counted in the arrivals that judge an overload beyond doubt, so a caller's hedging does
    /// not turn the rules against the requests without a fallback.
    pub race: bool,
}

/// A request's priority at admission: lower priorities are refused first (`priority:` on a route
/// in experiment files, `x-tailguard-priority` at the proxy's ingress).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Refused first (`low`).
    Low,
    /// The default.
    #[default]
    Normal,
}

/// Adaptive admission at one replica (module docs).
#[derive(Clone, Debug, Default)]
pub struct AdaptiveAdmission {
    /// Per count of held requests at arrival: answers seen and their mean latency (ns).
    levels: Vec<(u32, f64)>,
    /// The base the levels give (ns; recomputed at each answer, [`Self::base_now`]).
    base: Option<f64>,
    /// The limits the levels give (recomputed at each answer).
    limits: Option<Limits>,
    /// The replica's pace where it queues, if it does ([`Self::pace_now`], recomputed at each
    /// answer).
    pace: Option<f64>,
    /// The arrivals (admitted or refused) of about the last interval: a count that decays by
    /// `e` each interval, and when it was last counted.
    arrivals: (f64, Time),
    /// The same over each of [`OVERLOAD_WINDOWS`] of the replica's time per answer where it
    /// queues.
    overload_arrivals: [(f64, Time); 2],
    /// Since when the replica has held at least the limit, if it does, and how many it held
    /// when that stand began.
    full_since: Option<(Time, u32)>,
    /// Until then it admits only at an idle replica, to learn the base a cold start in overload
    /// never shows.
    measuring_until: Option<Time>,
    /// Per priority (low, normal): its requests are held to its limit until then (extended by
    /// each refusal); a priority held to its limit holds every lower one to its own too.
    shed_until: [Option<Time>; 2],
    /// When the last low-priority request arrived.
    last_low: Option<Time>,
    /// The time its workers were all taken and the answers given then: its pace, measured.
    busy: Busy,
}

/// A replica's pace as measured: the mean time between answers while every worker is taken (it
/// holds at least its limit less one, the count whose answers wait). Little's law on the answers
/// at a count gives the pace only while nothing leaves the queue unserved: past capacity, requests
/// whose deadline passes leave it, those behind move up faster than the replica serves, and the
/// law gave one-worker replicas of 4 answers a second 5 to 13.
#[derive(Clone, Copy, Debug, Default)]
struct Busy {
    /// Since when the workers have all been taken, if they are.
    since: Option<Time>,
    /// When they last ceased to be.
    ended: Option<Time>,
    /// Busy time (ns) since the last answer counted, ended periods only.
    time: f64,
    /// Answers counted, and their mean busy time apart (ns, an EWMA of [`LEVEL_MEMORY`]).
    answers: u32,
    mean: f64,
}

impl Busy {
    /// The replica holds `in_system` at `now`, its workers all taken from `full` held.
    fn follow(&mut self, now: Time, in_system: u32, full: u32) {
        match self.since {
            None if in_system >= full => self.since = Some(now),
            Some(since) if in_system < full => {
                self.time += nanos(now.saturating_sub(since));
                self.since = None;
                self.ended = Some(now);
            }
            _ => {}
        }
    }

    /// An answer left at `now`: counted if every worker was taken until then.
    fn answered(&mut self, now: Time) {
        let busy = match self.since {
            Some(since) => self.time + nanos(now.saturating_sub(since)),
            None if self.ended == Some(now) => self.time,
            // Left after the workers were freed: the time since the last answer was not all
            // service, and counts for nothing.
            None => {
                self.time = 0.0;
                return;
            }
        };
        if self.since.is_some() {
            self.since = Some(now);
        }
        self.time = 0.0;
        self.answers = self.answers.saturating_add(1);
        self.mean += (busy - self.mean) / f64::from(self.answers.min(LEVEL_MEMORY));
    }

    /// Answers per nanosecond, once [`MIN_ANSWERS`] were counted.
    fn pace(&self) -> Option<f64> {
        (self.answers >= MIN_ANSWERS && self.mean > 0.0).then(|| 1.0 / self.mean)
    }
}

impl AdaptiveAdmission {
    /// A policy that has seen nothing yet: it admits everything until its answers show a queue.
    pub fn new() -> Self {
        AdaptiveAdmission::default()
    }

    /// The mean latency of answers that found the replica idle, once trusted; before that, of
    /// the answers near idle of a replica that serves several at once (module docs).
    pub fn base(&self) -> Option<Duration> {
        self.base.map(|mean| Duration::from_nanos(mean as u64))
    }

    /// The base (ns): the mean latency of the answers that found the replica idle, once
    /// [`MIN_ANSWERS`] did; before that, the mean of the answers at the fewest held, if those
    /// found it near idle ([`NEAR_IDLE`]) and the next ones up took alike (within
    /// [`LOW_PRIORITY_QUEUED`]): a replica serving several at once, which is seldom idle below
    /// capacity and would otherwise be measured as a cold start (module docs).
    fn base_now(&self) -> Option<f64> {
        if let Some(&(_, idle)) = self.levels.first().filter(|(n, _)| *n >= MIN_ANSWERS) {
            return Some(idle);
        }
        let mut pools = self.pools(0);
        let fewest = pools.next().filter(|pool| pool.held <= NEAR_IDLE)?;
        let next = pools.next()?;
        (next.latency < LOW_PRIORITY_QUEUED * fewest.latency).then_some(fewest.latency)
    }

    /// While the limit is enforced, a request of `priority` is admitted only if the replica holds
    /// fewer requests than this (`None` until the answers show a queue).
    pub fn limit(&self, priority: Priority) -> Option<u32> {
        self.limits.map(|l| if priority == Priority::Low { l.low } else { l.normal })
    }

    /// Whether requests of `priority` are held to its limit at `now`.
    pub fn sheds(&self, now: Time, priority: Priority) -> bool {
        self.shed_until[priority as usize..].iter().any(|until| until.is_some_and(|t| now < t))
    }

    /// Whether any limit is enforced at `now` (a queue has stood).
    pub fn enforced(&self, now: Time) -> bool {
        self.sheds(now, Priority::Low)
    }

    fn interval(&self) -> Option<Duration> {
        self.base().map(interval_of)
    }

    /// The count at or above which a queue stands, and for how long it must stand: the limit
    /// and its interval once known; before the base is, two held (one may wait) for an interval
    /// of the quickest answers seen (a cold start in overload, where no request finds the
    /// replica idle).
    fn stand(&self) -> Option<(u32, Duration)> {
        if let (Some(limits), Some(interval)) = (self.limits, self.interval()) {
            return Some((limits.normal, interval));
        }
        if self.base().is_some() {
            return None;
        }
        Some((2, interval_of(Duration::from_nanos(self.quickest()? as u64))))
    }

    /// The mean latency of the answers at the fewest held, pooled up to [`MIN_ANSWERS`] of them.
    fn quickest(&self) -> Option<f64> {
        self.pools(0).next().map(|pool| pool.latency)
    }

    /// The counts from `from` up, pooled in order until each pool holds [`MIN_ANSWERS`] answers
    /// (each count's weighing at most [`LEVEL_MEMORY`]).
    fn pools(&self, from: usize) -> impl Iterator<Item = Pool> + '_ {
        let (mut first, mut count, mut held, mut total) = (from as u32, 0.0, 0.0, 0.0);
        self.levels.iter().enumerate().skip(from).filter_map(move |(k, &(n, mean))| {
            if count == 0.0 {
                first = k as u32;
            }
            let n = f64::from(n.min(LEVEL_MEMORY));
            count += n;
            held += n * k as f64;
            total += n * mean;
            if count < f64::from(MIN_ANSWERS) {
                return None;
            }
            let pool = Pool { first, held: held / count, latency: total / count };
            (count, held, total) = (0.0, 0.0, 0.0);
            Some(pool)
        })
    }

    /// Whether it is measuring the base at `now`: admitting only at an idle replica.
    fn measuring(&self, now: Time) -> bool {
        self.base().is_none() && self.measuring_until.is_some_and(|until| now < until)
    }

    /// The limits the levels show, as capacities (a request is admitted while the replica holds
    /// fewer): one more than the first count whose answers took [`QUEUED`] times the base, and for
    /// low priority that first count whose answers took [`LOW_PRIORITY_QUEUED`] times it. Counts
    /// with fewer than [`MIN_ANSWERS`] answers are pooled with the next ones until the pool has
    /// as many (each pool judged at its first count): under overload the low counts are passed
    /// through quickly and hold few answers each.
    fn limits_now(&self) -> Option<Limits> {
        let base = self.base?;
        let mut low = None;
        let queued = self.pools(1).find(|pool| {
            if low.is_none() && pool.latency >= LOW_PRIORITY_QUEUED * base {
                low = Some(pool.first);
            }
            pool.latency >= QUEUED * base
        })?;
        let normal = queued.first + 1;
        // Little's law: the requests in the replica over the time each spends there.
        let rate = (queued.held + 1.0) / queued.latency;
        Some(Limits { normal, low: low.unwrap_or(normal).min(normal), rate })
    }

    /// Whether a request finding `in_system` held would, on average, still be there when
    /// `deadline` has passed: each one held costs the replica's time per answer where it queues
    /// ([`Self::pace_now`]).
    fn doomed(&self, in_system: u32, deadline: Option<Duration>) -> bool {
        let (Some(pace), Some(left)) = (self.pace, deadline) else { return false };
        (f64::from(in_system) + 1.0) / pace >= nanos(left)
    }

    /// The answers per nanosecond the replica gives where it queues, its capacity: as measured
    /// while its workers are all taken ([`Busy`]) once it has been, else by Little's law (the
    /// requests held over their latency), the more of two estimates, at its limit and at the most
    /// it was seen to hold (the last pool of answers, if those queued: [`QUEUED`] times the
    /// quickest), since a pace too low refuses below capacity and one too high only refuses
    /// less. The limit's is too low where a base that came out low by chance put a replica of
    /// several workers' limit at two; the last pool's too high where requests left the queue
    /// unserved; a replica overloaded from its start has only the latter. A replica that does
    /// not queue has none, and none of its requests is doomed.
    fn pace_now(&self) -> Option<f64> {
        if let Some(pace) = self.limits.and(self.busy.pace()) {
            return Some(pace);
        }
        // One pass over the pools: this runs at every answer.
        let mut pools = self.pools(0);
        let quickest = pools.next()?;
        let most = pools.last().unwrap_or(quickest);
        let deepest = (most.latency >= QUEUED * quickest.latency).then(|| (most.held + 1.0) / most.latency);
        match (self.limits.map(|l| l.rate), deepest) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// The most a replica may hold and still admit a request without a fallback: none unless
    /// the arrivals of one of [`OVERLOAD_WINDOWS`] outnumber what it serves by its
    /// [`overload_margin`], and then the depth at which Poisson arrivals at that ratio `ρ` (the
    /// longer window's, if both) leave it idle [`IDLE_SHARE`] of the time (M/M/1/K:
    /// `(ρ − 1) / (ρ^(K+1) − 1)`), so it serves its capacity while the admitted wait some K
    /// services instead of the whole deadline.
    fn overload_depth(&self) -> Option<u32> {
        let ratio = OVERLOAD_WINDOWS
            .iter()
            .zip(&self.overload_arrivals)
            .map(|(&services, &(count, _))| (count / services, services))
            .find(|&(ratio, services)| ratio >= overload_margin(services))?
            .0;
        let depth = ((1.0 + (ratio - 1.0) / IDLE_SHARE).ln() / ratio.ln()).ceil() - 1.0;
        Some((depth as u32).max(self.limits.map_or(1, |l| l.normal)))
    }

    /// Counts an arrival at `now` and tells whether the arrivals of about the last interval
    /// outpaced what the replica serves at its limit: only then is one refused. One that is
    /// `needed` (not a race) also counts towards an overload beyond doubt.
    fn arrive(&mut self, now: Time, needed: bool) -> bool {
        if let Some(pace) = self.pace {
            for (services, (count, at)) in OVERLOAD_WINDOWS.iter().zip(&mut self.overload_arrivals) {
                *count = *count * (-nanos(now.saturating_sub(*at)) * pace / services).exp() + f64::from(needed);
                *at = now;
            }
        }
        let Some((limits, interval)) = self.limits.zip(self.interval()) else { return false };
        let (count, at) = &mut self.arrivals;
        let interval = nanos(interval);
        *count = *count * (-nanos(now.saturating_sub(*at)) / interval).exp() + 1.0;
        *at = now;
        *count >= limits.rate * interval
    }

    /// Follows the held count: starts or ends the stand of a queue at the limit; each interval
    /// it stands holds one more priority to its limit, the lowest first.
    fn follow(&mut self, now: Time, in_system: u32) {
        let Some((limit, interval)) = self.stand() else { return };
        if in_system < limit {
            self.full_since = None;
            return;
        }
        let (since, held_at_stand) = *self.full_since.get_or_insert((now, in_system));
        if now.saturating_sub(since) < interval || self.measuring(now) {
            return;
        }
        if self.limits.is_none() {
            self.full_since = None;
            self.measuring_until = Some(now + interval);
            return;
        }
        if !self.enforced(now) && in_system <= held_at_stand.min(limit + 1) {
            // It stood near its limit but did not grow: the service kept pace with the arrivals
            // (a busy replica below capacity), so nothing is refused yet; the next interval is
            // judged afresh. A queue well above its limit (a burst draining) is shed as before.
            self.full_since = Some((now, in_system));
            return;
        }
        // The lowest priority not held to its limit now, passing over one that was when the stand
        // began (a priority without traffic to keep its refusals going lapses while the queue
        // stands; the next one up is due), and low priority unless its requests arrive.
        let low_arrives = self.last_low.is_some_and(|t| now.saturating_sub(t) < interval);
        let unheld: SmallVec<[Priority; 2]> = [Priority::Low, Priority::Normal]
            .into_iter()
            .filter(|&p| (p != Priority::Low || low_arrives) && !self.sheds(now, p))
            .collect();
        let next = unheld.iter().find(|&&p| !self.sheds(since, p)).or(unheld.last()).copied();
        if let Some(next) = next {
            // The stand goes on: if it outlasts this limit's own interval (no arrival refused,
            // the queue still standing), the limit is due again at once, with no gap.
            self.full_since = Some((now, held_at_stand));
            self.shed_until[next as usize] = Some(now + interval);
        }
    }
}

/// The limits a replica's answers show.
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// While the limit is enforced, a request is admitted only if the replica holds fewer.
    normal: u32,
    /// The same for low priority.
    low: u32,
    /// The answers per nanosecond the replica gives at its limit: its capacity.
    rate: f64,
}

/// Counts of held requests pooled until they hold enough answers to judge.
#[derive(Clone, Copy)]
struct Pool {
    /// The first count of the pool.
    first: u32,
    /// The mean count the pool's answers found held.
    held: f64,
    /// Their mean latency (ns).
    latency: f64,
}

/// The interval a queue must stand for at a replica whose answers take `base`.
fn interval_of(base: Duration) -> Duration {
    (base * INTERVAL_BASES).max(MIN_INTERVAL)
}

impl Admission for AdaptiveAdmission {
    fn admit(&mut self, now: Time, in_system: u32) -> bool {
        self.admit_as(now, in_system, Arrival::default())
    }

    fn admit_as(&mut self, now: Time, in_system: u32, arrival: Arrival) -> bool {
        let priority = arrival.priority;
        if priority == Priority::Low {
            self.last_low = Some(now);
        }
        let outpaced = self.arrive(now, !arrival.marks.race);
        self.follow(now, in_system);
        if self.doomed(in_system, arrival.deadline) {
            return false;
        }
        // One refused elsewhere already, without a fallback, is held to the limit only where the
        // overload is beyond doubt or in a cold start in overload, which that refusal speaks for.
        let depth = self.overload_depth();
        let Marks { fallback, refused_elsewhere, .. } = arrival.marks;
        let weighed = refused_elsewhere && (depth.is_some() || self.measuring(now));
        if !fallback && !weighed {
            return depth.is_none_or(|depth| in_system < depth);
        }
        if self.measuring(now) {
            return in_system == 0;
        }
        let Some(limit) = self.limit(priority) else { return true };
        if !self.sheds(now, priority) || in_system < limit || !outpaced {
            return true;
        }
        // Arrivals of this priority still find the queue at its limit: it still stands for them.
        self.shed_until[priority as usize] = self.interval().map(|interval| now + interval);
        false
    }

    fn observe(&mut self, now: Time, in_system: u32) {
        self.follow(now, in_system);
        if let Some(limits) = self.limits {
            self.busy.follow(now, in_system, limits.normal.saturating_sub(1).max(1));
        }
    }

    fn answered(&mut self, now: Time, rif: u32, latency: Duration) {
        let k = rif as usize;
        if k == 0 && self.measuring(now) {
            // Measuring goes on while it learns: each answer at an idle replica extends it.
            self.measuring_until = self.stand().map(|(_, interval)| now + interval);
        }
        self.busy.answered(now);
        if k >= MOST_TRACKED {
            return;
        }
        if self.levels.len() <= k {
            self.levels.resize(k + 1, (0, 0.0));
        }
        let (n, mean) = &mut self.levels[k];
        *n = n.saturating_add(1);
        *mean += (nanos(latency) - *mean) / f64::from((*n).min(LEVEL_MEMORY));
        self.base = self.base_now();
        self.limits = self.limits_now();
        self.pace = self.pace_now();
    }

    fn capacity(&self, now: Time) -> Option<u32> {
        let state = self.state(now);
        state.limit.filter(|_| state.enforced)
    }

    fn state(&self, now: Time) -> AdmissionState {
        let measuring = self.measuring(now);
        AdmissionState {
            limit: if measuring { Some(1) } else { self.limit(Priority::Normal) },
            enforced: measuring || self.enforced(now),
            base: self.base(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A request whose caller retries a refusal elsewhere: the rules apply in full.
    const RETRIED: Arrival = Arrival {
        priority: Priority::Normal,
        marks: Marks { fallback: true, refused_elsewhere: false, race: false },
        deadline: None,
    };

    /// A one-worker replica of 100 ms service as its answers show it: 100 ms idle, 200 ms behind
    /// one, 300 ms behind two.
    fn one_worker() -> AdaptiveAdmission {
        one_worker_of(100 * MS)
    }

    /// A one-worker replica of `service` as its answers show it, idle and behind one and two.
    fn one_worker_of(service: Duration) -> AdaptiveAdmission {
        let mut a = AdaptiveAdmission::new();
        for held in 0..3 {
            for _ in 0..MIN_ANSWERS {
                a.answered(Time::ZERO, held, (held + 1) * service);
            }
        }
        a
    }

    /// Arrivals far beyond what the replica serves, from here on: each refusal the limit calls
    /// for is due.
    fn flooded(mut a: AdaptiveAdmission) -> AdaptiveAdmission {
        a.arrivals.0 = f64::MAX;
        a
    }

    #[test]
    fn learns_the_limit_where_a_request_waits_its_own_service() {
        let a = one_worker();
        assert_eq!(a.base(), Some(100 * MS));
        let learnt = AdmissionState { limit: Some(2), enforced: false, base: Some(100 * MS) };
        assert_eq!(a.state(Time::ZERO), learnt);
        // Behind one request an answer takes twice the base: a request may find one held, and
        // one of low priority none.
        assert_eq!(a.limit(Priority::Normal), Some(2));
        assert_eq!(a.limit(Priority::Low), Some(1));
        // Before enough answers at a count, nothing is known.
        let mut fresh = AdaptiveAdmission::new();
        fresh.answered(Time::ZERO, 0, 100 * MS);
        fresh.answered(Time::ZERO, 1, 200 * MS);
        assert_eq!(fresh.limit(Priority::Normal), None);
        assert!(fresh.admit_as(Time::ZERO, 1_000, RETRIED));
    }

    #[test]
    fn a_replica_that_does_not_queue_has_no_limit() {
        let mut a = AdaptiveAdmission::new();
        for held in 0..50 {
            for _ in 0..MIN_ANSWERS {
                a.answered(Time::ZERO, held, 100 * MS + held * MS);
            }
        }
        assert_eq!(a.limit(Priority::Normal), None);
        a.observe(Time::ZERO, 60);
        assert!(a.admit_as(10 * 100 * MS, 60, RETRIED));
    }

    #[test]
    fn a_burst_is_admitted_and_a_standing_queue_is_shed_until_it_drains() {
        let mut a = flooded(one_worker());
        // The interval is four bases: 400 ms. A queue at the limit from t = 1 s...
        let t = |ms: u64| Time::from_millis(ms);
        a.observe(t(1000), 2);
        // ... is a burst for 400 ms: everything is admitted, however long the queue.
        assert!(a.admit_as(t(1100), 3, RETRIED));
        assert!(a.admit_as(t(1399), 4, RETRIED));
        assert!(!a.enforced(t(1399)));
        // Standing a whole interval at its limit without growing, the replica kept pace: a new
        // interval is judged.
        a.observe(t(1400), 2);
        assert!(!a.enforced(t(1400)));
        assert!(a.admit_as(t(1400), 2, RETRIED));
        // Standing the next one and growing, the limit is enforced: a request finding two held
        // is refused (no low-priority request arrives to give way first).
        a.observe(t(1800), 3);
        assert!(a.sheds(t(1800), Priority::Normal));
        assert!(!a.admit_as(t(1800), 2, RETRIED));
        assert!(a.admit_as(t(1850), 1, RETRIED));
        assert_eq!(a.capacity(t(1850)), Some(2));
        // Each refusal keeps it for another interval: refused at 2.1 s, enforced until 2.5 s.
        assert!(!a.admit_as(t(2100), 2, RETRIED));
        a.observe(t(2150), 0);
        assert!(a.enforced(t(2499)));
        assert!(!a.enforced(t(2500)));
        assert!(a.admit_as(t(2500), 5, RETRIED));
        assert_eq!(a.capacity(t(2500)), None);
        // A burst well above the limit is shed once it has stood an interval, draining or not.
        a.observe(t(3000), 9);
        assert!(!a.admit_as(t(3400), 6, RETRIED));
    }

    #[test]
    fn a_fast_replica_s_queue_must_stand_codel_s_interval() {
        // One worker of 2 ms: four bases would be 8 ms, shorter than a busy machine's stalls.
        let mut a = one_worker_of(2 * MS);
        assert_eq!(a.limit(Priority::Normal), Some(2));
        let t = |ms: u64| Time::from_millis(ms);
        // A burst that grows the queue for 50 ms and drains is admitted whole.
        a.observe(t(1000), 2);
        for k in 1..=50 {
            assert!(a.admit_as(t(1000 + k), 2 + k as u32 / 10, RETRIED), "{k} ms into the burst");
        }
        a.observe(t(1060), 1);
        assert!(!a.enforced(t(1060)));
        // One that stands and grows for 100 ms, arrivals coming at twice what it serves (500
        // a second, Little's law at its limit: two held over 4 ms), is shed.
        a.observe(t(2000), 2);
        for k in 1..100 {
            assert!(a.admit_as(t(2000 + k), 2 + k as u32 / 2, RETRIED));
        }
        a.observe(t(2100), 52);
        assert!(!a.admit_as(t(2100), 52, RETRIED));
    }

    #[test]
    fn a_standing_queue_is_refused_only_while_arrivals_outpace_the_service() {
        // 10 answers a second at the limit (two held over 200 ms), an interval of 400 ms: a
        // refusal needs four arrivals in about the last interval.
        let mut a = one_worker();
        let t = |ms: u64| Time::from_millis(ms);
        // The queue stands and grows, but the arrivals come at half the rate it serves (a
        // stalled replica, a request stuck connecting): nothing is refused.
        a.observe(t(1000), 2);
        a.observe(t(1400), 3);
        assert!(a.sheds(t(1400), Priority::Normal));
        for k in 0..10 {
            assert!(a.admit_as(t(1400 + 200 * k), 3, RETRIED), "arrival {k}");
        }
        // Arrivals at twice the rate: refused once about the last interval holds four (the
        // count decays by e each interval: 2.5 at 3.4 s, 4.4 at 3.55 s).
        let refused: Vec<bool> = (0..6).map(|k| !a.admit_as(t(3400 + 50 * k), 3, RETRIED)).collect();
        assert_eq!(refused, [false, false, false, true, true, true]);
    }

    #[test]
    fn a_replica_at_its_limit_below_capacity_is_not_refused() {
        let mut a = flooded(one_worker());
        let t = |ms: u64| Time::from_millis(ms);
        // Three held (one over the limit) for 4 s, each interval ending where it began: busy,
        // keeping pace with its arrivals.
        for k in 0..=10 {
            a.observe(t(400 * k), 3);
        }
        assert!(!a.enforced(t(4000)));
        assert!(a.admit_as(t(4000), 3, RETRIED));
        // Four at the end of the next: it grew, and the limit is enforced.
        a.observe(t(4400), 4);
        assert!(!a.admit_as(t(4400), 3, RETRIED));
    }

    #[test]
    fn a_request_without_a_fallback_is_refused_only_when_it_would_miss_its_deadline() {
        let mut a = flooded(one_worker());
        let t = |ms: u64| Time::from_millis(ms);
        // A queue at the limit that stood a whole interval and grew: the limit is enforced.
        a.observe(t(1000), 2);
        a.observe(t(1400), 3);
        assert!(!a.admit_as(t(1400), 2, RETRIED));
        // A request no other replica may take is admitted there, if its deadline leaves room
        // for the mean latency behind two (300 ms: 100 ms a request held)...
        let lone = Arrival::default();
        assert!(a.admit_as(t(1401), 2, lone));
        assert!(a.admit_as(t(1402), 2, Arrival { deadline: Some(301 * MS), ..lone }));
        // ... and refused, enforced or not, when it would miss it on average.
        assert!(!a.admit_as(t(1403), 2, Arrival { deadline: Some(300 * MS), ..lone }));
        assert!(!a.admit_as(t(9000), 9, Arrival { deadline: Some(900 * MS), ..lone }));
        assert!(a.admit_as(t(9000), 7, Arrival { deadline: Some(900 * MS), ..lone }));
        // A replica whose latency does not grow with what it holds dooms nothing.
        let mut flat = AdaptiveAdmission::new();
        for held in 0..50 {
            for _ in 0..MIN_ANSWERS {
                flat.answered(Time::ZERO, held, 100 * MS);
            }
        }
        assert!(flat.admit_as(t(0), 500, Arrival { deadline: Some(101 * MS), ..lone }));
    }

    #[test]
    fn past_capacity_beyond_doubt_a_request_without_a_fallback_is_held_to_a_depth_that_keeps_the_replica_busy() {
        let lone = Arrival::default();
        let t = |ms: u64| Time::from_millis(ms);
        // One worker of 100 ms: 128 services' worth of arrivals is 12.8 s of them. At 90 % of
        // capacity for a minute, or at capacity, nothing is refused however long the queue.
        for gap in [111, 100] {
            let mut a = one_worker();
            for k in 0..600 {
                assert!(a.admit_as(t(k * gap), 500, lone), "one every {gap} ms, arrival {k}");
            }
        }
        // At twice its capacity for a minute the overload is beyond doubt (the count nears 256,
        // twice 128): a request is admitted while fewer than six are held, where arrivals at
        // twice the service leave the worker idle 1 % of the time (1 / (2^7 - 1) = 0.8 %).
        let mut a = one_worker();
        for k in 0..1200 {
            a.admit_as(t(k * 50), 0, lone);
        }
        assert_eq!(a.overload_depth(), Some(6));
        assert!(a.admit_as(t(60_000), 5, lone));
        assert!(!a.admit_as(t(60_001), 6, lone));
        // A quiet half minute later the doubt is back: admitted at any count.
        assert!(a.admit_as(t(90_000), 500, lone));
    }

    #[test]
    fn twice_the_capacity_is_beyond_doubt_within_seconds_and_less_only_over_the_long_count() {
        let lone = Arrival::default();
        let t = |ms: u64| Time::from_millis(ms);
        // One worker of 100 ms. At twice its capacity, four seconds (40 services) are enough: the
        // short count (16 services) is at 1.84 times the service, over its margin of 1.63.
        let mut a = one_worker();
        for k in 0..80 {
            a.admit_as(t(k * 50), 0, lone);
        }
        assert_eq!(a.overload_depth(), Some(7));
        // At 1.4 times, four seconds leave it in doubt; a minute is beyond it (the long count's
        // margin: 1.29).
        let mut a = one_worker();
        let gap = 71;
        for k in 0..57 {
            a.admit_as(t(k * gap), 0, lone);
        }
        assert_eq!(a.overload_depth(), None);
        for k in 57..845 {
            a.admit_as(t(k * gap), 0, lone);
        }
        assert_eq!(a.overload_depth(), Some(11));
    }

    #[test]
    fn the_pace_is_measured_while_every_worker_is_taken() {
        // Answers show one worker of 100 ms (Little's law at its limit: 10 a second), then it
        // serves a request every 250 ms while it holds one or more: 4 a second.
        let mut a = one_worker();
        let t = |ms: u64| Time::from_millis(ms);
        a.observe(t(0), 1);
        for k in 1..=20 {
            a.answered(t(k * 250), 1, 200 * MS);
        }
        assert_eq!(a.pace.map(|p| (p * 1e9 * 1000.0).round() / 1000.0), Some(4.0));
        // Idle time is not service: a second idle, then a request served in 250 ms.
        a.observe(t(5_000), 0);
        a.observe(t(6_000), 1);
        a.observe(t(6_250), 0);
        a.answered(t(6_250), 0, 250 * MS);
        assert_eq!(a.pace.map(|p| (p * 1e9 * 1000.0).round() / 1000.0), Some(4.0));
    }

    #[test]
    fn a_request_refused_elsewhere_is_held_to_the_limit_only_in_an_overload_beyond_doubt() {
        let t = |ms: u64| Time::from_millis(ms);
        let marks = Marks { fallback: false, refused_elsewhere: true, race: false };
        let follower = Arrival { marks, ..Arrival::default() };
        // The limit enforced, as for a pair of replicas that stand at their limits at once below
        // capacity: a request the other replica refused, with no retry left, is admitted.
        let mut a = flooded(one_worker());
        a.observe(t(1000), 2);
        a.observe(t(1400), 3);
        assert!(!a.admit_as(t(1400), 2, RETRIED));
        assert!(a.admit_as(t(1401), 2, follower));
        // Past capacity beyond doubt (arrivals at twice it for a minute), it is held to the
        // limit, where one without a fallback that no replica refused is held to the deeper depth.
        let mut a = one_worker();
        for k in 0..1200 {
            a.admit_as(t(60_000 + k * 50), 0, Arrival::default());
        }
        let a = &mut flooded(a);
        a.observe(t(120_000), 2);
        a.observe(t(120_400), 3);
        assert!(!a.admit_as(t(120_400), 2, follower));
        assert!(a.admit_as(t(120_401), 2, Arrival::default()));
    }

    #[test]
    fn races_do_not_make_an_overload_beyond_doubt() {
        let t = |ms: u64| Time::from_millis(ms);
        let follower = Arrival { marks: Marks { refused_elsewhere: true, ..Marks::default() }, ..Arrival::default() };
        // Arrivals at twice the capacity for a minute (as above), every other one a race (a
        // hedge): requests at the capacity and optional work beside them, no overload beyond
        // doubt. The limit still sheds the races; a request refused elsewhere is admitted.
        let race = Arrival { marks: Marks { fallback: true, race: true, ..Marks::default() }, ..Arrival::default() };
        let mut a = one_worker();
        for k in 0..1200 {
            a.admit_as(t(60_000 + k * 50), 0, if k % 2 == 0 { Arrival::default() } else { race });
        }
        let a = &mut flooded(a);
        a.observe(t(120_000), 2);
        a.observe(t(120_400), 3);
        assert!(!a.admit_as(t(120_400), 2, race));
        assert!(a.admit_as(t(120_401), 2, follower));
    }

    #[test]
    fn low_priority_is_refused_where_its_answers_begin_to_wait() {
        let mut a = AdaptiveAdmission::new();
        // Four workers of 100 ms: no wait up to three held, then a quarter service per request
        // ahead (125, 150, 175, 200 ms at 4, 5, 6, 7 held): low priority is refused at 4 held
        // (a quarter service waited), the rest at 6 (half a service waited at 5).
        for held in 0..10u32 {
            let wait = held.saturating_sub(3) * 25;
            for _ in 0..MIN_ANSWERS {
                a.answered(Time::ZERO, held, (100 + wait) * MS);
            }
        }
        assert_eq!(a.limit(Priority::Normal), Some(6));
        assert_eq!(a.limit(Priority::Low), Some(4));
        let mut a = flooded(a);
        a.observe(Time::ZERO, 6);
        assert!(a.admit_as(200 * MS, 6, Arrival { priority: Priority::Low, ..RETRIED }));
        let later = 400 * MS;
        a.observe(later, 7);
        // Where low-priority requests arrive, the first interval of a standing queue holds them
        // alone to their limit.
        assert!(a.sheds(later, Priority::Low) && !a.sheds(later, Priority::Normal));
        assert!(!a.admit_as(later, 4, Arrival { priority: Priority::Low, ..RETRIED }));
        assert!(a.admit_as(later, 3, Arrival { priority: Priority::Low, ..RETRIED }));
        assert!(a.admit_as(later, 6, Arrival { priority: Priority::Normal, ..RETRIED }));
        // A second holds the others to theirs.
        a.observe(500 * MS, 6);
        assert!(!a.admit_as(700 * MS, 6, Arrival { priority: Priority::Low, ..RETRIED }));
        let again = 900 * MS;
        a.observe(again, 7);
        assert!(a.sheds(again, Priority::Normal));
        assert!(a.admit_as(again, 5, Arrival { priority: Priority::Normal, ..RETRIED }));
        assert!(!a.admit_as(again, 6, Arrival { priority: Priority::Normal, ..RETRIED }));
    }

    #[test]
    fn a_replica_serving_several_at_once_takes_its_base_from_the_fewest_held() {
        // Four workers of 20 ms at 75 %: too few answers at an idle replica for the base, but
        // those near idle and the next counts up answered alike; from five up they wait.
        let mut a = AdaptiveAdmission::new();
        for (held, answers, ms) in
            [(0, 6, 20), (1, 12, 20), (2, 12, 20), (3, 12, 21), (4, 10, 22), (5, 8, 25), (6, 6, 30)]
        {
            for _ in 0..answers {
                a.answered(Time::ZERO, held, ms * MS);
            }
        }
        assert_eq!(a.base(), Some(20 * MS));
        assert_eq!(a.limit(Priority::Normal), None);
        // Three held standing a whole second is no queue there: nothing is measured or refused.
        let t = |ms: u64| Time::from_millis(ms);
        a.observe(t(0), 3);
        assert!(a.admit_as(t(1000), 3, RETRIED));
        assert!(a.admit_as(t(1001), 3, RETRIED));
        assert_eq!(a.state(t(1001)), AdmissionState { limit: None, enforced: false, base: Some(20 * MS) });
        // Answers at seven held that waited a whole service place the limit where their pool
        // begins (five: counts with few answers are pooled up), one request past it.
        for _ in 0..MIN_ANSWERS {
            a.answered(t(1001), 7, 40 * MS);
        }
        assert_eq!(a.limit(Priority::Normal), Some(6));
        // A one-worker replica's answers grow from the first counts up: no base until it has
        // been found idle often enough (or measured so).
        let mut one = AdaptiveAdmission::new();
        for (held, answers) in [(0, 10), (1, 6), (2, 16)] {
            for _ in 0..answers {
                one.answered(Time::ZERO, held, (held + 1) * 100 * MS);
            }
        }
        assert_eq!(one.base(), None);
    }

    #[test]
    fn a_cold_start_in_overload_measures_the_base_at_an_idle_replica() {
        let mut a = AdaptiveAdmission::new();
        // Overloaded from the start: every answer found four or five held (500 or 600 ms), none
        // the replica idle.
        for _ in 0..MIN_ANSWERS {
            a.answered(Time::ZERO, 4, 500 * MS);
            a.answered(Time::ZERO, 5, 600 * MS);
        }
        assert_eq!(a.base(), None);
        // Two or more held for an interval of the quickest answers (4 × 500 ms) starts measuring.
        let t = |ms: u64| Time::from_millis(ms);
        a.observe(t(1000), 6);
        assert!(a.admit_as(t(2999), 6, RETRIED));
        assert!(!a.admit_as(t(3000), 2, RETRIED));
        // Not one whose refusal would fail it: no other replica may take it.
        assert!(a.admit_as(t(3000), 2, Arrival::default()));
        assert!(!a.admit_as(t(3400), 1, RETRIED));
        assert_eq!(a.capacity(t(3400)), Some(1));
        assert_eq!(a.state(t(3400)), AdmissionState { limit: Some(1), enforced: true, base: None });
        assert!(a.admit_as(t(3500), 0, RETRIED));
        // Answers at an idle replica give the base; the limit replaces the measurement.
        for _ in 0..MIN_ANSWERS {
            a.answered(t(3600), 0, 100 * MS);
        }
        assert_eq!(a.base(), Some(100 * MS));
        let mut a = flooded(a);
        // Only four and five held have answers yet: the limit is five until fewer fill in.
        assert_eq!(a.limit(Priority::Normal), Some(5));
        assert!(a.admit_as(t(3700), 1, RETRIED));
        // Not measured again: the limit is enforced once its own queue stands (400 ms).
        a.observe(t(3700), 6);
        assert!(a.admit_as(t(4099), 7, RETRIED));
        assert!(!a.admit_as(t(4100), 7, Arrival { priority: Priority::Low, ..RETRIED }));
        a.observe(t(4100), 6);
        assert!(!a.admit_as(t(4300), 6, Arrival { priority: Priority::Low, ..RETRIED }));
        assert!(!a.admit_as(t(4500), 6, RETRIED));
    }
}
