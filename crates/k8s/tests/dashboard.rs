//! deploy/grafana/tailguard.json parses and its queries use only metrics a running proxy exports
//! (read from its /metrics over 127.0.0.1), so a renamed metric cannot leave a dashboard panel
//! silently empty.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use tailguard_proxy::{Config, Proxy};

/// The metric names a proxy with an egress upstream and an ingress exports, histograms and
/// counters by their series names (`_bucket`, `_total`, ...). Every upstream's series exist from
/// the start, so no traffic is needed.
fn exported() -> BTreeSet<String> {
    let file = "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc: {endpoints: [127.0.0.1:9], policy: {timeout: {kind: adaptive}, hedge: {kind: percentile}}}\ningress: {listen: 127.0.0.1:0, app: 127.0.0.1:9}\nadmin: {listen: 127.0.0.1:0}\nshutdown_grace: 1s\n";
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let proxy = runtime.block_on(Proxy::start(Config::parse(file, Path::new("t.yaml")).unwrap())).unwrap();
    let mut stream = TcpStream::connect(proxy.admin.unwrap()).unwrap();
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    runtime.block_on(proxy.shutdown());
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let names = text.lines().filter(|l| l.starts_with("tailguard_"));
    names.map(|l| l.split(['{', ' ']).next().unwrap().to_string()).collect()
}

/// Every `tailguard_*` name in the dashboard's queries and variables.
fn referenced(dashboard: &serde_json::Value) -> BTreeSet<String> {
    let mut texts = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            texts.push(target["expr"].as_str().unwrap().to_string());
        }
    }
    for var in dashboard["templating"]["list"].as_array().unwrap() {
        texts.extend(var["definition"].as_str().map(str::to_string));
    }
    let mut names = BTreeSet::new();
    for text in texts {
        let mut rest = text.as_str();
        while let Some(at) = rest.find("tailguard_") {
            let tail = &rest[at..];
            let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
            names.insert(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    names
}

#[test]
fn the_dashboard_queries_only_metrics_the_proxy_exports() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana/tailguard.json");
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(dashboard["uid"], "tailguard-proxy");
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(panels.iter().all(|p| !p["targets"].as_array().unwrap().is_empty()), "a panel without a query");
    let exported = exported();
    assert!(exported.contains("tailguard_egress_request_seconds_bucket"), "{exported:?}");
    let referenced = referenced(&dashboard);
    let unknown: Vec<&String> = referenced.difference(&exported).collect();
    assert!(unknown.is_empty(), "the dashboard queries {unknown:?}, which the proxy does not export ({exported:?})");
    // Both sides of the proxy are on the dashboard.
    assert!(referenced.iter().any(|n| n.starts_with("tailguard_egress_")));
    assert!(referenced.iter().any(|n| n.starts_with("tailguard_ingress_")));
}
