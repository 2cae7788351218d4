//! Dynamic capacity: the capacity is the load of the last window (its mean plus a few standard
//! deviations), times a headroom.
//!
//! bloc-load-balancing.txt §IV-D: "compute a cumulative average of the number of active requests in
//! its queue for 30 seconds. The system then uses this average as the capacity value. We reset and
//! recompute this average every 30 seconds. It admits all requests by default in the first 30
//! seconds where the capacity value is not defined yet."
//!
//! The average is time-weighted: the driver reports every change of the replica's request count
//! through [`Admission::observe`], and each count is weighted by how long it lasted. At the end of
//! each window the capacity becomes that window's level of load times the headroom (below), rounded
//! up and at least 1 (a capacity of 0 would refuse everything forever, since an idle replica's
//! average stays 0), and a new average starts. While the capacity is set, a request is admitted iff
//! the replica holds fewer requests than it, as with [`FixedCapacity`](super::FixedCapacity).
//!
//! The headroom (`headroom`, default 1.5; 1 is the paper's rule) is ours. With the paper's rule a
//! replica's capacity is about its share of the load, so the capacities of the others add up to
//! less than the load once one replica is lost: in a closed loop (examples/balancing.yaml's
//! `lost-closed`) the clients the others cannot hold are refused at once, again and again, and
//! success fell to 2-4 % of requests; in open loop bursts above the average are refused (97-99 %).
//! 1.25 was too little on some seeds, 1.5 kept ≥ 99.2 % in every scenario of that file on seeds
//! 1-3, and 2 lengthened the tails (docs/policies.md). A replica that is slow for good holds a
//! long queue and would see its capacity grow by the headroom each window; the callers' latency
//! ejection (`outlier:`) is what keeps traffic off it.
//!
//! The deviations (`deviations`, default 2.33; 0 is the paper's rule) are ours too: the level of
//! load the capacity is built on is the window's time-weighted mean plus that many standard
//! deviations, the normal approximation of the load's 99th percentile. The mean alone is a defect
//! whenever the load fluctuates much around it, which it does at small means: a replica without a
//! queue holds a Poisson count of requests (standard deviation √mean). At a mean of 2, 1.5 × the
//! mean is a capacity of 3, which a Poisson count reaches a third of the time: that many arrivals
//! are refused with no replica overloaded, and BLOC's chip rule, which grants none above
//! 0.8 × capacity (§IV-A, meant for a capacity that bounds the queue, not one at its usual level),
//! grants one on at most 1 response in 6 at 2 held and none at 3 (issue #21: callers ran out of
//! chips). With the deviations, the capacity is 1.5 × (2 + 2.33 × 1.41) → 8 and half the
//! responses leaving 3 held carry a chip. 2.33 is not fitted to a file: it puts a steady load's
//! capacity, before the headroom, at about its 99th percentile, so the headroom is left for a load
//! that grows (a lost replica). A closed loop's queues, which drift apart, get a looser capacity
//! than the mean gave; docs/policies.md has what that costs.
//!
//! The floor (`floor`, default on; off is the paper's rule) is ours as well. A count of held
//! requests cannot tell a bunch from overload: a replica with no queue at a load of 0.2 learns a
//! capacity of 2 even with the deviations, and a loaded machine's scheduling stalls bunch more
//! requests than that onto it at once (issue #21: 2-4 % of requests refused twice in the lab); an
//! idle window learns a capacity of 1 whatever the replica can hold. What tells them apart is
//! whether the held requests wait, which their answers show: the driver reports each successful
//! answer through [`Admission::answered`] with the count the replica held when it arrived, and
//! when a window closes, the counts whose answers took on average less than twice those that
//! found the replica idle (they waited less than their own service) raise the floor to the most
//! held at once without queueing; the first count whose answers took twice as long or more caps
//! it there. The capacity is then the larger of the load's and the floor, which stands through
//! windows that show nothing (no answer at an idle replica to compare with). A replica with one
//! worker shows a floor of 2 at most once it held two others: such a request waits at least one
//! whole service, so its answer takes twice the base or more on average; a queueing replica is
//! still refused at its learnt capacity. Twice the base is not fitted to a bench: it is where a
//! request's wait equals its own service.
//!
//! Details the paper leaves open:
//! - the first window starts at the first `observe` call, when the replica first reports its load;
//!   before that, and during the whole first window, everything is admitted;
//! - windows that end with no `observe` call had a constant load, the last one reported; they are
//!   accounted for whenever the policy is next asked or told anything, so the capacity in force at
//!   any `now` is exact no matter how rarely the driver calls;
//! - a zero window is taken as one nanosecond.

use super::Admission;
use crate::Time;
use std::time::Duration;

/// The average being accumulated over the current window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Window {
    /// When this window started.
    start: Time,
    /// The last time the load changed (or the window started, if later).
    since: Time,
    /// The load since then.
    load: u32,
    /// ∫ load dt from `start` to `since`, in request·nanoseconds.
    area: u128,
    /// ∫ load² dt over the same time, for the load's variance.
    square_area: u128,
}

impl Window {
    fn starting(start: Time, load: u32) -> Self {
        Window { start, since: start, load, area: 0, square_area: 0 }
    }

    /// Accounts for the current load lasting until `t`.
    fn extend_to(&mut self, t: Time) {
        let elapsed = t.saturating_sub(self.since).as_nanos();
        let load = u128::from(self.load);
        self.area += elapsed * load;
        self.square_area += elapsed * load * load;
        self.since = self.since.max(t);
    }
}

/// The state of a [`DynamicCapacity`] after the first observation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct State {
    window: Window,
    /// The capacity set at the end of the last complete window; `None` during the first.
    capacity: Option<u32>,
}

impl State {
    /// The state at `now`: every window that ended by `now` closed, its average the capacity.
    fn at(mut self, now: Time, length: Duration, rule: Rule) -> State {
        let end = match self.window.start.checked_add(length) {
            Some(end) if end <= now => end,
            _ => return self,
        };
        self.window.extend_to(end);
        self.capacity = Some(rule.capacity(&self.window, length));
        // Whole windows after that one saw the same load throughout: their average is that load.
        let whole = (now - end).as_nanos() / length.as_nanos();
        if whole > 0 {
            let mut constant = Window::starting(end, self.window.load);
            constant.extend_to(end + length);
            self.capacity = Some(rule.capacity(&constant, length));
        }
        let start = end + nanos(whole * length.as_nanos());
        self.window = Window::starting(start, self.window.load);
        self
    }
}

/// How a closed window's load becomes a capacity.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Rule {
    /// The factor over the load's level ([`DynamicCapacity::with_headroom`]).
    headroom: f64,
    /// Standard deviations of the load added to its mean ([`DynamicCapacity::with_deviations`]).
    deviations: f64,
}

impl Rule {
    /// `⌈headroom × (mean + deviations × sd)⌉` of the load over a window of `length` ending at
    /// `window.since`, at least 1, saturating at `u32::MAX`; exact in integers for the paper's rule
    /// (`headroom` 1, `deviations` 0).
    fn capacity(self, window: &Window, length: Duration) -> u32 {
        let capacity = if self.headroom == 1.0 && self.deviations == 0.0 {
            u32::try_from(window.area.div_ceil(length.as_nanos())).unwrap_or(u32::MAX)
        } else {
            let length = length.as_nanos() as f64;
            let mean = window.area as f64 / length;
            let variance = (window.square_area as f64 / length - mean * mean).max(0.0);
            // `as` saturates: a huge product is u32::MAX.
            (self.headroom * (mean + self.deviations * variance.sqrt())).ceil() as u32
        };
        capacity.max(1)
    }
}

/// A duration of `n` nanoseconds, saturating at `Duration::MAX`.
fn nanos(n: u128) -> Duration {
    let secs = u64::try_from(n / 1_000_000_000).unwrap_or(u64::MAX);
    Duration::new(secs, (n % 1_000_000_000) as u32)
}

/// The most requests held at once whose answers [`Answers`] keeps: a floor beyond this many is
/// moot, and it bounds the memory a flood of held requests could make it take.
const MOST_TRACKED: usize = 1024;

/// The successful answers of one window, by how many requests the replica held when each arrived:
/// how many, and their summed latency in nanoseconds.
#[derive(Clone, Debug, Default, PartialEq)]
struct Answers {
    by_rif: Vec<(u64, u128)>,
}

impl Answers {
    fn record(&mut self, rif: u32, latency: Duration) {
        let rif = rif as usize;
        if rif >= MOST_TRACKED {
            return;
        }
        if self.by_rif.len() <= rif {
            self.by_rif.resize(rif + 1, (0, 0));
        }
        let (count, total) = &mut self.by_rif[rif];
        *count += 1;
        *total += latency.as_nanos();
    }

    fn clear(&mut self) {
        self.by_rif.clear();
    }

    /// The floor after this window, given the floor before it. The base is the mean latency of
    /// the answers that arrived at an idle replica. Answers that found `k` requests held and took
    /// on average less than twice the base did not queue (their wait was shorter than their own
    /// service), so the replica holds `k + 1` without queueing and the floor rises to that; the
    /// first `k` whose answers took twice the base or more did queue, and the floor becomes `k`
    /// (a replica that slows under load is believed at once). Without answers at an idle replica
    /// the window shows nothing and the floor stands.
    fn floor_after(&self, mut floor: u32) -> u32 {
        let Some(&(base_count, base_total)) = self.by_rif.first().filter(|(count, _)| *count > 0) else {
            return floor;
        };
        for (k, &(count, total)) in self.by_rif.iter().enumerate().skip(1).filter(|(_, (count, _))| *count > 0) {
            // mean ≥ 2 × base, in integers: total / count ≥ 2 · base_total / base_count.
            let k = k as u32;
            if total * u128::from(base_count) >= 2 * base_total * u128::from(count) {
                return floor.min(k);
            }
            floor = floor.max(k + 1);
        }
        floor
    }
}

/// BLOC's dynamic capacity: each window's time-weighted load (its mean, plus some standard
/// deviations, times a headroom) becomes the next capacity; with a floor, never below the count
/// of requests the replica was seen to hold without queueing.
#[derive(Clone, Debug, PartialEq)]
pub struct DynamicCapacity {
    length: Duration,
    rule: Rule,
    /// `None` until the first observation.
    state: Option<State>,
    /// Whether the capacity follows the answers' floor ([`DynamicCapacity::with_floor`]).
    follow_answers: bool,
    /// The current window's answers, and the floor every earlier window's left.
    answers: Answers,
    floor: u32,
}

impl DynamicCapacity {
    /// A capacity recomputed every `window` (30 s in the paper) as the last window's average load,
    /// rounded up: the paper's rule.
    pub fn new(window: Duration) -> Self {
        let rule = Rule { headroom: 1.0, deviations: 0.0 };
        let length = window.max(Duration::from_nanos(1));
        DynamicCapacity { length, rule, state: None, follow_answers: false, answers: Answers::default(), floor: 1 }
    }

    /// The same, with a capacity of `headroom` × the last window's level of load.
    pub fn with_headroom(mut self, headroom: f64) -> Self {
        self.rule.headroom = headroom;
        self
    }

    /// The same, with the level of load taken as its mean plus `deviations` standard deviations
    /// (time-weighted, over the last window) instead of its mean.
    pub fn with_deviations(mut self, deviations: f64) -> Self {
        self.rule.deviations = deviations;
        self
    }

    /// The same, with (`true`) or without the floor: a capacity never below the count of
    /// requests the replica was last seen to hold without queueing, learnt from the answers
    /// (`Answers::floor_after`) of each window when it closes.
    pub fn with_floor(mut self, floor: bool) -> Self {
        self.follow_answers = floor;
        self
    }

    /// Whether the window the pending answers belong to has closed by `now`.
    fn window_closed(&self, now: Time) -> bool {
        self.state.is_some_and(|s| s.window.start.checked_add(self.length).is_some_and(|end| end <= now))
    }

    /// The floor in force at `now`.
    fn floor_at(&self, now: Time) -> u32 {
        match (self.follow_answers, self.window_closed(now)) {
            (false, _) => 1,
            (true, true) => self.answers.floor_after(self.floor),
            (true, false) => self.floor,
        }
    }

    /// Closes the windows that ended by `now`: their answers set the floor.
    fn roll(&mut self, now: Time) {
        if self.window_closed(now) {
            self.floor = self.floor_at(now);
            self.answers.clear();
        }
        if let Some(state) = self.state {
            self.state = Some(state.at(now, self.length, self.rule));
        }
    }
}

impl Admission for DynamicCapacity {
    fn admit(&mut self, now: Time, in_system: u32) -> bool {
        match self.capacity(now) {
            Some(cap) => in_system < cap,
            None => true,
        }
    }

    fn observe(&mut self, now: Time, in_system: u32) {
        self.roll(now);
        let mut state = self.state.unwrap_or(State { window: Window::starting(now, in_system), capacity: None });
        state.window.extend_to(now);
        state.window.load = in_system;
        self.state = Some(state);
    }

    fn answered(&mut self, now: Time, rif: u32, latency: Duration) {
        if self.follow_answers {
            self.roll(now);
            self.answers.record(rif, latency);
        }
    }

    fn capacity(&self, now: Time) -> Option<u32> {
        let learnt = self.state.and_then(|s| s.at(now, self.length, self.rule).capacity)?;
        Some(learnt.max(self.floor_at(now)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn admits_everything_during_the_first_window() {
        let mut a = DynamicCapacity::new(30 * SEC);
        // Before any observation there is no capacity.
        assert_eq!(a.capacity(Time::ZERO), None);
        assert!(a.admit(Time::ZERO, 1_000));
        // The first window starts at the first observation (t = 5 s) and lasts until 35 s.
        a.observe(5 * SEC, 1);
        a.observe(6 * SEC, 500);
        assert!(a.admit(34 * SEC, 10_000));
        assert_eq!(a.capacity(34 * SEC), None);
    }

    #[test]
    fn the_capacity_is_the_time_weighted_average_of_the_last_window() {
        let mut a = DynamicCapacity::new(10 * SEC);
        // Load 2 for 4 s, 10 for 1 s, 0 for 5 s: ∫ = 8 + 10 + 0 = 18 request·s over 10 s = 1.8.
        a.observe(Time::ZERO, 2);
        a.observe(4 * SEC, 10);
        a.observe(5 * SEC, 0);
        assert_eq!(a.capacity(9999 * MS), None);
        // Rounded up: 2.
        assert_eq!(a.capacity(10 * SEC), Some(2));
        // Holding 1 a request is admitted; holding 2 it is refused.
        assert!(a.admit(10 * SEC, 1));
        assert!(!a.admit(10 * SEC, 2));
        // Second window [10 s, 20 s): load 0 until 12 s, then 7 until 20 s: 56 / 10 = 5.6 → 6.
        a.observe(12 * SEC, 7);
        assert_eq!(a.capacity(19 * SEC), Some(2));
        assert_eq!(a.capacity(20 * SEC), Some(6));
    }

    #[test]
    fn a_window_with_no_change_averages_the_constant_load() {
        let mut a = DynamicCapacity::new(10 * SEC);
        // Load 3 from t = 0, then 5 from 8 s, then silence for a long time.
        a.observe(Time::ZERO, 3);
        a.observe(8 * SEC, 5);
        // [0, 10 s): 3·8 + 5·2 = 34 → 3.4 → 4.
        assert_eq!(a.capacity(15 * SEC), Some(4));
        // [10 s, 20 s) and later windows saw 5 throughout.
        assert_eq!(a.capacity(20 * SEC), Some(5));
        assert_eq!(a.capacity(1_000 * SEC), Some(5));
        // A change at 1000.5 s lands in the window [1000 s, 1010 s): load 5 for 0.5 s, 1 for 9.5 s,
        // 2.5 + 9.5 = 12 → 1.2 → 2.
        a.observe(1_000_500 * MS, 1);
        assert_eq!(a.capacity(1_009 * SEC), Some(5));
        assert_eq!(a.capacity(1_010 * SEC), Some(2));
        // Then the load 1 continues for whole windows.
        assert_eq!(a.capacity(1_020 * SEC), Some(1));
    }

    #[test]
    fn the_capacity_is_at_least_one() {
        let mut a = DynamicCapacity::new(10 * SEC);
        // An idle window averages 0, but a capacity of 0 would refuse every request from then on.
        a.observe(Time::ZERO, 0);
        assert_eq!(a.capacity(10 * SEC), Some(1));
        assert!(a.admit(10 * SEC, 0));
        assert!(!a.admit(10 * SEC, 1));
        // Even after many idle windows.
        assert_eq!(a.capacity(100 * SEC), Some(1));
    }

    #[test]
    fn observations_roll_the_windows_forward() {
        let mut a = DynamicCapacity::new(10 * SEC);
        a.observe(Time::ZERO, 4);
        // The next change arrives 25 s later, in the third window [20 s, 30 s).
        a.observe(25 * SEC, 0);
        let state = a.state.expect("observed");
        // Its window started at 20 s, and held 4 requests for 5 s of it.
        let (area, square_area) = (20 * SEC.as_nanos(), 80 * SEC.as_nanos());
        assert_eq!(state.window, Window { start: 20 * SEC, since: 25 * SEC, load: 0, area, square_area });
        assert_eq!(state.capacity, Some(4));
        // [20 s, 30 s): 4·5 + 0·5 = 20 → 2.
        assert_eq!(a.capacity(30 * SEC), Some(2));
    }

    #[test]
    fn headroom_scales_the_average() {
        let mut a = DynamicCapacity::new(10 * SEC).with_headroom(1.5);
        // Load 4 for the first window: 1.5 × 4 = 6.
        a.observe(Time::ZERO, 4);
        assert_eq!(a.capacity(10 * SEC), Some(6));
        // Load 3 for 5 s, then none: 1.5 × 1.5 = 2.25, rounded up to 3.
        a.observe(10 * SEC, 3);
        a.observe(15 * SEC, 0);
        assert_eq!(a.capacity(20 * SEC), Some(3));
        // Idle windows: still 1.
        assert_eq!(a.capacity(40 * SEC), Some(1));
    }

    /// A window of 10 s at loads 1, 2, 3, 4 and 0 for 2, 3, 3, 1 and 1 s: mean 21/10 = 2.1,
    /// mean square 57/10 = 5.7, variance 5.7 - 2.1² = 1.29.
    fn fluctuating(a: &mut DynamicCapacity) {
        for (at, load) in [(0, 1), (2, 2), (5, 3), (8, 4), (9, 0)] {
            a.observe(at * SEC, load);
        }
    }

    #[test]
    fn deviations_allow_for_the_spread_of_the_load() {
        // The mean alone, times 1.5: 3.15, rounded up to 4.
        let mut mean_only = DynamicCapacity::new(10 * SEC).with_headroom(1.5);
        fluctuating(&mut mean_only);
        assert_eq!(mean_only.capacity(10 * SEC), Some(4));
        // Mean plus 2.33 standard deviations, times 1.5: 1.5 × (2.1 + 2.33 × √1.29) = 7.12 → 8.
        let mut spread = DynamicCapacity::new(10 * SEC).with_headroom(1.5).with_deviations(2.33);
        fluctuating(&mut spread);
        assert_eq!(spread.capacity(10 * SEC), Some(8));
        // Without headroom: 2.1 + 2.65 = 4.75 → 5.
        let mut plain = DynamicCapacity::new(10 * SEC).with_deviations(2.33);
        fluctuating(&mut plain);
        assert_eq!(plain.capacity(10 * SEC), Some(5));
        // The next windows hold 0 throughout: no spread, and the capacity is 1.
        assert_eq!(spread.capacity(20 * SEC), Some(1));
    }

    #[test]
    fn a_constant_load_has_no_spread() {
        let mut a = DynamicCapacity::new(10 * SEC).with_headroom(1.5).with_deviations(2.33);
        a.observe(Time::ZERO, 4);
        assert_eq!(a.capacity(10 * SEC), Some(6));
        assert_eq!(a.capacity(100 * SEC), Some(6));
    }

    #[test]
    fn a_zero_window_is_one_nanosecond() {
        let mut a = DynamicCapacity::new(Duration::ZERO);
        a.observe(Time::ZERO, 3);
        assert_eq!(a.capacity(Time::ZERO), None);
        assert_eq!(a.capacity(Duration::from_nanos(1)), Some(3));
    }

    #[test]
    fn a_huge_window_never_ends() {
        let mut a = DynamicCapacity::new(Duration::MAX);
        a.observe(SEC, 3);
        assert_eq!(a.capacity(Duration::MAX), None);
        assert!(a.admit(Duration::MAX, u32::MAX));
    }

    /// Successful answers reported at `at` seconds: (requests held on arrival, latency in ms).
    fn answer(a: &mut DynamicCapacity, at: u32, answers: &[(u32, u32)]) {
        for &(rif, ms) in answers {
            a.answered(at * SEC, rif, ms * MS);
        }
    }

    #[test]
    fn the_floor_is_the_count_held_without_queueing() {
        // The paper's rule with the floor; an idle replica but for a few overlapping requests,
        // answered in about the same time whatever it held (a replica with no queue).
        let mut a = DynamicCapacity::new(10 * SEC).with_floor(true);
        a.observe(Time::ZERO, 0);
        // Base: 2 and 4 ms at an idle replica, mean 3 ms; holding 1, 2 and 4 others, means of
        // 4, 5.5 and 3 ms, all under 6 ms: nothing queued, and the replica held 5 at once.
        answer(&mut a, 1, &[(0, 2), (0, 4), (1, 4), (2, 5), (2, 6), (4, 3)]);
        assert_eq!(a.capacity(9999 * MS), None);
        // The load's own capacity would be 1 (an average of 0); the floor is 5.
        assert_eq!(a.capacity(10 * SEC), Some(5));
        assert!(a.admit(10 * SEC, 4));
        assert!(!a.admit(10 * SEC, 5));
        // Idle windows, and windows with no answer at an idle replica to compare with, show
        // nothing: the floor stands.
        answer(&mut a, 25, &[(1, 100)]);
        assert_eq!(a.capacity(100 * SEC), Some(5));
        // Without the floor, the same answers leave the paper's capacity of 1.
        let mut paper = DynamicCapacity::new(10 * SEC);
        paper.observe(Time::ZERO, 0);
        answer(&mut paper, 1, &[(0, 2), (0, 4), (1, 4), (2, 5), (2, 6), (4, 3)]);
        assert_eq!(paper.capacity(10 * SEC), Some(1));
    }

    #[test]
    fn answers_that_waited_twice_the_base_cap_the_floor() {
        let mut a = DynamicCapacity::new(10 * SEC).with_floor(true);
        a.observe(Time::ZERO, 0);
        // One worker of 10 ms: holding 1 other, a request waits what is left of its service
        // (here 5 ms on average: 15 ms, under twice the base); holding 2, a whole service more
        // (25 ms, over): the floor is 2, whatever the higher counts show.
        answer(&mut a, 1, &[(0, 10), (1, 12), (1, 18), (2, 25), (3, 11)]);
        assert_eq!(a.capacity(10 * SEC), Some(2));
        // The next window saw requests holding 1 other wait exactly one service (20 ms, twice
        // the base): that is queueing, and the floor falls to 1.
        answer(&mut a, 15, &[(0, 10), (1, 20)]);
        assert_eq!(a.capacity(19 * SEC), Some(2));
        assert_eq!(a.capacity(20 * SEC), Some(1));
        // A later window without queueing raises it again, to the count it saw.
        answer(&mut a, 25, &[(0, 10), (2, 19)]);
        assert_eq!(a.capacity(30 * SEC), Some(3));
    }

    #[test]
    fn the_capacity_is_the_larger_of_the_load_and_the_floor() {
        let mut a = DynamicCapacity::new(10 * SEC).with_headroom(1.5).with_floor(true);
        // Load 4 throughout: 1.5 × 4 = 6, over a floor of 3.
        a.observe(Time::ZERO, 4);
        answer(&mut a, 1, &[(0, 10), (2, 10)]);
        assert_eq!(a.capacity(10 * SEC), Some(6));
        // Counts beyond the ones tracked are ignored rather than stored.
        a.answered(11 * SEC, u32::MAX, MS);
        assert_eq!(a.answers.by_rif.len(), 0);
    }
}
