//! The calibrated hops (`network: {calibrated: FILE}`, crates/model/src/calibration.rs): the
//! round trip a call through the lab's sidecars and processes adds on the calibrated machine,
//! drawn for every attempt and charged on its way to the replica.
//!
//! A user request's attempt gets a draw of the run's sidecar's client hop, an attempt between
//! services one of its service hop, plus, at a service that works (a service time other than
//! none), a draw of the work's lateness, each taken at the rate of requests per second one replica of
//! the callee receives: the open loop's rate times the calls each user request makes to the
//! service, over its replicas (retries and hedges not counted). A closed loop's rate is not
//! known before the run; it takes the lowest measured rate.

use crate::SimError;
use rand::{Rng as _, SeedableRng};
use rand_pcg::Pcg64Mcg;
use std::time::Duration;
use tailguard_model::calibration::Hop;
use tailguard_model::{ModelError, Run};

/// The hops of each service's callers, and the stream they are drawn from.
pub(crate) struct Hops {
    /// Per service: a user request's hop, a call's hop between services, and its work's
    /// lateness if it works.
    by_service: Vec<(Hop, Hop, Option<Hop>)>,
    rng: Pcg64Mcg,
}

impl Hops {
    /// The hops of `run`'s calibration for its sidecar, if it names one; `seed` seeds their draws.
    pub(crate) fn new(run: &Run, seed: u64) -> Result<Option<Hops>, SimError> {
        let Some(calibration) = &run.calibration else { return Ok(None) };
        let sidecar = run.sidecar.name();
        let hops = calibration.sidecar(sidecar).ok_or_else(|| {
            let measured: Vec<&str> = calibration.sidecars.keys().map(String::as_str).collect();
            let message = format!(
                "the calibration has no hops of the `{sidecar}` sidecar (it measured: {}); run `tailguard lab calibrate` where it is installed",
                measured.join(", ")
            );
            ModelError::new(std::path::Path::new(run.network.calibrated.as_deref().unwrap_or("")), "network.calibrated", message)
        })?;
        let rates = replica_rates(run);
        let by_service = run
            .services
            .values()
            .zip(rates)
            .map(|(svc, rate)| {
                let [client, call, work] = hops.at_rate(rate);
                let works = svc.service_time != tailguard_model::Distribution::default();
                (client, call, works.then_some(work))
            })
            .collect();
        Ok(Some(Hops { by_service, rng: Pcg64Mcg::seed_from_u64(seed) }))
    }

    /// A draw of the round trip an attempt to `service` adds, its work's lateness included.
    pub(crate) fn draw(&mut self, service: usize, between_services: bool) -> Duration {
        let (client, call, work) = &self.by_service[service];
        let hop = if between_services { call } else { client };
        let late = work.as_ref().map_or(Duration::ZERO, |w| w.sample(self.rng.gen::<f64>()));
        hop.sample(self.rng.gen::<f64>()) + late
    }
}

/// Requests per second one replica of each service receives: the open loop's rate times the
/// calls a user request makes to it, over its replicas; 0 in a closed loop.
fn replica_rates(run: &Run) -> Vec<f64> {
    let names: Vec<&String> = run.services.keys().collect();
    let rate = run.workload.open.as_ref().map_or(0.0, |o| o.rate);
    let mut visits = vec![0.0; names.len()];
    let target = names.iter().position(|n| **n == run.workload.target).expect("a validated target");
    visits[target] = 1.0;
    // Calls form no cycle (validated): passing the visits down as many times as there are
    // services reaches every depth.
    for _ in 0..names.len() {
        let mut next = vec![0.0; names.len()];
        next[target] = 1.0;
        for (i, svc) in run.services.values().enumerate() {
            for call in &svc.calls {
                let callee = names.iter().position(|n| **n == call.service).expect("a validated callee");
                next[callee] += visits[i] * f64::from(call.count);
            }
        }
        visits = next;
    }
    run.services.values().zip(visits).map(|(svc, v)| rate * v / f64::from(svc.replicas)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailguard_model::Experiment;

    #[test]
    fn each_replica_s_rate_follows_the_calls_down_the_tree() {
        let text = "name: t\nservices:\n  gateway:\n    calls: [{service: front}]\n  front:\n    replicas: 2\n    calls: [{service: back, count: 3}]\n  back:\n    replicas: 4\nworkload: {target: gateway, open: {rate: 100}, duration: 1s}\nvariants: [{name: v}]\n";
        let run =
            Experiment::parse(text, std::path::Path::new("t.yaml")).unwrap().resolve("default", "v", false).unwrap();
        assert_eq!(replica_rates(&run), [100.0, 50.0, 75.0]);
    }
}
