//! The JOSE header `typ` of a bearer token (serve.md, "Agents and approvers from the identity
//! provider"): explicit typing (RFC 8725 §3.11) keeps a JWT of another kind — a DPoP proof, a
//! logout token, a security event — from being taken as an access token, and an RFC 9068
//! provider marks its access tokens `at+jwt`.

use serde_json::Value;
use toolgate_engine::ConfigErrors;

/// What the JOSE header `typ` of a token must say: the setting `token_type` of a JWT section
/// (`mcp.jwt.token_type`).
///
/// `typ` is a media type, compared case-insensitively, its `application/` prefix optional
/// (RFC 7515 §4.1.9): `at+jwt`, `AT+JWT` and `application/at+jwt` are one type.
///
/// ```
/// use serde_json::json;
/// use toolgate_engine::ConfigErrors;
/// use toolgate_idp::TokenType;
///
/// // Without `token_type`: an untyped or `JWT` token, or an access token, is taken; a JWT
/// // typed as another kind is not.
/// let any = TokenType::default();
/// assert_eq!(any.problem(None), None);
/// assert_eq!(any.problem(Some("JWT")), None);
/// assert_eq!(any.problem(Some("application/at+jwt")), None);
/// assert!(any.problem(Some("dpop+jwt")).is_some());
///
/// // `"token_type": "at+jwt"`: only RFC 9068 access tokens.
/// let mut errs = ConfigErrors::default();
/// let at = TokenType::read(&json!({"token_type": "at+jwt"}), "mcp.jwt", &mut errs);
/// assert_eq!(at, TokenType::AccessToken);
/// assert_eq!(at.problem(Some("AT+JWT")), None);
/// assert!(at.problem(Some("JWT")).is_some());
/// assert!(at.problem(None).is_some());
///
/// TokenType::read(&json!({"token_type": "jwt"}), "mcp.jwt", &mut errs);
/// assert_eq!(errs.errors[0].path, "mcp.jwt.token_type");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum TokenType {
    /// No `token_type` (the default): a token whose `typ` is absent, `JWT`, or an access
    /// token's (`at+jwt`) is taken; one whose `typ` names any other kind of JWT (`dpop+jwt`,
    /// `logout+jwt`, `secevent+jwt`, `JOSE`, …) is refused.
    #[default]
    Any,
    /// `"token_type": "at+jwt"`: the `typ` must be `at+jwt` (or `application/at+jwt`), as an
    /// RFC 9068 provider marks its access tokens (RFC 9068 §2.1, §4); an untyped or `JWT`
    /// token is refused.
    AccessToken,
}

/// The setting's name in a JWT section.
pub const TOKEN_TYPE_FIELD: &str = "token_type";

/// `typ` lower-cased, without its optional `application/` prefix.
fn normalised(typ: &str) -> String {
    let lower = typ.trim().to_ascii_lowercase();
    match lower.strip_prefix("application/") {
        Some(rest) if !rest.contains('/') => rest.to_owned(),
        _ => lower,
    }
}

/// `typ` as a message shows it: printable, at most 64 characters.
fn shown(typ: &str) -> String {
    let mut s: String = typ.chars().filter(|c| !c.is_control()).take(64).collect();
    if typ.chars().count() > 64 {
        s.push('…');
    }
    s
}

impl TokenType {
    /// Reads `token_type` of the JWT section `section` at `path` (absent: [`TokenType::Any`]).
    ///
    /// # Errors
    ///
    /// Pushes a problem named `PATH.token_type` to `errs` for anything but `"at+jwt"` (or
    /// `"application/at+jwt"`, any case), and returns [`TokenType::Any`].
    pub fn read(section: &Value, path: &str, errs: &mut ConfigErrors) -> Self {
        match section.get(TOKEN_TYPE_FIELD) {
            None => TokenType::Any,
            Some(Value::String(s)) if normalised(s) == "at+jwt" => TokenType::AccessToken,
            Some(other) => {
                errs.push(
                    format!("{path}.{TOKEN_TYPE_FIELD}"),
                    format!(
                        "expected \"at+jwt\" (only RFC 9068 access tokens, whose header `typ` is `at+jwt`), found {other}; leave it out to take tokens whose `typ` is absent, `JWT` or `at+jwt`"
                    ),
                );
                TokenType::Any
            }
        }
    }

    /// The setting as configuration JSON: `Some("at+jwt")`, or `None` when it is not set.
    pub fn config_value(self) -> Option<&'static str> {
        match self {
            TokenType::Any => None,
            TokenType::AccessToken => Some("at+jwt"),
        }
    }

    /// Why a token whose JOSE header `typ` is `typ` is refused, or `None` when it is taken.
    pub fn problem(self, typ: Option<&str>) -> Option<String> {
        let norm = typ.map(normalised);
        match (self, norm.as_deref()) {
            (TokenType::Any, None | Some("jwt" | "at+jwt")) => None,
            (TokenType::AccessToken, Some("at+jwt")) => None,
            (TokenType::Any, Some(_)) => Some(format!(
                "the token's header `typ` is `{}`, another kind of JWT than an access token (RFC 8725 §3.11): expected none, `JWT` or `at+jwt`",
                shown(typ.unwrap_or_default())
            )),
            (TokenType::AccessToken, _) => Some(format!(
                "the token's header `typ` is {}, but `token_type` requires `at+jwt` (an RFC 9068 access token)",
                typ.map_or_else(|| String::from("missing"), |t| format!("`{}`", shown(t)))
            )),
        }
    }
}
