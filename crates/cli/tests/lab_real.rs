//! Real programs as nodes (docs/lab.md, "Real services"): Debian's nginx, redis-server and
//! memcached started by the lab beside `tailguard serve`, reached by real calls, and stopped.
//! Needs the three packages (`make test` installs them: `make deps`, scripts/install-test-deps.sh).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;
use tailguard_lab::{Observer, Options, Plan};
use tailguard_model::Experiment;

/// Records the PIDs and, while the load runs, what the real programs hold.
#[derive(Default)]
struct Watch {
    pids: Mutex<Vec<(String, u32)>>,
    plan: Mutex<Option<Plan>>,
    /// The most keys seen in redis (both replicas) and items in memcached, and nginx's answer.
    seen: Mutex<(u64, u64, Option<String>)>,
}

fn addr(plan: &Plan, service: &str) -> Vec<SocketAddr> {
    plan.of(service).map(|r| r.serve()).collect()
}

/// Sends `request` and reads lines until one equals `last` (bounded by a read timeout).
fn ask(addr: SocketAddr, request: &str, last: &str) -> Vec<String> {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(300)) else { return Vec::new() };
    stream.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut lines = Vec::new();
    for line in BufReader::new(stream.take(1 << 20)).lines().take(200) {
        let Ok(line) = line else { break };
        let done = line.trim_end() == last || last.is_empty();
        lines.push(line.trim_end().to_string());
        if done {
            break;
        }
    }
    lines
}

impl Observer for Watch {
    fn spawned(&self, name: &str, pid: u32) {
        self.pids.lock().unwrap().push((name.to_string(), pid));
    }
    fn ready(&self, plan: &Plan) {
        *self.plan.lock().unwrap() = Some(plan.clone());
    }
    fn tick(&self, _elapsed: Duration) {
        let Some(plan) = self.plan.lock().unwrap().clone() else { return };
        let keys: u64 = addr(&plan, "cache")
            .iter()
            .filter_map(|a| ask(*a, "DBSIZE\r\n", "").first()?.strip_prefix(':')?.parse::<u64>().ok())
            .sum();
        let items = ask(addr(&plan, "kv")[0], "stats\r\n", "END")
            .iter()
            .find_map(|l| l.strip_prefix("STAT curr_items ")?.parse::<u64>().ok())
            .unwrap_or(0);
        let page = ask(addr(&plan, "web")[0], "GET /any HTTP/1.0\r\n\r\n", "").first().cloned();
        let mut seen = self.seen.lock().unwrap();
        seen.0 = seen.0.max(keys);
        seen.1 = seen.1.max(items);
        seen.2 = seen.2.take().or(page);
    }
}

#[test]
fn nginx_redis_and_memcached_serve_real_calls_and_are_stopped() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab-real.yaml");
    let experiment = Experiment::load(&file).unwrap();
    let out = std::env::temp_dir().join(format!("tailguard-lab-real-{}", std::process::id()));
    let options = Options::new(PathBuf::from(env!("CARGO_BIN_EXE_tailguard")), file.clone(), out.clone(), 3);
    let watch = Watch::default();
    let results = tailguard_lab::run(&experiment, &options, &watch).unwrap_or_else(|e| panic!("{e}"));
    let run = &results.runs[0];
    assert_eq!((run.requests, run.succeeded, run.failed), (200, 200, 0), "{run:?}");
    serde_json::from_str::<serde_json::Value>(&serde_json::to_string(&results).unwrap()).unwrap();

    // The programs held what the calls stored: every request missed or hit a key of its own,
    // keys come from 1000, so 200 requests stored between a few dozen and 200 keys in each.
    let (keys, items, page) = watch.seen.lock().unwrap().clone();
    assert!((50..=200).contains(&keys), "redis held {keys} keys");
    assert!((50..=200).contains(&items), "memcached held {items} items");
    assert_eq!(page.as_deref(), Some("HTTP/1.1 200 OK"));
    // The nginx page went through the frontend's sidecar: its egress counted the attempts.
    let metrics = std::fs::read_to_string(out.join("runs/default/v/metrics-front-0.txt")).unwrap();
    assert!(metrics.contains("upstream=\"web\"") && !metrics.contains("upstream=\"cache\""), "{metrics}");
    let conf = std::fs::read_to_string(out.join("runs/default/v/nginx-web-0/nginx.conf")).unwrap();
    assert!(conf.contains("worker_processes 2;") && conf.contains("worker_connections 128;"), "{conf}");

    // front: serve + sidecar, web: nginx + sidecar, cache: 2 × redis, kv: memcached.
    let pids = watch.pids.lock().unwrap().clone();
    let names: Vec<&str> = pids.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "serve front-0",
            "proxy front-0",
            "nginx web-0",
            "proxy web-0",
            "redis cache-0",
            "redis cache-1",
            "memcached kv-0"
        ]
    );
    for (name, pid) in &pids {
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "{name} (pid {pid}) outlived the lab");
    }
    // nginx's workers went with their master: nothing listens any more.
    let plan = watch.plan.lock().unwrap().clone().unwrap();
    for a in ["web", "cache", "kv"].iter().flat_map(|s| addr(&plan, s)) {
        assert!(TcpStream::connect_timeout(&a, Duration::from_millis(200)).is_err(), "{a} still answers");
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// nginx resolves its `-c` against its `-p` prefix: the lab gives both absolute, whatever `--out`
/// the user gave, relative or the default (lab-out/EXPERIMENT-TIMESTAMP).
#[test]
fn nginx_starts_under_a_relative_and_the_default_out() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab-real.yaml");
    let cwd = std::env::temp_dir().join(format!("tailguard-lab-real-cwd-{}", std::process::id()));
    std::fs::create_dir_all(&cwd).unwrap();
    for out in [&["--out", "relative/out"][..], &[]] {
        let run = Command::new(env!("CARGO_BIN_EXE_tailguard"))
            .args(["lab", "run"])
            .arg(&file)
            .args(out)
            .current_dir(&cwd)
            .output()
            .unwrap();
        assert!(run.status.success(), "{out:?}: {}", String::from_utf8_lossy(&run.stderr));
    }
    assert!(cwd.join("relative/out/results.json").is_file());
    assert!(cwd.join("relative/out/runs/default/v/nginx-web-0/nginx.conf").is_file());
    let default: Vec<_> = std::fs::read_dir(cwd.join("lab-out")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(default.len(), 1, "{default:?}");
    let name = default[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("lab-real-") && default[0].join("results.json").is_file(), "{name}");
    std::fs::remove_dir_all(&cwd).unwrap();
}

/// HAProxy and nginx as sidecars (docs/lab.md, "Peer sidecars"): each variant's retry makes the
/// failing backend's errors good through the peer, the results are labelled and costed, the
/// peers' own statistics are kept, and every process is stopped.
/// Records the PIDs the lab started.
#[derive(Default)]
struct Spawned(Mutex<Vec<(String, u32)>>);

impl Observer for Spawned {
    fn spawned(&self, name: &str, pid: u32) {
        self.0.lock().unwrap().push((name.to_string(), pid));
    }
}

#[test]
fn haproxy_and_nginx_sidecars_carry_a_variant_s_retries() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab-peers.yaml");
    let experiment = Experiment::load(&file).unwrap();
    let out = std::env::temp_dir().join(format!("tailguard-lab-peers-{}", std::process::id()));
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_tailguard"));
    let mut options = Options::new(exe, file.clone(), out.clone(), 5);
    options.variants = ["tailguard", "haproxy", "nginx"].map(String::from).to_vec();
    options.tracing = tailguard_lab::Tracing::Off;
    let spawned = Spawned::default();
    let results = tailguard_lab::run(&experiment, &options, &spawned).unwrap_or_else(|e| panic!("{e}"));
    for (run, peer) in results.runs.iter().zip([None, Some("haproxy"), Some("nginx")]) {
        // Without the retry about 20 of the 100 requests that reach the failing backend fail.
        assert_eq!((run.requests, run.succeeded), (200, 200), "{run:?}");
        assert_eq!(run.sidecar.as_deref(), peer);
        let cpu = run.sidecar_cpu_s_per_1k.unwrap_or_else(|| panic!("{} has no sidecar CPU", run.variant));
        // /proc counts CPU in 10 ms ticks: 200 requests through nginx can cost less than one,
        // so a peer may read 0; tailguard's three sidecars (and their metrics) cost more.
        let least = if peer.is_none() { f64::MIN_POSITIVE } else { 0.0 };
        assert!(cpu >= least && cpu < 100.0, "{}: {cpu} s per 1000 requests", run.variant);
    }
    let kept = |variant: &str| std::fs::read_to_string(out.join(format!("runs/default/{variant}/metrics-front-0.txt")));
    let stats = kept("haproxy").unwrap();
    assert!(stats.lines().any(|l| l.starts_with("back,BACKEND,")), "HAProxy's CSV statistics");
    assert!(tailguard_lab::peers::haproxy::servers_down(&stats).is_empty(), "{stats}");
    assert!(kept("nginx").unwrap().starts_with("Active connections:"), "nginx's stub_status");
    let pids = spawned.0.lock().unwrap().clone();
    assert!(pids.iter().any(|(name, _)| name == "proxy back-1"), "{pids:?}");
    for (name, pid) in &pids {
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "{name} (pid {pid}) outlived the lab");
    }
    let _ = std::fs::remove_dir_all(&out);

    // A policy HAProxy cannot express is refused, naming the field, before anything starts.
    options.variants = vec!["haproxy-hedged".to_string()];
    let spawned = Spawned::default();
    let error = tailguard_lab::run(&experiment, &options, &spawned).unwrap_err().to_string();
    assert_eq!(
        error,
        "default / haproxy-hedged: sidecar: haproxy cannot express `front->back.hedge`: a peer sends one attempt at a time; it cannot hedge"
    );
    assert!(spawned.0.lock().unwrap().is_empty());
}
