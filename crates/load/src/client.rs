//! The HTTP client: hyper-util's pooled client over plain TCP (HTTP/1.1 or h2c) or over TLS
//! (hyper-rustls: HTTP/1.1, or HTTP/2 by ALPN), with a per-request timeout, turning every ending
//! into an [`Outcome`].

use crate::{ClientTls, ErrorKind, LoadError, Outcome, Target};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Client, Error};
use hyper_util::rt::TokioExecutor;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A cheap-to-clone client sharing one connection pool.
#[derive(Clone, Debug)]
pub(crate) struct HttpClient {
    inner: Inner,
    timeout: Duration,
}

/// Cleartext only, or TLS too: cleartext runs keep the plain connector's cost.
#[derive(Clone, Debug)]
enum Inner {
    Plain(Client<HttpConnector, Full<Bytes>>),
    Tls(Client<HttpsConnector<HttpConnector>, Full<Bytes>>),
}

impl HttpClient {
    /// A client speaking HTTP/2 when `h2` (h2c by prior knowledge; over TLS, by ALPN), else
    /// HTTP/1.1; `https://` targets are verified against `tls`'s CA and presented its client
    /// certificate, if any.
    pub fn new(h2: bool, timeout: Duration, tls: Option<&ClientTls>) -> Result<Self, LoadError> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout));
        // Requests given up at their timeout reset their streams; answers on the way to a stream
        // h2 has forgotten are reset again, and h2 would end the connection (and every request
        // on it) at the 1,025th such reset: a server gains nothing by it against a client.
        let builder =
            Client::builder(TokioExecutor::new()).http2_only(h2).http2_max_local_error_reset_streams(None).clone();
        let inner = match tls {
            None => Inner::Plain(builder.build(connector)),
            Some(tls) => {
                connector.enforce_http(false);
                let https = HttpsConnectorBuilder::new().with_tls_config(tls_config(tls)?).https_or_http();
                let https = if h2 {
                    https.enable_http2().wrap_connector(connector)
                } else {
                    https.enable_http1().wrap_connector(connector)
                };
                Inner::Tls(builder.build(https))
            }
        };
        Ok(Self { inner, timeout })
    }

    /// Sends one request and reads its whole response; the timeout counts from now.
    pub async fn send(&self, target: &Target) -> Outcome {
        tokio::time::timeout(self.timeout, self.exchange(target)).await.unwrap_or(Outcome::Failed(ErrorKind::Timeout))
    }

    async fn exchange(&self, target: &Target) -> Outcome {
        let response = match &self.inner {
            Inner::Plain(client) => client.request(target.request()).await,
            Inner::Tls(client) => client.request(target.request()).await,
        };
        match response {
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

/// The rustls client configuration of `tls` (ring), its files read now.
fn tls_config(tls: &ClientTls) -> Result<rustls::ClientConfig, LoadError> {
    let bad = |flag: &str, path: &Path, why: String| LoadError::Tls(format!("{flag} {}: {why}", path.display()));
    let certs = |flag: &str, path: &Path| -> Result<Vec<CertificateDer<'static>>, LoadError> {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|c| c.collect::<Result<Vec<_>, _>>())
            .map_err(|e| bad(flag, path, e.to_string()))?;
        if certs.is_empty() {
            return Err(bad(flag, path, "no PEM certificate".into()));
        }
        Ok(certs)
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs("--cacert", &tls.ca)? {
        roots.add(cert).map_err(|e| bad("--cacert", &tls.ca, e.to_string()))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| LoadError::Tls(e.to_string()))?
        .with_root_certificates(roots);
    match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => {
            let chain = certs("--cert", cert)?;
            let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| bad("--key", key, e.to_string()))?;
            builder.with_client_auth_cert(chain, key_der).map_err(|e| bad("--cert", cert, e.to_string()))
        }
        (None, None) => Ok(builder.with_no_client_auth()),
        _ => Err(LoadError::Tls("--cert and --key go together".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LoadConfig, Shape};
    use hyper::Method;

    #[test]
    fn https_targets_need_a_ca_and_bad_files_are_named() {
        let target = Target::parse("https://127.0.0.1:1/", &Method::GET).unwrap();
        let mut config = LoadConfig::new(vec![target], Shape::Closed { clients: 1, think: Duration::ZERO });
        let e = config.validate().unwrap_err().to_string();
        assert!(e.contains("--cacert"), "{e}");
        let missing = ClientTls { ca: "/nonexistent/ca.pem".into(), cert: None, key: None };
        config.tls = Some(missing.clone());
        config.validate().unwrap();
        let e = HttpClient::new(false, Duration::from_secs(1), Some(&missing)).unwrap_err().to_string();
        assert!(e.starts_with("TLS: --cacert /nonexistent/ca.pem: "), "{e}");
    }
}
