//! What a pod gets to run the tailguard sidecar: the proxy as a native sidecar (an init
//! container with `restartPolicy: Always`, Kubernetes 1.29+, so it starts before the application
//! and stops after it, Jobs included), its file from a ConfigMap volume, its ports and probes,
//! and Prometheus scrape annotations.
//!
//! The sidecar's listeners use the lab's ports (`tailguard_lab::plan`): the application calls
//! out through the egress on 127.0.0.1:4140, other pods reach it through the ingress on :4143,
//! and the admin listener on :9990 answers the kubelet's probes and Prometheus.

use crate::manifest::{child, list, template};
use serde_yaml_ng::{Mapping, Value};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
pub use tailguard_lab::plan::{ADMIN_PORT, EGRESS_PORT, INGRESS_PORT};

/// The sidecar container's name, by which an injected pod is recognised.
pub const CONTAINER: &str = "tailguard-proxy";
/// The pod volume holding the sidecar's file.
pub const VOLUME: &str = "tailguard-config";
/// Where the volume is mounted in the sidecar.
pub const MOUNT: &str = "/etc/tailguard";
/// The ConfigMap key of an injected pod's file.
pub const FILE_KEY: &str = "proxy.yaml";

/// `disabled` on a workload or its pod template leaves it uninjected.
pub const ANNOTATION_INJECT: &str = "tailguard.io/inject";
/// The name of a ConfigMap of one's own holding the sidecar's file under `proxy.yaml`; then no
/// ConfigMap is generated.
pub const ANNOTATION_CONFIG: &str = "tailguard.io/config";
/// The application's port, when its first container's first `containerPort` is not it.
pub const ANNOTATION_APP_PORT: &str = "tailguard.io/app-port";

/// Where the egress listens, as the application is told in `TAILGUARD_EGRESS`.
pub fn egress_listen() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), EGRESS_PORT)
}

/// Where the ingress listens: every address of the pod, so other pods reach it.
pub fn ingress_listen() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), INGRESS_PORT)
}

/// Where the admin listener listens: every address of the pod, for the kubelet's probes and
/// Prometheus (its `/config` then shows the file to the pod network: it holds no secret).
pub fn admin_listen() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), ADMIN_PORT)
}

/// The sidecar container running `image`, reading `file` under [`MOUNT`] (`$(POD_NAME)` in it is
/// the pod's name, expanded by the kubelet).
pub fn container(image: &str, file: &str) -> Value {
    let mut c = template(&format!(
        r#"
name: {CONTAINER}
image: IMAGE
restartPolicy: Always
args: [proxy, --config, "{MOUNT}/{file}"]
env:
  - name: POD_NAME
    valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}
ports:
  - {{name: tg-ingress, containerPort: {INGRESS_PORT}, protocol: TCP}}
  - {{name: tg-admin, containerPort: {ADMIN_PORT}, protocol: TCP}}
startupProbe:
  httpGet: {{path: /healthz, port: tg-admin}}
  periodSeconds: 1
  failureThreshold: 30
readinessProbe:
  httpGet: {{path: /healthz, port: tg-admin}}
  periodSeconds: 5
livenessProbe:
  httpGet: {{path: /healthz, port: tg-admin}}
  periodSeconds: 10
  failureThreshold: 3
resources:
  requests: {{cpu: 100m, memory: 32Mi}}
  limits: {{memory: 256Mi}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {{drop: [ALL]}}
volumeMounts:
  - {{name: {VOLUME}, mountPath: {MOUNT}, readOnly: true}}
"#
    ));
    c["image"] = Value::String(image.to_string());
    c
}

/// The volume of the ConfigMap `name`.
pub fn volume(config_map: &str) -> Value {
    let mut v = template(&format!("name: {VOLUME}\nconfigMap: {{name: NAME}}\n"));
    v["configMap"]["name"] = Value::String(config_map.to_string());
    v
}

/// A ConfigMap `name` (in `namespace`, if given) holding `files` (key, text).
pub fn config_map(name: &str, namespace: Option<&str>, files: &[(String, String)]) -> Value {
    let mut cm = template("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: NAME}\ndata: {}\n");
    cm["metadata"]["name"] = Value::String(name.to_string());
    if let Some(ns) = namespace {
        cm["metadata"]["namespace"] = Value::String(ns.to_string());
    }
    for (key, text) in files {
        cm["data"][key.as_str()] = Value::String(text.clone());
    }
    cm
}

/// Adds the sidecar to a pod spec: `sidecar` first among the init containers (so init
/// containers after it can call out through it), the volume, and `env` on every application
/// container that does not set those variables itself.
pub fn add_to_spec(spec: &mut Mapping, sidecar: Value, volume: Value, env: &[(&str, String)]) -> Result<(), String> {
    list(spec, "initContainers").ok_or("expected `initContainers` to be a list")?.insert(0, sidecar);
    list(spec, "volumes").ok_or("expected `volumes` to be a list")?.push(volume);
    let containers = list(spec, "containers").ok_or("expected `containers` to be a list")?;
    for container in containers.iter_mut().filter(|_| !env.is_empty()) {
        let vars = list(container.as_mapping_mut().ok_or("expected each container to be a mapping")?, "env")
            .ok_or("expected a container's `env` to be a list")?;
        for (name, value) in env {
            if !vars.iter().any(|v| v.get("name").and_then(Value::as_str) == Some(name)) {
                let mut var = template("{name: N, value: V}");
                (var["name"], var["value"]) = (Value::String(name.to_string()), Value::String(value.clone()));
                vars.push(var);
            }
        }
    }
    Ok(())
}

/// Prometheus's scrape annotations for the admin listener, unless the pod already has
/// `prometheus.io/*` annotations (the application's own metrics: one port per pod in that
/// convention, and the user's choice wins).
pub fn add_scrape_annotations(pod: &mut Value) -> Result<(), String> {
    let metadata = pod.as_mapping_mut().and_then(|pod| child(pod, "metadata"));
    let metadata = metadata.ok_or("expected `metadata` to be a mapping")?;
    let annotations = child(metadata, "annotations").ok_or("expected `metadata.annotations` to be a mapping")?;
    if annotations.keys().any(|k| k.as_str().is_some_and(|k| k.starts_with("prometheus.io/"))) {
        return Ok(());
    }
    for (key, value) in [("scrape", "true".to_string()), ("port", ADMIN_PORT.to_string()), ("path", "/metrics".into())]
    {
        annotations.insert(format!("prometheus.io/{key}").into(), value.into());
    }
    Ok(())
}
