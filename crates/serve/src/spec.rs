//! What one synthetic service is: a service of a resolved experiment run, which replica of it
//! this process is, where its downstream calls go, and its seed.

use crate::error::ServeError;
use crate::store::Protocol;
use hyper::Uri;
use indexmap::IndexMap;
use std::path::PathBuf;
use std::time::Duration;
use tailguard_model::schema::Service;
use tailguard_model::Experiment;
use tailguard_model::Kind;

/// The seed used when neither the command line nor the file gives one (as `tailguard sim`).
pub const DEFAULT_SEED: u64 = 1;

/// How to pick the service out of an experiment file: plain, as the command line gives it.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The service's name in the file.
    pub service: String,
    /// The scenario (default: the file's first).
    pub scenario: Option<String>,
    /// The variant (default: the file's first).
    pub variant: Option<String>,
    /// Apply the file's `quick` overrides.
    pub quick: bool,
    /// Which replica of the service this process is, from 0 (it selects `down` faults and the
    /// replica's random stream).
    pub replica: u32,
    /// Where each called service is reached, as (name, URL): in the lab, this replica's sidecar
    /// egress for that service.
    pub downstream: Vec<(String, String)>,
    /// Seed of the random streams (default: the file's `seed`, else [`DEFAULT_SEED`]).
    pub seed: Option<u64>,
}

/// One replica of one service, resolved and checked: everything a server needs.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The service's name.
    pub name: String,
    /// Its index among the run's services, in file order (it picks the random stream, as in the
    /// simulator).
    pub index: usize,
    /// This replica's index.
    pub replica: u32,
    /// The service as resolved for the scenario × variant, as this replica runs it (its group's
    /// fields and faults: [`Service::for_replica`]).
    pub service: Service,
    /// The directory empirical data files are read from.
    pub base_dir: PathBuf,
    /// The run's length (warm-up + duration), for latency models whose times default to it.
    pub horizon: Option<Duration>,
    /// The seed of the whole run (`--seed`, else the file's).
    pub seed: u64,
    /// The seed of the replica's random streams: the run's [`Run::stream_seed`] of `seed`, as the
    /// simulator seeds them.
    ///
    /// [`Run::stream_seed`]: tailguard_model::Run::stream_seed
    pub stream_seed: u64,
    /// Where each call edge goes, in the order of [`Service::all_calls`] (the service's calls,
    /// then its routes' own); `None` for an edge with `count: 0` that was given no URL (it is
    /// never called).
    pub downstream: Vec<Option<Downstream>>,
    /// The routes of each call edge's callee, in the same order (empty for a callee without).
    pub callee_routes: Vec<Vec<tailguard_model::schema::Route>>,
}

/// Where one call edge goes: an HTTP URL (a synthetic or nginx callee, through the sidecar), or
/// the replicas of a redis or memcached callee, reached directly over their own protocol
/// (`redis://HOST:PORT,HOST:PORT`, `memcached://...`).
#[derive(Clone, Debug)]
pub enum Downstream {
    Http(Uri),
    Store(crate::store::Protocol, Vec<std::net::SocketAddr>),
}

impl Spec {
    /// Resolves `options.scenario` × `options.variant` and checks the options against the run.
    pub fn from_experiment(experiment: &Experiment, options: &Options) -> Result<Spec, ServeError> {
        let scenario = options.scenario.clone().or_else(|| experiment.scenario_names().into_iter().next());
        let variant = options.variant.clone().or_else(|| experiment.variant_names().into_iter().next());
        let (Some(scenario), Some(variant)) = (scenario, variant) else {
            return Err(ServeError::Options("the experiment file has no variant".to_string()));
        };
        let run = experiment.resolve(&scenario, &variant, options.quick)?;
        let origin = experiment.origin().display();
        let Some(index) = run.services.get_index_of(&options.service) else {
            let names: Vec<&str> = run.services.keys().map(String::as_str).collect();
            return Err(ServeError::Options(format!(
                "{origin}: no service named \"{}\"; expected one of: {}",
                options.service,
                names.join(", ")
            )));
        };
        let service = &run.services[index];
        if options.replica >= service.replicas {
            return Err(ServeError::Options(format!(
                "{origin}: service \"{}\" has {} replica(s), so --replica must be below {}, got {}",
                options.service, service.replicas, service.replicas, options.replica
            )));
        }
        let downstream = downstream_urls(&options.service, service, &run.services, &options.downstream)?;
        let seed = options.seed.or(experiment.seed()).unwrap_or(DEFAULT_SEED);
        let callee_routes = service.all_calls().map(|c| run.services[&c.service].routes.clone()).collect();
        Ok(Spec {
            name: options.service.clone(),
            index,
            replica: options.replica,
            service: service.for_replica(options.replica),
            base_dir: run.base_dir.clone(),
            horizon: run.horizon(),
            seed,
            stream_seed: run.stream_seed(seed),
            downstream,
            callee_routes,
        })
    }
}

/// The URL of each call edge of `service`, from the (name, URL) pairs given: every called service
/// needs one, and every pair must name a called service.
fn downstream_urls(
    name: &str,
    service: &Service,
    services: &IndexMap<String, Service>,
    given: &[(String, String)],
) -> Result<Vec<Option<Downstream>>, ServeError> {
    let called: Vec<&str> = service.all_calls().map(|c| c.service.as_str()).collect();
    for (callee, _) in given {
        if !called.contains(&callee.as_str()) {
            let calls = if called.is_empty() { "it calls no service".to_string() } else { called.join(", ") };
            return Err(ServeError::Options(format!(
                "--downstream {callee}: service \"{name}\" does not call \"{callee}\"; expected one of: {calls}"
            )));
        }
    }
    let mut urls = Vec::new();
    for edge in service.all_calls() {
        let Some((_, url)) = given.iter().rev().find(|(callee, _)| *callee == edge.service) else {
            if edge.count == 0 {
                urls.push(None);
                continue;
            }
            return Err(ServeError::Options(format!(
                "service \"{name}\" calls \"{0}\" but no URL was given for it; expected --downstream {0}=http://HOST:PORT",
                edge.service
            )));
        };
        let kind = services.get(&edge.service).map_or(Kind::Synthetic, |s| s.kind);
        urls.push(Some(parse_url(&edge.service, kind, url)?));
    }
    Ok(urls)
}

/// An `http://` URL with a host (a path-less URL gets `/`) for a callee that speaks HTTP;
/// `redis://` or `memcached://` and its replicas' addresses, comma-separated, for a store.
fn parse_url(callee: &str, kind: Kind, url: &str) -> Result<Downstream, ServeError> {
    let store = match kind {
        Kind::Redis => Some(Protocol::Redis),
        Kind::Memcached => Some(Protocol::Memcached),
        Kind::Synthetic | Kind::Nginx => None,
    };
    if let Some(protocol) = store {
        let bad = |why: String| {
            ServeError::Options(format!(
                "--downstream {callee}={url}: {why}; expected {0}://HOST:PORT[,HOST:PORT...] (\"{callee}\" is a {0} service)",
                kind.name()
            ))
        };
        let Some(list) = url.strip_prefix(&format!("{}://", kind.name())) else {
            return Err(bad("wrong scheme".to_string()));
        };
        let addrs = list
            .split(',')
            .map(|a| a.parse().map_err(|e| bad(format!("{a:?} is not an address ({e})"))))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Downstream::Store(protocol, addrs));
    }
    let bad = |why: &str| {
        ServeError::Options(format!(
            "--downstream {callee}={url}: {why}; expected a URL such as http://127.0.0.1:8080/"
        ))
    };
    let uri: Uri = url.parse().map_err(|e| bad(&format!("not a URL ({e})")))?;
    if uri.scheme_str() != Some("http") {
        return Err(bad("only http:// URLs are supported"));
    }
    if uri.authority().is_none() {
        return Err(bad("the URL has no host"));
    }
    Ok(Downstream::Http(uri))
}
