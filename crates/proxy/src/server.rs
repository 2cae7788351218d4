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
    let builder = Arc::new(builder(&limits));
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
                    let builder = builder.clone();
                    let handler = handler.clone();
                    let idle = limits.idle_timeout.0;
                    tokio::spawn(async move {
                        connection(stream, builder, handler, idle, watcher).await;
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
    builder: Arc<auto::Builder<TokioExecutor>>,
    handler: H,
    idle: Duration,
    watcher: hyper_util::server::graceful::Watcher,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
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
