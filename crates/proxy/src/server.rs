//! Accept loops: HTTP/1.1 and h2c (prior knowledge) connections served by a handler, within the
//! listener's limits (docs/proxy.md, "Limits"), with graceful shutdown (stop accepting, let
//! in-flight requests finish, give up after a grace period).

use crate::config::Limits;
use crate::http::Body;
use hyper::body::Incoming;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

/// Serves `listener` with `handler` until `stop` turns true, then drains for at most `grace`.
/// Malformed requests are answered 400 by hyper and close only their own connection.
pub async fn serve<H, F>(
    listener: TcpListener,
    handler: H,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
    grace: Duration,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let graceful = GracefulShutdown::new();
    let builders = Arc::new(Builders::new(&limits));
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        // A connection slot first: beyond `max_connections`, new connections wait in the
        // kernel's listen backlog until one closes.
        let slot = tokio::select! {
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
        };
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let watcher = graceful.watcher();
                    let builders = builders.clone();
                    let handler = handler.clone();
                    let idle = limits.idle_timeout.0;
                    tokio::spawn(async move {
                        connection(stream, builders, handler, idle, watcher).await;
                        drop(slot);
                    });
                }
                // Out of file descriptors and the like: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    break;
                }
            }
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(grace, graceful.shutdown()).await;
}

/// The connection builders of `limits`, one per protocol: [`connection`] tells HTTP/1.1 from h2c
/// (prior knowledge) itself. hyper-util's `auto` builder would read the first 24 bytes to tell
/// them apart and hand them back separately, and that split first read makes hyper grow each
/// HTTP/1 connection's read buffer from 8 to 16 KiB for good (measured: 3.5 MB per 1,000
/// connections).
struct Builders {
    http1: auto::Builder<TokioExecutor>,
    h2c: auto::Builder<TokioExecutor>,
    /// How long a client may take to show which protocol it speaks.
    preface_timeout: Duration,
}

impl Builders {
    fn new(limits: &Limits) -> Builders {
        let both = builder(limits);
        Builders {
            http1: both.clone().http1_only(),
            h2c: both.http2_only(),
            preface_timeout: limits.header_read_timeout.0,
        }
    }
}

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether the client opened with the HTTP/2 preface, peeked so that hyper still reads it.
async fn opens_with_h2_preface(stream: &TcpStream) -> std::io::Result<bool> {
    let mut buf = [0u8; 24];
    loop {
        let n = stream.peek(&mut buf).await?;
        if n == 0 || buf[..n] != H2_PREFACE[..n] {
            return Ok(false);
        }
        if n == H2_PREFACE.len() {
            return Ok(true);
        }
        // Part of the preface: peeking again would return at once with the same bytes.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The connection builder of `limits`: HTTP/1.1 and h2c by prior knowledge.
fn builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout.0)
        .max_buf_size(limits.max_header_bytes.max(MIN_HEADER_BYTES));
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    builder
}

/// hyper's smallest HTTP/1 read buffer, hence the smallest header limit.
pub const MIN_HEADER_BYTES: usize = 8192;

/// Serves one connection; closes it gracefully once idle (no bytes either way and no request
/// waiting for its response) for `idle`.
async fn connection<H, F>(
    stream: TcpStream,
    builders: Arc<Builders>,
    handler: H,
    idle: Duration,
    watcher: hyper_util::server::graceful::Watcher,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let h2c = match tokio::time::timeout(builders.preface_timeout, opens_with_h2_preface(&stream)).await {
        Ok(Ok(h2c)) => h2c,
        // Too slow to show its protocol (a slowloris), or gone.
        _ => return,
    };
    let start = Instant::now();
    let activity = Arc::new(Activity { last: AtomicU64::new(0), pending: AtomicUsize::new(0), start });
    let io = Tracked { inner: TokioIo::new(stream), activity: activity.clone() };
    let counted = activity.clone();
    let service = service_fn(move |req| {
        // hyper keeps room for one request's future in every connection, idle or not: boxed, an
        // idle connection holds a pointer instead of the whole request state.
        let response = Box::pin(handler(req));
        let activity = counted.clone();
        activity.pending.fetch_add(1, Ordering::Relaxed);
        let guard = Pending(activity);
        async move {
            let response = response.await;
            drop(guard);
            Ok::<_, Infallible>(response)
        }
    });
    let builder = if h2c { &builders.h2c } else { &builders.http1 };
    let conn = builder.serve_connection(io, service);
    let conn = watcher.watch(conn);
    let mut conn = std::pin::pin!(conn);
    let tick = (idle / 4).max(Duration::from_millis(10));
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = interval.tick() => {
                if activity.idle_for() >= idle && activity.pending.load(Ordering::Relaxed) == 0 {
                    // Dropping the connection closes it: nothing is in flight.
                    return;
                }
            }
        }
    }
}

/// When a connection last moved bytes, and how many requests await their response.
struct Activity {
    last: AtomicU64,
    pending: AtomicUsize,
    start: Instant,
}

impl Activity {
    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let now = self.start.elapsed();
        now.saturating_sub(Duration::from_millis(self.last.load(Ordering::Relaxed)))
    }
}

/// Releases a request's count when its response head is ready (or it was abandoned).
struct Pending(Arc<Activity>);

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.touch();
        self.0.pending.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An IO that records its activity.
struct Tracked<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T: Read + Unpin> Read for Tracked<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: ReadBufCursor<'_>) -> Poll<std::io::Result<()>> {
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if result.is_ready() {
            self.activity.touch();
        }
        result
    }
}

impl<T: Write + Unpin> Write for Tracked<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        if result.is_ready() {
            self.activity.touch();
        }
        result
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
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
        if result.is_ready() {
            self.activity.touch();
        }
        result
    }
}
