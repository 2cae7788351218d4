//! Accept loops: HTTP/1.1 and h2c (prior knowledge) connections, or TLS ones (HTTP/2 by ALPN),
//! served by a handler, within the listener's limits (docs/proxy.md, "Limits"), with graceful
//! shutdown (stop accepting, let in-flight requests finish, give up after a grace period; see
//! `drain`).

use crate::body::ClientBody;
use crate::config::{Limits, Network};
use crate::http::{self, Body, BoxError};
use crate::tls::{Acceptor, TrustedIdentity};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::header::{HeaderValue, CONNECTION};
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper::server::conn::{http1, http2};
use hyper::service::{service_fn, HttpService};
use hyper::upgrade::OnUpgrade;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

mod drain;
mod park;
mod preface;
mod silent;

use drain::{Drain, InFlight, Phase};
use park::{Park, Parker, Step, PARK_AFTER};
use silent::Silent;

/// Serves `listener` with `handler` (given each request and its peer's address) until `stop`
/// turns true, then drains for at most `grace`; over TLS when given an acceptor, and then a
/// request whose client certificate proves a trusted identity carries a [`TrustedIdentity`].
/// Callers in `trusted_peers`, or with a trusted identity, are not held to HTTP/2's limits on
/// reset streams, which are for strangers ([`Builders`]).
/// Malformed requests are answered 400 by hyper and close only their own connection; the
/// proxy's own replies to a gRPC request are sent in gRPC's trailers-only form.
pub async fn serve<H, F>(
    listener: TcpListener,
    tls: Option<Arc<Acceptor>>,
    handler: H,
    limits: Limits,
    trusted_peers: Vec<Network>,
    mut stop: watch::Receiver<bool>,
    grace: Duration,
) where
    H: Fn(Request<ClientBody>, SocketAddr) -> F + Clone + Unpin + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let drain = Drain::new();
    let builders = Arc::new(Builders::new(&limits, trusted_peers));
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let silent = Arc::new(Silent::default());
    let spawn = |stream: TcpStream, peer, slot| {
        let _ = stream.set_nodelay(true);
        let (builders, handler, entry, tls, drain) =
            (builders.clone(), handler.clone(), silent.enter(), tls.clone(), drain.clone());
        tokio::spawn(async move {
            open(stream, peer, tls, entry, builders, handler, drain).await;
            drop(slot);
        });
    };
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors and the like: back off instead of spinning.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    break;
                }
                continue;
            }
        };
        // A connection slot: at `max_connections`, the oldest connections that have sent nothing
        // are closed to make room (server/silent.rs); if none has, this one waits for a slot
        // and the ones after it in the kernel's listen backlog.
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                silent.close_oldest(silent::CLOSED_PER_ARRIVAL);
                tokio::select! {
                    slot = slots.clone().acquire_owned() => match slot {
                        Ok(slot) => slot,
                        Err(_) => break,
                    },
                    changed = stop.changed() => {
                        if changed.is_err() || *stop.borrow() {
                            break;
                        }
                        continue;
                    }
                }
            }
        };
        spawn(stream, peer, slot);
    }
    // The kernel has completed the connects queued for accept: closing the listener would reset
    // them, with their first request perhaps sent. They are served (and drained) like the rest.
    while let Some((stream, peer)) = queued(&listener).await {
        if let Ok(slot) = slots.clone().try_acquire_owned() {
            spawn(stream, peer, slot);
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(grace, drain.run()).await;
}

/// A connection the kernel has already accepted, if any, without waiting for one.
async fn queued(listener: &TcpListener) -> Option<(TcpStream, SocketAddr)> {
    poll_fn(|cx| {
        Poll::Ready(match listener.poll_accept(cx) {
            Poll::Ready(Ok(accepted)) => Some(accepted),
            _ => None,
        })
    })
    .await
}

/// The HTTP/2 streams a client may have open on one connection: hyper's default, stated because
/// the rapid-reset defence is sized by it.
const H2_MAX_STREAMS: u32 = 200;

/// The connection builders of `limits`, one per protocol: [`connection`] tells HTTP/1.1 from h2c
/// (prior knowledge) itself. hyper-util's `auto` builder would read the first 24 bytes to tell
/// them apart and hand them back separately, and that split first read makes hyper grow each
/// HTTP/1 connection's read buffer from 8 to 16 KiB for good (measured: 3.5 MB per 1,000
/// connections); its connection also keeps room for either protocol's state in every connection.
struct Builders {
    http1: http1::Builder,
    h2c: http2::Builder<TokioExecutor>,
    /// HTTP/2 for trusted callers: `h2c` without the limits on reset streams.
    h2c_trusted: http2::Builder<TokioExecutor>,
    /// The callers trusted by their address.
    trusted_peers: Vec<Network>,
    /// How long a client may take to show which protocol it speaks (and finish its TLS
    /// handshake).
    preface_timeout: Duration,
    /// How long a request body may send nothing.
    body_read_timeout: Duration,
    /// How long a connection may be idle.
    idle: Duration,
    /// How long an HTTP/1 connection may wait for a request head.
    header_read: Duration,
}

impl Builders {
    /// The builders of `limits`: HTTP/1.1, and h2c by prior knowledge (for strangers, and for
    /// the callers trusted: those in `trusted_peers` or with a trusted identity).
    fn new(limits: &Limits, trusted_peers: Vec<Network>) -> Builders {
        let mut http1 = http1::Builder::new();
        // No hyper header-read timer: it arms a boxed sleep for every request head (~5 % of a
        // proxied request's instructions); the connection's watchdog enforces the limit instead.
        // Flattened writes: a response's head and a small body leave from one buffer, cheaper than
        // a writev queue.
        http1.header_read_timeout(None).writev(false).max_buf_size(limits.max_header_bytes.max(MIN_HEADER_BYTES));
        let mut h2c = http2::Builder::new(TokioExecutor::new());
        h2c.timer(TokioTimer::new())
            .max_concurrent_streams(H2_MAX_STREAMS)
            .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
        // A trusted caller (a sidecar egress, whose hedges and deadlines cancel streams all the
        // time) is no attacker: a busy ingress that had not read more than 200 of its cancelled
        // streams ended its connection, failing its other attempts (bench/grpc-deadlines.sh).
        let mut h2c_trusted = h2c.clone();
        h2c_trusted.max_pending_accept_reset_streams(usize::MAX).max_local_error_reset_streams(None);
        // HTTP/2 rapid reset (CVE-2023-44487): a stranger that resets more streams before they
        // are served than it may have open at once, or makes the server reset more than h2's
        // and hyper's 1,024, gets GOAWAY ENHANCE_YOUR_CALM (tests/proxy.rs floods it). h2's
        // default of 20 is below what a client may rightly cancel at once: gRPC calls whose
        // deadline passed while a busy machine had not yet read them (ghz through an ingress,
        // bench/grpc-deadlines.sh: 11 connections ended in three runs of 30,000 calls, failing
        // their other calls as UNAVAILABLE).
        h2c.max_pending_accept_reset_streams(H2_MAX_STREAMS as usize).max_local_error_reset_streams(1024);
        Builders {
            http1,
            h2c,
            h2c_trusted,
            trusted_peers,
            preface_timeout: limits.header_read_timeout.0,
            body_read_timeout: limits.body_read_timeout.0,
            idle: limits.idle_timeout.0,
            header_read: limits.header_read_timeout.0,
        }
    }
}

/// A connection hyper serves, its state in an allocation of its own sized for its protocol: a
/// connection's task then holds a pointer, not room for the larger of HTTP/1's and HTTP/2's
/// states (the task of an idle HTTP/1 connection was 5 KB, most of it HTTP/2's).
enum Served<I, S: HttpService<Incoming>> {
    /// HTTP/1, and whether it is being parked (server/park.rs): then it ends without shutting
    /// its stream down, to be taken apart.
    Http1(Pin<Box<http1::Connection<I, S>>>, bool),
    H2c(Pin<Box<http2::Connection<I, S, TokioExecutor>>>),
}

impl<I, S> Served<I, S>
where
    I: Read + Write + Unpin + Send + 'static,
    S: HttpService<Incoming, ResBody = http_body_util::combinators::BoxBody<Bytes, BoxError>> + Unpin + Send + 'static,
    S::Future: Unpin + Send + 'static,
{
    /// `trusted`: the caller is, and its HTTP/2 is not held to the limits on reset streams.
    fn new(builders: &Builders, h2c: bool, trusted: bool, io: I, service: S) -> Self {
        if h2c {
            let builder = if trusted { &builders.h2c_trusted } else { &builders.h2c };
            Served::H2c(Box::pin(builder.serve_connection(io, service)))
        } else {
            Served::Http1(Box::pin(builders.http1.serve_connection(io, service)), false)
        }
    }

    /// HTTP/2: GOAWAY, then close once its streams end. HTTP/1: close if idle, else after the
    /// response in progress.
    fn graceful_shutdown(&mut self) {
        match self {
            Served::Http1(conn, _) => conn.as_mut().graceful_shutdown(),
            Served::H2c(conn) => conn.as_mut().graceful_shutdown(),
        }
    }

    /// An idle HTTP/1 connection: ends hyper's part, leaving the stream open, to be taken apart
    /// by [`Served::parked`].
    fn park(&mut self) {
        if let Served::Http1(conn, parking) = self {
            *parking = true;
            conn.as_mut().graceful_shutdown();
        }
    }

    /// Whether it is an HTTP/1 connection being parked.
    fn parking(&self) -> bool {
        matches!(self, Served::Http1(_, true))
    }

    /// Once ended, a parked HTTP/1 connection's stream, the bytes hyper read that are not a
    /// request yet, and its service.
    fn parked(self) -> Option<http1::Parts<I, S>> {
        match self {
            Served::Http1(conn, true) => Some(Pin::into_inner(conn).into_parts()),
            _ => None,
        }
    }

    /// Once ended by a protocol switch, an HTTP/1 connection's stream and the bytes the client
    /// sent after its upgrade request.
    fn switched(self) -> Option<http1::Parts<I, S>> {
        match self {
            Served::Http1(conn, _) => Some(Pin::into_inner(conn).into_parts()),
            Served::H2c(_) => None,
        }
    }
}

impl<I, S> Future for Served<I, S>
where
    I: Read + Write + Unpin + Send + 'static,
    S: HttpService<Incoming, ResBody = http_body_util::combinators::BoxBody<Bytes, BoxError>> + Unpin + Send + 'static,
    S::Future: Unpin + Send + 'static,
{
    type Output = hyper::Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Served::Http1(conn, true) => conn.as_mut().get_mut().poll_without_shutdown(cx),
            Served::Http1(conn, false) => conn.as_mut().poll(cx),
            Served::H2c(conn) => conn.as_mut().poll(cx),
        }
    }
}

/// hyper's smallest HTTP/1 read buffer, hence the smallest header limit.
pub const MIN_HEADER_BYTES: usize = 8192;

/// Who is at the other end of a connection.
struct Peer {
    addr: SocketAddr,
    /// Whether its client certificate proves a trusted identity.
    identity: Option<TrustedIdentity>,
}

/// Opens an accepted connection from `addr` (the TLS handshake, or the look for the h2c preface)
/// and serves it. One too slow to open (a slowloris), gone, refused by TLS, closed by `silent`
/// (the oldest silent connection of a listener at its cap) or still silent when the drain closes
/// idle connections is closed.
async fn open<H, F>(
    stream: TcpStream,
    addr: SocketAddr,
    tls: Option<Arc<Acceptor>>,
    mut silent: silent::Entry,
    builders: Arc<Builders>,
    handler: H,
    drain: Arc<Drain>,
) where
    H: Fn(Request<ClientBody>, SocketAddr) -> F + Clone + Unpin + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let timeout = builders.preface_timeout;
    let mut phase = drain.watch();
    match tls {
        None => {
            let opening = tokio::time::timeout(timeout, preface::open(stream));
            let Some((h2c, stream)) = opened(opening, &mut silent, &mut phase).await else { return };
            drop(silent);
            let peer = Peer { addr, identity: None };
            connection(stream, h2c, peer, builders, handler, Draining { drain, phase }).await;
        }
        // Boxed: a plaintext connection's task holds no room for a TLS handshake's state.
        Some(tls) => {
            Box::pin(async move {
                let opening = tokio::time::timeout(timeout, tls.accept(stream));
                let Some((stream, h2, identity)) = opened(opening, &mut silent, &mut phase).await else { return };
                drop(silent);
                connection(stream, h2, Peer { addr, identity }, builders, handler, Draining { drain, phase }).await;
            })
            .await
        }
    }
}

/// What `opening` gave in time, unless `silent` or the drain closed the connection first.
async fn opened<T, E>(
    opening: impl Future<Output = Result<Result<T, E>, tokio::time::error::Elapsed>>,
    silent: &mut silent::Entry,
    phase: &mut watch::Receiver<Phase>,
) -> Option<T> {
    tokio::select! {
        opened = opening => opened.ok().and_then(Result::ok),
        _ = &mut silent.closing => None,
        _ = phase.wait_for(|p| *p >= Phase::Closing) => None,
    }
}

/// A connection's part in its listener's drain.
struct Draining {
    drain: Arc<Drain>,
    /// Held until the connection closes: the drain waits for every one.
    phase: watch::Receiver<Phase>,
}

/// Serves one connection, HTTP/2 if `h2c` (by prior knowledge or ALPN) else HTTP/1; closes it
/// once idle (no bytes either way and no request waiting for its response) for the idle limit,
/// or, on HTTP/1, once it has waited longer than the header-read limit for a request head; shuts
/// it down gracefully when the drain says (`drain`: HTTP/2 at once, HTTP/1 once no request is in
/// flight on the listener, its responses meanwhile marked `Connection: close`). A plaintext HTTP/1
/// connection idle between requests is parked (`park`): it holds no hyper connection until the
/// client sends again.
async fn connection<S, H, F>(stream: S, h2c: bool, peer: Peer, builders: Arc<Builders>, handler: H, draining: Draining)
where
    S: Park,
    H: Fn(Request<ClientBody>, SocketAddr) -> F + Clone + Unpin + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let Peer { addr: peer, identity } = peer;
    let trusted = Network::trusts(&builders.trusted_peers, peer.ip(), identity.is_some());
    let parks = !h2c && stream.parks();
    let Draining { drain, mut phase } = draining;
    let (idle, header_read) = (builders.idle, builders.header_read);
    let activity = Arc::new(Activity::default());
    let io = Tracked { inner: TokioIo::new(stream), activity: activity.clone() };
    let counted = activity.clone();
    let body_read_timeout = builders.body_read_timeout;
    let service = service_fn(move |req: Request<Incoming>| {
        // HTTP/1 only: a body still being read holds the connection from parking.
        let reading = (!h2c && !hyper::body::Body::is_end_stream(req.body())).then(|| Held::reading(counted.clone()));
        let mut req = req.map(|body| ClientBody::new(body, body_read_timeout, reading));
        if let Some(identity) = &identity {
            req.extensions_mut().insert(*identity);
        }
        // A gRPC request gets the proxy's own replies in gRPC's form (crate::grpc).
        let grpc = crate::grpc::content_type(req.headers()).cloned();
        // hyper keeps room for one request's future in every connection, idle or not: boxed, an
        // idle connection holds a pointer instead of the whole request state.
        let handled: Pin<Box<dyn Future<Output = Response<Body>> + Send>> = match http::malformed_head(&req) {
            Some(wrong) => {
                Box::pin(std::future::ready(http::text(StatusCode::BAD_REQUEST, &format!("tailguard: {wrong}"))))
            }
            None => Box::pin(handler(req, peer)),
        };
        let awaiting = Awaiting::new(counted.clone());
        let in_flight = drain.request();
        // HTTP/1 only: the header-read limit waits for the response's end, not just its head.
        let open = (!h2c).then(|| Held::open(counted.clone()));
        Responding { handled, after: Some(Answered { awaiting, grpc, in_flight, open, h2c }) }
    });
    let mut conn = Served::new(&builders, h2c, trusted, io, service);
    let header_read = (!h2c).then_some(header_read);
    let tick = (idle.min(header_read.unwrap_or(idle)) / 4).max(Duration::from_millis(10));
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut watchdog = Watchdog::new(idle, header_read, Instant::now());
    let shut_down_at = if h2c { Phase::Draining } else { Phase::Closing };
    let mut shutting_down = std::pin::pin!(phase.wait_for(|p| *p >= shut_down_at));
    let mut shut_down = false;
    let mut parker = Parker::new(&activity);
    // Armed (reset) only while the connection is idle; until then it is never polled.
    let mut park_timer = std::pin::pin!(tokio::time::sleep(PARK_AFTER));
    loop {
        // The connection, and after each of its polls the parker's step: `None` once it has
        // stayed idle for PARK_AFTER.
        let serving = poll_fn(|cx| {
            if let Poll::Ready(done) = Pin::new(&mut conn).poll(cx) {
                return Poll::Ready(Some(done));
            }
            if !parks || shut_down || conn.parking() {
                return Poll::Pending;
            }
            match parker.step(&activity) {
                Step::Busy => Poll::Pending,
                Step::Arm => {
                    park_timer.as_mut().reset(tokio::time::Instant::now() + PARK_AFTER);
                    park_timer.as_mut().poll(cx).map(|()| None)
                }
                Step::Wait => park_timer.as_mut().poll(cx).map(|()| None),
            }
        });
        let (parked, switched) = tokio::select! {
            served = serving => {
                let Some(done) = served else {
                    conn.park();
                    continue;
                };
                // Ended by a protocol switch: the connection becomes a tunnel (below).
                let switched = activity.switched.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
                let switched = switched.filter(|_| done.is_ok() && !shut_down);
                let parts = match switched {
                    Some(_) => conn.switched(),
                    None if done.is_ok() && !shut_down => conn.parked(),
                    None => None,
                };
                // Closed by hyper (the client left, the drain, an error): done.
                let Some(parts) = parts else { return };
                (parts, switched)
            }
            now = interval.tick() => {
                if watchdog.expired(&activity, now.into_std()) {
                    // Dropping the connection closes it: nothing is in flight.
                    return;
                }
                continue;
            }
            // HTTP/2: GOAWAY, then closes once its streams end. HTTP/1: closes if idle, else
            // after the response in progress.
            _ = shutting_down.as_mut(), if !shut_down => {
                conn.graceful_shutdown();
                shut_down = true;
                continue;
            }
        };
        if let Some(upstream) = switched {
            let mut watchdog = Watchdog::new(idle, None, Instant::now());
            let mut tunnel = std::pin::pin!(tunnel(parked.io, parked.read_buf, upstream));
            loop {
                tokio::select! {
                    () = tunnel.as_mut() => return,
                    now = interval.tick() => if watchdog.expired(&activity, now.into_std()) { return },
                    _ = shutting_down.as_mut() => return,
                }
            }
        }
        let http1::Parts { mut io, read_buf, service, .. } = parked;
        #[cfg(test)]
        tests::PARKED.lock().unwrap().push(peer);
        io.inner.inner_mut().unread(&read_buf);
        drop(read_buf);
        // Parked: only the socket is watched until the client sends again.
        loop {
            tokio::select! {
                ready = io.inner.inner().readable() => match ready {
                    Ok(()) => break,
                    Err(_) => return,
                },
                now = interval.tick() => {
                    if watchdog.expired(&activity, now.into_std()) {
                        return;
                    }
                }
                _ = shutting_down.as_mut() => return,
            }
        }
        conn = Served::new(&builders, false, trusted, io, service);
        parker = Parker::new(&activity);
    }
}

/// Carries bytes both ways between a client connection that switched protocols (`client`, and
/// `early`: what it sent after its upgrade request, read by hyper already) and the upstream's
/// side of the switch, until either side closes or fails. The connection's watchdog (idle limit)
/// and drain still apply: the caller races them against it.
async fn tunnel<I>(client: I, early: Bytes, upstream: OnUpgrade)
where
    I: Read + Write + Unpin,
{
    use tokio::io::AsyncWriteExt;
    let Ok(upstream) = upstream.await else { return };
    let mut upstream = TokioIo::new(upstream);
    if !early.is_empty() && upstream.write_all(&early).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut TokioIo::new(client), &mut upstream).await;
}

/// A request's response as the connection sends it: the handler's, then the connection's own
/// part (below). Written out rather than an `async` block so that it is `Unpin` without a second
/// allocation or a copy of the handler's future, which a connection that can be parked needs
/// (hyper polls its requests' futures in place when a connection is to be taken apart).
struct Responding {
    handled: Pin<Box<dyn Future<Output = Response<Body>> + Send>>,
    /// What is done once the handler has answered; taken then.
    after: Option<Answered>,
}

/// What a response needs from its connection once the handler has answered.
struct Answered {
    awaiting: Awaiting,
    /// The request's gRPC content type, if it is one: the proxy's own replies take gRPC's form.
    grpc: Option<HeaderValue>,
    in_flight: InFlight,
    open: Option<Held>,
    h2c: bool,
}

impl Future for Responding {
    type Output = Result<Response<http_body_util::combinators::BoxBody<Bytes, BoxError>>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut response = std::task::ready!(self.handled.as_mut().poll(cx));
        let Answered { awaiting, grpc, in_flight, open, h2c } = self.after.take().expect("polled after its answer");
        if !h2c && response.status() == StatusCode::SWITCHING_PROTOCOLS {
            if let Some(upstream) = response.extensions_mut().remove::<OnUpgrade>() {
                *awaiting.0.switched.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(upstream);
            }
        }
        drop(awaiting);
        if let Some(content_type) = grpc {
            crate::grpc::local_reply(&mut response, content_type);
        }
        // Draining, an HTTP/1 client is told to leave the connection after this response (hyper
        // then closes it); HTTP/2 clients were sent GOAWAY.
        if !h2c && in_flight.is_draining() {
            response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
        }
        Poll::Ready(Ok(response.map(|body| BodyExt::boxed(Opened { body, _open: open, _in_flight: in_flight }))))
    }
}

/// What a connection's watchdog reads. Its IO and requests only count; the watchdog compares the
/// counts between its ticks, so no request reads the clock for it.
#[derive(Default)]
struct Activity {
    /// Reads and writes that completed, and response heads that became ready.
    moved: AtomicU64,
    /// Request heads handed to the handler.
    heads: AtomicU64,
    /// Requests awaiting their response head.
    awaiting: AtomicUsize,
    /// HTTP/1 requests whose response has not ended (its head or body still to send).
    open: AtomicUsize,
    /// HTTP/1 request bodies not read to their end yet.
    reading: AtomicUsize,
    /// The last write found the client's receive window full.
    write_blocked: AtomicBool,
    /// The upstream's side of a protocol switch (a 101 answered to an HTTP/1 upgrade): once hyper
    /// has sent the 101, the connection becomes a tunnel to it ([`tunnel`]).
    switched: std::sync::Mutex<Option<OnUpgrade>>,
}

/// Decides, tick by tick, when a connection has been idle too long or (HTTP/1) has waited too long
/// for a request head: for the first one, between requests on a kept-alive connection, or while a
/// slowloris client trickles one in. Each wait is timed from the first tick that saw it, so a
/// connection closes between the limit and the limit plus two ticks.
struct Watchdog {
    idle: Duration,
    /// The header-read limit; `None` for HTTP/2, which has none.
    header_read: Option<Duration>,
    /// `Activity::moved` when last seen, and since when it has not changed.
    moved: u64,
    quiet_since: Instant,
    /// `Activity::heads` and when the wait for the next head was first seen.
    waiting: Option<(u64, Instant)>,
}

impl Watchdog {
    fn new(idle: Duration, header_read: Option<Duration>, now: Instant) -> Watchdog {
        Watchdog { idle, header_read, moved: 0, quiet_since: now, waiting: None }
    }

    /// Whether the connection should close, seen at the tick `now`.
    fn expired(&mut self, activity: &Activity, now: Instant) -> bool {
        let moved = activity.moved.load(Ordering::Relaxed);
        if moved != self.moved {
            self.moved = moved;
            self.quiet_since = now;
        }
        if activity.awaiting.load(Ordering::Relaxed) == 0 && now.duration_since(self.quiet_since) >= self.idle {
            return true;
        }
        let Some(limit) = self.header_read else { return false };
        if activity.open.load(Ordering::Relaxed) > 0 {
            self.waiting = None;
            return false;
        }
        let heads = activity.heads.load(Ordering::Relaxed);
        match self.waiting {
            Some((seen, since)) if seen == heads => now.duration_since(since) >= limit,
            _ => {
                self.waiting = Some((heads, now));
                false
            }
        }
    }
}

/// Counts a request as awaiting its response head until dropped.
struct Awaiting(Arc<Activity>);

impl Awaiting {
    fn new(activity: Arc<Activity>) -> Awaiting {
        activity.heads.fetch_add(1, Ordering::Relaxed);
        activity.awaiting.fetch_add(1, Ordering::Relaxed);
        Awaiting(activity)
    }
}

impl Drop for Awaiting {
    fn drop(&mut self) {
        self.0.moved.fetch_add(1, Ordering::Relaxed);
        self.0.awaiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Holds one of a connection's counts up until dropped: an HTTP/1 request whose response has not
/// ended ([`Held::open`], dropped with its response body), or an HTTP/1 request body not read to
/// its end ([`Held::reading`]).
pub(crate) struct Held(Arc<Activity>, fn(&Activity) -> &AtomicUsize);

impl Held {
    fn new(activity: Arc<Activity>, count: fn(&Activity) -> &AtomicUsize) -> Held {
        count(&activity).fetch_add(1, Ordering::Relaxed);
        Held(activity, count)
    }

    fn open(activity: Arc<Activity>) -> Held {
        Held::new(activity, |a| &a.open)
    }

    fn reading(activity: Arc<Activity>) -> Held {
        Held::new(activity, |a| &a.reading)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        (self.1)(&self.0).fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body that keeps its request counted as open, on its connection (HTTP/1) and on
/// its listener, until hyper drops it, having sent it.
struct Opened {
    body: Body,
    _open: Option<Held>,
    _in_flight: InFlight,
}

impl hyper::body::Body for Opened {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// An IO that counts its activity.
struct Tracked<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T> Tracked<T> {
    fn count<R>(&self, result: Poll<R>) -> Poll<R> {
        if result.is_ready() {
            self.activity.moved.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// Counts a write, and whether it is left waiting for the client to read.
    fn count_write<R>(&self, result: Poll<R>) -> Poll<R> {
        self.activity.write_blocked.store(result.is_pending(), Ordering::Relaxed);
        self.count(result)
    }
}

impl<T: Read + Unpin> Read for Tracked<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: ReadBufCursor<'_>) -> Poll<std::io::Result<()>> {
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        self.count(result)
    }
}

impl<T: Write + Unpin> Write for Tracked<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.count_write(result)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let result = Pin::new(&mut self.inner).poll_flush(cx);
        self.activity.write_blocked.store(result.is_pending(), Ordering::Relaxed);
        result
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.count_write(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A watchdog with a 1 s idle limit, or 10 s with a header-read limit (out of the way).
    fn watchdog(header_read: Option<Duration>) -> (Watchdog, Arc<Activity>, Instant) {
        let t0 = Instant::now();
        let idle = if header_read.is_some() { 10_000 * MS } else { 1000 * MS };
        (Watchdog::new(idle, header_read, t0), Arc::new(Activity::default()), t0)
    }

    fn moved(a: &Activity) {
        a.moved.fetch_add(1, Ordering::Relaxed);
    }

    #[test]
    fn idle_counts_from_the_first_tick_that_saw_no_bytes_move() {
        let (mut w, a, t0) = watchdog(None);
        assert!(!w.expired(&a, t0 + 600 * MS));
        moved(&a);
        // Bytes moved before this tick: quiet from 900 ms on.
        assert!(!w.expired(&a, t0 + 900 * MS));
        assert!(!w.expired(&a, t0 + 1800 * MS));
        assert!(w.expired(&a, t0 + 1900 * MS));
    }

    #[test]
    fn a_request_awaiting_its_response_head_is_never_idle() {
        let (mut w, a, t0) = watchdog(None);
        let awaiting = Awaiting::new(a.clone());
        assert!(!w.expired(&a, t0 + 5000 * MS));
        // Its response head became ready (bytes moved): idle again from this tick.
        drop(awaiting);
        assert!(!w.expired(&a, t0 + 5100 * MS));
        assert!(w.expired(&a, t0 + 6100 * MS));
    }

    #[test]
    fn the_wait_for_a_head_is_timed_from_the_first_tick_that_saw_it() {
        let (mut w, a, t0) = watchdog(Some(300 * MS));
        // Bytes trickle in (a slowloris) but no head completes.
        for tick in 0..3 {
            moved(&a);
            assert!(!w.expired(&a, t0 + tick * 100 * MS), "tick {tick}");
        }
        moved(&a);
        assert!(w.expired(&a, t0 + 300 * MS));
    }

    #[test]
    fn a_request_served_between_ticks_restarts_the_wait() {
        let (mut w, a, t0) = watchdog(Some(300 * MS));
        assert!(!w.expired(&a, t0));
        drop((Awaiting::new(a.clone()), Held::open(a.clone())));
        assert!(!w.expired(&a, t0 + 300 * MS));
        assert!(!w.expired(&a, t0 + 500 * MS));
        assert!(w.expired(&a, t0 + 600 * MS));
    }

    #[test]
    fn an_open_response_holds_off_the_head_timeout() {
        let (mut w, a, t0) = watchdog(Some(300 * MS));
        let (awaiting, open) = (Awaiting::new(a.clone()), Held::open(a.clone()));
        drop(awaiting);
        // The response head went out; its body streams on with the connection quiet.
        assert!(!w.expired(&a, t0));
        assert!(!w.expired(&a, t0 + 900 * MS));
        drop(open);
        assert!(!w.expired(&a, t0 + 950 * MS));
        assert!(w.expired(&a, t0 + 1250 * MS));
    }

    /// Every open connection holds its task: an idle plaintext one held 9-14 KB of it when a
    /// refused opening's 4 KiB sink lived across an await, three times over in the nested
    /// futures (bench/RESULTS.md, issue #34's memory).
    #[tokio::test]
    async fn a_plaintext_connections_task_stays_small() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stream = TcpStream::connect(addr).await.unwrap();
        let handler = |_req: Request<ClientBody>, _peer: SocketAddr| async { http::text(StatusCode::OK, "ok") };
        let entry = Arc::new(Silent::default()).enter();
        let builders = Arc::new(Builders::new(&Limits::default(), Vec::new()));
        let task = open(stream, addr, None, entry, builders, handler, Drain::new());
        let size = std::mem::size_of_val(&task);
        assert!(size <= 3 * 1024, "a connection's task is {size} bytes");
    }

    /// The clients whose connections were parked, in every test.
    pub(super) static PARKED: std::sync::Mutex<Vec<SocketAddr>> = std::sync::Mutex::new(Vec::new());

    /// Sends `bytes` and reads until `responses` whole responses (of the handler below) are in.
    async fn exchange(client: &mut TcpStream, bytes: &[u8], responses: usize) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        client.write_all(bytes).await.unwrap();
        let mut read = Vec::new();
        while String::from_utf8_lossy(&read).matches("served /").count() < responses {
            let mut buf = [0u8; 1024];
            let n = tokio::time::timeout(Duration::from_secs(5), client.read(&mut buf)).await.unwrap().unwrap();
            assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&read));
            read.extend_from_slice(&buf[..n]);
        }
        String::from_utf8(read).unwrap()
    }

    #[tokio::test]
    async fn an_idle_http1_connection_is_parked_and_serves_what_comes_next() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let handler = |req: Request<ClientBody>, _peer: SocketAddr| async move {
            http::text(StatusCode::OK, &format!("served {}", req.uri()))
        };
        let (stop, stopped) = watch::channel(false);
        let server = tokio::spawn(serve(
            listener,
            None,
            handler,
            Limits::default(),
            Vec::new(),
            stopped,
            Duration::from_secs(1),
        ));
        let mut client = TcpStream::connect(addr).await.unwrap();
        let me = client.local_addr().unwrap();
        let parks = || PARKED.lock().unwrap().iter().filter(|p| **p == me).count();
        let idle = 3 * PARK_AFTER;

        // A request, and half of the next one's head: parked with that half read.
        let answer = exchange(&mut client, b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHo", 1).await;
        assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("served /a"), "{answer}");
        tokio::time::sleep(idle).await;
        assert_eq!(parks(), 1);
        let answer = exchange(&mut client, b"st: x\r\n\r\n", 1).await;
        assert!(answer.contains("served /b") && !answer.contains("close"), "{answer}");
        tokio::time::sleep(idle).await;
        assert_eq!(parks(), 2);
        // Two requests in one segment: both answered, in order, and parked again after.
        let answer =
            exchange(&mut client, b"GET /c HTTP/1.1\r\nHost: x\r\n\r\nGET /d HTTP/1.1\r\nHost: x\r\n\r\n", 2).await;
        assert!(answer.find("served /c").unwrap() < answer.find("served /d").unwrap(), "{answer}");
        assert!(!answer.contains("close"), "{answer}");
        tokio::time::sleep(idle).await;
        assert_eq!(parks(), 3);
        stop.send(true).unwrap();
        drop(client);
        server.await.unwrap();
    }

    #[test]
    fn without_a_header_read_limit_only_idleness_closes() {
        let (mut w, a, t0) = watchdog(None);
        assert!(!w.expired(&a, t0));
        assert!(!w.expired(&a, t0 + 999 * MS));
        assert!(w.expired(&a, t0 + 1000 * MS));
    }
}
