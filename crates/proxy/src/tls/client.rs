//! TLS towards an upstream: the CA its endpoints' certificates must chain to, the name they must
//! be valid for, and the proxy's client certificate if the upstream requires one (mTLS).

use super::{certs, key, provider, roots, Reloading, TlsError, H2, HTTP1};
use crate::config::{self, UpstreamTls};
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// What a new connection offers by ALPN: `h2` and `http/1.1`, or `http/1.1` alone (a protocol
/// switch, which HTTP/2 cannot carry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alpn {
    Any,
    Http1,
}

/// Opens TLS connections to one upstream's endpoints, offering `h2` and `http/1.1` by ALPN.
pub struct Connector {
    config: UpstreamTls,
    field: String,
    current: Reloading<ClientConfig>,
}

impl Connector {
    /// The connector of the upstream `field` (`egress.upstreams.NAME.tls`), its files read now.
    pub fn new(config: &UpstreamTls, field: &str) -> Result<Connector, TlsError> {
        let files = [("ca", Some(&config.ca)), ("cert", config.cert.as_ref()), ("key", config.key.as_ref())];
        let files = files.into_iter().filter_map(|(f, p)| Some((format!("{field}.{f}"), p?.clone()))).collect();
        let current = Reloading::new(files, || client_config(config, field))?;
        Ok(Connector { config: config.clone(), field: field.to_string(), current })
    }

    /// The settings it was made from.
    pub fn config(&self) -> &UpstreamTls {
        &self.config
    }

    /// The handshake with `addr` on `stream`, verifying the endpoint's certificate for the
    /// configured `server_name`, else for its IP address, offering `alpn`.
    pub async fn connect(&self, addr: SocketAddr, stream: TcpStream, alpn: Alpn) -> io::Result<TlsStream<TcpStream>> {
        let name = match &self.config.server_name {
            Some(name) => config::identity(name).map_err(io::Error::other)?,
            None => ServerName::IpAddress(addr.ip().into()),
        };
        let mut config = self.current.get(|| client_config(&self.config, &self.field));
        if alpn == Alpn::Http1 {
            std::sync::Arc::make_mut(&mut config).alpn_protocols = vec![HTTP1.to_vec()];
        }
        tokio_rustls::TlsConnector::from(config).connect(name, stream).await
    }
}

/// The rustls configuration of `tls`, its files read now.
fn client_config(tls: &UpstreamTls, field: &str) -> Result<ClientConfig, TlsError> {
    let roots = roots(&format!("{field}.ca"), &tls.ca)?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::new(field, &tls.ca, e))?
        .with_root_certificates(roots);
    let mut config = match (&tls.cert, &tls.key) {
        (Some(cert), Some(key_path)) => {
            let cert_field = format!("{field}.cert");
            let certs = certs(&cert_field, cert)?;
            let key = key(&format!("{field}.key"), key_path)?;
            builder.with_client_auth_cert(certs, key).map_err(|e| {
                TlsError::new(&cert_field, cert, format!("unusable with its key {}: {e}", key_path.display()))
            })?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![H2.to_vec(), HTTP1.to_vec()];
    Ok(config)
}

/// A connection to an endpoint: cleartext or TLS.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// Whether the endpoint chose HTTP/2 by ALPN.
    pub fn is_h2(&self) -> bool {
        matches!(self, Stream::Tls(s) if s.get_ref().1.alpn_protocol() == Some(H2))
    }
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }
}
