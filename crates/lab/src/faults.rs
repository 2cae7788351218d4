//! How the lab realises each replica's faults: every one by `tailguard serve` itself, from the
//! very model the simulator runs (tailguard_model::replica), timed from the start of the load
//! (the lab restarts each serve's clock with SIGUSR1 as the load begins). No fault needs the lab
//! to stop or kill a process: a `hang` is serve holding work and answers to the window's end on
//! the run's clock while its sidecar keeps admitting, as the simulator has it; SIGSTOP would need
//! the lab to time the signals and would silence serve's `/healthz` (docs/lab.md, Faults).

use crate::plan::Plan;
use tailguard_model::schema::{Fault, FaultKind};
use tailguard_model::{Kind, Run};

/// One line per fault of every replica that has any: `backend-2: hang from 10s until 20s: serve
/// holds…`.
pub fn realisations(run: &Run, plan: &Plan) -> Vec<String> {
    let mut lines = Vec::new();
    for replica in &plan.replicas {
        let service = &run.services[&replica.service];
        if service.kind != Kind::Synthetic {
            continue;
        }
        let effective = service.for_replica(replica.index);
        for fault in effective.faults.iter().filter(|f| f.applies_to(replica.index)) {
            lines.push(format!("{}: {fault}: {}", replica.name(), how(fault)));
        }
    }
    lines
}

/// What serve does for the fault.
fn how(fault: &Fault) -> &'static str {
    match &fault.kind {
        FaultKind::Slow { .. } => "serve lengthens the work of the requests it picks",
        FaultKind::Error { after: None, .. } => "serve answers 500 after the local work",
        FaultKind::Error { after: Some(_), .. } => "serve answers 500 that long after arrival, without a worker",
        FaultKind::Lost { .. } => "serve holds the connection and never answers",
        FaultKind::Hang {} => {
            "serve holds the start and end of work and every answer until the window ends (its sidecar still admits)"
        }
        FaultKind::Down {} => "serve answers 503 at once, /healthz included",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Isolation;
    use std::path::Path;
    use tailguard_model::Experiment;

    #[test]
    fn each_replica_names_its_faults_and_how_they_are_realised() {
        let text = "name: t\nservices:\n  back:\n    replicas: 3\n    faults: [{kind: down, replica: 0, from: 1s, to: 2s}]\n    groups:\n      bad: {replicas: \"1-2\", faults: [{kind: hang, from: 10s, until: 20s}, {kind: error, after: 0s, replica: 2}]}\nworkload: {target: back, open: {rate: 10}, duration: 1s}\nvariants: [{name: v}]\n";
        let run = Experiment::parse(text, Path::new("t.yaml")).unwrap().resolve("default", "v", false).unwrap();
        let plan = Plan::new(&run, Isolation::Loopback, 7);
        assert_eq!(
            realisations(&run, &plan),
            [
                "back-0: down on replica 0 from 1s until 2s: serve answers 503 at once, /healthz included",
                "back-1: hang from 10s until 20s: serve holds the start and end of work and every answer until the window ends (its sidecar still admits)",
                "back-2: hang from 10s until 20s: serve holds the start and end of work and every answer until the window ends (its sidecar still admits)",
                "back-2: error (rate 1, after 0s) on replica 2 for the whole run: serve answers 500 that long after arrival, without a worker",
            ]
        );
    }
}
