//! # toolgate-idp
//!
//! Identities from the organisation's identity provider (serve.md, "Agents and approvers
//! from the identity provider"): bearer JWTs verified against the provider's signing keys (a
//! JWKS, RFC 7517), for `toolgate mcp serve --http` (an OAuth 2.1 resource server, the MCP
//! authorization spec) and the approval page (`toolgate serve`). One verifier, so both take a
//! token alike, and one reading of its settings ([`JwtSettings::read`], for `mcp.jwt` and
//! `approvers.jwt`, every error at its path).
//!
//! A token is taken only when all of these hold, else it is refused with why
//! ([`Rejection`]):
//!
//! - it is a compact JWS of at most [`MAX_TOKEN_BYTES`] whose header names an algorithm of
//!   the configured list ([`ALGORITHMS`] at most: never `none`, never
//!   an HMAC algorithm, so a token "signed" with the public key as an HMAC secret is refused
//!   before any key is looked at);
//! - its header `typ`, when it has one, does not name another kind of JWT than an access
//!   token (absent, `JWT` or `at+jwt`; RFC 8725 §3.11), and is `at+jwt` when the section's
//!   `token_type` says so (RFC 9068 §2.1, [`TokenType`]);
//! - its `kid` names a key of the JWKS (without a `kid`, exactly one key fits its
//!   algorithm) whose type fits the algorithm (`RSA` for `RS*`/`PS*`, `EC` on the matching
//!   curve for `ES256`/`ES384`, `OKP` Ed25519 for `EdDSA`), whose own `alg`, when it has one,
//!   is the token's, and whose `use`, when given, is `sig`;
//! - the signature verifies; `iss` is the issuer; `aud` names the audience; `exp` is in the
//!   future and `nbf` (when present) in the past, each within the leeway; `sub` is a string;
//! - its scopes (`scope`, space-separated, or `scp`) hold every required scope — else the
//!   refusal is [`Rejection::InsufficientScope`] (HTTP 403), not 401.
//!
//! **Keys.** A `jwks_file` is read at start and by [`Verifier::reload`] (SIGHUP). A
//! `jwks_url` is fetched at start, again once its cache lifetime has passed, and when a token
//! names a `kid` the keys in hand do not hold — at most once per [`MIN_REFETCH`], so a flood
//! of made-up `kid`s costs the provider one request per interval. A key removed from the
//! provider's set stops verifying once the new set is in hand. Keys that were never had, or
//! that a reload could not read, refuse every token: fail closed. A fetch that fails after
//! the cache lifetime, or for a token naming an unknown `kid`, keeps the last good set in
//! force until a fetch succeeds: a provider that is down, or a made-up `kid` sent while it
//! is, never refuses every agent's token.
//!
//! **Transport.** A `jwks_url` is `https://` — fetched over TLS with the `tls` feature
//! (rustls on the `ring` provider; the system's roots, or with `ca_file` only the CA
//! certificates of that PEM file) — or plain `http://` to a loopback host only
//! ([`toolgate_core::outbound::fetch_url_problem`]). A certificate of an unknown CA, for another
//! name, or expired fails the fetch with why, so there are no keys and every token is
//! refused. [`FetchClient`] is that client, also used by `toolgate-mcp` for the OAuth token
//! endpoints of its upstreams. Without `tls` an `https://` URL is a start error naming the
//! field.
#![forbid(unsafe_code)]

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value, json};
use toolgate_engine::ConfigErrors;

pub use toolgate_core::Principal;

mod fetch;
mod jwks;
mod metadata;
mod settings;
mod typ;

#[cfg(feature = "tls")]
pub use fetch::client_config;
pub use fetch::{FetchClient, FetchError, Fetched, OutboundTls, TLS, TlsError, check_fetch_url};
use jwks::Lookup;
pub use jwks::{JwksError, Key, Keys, MAX_JWKS_BYTES, parse_jwks};
pub use metadata::{metadata_paths, metadata_url, protected_resource_metadata};
pub use settings::{
    ALGORITHMS, DEFAULT_ALGORITHMS, DEFAULT_JWKS_CACHE, DEFAULT_LEEWAY, JwksSource, JwtSettings,
    MAX_LEEWAY_SECS,
};
pub use typ::{TOKEN_TYPE_FIELD, TokenType};

/// The longest bearer token looked at; a longer one is refused unread.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// The shortest time between two fetches of a `jwks_url` made for a token naming an
/// unknown `kid` (or after a failed fetch).
pub const MIN_REFETCH: Duration = Duration::from_secs(10);

/// How long one fetch of a `jwks_url` may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// A verified token: who it names and everything it claims.
#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    /// `sub` and `iss`.
    pub principal: Principal,
    /// Every claim, as sent.
    pub claims: Map<String, Value>,
    /// Its scopes (`scope` split at spaces, or `scp`).
    pub scopes: Vec<String>,
}

impl Verified {
    /// The claim `name` when it is a non-blank string (`azp`, `client_id`, …).
    pub fn claim_str(&self, name: &str) -> Option<&str> {
        self.claims
            .get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
    }

    /// The claim `name` as a list of strings: a list's string items, or one string.
    /// (`groups`, `roles`; a claim of another type names none.)
    pub fn claim_strings(&self, name: &str) -> Vec<&str> {
        match self.claims.get(name) {
            Some(Value::String(s)) => vec![s.as_str()],
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        }
    }
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// No usable token, or one that does not verify: HTTP 401 (`invalid_token`).
    Invalid(String),
    /// A valid token without every required scope: HTTP 403 (`insufficient_scope`).
    InsufficientScope {
        /// The required scopes, space-separated, as the `scope` of the challenge.
        required: String,
    },
}

impl Rejection {
    /// The HTTP status to answer with: 401 or 403.
    pub fn status(&self) -> u16 {
        match self {
            Rejection::Invalid(_) => 401,
            Rejection::InsufficientScope { .. } => 403,
        }
    }

    /// The `WWW-Authenticate` challenge (RFC 6750, RFC 9728 §5.1): `Bearer` with the
    /// `resource_metadata` address when given, the error and, for missing scopes, the scope.
    ///
    /// ```
    /// use toolgate_idp::Rejection;
    /// let r = Rejection::InsufficientScope { required: "mcp:tools".into() };
    /// assert_eq!(
    ///     r.challenge(Some("http://127.0.0.1:8931/.well-known/oauth-protected-resource")),
    ///     r#"Bearer resource_metadata="http://127.0.0.1:8931/.well-known/oauth-protected-resource", error="insufficient_scope", scope="mcp:tools""#
    /// );
    /// ```
    pub fn challenge(&self, metadata: Option<&str>) -> String {
        let mut parts = Vec::new();
        if let Some(m) = metadata {
            parts.push(format!("resource_metadata=\"{}\"", quoted(m)));
        }
        match self {
            Rejection::Invalid(_) => parts.push(String::from("error=\"invalid_token\"")),
            Rejection::InsufficientScope { required } => {
                parts.push(String::from("error=\"insufficient_scope\""));
                parts.push(format!("scope=\"{}\"", quoted(required)));
            }
        }
        format!("Bearer {}", parts.join(", "))
    }
}

fn quoted(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control() && *c != '"' && *c != '\\')
        .collect()
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Invalid(why) => f.write_str(why),
            Rejection::InsufficientScope { required } => write!(
                f,
                "the token does not hold every required scope (`{required}`)"
            ),
        }
    }
}

impl std::error::Error for Rejection {}

/// Why a token failed [`verify_with`]: refused, or naming a `kid` the keys lack (the
/// verifier may fetch the keys again for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Refused.
    Rejected(Rejection),
    /// The token's `kid` is not among the keys.
    UnknownKid(String),
}

/// The token of an `Authorization` header's value in the `Bearer` scheme, whose name is
/// compared case-insensitively (RFC 6750, RFC 9110 §11.1); `None` for another scheme or
/// an empty token.
///
/// ```
/// assert_eq!(toolgate_idp::bearer_token("Bearer abc"), Some("abc"));
/// assert_eq!(toolgate_idp::bearer_token("bearer abc "), Some("abc"));
/// assert_eq!(toolgate_idp::bearer_token("Basic abc"), None);
/// assert_eq!(toolgate_idp::bearer_token("Bearer "), None);
/// ```
pub fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The `kid` of a compact JWS, unverified (to choose a key by), when its header reads.
pub fn unverified_kid(token: &str) -> Option<String> {
    jsonwebtoken::decode_header(token).ok()?.kid
}

/// Verifies `token` with `keys` under `settings` at the system clock (the checks of the
/// crate's docs), with no `token_type` ([`TokenType::Any`]). No I/O: the [`Verifier`]
/// brings the keys.
///
/// # Errors
///
/// [`Failure::UnknownKid`] when the token names a key `keys` lacks, else
/// [`Failure::Rejected`] with why.
pub fn verify_with(keys: &Keys, settings: &JwtSettings, token: &str) -> Result<Verified, Failure> {
    verify_typed(keys, settings, TokenType::Any, token)
}

/// [`verify_with`], the header `typ` checked against `token_type`.
///
/// # Errors
///
/// [`Failure::UnknownKid`] when the token names a key `keys` lacks, else
/// [`Failure::Rejected`] with why.
pub fn verify_typed(
    keys: &Keys,
    settings: &JwtSettings,
    token_type: TokenType,
    token: &str,
) -> Result<Verified, Failure> {
    let bad = |why: String| Failure::Rejected(Rejection::Invalid(why));
    if token.is_empty() {
        return Err(bad(String::from("the bearer token is empty")));
    }
    if token.len() > MAX_TOKEN_BYTES {
        return Err(bad(format!(
            "the bearer token is longer than {MAX_TOKEN_BYTES} bytes"
        )));
    }
    let header = jsonwebtoken::decode_header(token).map_err(|e| {
        bad(format!(
            "the bearer token is not a signed JWT with an algorithm toolgate knows ({e}); `none` and unsigned tokens are never taken"
        ))
    })?;
    let alg = header.alg;
    let allowed = settings
        .algorithms
        .iter()
        .filter_map(|a| Algorithm::from_str(a).ok())
        .any(|a| a == alg);
    if !allowed || matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
        return Err(bad(format!(
            "the token's algorithm `{alg:?}` is not allowed (allowed: {})",
            settings.algorithms.join(", ")
        )));
    }
    // The header `typ`, before any key is looked for (a token of another kind never has the
    // keys fetched again for its `kid`).
    if let Some(why) = token_type.problem(header.typ.as_deref()) {
        return Err(bad(why));
    }
    let key = match keys.find(header.kid.as_deref(), alg) {
        Lookup::Found(k) => k,
        Lookup::UnknownKid => {
            return Err(Failure::UnknownKid(header.kid.unwrap_or_default()));
        }
        Lookup::Refused(why) => return Err(bad(why)),
    };
    let mut validation = Validation::new(alg);
    validation.set_issuer(&[settings.issuer.as_str()]);
    validation.set_audience(&[settings.audience.as_str()]);
    validation.leeway = settings.leeway.as_secs();
    validation.validate_exp = true;
    validation.validate_nbf = true;
    validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    let data =
        jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind as K;
            bad(match e.kind() {
                K::ExpiredSignature => String::from("the token has expired (`exp`)"),
                K::ImmatureSignature => String::from("the token is not valid yet (`nbf`)"),
                K::InvalidIssuer => {
                    format!("the token's issuer (`iss`) is not `{}`", settings.issuer)
                }
                K::InvalidAudience => format!(
                    "the token is not for this audience (`aud` must name `{}`)",
                    settings.audience
                ),
                K::InvalidSignature => String::from("the token's signature does not verify"),
                K::MissingRequiredClaim(c) => format!("the token has no `{c}` claim"),
                K::InvalidAlgorithm => {
                    format!("the token's algorithm `{alg:?}` does not fit its key")
                }
                other => format!("the token does not verify ({other:?})"),
            })
        })?;
    let claims = data.claims;
    let subject = match claims.get("sub") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        _ => {
            return Err(bad(String::from(
                "the token's `sub` is not a non-blank string",
            )));
        }
    };
    // `iss` is one string, the issuer (RFC 7519 §4.1.1: a StringOrURI); a list that merely
    // contains it is refused.
    if claims.get("iss").and_then(Value::as_str) != Some(settings.issuer.as_str()) {
        return Err(bad(format!(
            "the token's issuer (`iss`) is not the string `{}`",
            settings.issuer
        )));
    }
    let issuer = settings.issuer.clone();
    let scopes: Vec<String> = match (claims.get("scope"), claims.get("scp")) {
        (Some(Value::String(s)), _) => s.split_whitespace().map(str::to_owned).collect(),
        (_, Some(Value::Array(items))) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        (_, Some(Value::String(s))) => s.split_whitespace().map(str::to_owned).collect(),
        _ => Vec::new(),
    };
    if !settings
        .required_scopes
        .iter()
        .all(|r| scopes.iter().any(|s| s == r))
    {
        return Err(Failure::Rejected(Rejection::InsufficientScope {
            required: settings.required_scopes.join(" "),
        }));
    }
    Ok(Verified {
        principal: Principal { subject, issuer },
        claims,
        scopes,
    })
}

/// The keys in hand and when they were had.
struct Held {
    keys: Option<Arc<Keys>>,
    /// When the keys were last had (read or fetched).
    had: Instant,
    /// When the last fetch made for an unknown `kid`, or the last failed one, was tried
    /// (for [`MIN_REFETCH`]).
    tried: Option<Instant>,
    /// Why the last read or fetch failed, when it did.
    failed: Option<String>,
}

struct Inner {
    settings: JwtSettings,
    /// What the header `typ` must say.
    token_type: TokenType,
    /// The configuration path of the settings (`mcp.jwt`), for messages.
    path: String,
    held: RwLock<Held>,
    /// One fetch at a time.
    fetching: tokio::sync::Mutex<()>,
    client: FetchClient,
    /// Bumped each time the keys are read or fetched (or fail to be): see
    /// [`Verifier::keys_generation`].
    generation: std::sync::atomic::AtomicU64,
}

/// Verifies bearer JWTs against an identity provider's keys. Cheap to clone.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use serde_json::json;
/// use toolgate_engine::ConfigErrors;
/// use toolgate_idp::JwtSettings;
/// let mut errs = ConfigErrors::default();
/// let settings = JwtSettings::read(&json!({"issuer": "https://idp.example.com/",
///     "audience": "http://127.0.0.1:8931/mcp", "jwks_file": "jwks.json"}),
///     "mcp.jwt", &[], &mut errs).ok_or("settings")?;
/// let verifier = toolgate_idp::Verifier::start(settings, "mcp.jwt").await?;
/// let verified = verifier.verify("eyJ…").await?;
/// println!("{}", verified.principal);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Verifier(Arc<Inner>);

/// Why the identity provider's keys could not be had ([`Verifier::reload`]): the
/// `jwks_file` or `jwks_url`, named, and what was wrong with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeysError {
    /// The `jwks_file` cannot be read.
    #[error("cannot read the JWKS `{}`: {error}", .path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The `jwks_file` is not a usable JWKS.
    #[error("`{}`: {error}", .path.display())]
    File {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        error: JwksError,
    },
    /// The `jwks_url` cannot be fetched.
    #[error("cannot fetch the JWKS `{url}`: {error}")]
    Fetch {
        /// The URL.
        url: String,
        /// Why.
        error: FetchError,
    },
    /// The `jwks_url` answered a status other than 2xx.
    #[error("fetching the JWKS `{url}` answered HTTP {status}")]
    Status {
        /// The URL.
        url: String,
        /// The HTTP status.
        status: u16,
    },
    /// The `jwks_url`'s answer is not UTF-8 text.
    #[error("the JWKS `{url}` is not UTF-8 text")]
    NotUtf8 {
        /// The URL.
        url: String,
    },
    /// The `jwks_url`'s answer is not a usable JWKS.
    #[error("`{url}`: {error}")]
    Url {
        /// The URL.
        url: String,
        /// Why.
        error: JwksError,
    },
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("issuer", &self.0.settings.issuer)
            .field("audience", &self.0.settings.audience)
            .field("keys", &self.0.settings.keys)
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// A verifier with its keys in hand: the `jwks_file` read, or the `jwks_url` fetched.
    /// `path` is where the settings are in the configuration (`mcp.jwt`).
    ///
    /// # Errors
    ///
    /// Keys that cannot be had, named by their field (`mcp.jwt.jwks_file`): fail closed at
    /// start rather than refuse every token later.
    pub async fn start(settings: JwtSettings, path: &str) -> Result<Self, ConfigErrors> {
        Self::start_typed(settings, TokenType::Any, path).await
    }

    /// [`Verifier::start`], the header `typ` of every token checked against `token_type`
    /// (the section's `token_type`, read by [`TokenType::read`]).
    ///
    /// ```no_run
    /// # async fn run(settings: toolgate_idp::JwtSettings) -> Result<(), Box<dyn std::error::Error>> {
    /// use toolgate_idp::{TokenType, Verifier};
    /// let verifier = Verifier::start_typed(settings, TokenType::AccessToken, "mcp.jwt").await?;
    /// assert_eq!(verifier.token_type(), TokenType::AccessToken);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Verifier::start`].
    pub async fn start_typed(
        settings: JwtSettings,
        token_type: TokenType,
        path: &str,
    ) -> Result<Self, ConfigErrors> {
        if let JwksSource::Url(url) = &settings.keys {
            check_fetch_url(url)
                .map_err(|e| ConfigErrors::one(format!("{path}.jwks_url"), e.to_string()))?;
        }
        let client = FetchClient::new(settings.ca_file.as_deref())
            .map_err(|e| ConfigErrors::one(format!("{path}.ca_file"), e.to_string()))?;
        let v = Self(Arc::new(Inner {
            settings,
            token_type,
            path: path.to_owned(),
            held: RwLock::new(Held {
                keys: None,
                had: Instant::now(),
                tried: None,
                failed: None,
            }),
            fetching: tokio::sync::Mutex::new(()),
            client,
            generation: std::sync::atomic::AtomicU64::new(0),
        }));
        v.reload()
            .await
            .map_err(|e| ConfigErrors::one(v.field(), e.to_string()))?;
        Ok(v)
    }

    /// The settings verified against.
    pub fn settings(&self) -> &JwtSettings {
        &self.0.settings
    }

    /// What the header `typ` of a token must say.
    pub fn token_type(&self) -> TokenType {
        self.0.token_type
    }

    fn field(&self) -> String {
        match &self.0.settings.keys {
            JwksSource::File(_) => format!("{}.jwks_file", self.0.path),
            _ => format!("{}.jwks_url", self.0.path),
        }
    }

    /// Reads the `jwks_file` again, or fetches the `jwks_url` now (SIGHUP: a key removed
    /// from the set stops verifying at once).
    ///
    /// # Errors
    ///
    /// Keys that cannot be had: the keys in force are dropped, and every token is refused
    /// until keys are had again (fail closed: a file that no longer reads may be one
    /// emptied to revoke a key).
    pub async fn reload(&self) -> Result<(), KeysError> {
        let _one = self.0.fetching.lock().await;
        self.load(false).await
    }

    /// How many times the keys were read or fetched (or failed to be) since start: a
    /// holder of something verified earlier (an open MCP session) compares it to learn that
    /// the keys may have changed — a key removed by a JWKS refresh, a reload — and verifies
    /// again (revocation without restart).
    ///
    /// ```no_run
    /// # async fn run(v: toolgate_idp::Verifier) {
    /// let seen = v.keys_generation();
    /// v.reload().await.ok();
    /// assert!(v.keys_generation() > seen);
    /// # }
    /// ```
    pub fn keys_generation(&self) -> u64 {
        self.0.generation.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Reads or fetches the keys; `for_unknown_kid` marks the fetch for [`MIN_REFETCH`]
    /// (as every failed one is).
    async fn load(&self, for_unknown_kid: bool) -> Result<(), KeysError> {
        self.load_keeping(for_unknown_kid, false).await
    }

    /// As [`Verifier::load`]; with `keep`, a failed fetch keeps the last good keys (a provider
    /// that fails, or a token naming an unknown `kid` while it does, never blinds every
    /// agent).
    async fn load_keeping(&self, for_unknown_kid: bool, keep: bool) -> Result<(), KeysError> {
        let done = self.load_keys(for_unknown_kid, keep).await;
        // After the keys in force were replaced: whoever sees the new generation verifies
        // with the new keys.
        self.0
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        done
    }

    async fn load_keys(&self, for_unknown_kid: bool, keep: bool) -> Result<(), KeysError> {
        let got = self.read_keys().await;
        let mut held = self
            .0
            .held
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if for_unknown_kid || got.is_err() {
            held.tried = Some(Instant::now());
        }
        match got {
            Ok(keys) => {
                for s in keys.skipped() {
                    tracing::warn!(target: "toolgate_idp", "a key of the JWKS was left out: {s}");
                }
                held.keys = Some(Arc::new(keys));
                held.had = Instant::now();
                held.failed = None;
                Ok(())
            }
            Err(e) => {
                if !keep {
                    held.keys = None;
                }
                held.failed = Some(e.to_string());
                Err(e)
            }
        }
    }

    async fn read_keys(&self) -> Result<Keys, KeysError> {
        match &self.0.settings.keys {
            JwksSource::File(path) => {
                let text =
                    tokio::fs::read_to_string(path)
                        .await
                        .map_err(|error| KeysError::Read {
                            path: path.clone(),
                            error,
                        })?;
                parse_jwks(&text).map_err(|error| KeysError::File {
                    path: path.clone(),
                    error,
                })
            }
            JwksSource::Url(url) => {
                let accept = (
                    hyper::header::ACCEPT,
                    hyper::http::HeaderValue::from_static("application/json"),
                );
                let res = self
                    .0
                    .client
                    .get(url, &[accept], MAX_JWKS_BYTES, FETCH_TIMEOUT)
                    .await
                    .map_err(|error| KeysError::Fetch {
                        url: url.clone(),
                        error,
                    })?;
                if !(200..300).contains(&res.status) {
                    return Err(KeysError::Status {
                        url: url.clone(),
                        status: res.status,
                    });
                }
                let text = std::str::from_utf8(&res.body)
                    .map_err(|_| KeysError::NotUtf8 { url: url.clone() })?;
                parse_jwks(text).map_err(|error| KeysError::Url {
                    url: url.clone(),
                    error,
                })
            }
        }
    }

    fn snapshot(&self) -> (Option<Arc<Keys>>, Instant, Option<Instant>, Option<String>) {
        let held = self
            .0
            .held
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (held.keys.clone(), held.had, held.tried, held.failed.clone())
    }

    /// Whether a fetch may be made now: only for a URL, and not within [`MIN_REFETCH`] of
    /// the last one tried.
    fn may_fetch(&self, tried: Option<Instant>) -> bool {
        matches!(self.0.settings.keys, JwksSource::Url(_))
            && tried.is_none_or(|t| t.elapsed() >= MIN_REFETCH)
    }

    /// The keys to verify with now: fetched again when the URL's cache lifetime has passed
    /// (at most once per [`MIN_REFETCH`] while fetches fail); and whether this call fetched
    /// them (then a token naming an unknown `kid` does not fetch them again).
    async fn current(&self) -> Result<(Arc<Keys>, bool), Rejection> {
        let mut fresh = false;
        let (keys, had, tried, _) = self.snapshot();
        let is_url = matches!(self.0.settings.keys, JwksSource::Url(_));
        let expired = is_url && (keys.is_none() || had.elapsed() >= self.0.settings.cache);
        if expired && self.may_fetch(tried) {
            let _one = self.0.fetching.lock().await;
            // Another request may have fetched while this one waited.
            let (_, had2, tried2, _) = self.snapshot();
            if had2 == had && self.may_fetch(tried2) {
                match self.load_keeping(false, true).await {
                    Ok(()) => fresh = true,
                    Err(e) => {
                        tracing::warn!(target: "toolgate_idp", "the identity provider's keys could not be had: {e}");
                    }
                }
            }
        }
        // The last good keys stay in force until a fetch succeeds: a provider that is down
        // never refuses every token; a key it removed goes with the next fetch that succeeds.
        let (keys, _, _, failed) = self.snapshot();
        match keys {
            Some(k) => Ok((k, fresh)),
            None => Err(Rejection::Invalid(format!(
                "the identity provider's keys are not available ({}): no token can be verified",
                failed.unwrap_or_else(|| String::from("their cache lifetime passed"))
            ))),
        }
    }

    /// Verifies `token` (the crate's checks). A token naming a `kid` the keys lack has the
    /// `jwks_url` fetched again first — at most once per [`MIN_REFETCH`] — so a rotated key
    /// is taken as soon as the provider publishes it.
    ///
    /// # Errors
    ///
    /// Why the token is refused: [`Rejection::Invalid`] (401) or
    /// [`Rejection::InsufficientScope`] (403).
    pub async fn verify(&self, token: &str) -> Result<Verified, Rejection> {
        let (keys, fresh) = self.current().await?;
        match verify_typed(&keys, &self.0.settings, self.0.token_type, token) {
            Ok(v) => Ok(v),
            Err(Failure::Rejected(r)) => Err(r),
            Err(Failure::UnknownKid(kid)) => {
                let (_, _, tried, _) = self.snapshot();
                if !fresh && self.may_fetch(tried) {
                    let _one = self.0.fetching.lock().await;
                    let (now, _, tried2, _) = self.snapshot();
                    let unchanged = now.as_ref().is_some_and(|n| Arc::ptr_eq(n, &keys));
                    if unchanged
                        && self.may_fetch(tried2)
                        && let Err(e) = self.load_keeping(true, true).await
                    {
                        tracing::warn!(target: "toolgate_idp", "the identity provider's keys could not be had: {e}");
                    }
                }
                let (keys, _, _, failed) = self.snapshot();
                let Some(keys) = keys else {
                    return Err(Rejection::Invalid(format!(
                        "the identity provider's keys are not available ({}): no token can be verified",
                        failed.unwrap_or_default()
                    )));
                };
                match verify_typed(&keys, &self.0.settings, self.0.token_type, token) {
                    Ok(v) => Ok(v),
                    Err(Failure::Rejected(r)) => Err(r),
                    Err(Failure::UnknownKid(_)) => Err(Rejection::Invalid(format!(
                        "the token names the key `{kid}`, which the identity provider's keys do not hold"
                    ))),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
