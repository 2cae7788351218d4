//! Every manifest the project ships or writes, checked offline and strictly (unknown and duplicate
//! fields are errors) against the Kubernetes API's own types by tools/k8s-validate, which
//! `make build` builds: deploy/ (the example application, and the kustomize base and overlays as
//! `kustomize build` renders them), `tailguard inject`'s output, and `tailguard lab render --k8s`'s
//! output for every example experiment that renders.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use tailguard_k8s::{inject, manifest, render, InjectOptions, RenderOptions};
use tailguard_model::Experiment;
use tailguard_proxy::config::Config;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The checker, built by `make build` (or `make k8s-validate`).
fn validator() -> Command {
    let path = root().join("target/tools/k8s-validate");
    assert!(path.is_file(), "{} is missing: run `make k8s-validate` (make build and make test do)", path.display());
    Command::new(path)
}

/// Checks `args` (files, or `-kustomize DIR`) or, when `stdin` is given, that text; returns what
/// the checker printed, one line per document.
fn validate(args: &[&Path], kustomize: bool, stdin: Option<&str>) -> String {
    let mut command = validator();
    if kustomize {
        command.arg("-kustomize");
    }
    match stdin {
        Some(_) => command.arg("-"),
        None => command.args(args),
    };
    let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "k8s-validate {args:?} failed:\n{stderr}\n{}", stdin.unwrap_or(""));
    stdout.into_owned()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The proxy files in a manifest stream's ConfigMaps parse as the proxy reads them.
fn check_proxy_files(text: &str) -> usize {
    let mut count = 0;
    for doc in manifest::read(text, "out").unwrap() {
        let items = doc.get("items").and_then(|i| i.as_sequence()).cloned().unwrap_or_else(|| vec![doc.clone()]);
        for cm in items.iter().filter(|d| d["kind"] == "ConfigMap") {
            for (key, value) in cm["data"].as_mapping().unwrap() {
                let key = key.as_str().unwrap();
                if key != "experiment.yaml" {
                    Config::parse(value.as_str().unwrap(), Path::new(key)).unwrap_or_else(|e| panic!("{e}"));
                    count += 1;
                }
            }
        }
    }
    count
}

#[test]
fn the_checker_refuses_unknown_fields_and_kinds() {
    let good = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n";
    assert_eq!(validate(&[], false, Some(good)), "-: document 1: ConfigMap/a ok\n");
    for bad in [
        good.replace("data:", "dta:"),
        good.replace("kind: ConfigMap", "kind: ConfigMapp"),
        format!("{good}metadata: {{name: b}}\n"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\nspec: {replicas: two}\n".to_string(),
    ] {
        let out = validator().arg("-").stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn();
        let mut child = out.unwrap();
        child.stdin.take().unwrap().write_all(bad.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(!out.status.success(), "accepted:\n{bad}");
        assert!(String::from_utf8_lossy(&out.stderr).starts_with("-: document 1: "), "{bad}");
    }
}

#[test]
fn every_manifest_under_deploy_is_valid() {
    let deploy = root().join("deploy");
    let example = deploy.join("example/app.yaml");
    let out = validate(&[&example], false, None);
    assert_eq!(out.lines().count(), 4, "{out}");
    let kustomize = deploy.join("kustomize");
    for dir in ["base", "overlays/dev", "overlays/production"] {
        let out = validate(&[&kustomize.join(dir)], true, None);
        // Two Deployments and Services, three ConfigMaps, and the overlays' own objects.
        let expected = match dir {
            "base" => 7,
            "overlays/dev" => 8,
            _ => 10,
        };
        assert_eq!(out.lines().count(), expected, "{dir}:\n{out}");
    }
    for file in ["base/shop-proxy.yaml", "base/catalog-proxy.yaml", "overlays/production/catalog-proxy.yaml"] {
        let config = Config::load(kustomize.join(file)).unwrap();
        tailguard_k8s::inject::check_sidecar_file(&config).unwrap_or_else(|e| panic!("{file}: {e}"));
    }
    Experiment::load(kustomize.join("base/experiment.yaml")).unwrap();
}

#[test]
fn the_kustomize_base_is_the_example_application_injected() {
    let deploy = root().join("deploy");
    let injected = inject(&read(&deploy.join("example/app.yaml")), "app.yaml", &InjectOptions::default()).unwrap();
    let shipped = read(&deploy.join("kustomize/base/meshed.yaml"));
    let body = shipped.split_once("\n\n").map_or(shipped.as_str(), |(_, body)| body);
    assert!(
        body == injected,
        "deploy/kustomize/base/meshed.yaml is not `tailguard inject deploy/example/app.yaml`: regenerate it"
    );
}

#[test]
fn inject_output_is_valid() {
    for (name, documents) in [("app.yaml", 5), ("list.yaml", 1)] {
        let text = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name));
        let options = InjectOptions { http_proxy: true, ..InjectOptions::default() };
        let out = inject(&text, name, &options).unwrap();
        let checked = validate(&[], false, Some(&out));
        assert_eq!(checked.lines().count(), documents, "{checked}");
        assert!(check_proxy_files(&out) >= 1, "{name}");
    }
}

#[test]
fn lab_render_output_is_valid_for_every_example_that_renders() {
    let mut rendered = Vec::new();
    let mut refused = Vec::new();
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(root().join("examples")).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    for path in files.iter().filter(|p| p.extension().is_some_and(|e| e == "yaml")) {
        let text = read(path);
        let experiment = Experiment::parse(&text, path).unwrap();
        match render(&experiment, &text, &RenderOptions::default()) {
            Ok(out) => {
                validate(&[], false, Some(&out));
                assert!(check_proxy_files(&out) > 0, "{}", path.display());
                rendered.push(path.file_name().unwrap().to_string_lossy().into_owned());
            }
            Err(e) => refused.push(format!("{}: {e}", path.display())),
        }
    }
    // Every example renders but those whose first variant needs the simulator's oracle or a real
    // program the cluster does not run.
    assert!(rendered.len() >= 6, "rendered {rendered:?}; refused {refused:#?}");
    for e in &refused {
        assert!(e.contains("oracle") || e.contains("not rendered"), "{e}");
    }
}
