//! Wiring of one run: the shared [`Context`] the loops send through, and the collector that
//! turns samples into the [`LoadReport`].

use crate::client::HttpClient;
use crate::config::Window;
use crate::{closed_loop, open_loop, ArrivalSchedule, LoadConfig, LoadError, LoadReport, Sample, Shape, Target};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tailguard_model::replica::{child_key, pick_route};
use tailguard_model::schema::Priority;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::time::Instant;

/// Runs the load `config` describes and reports what it measured. Every request ends (its
/// timeout bounds it) before this returns. Must be called within a tokio runtime with time and
/// I/O enabled.
///
/// Boxed, so that the load generator is compiled in this crate once: an async fn's body is
/// compiled again into every crate that awaits it.
pub fn run(
    config: LoadConfig,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<LoadReport, LoadError>> + Send>> {
    Box::pin(generate(config))
}

async fn generate(config: LoadConfig) -> Result<LoadReport, LoadError> {
    config.validate()?;
    let window = config.window();
    let (samples, received) = unbounded_channel();
    let names = config.routes.iter().map(|r| r.name.clone()).collect();
    let report = LoadReport::new(config.shape.describe(), config.seed).with_routes(names);
    let collector = tokio::spawn(collect(received, report, window, config.keep_samples));
    let ctx = Arc::new(Context {
        client: HttpClient::new(config.h2c, config.timeout, config.tls.as_ref())?,
        targets: config.targets.clone(),
        next_target: AtomicUsize::new(0),
        routes: config.routes.iter().map(RouteTarget::new).collect(),
        route_weights: config.routes.clone(),
        sent: AtomicU64::new(0),
        start: Instant::now(),
        samples,
    });
    let sending_end = match config.shape {
        Shape::Constant { rate } => {
            open_loop::drive(ctx, ArrivalSchedule::constant(rate), window, config.max_in_flight).await
        }
        Shape::Poisson { rate } => {
            open_loop::drive(ctx, ArrivalSchedule::poisson(rate, config.seed), window, config.max_in_flight).await
        }
        Shape::Closed { clients, think } => closed_loop::drive(ctx, clients, think, window).await,
    };
    let mut report = collector.await.unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
    report.sending = sending_end.saturating_sub(window.warmup);
    // The measurement lasts at least as long as the sending did.
    report.total = report.total.max(report.sending);
    Ok(report)
}

/// What every request of a run shares. The run's samples channel closes when the last clone
/// is dropped, that is when the last request has ended.
pub(crate) struct Context {
    client: HttpClient,
    targets: Vec<Target>,
    next_target: AtomicUsize,
    /// The routes' methods and paths, and the routes (for their weights).
    routes: Vec<RouteTarget>,
    route_weights: Vec<tailguard_model::schema::Route>,
    /// Requests sent so far, warm-up included: the n-th is keyed `child_key(0, n)`.
    sent: AtomicU64,
    /// Offsets (intended starts) count from here.
    pub start: Instant,
    samples: UnboundedSender<Sample>,
}

impl Context {
    /// Sends the next target (round robin) for a request intended to start at `intended`, and
    /// reports its sample, with the latency counted from `intended`.
    pub async fn send(&self, intended: Duration) {
        let index = self.next_target.fetch_add(1, Ordering::Relaxed) % self.targets.len();
        let target = &self.targets[index];
        let (outcome, route) = if self.routes.is_empty() {
            (self.client.send(target).await, None)
        } else {
            let n = self.sent.fetch_add(1, Ordering::Relaxed) + 1;
            let route = pick_route(&self.route_weights, child_key(0, n)).unwrap_or(0);
            let request = self.routes[route].target(target, n);
            (self.client.send(&request).await, Some(route as u16))
        };
        let latency = Instant::now().saturating_duration_since(self.start + intended);
        // The collector outlives every sender, so this cannot fail.
        let _ = self.samples.send(Sample { intended, latency, outcome, route });
    }
}

/// A route's request: its method, its path appended to a target's, and its priority.
struct RouteTarget {
    method: hyper::Method,
    /// The route's path without its leading `/`.
    path: String,
    low_priority: bool,
}

impl RouteTarget {
    fn new(route: &tailguard_model::schema::Route) -> RouteTarget {
        let method = route
            .matches
            .method
            .as_deref()
            .map_or(hyper::Method::GET, |m| crate::parse_method(m).unwrap_or(hyper::Method::GET));
        let path = route.matches.path.trim_start_matches('/').to_string();
        RouteTarget { method, path, low_priority: route.priority == Priority::Low }
    }

    /// Request number `n` of this route to `target`: the route's path under the target's (which
    /// ends with `/`, or gets one), with its id.
    fn target(&self, target: &Target, n: u64) -> Target {
        let base = target.uri.path();
        let slash = if base.ends_with('/') { "" } else { "/" };
        let mut parts = target.uri.clone().into_parts();
        let path = format!("{base}{slash}{}", self.path);
        parts.path_and_query = path.parse().ok().or(parts.path_and_query);
        let uri = hyper::Uri::from_parts(parts).unwrap_or_else(|_| target.uri.clone());
        let (method, body) = (self.method.clone(), target.body.clone());
        Target { method, uri, body, request_id: Some(n), low_priority: self.low_priority }
    }
}

/// Records measured samples until every sender is gone.
async fn collect(
    mut received: UnboundedReceiver<Sample>,
    mut report: LoadReport,
    window: Window,
    keep: bool,
) -> LoadReport {
    while let Some(sample) = received.recv().await {
        if window.is_measured(sample.intended) {
            let end = (sample.intended + sample.latency).saturating_sub(window.warmup);
            report.record(sample, end, keep);
        }
    }
    report
}
