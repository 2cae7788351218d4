//! What the proxy's test binaries share: a backend on a loopback port that answers as told, the
//! protocol suites' tools, child processes run within a bound, a port that refuses connects.
//!
//! A crate of its own, so that the backend's HTTP server is compiled once, here, not in every test
//! binary (with `Backend::serve` boxed; CONTRIBUTING.md, "Before a change lands").

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

/// How a test backend answers.
#[derive(Clone, Copy)]
pub enum Mode {
    /// 200 after `delay`, with a chip.
    Ok(Duration),
    /// 200 after `delay`, one request at a time: the others wait their turn in arrival order (an
    /// application with one worker; one such backend per test binary).
    Serial(Duration),
    /// This status at once.
    Status(u16),
    /// 429 at once, as an ingress's admission refuses (`x-tailguard-refused: 1`).
    Refused,
    /// Never answers.
    Hang,
    /// Never answers a request for this path; 200 at once to any other.
    HangOn(&'static str),
    /// 200 after `slow` to a request whose path starts with `prefix` (a slow route, whose work
    /// belongs to the request), after `other` to any other.
    SlowOn { prefix: &'static str, slow: Duration, other: Duration },
    /// Reads the whole request body first, then 200 with its length in `x-body-length` (500 if
    /// the body failed).
    Read,
}

impl Mode {
    /// Whether the mode treats a request for `path` apart (`HangOn`'s path, `SlowOn`'s prefix).
    fn singles_out(&self, path: &str) -> bool {
        match *self {
            Mode::HangOn(hung) => path == hung,
            Mode::SlowOn { prefix, .. } => path.starts_with(prefix),
            _ => false,
        }
    }
}

/// A backend on port 0; dropping or killing it closes its listener and every connection.
pub struct Backend {
    pub addr: SocketAddr,
    pub hits: Arc<AtomicUsize>,
    /// Requests for the path its mode treats apart ([`Mode::HangOn`], [`Mode::SlowOn`]).
    pub singled_out: Arc<AtomicUsize>,
    /// Connections accepted.
    pub accepted: Arc<AtomicUsize>,
    pub task: JoinHandle<()>,
}

impl Backend {
    pub async fn start(name: &'static str, mode: Mode) -> Backend {
        Backend::start_on("127.0.0.1:0".parse().unwrap(), name, mode).await
    }

    /// The same, speaking HTTP/2 with prior knowledge (h2c) instead of HTTP/1.1.
    pub async fn start_h2c(name: &'static str, mode: Mode) -> Backend {
        Backend::serve("127.0.0.1:0".parse().unwrap(), true, name, mode).await
    }

    /// Listens on `addr` (port 0: any free port), e.g. another loopback address, as pods share a port.
    pub async fn start_on(addr: SocketAddr, name: &'static str, mode: Mode) -> Backend {
        Backend::serve(addr, false, name, mode).await
    }

    /// Boxed, so that its server is compiled here once: an async fn's body is compiled again
    /// into every crate that awaits it.
    fn serve(
        addr: SocketAddr,
        h2c: bool,
        name: &'static str,
        mode: Mode,
    ) -> Pin<Box<dyn Future<Output = Backend> + Send>> {
        Box::pin(Backend::bind(addr, h2c, name, mode))
    }

    async fn bind(addr: SocketAddr, h2c: bool, name: &'static str, mode: Mode) -> Backend {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        let singled_out = Arc::new(AtomicUsize::new(0));
        let apart = singled_out.clone();
        let accepted = Arc::new(AtomicUsize::new(0));
        let accepts = accepted.clone();
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                accepts.fetch_add(1, Ordering::SeqCst);
                let (counter, apart) = (counter.clone(), apart.clone());
                let service = service_fn(move |req: Request<Incoming>| {
                    counter.fetch_add(1, Ordering::SeqCst);
                    if mode.singles_out(req.uri().path()) {
                        apart.fetch_add(1, Ordering::SeqCst);
                    }
                    answer(name, mode, req)
                });
                let io = TokioIo::new(stream);
                conns.spawn(async move {
                    let _ = if h2c {
                        http2::Builder::new(TokioExecutor::new()).serve_connection(io, service).await
                    } else {
                        http1::Builder::new().serve_connection(io, service).await
                    };
                });
            }
        });
        Backend { addr, hits, singled_out, accepted, task }
    }

    /// An address something else serves (a sidecar in front of a backend), for the helpers that
    /// take a [`Backend`]: it counts nothing and owns no task.
    pub fn elsewhere(addr: SocketAddr) -> Backend {
        Backend {
            addr,
            hits: Arc::default(),
            singled_out: Arc::default(),
            accepted: Arc::default(),
            task: tokio::spawn(async {}),
        }
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    pub fn kill(&self) {
        self.task.abort();
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The backend's answer: its name, which tailguard headers it saw (`x-seen`), every value of
/// `x-repeat` it was sent (`x-repeats`) and the names of all headers it was sent (`x-names`).
async fn answer(name: &str, mode: Mode, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let seen: Vec<String> = req
        .headers()
        .iter()
        .filter(|(k, _)| k.as_str().starts_with("x-tailguard-"))
        .map(|(k, v)| format!("{k}={}", v.to_str().unwrap_or("?")))
        .collect();
    let repeats: Vec<&str> = req.headers().get_all("x-repeat").iter().map(|v| v.to_str().unwrap_or("?")).collect();
    let repeats = repeats.join(",");
    let names: Vec<&str> = req.headers().keys().map(|k| k.as_str()).collect();
    let names = names.join(",");
    let mut body_length = 0;
    let status = match mode {
        Mode::Ok(delay) => {
            tokio::time::sleep(delay).await;
            200
        }
        Mode::Serial(delay) => {
            // tokio's mutex is fair: waiters get it in the order they asked.
            static WORKER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
            let _worker = WORKER.lock().await;
            tokio::time::sleep(delay).await;
            200
        }
        Mode::Status(s) => s,
        Mode::Refused => 429,
        Mode::Hang => {
            std::future::pending::<()>().await;
            500
        }
        Mode::HangOn(_) if mode.singles_out(req.uri().path()) => {
            std::future::pending::<()>().await;
            500
        }
        Mode::HangOn(_) => 200,
        Mode::SlowOn { slow, other, .. } => {
            tokio::time::sleep(if mode.singles_out(req.uri().path()) { slow } else { other }).await;
            200
        }
        Mode::Read => match req.into_body().collect().await {
            Ok(body) => {
                body_length = body.to_bytes().len();
                200
            }
            Err(_) => 500,
        },
    };
    let mut response = Response::builder().status(status);
    if matches!(mode, Mode::Refused) {
        response = response.header("x-tailguard-refused", "1");
    }
    let response = response
        .header("x-tailguard-chip", "1")
        .header("x-tailguard-deadline", "spoof")
        .header("x-seen", seen.join(","))
        .header("x-repeats", repeats)
        .header("x-names", names)
        .header("x-body-length", body_length)
        .body(Full::new(Bytes::from(name.to_string())))
        .unwrap();
    Ok(response)
}

/// A WebSocket echo application on a loopback port (tokio-tungstenite): it sends every text
/// and binary message back. Its address, and how many connections it has accepted.
pub async fn websocket_echo() -> (SocketAddr, Arc<AtomicUsize>) {
    use futures::{SinkExt, StreamExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else { return };
                while let Some(Ok(message)) = socket.next().await {
                    if (message.is_text() || message.is_binary()) && socket.send(message).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted)
}

/// A protocol-suite tool built by `make suites` (`target/tools/NAME`: h2spec, grpc-go's interop
/// server and client). Absent, the test says loudly that it skips and gets `None`, unless
/// `TAILGUARD_REQUIRE_SUITES` is set (as `make test` sets it, having built them): then it fails.
pub fn suite_tool(name: &str) -> Option<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = root.join("target/tools").join(name);
    if path.is_file() {
        return Some(path);
    }
    missing(format!("{} is missing: `make suites` builds it (make test does)", path.display()))
}

/// Whether the program `name` runs from `PATH` (a Debian package's, `package`, which `make deps`
/// installs); if not, skipping or failing as [`suite_tool`] does.
pub fn system_tool(name: &str, package: &str) -> bool {
    let runs = std::process::Command::new(name).arg("--version").output().is_ok_and(|o| o.status.success());
    if !runs {
        missing::<()>(format!("{name} is missing: Debian's {package} has it (`make deps` installs it)"));
    }
    runs
}

/// A missing tool: fails under `TAILGUARD_REQUIRE_SUITES`, else says loudly that the test skips.
fn missing<T>(why: String) -> Option<T> {
    assert!(std::env::var_os("TAILGUARD_REQUIRE_SUITES").is_none(), "{why}");
    eprintln!("SKIPPED: {why}");
    None
}

/// A child process that is killed, by its own id, when dropped.
pub struct Killed(pub std::process::Child);

/// Two processes that keep the machine's cores busy until dropped (`sh` loops, each stopped by
/// its own id).
pub fn busy_cores() -> [Killed; 2] {
    let spin = || {
        let child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .stdin(std::process::Stdio::null())
            .spawn();
        Killed(child.expect("sh starts"))
    };
    [spin(), spin()]
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `command` to its end within `limit` (killed past it); its exit status, stdout and
/// stderr, or `None` if it had to be killed.
pub fn run_bounded(
    command: &mut std::process::Command,
    limit: Duration,
) -> Option<(std::process::ExitStatus, String, String)> {
    use std::io::Read;
    use std::process::Stdio;
    let child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
    let mut child = Killed(child.unwrap_or_else(|e| panic!("cannot start {command:?}: {e}")));
    // Drained on threads of their own, so that a full pipe never stalls the child.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.0.stdout.take().expect("piped")));
    let stderr = drain(Box::new(child.0.stderr.take().expect("piped")));
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("the child can be waited for") {
            break Some(status);
        }
        if start.elapsed() > limit {
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    drop(child);
    let (stdout, stderr) = (stdout.join().unwrap_or_default(), stderr.join().unwrap_or_default());
    status.map(|status| (status, stdout, stderr))
}

/// A loopback port bound but not listening, held while this lives: connects to it are refused,
/// and no other socket can take the port meanwhile (a listener dropped at once frees its port for
/// the next test's backend to take, and connects then went to that backend instead).
pub struct Refusing {
    _socket: tokio::net::TcpSocket,
    pub addr: SocketAddr,
}

impl Refusing {
    pub fn bind() -> Refusing {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = socket.local_addr().unwrap();
        Refusing { _socket: socket, addr }
    }
}
