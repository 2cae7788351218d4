//! TLS and mTLS over real sockets on 127.0.0.1, with certificates made in the test (rcgen): the
//! handshake (HTTP/1.1 and HTTP/2 by ALPN), a client without a certificate refused, a rotation
//! under load, an upstream over mTLS (and over h2 by ALPN), an application behind TLS, identities
//! (DNS names and SPIFFE IDs) in the trust rule, and errors naming the file.

use crate::proxy_of;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailguard_proxy::{Config, Proxy};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// A CA made for one test, the files it writes in its own directory, and the certificates it
/// signs.
struct Pki {
    dir: PathBuf,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

/// A certificate and its key, as PEM files and as DER.
struct Leaf {
    cert: PathBuf,
    key: PathBuf,
    der: CertificateDer<'static>,
    key_der: PrivateKeyDer<'static>,
}

impl Pki {
    fn new(test: &str) -> Pki {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("tailguard-tls-{}-{test}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, format!("tailguard test CA {test}"));
        let ca = params.self_signed(&ca_key).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        Pki { dir, ca, ca_key }
    }

    fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A certificate for `names` signed by the CA, written as `{file}.pem` and `{file}-key.pem`
    /// (through a rename each, so a reader never sees half a file).
    fn leaf(&self, file: &str, names: &[&str]) -> Leaf {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        self.leaf_of(file, CertificateParams::new(names).unwrap())
    }

    /// A certificate whose only SAN is the URI `uri` (a SPIFFE ID), as [`Pki::leaf`] writes it.
    fn spiffe_leaf(&self, file: &str, uri: &str) -> Leaf {
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![rcgen::SanType::URI(uri.try_into().unwrap())];
        self.leaf_of(file, params)
    }

    fn leaf_of(&self, file: &str, params: CertificateParams) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        let (cert_path, key_path) = (self.dir.join(format!("{file}.pem")), self.dir.join(format!("{file}-key.pem")));
        write_atomically(&cert_path, &cert.pem());
        write_atomically(&key_path, &key.serialize_pem());
        let key_der = PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        Leaf { cert: cert_path, key: key_path, der: cert.der().clone(), key_der }
    }

    /// A client that trusts the CA, presenting `identity` if given, offering `alpn`.
    fn client(&self, identity: Option<&Leaf>, alpn: &[&[u8]]) -> TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let mut config = match identity {
            Some(leaf) => builder.with_client_auth_cert(vec![leaf.der.clone()], leaf.key_der.clone_key()).unwrap(),
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        TlsConnector::from(Arc::new(config))
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// An application on port 0 answering 200 with the deadline header it was sent (or `none`) as
/// its body; over TLS requiring a client certificate when given an acceptor.
async fn app(tls: Option<TlsAcceptor>) -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let tls = tls.clone();
            tokio::spawn(async move {
                let service = service_fn(|req: Request<Incoming>| async move {
                    let deadline = req.headers().get("x-tailguard-deadline-ms");
                    let seen = deadline.and_then(|v| v.to_str().ok()).unwrap_or("none").to_string();
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(seen))))
                });
                let http1 = hyper::server::conn::http1::Builder::new();
                match tls {
                    None => drop(http1.serve_connection(TokioIo::new(stream), service).await),
                    Some(tls) => {
                        if let Ok(stream) = tls.accept(stream).await {
                            drop(http1.serve_connection(TokioIo::new(stream), service).await);
                        }
                    }
                }
            });
        }
    });
    (addr, task)
}

/// One request over a new TLS connection to `addr`: the status, the body, the HTTP version and
/// the server's certificate; an error if the handshake or the exchange failed.
async fn request(
    connector: &TlsConnector,
    addr: SocketAddr,
    headers: &[(&str, &str)],
) -> Result<(StatusCode, String, Version, CertificateDer<'static>), String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from("proxy.test").unwrap();
    let stream = connector.connect(name, tcp).await.map_err(|e| format!("handshake: {e}"))?;
    let (_, connection) = stream.get_ref();
    let server_cert = connection.peer_certificates().unwrap()[0].clone().into_owned();
    let h2 = connection.alpn_protocol() == Some(b"h2");
    let mut req = Request::builder().uri(format!("https://{addr}/")).header("host", "proxy.test");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let req = req.body(Empty::<Bytes>::new()).unwrap();
    let io = TokioIo::new(stream);
    let response = if h2 {
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await.map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        sender.send_request(req).await
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        sender.send_request(req).await
    }
    .map_err(|e| e.to_string())?;
    let (status, version) = (response.status(), response.version());
    let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned(), version, server_cert))
}

/// An ingress in front of `app` over TLS with `server`'s certificate, and `more` settings.
fn ingress(app: SocketAddr, server: &Leaf, tls_more: &str, more: &str) -> String {
    format!(
        "ingress: {{listen: 127.0.0.1:0, app: {app}, tls: {{cert: {}, key: {}{tls_more}}}{more}}}\nshutdown_grace: 1s\n",
        server.cert.display(),
        server.key.display()
    )
}

const H1: &[&[u8]] = &[b"http/1.1"];
const H2_AND_H1: &[&[u8]] = &[b"h2", b"http/1.1"];

#[tokio::test]
async fn the_listener_speaks_tls_with_http1_and_h2_by_alpn() {
    let pki = Pki::new("alpn");
    let server = pki.leaf("server", &["proxy.test"]);
    let (app, _app) = app(None).await;
    let proxy = proxy_of(&ingress(app, &server, "", "")).await;
    let addr = proxy.ingress.unwrap();
    // A client offering only HTTP/1.1 is served over HTTP/1.1, with the proxy's certificate.
    let (status, _, version, cert) = request(&pki.client(None, H1), addr, &[]).await.unwrap();
    assert_eq!((status, version), (StatusCode::OK, Version::HTTP_11));
    assert_eq!(cert, server.der);
    // One offering h2 first gets HTTP/2, without prior knowledge.
    let (status, _, version, _) = request(&pki.client(None, H2_AND_H1), addr, &[]).await.unwrap();
    assert_eq!((status, version), (StatusCode::OK, Version::HTTP_2));
    // A cleartext request to the TLS listener gets no HTTP answer.
    let mut plain = TcpStream::connect(addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    plain.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut answer)).await;
    assert!(!answer.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer));
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_client_without_a_certificate_is_refused_when_one_is_required() {
    let pki = Pki::new("refused");
    let server = pki.leaf("server", &["proxy.test"]);
    let client = pki.leaf("client", &["caller.test"]);
    let (app, _app) = app(None).await;
    let tls_more = format!(", client_ca: {}", pki.ca().display());
    let proxy = proxy_of(&ingress(app, &server, &tls_more, "")).await;
    let addr = proxy.ingress.unwrap();
    // TLS 1.3: the client learns of the refusal when it reads, so the exchange fails.
    let refused = request(&pki.client(None, H1), addr, &[]).await;
    assert!(refused.is_err(), "a client without a certificate was served: {refused:?}");
    // A certificate from another CA is refused too.
    let stranger = Pki::new("stranger");
    let outsider = stranger.leaf("client", &["caller.test"]);
    let refused = request(&pki.client(Some(&outsider), H1), addr, &[]).await;
    assert!(refused.is_err(), "a certificate from another CA was accepted: {refused:?}");
    let (status, ..) = request(&pki.client(Some(&client), H1), addr, &[]).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_rotated_certificate_serves_new_connections_and_no_request_fails() {
    let pki = Pki::new("rotation");
    let old = pki.leaf("server", &["proxy.test"]);
    let (app, _app) = app(None).await;
    let proxy = proxy_of(&ingress(app, &old, "", "")).await;
    let addr = proxy.ingress.unwrap();
    let connector = pki.client(None, H1);
    // Two clients, each a new connection per request, for the whole test.
    let served = Arc::new(std::sync::Mutex::new(Vec::new()));
    let until = Instant::now() + Duration::from_secs(4);
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let (connector, served) = (connector.clone(), served.clone());
            tokio::spawn(async move {
                while Instant::now() < until {
                    let result = request(&connector, addr, &[]).await.map(|(status, _, _, cert)| (status, cert));
                    served.lock().unwrap().push(result);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The certificate and key are replaced in place (the same paths), one file after the other.
    let new = pki.leaf("server", &["proxy.test"]);
    assert_eq!(new.cert, old.cert);
    for client in clients {
        client.await.unwrap();
    }
    let served = std::mem::take(&mut *served.lock().unwrap());
    let failed: Vec<_> = served.iter().filter(|r| !matches!(r, Ok((StatusCode::OK, _)))).collect();
    assert!(failed.is_empty(), "{} of {} requests failed: {:?}", failed.len(), served.len(), failed.first());
    let with = |der: &CertificateDer| served.iter().filter(|r| matches!(r, Ok((_, c)) if c == der)).count();
    assert!(with(&old.der) > 0, "no request was served with the old certificate");
    assert!(with(&new.der) > 0, "the new certificate was never served ({} requests)", served.len());
    // Once the new one was served, the old one never was again.
    let first_new = served.iter().position(|r| matches!(r, Ok((_, c)) if *c == new.der)).unwrap();
    let last_old = served.iter().rposition(|r| matches!(r, Ok((_, c)) if *c == old.der)).unwrap();
    assert!(last_old < first_new + 2, "old certificate served at {last_old} after the new at {first_new}");
    proxy.shutdown().await;
}

#[tokio::test]
async fn the_egress_calls_an_upstream_over_mtls() {
    let pki = Pki::new("upstream");
    let backend = pki.leaf("backend", &["backend.test"]);
    let sidecar = pki.leaf("sidecar", &["caller.test"]);
    // The upstream requires a client certificate from the CA.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pki.ca.der().clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build().unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![backend.der.clone()], backend.key_der.clone_key())
        .unwrap();
    let (upstream, _upstream) = app(Some(TlsAcceptor::from(Arc::new(config)))).await;
    let upstream_file = |tls: &str| {
        format!("egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc: {{endpoints: [{upstream}], tls: {tls}}}\nshutdown_grace: 1s\n")
    };
    let get = |addr: SocketAddr| async move {
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(TcpStream::connect(addr).await.unwrap())).await.unwrap();
        tokio::spawn(conn);
        let req = Request::builder().uri("/").header("host", "svc").body(Empty::<Bytes>::new()).unwrap();
        sender.send_request(req).await.unwrap().status()
    };
    let (ca, cert, key) = (pki.ca(), sidecar.cert.display(), sidecar.key.display());
    let tls = format!("{{ca: {}, server_name: backend.test, cert: {cert}, key: {key}}}", ca.display());
    let proxy = proxy_of(&upstream_file(&tls)).await;
    assert_eq!(get(proxy.egress.unwrap()).await, StatusCode::OK);
    proxy.shutdown().await;
    // Without its client certificate the upstream refuses the proxy; with the wrong name the
    // proxy refuses the upstream.
    for tls in [
        format!("{{ca: {}, server_name: backend.test}}", ca.display()),
        format!("{{ca: {}, server_name: other.test, cert: {cert}, key: {key}}}", ca.display()),
    ] {
        let proxy = proxy_of(&upstream_file(&tls)).await;
        assert_eq!(get(proxy.egress.unwrap()).await, StatusCode::BAD_GATEWAY, "{tls}");
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn a_client_certificate_with_a_trusted_identity_may_set_the_deadline() {
    let pki = Pki::new("identity");
    let server = pki.leaf("server", &["proxy.test"]);
    let trusted = pki.leaf("trusted", &["caller.trusted.test"]);
    let other = pki.leaf("other", &["caller.other.test"]);
    let (app, _app) = app(None).await;
    // Loopback is no trusted network here: only the identity can make a caller trusted.
    let tls_more = format!(", client_ca: {}", pki.ca().display());
    let more = ", trusted_peers: [192.0.2.0/24], trusted_identities: [caller.trusted.test]";
    let proxy = proxy_of(&ingress(app, &server, &tls_more, more)).await;
    let addr = proxy.ingress.unwrap();
    let deadline = [("x-tailguard-deadline-ms", "2500")];
    for alpn in [H1, H2_AND_H1] {
        let (status, seen, ..) = request(&pki.client(Some(&trusted), alpn), addr, &deadline).await.unwrap();
        assert_eq!((status, seen.as_str()), (StatusCode::OK, "2500"), "trusted identity over {alpn:?}");
        let (status, seen, ..) = request(&pki.client(Some(&other), alpn), addr, &deadline).await.unwrap();
        assert_eq!((status, seen.as_str()), (StatusCode::OK, "none"), "untrusted identity over {alpn:?}");
    }
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_spiffe_id_in_a_uri_san_is_trusted_exactly_or_under_a_path_rule() {
    let pki = Pki::new("spiffe");
    let server = pki.leaf("server", &["proxy.test"]);
    let (app, _app) = app(None).await;
    let tls_more = format!(", client_ca: {}", pki.ca().display());
    let more = ", trusted_peers: [192.0.2.0/24], trusted_identities: ['spiffe://cluster.local/ns/shop/sa/cart', 'spiffe://cluster.local/ns/ops/*']";
    let proxy = proxy_of(&ingress(app, &server, &tls_more, more)).await;
    let addr = proxy.ingress.unwrap();
    let deadline = [("x-tailguard-deadline-ms", "2500")];
    for (n, (uri, believed)) in [
        ("spiffe://cluster.local/ns/shop/sa/cart", true),
        ("spiffe://cluster.local/ns/ops/sa/deployer", true),
        // Neither the same ID nor under the rule's path.
        ("spiffe://cluster.local/ns/shop/sa/cart2", false),
        ("spiffe://cluster.local/ns/shop/sa/other", false),
        ("spiffe://cluster.local/ns/operations/sa/x", false),
        ("spiffe://other.domain/ns/ops/sa/deployer", false),
    ]
    .into_iter()
    .enumerate()
    {
        let client = pki.spiffe_leaf(&format!("client{n}"), uri);
        let (status, seen, ..) = request(&pki.client(Some(&client), H1), addr, &deadline).await.unwrap();
        let expected = if believed { "2500" } else { "none" };
        assert_eq!((status, seen.as_str()), (StatusCode::OK, expected), "{uri}");
    }
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_missing_or_bad_file_is_an_error_naming_the_field_and_the_file() {
    let pki = Pki::new("errors");
    let server = pki.leaf("server", &["proxy.test"]);
    let start = |text: String| async move {
        let config = Config::parse(&text, Path::new("proxy.yaml")).unwrap();
        Proxy::start(config).await.err().map(|e| e.to_string()).unwrap_or_default()
    };
    let app: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let missing = Leaf { key: pki.dir.join("nope.pem"), ..pki.leaf("server", &["proxy.test"]) };
    let e = start(ingress(app, &missing, "", "")).await;
    assert!(e.starts_with("ingress.tls.key: ") && e.contains("nope.pem") && e.contains("cannot read"), "{e}");
    let not_a_cert = Leaf { cert: server.key.clone(), ..pki.leaf("server", &["proxy.test"]) };
    let e = start(ingress(app, &not_a_cert, "", "")).await;
    assert!(e.starts_with("ingress.tls.cert: ") && e.contains("no certificate"), "{e}");
    let other_key = pki.leaf("other", &["proxy.test"]);
    let mismatched = Leaf { key: other_key.key.clone(), ..pki.leaf("server", &["proxy.test"]) };
    let e = start(ingress(app, &mismatched, "", "")).await;
    assert!(e.starts_with("ingress.tls.cert: ") && e.contains("unusable with its key"), "{e}");
    let e = start(ingress(app, &server, ", client_ca: /nonexistent/ca.pem", "")).await;
    assert!(e.starts_with("ingress.tls.client_ca: /nonexistent/ca.pem: cannot read"), "{e}");
    // Checked with the file: identities need client certificates.
    let text = ingress(app, &server, "", ", trusted_identities: [caller.test]");
    let e = Config::parse(&text, Path::new("proxy.yaml")).unwrap_err().to_string();
    assert!(e.contains("ingress.trusted_identities") && e.contains("client_ca"), "{e}");
}

/// A TLS application on port 0 with `leaf`'s certificate, offering `alpn`, asking for a client
/// certificate from `pki`'s CA when `mtls`; it serves HTTP/2 or HTTP/1.1 as ALPN chose, and
/// answers each request after 100 ms with the HTTP version it arrived over.
struct AlpnApp {
    addr: SocketAddr,
    /// Connections whose handshake succeeded.
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Drop for AlpnApp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn alpn_app(pki: &Pki, leaf: &Leaf, alpn: &[&[u8]], mtls: bool) -> AlpnApp {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions();
    let builder = if mtls {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(pki.ca.der().clone()).unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
        builder.unwrap().with_client_cert_verifier(verifier.build().unwrap())
    } else {
        builder.unwrap().with_no_client_auth()
    };
    let mut config = builder.with_single_cert(vec![leaf.der.clone()], leaf.key_der.clone_key()).unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let (acceptor, counter) = (acceptor.clone(), counter.clone());
            conns.spawn(async move {
                let Ok(stream) = acceptor.accept(stream).await else { return };
                counter.fetch_add(1, Ordering::SeqCst);
                let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                let service = service_fn(|req: Request<Incoming>| async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(format!("{:?}", req.version())))))
                });
                let io = TokioIo::new(stream);
                if h2 {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(io, service)
                        .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                }
            });
        }
    });
    AlpnApp { addr, accepted, task }
}

/// `n` concurrent GETs to `addr` (cleartext HTTP/1.1, Host `host`): each one's status and body.
async fn concurrent_gets(addr: SocketAddr, host: &str, n: usize) -> Vec<(StatusCode, String)> {
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let requests: Vec<_> = (0..n)
        .map(|_| {
            let (client, host) = (client.clone(), host.to_string());
            tokio::spawn(async move {
                let req = Request::get(format!("http://{addr}/")).header("host", host).body(Empty::new()).unwrap();
                let response = client.request(req).await.unwrap();
                let status = response.status();
                let body = response.into_body().collect().await.unwrap().to_bytes();
                (status, String::from_utf8_lossy(&body).into_owned())
            })
        })
        .collect();
    let mut answers = Vec::new();
    for request in requests {
        answers.push(tokio::time::timeout(Duration::from_secs(10), request).await.unwrap().unwrap());
    }
    answers
}

#[tokio::test]
async fn an_upstream_choosing_h2_by_alpn_carries_concurrent_requests_on_one_connection() {
    let pki = Pki::new("h2-upstream");
    let backend = pki.leaf("backend", &["backend.test"]);
    let file = |upstream: SocketAddr| {
        format!(
            "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    svc: {{endpoints: [{upstream}], tls: {{ca: {}, server_name: backend.test}}}}\nshutdown_grace: 1s\n",
            pki.ca().display()
        )
    };
    // Offered h2, the upstream gets all 50 requests, each held 100 ms, over one connection.
    let h2 = alpn_app(&pki, &backend, H2_AND_H1, false).await;
    let proxy = proxy_of(&file(h2.addr)).await;
    let answers = concurrent_gets(proxy.egress.unwrap(), "svc", 50).await;
    assert!(answers.iter().all(|a| *a == (StatusCode::OK, "HTTP/2.0".to_string())), "{answers:?}");
    assert_eq!(h2.accepted.load(Ordering::SeqCst), 1, "one multiplexed connection");
    proxy.shutdown().await;
    // An upstream choosing HTTP/1.1 is spoken to over HTTP/1.1: a connection per request in flight.
    let h1 = alpn_app(&pki, &backend, H1, false).await;
    let proxy = proxy_of(&file(h1.addr)).await;
    let answers = concurrent_gets(proxy.egress.unwrap(), "svc", 20).await;
    assert!(answers.iter().all(|a| *a == (StatusCode::OK, "HTTP/1.1".to_string())), "{answers:?}");
    assert!(h1.accepted.load(Ordering::SeqCst) > 1, "{} connections", h1.accepted.load(Ordering::SeqCst));
    proxy.shutdown().await;
}

#[tokio::test]
async fn the_ingress_reaches_an_application_listening_with_mtls_over_h2() {
    let pki = Pki::new("app-tls");
    let app_leaf = pki.leaf("app", &["app.test"]);
    let sidecar = pki.leaf("sidecar", &["sidecar.test"]);
    let app = alpn_app(&pki, &app_leaf, H2_AND_H1, true).await;
    let file = |client_cert: &str| {
        format!(
            "ingress: {{listen: 127.0.0.1:0, app: {}, admission: {{kind: none}}, app_tls: {{ca: {}, server_name: app.test{client_cert}}}}}\nshutdown_grace: 1s\n",
            app.addr,
            pki.ca().display()
        )
    };
    let with_cert = format!(", cert: {}, key: {}", sidecar.cert.display(), sidecar.key.display());
    let proxy = proxy_of(&file(&with_cert)).await;
    let answers = concurrent_gets(proxy.ingress.unwrap(), "app", 10).await;
    assert!(answers.iter().all(|a| *a == (StatusCode::OK, "HTTP/2.0".to_string())), "{answers:?}");
    assert_eq!(app.accepted.load(Ordering::SeqCst), 1, "one multiplexed connection");
    proxy.shutdown().await;
    // Without its client certificate the application refuses the ingress: 502.
    let proxy = proxy_of(&file("")).await;
    let answers = concurrent_gets(proxy.ingress.unwrap(), "app", 1).await;
    assert_eq!(answers[0].0, StatusCode::BAD_GATEWAY, "{answers:?}");
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_websocket_crosses_a_tls_hop_whose_listener_offers_h2() {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let pki = Pki::new("websocket");
    let server = pki.leaf("ingress", &["ingress.test"]);
    // The ingress's TLS listener offers h2 and http/1.1; the egress's upgrade must take HTTP/1.1.
    let (app, _) = tailguard_testkit::websocket_echo().await;
    let sidecar = proxy_of(&ingress(app, &server, "", "")).await;
    let egress = format!(
        "egress:\n  listen: 127.0.0.1:0\n  upstreams:\n    app: {{endpoints: [{}], tls: {{ca: {}, server_name: ingress.test}}}}\nshutdown_grace: 1s\n",
        sidecar.ingress.unwrap(),
        pki.ca().display()
    );
    let client = proxy_of(&egress).await;
    let url = format!("ws://{}/chat", client.egress.unwrap());
    let (mut socket, response) = tokio_tungstenite::connect_async(url).await.expect("the switch crosses the TLS hop");
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    socket.send(Message::text("over tls")).await.unwrap();
    let echoed = tokio::time::timeout(Duration::from_secs(5), socket.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(echoed, Message::text("over tls"));
    socket.close(None).await.unwrap();
    client.shutdown().await;
    sidecar.shutdown().await;
}
