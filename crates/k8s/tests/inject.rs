//! `tailguard inject` on sample manifests, with exact expectations.

use serde_yaml_ng::Value;
use std::path::Path;
use tailguard_k8s::{inject, manifest, InjectOptions};
use tailguard_proxy::config::Config;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)).unwrap()
}

fn docs(text: &str) -> Vec<Value> {
    manifest::read(text, "out").unwrap()
}

fn injected(text: &str) -> Vec<Value> {
    docs(&inject(text, "in.yaml", &InjectOptions::default()).unwrap())
}

fn names(list: &Value) -> Vec<&str> {
    list.as_sequence().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect()
}

/// The sidecar's file in a generated ConfigMap, read as the proxy reads it.
fn proxy_file(config_map: &Value) -> Config {
    Config::parse(config_map["data"]["proxy.yaml"].as_str().unwrap(), Path::new("proxy.yaml")).unwrap()
}

#[test]
fn a_deployment_gets_one_native_sidecar_its_config_map_and_scrape_annotations() {
    let input = docs(&fixture("app.yaml"));
    let out = injected(&fixture("app.yaml"));
    // Deployment, its new ConfigMap, the Service, the CronJob, the Pod.
    let kinds: Vec<&str> = out.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["Deployment", "ConfigMap", "Service", "CronJob", "Pod"]);

    let pod = &out[0]["spec"]["template"];
    let sidecar = &pod["spec"]["initContainers"][0];
    assert_eq!(names(&pod["spec"]["initContainers"]), ["tailguard-proxy"]);
    assert_eq!(sidecar["restartPolicy"], "Always");
    assert_eq!(sidecar["image"].as_str(), Some(tailguard_k8s::DEFAULT_IMAGE));
    let args: Value = serde_yaml_ng::from_str("[proxy, --config, /etc/tailguard/proxy.yaml]").unwrap();
    assert_eq!(sidecar["args"], args);
    assert_eq!(sidecar["startupProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(sidecar["volumeMounts"][0]["mountPath"], "/etc/tailguard");
    assert_eq!(names(&pod["spec"]["volumes"]), ["tailguard-config"]);
    assert_eq!(pod["spec"]["volumes"][0]["configMap"]["name"], "web-tailguard");
    // The application keeps its variables and learns where the egress is.
    let env: Vec<(&str, &str)> = pod["spec"]["containers"][0]["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v["value"].as_str().unwrap()))
        .collect();
    assert_eq!(env, [("LOG_LEVEL", "info"), ("TAILGUARD_EGRESS", "http://127.0.0.1:4140")]);
    let notes = &pod["metadata"]["annotations"];
    assert_eq!((&notes["prometheus.io/scrape"], &notes["prometheus.io/port"]), (&"true".into(), &"9990".into()));
    assert_eq!(notes["prometheus.io/path"], "/metrics");
    // Everything else of the Deployment is as it was.
    let mut without = out[0].clone();
    without["spec"]["template"] = input[0]["spec"]["template"].clone();
    assert_eq!(without, input[0]);

    // The ConfigMap, in the workload's namespace, holds a file the proxy reads: the ingress in
    // front of the application's port, the egress on loopback, the admin listener for probes.
    let cm = &out[1];
    assert_eq!(
        (cm["metadata"]["name"].as_str(), cm["metadata"]["namespace"].as_str()),
        (Some("web-tailguard"), Some("shop"))
    );
    let file = proxy_file(cm);
    let ingress = file.ingress.unwrap();
    assert_eq!((ingress.listen.to_string(), ingress.app.to_string()), ("0.0.0.0:4143".into(), "127.0.0.1:8080".into()));
    assert_eq!(ingress.trusted_peers, tailguard_proxy::config::Network::loopback());
    assert_eq!(file.egress.unwrap().listen.to_string(), "127.0.0.1:4140");
    assert_eq!(file.admin.unwrap().listen.to_string(), "0.0.0.0:9990");
}

#[test]
fn documents_that_are_no_workload_and_opted_out_pods_are_untouched() {
    let input = docs(&fixture("app.yaml"));
    let out = injected(&fixture("app.yaml"));
    assert_eq!(out[2], input[1], "the Service");
    assert_eq!(out[4], input[3], "the Pod annotated tailguard.io/inject: disabled");
}

#[test]
fn a_cron_job_with_its_own_config_map_gets_the_sidecar_and_no_generated_config_map() {
    let out = injected(&fixture("app.yaml"));
    let pod = &out[3]["spec"]["jobTemplate"]["spec"]["template"];
    assert_eq!(names(&pod["spec"]["initContainers"]), ["tailguard-proxy"]);
    assert_eq!(pod["spec"]["volumes"][0]["configMap"]["name"], "report-proxy");
    assert_eq!(out.iter().filter(|d| d["kind"] == "ConfigMap").count(), 1, "web's only");
}

#[test]
fn injecting_twice_changes_nothing() {
    for name in ["app.yaml", "list.yaml"] {
        let once = inject(&fixture(name), name, &InjectOptions::default()).unwrap();
        let twice = inject(&once, name, &InjectOptions::default()).unwrap();
        assert_eq!(twice, once, "{name}");
    }
}

#[test]
fn a_list_s_workloads_are_injected_and_their_config_maps_added_to_it() {
    let out = injected(&fixture("list.yaml"));
    assert_eq!(out.len(), 1);
    let items = out[0]["items"].as_sequence().unwrap();
    let kinds: Vec<&str> = items.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["StatefulSet", "DaemonSet", "ConfigMap", "ConfigMap"]);
    // The StatefulSet's own Prometheus annotations are kept, not overwritten.
    let notes = &items[0]["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(notes["prometheus.io/port"], "9100");
    assert!(notes.get("prometheus.io/path").is_none());
    assert_eq!(proxy_file(&items[2]).ingress.unwrap().app.to_string(), "127.0.0.1:5000");
    // The sidecar starts before the DaemonSet's own init container; the port comes from the annotation.
    assert_eq!(names(&items[1]["spec"]["template"]["spec"]["initContainers"]), ["tailguard-proxy", "setup"]);
    assert_eq!(proxy_file(&items[3]).ingress.unwrap().app.to_string(), "127.0.0.1:7000");
    assert_eq!(items[3]["metadata"]["name"], "agent-tailguard");
}

#[test]
fn a_workload_without_a_port_gets_an_egress_only_and_http_proxy_on_request() {
    let text = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: once}\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        - {name: a, image: a, env: [{name: NO_PROXY, value: internal}]}\n";
    let options = InjectOptions { http_proxy: true, ..InjectOptions::default() };
    let out = docs(&inject(text, "job.yaml", &options).unwrap());
    let file = proxy_file(&out[1]);
    assert!(file.ingress.is_none() && file.egress.is_some());
    let env: Vec<(&str, &str)> = out[0]["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v["value"].as_str().unwrap()))
        .collect();
    let egress = "http://127.0.0.1:4140";
    assert_eq!(
        env,
        [("NO_PROXY", "internal"), ("TAILGUARD_EGRESS", egress), ("HTTP_PROXY", egress), ("http_proxy", egress)]
    );
}

#[test]
fn bad_input_is_an_error_naming_the_document() {
    let options = InjectOptions::default();
    let e = inject("kind: ConfigMap\n---\nkind: Deployment\nspec: [\n", "deploy.yaml", &options).unwrap_err();
    assert!(e.to_string().starts_with("deploy.yaml: document 2: "), "{e}");
    let e = inject("kind: ConfigMap\n---\nkind: Deployment\nmetadata: {}\n", "deploy.yaml", &options).unwrap_err();
    assert_eq!(e.to_string(), "deploy.yaml: document 2 (Deployment): expected `metadata.name`");
    let e = inject("kind: Deployment\nmetadata: {name: a}\nspec: {}\n", "-", &options).unwrap_err();
    assert_eq!(e.to_string(), "-: document 1 (Deployment a): expected a pod template at `spec.template`");
    let bad_port =
        "kind: Pod\nmetadata: {name: p, annotations: {tailguard.io/app-port: http}}\nspec: {containers: []}\n";
    let e = inject(bad_port, "-", &options).unwrap_err();
    assert_eq!(e.to_string(), "-: document 1 (Pod p): expected a port number in the annotation tailguard.io/app-port");
    let e = inject("kind: Pod\nmetadata: {name: p}\nspec: {containers: 3}\n", "-", &options).unwrap_err();
    assert_eq!(e.to_string(), "-: document 1 (Pod p): spec: expected `containers` to be a list");
}

#[test]
fn a_given_sidecar_file_must_listen_where_the_pod_expects() {
    let parse = |text: &str| Config::parse(text, Path::new("p.yaml")).unwrap();
    let good = parse("egress: {listen: 127.0.0.1:4140, upstreams: {}}\nadmin: {listen: 0.0.0.0:9990}\n");
    assert_eq!(tailguard_k8s::inject::check_sidecar_file(&good), Ok(()));
    let bad = parse("egress: {listen: 127.0.0.1:5000, upstreams: {}}\nadmin: {listen: 0.0.0.0:9990}\n");
    assert_eq!(
        tailguard_k8s::inject::check_sidecar_file(&bad),
        Err("egress.listen: expected port 4140 (the injected pod's), got 127.0.0.1:5000".into())
    );
    let local_admin = parse("egress: {listen: 127.0.0.1:4140, upstreams: {}}\nadmin: {listen: 127.0.0.1:9990}\n");
    assert!(tailguard_k8s::inject::check_sidecar_file(&local_admin).unwrap_err().starts_with("admin.listen"));
}
