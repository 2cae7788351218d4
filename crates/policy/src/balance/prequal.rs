//! Prequal: keep a small pool of fresh load reports (requests in flight, RIF, and latency) from
//! replicas drawn at random, and send each request to the best of the pool by the hot-cold
//! lexicographic (HCL) rule.
//!
//! Wydrowski, Kleinberg, Rumble, "Load is not what you should balance: Introducing Prequal",
//! NSDI 2024 (§3–§4). Per caller:
//! - **Reports.** A replica's sidecar reports its RIF and latency estimate ([`ProbeResponder`]) on
//!   every response it forwards ([`LoadReport`] in each attempt's [`Feedback`]) and in reply to a
//!   probe ([`Balancer::on_probe`]): both are the paper's probe reply, and both enter the pool.
//! - **Probes.** Each pick draws `probes_per_request` distinct replicas uniformly at random
//!   (fractions accumulate from pick to pick). Of those, the ones whose sidecar has reported
//!   before and whose report is no longer in the pool (stale, spent or evicted) are probed,
//!   unless the pick may not use them (ejected, or tried by this request) or a probe to them is
//!   pending; the driver sends the probes asynchronously ([`Balancer::take_probe`], the proxy and
//!   the simulator alike). A replica with a usable report needs no probe, and one that has never
//!   reported is never probed: a probe goes only where a sidecar has shown itself on real
//!   traffic, so none ever reaches a plain application. Nor is a replica whose last reported latency is shorter
//!   than a probe's round trip ([`Prequal::worth_probing`]): it is ranked as the next point says.
//! - **Replicas without a sidecar** (their answers carry no report, or a probe was answered with
//!   anything but a probe reply) and replicas not heard from yet are ranked from what this caller
//!   sees itself ([`OwnView`]): its own requests in flight there as their RIF, and as their latency
//!   the median of its recent answers from that replica that found as many of its requests there
//!   when sent, learnt as a sidecar learns its replica's latency by RIF (0 before the first answer,
//!   so an unknown replica is tried and its first answer says whether it has a sidecar). Such a
//!   replica is hot when it holds more of this caller's requests than the `hot_quantile` of the
//!   counts its recent requests found where they went, scaled by how quick the replica usually is,
//!   as reports are. Those of a pick's draw compete in the HCL rule beside the pool, and so do
//!   those whose sidecar reports but that are not worth a probe or have one pending, ranked as
//!   [`Prequal::ranked_locally`] says. A sidecar that arrives later shows itself on the next
//!   answer.
//! - **The pool** holds at most `pool_size` reports, at most one per replica (a newer report
//!   replaces an older one); a report older than `max_age`, or than the quickest nonzero latency
//!   estimate among the last [`RECENT_RIFS`] probe replies, is stale and dropped, and a new report
//!   into a full pool evicts the oldest.
//! - **HCL.** A replica is *hot* when its RIF is above the `hot_quantile` quantile of the RIFs of
//!   the last [`RECENT_RIFS`] probe replies, scaled by how quick the replica usually is (below),
//!   *cold* otherwise. Among cold candidates the one with the lowest latency estimate wins (ties:
//!   lower RIF, then the older report); if every one is hot, the one with the lowest RIF (ties:
//!   lower latency, then older). The threshold and the age limit are drawn from probe replies
//!   alone, which sample replicas at random: a response's report comes from a replica this caller
//!   chose, as a request left it, and would pull both down (on examples/balancing.yaml, p99 up to
//!   10 % higher with them).
//! - **Reuse.** A report serves at most `reuse_budget` picks. Each use also adds one to the
//!   report's RIF, as the request just sent is one more in flight there, so a reused report
//!   degrades instead of attracting a burst.
//! - With fewer usable reports than a pick draws replicas (the pool empty, aged out, holding only
//!   endpoints this request avoids, or the one report the last response left), the pick draws
//!   before it rather than after, and waits for its probes' replies, at most `probe_wait`
//!   ([`Balancer::probe_before_pick`]); with still no candidate, it is uniform at random among the
//!   eligible endpoints, as the paper falls back to a random replica.
//!
//! Where we differ from or fill in the paper:
//! - The paper's replicas answer probes only; ours also report on every response, as ORCA's
//!   per-request load reports do, so a caller that sends often keeps its pool fresh with few or
//!   no probes.
//! - The paper's clients also probe on a timer when idle, so the pool is fresh when a request
//!   comes; a balancer here has no timers, so a pick that finds the pool stale waits one round
//!   trip for its own probes instead (a caller sending under one request per report lifetime
//!   would otherwise always pick at random).
//! - The paper derives the reuse budget from the probe rate, the pool's turnover and `hot_quantile`
//!   and periodically removes the worst probe; we use a fixed budget and the age limit.
//! - The paper's replicas report the median latency of recent requests that arrived at the current
//!   RIF; our [`ProbeResponder`] does so over the last [`ProbeResponder::WINDOW`] answers per RIF
//!   (the same code in the simulator and the proxy).
//! - The paper's hot threshold is one RIF for all replicas, which assumes they serve at one speed.
//!   Where they differ (more workers, a faster machine, a gray replica beside a healthy one), the
//!   quicker one holds more requests at the same wait (Little's law: requests held are arrivals
//!   times time held) and was called hot for it, so picks went to the slower one, where a slow
//!   route's request waits longest. A replica's threshold is therefore the shared one times the
//!   median latency estimate of the last [`RECENT_RIFS`] probe replies over the median of its own
//!   last [`OWN_REPLIES`] (once it has sent half as many): a replica twice as quick as the typical
//!   one may hold twice as many. A replica that starts to queue reports longer latencies and its
//!   threshold falls, so the rule does not feed on the load it sends (a threshold from each
//!   replica's own RIFs did: the busier one's rose, and on equal replicas the load drifted to one
//!   of them). examples/routes.yaml's `gray` (held-out seeds 101–106): the recommended policy's
//!   p99 1,686 → 812 ms, the slow route's 2,417 → 1,863 ms, the quick route's 42.9 → 29.4 ms; the
//!   other examples within their seeds' spread (docs/policies.md, Prequal).
//! - A refusal (429) or an unreachable replica drops that replica's report from the pool.
//! - **A caller alone** (a single gateway, a lone client's sidecar, the lab's load generator)
//!   needs no probe: once [`RECENT_RIFS`] reports have shown a replica holding exactly this
//!   caller's requests (some), and no replica since has shown anyone else's twice in a row, its
//!   own counts are the replicas' RIFs, fresher than any report. It then ranks the endpoints (up
//!   to `pool_size` of them, from a random one on) by the HCL rule with its own count as the RIF
//!   and, as the latency, the estimate the replica last reported at that RIF
//!   ([`Prequal::latency_at`]); a pick neither probes nor waits, and its draw records the counts
//!   it would have probed as the recent replies the thresholds come from. A report of more
//!   requests than this caller has there, beyond those it gave up on, is someone else's (a
//!   report counts none of this caller's requests in transit either way); it takes two in a row
//!   from one replica, as one alone may have been overtaken on the way by a later report. The
//!   paper's callers are many; where one is alone, probing costs a round trip a pick and tells
//!   it less than it knows (examples/routes.yaml: 1.0–1.5 probes a request → none, and each
//!   route's p99 least-request's where it was 1–2 % above).

use super::{Balancer, Eligible, Pick};
use crate::config::{self, Check};
use crate::duration::text;
use crate::{EndpointId, Feedback, LoadReport, Outcome, Time};
use rand::Rng as _;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How many recent reports the hot threshold is the quantile of.
pub const RECENT_RIFS: usize = 64;

/// How many of its own recent probe replies tell how quick a replica usually is.
pub const OWN_REPLIES: usize = 16;

/// Settings of [`Prequal`]; a file may leave out any of them.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PrequalConfig {
    /// Replicas drawn per pick, on average, to be probed if their report is stale (default 3, the
    /// paper's r_probe in YouTube).
    pub probes_per_request: f64,
    /// The most reports kept (default 16, the paper's pool size).
    pub pool_size: u32,
    /// The longest a report stays usable (default 1 s). A report is stale sooner, once it is
    /// older than the quickest latency estimate among the last [`RECENT_RIFS`] reports (zeros
    /// aside): by then even the quickest replica has finished a request, and queues have moved.
    #[serde(with = "text")]
    pub max_age: Duration,
    /// How many picks one report may serve (default 2).
    pub reuse_budget: u32,
    /// The quantile of recent RIFs above which a replica of typical speed is hot (default 0.84,
    /// the paper's Q_RIF).
    pub hot_quantile: f64,
    /// How long a pick whose pool holds no usable report waits for its probes, sent before it
    /// rather than after (default 5 ms; 0: never, the pick is random as in the paper).
    #[serde(with = "text")]
    pub probe_wait: Duration,
}

impl Default for PrequalConfig {
    fn default() -> Self {
        PrequalConfig {
            probes_per_request: 3.0,
            pool_size: 16,
            max_age: Duration::from_secs(1),
            reuse_budget: 2,
            hot_quantile: 0.84,
            probe_wait: Duration::from_millis(5),
        }
    }
}

impl PrequalConfig {
    /// Checks the parameters; the error names the field.
    pub fn validate(&self) -> Check {
        config::non_negative("probes_per_request", self.probes_per_request)?;
        config::at_least_one("pool_size", self.pool_size)?;
        config::positive("max_age", self.max_age)?;
        config::at_least_one("reuse_budget", self.reuse_budget)?;
        config::fraction("hot_quantile", self.hot_quantile)
    }
}

/// A replica's load as its sidecar reports it, on a response or in reply to a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeReply {
    /// Requests the replica holds right now (queued or in service).
    pub in_flight: u32,
    /// Its latency estimate for a request arriving now.
    pub latency: Duration,
}

/// The replica's side of Prequal: it learns its latency at each RIF from its own answers and
/// reports the estimate for its current RIF (the simulator's replica model and the proxy's
/// ingress sidecar), on every response and in reply to probes.
///
/// As in the paper, latency is conditioned on the RIF a request found on arrival, and is the median
/// of the last [`ProbeResponder::WINDOW`] answers that found that RIF: one slow request (a slow route,
/// a large payload) among quick ones does not move it, where a moving average would report it for
/// many answers after. RIFs up to [`ProbeResponder::RIFS`] − 1 each keep their own answers, the last
/// one is shared by every higher RIF. A RIF not seen yet borrows the nearest RIF seen below it,
/// scaled by the requests ahead, else the nearest above it; a replica that has answered nothing
/// reports 0 (an unused replica is the one to try).
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeResponder {
    /// Per RIF on arrival, the latest answers' latencies.
    by_rif: [Recent; ProbeResponder::RIFS],
}

impl Default for ProbeResponder {
    fn default() -> Self {
        ProbeResponder { by_rif: [Recent::default(); ProbeResponder::RIFS] }
    }
}

impl ProbeResponder {
    /// RIFs told apart (0 to 62, and 63 or more).
    pub const RIFS: usize = 64;
    /// Answers per RIF whose median is the estimate.
    pub const WINDOW: usize = 8;

    fn bucket(rif: u32) -> usize {
        (rif as usize).min(Self::RIFS - 1)
    }

    /// A request that found `rif` requests on arrival was answered `latency` after it arrived.
    pub fn on_answer(&mut self, rif: u32, latency: Duration) {
        self.by_rif[Self::bucket(rif)].push(latency);
    }

    /// The report while the replica holds `in_flight` requests.
    pub fn reply(&self, in_flight: u32) -> ProbeReply {
        let estimate = estimate_at(in_flight, |rif| self.by_rif[rif].median());
        ProbeReply { in_flight, latency: estimate.map_or(Duration::ZERO, Duration::from_secs_f64) }
    }
}

/// The latency (seconds) at `rif` from those `known` at some RIF buckets: its bucket's, else the
/// nearest one below, grown in proportion to the requests ahead (one more request ahead, one
/// more service time), so that a replica whose queue grows without answering (a hang, a stall)
/// reports longer and longer waits instead of its last quick one; else the nearest one above.
/// The last bucket, shared by every RIF from it on, is grown so too: past capacity a replica
/// holding a thousand reported the latency of its answers that found sixty-three or more, the
/// same as one holding three hundred, and a caller alone piled its requests on it. The
/// replica's estimate ([`ProbeResponder::reply`]) and a caller alone's view of it
/// ([`Prequal::latency_at`]) alike.
fn estimate_at(rif: u32, known: impl Fn(usize) -> Option<f64>) -> Option<f64> {
    estimate_among(rif, ProbeResponder::RIFS, known)
}

/// [`estimate_at`] over `buckets` buckets of RIFs, the last shared by every RIF from it on.
fn estimate_among(rif: u32, buckets: usize, known: impl Fn(usize) -> Option<f64>) -> Option<f64> {
    let at = (rif as usize).min(buckets - 1);
    let ahead = f64::from(rif) + 1.0;
    let below = (0..=at).rev().find_map(|k| known(k).map(|l| l * ahead / (k as f64 + 1.0)));
    below.or_else(|| (at..buckets).find_map(known))
}

/// Counts of this caller's requests at a replica told apart by [`OwnView`] (0 to 6, and 7 or
/// more): a caller among several seldom has more at one replica.
const OWN_RIFS: usize = 8;

/// Attempts in flight to one replica whose count at send [`OwnView`] keeps.
const OWN_SENT: usize = 16;

/// What a caller learns of a replica from its own requests there, where no report says more (a
/// replica without a sidecar, or one not heard from yet): the latency of its answers by how many of
/// this caller's requests each found there when sent, kept as the replica's sidecar keeps its
/// latency by RIF ([`ProbeResponder`]: the median of the last answers at each count, so a slow
/// route's answer does not move it). For a caller alone that count is the replica's RIF, and the
/// estimate the report a sidecar would give; beside other callers, the answers at each count carry
/// the others' load on average, so the estimate is still a latency to compare with the reports'. (A
/// moving average of all answers times one more than the requests in flight, peak-EWMA's cost, read
/// a replica twice as slow as its reports at the same RIF: over a set half without sidecars, those
/// with one took 87 % of their capacity and the others 55 %, and in front of a plain application
/// Prequal's p90 was 5 to 7 times least-request's; docs/policies.md.)
#[derive(Clone, Copy, Debug, Default)]
struct OwnView {
    by_rif: [Recent; OWN_RIFS],
    /// The count each attempt in flight found when sent, oldest first: a ring of `sent_len`
    /// from `sent_head`. Answers of a replica that serves in order come back in order; where
    /// they do not, an answer is credited with the count of another attempt sent about then.
    /// Past [`OWN_SENT`] in flight the count at the answer stands in.
    sent: [u8; OWN_SENT],
    sent_head: u8,
    sent_len: u8,
}

impl OwnView {
    /// An attempt is sent, finding `in_flight` of this caller's there.
    fn on_send(&mut self, in_flight: u32) {
        if usize::from(self.sent_len) < OWN_SENT {
            let at = (usize::from(self.sent_head) + usize::from(self.sent_len)) % OWN_SENT;
            self.sent[at] = u8::try_from(in_flight).unwrap_or(u8::MAX);
            self.sent_len += 1;
        }
    }

    /// An attempt ended (`answered` after that long, if it was; `in_flight` of this caller's
    /// still there): returns the count it found when sent.
    fn on_end(&mut self, in_flight: u32, answered: Option<Duration>) -> u32 {
        let found = if self.sent_len > 0 {
            let found = self.sent[usize::from(self.sent_head)];
            self.sent_head = ((usize::from(self.sent_head) + 1) % OWN_SENT) as u8;
            self.sent_len -= 1;
            u32::from(found)
        } else {
            in_flight
        };
        if let Some(latency) = answered {
            self.by_rif[(found as usize).min(OWN_RIFS - 1)].push(latency);
        }
        found
    }

    /// The latency to expect with `in_flight` of this caller's there ([`estimate_at`]'s rule),
    /// zero before any answer.
    fn estimate(&self, in_flight: u32) -> Duration {
        let known = |k: usize| self.by_rif[k].median();
        estimate_among(in_flight, OWN_RIFS, known).map_or(Duration::ZERO, Duration::from_secs_f64)
    }

    /// How quick it usually is: the median of its answers that found none of this caller's.
    fn usual(&self) -> Option<Duration> {
        self.by_rif[0].median().map(Duration::from_secs_f64)
    }
}

/// The latest [`ProbeResponder::WINDOW`] latencies (microseconds) of answers at one RIF, a ring.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Recent {
    latencies: [u32; ProbeResponder::WINDOW],
    /// How many slots hold an answer (up to the window).
    len: u8,
    /// The slot the next answer takes.
    next: u8,
}

impl Recent {
    fn push(&mut self, latency: Duration) {
        let latency = u32::try_from(latency.as_micros()).unwrap_or(u32::MAX);
        self.latencies[usize::from(self.next)] = latency;
        self.next = (self.next + 1) % ProbeResponder::WINDOW as u8;
        self.len = (self.len + 1).min(ProbeResponder::WINDOW as u8);
    }

    /// The lower median (seconds), or `None` before the first answer.
    fn median(&self) -> Option<f64> {
        if self.len == 0 {
            return None;
        }
        let mut held = self.latencies;
        let held = &mut held[..usize::from(self.len)];
        let middle = (held.len() - 1) / 2;
        let (_, median, _) = held.select_nth_unstable(middle);
        Some(f64::from(*median) / 1e6)
    }
}

/// The weight of each new answer time in a caller's own moving average of a replica's latency
/// ([`Prequal::ranked_locally`]), and of a probe's round trip (1/4: recent ones count).
const WEIGHT: f64 = 0.25;

/// `average` moved by [`WEIGHT`] towards `sample` (seconds), or `sample` first.
fn moving_average(average: Option<f64>, sample: Duration) -> f64 {
    let sample = sample.as_secs_f64();
    average.map_or(sample, |avg| avg + WEIGHT * (sample - avg))
}

/// One report in the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Probe {
    endpoint: EndpointId,
    /// The replica's RIF as reported, plus the picks this report has served since.
    in_flight: u32,
    latency: Duration,
    received: Time,
    uses_left: u32,
}

/// Whether an endpoint has a sidecar that reports its load, as far as this caller knows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Sidecar {
    /// Not answered yet.
    #[default]
    Unknown,
    /// Its last answer carried a report.
    Reports,
    /// Its last answer carried none: a plain application, or a sidecar that does not trust us.
    Missing,
}

/// What this caller knows of one endpoint.
#[derive(Clone, Copy, Debug)]
struct Seen {
    sidecar: Sidecar,
    /// This caller's attempts in flight to it.
    in_flight: u32,
    /// Its latency as this caller's own answers from it tell.
    own: OwnView,
    /// The moving average of this caller's answer times from it, in seconds, once answered: how
    /// a replica whose sidecar reports is ranked while no report of it is in the pool.
    average: Option<f64>,
    /// The latency estimate of its last report (zero: none yet, or it has answered nothing).
    reported: Duration,
    /// When the probe to it in flight was drawn, if one is.
    probe_sent: Option<Time>,
    /// This caller's attempts there it gave up on (cancelled, timed out) that the replica may
    /// still hold, as far as its reports since tell.
    abandoned: u32,
    /// Its last report showed more requests than this caller's there (someone else's, or one of
    /// its own that answered first but whose report overtook this one on the way).
    showed_more: bool,
    /// The latest latency estimate it reported at each RIF, told apart as the replica does
    /// (microseconds, 0: none).
    reported_at: [u32; ProbeResponder::RIFS],
    /// The latency estimates of its last [`OWN_REPLIES`] probe replies, in whole microseconds, a
    /// ring written at `replies_next`.
    replied_us: [u32; OWN_REPLIES],
    replies: u8,
    replies_next: u8,
    /// Their median, once there are half as many: how quick it usually is.
    usual_latency: Option<Duration>,
}

impl Default for Seen {
    fn default() -> Self {
        Seen {
            sidecar: Sidecar::Unknown,
            in_flight: 0,
            own: OwnView::default(),
            average: None,
            reported: Duration::ZERO,
            probe_sent: None,
            abandoned: 0,
            showed_more: false,
            reported_at: [0; ProbeResponder::RIFS],
            replied_us: [0; OWN_REPLIES],
            replies: 0,
            replies_next: 0,
            usual_latency: None,
        }
    }
}

impl Seen {
    /// A probe reply from it estimated `latency`.
    fn record_reply(&mut self, latency: Duration) {
        let at = usize::from(self.replies_next);
        self.replied_us[at] = u32::try_from(latency.as_micros()).unwrap_or(u32::MAX);
        self.replies_next = ((at + 1) % OWN_REPLIES) as u8;
        self.replies = (usize::from(self.replies) + 1).min(OWN_REPLIES) as u8;
        let replies = usize::from(self.replies);
        if replies >= OWN_REPLIES / 2 {
            let mut sorted = self.replied_us;
            self.usual_latency = quantile(&mut sorted[..replies], 0.5).map(|us| Duration::from_micros(us.into()));
        }
    }
}

/// The `q` quantile of `values`, reordering them: the smallest value with at least that share of
/// them at or below it (for 0.5, the lower of the two middle ones); none for none. A selection,
/// not a sort: it runs at every pick that follows a probe reply.
fn quantile<T: Ord + Copy>(values: &mut [T], q: f64) -> Option<T> {
    if values.is_empty() {
        return None;
    }
    let rank = (q * values.len() as f64).ceil() as usize;
    Some(*values.select_nth_unstable(rank.max(1) - 1).1)
}

/// The last [`RECENT_RIFS`] values recorded, a ring.
#[derive(Clone, Debug, Default)]
struct Recents<T> {
    values: Vec<T>,
    next: usize,
}

impl<T: Copy + Ord + Default> Recents<T> {
    fn push(&mut self, value: T) {
        if self.values.len() < RECENT_RIFS {
            self.values.push(value);
        } else {
            self.values[self.next] = value;
        }
        self.next = (self.next + 1) % RECENT_RIFS;
    }

    /// Their `q` quantile ([`quantile`]), the ring left as it is.
    fn quantile(&self, q: f64) -> Option<T> {
        let mut copy = [T::default(); RECENT_RIFS];
        let copy = &mut copy[..self.values.len()];
        copy.copy_from_slice(&self.values);
        quantile(copy, q)
    }
}

/// A hot threshold and a typical latency, drawn from recent RIFs and latencies.
#[derive(Clone, Debug)]
struct Thresholds {
    rifs: Recents<u32>,
    latencies: Recents<Duration>,
    /// The `hot_quantile` quantile of `rifs` (`u32::MAX` before any): the hot threshold of a
    /// replica of typical speed.
    hot: u32,
    /// The median of `latencies`: a typical replica's.
    typical: Duration,
    /// Values recorded since `hot` and `typical` were drawn.
    stale: u32,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            rifs: Recents::default(),
            latencies: Recents::default(),
            hot: u32::MAX,
            typical: Duration::ZERO,
            stale: 0,
        }
    }
}

impl Thresholds {
    /// Draws `hot` and `typical` again once `every` values were recorded since they were.
    fn refresh(&mut self, hot_quantile: f64, every: u32) {
        if self.stale < every.max(1) {
            return;
        }
        self.stale = 0;
        self.hot = self.rifs.quantile(hot_quantile).unwrap_or(u32::MAX);
        self.typical = self.latencies.quantile(0.5).unwrap_or_default();
    }

    /// The RIF above which a replica that usually answers in `usual` is hot: the shared
    /// threshold times how many times quicker than the typical replica it is; the shared one
    /// without a usual latency.
    fn hot_for(&self, usual: Option<Duration>) -> u32 {
        match usual {
            Some(usual) if self.hot != u32::MAX && !usual.is_zero() && !self.typical.is_zero() => {
                let scaled = f64::from(self.hot) * self.typical.as_secs_f64() / usual.as_secs_f64();
                scaled.round().min(f64::from(u32::MAX)) as u32
            }
            _ => self.hot,
        }
    }
}

/// How many of this caller's sends and answers at once the thresholds of its own view
/// ([`Prequal::own_thresholds`]) are drawn again after: a pick at a time would cost a selection
/// over the recent counts on every request.
const OWN_REFRESH: u32 = 8;

/// A candidate of a pick: a report in the pool, or an endpoint ranked from this caller's view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Candidate {
    Pool(usize),
    Local(EndpointId),
}

/// The Prequal balancer: a pool of reports and the HCL rule.
#[derive(Clone, Debug)]
pub struct Prequal {
    config: PrequalConfig,
    pool: Vec<Probe>,
    /// From the RIFs and latency estimates of the last [`RECENT_RIFS`] probe replies.
    thresholds: Thresholds,
    /// From this caller's own view, for the replicas ranked by it: the counts of its requests
    /// that its last sends found where they went, and the answer times of its last requests
    /// that found none of its own there. Kept only while some endpoint has shown no sidecar.
    own_thresholds: Thresholds,
    /// The endpoints whose last answer carried no report, or that have not answered yet. While
    /// there are none, nothing is ranked by this caller's own view, and neither it nor its
    /// thresholds are kept (a replica whose sidecar goes later starts its view afresh, an answer
    /// or two credited with a count from before).
    unreported: usize,
    /// Draws owed: the fraction of `probes_per_request` not drawn yet.
    credit: f64,
    /// Probes asked for by the last draw and not yet taken by the driver.
    due: Vec<EndpointId>,
    /// Endpoints of the last draw without a report to go by: candidates of the next pick.
    locals: Vec<EndpointId>,
    /// The replicas a pick drew (kept to reuse its allocation).
    drawn: Vec<EndpointId>,
    /// The next pick's draw was made before it ([`Balancer::probe_before_pick`]).
    drawn_ahead: bool,
    eligible: Eligible,
    seen: Vec<Seen>,
    /// The moving average of probes' round trips (draw to reply), in seconds, once one replied.
    probe_rtt: Option<f64>,
    /// Reports that showed a replica holding this caller's requests and no one else's, since a
    /// replica last showed someone else's (twice in a row).
    alone: u32,
}

impl Prequal {
    /// A balancer over endpoints `0..endpoints`, with an empty pool.
    pub fn new(endpoints: usize, config: PrequalConfig) -> Self {
        Prequal {
            config,
            pool: Vec::with_capacity(config.pool_size as usize),
            thresholds: Thresholds::default(),
            own_thresholds: Thresholds::default(),
            unreported: endpoints,
            credit: 0.0,
            due: Vec::new(),
            locals: Vec::new(),
            drawn: Vec::new(),
            drawn_ahead: false,
            eligible: Eligible::new(endpoints),
            seen: vec![Seen::default(); endpoints],
            probe_rtt: None,
            alone: 0,
        }
    }

    /// Whether this caller is alone: [`RECENT_RIFS`] reports showed a replica holding exactly
    /// its requests (some), and no replica since showed anyone else's twice in a row. Its own
    /// counts are then the replicas' RIFs, fresher than any report.
    fn is_alone(&self) -> bool {
        self.alone >= RECENT_RIFS as u32
    }

    /// `endpoint`'s latency estimate at `rif`, from the ones it reported, as the replica would
    /// draw it from its answers ([`estimate_at`]); zero if none.
    fn latency_at(&self, endpoint: EndpointId, rif: u32) -> Duration {
        let reported = &self.seen[endpoint].reported_at;
        let known = |k: usize| (reported[k] != 0).then(|| f64::from(reported[k]) / 1e6);
        estimate_at(rif, known).map_or(Duration::ZERO, Duration::from_secs_f64)
    }

    /// Draws the shared hot threshold and the typical latency from the recent replies, if one
    /// came since they were last drawn: the `hot_quantile` quantile of their RIFs and the median
    /// of their latency estimates. At most once a pick, and only after a probe reply. Those of
    /// this caller's own view likewise, every [`OWN_REFRESH`] sends and answers.
    fn refresh_thresholds(&mut self) {
        self.thresholds.refresh(self.config.hot_quantile, 1);
        if self.unreported > 0 {
            self.own_thresholds.refresh(self.config.hot_quantile, OWN_REFRESH);
        }
    }

    /// The RIF above which `endpoint` is hot: the shared threshold times how many times quicker
    /// than the typical replica it usually is; the shared one until it has a usual latency.
    fn hot_threshold_of(&self, endpoint: EndpointId) -> u32 {
        self.thresholds.hot_for(self.seen[endpoint].usual_latency)
    }

    /// The HCL choice among the pool's reports and the drawn endpoints ranked locally, leaving
    /// out the endpoints in `exclude`; alone, among the endpoints from `start` on, each ranked
    /// by this caller's count there and the replica's estimate at it.
    fn hcl(&self, exclude: &[EndpointId], start: usize) -> Option<Candidate> {
        let (n, alone) = (self.seen.len(), self.is_alone());
        let window = if alone { n.min(self.config.pool_size as usize) } else { 0 };
        let own = (0..window).map(|i| (i + start) % n).filter(|e| !exclude.contains(e)).map(|e| {
            let rif = self.seen[e].in_flight;
            match self.seen[e].sidecar {
                Sidecar::Reports => (Candidate::Local(e), rif > self.hot_threshold_of(e), rif, self.latency_at(e, rif)),
                Sidecar::Unknown | Sidecar::Missing => self.ranked_locally(e),
            }
        });
        let pool = self.pool.iter().enumerate().filter(|(_, p)| !alone && !exclude.contains(&p.endpoint));
        let pool = pool.map(|(i, p)| {
            (Candidate::Pool(i), p.in_flight > self.hot_threshold_of(p.endpoint), p.in_flight, p.latency)
        });
        let locals = self.locals.iter().filter(|e| !exclude.contains(e)).map(|&e| self.ranked_locally(e));
        // Cold before hot; among cold, latency then RIF; among hot, RIF then latency. Older
        // reports come first in the pool, then the draw in its order, and `min_by_key` keeps the
        // first of equals.
        own.chain(pool)
            .chain(locals)
            .min_by_key(|&(_, hot, in_flight, latency)| {
                if hot {
                    (true, Duration::ZERO, in_flight, latency)
                } else {
                    (false, latency, in_flight, Duration::ZERO)
                }
            })
            .map(|(candidate, ..)| candidate)
    }

    /// `endpoint` as this caller sees it: its requests in flight there as the RIF. A replica
    /// without reports ([`OwnView`]) is hot above the threshold of this caller's own view, and
    /// its latency is what its answers at that count took. One whose sidecar reports, drawn while
    /// its probe is pending or not worth one, stands in for a report to come: hot only above the
    /// reports' threshold, and its latency this caller's average answer time for each of its
    /// requests there and a new one (peak-EWMA's cost), which a slow answer raises, so that it
    /// seldom outbids a fresh report (ranked by its own view instead, examples/overload.yaml's
    /// recommended policy with adaptive admission lost 0.1-1.4 points of success at 90 % load).
    fn ranked_locally(&self, endpoint: EndpointId) -> (Candidate, bool, u32, Duration) {
        let seen = &self.seen[endpoint];
        let (hot, latency) = if seen.sidecar == Sidecar::Reports {
            let average = seen.average.map_or(0.0, |l| l * f64::from(seen.in_flight + 1));
            (seen.in_flight > self.thresholds.hot, Duration::from_secs_f64(average))
        } else {
            (seen.in_flight > self.own_thresholds.hot_for(seen.own.usual()), seen.own.estimate(seen.in_flight))
        };
        (Candidate::Local(endpoint), hot, seen.in_flight, latency)
    }

    /// Spends one use of the report at `index`: one more request in flight there; gone when spent.
    fn use_probe(&mut self, index: usize) -> EndpointId {
        let probe = &mut self.pool[index];
        probe.in_flight = probe.in_flight.saturating_add(1);
        probe.uses_left -= 1;
        let endpoint = probe.endpoint;
        if probe.uses_left == 0 {
            self.pool.remove(index);
        }
        endpoint
    }

    /// How long a report stays usable: `max_age`, or less, the quickest nonzero latency estimate
    /// among the recent reports.
    fn max_age(&self) -> Duration {
        let quickest = self.thresholds.latencies.values.iter().filter(|l| !l.is_zero()).min();
        quickest.map_or(self.config.max_age, |q| self.config.max_age.min(*q))
    }

    /// Drops the reports older than [`Prequal::max_age`].
    fn age_out(&mut self, now: Time) {
        let max_age = self.max_age();
        self.pool.retain(|p| now.saturating_sub(p.received) <= max_age);
    }

    /// Whether a probe of `endpoint` can tell more than it costs. Its reply describes the
    /// replica as it was half a round trip before arriving, and a report is stale once older
    /// than a replica's latency ([`Prequal::max_age`]): where the replica's last reported
    /// latency is shorter than a probe's round trip, the reply is stale about as soon as it
    /// arrives, and the probe is one more exchange as costly as the request it would place (a
    /// sub-millisecond service probed on every request cost the egress as much CPU as three
    /// requests; bench/proxy-overhead.sh). Such a replica is ranked from this caller's own view
    /// instead, as one without a sidecar is. Unknown yet (no probe answered, or no latency
    /// reported): worth it.
    fn worth_probing(&self, endpoint: EndpointId) -> bool {
        let reported = self.seen[endpoint].reported;
        self.probe_rtt.is_none_or(|rtt| reported.is_zero() || reported.as_secs_f64() >= rtt)
    }

    /// Whether a probe of `endpoint` drawn before `now` may still be answered: one drawn less than
    /// `max_age` ago. Its reply will say what another probe's would, so none is sent meanwhile;
    /// one unanswered for that long is taken as lost (a probe that fails is dropped unanswered).
    fn probe_pending(&self, endpoint: EndpointId, now: Time) -> bool {
        self.seen[endpoint].probe_sent.is_some_and(|sent| now.saturating_sub(sent) < self.config.max_age)
    }

    /// Draws this pick's replicas: distinct, uniformly at random. Those whose sidecar reported
    /// before, but whose report is no longer in the pool (aged out, spent, evicted), are to be
    /// probed if worth it ([`Prequal::worth_probing`]), if the pick may use them (not in
    /// `exclude`: an ejected replica probed on every pick cost the egress a probe per request)
    /// and if no probe to them is pending; the others without a report to go by are candidates of
    /// the next pick. (The pool has been aged at `now`.)
    fn draw(&mut self, now: Time, rng: crate::Rng<'_>, exclude: &[EndpointId]) {
        self.due.clear();
        self.locals.clear();
        if !self.has_choice(exclude) {
            self.drawn.clear();
            return;
        }
        self.credit += self.config.probes_per_request;
        let count = (self.credit.floor() as usize).min(self.seen.len());
        self.credit -= count as f64;
        sample_into(rng, self.seen.len(), count, &mut self.drawn);
        for &e in &self.drawn {
            match self.seen[e].sidecar {
                Sidecar::Reports if self.pool.iter().any(|p| p.endpoint == e) => {}
                Sidecar::Reports if self.worth_probing(e) && !exclude.contains(&e) && !self.probe_pending(e, now) => {
                    self.seen[e].probe_sent = Some(now);
                    self.due.push(e);
                }
                Sidecar::Reports | Sidecar::Unknown | Sidecar::Missing => self.locals.push(e),
            }
        }
        // Taken from the end: reversed so the driver sends them in the order drawn.
        self.due.reverse();
    }

    /// Whether a pick that leaves out `exclude` has a choice to make. A probe informs a choice
    /// only, so a pick with one endpoint to go to (an upstream of one address, such as a
    /// Kubernetes Service's, or a retry with one endpoint left) neither probes nor waits for one.
    fn has_choice(&self, exclude: &[EndpointId]) -> bool {
        self.seen.len().saturating_sub(exclude.len()) > 1
    }

    /// A probe reply from `endpoint`, among the recent ones.
    fn record_probe(&mut self, endpoint: EndpointId, reply: ProbeReply) {
        self.thresholds.rifs.push(reply.in_flight);
        self.thresholds.latencies.push(reply.latency);
        self.thresholds.stale = self.thresholds.stale.saturating_add(1);
        self.seen[endpoint].record_reply(reply.latency);
    }

    /// Alone, a pick's draw needs no probe: the replies its probes would bring are this
    /// caller's own counts and the latencies the replicas last reported at them.
    fn draw_alone(&mut self, rng: crate::Rng<'_>) {
        self.credit += self.config.probes_per_request;
        let count = (self.credit.floor() as usize).min(self.seen.len());
        self.credit -= count as f64;
        let mut drawn = std::mem::take(&mut self.drawn);
        sample_into(rng, self.seen.len(), count, &mut drawn);
        for &e in &drawn {
            let in_flight = self.seen[e].in_flight;
            if self.seen[e].sidecar == Sidecar::Reports {
                self.record_probe(e, ProbeReply { in_flight, latency: self.latency_at(e, in_flight) });
            }
        }
        self.drawn = drawn;
    }

    /// What an answer from `endpoint` at `now` said of its load: a probe's (`probed`), or a
    /// response's. Only probe replies join the recent ones the hot threshold and the age limit
    /// are drawn from: they sample replicas at random, while a response's report comes from a
    /// replica this caller chose, just as a request left it, and would pull both down.
    fn on_report(&mut self, endpoint: EndpointId, now: Time, report: LoadReport, probed: bool) {
        let Some(seen) = self.seen.get_mut(endpoint) else { return };
        let reply = match report {
            LoadReport::None => return,
            LoadReport::Missing => {
                if seen.sidecar == Sidecar::Reports {
                    self.unreported += 1;
                }
                seen.sidecar = Sidecar::Missing;
                self.pool.retain(|p| p.endpoint != endpoint);
                return;
            }
            LoadReport::Load(reply) => reply,
        };
        if seen.sidecar != Sidecar::Reports {
            self.unreported -= 1;
        }
        seen.sidecar = Sidecar::Reports;
        seen.reported = reply.latency;
        // A replica counts no more of this caller's requests than the caller does (those on the
        // wire either way are counted here only), beyond those it gave up on, unless this report
        // was overtaken by a later one (answers race on separate connections): more than that
        // twice in a row is someone else's load. Exactly this caller's (some) says it is alone.
        let beyond = reply.in_flight.saturating_sub(seen.in_flight);
        let more = beyond > seen.abandoned;
        if more && seen.showed_more {
            self.alone = 0;
        } else if reply.in_flight == seen.in_flight && reply.in_flight > 0 {
            self.alone = self.alone.saturating_add(1);
        }
        seen.showed_more = more;
        seen.abandoned = seen.abandoned.min(beyond);
        seen.reported_at[ProbeResponder::bucket(reply.in_flight)] =
            u32::try_from(reply.latency.as_micros()).unwrap_or(u32::MAX).max(1);
        if probed {
            self.record_probe(endpoint, reply);
        }
        self.pool.retain(|p| p.endpoint != endpoint);
        if self.pool.len() >= self.config.pool_size as usize {
            // The pool is in arrival order: the oldest report is first.
            self.pool.remove(0);
        }
        let uses_left = self.config.reuse_budget;
        self.pool.push(Probe {
            endpoint,
            in_flight: reply.in_flight,
            latency: reply.latency,
            received: now,
            uses_left,
        });
    }
}

/// `amount` distinct indices below `length`, drawn uniformly at random into `out`: rand's
/// `seq::index::sample`, to the draw (the simulator's runs depend on it), without its allocation
/// for the few a pick asks for: below 12 it uses Floyd's algorithm, written out here.
fn sample_into(rng: crate::Rng<'_>, length: usize, amount: usize, out: &mut Vec<EndpointId>) {
    out.clear();
    let (Ok(length), Ok(amount)) = (u32::try_from(length), u32::try_from(amount)) else {
        out.extend(rand::seq::index::sample(rng, length, amount).iter());
        return;
    };
    if amount >= 12 {
        out.extend(rand::seq::index::sample(rng, length as usize, amount as usize).iter());
        return;
    }
    for j in length - amount..length {
        let t = rng.gen_range(0..=j);
        match out.iter().position(|&x| x == t as usize) {
            Some(at) => out.insert(at, j as usize),
            None => out.push(t as usize),
        }
    }
}

impl Balancer for Prequal {
    fn pick(&mut self, pick: &mut Pick<'_>) -> Option<EndpointId> {
        self.age_out(pick.now);
        self.refresh_thresholds();
        let start = if self.is_alone() { pick.rng.gen_range(0..self.seen.len().max(1)) } else { 0 };
        let chosen = match self.hcl(pick.exclude, start) {
            Some(Candidate::Pool(index)) => Some(self.use_probe(index)),
            Some(Candidate::Local(endpoint)) => Some(endpoint),
            None => {
                let candidates = self.eligible.among(pick.exclude);
                (!candidates.is_empty()).then(|| candidates.get(pick.rng.gen_range(0..candidates.len())))
            }
        };
        let drawn_ahead = std::mem::take(&mut self.drawn_ahead);
        if self.is_alone() {
            self.locals.clear();
            self.draw_alone(&mut *pick.rng);
        } else if drawn_ahead {
            self.locals.clear();
        } else {
            self.draw(pick.now, &mut *pick.rng, pick.exclude);
        }
        chosen
    }

    fn probe_before_pick(&mut self, now: Time, rng: crate::Rng<'_>, exclude: &[EndpointId]) -> Option<Duration> {
        if self.config.probe_wait.is_zero() || self.is_alone() || !self.has_choice(exclude) {
            return None;
        }
        self.age_out(now);
        // As many usable reports as a pick draws replicas (fewer only when there are fewer
        // endpoints): a lone report, as the last response leaves, is no choice.
        let eligible = self.seen.len().saturating_sub(exclude.len());
        let wanted = (self.config.probes_per_request.ceil() as usize).min(eligible).max(1);
        if self.pool.iter().filter(|p| !exclude.contains(&p.endpoint)).count() >= wanted {
            return None;
        }
        self.draw(now, rng, exclude);
        self.drawn_ahead = true;
        (!self.due.is_empty()).then_some(self.config.probe_wait)
    }

    fn grow(&mut self, endpoints: usize) {
        if endpoints > self.seen.len() {
            self.unreported += endpoints - self.seen.len();
            self.seen.resize(endpoints, Seen::default());
        }
        self.eligible.grow(endpoints);
    }

    fn on_send(&mut self, endpoint: EndpointId, _now: Time) {
        if let Some(seen) = self.seen.get_mut(endpoint) {
            if self.unreported > 0 {
                seen.own.on_send(seen.in_flight);
                self.own_thresholds.rifs.push(seen.in_flight);
                self.own_thresholds.stale = self.own_thresholds.stale.saturating_add(1);
            }
            seen.in_flight += 1;
        }
    }

    fn on_feedback(&mut self, endpoint: EndpointId, now: Time, feedback: &Feedback) {
        let Some(seen) = self.seen.get_mut(endpoint) else { return };
        seen.in_flight = seen.in_flight.saturating_sub(1);
        if matches!(feedback.outcome, Outcome::Cancelled | Outcome::TimedOut) {
            seen.abandoned += 1;
        }
        let answered = matches!(feedback.outcome, Outcome::Success | Outcome::Error | Outcome::TimedOut);
        if answered {
            seen.average = Some(moving_average(seen.average, feedback.rtt));
        }
        if self.unreported > 0 && seen.own.on_end(seen.in_flight, answered.then_some(feedback.rtt)) == 0 && answered {
            self.own_thresholds.latencies.push(feedback.rtt);
            self.own_thresholds.stale = self.own_thresholds.stale.saturating_add(1);
        }
        self.on_report(endpoint, now, feedback.load, false);
        if matches!(feedback.outcome, Outcome::Rejected | Outcome::Unavailable) {
            self.pool.retain(|p| p.endpoint != endpoint);
        }
    }

    fn take_probe(&mut self) -> Option<EndpointId> {
        self.due.pop()
    }

    fn sends_probes(&self) -> bool {
        true
    }

    fn on_probe(&mut self, endpoint: EndpointId, now: Time, report: LoadReport) {
        if let Some(sent) = self.seen.get_mut(endpoint).and_then(|seen| seen.probe_sent.take()) {
            let rtt = now.saturating_sub(sent);
            self.probe_rtt = Some(moving_average(self.probe_rtt, rtt));
        }
        self.on_report(endpoint, now, report, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_pcg::Pcg64Mcg;

    const MS: Duration = Duration::from_millis(1);
    const SEC: Duration = Duration::from_secs(1);

    fn prequal(endpoints: usize, config: PrequalConfig) -> (Prequal, Pcg64Mcg) {
        (Prequal::new(endpoints, config), Pcg64Mcg::seed_from_u64(7))
    }

    /// A balancer whose endpoints have all reported once, at time 0 (RIF 0, 100 ms): from 101 ms
    /// on every report is stale, and every endpoint is one to probe.
    fn reported(endpoints: usize, config: PrequalConfig) -> (Prequal, Pcg64Mcg) {
        let (mut b, rng) = prequal(endpoints, config);
        (0..endpoints).for_each(|e| report(&mut b, e, Time::ZERO, 0, 100));
        (b, rng)
    }

    fn no_probes() -> PrequalConfig {
        PrequalConfig { probes_per_request: 0.0, ..PrequalConfig::default() }
    }

    /// The shared hot threshold as the next pick will draw it.
    fn hot_rif(b: &mut Prequal) -> u32 {
        b.refresh_thresholds();
        b.thresholds.hot
    }

    /// `endpoint`'s hot threshold as the next pick will draw it.
    fn threshold_of(b: &mut Prequal, endpoint: EndpointId) -> u32 {
        b.refresh_thresholds();
        b.hot_threshold_of(endpoint)
    }

    fn pick_at(b: &mut Prequal, rng: &mut Pcg64Mcg, now: Time, exclude: &[EndpointId]) -> Option<EndpointId> {
        b.pick(&mut Pick { now, rng, exclude, true_loads: None })
    }

    fn reply(in_flight: u32, latency_ms: u32) -> ProbeReply {
        ProbeReply { in_flight, latency: MS * latency_ms }
    }

    /// `endpoint`'s sidecar reports `in_flight` and `latency_ms` at `now` (a probe's reply).
    fn report(b: &mut Prequal, endpoint: EndpointId, now: Time, in_flight: u32, latency_ms: u32) {
        b.on_probe(endpoint, now, LoadReport::Load(reply(in_flight, latency_ms)));
    }

    fn probes(b: &mut Prequal) -> Vec<EndpointId> {
        std::iter::from_fn(|| b.take_probe()).collect()
    }

    /// The probes asked for, in endpoint order.
    fn sorted_probes(b: &mut Prequal) -> Vec<EndpointId> {
        let mut sent = probes(b);
        sent.sort_unstable();
        sent
    }

    #[test]
    fn the_defaults_are_the_papers_where_it_gives_them() {
        let c = PrequalConfig::default();
        assert_eq!((c.probes_per_request, c.pool_size, c.hot_quantile), (3.0, 16, 0.84));
        assert_eq!((c.max_age, c.reuse_budget, c.probe_wait), (SEC, 2, 5 * MS));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn validation_names_the_field() {
        let bad = PrequalConfig { hot_quantile: 1.5, ..PrequalConfig::default() };
        assert!(bad.validate().unwrap_err().to_string().contains("hot_quantile"));
        let bad = PrequalConfig { reuse_budget: 0, ..PrequalConfig::default() };
        assert!(bad.validate().unwrap_err().to_string().contains("reuse_budget"));
        let bad = PrequalConfig { probes_per_request: -1.0, ..PrequalConfig::default() };
        assert!(bad.validate().unwrap_err().to_string().contains("probes_per_request"));
    }

    #[test]
    fn each_pick_draws_distinct_random_replicas_and_fractions_accumulate() {
        let config = PrequalConfig { probes_per_request: 1.5, ..PrequalConfig::default() };
        let (mut b, mut rng) = reported(10, config);
        let mut twin = Pcg64Mcg::seed_from_u64(7);
        // Every report stale: the pick is uniform (one draw), then one probe (credit 1.5 → 0.5).
        let first = pick_at(&mut b, &mut rng, SEC, &[]);
        assert_eq!(first, Some(twin.gen_range(0..10)));
        let expected: Vec<usize> = rand::seq::index::sample(&mut twin, 10, 1).into_vec();
        assert_eq!(probes(&mut b), expected);
        // The next pick owes two (0.5 + 1.5), distinct, in the order drawn.
        let _ = pick_at(&mut b, &mut rng, SEC, &[]);
        let _ = twin.gen_range(0..10);
        let expected: Vec<usize> = rand::seq::index::sample(&mut twin, 10, 2).into_vec();
        assert_eq!(probes(&mut b), expected);
        assert_ne!(expected[0], expected[1]);
        assert_eq!(b.take_probe(), None);
    }

    #[test]
    fn probes_are_drawn_as_rand_draws_them() {
        for (length, amount) in [(3, 3), (3, 2), (10, 1), (10, 11 - 1), (50, 11), (50, 12), (1000, 30)] {
            let (mut ours, mut theirs) =
                (Pcg64Mcg::seed_from_u64(length as u64), Pcg64Mcg::seed_from_u64(length as u64));
            let mut out = Vec::new();
            for _ in 0..50 {
                sample_into(&mut ours, length, amount, &mut out);
                assert_eq!(out, rand::seq::index::sample(&mut theirs, length, amount).into_vec());
            }
        }
    }

    #[test]
    fn never_more_probes_than_endpoints() {
        let config = PrequalConfig { probes_per_request: 5.0, ..PrequalConfig::default() };
        let (mut b, mut rng) = reported(3, config);
        let _ = pick_at(&mut b, &mut rng, SEC, &[]);
        let sent = sorted_probes(&mut b);
        assert_eq!(sent, [0, 1, 2]);
    }

    #[test]
    fn only_replicas_whose_last_report_is_stale_are_probed() {
        let config = PrequalConfig { probes_per_request: 4.0, ..PrequalConfig::default() };
        let (mut b, mut rng) = reported(4, config);
        // At 1 s, 1 and 3 report again (a response carried it): fresh for 100 ms.
        for e in [1, 3] {
            b.on_feedback(e, SEC, &Feedback::success(MS).with_load(LoadReport::Load(reply(0, 100))));
        }
        let _ = pick_at(&mut b, &mut rng, SEC + 50 * MS, &[]);
        let sent = sorted_probes(&mut b);
        assert_eq!(sent, [0, 2]);
        // Once theirs are stale too, 1 and 3 are probed: 0's and 2's probes are pending.
        let _ = pick_at(&mut b, &mut rng, SEC + 101 * MS, &[]);
        let sent = sorted_probes(&mut b);
        assert_eq!(sent, [1, 3]);
        // Unanswered for `max_age` (1 s), 0's and 2's are taken as lost and probed again; 1's and
        // 3's are still pending.
        let _ = pick_at(&mut b, &mut rng, 2 * SEC + 50 * MS - Duration::from_nanos(1), &[]);
        assert_eq!(probes(&mut b), []);
        let _ = pick_at(&mut b, &mut rng, 2 * SEC + 50 * MS, &[]);
        let sent = sorted_probes(&mut b);
        assert_eq!(sent, [0, 2]);
    }

    #[test]
    fn a_replica_the_pick_may_not_use_is_not_probed() {
        let config = PrequalConfig { probes_per_request: 3.0, ..PrequalConfig::default() };
        let (mut b, mut rng) = reported(3, config);
        // 2 is ejected (every pick excludes it): its stale report is never probed; 0 and 1 are,
        // once while their probes are pending.
        for at in [SEC, SEC + 400 * MS, SEC + 800 * MS] {
            assert_ne!(pick_at(&mut b, &mut rng, at, &[2]), Some(2));
            let sent = sorted_probes(&mut b);
            assert_eq!(sent, if at == SEC { vec![0, 1] } else { vec![] }, "at {at:?}");
        }
    }

    #[test]
    fn a_replica_quicker_than_a_probes_round_trip_is_ranked_locally_not_probed() {
        let config = PrequalConfig { probes_per_request: 2.0, ..PrequalConfig::default() };
        let (mut b, mut rng) = prequal(2, config);
        // Both probed at 0; their replies take 2 ms: 0 reports 1 ms of latency, 1 reports 5 ms.
        let _ = pick_at(&mut b, &mut rng, Time::ZERO, &[]);
        (0..2).for_each(|e| report(&mut b, e, Time::ZERO, 0, 1));
        let _ = pick_at(&mut b, &mut rng, 10 * MS, &[]);
        assert_eq!(probes(&mut b).len(), 2);
        report(&mut b, 0, 12 * MS, 0, 1);
        report(&mut b, 1, 12 * MS, 0, 5);
        // Both stale by 20 ms: 1 (5 ms ≥ the 2 ms round trip) is probed again, 0 (1 ms) is not,
        // and is a candidate ranked from this caller's view: with 1 already picked and in flight
        // (the pool empty), the pick is 0.
        let _ = pick_at(&mut b, &mut rng, 20 * MS, &[]);
        assert_eq!(probes(&mut b), [1]);
        b.on_send(1, 20 * MS);
        assert_eq!(pick_at(&mut b, &mut rng, 21 * MS, &[1]), Some(0));
        // Once 0 reports being slower than a round trip (on a response), it is probed again, and
        // 1, its last probe answered, too.
        report(&mut b, 1, 22 * MS, 0, 5);
        b.on_feedback(0, 30 * MS, &Feedback::success(MS).with_load(LoadReport::Load(reply(3, 4))));
        let _ = pick_at(&mut b, &mut rng, 40 * MS, &[]);
        let sent = sorted_probes(&mut b);
        assert_eq!(sent, [0, 1]);
    }

    #[test]
    fn a_replica_never_heard_from_is_not_probed_but_tried_and_its_answer_tells() {
        let config = PrequalConfig { probes_per_request: 3.0, ..PrequalConfig::default() };
        let (mut b, mut rng) = prequal(3, config);
        // Nothing known: no probe, at once or ahead; the pick is uniform.
        assert_eq!(b.probe_before_pick(Time::ZERO, &mut rng, &[]), None);
        assert_eq!(probes(&mut b), []);
        let first = pick_at(&mut b, &mut rng, Time::ZERO, &[]).unwrap();
        assert_eq!(probes(&mut b), []);
        // The next draw makes all three candidates, ranked by this caller's view: none in flight,
        // no answer yet (latency 0), so one of the others rather than the first, which has one in
        // flight.
        b.on_send(first, Time::ZERO);
        assert_eq!(b.probe_before_pick(Time::ZERO, &mut rng, &[]), None);
        let second = pick_at(&mut b, &mut rng, Time::ZERO, &[]).unwrap();
        assert_ne!(second, first);
        // The first answers with a report: it has a sidecar, and is probed once its report is
        // stale (a response's report ages out after `max_age`, 1 s, here).
        b.on_feedback(first, MS, &Feedback::success(MS).with_load(LoadReport::Load(reply(0, 5))));
        assert_eq!(b.seen[first].sidecar, Sidecar::Reports);
        let _ = pick_at(&mut b, &mut rng, 2 * SEC, &[]);
        assert_eq!(probes(&mut b), [first]);
    }

    #[test]
    fn a_replica_without_a_sidecar_is_ranked_by_what_this_caller_sees() {
        let (mut b, mut rng) = prequal(2, PrequalConfig { probes_per_request: 2.0, ..PrequalConfig::default() });
        // 0 has a sidecar that reports 2 in flight and 300 ms; 1 answers without a report, in
        // 100 ms: plain.
        report(&mut b, 0, Time::ZERO, 2, 300);
        b.on_send(1, Time::ZERO);
        b.on_feedback(1, Time::ZERO, &Feedback::success(100 * MS).with_load(LoadReport::Missing));
        assert_eq!(b.seen[1].sidecar, Sidecar::Missing);
        assert_eq!(b.unreported, 1, "1 has shown no sidecar: this caller keeps its own view's thresholds");
        // The first pick has drawn nothing yet: 0's report alone, and 1 becomes a candidate.
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(0));
        assert_eq!(probes(&mut b), [], "0's report is fresh, and 1 is never probed");
        // Cold both (the threshold is 2, the recent RIFs being [2]): 1's 100 ms beats 0's 300.
        assert_eq!(pick_at(&mut b, &mut rng, 2 * MS, &[]), Some(1));
        // Both hot now: 0's report counts the pick it served (3 > 2), and 1 holds six of this
        // caller's requests, above the threshold of its own view (4: the 0.84 quantile of the
        // counts its sends to 1 found, 0, 0, 1, ..., 5); 0's lower RIF wins.
        (0..6).for_each(|_| b.on_send(1, 2 * MS));
        assert_eq!(pick_at(&mut b, &mut rng, 3 * MS, &[]), Some(0));
        assert_eq!(b.own_thresholds.hot, 4);
    }

    #[test]
    fn a_callers_own_view_is_its_latency_by_the_count_each_request_found_and_its_hot_threshold() {
        let (mut b, _) = prequal(2, no_probes());
        let plain = |ms: u32| Feedback::success(ms * MS).with_load(LoadReport::Missing);
        // Three sent to 0 at once find 0, 1 and 2 of this caller's there, and are answered in
        // order: each answer counts at the count its request found.
        (0..3).for_each(|_| b.on_send(0, Time::ZERO));
        [10, 20, 30].into_iter().for_each(|ms| b.on_feedback(0, Time::ZERO, &plain(ms)));
        let own = b.seen[0].own;
        assert_eq!([0, 1, 2].map(|n| own.estimate(n)), [10 * MS, 20 * MS, 30 * MS]);
        // Past the counts seen, the nearest below grown by the requests ahead: 30 ms × 6 / 3.
        assert_eq!(own.estimate(5), 60 * MS);
        assert_eq!(own.usual(), Some(10 * MS));
        assert_eq!(b.seen[1].own.estimate(0), Duration::ZERO, "never answered: tried first");
        // A slow answer among quick ones at a count moves its median little: 10, 10, 900 → 10.
        for ms in [10, 900] {
            b.on_send(0, Time::ZERO);
            b.on_feedback(0, Time::ZERO, &plain(ms));
        }
        assert_eq!(b.seen[0].own.estimate(0), 10 * MS);
        // The hot threshold is the 0.84 quantile of the counts this caller's sends found (0, 1,
        // 2, 0, 0 so far, then 0 to 4 at 1): 3, drawn once eight were recorded since the last.
        (0..5).for_each(|_| b.on_send(1, Time::ZERO));
        b.refresh_thresholds();
        assert_eq!(b.own_thresholds.hot, 3);
        // Scaled by how quick a replica usually is against the typical answer that found none
        // (10 ms, the median of 10, 10 and 900): 0 is typical, 1 has no usual latency yet.
        assert_eq!(b.own_thresholds.typical, 10 * MS);
        let hot = |b: &Prequal, e: EndpointId| b.ranked_locally(e).1;
        assert!(!hot(&b, 0) && hot(&b, 1), "1 holds 5 of this caller's, above 3");
        // 1 answers its first in 40 ms, having found none: four times slower than the typical.
        // Eight more sends to 0 (finding 0 to 7) make the shared threshold 5, and 1's a quarter
        // of it, rounded: 1.
        b.on_feedback(1, Time::ZERO, &plain(40));
        (0..OWN_REFRESH).for_each(|_| b.on_send(0, Time::ZERO));
        b.refresh_thresholds();
        assert_eq!((b.own_thresholds.hot, b.own_thresholds.typical), (5, 10 * MS));
        assert_eq!(b.own_thresholds.hot_for(b.seen[1].own.usual()), 1);
        assert!(hot(&b, 1), "1 holds 4 of this caller's");
    }

    #[test]
    fn a_probe_answered_by_anything_but_a_probe_reply_stops_the_probes_until_a_report_comes() {
        let config = PrequalConfig { probes_per_request: 2.0, ..PrequalConfig::default() };
        let (mut b, mut rng) = reported(2, config);
        // 1 answered a probe as a plain application would: out of the pool, never probed again.
        b.on_probe(1, SEC, LoadReport::Missing);
        let _ = pick_at(&mut b, &mut rng, SEC, &[]);
        assert_eq!(probes(&mut b), [0]);
        // A response from it carries a report (a sidecar arrived): probed again once stale.
        b.on_feedback(1, 2 * SEC, &Feedback::success(MS).with_load(LoadReport::Load(reply(0, 100))));
        let _ = pick_at(&mut b, &mut rng, 3 * SEC, &[]);
        let sent = sorted_probes(&mut b);
        assert_eq!(sent, [0, 1]);
    }

    /// Makes `b` a caller alone: [`RECENT_RIFS`] answers from endpoint 0, each while another of
    /// this caller's requests is still there, reporting exactly that one (at 10 ms), and one
    /// answer from each other endpoint reporting nothing in flight (at `latency_ms[e]`).
    fn alone(b: &mut Prequal, latency_ms: &[u32]) {
        b.on_send(0, Time::ZERO);
        for _ in 0..RECENT_RIFS {
            b.on_send(0, Time::ZERO);
            b.on_feedback(0, MS, &Feedback::success(MS).with_load(LoadReport::Load(reply(1, 10))));
        }
        for (e, &latency) in latency_ms.iter().enumerate().skip(1) {
            b.on_send(e, Time::ZERO);
            b.on_feedback(e, MS, &Feedback::success(MS).with_load(LoadReport::Load(reply(0, latency))));
        }
        b.on_feedback(0, MS, &Feedback::success(MS).with_load(LoadReport::Load(reply(0, latency_ms[0]))));
    }

    #[test]
    fn a_caller_alone_ranks_by_its_own_counts_and_sends_no_probe() {
        // Not alone after one answer fewer.
        let (mut b, _) = prequal(3, PrequalConfig::default());
        b.on_send(0, Time::ZERO);
        for _ in 0..RECENT_RIFS - 1 {
            b.on_send(0, Time::ZERO);
            b.on_feedback(0, MS, &Feedback::success(MS).with_load(LoadReport::Load(reply(1, 10))));
        }
        assert!(!b.is_alone());
        // Alone, every report long stale: a pick neither waits for probes nor sends any; its
        // draw records this caller's counts as the replies the probes would have brought.
        let (mut b, mut rng) = prequal(3, PrequalConfig::default());
        alone(&mut b, &[10, 20, 30]);
        assert!(b.is_alone());
        assert_eq!(b.probe_before_pick(10 * SEC, &mut rng, &[]), None);
        assert_eq!(pick_at(&mut b, &mut rng, 10 * SEC, &[]), Some(0));
        assert_eq!(probes(&mut b), []);
        assert_eq!(b.thresholds.rifs.values, [0, 0, 0]);
        // Without a hot threshold (no draws), the pick goes where the replicas' last estimates
        // at this caller's counts are lowest: 0 reported 10 ms at none and at one in flight, and
        // at two and three is taken as 10 ms scaled by the requests ahead (15, 20 ms): with
        // three there, 1's 20 ms at none ties, and its lower count wins.
        let (mut b, mut rng) = prequal(3, no_probes());
        alone(&mut b, &[10, 20, 30]);
        for expected in [0, 0, 0, 1] {
            assert_eq!(pick_at(&mut b, &mut rng, 10 * SEC, &[]), Some(expected));
            b.on_send(expected, 10 * SEC);
        }
    }

    #[test]
    fn a_report_of_someone_elses_requests_ends_being_alone() {
        let (mut b, mut rng) = prequal(3, PrequalConfig::default());
        alone(&mut b, &[10, 20, 30]);
        // Reports at none in flight here, or fewer than this caller's (its requests in transit),
        // change nothing.
        b.on_send(2, SEC);
        b.on_send(2, SEC);
        b.on_feedback(2, SEC, &Feedback::success(MS).with_load(LoadReport::Load(reply(0, 30))));
        assert!(b.is_alone());
        // A request this caller gave up on may still be held there: one more than its count is
        // that one, and once a report shows it gone, it is not counted again.
        b.on_send(1, SEC);
        b.on_feedback(1, SEC, &Feedback::new(Outcome::Cancelled, MS));
        b.on_send(1, SEC);
        b.on_feedback(1, SEC, &Feedback::success(MS).with_load(LoadReport::Load(reply(1, 20))));
        assert!(b.is_alone());
        b.on_send(1, SEC);
        b.on_feedback(1, SEC, &Feedback::success(MS).with_load(LoadReport::Load(reply(0, 20))));
        // 1 holds a request this caller did not send, in two reports in a row (one alone may be
        // a report overtaken by a later one): probes again, and waits for them.
        b.on_send(1, SEC);
        b.on_feedback(1, SEC, &Feedback::success(MS).with_load(LoadReport::Load(reply(1, 20))));
        assert!(b.is_alone());
        b.on_send(1, SEC);
        b.on_feedback(1, SEC, &Feedback::success(MS).with_load(LoadReport::Load(reply(1, 20))));
        assert!(!b.is_alone());
        assert_eq!(b.probe_before_pick(10 * SEC, &mut rng, &[]), Some(5 * MS));
        assert!(!probes(&mut b).is_empty());
    }

    #[test]
    fn a_report_on_a_response_enters_the_pool_as_a_probe_reply_does() {
        let (mut b, mut rng) = prequal(3, no_probes());
        b.on_feedback(2, Time::ZERO, &Feedback::success(MS).with_load(LoadReport::Load(reply(1, 20))));
        let carried = Probe { endpoint: 2, in_flight: 1, latency: 20 * MS, received: Time::ZERO, uses_left: 2 };
        assert_eq!(b.pool, [carried]);
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(2));
        // An answer without a report (nor a response at all) adds nothing.
        b.on_feedback(0, MS, &Feedback::success(MS));
        assert_eq!(b.pool.len(), 1);
    }

    #[test]
    fn among_cold_replicas_the_lowest_latency_wins() {
        let (mut b, mut rng) = prequal(4, no_probes());
        // RIFs 1, 2, 3, 9: the 0.84 quantile of four is the 4th (⌈3.36⌉), 9, so none is hot; the
        // latencies pick 2.
        report(&mut b, 0, Time::ZERO, 1, 40);
        report(&mut b, 1, Time::ZERO, 2, 30);
        report(&mut b, 2, Time::ZERO, 3, 10);
        report(&mut b, 3, Time::ZERO, 9, 20);
        assert_eq!(hot_rif(&mut b), 9);
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(2));
    }

    #[test]
    fn a_hot_replica_loses_to_any_cold_one_whatever_its_latency() {
        let config = PrequalConfig { hot_quantile: 0.5, ..no_probes() };
        let (mut b, mut rng) = prequal(4, config);
        // RIFs 1, 2, 5, 8: the median (2nd of 4) is 2, so 2 and 3 are hot despite their latency.
        report(&mut b, 0, Time::ZERO, 1, 40);
        report(&mut b, 1, Time::ZERO, 2, 30);
        report(&mut b, 2, Time::ZERO, 5, 1);
        report(&mut b, 3, Time::ZERO, 8, 2);
        assert_eq!(hot_rif(&mut b), 2);
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(1));
        // 1's report now counts 3 in flight (hot) with one use left; 0 is the only cold one.
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(0));
        // 0 (RIF 2) is still cold: its second and last use.
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(0));
        // Left: 1 (RIF 3), 2 (RIF 5), 3 (RIF 8), all hot: the lowest RIF wins.
        assert_eq!(b.pool.iter().map(|p| (p.endpoint, p.in_flight)).collect::<Vec<_>>(), [(1, 3), (2, 5), (3, 8)]);
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(1));
    }

    #[test]
    fn a_quicker_replica_may_hold_more_before_it_is_hot() {
        let (mut b, mut rng) = prequal(2, no_probes());
        // 0 answers in 5 ms holding 4; it has a usual latency once it has replied 8 times.
        (0..7).for_each(|_| report(&mut b, 0, Time::ZERO, 4, 5));
        assert_eq!(threshold_of(&mut b, 0), hot_rif(&mut b));
        report(&mut b, 0, Time::ZERO, 4, 5);
        // 1, three times slower, holds 1. The shared threshold is 4 (the 0.84 quantile of twelve
        // 1s and nine replies of 4 or more) and the typical latency 15 ms: 0 may hold 3 x 4.
        (0..12).for_each(|_| report(&mut b, 1, Time::ZERO, 1, 15));
        report(&mut b, 0, Time::ZERO, 6, 5);
        assert_eq!((hot_rif(&mut b), threshold_of(&mut b, 0), threshold_of(&mut b, 1)), (4, 12, 4));
        // At 6 the paper's rule calls 0 hot and sends the request to 1; 0 is cold, and quicker.
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(0));
        // Holding 13 it is hot, and 1 wins.
        report(&mut b, 0, MS, 13, 5);
        assert_eq!(threshold_of(&mut b, 0), 12);
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(1));
    }

    #[test]
    fn a_reply_serves_at_most_its_reuse_budget() {
        let config = PrequalConfig { reuse_budget: 3, ..no_probes() };
        let (mut b, mut rng) = prequal(5, config);
        report(&mut b, 4, Time::ZERO, 0, 5);
        for _ in 0..3 {
            assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(4));
        }
        assert!(b.pool.is_empty());
        // Nothing left: uniform among all five.
        let mut twin = Pcg64Mcg::seed_from_u64(7);
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(twin.gen_range(0..5)));
    }

    #[test]
    fn replies_age_out_and_newer_ones_replace_older() {
        let (mut b, mut rng) = prequal(3, no_probes());
        // Estimates of 5 s and more: the 1 s `max_age` is the limit.
        report(&mut b, 0, Time::ZERO, 0, 5000);
        report(&mut b, 1, 500 * MS, 0, 9000);
        // At 1.2 s, 0's reply (1.2 s old) is gone, 1's (0.7 s) remains.
        assert_eq!(pick_at(&mut b, &mut rng, 1200 * MS, &[]), Some(1));
        assert_eq!(b.pool.len(), 1);
        // A new reply from 1 replaces its old one, with a fresh budget.
        report(&mut b, 1, 1300 * MS, 4, 9000);
        let fresh = Probe { endpoint: 1, in_flight: 4, latency: 9 * SEC, received: 1300 * MS, uses_left: 2 };
        assert_eq!(b.pool, [fresh]);
    }

    #[test]
    fn a_reply_is_stale_once_older_than_the_quickest_recent_estimate() {
        let (mut b, mut rng) = prequal(3, no_probes());
        // A replica that answers at once (0) says nothing of the time scale; 300 ms is the quickest.
        report(&mut b, 0, Time::ZERO, 0, 0);
        report(&mut b, 1, Time::ZERO, 1, 300);
        report(&mut b, 2, 100 * MS, 2, 700);
        assert_eq!(b.max_age(), 300 * MS);
        // At 350 ms the replies of 0 and 1 (350 ms old) are gone; 2's (250 ms) is left.
        assert_eq!(pick_at(&mut b, &mut rng, 350 * MS, &[]), Some(2));
        assert_eq!(b.pool.iter().map(|p| p.endpoint).collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn a_pick_with_one_endpoint_to_go_to_neither_probes_nor_waits() {
        let config = PrequalConfig { probe_wait: 5 * MS, ..PrequalConfig::default() };
        // One endpoint (a Kubernetes Service's address), its report stale: it is the pick.
        let (mut b, mut rng) = reported(1, config);
        for at in [SEC, 2 * SEC] {
            assert_eq!(b.probe_before_pick(at, &mut rng, &[]), None);
            assert_eq!(pick_at(&mut b, &mut rng, at, &[]), Some(0));
            assert_eq!(b.take_probe(), None);
        }
        // Two, one of them tried: the retry's only choice is the other.
        let (mut b, mut rng) = reported(2, config);
        assert_eq!(b.probe_before_pick(SEC, &mut rng, &[0]), None);
        assert_eq!(pick_at(&mut b, &mut rng, SEC, &[0]), Some(1));
        assert_eq!(b.take_probe(), None);
        // With both to choose from, both stale, it probes first.
        assert_eq!(b.probe_before_pick(SEC, &mut rng, &[]), Some(5 * MS));
    }

    #[test]
    fn a_pick_with_no_usable_reply_has_its_probes_sent_first() {
        let config = PrequalConfig { probe_wait: 5 * MS, ..PrequalConfig::default() };
        let (mut b, mut rng) = reported(10, config);
        // Every report stale: three distinct probes are due before the pick, which may wait 5 ms.
        assert_eq!(b.probe_before_pick(SEC, &mut rng, &[]), Some(5 * MS));
        let mut sent = probes(&mut b);
        sent.sort_unstable();
        sent.dedup();
        assert_eq!(sent.len(), 3);
        // Their replies come; the pick takes the best and sends no probes of its own (it had them).
        for (rif, &e) in sent.iter().enumerate() {
            report(&mut b, e, SEC + MS, rif as u32, 250 * (rif as u32 + 1));
        }
        assert_eq!(pick_at(&mut b, &mut rng, SEC + MS, &[]), Some(sent[0]));
        assert_eq!(b.take_probe(), None);
        // The pool now has three usable replies: the next pick does not wait, and after itself
        // probes those of its three with no report left in the pool (aged out, or spent: the
        // best one has served two picks now), never one whose report is still there.
        assert_eq!(b.probe_before_pick(SEC + MS, &mut rng, &[]), None);
        let _ = pick_at(&mut b, &mut rng, SEC + MS, &[]);
        assert!(!b.pool.iter().any(|p| p.endpoint == sent[0]));
        let after = probes(&mut b);
        assert!(after.len() <= 3 && after.iter().all(|e| !b.pool.iter().any(|p| p.endpoint == *e)), "{after:?}");
        // A pool holding only replicas this request avoids is as good as empty: a draw of all ten
        // probes the seven others.
        let (mut b, mut rng) = reported(10, PrequalConfig { probes_per_request: 10.0, ..config });
        (0..3).for_each(|e| report(&mut b, e, SEC, 0, 250));
        assert_eq!(b.probe_before_pick(SEC, &mut rng, &[0, 1, 2]), Some(5 * MS));
        let sent = sorted_probes(&mut b);
        assert_eq!(sent, [3, 4, 5, 6, 7, 8, 9]);
        // `probe_wait: 0` never waits.
        let (mut b, mut rng) = reported(10, PrequalConfig { probe_wait: Duration::ZERO, ..config });
        assert_eq!(b.probe_before_pick(SEC, &mut rng, &[]), None);
    }

    #[test]
    fn a_lone_report_left_by_the_last_response_is_no_choice() {
        let (mut b, mut rng) = reported(10, PrequalConfig::default());
        // At 1 s every probe reply is stale, and a response from 4 leaves its report: one usable
        // report, fewer than the three a pick draws, so the pick draws first and waits.
        b.on_feedback(4, SEC, &Feedback::success(MS).with_load(LoadReport::Load(reply(0, 100))));
        b.age_out(SEC);
        assert_eq!(b.pool.len(), 1);
        assert_eq!(b.probe_before_pick(SEC, &mut rng, &[]), Some(5 * MS));
        assert!(probes(&mut b).iter().all(|&e| e != 4));
        // With three usable reports it goes ahead at once.
        (5..7).for_each(|e| report(&mut b, e, SEC, 0, 100));
        assert_eq!(b.probe_before_pick(SEC, &mut rng, &[]), None);
        // Two endpoints, one avoided: the one report of the other is all a pick can have.
        let (mut b, mut rng) = reported(2, PrequalConfig::default());
        report(&mut b, 1, SEC, 0, 100);
        assert_eq!(b.probe_before_pick(SEC, &mut rng, &[0]), None);
    }

    #[test]
    fn a_full_pool_evicts_its_oldest_reply() {
        let config = PrequalConfig { pool_size: 2, ..no_probes() };
        let (mut b, _) = prequal(3, config);
        report(&mut b, 0, Time::ZERO, 0, 1);
        report(&mut b, 1, MS, 0, 2);
        report(&mut b, 2, 2 * MS, 0, 3);
        assert_eq!(b.pool.iter().map(|p| p.endpoint).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn the_hot_threshold_is_over_the_last_replies() {
        let (mut b, _) = prequal(2, no_probes());
        assert_eq!(hot_rif(&mut b), u32::MAX);
        // 64 replies with RIF 0, then 64 with RIF 7: only the last 64 count.
        (0..RECENT_RIFS).for_each(|_| report(&mut b, 0, Time::ZERO, 0, 1));
        assert_eq!(hot_rif(&mut b), 0);
        (0..RECENT_RIFS).for_each(|_| report(&mut b, 1, Time::ZERO, 7, 1));
        assert_eq!(hot_rif(&mut b), 7);
    }

    #[test]
    fn excluded_and_refusing_replicas_are_skipped() {
        let (mut b, mut rng) = prequal(3, no_probes());
        report(&mut b, 0, Time::ZERO, 0, 1);
        report(&mut b, 1, Time::ZERO, 0, 2);
        // A retry that tried 0 takes 1.
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[0]), Some(1));
        // 0 refuses (its sidecar's 429 reports its load): its reply goes, and 1 (one use left) is
        // the choice.
        b.on_feedback(0, MS, &Feedback::new(Outcome::Rejected, MS).with_load(LoadReport::Load(reply(9, 1))));
        assert_eq!(pick_at(&mut b, &mut rng, MS, &[]), Some(1));
        // A reply from an endpoint the balancer does not have is ignored.
        report(&mut b, 9, MS, 0, 1);
        assert!(b.pool.is_empty());
    }

    #[test]
    fn the_responder_reports_the_latency_learnt_at_the_current_rif() {
        let mut r = ProbeResponder::default();
        assert_eq!(r.reply(3), ProbeReply { in_flight: 3, latency: Duration::ZERO });
        // Requests that found 2 in flight took 300 ms, then 500 ms, then 400 ms: the median.
        r.on_answer(2, 300 * MS);
        r.on_answer(2, 500 * MS);
        assert_eq!(r.reply(2), ProbeReply { in_flight: 2, latency: 300 * MS });
        r.on_answer(2, 400 * MS);
        assert_eq!(r.reply(2), ProbeReply { in_flight: 2, latency: 400 * MS });
        // RIF 5 was never seen: the nearest below (2) answers, for 6 requests ahead where it
        // had 3; RIF 0 borrows from above as it is.
        assert_eq!(r.reply(5).latency, 800 * MS);
        assert_eq!(r.reply(0).latency, 400 * MS);
        r.on_answer(0, 100 * MS);
        assert_eq!((r.reply(0).latency, r.reply(1).latency), (100 * MS, 200 * MS));
        // RIFs of 63 and more share their answers, taken as found at 63: a replica holding 127
        // has twice as many requests ahead.
        r.on_answer(900, 9 * SEC);
        assert_eq!(r.reply(63).latency, 9 * SEC);
        assert_eq!(r.reply(127).latency, 18 * SEC);
    }

    #[test]
    fn one_slow_request_among_quick_ones_leaves_the_report_alone() {
        // A slow route's answer (5 s) among a quick route's (10 ms) at the same RIF: the median
        // stays quick until the slow ones are half the window, and only the latest window counts.
        let mut r = ProbeResponder::default();
        (0..5).for_each(|_| r.on_answer(1, 10 * MS));
        r.on_answer(1, 5 * SEC);
        assert_eq!(r.reply(1).latency, 10 * MS);
        (0..3).for_each(|_| r.on_answer(1, 5 * SEC));
        assert_eq!(r.reply(1).latency, 10 * MS);
        r.on_answer(1, 5 * SEC);
        assert_eq!(r.reply(1).latency, 5 * SEC);
        // The window holds the last 8: four quick answers later, half of it is quick again.
        (0..3).for_each(|_| r.on_answer(1, 20 * MS));
        assert_eq!(r.reply(1).latency, 5 * SEC);
        r.on_answer(1, 20 * MS);
        assert_eq!(r.reply(1).latency, 20 * MS);
    }
}
