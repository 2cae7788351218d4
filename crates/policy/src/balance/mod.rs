//! Load balancers: which endpoint receives the next attempt of a request.
//!
//! A [`Balancer`] lives in one caller (one sidecar, one simulated client replica) and sees only what
//! that caller sees, except the [`Oracle`], which the simulator hands the true queue lengths.

mod bloc;
#[cfg(test)]
mod contract_tests;
mod least_connections;
mod least_request;
mod loads;
mod oracle;
mod outlier;
mod peak_ewma;
mod prequal;
mod random;
mod ranked;
mod round_robin;

pub use bloc::{Bloc, BlocConfig};
pub use least_connections::LeastConnections;
pub use least_request::LeastRequest;
pub use loads::LoadIndex;
pub use oracle::Oracle;
pub use outlier::{Ejection, Outlier, OutlierConfig, OutlierSetting, Reason as EjectionReason};
pub use peak_ewma::{PeakEwma, PeakEwmaConfig};
pub use prequal::{Prequal, PrequalConfig, ProbeReply, ProbeResponder};
pub use random::RandomBalancer;
pub use round_robin::RoundRobin;

use crate::config::Check;
use crate::{EndpointId, Feedback, LoadReport, Rng, Time};
use ranked::{sorted_exclusions, Skipping};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A balancer and its parameters, as experiment and proxy files write it (`kind:`,
/// docs/policies.md); [`BalancerConfig::build`] makes the balancer.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum BalancerConfig {
    /// Uniformly at random.
    Random,
    /// In turn.
    #[default]
    RoundRobin,
    /// P2C on this caller's in-flight requests (Envoy's default).
    LeastRequest,
    /// The fewest of this caller's in-flight requests of all endpoints, ties in turn (HAProxy's
    /// `leastconn`, nginx's `least_conn`).
    LeastConnections,
    /// P2C on RTT × (pending + 1) (Linkerd's default).
    PeakEwma(PeakEwmaConfig),
    /// BLOC confidence chips (bloc-load-balancing.txt §IV).
    Bloc(BlocConfig),
    /// Prequal: probes for requests in flight and latency, hot-cold lexicographic choice (NSDI 2024).
    Prequal(PrequalConfig),
    /// Join-shortest-queue on true queue lengths (simulator only).
    Oracle,
}

impl BalancerConfig {
    /// Checks the parameters; the error names the field.
    pub fn validate(&self) -> Check {
        match self {
            BalancerConfig::PeakEwma(c) => c.validate(),
            BalancerConfig::Bloc(c) => c.validate(),
            BalancerConfig::Prequal(c) => c.validate(),
            _ => Ok(()),
        }
    }

    /// A balancer over endpoints `0..endpoints`.
    pub fn build(&self, endpoints: usize) -> Box<dyn Balancer> {
        match self {
            BalancerConfig::Random => Box::new(RandomBalancer::new(endpoints)),
            BalancerConfig::RoundRobin => Box::new(RoundRobin::new(endpoints)),
            BalancerConfig::LeastRequest => Box::new(LeastRequest::new(endpoints)),
            BalancerConfig::LeastConnections => Box::new(LeastConnections::new(endpoints)),
            BalancerConfig::PeakEwma(c) => Box::new(PeakEwma::new(endpoints, *c)),
            BalancerConfig::Bloc(c) => Box::new(Bloc::new(endpoints, *c)),
            BalancerConfig::Prequal(c) => Box::new(Prequal::new(endpoints, *c)),
            BalancerConfig::Oracle => Box::new(Oracle::new(endpoints)),
        }
    }
}

/// What a balancer is given to choose an endpoint for one attempt.
pub struct Pick<'a> {
    /// The current time.
    pub now: Time,
    /// The random source.
    pub rng: Rng<'a>,
    /// Endpoints this request already tried; avoid them when another is eligible.
    pub exclude: &'a [EndpointId],
    /// The true number of requests at each endpoint, known only to the simulator (for [`Oracle`]).
    pub true_loads: Option<&'a LoadIndex>,
}

/// Chooses the endpoint for each attempt and learns from each attempt's outcome.
pub trait Balancer: Send {
    /// The endpoint for the next attempt, or `None` to drop the request (nothing is eligible).
    fn pick(&mut self, pick: &mut Pick<'_>) -> Option<EndpointId>;

    /// An attempt was sent to `endpoint`.
    fn on_send(&mut self, endpoint: EndpointId, now: Time);

    /// An attempt sent to `endpoint` ended (any outcome, including timeouts and cancellations).
    fn on_feedback(&mut self, endpoint: EndpointId, now: Time, feedback: &Feedback);

    /// Makes room for endpoints up to `endpoints` (at least as many as before): the new ones start
    /// as a new balancer's would, and the others keep their ids and state (endpoint discovery,
    /// where endpoints come and go while attempts are in flight; see
    /// [`ClientPolicy::retire`](crate::call::ClientPolicy::retire) for taking one out).
    fn grow(&mut self, endpoints: usize);

    /// An endpoint the last pick wants probed ([`Prequal`]); the driver takes them until `None`,
    /// sends each probe asynchronously and hands the reply to [`Balancer::on_probe`].
    fn take_probe(&mut self) -> Option<EndpointId> {
        None
    }

    /// Before a pick: whether it should wait for probes first ([`Prequal`] whose pool holds no
    /// usable reply for a request that avoids `exclude`). If so, it returns how long the pick may
    /// wait, having queued the probes ([`Balancer::take_probe`]); the call sends them, waits until
    /// each has answered or failed ([`Call::on_probe_done`](crate::call::Call::on_probe_done)) or
    /// the time is up, and then picks.
    fn probe_before_pick(&mut self, _now: Time, _rng: Rng<'_>, _exclude: &[EndpointId]) -> Option<Duration> {
        None
    }

    /// A probe of `endpoint` was answered: with a probe reply ([`LoadReport::Load`]), or with
    /// anything else ([`LoadReport::Missing`]: no sidecar answers probes there). A probe that
    /// got no answer at all is not reported.
    fn on_probe(&mut self, _endpoint: EndpointId, _now: Time, _report: LoadReport) {}

    /// Whether it sends probes ([`Balancer::take_probe`], [`Prequal`]): a simulator keeps its
    /// replicas' [`ProbeResponder`] only for the services such a balancer picks among.
    fn sends_probes(&self) -> bool {
        false
    }

    /// Whether it reads the confidence chips responses carry ([`Feedback::chip`], [`Bloc`]): a
    /// proxy's egress looks for them only then.
    fn takes_chips(&self) -> bool {
        false
    }

    /// Whether its picks read [`Pick::true_loads`] ([`Oracle`]): a simulator keeps them only for
    /// the services such a balancer picks among.
    fn reads_true_loads(&self) -> bool {
        false
    }
}

/// The in-flight request count of each endpoint, kept by the balancers that need it.
#[derive(Clone, Debug)]
pub(crate) struct InFlight(Vec<u32>);

impl InFlight {
    pub(crate) fn new(endpoints: usize) -> Self {
        InFlight(vec![0; endpoints])
    }
    pub(crate) fn get(&self, endpoint: EndpointId) -> u32 {
        self.0[endpoint]
    }
    pub(crate) fn grow(&mut self, endpoints: usize) {
        self.0.resize(endpoints.max(self.0.len()), 0);
    }
    pub(crate) fn inc(&mut self, endpoint: EndpointId) {
        self.0[endpoint] += 1;
    }
    pub(crate) fn dec(&mut self, endpoint: EndpointId) {
        self.0[endpoint] = self.0[endpoint].saturating_sub(1);
    }
}

/// Power of two choices over a candidate list of `len` read with `at`: two distinct candidates
/// drawn at random, the one with the lower `cost` wins (ties go to the first drawn).
/// Mitzenmacher's P2C, as Envoy and tower use it.
pub(crate) fn p2c(
    len: usize,
    at: impl Fn(usize) -> EndpointId,
    rng: Rng<'_>,
    mut cost: impl FnMut(EndpointId) -> f64,
) -> Option<EndpointId> {
    use rand::Rng as _;
    match len {
        0 => None,
        1 => Some(at(0)),
        n => {
            let i = rng.gen_range(0..n);
            let mut j = rng.gen_range(0..n - 1);
            if j >= i {
                j += 1;
            }
            let (a, b) = (at(i), at(j));
            Some(if cost(b) < cost(a) { b } else { a })
        }
    }
}

/// The endpoints a pick may choose from, without building the list: those of `0..n` the request
/// has not tried yet, or all of them once it has tried every one (a retry must go somewhere).
/// Reading it costs O(k) for k tried endpoints, whatever n.
#[derive(Clone, Debug, Default)]
pub(crate) struct Eligible {
    n: usize,
    /// The tried endpoints, sorted, rebuilt for each pick.
    tried: Vec<EndpointId>,
}

impl Eligible {
    pub(crate) fn new(n: usize) -> Self {
        Eligible { n, tried: Vec::new() }
    }

    pub(crate) fn grow(&mut self, endpoints: usize) {
        self.n = endpoints.max(self.n);
    }

    /// The endpoints not in `exclude`, in order, or all of them when every endpoint is excluded.
    pub(crate) fn among(&mut self, exclude: &[EndpointId]) -> Skipping<'_> {
        sorted_exclusions(exclude, self.n, &mut self.tried);
        if self.tried.len() == self.n {
            self.tried.clear();
        }
        Skipping::new(self.n, &self.tried)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eligible_leaves_out_tried_endpoints_unless_all_were_tried() {
        let list = |eligible: &mut Eligible, exclude: &[EndpointId]| {
            let c = eligible.among(exclude);
            (0..c.len()).map(|i| c.get(i)).collect::<Vec<_>>()
        };
        let mut eligible = Eligible::new(5);
        assert_eq!(list(&mut eligible, &[]), [0, 1, 2, 3, 4]);
        // Any order, repeats, and an endpoint the balancer does not have change nothing more.
        assert_eq!(list(&mut eligible, &[3, 0, 3, 9]), [1, 2, 4]);
        assert_eq!(list(&mut eligible, &[4, 2, 0, 1, 3]), [0, 1, 2, 3, 4]);
        assert_eq!(list(&mut Eligible::new(0), &[1]), [] as [EndpointId; 0]);
    }
}
