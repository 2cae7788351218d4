//! Request classes: the requests of one route (`GET /search`, `/pkg.Service/Method`) take their
//! own time, so the learned models that judge latencies are kept per class. A caller's
//! [`ClientPolicy`](crate::call::ClientPolicy) towards an upstream holds one [`ClassPolicy`] per
//! class: its timeout policy, its hedge policy, its deadline, and the record of its races
//! ([`Races`]). The balancer, the retry budget and the outlier detector's failure counts stay per
//! upstream: endpoints and the load they carry are shared by every route.
//!
//! What a class is, is the driver's choice ([`ClassId`]): the simulator's route of the called
//! service, the proxy's route match or its automatic classes (docs/proxy.md). Class 0 holds the
//! requests of no known class (the pooled rest), and is the only one a policy without classes has.
//! A class's policy is built the first time a request of it starts, so an upstream that sees one
//! route holds one.
//!
//! Gateway API's HTTPRoute timeouts and Linkerd's per-route policy are the precedent for
//! per-route settings; keeping the learned state per route is ours.

use crate::hedge::HedgePolicy;
use crate::timeout::TimeoutPolicy;
use std::time::Duration;

/// A class of requests towards one upstream, as the driver numbers them: 0 is the pooled rest.
pub type ClassId = u16;

/// The class of requests that belong to no other: the rest, pooled.
pub const POOLED: ClassId = 0;

/// One class's settings and learned state.
pub struct ClassPolicy {
    /// Sets each attempt's timeout.
    pub timeout: Box<dyn TimeoutPolicy>,
    /// Sends speculative attempts, if any.
    pub hedge: Option<Box<dyn HedgePolicy>>,
    /// The longest a request may take in all, from its start (its deadline), if any.
    pub deadline: Option<Duration>,
    /// Whether an attempt whose timeout fired keeps running alongside its retry, the first
    /// success winning (Envoy's `hedge_on_per_try_timeout`; resolved from the retry policy and
    /// this class's timeout kind, [`crate::retry::RetryConfig::hedges_on_timeout`]).
    pub hedge_on_timeout: bool,
    /// Whether racing attempts win in this class.
    pub races: Races,
}

impl ClassPolicy {
    /// A class with `timeout`, no hedging, no deadline, timed-out attempts dropped.
    pub fn new(timeout: Box<dyn TimeoutPolicy>) -> ClassPolicy {
        ClassPolicy { timeout, hedge: None, deadline: None, hedge_on_timeout: false, races: Races::default() }
    }
}

/// Builds the policy of a class the first time one of its requests starts.
pub type MakeClass = Box<dyn Fn(ClassId) -> ClassPolicy + Send>;

/// The classes of one caller towards one upstream, built as their requests come.
pub struct Classes {
    built: Vec<Option<ClassPolicy>>,
    /// `None`: a single class, every request pooled.
    make: Option<MakeClass>,
}

impl Classes {
    /// Classes built by `make` (class 0 at once, the others when first asked for).
    pub fn new(make: MakeClass) -> Classes {
        Classes { built: vec![Some(make(POOLED))], make: Some(make) }
    }

    /// One class: every request uses `policy`, whatever class the driver names.
    pub fn single(policy: ClassPolicy) -> Classes {
        Classes { built: vec![Some(policy)], make: None }
    }

    /// The policy of `class` (built now if it is new; the pooled one with a single class).
    pub fn get(&mut self, class: ClassId) -> &mut ClassPolicy {
        let i = if self.make.is_some() { usize::from(class) } else { 0 };
        if i >= self.built.len() {
            self.built.resize_with(i + 1, || None);
        }
        let make = &self.make;
        self.built[i].get_or_insert_with(|| make.as_ref().expect("more than one class has a maker")(class))
    }

    /// The class every request of a single-class policy uses: class 0.
    pub fn pooled(&mut self) -> &mut ClassPolicy {
        self.get(POOLED)
    }

    /// The classes built so far, with their ids.
    pub fn iter(&self) -> impl Iterator<Item = (ClassId, &ClassPolicy)> {
        self.built.iter().enumerate().filter_map(|(i, c)| c.as_ref().map(|c| (i as ClassId, c)))
    }
}

/// Races recorded per class before the record may stop them: none of the last this many won.
pub const RACE_WINDOW: u32 = 32;

/// While a class's races do not win, one race in this many that a learned policy would start is
/// started anyway (a probe), so the record sees when they win again.
pub const RACE_PROBE_EVERY: u16 = 16;

/// Whether extra attempts that race a live one (hedges, and retries beside an attempt kept past
/// its timeout) win in a class: the outcomes of its last [`RACE_WINDOW`] racing requests. Where a
/// request's work belongs to the request (its route, its payload), a second attempt does the
/// same work later and cannot win; it only adds load. Once none of the last [`RACE_WINDOW`] races
/// was won, the races a *learned* policy starts (an adaptive or percentile hedge, a learned
/// timeout's retry) are refused but for one in [`RACE_PROBE_EVERY`]; one that wins opens the way
/// again. A user's own numbers (a fixed timeout, a speculative hedge) race as written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Races {
    /// The last races' outcomes, newest in bit 0 (1: won).
    record: u32,
    /// Races recorded, up to [`RACE_WINDOW`].
    count: u32,
    /// Races refused since the last probe.
    refused: u16,
}

impl Races {
    /// Whether races pay here: fewer than [`RACE_WINDOW`] recorded, or one of them won.
    pub fn pay(&self) -> bool {
        self.count < RACE_WINDOW || self.record != 0
    }

    /// Whether a race a learned policy starts may go out now: while races pay, or as a probe.
    pub fn allow(&mut self) -> bool {
        if self.pay() {
            return true;
        }
        self.refused += 1;
        if self.refused >= RACE_PROBE_EVERY {
            self.refused = 0;
            return true;
        }
        false
    }

    /// A request that raced ended: `won` when an attempt sent as a race answered first.
    pub fn record(&mut self, won: bool) {
        self.record = (self.record << 1) | u32::from(won);
        self.count = (self.count + 1).min(RACE_WINDOW);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeout::{Fixed, NoTimeout};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn races_pay_until_a_whole_window_lost_then_probe_and_a_win_reopens() {
        let mut races = Races::default();
        // Lost races, short of a window: still paying.
        for _ in 0..RACE_WINDOW - 1 {
            assert!(races.allow());
            races.record(false);
        }
        assert!(races.pay());
        races.record(false);
        assert!(!races.pay());
        // Refused, but for one probe in 16.
        let allowed: Vec<bool> = (0..32).map(|_| races.allow()).collect();
        assert_eq!(allowed.iter().filter(|&&a| a).count(), 2);
        assert!(allowed[15] && allowed[31]);
        // A probe that wins opens the way for a whole window.
        races.record(true);
        assert!(races.pay());
        for _ in 0..RACE_WINDOW - 1 {
            races.record(false);
        }
        assert!(races.pay(), "the win is still in the window");
        races.record(false);
        assert!(!races.pay());
    }

    #[test]
    fn classes_are_built_when_first_asked_for() {
        let made = Arc::new(AtomicUsize::new(0));
        let counter = made.clone();
        let mut classes = Classes::new(Box::new(move |class| {
            counter.fetch_add(1, Ordering::Relaxed);
            ClassPolicy::new(Box::new(Fixed::new(Duration::from_millis(10 * u64::from(class) + 10))))
        }));
        assert_eq!(made.load(Ordering::Relaxed), 1);
        let timeout = |classes: &mut Classes, class| classes.get(class).timeout.current();
        assert_eq!(timeout(&mut classes, 3), Some(Duration::from_millis(40)));
        assert_eq!(timeout(&mut classes, 3), Some(Duration::from_millis(40)));
        assert_eq!(made.load(Ordering::Relaxed), 2);
        assert_eq!(classes.iter().map(|(id, _)| id).collect::<Vec<_>>(), vec![0, 3]);
        // A single class serves every id.
        let mut single = Classes::single(ClassPolicy::new(Box::new(NoTimeout)));
        assert_eq!(timeout(&mut single, 7), None);
        assert_eq!(single.iter().count(), 1);
    }
}
