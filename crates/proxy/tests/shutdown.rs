//! The proxy's graceful shutdown (what SIGTERM starts) over real sockets on 127.0.0.1: requests
//! already read are answered, kept-alive HTTP/1 clients are told to leave with
//! `Connection: close`, and a shutdown with nothing in flight ends at once (docs/proxy.md).

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tailguard_proxy::{Config, Proxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};

/// A backend that answers `/slow` only once its gate opens, and anything else at once.
struct GatedBackend {
    addr: SocketAddr,
    /// Notified as each `/slow` request arrives.
    arrived: Arc<Notify>,
    gate: watch::Sender<bool>,
}

impl GatedBackend {
    async fn start() -> GatedBackend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let arrived = Arc::new(Notify::new());
        let (gate, opened) = watch::channel(false);
        let told = arrived.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (told, opened) = (told.clone(), opened.clone());
                let service = service_fn(move |req: Request<Incoming>| {
                    let (told, mut opened) = (told.clone(), opened.clone());
                    async move {
                        if req.uri().path() == "/slow" {
                            told.notify_one();
                            let _ = opened.wait_for(|open| *open).await;
                        }
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                    }
                });
                tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
            }
        });
        GatedBackend { addr, arrived, gate }
    }

    fn open(&self) {
        self.gate.send_replace(true);
    }
}

/// A proxy whose egress sends everything to `backend`, with a grace period of `grace`.
async fn egress(backend: &GatedBackend, grace: &str) -> Proxy {
    let text = format!(
        "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc:\n      endpoints: [{}]\nshutdown_grace: {grace}\n",
        backend.addr
    );
    Proxy::start(Config::parse(&text, Path::new("test.yaml")).unwrap()).await.unwrap()
}

/// Writes a GET of `path` on `stream`.
async fn send(stream: &mut TcpStream, path: &str) {
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: svc\r\n\r\n").as_bytes()).await.unwrap();
}

/// Reads one response (head, and a body of its Content-Length) from `stream`; "" if the
/// connection ended (closed or reset) before a whole one came.
async fn response(stream: &mut TcpStream) -> String {
    let mut read = Vec::new();
    let mut byte = [0u8; 1];
    let read_one = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match stream.read(&mut byte).await {
                Ok(1) => read.push(byte[0]),
                _ => return false,
            }
            let text = String::from_utf8_lossy(&read).to_ascii_lowercase();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse::<usize>().unwrap());
                if read.len() == end + 4 + length {
                    return true;
                }
            }
        }
    });
    if read_one.await.expect("no answer and no close within 5 s") {
        String::from_utf8(read).unwrap().to_ascii_lowercase()
    } else {
        String::new()
    }
}

/// Whether the peer has closed `stream` (EOF or reset) rather than sent more, within 5 s.
async fn closed(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte)).await;
    matches!(read, Ok(Ok(0) | Err(_)))
}

/// Connects to `addr` until it refuses: the listener has closed.
async fn until_refused(addr: SocketAddr) {
    tokio::time::timeout(Duration::from_secs(5), async {
        while TcpStream::connect(addr).await.is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the listener still accepts 5 s after the shutdown began");
}

#[tokio::test]
async fn a_request_sent_on_a_kept_alive_connection_as_the_shutdown_begins_is_answered() {
    let backend = GatedBackend::start().await;
    let proxy = egress(&backend, "5s").await;
    let addr = proxy.egress.unwrap();
    // A client with a kept-alive connection, idle after its first request.
    let mut kept = TcpStream::connect(addr).await.unwrap();
    send(&mut kept, "/fast").await;
    let first = response(&mut kept).await;
    assert!(first.starts_with("http/1.1 200") && !first.contains("connection: close"), "{first:?}");
    // Another request is in flight when the shutdown begins.
    let mut busy = TcpStream::connect(addr).await.unwrap();
    send(&mut busy, "/slow").await;
    backend.arrived.notified().await;
    let stopping = tokio::spawn(proxy.shutdown());
    until_refused(addr).await;
    // The listener has closed; the client sends its next request on the kept-alive connection,
    // as a pooled client does. Before, the proxy closed idle connections at once and reset this
    // request unread (issue #21's one cut under SIGTERM).
    send(&mut kept, "/fast").await;
    let next = response(&mut kept).await;
    assert!(next.starts_with("http/1.1 200"), "the request on the kept-alive connection was cut: {next:?}");
    assert!(next.contains("connection: close"), "the client is not told to leave: {next:?}");
    assert!(closed(&mut kept).await, "the connection stays open after its `Connection: close` response");
    // The request in flight is answered too, with the same word, and then the shutdown ends.
    assert!(!stopping.is_finished());
    backend.open();
    let last = response(&mut busy).await;
    assert!(last.starts_with("http/1.1 200") && last.contains("connection: close"), "{last:?}");
    tokio::time::timeout(Duration::from_secs(2), stopping).await.expect("the shutdown ended").unwrap();
}

#[tokio::test]
async fn with_nothing_in_flight_a_shutdown_closes_idle_connections_at_once() {
    let backend = GatedBackend::start().await;
    let proxy = egress(&backend, "30s").await;
    let addr = proxy.egress.unwrap();
    let mut kept = TcpStream::connect(addr).await.unwrap();
    send(&mut kept, "/fast").await;
    assert!(response(&mut kept).await.starts_with("http/1.1 200"));
    // A connection that has sent nothing yet, and the idle kept-alive one: neither holds the
    // shutdown for its grace period.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), proxy.shutdown())
        .await
        .expect("the shutdown waited for idle connections");
    assert!(closed(&mut kept).await && closed(&mut silent).await);
}
