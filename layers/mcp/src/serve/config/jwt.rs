//! `mcp.jwt`: the identity-provider settings of `mcp serve --http` (serve.md, "Agents and
//! approvers from the identity provider").

use super::*;

/// `mcp.jwt`: `toolgate mcp serve --http` as an OAuth 2.1 resource server (the MCP
/// authorization spec). The verification settings ([`JwtSettings`]: `issuer`, `audience` —
/// this server's resource URI —, `jwks_file` or `jwks_url`, `algorithms`, `leeway_secs`,
/// `required_scopes`), what the tokens' header `typ` must say (`token_type`) and how a
/// verified token names its agent:
///
/// ```json
/// "jwt": {
///   "issuer": "https://idp.example.com/realms/agents",
///   "audience": "http://127.0.0.1:8931/mcp",
///   "jwks_url": "https://idp.example.com/realms/agents/protocol/openid-connect/certs",
///   "required_scopes": ["mcp:tools"],
///   "token_type": "at+jwt",
///   "agents": {"support-bot": "support", "ci-runner": "dev"},
///   "subagent_claim": "act_as"
/// }
/// ```
///
/// **The agent.** Without `agent_claim`, the agent is the client the token was issued to:
/// its `client_id` claim (RFC 9068 §2.2, as a certified provider's access tokens name it),
/// else its `azp`; a token carrying both with different values is refused (401) — a
/// stricter reading than RFC 9068, which does not define `azp` for access tokens: toolgate
/// does not choose between two clients. With `agent_claim` (`azp`, `client_id`, or any
/// custom claim) only that claim is read. The value must be a string that `agents` maps to
/// a profile; a token whose claim names no profile is refused (401), never given a default
/// agent. With `subagent_claim`, a token carrying that claim calls as that subagent of the
/// mapped profile. `authorization_servers` (default: the issuer) is what the
/// protected-resource metadata (RFC 9728) tells clients.
///
/// **`token_type`**: `"at+jwt"` takes only tokens whose JOSE header `typ` is `at+jwt` (or
/// `application/at+jwt`), as an RFC 9068 provider types its access tokens; without it a
/// token whose `typ` names another kind of JWT (`dpop+jwt`, `logout+jwt`, …) is still
/// refused ([`toolgate_idp::TokenType`]).
///
/// ```
/// use serde_json::json;
/// use toolgate_mcp::serve::ServeConfig;
/// let c = ServeConfig::read(&json!({"servers": {"a": {"command": "x"}},
///     "jwt": {"issuer": "https://idp.example.com/", "audience": "http://127.0.0.1:8931/mcp",
///             "jwks_file": "jwks.json", "token_type": "at+jwt",
///             "agents": {"support-bot": "support"}}})).unwrap();
/// let j = c.jwt.unwrap();
/// assert_eq!(j.agent_claim, None, "client_id, else azp");
/// assert_eq!(j.token_type, toolgate_idp::TokenType::AccessToken);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpJwt {
    /// How tokens are verified.
    pub settings: JwtSettings,
    /// What the tokens' JOSE header `typ` must say (`token_type`).
    pub token_type: toolgate_idp::TokenType,
    /// The claim naming the agent (`agent_claim`); `None` (not written): `client_id`, else
    /// `azp`, refused when both are present and differ.
    pub agent_claim: Option<String>,
    /// The claim's value → the agent profile (`agents`).
    pub agents: HashMap<String, String>,
    /// The claim naming a subagent id (`subagent_claim`), when tokens carry one.
    pub subagent_claim: Option<String>,
    /// The authorization servers the metadata names (`authorization_servers`).
    pub authorization_servers: Vec<String>,
}

/// The claims naming the agent when `agent_claim` is not written, in order: the client
/// the token was issued to (RFC 9068 §2.2), else its authorized party.
pub(in crate::serve) const DEFAULT_AGENT_CLAIMS: [&str; 2] = ["client_id", "azp"];

pub(super) const JWT_EXTRA: &[&str] = &[
    toolgate_idp::TOKEN_TYPE_FIELD,
    "agent_claim",
    "agents",
    "subagent_claim",
    "authorization_servers",
];

pub(super) fn read_jwt(v: &Value, errs: &mut ConfigErrors) -> Option<McpJwt> {
    let before = errs.errors.len();
    let settings = JwtSettings::read(v, "mcp.jwt", JWT_EXTRA, errs);
    let obj = v.as_object()?;
    let token_type = toolgate_idp::TokenType::read(v, "mcp.jwt", errs);
    let agent_claim = obj.get("agent_claim").map(|c| {
        string(c, "mcp.jwt.agent_claim", errs)
            .unwrap_or_default()
            .to_owned()
    });
    let subagent_claim = obj
        .get("subagent_claim")
        .and_then(|c| string(c, "mcp.jwt.subagent_claim", errs))
        .map(str::to_owned);
    if let Some(sub) = &subagent_claim {
        match &agent_claim {
            Some(a) if a == sub => errs.push(
                "mcp.jwt.subagent_claim",
                format!("`{sub}` is already the `agent_claim`: the subagent comes from another claim"),
            ),
            None if DEFAULT_AGENT_CLAIMS.contains(&sub.as_str()) => errs.push(
                "mcp.jwt.subagent_claim",
                format!("`{sub}` names the agent (without `agent_claim`: `client_id`, else `azp`): the subagent comes from another claim"),
            ),
            _ => {}
        }
    }
    let named = match &agent_claim {
        Some(c) => format!("`{c}` claim"),
        None => String::from("`client_id` claim (else `azp`)"),
    };
    let mut agents = HashMap::new();
    match obj.get("agents") {
        None => errs.push(
            "mcp.jwt.agents",
            format!("missing: map each value of the {named} to an agent profile (`{{\"client-id\": \"profile\"}}`)"),
        ),
        Some(Value::Object(map)) if map.is_empty() => errs.push(
            "mcp.jwt.agents",
            "map at least one claim value to an agent profile",
        ),
        Some(Value::Object(map)) => {
            for (claim, profile) in map {
                if let Some(p) = string(profile, &format!("mcp.jwt.agents.{claim}"), errs) {
                    agents.insert(claim.clone(), p.to_owned());
                }
            }
        }
        Some(other) => errs.push(
            "mcp.jwt.agents",
            format!("expected an object of claim values to agent profiles, found {other}"),
        ),
    }
    let authorization_servers = match obj.get("authorization_servers") {
        None => settings
            .as_ref()
            .map(|s| vec![s.issuer.clone()])
            .unwrap_or_default(),
        Some(Value::Array(list)) if !list.is_empty() => list
            .iter()
            .enumerate()
            .filter_map(|(i, u)| {
                let path = format!("mcp.jwt.authorization_servers[{i}]");
                match u.as_str() {
                    Some(u) if u.starts_with("https://") || u.starts_with("http://") => {
                        Some(u.to_owned())
                    }
                    _ => {
                        errs.push(path, format!("expected an `https://` URL, found {u}"));
                        None
                    }
                }
            })
            .collect(),
        Some(other) => {
            errs.push(
                "mcp.jwt.authorization_servers",
                format!("expected a non-empty list of URLs, found {other}"),
            );
            Vec::new()
        }
    };
    if errs.errors.len() > before {
        return None;
    }
    Some(McpJwt {
        settings: settings?,
        token_type,
        agent_claim,
        agents,
        subagent_claim,
        authorization_servers,
    })
}
