//! Who may use the approval page's HTTP API and its chat callbacks (approval-page.md, "The
//! HTTP API" and "Answering from Slack"): the `approvers.api_keys` (management keys, kept as
//! their SHA-256, each with scopes) and the `approvers.slack` settings (the signing secret's
//! file and which Slack user is which approver); and, with `approvers.auth: jwt`, how
//! identity-provider tokens are verified (the verification settings of `approvers.jwt`,
//! read by [`JwtSettings::read`]).
//!
//! These are the page's own fields of the `approvers` section: the engine keeps them as
//! written ([`ApproverSettings::page_field`], [`JwtApprovers::verification`]) and decides
//! nothing with them; the page reads them here, with the approvers' names, and every error
//! names its path. `toolgate check` runs [`PageAccess::read`] beside the engine's readers,
//! `toolgate serve` does not start on their errors, and a reload whose fields do not read is
//! refused whole.
//!
//! ```
//! use toolgate_engine::config::{load_str, Format};
//! use toolgate_web::access::{ApiScope, PageAccess};
//! let gov = load_str(r#"{"approvers": {
//!     "people": [{"name": "alice", "token_sha256": "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"}],
//!     "api_keys": [
//!         {"name": "ci", "key_sha256": "81b637d8fcd2c6da6359e6963113a1170de795e4b725b84d1e0b4cfd9ec58ce9",
//!          "scopes": ["policy:read", "policy:write"]},
//!         {"name": "bot", "key_sha256": "a665a45920422f9d417e4867efdc4fb8a04a1f3fff1fa07e998e86f7f7a27ae3",
//!          "scopes": ["approvals"], "approver": "alice"}
//!     ]}}"#, Format::Json).unwrap();
//! let access = PageAccess::read(gov.approver_settings().unwrap()).unwrap();
//! assert!(access.api_keys[0].has(ApiScope::PolicyWrite) && !access.api_keys[0].has(ApiScope::Approvals));
//! assert_eq!(access.api_keys[1].approver.as_deref(), Some("alice"));
//!
//! // An `approvals` key answers as a named approver, with that person's rights.
//! let gov = load_str(r#"{"approvers": {
//!     "people": [{"name": "alice", "token_sha256": "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"}],
//!     "api_keys": [{"name": "bot", "key_sha256": "a665a45920422f9d417e4867efdc4fb8a04a1f3fff1fa07e998e86f7f7a27ae3",
//!                   "scopes": ["approvals"]}]}}"#, Format::Json).unwrap();
//! let err = PageAccess::read(gov.approver_settings().unwrap()).unwrap_err();
//! assert_eq!(err.errors[0].path, "approvers.api_keys[0].approver");
//!
//! // The identity provider's keys are fetched over `https://` (plain `http://` from a
//! // loopback host only), and tokens are never taken under an HMAC algorithm.
//! let gov = load_str(r#"{"approvers": {"auth": "jwt",
//!     "jwt": {"issuer": "https://idp.example.com/", "audience": "toolgate-approvals",
//!             "jwks_url": "http://idp.internal/jwks", "algorithms": ["HS256"]},
//!     "groups": [{"group": "sre"}]}}"#, Format::Json).unwrap();
//! let err = PageAccess::read(gov.approver_settings().unwrap()).unwrap_err();
//! let paths: Vec<_> = err.errors.iter().map(|e| e.path.as_str()).collect();
//! assert_eq!(paths, ["approvers.jwt.jwks_url", "approvers.jwt.algorithms[0]"]);
//! ```

use std::path::PathBuf;

use serde_json::Value;
use toolgate_engine::ConfigErrors;
use toolgate_engine::approvers::{
    ApproverAuth, ApproverSettings, EMPTY_TOKEN_MESSAGE, EMPTY_TOKEN_SHA256, JwtApprovers,
};
use toolgate_engine::config::section::{Section as Obj, index, type_name};
use toolgate_idp::JwtSettings;

/// The page's access settings of one configuration: its management keys, its Slack
/// settings and its identity provider's verification settings, read from `approvers` with
/// the approvers' names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PageAccess {
    /// `approvers.api_keys`: the HTTP API's management keys.
    pub api_keys: Vec<ApiKey>,
    /// `approvers.slack`: answering from Slack, if set.
    pub slack: Option<SlackSettings>,
    /// How identity-provider tokens are verified (the verification settings of
    /// `approvers.jwt`), with `approvers.auth: jwt`.
    pub jwt: Option<JwtSettings>,
}

impl PageAccess {
    /// Reads `approvers.api_keys`, `approvers.slack` and, with `auth: jwt`, the
    /// verification settings of `approvers.jwt` of `approvers`.
    ///
    /// # Errors
    ///
    /// Every error of these fields, each named by its path
    /// (`approvers.api_keys[0].scopes[1]`, `approvers.jwt.jwks_url`).
    pub fn read(approvers: &ApproverSettings) -> Result<Self, ConfigErrors> {
        let mut errs = ConfigErrors::default();
        let people: Vec<&str> = approvers.people.iter().map(|p| p.name.as_str()).collect();
        let api_keys = match approvers.page_field("api_keys") {
            None => Vec::new(),
            Some(Value::Array(items)) => {
                read_api_keys(items, "approvers.api_keys", &people, &mut errs)
            }
            Some(other) => {
                errs.push(
                    "approvers.api_keys",
                    format!("expected a list, found {}", type_name(other)),
                );
                Vec::new()
            }
        };
        let slack = approvers
            .page_field("slack")
            .and_then(|v| read_slack(v, "approvers.slack", &people, &mut errs));
        let jwt = match &approvers.auth {
            // The engine's own fields of `approvers.jwt` are not among these: it read them.
            ApproverAuth::Jwt(j) => JwtSettings::read(
                &Value::Object(j.verification().clone()),
                "approvers.jwt",
                &JwtApprovers::FIELDS,
                &mut errs,
            ),
            _ => None,
        };
        if errs.is_empty() {
            Ok(Self {
                api_keys,
                slack,
                jwt,
            })
        } else {
            Err(errs)
        }
    }
}

/// What a management key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApiScope {
    /// `policy:read`: read the stored tenant policy.
    PolicyRead,
    /// `policy:write`: replace the stored tenant policy.
    PolicyWrite,
    /// `approvals`: list and answer held calls, as the key's approver.
    Approvals,
}

impl ApiScope {
    /// Every scope, in the order they are documented.
    pub const ALL: [ApiScope; 3] = [
        ApiScope::PolicyRead,
        ApiScope::PolicyWrite,
        ApiScope::Approvals,
    ];

    /// The scope's name in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            ApiScope::PolicyRead => "policy:read",
            ApiScope::PolicyWrite => "policy:write",
            ApiScope::Approvals => "approvals",
        }
    }

    /// The scope spelled `s`, exactly.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

/// One management key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// The key's name (in the log and on answers it gives: `approver (key name)`).
    pub name: String,
    /// The SHA-256 of the key, 64 lower-case hex digits.
    pub key_sha256: String,
    /// What it may do; at least one.
    pub scopes: Vec<ApiScope>,
    /// The approver (one of `people`) whose rights an `approvals` key answers with and
    /// whose name its answers are recorded under; required with that scope.
    pub approver: Option<String>,
}

impl ApiKey {
    /// Whether the key has `scope`.
    pub fn has(&self, scope: ApiScope) -> bool {
        self.scopes.contains(&scope)
    }
}

/// `approvers.slack`: answering held calls from Slack (Block Kit cards with Approve and
/// Deny, and the signed interactive callback `POST /v1/callbacks/slack`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackSettings {
    /// The file holding the Slack app's signing secret (never the secret itself in the
    /// configuration).
    pub signing_secret_file: PathBuf,
    /// Which Slack user (their id, such as `U012ABCDEF`) answers as which approver.
    pub users: Vec<SlackUser>,
}

/// One Slack user mapped to an approver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackUser {
    /// The Slack user id (`user.id` in the callback), compared exactly.
    pub slack_user: String,
    /// The approver (one of `people`) they answer as.
    pub approver: String,
}

impl SlackSettings {
    /// The approver Slack user `id` answers as, if the configuration maps them.
    pub fn approver_of(&self, id: &str) -> Option<&str> {
        self.users
            .iter()
            .find(|u| u.slack_user == id)
            .map(|u| u.approver.as_str())
    }
}

const KEY: &[&str] = &["name", "key_sha256", "scopes", "approver"];
const SLACK: &[&str] = &["signing_secret_file", "users"];
const SLACK_USER: &[&str] = &["slack_user", "approver"];

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Reads `approvers.api_keys` (at `path`); `people` are the approvers' names an
/// `approvals` key may name.
fn read_api_keys(
    items: &[Value],
    path: &str,
    people: &[&str],
    errs: &mut ConfigErrors,
) -> Vec<ApiKey> {
    let mut keys: Vec<ApiKey> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = index(path, i);
        let Some(o) = Obj::open(item, &at, KEY, errs) else {
            continue;
        };
        let name = o.non_blank("name", errs);
        if !o.has("name") {
            errs.push(o.path_of("name"), "`name` is required");
        }
        let hash = match o.str("key_sha256", errs) {
            Some(h) if h == EMPTY_TOKEN_SHA256 => {
                errs.push(o.path_of("key_sha256"), EMPTY_TOKEN_MESSAGE);
                None
            }
            Some(h) if is_sha256_hex(h) => Some(h.to_owned()),
            Some(_) => {
                errs.push(
                    o.path_of("key_sha256"),
                    "expected the key's SHA-256 as 64 lower-case hex digits (`toolgate serve hash-token` prints it)",
                );
                None
            }
            None => {
                if !o.has("key_sha256") {
                    errs.push(o.path_of("key_sha256"), "`key_sha256` is required");
                }
                None
            }
        };
        let mut scopes = Vec::new();
        match o.array("scopes", errs) {
            None => {
                if !o.has("scopes") {
                    errs.push(
                        o.path_of("scopes"),
                        "`scopes` is required: one or more of `policy:read`, `policy:write`, `approvals`",
                    );
                }
            }
            Some(list) if list.is_empty() => errs.push(
                o.path_of("scopes"),
                "at least one scope is required: `policy:read`, `policy:write` or `approvals`",
            ),
            Some(list) => {
                for (j, s) in list.iter().enumerate() {
                    let sp = index(&o.path_of("scopes"), j);
                    match s.as_str().map(|t| (t, ApiScope::parse(t))) {
                        Some((_, Some(scope))) if scopes.contains(&scope) => {
                            errs.push(sp, format!("scope `{}` is listed twice", scope.as_str()));
                        }
                        Some((_, Some(scope))) => scopes.push(scope),
                        Some((t, None)) => errs.push(
                            sp,
                            format!(
                                "unknown scope `{t}`; expected one of `policy:read`, `policy:write`, `approvals`"
                            ),
                        ),
                        None => errs.push(sp, "expected a scope name, like `policy:read`"),
                    }
                }
            }
        }
        let approver = o.non_blank("approver", errs).map(str::to_owned);
        match &approver {
            Some(a) if !people.contains(&a.as_str()) => errs.push(
                o.path_of("approver"),
                format!("`{a}` is not one of `approvers.people`"),
            ),
            Some(_) if !scopes.contains(&ApiScope::Approvals) => errs.push(
                o.path_of("approver"),
                "`approver` applies only to a key with the `approvals` scope",
            ),
            None if scopes.contains(&ApiScope::Approvals) && !o.has("approver") => errs.push(
                o.path_of("approver"),
                "a key with the `approvals` scope needs the `approver` (one of `approvers.people`) whose rights it answers with",
            ),
            _ => {}
        }
        if let (Some(name), Some(hash)) = (name, hash) {
            if keys.iter().any(|k| k.name == name) {
                errs.push(o.path_of("name"), format!("key `{name}` is named twice"));
            }
            if keys.iter().any(|k| k.key_sha256 == hash) {
                errs.push(
                    o.path_of("key_sha256"),
                    "two keys share this hash; each needs its own",
                );
            }
            keys.push(ApiKey {
                name: name.to_owned(),
                key_sha256: hash,
                scopes,
                approver,
            });
        }
    }
    keys
}

/// Reads `approvers.slack` (at `path`).
fn read_slack(
    v: &Value,
    path: &str,
    people: &[&str],
    errs: &mut ConfigErrors,
) -> Option<SlackSettings> {
    let o = Obj::open(v, path, SLACK, errs)?;
    let file = o.non_blank("signing_secret_file", errs).map(PathBuf::from);
    if !o.has("signing_secret_file") {
        errs.push(
            o.path_of("signing_secret_file"),
            "`signing_secret_file` is required: the file holding the Slack app's signing secret",
        );
    }
    let mut users: Vec<SlackUser> = Vec::new();
    match o.array("users", errs) {
        None => {
            if !o.has("users") {
                errs.push(
                    o.path_of("users"),
                    "`users` is required: which Slack user answers as which approver",
                );
            }
        }
        Some(items) => {
            for (i, item) in items.iter().enumerate() {
                let at = index(&o.path_of("users"), i);
                let Some(u) = Obj::open(item, &at, SLACK_USER, errs) else {
                    continue;
                };
                let id = u.non_blank("slack_user", errs);
                if !u.has("slack_user") {
                    errs.push(u.path_of("slack_user"), "`slack_user` is required");
                }
                let approver = u.non_blank("approver", errs);
                if !u.has("approver") {
                    errs.push(u.path_of("approver"), "`approver` is required");
                }
                if let Some(a) = approver.filter(|a| !people.contains(a)) {
                    errs.push(
                        u.path_of("approver"),
                        format!("`{a}` is not one of `approvers.people`"),
                    );
                    continue;
                }
                if let (Some(id), Some(approver)) = (id, approver) {
                    if users.iter().any(|x| x.slack_user == id) {
                        errs.push(
                            u.path_of("slack_user"),
                            format!("Slack user `{id}` is mapped twice"),
                        );
                    }
                    users.push(SlackUser {
                        slack_user: id.to_owned(),
                        approver: approver.to_owned(),
                    });
                }
            }
        }
    }
    Some(SlackSettings {
        signing_secret_file: file?,
        users,
    })
}

#[cfg(test)]
mod tests {
    use super::PageAccess;
    use toolgate_engine::config::{Format, load_str};

    const HASH: &str = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";
    const OTHER: &str = "81b637d8fcd2c6da6359e6963113a1170de795e4b725b84d1e0b4cfd9ec58ce9";

    fn paths(approvers_extra: &str) -> Vec<String> {
        let text = format!(
            r#"{{"approvers": {{"people": [{{"name": "alice", "token_sha256": "{HASH}"}}], {approvers_extra}}}}}"#
        );
        // The engine's errors, then the page's: as `check` reports them.
        let gov = match load_str(&text, Format::Json) {
            Ok(gov) => gov,
            Err(e) => return e.errors.iter().map(|e| e.path.clone()).collect(),
        };
        match gov.approver_settings().map(PageAccess::read) {
            Some(Err(e)) => e.errors.iter().map(|e| e.path.clone()).collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn issue24_api_keys_errors_name_their_field() {
        assert_eq!(
            paths(
                r#""api_keys": [{"name": "ci", "key_sha256": "nope", "scopes": ["policy:read"]}]"#
            ),
            ["approvers.api_keys[0].key_sha256"]
        );
        assert_eq!(
            paths(&format!(
                r#""api_keys": [{{"name": "ci", "key_sha256": "{OTHER}", "scopes": ["policy:read", "admin", "policy:read"]}}]"#
            )),
            [
                "approvers.api_keys[0].scopes[1]",
                "approvers.api_keys[0].scopes[2]"
            ]
        );
        assert_eq!(
            paths(&format!(
                r#""api_keys": [{{"name": "ci", "key_sha256": "{OTHER}", "scopes": []}}]"#
            )),
            ["approvers.api_keys[0].scopes"]
        );
        assert_eq!(
            paths(&format!(
                r#""api_keys": [{{"name": "ci", "key_sha256": "{OTHER}", "scopes": ["approvals"], "approver": "mallory"}}]"#
            )),
            ["approvers.api_keys[0].approver"]
        );
        assert_eq!(
            paths(&format!(
                r#""api_keys": [{{"name": "ci", "key_sha256": "{OTHER}", "scopes": ["policy:read"], "approver": "alice"}}]"#
            )),
            ["approvers.api_keys[0].approver"]
        );
        assert_eq!(
            paths(&format!(
                r#""api_keys": [{{"name": "a", "key_sha256": "{OTHER}", "scopes": ["policy:read"]}}, {{"name": "a", "key_sha256": "{OTHER}", "scopes": ["policy:read"], "extra": 1}}]"#
            )),
            [
                "approvers.api_keys[1].extra",
                "approvers.api_keys[1].name",
                "approvers.api_keys[1].key_sha256"
            ]
        );
        assert!(
            paths(&format!(
                r#""api_keys": [{{"name": "a", "key_sha256": "{OTHER}", "scopes": ["approvals"], "approver": "alice"}}]"#
            ))
            .is_empty()
        );
    }

    #[test]
    fn a_reload_whose_page_fields_do_not_read_keeps_the_ones_in_force() {
        let gov = |key: &str| {
            let text = format!(
                r#"{{"approvers": {{"people": [{{"name": "alice", "token_sha256": "{HASH}"}}], "api_keys": [{key}]}}}}"#
            );
            load_str(&text, Format::Json).unwrap()
        };
        let good = gov(&format!(
            r#"{{"name": "ci", "key_sha256": "{OTHER}", "scopes": ["approvals"], "approver": "alice"}}"#
        ));
        let in_force =
            crate::ApproversInForce::new(good.approver_settings().unwrap().clone()).unwrap();
        let bad = gov(&format!(
            r#"{{"name": "ci2", "key_sha256": "{OTHER}", "scopes": ["approvals"], "approver": "mallory"}}"#
        ));
        let err = in_force
            .replace(bad.approver_settings().unwrap().clone())
            .unwrap_err();
        let crate::NotReplaced::Page(errs) = err else {
            panic!("{err}")
        };
        assert_eq!(errs.errors[0].path, "approvers.api_keys[0].approver");
        assert_eq!(in_force.with_access().1.api_keys[0].name, "ci");
        // And a whole configuration read again is refused alike.
        assert!(
            in_force
                .replace_configuration(std::sync::Arc::new(bad))
                .is_err()
        );
        assert_eq!(in_force.with_access().1.api_keys[0].name, "ci");
    }

    fn with_jwt(settings: &str) -> toolgate_engine::Governance {
        let text = format!(
            r#"{{"approvers": {{"auth": "jwt", "jwt": {settings}, "groups": [{{"group": "g"}}]}}}}"#
        );
        load_str(&text, Format::Json).unwrap()
    }

    fn jwt_paths(settings: &str) -> Vec<String> {
        match PageAccess::read(with_jwt(settings).approver_settings().unwrap()) {
            Ok(_) => Vec::new(),
            Err(e) => e.errors.iter().map(|e| e.path.clone()).collect(),
        }
    }

    #[test]
    fn issue22_the_jwt_verification_settings_are_read_by_the_page() {
        assert_eq!(
            jwt_paths(
                r#"{"issuer": "i", "audience": "a", "jwks_file": "k", "algorithms": ["HS256"]}"#
            ),
            ["approvers.jwt.algorithms[0]"]
        );
        assert_eq!(
            jwt_paths(r#"{"issuer": "i", "audience": "a", "jwks_file": "k", "colour": 1}"#),
            ["approvers.jwt.colour"]
        );
        assert_eq!(
            jwt_paths(r#"{"issuer": null, "audience": "a", "jwks_file": "k"}"#),
            ["approvers.jwt.issuer"]
        );
        assert_eq!(
            jwt_paths(r#"{"audience": "a", "jwks_url": "http://idp.internal/jwks"}"#),
            ["approvers.jwt.issuer", "approvers.jwt.jwks_url"]
        );
        let gov = with_jwt(
            r#"{"issuer": "https://idp.test/", "audience": "toolgate-approvals", "jwks_file": "k.json",
                "name_claim": "email", "groups_claim": "roles", "header": "X-Forwarded-Access-Token"}"#,
        );
        let access = PageAccess::read(gov.approver_settings().unwrap()).unwrap();
        let jwt = access.jwt.unwrap();
        assert_eq!(jwt.issuer, "https://idp.test/");
        assert_eq!(jwt.keys, toolgate_idp::JwksSource::File("k.json".into()));
        // Without `auth: jwt` there is nothing to verify.
        let text = format!(
            r#"{{"approvers": {{"people": [{{"name": "alice", "token_sha256": "{HASH}"}}]}}}}"#
        );
        let gov = load_str(&text, Format::Json).unwrap();
        assert_eq!(
            PageAccess::read(gov.approver_settings().unwrap())
                .unwrap()
                .jwt,
            None
        );
    }

    #[test]
    fn a_reload_whose_jwt_settings_do_not_read_keeps_the_ones_in_force() {
        let good = r#"{"issuer": "i", "audience": "a", "jwks_file": "k.json"}"#;
        let in_force =
            crate::ApproversInForce::new(with_jwt(good).approver_settings().unwrap().clone())
                .unwrap();
        let bad = with_jwt(
            r#"{"issuer": "i", "audience": "a", "jwks_file": "k.json", "algorithms": ["none"]}"#,
        );
        let err = in_force
            .replace(bad.approver_settings().unwrap().clone())
            .unwrap_err();
        let crate::NotReplaced::Page(errs) = err else {
            panic!("{err}")
        };
        assert_eq!(errs.errors[0].path, "approvers.jwt.algorithms[0]");
        let kept = in_force.with_access().1.jwt.clone().unwrap();
        assert_eq!(kept.algorithms, ["RS256", "ES256"]);
        // Settings that read but differ: how people sign in changed, a restart.
        let other = with_jwt(
            r#"{"issuer": "i", "audience": "a", "jwks_file": "k.json", "leeway_secs": 5}"#,
        );
        assert_eq!(
            in_force.replace(other.approver_settings().unwrap().clone()),
            Err(crate::NotReplaced::AuthChanged)
        );
        assert_eq!(in_force.with_access().1.jwt, Some(kept));
    }

    #[test]
    fn the_page_fields_are_checked_by_the_page_and_null_by_the_engine() {
        assert_eq!(
            paths(r#""api_keys": {"name": "ci"}"#),
            ["approvers.api_keys"]
        );
        assert_eq!(paths(r#""slack": null"#), ["approvers.slack"]);
        assert_eq!(paths(r#""slack": []"#), ["approvers.slack"]);
        assert_eq!(
            paths(r#""slack": {"signing_secret_file": "s", "users": [], "extra": 1}"#),
            ["approvers.slack.extra"]
        );
    }

    #[test]
    fn issue24_slack_settings_are_read_and_name_their_errors() {
        assert_eq!(
            paths(r#""slack": {"users": [{"slack_user": "U1", "approver": "bob"}]}"#),
            [
                "approvers.slack.signing_secret_file",
                "approvers.slack.users[0].approver"
            ]
        );
        assert_eq!(
            paths(
                r#""slack": {"signing_secret_file": "s", "users": [{"slack_user": "U1", "approver": "alice"}, {"slack_user": "U1", "approver": "alice"}]}"#
            ),
            ["approvers.slack.users[1].slack_user"]
        );
        let text = format!(
            r#"{{"approvers": {{"people": [{{"name": "alice", "token_sha256": "{HASH}"}}], "slack": {{"signing_secret_file": "slack.secret", "users": [{{"slack_user": "U1", "approver": "alice"}}]}}}}}}"#
        );
        let gov = load_str(&text, Format::Json).unwrap();
        let a = gov.approver_settings().unwrap();
        let access = PageAccess::read(a).unwrap();
        let slack = access.slack.as_ref().unwrap();
        assert_eq!(slack.approver_of("U1"), Some("alice"));
        assert_eq!(slack.approver_of("u1"), None);
        // What `effective` prints loads back the same, the page's fields as written.
        let again = load_str(
            &serde_json::json!({"approvers": a.to_json()}).to_string(),
            Format::Json,
        )
        .unwrap();
        assert_eq!(again.approver_settings(), Some(a));
        assert_eq!(
            PageAccess::read(again.approver_settings().unwrap()),
            Ok(access)
        );
    }
}
