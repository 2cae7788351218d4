//! Calls to real key-value stores (redis, memcached nodes, docs/lab.md): each call is a GET of a
//! key and, on a miss, a SET of it (cache-aside), over the store's own protocol (RESP, memcached's
//! text protocol), straight to a replica: the sidecar speaks HTTP only, so its policies do not
//! apply to these edges. Keys are spread over the replicas by key, as memcached and redis cluster
//! clients do.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufStream};
use tokio::net::TcpStream;

/// Distinct keys the callers use.
pub const KEYS: u64 = 1000;
/// Bytes of each stored value.
pub const VALUE_BYTES: usize = 100;
/// The longest one command (connect included) may take before the call fails.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest reply line read (a value's header or a status).
const MAX_LINE: u64 = 1024;

/// A store's protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Redis,
    Memcached,
}

/// One store edge: its replicas and idle connections to them.
#[derive(Clone, Debug)]
pub struct Store {
    protocol: Protocol,
    replicas: Arc<Vec<SocketAddr>>,
    idle: Arc<Mutex<HashMap<SocketAddr, Vec<BufStream<TcpStream>>>>>,
    next: Arc<AtomicU64>,
}

impl Store {
    /// A store at `replicas` (at least one).
    pub fn new(protocol: Protocol, replicas: Vec<SocketAddr>) -> Store {
        assert!(!replicas.is_empty(), "a store has at least one replica");
        Store { protocol, replicas: Arc::new(replicas), idle: Arc::default(), next: Arc::default() }
    }

    /// One call: GET a key, SET it on a miss. Errors say what went wrong (the caller names the
    /// callee).
    pub async fn call(&self) -> Result<(), String> {
        // A well-mixed sequence over the key space (splitmix64 of a counter).
        let mut z = self.next.fetch_add(1, Ordering::Relaxed).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        let k = (z ^ (z >> 31)) % KEYS;
        let addr = self.replicas[(k % self.replicas.len() as u64) as usize];
        let key = format!("tailguard:{k}");
        // An idle connection the store has closed fails at once: that one attempt is made again
        // on a new connection, as pooling clients do.
        let pooled = self.idle.lock().expect("no panic while held").get_mut(&addr).and_then(Vec::pop);
        let reused = pooled.is_some();
        let mut conn = match pooled {
            Some(conn) => conn,
            None => self.connect(addr).await?,
        };
        let mut outcome = self.exchange(&mut conn, addr, &key).await;
        if outcome.is_err() && reused {
            conn = self.connect(addr).await?;
            outcome = self.exchange(&mut conn, addr, &key).await;
        }
        // Only a connection whose exchange completed is reused: any other may hold half a reply.
        if outcome.is_ok() {
            self.idle.lock().expect("no panic while held").entry(addr).or_default().push(conn);
        }
        outcome.map_err(|e| format!("{addr}: {e}"))
    }

    async fn exchange(&self, conn: &mut BufStream<TcpStream>, addr: SocketAddr, key: &str) -> Result<(), String> {
        tokio::time::timeout(COMMAND_TIMEOUT, get_or_set(self.protocol, conn, key))
            .await
            .unwrap_or_else(|_| Err(format!("no answer from {addr} within {COMMAND_TIMEOUT:?}")))
    }

    async fn connect(&self, addr: SocketAddr) -> Result<BufStream<TcpStream>, String> {
        let stream = tokio::time::timeout(COMMAND_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| format!("connecting to {addr} took over {COMMAND_TIMEOUT:?}"))?
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        Ok(BufStream::new(stream))
    }
}

async fn get_or_set(protocol: Protocol, conn: &mut BufStream<TcpStream>, key: &str) -> Result<(), String> {
    let value = "v".repeat(VALUE_BYTES);
    match protocol {
        Protocol::Redis => {
            send(conn, &resp(&["GET", key])).await?;
            let line = line(conn).await?;
            if line == "$-1" {
                send(conn, &resp(&["SET", key, &value])).await?;
                return expect(line_of(conn).await?, "+OK");
            }
            let len: usize = line
                .strip_prefix('$')
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("unexpected reply to GET: {line:?}"))?;
            skip(conn, len + 2).await
        }
        Protocol::Memcached => {
            send(conn, format!("get {key}\r\n").as_bytes()).await?;
            let line = line(conn).await?;
            if line == "END" {
                send(conn, format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes()).await?;
                return expect(line_of(conn).await?, "STORED");
            }
            let len: usize = line
                .strip_prefix("VALUE ")
                .and_then(|rest| rest.split(' ').nth(2))
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("unexpected reply to get: {line:?}"))?;
            skip(conn, len + 2).await?;
            expect(line_of(conn).await?, "END")
        }
    }
}

/// A RESP array of bulk strings.
fn resp(parts: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", parts.len());
    for p in parts {
        out.push_str(&format!("${}\r\n{p}\r\n", p.len()));
    }
    out.into_bytes()
}

async fn send(conn: &mut BufStream<TcpStream>, bytes: &[u8]) -> Result<(), String> {
    conn.write_all(bytes).await.map_err(|e| format!("sending: {e}"))?;
    conn.flush().await.map_err(|e| format!("sending: {e}"))
}

/// One reply line without its CRLF; an error reply or a closed connection is an error.
async fn line(conn: &mut BufStream<TcpStream>) -> Result<String, String> {
    let line = line_of(conn).await?;
    if line.starts_with('-') || line.starts_with("ERROR") || line.starts_with("SERVER_ERROR") {
        return Err(format!("the store answered {line:?}"));
    }
    Ok(line)
}

async fn line_of(conn: &mut BufStream<TcpStream>) -> Result<String, String> {
    let mut text = String::new();
    let n = (&mut *conn).take(MAX_LINE).read_line(&mut text).await.map_err(|e| format!("reading: {e}"))?;
    if n == 0 {
        return Err("the connection was closed".to_string());
    }
    if !text.ends_with("\r\n") {
        return Err(format!("a reply line longer than {MAX_LINE} bytes or cut short: {text:?}"));
    }
    text.truncate(text.len() - 2);
    Ok(text)
}

async fn skip(conn: &mut BufStream<TcpStream>, n: usize) -> Result<(), String> {
    let mut buf = vec![0; n];
    conn.read_exact(&mut buf).await.map_err(|e| format!("reading a value: {e}"))?;
    Ok(())
}

fn expect(line: String, want: &str) -> Result<(), String> {
    if line == want {
        Ok(())
    } else {
        Err(format!("expected {want:?}, the store answered {line:?}"))
    }
}
