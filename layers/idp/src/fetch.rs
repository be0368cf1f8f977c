//! The HTTP client of the credential fetches: a `jwks_url`, and an upstream's OAuth token
//! endpoint (`toolgate-mcp`). `https://` with the `tls` feature (rustls on the `ring`
//! provider); plain `http://` only to a loopback host
//! ([`toolgate_engine::jwt::fetch_url_problem`]).
//!
//! **Trust.** Without a CA file a server's certificate must chain to one of the system's
//! roots (the platform store as `rustls-native-certs` reads it: `/etc/ssl/certs` and the
//! like, or `SSL_CERT_FILE` / `SSL_CERT_DIR`). With a CA file (`ca_file`) it must chain to
//! one of that file's certificates instead — the system's roots are then not trusted for
//! that source, as with curl's `--cacert`. Either way the name in the URL must be one the
//! certificate is for, and the certificate must be within its validity. A fetch that fails
//! any of these is an error: the caller has no keys, or no token, and refuses (fail
//! closed).

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::http::{HeaderName, HeaderValue, Method, Request};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Whether this build fetches `https://` URLs (the `tls` feature).
pub const TLS: bool = cfg!(feature = "tls");

#[cfg(feature = "tls")]
type Connector = hyper_rustls::HttpsConnector<HttpConnector>;
#[cfg(not(feature = "tls"))]
type Connector = HttpConnector;

/// An HTTP(S) client for one credential source (its trust: the system's roots or its own
/// CA file). Cheap to clone; follows no redirect.
///
/// ```
/// # async fn run() -> Result<(), String> {
/// let client = toolgate_idp::FetchClient::new(None)?;
/// let err = client
///     .get("http://idp.internal/jwks", &[], 1024, std::time::Duration::from_secs(1))
///     .await
///     .unwrap_err();
/// assert!(err.contains("loopback"), "{err}");
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(run()).unwrap();
/// ```
#[derive(Clone, Debug)]
pub struct FetchClient {
    client: Client<Connector, Full<Bytes>>,
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
    pub fn new(ca_file: Option<&Path>) -> Result<Self, String> {
        let connector = connector(ca_file)?;
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Ok(Self { client })
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
    ) -> Result<Fetched, String> {
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
    ) -> Result<Fetched, String> {
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
    ) -> Result<Fetched, String> {
        if let Some(why) = toolgate_engine::jwt::fetch_url_problem(url) {
            return Err(why);
        }
        if !TLS && toolgate_engine::jwt::is_https(url) {
            return Err(no_tls(url));
        }
        let mut request = Request::builder().method(method).uri(url);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let request = request
            .body(Full::new(body))
            .map_err(|e| format!("`{url}` makes no HTTP request: {e}"))?;
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| {
                let why = chain(&e);
                if why.contains("invalid peer certificate") {
                    format!(
                        "{why} (the server's certificate did not pass: it must be signed by a CA of `ca_file`, or of the system's roots without one, be for the URL's host and within its dates)"
                    )
                } else {
                    why
                }
            })?;
            let status = response.status().as_u16();
            let too_large = || format!("the answer is larger than the {limit} bytes read");
            if response
                .headers()
                .get(hyper::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok())
                .is_some_and(|n| n > limit as u64)
            {
                return Err(too_large());
            }
            let body = Limited::new(response.into_body(), limit)
                .collect()
                .await
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        too_large()
                    } else {
                        format!("the answer could not be read: {}", chain(&*e))
                    }
                })?
                .to_bytes();
            Ok(Fetched { status, body })
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(done) => done,
            Err(_) => Err(format!("no answer within {} s", timeout.as_secs_f64())),
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

fn no_tls(url: &str) -> String {
    format!(
        "`{url}`: this build of toolgate has no TLS stack (built without the `tls` feature of `toolgate-idp`), so it fetches over loopback `http://` only"
    )
}

/// Whether `url` can be fetched by this build: [`toolgate_engine::jwt::fetch_url_problem`],
/// and an `https://` URL only with the `tls` feature. For start-up checks.
///
/// # Errors
///
/// Why not.
pub fn check_fetch_url(url: &str) -> Result<(), String> {
    if let Some(why) = toolgate_engine::jwt::fetch_url_problem(url) {
        return Err(why);
    }
    if !TLS && toolgate_engine::jwt::is_https(url) {
        return Err(no_tls(url));
    }
    Ok(())
}

#[cfg(not(feature = "tls"))]
fn connector(ca_file: Option<&Path>) -> Result<Connector, String> {
    if let Some(p) = ca_file {
        return Err(format!(
            "`{}`: this build of toolgate has no TLS stack (built without the `tls` feature of `toolgate-idp`), so a CA file is of no use",
            p.display()
        ));
    }
    Ok(HttpConnector::new())
}

#[cfg(feature = "tls")]
fn connector(ca_file: Option<&Path>) -> Result<Connector, String> {
    use std::sync::Arc;
    let roots = match ca_file {
        Some(path) => ca_roots(path)?,
        None => system_roots(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(Duration::from_secs(5)));
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http))
}

/// The CA certificates of the PEM file at `path`.
#[cfg(feature = "tls")]
fn ca_roots(path: &Path) -> Result<rustls::RootCertStore, String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let shown = path.display();
    let text =
        std::fs::read(path).map_err(|e| format!("cannot read the CA file `{shown}`: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    for (i, cert) in CertificateDer::pem_slice_iter(&text).enumerate() {
        let cert = cert.map_err(|e| {
            format!("the CA file `{shown}` is not PEM certificates (certificate {i}: {e})")
        })?;
        roots.add(cert).map_err(|e| {
            format!("certificate {i} of the CA file `{shown}` is not a usable CA certificate: {e}")
        })?;
    }
    if roots.is_empty() {
        return Err(format!(
            "the CA file `{shown}` holds no certificate (expected PEM `BEGIN CERTIFICATE` blocks)"
        ));
    }
    Ok(roots)
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
