//! Protocol switches (HTTP/1.1 `Upgrade`, RFC 9110 §7.8) through both listeners: a WebSocket
//! client and server written outside the project (tokio-tungstenite) talk through an egress with
//! the recommended policies and an ingress with adaptive admission, over real sockets.

use futures::{SinkExt, StreamExt};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tailguard_proxy::{Config, Proxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;

/// An ingress with adaptive admission in front of `app`, and an egress with the recommended
/// policies to that ingress; `limits` for both listeners.
async fn sidecars(app: SocketAddr, limits: &str) -> (Proxy, Proxy) {
    let start = |text: String| async move {
        Proxy::start(Config::parse(&text, Path::new("test.yaml")).unwrap()).await.unwrap()
    };
    let server = start(format!(
        "ingress: {{listen: 127.0.0.1:0, app: {app}, admission: {{kind: adaptive}}}}\nlimits: {limits}\nshutdown_grace: 1s\n"
    ))
    .await;
    let policy = "{balancer: {kind: prequal}, outlier: {}, timeout: {kind: adaptive}, hedge: {kind: adaptive}, retry: {max_attempts: 3}}";
    let client = start(format!(
        "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    app:\n      endpoints: [{}]\n      policy: {policy}\nlimits: {limits}\nshutdown_grace: 1s\n",
        server.ingress.unwrap()
    ))
    .await;
    (client, server)
}

#[tokio::test]
async fn a_websocket_passes_through_the_egress_and_the_ingress_once() {
    let (app, accepted) = tailguard_testkit::websocket_echo().await;
    let (client, server) = sidecars(app, "{}").await;
    for listener in [server.ingress.unwrap(), client.egress.unwrap()] {
        let url = format!("ws://{listener}/chat");
        let (mut socket, response) =
            tokio::time::timeout(Duration::from_secs(5), tokio_tungstenite::connect_async(url))
                .await
                .expect("a switch within 5 s")
                .expect("the handshake passes through");
        assert_eq!(response.status(), 101);
        let big = vec![7u8; 256 * 1024];
        for message in [Message::text("hello"), Message::binary(big), Message::text("again")] {
            socket.send(message.clone()).await.unwrap();
            let echoed = tokio::time::timeout(Duration::from_secs(5), socket.next()).await.unwrap().unwrap().unwrap();
            assert_eq!(echoed, message);
        }
        socket.close(None).await.unwrap();
    }
    // One connection to the app per WebSocket: a switch is neither retried nor hedged.
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    client.shutdown().await;
    server.shutdown().await;
}

/// Sends `bytes` on a new connection to `addr`; the first line of the answer, and all of it
/// read within a moment.
async fn raw(addr: SocketAddr, bytes: &[u8]) -> (String, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(300), stream.read(&mut buf)).await {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    let answer = String::from_utf8_lossy(&answer).into_owned();
    (answer.lines().next().unwrap_or_default().to_owned(), answer)
}

/// An app that switches any upgrade request to a raw echo, prefixing what it sends back.
async fn raw_echo() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    let Ok(n) = stream.read(&mut buf).await else { return };
                    if n == 0 {
                        return;
                    }
                    head.extend_from_slice(&buf[..n]);
                }
                let end = head.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                let switched = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n";
                if stream.write_all(switched).await.is_err() {
                    return;
                }
                let mut pending = head[end..].to_vec();
                loop {
                    if !pending.is_empty() {
                        let echoed = [b"echo:".as_slice(), &pending].concat();
                        if stream.write_all(&echoed).await.is_err() {
                            return;
                        }
                    }
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => pending = buf[..n].to_vec(),
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn bytes_sent_with_the_upgrade_request_reach_the_app_and_an_idle_tunnel_is_closed() {
    let app = raw_echo().await;
    let (client, server) = sidecars(app, "{idle_timeout: 1s}").await;
    for listener in [server.ingress.unwrap(), client.egress.unwrap()] {
        let head = b"GET /raw HTTP/1.1\r\nHost: app\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\nearly";
        let (status, answer) = raw(listener, head).await;
        assert_eq!(status, "HTTP/1.1 101 Switching Protocols", "{answer}");
        let lower = answer.to_ascii_lowercase();
        assert!(lower.contains("upgrade: echo") && lower.contains("connection: upgrade"), "{answer}");
        assert!(answer.ends_with("echo:early"), "{answer:?}");
    }
    // A tunnel with no byte either way for the idle limit is closed.
    let mut stream = TcpStream::connect(client.egress.unwrap()).await.unwrap();
    stream.write_all(b"GET /raw HTTP/1.1\r\nHost: app\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 4096];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 101"));
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    });
    closed.await.expect("the idle tunnel is closed within the idle limit and two ticks");
    client.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn an_upgrade_towards_http2_is_refused_with_501() {
    let app = raw_echo().await;
    let text = format!("ingress: {{listen: 127.0.0.1:0, app: {app}, protocol: h2c}}\n");
    let server = Proxy::start(Config::parse(&text, Path::new("test.yaml")).unwrap()).await.unwrap();
    let head = b"GET /raw HTTP/1.1\r\nHost: app\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n";
    let (status, answer) = raw(server.ingress.unwrap(), head).await;
    assert!(status.starts_with("HTTP/1.1 501"), "{answer}");
    assert!(answer.contains("ingress.protocol"), "the answer names the setting: {answer}");
    server.shutdown().await;
}
