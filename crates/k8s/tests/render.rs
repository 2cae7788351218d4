//! `lab render --k8s` on a small experiment, with exact expectations: the lab's plan and sidecar
//! files moved into pods.

use serde_yaml_ng::Value;
use std::path::Path;
use tailguard_k8s::{manifest, render, RenderOptions};
use tailguard_model::Experiment;
use tailguard_proxy::config::{Config, Route};

const FILE: &str = "name: Two Tier\nseed: 3\nservices:\n  front:\n    calls: [{service: back}]\n  back:\n    replicas: 2\n    workers: 1\n    admission: {kind: fixed, capacity: 3}\n    groups: {small: {replicas: 1, admission: {kind: fixed, capacity: 1}}}\nworkload: {target: front, open: {rate: 10}, duration: 1s}\nvariants:\n  - name: plain\n  - name: bloc\n    edges:\n      workload->front: {balancer: {kind: least-request}}\n      front->back: {balancer: {kind: bloc, reset: 1s}}\n";

fn rendered(options: &RenderOptions) -> Vec<Value> {
    let experiment = Experiment::parse(FILE, Path::new("two.yaml")).unwrap();
    manifest::read(&render(&experiment, FILE, options).unwrap(), "out").unwrap()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn strings(list: &Value) -> Vec<&str> {
    list.as_sequence().unwrap().iter().map(|v| v.as_str().unwrap()).collect()
}

fn proxy_file(cm: &Value, key: &str) -> Config {
    Config::parse(cm["data"][key].as_str().unwrap(), Path::new(key)).unwrap()
}

#[test]
fn each_replica_is_a_service_at_its_plan_address_and_callers_balance_over_them() {
    let options = RenderOptions { variant: Some("bloc".into()), ..RenderOptions::default() };
    let docs = rendered(&options);
    let names: Vec<String> = docs.iter().map(manifest::describe).collect();
    assert_eq!(
        names,
        [
            "ConfigMap two-tier-experiment",
            "ConfigMap front-tailguard",
            "Service front",
            "Service front-0",
            "StatefulSet front",
            "ConfigMap back-tailguard",
            "Service back",
            "Service back-0",
            "Service back-1",
            "StatefulSet back",
            "ConfigMap two-tier-load-tailguard",
            "Job two-tier-load",
        ]
    );
    assert_eq!(find(&docs, "ConfigMap", "two-tier-experiment")["data"]["experiment.yaml"].as_str(), Some(FILE));
    assert_eq!(find(&docs, "Service", "back-1")["spec"]["clusterIP"], "10.100.2.2");
    assert_eq!(find(&docs, "Service", "back-1")["spec"]["selector"]["statefulset.kubernetes.io/pod-name"], "back-1");

    // front's sidecar: the lab's file, listening in the pod, balancing over back's two Services.
    let front = proxy_file(find(&docs, "ConfigMap", "front-tailguard"), "front-0.yaml");
    let up = &front.egress.as_ref().unwrap().upstreams["back"];
    let endpoints: Vec<String> = up.endpoints.iter().map(ToString::to_string).collect();
    assert_eq!(endpoints, ["10.100.2.1:4143", "10.100.2.2:4143"]);
    assert_eq!(up.route, Route::PathPrefix("/back/".into()));
    assert_eq!(front.egress.as_ref().unwrap().listen.to_string(), "127.0.0.1:4140");
    let ingress = front.ingress.unwrap();
    assert_eq!((ingress.listen.to_string(), ingress.app.to_string()), ("0.0.0.0:4143".into(), "127.0.0.1:8080".into()));
    assert_eq!(ingress.trusted_peers, options.trusted_peers);
    assert_eq!(front.admin.unwrap().listen.to_string(), "0.0.0.0:9990");
    // Each back replica has its own file: the group's admission for back-1 only.
    let back = find(&docs, "ConfigMap", "back-tailguard");
    let admission = |key| format!("{:?}", proxy_file(back, key).ingress.unwrap().admission);
    assert_eq!(
        (admission("back-0.yaml"), admission("back-1.yaml")),
        ("Fixed { capacity: 3 }".into(), "Fixed { capacity: 1 }".into())
    );

    // front's pod: serve as its replica, calling back through the egress; the sidecar reads the
    // pod's own file.
    let set = find(&docs, "StatefulSet", "front");
    let pod = &set["spec"]["template"]["spec"];
    assert_eq!(
        strings(&pod["containers"][0]["args"]),
        [
            "serve",
            "/etc/tailguard-experiment/experiment.yaml",
            "--service",
            "front",
            "--replica",
            "$(REPLICA)",
            "--scenario",
            "default",
            "--variant",
            "bloc",
            "--seed",
            "3",
            "--listen",
            "127.0.0.1:8080",
            "--downstream",
            "back=http://127.0.0.1:4140/back/",
        ]
    );
    assert_eq!(strings(&pod["initContainers"][0]["args"]), ["proxy", "--config", "/etc/tailguard/$(POD_NAME).yaml"]);
    assert_eq!(set["spec"]["serviceName"], "front");

    // The load generator goes through its own sidecar (the variant's client policy).
    let job = &find(&docs, "Job", "two-tier-load")["spec"]["template"]["spec"];
    let containers: Vec<&str> =
        job["initContainers"].as_sequence().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(containers, ["tailguard-proxy", "load"]);
    assert_eq!(
        strings(&job["initContainers"][1]["args"]),
        [
            "load",
            "http://127.0.0.1:4140/front/",
            "--rate",
            "10",
            "--poisson",
            "--duration",
            "1s",
            "--warmup",
            "0s",
            "--seed",
            "3",
            "--json",
            "/results/results.json",
            "--name",
            "Two Tier",
            "--variant",
            "bloc",
        ]
    );
    assert_eq!(strings(&job["containers"][0]["command"]), ["cat", "/results/results.json"]);
}

#[test]
fn without_a_client_policy_the_load_generator_calls_the_entry_replicas_itself() {
    let docs = rendered(&RenderOptions { slot: 101, ..RenderOptions::default() });
    let job = &find(&docs, "Job", "two-tier-load")["spec"]["template"]["spec"];
    assert_eq!(job["initContainers"].as_sequence().unwrap().len(), 1);
    assert_eq!(job["initContainers"][0]["args"][1], "http://10.101.1.1:4143/");
    assert!(!docs.iter().any(|d| d["metadata"]["name"] == "two-tier-load-tailguard"));
}

#[test]
fn runs_the_cluster_cannot_play_are_refused_with_a_reason() {
    let oracle = FILE.replace("kind: bloc, reset: 1s", "kind: oracle");
    let experiment = Experiment::parse(&oracle, Path::new("o.yaml")).unwrap();
    let options = RenderOptions { variant: Some("bloc".into()), ..RenderOptions::default() };
    let e = render(&experiment, &oracle, &options).unwrap_err();
    assert_eq!(e, "default / bloc: its oracle balancer exists only in the simulator");
    let bad_name = FILE.replace("back", "Back_End");
    let experiment = Experiment::parse(&bad_name, Path::new("n.yaml")).unwrap();
    let e = render(&experiment, &bad_name, &RenderOptions::default()).unwrap_err();
    assert!(e.starts_with("service Back_End: not a Kubernetes name"), "{e}");
}
