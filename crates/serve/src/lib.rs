//! `tailguard serve`: a synthetic HTTP service built from one service of an experiment file, so a
//! testbed of real processes behaves as the simulator's model of it (docs/serve.md).
//!
//! Each request waits in a FIFO queue for one of the service's `workers` (0: unlimited), sleeps
//! its local work (a `service_time` draw × the `latency_model`'s factor at the time since the
//! server started), meets its faults (`slow`, `error` → 500, `lost` → never answered, `down` →
//! 503), makes its `calls` as HTTP GETs to the URLs given for the called services (in the lab,
//! its sidecar's egress), and answers 200, or 500 if a call failed. Admission control, balancing,
//! timeouts, retries and hedging are the sidecar's, not done here.
//!
//! - [`Spec::from_experiment`]`(experiment, options)` picks the service and checks the options;
//! - [`Server::bind`]`(spec, addr)` builds it and binds; [`Server::run_until`] serves until a
//!   future completes, [`Server::spawn`] serves on a task (tests);
//! - [`shutdown_signal`] completes on Ctrl-C or SIGTERM;
//! - [`clock::Clock`]: the run's clock fault windows and latency models are timed against
//!   ([`Server::clock`]; `tailguard serve` restarts it on SIGUSR1, which the lab sends as its load
//!   starts).

mod behaviour;
mod calls;
pub mod clock;
mod error;
pub mod precise;
mod routes;
mod server;
mod spec;
pub mod store;

pub use behaviour::{Arrival, Behaviour, Fate, MAX_WORK};
pub use error::ServeError;
pub use server::{Running, Server, LOST_HOLD, SERVED_BY};
pub use spec::{Downstream, Options, Spec, DEFAULT_SEED};

/// Completes when the process is asked to stop: Ctrl-C, or SIGTERM on Unix. If a signal handler
/// cannot be installed, that signal is not waited for.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
