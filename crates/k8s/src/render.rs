//! `tailguard lab render --k8s`: one run (scenario × variant) of an experiment file as Kubernetes
//! manifests, laid out by the lab's own [`Plan`] and sidecar files ([`ProxyFile`]), so the
//! cluster runs what `tailguard lab run` runs on one machine:
//!
//! - each service a StatefulSet of `tailguard serve` (the experiment file from a ConfigMap) with
//!   the sidecar: a StatefulSet rather than a Deployment because a replica's index selects its
//!   faults, its random stream and its group's admission (`--replica`, from the pod's
//!   `apps.kubernetes.io/pod-index` label), and each replica's sidecar file is its own;
//! - each replica a Service with a fixed cluster IP, the plan's address `10.SLOT.(service+1).
//!   (replica+1)`, which callers' egresses list as the callee's endpoints: the proxy file names
//!   endpoints by address, and one endpoint per replica keeps the balancers' choice between
//!   replicas (one Service for all would leave it to kube-proxy). The default slot 100 lies in
//!   the default service network 10.96.0.0/12 (kubeadm, kind);
//! - the load generator a Job: `tailguard load` (behind its own sidecar when the workload's client
//!   policy needs one) writes the results JSON, which the Job's `results` container prints, so
//!   `kubectl logs job/NAME-load -c results` collects it.

use crate::manifest::{self, template};
use crate::sidecar::{self, FILE_KEY};
use serde_yaml_ng::Value;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use tailguard_lab::plan::{self, Isolation, Plan, ProxyFile, Replica, SERVE_PORT};
use tailguard_model::schema::Arrival;
use tailguard_model::{Experiment, Run};
use tailguard_proxy::config::Network;

/// Where the experiment file is mounted in `tailguard serve`'s container.
const EXPERIMENT_MOUNT: &str = "/etc/tailguard-experiment";
/// Where the load generator writes the results JSON (an emptyDir shared with `results`).
const RESULTS: &str = "/results/results.json";

/// What to render and for which cluster.
#[derive(Clone, Debug)]
pub struct RenderOptions {
    pub scenario: Option<String>,
    pub variant: Option<String>,
    pub quick: bool,
    /// The run's seed (default: the file's, else 1).
    pub seed: Option<u64>,
    /// The image with the `tailguard` binary.
    pub image: String,
    /// Replica `r` of service `s` gets the cluster IP `10.SLOT.(s+1).(r+1)`.
    pub slot: u8,
    /// The callers whose deadline and trace headers the sidecars believe: the cluster's pod
    /// network.
    pub trusted_peers: Vec<Network>,
}

impl Default for RenderOptions {
    fn default() -> RenderOptions {
        RenderOptions {
            scenario: None,
            variant: None,
            quick: false,
            seed: None,
            image: crate::DEFAULT_IMAGE.to_string(),
            slot: 100,
            trusted_peers: vec!["10.0.0.0/8".parse().expect("a valid network")],
        }
    }
}

/// The manifests of one run of `experiment`, whose text is `text` (mounted for `tailguard serve`).
pub fn render(experiment: &Experiment, text: &str, options: &RenderOptions) -> Result<String, String> {
    let pick = |asked: &Option<String>, all: Vec<String>| asked.clone().or_else(|| all.into_iter().next());
    let scenario = pick(&options.scenario, experiment.scenario_names()).ok_or("the file has no scenario")?;
    let variant = pick(&options.variant, experiment.variant_names()).ok_or("the file has no variant")?;
    let run = experiment.resolve(&scenario, &variant, options.quick).map_err(|e| e.to_string())?;
    if plan::needs_oracle(&run) {
        return Err(format!("{scenario} / {variant}: its oracle balancer exists only in the simulator"));
    }
    let name = kube_name(&experiment.file.name);
    for (service, s) in &run.services {
        if !s.kind.speaks_http() {
            return Err(format!(
                "service {service}: a {} replica is not rendered (only `tailguard serve` services are)",
                s.kind.name()
            ));
        }
        if kube_name(service) != *service || service.len() > 50 {
            return Err(format!(
                "service {service}: not a Kubernetes name (lower-case letters, digits and '-', at most 50)"
            ));
        }
    }
    if run.services.len() > plan::MAX_SERVICES || run.services.values().any(|s| s.replicas > plan::MAX_REPLICAS) {
        let most = (plan::MAX_SERVICES, plan::MAX_REPLICAS);
        return Err(format!("at most {} services of {} replicas each fit the address plan", most.0, most.1));
    }
    let seed = options.seed.or(experiment.seed()).unwrap_or(1);
    let plan = Plan::new(&run, Isolation::Netns, options.slot);
    let experiment_map = format!("{name}-experiment");
    let mut docs = vec![sidecar::config_map(&experiment_map, None, &[("experiment.yaml".into(), text.to_string())])];
    for (service, _) in &run.services {
        let replicas: Vec<&Replica> = plan.of(service).collect();
        let files: Vec<(String, String)> = replicas
            .iter()
            .map(|r| {
                (format!("{}.yaml", r.name()), in_pod(ProxyFile::sidecar(&run, &plan, r, seed), options).to_yaml())
            })
            .collect();
        docs.push(sidecar::config_map(&format!("{service}-tailguard"), None, &files));
        docs.push(headless_service(&name, service));
        docs.extend(replicas.iter().map(|r| replica_service(&name, r)));
        docs.push(stateful_set(&run, &name, service, replicas.len(), &experiment_map, seed, options));
    }
    let workload = ProxyFile::workload(&run, &plan, seed).map(|f| in_pod(f, options));
    if let Some(file) = &workload {
        docs.push(sidecar::config_map(&format!("{name}-load-tailguard"), None, &[(FILE_KEY.into(), file.to_yaml())]));
    }
    docs.push(load_job(&run, &plan, (&name, &experiment.file.name), workload.is_some(), seed, options));
    Ok(manifest::write(&docs))
}

/// A lab sidecar file moved into a pod: listeners on the pod's addresses, the application on
/// loopback, the pod network trusted; endpoints stay the replicas' cluster IPs.
fn in_pod(ProxyFile(mut config): ProxyFile, options: &RenderOptions) -> ProxyFile {
    if let Some(egress) = &mut config.egress {
        egress.listen = sidecar::egress_listen();
    }
    if let Some(ingress) = &mut config.ingress {
        ingress.listen = sidecar::ingress_listen();
        ingress.app = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), SERVE_PORT);
        ingress.trusted_peers = options.trusted_peers.clone();
    }
    if let Some(admin) = &mut config.admin {
        admin.listen = sidecar::admin_listen();
    }
    ProxyFile(config)
}

fn labels(experiment: &str, service: &str) -> String {
    format!("{{app.kubernetes.io/name: {service}, app.kubernetes.io/part-of: {experiment}}}")
}

/// The service's headless Service (the StatefulSet's `serviceName`; DNS names for its pods).
fn headless_service(experiment: &str, service: &str) -> Value {
    template(&format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {service}, labels: {l}}}\nspec:\n  clusterIP: None\n  selector: {l}\n  ports: [{{name: tg-ingress, port: {p}, targetPort: tg-ingress}}]\n",
        l = labels(experiment, service),
        p = sidecar::INGRESS_PORT
    ))
}

/// One replica's Service, at its plan address: what callers' egresses name as its endpoint.
fn replica_service(experiment: &str, replica: &Replica) -> Value {
    template(&format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {pod}, labels: {l}}}\nspec:\n  clusterIP: {ip}\n  selector: {{statefulset.kubernetes.io/pod-name: {pod}}}\n  ports: [{{name: tg-ingress, port: {p}, targetPort: tg-ingress}}]\n",
        pod = replica.name(),
        l = labels(experiment, &replica.service),
        ip = replica.ip,
        p = sidecar::INGRESS_PORT
    ))
}

/// The service's StatefulSet: `tailguard serve` as replica `apps.kubernetes.io/pod-index`, its
/// sidecar reading the pod's own file.
fn stateful_set(
    run: &Run,
    experiment: &str,
    service: &str,
    replicas: usize,
    experiment_map: &str,
    seed: u64,
    options: &RenderOptions,
) -> Value {
    let l = labels(experiment, service);
    let mut set = template(&format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: {service}, labels: {l}}}
spec:
  serviceName: {service}
  replicas: {replicas}
  podManagementPolicy: Parallel
  selector: {{matchLabels: {l}}}
  template:
    metadata: {{labels: {l}}}
    spec:
      containers:
        - name: serve
          image: IMAGE
          env:
            - name: REPLICA
              valueFrom: {{fieldRef: {{fieldPath: "metadata.labels['apps.kubernetes.io/pod-index']"}}}}
          args: []
          resources: {{requests: {{cpu: 100m, memory: 32Mi}}}}
          securityContext: {{runAsNonRoot: true, runAsUser: 65532, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {{drop: [ALL]}}}}
          volumeMounts: [{{name: experiment, mountPath: {EXPERIMENT_MOUNT}, readOnly: true}}]
      volumes:
        - name: experiment
          configMap: {{name: {experiment_map}}}
"#
    ));
    let mut args = vec!["serve".to_string(), format!("{EXPERIMENT_MOUNT}/experiment.yaml")];
    args.extend(["--service", service, "--replica", "$(REPLICA)"].map(String::from));
    args.extend(["--scenario".into(), run.scenario.clone(), "--variant".into(), run.variant.clone()]);
    args.extend(["--seed".into(), seed.to_string(), "--listen".into(), format!("127.0.0.1:{SERVE_PORT}")]);
    if options.quick {
        args.push("--quick".into());
    }
    for call in run.services[service].calls.iter().filter(|c| c.count > 0) {
        args.push("--downstream".into());
        args.push(format!("{}=http://{}{}", call.service, sidecar::egress_listen(), plan::route(&call.service)));
    }
    let pod = &mut set["spec"]["template"];
    pod["spec"]["containers"][0]["image"] = Value::String(options.image.clone());
    pod["spec"]["containers"][0]["args"] = Value::Sequence(args.into_iter().map(Value::String).collect());
    add_sidecar(pod, options, &format!("{service}-tailguard"), "$(POD_NAME).yaml");
    set
}

/// The load generator's Job: `tailguard load` as an init container (after its sidecar, if any)
/// writing the results, then `results` printing them.
/// `names`: the experiment's name as a Kubernetes name and as written (for the results).
fn load_job(run: &Run, plan: &Plan, names: (&str, &str), proxied: bool, seed: u64, options: &RenderOptions) -> Value {
    let (experiment, title) = names;
    let l = labels(experiment, "load");
    let mut job = template(&format!(
        r#"apiVersion: batch/v1
kind: Job
metadata: {{name: {experiment}-load, labels: {l}}}
spec:
  backoffLimit: 0
  template:
    metadata: {{labels: {l}}}
    spec:
      restartPolicy: Never
      initContainers:
        - name: load
          image: IMAGE
          args: []
          securityContext: {{runAsNonRoot: true, runAsUser: 65532, allowPrivilegeEscalation: false, capabilities: {{drop: [ALL]}}}}
          volumeMounts: [{{name: results, mountPath: /results}}]
      containers:
        - name: results
          image: IMAGE
          command: [cat, {RESULTS}]
          securityContext: {{runAsNonRoot: true, runAsUser: 65532, allowPrivilegeEscalation: false, capabilities: {{drop: [ALL]}}}}
          volumeMounts: [{{name: results, mountPath: /results, readOnly: true}}]
      volumes:
        - {{name: results, emptyDir: {{}}}}
"#
    ));
    let spec = &mut job["spec"]["template"]["spec"];
    spec["initContainers"][0]["image"] = Value::String(options.image.clone());
    spec["containers"][0]["image"] = Value::String(options.image.clone());
    spec["initContainers"][0]["args"] =
        Value::Sequence(load_args(run, plan, title, seed).into_iter().map(Value::String).collect());
    if proxied {
        add_sidecar(&mut job["spec"]["template"], options, &format!("{experiment}-load-tailguard"), FILE_KEY);
    }
    job
}

/// `tailguard load`'s arguments for the run's workload, as the lab's in-process load generator
/// is configured (crates/lab runner).
fn load_args(run: &Run, plan: &Plan, experiment: &str, seed: u64) -> Vec<String> {
    let w = &run.workload;
    let mut args = vec!["load".to_string()];
    match plan.workload_proxy {
        Some(_) => args.push(format!("http://{}{}", sidecar::egress_listen(), plan::route(&w.target))),
        None => args.extend(plan.of(&w.target).map(|r| format!("http://{}/", r.ingress()))),
    }
    match (&w.open, &w.closed) {
        (Some(open), _) => {
            args.extend(["--rate".to_string(), open.rate.to_string()]);
            if open.arrival != Arrival::Constant {
                args.push("--poisson".into());
            }
        }
        (None, Some(closed)) => args.extend([
            "--clients".into(),
            closed.clients.to_string(),
            "--think".into(),
            closed.think_time.to_string(),
        ]),
        (None, None) => {}
    }
    if let Some(d) = w.duration {
        args.extend(["--duration".into(), d.to_string()]);
    }
    if let Some(n) = w.requests {
        args.extend(["--requests".into(), n.to_string()]);
    }
    args.extend(["--warmup".into(), w.warmup.to_string(), "--seed".into(), seed.to_string()]);
    args.extend([
        "--json".into(),
        RESULTS.into(),
        "--name".into(),
        experiment.into(),
        "--variant".into(),
        run.variant.clone(),
    ]);
    args
}

/// Adds the sidecar reading `file` from the ConfigMap `config_map` to a pod template.
fn add_sidecar(pod: &mut Value, options: &RenderOptions, config_map: &str, file: &str) {
    let spec = pod["spec"].as_mapping_mut().expect("the templates have a pod spec");
    let container = sidecar::container(&options.image, file);
    sidecar::add_to_spec(spec, container, sidecar::volume(config_map), &[]).expect("the templates' lists are lists");
    sidecar::add_scrape_annotations(pod).expect("the templates' metadata is a mapping");
}

/// `name` as a Kubernetes name: lower case, anything but letters and digits a '-', at most 40.
fn kube_name(name: &str) -> String {
    let mapped: String =
        name.to_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).take(40).collect();
    let trimmed = mapped.trim_matches('-');
    if trimmed.is_empty() {
        "experiment".to_string()
    } else {
        trimmed.to_string()
    }
}
