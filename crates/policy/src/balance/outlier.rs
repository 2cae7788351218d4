//! Outlier ejection: an endpoint that fails several attempts in a row, or answers far more slowly
//! than its peers, is left out of every balancer's choice for a while, for a longer while each time
//! it does it again.
//!
//! Envoy's consecutive-5xx outlier detection, with Linkerd's failure accrual for the way back in:
//! - **Failures** are attempts that ended in [`Outcome::Error`] (a 5xx answer),
//!   [`Outcome::Unavailable`] (the endpoint could not be reached) or [`Outcome::TimedOut`] (Envoy
//!   counts a local timeout as a 504). A success or a 429 ([`Outcome::Rejected`]: the endpoint is
//!   alive and shedding load, which BLOC and the retry budget handle) ends a run of failures;
//!   cancellations (another attempt won) say nothing about the endpoint and are ignored.
//! - After `consecutive_failures` failures in a row the endpoint is **ejected** for `base_ejection`
//!   × the number of times it has been ejected since it last answered well, at most
//!   `max_ejection` (Envoy's `base_ejection_time` × ejections, capped by `max_ejection_time`).
//! - At most `max_ejected` of the endpoints are ejected at once, rounded down but at least one
//!   (Envoy's `max_ejection_percent`, which always lets one host go); an endpoint that reaches the
//!   threshold while the share is full is ejected at its next failure after room is made.
//! - When its interval is over the endpoint is back in, **on probation**, with one attempt at a
//!   time (the probe) until an attempt to it ends; the first attempt that ends decides. A failure
//!   ejects it again at once, for the next longer interval; a success ends probation and, after
//!   an ejection for failures, resets its interval to `base_ejection` (Linkerd's probe after a
//!   back-off).
//! - **Latency** (the shape of Envoy's success-rate detection, on answer times instead of success
//!   rates; Envoy has none on latency, an open request since 2016): each endpoint
//!   keeps its last `latency_samples` successful answer times (since its last ejection) per
//!   class of requests ([`crate::class`]: a slow route is slow on every endpoint, and its answers
//!   are compared with its own). At each of its answers, an endpoint whose median in the answer's
//!   class is above `latency_factor` × the median of its peers' medians in that class (the other
//!   endpoints, not ejected, that have answered it; at least two of them; each median of an even
//!   count errs towards leaving the endpoint in, its own the lower middle answer and its peers'
//!   the upper: with two peers the lower would be the quicker one, and a peer just back from an
//!   ejection, empty, made every queued endpoint look slow) is ejected like a
//!   failing one, within the same share and with the same growing interval, but never for more
//!   than [`LATENCY_EJECTION_PER_EVIDENCE`] (3) times as long as it has been seen slow (since
//!   the oldest of its slow samples was sent, over all its ejections in a row): a pause of one
//!   process costs tens of milliseconds, not 30 s. It is judged from its first answer: a caller
//!   among many sees a gray replica's answers rarely, and by its fifth the replica's queue is
//!   past repair. Back in, it is judged on fresh answers only: slow still, it goes out for the
//!   next longer interval; not slow, its interval starts over. A median over the window, against
//!   the peers' median, leaves a replica alone for one slow answer among fast ones or for being a
//!   little slower than the rest, and a whole-service slowdown moves the reference with it. A
//!   failing endpoint takes the place of one out only for its latency when the share is full:
//!   errors cost more than slowness.
//! - An endpoint out for latency is **ranked last, not abandoned**: once every endpoint in the
//!   choice holds more of this caller's attempts than it held when it went out, or refused its
//!   last one (429: full), the others queue as it did or cannot queue at all, and it takes what
//!   the caller sends until one of them holds no more and takes requests again. A failing
//!   endpoint stays out.
//!
//! [`Call`](crate::call::Call) applies it to every balancer alike: an ejected endpoint is treated as
//! one the request has already tried, which every balancer avoids while it has another choice.

use crate::class::ClassId;
use crate::config::{self, Check};
use crate::duration::text;
use crate::{EndpointId, Outcome, Time};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::time::Duration;

/// Settings of [`Outlier`] (`outlier:` in a caller's policy); a file may leave out any of them.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutlierConfig {
    /// Failures in a row that eject an endpoint (default 5, Envoy's `consecutive_5xx`).
    pub consecutive_failures: u32,
    /// The first ejection's length; the n-th in a row lasts n times as long (default 30 s).
    #[serde(with = "text")]
    pub base_ejection: Duration,
    /// The longest an ejection lasts (default 300 s, Envoy's `max_ejection_time`).
    #[serde(with = "text")]
    pub max_ejection: Duration,
    /// The largest share of endpoints ejected at once; one endpoint may always be (default 0.1).
    pub max_ejected: f64,
    /// An endpoint whose median answer time is above this many times its peers' is ejected
    /// (default 3; `null` turns latency ejection off).
    pub latency_factor: Option<f64>,
    /// The most successful answers per endpoint whose median is compared (default 5); an endpoint
    /// is judged from its first answer on.
    pub latency_samples: u32,
}

impl Default for OutlierConfig {
    fn default() -> Self {
        OutlierConfig::DEFAULTS
    }
}

impl OutlierConfig {
    /// The defaults of `outlier: {}`.
    pub const DEFAULTS: OutlierConfig = OutlierConfig {
        consecutive_failures: 5,
        base_ejection: Duration::from_secs(30),
        max_ejection: Duration::from_secs(300),
        max_ejected: 0.1,
        latency_factor: Some(DEFAULT_LATENCY_FACTOR),
        latency_samples: 5,
    };

    /// Checks the parameters; the error names the field.
    pub fn validate(&self) -> Check {
        config::at_least_one("consecutive_failures", self.consecutive_failures)?;
        config::positive("base_ejection", self.base_ejection)?;
        config::ordered("base_ejection", self.base_ejection, "max_ejection", self.max_ejection)?;
        config::fraction("max_ejected", self.max_ejected)?;
        if let Some(factor) = self.latency_factor {
            config::at_least("latency_factor", factor, 1.0)?;
        }
        config::at_least_one("latency_samples", self.latency_samples)
    }

    /// The detector for endpoints `0..endpoints`.
    pub fn build(&self, endpoints: usize) -> Outlier {
        Outlier::new(endpoints, *self)
    }
}

/// Outlier ejection as a caller's policy writes it (`outlier:`): left out (or `default`), ejection
/// of endpoints that keep failing ([`OutlierSetting::DEFAULT`]), on for every balancer as
/// Linkerd's failure accrual is; `off` (or `null`), none; a mapping, these settings (fields left
/// out at their defaults, latency ejection included).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum OutlierSetting {
    /// Not written: ejection at its defaults.
    #[default]
    Default,
    /// `off`: no ejection.
    Off,
    /// Written out: these settings.
    On(OutlierConfig),
}

impl OutlierSetting {
    /// What a policy without `outlier:` ejects with: [`OutlierConfig::default`]'s failures in a
    /// row, without latency ejection, which takes one replica of a few out when it is merely
    /// slower and so loads the others (on by default, it broke crates/sim/tests/hedging.rs's
    /// bounds of adaptive hedging against none on examples/hedging.yaml, seed 17: 1.06 × at
    /// bimodal-90, 1.73 × at stall-70 with a store that does not cancel); `outlier: {}` adds it.
    pub const DEFAULT: OutlierConfig = OutlierConfig { latency_factor: None, ..OutlierConfig::DEFAULTS };

    /// The settings ejection runs with, if it runs.
    pub fn config(&self) -> Option<OutlierConfig> {
        match self {
            OutlierSetting::Default => Some(OutlierSetting::DEFAULT),
            OutlierSetting::Off => None,
            OutlierSetting::On(config) => Some(*config),
        }
    }

    /// Whether it was left out.
    pub fn is_default(&self) -> bool {
        *self == OutlierSetting::Default
    }

    /// Checks the settings; the error names the field.
    pub fn validate(&self) -> Check {
        self.config().map_or(Ok(()), |c| c.validate())
    }

    /// The detector for endpoints `0..endpoints`, if ejection runs.
    pub fn build(&self, endpoints: usize) -> Option<Outlier> {
        self.config().map(|c| c.build(endpoints))
    }
}

impl Serialize for OutlierSetting {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            OutlierSetting::Default => s.serialize_str(DEFAULT_WORD),
            OutlierSetting::Off => s.serialize_str(OFF_WORD),
            OutlierSetting::On(config) => config.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for OutlierSetting {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = OutlierSetting;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "`{OFF_WORD}`, `{DEFAULT_WORD}` or a mapping of outlier settings")
            }
            fn visit_str<E: serde::de::Error>(self, word: &str) -> Result<OutlierSetting, E> {
                match word {
                    OFF_WORD => Ok(OutlierSetting::Off),
                    DEFAULT_WORD => Ok(OutlierSetting::Default),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(word), &self)),
                }
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<OutlierSetting, E> {
                Ok(OutlierSetting::Off)
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<OutlierSetting, E> {
                Ok(OutlierSetting::Off)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<OutlierSetting, A::Error> {
                let config = OutlierConfig::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(OutlierSetting::On(config))
            }
        }
        d.deserialize_any(Visitor)
    }
}

const OFF_WORD: &str = "off";
const DEFAULT_WORD: &str = "default";

/// The default `latency_factor`: measured on examples/balancing.yaml (docs/policies.md).
pub const DEFAULT_LATENCY_FACTOR: f64 = 3.0;

/// How many times as long as it has been seen slow an endpoint stays out for latency, at most:
/// Envoy's success-rate detection judges over an `interval` of 10 s and ejects for a
/// `base_ejection_time` of 30 s. Evidence of tens of milliseconds (a pause of one process, a
/// burst at startup, a heavy tail's few slow answers in a row) then costs tens of milliseconds,
/// where `base_ejection` would take a healthy replica out for 30 s; a replica that stays slow
/// comes back on probation, is seen slow again, and its evidence and interval grow together.
pub const LATENCY_EJECTION_PER_EVIDENCE: f64 = 3.0;

/// Why an endpoint was ejected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reason {
    /// `consecutive_failures` failures in a row, or one on probation.
    #[default]
    Failures,
    /// Its median answer time was above `latency_factor` × its peers'.
    Latency,
}

impl Reason {
    /// The reason as metrics label it and logs write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Failures => "failures",
            Reason::Latency => "latency",
        }
    }
}

/// An endpoint was ejected (what the proxy logs and counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ejection {
    /// The endpoint left out.
    pub endpoint: EndpointId,
    /// For how long.
    pub duration: Duration,
    /// How many times in a row it has been ejected, this one included.
    pub nth: u32,
    /// Why.
    pub reason: Reason,
}

/// What the detector knows of one endpoint.
#[derive(Clone, Debug, Default)]
struct Endpoint {
    /// Failures since its last good answer (or its reinstatement).
    failures: u32,
    /// Ejections since it last answered well; the next one lasts `base_ejection` × (this + 1).
    ejections: u32,
    /// Until when it is ejected, while it is.
    ejected_until: Option<Time>,
    /// Back from an ejection and not yet answered well: its next failure ejects it again.
    probation: bool,
    /// On probation with an attempt in flight, the probe: no other attempt goes to it meanwhile.
    probing: bool,
    /// Why it was last ejected.
    reason: Reason,
    /// Ejected for latency and not yet seen quick again: when the evidence began (the send of the
    /// oldest sample behind the first of these ejections), which bounds how long it stays out.
    slow_since: Option<Time>,
    /// Taken out of the set ([`Outlier::retire`]): never ejected, no peer for latency.
    retired: bool,
    /// This caller's attempts to it that have not ended.
    in_flight: u32,
    /// Out for latency: its attempts in flight when it went out. It takes what the caller sends
    /// while every endpoint in the choice holds more than that.
    held: u32,
    /// Its last answer was a refusal (429): it is full.
    refusing: bool,
}

impl Endpoint {
    /// It answered well: its next ejection is a first one again, on fresh evidence.
    fn start_over(&mut self) {
        self.ejections = 0;
        self.slow_since = None;
    }
}

/// An endpoint's answers in one class of requests.
#[derive(Clone, Debug, Default)]
struct Answers {
    /// Its last successful answers (at most `latency_samples`, the oldest first), since its last
    /// ejection.
    samples: VecDeque<Sample>,
    /// Their median, once it has answered.
    median: Option<Duration>,
}

/// One successful answer.
#[derive(Clone, Copy, Debug)]
struct Sample {
    /// When its attempt was sent.
    sent: Time,
    /// How long it took.
    rtt: Duration,
}

/// Consecutive-failure outlier detection over one caller's endpoints ([module docs](self)).
#[derive(Clone, Debug)]
pub struct Outlier {
    config: OutlierConfig,
    endpoints: Vec<Endpoint>,
    /// Endpoints with `ejected_until` set (some may be due back: see [`Outlier::reinstate`]).
    ejected: usize,
    /// Endpoints with `probing` set.
    probing: usize,
    /// The most endpoints ejected at once.
    cap: usize,
    /// Reused room for [`Outlier::exclude`]'s answer, so a pick does not allocate.
    scratch: Vec<EndpointId>,
    /// Reused room for the medians of [`Outlier::on_answer`].
    medians: Vec<Duration>,
    /// Per class of requests (by [`ClassId`]), each endpoint's answers, by endpoint.
    answers: Vec<Vec<Answers>>,
}

impl Outlier {
    /// A detector over endpoints `0..endpoints`, none of them ejected.
    pub fn new(endpoints: usize, config: OutlierConfig) -> Self {
        let mut outlier = Outlier {
            config,
            endpoints: vec![Endpoint::default(); endpoints],
            ejected: 0,
            probing: 0,
            cap: 0,
            scratch: Vec::new(),
            medians: Vec::new(),
            answers: Vec::new(),
        };
        outlier.set_cap();
        outlier
    }

    /// The most endpoints out at once: `max_ejected` of those not retired, at least one.
    fn set_cap(&mut self) {
        let live = self.endpoints.iter().filter(|e| !e.retired).count();
        self.cap = ((live as f64 * self.config.max_ejected).floor() as usize).max(1);
    }

    /// Room for endpoints up to `endpoints`, the new ones not ejected (endpoint discovery).
    pub fn grow(&mut self, endpoints: usize) {
        if endpoints > self.endpoints.len() {
            self.endpoints.resize(endpoints, Endpoint::default());
            self.answers.iter_mut().for_each(|class| class.resize(endpoints, Answers::default()));
            self.set_cap();
        }
    }

    /// `endpoint` left the set: it no longer counts towards the ejected share nor as a peer, and
    /// what it had shown is forgotten (it may come back as a new replica at the same address).
    pub fn retire(&mut self, endpoint: EndpointId) {
        let Some(e) = self.endpoints.get_mut(endpoint) else { return };
        if e.ejected_until.is_some() {
            self.ejected -= 1;
        }
        if e.probing {
            self.probing -= 1;
        }
        *e = Endpoint { retired: true, ..Endpoint::default() };
        self.forget_answers(endpoint);
        self.set_cap();
    }

    /// A retired `endpoint` is back in the set, as a new one.
    pub fn restore(&mut self, endpoint: EndpointId) {
        if let Some(e) = self.endpoints.get_mut(endpoint) {
            e.retired = false;
            self.set_cap();
        }
    }

    /// Puts back the endpoints whose ejection is over at `now`.
    fn reinstate(&mut self, now: Time) {
        if self.ejected == 0 {
            return;
        }
        for e in &mut self.endpoints {
            if e.ejected_until.is_some_and(|t| t <= now) {
                e.ejected_until = None;
                e.probation = true;
                e.failures = 0;
                self.ejected -= 1;
            }
        }
    }

    /// An attempt was sent to `endpoint`: on probation, it is the probe, and the endpoint gets no
    /// other attempt until an attempt to it ends (Linkerd's failure accrual sends one probe).
    pub fn on_send(&mut self, endpoint: EndpointId) {
        if let Some(e) = self.endpoints.get_mut(endpoint) {
            e.in_flight = e.in_flight.saturating_add(1);
            if e.probation && !e.probing && e.ejected_until.is_none() {
                e.probing = true;
                self.probing += 1;
            }
        }
    }

    /// An attempt to `endpoint` ended: it may be probed again.
    fn end_probe(&mut self, endpoint: EndpointId) {
        if let Some(e) = self.endpoints.get_mut(endpoint) {
            if e.probing {
                e.probing = false;
                self.probing -= 1;
            }
        }
    }

    /// The endpoints a pick at `now` should avoid: the ejected ones and those with a probe in
    /// flight, and those the request already `tried` unless no other endpoint is left (a retry
    /// goes to an endpoint it tried rather than to an ejected one). Just `tried` while nothing is
    /// ejected or probed.
    pub fn exclude<'a>(&'a mut self, now: Time, tried: &'a [EndpointId]) -> &'a [EndpointId] {
        self.reinstate(now);
        if self.ejected == 0 && self.probing == 0 {
            return tried;
        }
        // An endpoint out for latency is ranked last rather than abandoned: once every endpoint in
        // the choice holds more of this caller's attempts than it did when it went out, or is
        // refusing them, it takes the overflow (a learned number does not take capacity away; at
        // 90 % of three replicas' capacity, one out for a moment queued what the two left could
        // not drain, and behind admission control at 130 % it idled while they refused).
        let choice = self.endpoints.iter().filter(|e| e.ejected_until.is_none() && !e.probing && !e.retired);
        let least = choice.map(|e| if e.refusing { u32::MAX } else { e.in_flight }).min().unwrap_or(u32::MAX);
        let ejected = |(i, e): (usize, &Endpoint)| {
            let out = e.ejected_until.is_some() && (e.reason == Reason::Failures || least <= e.held);
            (out || e.probing).then_some(i)
        };
        self.scratch.clear();
        self.scratch.extend(self.endpoints.iter().enumerate().filter_map(ejected));
        let scratch = &self.scratch;
        if (0..self.endpoints.len()).any(|i| !scratch.contains(&i) && !tried.contains(&i)) {
            self.scratch.extend_from_slice(tried);
        }
        &self.scratch
    }

    /// How many endpoints are ejected at `now`.
    pub fn ejected_count(&mut self, now: Time) -> usize {
        self.reinstate(now);
        self.ejected
    }

    /// An attempt to `endpoint` ended with `outcome` at `now`; the ejection it caused, if any.
    pub fn on_outcome(&mut self, endpoint: EndpointId, now: Time, outcome: Outcome) -> Option<Ejection> {
        self.reinstate(now);
        self.end_probe(endpoint);
        let e = self.endpoints.get_mut(endpoint).filter(|e| !e.retired)?;
        e.in_flight = e.in_flight.saturating_sub(1);
        match outcome {
            Outcome::Success | Outcome::Rejected | Outcome::Overloaded => {
                e.failures = 0;
                e.refusing = outcome == Outcome::Rejected;
                if e.probation {
                    e.probation = false;
                    // A slow endpoint answers: only fresh samples may say it is no longer slow.
                    if e.reason == Reason::Failures {
                        e.start_over();
                    }
                }
                None
            }
            Outcome::Error | Outcome::Unavailable | Outcome::TimedOut => {
                if e.ejected_until.is_some() {
                    // An attempt sent before the ejection: it is out already.
                    return None;
                }
                e.failures = e.failures.saturating_add(1);
                let due = e.probation || e.failures >= self.config.consecutive_failures;
                if !due {
                    return None;
                }
                self.eject(endpoint, now, Reason::Failures, None)
            }
            Outcome::Cancelled => None,
        }
    }

    /// A successful attempt of a request of `class` to `endpoint` ended at `now` after `rtt`; the
    /// latency ejection it caused, if any. (Call [`Outlier::on_outcome`] for it as well.)
    pub fn on_answer(&mut self, endpoint: EndpointId, class: ClassId, now: Time, rtt: Duration) -> Option<Ejection> {
        let factor = self.config.latency_factor?;
        self.reinstate(now);
        let window = self.config.latency_samples as usize;
        let e = self.endpoints.get(endpoint).filter(|e| !e.retired)?;
        if e.ejected_until.is_some() {
            return None;
        }
        let class = usize::from(class);
        if class >= self.answers.len() {
            self.answers.resize_with(class + 1, Vec::new);
        }
        let answers = &mut self.answers[class];
        answers.resize(self.endpoints.len(), Answers::default());
        let a = &mut answers[endpoint];
        if a.samples.len() == window {
            a.samples.pop_front();
        }
        a.samples.push_back(Sample { sent: now.saturating_sub(rtt), rtt });
        self.medians.clear();
        self.medians.extend(a.samples.iter().map(|s| s.rtt));
        let own = lower_median(&mut self.medians);
        a.median = Some(own);
        self.medians.clear();
        let peers = self.endpoints.iter().zip(answers.iter()).enumerate();
        let peers = peers.filter(|&(i, (p, _))| i != endpoint && p.ejected_until.is_none());
        self.medians.extend(peers.filter_map(|(_, (_, a))| a.median));
        if self.medians.len() < 2 {
            return None;
        }
        let reference = upper_median(&mut self.medians);
        let e = &mut self.endpoints[endpoint];
        if own.as_secs_f64() > factor * reference.as_secs_f64() {
            let evidence = self.answers[class][endpoint].samples.iter().map(|s| s.sent).min();
            let since = e.slow_since.or(evidence);
            self.eject(endpoint, now, Reason::Latency, since)
        } else {
            if e.reason == Reason::Latency {
                e.start_over();
            }
            e.slow_since = None;
            None
        }
    }

    /// Ejects `endpoint` at `now` unless the ejected share is full; for latency, seen slow since
    /// `slow_since` (kept only if it goes out: slowness seen while the share was full is not
    /// evidence for a later ejection). An endpoint failing makes room by taking back one that is
    /// only slow: errors cost more.
    fn eject(&mut self, endpoint: EndpointId, now: Time, reason: Reason, slow_since: Option<Time>) -> Option<Ejection> {
        if self.ejected >= self.cap && reason == Reason::Failures {
            let slow = self.endpoints.iter().position(|e| e.ejected_until.is_some() && e.reason == Reason::Latency);
            if let Some(slow) = slow {
                self.endpoints[slow].ejected_until = Some(now);
                self.reinstate(now);
            }
        }
        if self.ejected >= self.cap {
            return None;
        }
        self.end_probe(endpoint);
        let e = &mut self.endpoints[endpoint];
        e.ejections = e.ejections.saturating_add(1);
        let mut duration = self.config.base_ejection.saturating_mul(e.ejections).min(self.config.max_ejection);
        if let (Reason::Latency, Some(since)) = (reason, slow_since) {
            duration = duration.min(now.saturating_sub(since).mul_f64(LATENCY_EJECTION_PER_EVIDENCE));
            e.slow_since = Some(since);
        }
        e.ejected_until = Some(now.saturating_add(duration));
        e.held = e.in_flight;
        e.failures = 0;
        e.probation = false;
        e.reason = reason;
        let nth = e.ejections;
        self.forget_answers(endpoint);
        self.ejected += 1;
        Some(Ejection { endpoint, duration, nth, reason })
    }

    /// Drops `endpoint`'s answer times in every class, keeping their room (an ejection for
    /// latency may last milliseconds, and a request's path allocates nothing).
    fn forget_answers(&mut self, endpoint: EndpointId) {
        for class in &mut self.answers {
            if let Some(a) = class.get_mut(endpoint) {
                a.samples.clear();
                a.median = None;
            }
        }
    }
}

/// The median of `values`, the lower middle one of an even count; reorders them.
fn lower_median(values: &mut [Duration]) -> Duration {
    *values.select_nth_unstable((values.len() - 1) / 2).1
}

/// The median of `values`, the upper middle one of an even count; reorders them.
fn upper_median(values: &mut [Duration]) -> Duration {
    *values.select_nth_unstable(values.len() / 2).1
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn config(consecutive_failures: u32, max_ejected: f64) -> OutlierConfig {
        OutlierConfig {
            consecutive_failures,
            base_ejection: S(10),
            max_ejection: S(25),
            max_ejected,
            ..OutlierConfig::default()
        }
    }

    fn ejected(o: &mut Outlier, now: Time) -> Vec<EndpointId> {
        o.exclude(now, &[]).to_vec()
    }

    #[test]
    fn the_nth_failure_in_a_row_ejects_for_base_ejection() {
        let mut o = Outlier::new(4, config(3, 0.5));
        assert_eq!(o.on_outcome(1, S(0), Outcome::Error), None);
        assert_eq!(o.on_outcome(1, S(0), Outcome::TimedOut), None);
        // A success ends the run: three more are needed.
        assert_eq!(o.on_outcome(1, S(0), Outcome::Success), None);
        assert_eq!(o.on_outcome(1, S(1), Outcome::Unavailable), None);
        assert_eq!(o.on_outcome(1, S(1), Outcome::Cancelled), None, "ignored");
        assert_eq!(o.on_outcome(1, S(1), Outcome::Error), None);
        assert_eq!(
            o.on_outcome(1, S(2), Outcome::Error),
            Some(Ejection { endpoint: 1, duration: S(10), nth: 1, reason: Reason::Failures })
        );
        assert_eq!(ejected(&mut o, S(2)), [1]);
        assert_eq!(ejected(&mut o, S(12) - Duration::from_nanos(1)), [1]);
        assert_eq!(ejected(&mut o, S(12)), [] as [EndpointId; 0]);
        // A 429 ends a run too.
        o.on_outcome(2, S(12), Outcome::Error);
        o.on_outcome(2, S(12), Outcome::Error);
        o.on_outcome(2, S(12), Outcome::Rejected);
        assert_eq!(o.on_outcome(2, S(12), Outcome::Error), None);
    }

    #[test]
    fn a_failed_probe_ejects_again_for_longer_up_to_the_cap_and_a_success_resets() {
        let mut o = Outlier::new(2, config(2, 0.5));
        let fail = |o: &mut Outlier, t: u64| o.on_outcome(0, S(t), Outcome::Error).map(|e| (e.duration, e.nth));
        assert_eq!(fail(&mut o, 0), None);
        assert_eq!(fail(&mut o, 0), Some((S(10), 1)));
        // Failures of attempts sent before the ejection change nothing.
        assert_eq!(fail(&mut o, 5), None);
        // Back at 10 s on probation: one failure is enough, for twice as long, then capped at 25 s.
        assert_eq!(fail(&mut o, 10), Some((S(20), 2)));
        assert_eq!(ejected(&mut o, S(29)), [0]);
        assert_eq!(fail(&mut o, 30), Some((S(25), 3)));
        assert_eq!(fail(&mut o, 55), Some((S(25), 4)));
        // A success on probation ends it and starts the intervals over.
        assert_eq!(o.on_outcome(0, S(80), Outcome::Success), None);
        assert_eq!(fail(&mut o, 81), None);
        assert_eq!(fail(&mut o, 81), Some((S(10), 1)));
    }

    #[test]
    fn at_most_max_ejected_of_the_endpoints_are_out_at_once_but_one_always_may_be() {
        // A quarter of 8 endpoints: 2.
        let mut o = Outlier::new(8, config(1, 0.25));
        assert!(o.on_outcome(0, S(0), Outcome::Error).is_some());
        assert!(o.on_outcome(1, S(0), Outcome::Error).is_some());
        assert_eq!(o.on_outcome(2, S(1), Outcome::Error), None, "the share is full");
        assert_eq!(o.ejected_count(S(1)), 2);
        // 0 and 1 are back at 10 s; 2 reached the threshold before, so its next failure ejects it.
        assert_eq!(o.on_outcome(2, S(10), Outcome::Error).map(|e| e.endpoint), Some(2));
        assert_eq!(ejected(&mut o, S(10)), [2]);
        // 10 % of 3 endpoints rounds down to none, but one may always go.
        let mut o = Outlier::new(3, config(1, 0.1));
        assert!(o.on_outcome(0, S(0), Outcome::Error).is_some());
        assert_eq!(o.on_outcome(1, S(0), Outcome::Error), None);
    }

    #[test]
    fn a_retired_endpoint_frees_its_place_in_the_share_and_is_judged_no_more() {
        // A quarter of 8 endpoints: 2, both taken.
        let mut o = Outlier::new(8, config(1, 0.25));
        assert!(o.on_outcome(0, S(0), Outcome::Error).is_some());
        assert!(o.on_outcome(1, S(0), Outcome::Error).is_some());
        // 0 leaves: 1 place free again (a quarter of 7 rounds down to 1, taken by 1), so another
        // failing endpoint must wait; once 4 more join (11 endpoints left), 2 may go.
        o.retire(0);
        assert_eq!(ejected(&mut o, S(1)), [1]);
        assert_eq!(o.on_outcome(2, S(1), Outcome::Error), None);
        o.grow(12);
        assert_eq!(o.on_outcome(2, S(1), Outcome::Error).map(|e| e.endpoint), Some(2));
        // A retired endpoint's failures eject nothing; back, it starts afresh.
        assert_eq!(o.on_outcome(0, S(2), Outcome::Error), None);
        o.restore(0);
        assert_eq!(ejected(&mut o, S(2)), [1, 2]);
    }

    #[test]
    fn a_pick_avoids_ejected_endpoints_before_tried_ones() {
        let mut o = Outlier::new(4, config(1, 0.5));
        assert_eq!(o.exclude(S(0), &[3]), [3], "nothing ejected: the tried ones");
        o.on_outcome(2, S(0), Outcome::Error);
        assert_eq!(o.exclude(S(0), &[3]), [2, 3]);
        // Every endpoint left was tried: only the ejected one is avoided.
        assert_eq!(o.exclude(S(0), &[0, 1, 3]), [2]);
        assert_eq!(o.exclude(S(10), &[3]), [3], "back in");
    }

    /// Latency ejection over `endpoints`: 3 samples, factor 3, half may go, 10 s then 20 s.
    fn by_latency(endpoints: usize) -> Outlier {
        let c = OutlierConfig { latency_factor: Some(3.0), latency_samples: 3, ..config(5, 0.5) };
        Outlier::new(endpoints, c)
    }

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// A successful answer after `rtt`, told as [`Call`](crate::call::Call) tells it.
    fn answer(o: &mut Outlier, endpoint: EndpointId, now: Time, rtt: Duration) -> Option<Ejection> {
        o.on_outcome(endpoint, now, Outcome::Success).or_else(|| o.on_answer(endpoint, 0, now, rtt))
    }

    #[test]
    fn an_endpoint_far_slower_than_its_peers_is_ejected() {
        let mut o = by_latency(4);
        // The first answers: 3 takes 2 s, but no two peers have answered yet, so nothing is judged.
        assert_eq!(answer(&mut o, 3, S(5), S(2)), None);
        assert_eq!(answer(&mut o, 1, S(5), MS(100)), None);
        assert_eq!(answer(&mut o, 2, S(5), MS(100)), None);
        // 0 answers in 250 ms: its peers' medians are 2 s, 100 ms and 100 ms, median 100 ms, and
        // 250 ms is not above 3 × 100 ms.
        assert_eq!(answer(&mut o, 0, S(5), MS(250)), None);
        // 3's window is [2 s, 400 ms]: median (the lower one) 400 ms > 3 × median(250, 100, 100).
        // Seen slow since its first attempt went, at 3 s: out for 3 × 3 s, under `base_ejection`.
        let ejection = Ejection { endpoint: 3, duration: S(9), nth: 1, reason: Reason::Latency };
        assert_eq!(answer(&mut o, 3, S(6), MS(400)), Some(ejection));
        assert_eq!(ejected(&mut o, S(6)), [3]);
        assert_eq!(ejected(&mut o, S(15)), [] as [EndpointId; 0]);
    }

    #[test]
    fn a_slow_route_is_compared_with_its_own_answers() {
        let mut o = by_latency(3);
        let mut answer = |endpoint, class, rtt| {
            let at = S(1);
            o.on_outcome(endpoint, at, Outcome::Success).or_else(|| o.on_answer(endpoint, class, at, rtt))
        };
        // Class 1 (a fast route) answers in 10 ms everywhere; class 2 (a slow one) in 1 s.
        for endpoint in 0..3 {
            assert_eq!(answer(endpoint, 1, MS(10)), None);
        }
        // Endpoint 0 now answers only slow-route requests, for three answers in a row: pooled
        // with the fast ones, its median would be 100 times its peers'. Per class, it is alike.
        for _ in 0..3 {
            assert_eq!(answer(0, 2, S(1)), None);
        }
        assert_eq!(answer(1, 2, S(1)), None);
        assert_eq!(answer(2, 2, MS(900)), None);
        // A slow endpoint within the slow route is still found.
        assert!(answer(2, 2, S(4)).is_none());
        assert_eq!(answer(2, 2, S(4)).map(|e| e.reason), Some(Reason::Latency));
    }

    #[test]
    fn one_slow_answer_is_not_enough_but_a_slow_median_is() {
        let mut o = by_latency(3);
        answer(&mut o, 1, S(0), MS(100));
        answer(&mut o, 2, S(0), MS(100));
        // 0 answers in 100 ms, 100 ms, then 1 s: its median of three is 100 ms.
        assert_eq!(answer(&mut o, 0, S(1), MS(100)), None);
        assert_eq!(answer(&mut o, 0, S(1), MS(100)), None);
        assert_eq!(answer(&mut o, 0, S(1), S(1)), None);
        // A second 1 s answer: the window is [100 ms, 1 s, 1 s], median 1 s > 300 ms.
        assert_eq!(answer(&mut o, 0, S(2), S(1)).map(|e| e.reason), Some(Reason::Latency));
        // Answers of attempts sent before the ejection are not samples.
        assert_eq!(o.on_answer(0, 0, S(3), S(1)), None);
        assert!(o.answers[0][0].samples.is_empty());
    }

    #[test]
    fn back_in_a_slow_endpoint_is_probed_once_and_judged_on_fresh_answers() {
        let mut o = by_latency(3);
        answer(&mut o, 1, S(10), MS(100));
        answer(&mut o, 2, S(10), MS(100));
        // Its first answer took 5 s: out for 3 × 5 s, longer than `base_ejection` (10 s).
        let first = answer(&mut o, 0, S(10), S(5));
        assert_eq!(first, Some(Ejection { endpoint: 0, duration: S(10), nth: 1, reason: Reason::Latency }));
        // Back at 20 s: one attempt, the probe, may go to it; the next pick avoids it.
        assert_eq!(ejected(&mut o, S(20)), [] as [EndpointId; 0]);
        o.on_send(0);
        assert_eq!(ejected(&mut o, S(20)), [0]);
        o.on_send(0);
        // The probe answers in 1 s: still slow, out for twice as long (its success does not reset
        // the intervals as it does after failures).
        let again = answer(&mut o, 0, S(21), S(1));
        assert_eq!(again, Some(Ejection { endpoint: 0, duration: S(20), nth: 2, reason: Reason::Latency }));
        // Back at 41 s, the probe answers in 120 ms: not slow, so the intervals start over.
        assert_eq!(ejected(&mut o, S(41)), [] as [EndpointId; 0]);
        o.on_send(0);
        assert_eq!(answer(&mut o, 0, S(41), MS(120)), None);
        assert_eq!(ejected(&mut o, S(41)), [] as [EndpointId; 0]);
        // Slow again: the median of [120 ms, 2 s] is 120 ms; of [120 ms, 2 s, 2 s], 2 s, seen
        // since 40 s: out for 3 × 3 s, a first ejection again.
        assert_eq!(answer(&mut o, 0, S(42), S(2)), None);
        let third = answer(&mut o, 0, S(43), S(2));
        assert_eq!(third, Some(Ejection { endpoint: 0, duration: S(9), nth: 1, reason: Reason::Latency }));
    }

    #[test]
    fn a_brief_slowdown_costs_a_brief_ejection_and_a_lasting_one_a_growing_one() {
        let mut o = by_latency(3);
        answer(&mut o, 1, S(10), MS(1));
        answer(&mut o, 2, S(10), MS(1));
        // A pause of one process: an answer of 8 ms where its peers take 1 ms, and it is out for
        // three times the 8 ms it has been seen slow, not for `base_ejection`'s 10 s.
        let t = |ms| S(10) + MS(ms);
        let brief = answer(&mut o, 0, t(8), MS(8)).map(|e| e.duration);
        assert_eq!(brief, Some(MS(24)));
        assert_eq!(ejected(&mut o, t(31)), [0]);
        assert_eq!(ejected(&mut o, t(32)), [] as [EndpointId; 0]);
        // Slow still on probation: out for three times all it has been seen slow (since 10 s),
        // twice `base_ejection` at most; then quick again, and a later slowdown starts over.
        o.on_send(0);
        let longer = answer(&mut o, 0, t(40), MS(8)).map(|e| (e.duration, e.nth));
        assert_eq!(longer, Some((MS(120), 2)));
        o.on_send(0);
        assert_eq!(answer(&mut o, 0, t(400), MS(1)), None);
        assert_eq!(o.endpoints[0].slow_since, None);
    }

    #[test]
    fn with_two_peers_an_endpoint_is_slow_only_against_the_slower() {
        let mut o = by_latency(3);
        // 1 is back from an ejection and empty (10 ms); 2 queues as 0 does (100 ms). 0's 250 ms
        // is 25 times the quicker peer's, but not 3 times the slower's: it stays in.
        assert_eq!(answer(&mut o, 1, S(1), MS(10)), None);
        assert_eq!(answer(&mut o, 2, S(1), MS(100)), None);
        assert_eq!(answer(&mut o, 0, S(1), MS(250)), None);
        // Three times slower than both: out.
        assert_eq!(answer(&mut o, 0, S(2), MS(400)), None);
        assert!(answer(&mut o, 0, S(2), MS(400)).is_some());
    }

    #[test]
    fn an_endpoint_out_for_latency_takes_the_overflow_while_every_peer_refuses() {
        let mut o = by_latency(3);
        (0..3).for_each(|e| assert_eq!(answer(&mut o, e, S(1), MS(10)), None));
        // 0 goes out holding two attempts; its peers hold one each, behind admission control.
        (0..4).for_each(|_| o.on_send(0));
        assert_eq!(answer(&mut o, 0, S(2), S(1)), None);
        assert!(answer(&mut o, 0, S(2), S(1)).is_some());
        (1..3).for_each(|e| o.on_send(e));
        assert_eq!(ejected(&mut o, S(2)), [0]);
        // 1 refuses an attempt: 2 may still take one.
        o.on_send(1);
        assert_eq!(o.on_outcome(1, S(2), Outcome::Rejected), None);
        assert_eq!(ejected(&mut o, S(2)), [0]);
        // 2 refuses too: neither queues, and 0 takes the overflow rather than idle.
        o.on_send(2);
        assert_eq!(o.on_outcome(2, S(2), Outcome::Rejected), None);
        assert_eq!(ejected(&mut o, S(2)), [] as [EndpointId; 0]);
        // 1 answers one of its attempts: it takes requests again, and 0 is left out.
        assert_eq!(o.on_outcome(1, S(2), Outcome::Success), None);
        assert_eq!(ejected(&mut o, S(2)), [0]);
    }

    #[test]
    fn an_endpoint_out_for_latency_takes_the_overflow_once_its_peers_hold_more_than_it_did() {
        let mut o = by_latency(3);
        (0..3).for_each(|e| assert_eq!(answer(&mut o, e, S(1), MS(10)), None));
        // 0 holds two attempts when it is seen slow, and goes out.
        (0..4).for_each(|_| o.on_send(0));
        assert_eq!(answer(&mut o, 0, S(2), S(1)), None);
        assert!(answer(&mut o, 0, S(2), S(1)).is_some());
        // Its peers hold two and three: it is left out while one of them holds no more than two.
        (0..2).for_each(|_| o.on_send(1));
        (0..3).for_each(|_| o.on_send(2));
        assert_eq!(ejected(&mut o, S(2)), [0]);
        // Both hold three: they queue as it did, and it is in the choice again, last.
        o.on_send(1);
        assert_eq!(ejected(&mut o, S(2)), [] as [EndpointId; 0]);
        assert_eq!(o.ejected_count(S(2)), 1, "still out, for the balancer's ranking");
        o.on_outcome(1, S(2), Outcome::Success);
        assert_eq!(ejected(&mut o, S(2)), [0]);
        // An endpoint out for failures stays out whatever its peers hold.
        let mut o = Outlier::new(3, config(1, 0.5));
        o.on_outcome(0, S(0), Outcome::Error);
        (1..3).for_each(|e| (0..5).for_each(|_| o.on_send(e)));
        assert_eq!(ejected(&mut o, S(0)), [0]);
    }

    #[test]
    fn slowness_seen_while_the_share_was_full_does_not_lengthen_a_later_ejection() {
        let c = OutlierConfig { consecutive_failures: 1, max_ejected: 0.2, ..by_latency(5).config };
        let mut o = Outlier::new(5, c);
        (1..5).for_each(|e| assert_eq!(answer(&mut o, e, S(0), MS(100)), None));
        assert!(o.on_outcome(0, S(0), Outcome::Error).is_some());
        (2..5).for_each(|e| assert_eq!(answer(&mut o, e, S(1), MS(100)), None));
        // 1 is slow at 2 s while 0 fills the share: not ejected, and no evidence is kept.
        assert_eq!(answer(&mut o, 1, S(2), S(1)), None);
        assert_eq!(answer(&mut o, 1, S(2), S(1)), None);
        assert_eq!(o.endpoints[1].slow_since, None);
        // Quick again by 5 s; at 20 s (0 back since 10 s) it is slow for a moment: out for three
        // times the 0.5 s since its oldest answer's attempt went, not for three times the 19 s
        // since it was first seen slow (`base_ejection`, 10 s).
        (0..3).for_each(|_| assert_eq!(answer(&mut o, 1, S(5), MS(100)), None));
        assert_eq!(ejected(&mut o, S(10)), [] as [EndpointId; 0]);
        assert_eq!(answer(&mut o, 1, S(20), MS(100)), None);
        assert_eq!(answer(&mut o, 1, S(20) + MS(400), MS(400)), None);
        let brief = answer(&mut o, 1, S(20) + MS(400), MS(400)).map(|e| e.duration);
        assert_eq!(brief, Some(MS(1500)));
    }

    #[test]
    fn a_cancelled_probe_lets_another_go() {
        let mut o = Outlier::new(2, config(1, 0.5));
        o.on_outcome(0, S(0), Outcome::Error);
        // Back at 10 s; the probe goes, and until it ends nothing else does.
        assert_eq!(ejected(&mut o, S(10)), [] as [EndpointId; 0]);
        o.on_send(0);
        assert_eq!(ejected(&mut o, S(10)), [0]);
        // Another attempt of the request won: the probe is cancelled, and 0 may be probed again.
        assert_eq!(o.on_outcome(0, S(10), Outcome::Cancelled), None);
        assert_eq!(ejected(&mut o, S(10)), [] as [EndpointId; 0]);
    }

    #[test]
    fn latency_ejection_is_off_without_a_factor_and_shares_the_cap() {
        let mut o = Outlier::new(3, OutlierConfig { latency_factor: None, ..config(5, 0.5) });
        (1..3).for_each(|e| assert_eq!(answer(&mut o, e, S(0), MS(100)), None));
        (0..10).for_each(|_| assert_eq!(answer(&mut o, 0, S(0), S(10)), None));
        // A fifth of 5 is one endpoint: 0 is out for failing, so 1 may not go for its latency.
        let c = OutlierConfig { consecutive_failures: 1, max_ejected: 0.2, ..by_latency(5).config };
        let mut o = Outlier::new(5, c);
        assert!(o.on_outcome(0, S(0), Outcome::Error).is_some());
        (2..5).for_each(|e| assert_eq!(answer(&mut o, e, S(0), MS(100)), None));
        assert_eq!(answer(&mut o, 1, S(0), S(5)), None);
        assert_eq!(ejected(&mut o, S(0)), [0]);
        // Back at 10 s, 0 answers; 1 is slow again and goes out; then 2 fails: a failing endpoint
        // takes the place of a slow one, which is back in at once on probation.
        assert_eq!(answer(&mut o, 0, S(10), MS(100)), None);
        assert_eq!(answer(&mut o, 1, S(10), S(5)).map(|e| e.reason), Some(Reason::Latency));
        assert_eq!(o.on_outcome(2, S(11), Outcome::Error).map(|e| (e.endpoint, e.reason)), Some((2, Reason::Failures)));
        assert_eq!(ejected(&mut o, S(11)), [2]);
        assert!(o.endpoints[1].probation);
    }

    #[test]
    fn an_unknown_endpoint_is_ignored() {
        let mut o = Outlier::new(1, config(1, 0.1));
        assert_eq!(o.on_outcome(5, S(0), Outcome::Error), None);
        assert_eq!(o.ejected_count(S(0)), 0);
    }

    #[test]
    fn validate_names_the_field() {
        let bad = |c: OutlierConfig| c.validate().unwrap_err().to_string();
        assert_eq!(OutlierConfig::default().validate(), Ok(()));
        let c = OutlierConfig::default();
        assert_eq!(
            bad(OutlierConfig { consecutive_failures: 0, ..c }),
            "consecutive_failures: expected a positive integer, got 0"
        );
        assert_eq!(
            bad(OutlierConfig { max_ejection: S(1), ..c }),
            "max_ejection: expected at least base_ejection (30s), got 1s"
        );
        assert_eq!(
            bad(OutlierConfig { max_ejected: 1.5, ..c }),
            "max_ejected: expected a fraction between 0 and 1, got 1.5"
        );
        assert_eq!(
            bad(OutlierConfig { latency_factor: Some(0.5), ..c }),
            "latency_factor: expected a number >= 1, got 0.5"
        );
        assert_eq!(
            bad(OutlierConfig { latency_samples: 0, ..c }),
            "latency_samples: expected a positive integer, got 0"
        );
    }
}
