//! Endpoints from Kubernetes (the `kube` feature): a Service's EndpointSlices
//! (`discovery.k8s.io/v1`, labelled `kubernetes.io/service-name`) watched through the API server
//! with kube-rs's reflector; each change is one answer to [`discovery::apply`], the path DNS and
//! files take (endpoints that join are added, those that leave drained, the others kept).
//!
//! An endpoint is taken when it is ready and not terminating (a `ready` left out counts as ready,
//! as the API says), by its first address (the others name the same pod), at the TCP port the
//! file names. Slices of FQDN addresses are skipped.
//!
//! The client reads the kubeconfig when `KUBECONFIG` is set, else the pod's service account (the
//! in-cluster configuration); it needs `get`, `list` and `watch` on `endpointslices` in the
//! Service's namespace (docs/deploy.md). A watch that fails is retried with kube-rs's backoff;
//! each failure is logged and counted, and the last set is kept.

use super::discovery::{self, Answer};
use super::routes::Upstream;
use crate::config::{KubernetesPort, KubernetesService};
use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::config::KubeConfigOptions;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{reflector, WatchStreamExt};
use kube::{Api, Client, Config};
use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How often a watch that hears nothing checks that its upstream is still in use, and how long
/// a client that could not be configured waits before it tries again.
const LIVENESS: Duration = Duration::from_secs(5);

/// Watches `service`'s EndpointSlices and applies each change to `upstream`, until the upstream
/// is gone.
pub(super) async fn run(upstream: Weak<Upstream>, service: KubernetesService) {
    let port = match &service.port {
        KubernetesPort::Number(n) => n.to_string(),
        KubernetesPort::Name(name) => name.clone(),
    };
    let client = loop {
        let answer = client().await;
        let Some(strong) = upstream.upgrade() else { return };
        match answer {
            Ok(client) => break client,
            Err(e) => discovery::apply(&strong, &format!("kubernetes service {}", service.service), Err(e)),
        }
        drop(strong);
        tokio::time::sleep(LIVENESS).await;
    };
    let namespace = service.namespace.clone().unwrap_or_else(|| client.default_namespace().to_string());
    let source = format!("kubernetes service {namespace}/{} port {port}", service.service);
    let api: Api<EndpointSlice> = Api::namespaced(client, &namespace);
    let selector = format!("kubernetes.io/service-name={}", service.service);
    let (slices, writer) = reflector::store();
    let events = watcher::watcher(api, watcher::Config::default().labels(&selector)).default_backoff().reflect(writer);
    let mut events = std::pin::pin!(events);
    let mut liveness = tokio::time::interval(LIVENESS);
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            _ = liveness.tick() => {
                if upstream.strong_count() == 0 {
                    return;
                }
                continue;
            }
        };
        let answer: Answer = match event {
            // The store holds the whole list once it is done (and after each later change).
            Some(Ok(Event::InitDone | Event::Apply(_) | Event::Delete(_))) => {
                Ok(endpoints(&slices.state(), &service.port))
            }
            Some(Ok(Event::Init | Event::InitApply(_))) => continue,
            Some(Err(e)) => Err(format!("an error: {e}")),
            // A watcher retries for ever: its stream does not end.
            None => return,
        };
        let Some(upstream) = upstream.upgrade() else { return };
        discovery::apply(&upstream, &source, answer);
    }
}

/// A client configured from `KUBECONFIG` when it is set, else in-cluster.
async fn client() -> Result<Client, String> {
    let config = if std::env::var_os("KUBECONFIG").is_some() {
        let config = Config::from_kubeconfig(&KubeConfigOptions::default()).await;
        config.map_err(|e| format!("no client from KUBECONFIG: {e}"))?
    } else {
        let config = Config::incluster();
        config.map_err(|e| format!("no in-cluster client (outside a pod, set KUBECONFIG): {e}"))?
    };
    Client::try_from(config).map_err(|e| format!("no client: {e}"))
}

/// The addresses of the ready, not terminating endpoints of `slices` at `port`.
fn endpoints(slices: &[Arc<EndpointSlice>], port: &KubernetesPort) -> BTreeSet<SocketAddr> {
    let mut set = BTreeSet::new();
    for slice in slices.iter().filter(|s| s.address_type == "IPv4" || s.address_type == "IPv6") {
        let tcp = slice.ports.iter().flatten().filter(|p| p.protocol.as_deref().is_none_or(|p| p == "TCP"));
        let mut named = tcp.filter(|p| match port {
            KubernetesPort::Number(n) => p.port == Some(i32::from(*n)),
            KubernetesPort::Name(name) => p.name.as_ref() == Some(name),
        });
        let Some(number) = named.next().and_then(|p| p.port).and_then(|p| u16::try_from(p).ok()) else { continue };
        for endpoint in slice.endpoints.iter().flatten() {
            let conditions = endpoint.conditions.as_ref();
            let ready = conditions.and_then(|c| c.ready).unwrap_or(true);
            let terminating = conditions.and_then(|c| c.terminating).unwrap_or(false);
            let ip = endpoint.addresses.first().and_then(|a| a.parse::<IpAddr>().ok());
            if let Some(ip) = ip.filter(|_| ready && !terminating) {
                set.insert(SocketAddr::new(ip, number));
            }
        }
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(json: &str) -> Arc<EndpointSlice> {
        Arc::new(serde_json::from_str(json).unwrap())
    }

    #[test]
    fn ready_endpoints_at_the_named_or_numbered_tcp_port_are_taken() {
        let slices = [
            slice(
                r#"{"metadata": {"name": "web-a"}, "addressType": "IPv4",
                    "ports": [{"name": "metrics", "port": 9090}, {"name": "http", "port": 8080, "protocol": "TCP"}],
                    "endpoints": [
                        {"addresses": ["10.0.0.1", "10.9.9.9"], "conditions": {"ready": true}},
                        {"addresses": ["10.0.0.2"]},
                        {"addresses": ["10.0.0.3"], "conditions": {"ready": false}},
                        {"addresses": ["10.0.0.4"], "conditions": {"ready": true, "terminating": true}}
                    ]}"#,
            ),
            slice(
                r#"{"metadata": {"name": "web-b"}, "addressType": "IPv6",
                    "ports": [{"name": "http", "port": 8080}, {"name": "dns", "port": 53, "protocol": "UDP"}],
                    "endpoints": [{"addresses": ["fd00::5"], "conditions": {"ready": true}}]}"#,
            ),
            slice(
                r#"{"metadata": {"name": "web-c"}, "addressType": "FQDN", "ports": [{"name": "http", "port": 8080}],
                    "endpoints": [{"addresses": ["web.example.com"]}]}"#,
            ),
            // No ports yet: nothing to call.
            slice(
                r#"{"metadata": {"name": "web-d"}, "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.7"]}]}"#,
            ),
        ];
        let addrs = |list: &[&str]| list.iter().map(|a| a.parse().unwrap()).collect::<BTreeSet<SocketAddr>>();
        let http = addrs(&["10.0.0.1:8080", "10.0.0.2:8080", "[fd00::5]:8080"]);
        assert_eq!(endpoints(&slices, &KubernetesPort::Name("http".into())), http);
        assert_eq!(endpoints(&slices, &KubernetesPort::Number(8080)), http);
        assert_eq!(endpoints(&slices, &KubernetesPort::Number(9090)), addrs(&["10.0.0.1:9090", "10.0.0.2:9090"]));
        assert_eq!(endpoints(&slices, &KubernetesPort::Number(53)), BTreeSet::new());
        assert_eq!(endpoints(&slices, &KubernetesPort::Name("grpc".into())), BTreeSet::new());
    }
}
