//! What to run: targets, the load's shape, when to stop and how long to warm up. Plain data,
//! checked once by [`LoadConfig::validate`].

use crate::{LoadError, Target};
use std::path::PathBuf;
use std::time::Duration;

/// How requests are started.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shape {
    /// Open loop: `rate` requests per second at evenly spaced intended start times.
    Constant { rate: f64 },
    /// Open loop: a Poisson process of `rate` requests per second (exponential gaps, seeded).
    Poisson { rate: f64 },
    /// Closed loop: `clients` clients, each sending its next request when its last one ended and
    /// `think` has passed.
    Closed { clients: usize, think: Duration },
}

impl Shape {
    /// A short description for the summary and the results' scenario name.
    pub fn describe(&self) -> String {
        match self {
            Shape::Constant { rate } => format!("constant {rate}/s"),
            Shape::Poisson { rate } => format!("poisson {rate}/s"),
            Shape::Closed { clients, think } if think.is_zero() => format!("closed {clients} clients"),
            Shape::Closed { clients, think } => format!("closed {clients} clients, think {think:?}"),
        }
    }
}

/// When the measured part of a run ends: after `duration`, after `requests` measured requests,
/// or at whichever comes first when both are set. Both count from the end of the warm-up.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stop {
    pub duration: Option<Duration>,
    pub requests: Option<u64>,
}

/// TLS towards `https://` targets: the CA to verify them with and, for mTLS, a client
/// certificate (PEM files, as curl's `--cacert`, `--cert` and `--key`).
#[derive(Clone, Debug, PartialEq)]
pub struct ClientTls {
    pub ca: PathBuf,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// A whole load run.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Requests cycle through these, round robin.
    pub targets: Vec<Target>,
    pub shape: Shape,
    pub stop: Stop,
    /// Requests whose intended start falls in the first `warmup` are sent but not recorded.
    pub warmup: Duration,
    /// Each request's limit, from the moment it is sent to the end of its response body.
    pub timeout: Duration,
    /// Speak HTTP/2 (h2c by prior knowledge; over TLS, by ALPN) instead of HTTP/1.1.
    pub h2c: bool,
    /// TLS for `https://` targets (required by them).
    pub tls: Option<ClientTls>,
    /// Open loop: the most requests outstanding at once. When reached, later requests are sent
    /// late, but their latency still counts from their intended start.
    pub max_in_flight: usize,
    /// The seed of the Poisson schedule.
    pub seed: u64,
    /// Keep every measured request's [`Sample`](crate::Sample) in the report.
    pub keep_samples: bool,
    /// The routes of the service the targets reach (an experiment file's `routes`), each
    /// request drawn among them by their weights as the simulator draws them (the n-th request
    /// keyed by `child_key(0, n)`): its method and its path under the target's, an
    /// `x-request-id` header with its number, and results per route. Empty: every request is
    /// its target's.
    pub routes: Vec<tailguard_model::schema::Route>,
}

impl LoadConfig {
    /// A configuration with the defaults: 10 s, no warm-up, 5 s timeout, HTTP/1.1, seed 1.
    pub fn new(targets: Vec<Target>, shape: Shape) -> Self {
        Self {
            targets,
            shape,
            stop: Stop { duration: Some(Duration::from_secs(10)), requests: None },
            warmup: Duration::ZERO,
            timeout: Duration::from_secs(5),
            h2c: false,
            tls: None,
            max_in_flight: 10_000,
            seed: 1,
            keep_samples: false,
            routes: Vec::new(),
        }
    }

    /// Checks everything a run relies on, so the run itself cannot fail.
    pub fn validate(&self) -> Result<(), LoadError> {
        if self.targets.is_empty() {
            return Err(LoadError::NoTargets);
        }
        match self.shape {
            Shape::Constant { rate } | Shape::Poisson { rate } if !(rate.is_finite() && rate > 0.0) => {
                return Err(LoadError::BadRate(rate))
            }
            Shape::Closed { clients: 0, .. } => return Err(LoadError::NoClients),
            _ => {}
        }
        if self.tls.is_none() && self.targets.iter().any(|t| t.uri.scheme_str() == Some("https")) {
            return Err(LoadError::Tls("https:// targets need the CA to verify them with (--cacert)".into()));
        }
        self.validate_limits()
    }

    fn validate_limits(&self) -> Result<(), LoadError> {
        match (self.stop.duration, self.stop.requests) {
            (None, None) => return Err(LoadError::Unbounded),
            (Some(d), _) if d.is_zero() => return Err(LoadError::Zero("the duration")),
            (_, Some(0)) => return Err(LoadError::Zero("the request count")),
            _ => {}
        }
        if self.timeout.is_zero() {
            return Err(LoadError::Zero("the timeout"));
        }
        if self.max_in_flight == 0 {
            return Err(LoadError::Zero("the in-flight limit"));
        }
        Ok(())
    }

    /// The measurement window these settings describe.
    pub(crate) fn window(&self) -> Window {
        Window { warmup: self.warmup, stop: self.stop }
    }
}

/// Decides, from a request's intended start (an offset from the run's start), whether it is
/// measured and whether the run is over. Shared by the open and the closed loop.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    pub warmup: Duration,
    pub stop: Stop,
}

impl Window {
    /// Whether a request due at `offset` is recorded (it is not part of the warm-up).
    pub fn is_measured(&self, offset: Duration) -> bool {
        offset >= self.warmup
    }

    /// Whether a request due at `offset` is past the end of the run, given that `measured`
    /// requests have been started after the warm-up.
    pub fn is_over(&self, offset: Duration, measured: u64) -> bool {
        let late = self.stop.duration.is_some_and(|d| offset >= self.warmup + d);
        let enough = self.stop.requests.is_some_and(|n| measured >= n);
        late || enough
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::Method;

    fn config(shape: Shape) -> LoadConfig {
        let target = Target::parse("http://127.0.0.1:1/", &Method::GET).unwrap();
        LoadConfig::new(vec![target], shape)
    }

    #[test]
    fn invalid_settings_are_named() {
        let err = |c: LoadConfig| c.validate().unwrap_err().to_string();
        assert!(err(config(Shape::Constant { rate: 0.0 })).contains("bad rate"));
        assert!(err(config(Shape::Poisson { rate: f64::NAN })).contains("bad rate"));
        assert!(err(config(Shape::Closed { clients: 0, think: Duration::ZERO })).contains("client"));
        let mut c = config(Shape::Constant { rate: 1.0 });
        c.stop = Stop::default();
        assert!(err(c.clone()).contains("unbounded"));
        c.stop.requests = Some(0);
        assert!(err(c.clone()).contains("request count"));
        c.stop.requests = Some(1);
        c.timeout = Duration::ZERO;
        assert!(err(c.clone()).contains("timeout"));
        c.targets.clear();
        assert!(err(c).contains("no target"));
    }

    #[test]
    fn the_window_excludes_the_warmup_and_ends_at_the_first_limit() {
        let window = Window {
            warmup: Duration::from_secs(1),
            stop: Stop { duration: Some(Duration::from_secs(2)), requests: Some(5) },
        };
        assert!(!window.is_measured(Duration::from_millis(999)));
        assert!(window.is_measured(Duration::from_secs(1)));
        assert!(!window.is_over(Duration::from_millis(2999), 4));
        assert!(window.is_over(Duration::from_secs(3), 0));
        assert!(window.is_over(Duration::from_secs(1), 5));
    }
}
