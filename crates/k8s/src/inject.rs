//! `tailguard inject`: the tailguard sidecar added to every workload of a manifest stream
//! (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob, Pod, and those inside a `List`),
//! with a ConfigMap holding its file; every other document is written back as it was.
//!
//! Injecting is idempotent: a pod template that already has the sidecar is left alone, so
//! `inject(inject(x)) == inject(x)`. A workload or pod template annotated
//! `tailguard.io/inject: disabled` is left alone too.
//!
//! The application is pointed at the egress without iptables: every application container gets
//! `TAILGUARD_EGRESS=http://127.0.0.1:4140` to send its calls to, and with
//! [`InjectOptions::http_proxy`] also `HTTP_PROXY` (the egress routes by the Host header, so an
//! HTTP client that honours `HTTP_PROXY` needs no change at all). Variables a container sets
//! itself are kept.

use crate::manifest::{self, ManifestError};
use crate::sidecar::{self, ANNOTATION_APP_PORT, ANNOTATION_CONFIG, ANNOTATION_INJECT, CONTAINER, FILE_KEY};
use serde_yaml_ng::{Mapping, Value};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use tailguard_proxy::config::{Admin, Config, Egress, Ingress, Network};
use tailguard_proxy::config::{DEFAULT_MAX_CONNECTIONS_PER_ENDPOINT, DEFAULT_MAX_REPLAY_BODY, DEFAULT_MAX_REQUESTS};

/// How workloads are injected.
#[derive(Clone, Debug)]
pub struct InjectOptions {
    /// The image of the sidecar (one with the `tailguard` binary).
    pub image: String,
    /// The sidecar file every injected pod gets (`--config`); `None`: one generated per workload,
    /// with an ingress in front of the application's port and an egress without upstreams.
    pub proxy_file: Option<Config>,
    /// The callers whose deadline and trace headers the generated ingress believes
    /// (docs/security.md); the proxy's default is loopback only.
    pub trusted_peers: Vec<Network>,
    /// Whether application containers also get `HTTP_PROXY`, `http_proxy` and `NO_PROXY`.
    pub http_proxy: bool,
}

impl Default for InjectOptions {
    fn default() -> InjectOptions {
        InjectOptions {
            image: crate::DEFAULT_IMAGE.to_string(),
            proxy_file: None,
            trusted_peers: Network::loopback(),
            http_proxy: false,
        }
    }
}

/// Injects every workload of the YAML stream `text` (read from `origin`, which errors name).
pub fn inject(text: &str, origin: &str, options: &InjectOptions) -> Result<String, ManifestError> {
    let mut out = Vec::new();
    for (number, mut doc) in manifest::read_numbered(text, origin)? {
        let added = inject_document(&mut doc, options);
        let added = added.map_err(|message| ManifestError::new(origin, number, Some(&doc), message))?;
        out.push(doc);
        out.extend(added);
    }
    Ok(manifest::write(&out))
}

/// Injects one document (a `List`'s items each), returning the ConfigMaps it needs.
fn inject_document(doc: &mut Value, options: &InjectOptions) -> Result<Vec<Value>, String> {
    if kind(doc) == "List" {
        let items = doc.get_mut("items").and_then(Value::as_sequence_mut).ok_or("expected a List's `items`")?;
        let mut added = Vec::new();
        for (i, item) in items.iter_mut().enumerate() {
            let what = manifest::describe(item);
            added.extend(inject_workload(item, options).map_err(|e| format!("items[{i}] ({what}): {e}"))?);
        }
        items.extend(added);
        return Ok(Vec::new());
    }
    Ok(inject_workload(doc, options)?.into_iter().collect())
}

/// The path from a workload to its pod template; `None` for a document that is no workload.
fn template_path(kind: &str) -> Option<&'static [&'static str]> {
    match kind {
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" => Some(&["spec", "template"]),
        "CronJob" => Some(&["spec", "jobTemplate", "spec", "template"]),
        "Pod" => Some(&[]),
        _ => None,
    }
}

/// Injects one workload; returns its ConfigMap when one is generated.
fn inject_workload(doc: &mut Value, options: &InjectOptions) -> Result<Option<Value>, String> {
    let Some(path) = template_path(kind(doc)) else { return Ok(None) };
    let name = doc["metadata"]["name"].as_str().ok_or("expected `metadata.name`")?.to_string();
    let namespace = doc["metadata"]["namespace"].as_str().map(str::to_string);
    let workload_annotations = annotations(doc);
    let mut pod = &mut *doc;
    for key in path {
        pod = pod.get_mut(*key).ok_or_else(|| format!("expected a pod template at `{}`", path.join(".")))?;
    }
    // The pod template's annotations win over the workload's.
    let mut notes = workload_annotations;
    notes.extend(annotations(pod));
    if notes.get(ANNOTATION_INJECT).map(String::as_str) == Some("disabled") {
        return Ok(None);
    }
    let at = if path.is_empty() { "spec".to_string() } else { format!("{}.spec", path.join(".")) };
    let spec = pod.get_mut("spec").and_then(Value::as_mapping_mut).ok_or(format!("expected a pod spec at `{at}`"))?;
    if injected(spec) {
        return Ok(None);
    }
    let (config_map, file) = match notes.get(ANNOTATION_CONFIG) {
        Some(own) => (own.clone(), None),
        None => (format!("{name}-tailguard"), Some(proxy_file(options, app_port(spec, &notes)?))),
    };
    let egress = format!("http://{}", sidecar::egress_listen());
    let mut env = vec![("TAILGUARD_EGRESS", egress.clone())];
    if options.http_proxy {
        let no_proxy = "localhost,127.0.0.1,::1".to_string();
        env.extend([("HTTP_PROXY", egress.clone()), ("http_proxy", egress), ("NO_PROXY", no_proxy)]);
    }
    let container = sidecar::container(&options.image, FILE_KEY);
    sidecar::add_to_spec(spec, container, sidecar::volume(&config_map), &env).map_err(|e| format!("{at}: {e}"))?;
    sidecar::add_scrape_annotations(pod)?;
    Ok(file.map(|f| sidecar::config_map(&config_map, namespace.as_deref(), &[(FILE_KEY.to_string(), f.to_yaml())])))
}

/// Whether a pod spec already runs the sidecar.
fn injected(spec: &Mapping) -> bool {
    ["initContainers", "containers"]
        .iter()
        .filter_map(|k| spec.get(*k).and_then(Value::as_sequence))
        .flatten()
        .any(|c| c.get("name").and_then(Value::as_str) == Some(CONTAINER))
}

/// The application's port: the annotation's, else the first container's first `containerPort`.
fn app_port(spec: &Mapping, notes: &BTreeMap<String, String>) -> Result<Option<u16>, String> {
    if let Some(port) = notes.get(ANNOTATION_APP_PORT) {
        let port = port.parse::<u16>().ok().filter(|p| *p > 0);
        return port.map(Some).ok_or(format!("expected a port number in the annotation {ANNOTATION_APP_PORT}"));
    }
    let first = spec.get("containers").and_then(|c| c.get(0)).and_then(|c| c.get("ports")).and_then(|p| p.get(0));
    Ok(first.and_then(|p| p.get("containerPort")).and_then(Value::as_u64).and_then(|p| u16::try_from(p).ok()))
}

/// The sidecar's file: the one given, else an ingress in front of `app_port` (when known), an
/// egress without upstreams (the application's calls are answered 404 until upstreams are
/// configured) and the admin listener.
fn proxy_file(options: &InjectOptions, app_port: Option<u16>) -> Config {
    if let Some(file) = &options.proxy_file {
        return file.clone();
    }
    let ingress = app_port.map(|port| Ingress {
        listen: sidecar::ingress_listen(),
        app: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
        admission: Default::default(),
        protocol: Default::default(),
        trusted_peers: options.trusted_peers.clone(),
        network_delay: None,
        tls: None,
        trusted_identities: Vec::new(),
        max_app_connections: DEFAULT_MAX_CONNECTIONS_PER_ENDPOINT,
        app_tls: None,
    });
    let egress = Egress {
        listen: sidecar::egress_listen(),
        upstreams: BTreeMap::new(),
        max_replay_body: DEFAULT_MAX_REPLAY_BODY,
        max_requests: DEFAULT_MAX_REQUESTS,
        tls: None,
    };
    Config {
        ingress,
        egress: Some(egress),
        admin: Some(Admin { listen: sidecar::admin_listen(), tls: None }),
        ..Config::default()
    }
}

/// Checks that a sidecar file given with `--config` listens where the injected pod expects:
/// the egress on port 4140, the ingress on 4143, the admin listener on 9990 of every address
/// (the kubelet probes it).
pub fn check_sidecar_file(config: &Config) -> Result<(), String> {
    let port = |field: &str, addr: SocketAddr, want: u16| match addr.port() == want {
        true => Ok(()),
        false => Err(format!("{field}: expected port {want} (the injected pod's), got {addr}")),
    };
    if let Some(egress) = &config.egress {
        port("egress.listen", egress.listen, sidecar::EGRESS_PORT)?;
    }
    if let Some(ingress) = &config.ingress {
        port("ingress.listen", ingress.listen, sidecar::INGRESS_PORT)?;
    }
    match &config.admin {
        Some(admin) if admin.listen == sidecar::admin_listen() => Ok(()),
        Some(admin) => Err(format!(
            "admin.listen: expected {} (the kubelet probes it), got {}",
            sidecar::admin_listen(),
            admin.listen
        )),
        None => Err(format!("admin: expected `listen: {}` (the kubelet probes it)", sidecar::admin_listen())),
    }
}

fn kind(doc: &Value) -> &str {
    doc.get("kind").and_then(Value::as_str).unwrap_or("")
}

/// A document's `metadata.annotations` with string values.
fn annotations(doc: &Value) -> BTreeMap<String, String> {
    let notes = doc.get("metadata").and_then(|m| m.get("annotations")).and_then(Value::as_mapping);
    let pairs =
        notes.into_iter().flatten().filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.as_str()?.to_string())));
    pairs.collect()
}
