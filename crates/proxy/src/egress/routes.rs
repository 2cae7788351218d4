//! Routing: the upstream a request goes to (a `Host` match first, else the longest matching
//! path prefix), and each upstream's endpoints (connection pool, metrics) and policy
//! state. A reload builds new routes; an unchanged upstream keeps its state, an endpoint its pool.
//! Discovery ([`super::discovery`]) changes an upstream's endpoint set in place
//! ([`Upstream::set_endpoints`]).

use super::classes::Classifier;
use crate::body::ClientBody;
use crate::cap::Count;
use crate::config;
use crate::metrics::{EndpointMetrics, Metrics, UpstreamMetrics};
use crate::pool::Pool;
use crate::tls::{self, TlsError};
use hyper::Request;
use rand_pcg::Pcg64Mcg;
use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use tailguard_model::build;
use tailguard_policy::call::ClientPolicy;
use tailguard_policy::EndpointId;
use tokio::sync::watch;

/// The upstreams of one version of the file.
pub(super) struct Routes {
    pub(super) upstreams: Vec<Arc<Upstream>>,
    pub(super) max_replay_body: usize,
    pub(super) max_requests: usize,
}

/// One called service and the caller's policy state towards it.
pub(super) struct Upstream {
    pub(super) name: String,
    pub(super) config: config::Upstream,
    pub(super) metrics: UpstreamMetrics,
    /// Every endpoint the upstream has had, by id (the policy's [`EndpointId`]): those left by
    /// discovery stay, retired in the policy, so attempts in flight to them finish and report.
    endpoints: RwLock<Vec<Arc<Endpoint>>>,
    core: Mutex<Core>,
    /// Where discovered endpoints get their metrics.
    all_metrics: Arc<Metrics>,
    /// True once discovery answered (or failed) for the first time; always true without it.
    pub(super) discovered: watch::Sender<bool>,
    /// Requests in flight to this upstream, against its `max_requests` (kept while the
    /// upstream is unchanged across reloads, like its policy state).
    pub(super) in_flight: Count,
    /// How connections to the endpoints speak TLS (`None`: cleartext), for those discovered later.
    tls: Option<Arc<tls::Connector>>,
    /// Whether the balancer takes the load reports that responses carry (one that probes:
    /// Prequal); other balancers' egresses do not look for them.
    pub(super) reads_load: bool,
    /// Whether it takes their chips (BLOC), likewise.
    pub(super) reads_chips: bool,
}

/// What a request needs of an endpoint, prepared once: its connections and its metrics.
pub(super) struct Endpoint {
    pub(super) addr: SocketAddr,
    /// Kept across reloads for as long as some upstream lists the address.
    pub(super) pool: Arc<Pool>,
    pub(super) metrics: EndpointMetrics,
}

impl Endpoint {
    /// The endpoint at `addr` of upstream `upstream`, sending through `pool`.
    fn new(addr: SocketAddr, pool: Arc<Pool>, metrics: &Metrics, upstream: &str) -> Arc<Endpoint> {
        Arc::new(Endpoint { addr, pool, metrics: metrics.endpoint(upstream, &addr.to_string()) })
    }
}

/// What a policy step needs: the policy and the random source; which class a request is; and
/// which endpoint id each address has.
pub(super) struct Core {
    pub(super) policy: ClientPolicy,
    pub(super) rng: Pcg64Mcg,
    pub(super) classes: Classifier,
    /// Every address the upstream has had and its id (an address that comes back gets its id back).
    pub(super) ids: HashMap<SocketAddr, EndpointId>,
}

impl Routes {
    /// The routes of `config`, keeping what is unchanged from `old`; an error if an upstream's
    /// TLS files cannot be used.
    pub(super) fn new(
        config: &config::Egress,
        old: Option<&Routes>,
        metrics: &Arc<Metrics>,
        seed: u64,
    ) -> Result<Routes, TlsError> {
        let upstreams = config
            .upstreams
            .iter()
            .enumerate()
            .map(|(i, (name, u))| {
                let same = old.and_then(|old| old.upstreams.iter().find(|o| o.name == *name && o.config == *u));
                match same {
                    Some(same) => Ok(same.clone()),
                    None => Upstream::new(name, u, crate::rng(seed, i as u64 + 1), metrics, old),
                }
            })
            .collect::<Result<_, TlsError>>()?;
        Ok(Routes { upstreams, max_replay_body: config.max_replay_body, max_requests: config.max_requests })
    }

    /// The upstream for `req`: a Host match first, else the longest matching path prefix.
    pub(super) fn route(&self, req: &Request<ClientBody>) -> Option<&Arc<Upstream>> {
        let host = req.headers().get(hyper::header::HOST).and_then(|h| h.to_str().ok()).or(req.uri().host());
        let host = host.map(|h| h.rsplit_once(':').map_or(h, |(name, _)| name));
        let by_host = self
            .upstreams
            .iter()
            .find(|u| matches!(&u.config.route, config::Route::Host(h) if Some(h.as_str()) == host));
        by_host.or_else(|| {
            let path = req.uri().path();
            self.upstreams
                .iter()
                .filter_map(|u| match &u.config.route {
                    config::Route::PathPrefix(p) if path.starts_with(p.as_str()) => Some((p.len(), u)),
                    _ => None,
                })
                .max_by_key(|(len, _)| *len)
                .map(|(_, u)| u)
        })
    }
}

impl Upstream {
    /// The upstream `name`, drawing from `rng`; its endpoints keep their connection pools from
    /// `old` routes when they speak the same protocol and TLS (or none). A discovered upstream
    /// starts from the set its namesake in `old` found with the same source (the same name or
    /// file), else from none, and starts its discovery task.
    fn new(
        name: &str,
        config: &config::Upstream,
        rng: Pcg64Mcg,
        metrics: &Arc<Metrics>,
        old: Option<&Routes>,
    ) -> Result<Arc<Upstream>, TlsError> {
        let tls = match &config.tls {
            Some(t) => Some(Arc::new(tls::Connector::new(t, &format!("egress.upstreams.{name}.tls"))?)),
            None => None,
        };
        let old_pool = |addr: &SocketAddr| {
            let mut endpoints = old.into_iter().flat_map(|r| r.upstreams.iter()).flat_map(|u| u.all_endpoints());
            let same = |pool: &Pool| {
                pool.tls().map(|c| c.config()) == config.tls.as_ref()
                    && pool.is_h2c() == (config.protocol == config::Protocol::H2c)
            };
            endpoints.find(|e| e.addr == *addr && same(&e.pool)).map(|e| e.pool.clone())
        };
        let (max, connect_timeout) = (config.max_connections_per_endpoint, config.connect_timeout.0);
        let endpoint = |addr: &SocketAddr| {
            let pool = old_pool(addr).inspect(|pool| {
                pool.set_max_connections(max);
                pool.set_connect_timeout(connect_timeout);
            });
            let pool = pool.unwrap_or_else(|| Arc::new(new_pool(*addr, config, tls.clone(), metrics)));
            Endpoint::new(*addr, pool, metrics, name)
        };
        let addrs = match &config.discovery {
            None => config.endpoints.clone(),
            Some(discovery) => {
                let namesake = old.into_iter().flat_map(|r| r.upstreams.iter()).find(|u| u.name == name);
                let same_source = |d: &config::Discovery| {
                    (&d.dns, &d.file, &d.kubernetes) == (&discovery.dns, &discovery.file, &discovery.kubernetes)
                };
                let same = namesake.filter(|u| u.config.discovery.as_ref().is_some_and(same_source));
                same.map_or_else(Vec::new, |u| u.live())
            }
        };
        let endpoints: Vec<_> = addrs.iter().map(endpoint).collect();
        let ids = addrs.iter().enumerate().map(|(id, addr)| (*addr, id)).collect();
        let policy = {
            let (policy, routes) = config.routed_policy();
            build::client_policy_routed(&policy, addrs.len(), &routes)
        };
        let (reads_load, reads_chips) = (policy.balancer.sends_probes(), policy.balancer.takes_chips());
        let upstream = Arc::new(Upstream {
            name: name.to_string(),
            config: config.clone(),
            metrics: metrics.upstream(name),
            endpoints: RwLock::new(endpoints),
            core: Mutex::new(Core { policy, rng, classes: Classifier::new(&config.routes, config.classes), ids }),
            all_metrics: metrics.clone(),
            discovered: watch::Sender::new(config.discovery.is_none()),
            in_flight: Count::default(),
            tls,
            reads_load,
            reads_chips,
        });
        upstream.metrics.endpoints.set(addrs.len() as i64);
        if let Some(discovery) = &config.discovery {
            super::discovery::spawn(&upstream, discovery);
        }
        Ok(upstream)
    }

    /// The endpoint of id `id` (retired ones included).
    pub(super) fn endpoint(&self, id: EndpointId) -> Option<Arc<Endpoint>> {
        self.endpoints.read().unwrap_or_else(|poisoned| poisoned.into_inner()).get(id).cloned()
    }

    fn all_endpoints(&self) -> Vec<Arc<Endpoint>> {
        self.endpoints.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// The policy state, locked.
    pub(super) fn core(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The addresses in the set now (not retired), in id order.
    pub(super) fn live(&self) -> Vec<SocketAddr> {
        let core = self.core();
        let mut live: Vec<(EndpointId, SocketAddr)> = core
            .ids
            .iter()
            .filter(|(_, id)| core.policy.retired.binary_search(id).is_err())
            .map(|(addr, id)| (*id, *addr))
            .collect();
        live.sort_unstable();
        live.into_iter().map(|(_, addr)| addr).collect()
    }

    /// Makes `addrs` the endpoint set: addresses new to the set join (with their old id and
    /// state if they were in it before), addresses gone are retired (no new attempt; attempts in
    /// flight finish), the others are left alone, balancer and outlier state included.
    pub(super) fn set_endpoints(&self, addrs: &BTreeSet<SocketAddr>) -> Change {
        let mut change = Change::default();
        let mut core = self.core();
        let Core { policy, ids, .. } = &mut *core;
        for (addr, id) in ids.iter() {
            let retired = policy.retired.binary_search(id).is_ok();
            if retired && addrs.contains(addr) {
                policy.restore(*id);
                change.added.push(*addr);
            } else if !retired && !addrs.contains(addr) {
                policy.retire(*id);
                change.removed.push(*addr);
            }
        }
        let fresh: Vec<SocketAddr> = addrs.iter().filter(|a| !ids.contains_key(a)).copied().collect();
        if !fresh.is_empty() {
            let mut endpoints = self.endpoints.write().unwrap_or_else(|poisoned| poisoned.into_inner());
            for addr in fresh {
                ids.insert(addr, endpoints.len());
                let pool = Arc::new(new_pool(addr, &self.config, self.tls.clone(), &self.all_metrics));
                endpoints.push(Endpoint::new(addr, pool, &self.all_metrics, &self.name));
                change.added.push(addr);
            }
            policy.grow(endpoints.len());
        }
        self.metrics.endpoints.set(addrs.len() as i64);
        change.added.sort_unstable();
        change.removed.sort_unstable();
        change
    }
}

/// What [`Upstream::set_endpoints`] changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Change {
    pub(super) added: Vec<SocketAddr>,
    pub(super) removed: Vec<SocketAddr>,
}

/// An empty pool towards `addr`, an endpoint of the upstream `config`.
fn new_pool(addr: SocketAddr, config: &config::Upstream, tls: Option<Arc<tls::Connector>>, metrics: &Metrics) -> Pool {
    Pool::new(addr, config.max_connections_per_endpoint)
        .with_h2c(config.protocol == config::Protocol::H2c)
        .with_tls(tls)
        .with_connect_timeout(config.connect_timeout.0)
        .counting(metrics.connections_opened(&addr.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_balancer_that_takes_them_has_its_reports_and_chips_read() {
        let config = crate::Config::parse(
            "egress:
              listen: 127.0.0.1:1
              upstreams:
                p: {endpoints: [127.0.0.1:1001], policy: {balancer: {kind: prequal}}}
                b: {endpoints: [127.0.0.1:1002], policy: {balancer: {kind: bloc}}}
                r: {endpoints: [127.0.0.1:1003], policy: {balancer: {kind: round-robin}}}",
            std::path::Path::new("proxy.yaml"),
        )
        .unwrap();
        let routes = Routes::new(config.egress.as_ref().unwrap(), None, &Arc::new(Metrics::new()), 1).expect("no TLS");
        let read = |name: &str| {
            let u = routes.upstreams.iter().find(|u| u.name == name).unwrap();
            (u.reads_load, u.reads_chips)
        };
        assert_eq!([read("p"), read("b"), read("r")], [(true, false), (false, true), (false, false)]);
    }
}
