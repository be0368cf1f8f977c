//! The `approvers` section: who may answer held calls and edit the stored tenant policy on
//! the approval page (`toolgate serve`), how they sign in, and where the page listens.
//!
//! ```
//! use toolgate_engine::config::{load_str, Format};
//! let gov = load_str(r#"{"approvers": {
//!     "listen": "127.0.0.1:8788",
//!     "people": [
//!         {"name": "alice", "token_sha256": "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b",
//!          "edit_policy": true},
//!         {"name": "bob", "token_sha256": "81b637d8fcd2c6da6359e6963113a1170de795e4b725b84d1e0b4cfd9ec58ce9",
//!          "tools": [{"server": "github", "tool": "create_*"}]}
//!     ]}}"#, Format::Json).unwrap();
//! let a = gov.approver_settings().unwrap();
//! assert_eq!(a.people.len(), 2);
//! assert!(a.people[0].edit_policy && !a.people[1].edit_policy);
//!
//! let err = load_str(r#"{"approvers": {"people": [{"name": "a", "token_sha256": "nope"}]}}"#, Format::Json)
//!     .unwrap_err();
//! assert_eq!(err.errors[0].path, "approvers.people[0].token_sha256");
//! ```

use std::net::SocketAddr;

use serde_json::{Map, Value, json};
use toolgate_core::{ToolIdentity, ToolKind};

use crate::error::{ConfigErrors, Obj, index};
use crate::policy::Glob;

pub(crate) mod empty;
mod read;

pub use empty::{EMPTY_TOKEN_MESSAGE, EMPTY_TOKEN_SHA256};
pub(crate) use read::read_approvers;
use read::url_authority;

/// The address the approval page binds when the configuration names none: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8788";

/// How approvers prove who they are.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApproverAuth {
    /// Each approver signs in with a token; the configuration keeps its SHA-256 (hex).
    Token,
    /// A reverse proxy in front of the page authenticates people and puts the approver's
    /// name in this header; the page trusts it (bind the page where only the proxy reaches
    /// it).
    ProxyHeader(String),
    /// Each request carries an access token of the identity provider, verified as the MCP
    /// server verifies its callers': the approver's name and groups come from its claims
    /// (`auth: jwt`, the `jwt` settings; serve.md, "Agents and approvers from the identity
    /// provider").
    Jwt(Box<JwtApprovers>),
}

/// `approvers.jwt`: how the page takes identity-provider tokens. The verification settings
/// (`issuer`, `audience`, `jwks_file` or `jwks_url`, `algorithms`, …) are kept as written
/// ([`JwtApprovers::verification`]): the identity-provider crate reads and checks them
/// (`toolgate_idp::JwtSettings`), the approval page at start and on reload, `check` beside
/// the engine's readers. The engine reads its own fields ([`JwtApprovers::FIELDS`]):
///
/// - `name_claim` (default `preferred_username`): the claim naming the approver, the name
///   recorded on every answer (falls back to nothing: a token without it is refused);
/// - `groups_claim` (default `groups`): the claim listing the approver's groups or roles,
///   mapped to rights by `approvers.groups`;
/// - `header` (optional): a header a trusted proxy sets to the access token
///   (oauth2-proxy's `X-Forwarded-Access-Token`); the token is verified all the same.
///   `Authorization: Bearer` is always read (scripts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtApprovers {
    /// The claim naming the approver.
    pub name_claim: String,
    /// The claim listing the approver's groups or roles.
    pub groups_claim: String,
    /// A header carrying the access token, set by a trusted proxy.
    pub header: Option<String>,
    /// Every other field of `approvers.jwt`, as written: how tokens are verified.
    verification: Map<String, Value>,
}

impl JwtApprovers {
    /// The fields of `approvers.jwt` the engine reads itself; every other one is a
    /// verification setting, kept as written ([`JwtApprovers::verification`]).
    pub const FIELDS: [&'static str; 3] = ["name_claim", "groups_claim", "header"];

    /// The verification settings as written: every field of `approvers.jwt` but the
    /// engine's own ([`JwtApprovers::FIELDS`]). The engine decides nothing with them;
    /// `toolgate_idp::JwtSettings::read` reads them, unknown fields included.
    ///
    /// ```
    /// use toolgate_engine::approvers::ApproverAuth;
    /// use toolgate_engine::config::{load_str, Format};
    /// let gov = load_str(r#"{"approvers": {"auth": "jwt",
    ///     "jwt": {"issuer": "https://idp.example.com/", "audience": "toolgate-approvals",
    ///             "jwks_file": "jwks.json", "groups_claim": "roles"},
    ///     "groups": [{"group": "sre"}]}}"#, Format::Json).unwrap();
    /// let ApproverAuth::Jwt(j) = &gov.approver_settings().unwrap().auth else { unreachable!() };
    /// assert_eq!(j.groups_claim, "roles");
    /// assert_eq!(j.verification()["jwks_file"], "jwks.json");
    /// assert!(!j.verification().contains_key("groups_claim"));
    /// ```
    pub fn verification(&self) -> &Map<String, Value> {
        &self.verification
    }
}

/// Rights given to everyone in a group or role of the identity provider
/// (`approvers.groups[i]`, with `auth: jwt`): the same `tools` and `edit_policy` as a
/// named person's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApproverGroup {
    /// The group's or role's name as the groups claim lists it, compared exactly.
    pub group: String,
    /// The held calls its members may answer; `None`: every one.
    pub tools: Option<Vec<ToolSelector>>,
    /// Whether its members may replace the stored tenant policy.
    pub edit_policy: bool,
}

/// Which held calls an approver may answer: every field it sets must match, as in a
/// tenant rule's selectors (R18, R19).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolSelector {
    /// The tool's own name (`*` patterns).
    pub tool: Option<Glob>,
    /// The MCP server (`*` patterns); never matches an `http` or `local` tool.
    pub server: Option<Glob>,
    /// The tool's kind.
    pub kind: Option<ToolKind>,
    /// The calling agent: its profile name, or a subagent's id (`*` patterns).
    pub agent: Option<Glob>,
}

impl ToolSelector {
    /// Whether the selector matches a call to `identity` made by `agent`.
    pub fn matches(&self, identity: &ToolIdentity, agent: &str) -> bool {
        if self.kind.is_some_and(|k| k != identity.kind()) {
            return false;
        }
        if let Some(server) = &self.server
            && (identity.kind() != ToolKind::Mcp || !server.matches(identity.source()))
        {
            return false;
        }
        if let Some(tool) = &self.tool
            && !tool.matches(identity.name())
        {
            return false;
        }
        self.agent.as_ref().is_none_or(|a| a.matches(agent))
    }

    /// Whether every call `grant` could ever answer lies inside this selector, whatever
    /// tools exist now or arrive later (R45, R52): each field the selector sets — the
    /// agent's included — is set by the grant to a name it matches or to the very same
    /// pattern.
    fn covers_grant(&self, grant: &crate::grant::Grant) -> bool {
        let within = |inner: Option<&Glob>, outer: &Glob| {
            outer.as_str() == "*" || inner.is_some_and(|i| outer.covers(i))
        };
        let select = grant.selection();
        let kind_ok = match self.kind {
            None => true,
            Some(k) => {
                select.kind() == Some(k) || (k == ToolKind::Mcp && select.server().is_some())
            }
        };
        // A selector's `server` matches only MCP tools (R18): even `*` covers a grant only
        // when the grant, too, selects MCP tools alone (by its own `server` or `kind`).
        let server_ok = |s: &Glob| match select.server() {
            Some(inner) => s.as_str() == "*" || s.covers(inner),
            None => s.as_str() == "*" && select.kind() == Some(ToolKind::Mcp),
        };
        kind_ok
            && self.server.as_ref().is_none_or(server_ok)
            && self.tool.as_ref().is_none_or(|t| within(select.tool(), t))
            && self.agent.as_ref().is_none_or(|a| within(grant.agent(), a))
    }

    fn to_json(&self) -> Value {
        let mut o = Map::new();
        if let Some(g) = &self.tool {
            o.insert("tool".into(), g.as_str().into());
        }
        if let Some(g) = &self.server {
            o.insert("server".into(), g.as_str().into());
        }
        if let Some(k) = self.kind {
            o.insert("kind".into(), k.as_str().into());
        }
        if let Some(g) = &self.agent {
            o.insert("agent".into(), g.as_str().into());
        }
        Value::Object(o)
    }
}

/// One person who may answer held calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approver {
    /// The name recorded on every answer this person gives.
    pub name: String,
    /// The SHA-256 of the person's sign-in token, 64 lower-case hex digits (token auth).
    pub token_sha256: Option<String>,
    /// The held calls this person may answer; `None`: every one.
    pub tools: Option<Vec<ToolSelector>>,
    /// Whether this person may replace the stored tenant policy.
    pub edit_policy: bool,
    /// `may_edit` (approval-page.md, "Approve with edits"): whether this person may change a
    /// held call's input before approving it (the edited call is decided again in full,
    /// R38). Off by default.
    pub may_edit: bool,
}

impl Approver {
    /// Whether this person may answer a held call of the tool known by `identities` (the
    /// records behind its qualified name), made by `agent`: with selectors, only when they
    /// cover every one of those records (R24: a collision never loosens, so rights for one
    /// record never answer for another behind the same name), and never for a call naming
    /// no record at all.
    ///
    /// ```
    /// use toolgate_core::ToolIdentity;
    /// use toolgate_engine::config::{load_str, Format};
    /// let gov = load_str(r#"{"approvers": {"auth": "proxy_header", "header": "X-User",
    ///     "people": [{"name": "bob", "tools": [{"server": "github"}]}]}}"#, Format::Json).unwrap();
    /// let bob = gov.approver_settings().unwrap().approver("bob").unwrap();
    /// let mcp = ToolIdentity::mcp("github", "create_issue");
    /// let local = ToolIdentity::toolset("github", "create_issue"); // the same qualified name
    /// assert!(bob.may_answer(&[mcp.clone()], "support"));
    /// assert!(!bob.may_answer(&[mcp, local], "support"), "not for the local record");
    /// ```
    pub fn may_answer(&self, identities: &[ToolIdentity], agent: &str) -> bool {
        match &self.tools {
            None => true,
            Some(selectors) => {
                !identities.is_empty()
                    && identities
                        .iter()
                        .all(|id| selectors.iter().any(|s| s.matches(id, agent)))
            }
        }
    }
}

/// Why a person may not give a grant ([`Approver::may_grant`]): the grant's field that goes
/// beyond their rights (`tool` or `agent`) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRefused {
    /// The grant's field: `tool` or `agent`.
    pub field: &'static str,
    /// The problem (lower case, no trailing period).
    pub message: String,
}

impl Approver {
    /// Whether this person may give `grant` (R45): an approver grants only what their
    /// `tools` selectors cover. `tools` are the records behind each tool of the
    /// configuration (one slice per qualified name, as [`Approver::may_answer`] takes them).
    ///
    /// Without selectors, every grant. With selectors: the grant must select at least one
    /// configured tool (rights over a tool nobody declared cannot be checked), and for every
    /// tool it selects, every record behind the name must be covered (R24) — for the grant's
    /// agent when it is one name; for an agent pattern (`*`), only by selectors that leave
    /// the agent open (or name that very pattern), since the pattern may reach agents the
    /// selectors do not.
    ///
    /// ```
    /// use toolgate_core::ToolIdentity;
    /// use toolgate_engine::config::{load_str, Format};
    /// use toolgate_engine::grant::parse_grants;
    /// let gov = load_str(r#"{"approvers": {"auth": "proxy_header", "header": "X-User",
    ///     "people": [{"name": "bob", "tools": [{"tool": "refund_*", "agent": "support"}]}]}}"#,
    ///     Format::Json).unwrap();
    /// let bob = gov.approver_settings().unwrap().approver("bob").unwrap();
    /// let tools = [vec![ToolIdentity::http("refund_order")], vec![ToolIdentity::http("delete_user")]];
    /// let grant = |agent: &str, tool: &str| parse_grants(&format!(r#"[{{"id": "g", "agent": "{agent}",
    ///     "tool": "{tool}", "expires_at": 1, "granted_by": "bob", "reason": "r"}}]"#)).unwrap().remove(0);
    /// assert!(bob.may_grant(&grant("support", "refund_order"), tools.iter().map(Vec::as_slice)).is_ok());
    /// let wide = bob.may_grant(&grant("support", "*"), tools.iter().map(Vec::as_slice)).unwrap_err();
    /// assert_eq!(wide.field, "tool");
    /// let anyone = bob.may_grant(&grant("*", "refund_order"), tools.iter().map(Vec::as_slice)).unwrap_err();
    /// assert_eq!(anyone.field, "agent");
    /// ```
    pub fn may_grant<'a>(
        &self,
        grant: &crate::grant::Grant,
        tools: impl IntoIterator<Item = &'a [ToolIdentity]>,
    ) -> Result<(), GrantRefused> {
        let Some(selectors) = &self.tools else {
            return Ok(());
        };
        let agent = grant.agent().map_or("*", Glob::as_str);
        let pattern = agent.contains('*');
        let mut selected = 0usize;
        for records in tools {
            if !records.iter().any(|id| grant.selects_tool(id)) {
                continue;
            }
            selected += 1;
            let covered = |id: &ToolIdentity| {
                selectors.iter().any(|s| {
                    if !pattern {
                        return s.matches(id, agent);
                    }
                    let open = s
                        .agent
                        .as_ref()
                        .is_none_or(|a| a.as_str() == "*" || a.as_str() == agent);
                    open && ToolSelector {
                        agent: None,
                        ..s.clone()
                    }
                    .matches(id, agent)
                })
            };
            if let Some(id) = records.iter().find(|id| !covered(id)) {
                let name = match id.server() {
                    Some(server) => format!("{server} / {}", id.name()),
                    None => id.name().to_owned(),
                };
                let tool_covered = selectors.iter().any(|s| {
                    ToolSelector {
                        agent: None,
                        ..s.clone()
                    }
                    .matches(id, agent)
                });
                return Err(if tool_covered {
                    GrantRefused {
                        field: "agent",
                        message: format!(
                            "`{}` may answer calls of `{name}` only for some agents, not for every agent `{agent}` names",
                            self.name
                        ),
                    }
                } else {
                    GrantRefused {
                        field: "tool",
                        message: format!(
                            "`{}` may not answer calls of `{name}`, which the grant would answer",
                            self.name
                        ),
                    }
                });
            }
        }
        // "No wider than the card": the grant's selection itself, not only the tools known
        // now, must lie inside one of the person's selectors, so a tool discovered later
        // (R52) never falls under a grant its giver could not answer.
        if !selectors.iter().any(|s| s.covers_grant(grant)) {
            let any_agent = |s: &ToolSelector| {
                ToolSelector {
                    agent: None,
                    ..s.clone()
                }
                .covers_grant(grant)
            };
            if selectors.iter().any(any_agent) {
                return Err(GrantRefused {
                    field: "agent",
                    message: format!(
                        "`{}` may answer `{}` only for some agents, not for every agent `{agent}` names",
                        self.name,
                        grant_selection(grant)
                    ),
                });
            }
            return Err(GrantRefused {
                field: "tool",
                message: format!(
                    "the grant selects `{}`, wider than any tools `{}` may answer; narrow its `tool`, `server` or `kind` to what their rights cover",
                    grant_selection(grant),
                    self.name
                ),
            });
        }
        if selected == 0 {
            return Err(GrantRefused {
                field: "tool",
                message: format!(
                    "the grant selects no tool of the configuration, so `{}`'s rights over it cannot be checked",
                    self.name
                ),
            });
        }
        Ok(())
    }
}

/// A grant's tool selection as a person reads it: `server / tool (kind)`.
fn grant_selection(grant: &crate::grant::Grant) -> String {
    let select = grant.selection();
    let mut out = String::new();
    if let Some(server) = select.server() {
        out.push_str(server.as_str());
        out.push_str(" / ");
    }
    out.push_str(select.tool().map_or("*", Glob::as_str));
    if let Some(kind) = select.kind() {
        out.push_str(&format!(" ({})", kind.as_str()));
    }
    out
}

/// The `approvers` section.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApproverSettings {
    /// How approvers sign in (`auth`: `token`, the default, or `proxy_header` with `header`).
    pub auth: ApproverAuth,
    /// Where the page listens (default [`DEFAULT_LISTEN`], loopback).
    pub listen: SocketAddr,
    /// The people; at least one.
    pub people: Vec<Approver>,
    /// A URL that gets a JSON POST for each new held call (optional).
    pub webhook: Option<String>,
    /// The page's address as people reach it, for links in webhook posts (optional).
    pub public_url: Option<String>,
    /// `allowed_hosts`: the `Host` values (`name` or `name:port`, lower case) the page
    /// answers, and the origins (`http(s)://` one of them) it takes a form from; `None`:
    /// the defaults, [`ApproverSettings::default_hosts`]. A request for another host is
    /// refused (421), so a DNS-rebinding page cannot act as a signed-in approver.
    pub allowed_hosts: Option<Vec<String>>,
    /// `groups`: rights by the identity provider's groups or roles (`auth: jwt` only).
    pub groups: Vec<ApproverGroup>,
    /// The page's own fields of the section, as written: `api_keys` (the HTTP API's
    /// management keys) and `slack` (answering from Slack). The engine decides nothing
    /// with them and does not read them; the approval page reads and checks them
    /// (`toolgate_web::access`), and `check` reports their errors with the engine's.
    page: Map<String, Value>,
}

impl ApproverSettings {
    /// The fields of `approvers` that the approval page owns, kept as written and not read
    /// by the engine: `api_keys` and `slack`.
    pub const PAGE_FIELDS: [&'static str; 2] = ["api_keys", "slack"];

    /// One of the page's fields ([`ApproverSettings::PAGE_FIELDS`]) as written, if present:
    /// the approval page reads it (`toolgate_web::access`).
    ///
    /// ```
    /// use toolgate_engine::config::{load_str, Format};
    /// let gov = load_str(r#"{"approvers": {"people": [{"name": "a", "token_sha256": "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"}],
    ///     "slack": {"signing_secret_file": "slack.secret", "users": []}}}"#, Format::Json).unwrap();
    /// let a = gov.approver_settings().unwrap();
    /// assert_eq!(a.page_field("slack").unwrap()["signing_secret_file"], "slack.secret");
    /// assert!(a.page_field("api_keys").is_none());
    /// ```
    pub fn page_field(&self, name: &str) -> Option<&Value> {
        self.page.get(name)
    }

    /// The hosts the page answers when `allowed_hosts` is not set, for a page listening on
    /// `listen`: `localhost`, `127.0.0.1` and `[::1]` with its port, the listen address
    /// itself (unless it is unspecified, `0.0.0.0`), and the host of `public_url`.
    ///
    /// ```
    /// use toolgate_engine::config::{load_str, Format};
    /// let gov = load_str(r#"{"approvers": {"public_url": "https://approve.example.com/",
    ///     "people": [{"name": "a", "token_sha256": "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"}]}}"#,
    ///     Format::Json).unwrap();
    /// let a = gov.approver_settings().unwrap();
    /// assert_eq!(
    ///     a.default_hosts("127.0.0.1:8788".parse().unwrap()),
    ///     ["localhost:8788", "127.0.0.1:8788", "[::1]:8788", "approve.example.com"]
    /// );
    /// ```
    pub fn default_hosts(&self, listen: SocketAddr) -> Vec<String> {
        let port = listen.port();
        let mut hosts = vec![
            format!("localhost:{port}"),
            format!("127.0.0.1:{port}"),
            format!("[::1]:{port}"),
        ];
        if !listen.ip().is_unspecified() {
            hosts.push(listen.to_string());
        }
        if let Some(host) = self.public_url.as_deref().and_then(url_authority) {
            hosts.push(host);
        }
        let mut seen = Vec::new();
        hosts.retain(|h| {
            let first = !seen.contains(h);
            seen.push(h.clone());
            first
        });
        hosts
    }

    /// The hosts the page answers: `allowed_hosts`, or the defaults for `listen`.
    pub fn hosts(&self, listen: SocketAddr) -> Vec<String> {
        self.allowed_hosts
            .clone()
            .unwrap_or_else(|| self.default_hosts(listen))
    }

    /// Whether a grant given by `granted_by` may answer a call of the tool known by
    /// `identities` made by `agent`, under the rights in force now (R45, R47, R52): only
    /// while `granted_by` is a named approver (`people`) whose selectors cover the call. A
    /// person known only through identity-provider groups has no rights that can be read
    /// back when the grant is used (a grant records no groups), so such a grant answers
    /// nothing: the stricter reading.
    ///
    /// ```
    /// use toolgate_core::ToolIdentity;
    /// use toolgate_engine::config::{load_str, Format};
    /// let gov = load_str(r#"{"approvers": {"auth": "proxy_header", "header": "X-User",
    ///     "people": [{"name": "bob", "tools": [{"server": "bank", "tool": "lookup"}]}]}}"#,
    ///     Format::Json).unwrap();
    /// let a = gov.approver_settings().unwrap();
    /// assert!(a.grant_may_answer("bob", &[ToolIdentity::mcp("bank", "lookup")], "agent"));
    /// assert!(!a.grant_may_answer("bob", &[ToolIdentity::mcp("bank", "transfer")], "agent"));
    /// assert!(!a.grant_may_answer("eve", &[ToolIdentity::mcp("bank", "lookup")], "agent"));
    /// ```
    pub fn grant_may_answer(
        &self,
        granted_by: &str,
        identities: &[ToolIdentity],
        agent: &str,
    ) -> bool {
        self.approver(granted_by)
            .is_some_and(|p| p.may_answer(identities, agent))
    }

    /// The approver named `name`, compared exactly.
    pub fn approver(&self, name: &str) -> Option<&Approver> {
        self.people.iter().find(|a| a.name == name)
    }

    /// The rights of an identity-provider approver named `name` who is in `groups`: the
    /// union of the named person's (when `people` names them) and every listed group's —
    /// the held calls any of them may answer, policy editing when any may. `None` when
    /// neither names them: a token that verifies is no approver by itself.
    ///
    /// ```
    /// use toolgate_core::ToolIdentity;
    /// use toolgate_engine::config::{load_str, Format};
    /// let gov = load_str(r#"{"approvers": {"auth": "jwt",
    ///     "jwt": {"issuer": "https://idp.example.com/", "audience": "toolgate-approvals", "jwks_file": "jwks.json"},
    ///     "people": [{"name": "carol", "edit_policy": true}],
    ///     "groups": [{"group": "payments", "tools": [{"tool": "refund_*"}]},
    ///                {"group": "github-admins", "tools": [{"server": "github"}]}]}}"#,
    ///     Format::Json).unwrap();
    /// let a = gov.approver_settings().unwrap();
    /// let dave = a.rights("dave", &["payments"]).unwrap();
    /// assert!(dave.may_answer(&[ToolIdentity::http("refund_order")], "support"));
    /// assert!(!dave.may_answer(&[ToolIdentity::mcp("github", "create_issue")], "support"));
    /// assert!(!dave.edit_policy);
    /// assert!(a.rights("carol", &[]).unwrap().edit_policy);
    /// assert!(a.rights("mallory", &["everyone"]).is_none());
    /// ```
    pub fn rights(&self, name: &str, groups: &[&str]) -> Option<Approver> {
        let person = self.approver(name);
        let matched: Vec<&ApproverGroup> = self
            .groups
            .iter()
            .filter(|g| groups.contains(&g.group.as_str()))
            .collect();
        if person.is_none() && matched.is_empty() {
            return None;
        }
        let mut tools: Option<Vec<ToolSelector>> = Some(Vec::new());
        let mut edit_policy = false;
        let sources = person
            .map(|p| (&p.tools, p.edit_policy))
            .into_iter()
            .chain(matched.iter().map(|g| (&g.tools, g.edit_policy)));
        for (t, edit) in sources {
            edit_policy |= edit;
            match (t, &mut tools) {
                (None, _) => tools = None,
                (Some(sel), Some(all)) => all.extend(sel.iter().cloned()),
                (Some(_), None) => {}
            }
        }
        Some(Approver {
            name: name.to_owned(),
            token_sha256: None,
            tools,
            edit_policy,
            may_edit: person.is_some_and(|p| p.may_edit),
        })
    }

    /// The section as configuration JSON (what `effective` prints).
    pub fn to_json(&self) -> Value {
        let mut o = Map::new();
        match &self.auth {
            ApproverAuth::Token => {
                o.insert("auth".into(), "token".into());
            }
            ApproverAuth::ProxyHeader(h) => {
                o.insert("auth".into(), "proxy_header".into());
                o.insert("header".into(), h.clone().into());
            }
            ApproverAuth::Jwt(j) => {
                o.insert("auth".into(), "jwt".into());
                let mut s = j.verification.clone();
                s.insert("name_claim".into(), j.name_claim.clone().into());
                s.insert("groups_claim".into(), j.groups_claim.clone().into());
                if let Some(h) = &j.header {
                    s.insert("header".into(), h.clone().into());
                }
                o.insert("jwt".into(), Value::Object(s));
            }
        }
        o.insert("listen".into(), self.listen.to_string().into());
        if let Some(w) = &self.webhook {
            o.insert("webhook".into(), w.clone().into());
        }
        if let Some(u) = &self.public_url {
            o.insert("public_url".into(), u.clone().into());
        }
        if let Some(h) = &self.allowed_hosts {
            o.insert("allowed_hosts".into(), h.clone().into());
        }
        let people = self
            .people
            .iter()
            .map(|a| {
                let mut p = Map::new();
                p.insert("name".into(), a.name.clone().into());
                if let Some(t) = &a.token_sha256 {
                    p.insert("token_sha256".into(), t.clone().into());
                }
                if let Some(tools) = &a.tools {
                    p.insert(
                        "tools".into(),
                        Value::Array(tools.iter().map(ToolSelector::to_json).collect()),
                    );
                }
                p.insert("edit_policy".into(), a.edit_policy.into());
                if a.may_edit {
                    p.insert("may_edit".into(), true.into());
                }
                Value::Object(p)
            })
            .collect();
        o.insert("people".into(), Value::Array(people));
        if !self.groups.is_empty() {
            let groups = self
                .groups
                .iter()
                .map(|g| {
                    let mut p = Map::new();
                    p.insert("group".into(), g.group.clone().into());
                    if let Some(tools) = &g.tools {
                        p.insert(
                            "tools".into(),
                            Value::Array(tools.iter().map(ToolSelector::to_json).collect()),
                        );
                    }
                    p.insert("edit_policy".into(), g.edit_policy.into());
                    Value::Object(p)
                })
                .collect();
            o.insert("groups".into(), Value::Array(groups));
        }
        for (k, v) in &self.page {
            o.insert(k.clone(), v.clone());
        }
        json!(o)
    }
}

#[cfg(test)]
mod tests;
