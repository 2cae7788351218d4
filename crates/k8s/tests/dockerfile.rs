//! The Dockerfile builds the binary the way `make build` does (plus the `kube` feature), with a Rust at least the
//! workspace's `rust-version`, and runs it as a non-root user. (No Docker engine runs in the
//! tests: the image itself is never built here; docs/deploy.md says so.)

use std::path::Path;

fn read(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(name)).unwrap()
}

/// A `MAJOR.MINOR` version as numbers.
fn version(text: &str) -> (u32, u32) {
    let mut parts = text.split('.').map(|p| p.parse::<u32>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap())
}

#[test]
fn the_dockerfile_builds_as_make_build_does_and_runs_as_non_root() {
    let dockerfile = read("Dockerfile");
    let makefile = read("Makefile");
    let build = makefile.split("\nbuild:").nth(1).unwrap();
    let recipe = build.lines().nth(1).unwrap().trim().replace("$(CARGO)", "cargo");
    assert_eq!(recipe, "cargo build --release --locked");
    let run: Vec<&str> = dockerfile.lines().filter(|l| l.starts_with("RUN ")).collect();
    let image_build = format!("RUN {recipe} --features kube");
    assert!(run.iter().any(|l| l.trim_end_matches(" \\").trim() == image_build), "{run:?}");

    let from: Vec<&str> = dockerfile.lines().filter_map(|l| l.strip_prefix("FROM ")).collect();
    assert_eq!(from.len(), 2, "a builder stage and a runtime stage: {from:?}");
    let rust = from[0].strip_prefix("rust:").unwrap().split('-').next().unwrap();
    let cargo = read("Cargo.toml");
    let wanted = cargo.lines().find_map(|l| l.strip_prefix("rust-version = ")).unwrap().trim_matches('"');
    assert!(version(rust) >= version(wanted), "rust:{rust} is older than the workspace's rust-version {wanted}");
    assert!(from[1].starts_with("debian:") && from[1].contains("slim"), "{}", from[1]);
    let user = dockerfile.lines().filter_map(|l| l.strip_prefix("USER ")).next_back().unwrap();
    assert!(!user.starts_with('0') && !user.starts_with("root"), "runs as {user}");
    assert!(dockerfile.contains("ENTRYPOINT [\"/usr/local/bin/tailguard\"]"));
}
