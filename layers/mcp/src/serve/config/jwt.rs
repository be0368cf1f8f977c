//! `mcp.jwt`: the identity-provider settings of `mcp serve --http` (issue 22).

use super::*;

/// `mcp.jwt`: `toolgate mcp serve --http` as an OAuth 2.1 resource server (the MCP
/// authorization spec). The verification settings ([`JwtSettings`]: `issuer`, `audience` —
/// this server's resource URI —, `jwks_file` or `jwks_url`, `algorithms`, `leeway_secs`,
/// `required_scopes`) and how a verified token names its agent:
///
/// ```json
/// "jwt": {
///   "issuer": "https://idp.example.com/realms/agents",
///   "audience": "http://127.0.0.1:8931/mcp",
///   "jwks_url": "https://idp.example.com/realms/agents/protocol/openid-connect/certs",
///   "required_scopes": ["mcp:tools"],
///   "agent_claim": "azp",
///   "agents": {"support-bot": "support", "ci-runner": "dev"},
///   "subagent_claim": "act_as"
/// }
/// ```
///
/// The claim `agent_claim` (default `azp`; `client_id`, or any custom claim) must be a
/// string that `agents` maps to a profile; a token whose claim names no profile is refused
/// (401), never given a default agent. With `subagent_claim`, a token carrying that claim
/// calls as that subagent of the mapped profile. `authorization_servers` (default: the
/// issuer) is what the protected-resource metadata (RFC 9728) tells clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpJwt {
    /// How tokens are verified.
    pub settings: JwtSettings,
    /// The claim naming the agent (`agent_claim`).
    pub agent_claim: String,
    /// The claim's value → the agent profile (`agents`).
    pub agents: HashMap<String, String>,
    /// The claim naming a subagent id (`subagent_claim`), when tokens carry one.
    pub subagent_claim: Option<String>,
    /// The authorization servers the metadata names (`authorization_servers`).
    pub authorization_servers: Vec<String>,
}

pub(super) const JWT_EXTRA: &[&str] = &[
    "agent_claim",
    "agents",
    "subagent_claim",
    "authorization_servers",
];

pub(super) fn read_jwt(v: &Value, errs: &mut ConfigErrors) -> Option<McpJwt> {
    let before = errs.errors.len();
    let settings = JwtSettings::read(v, "mcp.jwt", JWT_EXTRA, errs);
    let obj = v.as_object()?;
    let agent_claim = match obj.get("agent_claim") {
        None => String::from("azp"),
        Some(c) => string(c, "mcp.jwt.agent_claim", errs)
            .unwrap_or_default()
            .to_owned(),
    };
    let subagent_claim = obj
        .get("subagent_claim")
        .and_then(|c| string(c, "mcp.jwt.subagent_claim", errs))
        .map(str::to_owned);
    if subagent_claim.as_deref() == Some(agent_claim.as_str()) {
        errs.push(
            "mcp.jwt.subagent_claim",
            format!("`{agent_claim}` is already the `agent_claim`: the subagent comes from another claim"),
        );
    }
    let mut agents = HashMap::new();
    match obj.get("agents") {
        None => errs.push(
            "mcp.jwt.agents",
            format!("missing: map each value of the `{agent_claim}` claim to an agent profile (`{{\"client-id\": \"profile\"}}`)"),
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
        agent_claim,
        agents,
        subagent_claim,
        authorization_servers,
    })
}
