//! Kept-alive HTTP/1 connections to one endpoint, on `hyper::client::conn::http1`.
//!
//! Each endpoint has its own [`Pool`], so finding a connection hashes nothing: the idle ones are a
//! stack (the most recently used on top, whose buffers are warm), at most [`MAX_IDLE`] deep,
//! closed after [`IDLE_TIMEOUT`]. Those a burst left that no request has taken for a whole
//! [`SWEEP_EVERY`] are surplus: half of them are closed at each sweep (as HAProxy's
//! `pool-purge-delay` closes half its idle connections every 5 s), so their buffers and the
//! endpoint's go back once the burst has passed. A request takes an idle connection or connects a
//! new one; while it connects it also waits for one to come back (as hyper-util's pooled client
//! races its connect against the checkout), and takes whichever comes first: in a burst that
//! overflows the endpoint's accept queue its SYN is dropped and resent only after a second, while
//! the connections of the requests ahead of it come back within milliseconds.
//!
//! No task per connection: hyper's connection future is polled by whoever is waiting on it. While
//! the request waits for its response head, the attempt's future polls it; then the response body
//! ([`PooledBody`]) owns the connection and polls it while the body is read, and puts it back
//! into the pool once the body has ended. A connection whose attempt or body is dropped early (a
//! cancelled attempt, a client gone mid-response) is closed, never reused. While idle in the pool
//! nothing polls it; taking it out polls it once, which finds a connection the endpoint closed.
//!
//! The connections open to an endpoint, in use or idle, are capped (`max_connections_per_endpoint`,
//! HAProxy's server `maxconn`): a request that finds no idle connection and the cap reached fails
//! at once with [`Error::Overflow`], before connecting, rather than opening one connection (and
//! descriptor) per request in flight without bound.
//!
//! An h2c endpoint (HTTP/2 by prior knowledge), and over TLS one that chooses `h2` by ALPN, gets
//! one HTTP/2 connection that carries every request, multiplexed ([`h2`]); over TLS HTTP/1.1 (or
//! no ALPN) gets the connections above.
//!
//! Opening a connection (TCP, then TLS if any) has a timeout (`connect_timeout`): an endpoint
//! whose host has gone silent drops the SYNs, and the kernel would retry them for about two
//! minutes. A connect that times out is an [`Error::Connect`] like a refused one.
//!
//! Replays follow hyper-util's client and RFC 9112 §9.3.1: a request that failed on a reused
//! connection before any of its response arrived is sent once more on a new connection when hyper
//! hands it back unsent, or when the caller can rebuild it (idempotent, buffered body) and the
//! connection was closed or reset under it (an endpoint closing an idle connection as the request
//! went out).

mod h2;

use crate::cap::{Count, Place};
use crate::http::{Body, BoxError};
use crate::tls::{self, Alpn, Stream};
use bytes::Bytes;
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper::header::HeaderValue;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use prometheus_client::metrics::counter::Counter;
use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// Idle connections kept per endpoint (as nginx's `keepalive 64`). A burst opens as many
/// connections as it has requests in flight; beyond this many, those that fall idle are closed
/// instead of holding their buffers (about 25 KiB each).
pub const MAX_IDLE: usize = 64;

/// How long an idle connection is kept (hyper-util's pooled client's default).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// How often idle connections are checked for their timeout, for the endpoint closing them, and
/// for surplus.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// How long opening a connection may take before it counts as stalled: a connect the kernel
/// completes takes microseconds to an application on the sidecar's own host, and a round trip
/// across a datacenter, while one whose SYN a full accept queue dropped is resent only after a
/// second (RFC 6298's initial timeout). A tenth of the interval a queue must stand before adaptive
/// admission acts on it, so stalled connects alone never make one stand.
pub const STALLED_DIAL: Duration = Duration::from_millis(10);

/// The idle HTTP/1 connections to one endpoint, and how to open more.
pub struct Pool {
    addr: SocketAddr,
    /// The `Host` of requests that come without one (as hyper-util's client sets it).
    host: HeaderValue,
    builder: http1::Builder,
    idle: Mutex<Idle>,
    /// Connections open now, in use or idle (each holds its place).
    open: Count,
    /// The cap on `open`.
    max_connections: AtomicUsize,
    /// How long opening a connection may take, in microseconds (changed by a reload).
    connect_timeout_us: AtomicU64,
    /// TLS towards the endpoint, if it speaks it.
    tls: Option<Arc<tls::Connector>>,
    /// Over TLS: whether the endpoint chose h2 by ALPN, and its one connection if so; with
    /// `h2c`, its one connection.
    alpn: h2::Negotiated,
    /// Whether the endpoint speaks HTTP/2 over cleartext by prior knowledge (`protocol: h2c`).
    h2c: bool,
    /// Counts the connections opened (a metric's, or nobody's).
    opened: Counter,
    /// Connections whose opening (TCP and TLS handshakes) has taken longer than
    /// [`STALLED_DIAL`] and goes on, if counted ([`Pool::counting_stalls`]).
    stalled: Option<Count>,
}

/// The idle stack, newest on top, the requests waiting for a connection while they open one, and
/// whether a sweeper watches the stack.
struct Idle {
    conns: Vec<(Box<Conn>, Instant)>,
    /// Oldest first; a sender whose request got its own connection first is closed, and skipped.
    waiting: VecDeque<oneshot::Sender<Box<Conn>>>,
    swept: bool,
    /// How many at the bottom of the stack no request has taken since the last sweep (the
    /// stack's lowest depth since): the surplus the next sweep halves.
    untouched: usize,
}

/// One connection: the handle that sends on it and the future that drives it. Always boxed: it
/// moves from the pool to the attempt to the response body and back, and hyper's connection state
/// is large.
struct Conn {
    sender: SendRequest<Body>,
    driver: Connection<TokioIo<Stream>, Body>,
    /// The waker the driver is polled with.
    relay: Arc<Relay>,
    waker: Waker,
    /// Its place under the pool's cap, given back when it closes.
    _place: Place,
}

/// The waker a connection's driver registers (for its socket and for the channels it feeds the
/// response through): it wakes the task that polled the driver last, if any, unless muted.
///
/// Muted while the response body is read: taking a chunk tells the driver there is room for the
/// next, which would wake the reading task for nothing, since it polls the driver next anyway.
#[derive(Default)]
struct Relay {
    task: Mutex<Option<Waker>>,
    muted: AtomicBool,
    /// Whether a wake came while muted (from this side, or from the socket on another thread).
    missed: AtomicBool,
}

impl std::task::Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.muted.load(Ordering::Acquire) {
            self.missed.store(true, Ordering::Release);
        } else {
            if let Some(task) = &*self.task.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) {
                task.wake_by_ref();
            }
        }
    }
}

/// Why a request got no response.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No connection to the endpoint could be opened (nothing was sent).
    #[error("connecting to {0}: {1}")]
    Connect(SocketAddr, #[source] std::io::Error),
    /// The endpoint has its cap of connections open, none idle (nothing was sent).
    #[error("{0} has {1} connections open, its limit (max_connections_per_endpoint)")]
    Overflow(SocketAddr, usize),
    /// The exchange failed.
    #[error(transparent)]
    Http(#[from] hyper::Error),
    /// The request cannot be sent over HTTP/2 (its `Host` is no URI authority).
    #[error("cannot send the request over HTTP/2: {0}")]
    Request(#[source] BoxError),
}

impl Conn {
    fn new(sender: SendRequest<Body>, driver: Connection<TokioIo<Stream>, Body>, place: Place) -> Box<Conn> {
        let relay = Arc::new(Relay::default());
        let waker = Waker::from(relay.clone());
        Box::new(Conn { sender, driver, relay, waker, _place: place })
    }

    /// Polls the connection's driver on behalf of `task` (`None`: nothing to wake, as for an idle
    /// connection); `true` once it has finished (the connection is closed).
    fn drive(&mut self, task: Option<&Waker>) -> bool {
        {
            let mut current = self.relay.task.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            match (task, &*current) {
                (Some(task), Some(old)) if old.will_wake(task) => {}
                _ => *current = task.cloned(),
            }
        }
        Pin::new(&mut self.driver).poll(&mut Context::from_waker(&self.waker)).is_ready()
    }

    /// Runs `poll` (a poll of what the driver feeds) with the relay muted. A wake missed meanwhile
    /// is passed on to `cx`'s task if `poll` is pending: it may have come from the socket, and
    /// nothing else would poll the driver again. (When `poll` is ready, the reader polls again.)
    fn muted<T>(&self, cx: &Context<'_>, poll: impl FnOnce() -> Poll<T>) -> Poll<T> {
        self.relay.muted.store(true, Ordering::Release);
        let result = poll();
        self.relay.muted.store(false, Ordering::Release);
        if self.relay.missed.swap(false, Ordering::AcqRel) && result.is_pending() {
            cx.waker().wake_by_ref();
        }
        result
    }
}

impl Pool {
    /// The pool of `addr`, empty, opening at most `max_connections` at once.
    pub fn new(addr: SocketAddr, max_connections: usize) -> Pool {
        // As hyper-util's client writes it: no port when it is the default one.
        let host = match addr {
            SocketAddr::V4(a) if a.port() == 80 => a.ip().to_string(),
            SocketAddr::V6(a) if a.port() == 80 => format!("[{}]", a.ip()),
            _ => addr.to_string(),
        };
        Pool {
            addr,
            host: HeaderValue::try_from(host).expect("a socket address is a valid header value"),
            builder: {
                // Flattened writes: a request's head and a small body leave from one buffer, which
                // costs fewer instructions than hyper's queue of buffers for a writev.
                let mut builder = http1::Builder::new();
                builder.writev(false);
                builder
            },
            idle: Mutex::new(Idle { conns: Vec::new(), waiting: VecDeque::new(), swept: false, untouched: 0 }),
            open: Count::default(),
            max_connections: AtomicUsize::new(max_connections),
            connect_timeout_us: AtomicU64::new(micros(crate::config::DEFAULT_CONNECT_TIMEOUT)),
            tls: None,
            alpn: h2::Negotiated::default(),
            h2c: false,
            opened: Counter::default(),
            stalled: None,
        }
    }

    /// The pool, speaking HTTP/2 over cleartext by prior knowledge if `h2c` (one multiplexed
    /// connection, as over TLS when the endpoint chooses h2, [`h2`]).
    pub fn with_h2c(mut self, h2c: bool) -> Pool {
        self.h2c = h2c;
        self
    }

    /// Whether the endpoint speaks h2c.
    pub fn is_h2c(&self) -> bool {
        self.h2c
    }

    /// Connections being opened for longer than [`STALLED_DIAL`]: the requests that wait on them
    /// have not reached the endpoint, nor will soon. Always 0 unless counted.
    pub fn stalled_dials(&self) -> u32 {
        self.stalled.as_ref().map_or(0, |count| u32::try_from(count.get()).unwrap_or(u32::MAX))
    }

    /// The pool, counting stalled connects if `on` (a timer more on each connect, for the
    /// ingress's adaptive admission, the only reader).
    pub fn counting_stalls(mut self, on: bool) -> Pool {
        self.stalled = on.then(Count::default);
        self
    }

    /// The pool, counting the connections it opens in `opened`.
    pub fn counting(mut self, opened: Counter) -> Pool {
        self.opened = opened;
        self
    }

    /// The pool, its connects given up after `timeout`.
    pub fn with_connect_timeout(self, timeout: Duration) -> Pool {
        self.set_connect_timeout(timeout);
        self
    }

    /// Sets how long opening a connection may take (a reloaded file's).
    pub fn set_connect_timeout(&self, timeout: Duration) {
        self.connect_timeout_us.store(micros(timeout), Ordering::Relaxed);
    }

    /// The pool, its connections made over TLS by `connector`.
    pub fn with_tls(mut self, connector: Option<Arc<tls::Connector>>) -> Pool {
        self.tls = connector;
        self
    }

    /// The TLS its connections are made with, if any.
    pub fn tls(&self) -> Option<&Arc<tls::Connector>> {
        self.tls.as_ref()
    }

    /// Sets the cap on open connections (a reloaded file's); connections beyond a lowered cap
    /// stay until they close.
    pub fn set_max_connections(&self, max_connections: usize) {
        self.max_connections.store(max_connections, Ordering::Relaxed);
    }

    /// Connections open now, in use or idle.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.open.get()
    }

    /// Idle connections now.
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.lock().conns.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Idle> {
        self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sends `request` (origin-form URI) on a kept-alive connection or a new one; its response
    /// with a body that returns the connection once read. `rebuild` remakes the request for a
    /// replay after it was written on a connection the endpoint closed; `None` when the request
    /// must not be sent twice (a non-idempotent method or a streamed body).
    ///
    /// The error type is the caller's (any that an [`Error`] converts into), so that the future
    /// needs no wrapper to convert it: that would hold a second copy of the request.
    pub async fn send<F, E>(
        self: Arc<Self>,
        mut request: Request<Body>,
        rebuild: Option<F>,
    ) -> Result<Response<Body>, E>
    where
        F: FnOnce() -> Request<Body>,
        E: From<Error>,
    {
        if self.tls.is_some() || self.h2c {
            // Boxed: TLS and h2c endpoints only, and its future would otherwise take room in every
            // attempt.
            if let Some(sender) = Box::pin(self.multiplexed()).await? {
                return Ok(Box::pin(self.send_h2(sender, request)).await?);
            }
        }
        self.set_host(&mut request);
        let (conn, reused) = match self.checkout() {
            Some(conn) => (conn, true),
            // Boxed: connecting is rare, and its future would otherwise take room in every attempt.
            None => Box::pin(self.connect_or_wait()).await?,
        };
        let (error, unsent) = match exchange(conn, request).await {
            Ok((response, conn)) => return Ok(self.respond(response, conn)),
            Err(failed) => failed,
        };
        let replay = match (unsent, rebuild) {
            _ if !reused => None,
            (Some(request), _) => Some(request),
            (None, Some(rebuild)) if closed_under(&error) => {
                let mut request = rebuild();
                self.set_host(&mut request);
                Some(request)
            }
            _ => None,
        };
        match replay {
            // Boxed: rare, and its future would otherwise take room in every attempt's.
            Some(request) => Ok(Box::pin(self.replay(request)).await?),
            None => Err(Error::from(error).into()),
        }
    }

    /// Sends a request that asks to switch protocols (a WebSocket handshake, [`crate::http::upgrade`])
    /// on a new HTTP/1.1 connection of its own, never pooled (over TLS, offering only `http/1.1`
    /// by ALPN: HTTP/2 has no such switch): if the endpoint switches (101), the connection is
    /// handed over with the response (`hyper::upgrade::on` it) and leaves the pool's count;
    /// otherwise it closes once the response has been read.
    pub async fn upgrade<E: From<Error>>(self: Arc<Self>, mut request: Request<Body>) -> Result<Response<Body>, E> {
        let (place, stream) = self.dial(Alpn::Http1).await?;
        let (mut sender, driver) = self.builder.handshake(TokioIo::new(stream)).await.map_err(Error::from)?;
        // Its own task: the connection outlives the exchange only to hand itself over.
        tokio::spawn(async move {
            let _place = place;
            let _ = driver.with_upgrades().await;
        });
        self.set_host(&mut request);
        let response = sender.send_request(request).await.map_err(Error::from)?;
        Ok(response.map(|body| {
            use http_body_util::BodyExt as _;
            body.map_err(BoxError::from).boxed()
        }))
    }

    /// Gives `request` the endpoint's `Host` unless it has one.
    fn set_host(&self, request: &mut Request<Body>) {
        if !request.headers().contains_key(hyper::header::HOST) {
            request.headers_mut().insert(hyper::header::HOST, self.host.clone());
        }
    }

    /// Sends `request` again, on a new connection.
    async fn replay(self: Arc<Self>, request: Request<Body>) -> Result<Response<Body>, Error> {
        let conn = self.connect().await?;
        match exchange(conn, request).await {
            Ok((response, conn)) => Ok(self.respond(response, conn)),
            Err((error, _)) => Err(error.into()),
        }
    }

    /// The newest idle connection, unless it has been idle too long. It is not polled here: one
    /// the endpoint closed meanwhile shows it when the exchange first polls it, before taking the
    /// request, which then comes back unsent and goes out on a new connection.
    fn checkout(&self) -> Option<Box<Conn>> {
        let mut idle = self.lock();
        let (conn, since) = idle.conns.pop()?;
        idle.untouched = idle.untouched.min(idle.conns.len());
        if since.elapsed() >= IDLE_TIMEOUT {
            // The rest of the stack is older still.
            idle.conns.clear();
            return None;
        }
        Some(conn)
    }

    /// A new HTTP/1 connection, or one another request gives back before it is open (then `true`:
    /// it was used before). A connect that loses is dropped, and its place with it.
    async fn connect_or_wait(self: &Arc<Self>) -> Result<(Box<Conn>, bool), Error> {
        let (sender, mut returned) = oneshot::channel();
        {
            let mut idle = self.lock();
            idle.waiting.retain(|w| !w.is_closed());
            idle.waiting.push_back(sender);
        }
        tokio::select! {
            biased;
            Ok(conn) = &mut returned => Ok((conn, true)),
            opened = self.connect() => {
                // One given back meanwhile would close unused with the receiver: it is kept.
                returned.close();
                if let Ok(conn) = returned.try_recv() {
                    self.keep(&mut self.lock(), conn);
                }
                Ok((opened?, false))
            }
        }
    }

    /// A new HTTP/1 connection.
    async fn connect(&self) -> Result<Box<Conn>, Error> {
        let (place, stream) = self.dial(Alpn::Any).await?;
        if stream.is_h2() {
            // The endpoint chose h2 since it was learnt to speak HTTP/1 (a new version behind
            // the same address): its next request learns it again ([`h2`]).
            self.forget_alpn();
            return Err(Error::Connect(self.addr, std::io::Error::other("the endpoint now chose h2 by ALPN")));
        }
        self.handshake(place, stream).await
    }

    /// A new connection to the endpoint (TCP, then TLS if it speaks it) within `connect_timeout`,
    /// holding its place.
    async fn dial(&self, alpn: Alpn) -> Result<(Place, Stream), Error> {
        // Reserved before connecting: connections being opened count too.
        let max = self.max_connections.load(Ordering::Relaxed);
        let place = self.open.take(max).ok_or(Error::Overflow(self.addr, max))?;
        let timeout = Duration::from_micros(self.connect_timeout_us.load(Ordering::Relaxed));
        let connect = tokio::time::timeout(timeout, self.open_stream(alpn));
        tokio::pin!(connect);
        let stream = match &self.stalled {
            None => connect.await,
            Some(stalled) => match tokio::time::timeout(STALLED_DIAL, &mut connect).await {
                Ok(stream) => stream,
                Err(_) => {
                    let _stalled = stalled.take(usize::MAX);
                    connect.await
                }
            },
        };
        let stream = stream
            .unwrap_or_else(|_| {
                Err(io::Error::new(io::ErrorKind::TimedOut, format!("no connection within {timeout:?}")))
            })
            .map_err(|e| Error::Connect(self.addr, e))?;
        self.opened.inc();
        Ok((place, stream))
    }

    /// A TCP connection to the endpoint, with TLS if it speaks it.
    async fn open_stream(&self, alpn: Alpn) -> io::Result<Stream> {
        let stream = TcpStream::connect(self.addr).await?;
        // No TCP_NODELAY for HTTP/1, as hyper-util's connector: each request head goes out in one
        // write anyway, and with it set the proxy spent ~0.7 µs more system time per request (64
        // clients through `--workers 1` to nginx, same syscalls). HTTP/2 writes a request as
        // several frames (HEADERS, DATA, WINDOW_UPDATE), and with Nagle's algorithm a frame waits
        // for the peer's (delayed) ACK of the one before (examples/peers.yaml's speculative store
        // between sidecars over h2c: p50 16.2 → 23 ms without it).
        if self.h2c {
            stream.set_nodelay(true)?;
        }
        Ok(match &self.tls {
            None => Stream::Plain(stream),
            Some(tls) => Stream::Tls(Box::new(tls.connect(self.addr, stream, alpn).await?)),
        })
    }

    /// HTTP/1 on `stream`.
    async fn handshake(&self, place: Place, stream: Stream) -> Result<Box<Conn>, Error> {
        let (sender, driver) = self.builder.handshake(TokioIo::new(stream)).await?;
        Ok(Conn::new(sender, driver, place))
    }

    fn respond(self: Arc<Self>, response: Response<Incoming>, conn: Option<Box<Conn>>) -> Response<Body> {
        response.map(|body| {
            use http_body_util::BodyExt as _;
            let mut pooled = PooledBody { body, conn, pool: self };
            if pooled.is_end_stream() {
                // Nothing to read: the connection goes back now.
                pooled.release();
            }
            pooled.map_err(BoxError::from).boxed()
        })
    }

    /// Returns `conn`, its exchange complete, to the request that has waited longest while it
    /// connects, or to the idle stack if it stays open and there is room.
    fn put(self: &Arc<Self>, mut conn: Box<Conn>) {
        // One poll lets hyper finish the exchange and ready the connection for the next request;
        // nothing needs waking until a request takes it out (and polls it with its own context).
        if conn.drive(None) || !conn.sender.is_ready() {
            return;
        }
        let mut idle = self.lock();
        while let Some(waiter) = idle.waiting.pop_front() {
            match waiter.send(conn) {
                Ok(()) => return,
                Err(back) => conn = back,
            }
        }
        self.keep(&mut idle, conn);
    }

    /// Pushes a ready `conn` onto the idle stack if there is room.
    fn keep(self: &Arc<Self>, idle: &mut Idle, conn: Box<Conn>) {
        if idle.conns.len() >= MAX_IDLE {
            return;
        }
        idle.conns.push((conn, Instant::now()));
        if !idle.swept {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                idle.swept = true;
                runtime.spawn(sweep(Arc::downgrade(self)));
            }
        }
    }

    /// Closes half the surplus (the oldest of those no request took since the last sweep) and
    /// the idle connections past their timeout or closed by the endpoint; `false` once none is
    /// left (the sweeper stops until one is put back).
    fn sweep(&self) -> bool {
        let mut idle = self.lock();
        let surplus = idle.untouched.min(idle.conns.len());
        idle.conns.drain(..surplus / 2);
        idle.conns.retain_mut(|(conn, since)| since.elapsed() < IDLE_TIMEOUT && !conn.drive(None));
        idle.untouched = idle.conns.len();
        idle.swept = !idle.conns.is_empty();
        idle.swept
    }
}

/// Sweeps a pool's idle connections every [`SWEEP_EVERY`] while it has any.
async fn sweep(pool: Weak<Pool>) {
    loop {
        tokio::time::sleep(SWEEP_EVERY).await;
        match pool.upgrade() {
            Some(pool) if pool.sweep() => {}
            _ => return,
        }
    }
}

/// `d` in whole microseconds, saturating (a file's duration is far below 584,000 years).
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Whether `error` says the connection was closed or reset before the response began: an
/// endpoint closing an idle connection as the request was written.
fn closed_under(error: &hyper::Error) -> bool {
    if error.is_incomplete_message() {
        return true;
    }
    let io = std::error::Error::source(error).and_then(|e| e.downcast_ref::<std::io::Error>());
    io.is_some_and(|e| matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe))
}

/// Sends `request` on `conn`, driving the connection until the response head arrives. On success
/// the connection comes back with the response unless it already closed; on failure, the error
/// and the request if hyper never started writing it.
#[allow(clippy::type_complexity)]
async fn exchange(
    mut conn: Box<Conn>,
    request: Request<Body>,
) -> Result<(Response<Incoming>, Option<Box<Conn>>), (hyper::Error, Option<Request<Body>>)> {
    let mut response = pin!(conn.sender.try_send_request(request));
    let mut conn = Some(conn);
    let result = poll_fn(|cx| {
        // The driver first: it writes the request and reads the response into the future.
        if conn.as_mut().is_some_and(|c| c.drive(Some(cx.waker()))) {
            // Finished: dropped, it hands back a request it never took (or fails the one it took).
            conn = None;
        }
        // Only the driver completes the response, so while it runs, the response needs no waker
        // of its own: registering this task's would wake it again for what this poll sees.
        match conn {
            Some(_) => response.as_mut().poll(&mut quiet()),
            None => response.as_mut().poll(cx),
        }
    })
    .await;
    match result {
        Ok(response) => Ok((response, conn)),
        Err(mut e) => {
            let unsent = e.take_message();
            Err((e.into_error(), unsent))
        }
    }
}

/// A context whose waker does nothing.
fn quiet() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

/// A response body that owns its connection: reading it drives the connection, and once it has
/// ended the connection goes back to the pool. Dropped before its end, it closes the connection.
struct PooledBody {
    body: Incoming,
    conn: Option<Box<Conn>>,
    pool: Arc<Pool>,
}

impl PooledBody {
    /// Polls the body, then (if it is waiting) the connection that feeds it, then the body again.
    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let PooledBody { body, conn: Some(conn), .. } = self else {
            return Pin::new(&mut self.body).poll_frame(cx);
        };
        // As in `exchange`: only the driver feeds the body, so the body is polled without a
        // waker (and the relay muted), the driver with this task's.
        if let Poll::Ready(frame) = conn.muted(cx, || Pin::new(&mut *body).poll_frame(&mut quiet())) {
            return Poll::Ready(frame);
        }
        if conn.drive(Some(cx.waker())) {
            self.conn = None;
            return Pin::new(&mut self.body).poll_frame(cx);
        }
        conn.muted(cx, || Pin::new(body).poll_frame(&mut quiet()))
    }

    fn release(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.put(conn);
        }
    }
}

impl hyper::body::Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let frame = std::task::ready!(this.poll_body(cx));
        match &frame {
            None => this.release(),
            Some(Ok(_)) if this.body.is_end_stream() => this.release(),
            Some(Err(_)) => this.conn = None,
            Some(Ok(_)) => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        // Read to its end (a reader may stop polling once the size hint is met): reusable.
        if self.body.is_end_stream() {
            self.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// What the test endpoint does with the requests on each connection.
    #[derive(Clone, Copy)]
    enum Mode {
        /// Answers every request.
        KeepAlive,
        /// Answers the first request, then closes the connection (an idle close).
        CloseAfterOne,
        /// Answers the first request; reads the second and closes without answering (an idle
        /// close racing the request).
        SwallowSecond,
        /// Answers after `delay`.
        Slow(Duration),
        /// Answers the first request after `delay`, the others at once.
        SlowFirst(Duration),
        /// Sends the head and half the body of the first request, then stalls.
        Stall,
        /// Answers with a chunked body of 20 chunks, 2 ms apart.
        Chunked,
    }

    /// An HTTP/1 endpoint on 127.0.0.1 that counts the connections it accepted and has open.
    struct Endpoint {
        addr: SocketAddr,
        accepted: Arc<AtomicUsize>,
        open: Arc<AtomicUsize>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Drop for Endpoint {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    async fn endpoint(mode: Mode) -> Endpoint {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (accepted, open) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (a, o) = (accepted.clone(), open.clone());
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                o.fetch_add(1, Ordering::SeqCst);
                let o = o.clone();
                conns.spawn(async move {
                    serve(stream, mode).await;
                    o.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Endpoint { addr, accepted, open, task }
    }

    /// Reads request heads (GETs, no bodies) and answers them as `mode` says.
    async fn serve(mut stream: TcpStream, mode: Mode) {
        let mut buf = Vec::new();
        for n in 0..1000 {
            loop {
                if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    buf.drain(..end + 4);
                    break;
                }
                let mut chunk = [0u8; 4096];
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(k) => buf.extend_from_slice(&chunk[..k]),
                }
            }
            match mode {
                Mode::SwallowSecond if n == 1 => return,
                Mode::Chunked => {
                    let head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
                    if stream.write_all(head).await.is_err() {
                        return;
                    }
                    for i in 0..20 {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        let chunk = format!("2\r\n{i:02}\r\n");
                        if stream.write_all(chunk.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                    if stream.write_all(b"0\r\n\r\n").await.is_err() {
                        return;
                    }
                    continue;
                }
                Mode::Slow(delay) => tokio::time::sleep(delay).await,
                Mode::SlowFirst(delay) if n == 0 => tokio::time::sleep(delay).await,
                Mode::Stall => {
                    let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nok").await;
                    // Until the client closes.
                    let mut chunk = [0u8; 64];
                    while let Ok(1..) = stream.read(&mut chunk).await {}
                    return;
                }
                _ => {}
            }
            if stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await.is_err() {
                return;
            }
            if matches!(mode, Mode::CloseAfterOne) {
                return;
            }
        }
    }

    fn get() -> Request<Body> {
        let mut request = Request::new(crate::http::full(Bytes::new()));
        *request.uri_mut() = Uri::from_static("/");
        request
    }

    type Rebuild = fn() -> Request<Body>;

    fn send(pool: &Arc<Pool>, rebuild: Option<Rebuild>) -> impl Future<Output = Result<Response<Body>, Error>> {
        pool.clone().send(get(), rebuild)
    }

    /// Sends a GET (replayable unless `once`) and reads its body.
    async fn fetch(pool: &Arc<Pool>, once: bool) -> Result<Bytes, Error> {
        let rebuild: Option<Rebuild> = if once { None } else { Some(get) };
        let response =
            tokio::time::timeout(Duration::from_secs(5), send(pool, rebuild)).await.expect("an answer within 5 s")?;
        Ok(response.into_body().collect().await.unwrap().to_bytes())
    }

    use hyper::Uri;

    /// Lets the endpoint's tasks see closes.
    async fn settle() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    #[test]
    fn a_request_without_host_gets_the_endpoints() {
        let host = |addr: &str| Pool::new(addr.parse().unwrap(), 1).host;
        assert_eq!(host("127.0.0.1:8080"), "127.0.0.1:8080");
        assert_eq!(host("127.0.0.1:80"), "127.0.0.1");
        assert_eq!(host("[::1]:8080"), "[::1]:8080");
        assert_eq!(host("[::1]:80"), "[::1]");
    }

    #[tokio::test]
    async fn a_kept_alive_connection_is_reused() {
        let e = endpoint(Mode::KeepAlive).await;
        let pool = Arc::new(Pool::new(e.addr, usize::MAX));
        for _ in 0..20 {
            assert_eq!(fetch(&pool, false).await.unwrap(), "ok");
        }
        assert_eq!(e.accepted.load(Ordering::SeqCst), 1);
        assert_eq!(pool.idle(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_streamed_body_is_read_whole_across_threads_and_its_connection_reused() {
        let e = endpoint(Mode::Chunked).await;
        let pool = Arc::new(Pool::new(e.addr, usize::MAX));
        let expected: String = (0..20).map(|i| format!("{i:02}")).collect();
        // Two threads: the socket's wakes may come from the other one while the body is read.
        for _ in 0..5 {
            let body = tokio::spawn({
                let pool = pool.clone();
                async move { fetch(&pool, false).await.unwrap() }
            });
            assert_eq!(body.await.unwrap(), expected.as_str());
        }
        assert_eq!(e.accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_connection_the_endpoint_closed_while_idle_carries_no_request() {
        let e = endpoint(Mode::CloseAfterOne).await;
        let pool = Arc::new(Pool::new(e.addr, usize::MAX));
        // From the second on, each request is handed the connection the endpoint closed after the
        // last answer; it comes back unsent and goes out on a new connection, although it may
        // not be sent twice.
        for _ in 0..3 {
            assert_eq!(fetch(&pool, true).await.unwrap(), "ok");
            settle().await;
        }
        assert_eq!(e.accepted.load(Ordering::SeqCst), 3);
        // The sweeper's pass drops it from the idle stack.
        pool.sweep();
        assert_eq!(pool.idle(), 0);
    }

    #[tokio::test]
    async fn a_request_the_endpoint_closed_under_is_replayed_on_a_new_connection() {
        let e = endpoint(Mode::SwallowSecond).await;
        let pool = Arc::new(Pool::new(e.addr, usize::MAX));
        assert_eq!(fetch(&pool, false).await.unwrap(), "ok");
        // Written on the kept-alive connection, which closes unanswered: sent again on a new one.
        assert_eq!(fetch(&pool, false).await.unwrap(), "ok");
        assert_eq!(e.accepted.load(Ordering::SeqCst), 2);
        // A request that may not be sent twice fails instead.
        let error = fetch(&pool, true).await.unwrap_err();
        assert!(matches!(&error, Error::Http(e) if e.is_incomplete_message()), "{error}");
        assert_eq!(e.accepted.load(Ordering::SeqCst), 2);
    }

    /// A request whose connect hangs (the endpoint's accept queue full, so its SYN is dropped)
    /// takes the connection another request gives back, rather than waiting out its connect.
    #[tokio::test]
    async fn a_request_whose_connect_hangs_takes_a_connection_given_back_meanwhile() {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(0).unwrap();
        let addr = listener.local_addr().unwrap();
        // The endpoint accepts one connection, the pool's first, and answers its first request
        // after 1.5 s, the next at once.
        let served = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            serve(stream, Mode::SlowFirst(Duration::from_millis(1500))).await;
            listener
        });
        let pool = Arc::new(Pool::new(addr, 8).with_connect_timeout(Duration::from_secs(30)).counting_stalls(true));
        let first = tokio::spawn({
            let pool = pool.clone();
            async move { fetch(&pool, false).await }
        });
        while pool.opened.get() == 0 {
            tokio::task::yield_now().await;
        }
        // Then its accept queue fills and stays full: every further SYN is dropped.
        let mut held = Vec::new();
        while let Ok(Ok(stream)) = tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await {
            held.push(stream);
            assert!(held.len() < 16, "the accept queue of {addr} never filled");
        }
        assert!(!first.is_finished(), "the first request still holds the one connection");
        // Within fetch's 5 s only the first request's connection can answer the second; until
        // then its connect hangs, counted as stalled (not at the endpoint, nor soon) once it has
        // taken STALLED_DIAL.
        let dialed = Instant::now();
        let second = tokio::spawn({
            let pool = pool.clone();
            async move { fetch(&pool, false).await }
        });
        for _ in 0..100 {
            if pool.stalled_dials() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(pool.stalled_dials(), 1);
        assert!(dialed.elapsed() >= STALLED_DIAL, "counted as stalled after {:?}", dialed.elapsed());
        assert_eq!(second.await.unwrap().unwrap(), "ok");
        assert_eq!(pool.stalled_dials(), 0, "the hung connect, dropped, is no longer counted");
        assert_eq!(first.await.unwrap().unwrap(), "ok");
        assert!(!served.is_finished(), "the endpoint's one connection stays open");
        assert_eq!(
            (pool.opened.get(), pool.open()),
            (1, 1),
            "one connection opened; the hung connect gave its place back"
        );
    }

    #[tokio::test]
    async fn a_connection_abandoned_mid_response_is_closed_not_reused() {
        let e = endpoint(Mode::Stall).await;
        let pool = Arc::new(Pool::new(e.addr, usize::MAX));
        // The head came, the body stalls: dropping the body drops the connection.
        let response = send(&pool, None).await.unwrap();
        let mut body = response.into_body();
        let first = tokio::time::timeout(Duration::from_secs(5), body.frame()).await.unwrap();
        assert_eq!(first.unwrap().unwrap().into_data().unwrap(), "ok");
        drop(body);
        assert_eq!(pool.idle(), 0);
        settle().await;
        assert_eq!(e.open.load(Ordering::SeqCst), 0, "the endpoint saw the connection close");
        // Dropped before its head (an attempt cancelled by a timeout): likewise, and the pool
        // counts the connection it opens in its place.
        let e = endpoint(Mode::Slow(Duration::from_millis(300))).await;
        let opened = Counter::default();
        let pool = Arc::new(Pool::new(e.addr, usize::MAX).counting(opened.clone()));
        assert_eq!(fetch(&pool, false).await.unwrap(), "ok");
        let attempt = send(&pool, None);
        assert!(tokio::time::timeout(Duration::from_millis(100), attempt).await.is_err());
        assert_eq!(pool.idle(), 0);
        assert_eq!(opened.get(), 1);
        assert_eq!(fetch(&pool, false).await.unwrap(), "ok");
        assert_eq!(e.accepted.load(Ordering::SeqCst), 2);
        assert_eq!(opened.get(), 2);
    }

    #[tokio::test]
    async fn at_most_max_idle_connections_are_kept() {
        let e = endpoint(Mode::Slow(Duration::from_millis(200))).await;
        let pool = Arc::new(Pool::new(e.addr, usize::MAX));
        let burst = MAX_IDLE + 6;
        let mut requests = tokio::task::JoinSet::new();
        for _ in 0..burst {
            let pool = pool.clone();
            requests.spawn(async move { fetch(&pool, false).await.unwrap() });
        }
        while let Some(body) = requests.join_next().await {
            assert_eq!(body.unwrap(), "ok");
        }
        assert_eq!(e.accepted.load(Ordering::SeqCst), burst);
        assert_eq!(pool.idle(), MAX_IDLE);
        settle().await;
        assert_eq!(e.open.load(Ordering::SeqCst), MAX_IDLE);
    }

    #[tokio::test]
    async fn a_bursts_surplus_is_halved_at_each_sweep_the_connections_in_use_stay() {
        let e = endpoint(Mode::Slow(Duration::from_millis(100))).await;
        let pool = Arc::new(Pool::new(e.addr, usize::MAX));
        let mut requests = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let pool = pool.clone();
            requests.spawn(async move { fetch(&pool, false).await.unwrap() });
        }
        while let Some(body) = requests.join_next().await {
            assert_eq!(body.unwrap(), "ok");
        }
        let mut idle = vec![pool.idle()];
        // The first sweep only marks the eight; one request between the next two takes one (the
        // newest) and leaves three untouched below it.
        for fetches in [0, 0, 1, 0, 0, 0, 0] {
            for _ in 0..fetches {
                assert_eq!(fetch(&pool, false).await.unwrap(), "ok");
            }
            pool.sweep();
            idle.push(pool.idle());
        }
        assert_eq!(idle, [8, 8, 4, 3, 2, 1, 1, 1]);
        settle().await;
        assert_eq!(e.open.load(Ordering::SeqCst), 1, "the endpoint saw the surplus close");
        assert_eq!(e.accepted.load(Ordering::SeqCst), 8);
    }

    #[tokio::test]
    async fn beyond_max_connections_a_request_fails_at_once_and_idle_ones_are_reused() {
        let e = endpoint(Mode::Slow(Duration::from_millis(300))).await;
        let pool = Arc::new(Pool::new(e.addr, 2));
        let mut requests = tokio::task::JoinSet::new();
        for _ in 0..2 {
            let pool = pool.clone();
            requests.spawn(async move { fetch(&pool, false).await.unwrap() });
        }
        settle().await;
        assert_eq!(pool.open(), 2);
        // Both connections busy: the third fails before connecting, long before they answer.
        let started = Instant::now();
        let error = fetch(&pool, false).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_millis(100), "{:?}", started.elapsed());
        assert!(matches!(error, Error::Overflow(addr, 2) if addr == e.addr), "{error}");
        assert_eq!(
            error.to_string(),
            format!("{} has 2 connections open, its limit (max_connections_per_endpoint)", e.addr)
        );
        while let Some(body) = requests.join_next().await {
            assert_eq!(body.unwrap(), "ok");
        }
        // Idle, they count against the cap and are reused.
        assert_eq!((pool.idle(), pool.open()), (2, 2));
        assert_eq!(fetch(&pool, false).await.unwrap(), "ok");
        assert_eq!(e.accepted.load(Ordering::SeqCst), 2);
        // A connection dropped mid-request gives its place back.
        let attempt = send(&pool, None);
        assert!(tokio::time::timeout(Duration::from_millis(50), attempt).await.is_err());
        assert_eq!(pool.open(), 1);
    }
}
