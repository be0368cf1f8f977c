//! How the inbox reaches its server: in plain text or over TLS (rustls on the `ring`
//! provider), and which certificates it trusts. The URL's `sslmode` and `sslrootcert` are
//! read here, as the crate's documentation says ("Plain text or TLS"), and taken out of the
//! URL; the rest is handed to `tokio-postgres`.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use deadpool_postgres::{Manager, ManagerConfig};
use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::CertificateDer;
use tokio_postgres::config::{Host, SslMode as PgSslMode};
use tokio_postgres::{Config, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;
use toolgate_inbox::{InboxError, InboxErrorKind as Kind};

use crate::error;
use crate::options::PostgresOptions;

/// The environment variable the `toolgate` command reads for
/// [`PostgresOptions::plaintext_hosts`]: host names (comma-separated) the inbox may reach in
/// plain text although they are not loopback, with `sslmode=disable` in the URL.
pub const PLAINTEXT_HOSTS_ENV: &str = "TOOLGATE_PG_PLAINTEXT_HOSTS";

/// How toolgate connects to the server, after reading the URL's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SslMode {
    /// Plain text (loopback, a Unix socket, or a host named in
    /// [`PostgresOptions::plaintext_hosts`]).
    Disable,
    /// TLS; the certificate's chain is checked only when `sslrootcert` is given.
    Require,
    /// TLS; the certificate must chain to a trusted CA.
    VerifyCa,
    /// TLS; the certificate must chain to a trusted CA and be for the URL's host.
    VerifyFull,
}

impl SslMode {
    /// libpq's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// Which certificates a TLS connection trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Trust {
    /// No TLS: nothing to trust.
    Plain,
    /// TLS whose certificate is not checked (`sslmode=require` without `sslrootcert`).
    Unverified,
    /// The system's root certificates (how many were found).
    SystemRoots(usize),
    /// Only the CA certificates of this PEM file (`sslrootcert`; how many it holds).
    RootFile(PathBuf, usize),
}

/// How an inbox reaches its server: the mode in force and what it trusts, as
/// [`transport`] reads them from the URL. Its `Display` says so in a sentence (for
/// `toolgate check` and the logs).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Transport {
    /// The mode in force.
    pub mode: SslMode,
    /// Whether the URL named the mode (`sslmode=…`) rather than toolgate choosing it.
    pub explicit: bool,
    /// What TLS trusts.
    pub trust: Trust,
    /// The hosts, as the URL names them.
    pub hosts: Vec<String>,
    /// Whether every host is loopback or a Unix socket.
    pub local: bool,
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = if self.explicit {
            format!("sslmode={}", self.mode.as_str())
        } else {
            format!("no sslmode: {}", self.mode.as_str())
        };
        let hosts = self.hosts.join(", ");
        match &self.trust {
            Trust::Plain if self.local => {
                write!(f, "plain text to the loopback host {hosts} ({how})")
            }
            Trust::Plain => write!(
                f,
                "plain text to {hosts} ({how}; the host is named in {PLAINTEXT_HOSTS_ENV})"
            ),
            Trust::Unverified => write!(
                f,
                "TLS to {hosts} ({how}): encrypted, but the server's certificate is not checked (give `sslrootcert` to check it)"
            ),
            Trust::SystemRoots(n) => write!(
                f,
                "TLS to {hosts} ({how}): the server's certificate must chain to one of the system's {n} root certificates{}",
                self.name_rule()
            ),
            Trust::RootFile(path, n) => write!(
                f,
                "TLS to {hosts} ({how}): the server's certificate must chain to a CA certificate of sslrootcert `{}` ({n} certificate{}; no other CA is trusted){}",
                path.display(),
                if *n == 1 { "" } else { "s" },
                self.name_rule()
            ),
        }
    }
}

impl Transport {
    fn name_rule(&self) -> &'static str {
        if self.mode == SslMode::VerifyFull {
            " and be for the host"
        } else {
            "; the host name is not checked"
        }
    }

    /// `e`, a failure to connect, with what the TLS settings asked of the server when the
    /// failure is about TLS.
    pub(crate) fn explain(&self, e: InboxError) -> InboxError {
        if self.mode == SslMode::Disable {
            return e;
        }
        let text = e.message();
        let how = if self.explicit {
            format!("sslmode={}", self.mode.as_str())
        } else {
            String::from(
                "no sslmode, so verify-full for a host that is not loopback or with sslrootcert",
            )
        };
        let roots = match &self.trust {
            Trust::RootFile(path, _) => format!("a CA of sslrootcert `{}`", path.display()),
            _ => String::from(
                "one of the system's root certificates (give `sslrootcert=PATH` for a private CA)",
            ),
        };
        let why = if text.contains("UnknownIssuer")
            || text.contains("UnknownCA")
            || text.contains("BadSignature")
        {
            format!("the server's certificate is not signed by {roots}")
        } else if text.contains("not valid for name") || text.contains("NotValidForName") {
            String::from(
                "the server's certificate is not for the host the URL names (verify-full checks the name; verify-ca does not)",
            )
        } else if text.contains("Expired") || text.contains("expired") {
            String::from("the server's certificate has expired")
        } else if text.contains("NotValidYet") || text.contains("not valid yet") {
            String::from("the server's certificate is not valid yet")
        } else if text.contains("invalid peer certificate") {
            format!(
                "the server's certificate did not pass: it must chain to {roots}{}",
                self.name_rule()
            )
        } else if text.contains("server does not support TLS") {
            String::from(
                "the server does not offer TLS (`ssl = on` in its configuration); toolgate does not fall back to plain text",
            )
        } else if text.contains("TLS") || text.contains("tls") {
            String::from("the TLS handshake failed")
        } else {
            return e;
        };
        InboxError::new(e.kind(), format!("{text} ({how}: {why})"))
    }
}

/// How the inbox connects: the `tokio-postgres` configuration (the URL without the TLS
/// settings) and the connector for it.
#[derive(Clone)]
pub(crate) struct Prepared {
    pub(crate) config: Config,
    pub(crate) connector: Connector,
    pub(crate) transport: Transport,
}

/// Plain text, or rustls with the trust the URL asked for.
#[derive(Clone)]
pub(crate) enum Connector {
    Plain,
    Tls(MakeRustlsConnect),
}

impl Connector {
    /// A pool manager connecting with `config` this way.
    pub(crate) fn manager(&self, config: Config) -> Manager {
        match self {
            Connector::Plain => Manager::from_config(config, NoTls, ManagerConfig::default()),
            Connector::Tls(tls) => {
                Manager::from_config(config, tls.clone(), ManagerConfig::default())
            }
        }
    }
}

/// How the inbox at `url` would connect with `options`: reads the URL's `sslmode` and
/// `sslrootcert` (and the root file itself) as [`crate::PostgresInbox::connect`] does,
/// without connecting.
///
/// ```
/// use toolgate_inbox_postgres::{PostgresOptions, SslMode, transport};
/// let o = PostgresOptions::default();
/// let t = transport("postgres://toolgate@127.0.0.1/toolgate", &o).unwrap();
/// assert_eq!(t.mode, SslMode::Disable);
/// let t = transport("postgres://toolgate@db.internal/toolgate", &o);
/// // verify-full: the system's roots (an error here when the machine has none).
/// assert!(t.map_or(true, |t| t.mode == SslMode::VerifyFull));
/// let e = transport("postgres://toolgate@db.internal/toolgate?sslmode=disable", &o).unwrap_err();
/// assert!(e.message().contains("sslmode=disable"), "{e}");
/// ```
///
/// # Errors
///
/// A URL that cannot be read; an `sslmode` toolgate does not know or refuses (`allow`,
/// `prefer`); plain text to a host that is not loopback and not named in
/// [`PostgresOptions::plaintext_hosts`]; TLS to a Unix socket; an `sslrootcert` that cannot
/// be read or holds no certificate; no system root certificate where they are needed.
pub fn transport(url: &str, options: &PostgresOptions) -> Result<Transport, InboxError> {
    prepare(url, options).map(|p| p.transport)
}

/// Reads `url` into a configuration and a connector.
pub(crate) fn prepare(url: &str, options: &PostgresOptions) -> Result<Prepared, InboxError> {
    let (rest, params) = split(url)?;
    let mut config: Config = rest.parse().map_err(|e| {
        InboxError::new(
            Kind::Unavailable,
            format!(
                "the inbox database URL cannot be read: {}",
                error::describe(&e)
            ),
        )
    })?;
    let targets = targets(&config);
    let hosts: Vec<String> = targets.iter().map(|t| t.shown.clone()).collect();
    let local = targets.iter().all(|t| t.local);
    let server = error::server_name(&config);

    let named = named_mode(params.mode.as_deref(), &server)?;
    let mode = match named {
        Some(m) => m,
        None if params.rootcert.is_some() || !local => SslMode::VerifyFull,
        None => SslMode::Disable,
    };
    let explicit = named.is_some();

    if mode == SslMode::Disable {
        check_plaintext(&params, &targets, options)?;
        config.ssl_mode(PgSslMode::Disable);
        return Ok(Prepared {
            config,
            connector: Connector::Plain,
            transport: Transport {
                mode,
                explicit,
                trust: Trust::Plain,
                hosts,
                local,
            },
        });
    }

    check_tls_targets(mode, explicit, &targets)?;
    let (roots, trust) = trusted_roots(params.rootcert.as_deref(), mode)?;
    let tls = tls_config(mode, roots)?;
    // Never plain text once TLS is asked for: the server must take the SSLRequest.
    config.ssl_mode(PgSslMode::Require);
    Ok(Prepared {
        config,
        connector: Connector::Tls(MakeRustlsConnect::new(tls)),
        transport: Transport {
            mode,
            explicit,
            trust,
            hosts,
            local,
        },
    })
}

/// A refusal to connect, saying `why`.
fn refuse<T>(why: String) -> Result<T, InboxError> {
    Err(InboxError::new(Kind::Unavailable, why))
}

/// The SSL mode the URL's `sslmode` names (`None` when it names none); `allow` and
/// `prefer`, which may fall back to plain text, and modes toolgate does not know are refused.
fn named_mode(mode: Option<&str>, server: &str) -> Result<Option<SslMode>, InboxError> {
    match mode {
        None => Ok(None),
        Some("disable") => Ok(Some(SslMode::Disable)),
        Some("require") => Ok(Some(SslMode::Require)),
        Some("verify-ca") => Ok(Some(SslMode::VerifyCa)),
        Some("verify-full") => Ok(Some(SslMode::VerifyFull)),
        Some(weak @ ("allow" | "prefer")) => {
            let does = if weak == "allow" {
                "would use plain text unless the server insists on TLS"
            } else {
                "would fall back to plain text when the server offers no TLS"
            };
            refuse(format!(
                "the inbox database URL's `sslmode={weak}` {does} (`{server}`), which toolgate never does: use `sslmode=verify-full` (with `sslrootcert=` the server's CA file) or `sslmode=require`, or `sslmode=disable` for plain text to a loopback host"
            ))
        }
        Some(other) => refuse(format!(
            "the inbox database URL's `sslmode={}` is not an SSL mode toolgate knows: use `verify-full`, `verify-ca`, `require` or `disable`",
            other.escape_debug()
        )),
    }
}

/// Plain text only without `sslrootcert`, and only to loopback hosts, Unix sockets and the
/// hosts named in [`PostgresOptions::plaintext_hosts`].
fn check_plaintext(
    params: &Params,
    targets: &[Target],
    options: &PostgresOptions,
) -> Result<(), InboxError> {
    if params.rootcert.is_some() {
        return refuse(String::from(
            "the inbox database URL gives `sslrootcert` with `sslmode=disable`, which uses no TLS: remove one of them",
        ));
    }
    for t in targets {
        if !t.local
            && !options
                .plaintext_hosts
                .iter()
                .any(|h| h.eq_ignore_ascii_case(&t.shown))
        {
            return refuse(format!(
                "the inbox database URL's `sslmode=disable` would send held calls, answers and the password in plain text to `{}`, which is not a loopback host: connect over TLS (`sslmode=verify-full`, with `sslrootcert=` the server's CA file), or, on a network you trust, name the host in {PLAINTEXT_HOSTS_ENV} (PostgresOptions::plaintext_host)",
                t.shown
            ));
        }
    }
    Ok(())
}

/// TLS only to servers reached over TCP by a host name its certificate can be checked
/// against: no Unix socket, no bare `hostaddr`.
fn check_tls_targets(mode: SslMode, explicit: bool, targets: &[Target]) -> Result<(), InboxError> {
    let how = if explicit {
        format!("the inbox database URL's `sslmode={}`", mode.as_str())
    } else {
        String::from("TLS (the inbox database URL has no `sslmode`, so toolgate uses verify-full)")
    };
    for t in targets {
        if t.socket {
            return refuse(format!(
                "{how} cannot be used with the Unix socket `{}`: PostgreSQL uses no TLS on a Unix socket; connect to it without `sslmode` (or with `sslmode=disable`)",
                t.shown
            ));
        }
        if !t.named {
            return refuse(format!(
                "{how} needs the server's name to check its certificate, but `{}` is given only as `hostaddr`: give `host` too",
                t.shown
            ));
        }
    }
    Ok(())
}

/// The root certificates a TLS connection trusts, by `sslrootcert` (a PEM file, or
/// `system` with verify-full only) and the mode: none for `require` without one.
fn trusted_roots(
    rootcert: Option<&str>,
    mode: SslMode,
) -> Result<(Option<RootCertStore>, Trust), InboxError> {
    let system = rootcert == Some("system");
    if system && mode != SslMode::VerifyFull {
        return refuse(format!(
            "`sslrootcert=system` trusts every public CA, so it needs `sslmode=verify-full` (the inbox database URL has `sslmode={}`)",
            mode.as_str()
        ));
    }
    Ok(match rootcert {
        Some(path) if !system => {
            let roots = root_file(Path::new(path))?;
            let n = roots.len();
            (Some(roots), Trust::RootFile(PathBuf::from(path), n))
        }
        _ if mode == SslMode::Require => (None, Trust::Unverified),
        _ => {
            let roots = system_roots()?;
            let n = roots.len();
            (Some(roots), Trust::SystemRoots(n))
        }
    })
}

/// The rustls client configuration: the server's certificate checked against `roots` (and
/// its name under verify-full), or not checked at all without roots.
fn tls_config(
    mode: SslMode,
    roots: Option<RootCertStore>,
) -> Result<rustls::ClientConfig, InboxError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier: Arc<dyn ServerCertVerifier> = match roots {
        None => Arc::new(Unverified(Arc::clone(&provider))),
        Some(roots) => {
            let webpki =
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                    .build()
                    .map_err(|e| {
                        InboxError::new(Kind::Unavailable, format!("cannot set up TLS: {e}"))
                    })?;
            if mode == SslMode::VerifyFull {
                webpki
            } else {
                Arc::new(AnyName(webpki))
            }
        }
    };
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| InboxError::new(Kind::Unavailable, format!("cannot set up TLS: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    // PostgreSQL 17's direct TLS (`sslnegotiation=direct`) requires this ALPN name; older
    // servers ignore it.
    tls.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(tls)
}

/// One server the URL names.
struct Target {
    /// As people see it (the host, or the `hostaddr` when there is no host name).
    shown: String,
    local: bool,
    socket: bool,
    /// Whether it has a host name to check a certificate against.
    named: bool,
}

fn targets(config: &Config) -> Vec<Target> {
    let hosts = config.get_hosts();
    let addrs = config.get_hostaddrs();
    let n = hosts.len().max(addrs.len());
    (0..n)
        .map(|i| {
            let host = hosts.get(i);
            let addr = addrs.get(i);
            let (shown, socket) = match host {
                Some(Host::Tcp(name)) => (name.clone(), false),
                #[cfg(unix)]
                Some(Host::Unix(path)) => (path.display().to_string(), true),
                None => (addr.map(ToString::to_string).unwrap_or_default(), false),
            };
            // The address connected to: `hostaddr` when given, else the host.
            let local = socket
                || match addr {
                    Some(ip) => ip.is_loopback(),
                    None => is_loopback_name(&shown),
                };
            Target {
                shown,
                local,
                socket,
                named: matches!(host, Some(Host::Tcp(_))),
            }
        })
        .collect()
}

/// `localhost`, or a loopback address (`127.0.0.0/8`, `::1`).
fn is_loopback_name(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    match bare.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Ok(ip) => ip.is_loopback(),
        Err(_) => false,
    }
}

/// The TLS settings taken out of a URL.
#[derive(Debug, Default, PartialEq, Eq)]
struct Params {
    mode: Option<String>,
    rootcert: Option<String>,
}

/// libpq's TLS settings toolgate does not support: a URL naming one is refused rather than
/// connected without it.
const UNSUPPORTED: &[&str] = &[
    "sslcert",
    "sslkey",
    "sslpassword",
    "sslcertmode",
    "sslcrl",
    "sslcrldir",
    "requiressl",
];

/// Takes `sslmode` and `sslrootcert` out of `url` (a `postgres://` URL or `key=value`
/// pairs), returning the rest for `tokio-postgres`.
fn split(url: &str) -> Result<(String, Params), InboxError> {
    let mut params = Params::default();
    let mut take = |key: &str, value: String| -> Result<bool, InboxError> {
        match key {
            "sslmode" => params.mode = Some(value),
            "sslrootcert" => params.rootcert = Some(value),
            k if UNSUPPORTED.contains(&k) => {
                return Err(InboxError::new(
                    Kind::Unavailable,
                    format!(
                        "the inbox database URL's `{k}` is not supported (toolgate's PostgreSQL inbox uses no client certificate or revocation list): remove it"
                    ),
                ));
            }
            _ => return Ok(false),
        }
        Ok(true)
    };
    let rest = if let Some(tail) = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))
    {
        // As tokio-postgres reads it: the credentials end at the first `@`, the query
        // starts at the first `?` after them.
        let from = tail.find('@').map_or(0, |at| at + 1);
        let Some(q) = tail.get(from..).and_then(|t| t.find('?')).map(|q| from + q) else {
            return Ok((url.to_owned(), params));
        };
        let head = &url[..url.len() - tail.len() + q];
        let mut kept = Vec::new();
        for pair in tail[q + 1..].split('&') {
            if let Some((key, value)) = pair.split_once('=') {
                let key = decode(key);
                if take(&key, decode(value))? {
                    continue;
                }
            }
            kept.push(pair);
        }
        if kept.is_empty() {
            head.to_owned()
        } else {
            format!("{head}?{}", kept.join("&"))
        }
    } else {
        let mut kept = Vec::new();
        for (key, value, raw) in key_values(url) {
            if !take(key, value)? {
                kept.push(raw);
            }
        }
        kept.join(" ")
    };
    Ok((rest, params))
}

fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// The `key = value` pairs of a libpq connection string, each with its text as written;
/// what cannot be read is left whole (as one pair with an empty key), for `tokio-postgres`
/// to refuse.
fn key_values(s: &str) -> Vec<(&str, String, &str)> {
    let mut out = Vec::new();
    let bytes = s.as_bytes();
    let mut i = 0;
    let skip_ws = |mut i: usize| {
        while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        i
    };
    loop {
        i = skip_ws(i);
        if i >= bytes.len() {
            return out;
        }
        let start = i;
        while bytes
            .get(i)
            .is_some_and(|b| !b.is_ascii_whitespace() && *b != b'=')
        {
            i += 1;
        }
        let key = &s[start..i];
        i = skip_ws(i);
        if bytes.get(i) != Some(&b'=') {
            out.push(("", String::new(), &s[start..]));
            return out;
        }
        i = skip_ws(i + 1);
        let mut value = String::new();
        let quoted = bytes.get(i) == Some(&b'\'');
        if quoted {
            i += 1;
        }
        let mut closed = !quoted;
        let mut chars = s[i..].char_indices();
        let mut end = s.len();
        while let Some((at, c)) = chars.next() {
            if quoted && c == '\'' {
                closed = true;
                end = i + at + 1;
                break;
            }
            if !quoted && c.is_whitespace() {
                end = i + at;
                break;
            }
            if c == '\\' {
                if let Some((_, next)) = chars.next() {
                    value.push(next);
                }
            } else {
                value.push(c);
            }
        }
        if !closed {
            out.push(("", String::new(), &s[start..]));
            return out;
        }
        out.push((key, value, &s[start..end]));
        i = end;
    }
}

/// The CA certificates of the PEM file `sslrootcert` names.
fn root_file(path: &Path) -> Result<RootCertStore, InboxError> {
    use rustls::pki_types::pem::PemObject;
    let shown = path.display();
    let fail = |why: String| InboxError::new(Kind::Unavailable, why);
    let text = std::fs::read(path).map_err(|e| {
        fail(format!(
            "the inbox database URL's `sslrootcert` `{shown}` cannot be read: {e}"
        ))
    })?;
    let mut roots = RootCertStore::empty();
    for (i, cert) in CertificateDer::pem_slice_iter(&text).enumerate() {
        let cert = cert.map_err(|e| {
            fail(format!(
                "the inbox database URL's `sslrootcert` `{shown}` is not PEM certificates (certificate {i}: {e})"
            ))
        })?;
        roots.add(cert).map_err(|e| {
            fail(format!(
                "certificate {i} of the inbox database URL's `sslrootcert` `{shown}` is not a usable CA certificate: {e}"
            ))
        })?;
    }
    if roots.is_empty() {
        return Err(fail(format!(
            "the inbox database URL's `sslrootcert` `{shown}` holds no certificate (expected PEM `BEGIN CERTIFICATE` blocks)"
        )));
    }
    Ok(roots)
}

/// The system's root certificates; none is an error (every TLS connection would fail).
fn system_roots() -> Result<RootCertStore, InboxError> {
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::warn!("a system root certificate could not be read: {e}");
    }
    let mut roots = RootCertStore::empty();
    let (_, unusable) = roots.add_parsable_certificates(found.certs);
    if unusable > 0 {
        tracing::debug!("{unusable} system root certificates were not usable");
    }
    if roots.is_empty() {
        return Err(InboxError::new(
            Kind::Unavailable,
            "the inbox database is reached over TLS checked against the system's root certificates, but none were found: give the server's CA file as `sslrootcert=PATH` in the URL (or install the CA certificates, or set `SSL_CERT_FILE`)",
        ));
    }
    Ok(roots)
}

mod verifiers;

use verifiers::{AnyName, Unverified};

#[cfg(test)]
mod tests;
