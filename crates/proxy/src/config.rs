//! The proxy's configuration file (docs/proxy.md): plain `Clone + Debug` types, read once,
//! validated once, with errors that name the file and the field.
//!
//! Policies reuse the experiment schema (`tailguard_model::schema::{ClientPolicy, AdmissionConfig}`), so
//! a policy tuned in the simulator is pasted into a sidecar's file unchanged.
//!
//! The types serialise too: the lab writes its sidecars' files with them ([`Config::to_yaml`]), so
//! the file format has one representation, read and written.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tailguard_model::schema::{AdmissionConfig, ClientPolicy, HedgeConfig, RouteMatch, RoutePolicy, TimeoutConfig};
use tailguard_model::{validate, Dur, ModelError};

/// Bodies up to this size are buffered so retries and hedges can replay them.
pub const DEFAULT_MAX_REPLAY_BODY: usize = 64 * 1024;

/// Requests the egress carries at once by default, every upstream together: as many as HTTP/1
/// clients it holds connections for by default (`limits.max_connections`).
pub const DEFAULT_MAX_REQUESTS: usize = 4096;

/// Requests each upstream carries at once by default (Envoy's per-cluster circuit breaker
/// `max_requests`), a quarter of the egress's: one hung upstream leaves room for the others.
pub const DEFAULT_UPSTREAM_MAX_REQUESTS: usize = 1024;

/// Upstream connections per endpoint by default (Envoy's circuit breaker `max_connections`).
pub const DEFAULT_MAX_CONNECTIONS_PER_ENDPOINT: usize = 1024;

/// How long opening an upstream connection may take by default: long enough for one SYN resent
/// (the kernel resends an unanswered SYN after its initial retransmission timeout, 1 s, RFC 6298
/// §2.1). At Linkerd's 1 s a connect failed just as the resent SYN left: a burst that overflowed
/// an application's accept queue (128 places, Rust's and mio's default backlog) failed 0.5-0.8 %
/// of h2load's 8,000 requests through the ingress with 502 (crates/proxy/tests/h2load.rs).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A whole proxy file: any of the three listeners may be left out.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The outbound side: the local application's calls to other services.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Egress>,
    /// The inbound side: other services' calls to the local application.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<Ingress>,
    /// Health, metrics and configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<Admin>,
    /// How long in-flight requests may take to finish on shutdown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_grace: Option<Dur>,
    /// The proxy's own threads: 1 runs everything on one thread (tokio's current-thread
    /// runtime, the cheapest per request); unset, one per core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
    /// The seed of the proxy's random draws (balancer choices, jittered backoffs, BLOC chips);
    /// unset, one is drawn from the operating system. The proxy prints the seed it uses at
    /// start-up, so a run can be repeated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Limits on every listener's connections.
    #[serde(default)]
    pub limits: Limits,
    /// Spans exported over OTLP/HTTP (docs/traces.md); absent, tracing costs nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing: Option<Tracing>,
    /// The file as written, served by the admin `/config` endpoint.
    #[serde(skip)]
    pub source: String,
    /// The file read, when read by [`Config::load`]: the proxy then watches it and reloads the
    /// egress's upstreams when it changes.
    #[serde(skip)]
    pub path: Option<PathBuf>,
}

/// Limits on each listener's connections (docs/proxy.md, "Limits").
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// How long a client may take to send a request's headers (HTTP/1), so a slowloris client
    /// cannot hold a connection. It also bounds how long a kept-alive HTTP/1 connection waits
    /// for its next request.
    pub header_read_timeout: Dur,
    /// How long a request body may send nothing (nginx's `client_body_timeout`): then the
    /// request is answered 408 and its connection closed, so a client announcing a body it never
    /// sends cannot hold a connection.
    pub body_read_timeout: Dur,
    /// The largest request head, in bytes (at least 8192): beyond it, 431.
    pub max_header_bytes: usize,
    /// Connections served at once per listener; more wait in the listen backlog.
    pub max_connections: usize,
    /// A connection with no bytes moving and no request awaiting its response for this long is
    /// closed.
    pub idle_timeout: Dur,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_read_timeout: Dur(Duration::from_secs(10)),
            body_read_timeout: Dur(Duration::from_secs(10)),
            max_header_bytes: 16 * 1024,
            max_connections: 4096,
            idle_timeout: Dur(Duration::from_secs(60)),
        }
    }
}

/// Where and how the proxy exports its spans (docs/traces.md).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Tracing {
    /// The OTLP/HTTP (protobuf) URL; a URL without a path gets `/v1/traces`.
    pub otlp_endpoint: String,
    /// The service the spans are reported under (the local application's name).
    #[serde(default = "default_service_name")]
    pub service_name: String,
    /// The fraction of new traces recorded (0 to 1); a request that arrives with a sampled
    /// `traceparent` is always recorded, so one trace is kept or dropped whole.
    #[serde(default = "default_sample")]
    pub sample: f64,
    /// More resource attributes on every span, as `OTEL_RESOURCE_ATTRIBUTES` would add (e.g. the
    /// lab's `scenario` and `variant`, so a shared collector can tell runs apart).
    #[serde(default)]
    pub resource: BTreeMap<String, String>,
}

fn default_service_name() -> String {
    "tailguard-proxy".to_string()
}

fn default_sample() -> f64 {
    1.0
}

/// How the egress speaks to an upstream's endpoints.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// HTTP/1.1.
    #[default]
    Http1,
    /// HTTP/2 over cleartext by prior knowledge (gRPC).
    H2c,
}

/// The outbound listener and the services it routes to.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Egress {
    /// Where the application sends its outbound requests.
    #[serde(deserialize_with = "address::one")]
    pub listen: SocketAddr,
    /// The called services by name.
    pub upstreams: BTreeMap<String, Upstream>,
    /// Bodies larger than this are streamed once and never retried nor hedged.
    #[serde(default = "default_max_replay_body")]
    pub max_replay_body: usize,
    /// Requests carried at once, every upstream together: beyond it a request is answered 503
    /// at once instead of waiting, so the egress cannot pile up requests, and the connections
    /// and memory they hold, without bound. Each upstream has its own, lower, `max_requests`.
    #[serde(default = "default_max_requests")]
    pub max_requests: usize,
    /// TLS on the listener; absent, cleartext.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ServerTls>,
}

/// One called service: its replicas, how requests find it and the caller's policies towards it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    /// The replicas' addresses, when fixed; else `discovery` finds them.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "address::endpoints")]
    pub endpoints: Vec<SocketAddr>,
    /// Where the replicas' addresses are found and re-read (DNS, a file), instead of `endpoints`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<Discovery>,
    /// Which requests go to this service; left out, every request the other upstreams do not
    /// match (the path prefix `/`), so a sidecar with one upstream needs no `match`.
    #[serde(rename = "match", default)]
    pub route: Route,
    /// Balancing, timeouts, hedging, retries and deadline.
    #[serde(default)]
    pub policy: ClientPolicy,
    /// Routes of this service with their own timeout, hedge or deadline (Gateway API's HTTPRoute
    /// timeouts, Linkerd's per-route policy), the first match winning; each is a class of its
    /// own (docs/proxy.md, "Routes and classes").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<UpstreamRoute>,
    /// How the requests no route matches are sorted into classes, each with its own learned
    /// timeout, hedge and latency outlier models.
    #[serde(default, skip_serializing_if = "Classify::is_default")]
    pub classes: Classify,
    /// HTTP/1.1 (the default) or h2c towards the endpoints.
    #[serde(default)]
    pub protocol: Protocol,
    /// HTTP/1 connections open to each endpoint at most (in use or idle; HAProxy's server
    /// `maxconn`, Envoy's `max_connections`): an attempt that would open one more is refused
    /// locally (503 if no other endpoint takes it). h2c multiplexes its requests over one
    /// connection per endpoint.
    #[serde(default = "default_max_connections_per_endpoint")]
    pub max_connections_per_endpoint: usize,
    /// How long opening a connection to an endpoint may take, TCP and TLS handshakes together
    /// (Linkerd's outbound connect timeout, 1 s): then the attempt fails as if refused, so it is
    /// retried on another endpoint and counts towards ejection, instead of waiting out the
    /// kernel's SYN retries (about 2 minutes) on an address whose host has gone silent.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: Dur,
    /// Requests to this upstream carried at once (Envoy's per-cluster circuit breaker
    /// `max_requests`): beyond it a request is answered 503 at once, so a hung upstream takes at
    /// most this many of the egress's places and the other upstreams keep being served.
    #[serde(default = "default_upstream_max_requests")]
    pub max_requests: usize,
    /// TLS (or mTLS) towards the endpoints; absent, cleartext.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<UpstreamTls>,
}

/// One route of an upstream: which requests (`match`: a path prefix, a method) and what they
/// change of the upstream's policy. What is left out is the upstream's.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UpstreamRoute {
    /// Its name, for logs and the file's readers.
    pub name: String,
    /// The requests it is: a path prefix (whole segments: `/search` matches `/search/x`, not
    /// `/searching`; for gRPC the `/package.Service/Method` path) and, if given, a method.
    #[serde(rename = "match", default)]
    pub matches: RouteMatch,
    /// Its per-attempt timeouts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<TimeoutConfig>,
    /// Its hedging.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hedge: Option<HedgeConfig>,
    /// Its request deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Dur>,
}

impl UpstreamRoute {
    /// What the route changes of the upstream's policy.
    pub fn policy(&self) -> RoutePolicy {
        RoutePolicy { timeout: self.timeout.clone(), hedge: self.hedge.clone(), deadline: self.deadline }
    }
}

/// Automatic classes: the requests no route matches, by method and leading path segments.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Classify {
    /// The most classes found per upstream (16); the requests of any other are pooled in one.
    /// 0 pools every request no route matches.
    pub max: usize,
    /// The path segments that make a class (2): `GET /api/users` for `/api/users/42`.
    pub segments: usize,
}

impl Default for Classify {
    fn default() -> Self {
        Classify { max: DEFAULT_MAX_CLASSES, segments: 2 }
    }
}

impl Classify {
    fn is_default(&self) -> bool {
        *self == Classify::default()
    }
}

/// The most automatic classes an upstream keeps by default (`classes.max`).
pub const DEFAULT_MAX_CLASSES: usize = 16;

/// Endpoint discovery (docs/proxy.md, "Endpoint discovery"): exactly one source. DNS and a file
/// are asked every `interval`, Kubernetes is watched; the endpoints that join are added, those that
/// leave are drained, the others keep their balancer state. Like Envoy's `STRICT_DNS` and EDS
/// clusters.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Discovery {
    /// A DNS name and port, `backend.default.svc.cluster.local:8080`: every A and AAAA record is
    /// an endpoint (a Kubernetes headless service has one per ready pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<String>,
    /// A file of addresses, one `ip:port` per line (blank lines and `#` comments ignored),
    /// written by another program; replace it whole (write, then rename) so it is never read
    /// half-written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// A Kubernetes Service's EndpointSlices, watched through the API server (a proxy built with
    /// the `kube` feature).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesService>,
    /// How often `dns` or `file` is asked again (default 5s; Envoy's `dns_refresh_rate` is 5 s).
    /// Not for `kubernetes`: its watch is told of each change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Dur>,
}

/// The default `interval` of DNS and file discovery.
pub const DEFAULT_DISCOVERY_INTERVAL: Duration = Duration::from_secs(5);

impl Discovery {
    /// How often a polled source (`dns`, `file`) is asked.
    pub fn interval(&self) -> Duration {
        self.interval.map_or(DEFAULT_DISCOVERY_INTERVAL, |i| i.0)
    }

    fn validate(&self) -> Result<(), ModelError> {
        match (&self.dns, &self.file, &self.kubernetes) {
            (Some(name), None, None) => {
                let port = name
                    .rsplit_once(':')
                    .and_then(|(host, port)| port.parse::<u16>().ok().filter(|_| !host.is_empty()));
                if port.is_none() {
                    let what = format!(
                        "expected a name and a port, like backend.default.svc.cluster.local:8080, got {name:?}"
                    );
                    return Err(ModelError::at("dns", what));
                }
            }
            (None, Some(_), None) => {}
            (None, None, Some(service)) => {
                if !cfg!(feature = "kube") {
                    let why = "needs the `kube` feature, which this build of tailguard left out (build with `cargo build --release --features kube`; the image has it)";
                    return Err(ModelError::at("kubernetes", why));
                }
                service.validate().map_err(|e| e.under("kubernetes"))?;
                if self.interval.is_some() {
                    let why = "applies to `dns` and `file` only: a Kubernetes watch is told of each change";
                    return Err(ModelError::at("interval", why));
                }
            }
            _ => return Err(ModelError::at("", "expected exactly one of `dns`, `file` and `kubernetes`")),
        }
        if self.interval.is_some_and(|i| i.0.is_zero()) {
            return Err(ModelError::at("interval", "expected a positive duration"));
        }
        Ok(())
    }
}

/// A Kubernetes Service whose endpoints are the addresses of its EndpointSlices (those labelled
/// `kubernetes.io/service-name: SERVICE`) that are ready and not terminating, at one port.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq, Hash)]
#[serde(deny_unknown_fields)]
pub struct KubernetesService {
    /// The Service's name.
    pub service: String,
    /// Its namespace; left out, the proxy's own (its service account's, or the kubeconfig
    /// context's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The port: the Service port's name (`http`), or the number the endpoints listen on (its
    /// `targetPort`, `8080`).
    pub port: KubernetesPort,
}

/// A port of a Service's endpoints, by name or by number.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq, Hash)]
#[serde(untagged)]
pub enum KubernetesPort {
    /// The endpoints' port number.
    Number(u16),
    /// The name of the Service's port (EndpointSlices carry it).
    Name(String),
}

impl KubernetesService {
    fn validate(&self) -> Result<(), ModelError> {
        dns_label(&self.service).map_err(|e| ModelError::at("service", e))?;
        if let Some(namespace) = &self.namespace {
            dns_label(namespace).map_err(|e| ModelError::at("namespace", e))?;
        }
        match &self.port {
            KubernetesPort::Number(0) => {
                Err(ModelError::at("port", "expected a port name or a number from 1 to 65535"))
            }
            KubernetesPort::Number(_) => Ok(()),
            KubernetesPort::Name(name) => dns_label(name).map_err(|e| ModelError::at("port", e)),
        }
    }
}

/// A Kubernetes object or port name (an RFC 1123 label): lower-case letters, digits and `-`, at
/// most 63, starting and ending with a letter or digit.
fn dns_label(name: &str) -> Result<(), String> {
    let allowed = name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !allowed || name.is_empty() || name.len() > 63 || name.starts_with('-') || name.ends_with('-') {
        return Err(format!(
            "expected a Kubernetes name (lower-case letters, digits and '-', at most 63), got {name:?}"
        ));
    }
    Ok(())
}

/// How a request is routed to an upstream: by its Host (port ignored) or by a path prefix.
/// Host matches win over prefixes; among prefixes the longest wins.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(try_from = "RouteSpec", into = "RouteSpec")]
pub enum Route {
    /// The request's Host header (or URI authority), without its port.
    Host(String),
    /// The start of the request's path.
    PathPrefix(String),
}

impl Default for Route {
    /// Every request: the shortest prefix, so any other upstream's match wins over it.
    fn default() -> Route {
        Route::PathPrefix("/".to_string())
    }
}

/// `match` as written: exactly one of `host` and `path_prefix`.
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RouteSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path_prefix: Option<String>,
}

impl From<Route> for RouteSpec {
    fn from(route: Route) -> RouteSpec {
        match route {
            Route::Host(h) => RouteSpec { host: Some(h), path_prefix: None },
            Route::PathPrefix(p) => RouteSpec { host: None, path_prefix: Some(p) },
        }
    }
}

impl TryFrom<RouteSpec> for Route {
    type Error = String;

    fn try_from(spec: RouteSpec) -> Result<Route, String> {
        match (spec.host, spec.path_prefix) {
            (Some(h), None) if !h.is_empty() => Ok(Route::Host(h)),
            (None, Some(p)) if p.starts_with('/') => Ok(Route::PathPrefix(p)),
            (None, Some(p)) => Err(format!("expected a path_prefix starting with /, got {p:?}")),
            _ => Err("expected exactly one of `host` (a non-empty name) and `path_prefix`".to_string()),
        }
    }
}

/// The inbound listener in front of the local application.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Ingress {
    /// Where other services' requests arrive.
    #[serde(deserialize_with = "address::one")]
    pub listen: SocketAddr,
    /// The local application.
    #[serde(deserialize_with = "address::one")]
    pub app: SocketAddr,
    /// Admission control: 429 above capacity, and BLOC chips on responses.
    #[serde(default)]
    pub admission: AdmissionConfig,
    /// HTTP/1.1 (the default) or h2c towards the application.
    #[serde(default)]
    pub protocol: Protocol,
    /// HTTP/1 connections open to the application at most (in use or idle), as an upstream's
    /// `max_connections_per_endpoint`: a request that would open one more is answered 503 at
    /// once, so a hung application cannot make the ingress open a connection (and descriptor)
    /// per request in flight without bound. h2c multiplexes its requests over one connection.
    #[serde(default = "default_max_connections_per_endpoint")]
    pub max_app_connections: usize,
    /// TLS (or mTLS) towards the application, when it listens with TLS: as an upstream's `tls`,
    /// on the same code path (HTTP/2 when the application chooses `h2` by ALPN). Absent,
    /// cleartext.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_tls: Option<UpstreamTls>,
    /// The callers whose `x-tailguard-deadline-ms` and sampled `traceparent` are believed
    /// (docs/security.md): addresses or networks (`10.0.0.0/8`). From anyone else the deadline is
    /// ignored (and not passed on) and the trace is sampled afresh. Default: loopback only.
    #[serde(default = "Network::loopback")]
    pub trusted_peers: Vec<Network>,
    /// Callers believed like `trusted_peers`, wherever they connect from: a client certificate
    /// (verified against `tls.client_ca`) valid for one of these DNS names or IP addresses, or
    /// carrying one of these SPIFFE IDs as a URI SAN (`spiffe://td/ns/X/sa/Y` exactly, or
    /// `spiffe://td/ns/X/*` for every ID under that path).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trusted_identities: Vec<String>,
    /// TLS on the listener, with client certificates (mTLS) when it has a `client_ca`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ServerTls>,
    /// A network delay this ingress adds where the kernel adds none (the lab without `tc netem`):
    /// each request is held for one hop's `delay` (plus a uniform draw in [0, `jitter`)) before
    /// admission, and each response as long again after it (docs/lab.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_delay: Option<tailguard_model::schema::Network>,
}

/// An address or a network in CIDR notation (`10.0.0.0/8`, `::1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct Network {
    addr: IpAddr,
    prefix: u8,
}

impl Network {
    /// The loopback networks, `127.0.0.0/8` and `::1`: the default trusted peers.
    pub fn loopback() -> Vec<Network> {
        ["127.0.0.0/8", "::1/128"].iter().map(|n| n.parse().expect("a valid network")).collect()
    }

    /// Whether a caller at `ip` is trusted: by a client certificate proving a trusted identity
    /// (`identity`), or by its address in `trusted_peers`. The ingress believes such a caller's
    /// headers, and its listener holds it to no limit on HTTP/2 reset streams.
    pub fn trusts(trusted_peers: &[Network], ip: IpAddr, identity: bool) -> bool {
        identity || trusted_peers.iter().any(|n| n.contains(ip))
    }

    /// Whether `ip` is in this network (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let bits = |ip: IpAddr| match ip.to_canonical() {
            IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
            IpAddr::V6(v6) => (u128::from(v6), 128),
        };
        let ((net, width), (ip, ip_width)) = (bits(self.addr), bits(ip));
        let shift = u32::from(width - self.prefix);
        width == ip_width && net.checked_shr(shift).unwrap_or(0) == ip.checked_shr(shift).unwrap_or(0)
    }
}

impl std::str::FromStr for Network {
    type Err = String;

    fn from_str(text: &str) -> Result<Network, String> {
        let expected = || format!("expected an IP address or a network like 10.0.0.0/8, got {text:?}");
        let (addr, prefix) = text.split_once('/').map_or((text, None), |(a, p)| (a, Some(p)));
        let addr: IpAddr = addr.trim().parse().map_err(|_| expected())?;
        let width = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => width,
            Some(p) => p.trim().parse::<u8>().ok().filter(|p| *p <= width).ok_or_else(expected)?,
        };
        Ok(Network { addr, prefix })
    }
}

impl TryFrom<String> for Network {
    type Error = String;

    fn try_from(text: String) -> Result<Network, String> {
        text.parse()
    }
}

impl From<Network> for String {
    fn from(n: Network) -> String {
        format!("{}/{}", n.addr, n.prefix)
    }
}

/// The admin listener.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Admin {
    /// Where `/healthz`, `/metrics` and `/config` are served.
    #[serde(deserialize_with = "address::one")]
    pub listen: SocketAddr,
    /// TLS on the listener; absent, cleartext.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ServerTls>,
}

// TLS (docs/proxy.md, "TLS"): a listener's and an upstream's, as Envoy's
// `DownstreamTlsContext` and `UpstreamTlsContext`. Files are read at start-up and again when they
// change (`crate::tls`).

/// A listener's TLS: its certificate and key, and the CA its clients' certificates must chain
/// to, if it asks for them (mTLS).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ServerTls {
    /// The certificate chain (PEM), the listener's own first.
    pub cert: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The CA certificates (PEM) clients' certificates are verified against; absent, clients
    /// are not asked for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<PathBuf>,
    /// Whether a client without a certificate is refused (at the handshake); default: yes when
    /// there is a `client_ca`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_client_cert: Option<bool>,
}

impl ServerTls {
    /// Whether clients without a certificate are refused.
    pub fn requires_client_cert(&self) -> bool {
        self.require_client_cert.unwrap_or(self.client_ca.is_some())
    }

    fn validate(&self) -> Result<(), ModelError> {
        if self.require_client_cert == Some(true) && self.client_ca.is_none() {
            return Err(ModelError::at("require_client_cert", "needs a `client_ca` to verify the certificates with"));
        }
        Ok(())
    }
}

/// TLS towards an upstream's endpoints: the CA their certificates must chain to, the name they
/// must be valid for, and the proxy's own certificate if they ask for one (mTLS).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTls {
    /// The CA certificates (PEM) the endpoints' certificates are verified against.
    pub ca: PathBuf,
    /// The name (DNS name or IP address) the endpoints' certificates must be valid for, sent as
    /// SNI; absent, each endpoint's IP address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
    /// The proxy's client certificate chain (PEM), for endpoints that require one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
}

impl UpstreamTls {
    fn validate(&self) -> Result<(), ModelError> {
        if self.cert.is_some() != self.key.is_some() {
            return Err(ModelError::at("", "expected both `cert` and `key` (a client certificate), or neither"));
        }
        if let Some(name) = &self.server_name {
            identity(name).map_err(|e| ModelError::at("server_name", e))?;
        }
        Ok(())
    }
}

/// `name` as a certificate identity: a DNS name or an IP address.
pub(crate) fn identity(name: &str) -> Result<rustls_pki_types::ServerName<'static>, String> {
    rustls_pki_types::ServerName::try_from(name.to_string())
        .map_err(|_| format!("expected a DNS name or an IP address, got {name:?}"))
}

/// Why `protocol: h2c` and `tls` do not go together.
const H2C_WITH_TLS: &str =
    "h2c is cleartext: with `tls`, HTTP/2 is chosen by ALPN when the endpoints offer it (leave `protocol` out)";

fn default_max_replay_body() -> usize {
    DEFAULT_MAX_REPLAY_BODY
}

fn default_max_requests() -> usize {
    DEFAULT_MAX_REQUESTS
}

fn default_upstream_max_requests() -> usize {
    DEFAULT_UPSTREAM_MAX_REQUESTS
}

fn default_max_connections_per_endpoint() -> usize {
    DEFAULT_MAX_CONNECTIONS_PER_ENDPOINT
}

fn default_connect_timeout() -> Dur {
    Dur(DEFAULT_CONNECT_TIMEOUT)
}

impl Config {
    /// Reads, parses and validates the file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ModelError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ModelError::new(path, "", format!("cannot read the proxy config: {e}")))?;
        let mut config = Config::parse(&text, path)?;
        config.path = Some(path.to_path_buf());
        Ok(config)
    }

    /// Parses and validates `text`; `origin` is the file errors name.
    pub fn parse(text: &str, origin: &Path) -> Result<Config, ModelError> {
        let de = serde_yaml_ng::Deserializer::from_str(text);
        let mut config: Config = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let path = if path == "." { String::new() } else { path };
            let message = e.into_inner().to_string();
            // The YAML error repeats the path; the ModelError names it once.
            let message = match message.split_once(": ") {
                Some((head, rest)) if !path.is_empty() && path.starts_with(head) => rest.to_string(),
                _ => message,
            };
            ModelError::new(origin, path, plain(&message))
        })?;
        config.validate().map_err(|e| e.in_file(origin))?;
        config.source = text.to_string();
        Ok(config)
    }

    /// What a user should hear about the file: e.g. a listener's address given on an admin
    /// listener reachable from other machines.
    pub fn warnings(&self) -> Vec<String> {
        match &self.admin {
            Some(admin) if !admin.listen.ip().is_loopback() => vec![format!(
                "admin.listen {} is reachable from other machines: /config shows the whole file and /metrics every upstream (listen on 127.0.0.1 unless a scraper needs it)",
                admin.listen
            )],
            _ => Vec::new(),
        }
    }

    /// The file as YAML, which [`Config::parse`] reads back equal (less `source` and `path`).
    pub fn to_yaml(&self) -> String {
        serde_yaml_ng::to_string(self).expect("a proxy file is plain data")
    }

    /// Everything deserialisation cannot check.
    fn validate(&self) -> Result<(), ModelError> {
        if self.egress.is_none() && self.ingress.is_none() {
            return Err(ModelError::at("", "expected at least one of `egress` and `ingress`"));
        }
        if let Some(egress) = &self.egress {
            if egress.max_requests == 0 {
                return Err(ModelError::at("egress.max_requests", "expected at least 1"));
            }
            for (name, upstream) in &egress.upstreams {
                upstream.validate().map_err(|e| e.under(&format!("egress.upstreams.{name}")))?;
            }
        }
        if self.limits.max_header_bytes < crate::server::MIN_HEADER_BYTES {
            return Err(ModelError::at("limits.max_header_bytes", "expected at least 8192 bytes"));
        }
        if self.workers == Some(0) {
            return Err(ModelError::at("workers", "expected at least 1"));
        }
        if self.limits.max_connections == 0 {
            return Err(ModelError::at("limits.max_connections", "expected at least 1"));
        }
        let timeouts = [
            ("header_read_timeout", self.limits.header_read_timeout),
            ("body_read_timeout", self.limits.body_read_timeout),
            ("idle_timeout", self.limits.idle_timeout),
        ];
        for (field, d) in timeouts {
            if d.0.is_zero() {
                return Err(ModelError::at(format!("limits.{field}"), "expected a positive duration"));
            }
        }
        if let Some(ingress) = &self.ingress {
            if ingress.max_app_connections == 0 {
                return Err(ModelError::at("ingress.max_app_connections", "expected at least 1"));
            }
            validate::admission(&ingress.admission).map_err(|e| e.under("ingress.admission"))?;
            ingress.validate_tls().map_err(|e| e.under("ingress"))?;
        }
        let listeners = [
            ("egress.tls", self.egress.as_ref().and_then(|e| e.tls.as_ref())),
            ("admin.tls", self.admin.as_ref().and_then(|a| a.tls.as_ref())),
        ];
        for (field, tls) in listeners {
            tls.map(ServerTls::validate).transpose().map_err(|e| e.under(field))?;
        }
        if let Some(tracing) = &self.tracing {
            crate::trace::endpoint(&tracing.otlp_endpoint).map_err(|e| ModelError::at("tracing.otlp_endpoint", e))?;
            if !(0.0..=1.0).contains(&tracing.sample) {
                return Err(ModelError::at("tracing.sample", "expected a fraction from 0 to 1"));
            }
            if tracing.service_name.is_empty() {
                return Err(ModelError::at("tracing.service_name", "expected a non-empty name"));
            }
            if let Some(key) = tracing.resource.keys().find(|k| k.is_empty() || k.as_str() == "service.name") {
                let what = "expected attribute names other than `service.name` (set by `service_name`)";
                return Err(ModelError::at(format!("tracing.resource.{key}"), what));
            }
        }
        Ok(())
    }
}

/// Socket addresses as the file gives them: an IP address and a port. A name is not resolved at
/// load; the error says what to write instead (an upstream found by name takes `discovery`).
mod address {
    use serde::de::{Deserialize, Deserializer, Error};
    use std::net::SocketAddr;

    /// One address (a listener's, the application's).
    pub(super) fn one<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
        parsed(d, |_| String::new())
    }

    /// An upstream's endpoints.
    pub(super) fn endpoints<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<SocketAddr>, D::Error> {
        Ok(Vec::<Endpoint>::deserialize(d)?.into_iter().map(|e| e.0).collect())
    }

    struct Endpoint(SocketAddr);

    impl<'de> Deserialize<'de> for Endpoint {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let by_name =
                |text: &str| format!(" (replicas found by name: `discovery: {{dns: {text}}}` instead of `endpoints`)");
            parsed(d, by_name).map(Endpoint)
        }
    }

    /// The address in `d`; if it names a host, the error adds `hint` of the text.
    fn parsed<'de, D: Deserializer<'de>>(d: D, hint: impl FnOnce(&str) -> String) -> Result<SocketAddr, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(|_| {
            D::Error::custom(match text.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => format!(
                    "`{text}` names a host: expected an IP address and port, such as 127.0.0.1:{port}{}",
                    hint(&text)
                ),
                _ => format!("`{text}`: expected an IP address and port, such as 127.0.0.1:8080 or [::1]:8080"),
            })
        })
    }
}

/// A deserialisation message in a user's words: serde's `invalid type: sequence, expected
/// struct Egress` becomes `expected a mapping (egress settings), got a list`.
fn plain(message: &str) -> String {
    let Some(rest) = message.strip_prefix("invalid type: ") else { return message.to_string() };
    let Some((got, expected)) = rest.split_once(", expected ") else { return message.to_string() };
    let (expected, place) = expected.split_once(" at line ").map_or((expected, None), |(e, p)| (e, Some(p)));
    let got = match got {
        "sequence" => "a list",
        "map" => "a mapping",
        "unit value" => "nothing",
        other => other,
    };
    let expected = match expected.strip_prefix("struct ") {
        Some(name) => format!("a mapping ({} settings)", name.to_lowercase()),
        None => match expected {
            "a sequence" => "a list".to_string(),
            "a map" => "a mapping".to_string(),
            other => other.to_string(),
        },
    };
    match place {
        Some(place) => format!("expected {expected}, got {got}, at line {place}"),
        None => format!("expected {expected}, got {got}"),
    }
}

impl Ingress {
    fn validate_tls(&self) -> Result<(), ModelError> {
        if let Some(tls) = &self.tls {
            tls.validate().map_err(|e| e.under("tls"))?;
        }
        if let Some(tls) = &self.app_tls {
            tls.validate().map_err(|e| e.under("app_tls"))?;
            if self.protocol == Protocol::H2c {
                return Err(ModelError::at("protocol", H2C_WITH_TLS));
            }
        }
        for (i, name) in self.trusted_identities.iter().enumerate() {
            crate::tls::Identity::parse(name).map_err(|e| ModelError::at(format!("trusted_identities[{i}]"), e))?;
        }
        if !self.trusted_identities.is_empty() && self.tls.as_ref().is_none_or(|t| t.client_ca.is_none()) {
            let why = "needs `tls.client_ca`: identities are read from verified client certificates";
            return Err(ModelError::at("trusted_identities", why));
        }
        Ok(())
    }
}

impl Upstream {
    fn validate(&self) -> Result<(), ModelError> {
        match &self.discovery {
            None if self.endpoints.is_empty() => {
                return Err(ModelError::at("endpoints", "expected at least one endpoint address (or `discovery`)"));
            }
            Some(_) if !self.endpoints.is_empty() => {
                return Err(ModelError::at("", "expected one of `endpoints` and `discovery`, not both"));
            }
            Some(discovery) => discovery.validate().map_err(|e| e.under("discovery"))?,
            None => {}
        }
        if self.max_connections_per_endpoint == 0 {
            return Err(ModelError::at("max_connections_per_endpoint", "expected at least 1"));
        }
        if self.max_requests == 0 {
            return Err(ModelError::at("max_requests", "expected at least 1"));
        }
        if self.connect_timeout.0.is_zero() {
            return Err(ModelError::at("connect_timeout", "expected a positive duration"));
        }
        if let Some(tls) = &self.tls {
            tls.validate().map_err(|e| e.under("tls"))?;
            if self.protocol == Protocol::H2c {
                return Err(ModelError::at("protocol", H2C_WITH_TLS));
            }
        }
        validate::client_policy(&self.policy).map_err(|e| e.under("policy"))?;
        if let Some(name) = self.policy.routes.keys().next() {
            let why = "a proxy's routes are the upstream's `routes:` list, each with its `match`; expected none here";
            return Err(ModelError::at(format!("policy.routes.{name}"), why));
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, route) in self.routes.iter().enumerate() {
            let at = |field: &str| format!("routes.{i}{field}");
            if route.name.trim().is_empty() || !names.insert(route.name.as_str()) {
                return Err(ModelError::at(
                    at(".name"),
                    format!("expected a unique, non-empty name, got {:?}", route.name),
                ));
            }
            if !route.matches.path.starts_with('/') {
                let why = format!("expected a path prefix from the root (/search), got {:?}", route.matches.path);
                return Err(ModelError::at(at(".match.path"), why));
            }
            validate::route_policy(&route.policy()).map_err(|e| e.under(&at("")))?;
        }
        if self.classes.segments == 0 {
            return Err(ModelError::at("classes.segments", "expected at least 1"));
        }
        if self.routes.len() + self.classes.max >= usize::from(u16::MAX) {
            return Err(ModelError::at("classes.max", "expected fewer than 65535 classes with the routes"));
        }
        Ok(())
    }

    /// The upstream's policy with each route's changes under the route's name, and the routes'
    /// names in class order (class i + 1 is route i).
    pub fn routed_policy(&self) -> (ClientPolicy, Vec<String>) {
        let mut policy = self.policy.clone();
        policy.routes = self.routes.iter().map(|r| (r.name.clone(), r.policy())).collect();
        (policy, self.routes.iter().map(|r| r.name.clone()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, Path::new("proxy.yaml")).map_err(|e| e.to_string())
    }

    #[test]
    fn an_address_that_names_a_host_says_what_to_write() {
        let upstream = |endpoints: &str| {
            parse(&format!("egress:\n  listen: 127.0.0.1:4140\n  upstreams:\n    app:\n      endpoints: {endpoints}\n"))
        };
        let e = upstream("[127.0.0.1:8081, backend:8080]").unwrap_err();
        assert!(e.contains("egress.upstreams.app.endpoints[1]"), "{e}");
        assert!(
            e.contains("`backend:8080` names a host: expected an IP address and port, such as 127.0.0.1:8080"),
            "{e}"
        );
        assert!(e.contains("`discovery: {dns: backend:8080}`"), "{e}");
        let e = upstream("[8080]").unwrap_err();
        assert!(e.contains("`8080`: expected an IP address and port"), "{e}");
        assert_eq!(upstream("[\"[::1]:8081\"]").unwrap().egress.unwrap().upstreams["app"].endpoints.len(), 1);
        let e = parse("ingress: {listen: 127.0.0.1:4143, app: localhost:8080}\n").unwrap_err();
        assert!(e.contains("ingress.app: `localhost:8080` names a host"), "{e}");
        assert!(!e.contains("discovery"), "{e}");
    }

    #[test]
    fn a_full_file_parses() {
        let c = parse(
            "egress:\n  listen: 127.0.0.1:4140\n  upstreams:\n    backend:\n      endpoints: [127.0.0.1:8081, 127.0.0.1:8082]\n      match: {host: backend}\n      policy: {balancer: {kind: least-request}, timeout: {kind: fixed, value: 50ms}}\ningress:\n  listen: 127.0.0.1:4143\n  app: 127.0.0.1:8080\n  admission: {kind: fixed, capacity: 8}\nadmin: {listen: 127.0.0.1:9990}\n",
        )
        .unwrap();
        let egress = c.egress.unwrap();
        assert_eq!(egress.upstreams["backend"].endpoints.len(), 2);
        assert_eq!(egress.upstreams["backend"].route, Route::Host("backend".into()));
        assert_eq!(egress.max_replay_body, DEFAULT_MAX_REPLAY_BODY);
        assert_eq!(egress.max_requests, DEFAULT_MAX_REQUESTS);
        assert_eq!(egress.upstreams["backend"].max_connections_per_endpoint, DEFAULT_MAX_CONNECTIONS_PER_ENDPOINT);
        assert_eq!(egress.upstreams["backend"].connect_timeout, Dur(DEFAULT_CONNECT_TIMEOUT));
        assert_eq!(egress.upstreams["backend"].max_requests, DEFAULT_UPSTREAM_MAX_REQUESTS);
        let ingress = c.ingress.unwrap();
        assert_eq!(ingress.admission, AdmissionConfig::Fixed { capacity: 8 });
        assert_eq!(ingress.max_app_connections, DEFAULT_MAX_CONNECTIONS_PER_ENDPOINT);
        assert_eq!(c.workers, None);
        assert_eq!(c.tracing, None);
        let c = parse("workers: 1\negress: {listen: 127.0.0.1:1, upstreams: {}}").unwrap();
        assert_eq!(c.workers, Some(1));
    }

    #[test]
    fn a_file_written_with_to_yaml_reads_back_equal() {
        let c = parse(
            "egress:\n  listen: 127.0.0.1:4140\n  upstreams:\n    a: {endpoints: [127.0.0.1:1], match: {host: a}, protocol: h2c, policy: {timeout: {kind: adaptive}, hedge: {kind: percentile}, retry: {max_attempts: 2, backoff: 5ms}, deadline: 1s}}\n    b: {endpoints: ['[::1]:2'], match: {path_prefix: /b}, policy: {hedge: {kind: adaptive, callee_cancels: false}}}\ningress: {listen: 127.0.0.1:4143, app: 127.0.0.1:8080, admission: {kind: dynamic}}\nadmin: {listen: 127.0.0.1:9990}\nseed: 42\nworkers: 2\nshutdown_grace: 2s\nlimits: {max_connections: 10}\ntracing: {otlp_endpoint: 'http://127.0.0.1:4318', resource: {env: test}}\n",
        )
        .unwrap();
        assert_eq!(c.seed, Some(42));
        let declared = tailguard_policy::hedge::AdaptiveHedgeConfig { callee_cancels: false, ..Default::default() };
        assert_eq!(
            c.egress.as_ref().unwrap().upstreams["b"].policy.hedge,
            tailguard_model::schema::HedgeConfig::Adaptive(declared)
        );
        let again = Config::parse(&c.to_yaml(), Path::new("again.yaml")).unwrap();
        assert_eq!(Config { source: c.source.clone(), ..again }, c, "{}", c.to_yaml());
    }

    #[test]
    fn trusted_peers_are_networks_and_default_to_loopback() {
        let c = parse("ingress: {listen: 127.0.0.1:1, app: 127.0.0.1:2}").unwrap();
        let trusted = |peers: &[Network], ip: &str| peers.iter().any(|n| n.contains(ip.parse().unwrap()));
        let loopback = c.ingress.unwrap().trusted_peers;
        assert!(trusted(&loopback, "127.0.0.1") && trusted(&loopback, "127.9.9.9") && trusted(&loopback, "::1"));
        assert!(trusted(&loopback, "::ffff:127.0.0.1"));
        assert!(!trusted(&loopback, "10.0.0.1") && !trusted(&loopback, "::2"));
        let c = parse(
            "ingress: {listen: 127.0.0.1:1, app: 127.0.0.1:2, trusted_peers: [10.1.0.0/16, 192.0.2.7, 0.0.0.0/0]}",
        )
        .unwrap();
        let peers = c.ingress.unwrap().trusted_peers;
        assert!(trusted(&peers[..1], "10.1.200.3") && !trusted(&peers[..1], "10.2.0.1"));
        assert!(trusted(&peers[1..2], "192.0.2.7") && !trusted(&peers[1..2], "192.0.2.8"));
        assert!(trusted(&peers[2..], "8.8.8.8") && !trusted(&peers[2..], "::1"));
        let e = parse("ingress: {listen: 127.0.0.1:1, app: 127.0.0.1:2, trusted_peers: [10.0.0.0/33]}").unwrap_err();
        assert!(e.contains("ingress.trusted_peers") && e.contains("10.0.0.0/8"), "{e}");
    }

    #[test]
    fn a_retry_budget_defaults_to_a_fifth_and_may_be_unlimited() {
        let file = |retry: &str| {
            format!("egress: {{listen: 127.0.0.1:1, upstreams: {{a: {{endpoints: [127.0.0.1:2], match: {{host: a}}, policy: {{retry: {retry}}}}}}}}}")
        };
        let budget = |c: &Config| c.egress.as_ref().unwrap().upstreams["a"].policy.retry.budget;
        for (retry, expected) in [
            ("{max_attempts: 3}", Some(0.2)),
            ("{max_attempts: 3, budget: unlimited}", None),
            ("{max_attempts: 3, budget: 0.5}", Some(0.5)),
        ] {
            let c = parse(&file(retry)).unwrap();
            assert_eq!(budget(&c), expected, "{retry}");
            let again = Config::parse(&c.to_yaml(), Path::new("again.yaml")).unwrap();
            assert_eq!(budget(&again), expected, "{}", c.to_yaml());
        }
        let e = parse(&file("{budget: lots}")).unwrap_err();
        assert!(e.contains("policy.retry.budget") && e.contains("unlimited"), "{e}");
    }

    #[test]
    fn an_admin_listener_off_loopback_is_accepted_with_a_warning() {
        let ingress = "ingress: {listen: 127.0.0.1:1, app: 127.0.0.1:2}\n";
        assert!(parse(&format!("{ingress}admin: {{listen: 127.0.0.1:3}}")).unwrap().warnings().is_empty());
        let warnings = parse(&format!("{ingress}admin: {{listen: 0.0.0.0:3}}")).unwrap().warnings();
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].starts_with("admin.listen 0.0.0.0:3 is reachable from other machines"), "{warnings:?}");
    }

    #[test]
    fn tracing_has_defaults() {
        let c = parse(
            "ingress: {listen: 127.0.0.1:1, app: 127.0.0.1:2}\ntracing: {otlp_endpoint: 'http://127.0.0.1:4318'}",
        )
        .unwrap();
        let t = c.tracing.unwrap();
        assert_eq!((t.service_name.as_str(), t.sample), ("tailguard-proxy", 1.0));
        assert!(t.resource.is_empty());
    }

    #[test]
    fn an_upstream_without_match_takes_every_request_others_do_not() {
        let one = parse("egress: {listen: 127.0.0.1:1, upstreams: {a: {endpoints: [127.0.0.1:2]}}}").unwrap();
        assert_eq!(one.egress.unwrap().upstreams["a"].route, Route::PathPrefix("/".into()));
    }

    #[test]
    fn an_upstream_may_discover_its_endpoints_by_dns_or_in_a_file() {
        let c = parse("egress: {listen: 127.0.0.1:1, upstreams: {a: {discovery: {dns: 'backend.default.svc:8080'}}, b: {discovery: {file: /run/b.endpoints, interval: 1s}}}}").unwrap();
        let upstreams = &c.egress.as_ref().unwrap().upstreams;
        let a = upstreams["a"].discovery.as_ref().unwrap();
        assert_eq!((a.dns.as_deref(), a.interval()), (Some("backend.default.svc:8080"), Duration::from_secs(5)));
        assert!(upstreams["a"].endpoints.is_empty());
        let b = upstreams["b"].discovery.as_ref().unwrap();
        assert_eq!((b.file.as_deref(), b.interval()), (Some(Path::new("/run/b.endpoints")), Duration::from_secs(1)));
        let again = Config::parse(&c.to_yaml(), Path::new("again.yaml")).unwrap();
        assert_eq!(Config { source: c.source.clone(), ..again }, c, "{}", c.to_yaml());
        let file = |upstream: &str| format!("egress: {{listen: 127.0.0.1:1, upstreams: {{a: {upstream}}}}}");
        for (upstream, expected) in [
            ("{discovery: {dns: backend}}", "proxy.yaml: egress.upstreams.a.discovery.dns: expected a name and a port, like backend.default.svc.cluster.local:8080, got \"backend\""),
            ("{discovery: {dns: 'b:80', file: x}}", "proxy.yaml: egress.upstreams.a.discovery: expected exactly one of `dns`, `file` and `kubernetes`"),
            ("{discovery: {interval: 1s}}", "proxy.yaml: egress.upstreams.a.discovery: expected exactly one of `dns`, `file` and `kubernetes`"),
            ("{discovery: {dns: 'b:80', interval: 0s}}", "proxy.yaml: egress.upstreams.a.discovery.interval: expected a positive duration"),
            ("{endpoints: [127.0.0.1:2], discovery: {dns: 'b:80'}}", "proxy.yaml: egress.upstreams.a: expected one of `endpoints` and `discovery`, not both"),
            ("{}", "proxy.yaml: egress.upstreams.a.endpoints: expected at least one endpoint address (or `discovery`)"),
        ] {
            assert_eq!(parse(&file(upstream)).unwrap_err(), expected, "{upstream}");
        }
    }

    #[test]
    fn an_upstream_may_watch_a_kubernetes_service_when_built_with_the_kube_feature() {
        let file =
            |discovery: &str| format!("egress: {{listen: 127.0.0.1:1, upstreams: {{a: {{discovery: {discovery}}}}}}}");
        let text = file("{kubernetes: {service: backend, namespace: shop, port: http}}");
        if !cfg!(feature = "kube") {
            let expected = "proxy.yaml: egress.upstreams.a.discovery.kubernetes: needs the `kube` feature, which this build of tailguard left out (build with `cargo build --release --features kube`; the image has it)";
            assert_eq!(parse(&text).unwrap_err(), expected);
            return;
        }
        let c = parse(&text).unwrap();
        let discovery = c.egress.as_ref().unwrap().upstreams["a"].discovery.clone().unwrap();
        let service = KubernetesService {
            service: "backend".into(),
            namespace: Some("shop".into()),
            port: KubernetesPort::Name("http".into()),
        };
        assert_eq!(discovery.kubernetes, Some(service));
        let again = Config::parse(&c.to_yaml(), Path::new("again.yaml")).unwrap();
        assert_eq!(Config { source: c.source.clone(), ..again }, c, "{}", c.to_yaml());
        let by_number = parse(&file("{kubernetes: {service: backend, port: 8080}}")).unwrap();
        let service = by_number.egress.unwrap().upstreams["a"].discovery.clone().unwrap().kubernetes.unwrap();
        assert_eq!((service.namespace, service.port), (None, KubernetesPort::Number(8080)));
        for (discovery, expected) in [
            ("{kubernetes: {service: Backend, port: 80}}", ".kubernetes.service: expected a Kubernetes name (lower-case letters, digits and '-', at most 63), got \"Backend\""),
            ("{kubernetes: {service: b, namespace: '', port: 80}}", ".kubernetes.namespace: expected a Kubernetes name (lower-case letters, digits and '-', at most 63), got \"\""),
            ("{kubernetes: {service: b, port: 0}}", ".kubernetes.port: expected a port name or a number from 1 to 65535"),
            ("{kubernetes: {service: b, port: -http}}", ".kubernetes.port: expected a Kubernetes name (lower-case letters, digits and '-', at most 63), got \"-http\""),
            ("{kubernetes: {service: b, port: 80}, interval: 1s}", ".interval: applies to `dns` and `file` only: a Kubernetes watch is told of each change"),
            ("{kubernetes: {service: b, port: 80}, dns: 'b:80'}", ": expected exactly one of `dns`, `file` and `kubernetes`"),
        ] {
            let e = parse(&file(discovery)).unwrap_err();
            assert_eq!(e, format!("proxy.yaml: egress.upstreams.a.discovery{expected}"), "{discovery}");
        }
        assert!(parse(&file("{kubernetes: {service: b}}")).unwrap_err().contains("missing field `port`"));
    }

    #[test]
    fn tls_sections_read_back_equal_and_are_checked() {
        let c = parse(
            "egress: {listen: 127.0.0.1:1, upstreams: {a: {endpoints: [127.0.0.1:2], tls: {ca: ca.pem, server_name: a.mesh, cert: c.pem, key: k.pem}}}, tls: {cert: s.pem, key: sk.pem}}\ningress: {listen: 127.0.0.1:3, app: 127.0.0.1:4, app_tls: {ca: ca.pem, server_name: app.mesh}, trusted_identities: [b.mesh, 10.0.0.7, 'spiffe://mesh/ns/shop/*'], tls: {cert: s.pem, key: sk.pem, client_ca: ca.pem}}\nadmin: {listen: 127.0.0.1:5, tls: {cert: s.pem, key: sk.pem}}",
        )
        .unwrap();
        let ingress = c.ingress.as_ref().unwrap();
        assert!(ingress.tls.as_ref().unwrap().requires_client_cert());
        assert!(!c.admin.as_ref().unwrap().tls.as_ref().unwrap().requires_client_cert());
        let again = Config::parse(&c.to_yaml(), Path::new("again.yaml")).unwrap();
        assert_eq!(Config { source: c.source.clone(), ..again }, c, "{}", c.to_yaml());
        let ingress = |more: &str| format!("ingress: {{listen: 127.0.0.1:1, app: 127.0.0.1:2{more}}}");
        let e = parse(&ingress(", tls: {cert: s.pem, key: k.pem, require_client_cert: true}")).unwrap_err();
        assert!(e.contains("ingress.tls.require_client_cert") && e.contains("client_ca"), "{e}");
        let e = parse(&ingress(", tls: {cert: s.pem, key: k.pem, client_ca: ca.pem}, trusted_identities: ['a b']"))
            .unwrap_err();
        assert!(e.contains("ingress.trusted_identities[0]") && e.contains("DNS name"), "{e}");
        let e = parse(&ingress(
            ", tls: {cert: s.pem, key: k.pem, client_ca: ca.pem}, trusted_identities: ['spiffe://td/ns//sa']",
        ))
        .unwrap_err();
        assert!(e.contains("ingress.trusted_identities[0]") && e.contains("no SPIFFE ID"), "{e}");
        let upstream = |more: &str| {
            format!("egress: {{listen: 127.0.0.1:1, upstreams: {{a: {{endpoints: [127.0.0.1:2]{more}}}}}}}")
        };
        let e = parse(&upstream(", tls: {ca: ca.pem, cert: c.pem}")).unwrap_err();
        assert!(e.contains("egress.upstreams.a.tls") && e.contains("both `cert` and `key`"), "{e}");
        let e = parse(&ingress(", protocol: h2c, app_tls: {ca: ca.pem}")).unwrap_err();
        assert!(e.contains("ingress.protocol") && e.contains("chosen by ALPN"), "{e}");
        let e = parse(&ingress(", app_tls: {ca: ca.pem, key: k.pem}")).unwrap_err();
        assert!(e.contains("ingress.app_tls") && e.contains("both `cert` and `key`"), "{e}");
        let e = parse(&upstream(", protocol: h2c, tls: {ca: ca.pem}")).unwrap_err();
        assert!(e.contains("egress.upstreams.a.protocol") && e.contains("chosen by ALPN"), "{e}");
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        let e =
            parse("egress: {listen: 127.0.0.1:1, upstreams: {a: {endpoints: [nope], match: {host: a}}}}").unwrap_err();
        assert!(e.starts_with("proxy.yaml: egress.upstreams.a.endpoints"), "{e}");
        let e = parse("egress: {listen: 127.0.0.1:1, upstreams: {a: {endpoints: [], match: {host: a}}}}").unwrap_err();
        assert!(e.contains("egress.upstreams.a.endpoints") && e.contains("at least one"), "{e}");
        let e = parse("ingress: {listen: 127.0.0.1:1, app: 127.0.0.1:2, admission: {kind: fixed, capacity: 0}}")
            .unwrap_err();
        assert!(e.contains("ingress.admission.capacity"), "{e}");
        let e =
            parse("egress: {listen: 127.0.0.1:1, upstreams: {a: {endpoints: [127.0.0.1:2], match: {path_prefix: x}}}}")
                .unwrap_err();
        assert!(e.contains("egress.upstreams.a.match: expected a path_prefix starting with /"), "{e}");
        let ingress = "ingress: {listen: 127.0.0.1:1, app: 127.0.0.1:2}\n";
        let e = parse(&format!("{ingress}tracing: {{otlp_endpoint: 'localhost:4318'}}")).unwrap_err();
        assert!(e.contains("tracing.otlp_endpoint") && e.contains("http://"), "{e}");
        let e = parse(&format!("{ingress}tracing: {{otlp_endpoint: 'http://127.0.0.1:4318', sample: 2}}")).unwrap_err();
        assert!(e.contains("tracing.sample"), "{e}");
        let e = parse(&format!(
            "{ingress}tracing: {{otlp_endpoint: 'http://127.0.0.1:4318', resource: {{service.name: x}}}}"
        ))
        .unwrap_err();
        assert!(e.contains("tracing.resource.service.name"), "{e}");
        let e = parse("workers: 0\negress: {listen: 127.0.0.1:1, upstreams: {}}").unwrap_err();
        assert_eq!(e, "proxy.yaml: workers: expected at least 1");
        let e = parse("egress: {listen: 127.0.0.1:1, upstreams: {}, max_requests: 0}").unwrap_err();
        assert_eq!(e, "proxy.yaml: egress.max_requests: expected at least 1");
        let e = parse("egress: {listen: 127.0.0.1:1, upstreams: {a: {endpoints: [127.0.0.1:2], max_connections_per_endpoint: 0}}}")
            .unwrap_err();
        assert_eq!(e, "proxy.yaml: egress.upstreams.a.max_connections_per_endpoint: expected at least 1");
        let e = parse("egress: {listen: 127.0.0.1:1, upstreams: {a: {endpoints: [127.0.0.1:2], max_requests: 0}}}")
            .unwrap_err();
        assert_eq!(e, "proxy.yaml: egress.upstreams.a.max_requests: expected at least 1");
        let e = parse("ingress: {listen: 127.0.0.1:1, app: 127.0.0.1:2, max_app_connections: 0}").unwrap_err();
        assert_eq!(e, "proxy.yaml: ingress.max_app_connections: expected at least 1");
        let e = parse("egress: {listen: 127.0.0.1:1, upstreams: {a: {endpoints: [127.0.0.1:2], connect_timeout: 0s}}}")
            .unwrap_err();
        assert_eq!(e, "proxy.yaml: egress.upstreams.a.connect_timeout: expected a positive duration");
        let e = parse("egress: [127.0.0.1:1]").unwrap_err();
        assert_eq!(e, "proxy.yaml: egress: expected a mapping (egress settings), got a list, at line 1 column 9");
        let e = parse("egress: {listen: 127.0.0.1:1, upstreams: [a, b]}").unwrap_err();
        assert!(e.starts_with("proxy.yaml: egress.upstreams: expected a mapping, got a list"), "{e}");
        let e = parse("egress: {listen: 127.0.0.1:1\n").unwrap_err();
        assert!(e.starts_with("proxy.yaml: ") && e.contains("line"), "{e}");
        let e = parse("admin: {listen: 127.0.0.1:1}").unwrap_err();
        assert!(e.contains("at least one of `egress` and `ingress`"), "{e}");
    }
}
