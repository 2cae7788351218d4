//! A listener's TLS: the handshake, ALPN, client certificates (mTLS) and the identities a
//! verified client certificate proves.

use super::{certs, key, provider, roots, Identity, Reloading, TlsError, H2, HTTP1};
use crate::config::ServerTls;
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// Accepts TLS connections on one listener with its current certificate.
pub struct Acceptor {
    config: ServerTls,
    /// The listener's field in the file (`ingress.tls`), for messages.
    field: String,
    current: Reloading<ServerConfig>,
    /// The identities whose client certificates are trusted (`ingress.trusted_identities`).
    trusted: Vec<Identity>,
}

/// In a request's extensions when its connection's client certificate is valid for one of the
/// listener's `trusted_identities`.
#[derive(Clone, Copy, Debug)]
pub struct TrustedIdentity;

impl Acceptor {
    /// The acceptor of the listener `field` (`ingress.tls`), its files read now; client
    /// certificates proving one of `trusted` (checked by [`crate::config::Config`]) are marked.
    pub fn new(config: &ServerTls, field: &str, trusted: &[String]) -> Result<Acceptor, TlsError> {
        let files =
            [("cert", Some(&config.cert)), ("key", Some(&config.key)), ("client_ca", config.client_ca.as_ref())];
        let files = files.into_iter().filter_map(|(f, p)| Some((format!("{field}.{f}"), p?.clone()))).collect();
        let current = Reloading::new(files, || server_config(config, field))?;
        let trusted = trusted.iter().filter_map(|name| Identity::parse(name).ok()).collect();
        Ok(Acceptor { config: config.clone(), field: field.to_string(), current, trusted })
    }

    /// The handshake on `stream`: the TLS stream, whether ALPN chose HTTP/2, and the trusted
    /// identity its client certificate proves, if any.
    pub async fn accept(
        &self,
        stream: TcpStream,
    ) -> std::io::Result<(TlsStream<TcpStream>, bool, Option<TrustedIdentity>)> {
        let config = self.current.get(|| server_config(&self.config, &self.field));
        let stream = tokio_rustls::TlsAcceptor::from(config).accept(stream).await?;
        let connection = stream.get_ref().1;
        let h2 = connection.alpn_protocol() == Some(H2);
        let identity = connection.peer_certificates().and_then(|chain| self.identity(chain.first()?));
        Ok((stream, h2, identity))
    }

    /// Whether the (verified) client certificate `cert` proves a trusted identity.
    fn identity(&self, cert: &rustls_pki_types::CertificateDer<'_>) -> Option<TrustedIdentity> {
        self.trusted.iter().any(|id| id.proven_by(cert)).then_some(TrustedIdentity)
    }
}

/// The rustls configuration of `tls`, its files read now.
fn server_config(tls: &ServerTls, field: &str) -> Result<ServerConfig, TlsError> {
    let provider = provider();
    let cert_field = format!("{field}.cert");
    let certs = certs(&cert_field, &tls.cert)?;
    let key = key(&format!("{field}.key"), &tls.key)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::new(field, &tls.cert, e))?;
    let builder = match &tls.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let ca_field = format!("{field}.client_ca");
            let verifier = WebPkiClientVerifier::builder_with_provider(roots(&ca_field, ca)?, provider);
            let verifier = if tls.requires_client_cert() { verifier } else { verifier.allow_unauthenticated() };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| TlsError::new(&ca_field, ca, e))?)
        }
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| {
        TlsError::new(&cert_field, &tls.cert, format!("unusable with its key {}: {e}", tls.key.display()))
    })?;
    config.alpn_protocols = vec![H2.to_vec(), HTTP1.to_vec()];
    Ok(config)
}
