//! The HTTP server: accepts connections (HTTP/1.1 and h2c), answers `GET /healthz`, and serves
//! every other request as the service would (crates/sim/src/world/replicas.rs): a FIFO queue for a
//! worker, the local work (a sleep), the fate's fault, the downstream calls, the answer. An `error`
//! fault with `after` answers without a worker; a `hang` window holds the start and end of the
//! work and the answer until it closes (a sleep to its end, as the simulator defers them).

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, Semaphore};
use tokio::task::JoinHandle;

use crate::behaviour::{Behaviour, Fate};
use crate::calls::{Calls, TraceContext};
use crate::clock::Clock;
use crate::error::ServeError;
use crate::spec::Spec;

/// How long a lost request's connection is held before it is closed without an answer, unless
/// the client gives up first.
pub const LOST_HOLD: Duration = Duration::from_secs(3600);

/// The header naming the service and replica that answered (`frontend/2`).
pub const SERVED_BY: &str = "x-tailguard-served-by";

/// Why a request ended without an answer (hyper closes its connection).
#[derive(Debug, thiserror::Error)]
#[error("request lost by a `lost` fault")]
struct Lost;

/// What every connection shares.
#[derive(Debug)]
struct App {
    behaviour: Behaviour,
    calls: Calls,
    /// The FIFO queue for a worker (tokio's semaphore is fair); `None` for unlimited workers.
    workers: Option<Semaphore>,
    /// Whether a request its client abandons stops (the file's `cancellable`); if not, its work
    /// and calls run to the end on a task of their own.
    cancellable: bool,
    /// The run's clock: it starts when the server is bound, and again on [`Clock::restart`].
    clock: Arc<Clock>,
    served_by: HeaderValue,
    /// Which of the service's routes a request is.
    routes: crate::routes::Routes,
}

/// A synthetic service bound to its socket, not yet serving.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    app: Arc<App>,
}

/// A server running on its own task; dropping it stops the server.
#[derive(Debug)]
pub struct Running {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ServeError>>,
}

impl Server {
    /// Builds the service of `spec` and binds `addr` (port 0 picks a free port); the run's clock
    /// starts now.
    pub async fn bind(spec: &Spec, addr: SocketAddr) -> Result<Server, ServeError> {
        let behaviour = Behaviour::new(spec)?;
        let listener = TcpListener::bind(addr).await.map_err(|source| ServeError::Bind { addr, source })?;
        let workers = spec.service.workers;
        let served_by = HeaderValue::from_str(&format!("{}/{}", spec.name, spec.replica))
            .unwrap_or_else(|_| HeaderValue::from_static("tailguard-serve"));
        let app = App {
            behaviour,
            calls: Calls::new(spec),
            workers: (workers > 0).then(|| Semaphore::new(workers as usize)),
            cancellable: spec.service.cancellable,
            clock: Arc::new(Clock::new()),
            served_by,
            routes: crate::routes::Routes::new(spec),
        };
        Ok(Server { listener, app: Arc::new(app) })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> Result<SocketAddr, ServeError> {
        self.listener.local_addr().map_err(ServeError::Accept)
    }

    /// The run's clock, to restart it when the run starts (the lab's load).
    pub fn clock(&self) -> Arc<Clock> {
        self.app.clock.clone()
    }

    /// The faults this replica realises, one line each for the log (`hang from 10s until 20s`).
    pub fn faults(&self) -> Vec<String> {
        self.app.behaviour.faults().iter().map(ToString::to_string).collect()
    }

    /// Serves until `shutdown` completes, then stops accepting (connections already open finish
    /// on their own tasks). Each fault window's opening and closing is logged on stderr.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) -> Result<(), ServeError> {
        tokio::pin!(shutdown);
        let windows = tokio::spawn(log_windows(self.app.clone()));
        let _stop_logging = AbortOnDrop(windows);
        loop {
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let _ = stream.set_nodelay(true);
                        tokio::spawn(serve_connection(self.app.clone(), stream));
                    }
                    // Too many open files and the like: wait a little rather than spin.
                    Err(e) if is_transient(&e) => tokio::time::sleep(Duration::from_millis(10)).await,
                    Err(e) => return Err(ServeError::Accept(e)),
                },
            }
        }
    }

    /// Serves on a task of its own until the returned handle is stopped or dropped.
    pub fn spawn(self) -> Result<Running, ServeError> {
        let addr = self.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(self.run_until(async move {
            let _ = stopped.await;
        }));
        Ok(Running { addr, stop: Some(stop), task })
    }
}

impl Running {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting connections and waits for the accept loop to end.
    pub async fn stop(mut self) -> Result<(), ServeError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match (&mut self.task).await {
            Ok(result) => result,
            Err(e) => Err(ServeError::Accept(std::io::Error::other(e))),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Logs on stderr, as it happens, each window of this replica's faults opening and closing:
/// `backend/2: hang from 10s until 20s: opens`.
async fn log_windows(app: Arc<App>) {
    let mut moments: Vec<(Duration, String)> = Vec::new();
    for fault in app.behaviour.faults() {
        let name = app.served_by.to_str().unwrap_or("tailguard-serve");
        moments.extend(fault.from.map(|at| (at.get(), format!("{name}: {fault}: opens"))));
        moments.extend(fault.until.map(|at| (at.get(), format!("{name}: {fault}: closes"))));
    }
    moments.sort();
    for (at, line) in moments {
        // The clock may restart while this waits: wait again for the new moment.
        while app.clock.elapsed() < at {
            tokio::time::sleep_until(app.clock.instant(at)).await;
        }
        eprintln!("{line}");
    }
}

/// Waits while a `hang` window holds the replica.
async fn hold(app: &App) {
    let now = app.clock.elapsed();
    let resume = app.behaviour.resume_at(now);
    if resume > now {
        tokio::time::sleep_until(app.clock.instant(resume)).await;
    }
}

/// Accept errors that concern one connection or a passing shortage, not the listener.
fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionAborted | ConnectionReset | Interrupted | WouldBlock) || e.raw_os_error().is_some()
}

/// Serves one connection, HTTP/1.1 or h2c; its errors (a client that went away) end it quietly.
async fn serve_connection(app: Arc<App>, stream: tokio::net::TcpStream) {
    let service = service_fn(move |request| handle(app.clone(), request));
    let _ = auto::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(stream), service).await;
}

/// One request.
async fn handle(app: Arc<App>, request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Lost> {
    let arrived = app.clock.elapsed();
    let down = app.behaviour.is_down(arrived);
    if request.uri().path() == "/healthz" {
        return Ok(if down {
            answer(&app, StatusCode::SERVICE_UNAVAILABLE, "down\n")
        } else {
            answer(&app, StatusCode::OK, "ok\n")
        });
    }
    let context = TraceContext::of(request.headers());
    let routed = app.routes.route(&request);
    drop(request);
    if down {
        let mut response = answer(&app, StatusCode::SERVICE_UNAVAILABLE, "down: a `down` fault\n");
        response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
        return Ok(response);
    }
    if app.cancellable {
        // Dropped with this future when hyper sees the client go (a closed connection, a reset
        // stream): the queue place, the worker and the calls go with it.
        process(&app, &context, routed, arrived).await
    } else {
        let run = tokio::spawn(async move { process(&app, &context, routed, arrived).await });
        run.await.unwrap_or_else(|_| Err(Lost))
    }
}

/// A request's fate, queue, work, calls and answer (which a `hang` may hold).
async fn process(
    app: &App,
    context: &TraceContext,
    request: crate::routes::Routed,
    arrived: Duration,
) -> Result<Response<Full<Bytes>>, Lost> {
    let arrival = app.behaviour.arrive(arrived);
    if let Fate::ErrorAfter(after) = arrival.fate {
        // No worker, no work: the answer leaves `after` from the arrival.
        crate::precise::sleep((arrived + after).saturating_sub(app.clock.elapsed())).await;
        hold(app).await;
        return Ok(answer(app, StatusCode::INTERNAL_SERVER_ERROR, "error: an `error` fault\n"));
    }
    work(app, arrival.ordinal, &request).await;
    let response = match arrival.fate {
        Fate::Lost => {
            tokio::time::sleep(LOST_HOLD).await;
            return Err(Lost);
        }
        Fate::Error | Fate::ErrorAfter(_) => {
            answer(app, StatusCode::INTERNAL_SERVER_ERROR, "error: an `error` fault\n")
        }
        Fate::Normal => match app.calls.make(context, &request).await {
            Ok(()) => answer(app, StatusCode::OK, "ok\n"),
            // A refused call is passed on as a refusal, which the caller's sidecar does not retry.
            Err(e) if e.refused => {
                answer(app, StatusCode::TOO_MANY_REQUESTS, &format!("refused: downstream {}\n", e.message))
            }
            Err(e) => answer(app, StatusCode::INTERNAL_SERVER_ERROR, &format!("error: downstream {}\n", e.message)),
        },
    };
    hold(app).await;
    Ok(response)
}

/// The local work: wait for a worker (FIFO) and for any `hang` to end, sleep the work time drawn
/// as the work starts, wait for any `hang` that began meanwhile, release the worker.
async fn work(app: &App, ordinal: u64, request: &crate::routes::Routed) {
    let _permit = match &app.workers {
        // The semaphore is never closed, so acquiring only fails if that changes; then no wait.
        Some(workers) => workers.acquire().await.ok(),
        None => None,
    };
    hold(app).await;
    let time = app.behaviour.work_time(ordinal, app.clock.elapsed(), request.route, request.key);
    crate::precise::sleep(time).await;
    hold(app).await;
}

/// A small text answer naming who served it.
fn answer(app: &App, status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response.headers_mut().insert(SERVED_BY, app.served_by.clone());
    response
}
