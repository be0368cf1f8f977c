//! TLS fixtures for tests (never for production): a test CA generated
//! by the test, server certificates it signs, and a loopback HTTPS server answering JSON.
//!
//! ```
//! # async fn run() {
//! use toolgate_idp_kit::tls::{TestCa, TlsServer};
//! let ca = TestCa::new();
//! let server = TlsServer::start(ca.server_cert(&["127.0.0.1", "localhost"]), serde_json::json!({"keys": []})).await;
//! assert!(server.url("/jwks.json").starts_with("https://127.0.0.1:"));
//! # }
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(run());
//! ```
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "a test kit: a fixture that cannot be made fails the test that asked for it"
)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A certificate authority made by the test.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TestCa")
    }
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}

/// A server certificate (with its chain) and its private key.
#[derive(Debug)]
pub struct ServerCert {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl TestCa {
    /// A new CA with a fresh key and a name of its own.
    pub fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // Each CA its own name: a verifier looks a chain's issuer up by name.
        static MADE: AtomicUsize = AtomicUsize::new(0);
        let n = MADE.fetch_add(1, Ordering::SeqCst);
        params.distinguished_name.push(
            DnType::CommonName,
            format!("toolgate test CA {} {n}", std::process::id()),
        );
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("ca key");
        Self {
            issuer: CertifiedIssuer::self_signed(params, key).expect("ca certificate"),
        }
    }

    /// The CA's certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// Writes the CA's certificate to `dir/ca.pem` and gives its path.
    pub fn write(&self, dir: &Path) -> PathBuf {
        let path = dir.join("ca.pem");
        std::fs::write(&path, self.pem()).expect("write ca.pem");
        path
    }

    /// A server certificate for `names` (DNS names or IP addresses), valid now.
    pub fn server_cert(&self, names: &[&str]) -> ServerCert {
        self.cert(names, false)
    }

    /// A server certificate for `names` that expired in 2020.
    pub fn expired_server_cert(&self, names: &[&str]) -> ServerCert {
        self.cert(names, true)
    }

    fn cert(&self, names: &[&str], expired: bool) -> ServerCert {
        let names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
        let mut params = CertificateParams::new(names).expect("server params");
        params
            .distinguished_name
            .push(DnType::CommonName, "toolgate test server");
        if expired {
            params.not_before = rcgen::date_time_ymd(2019, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 1, 1);
        }
        let key = KeyPair::generate().expect("server key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        ServerCert {
            chain: vec![cert.der().clone()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        }
    }
}

impl ServerCert {
    /// Writes the certificate (PEM) to `dir/<name>.pem` and its key (PEM, PKCS #8) to
    /// `dir/<name>.key`, and gives both paths: a client certificate for mutual TLS.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let pem = |label: &str, der: &[u8]| {
            use std::fmt::Write as _;
            let b64 = base64_encode(der);
            let mut out = format!("-----BEGIN {label}-----\n");
            for line in b64.as_bytes().chunks(64) {
                let _ = writeln!(out, "{}", String::from_utf8_lossy(line));
            }
            let _ = writeln!(out, "-----END {label}-----");
            out
        };
        let cert = dir.join(format!("{name}.pem"));
        let key = dir.join(format!("{name}.key"));
        let chain: String = self
            .chain
            .iter()
            .map(|c| pem("CERTIFICATE", c.as_ref()))
            .collect();
        std::fs::write(&cert, chain).expect("write the certificate");
        std::fs::write(&key, pem("PRIVATE KEY", self.key.secret_der())).expect("write the key");
        (cert, key)
    }
}

fn base64_encode(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A loopback TLS front for a plain TCP server at `upstream`: each connection's TLS is
/// terminated with `cert` (and, with `client_ca`, only a client presenting a certificate
/// that CA signed is let in: mutual TLS), and its bytes copied both ways. Gives the
/// front's address.
pub async fn tls_front(
    cert: ServerCert,
    client_ca: Option<&TestCa>,
    upstream: std::net::SocketAddr,
) -> std::net::SocketAddr {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .expect("versions");
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(ca.issuer.der().clone())
                .expect("the CA as a root");
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .expect("client verifier");
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(cert.chain, cert.key)
        .expect("server config");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut plain) = tokio::net::TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    addr
}

fn server_config(cert: ServerCert) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(cert.chain, cert.key)
            .expect("server config"),
    )
}

/// A loopback HTTPS server answering every request with the JSON it holds now.
#[derive(Debug, Clone)]
pub struct TlsServer {
    /// `https://127.0.0.1:PORT`.
    pub base: String,
    /// The port it listens on (on 127.0.0.1).
    pub port: u16,
    body: Arc<Mutex<Value>>,
    config: Arc<Mutex<Arc<rustls::ServerConfig>>>,
    served: Arc<AtomicUsize>,
    last_request: Arc<Mutex<String>>,
}

impl TlsServer {
    /// Serves `body` over TLS with `cert` on a loopback port (on the current Tokio runtime).
    pub async fn start(cert: ServerCert, body: Value) -> Self {
        let config = Arc::new(Mutex::new(server_config(cert)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let s = Self {
            base: format!("https://127.0.0.1:{port}"),
            port,
            body: Arc::new(Mutex::new(body)),
            config: Arc::clone(&config),
            served: Arc::new(AtomicUsize::new(0)),
            last_request: Arc::new(Mutex::new(String::new())),
        };
        let (held, served, last) = (
            Arc::clone(&s.body),
            Arc::clone(&s.served),
            Arc::clone(&s.last_request),
        );
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&config.lock().unwrap()));
                let (held, served, last) =
                    (Arc::clone(&held), Arc::clone(&served), Arc::clone(&last));
                tokio::spawn(async move {
                    // A client refusing the certificate ends the handshake here.
                    let Ok(mut stream) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut buf = vec![0_u8; 8192];
                    let mut got = Vec::new();
                    let head_end = loop {
                        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&got[..head_end]).to_string();
                    let length = head
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.trim()
                                .eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse::<usize>().ok())?
                        })
                        .unwrap_or(0);
                    while got.len() < head_end + length {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    *last.lock().unwrap() = String::from_utf8_lossy(&got).to_string();
                    served.fetch_add(1, Ordering::SeqCst);
                    let body = held.lock().unwrap().to_string();
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(resp.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        s
    }

    /// `https://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `https://{host}:PORT{path}` (`localhost`, or a name the certificate is not for).
    pub fn url_as(&self, host: &str, path: &str) -> String {
        format!("https://{host}:{}{path}", self.port)
    }

    /// Shows `cert` from the next connection on (a certificate another CA signed, for
    /// another name, or expired).
    pub fn serve_cert(&self, cert: ServerCert) {
        *self.config.lock().unwrap() = server_config(cert);
    }

    /// Answers `body` from the next request on.
    pub fn publish(&self, body: Value) {
        *self.body.lock().unwrap() = body;
    }

    /// How many requests were served (a client that refused the certificate sent none).
    pub fn served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }

    /// The last request served, head and body, as text.
    pub fn last_request(&self) -> String {
        self.last_request.lock().unwrap().clone()
    }
}
