//! The contract every [`Balancer`] keeps, checked over all of them with the same scripts
//! (like Optuna's shared sampler tests): picks are in range, tried endpoints are avoided while
//! another is available, the same seed gives the same picks, and stray feedback never drives an
//! in-flight count below zero.

use super::*;
use crate::{Outcome, Time};
use rand::{Rng as _, SeedableRng};
use rand_pcg::Pcg64Mcg;
use std::time::Duration;

/// One balancer under test.
struct Subject {
    name: &'static str,
    make: fn(usize) -> Box<dyn Balancer>,
    /// Whether it always picks when it has endpoints (BLOC may drop a request instead).
    always_picks: bool,
    /// Whether it prefers the endpoint with fewer of this caller's attempts in flight, all else equal.
    load_aware: bool,
}

fn subjects() -> Vec<Subject> {
    vec![
        Subject { name: "random", make: |n| Box::new(RandomBalancer::new(n)), always_picks: true, load_aware: false },
        Subject { name: "round-robin", make: |n| Box::new(RoundRobin::new(n)), always_picks: true, load_aware: false },
        Subject {
            name: "least-request",
            make: |n| Box::new(LeastRequest::new(n)),
            always_picks: true,
            load_aware: true,
        },
        Subject {
            name: "least-connections",
            make: |n| Box::new(LeastConnections::new(n)),
            always_picks: true,
            load_aware: true,
        },
        Subject {
            name: "peak-ewma",
            make: |n| Box::new(PeakEwma::new(n, PeakEwmaConfig::default())),
            always_picks: true,
            load_aware: true,
        },
        Subject { name: "oracle", make: |n| Box::new(Oracle::new(n)), always_picks: true, load_aware: true },
        Subject {
            name: "prequal",
            make: |n| Box::new(Prequal::new(n, PrequalConfig::default())),
            always_picks: true,
            load_aware: false,
        },
        Subject {
            name: "bloc",
            make: |n| Box::new(Bloc::new(n, BlocConfig::default())),
            always_picks: false,
            load_aware: true,
        },
    ]
}

const OUTCOMES: [Outcome; 6] =
    [Outcome::Success, Outcome::Rejected, Outcome::Error, Outcome::Unavailable, Outcome::TimedOut, Outcome::Cancelled];

fn pick(b: &mut dyn Balancer, rng: &mut Pcg64Mcg, now: Time, exclude: &[EndpointId]) -> Option<EndpointId> {
    b.pick(&mut Pick { now, rng, exclude, true_loads: None })
}

/// Twenty answered attempts, each with a chip, to every endpoint: every balancer has seen every
/// endpoint answer, and BLOC holds twenty chips for each.
fn warm_up(b: &mut dyn Balancer, endpoints: usize) {
    for e in 0..endpoints {
        for _ in 0..20 {
            b.on_send(e, Time::ZERO);
            b.on_feedback(e, Time::ZERO, &Feedback::success(Duration::from_millis(1)).with_chip(true));
        }
    }
}

/// A random script of picks, sends and ends of every outcome, with random exclusions and (half the
/// time) true loads; returns the picks. Checks on the way that every pick is in range, and that
/// balancers that always pick do pick, avoiding the excluded endpoints while any other exists.
fn run_script(s: &Subject, seed: u64) -> Vec<Option<EndpointId>> {
    const N: usize = 5;
    let mut b = (s.make)(N);
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    let mut live: Vec<EndpointId> = Vec::new();
    let mut picks = Vec::new();
    for step in 0..2000u64 {
        let now = Duration::from_millis(step * 7);
        let exclude: Vec<EndpointId> = (0..N).filter(|_| rng.gen_bool(0.3)).collect();
        let loads: Vec<u32> = (0..N).map(|_| rng.gen_range(0..10)).collect();
        let index = rng.gen_bool(0.5).then(|| LoadIndex::from_loads(&loads));
        let true_loads = index.as_ref();
        let chosen = b.pick(&mut Pick { now, rng: &mut rng, exclude: &exclude, true_loads });
        picks.push(chosen);
        // Probes asked for are answered at once, with random loads.
        while let Some(e) = b.take_probe() {
            assert!(e < N, "{}: probed {e} of {N}", s.name);
            let reply =
                ProbeReply { in_flight: rng.gen_range(0..10), latency: Duration::from_millis(rng.gen_range(1..50)) };
            b.on_probe(e, now, LoadReport::Load(reply));
        }
        if let Some(e) = chosen {
            assert!(e < N, "{}: picked {e} of {N}", s.name);
            b.on_send(e, now);
            live.push(e);
        }
        if s.always_picks {
            let e = chosen.unwrap_or_else(|| panic!("{}: no pick at step {step}", s.name));
            assert!(exclude.len() == N || !exclude.contains(&e), "{}: picked excluded {e} of {exclude:?}", s.name);
        }
        while !live.is_empty() && rng.gen_bool(0.5) {
            let e = live.swap_remove(rng.gen_range(0..live.len()));
            let outcome = OUTCOMES[rng.gen_range(0..OUTCOMES.len())];
            let rtt = Duration::from_micros(rng.gen_range(100..50_000));
            b.on_feedback(e, now, &Feedback::new(outcome, rtt).with_chip(rng.gen_bool(0.7)));
        }
    }
    picks
}

#[test]
fn picks_are_in_range_and_avoid_excluded_endpoints_under_a_random_script() {
    for s in subjects() {
        let picks = run_script(&s, 1);
        // BLOC drops most requests here (a third of all ends are refusals, each backing an endpoint
        // off for 1 s, while a step lasts 7 ms, and only successes earn chips), but the script
        // still exercises its picks.
        let picked = picks.iter().flatten().count();
        assert!(picked >= 50, "{}: picked only {picked} of {}", s.name, picks.len());
    }
}

#[test]
fn the_same_seed_gives_the_same_picks() {
    for s in subjects() {
        assert_eq!(run_script(&s, 42), run_script(&s, 42), "{}", s.name);
    }
}

#[test]
fn no_endpoints_means_no_pick() {
    for s in subjects() {
        let mut b = (s.make)(0);
        let mut rng = Pcg64Mcg::seed_from_u64(0);
        assert_eq!(pick(&mut *b, &mut rng, Time::ZERO, &[]), None, "{}", s.name);
    }
}

#[test]
fn excluded_endpoints_are_avoided_when_another_is_available() {
    const N: usize = 5;
    for s in subjects() {
        let mut b = (s.make)(N);
        let mut rng = Pcg64Mcg::seed_from_u64(3);
        warm_up(&mut *b, N);
        // Every exclusion set but the full one: each pick lands outside it.
        for mask in 0..(1u32 << N) - 1 {
            let exclude: Vec<EndpointId> = (0..N).filter(|e| mask & (1 << e) != 0).collect();
            for _ in 0..3 {
                let e = pick(&mut *b, &mut rng, Time::ZERO, &exclude).unwrap_or_else(|| panic!("{}: no pick", s.name));
                assert!(!exclude.contains(&e), "{}: picked excluded {e} of {exclude:?}", s.name);
                b.on_send(e, Time::ZERO);
                b.on_feedback(e, Time::ZERO, &Feedback::success(Duration::from_millis(1)).with_chip(true));
            }
        }
        // All excluded: still a pick, in range.
        let all: Vec<EndpointId> = (0..N).collect();
        let e = pick(&mut *b, &mut rng, Time::ZERO, &all);
        assert!(e.is_some_and(|e| e < N), "{}: {e:?}", s.name);
    }
}

#[test]
fn stray_feedback_never_drives_in_flight_counts_below_zero() {
    for s in subjects() {
        let mut b = (s.make)(2);
        let mut rng = Pcg64Mcg::seed_from_u64(5);
        warm_up(&mut *b, 2);
        // Three ends of attempts endpoint 0 never had in flight.
        for _ in 0..3 {
            b.on_feedback(0, Time::ZERO, &Feedback::new(Outcome::Cancelled, Duration::ZERO));
        }
        // One attempt really in flight to 0, none to 1.
        b.on_send(0, Time::ZERO);
        for _ in 0..10 {
            let e = pick(&mut *b, &mut rng, Time::ZERO, &[]);
            if s.load_aware {
                // Had the stray ends counted below zero, 0 would look idle or even less than idle.
                assert_eq!(e, Some(1), "{}", s.name);
            } else {
                assert!(e.is_some_and(|e| e < 2), "{}: {e:?}", s.name);
            }
        }
    }
}

#[test]
fn a_grown_balancer_picks_new_endpoints_and_keeps_the_old_ones_state() {
    for s in subjects() {
        let mut b = (s.make)(2);
        let mut rng = Pcg64Mcg::seed_from_u64(7);
        warm_up(&mut *b, 2);
        // Attempts in flight to 0, none to 1; then two endpoints join.
        (0..3).for_each(|_| b.on_send(0, Time::ZERO));
        b.grow(4);
        b.grow(3); // never shrinks
        for _ in 0..10 {
            // The old endpoints alone: a load-aware balancer still knows 0 is busy.
            let e = pick(&mut *b, &mut rng, Time::ZERO, &[2, 3]);
            assert!(e.is_some_and(|e| e < 2), "{}: {e:?}", s.name);
            if s.load_aware {
                assert_eq!(e, Some(1), "{}", s.name);
            }
            // The old ones excluded: a new one is picked (BLOC probes it).
            let e = pick(&mut *b, &mut rng, Time::ZERO, &[0, 1]);
            assert!(e.is_some_and(|e| e == 2 || e == 3), "{}: {e:?}", s.name);
            let e = e.expect("picked");
            b.on_send(e, Time::ZERO);
            b.on_feedback(e, Time::ZERO, &Feedback::success(Duration::from_millis(1)).with_chip(true));
        }
    }
}
