//! Why a load run could not start.

/// A load configuration that cannot run; every variant names what was wrong and what was expected.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A target URL that is not an absolute `http://` URL with a host.
    #[error("bad target {target:?}: {reason}")]
    BadTarget { target: String, reason: String },
    /// An HTTP method that is not a valid token.
    #[error("bad method {0:?}: expected an HTTP method such as GET or POST")]
    BadMethod(String),
    /// No target was given.
    #[error("no target: give at least one URL")]
    NoTargets,
    /// An open-loop rate that is not a positive, finite number of requests per second.
    #[error("bad rate {0}: expected a positive number of requests per second")]
    BadRate(f64),
    /// A closed loop with no clients.
    #[error("a closed loop needs at least one client")]
    NoClients,
    /// Neither a duration nor a request count bounds the run.
    #[error("the run is unbounded: give a duration or a request count (or both)")]
    Unbounded,
    /// TLS files that cannot be used, or an `https://` target without them.
    #[error("TLS: {0}")]
    Tls(String),
    /// A zero duration, request count, timeout or in-flight limit.
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
}
