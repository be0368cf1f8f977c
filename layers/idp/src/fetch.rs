//! The HTTP client of the credential fetches: a `jwks_url`, and an upstream's OAuth token
//! endpoint (`toolgate-mcp`). `https://` with the `tls` feature (rustls on the `ring`
//! provider); plain `http://` only to a loopback host
//! ([`toolgate_core::outbound::fetch_url_problem`]).
//!
//! **Trust.** Without a CA file a server's certificate must chain to one of the system's
//! roots (the platform store as `rustls-native-certs` reads it: `/etc/ssl/certs` and the
//! like, or `SSL_CERT_FILE` / `SSL_CERT_DIR`). With a CA file (`ca_file`) it must chain to
//! one of that file's certificates instead — the system's roots are then not trusted for
//! that source, as with curl's `--cacert`. Either way the name in the URL must be one the
//! certificate is for, and the certificate must be within its validity. A fetch that fails
//! any of these is an error: the caller has no keys, or no token, and refuses (fail
//! closed).

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use hyper::http::{HeaderName, HeaderValue, Method};

/// Whether this build fetches `https://` URLs (the `tls` feature).
pub const TLS: bool = cfg!(feature = "tls");

/// How an outbound connection proves who it talks to, and who it is: the trust (only the CA
/// certificates of `ca_file`, else the system's roots) and, for mutual TLS, a client
/// certificate chain and its private key (PEM files). The same settings for
/// every outbound use: JWKS, OAuth token endpoints, upstream MCP servers, webhooks.
///
/// ```
/// let tls = toolgate_idp::OutboundTls::default().ca_file("/etc/toolgate/ca.pem");
/// assert_eq!(tls.trust(), "the CA certificates of `/etc/toolgate/ca.pem` only");
/// assert_eq!(toolgate_idp::OutboundTls::default().trust(), "the system's root certificates");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutboundTls {
    /// Trust only the CA certificates of this PEM file.
    pub ca_file: Option<PathBuf>,
    /// Mutual TLS: the client certificate chain (PEM) and its private key (PEM).
    pub client_identity: Option<(PathBuf, PathBuf)>,
}

impl OutboundTls {
    /// Trust only the CA certificates of this PEM file.
    #[must_use]
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Present this client certificate chain and key (PEM files): mutual TLS.
    #[must_use]
    pub fn client_identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.client_identity = Some((cert.into(), key.into()));
        self
    }

    /// Which certificates a server's must chain to, in words (for `check` and errors).
    pub fn trust(&self) -> String {
        match &self.ca_file {
            Some(p) => format!("the CA certificates of `{}` only", p.display()),
            None => String::from("the system's root certificates"),
        }
    }
}

/// An HTTP(S) client for one outbound destination (its trust: the system's roots or its own
/// CA file; optionally a client certificate). Cheap to clone; follows no redirect; reads no
/// proxy from the environment. The one client of the project: the same `reqwest` client
/// rmcp's streamable HTTP transport takes ([`FetchClient::reqwest`]).
///
/// ```
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = toolgate_idp::FetchClient::new(None)?;
/// let err = client
///     .get("http://idp.internal/jwks", &[], 1024, std::time::Duration::from_secs(1))
///     .await
///     .unwrap_err();
/// assert!(err.to_string().contains("loopback"), "{err}");
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(run()).unwrap();
/// ```
#[derive(Clone, Debug)]
pub struct FetchClient {
    client: reqwest::Client,
}

/// Why a fetch ([`FetchClient::get`], [`FetchClient::post`]) or a URL
/// ([`check_fetch_url`]) failed. Its text names the URL or the reason, never a secret.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// A URL toolgate does not fetch from
    /// ([`toolgate_core::outbound::fetch_url_problem`]'s reason).
    #[error("{0}")]
    Url(String),
    /// An `https://` URL in a build without the `tls` feature.
    #[error(
        "`{url}`: this build of toolgate has no TLS stack (built without the `tls` feature of `toolgate-idp`), so it fetches over loopback `http://` only"
    )]
    NoTls {
        /// The URL.
        url: String,
    },
    /// The server's certificate did not pass (an unknown CA, another name, out of its
    /// dates).
    #[error(
        "{} (the server's certificate did not pass: it must be signed by a CA of `ca_file`, or of the system's roots without one, be for the URL's host and within its dates)",
        chain(.0)
    )]
    Certificate(reqwest::Error),
    /// The request failed (a connection refused, a TLS failure, a broken exchange), with
    /// each of its causes.
    #[error("{}", chain(.0))]
    Request(reqwest::Error),
    /// The answer's body could not be read.
    #[error("the answer could not be read: {}", chain(.0))]
    Read(reqwest::Error),
    /// The answer is larger than the limit asked for.
    #[error("the answer is larger than the {limit} bytes read")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// No answer within the time asked for.
    #[error("no answer within {} s", .0.as_secs_f64())]
    Timeout(Duration),
}

/// Why an outbound client ([`FetchClient::new`], [`FetchClient::with_tls`],
/// `client_config`) cannot be made from its TLS settings: a file that cannot be read or
/// used, naming it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// TLS settings in a build without the `tls` feature.
    #[error(
        "`{}`: this build of toolgate has no TLS stack (built without the `tls` feature of `toolgate-idp`), so TLS settings are of no use",
        .path.display()
    )]
    NoTlsStack {
        /// The CA file or client certificate configured.
        path: PathBuf,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {}", chain(.0))]
    Build(reqwest::Error),
    /// The protocol versions could not be set up.
    #[cfg(feature = "tls")]
    #[error("cannot set up TLS: {0}")]
    Setup(rustls::Error),
    /// A file cannot be read.
    #[error("cannot read the {what} `{}`: {error}", .path.display())]
    Read {
        /// What the file is (`CA file`, `client certificate`, `client key`).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The client certificate file is not PEM.
    #[cfg(feature = "tls")]
    #[error("the client certificate `{}` is not PEM: {error}", .path.display())]
    CertificateNotPem {
        /// The file.
        path: PathBuf,
        /// Why.
        error: rustls_pki_types::pem::Error,
    },
    /// The client certificate file holds no certificate.
    #[error("the client certificate `{}` holds no certificate", .path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The client key file is not a PEM private key.
    #[cfg(feature = "tls")]
    #[error("the client key `{}` is not a PEM private key: {error}", .path.display())]
    KeyNotPem {
        /// The file.
        path: PathBuf,
        /// Why.
        error: rustls_pki_types::pem::Error,
    },
    /// The client certificate and key do not make one identity.
    #[cfg(feature = "tls")]
    #[error(
        "the client certificate `{}` and key `{}` cannot be used together: {error}",
        .cert.display(),
        .key.display()
    )]
    ClientIdentity {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why.
        error: rustls::Error,
    },
    /// A block of the CA file is not a PEM certificate.
    #[cfg(feature = "tls")]
    #[error(
        "the CA file `{}` is not PEM certificates (certificate {index}: {error})",
        .path.display()
    )]
    CaNotPem {
        /// The file.
        path: PathBuf,
        /// Which certificate, from 0.
        index: usize,
        /// Why.
        error: rustls_pki_types::pem::Error,
    },
    /// A certificate of the CA file is not a usable CA certificate.
    #[cfg(feature = "tls")]
    #[error(
        "certificate {index} of the CA file `{}` is not a usable CA certificate: {error}",
        .path.display()
    )]
    CaUnusable {
        /// The file.
        path: PathBuf,
        /// Which certificate, from 0.
        index: usize,
        /// Why.
        error: rustls::Error,
    },
    /// The CA file holds no certificate.
    #[error(
        "the CA file `{}` holds no certificate (expected PEM `BEGIN CERTIFICATE` blocks)",
        .path.display()
    )]
    NoCaCertificate {
        /// The file.
        path: PathBuf,
    },
}

/// What a server answered: its status and its body (bounded).
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The HTTP status.
    pub status: u16,
    /// The body, at most the limit asked for.
    pub body: Bytes,
}

impl FetchClient {
    /// A client trusting the system's roots, or, with `ca_file`, only the CA certificates
    /// of that PEM file (read now).
    ///
    /// # Errors
    ///
    /// A CA file that cannot be read or holds no usable certificate; a CA file in a build
    /// without the `tls` feature.
    pub fn new(ca_file: Option<&Path>) -> Result<Self, TlsError> {
        Self::with_tls(&OutboundTls {
            ca_file: ca_file.map(Path::to_path_buf),
            client_identity: None,
        })
    }

    /// A client with these TLS settings (read now).
    ///
    /// # Errors
    ///
    /// A CA file, certificate or key that cannot be read or used; TLS settings in a build
    /// without the `tls` feature.
    pub fn with_tls(tls: &OutboundTls) -> Result<Self, TlsError> {
        let builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(Duration::from_secs(5))
            .pool_idle_timeout(Duration::from_secs(30));
        let builder = tls_backend(builder, tls)?;
        let client = builder.build().map_err(TlsError::Build)?;
        Ok(Self { client })
    }

    /// The `reqwest` client itself, for a transport that takes one (rmcp's streamable HTTP
    /// client): the same TLS settings, the same redirect and proxy policy.
    pub fn reqwest(&self) -> &reqwest::Client {
        &self.client
    }

    /// `GET url` with `headers`, the answer's body read up to `limit` bytes, all within
    /// `timeout`.
    ///
    /// # Errors
    ///
    /// A URL toolgate does not fetch from, a connection or TLS failure (with why: an
    /// unknown CA, a name the certificate is not for, an expired certificate), a body
    /// larger than `limit`, a timeout.
    pub async fn get(
        &self,
        url: &str,
        headers: &[(HeaderName, HeaderValue)],
        limit: usize,
        timeout: Duration,
    ) -> Result<Fetched, FetchError> {
        self.send(Method::GET, url, headers, Bytes::new(), limit, timeout)
            .await
    }

    /// `POST url` with `headers` and `body` (as [`FetchClient::get`]).
    ///
    /// # Errors
    ///
    /// As [`FetchClient::get`].
    pub async fn post(
        &self,
        url: &str,
        headers: &[(HeaderName, HeaderValue)],
        body: impl Into<Bytes>,
        limit: usize,
        timeout: Duration,
    ) -> Result<Fetched, FetchError> {
        self.send(Method::POST, url, headers, body.into(), limit, timeout)
            .await
    }

    async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(HeaderName, HeaderValue)],
        body: Bytes,
        limit: usize,
        timeout: Duration,
    ) -> Result<Fetched, FetchError> {
        check_fetch_url(url)?;
        let mut request = self.client.request(method, url);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let request = request.body(body);
        let exchange = async {
            let mut response = request.send().await.map_err(|e| {
                if chain(&e).contains("invalid peer certificate") {
                    FetchError::Certificate(e)
                } else {
                    FetchError::Request(e)
                }
            })?;
            let status = response.status().as_u16();
            let too_large = || FetchError::TooLarge { limit };
            if response.content_length().is_some_and(|n| n > limit as u64) {
                return Err(too_large());
            }
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(FetchError::Read)? {
                if body.len() + chunk.len() > limit {
                    return Err(too_large());
                }
                body.extend_from_slice(&chunk);
            }
            Ok(Fetched {
                status,
                body: Bytes::from(body),
            })
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(done) => done,
            Err(_) => Err(FetchError::Timeout(timeout)),
        }
    }
}

/// The error and each of its sources, once each (a TLS failure's reason is a few levels
/// down: `client error (Connect)`, then `invalid peer certificate: UnknownIssuer`).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(err) = next {
        let said = err.to_string();
        if !parts.iter().any(|p| p.contains(&said)) {
            parts.push(said);
        }
        next = err.source();
    }
    parts.join(": ")
}

/// Whether `url` can be fetched by this build: [`toolgate_core::outbound::fetch_url_problem`],
/// and an `https://` URL only with the `tls` feature. For start-up checks.
///
/// # Errors
///
/// Why not.
pub fn check_fetch_url(url: &str) -> Result<(), FetchError> {
    if let Some(why) = toolgate_core::outbound::fetch_url_problem(url) {
        return Err(FetchError::Url(why));
    }
    if !TLS && toolgate_core::outbound::is_https(url) {
        return Err(FetchError::NoTls {
            url: url.to_owned(),
        });
    }
    Ok(())
}

#[cfg(not(feature = "tls"))]
fn tls_backend(
    builder: reqwest::ClientBuilder,
    tls: &OutboundTls,
) -> Result<reqwest::ClientBuilder, TlsError> {
    if let Some(p) = tls
        .ca_file
        .as_ref()
        .or(tls.client_identity.as_ref().map(|(c, _)| c))
    {
        return Err(TlsError::NoTlsStack { path: p.clone() });
    }
    Ok(builder)
}

/// The rustls configuration of `tls` (the `ring` provider, TLS 1.2 and 1.3), handed to
/// reqwest preconfigured: the one place outbound TLS is set up.
#[cfg(feature = "tls")]
fn tls_backend(
    builder: reqwest::ClientBuilder,
    tls: &OutboundTls,
) -> Result<reqwest::ClientBuilder, TlsError> {
    Ok(builder.tls_backend_preconfigured(client_config(tls)?))
}

/// The rustls client configuration of `tls`.
///
/// # Errors
///
/// A CA file, a client certificate or a key that cannot be read or used.
#[cfg(feature = "tls")]
pub fn client_config(tls: &OutboundTls) -> Result<rustls::ClientConfig, TlsError> {
    use std::sync::Arc;
    let roots = match &tls.ca_file {
        Some(path) => ca_roots(path)?,
        None => system_roots(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Setup)?
        .with_root_certificates(roots);
    let mut config = match &tls.client_identity {
        None => builder.with_no_client_auth(),
        Some((cert, key_file)) => {
            let (chain, key) = client_identity(cert, key_file)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|error| TlsError::ClientIdentity {
                    cert: cert.clone(),
                    key: key_file.clone(),
                    error,
                })?
        }
    };
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// A client certificate chain and its key, from PEM files.
#[cfg(feature = "tls")]
fn client_identity(
    cert: &Path,
    key: &Path,
) -> Result<
    (
        Vec<rustls_pki_types::CertificateDer<'static>>,
        rustls_pki_types::PrivateKeyDer<'static>,
    ),
    TlsError,
> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let text = read(cert, "client certificate")?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<_, _>>()
        .map_err(|error| TlsError::CertificateNotPem {
            path: cert.to_path_buf(),
            error,
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert.to_path_buf(),
        });
    }
    let text = read(key, "client key")?;
    let key = PrivateKeyDer::from_pem_slice(&text).map_err(|error| TlsError::KeyNotPem {
        path: key.to_path_buf(),
        error,
    })?;
    Ok((chain, key))
}

/// The CA certificates of the PEM file at `path`.
#[cfg(feature = "tls")]
fn ca_roots(path: &Path) -> Result<rustls::RootCertStore, TlsError> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let text = read(path, "CA file")?;
    let mut roots = rustls::RootCertStore::empty();
    for (index, cert) in CertificateDer::pem_slice_iter(&text).enumerate() {
        let cert = cert.map_err(|error| TlsError::CaNotPem {
            path: path.to_path_buf(),
            index,
            error,
        })?;
        roots.add(cert).map_err(|error| TlsError::CaUnusable {
            path: path.to_path_buf(),
            index,
            error,
        })?;
    }
    if roots.is_empty() {
        return Err(TlsError::NoCaCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(roots)
}

/// The bytes of the file at `path`, `what` it is naming it in the error.
#[cfg(feature = "tls")]
fn read(path: &Path, what: &'static str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::Read {
        what,
        path: path.to_path_buf(),
        error,
    })
}

/// The system's roots; none found is logged (every `https://` fetch then fails: closed).
#[cfg(feature = "tls")]
fn system_roots() -> rustls::RootCertStore {
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::warn!(target: "toolgate_idp", "a system root certificate could not be read: {e}");
    }
    let mut roots = rustls::RootCertStore::empty();
    let (_, unusable) = roots.add_parsable_certificates(found.certs);
    if unusable > 0 {
        tracing::debug!(target: "toolgate_idp", "{unusable} system root certificates were not usable");
    }
    if roots.is_empty() {
        tracing::warn!(target: "toolgate_idp", "no system root certificate was found: every `https://` fetch without a `ca_file` fails (install the CA certificates, or set `SSL_CERT_FILE`)");
    }
    roots
}
