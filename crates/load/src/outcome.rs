//! What happened to one request.

use hyper::StatusCode;
use std::fmt;
use std::time::Duration;

/// How a request ended: with a response (any status) or without one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A whole response arrived, body included.
    Status(StatusCode),
    /// No whole response: the connection failed, the timeout struck, or the exchange broke.
    Failed(ErrorKind),
}

impl Outcome {
    /// A 2xx or 3xx response (vegeta's and hey's definition of success).
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Status(s) if s.is_success() || s.is_redirection())
    }

    /// The error this outcome counts as, if it is not a success.
    pub fn error(&self) -> Option<ErrorKind> {
        match *self {
            Outcome::Failed(kind) => Some(kind),
            Outcome::Status(s) if s == StatusCode::TOO_MANY_REQUESTS => Some(ErrorKind::TooManyRequests),
            Outcome::Status(s) if s.is_server_error() => Some(ErrorKind::ServerError),
            Outcome::Status(s) if s.is_client_error() => Some(ErrorKind::ClientError),
            Outcome::Status(_) => None,
        }
    }
}

/// The kinds of error a report counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorKind {
    /// The connection could not be opened (refused, unreachable, DNS).
    Connect,
    /// No whole response within the request timeout.
    Timeout,
    /// A 5xx response.
    ServerError,
    /// A 429 response: the server shed the request.
    TooManyRequests,
    /// A 4xx response other than 429.
    ClientError,
    /// The exchange broke after connecting (reset, closed early, protocol error).
    Io,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::ServerError => "5xx",
            ErrorKind::TooManyRequests => "429",
            ErrorKind::ClientError => "4xx",
            ErrorKind::Io => "io",
        })
    }
}

/// One measured request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Its intended start, as an offset from the start of the run (warm-up included).
    pub intended: Duration,
    /// From its intended start to the end of its response, or to its failure.
    pub latency: Duration,
    pub outcome: Outcome,
    /// Its route (an index into the run's routes), when the run has routes.
    pub route: Option<u16>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_error_kinds() {
        let status = |code| Outcome::Status(StatusCode::from_u16(code).unwrap());
        assert!(status(200).is_success() && status(302).is_success());
        assert_eq!(status(204).error(), None);
        assert_eq!(status(429).error(), Some(ErrorKind::TooManyRequests));
        assert_eq!(status(503).error(), Some(ErrorKind::ServerError));
        assert_eq!(status(404).error(), Some(ErrorKind::ClientError));
        assert!(!Outcome::Failed(ErrorKind::Connect).is_success());
    }
}
