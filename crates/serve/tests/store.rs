//! Calls to real redis and memcached (`kind: redis|memcached` callees): a request's call is a GET,
//! and a SET on a miss, over the program's own protocol. Starts Debian's redis-server and memcached
//! on 127.0.0.1 (stopped by their PIDs).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tailguard_model::Experiment;
use tailguard_serve::{Options, ServeError, Server, Spec};

const SERVICES: &str = "name: t\nservices:\n  a: { calls: [{ service: c }, { service: m }] }\n  c: { kind: redis }\n  m: { kind: memcached }\nworkload: { target: a, open: { rate: 1 }, duration: 1s }\nvariants: [{ name: v }]\n";

/// A program stopped (SIGKILL, reaped) when dropped.
struct Program(Child);
impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The first reply line to `request`, if the program answers.
fn ask(addr: SocketAddr, request: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream.write_all(request.as_bytes()).ok()?;
    let mut line = String::new();
    BufReader::new(stream.take(4096)).read_line(&mut line).ok()?;
    Some(line.trim_end().to_string())
}

/// Starts `program` with `args(port)` on a free port of 127.0.0.1 and waits (at most 10 s) until
/// `request` is answered with `want…`. A port found free can be taken before the program binds
/// it (by the other program here, or any process): one that exits meanwhile is started again on
/// another port, three times at most.
fn start(program: &str, args: impl Fn(&str) -> Vec<String>, request: &str, want: &str) -> (Program, SocketAddr) {
    let mut exits = Vec::new();
    for _ in 0..3 {
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let child = Command::new(program)
            .args(args(&port.to_string()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{program} (apt-get install redis-server memcached): {e}"));
        let mut running = Program(child);
        let start = Instant::now();
        loop {
            if ask(addr, request).is_some_and(|l| l.starts_with(want)) {
                return (running, addr);
            }
            if let Some(status) = running.0.try_wait().unwrap() {
                exits.push(format!("port {port}: {status}"));
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "{program} on port {port} not ready in 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("{program} exited at once three times: {exits:?}");
}

fn spec(downstream: &[(&str, String)]) -> Result<Spec, ServeError> {
    let experiment = Experiment::parse(SERVICES, Path::new("t.yaml")).unwrap();
    let options = Options {
        service: "a".into(),
        downstream: downstream.iter().map(|(n, u)| (n.to_string(), u.clone())).collect(),
        ..Options::default()
    };
    Spec::from_experiment(&experiment, &options)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_store_keys_in_redis_and_memcached_and_fail_when_they_are_gone() {
    let redis_args = |port: &str| {
        ["--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no"].map(String::from).to_vec()
    };
    let (r, redis) = start("redis-server", redis_args, "PING\r\n", "+PONG");
    let memcached_args = |port: &str| {
        let mut args = ["-l", "127.0.0.1", "-p", port, "-U", "0"].map(String::from).to_vec();
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            args.extend(["-u".into(), "root".into()]);
        }
        args
    };
    let (m, memcached) = start("memcached", memcached_args, "version\r\n", "VERSION");

    let spec = spec(&[("c", format!("redis://{redis}")), ("m", format!("memcached://{memcached}"))]).unwrap();
    let server = Server::bind(&spec, SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap().spawn().unwrap();
    let get = |addr: SocketAddr| async move {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut s, b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
        let mut text = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut s, &mut text).await.unwrap();
        text.lines().next().unwrap_or_default().to_string()
    };
    for _ in 0..30 {
        assert_eq!(get(server.addr()).await, "HTTP/1.0 200 OK");
    }
    // 30 calls over 1000 keys: each stored its key (a repeat is unlikely but possible).
    let keys: u64 = ask(redis, "DBSIZE\r\n").unwrap().trim_start_matches(':').parse().unwrap();
    assert!((25..=30).contains(&keys), "{keys}");
    drop(m);
    // With memcached gone, a request's call fails and the request answers 500.
    assert_eq!(get(server.addr()).await, "HTTP/1.0 500 Internal Server Error");
    drop(r);
}

#[test]
fn a_store_needs_its_scheme_and_addresses() {
    let err = |c: &str| match spec(&[("c", c.to_string()), ("m", "memcached://127.0.0.1:1".to_string())]) {
        Err(ServeError::Options(m)) => m,
        other => panic!("{other:?}"),
    };
    assert!(err("http://127.0.0.1:1/").contains("wrong scheme; expected redis://HOST:PORT"), "{}", err("http://x/"));
    assert!(err("redis://127.0.0.1:1,nohost").contains("\"nohost\" is not an address"));
    assert!(spec(&[("c", "redis://127.0.0.1:1,127.0.0.2:1".into()), ("m", "memcached://127.0.0.1:1".into())]).is_ok());
}
