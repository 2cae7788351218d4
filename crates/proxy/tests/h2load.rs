//! nghttp2's h2load, a load generator written outside the project, as an HTTP/2 client of the
//! proxy: many streams at once on a few connections, uploads larger than a stream's flow-control
//! window, through an egress with the recommended policies in front of two sidecar replicas and
//! through an ingress alone, while two other processes keep the machine's cores busy. Every
//! request must be answered 2xx.

use crate::proxy_of;
use std::process::Command;
use std::time::Duration;
use tailguard_testkit::{busy_cores, run_bounded, system_tool, Backend, Mode};

/// What h2load printed of a run: its `requests:` and `status codes:` lines.
struct Summary {
    requests: String,
    statuses: String,
}

/// Runs h2load with `args` against `url`, at most 120 s.
async fn run(args: Vec<String>, url: String) -> (Summary, String) {
    let mut command = Command::new("h2load");
    command.args(&args).arg(&url);
    let ran = tokio::task::spawn_blocking(move || run_bounded(&mut command, Duration::from_secs(120))).await.unwrap();
    let (_, stdout, stderr) = ran.expect("h2load finishes within 120 s");
    let line = |prefix: &str| stdout.lines().find(|l| l.starts_with(prefix)).unwrap_or("none").to_string();
    (Summary { requests: line("requests:"), statuses: line("status codes:") }, format!("{stdout}{stderr}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2load_streams_and_uploads_pass_through_the_egress_and_the_ingress_on_busy_cores() {
    if !system_tool("h2load", "nghttp2-client") {
        return;
    }
    // Each replica reads the whole body before it answers, so an upload crosses every hop's
    // flow control; HTTP/1 behind the sidecars, as applications mostly speak. No admission: 256
    // streams kept open at once are a standing queue, which adaptive admission refuses by design.
    let apps = [Backend::start("replica 0", Mode::Read).await, Backend::start("replica 1", Mode::Read).await];
    let mut ingresses = Vec::new();
    for app in &apps {
        ingresses.push(
            proxy_of(&format!("ingress:\n  listen: 127.0.0.1:0\n  app: {}\nshutdown_grace: 1s\n", app.addr)).await,
        );
    }
    let endpoints: Vec<String> = ingresses.iter().map(|i| i.ingress.unwrap().to_string()).collect();
    let egress = proxy_of(&format!(
        "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    app:\n      endpoints: [{}]\n      policy:\n        \
         balancer: {{kind: prequal}}\n        outlier: {{}}\n        timeout: {{kind: adaptive}}\n        \
         hedge: {{kind: adaptive}}\n        retry: {{max_attempts: 2}}\nshutdown_grace: 1s\n",
        endpoints.join(", ")
    ))
    .await;
    // 200 KB: three times a stream's initial window (64 KB) on every HTTP/2 leg.
    let body = std::env::temp_dir().join(format!("tailguard-h2load-{}.bin", std::process::id()));
    std::fs::write(&body, vec![b'x'; 200 * 1024]).unwrap();
    let paths = [("egress (recommended policies)", egress.egress.unwrap()), ("ingress", ingresses[0].ingress.unwrap())];
    let busy = busy_cores();
    let mut failed = Vec::new();
    for (path, addr) in paths {
        // Many small requests, 64 streams at once on each of 4 connections; then uploads, 16 at
        // once on each of 2.
        let upload = body.display().to_string();
        let runs = [("GET", 8000, 4, 64, None), ("POST 200 KB", 400, 2, 16, Some(upload.as_str()))];
        for (what, n, connections, streams, data) in runs {
            let mut args: Vec<String> = ["-n", "-c", "-m"]
                .iter()
                .zip([n, connections, streams])
                .flat_map(|(flag, v)| [flag.to_string(), v.to_string()])
                .collect();
            if let Some(file) = data {
                args.extend(["-d".to_string(), file.to_string()]);
            }
            let (summary, output) = run(args, format!("http://{addr}/h2load")).await;
            eprintln!("h2load {what} through the {path}: {} | {}", summary.requests, summary.statuses);
            let all_ok =
                format!("requests: {n} total, {n} started, {n} done, {n} succeeded, 0 failed, 0 errored, 0 timeout");
            if summary.requests != all_ok || !summary.statuses.starts_with(&format!("status codes: {n} 2xx,")) {
                failed.push(format!("{what} through the {path}:\n{output}"));
            }
        }
    }
    drop(busy);
    let _ = std::fs::remove_file(&body);
    egress.shutdown().await;
    for ingress in ingresses {
        ingress.shutdown().await;
    }
    assert!(failed.is_empty(), "h2load runs failed:\n{}", failed.join("\n"));
}
