//! Wiring of one run: the shared [`Context`] the loops send through, and the collector that
//! turns samples into the [`LoadReport`].

use crate::client::HttpClient;
use crate::config::Window;
use crate::{closed_loop, open_loop, ArrivalSchedule, LoadConfig, LoadError, LoadReport, Sample, Shape, Target};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::time::Instant;

/// Runs the load `config` describes and reports what it measured. Every request ends (its
/// timeout bounds it) before this returns. Must be called within a tokio runtime with time and
/// I/O enabled.
pub async fn run(config: LoadConfig) -> Result<LoadReport, LoadError> {
    config.validate()?;
    let window = config.window();
    let (samples, received) = unbounded_channel();
    let report = LoadReport::new(config.shape.describe(), config.seed);
    let collector = tokio::spawn(collect(received, report, window, config.keep_samples));
    let ctx = Arc::new(Context {
        client: HttpClient::new(config.h2c, config.timeout, config.tls.as_ref())?,
        targets: config.targets.clone(),
        next_target: AtomicUsize::new(0),
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
    /// Offsets (intended starts) count from here.
    pub start: Instant,
    samples: UnboundedSender<Sample>,
}

impl Context {
    /// Sends the next target (round robin) for a request intended to start at `intended`, and
    /// reports its sample, with the latency counted from `intended`.
    pub async fn send(&self, intended: Duration) {
        let index = self.next_target.fetch_add(1, Ordering::Relaxed) % self.targets.len();
        let outcome = self.client.send(&self.targets[index]).await;
        let latency = Instant::now().saturating_duration_since(self.start + intended);
        // The collector outlives every sender, so this cannot fail.
        let _ = self.samples.send(Sample { intended, latency, outcome });
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
