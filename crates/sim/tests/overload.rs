//! Overload (examples/overload.yaml): adaptive admission at the backends refuses the excess at
//! once, so the requests admitted wait about one service instead of until the users' deadline,
//! and goodput holds near capacity. Its constants were chosen on principle and looked at on
//! seeds 1–2; the checks run seeds 101–102.

use crate::common::{example, get, one_caller, simulate_text};
use tailguard_sim::{simulate, Options, RunResult};

/// The seeds the checks assert on.
const CHECKED: [u64; 2] = [101, 102];

/// The backends' capacity: 10 of one worker at 250 ms.
const CAPACITY: f64 = 40.0;

#[test]
fn adaptive_admission_keeps_admitted_requests_fast_past_capacity_and_costs_nothing_below() {
    let experiment = example("overload.yaml");
    let variants = ["least-request", "least-request-adaptive"].map(String::from).to_vec();
    for seed in CHECKED {
        let options = Options { seed, threads: 2, variants: variants.clone(), ..Options::default() };
        let runs = simulate(&experiment, options, |_| {}).unwrap_or_else(|e| panic!("{e}"));
        let unloaded = &get(&runs, "10", "least-request").latency_ms;
        for scenario in ["150", "200"] {
            let (plain, adaptive) =
                (get(&runs, scenario, "least-request"), get(&runs, scenario, "least-request-adaptive"));
            let at = format!("seed {seed}, {scenario} %");
            // Without admission a third to a half of the requests wait out the 2 s deadline; with
            // it, a few (1.5–3.4 % as many on these seeds).
            assert!(
                adaptive.timed_out * 20 <= plain.timed_out,
                "{at}: {} vs {} timed out",
                adaptive.timed_out,
                plain.timed_out
            );
            // The successes' median: 1.6–1.8 s without admission; about twice the unloaded one with
            // (1.8–2.3 ×); their p99 below 1.25 × the unloaded p99 (0.97–1.18 ×).
            let (p50, p99) = (adaptive.latency_ms.p50, adaptive.latency_ms.p99);
            assert!(p50 <= 0.3 * plain.latency_ms.p50, "{at}: p50 {p50} vs {}", plain.latency_ms.p50);
            assert!(p50 <= 2.5 * unloaded.p50, "{at}: p50 {p50}, unloaded {}", unloaded.p50);
            assert!(p99 <= 1.25 * unloaded.p99, "{at}: p99 {p99}, unloaded {}", unloaded.p99);
            // Goodput stays near capacity (38.7–40.0 requests/s here).
            assert!(adaptive.throughput_rps >= 0.95 * CAPACITY, "{at}: goodput {}", adaptive.throughput_rps);
            // A backend's refusal reaches the user as a refusal (the frontends answer 429, which
            // the gateway passes on without retrying it), never as a failure.
            assert_eq!(adaptive.failed, 0, "{at}");
            // Answered at once: 3 ms here, hops and retries of the refusal included.
            let refused = adaptive.rejected_latency_ms.as_ref().unwrap_or_else(|| panic!("{at}: no refusal"));
            assert!(refused.max <= 5.0, "{at}: refusals took up to {} ms", refused.max);
        }
        // Half the load of low priority: the interactive half is served far more often than
        // without admission (93.1–93.4 % against 66–67 % on these seeds), the batch half gives way.
        let route = |r: &RunResult, name: &str| {
            r.routes.iter().find(|x| x.route == name).unwrap_or_else(|| panic!("no route {name}")).success_rate
        };
        let (plain, adaptive) =
            (get(&runs, "priorities", "least-request"), get(&runs, "priorities", "least-request-adaptive"));
        let (interactive, batch) = (route(adaptive, "interactive"), route(adaptive, "batch"));
        assert!(interactive >= 0.9, "seed {seed}: interactive success {interactive}");
        assert!(
            interactive >= route(plain, "interactive") + 0.2,
            "seed {seed}: interactive {interactive} vs {}",
            route(plain, "interactive")
        );
        assert!(batch < interactive - 0.5, "seed {seed}: batch {batch}, interactive {interactive}");
        // Below capacity no request that no admission serves is lost; at 90 % a busy replica
        // holding its limit without growing is not refused (0.5–1.0 points below no admission).
        let (plain, adaptive) = (get(&runs, "50", "least-request"), get(&runs, "50", "least-request-adaptive"));
        assert!(
            adaptive.success_rate >= plain.success_rate - 0.005,
            "seed {seed}, 50 %: success {} vs {}",
            adaptive.success_rate,
            plain.success_rate
        );
        let (plain, adaptive) = (get(&runs, "90", "least-request"), get(&runs, "90", "least-request-adaptive"));
        let at = format!("seed {seed}, 90 %");
        assert!(
            adaptive.success_rate >= plain.success_rate - 0.015,
            "{at}: {} vs {}",
            adaptive.success_rate,
            plain.success_rate
        );
        assert!(adaptive.latency_ms.p99 <= 1.05 * plain.latency_ms.p99, "{at}: p99 {:?}", adaptive.latency_ms);
    }
}

/// Issue #36's bounds for a service of a single replica, which no caller can retry a refusal
/// on, with adaptive admission at its ingress. Below capacity (50 % to 90 %, one worker or four,
/// exponential or constant service): success within 1 % of no admission's (all of it: the 2 s
/// deadline is 100 services). Before the fallback rule (2026-12-07) one worker of exponential
/// 20 ms was refused 1.0–1.1 % of its requests at 50 %, 8.4–10.1 % at 75 % and 13.7–16.5 % at
/// 90 % (docs/policies.md, "Below capacity, a service of one replica"). Past capacity (150 %,
/// 200 %), once the overload is beyond doubt: goodput at least 0.95 × no admission's, which
/// serves the capacity (0.97–1.00 × on these seeds, 0.95–1.04 × on seven held out), the
/// successes' median a tenth of no admission's or less (128–137 ms against 1.97 s for one
/// worker, 38–50 ms against 1.98 s for four), and few requests left to wait out the deadline.
/// On two held-out seeds (1 and 202) the overload at 150 % is not found beyond doubt, and those
/// runs are no admission's.
#[test]
fn a_lone_replica_is_refused_nothing_below_capacity_and_held_short_past_it() {
    let text = r#"
name: lone-replica
services:
  app:
    replicas: 1
    workers: 1
    service_time: { dist: exponential, mean: 20ms }
workload:
  target: app
  open: { rate: 25, arrival: poisson }
  warmup: 5s
  duration: 60s
variants:
  - name: none
    edges: { workload->app: { deadline: 2s } }
  - name: adaptive
    edges: { workload->app: { deadline: 2s } }
    admission: { app: { kind: adaptive } }
scenarios:
  - name: one-50
  - name: one-75
    set: { workload.open.rate: 37.5 }
  - name: one-90
    set: { workload.open.rate: 45 }
  - name: one-90-constant
    set: { workload.open.rate: 45, services.app.service_time: { dist: constant, value: 20ms } }
  - name: four-50
    set: { workload.open.rate: 100, services.app.workers: 4 }
  - name: four-75
    set: { workload.open.rate: 150, services.app.workers: 4 }
  - name: four-90
    set: { workload.open.rate: 180, services.app.workers: 4 }
  - name: four-90-constant
    set: { workload.open.rate: 180, services.app.workers: 4, services.app.service_time: { dist: constant, value: 20ms } }
  - name: one-150
    set: { workload.open.rate: 75 }
  - name: one-200
    set: { workload.open.rate: 100 }
  - name: four-150
    set: { workload.open.rate: 300, services.app.workers: 4 }
"#;
    for seed in CHECKED {
        let runs = simulate_text(text, "lone-replica.yaml", seed);
        for run in runs.runs.iter().filter(|r| r.variant == "adaptive") {
            let (at, none) = (format!("seed {seed}, {}", run.scenario), get(&runs, &run.scenario, "none"));
            if !run.scenario.ends_with("-150") && !run.scenario.ends_with("-200") {
                assert!(run.success_rate >= none.success_rate - 0.01, "{at}: {} refused", run.rejected);
                continue;
            }
            // No admission serves the capacity there (its work on a request given up is freed).
            let (goodput, plain) = (run.throughput_rps, none.throughput_rps);
            assert!(goodput >= 0.95 * plain, "{at}: goodput {goodput} against {plain}");
            let (p50, plain) = (run.latency_ms.p50, none.latency_ms.p50);
            assert!(p50 <= 0.1 * plain, "{at}: p50 {p50} ms against {plain}");
            assert!(run.timed_out * 20 <= none.timed_out, "{at}: {} vs {} timed out", run.timed_out, none.timed_out);
        }
    }
}

/// A pair of replicas with adaptive admission, behind a caller that retries a refusal on the
/// other one (least-request with two attempts, and the recommended policy), below capacity.
/// Each first attempt has a fallback, so its replica's limit applies; near capacity a pair stands
/// at its limits at once by chance, and the retry met the other limit. Before a request refused
/// elsewhere was held to the limit only in an overload beyond doubt, and before a refusal's
/// retry was promised only when the retry budget would pay for it (2026-12-07), these lost
/// 2.5-12.3 % of the requests that no admission serves (87.7-97.5 % success on these seeds, 100 %
/// without admission); now 0.2-3.7 % (3.8 % at most on seeds 5 and 6). Issue #36 asks for a
/// point at most: what remains are retries refused in a spell taken for an overload beyond
/// doubt, and first attempts whose refusal the budget no longer paid for by the time it came.
#[test]
fn a_pair_of_replicas_below_capacity_fails_few_requests_that_no_admission_serves() {
    let text = one_caller("pair", 2, 1, 75)
        + r#"
x-recommended: &recommended { balancer: { kind: prequal }, outlier: {}, timeout: { kind: adaptive }, hedge: { kind: adaptive }, retry: { max_attempts: 2 } }
variants:
  - name: least-request
    edges: { workload->client: { deadline: 2s }, client->app: { balancer: { kind: least-request }, retry: { max_attempts: 2 } } }
  - name: least-request-adaptive
    edges: { workload->client: { deadline: 2s }, client->app: { balancer: { kind: least-request }, retry: { max_attempts: 2 } } }
    admission: { app: { kind: adaptive } }
  - name: recommended
    edges: { workload->client: { deadline: 2s }, client->app: *recommended }
  - name: recommended-adaptive
    edges: { workload->client: { deadline: 2s }, client->app: *recommended }
    admission: { app: { kind: adaptive } }
scenarios:
  - name: one-75
  - name: one-90
    set: { workload.open.rate: 90 }
  - name: four-90
    set: { workload.open.rate: 360, services.app.workers: 4 }
"#;
    for seed in [3, 4] {
        let runs = simulate_text(&text, "pair.yaml", seed);
        for run in runs.runs.iter().filter(|r| r.variant.ends_with("-adaptive")) {
            let plain = get(&runs, &run.scenario, run.variant.trim_end_matches("-adaptive"));
            let at = format!("seed {seed}, {} / {}", run.scenario, run.variant);
            assert!(run.success_rate >= plain.success_rate - 0.04, "{at}: {} refused", run.rejected);
        }
    }
}

/// Adaptive admission on topologies none of its rules was made on (one caller or ten; three,
/// five or ten replicas of one or four workers; exponential, lognormal, bimodal service; one
/// replica twice as slow; 75-90 % of capacity, and 130 % and 150 %), behind least-request with
/// three attempts and behind the recommended policy. Below capacity, on these seeds (held out
/// from the two it was explored on), success is 96.7-100 % with least-request and 99.3-100 %
/// with the recommended policy (both 100 % without admission; issue #36 asks within a point:
/// not met with least-request's three attempts, whose retries are refused in turn, budget or
/// none); before the rules on refusals elsewhere (2026-12-07) the worst were 95.2 % and 95.7 %
/// (93.1 % and 95.1 % on the seeds explored), and 98.6 % with the recommended policy until its
/// races stopped counting towards an overload beyond doubt (on seeds 7-10, held out from that
/// change, its worst is 98.8 % before and after: the point is not met on every seed). Past
/// capacity the successes' p99 is 105-146 ms where no admission's is the 2 s deadline, and goodput 0.92-0.99 × no admission's. Before a
/// latency-ejected replica took the overflow while its peers refused (2026-12-07), the
/// recommended policy's at 130 % of three replicas was 0.80-0.84 ×: one of the three, taken out
/// for a moment, idled while the other two refused.
#[test]
fn adaptive_admission_on_topologies_it_was_not_made_on() {
    let text = one_caller("varied", 5, 4, 800)
        + r#"
x-rec: &rec { balancer: { kind: prequal }, outlier: {}, timeout: { kind: adaptive }, hedge: { kind: adaptive }, retry: { max_attempts: 2 } }
x-lr: &lr { balancer: { kind: least-request }, retry: { max_attempts: 3 } }
variants:
  - name: lr
    edges: { workload->client: { deadline: 2s }, client->app: *lr }
  - name: lr-ad
    edges: { workload->client: { deadline: 2s }, client->app: *lr }
    admission: { app: { kind: adaptive } }
  - name: rec
    edges: { workload->client: { deadline: 2s }, client->app: *rec }
  - name: rec-ad
    edges: { workload->client: { deadline: 2s }, client->app: *rec }
    admission: { app: { kind: adaptive } }
scenarios:
  - name: r3w4-exp-75
    set: { workload.open.rate: 450, services.app.replicas: 3 }
  - name: r3w1-logn-80
    set: { workload.open.rate: 100, services.app.replicas: 3, services.app.workers: 1, services.app.service_time: { dist: lognormal, median: 15ms, sigma: 0.8 } }
  - name: r5w4-bimodal-85
    set: { workload.open.rate: 850, services.app.service_time: { dist: bimodal, slow_fraction: 0.05, fast: { dist: exponential, mean: 10ms }, slow: { dist: constant, value: 210ms } } }
  - name: r10w1-exp-90
    set: { workload.open.rate: 450, services.app.replicas: 10, services.app.workers: 1 }
  - name: c10-r5w4-exp-90
    set: { workload.open.rate: 900, services.client.replicas: 10 }
  - name: c10-r10w1-logn-85
    set: { workload.open.rate: 425, services.client.replicas: 10, services.app.replicas: 10, services.app.workers: 1, services.app.service_time: { dist: lognormal, median: 15ms, sigma: 0.8 } }
  - name: r5w4-slowrep-80
    set: { workload.open.rate: 720, services.app.groups: { slow: { replicas: "0", service_time: { dist: exponential, mean: 40ms } } } }
  - name: r3w4-exp-130
    set: { workload.open.rate: 780, services.app.replicas: 3 }
  - name: c10-r5w4-exp-150
    set: { workload.open.rate: 1500, services.client.replicas: 10 }
"#;
    for seed in [3, 4] {
        let runs = simulate_text(&text, "varied.yaml", seed);
        for run in runs.runs.iter().filter(|r| r.variant.ends_with("-ad")) {
            let plain = get(&runs, &run.scenario, run.variant.trim_end_matches("-ad"));
            let at = format!("seed {seed}, {} / {}", run.scenario, run.variant);
            if run.scenario.ends_with("-130") || run.scenario.ends_with("-150") {
                let (p99, plain_p99) = (run.latency_ms.p99, plain.latency_ms.p99);
                assert!(p99 <= 0.1 * plain_p99, "{at}: p99 {p99} ms against {plain_p99}");
                let (goodput, plain) = (run.throughput_rps, plain.throughput_rps);
                assert!(goodput >= 0.9 * plain, "{at}: goodput {goodput} against {plain}");
                continue;
            }
            let allowed = if run.variant == "lr-ad" { 0.04 } else { 0.01 };
            assert!(run.success_rate >= plain.success_rate - allowed, "{at}: {} refused", run.rejected);
        }
    }
}

/// One caller in front of three replicas past capacity (130 % and 160 %), no admission, users
/// giving up after 2 s, every balancer with outlier ejection: Prequal (and the recommended policy)
/// keep least-request's goodput, the capacity. Before Prequal grew the shared estimate of RIFs
/// of 63 and more by the requests ahead (2026-12-07), a replica holding a thousand looked as quick
/// as one holding three hundred, the caller piled its requests on it, the outlier detector ejected
/// it, and it drained and idled: 486-525 answers a second against least-request's 594-608 on these
/// seeds (0.80-0.87 ×).
#[test]
fn past_capacity_a_lone_callers_prequal_keeps_least_requests_goodput() {
    let text = one_caller("lone-overload", 3, 4, 780)
        + r#"
variants:
  - name: least-request
    edges: { workload->client: { deadline: 2s }, client->app: { balancer: { kind: least-request }, outlier: {} } }
  - name: prequal
    edges: { workload->client: { deadline: 2s }, client->app: { balancer: { kind: prequal }, outlier: {} } }
  - name: recommended
    edges: { workload->client: { deadline: 2s }, client->app: { balancer: { kind: prequal }, outlier: {}, timeout: { kind: adaptive }, hedge: { kind: adaptive }, retry: { max_attempts: 2 } } }
scenarios:
  - name: "130"
  - name: "160"
    set: { workload.open.rate: 960 }
"#;
    for seed in [3, 4] {
        let runs = simulate_text(&text, "lone-overload.yaml", seed);
        for run in runs.runs.iter().filter(|r| r.variant != "least-request") {
            let plain = get(&runs, &run.scenario, "least-request").throughput_rps;
            let at = format!("seed {seed}, {} / {}", run.scenario, run.variant);
            assert!(run.throughput_rps >= 0.97 * plain, "{at}: goodput {} against {plain}", run.throughput_rps);
        }
    }
}
