//! How bearer JWTs from an identity provider are verified: the settings shared by the MCP
//! server's `mcp.jwt` and the approval page's `approvers.jwt` (serve.md, "Agents and
//! approvers from the identity provider"), read by the crate that verifies them. The engine
//! keeps the approval page's as written and decides nothing with them.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};
use toolgate_core::outbound::{fetch_url_problem, is_https};
use toolgate_engine::ConfigErrors;
use toolgate_engine::config::section::{Section as Obj, index, list, type_name};

/// The asymmetric JWS algorithms a verifier may allow. Never `none`, never an HMAC one
/// (`HS256`…): a shared secret is no identity provider's signature, and an HMAC check keyed
/// with a public key is the classic forgery.
pub const ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

/// The algorithms allowed when `algorithms` is not set.
pub const DEFAULT_ALGORITHMS: &[&str] = &["RS256", "ES256"];

/// How long fetched keys are used before they are fetched again, unless `jwks_cache_secs`
/// says otherwise.
pub const DEFAULT_JWKS_CACHE: Duration = Duration::from_secs(300);

/// The clock skew allowed on `exp` and `nbf`, unless `leeway_secs` says otherwise.
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(30);

/// The largest `leeway_secs`: a leeway is for clock skew, not for tokens' lifetimes.
pub const MAX_LEEWAY_SECS: u64 = 300;

/// Where the identity provider's signing keys (a JWKS, RFC 7517) come from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JwksSource {
    /// A file holding the JWKS, read at start and on SIGHUP (`jwks_file`).
    File(PathBuf),
    /// A URL the JWKS is fetched from at start, again when the cache lifetime has passed,
    /// and (bounded) when a token names a key it does not hold (`jwks_url`): `https://`, or
    /// `http://` to a loopback host only ([`fetch_url_problem`]).
    Url(String),
}

/// The keys' names in a JWT settings object.
const FIELDS: &[&str] = &[
    "issuer",
    "audience",
    "jwks_file",
    "jwks_url",
    "jwks_cache_secs",
    "ca_file",
    "algorithms",
    "leeway_secs",
    "required_scopes",
];

/// How bearer JWTs are verified (`mcp.jwt`, `approvers.jwt`): a token is taken only when its
/// signature verifies with a key of the JWKS under an allowed algorithm that fits the key,
/// `iss` is `issuer`, `aud` names `audience`, `exp` has not passed and `nbf` has (each with
/// `leeway`), and its scopes include every one of `required_scopes`.
///
/// ```
/// use serde_json::json;
/// use toolgate_engine::ConfigErrors;
/// use toolgate_idp::{JwksSource, JwtSettings};
/// let mut errs = ConfigErrors::default();
/// let s = JwtSettings::read(&json!({
///     "issuer": "https://idp.example.com/",
///     "audience": "http://127.0.0.1:8931/mcp",
///     "jwks_url": "http://127.0.0.1:9000/jwks.json",
///     "algorithms": ["RS256", "ES256"],
///     "required_scopes": ["mcp:tools"]
/// }), "mcp.jwt", &[], &mut errs).unwrap();
/// assert!(errs.is_empty());
/// assert_eq!(s.keys, JwksSource::Url("http://127.0.0.1:9000/jwks.json".into()));
/// assert_eq!(s.leeway.as_secs(), 30);
///
/// let mut errs = ConfigErrors::default();
/// assert!(JwtSettings::read(&json!({"issuer": "i", "audience": "a", "jwks_file": "k.json",
///     "algorithms": ["HS256"]}), "mcp.jwt", &[], &mut errs).is_none());
/// assert_eq!(errs.errors[0].path, "mcp.jwt.algorithms[0]");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtSettings {
    /// The `iss` every token must carry, compared exactly.
    pub issuer: String,
    /// The `aud` every token must name (for the MCP server: its resource URI).
    pub audience: String,
    /// Where the signing keys come from.
    pub keys: JwksSource,
    /// How long fetched keys are used (`jwks_cache_secs`).
    pub cache: Duration,
    /// The CA certificates (a PEM file) trusted for an `https://` `jwks_url` instead of the
    /// system's roots (`ca_file`: a private identity provider's CA).
    pub ca_file: Option<PathBuf>,
    /// The allowed algorithms, a subset of [`ALGORITHMS`].
    pub algorithms: Vec<String>,
    /// The clock skew allowed on `exp` and `nbf` (`leeway_secs`, 0 to [`MAX_LEEWAY_SECS`]).
    pub leeway: Duration,
    /// Scopes a token must hold (`scope`, space-separated, or `scp`, a list); a token
    /// without one of them is refused as insufficient (HTTP 403).
    pub required_scopes: Vec<String>,
}

/// Where the identity provider's keys come from: `jwks_file` or `jwks_url` (one of them; a
/// URL the outbound policy allows).
fn read_keys(o: &Obj<'_>, errs: &mut ConfigErrors) -> Option<JwksSource> {
    match (o.has("jwks_file"), o.has("jwks_url")) {
        (true, true) => {
            errs.push(o.path(), "give `jwks_file` or `jwks_url`, not both");
            None
        }
        (false, false) => {
            errs.push(
                o.path_of("jwks_file"),
                "missing: the identity provider's keys, `jwks_file` (a JWKS file) or `jwks_url`",
            );
            None
        }
        (true, false) => o
            .non_blank("jwks_file", errs)
            .map(|p| JwksSource::File(PathBuf::from(p))),
        (false, true) => match o.non_blank("jwks_url", errs) {
            Some(u) => match fetch_url_problem(u) {
                None => Some(JwksSource::Url(u.to_owned())),
                Some(why) => {
                    errs.push(o.path_of("jwks_url"), why);
                    None
                }
            },
            None => None,
        },
    }
}

/// `algorithms`: the signature algorithms accepted, each known and listed once; never `none`
/// nor an HMAC one (default: the asymmetric ones).
fn read_algorithms(o: &Obj<'_>, errs: &mut ConfigErrors) -> Vec<String> {
    match o.array("algorithms", errs) {
        None => DEFAULT_ALGORITHMS.iter().map(|s| (*s).to_owned()).collect(),
        Some(items) => {
            if items.is_empty() {
                errs.push(
                    o.path_of("algorithms"),
                    format!(
                        "at least one algorithm is required, from {}",
                        list(ALGORITHMS)
                    ),
                );
            }
            let mut algs: Vec<String> = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let at = index(&o.path_of("algorithms"), i);
                match item.as_str() {
                    Some(a) if ALGORITHMS.contains(&a) => {
                        if algs.iter().any(|x| x == a) {
                            errs.push(at, format!("`{a}` is listed twice"));
                        } else {
                            algs.push(a.to_owned());
                        }
                    }
                    Some(a) if a.eq_ignore_ascii_case("none") || a.starts_with("HS") => {
                        errs.push(
                            at,
                            format!("`{a}` is never allowed: tokens must be signed with the identity provider's private key; expected one of {}", list(ALGORITHMS)),
                        );
                    }
                    Some(a) => errs.push(
                        at,
                        format!(
                            "unknown algorithm `{a}`; expected one of {}",
                            list(ALGORITHMS)
                        ),
                    ),
                    None => errs.push(
                        at,
                        format!("expected an algorithm name, found {}", type_name(item)),
                    ),
                }
            }
            algs
        }
    }
}

impl JwtSettings {
    /// Reads the settings object at `path`; `extra` are the fields its section adds (the MCP
    /// server's claim mapping, the page's name claim), read by the caller.
    ///
    /// # Errors
    ///
    /// Pushes every problem to `errs`, each named by its path, and returns `None`.
    pub fn read(v: &Value, path: &str, extra: &[&str], errs: &mut ConfigErrors) -> Option<Self> {
        let known: Vec<&str> = FIELDS.iter().chain(extra).copied().collect();
        let before = errs.errors.len();
        let o = Obj::open(v, path, &known, errs)?;
        let required = |key: &str, errs: &mut ConfigErrors| {
            let got = o.non_blank(key, errs);
            if got.is_none() && !o.has(key) {
                errs.push(o.path_of(key), format!("`{key}` is required"));
            }
            got.map(str::to_owned)
        };
        let issuer = required("issuer", errs);
        let audience = required("audience", errs);
        let keys = read_keys(&o, errs);
        let ca_file = match o.non_blank("ca_file", errs) {
            None => None,
            Some(p) => match &keys {
                Some(JwksSource::Url(u)) if is_https(u) => Some(PathBuf::from(p)),
                _ => {
                    errs.push(
                        o.path_of("ca_file"),
                        "`ca_file` applies only with an `https://` `jwks_url` (the CA that signed its server's certificate)",
                    );
                    None
                }
            },
        };
        if o.has("jwks_cache_secs") && !o.has("jwks_url") {
            errs.push(
                o.path_of("jwks_cache_secs"),
                "`jwks_cache_secs` applies only with `jwks_url` (a `jwks_file` is re-read on SIGHUP)",
            );
        }
        let cache = o
            .positive("jwks_cache_secs", errs)
            .map_or(DEFAULT_JWKS_CACHE, Duration::from_secs);
        let algorithms = read_algorithms(&o, errs);
        let leeway = match o.raw("leeway_secs", errs) {
            None => DEFAULT_LEEWAY,
            Some(v) => match v.as_u64() {
                Some(n) if n <= MAX_LEEWAY_SECS => Duration::from_secs(n),
                _ => {
                    errs.push(
                        o.path_of("leeway_secs"),
                        format!("expected a whole number of seconds from 0 to {MAX_LEEWAY_SECS}, found {v}"),
                    );
                    DEFAULT_LEEWAY
                }
            },
        };
        let required_scopes = match o.array("required_scopes", errs) {
            None => Vec::new(),
            Some(items) => items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| match item.as_str() {
                    Some(s) if !s.is_empty() && !s.contains(char::is_whitespace) => {
                        Some(s.to_owned())
                    }
                    _ => {
                        errs.push(
                            index(&o.path_of("required_scopes"), i),
                            format!("expected a scope (a string without spaces), found {item}"),
                        );
                        None
                    }
                })
                .collect(),
        };
        if errs.errors.len() > before {
            return None;
        }
        Some(Self {
            issuer: issuer?,
            audience: audience?,
            keys: keys?,
            cache,
            ca_file,
            algorithms,
            leeway,
            required_scopes,
        })
    }

    /// The settings as configuration JSON, defaults spelled (what `config print` shows).
    pub fn to_json(&self) -> Map<String, Value> {
        let mut o = Map::new();
        o.insert("issuer".into(), self.issuer.clone().into());
        o.insert("audience".into(), self.audience.clone().into());
        match &self.keys {
            JwksSource::File(p) => {
                o.insert("jwks_file".into(), p.display().to_string().into());
            }
            JwksSource::Url(u) => {
                o.insert("jwks_url".into(), u.clone().into());
                o.insert("jwks_cache_secs".into(), self.cache.as_secs().into());
                if let Some(ca) = &self.ca_file {
                    o.insert("ca_file".into(), ca.display().to_string().into());
                }
            }
        }
        o.insert("algorithms".into(), self.algorithms.clone().into());
        o.insert("leeway_secs".into(), self.leeway.as_secs().into());
        o.insert(
            "required_scopes".into(),
            self.required_scopes.clone().into(),
        );
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(v: Value) -> Vec<String> {
        let mut errs = ConfigErrors::default();
        assert!(
            JwtSettings::read(&v, "mcp.jwt", &[], &mut errs).is_none(),
            "{v}"
        );
        errs.errors.into_iter().map(|e| e.path).collect()
    }

    #[test]
    fn issue22_every_jwt_setting_error_names_its_field() {
        let base = json!({"issuer": "i", "audience": "a", "jwks_file": "k.json"});
        let with = |k: &str, v: Value| {
            let mut b = base.clone();
            b[k] = v;
            b
        };
        assert_eq!(
            errors(json!({"audience": "a", "jwks_file": "k"})),
            ["mcp.jwt.issuer"]
        );
        assert_eq!(
            errors(json!({"issuer": "i", "jwks_file": "k"})),
            ["mcp.jwt.audience"]
        );
        assert_eq!(
            errors(json!({"issuer": "i", "audience": "a"})),
            ["mcp.jwt.jwks_file"]
        );
        assert_eq!(errors(with("jwks_url", json!("http://x/"))), ["mcp.jwt"]);
        assert_eq!(errors(with("colour", json!(1))), ["mcp.jwt.colour"]);
        assert_eq!(
            errors(with("algorithms", json!(["RS256", "none"]))),
            ["mcp.jwt.algorithms[1]"]
        );
        assert_eq!(
            errors(with("algorithms", json!(["HS256"]))),
            ["mcp.jwt.algorithms[0]"]
        );
        assert_eq!(
            errors(with("algorithms", json!([]))),
            ["mcp.jwt.algorithms"]
        );
        assert_eq!(
            errors(with("leeway_secs", json!(3600))),
            ["mcp.jwt.leeway_secs"]
        );
        assert_eq!(
            errors(with("jwks_cache_secs", json!(10))),
            ["mcp.jwt.jwks_cache_secs"]
        );
        assert_eq!(
            errors(with("required_scopes", json!(["a b"]))),
            ["mcp.jwt.required_scopes[0]"]
        );
        // The stricter reading of `http://` (serve.md): loopback only.
        let url = json!({"issuer": "i", "audience": "a", "jwks_url": "http://idp/jwks"});
        assert_eq!(errors(url), ["mcp.jwt.jwks_url"]);
        assert_eq!(
            errors(with("ca_file", json!("ca.pem"))),
            ["mcp.jwt.ca_file"],
            "`ca_file` with a `jwks_file`"
        );
        let plain = json!({"issuer": "i", "audience": "a", "jwks_url": "http://127.0.0.1:1/k", "ca_file": "ca.pem"});
        assert_eq!(errors(plain), ["mcp.jwt.ca_file"]);
    }

    #[test]
    fn issue22_an_https_jwks_url_is_taken_with_its_ca_file() {
        let mut errs = ConfigErrors::default();
        let v = json!({"issuer": "i", "audience": "a", "jwks_url": "https://idp.example.com/jwks",
            "ca_file": "ca.pem"});
        let s = JwtSettings::read(&v, "p", &[], &mut errs).unwrap();
        assert_eq!(
            s.keys,
            JwksSource::Url("https://idp.example.com/jwks".into())
        );
        assert_eq!(s.ca_file, Some(PathBuf::from("ca.pem")));
        let again = JwtSettings::read(&Value::Object(s.to_json()), "p", &[], &mut errs).unwrap();
        assert_eq!(again, s);
        assert!(errs.is_empty(), "{errs}");
    }

    #[test]
    fn issue22_jwt_settings_print_back() {
        let mut errs = ConfigErrors::default();
        let v = json!({"issuer": "i", "audience": "a", "jwks_url": "http://127.0.0.1:1/k",
            "leeway_secs": 0, "algorithms": ["ES256"]});
        let s = JwtSettings::read(&v, "p", &[], &mut errs).unwrap();
        assert_eq!(s.leeway, Duration::ZERO);
        let again = JwtSettings::read(&Value::Object(s.to_json()), "p", &[], &mut errs).unwrap();
        assert_eq!(again, s);
        assert!(errs.is_empty(), "{errs}");
    }
}
