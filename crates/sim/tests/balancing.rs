//! examples/balancing.yaml (issue 19): the balancers under open and closed loop, unlike backends,
//! a gray failure, a lost replica and a fast-erroring one.

use crate::common::{self, get, one_caller, simulate_text};
use tailguard_sim::{simulate, Options, Results, RunResult};

/// examples/balancing.yaml, or the example `BALANCING_FILE` names (to try a variant of it).
fn example() -> tailguard_model::Experiment {
    common::example(&std::env::var("BALANCING_FILE").unwrap_or_else(|_| "balancing.yaml".into()))
}

fn run(seed: u64, quick: bool) -> Results {
    simulate(&example(), Options { seed, quick, threads: 2, ..Options::default() }, |_| {})
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Seeds the defaults were not chosen on (latency_factor, the dynamic headroom, prequal's
/// `probe_wait` and ageing, and the scenarios were looked at on seeds 1-3 and the file's 19).
const HELD_OUT: [u64; 2] = [4, 5];

/// The recommendation (docs/policies.md): prequal with outlier ejection.
const RECOMMENDED: &str = "prequal-eject";

/// The open-loop scenarios and the most p99 the recommendation may have over the oracle's in each,
/// as issue 19 asks: 1.5 × up to 70 % load, 2 × at 95 %. On the held-out seeds it reaches 1.38,
/// 1.33 and 1.15 × (docs/policies.md, "A caller that sends little").
const OPEN_LOOP_BOUNDS: [(&str, f64); 3] = [("open-50", 1.5), ("open-70", 1.5), ("open-95", 2.0)];

fn show(r: &RunResult) -> String {
    format!(
        "{}/{}: p99 {} ms, p99.9 {} ms, success {}",
        r.scenario, r.variant, r.latency_ms.p99, r.latency_ms.p999, r.success_rate
    )
}

#[test]
fn the_recommendation_keeps_99_percent_everywhere_and_stays_near_the_oracle_in_open_loop() {
    for seed in HELD_OUT {
        let results = run(seed, false);
        for r in results.runs.iter().filter(|r| r.variant == RECOMMENDED) {
            assert!(r.success_rate >= 0.99, "seed {seed}: {}", show(r));
        }
        for (scenario, bound) in OPEN_LOOP_BOUNDS {
            let (ours, oracle) = (get(&results, scenario, RECOMMENDED), get(&results, scenario, "oracle"));
            let context = format!("seed {seed}: {} vs {}", show(ours), show(oracle));
            assert!(ours.latency_ms.p99 <= bound * oracle.latency_ms.p99, "{context}");
        }
    }
}

#[test]
fn ejection_keeps_99_5_percent_with_a_fast_erroring_replica_for_every_balancer() {
    for seed in HELD_OUT {
        let results = run(seed, false);
        for r in results.runs.iter().filter(|r| r.scenario == "fast-error" && r.variant.ends_with("-eject")) {
            assert!(r.success_rate >= 0.995, "seed {seed}: {}", show(r));
        }
    }
}

#[test]
fn a_fixed_capacity_refuses_the_clients_a_lost_replica_held_and_a_learnt_one_does_not() {
    let results = run(HELD_OUT[0], false);
    let (fixed, learnt) = (get(&results, "lost-closed", "bloc-fixed"), get(&results, "lost-closed", "bloc"));
    // 100 clients, 9 backends of capacity 10: the ten left over are refused at once, request after
    // request, so most requests fail; 1.5 × the learnt average holds them all.
    assert!(fixed.success_rate < 0.1, "{}", show(fixed));
    assert!(learnt.success_rate >= 0.999, "{}", show(learnt));
    // Healthy, the fixed capacity of 10 is exact for 100 clients on 10 backends: the oracle's p99.
    let (fixed, oracle) = (get(&results, "closed", "bloc-fixed"), get(&results, "closed", "oracle"));
    assert!(fixed.latency_ms.p99 <= 1.05 * oracle.latency_ms.p99, "{} vs {}", show(fixed), show(oracle));
}

#[test]
fn latency_ejection_takes_a_gray_replica_out() {
    let results = run(HELD_OUT[1], false);
    for balancer in ["round-robin", "least-request", "bloc"] {
        let (without, with) = (get(&results, "gray", balancer), get(&results, "gray", &format!("{balancer}-eject")));
        let context = format!("{} vs {}", show(without), show(with));
        assert!(with.latency_ms.p99 <= 0.5 * without.latency_ms.p99, "{context}");
        // The results count the ejections: the gray replica's, and none where only failures
        // eject (it fails nothing).
        assert!(with.ejections.is_some_and(|n| n > 0), "{context}: {:?}", with.ejections);
        assert_eq!(without.ejections, Some(0), "{context}");
    }
}

/// A caller alone in front of a few replicas near their capacity (issue #32's first rule: a
/// learned number fails no request). Latency ejection took the busiest replica out, its load
/// queued at the others, and their slow answers took the next out: three replicas of four
/// workers at 90 % lost 10-12 % of the requests to the deadline, p99 17-19 x without ejection.
/// An endpoint out for latency now takes the overflow once the others hold more than it did, and
/// keeps its evidence only for an ejection that happens. Seeds 3-4 were not looked at while it
/// was designed (1-2 were): no request lost, p99 within 1.01-1.54 x.
#[test]
fn latency_ejection_takes_no_capacity_from_a_lone_caller_near_capacity() {
    let text = one_caller("lone-caller", 3, 4, 540)
        + r#"
variants:
  - name: least-request
    edges: { workload->client: { deadline: 2s }, client->app: { balancer: { kind: least-request } } }
  - name: least-request-eject
    edges: { workload->client: { deadline: 2s }, client->app: { balancer: { kind: least-request }, outlier: {} } }
  - name: peak-ewma
    edges: { workload->client: { deadline: 2s }, client->app: { balancer: { kind: peak-ewma } } }
  - name: peak-ewma-eject
    edges: { workload->client: { deadline: 2s }, client->app: { balancer: { kind: peak-ewma }, outlier: {} } }
  - name: prequal
    edges: { workload->client: { deadline: 2s }, client->app: { balancer: { kind: prequal } } }
  - name: prequal-eject
    edges: { workload->client: { deadline: 2s }, client->app: { balancer: { kind: prequal }, outlier: {} } }
  - name: recommended
    edges:
      workload->client: { deadline: 2s }
      client->app: { balancer: { kind: prequal }, outlier: {}, timeout: { kind: adaptive }, hedge: { kind: adaptive }, retry: { max_attempts: 2 } }
scenarios:
  - name: three-90
  - name: five-80
    set: { workload.open.rate: 800, services.app.replicas: 5 }
  - name: five-90
    set: { workload.open.rate: 900, services.app.replicas: 5 }
  - name: five-one-worker-90
    set: { workload.open.rate: 225, services.app.replicas: 5, services.app.workers: 1 }"#;
    for seed in [3, 4] {
        let results = simulate_text(&text, "lone-caller.yaml", seed);
        for with in results.runs.iter().filter(|r| r.variant.ends_with("-eject")) {
            let without = get(&results, &with.scenario, with.variant.trim_end_matches("-eject"));
            let context = format!("seed {seed}: {} vs {}", show(with), show(without));
            assert!(with.success_rate >= without.success_rate - 0.001, "{context}");
            assert!(with.latency_ms.p99 <= 2.0 * without.latency_ms.p99, "{context}");
        }
        // The recommended policy (docs/policies.md) lost 2-12 % of the requests here, p99 at the
        // deadline; now none, p99 0.73-1.27 x least-request's.
        for scenario in ["three-90", "five-80", "five-90", "five-one-worker-90"] {
            let (ours, plain) = (get(&results, scenario, "recommended"), get(&results, scenario, "least-request"));
            let context = format!("seed {seed}: {} vs {}", show(ours), show(plain));
            assert!(ours.success_rate >= plain.success_rate - 0.001, "{context}");
            assert!(ours.latency_ms.p99 <= 1.5 * plain.latency_ms.p99, "{context}");
        }
    }
}

/// Prints every run's p99, p99.9 and success (`BALANCING_SEEDS=1,2,3 cargo test --profile test-release
/// -p tailguard-sim --test sim -- balancing:: --ignored --nocapture`).
#[test]
#[ignore]
fn explore() {
    let seeds = std::env::var("BALANCING_SEEDS").unwrap_or_else(|_| "19".into());
    let quick = std::env::var("BALANCING_FULL").is_err();
    for seed in seeds.split(',').map(|s| s.parse::<u64>().expect("a seed")) {
        let results = run(seed, quick);
        let mut scenario = String::new();
        for r in &results.runs {
            if r.scenario != scenario {
                scenario = r.scenario.clone();
                println!("== seed {seed} {scenario}");
            }
            let oracle = results.runs.iter().find(|o| o.scenario == r.scenario && o.variant == "oracle");
            let ratio = oracle.map_or(f64::NAN, |o| r.latency_ms.p99 / o.latency_ms.p99);
            println!(
                "  {:22} p99 {:9.1} p999 {:9.1} success {:7.3} % x{:.2}",
                r.variant,
                r.latency_ms.p99,
                r.latency_ms.p999,
                100.0 * r.success_rate,
                ratio
            );
        }
    }
}
