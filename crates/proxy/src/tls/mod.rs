//! TLS with rustls (docs/proxy.md, "TLS"): certificates and keys read from PEM files, on the
//! listeners ([`Acceptor`]: the server side, optionally asking for client certificates, mTLS) and
//! towards upstreams ([`Connector`]: the client side, optionally presenting one).
//!
//! Rotation: the files in use are checked when a connection is made, at most once per
//! [`CHECK_EVERY`] (their modification times and lengths, as `reload` checks the proxy's own
//! file); when they changed, they are read again and, if valid, the new configuration serves
//! new connections while open ones go on with the old. Invalid files are reported and the old
//! configuration kept. Nothing polls a listener that takes no connections.
//!
//! ALPN: listeners offer `h2` and `http/1.1`, so HTTP/2 needs no prior knowledge over TLS; so do
//! connections to upstreams, and one whose endpoint chooses `h2` is multiplexed (`crate::pool`).

mod client;
mod identity;
mod server;

pub use client::{Alpn, Connector, Stream};
pub use identity::Identity;
pub use server::{Acceptor, TrustedIdentity};

use arc_swap::ArcSwap;

use rustls::crypto::CryptoProvider;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// How often the files of a TLS configuration are checked for changes (on use).
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The ALPN protocol ids of HTTP/2 and HTTP/1.1.
const H2: &[u8] = b"h2";
const HTTP1: &[u8] = b"http/1.1";

/// A TLS file that could not be used: its field in the proxy's file (`ingress.tls.cert`), the
/// file, and why.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {path}: {why}")]
pub struct TlsError {
    field: String,
    path: String,
    why: String,
}

impl TlsError {
    fn new(field: &str, path: &Path, why: impl std::fmt::Display) -> TlsError {
        TlsError { field: field.to_string(), path: path.display().to_string(), why: why.to_string() }
    }
}

/// The crypto the proxy uses: ring (lighter to build than aws-lc-rs, no C toolchain beyond cc).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate in the PEM file at `path` (at least one).
fn certs(field: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::new(field, path, pem_error(e)))?;
    if certs.is_empty() {
        return Err(TlsError::new(field, path, "no certificate (expected PEM `BEGIN CERTIFICATE` blocks)"));
    }
    Ok(certs)
}

/// The private key in the PEM file at `path` (PKCS#8, PKCS#1 or SEC1).
fn key(field: &str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => {
            TlsError::new(field, path, "no private key (expected a PEM `BEGIN PRIVATE KEY` block)")
        }
        e => TlsError::new(field, path, pem_error(e)),
    })
}

/// The certificates of the PEM file at `path` as trust anchors.
fn roots(field: &str, path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certs(field, path)? {
        roots.add(cert).map_err(|e| TlsError::new(field, path, format!("not a usable CA certificate: {e}")))?;
    }
    Ok(Arc::new(roots))
}

fn pem_error(e: rustls_pki_types::pem::Error) -> String {
    match e {
        rustls_pki_types::pem::Error::Io(e) => format!("cannot read: {e}"),
        e => format!("not valid PEM: {e}"),
    }
}

/// A configuration built from files, rebuilt when they change (checked on use, at most once per
/// [`CHECK_EVERY`]).
struct Reloading<T> {
    current: ArcSwap<T>,
    /// The files and how they were when last read.
    files: Vec<(String, PathBuf)>,
    checked: Mutex<Checked>,
}

struct Checked {
    at: Instant,
    stamps: Vec<Stamp>,
}

type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

impl<T> Reloading<T> {
    /// `files` (each with its field) read by `load` now.
    fn new(files: Vec<(String, PathBuf)>, load: impl FnOnce() -> Result<T, TlsError>) -> Result<Self, TlsError> {
        let stamps = files.iter().map(|(_, p)| stamp(p)).collect();
        let current = ArcSwap::from_pointee(load()?);
        Ok(Reloading { current, files, checked: Mutex::new(Checked { at: Instant::now(), stamps }) })
    }

    /// The configuration in force, first rebuilt with `load` if a check is due and the files
    /// changed. A connection made while another checks does not wait for it.
    fn get(&self, load: impl FnOnce() -> Result<T, TlsError>) -> Arc<T> {
        if let Ok(mut checked) = self.checked.try_lock() {
            let now = Instant::now();
            if now.duration_since(checked.at) >= CHECK_EVERY {
                checked.at = now;
                let stamps: Vec<Stamp> = self.files.iter().map(|(_, p)| stamp(p)).collect();
                if stamps != checked.stamps {
                    checked.stamps = stamps;
                    let fields: Vec<&str> = self.files.iter().map(|(f, _)| f.as_str()).collect();
                    match load() {
                        Ok(new) => {
                            self.current.store(Arc::new(new));
                            eprintln!("tailguard proxy: reloaded {}", fields.join(", "));
                        }
                        Err(e) => eprintln!("tailguard proxy: keeping the old TLS files: {e}"),
                    }
                }
            }
        }
        self.current.load_full()
    }
}
