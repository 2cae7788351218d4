//! The HTTP client: hyper-util's pooled client over plain TCP, HTTP/1.1 or h2c, with a
//! per-request timeout, turning every ending into an [`Outcome`].

use crate::{ErrorKind, Outcome, Target};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Client, Error};
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

/// A cheap-to-clone client sharing one connection pool.
#[derive(Clone, Debug)]
pub(crate) struct HttpClient {
    inner: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

impl HttpClient {
    /// A client speaking HTTP/2 with prior knowledge when `h2c`, else HTTP/1.1.
    pub fn new(h2c: bool, timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout));
        let inner = Client::builder(TokioExecutor::new()).http2_only(h2c).build(connector);
        Self { inner, timeout }
    }

    /// Sends one request and reads its whole response; the timeout counts from now.
    pub async fn send(&self, target: &Target) -> Outcome {
        tokio::time::timeout(self.timeout, self.exchange(target)).await.unwrap_or(Outcome::Failed(ErrorKind::Timeout))
    }

    async fn exchange(&self, target: &Target) -> Outcome {
        match self.inner.request(target.request()).await {
            Ok(response) => {
                let status = response.status();
                match drain(response.into_body()).await {
                    Ok(()) => Outcome::Status(status),
                    Err(_) => Outcome::Failed(ErrorKind::Io),
                }
            }
            Err(err) => Outcome::Failed(classify(&err)),
        }
    }
}

/// Reads a body to its end without keeping it.
async fn drain(mut body: Incoming) -> Result<(), hyper::Error> {
    while let Some(frame) = body.frame().await {
        frame?;
    }
    Ok(())
}

/// A client error before any response: failing to connect, or a broken exchange.
fn classify(err: &Error) -> ErrorKind {
    if err.is_connect() {
        ErrorKind::Connect
    } else {
        ErrorKind::Io
    }
}
