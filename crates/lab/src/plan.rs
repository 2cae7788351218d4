//! The layout of one run: an address per replica, its four listeners, and the sidecar file that
//! wires it to the replicas it calls.
//!
//! Every replica gets its own IP address and the same four ports: `tailguard serve` on
//! [`SERVE_PORT`], its sidecar's ingress on [`INGRESS_PORT`] (what callers reach), egress on
//! [`EGRESS_PORT`] (where serve sends its calls) and admin on [`ADMIN_PORT`]. Loopback runs use
//! `127.SLOT.(service+1).(replica+1)`, all on `lo`; netns runs use `10.SLOT.(service+1).(replica+1)`
//! inside the replica's own namespace. `SLOT` is chosen per run so concurrent labs do not collide.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;
use tailguard_model::schema::{BalancerConfig, ClientPolicy, Network, RouteMatch};
use tailguard_model::{Dur, Run};
use tailguard_proxy::config::Network as Peers;
use tailguard_proxy::config::{
    Admin, Classify, Config, Egress, Ingress, Protocol, Route, Tracing, Upstream, UpstreamRoute,
};
use tailguard_proxy::config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_CONNECTIONS_PER_ENDPOINT, DEFAULT_MAX_REPLAY_BODY, DEFAULT_MAX_REQUESTS,
    DEFAULT_UPSTREAM_MAX_REQUESTS,
};

pub const SERVE_PORT: u16 = 8080;
pub const EGRESS_PORT: u16 = 4140;
pub const INGRESS_PORT: u16 = 4143;
pub const ADMIN_PORT: u16 = 9990;

/// How replicas are separated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// Every process on `lo`, each replica on its own 127.x.y.z address; needs no privileges. The
    /// sidecars delay each hop ([`Plan::network_delay`]).
    Loopback,
    /// Each replica in its own network namespace on a bridge, with `tc netem` delaying every
    /// packet by the file's per-hop delay (needs root and iproute2); without `sch_netem` in the
    /// kernel the sidecars delay each hop instead.
    Netns,
}

impl Isolation {
    /// The address of replica `replica` of service number `service` in `slot`.
    pub fn address(self, slot: u8, service: usize, replica: u32) -> IpAddr {
        let (s, r) = ((service + 1) as u8, (replica + 1) as u8);
        match self {
            Isolation::Loopback => IpAddr::V4(Ipv4Addr::new(127, slot, s, r)),
            Isolation::Netns => IpAddr::V4(Ipv4Addr::new(10, slot, s, r)),
        }
    }

    /// The peers a sidecar believes deadline and trace headers from: the run's own addresses
    /// (`lo` in loopback runs, the slot's `10.SLOT.0.0/16` bridge network in netns runs).
    pub fn peers(self, slot: u8) -> Vec<Peers> {
        match self {
            Isolation::Loopback => Peers::loopback(),
            Isolation::Netns => vec![format!("10.{slot}.0.0/16").parse().expect("a valid network")],
        }
    }

    /// Where the load generator's own sidecar (when one is needed) listens: `lo` in loopback runs,
    /// the bridge's address in netns runs.
    pub fn host_address(self, slot: u8) -> IpAddr {
        match self {
            Isolation::Loopback => IpAddr::V4(Ipv4Addr::new(127, slot, 0, 1)),
            Isolation::Netns => IpAddr::V4(Ipv4Addr::new(10, slot, 0, 254)),
        }
    }
}

/// The most replicas of a service and services of a file the address scheme can hold.
pub const MAX_REPLICAS: u32 = 254;
pub const MAX_SERVICES: usize = 254;

/// One replica: where its processes listen.
#[derive(Clone, Debug)]
pub struct Replica {
    pub service: String,
    /// Index of the service in the file.
    pub service_index: usize,
    pub index: u32,
    pub ip: IpAddr,
    /// Whether a sidecar runs beside it (not for redis and memcached, crate::real, nor for a
    /// replica whose service or group says `sidecar: false`).
    pub sidecar: bool,
}

impl Replica {
    pub fn serve(&self) -> SocketAddr {
        SocketAddr::new(self.ip, SERVE_PORT)
    }
    pub fn ingress(&self) -> SocketAddr {
        SocketAddr::new(self.ip, INGRESS_PORT)
    }
    pub fn egress(&self) -> SocketAddr {
        SocketAddr::new(self.ip, EGRESS_PORT)
    }
    pub fn admin(&self) -> SocketAddr {
        SocketAddr::new(self.ip, ADMIN_PORT)
    }
    /// Where its callers reach it: its sidecar's ingress, or the program itself without one.
    pub fn endpoint(&self) -> SocketAddr {
        if self.sidecar {
            self.ingress()
        } else {
            self.serve()
        }
    }
    /// A name for logs and errors: `backend-3`.
    pub fn name(&self) -> String {
        format!("{}-{}", self.service, self.index)
    }
}

/// The whole layout of a run.
#[derive(Clone, Debug)]
pub struct Plan {
    pub isolation: Isolation,
    pub slot: u8,
    /// Every replica of every service, services in file order.
    pub replicas: Vec<Replica>,
    /// The load generator's sidecar (egress towards the entry service), when the workload's
    /// client policy is more than plain round robin (which the load generator does itself).
    pub workload_proxy: Option<SocketAddr>,
    pub workload_admin: Option<SocketAddr>,
    /// The per-hop delay every sidecar's ingress holds requests and responses for (crate::netns
    /// clears it where `tc netem` delays the packets instead); `None` when the file has none.
    /// Every network hop of the simulator ends at exactly one ingress, the load generator's hop
    /// to the entry service included, so each is delayed once each way; serve ↔ its own sidecar
    /// is not a network hop. Calls to redis and memcached, and to replicas with `sidecar: false`,
    /// which have no sidecar, are not delayed.
    pub network_delay: Option<Network>,
}

impl Plan {
    /// The layout of `run` in `slot`.
    pub fn new(run: &Run, isolation: Isolation, slot: u8) -> Plan {
        let mut replicas = Vec::new();
        for (s, (name, service)) in run.services.iter().enumerate() {
            for r in 0..service.replicas {
                let ip = isolation.address(slot, s, r);
                let sidecar = crate::real::has_sidecar(service.kind) && service.for_replica(r).sidecar;
                replicas.push(Replica { service: name.clone(), service_index: s, index: r, ip, sidecar });
            }
        }
        let host = isolation.host_address(slot);
        let proxied = !run.workload.client.is_plain();
        Plan {
            isolation,
            slot,
            replicas,
            workload_proxy: proxied.then(|| SocketAddr::new(host, EGRESS_PORT)),
            workload_admin: proxied.then(|| SocketAddr::new(host, ADMIN_PORT)),
            network_delay: (!run.network.is_zero()).then(|| Network { calibrated: None, ..run.network.clone() }),
        }
    }

    /// The replicas of one service.
    pub fn of<'a>(&'a self, service: &'a str) -> impl Iterator<Item = &'a Replica> + 'a {
        self.replicas.iter().filter(move |r| r.service == service)
    }

    /// Where the load generator sends: the workload sidecar's egress, or every replica of the
    /// entry service's ingress in turn.
    pub fn load_targets(&self, run: &Run) -> Vec<String> {
        match self.workload_proxy {
            Some(addr) => vec![format!("http://{addr}/{}/", run.workload.target)],
            None => self.of(&run.workload.target).map(|r| format!("http://{}/", r.endpoint())).collect(),
        }
    }

    /// Every address a process of the run listens on.
    pub fn listen_addresses(&self) -> Vec<SocketAddr> {
        let mut all: Vec<SocketAddr> =
            self.replicas.iter().flat_map(|r| [r.serve(), r.ingress(), r.egress(), r.admin()]).collect();
        all.extend(self.workload_proxy.iter().chain(&self.workload_admin));
        all
    }
}

/// The URL path prefix under which a caller's egress routes to `callee`.
pub fn route(callee: &str) -> String {
    format!("/{callee}/")
}

/// The path a request of `callee`'s route with path `path` takes in the lab: under the callee's
/// prefix ([`route`]), which `tailguard serve` removes before it matches its routes.
pub fn route_path(callee: &str, path: &str) -> String {
    format!("/{callee}{path}")
}

/// A sidecar's file (docs/proxy.md), as the lab writes it: the proxy's own [`Config`], so what
/// the lab writes is what the proxy reads.
#[derive(Clone, Debug, PartialEq)]
pub struct ProxyFile(pub Config);

/// The lab stops sidecars only after the load has ended: nothing is left to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

impl ProxyFile {
    /// The sidecar of `replica`: its ingress admits for serve with the replica's admission, its
    /// egress routes each called service's path prefix to that service's ingresses with the
    /// edge's policy. Its seed is derived from the run's `seed` and the replica's place in the
    /// plan ([`sidecar_seed`]).
    pub fn sidecar(run: &Run, plan: &Plan, replica: &Replica, seed: u64) -> ProxyFile {
        let service = &run.services[&replica.service];
        let mut upstreams = BTreeMap::new();
        // Calls to redis and memcached go straight to them (crate::real), not through the egress.
        for call in service.calls.iter().filter(|c| c.count > 0 && run.services[&c.service].kind.speaks_http()) {
            upstreams.insert(call.service.clone(), upstream(run, plan, &call.service, &call.policy));
        }
        let same = |r: &&Replica| r.service_index == replica.service_index && r.index == replica.index;
        let place = plan.replicas.iter().position(|r| same(&r)).unwrap_or(plan.replicas.len());
        ProxyFile(Config {
            egress: (!upstreams.is_empty()).then(|| egress(replica.egress(), upstreams)),
            ingress: Some(Ingress {
                listen: replica.ingress(),
                app: replica.serve(),
                // The replica's own: its group's, if it is in one with an admission.
                admission: service.for_replica(replica.index).admission,
                protocol: Protocol::Http1,
                // The callers are the lab's own sidecars and load generator.
                trusted_peers: plan.isolation.peers(plan.slot),
                trusted_identities: Vec::new(),
                max_app_connections: DEFAULT_MAX_CONNECTIONS_PER_ENDPOINT,
                app_tls: None,
                tls: None,
                network_delay: plan.network_delay.clone(),
            }),
            admin: Some(Admin { listen: replica.admin(), tls: None }),
            shutdown_grace: Some(Dur(SHUTDOWN_GRACE)),
            seed: Some(sidecar_seed(seed, place as u64 + 1)),
            ..Config::default()
        })
    }

    /// The load generator's sidecar: an egress towards the entry service with the workload's
    /// client policy.
    pub fn workload(run: &Run, plan: &Plan, seed: u64) -> Option<ProxyFile> {
        let (listen, admin) = (plan.workload_proxy?, plan.workload_admin?);
        let target = &run.workload.target;
        let upstreams = BTreeMap::from([(target.clone(), upstream(run, plan, target, &run.workload.client))]);
        Some(ProxyFile(Config {
            egress: Some(egress(listen, upstreams)),
            admin: Some(Admin { listen: admin, tls: None }),
            shutdown_grace: Some(Dur(SHUTDOWN_GRACE)),
            seed: Some(sidecar_seed(seed, 0)),
            ..Config::default()
        }))
    }

    /// The file with a `tracing:` section: spans of `service` in `run` to `endpoint`, a `sample`
    /// fraction of new traces, tagged with the run's `scenario` and `variant` so any collector can
    /// tell runs apart.
    pub fn traced(mut self, run: &Run, endpoint: &str, service: &str, sample: f64) -> ProxyFile {
        let resource = BTreeMap::from([
            ("scenario".to_string(), run.scenario.clone()),
            ("variant".to_string(), run.variant.clone()),
        ]);
        let (otlp_endpoint, service_name) = (endpoint.to_string(), service.to_string());
        self.0.tracing = Some(Tracing { otlp_endpoint, service_name, sample, resource });
        self
    }

    /// The file as YAML.
    pub fn to_yaml(&self) -> String {
        self.0.to_yaml()
    }
}

/// The seed of sidecar number `n` of a run seeded with `seed` (0 is the load generator's, n ≥ 1
/// the n-th replica's in plan order): well mixed, so no two sidecars repeat each other's draws and
/// the same run seed repeats them all.
pub fn sidecar_seed(seed: u64, n: u64) -> u64 {
    tailguard_model::replica::child_key(seed, n)
}

fn egress(listen: SocketAddr, upstreams: BTreeMap<String, Upstream>) -> Egress {
    Egress {
        listen,
        upstreams,
        max_replay_body: DEFAULT_MAX_REPLAY_BODY,
        max_requests: DEFAULT_MAX_REQUESTS,
        tls: None,
    }
}

/// The upstream towards `callee` with `policy`: its routes are the callee's, matched under its
/// prefix, with the policy's changes for each ([`ClientPolicy::routes`]).
fn upstream(run: &Run, plan: &Plan, callee: &str, policy: &ClientPolicy) -> Upstream {
    let routes = run.services[callee].routes.iter().map(|r| {
        let changes = policy.routes.get(&r.name).cloned().unwrap_or_default();
        let path = route_path(callee, &r.matches.path);
        UpstreamRoute {
            name: r.name.clone(),
            matches: RouteMatch { path, method: r.matches.method.clone() },
            timeout: changes.timeout,
            hedge: changes.hedge,
            deadline: changes.deadline,
        }
    });
    Upstream {
        endpoints: plan.of(callee).map(Replica::endpoint).collect(),
        discovery: None,
        route: Route::PathPrefix(route(callee)),
        policy: ClientPolicy { routes: Default::default(), ..policy.clone() },
        routes: routes.collect(),
        classes: Classify::default(),
        protocol: Protocol::Http1,
        max_connections_per_endpoint: DEFAULT_MAX_CONNECTIONS_PER_ENDPOINT,
        max_requests: DEFAULT_UPSTREAM_MAX_REQUESTS,
        connect_timeout: Dur(DEFAULT_CONNECT_TIMEOUT),
        tls: None,
    }
}

/// Whether a run needs the simulator's oracle (it sees every replica's true queue, which no real
/// process can): such runs are skipped in the lab.
pub fn needs_oracle(run: &Run) -> bool {
    let oracle = |p: &ClientPolicy| p.balancer == BalancerConfig::Oracle;
    oracle(&run.workload.client) || run.services.values().flat_map(|s| &s.calls).any(|c| oracle(&c.policy))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use tailguard_model::schema::AdmissionConfig;
    use tailguard_model::Experiment;

    const FILE: &str = "name: t\nservices:\n  front:\n    calls: [{service: back}]\n  back:\n    replicas: 2\n    workers: 1\n    admission: {kind: fixed, capacity: 3}\nworkload: {target: front, open: {rate: 10}, duration: 1s}\nvariants:\n  - name: v\n    edges:\n      front->back: {balancer: {kind: bloc, reset: 1s}, retry: {max_attempts: 4}}\n";

    fn run(text: &str) -> Run {
        Experiment::parse(text, Path::new("t.yaml")).unwrap().resolve("default", "v", false).unwrap()
    }

    /// What the proxy reads from the file the lab writes.
    fn read_back(file: &ProxyFile) -> Config {
        let config = Config::parse(&file.to_yaml(), Path::new("sidecar.yaml")).unwrap();
        Config { source: String::new(), ..config }
    }

    #[test]
    fn a_sidecar_file_wires_ingress_admission_and_egress_policy() {
        let run = run(FILE);
        let plan = Plan::new(&run, Isolation::Loopback, 7);
        assert_eq!(plan.replicas.len(), 3);
        assert_eq!(plan.replicas[2].ip.to_string(), "127.7.2.2");
        assert_eq!(plan.workload_proxy, None);
        assert_eq!(plan.load_targets(&run), vec!["http://127.7.1.1:4143/"]);
        let front = read_back(&ProxyFile::sidecar(&run, &plan, &plan.replicas[0], 1));
        let up = &front.egress.as_ref().unwrap().upstreams["back"];
        assert_eq!(up.endpoints[1].to_string(), "127.7.2.2:4143");
        assert_eq!(up.route, Route::PathPrefix("/back/".into()));
        assert_eq!(up.policy, run.services["front"].calls[0].policy);
        let back = read_back(&ProxyFile::sidecar(&run, &plan, &plan.replicas[1], 1));
        assert!(back.egress.is_none());
        let ingress = back.ingress.unwrap();
        assert_eq!(ingress.admission, run.services["back"].admission);
        assert_eq!(
            (ingress.listen.to_string(), ingress.app.to_string()),
            ("127.7.2.1:4143".into(), "127.7.2.1:8080".into())
        );
        let traced = ProxyFile::sidecar(&run, &plan, &plan.replicas[1], 1).traced(
            &run,
            "http://127.0.0.1:9/v1/traces",
            "back",
            0.5,
        );
        let tracing = read_back(&traced).tracing.unwrap();
        assert_eq!(tracing.otlp_endpoint, "http://127.0.0.1:9/v1/traces");
        assert_eq!((tracing.service_name.as_str(), tracing.sample), ("back", 0.5));
        let resource: Vec<(&str, &str)> = tracing.resource.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(resource, [("scenario", "default"), ("variant", "v")]);
    }

    #[test]
    fn a_group_s_admission_reaches_its_replicas_sidecars_only() {
        let text = FILE.replace(
            "    admission: {kind: fixed, capacity: 3}\n",
            "    admission: {kind: fixed, capacity: 3}\n    groups: {small: {replicas: 1, admission: {kind: fixed, capacity: 1}}}\n",
        );
        let run = run(&text);
        let plan = Plan::new(&run, Isolation::Loopback, 7);
        let admission =
            |i: usize| read_back(&ProxyFile::sidecar(&run, &plan, &plan.replicas[i], 1)).ingress.unwrap().admission;
        assert_eq!(admission(1), AdmissionConfig::Fixed { capacity: 3 }, "back-0");
        assert_eq!(admission(2), AdmissionConfig::Fixed { capacity: 1 }, "back-1, in the group");
    }

    #[test]
    fn sidecars_believe_deadlines_from_every_address_of_their_run() {
        for isolation in [Isolation::Loopback, Isolation::Netns] {
            let run = run(FILE);
            let plan = Plan::new(&run, isolation, 3);
            let mut callers: Vec<IpAddr> = plan.replicas.iter().map(|r| r.ip).collect();
            callers.push(isolation.host_address(3));
            for replica in &plan.replicas {
                let file = ProxyFile::sidecar(&run, &plan, replica, 9);
                let peers = file.0.ingress.expect("every sidecar has an ingress").trusted_peers;
                for caller in &callers {
                    assert!(peers.iter().any(|n| n.contains(*caller)), "{caller} not trusted in {peers:?}");
                }
                assert!(!peers.iter().any(|n| n.contains(IpAddr::V4(Ipv4Addr::new(10, 4, 1, 1)))));
            }
        }
    }

    #[test]
    fn every_file_the_lab_writes_reads_back_equal() {
        // Every policy family with parameters, so each field's spelling makes the round trip.
        let text = FILE.replace(
            "retry: {max_attempts: 4}}",
            "retry: {max_attempts: 4, backoff: 1ms, budget: 0.2}, timeout: {kind: adaptive, initial: 20ms, k: 3}, hedge: {kind: percentile, percentile: 95}, deadline: 1.5s}\n      workload->front: {balancer: {kind: peak-ewma, decay: 2s}, hedge: {kind: speculative, attempts: 2, patience: 10ms, timeout: 1s}}",
        );
        let text = text.replace("workload:", "network: {delay: 2ms, jitter: 500us}\nworkload:");
        let run = run(&text);
        let plan = Plan::new(&run, Isolation::Netns, 3);
        let mut files: Vec<ProxyFile> = plan.replicas.iter().map(|r| ProxyFile::sidecar(&run, &plan, r, 9)).collect();
        files.push(ProxyFile::workload(&run, &plan, 9).expect("the workload's policy needs a sidecar"));
        files.push(files[0].clone().traced(&run, "http://10.3.0.254:4318", "front", 0.25));
        for file in files {
            assert_eq!(read_back(&file), file.0, "{}", file.to_yaml());
        }
    }

    #[test]
    fn every_sidecar_holds_the_files_network_delay_and_none_without_one() {
        let delayed = FILE.replace("workload:", "network: {delay: 5ms, jitter: 1ms}\nworkload:");
        let delayed_run = run(&delayed);
        let plan = Plan::new(&delayed_run, Isolation::Loopback, 7);
        let expected = Network { delay: Dur::from_millis(5), jitter: Dur::from_millis(1), calibrated: None };
        assert_eq!(plan.network_delay, Some(expected.clone()));
        // Every replica's ingress: the entry's holds the load generator's hop, the callee's the
        // caller's; read back as the proxy reads it.
        for replica in &plan.replicas {
            let file = read_back(&ProxyFile::sidecar(&delayed_run, &plan, replica, 1));
            assert_eq!(file.ingress.unwrap().network_delay, Some(expected.clone()), "{}", replica.name());
        }
        // The load generator's own sidecar (an egress) adds none: its hop ends at the entry's ingress.
        let text = delayed
            .replace("      front->back:", "      workload->front: {balancer: {kind: random}}\n      front->back:");
        let run_with_client = run(&text);
        let plan_with_client = Plan::new(&run_with_client, Isolation::Loopback, 7);
        let workload = ProxyFile::workload(&run_with_client, &plan_with_client, 1).unwrap();
        assert!(workload.0.ingress.is_none());

        let plain = run(FILE);
        let plan = Plan::new(&plain, Isolation::Loopback, 7);
        assert_eq!(plan.network_delay, None);
        let file = ProxyFile::sidecar(&plain, &plan, &plan.replicas[0], 1);
        assert_eq!(file.0.ingress.as_ref().unwrap().network_delay, None);
        assert!(!file.to_yaml().contains("network_delay"));
    }

    #[test]
    fn sidecars_are_seeded_from_the_run_seed_each_with_its_own() {
        let run = run(FILE);
        let plan = Plan::new(&run, Isolation::Loopback, 7);
        let seeds = |seed| -> Vec<u64> {
            plan.replicas.iter().map(|r| ProxyFile::sidecar(&run, &plan, r, seed).0.seed.unwrap()).collect()
        };
        assert_eq!(seeds(1), seeds(1), "the same run seed gives the same sidecar seeds");
        assert_ne!(seeds(1), seeds(2));
        let mut distinct = seeds(1);
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 3, "{distinct:?}");
        assert_eq!(seeds(1)[0], sidecar_seed(1, 1));
    }
}
