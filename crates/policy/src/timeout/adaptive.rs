//! The adaptive timeout: our own policy, built to keep timeouts rare *and* close to the latency
//! while the latency drifts, jumps, spikes and dips, and while some attempts are simply lost.
//!
//! What it decides: the timeout `T` of a first attempt; retry n gets `T·eⁿ`, where the escalation
//! `e` is `escalation`, or, when timed-out attempts keep running (`hedge_on_timeout`), grows
//! towards it when timeouts come from rises and shrinks towards 1 when they come from losses.
//!
//! It starts from adaptive-timeouts.txt's lessons (§3.4 sequential timeouts; §6: the Controller is
//! "much too dynamic", the Optimizer "too static") and TCP's retransmission timer (Jacobson/Karels'
//! `srtt + 4·rttvar`, Karn's backoff), changed where measurements on the paper's eight latency
//! models plus a lossy one (`adaptive_scenarios.rs`) showed a better choice:
//! - **level**: the median of the last `level_window` answered latencies. A median follows a step
//!   within half a window and ignores single outliers; an EWMA (`srtt`) is dragged up by every
//!   outlier and decays slowly, and each slow decay after a spike costs closeness.
//! - **spread**: the `spread_quantile` of the relative prediction errors `|x − level| / level` over
//!   the last `spread_window` answers. Relative, so it carries over level changes; a quantile short of
//!   the tail, so the few large errors right after a level change do not inflate it (`rttvar` does); and
//!   two-sided, because the timeout censors the upper tail: an upper quantile of the answered
//!   latencies shrinks with every timeout it causes (§3.6's argument; measured, it collapsed to
//!   5–12% timeouts).
//! - `T = level·(1 + max(margin, k·spread))`: `k·spread` covers the noise, `margin` is the floor when
//!   the latency barely varies.
//! - **escalation** (§3.4, Karn): retry n gets `T·eⁿ`. Up to `escalation`, the default 4 (TCP
//!   doubles), it turns a rise of up to 4× into one timeout instead of two; but when the attempt
//!   was lost, a retry that is lost too waits all of it. When timed-out attempts keep running
//!   (`hedge_on_timeout`), an attempt that was only slow still answers, so each timeout gets a
//!   verdict from the answer that ends its request: a late answer from the timed-out attempt, or a
//!   retry slower than `T`, says the latency rose; a retry answering within `T` says the attempt
//!   was lost. `e = 1 + (escalation − 1)·r`, with `r` the share of recent verdicts that said
//!   "rose" (an EWMA from 1, weight [`VERDICT_WEIGHT`]): where attempts are lost but the latency
//!   holds, a retry gets about the first attempt's timeout. Without it a slow attempt is dropped
//!   and cannot be told from a lost one, and `e` stays `escalation`.
//! - **lift**: an answered retry, or a late answer to an attempt kept past its timeout
//!   (`hedge_on_timeout`), lifts `T` to at least `x·(1 + margin)` for the next `level_window`
//!   answers, until the median has caught up with a new level or shown the slow answer was a
//!   one-off. A retry after a lost attempt answers at the usual latency and lifts nothing, so loss
//!   does not inflate the timeout.
//! - **backoff**: after a timeout, first attempts get at least `escalation` times the timeout that
//!   fired until the next answer arrives (Karn), which matters when many requests are in flight
//!   during a rise; the next answer, usually moments later, ends it.
//! - **drop and rise**: `drop_after` consecutive answers below `level / (1 + headroom)`, or
//!   `rise_after` consecutive answers above `level·(1 + rise_band·headroom)`, re-level at once to
//!   those answers (a drop also ends any lift), so the timeout follows a shift within two requests
//!   instead of half a window. This matters most for a random walk that moves in steps.
//!
//! - **racing a tail** (`hedge_on_timeout`, the default with this kind; issue #18): over the last
//!   [`model_window`] latencies (1000 for a p99) relative to a steadier level (the median of as
//!   many answers), answered or censored (an attempt abandoned unanswered is at least as slow as
//!   its wait: Kaplan–Meier; what lies beyond the slowest latency when that one is censored
//!   counts as lost), the timeout minimising the request's predicted `tail_quantile` (p99) when
//!   attempts race (read two standard errors of the sample short), plus the price
//!   of the extra attempts (each at `hedge_cost` times the median latency), among those whose
//!   extra attempts fit the retry budget (its fraction plus its floor of retries a second over the
//!   rate of requests): `crate::tail_model`. If that is below the largest latency held (a fresh
//!   attempt shortens the tail), every retry gets the same timeout, timeouts are expected (no
//!   Karn backoff, no lift by late answers the spread expects) and only answers beyond the
//!   sample's 1st or 99th percentile re-level. Otherwise (a tight distribution) the rules above
//!   set it.
//! - **a reserve for the deepest tail**: racing spends the whole share, so the budget's balance
//!   (its window's deposits less its withdrawals) now and then runs dry, and a request whose
//!   timeout fires then runs on one slow attempt: that request was the worst latency of
//!   `lognormal` (examples/timeouts-tails.yaml). The policy keeps its own copy of the budget (a
//!   deposit per first attempt, a withdrawal per retry, as the call charges them); while it holds
//!   less than one request's whole race (`attempts − 1` retries), attempts get the smallest
//!   timeout whose extra attempts fit the share less [`RESERVE_DEVIATIONS`] standard deviations
//!   of what the window's requests spend, so what is left goes to the requests that have waited
//!   longest.
//! - **ceiling**: no timeout, and no wait for an attempt kept past its timeout
//!   ([`TimeoutPolicy::patience`]), exceeds `escalation` times the larger of the spread's timeout
//!   and the slowest answered latency held. Lower bounds cannot raise it, so neither can an
//!   outage: an attempt lost in one is abandoned, not awaited until the deadline.
//!
//! Until `warmup` answers are in, first attempts get `max(initial, level·(1 + margin))`. All timeouts
//! stay within `[min, max]`.
//!
//! The racing constants (`MODEL_*`, the price `hedge_cost` 1, the target's two standard errors) were chosen
//! on `examples/timeouts-tails.yaml` and `examples/timeouts.yaml` over seeds 1–5 and are checked
//! on seeds 101–105 and 201–205 (crates/sim/tests/timeouts.rs); `tail_quantile` is the metric
//! itself (p99), not a fit. The
//! other defaults were tuned on `examples/timeouts.yaml` in the simulator (seeds 7–11) and checked on
//! `adaptive_scenarios.rs`; docs/measured.md lists what they give there. Two floors no reactive policy gets
//! under: every attempt lost is a timeout (`lossy`: 1% of attempts), and every unannounced rise
//! above the headroom costs one timeout (each dip's end, each spike's start).

use super::{hedge_model, AttemptResult, TimeoutPolicy};
use crate::config::{self, Check};
use crate::duration::text;
use crate::retry::RetryBudget;
use crate::stats::{from_nanos, nanos, Window};
use crate::tail_model::Race;
use crate::{Rng, Time};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The weight of each timeout's verdict (a rise or a loss) in the share that sets the escalation.
const VERDICT_WEIGHT: f64 = 0.25;

/// Relative latencies needed before the hedging model sets the timeout (until then, the spread).
const MODEL_MIN_SAMPLES: usize = 32;

/// Latencies the hedging model's sample holds beyond the quantile it minimises: the count whose
/// sampling error (its square root) is a third of it. With fewer, the tail the race is planned
/// on is a handful of draws and the timeout chosen moves with each: 256 latencies hold 2.6
/// beyond a p99, and on a Pareto of shape 1.5 the timeout swung between 1.5 and 3 times the
/// median (1.5 and 2 with 1000).
const MODEL_TAIL_SAMPLES: f64 = 10.0;

/// The latencies the hedging model holds, and the answers whose median is its level: at least
/// `spread_window`, and enough to hold [`MODEL_TAIL_SAMPLES`] beyond `tail_quantile` (1000 for a
/// p99). The level is steadier than `level_window`'s (a median of 5 moves by ±50 % on a
/// log-normal of σ 1, one of 1000 by ±4 %), while re-levelling still follows a shift at once, and
/// the latencies are relative to it, so they carry over a shift.
fn model_window(config: &AdaptiveConfig) -> usize {
    let tail = (1.0 - config.tail_quantile).max(1e-4);
    config.spread_window.max((MODEL_TAIL_SAMPLES / tail).ceil() as usize)
}

/// Answers between two minimisations of the hedging model (each costs `O(64·n log n)`), at
/// least.
const MODEL_EVERY: u32 = 16;

/// The least time between two minimisations: at 1,000 answers a second, one every
/// [`MODEL_EVERY`] answers would come every 16 ms and cost a fifth of a proxy's instructions
/// (bench/RESULTS.md), while the sample they read turns over in a second and a shift of the level
/// is followed by re-levelling, not by the model. Below 320 answers a second it rarely binds.
const MODEL_INTERVAL: Duration = Duration::from_millis(50);

/// The adaptive timeout's parameters; [`AdaptiveConfig::new`] gives the defaults from any
/// `initial`, `Default` from [`super::DEFAULT_INITIAL`]. A file may leave out any of them.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdaptiveConfig {
    /// The timeout until `warmup` answers are in (1 s by default).
    #[serde(with = "text")]
    pub initial: Duration,
    /// Answers whose median is the latency level (5).
    pub level_window: usize,
    /// Relative prediction errors kept for the spread (256).
    pub spread_window: usize,
    /// The quantile of the relative errors taken as the spread (0.85: robust to the few errors of
    /// level changes, yet it sees frequent small jumps such as a random walk's).
    pub spread_quantile: f64,
    /// Spreads above the level the timeout sits (2.4).
    pub k: f64,
    /// The least relative headroom above the level, and above a lifting retry's latency (0.1).
    pub margin: f64,
    /// The (largest) factor between the timeouts of successive attempts of a request (4).
    pub escalation: f64,
    /// With `hedge_on_timeout`: the weight of a second attempt's running time against the
    /// request's latency in the cost the timeout minimises (1: a second of the upstream's work
    /// weighs as a second of the caller's wait; `hedge_model.rs`).
    pub hedge_cost: f64,
    /// Whether timed-out attempts keep running beside their retries (the retry policy's
    /// `hedge_on_timeout`: true unless the file says otherwise), which lets it race a tail and
    /// learn its escalation from late answers. Not written in files: the retry policy's setting is
    /// copied here when the policy is built.
    #[serde(skip)]
    pub hedge_on_timeout: bool,
    /// With `hedge_on_timeout`: the largest share of first attempts the timeout may fire on, the
    /// retry budget's fraction, which its retries spend (`None`: unlimited). Not written in files:
    /// copied from the retry policy when the policy is built.
    #[serde(skip)]
    pub budget: Option<f64>,
    /// With `hedge_on_timeout`: the most attempts a request makes (the retry policy's
    /// `max_attempts`), which race in the tail model. Not written in files: copied from the retry
    /// policy when the policy is built.
    #[serde(skip)]
    pub attempts: u32,
    /// With `hedge_on_timeout` and a `budget`: the retries a second the budget always allows
    /// beside its fraction, which racing may spend too (its share grows by this over the rate of
    /// requests). Not written in files: copied from the retry policy when the policy is built.
    #[serde(skip)]
    pub budget_floor: f64,
    /// With `hedge_on_timeout`: the quantile of the request's latency that racing a tail minimises
    /// (0.99).
    pub tail_quantile: f64,
    /// Answers needed before the level and spread are trusted (8).
    pub warmup: usize,
    /// Consecutive answers below `level / (1 + headroom)` that re-level the estimate at once to
    /// those answers (2; 0 never does).
    pub drop_after: usize,
    /// Consecutive answers above `level·(1 + rise_band·headroom)` that re-level the estimate at once
    /// to those answers (2; 0 never does).
    pub rise_after: usize,
    /// The fraction of the headroom above which an answer counts towards `rise_after` (0.3).
    pub rise_band: f64,
    /// The smallest timeout (1 µs).
    #[serde(with = "text")]
    pub min: Duration,
    /// The largest timeout (60 s).
    #[serde(with = "text")]
    pub max: Duration,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        AdaptiveConfig::new(super::DEFAULT_INITIAL)
    }
}

impl AdaptiveConfig {
    /// The default parameters, starting from `initial`.
    pub fn new(initial: Duration) -> Self {
        AdaptiveConfig {
            initial,
            level_window: 5,
            spread_window: 256,
            spread_quantile: 0.85,
            k: 2.4,
            margin: 0.1,
            escalation: 4.0,
            hedge_cost: 1.0,
            hedge_on_timeout: false,
            budget: None,
            attempts: 2,
            budget_floor: 0.0,
            tail_quantile: 0.99,
            warmup: 8,
            drop_after: 2,
            rise_after: 2,
            rise_band: 0.3,
            min: Duration::from_micros(1),
            max: Duration::from_secs(60),
        }
    }

    /// Checks the parameters; the error names the field.
    pub fn validate(&self) -> Check {
        config::positive("initial", self.initial)?;
        config::at_least_one("level_window", self.level_window as u64)?;
        config::at_least_one("spread_window", self.spread_window as u64)?;
        config::fraction("spread_quantile", self.spread_quantile)?;
        config::above_zero("k", self.k)?;
        config::non_negative("margin", self.margin)?;
        config::at_least("escalation", self.escalation, 1.0)?;
        config::non_negative("hedge_cost", self.hedge_cost)?;
        config::fraction("tail_quantile", self.tail_quantile)?;
        config::non_negative("rise_band", self.rise_band)?;
        config::positive("min", self.min)?;
        config::ordered("min", self.min, "max", self.max)
    }
}

/// Our adaptive timeout: median level, quantile spread, escalating retries, lifted by slow retries
/// and dropped by fast answers.
#[derive(Clone, Debug)]
pub struct Adaptive {
    config: AdaptiveConfig,
    level: Window,
    spread: Window,
    answers: usize,
    /// Consecutive answers far below the level.
    below: usize,
    /// Consecutive answers well above the level.
    above: usize,
    /// A floor for the first attempt's timeout (ns) and the answers it still holds for.
    lift: Option<(f64, usize)>,
    /// A floor set by a timeout, held until the next answer.
    backoff: Option<f64>,
    /// The share of recent timeouts whose request then answered slower than a first attempt may
    /// take (a rise, not a loss), as an EWMA starting at 1.
    rises: f64,
    /// A timeout fired and awaits its verdict (retries after errors or 429s give none).
    verdict_due: bool,
    /// The last [`model_window`] answers: the hedging model's level.
    base: Window,
    /// The last `spread_window` latencies (answered, or lower bounds) relative to `base`'s median
    /// when they came.
    ratios: hedge_model::Sample,
    /// The last reading of `ratios`, kept for its room.
    estimate: hedge_model::Estimate,
    /// Relative latencies of the answers of a possible shift of the level, not yet in `ratios`.
    held: Vec<f64>,
    /// The relative timeout minimising the hedging model over `ratios`, once there are enough, and
    /// whether it is their largest (no fresh attempt ever paid).
    model: Option<(f64, bool)>,
    /// The smallest relative timeout whose extra attempts fit the budget's share with a reserve
    /// kept ([`Adaptive::reserved`]): the timeout while the budget is low.
    reserve: Option<f64>,
    /// The retry budget as this policy's own attempts move it: a deposit per first attempt, a
    /// withdrawal per retry (the call charges the same). Attempts sent by a hedge policy beside
    /// it are not told apart, so it is exact for `hedge_on_timeout` alone.
    budget: Option<RetryBudget>,
    /// The budget held less than one request's whole race (`attempts − 1` retries) when the last
    /// attempt was sent.
    low: bool,
    /// The 1st and 99th percentiles of `ratios` and their largest answered one, when the model was
    /// minimised.
    ratio_bounds: (f64, f64, f64),
    /// Answers since the model was last minimised.
    since_model: u32,
    /// When it was.
    modelled_at: Time,
    /// First attempts per second, counted over windows of [`RATE_WINDOW`].
    rate: Rate,
    /// The first attempts of the upstream's every class.
    upstream: UpstreamRequests,
}

/// The window over which first attempts are counted for the budget's share (the retry budget's).
const RATE_WINDOW: Duration = crate::retry::BUDGET_TTL;

/// Standard deviations of the share spent over the budget's window that racing keeps in reserve
/// while the budget is low: the two of the model's target (`tail_model.rs`'s slack), the same
/// convention.
const RESERVE_DEVIATIONS: f64 = 2.0;

/// The first attempts of every class of one upstream, counted together ([`TimeoutConfig::build_for`]).
/// The retry budget, and its floor of retries a second, belong to the upstream: a class's share
/// of the floor is the floor over the upstream's rate, not over its own (a route of 5 requests a
/// second would otherwise count the whole floor of 10 as its own, twice its requests, and race
/// each of them). The classes whose timeout is adaptive count; a route given a fixed timeout is
/// not counted, and the others then take a little more of the floor than their part.
///
/// [`TimeoutConfig::build_for`]: super::TimeoutConfig::build_for
#[derive(Clone, Debug, Default)]
pub struct UpstreamRequests(Arc<AtomicU64>);

impl UpstreamRequests {
    fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn add(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// First attempts per second over the last whole window: this class's, and its upstream's.
#[derive(Clone, Debug, Default)]
struct Rate {
    since: Option<Time>,
    count: u64,
    per_sec: Option<f64>,
    /// The upstream's count when the window began.
    upstream_since: u64,
    upstream_per_sec: Option<f64>,
}

impl Rate {
    fn on_request(&mut self, now: Time, upstream: &UpstreamRequests) {
        let since = *self.since.get_or_insert(now);
        let elapsed = now.saturating_sub(since);
        if elapsed >= RATE_WINDOW {
            let upstream_count = upstream.count();
            self.per_sec = Some(self.count as f64 / elapsed.as_secs_f64());
            self.upstream_per_sec = Some((upstream_count - self.upstream_since) as f64 / elapsed.as_secs_f64());
            self.since = Some(now);
            self.count = 0;
            self.upstream_since = upstream_count;
        }
        self.count += 1;
        upstream.add();
    }
}

impl Adaptive {
    /// An adaptive timeout with the given parameters, sanitised: non-finite or negative `k` and
    /// `margin` count as 0, `escalation` below 1 (or non-finite) as 1, `spread_quantile` is clamped
    /// to `[0, 1]` (non-finite: 0.5), and `max` is at least `min`.
    pub fn new(mut config: AdaptiveConfig) -> Self {
        let finite_or = |v: f64, d: f64| if v.is_finite() { v.max(0.0) } else { d };
        config.k = finite_or(config.k, 0.0);
        config.margin = finite_or(config.margin, 0.0);
        config.rise_band = finite_or(config.rise_band, 1.0);
        config.escalation = finite_or(config.escalation, 1.0).max(1.0);
        config.spread_quantile = finite_or(config.spread_quantile, 0.5).min(1.0);
        config.hedge_cost = finite_or(config.hedge_cost, 1.0);
        config.tail_quantile = finite_or(config.tail_quantile, 0.99).min(1.0);
        config.budget_floor = finite_or(config.budget_floor, 0.0);
        config.max = config.max.max(config.min);
        Adaptive {
            level: Window::new(config.level_window),
            spread: Window::new(config.spread_window),
            base: Window::new(model_window(&config)),
            ratios: hedge_model::Sample::new(model_window(&config)),
            estimate: hedge_model::Estimate::default(),
            ratio_bounds: (1.0, 1.0, 1.0),
            held: Vec::new(),
            model: None,
            reserve: None,
            budget: config
                .budget
                .filter(|_| config.hedge_on_timeout)
                .map(|b| RetryBudget::new(RATE_WINDOW, config.budget_floor.round() as u32, b as f32)),
            low: false,
            since_model: 0,
            modelled_at: Time::ZERO,
            rate: Rate::default(),
            upstream: UpstreamRequests::default(),
            config,
            answers: 0,
            below: 0,
            above: 0,
            lift: None,
            backoff: None,
            rises: 1.0,
            verdict_due: false,
        }
    }

    /// The same, counting its requests with the other classes of its upstream in `upstream`.
    pub fn sharing(mut self, upstream: UpstreamRequests) -> Self {
        self.upstream = upstream;
        self
    }

    /// The relative headroom above the level beyond which an answer is a surprise: the timeout's
    /// without `hedge_on_timeout`, and what tells a shift of the level from noise.
    fn headroom(&self) -> f64 {
        let spread = self.spread.quantile(self.config.spread_quantile).unwrap_or(0.0);
        self.config.margin.max(self.config.k * spread)
    }

    /// Whether the timeout races a tail: with `hedge_on_timeout`, the model fires below the
    /// largest latency it holds, so timeouts and late answers are expected there.
    fn racing(&self) -> bool {
        self.config.hedge_on_timeout && matches!(self.model, Some((_, false)))
    }

    /// The relative latencies below and above which an answer may show a shift of the level:
    /// `1 / (1 + headroom)` and `1 + rise_band·headroom`, widened with the hedging model to the
    /// 1st and 99th percentiles of its relative latencies, so a heavy tail's ordinary answers do
    /// not re-level it (two in a row beyond them happen once in 10 000 answers by chance).
    fn shift_bounds(&self, headroom: f64) -> (f64, f64) {
        let (low, high) = (1.0 / (1.0 + headroom), 1.0 + self.config.rise_band * headroom);
        if !self.config.hedge_on_timeout || self.model.is_none() {
            return (low, high);
        }
        let (lowest, highest, _) = self.ratio_bounds;
        (low.min(lowest), high.max(highest))
    }

    /// Whether a latency `x` lies above what the spread expects around the level (a rise).
    fn surprising(&self, x: f64) -> bool {
        self.level.median().is_none_or(|level| x > level * (1.0 + self.headroom()))
    }

    /// The longest any attempt is waited for, in nanoseconds, once answers are in: `escalation`
    /// times the larger of the spread's timeout and the slowest answer of the model's window
    /// (relative to its level now). It moves with answered latencies only, so an outage (no
    /// answers, attempts given up) cannot raise it.
    fn ceiling(&self) -> Option<f64> {
        let level = self.level.median().filter(|_| self.answers >= self.config.warmup)?;
        let slowest = match (self.model, self.base.median()) {
            (Some(_), Some(base)) => base * self.ratio_bounds.2,
            _ => 0.0,
        };
        Some(self.config.escalation * slowest.max(level * (1.0 + self.headroom())))
    }

    /// The estimated timeout in nanoseconds (level, spread and lift), before the bounds.
    fn estimate(&self) -> f64 {
        let c = &self.config;
        let estimate = match self.level.median() {
            Some(level) if self.answers >= c.warmup => match (self.model, self.base.median()) {
                (Some((ratio, false)), Some(base)) if c.hedge_on_timeout => {
                    // A low budget is kept for the requests already waiting longest.
                    let ratio = self.reserve.filter(|_| self.low).map_or(ratio, |r| ratio.max(r));
                    base * ratio.max(1.0 + c.margin)
                }
                _ => level * (1.0 + self.headroom()),
            },
            Some(level) => nanos(c.initial).max(level * (1.0 + c.margin)),
            None => nanos(c.initial),
        };
        self.lift.map_or(estimate, |(floor, _)| estimate.max(floor))
    }

    /// The first attempt's timeout in nanoseconds: the estimate, backed off after a timeout.
    fn first(&self) -> f64 {
        self.backoff.map_or(self.estimate(), |b| self.estimate().max(b))
    }

    fn bounded(&self, ns: f64) -> Duration {
        let ns = self.ceiling().map_or(ns, |c| ns.min(c));
        from_nanos(ns).clamp(self.config.min, self.config.max)
    }

    /// A relative latency, held while it may be part of a shift of the level: the answers that
    /// re-level show the shift, not the distribution around a level, and are dropped; the others
    /// go to the model.
    fn hold_ratio(&mut self, now: Time, ratio: f64, relevelled: bool, streak: bool) {
        if relevelled {
            self.held.clear();
        } else if streak {
            self.held.push(ratio);
        } else {
            // Taken and given back, so its room is kept.
            let mut held = std::mem::take(&mut self.held);
            held.iter().copied().chain([ratio]).for_each(|r| self.on_ratio(now, r, true));
            held.clear();
            self.held = held;
        }
    }

    /// Whether the model is due for a minimisation at `now`: the first once the sample holds
    /// [`MODEL_MIN_SAMPLES`], then after [`MODEL_EVERY`] answers and [`MODEL_INTERVAL`] (a clock
    /// that has not moved, as a test's, counts answers alone).
    fn model_due(&self, now: Time) -> bool {
        let elapsed = now.saturating_sub(self.modelled_at);
        self.ratios.len() >= MODEL_MIN_SAMPLES
            && (self.model.is_none()
                || (self.since_model >= MODEL_EVERY && (elapsed >= MODEL_INTERVAL || elapsed.is_zero())))
    }

    /// A relative latency for the hedging model, `answered` or a lower bound, at `now`; the model
    /// is minimised when due ([`Adaptive::model_due`]).
    fn on_ratio(&mut self, now: Time, ratio: f64, answered: bool) {
        self.ratios.push(ratio, answered);
        self.since_model += 1;
        if self.model_due(now) {
            self.since_model = 0;
            self.modelled_at = now;
            // Read into the room of the last reading: no allocation once the sample is full.
            let mut estimate = std::mem::take(&mut self.estimate);
            self.ratios.read_into(&mut estimate);
            self.model = self.minimise(&mut estimate);
            self.reserve = self.reserve_timeout(&estimate);
            let quantile = |q| estimate.quantile(q).unwrap_or(1.0);
            self.ratio_bounds = (quantile(0.01), quantile(0.99), self.ratios.largest_answered().unwrap_or(1.0));
            self.estimate = estimate;
        }
    }

    /// The relative timeout racing the sample's tail, and whether it is the largest latency held
    /// (no race): the one minimising the request's `tail_quantile` plus the price of its extra
    /// attempts (`tail_model`), within the retry budget's share now (with no budget, the extra
    /// attempts of `hedge_model.rs`'s mean-latency optimum). That model's timeout stands when the
    /// tail cannot be bounded (more than `1 − tail_quantile` lost).
    fn minimise(&self, estimate: &mut hedge_model::Estimate) -> Option<(f64, bool)> {
        let c = &self.config;
        if estimate.is_empty() {
            return None;
        }
        // The mean-latency optimum (the dearer minimisation) is needed only without a budget,
        // for the race's budget, or when the tail cannot be bounded.
        let mut optimum = None;
        let budget = match self.share() {
            Some(share) => share,
            None => {
                let (t, largest) = estimate.best_timeout(c.hedge_cost, c.budget)?;
                optimum = Some((t, largest));
                estimate.survival().extra_attempts(t, c.attempts)
            }
        };
        let top = estimate.survival().values().last().copied();
        let price = c.hedge_cost * estimate.quantile(0.5).unwrap_or(1.0);
        let race = Race { quantile: c.tail_quantile, attempts: c.attempts, budget: Some(budget), price };
        match estimate.tail_timeout(race) {
            // A race has candidates, so the survival holds values.
            Some(tail) => Some((tail, top.is_none_or(|top| tail >= top))),
            None => optimum.or_else(|| estimate.best_timeout(c.hedge_cost, c.budget)),
        }
    }

    /// The extra attempts a request may send on average within the retry budget now: its
    /// fraction plus its floor of retries a second over the upstream's rate of requests
    /// ([`UpstreamRequests`]). `None` without a budget.
    fn share(&self) -> Option<f64> {
        let c = &self.config;
        let floor = self.rate.upstream_per_sec.filter(|&r| r > 0.0).map_or(0.0, |r| c.budget_floor / r);
        c.budget.map(|b| b + floor)
    }

    /// `share` less a reserve of [`RESERVE_DEVIATIONS`] standard deviations of the share that
    /// the requests of the budget's window spend (a binomial count): what racing may count on
    /// when the budget is low.
    fn reserved(&self, share: f64) -> f64 {
        let window = self.rate.per_sec.map_or(0.0, |r| r * RATE_WINDOW.as_secs_f64());
        if window < 1.0 || !(share > 0.0 && share < 1.0) {
            return share;
        }
        (share - RESERVE_DEVIATIONS * (share * (1.0 - share) / window).sqrt()).max(0.0)
    }

    /// The smallest relative timeout whose extra attempts fit the reserved share (extra
    /// attempts fall as the timeout grows, so bisection finds it), if the budget has a share.
    fn reserve_timeout(&self, estimate: &hedge_model::Estimate) -> Option<f64> {
        let share = self.reserved(self.share()?);
        let survival = estimate.survival();
        let values = survival.values();
        let attempts = self.config.attempts;
        let i = values.partition_point(|&t| survival.extra_attempts(t, attempts) > share + 1e-12);
        values.get(i).copied()
    }

    /// An answer of latency `x` at `now`; `lifts` when it came from a retry or past its own
    /// timeout.
    fn on_answer(&mut self, now: Time, lifts: bool, x: f64) {
        self.backoff = None;
        let mut surprise = true;
        let mut ratio = None;
        if let Some(level) = self.level.median().filter(|&l| l > 0.0) {
            self.spread.push((x - level).abs() / level);
            ratio = self.base.median().filter(|&b| b > 0.0).map(|b| x / b);
            let headroom = self.headroom();
            // Racing a tail, a late answer the spread expected is that tail, not a rise: it lifts
            // nothing.
            surprise = !self.racing() || x > level * (1.0 + headroom);
            let (low, high) = self.shift_bounds(headroom);
            self.below = if x < level * low { self.below + 1 } else { 0 };
            self.above = if x > level * high { self.above + 1 } else { 0 };
        }
        self.level.push(x);
        self.base.push(x);
        let c = &self.config;
        let dropped = c.drop_after > 0 && self.below >= c.drop_after;
        let rose = !dropped && c.rise_after > 0 && self.above >= c.rise_after;
        let streak = (c.drop_after > 0 && self.below > 0) || (c.rise_after > 0 && self.above > 0);
        if dropped {
            self.relevel(self.below);
            self.lift = None;
        } else if rose {
            self.relevel(self.above);
        }
        if let Some(ratio) = ratio.filter(|_| self.config.hedge_on_timeout) {
            self.hold_ratio(now, ratio, dropped || rose, streak);
        }
        self.answers = self.answers.saturating_add(1);
        self.lift = self.lift.and_then(|(f, n)| (n > 1).then(|| (f, n - 1)));
        if lifts && surprise {
            let floor = x * (1.0 + self.config.margin);
            if self.lift.is_none_or(|(f, _)| floor > f) {
                self.lift = Some((floor, self.config.level_window.max(1)));
            }
        }
    }

    /// The level moved: keep only the last `n` answers, which showed it.
    fn relevel(&mut self, n: usize) {
        let recent: SmallVec<[f64; 8]> = self.level.iter().skip(self.level.len().saturating_sub(n)).collect();
        self.level.clear();
        self.base.clear();
        recent.into_iter().for_each(|x| {
            self.level.push(x);
            self.base.push(x);
        });
        self.below = 0;
        self.above = 0;
    }

    /// The factor between the timeouts of successive attempts now.
    fn escalation(&self) -> f64 {
        1.0 + (self.config.escalation - 1.0) * self.rises
    }

    fn scale(&self, attempt: u32) -> f64 {
        // Racing a tail, every attempt is a fresh draw: the same timeout suits each (the
        // Optimizer's flat sequence, docs/policies.md).
        if self.racing() {
            return 1.0;
        }
        self.escalation().powi(attempt.min(i32::MAX as u32) as i32)
    }

    fn on_timeout(&mut self, attempt: u32, fired: f64) {
        // Racing a tail, a timeout is the plan, not a sign of a rise (Karn's backoff is for those).
        if !self.racing() {
            let floor = fired / self.scale(attempt) * self.escalation();
            self.backoff = Some(self.backoff.map_or(floor, |b| b.max(floor)));
        }
        self.verdict_due = self.config.hedge_on_timeout;
    }

    /// A timeout's verdict: whether its request's answer showed a rise (or else a loss).
    fn on_verdict(&mut self, rose: bool) {
        let rose = if rose { 1.0 } else { 0.0 };
        self.rises += VERDICT_WEIGHT * (rose - self.rises);
        self.verdict_due = false;
    }
}

impl TimeoutPolicy for Adaptive {
    fn timeout(&mut self, now: Time, attempt: u32, _rng: Rng<'_>) -> Option<Duration> {
        if let Some(budget) = self.budget.as_mut() {
            if attempt == 0 {
                budget.deposit(now);
            } else {
                budget.withdraw(now);
            }
            self.low = budget.available(now) < u64::from(self.config.attempts.saturating_sub(1));
        }
        if attempt == 0 {
            self.rate.on_request(now, &self.upstream);
            return Some(self.bounded(self.first()));
        }
        Some(self.bounded(self.estimate() * self.scale(attempt)))
    }

    fn on_result(&mut self, now: Time, attempt: u32, timeout: Option<Duration>, result: AttemptResult) {
        match result {
            AttemptResult::Answered(x) => {
                let overdue = timeout.is_some_and(|t| x > t);
                let x = nanos(x);
                if self.verdict_due && (attempt > 0 || overdue) {
                    let rose = if self.racing() { self.surprising(x) } else { overdue || x > self.estimate() };
                    self.on_verdict(rose);
                }
                self.on_answer(now, attempt > 0 || overdue, x);
            }
            AttemptResult::TimedOut(d) => self.on_timeout(attempt, nanos(d)),
        }
    }

    fn current(&self) -> Option<Duration> {
        Some(self.bounded(self.first()))
    }

    fn on_abandoned(&mut self, now: Time, _attempt: u32, waited: Duration) {
        let base = self.base.median().filter(|&b| b > 0.0);
        if let Some(base) = base.filter(|_| self.config.hedge_on_timeout) {
            self.on_ratio(now, nanos(waited) / base, false);
        }
    }

    fn patience(&self) -> Option<Duration> {
        self.ceiling().map(|c| from_nanos(c).clamp(self.config.min, self.config.max))
    }

    fn learned(&self) -> bool {
        true
    }
}

#[cfg(test)]
#[path = "adaptive_scenarios.rs"]
mod scenarios;

#[cfg(test)]
mod tests {
    use super::*;
    use rand_pcg::Pcg64Mcg;

    fn us(v: u64) -> Duration {
        Duration::from_micros(v)
    }

    fn policy() -> Adaptive {
        Adaptive::new(AdaptiveConfig::new(us(500)))
    }

    fn answer(p: &mut Adaptive, attempt: u32, latency: Duration, times: usize) {
        for _ in 0..times {
            p.on_result(Time::ZERO, attempt, None, AttemptResult::Answered(latency));
        }
    }

    fn first(p: &mut Adaptive) -> Option<Duration> {
        p.timeout(Time::ZERO, 0, &mut Pcg64Mcg::new(1))
    }

    #[test]
    fn warms_up_from_initial() {
        let mut p = policy();
        assert_eq!(first(&mut p), Some(us(500)));
        // A slow first answer raises the warm-up timeout to its level plus the margin.
        answer(&mut p, 0, us(1000), 1);
        assert_eq!(first(&mut p), Some(us(1100)));
    }

    /// A policy that has seen 40 answers of 100 µs.
    fn steady() -> Adaptive {
        let mut p = policy();
        answer(&mut p, 0, us(100), 40);
        p
    }

    #[test]
    fn a_steady_latency_gets_the_margin_and_retries_escalate() {
        let mut p = steady();
        // No spread: the margin sets the headroom.
        assert_eq!(p.current(), Some(us(110)));
        let mut rng = Pcg64Mcg::new(1);
        assert_eq!(p.timeout(Time::ZERO, 1, &mut rng), Some(us(440)));
        // Retry 2 would get 1760 µs; the ceiling, 4 × 110 µs, holds it.
        assert_eq!(p.timeout(Time::ZERO, 2, &mut rng), Some(us(440)));
    }

    #[test]
    fn frequent_noise_widens_the_headroom_and_rare_noise_does_not() {
        // One answer in five at 120 µs: the level stays 100 µs, 8 of the 39 errors are 0.2, so
        // the errors' 0.85-quantile is 0.2: T = 100 µs · (1 + 2.4 · 0.2) = 148 µs.
        let mut p = policy();
        for _ in 0..8 {
            answer(&mut p, 0, us(100), 4);
            answer(&mut p, 0, us(120), 1);
        }
        assert_eq!(p.current(), Some(us(148)));
        // One in ten: 4 of 39 errors, fewer than 15%, so the spread is 0 and the margin rules.
        let mut p = policy();
        for _ in 0..4 {
            answer(&mut p, 0, us(100), 9);
            answer(&mut p, 0, us(120), 1);
        }
        assert_eq!(p.current(), Some(us(110)));
    }

    #[test]
    fn a_timeout_backs_off_first_attempts_until_the_next_answer() {
        let mut p = steady();
        p.on_result(Time::ZERO, 0, Some(us(110)), AttemptResult::TimedOut(us(110)));
        assert_eq!(first(&mut p), Some(us(440)));
        // Retries are not backed off twice.
        assert_eq!(p.timeout(Time::ZERO, 1, &mut Pcg64Mcg::new(1)), Some(us(440)));
        answer(&mut p, 0, us(100), 1);
        assert_eq!(first(&mut p), Some(us(110)));
    }

    #[test]
    fn a_slow_retry_lifts_the_timeout_and_a_lasting_rise_keeps_it() {
        let mut p = steady();
        // Attempt 0 timed out at 110 µs; its retry answered after 400 µs.
        p.on_result(Time::ZERO, 0, Some(us(110)), AttemptResult::TimedOut(us(110)));
        answer(&mut p, 1, us(400), 1);
        assert_eq!(first(&mut p), Some(us(440)));
        // The next answer at 400 µs is the second in a row above the level: re-level to them.
        answer(&mut p, 0, us(400), 1);
        assert_eq!(first(&mut p), Some(us(440)));
        // Long after the lift has ended, the level is 400 µs; the two errors of 3 are outliers.
        answer(&mut p, 0, us(400), 10);
        assert_eq!(first(&mut p), Some(us(440)));
    }

    #[test]
    fn retries_after_lost_attempts_escalate_less_when_timed_out_attempts_keep_running() {
        let mut p = Adaptive::new(AdaptiveConfig { hedge_on_timeout: true, ..AdaptiveConfig::new(us(500)) });
        answer(&mut p, 0, us(100), 40);
        let mut rng = Pcg64Mcg::new(1);
        // Attempt 0 timed out, its retry answered at the usual 100 µs: the attempt was lost. The
        // share of rises falls from 1 to 0.75, so retries escalate ×3.25 instead of ×4.
        p.on_result(Time::ZERO, 0, Some(us(110)), AttemptResult::TimedOut(us(110)));
        answer(&mut p, 1, us(100), 1);
        assert_eq!(p.timeout(Time::ZERO, 1, &mut rng), Some(Duration::from_nanos(357_500)));
        // Nine more losses: 3 · 0.75^10 is 0.17, so a retry gets about the first attempt's timeout.
        for _ in 0..9 {
            p.on_result(Time::ZERO, 0, Some(us(110)), AttemptResult::TimedOut(us(110)));
            answer(&mut p, 1, us(100), 1);
        }
        let escalation = 1.0 + 3.0 * 0.75f64.powi(10);
        assert_eq!(
            p.timeout(Time::ZERO, 1, &mut rng),
            Some(Duration::from_nanos((110_000.0 * escalation).round() as u64))
        );
        // A rise (the retry answers at 400 µs) pulls the escalation back up: 1 + 3·(0.25 + 0.75·0.0563).
        p.on_result(Time::ZERO, 0, Some(us(110)), AttemptResult::TimedOut(us(110)));
        answer(&mut p, 1, us(400), 1);
        let escalation = 1.0 + 3.0 * (0.25 + 0.75 * 0.75f64.powi(10));
        let lifted = 440_000.0;
        // The lifted 440 µs times that is 826 µs, above the ceiling: 4 × 110 µs until the next
        // minimisation of the sample (every 16 answers) sees the 400 µs answer.
        assert!(lifted * escalation > 440_000.0);
        assert_eq!(p.timeout(Time::ZERO, 1, &mut rng), Some(us(440)));
        // A retry after an error, with no timeout before it, gives no verdict.
        answer(&mut p, 1, us(100), 1);
        assert_eq!(p.timeout(Time::ZERO, 1, &mut rng), Some(us(440)));
        // Dropping timed-out attempts, a fast retry cannot tell a loss from a slow attempt.
        let mut q = steady();
        q.on_result(Time::ZERO, 0, Some(us(110)), AttemptResult::TimedOut(us(110)));
        answer(&mut q, 1, us(100), 1);
        assert_eq!(q.timeout(Time::ZERO, 1, &mut rng), Some(us(440)));
    }

    #[test]
    fn a_late_answer_to_an_overdue_attempt_lifts_like_a_slow_retry() {
        let mut p = steady();
        // Attempt 0 timed out at 110 µs but kept running (hedge on timeout) and answered at 400 µs.
        p.on_result(Time::ZERO, 0, Some(us(110)), AttemptResult::TimedOut(us(110)));
        p.on_result(Time::ZERO, 0, Some(us(110)), AttemptResult::Answered(us(400)));
        assert_eq!(first(&mut p), Some(us(440)));
        // An answer within its timeout lifts nothing.
        let mut q = steady();
        q.on_result(Time::ZERO, 0, Some(us(500)), AttemptResult::Answered(us(400)));
        assert_eq!(first(&mut q), Some(us(110)));
    }

    #[test]
    fn a_one_off_slow_retry_is_forgotten_after_the_window() {
        let mut p = steady();
        answer(&mut p, 1, us(400), 1);
        answer(&mut p, 0, us(100), 4);
        assert_eq!(first(&mut p), Some(us(440)));
        answer(&mut p, 0, us(100), 1);
        assert_eq!(first(&mut p), Some(us(110)));
    }

    #[test]
    fn a_lost_attempt_does_not_lift_the_timeout() {
        let mut p = steady();
        p.on_result(Time::ZERO, 0, Some(us(110)), AttemptResult::TimedOut(us(110)));
        answer(&mut p, 1, us(100), 1);
        assert_eq!(first(&mut p), Some(us(110)));
    }

    #[test]
    fn two_fast_answers_drop_the_level() {
        let mut p = policy();
        answer(&mut p, 0, us(400), 40);
        assert_eq!(p.current(), Some(us(440)));
        answer(&mut p, 0, us(100), 1);
        assert_eq!(p.current(), Some(us(440)));
        answer(&mut p, 0, us(100), 1);
        assert_eq!(p.current(), Some(us(110)));
    }

    #[test]
    fn two_answers_high_in_the_headroom_raise_the_level() {
        let mut p = steady();
        // 104 µs is above 100 µs · (1 + 0.3 · 0.1): twice in a row re-levels to 104 µs.
        answer(&mut p, 0, us(104), 1);
        assert_eq!(p.current(), Some(us(110)));
        answer(&mut p, 0, us(104), 1);
        assert_eq!(p.current(), Some(Duration::from_nanos(114_400)));
    }

    fn hedging(budget: Option<f64>) -> Adaptive {
        Adaptive::new(AdaptiveConfig { hedge_on_timeout: true, budget, ..AdaptiveConfig::new(us(500)) })
    }

    #[test]
    fn classes_of_one_upstream_share_the_budgets_floor() {
        // A quick route of 90 requests a second and a slow one of 10, one budget of 20 % plus
        // 10 retries a second: over 11 s, each class counts its share of the floor against the
        // upstream's 100 requests a second. Alone, the slow route would take the whole floor as
        // its own: 10 retries a second for its 10 requests.
        let config = AdaptiveConfig { budget_floor: 10.0, ..hedging(Some(0.2)).config };
        let upstream = UpstreamRequests::default();
        let mut quick = Adaptive::new(config.clone()).sharing(upstream.clone());
        let mut slow = Adaptive::new(config.clone()).sharing(upstream);
        let mut alone = Adaptive::new(config);
        let mut rng = Pcg64Mcg::new(1);
        for ms in (0..11_000).step_by(10) {
            let now = Time::ZERO + Duration::from_millis(ms);
            if ms % 100 == 0 {
                slow.timeout(now, 0, &mut rng);
                alone.timeout(now, 0, &mut rng);
            } else {
                quick.timeout(now, 0, &mut rng);
            }
        }
        // (A window counts from its first request to the one that ends it: a request more or less.)
        let share = |p: &Adaptive| p.share().map(|s| (s * 100.0).round() / 100.0);
        assert_eq!(share(&quick), Some(0.3));
        assert_eq!(share(&slow), Some(0.3));
        assert_eq!(share(&alone), Some(1.2));
    }

    #[test]
    fn at_a_high_rate_the_model_is_read_every_50_ms_of_answers() {
        // 1,000 answers a second: a reading every 50 answers (50 ms) instead of every 16.
        let mut p = hedging(Some(0.2));
        let mut rng = Pcg64Mcg::new(1);
        let mut readings = [0; 12];
        for i in 0..12_000u32 {
            let now = Time::ZERO + Duration::from_millis(u64::from(i));
            p.timeout(now, 0, &mut rng);
            p.on_result(now, 0, None, AttemptResult::Answered(us(100 + u64::from(i % 7))));
            if p.since_model == 0 {
                readings[i as usize / 1000] += 1;
            }
        }
        assert_eq!(readings[1..], [20; 11]);
    }

    #[test]
    fn an_outage_cannot_raise_the_ceiling() {
        let mut p = hedging(Some(0.2));
        answer(&mut p, 0, us(100), 40);
        // A steady latency: no race, the spread's 110 µs; nothing waits past 4 × 110 µs.
        assert_eq!(first(&mut p), Some(us(110)));
        assert_eq!(p.patience(), Some(us(440)));
        // An outage: every attempt times out and is given up after its wait. Karn's backoff would
        // compound (×4 a timeout); the ceiling holds every timeout, and itself, at 440 µs.
        for _ in 0..100 {
            let t = first(&mut p).unwrap();
            p.on_result(Time::ZERO, 0, Some(t), AttemptResult::TimedOut(t));
            p.on_abandoned(Time::ZERO, 0, us(440));
        }
        assert_eq!(first(&mut p), Some(us(440)));
        assert_eq!(p.timeout(Time::ZERO, 3, &mut Pcg64Mcg::new(1)), Some(us(440)));
        assert_eq!(p.patience(), Some(us(440)));
    }

    #[test]
    fn a_heavy_tail_is_raced_within_the_budget() {
        // Answers from a Pareto of shape 1.5 over 100 µs, by quantile, 8 rounds of 32.
        let pareto = |i: u32| us(100).mul_f64((1.0 - (f64::from(i) + 0.5) / 32.0).powf(-1.0 / 1.5));
        let run = |budget| {
            let mut p = hedging(budget);
            for _ in 0..8 {
                (0..32).for_each(|i| answer(&mut p, 0, pareto((i * 7) % 32), 1));
            }
            first(&mut p).unwrap()
        };
        // The median of the answers is ≈ 159 µs. Racing shortens the request's p99, so the
        // timeout fires well inside the tail (the spread's rule put it past 1 ms): as early as
        // a fifth of extra attempts allows, on at most a fifth of the answers; with no budget,
        // as often as the mean model's optimum does.
        let (free, within) = (run(None), run(Some(0.2)));
        assert!(free > us(160) && free < us(400), "{free:?}");
        assert!(within > us(160) && within < us(400), "{within:?}");
        assert!((0..32).filter(|&i| pareto(i) > within).count() <= 6, "{within:?}");
        // Each retry gets the same timeout: fresh draws.
        let mut p = hedging(Some(0.2));
        for _ in 0..8 {
            (0..32).for_each(|i| answer(&mut p, 0, pareto((i * 7) % 32), 1));
        }
        let t = first(&mut p);
        assert_eq!(p.timeout(Time::ZERO, 2, &mut Pcg64Mcg::new(1)), t);
    }

    #[test]
    fn a_low_budget_is_kept_for_the_longest_waits() {
        let config =
            AdaptiveConfig { hedge_on_timeout: true, budget: Some(0.2), attempts: 6, ..AdaptiveConfig::new(us(500)) };
        let mut p = Adaptive::new(config);
        let mut rng = Pcg64Mcg::new(1);
        let pareto = |i: u32| us(100).mul_f64((1.0 - (f64::from(i) + 0.5) / 32.0).powf(-1.0 / 1.5));
        // 11 s of 32 first attempts a second, each answered from a Pareto tail: the rate is
        // known and a budget of 20 % holds 57 retries (the 288 requests of its last 10 slots).
        let tick = Duration::from_micros(31_250);
        let mut now = Time::ZERO;
        for i in 0..352 {
            p.timeout(now, 0, &mut rng);
            answer(&mut p, 0, pareto((i * 7) % 32), 1);
            now += tick;
        }
        let raced = p.current().unwrap();
        let available = |p: &mut Adaptive| p.budget.as_mut().map(|b| b.available(now));
        assert_eq!(available(&mut p), Some(57));
        // Retries spend it to 4.8 (with the next request's deposit), less than the 5 one request
        // may race with: new attempts fire only where the reserved share, 0.2 less two standard
        // deviations of 320 requests' share (0.155), pays for them.
        for _ in 0..53 {
            p.timeout(now, 1, &mut rng);
        }
        let kept = p.timeout(now, 0, &mut rng).unwrap();
        assert!(kept > raced, "{kept:?} vs {raced:?}");
        let beyond = |t: Duration| (0..32).filter(|&i| pareto(i) > t).count();
        assert!(beyond(kept) < beyond(raced), "{kept:?} vs {raced:?}");
        // One more request's deposit refills it to 5: back to the full share.
        assert_eq!(p.timeout(now, 0, &mut rng), Some(raced));
        assert_eq!(available(&mut p), Some(5));
    }

    #[test]
    fn timeouts_stay_within_bounds() {
        let config = AdaptiveConfig { min: us(50), max: us(300), ..AdaptiveConfig::new(us(500)) };
        let mut p = Adaptive::new(config);
        assert_eq!(first(&mut p), Some(us(300)));
        answer(&mut p, 0, us(1), 10);
        assert_eq!(first(&mut p), Some(us(50)));
        // Retry 9's 1.1 µs × 4⁹ is held by the ceiling (4 × 1.1 µs), and that by `min`.
        assert_eq!(p.timeout(Time::ZERO, 9, &mut Pcg64Mcg::new(1)), Some(us(50)));
    }

    #[test]
    fn degenerate_parameters_do_not_panic() {
        let config = AdaptiveConfig {
            initial: Duration::MAX,
            level_window: 5,
            spread_window: 0,
            spread_quantile: f64::NAN,
            k: f64::INFINITY,
            margin: -1.0,
            escalation: f64::NAN,
            hedge_cost: f64::NAN,
            hedge_on_timeout: true,
            budget: Some(f64::NAN),
            attempts: 0,
            budget_floor: f64::NAN,
            tail_quantile: f64::NAN,
            warmup: 0,
            drop_after: 0,
            rise_after: 0,
            rise_band: f64::NAN,
            min: us(10),
            max: Duration::ZERO,
        };
        let mut p = Adaptive::new(config);
        assert_eq!(first(&mut p), Some(us(10)));
        answer(&mut p, u32::MAX, Duration::ZERO, 3);
        answer(&mut p, u32::MAX, Duration::MAX, 3);
        p.on_result(Time::ZERO, u32::MAX, None, AttemptResult::TimedOut(Duration::MAX));
        assert_eq!(p.timeout(Time::ZERO, u32::MAX, &mut Pcg64Mcg::new(1)), Some(us(10)));
    }
}
