//! Who a streamable HTTP request speaks for: static bearer tokens (`mcp.tokens`) and
//! identity-provider JWTs (`mcp.jwt`; serve.md, "Agents and approvers from the identity
//! provider"), with the RFC 9728 metadata and the 401/403 answers.

use super::config::DEFAULT_AGENT_CLAIMS;
use super::*;

/// The lower-case hex SHA-256 of a bearer token, as `mcp.tokens[i].sha256` stores it.
pub fn token_hash(token: &str) -> String {
    toolgate_core::id::hex(&Sha256::digest(token.as_bytes()))
}

/// Who a streamable HTTP request authenticated as: its bearer token's profile, and the
/// token's hash (none for an `open_as` server); for a JWT, the binding key of its
/// principal and client instead of a hash, and the verified principal.
#[derive(Debug, Clone)]
pub(super) struct Authenticated {
    pub(super) agent: String,
    pub(super) token: Option<String>,
    pub(super) jwt: Option<JwtCaller>,
}

/// The caller a verified JWT names (`mcp.jwt`).
#[derive(Debug, Clone)]
pub(super) struct JwtCaller {
    pub(super) principal: toolgate_idp::Principal,
    /// The value of the agent claim.
    pub(super) client: String,
    /// The subagent id of the subagent claim, when the token has one.
    pub(super) subagent: Option<String>,
    /// The token as it came (RFC 8693: the subject token of an exchange).
    pub(super) subject_token: crate::SubjectToken,
}

/// `mcp.jwt` in force: its settings, the verifier with the provider's keys, and the paths
/// its protected-resource metadata is served at.
pub(super) struct Jwt {
    pub(super) config: McpJwt,
    pub(super) verifier: toolgate_idp::Verifier,
    pub(super) metadata_paths: Vec<String>,
    pub(super) metadata_url: String,
}

/// The bearer tokens in force (`mcp.tokens`, `mcp.jwt`): replaced whole on a reload, so a
/// revoked token or key stops working for the next request.
#[derive(Default)]
pub(super) struct Tokens {
    /// Token hash → agent profile.
    pub(super) agents: HashMap<String, String>,
    /// Token hash → the name records give it.
    pub(super) names: HashMap<String, String>,
    /// Identity-provider tokens, when configured.
    pub(super) jwt: Option<Jwt>,
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokens")
            .field("static", &self.agents.len())
            .field("jwt", &self.jwt.as_ref().map(|j| &j.verifier))
            .finish()
    }
}

/// A refused HTTP request: status, `WWW-Authenticate` challenge, body.
pub(super) type AuthRefusal = (hyper::StatusCode, String, String);

impl Tokens {
    /// The tokens of `config`, with the identity provider's keys read or fetched.
    pub(super) async fn load(config: &ServeConfig) -> Result<Self, ServeError> {
        let jwt = match &config.jwt {
            None => None,
            Some(j) => {
                let verifier = toolgate_idp::Verifier::start_typed(
                    j.settings.clone(),
                    j.token_type,
                    "mcp.jwt",
                )
                .await
                .map_err(ServeError::Config)?;
                Some(Jwt {
                    metadata_paths: toolgate_idp::metadata_paths(&j.settings.audience),
                    metadata_url: toolgate_idp::metadata_url(&j.settings.audience),
                    config: j.clone(),
                    verifier,
                })
            }
        };
        Ok(Self {
            agents: config.tokens.clone(),
            names: config.token_names.clone(),
            jwt,
        })
    }

    /// How records name the token with this hash: its configured name, else the first twelve
    /// hex digits of its hash (never the token).
    pub(super) fn credential(&self, hash: &str) -> String {
        match self.names.get(hash) {
            Some(name) => format!("token `{name}`"),
            None => format!("token sha256:{}", hash.get(..12).unwrap_or(hash)),
        }
    }

    /// The protected-resource metadata (RFC 9728), when `path` is where it is served.
    pub(super) fn metadata(&self, path: &str) -> Option<Value> {
        let j = self.jwt.as_ref()?;
        j.metadata_paths.iter().any(|p| p == path).then(|| {
            toolgate_idp::protected_resource_metadata(
                &j.config.settings.audience,
                &j.config.authorization_servers,
                &j.config.settings.required_scopes,
            )
        })
    }

    pub(super) fn refusal(
        &self,
        status: hyper::StatusCode,
        why: &toolgate_idp::Rejection,
    ) -> AuthRefusal {
        let metadata = self.jwt.as_ref().map(|j| j.metadata_url.as_str());
        (status, why.challenge(metadata), format!("{why}\n"))
    }

    /// Who the request's bearer token speaks for: a listed static token (by its hash), else
    /// a JWT verified against the identity provider's keys whose agent claim names a
    /// profile ([`agent_claim_of`]). Anything else is refused: 401 (no token, an unknown
    /// one, one that does not verify, a claim naming no profile, `client_id` and `azp`
    /// naming different clients) or 403 (a missing scope).
    pub(super) async fn authenticate(
        &self,
        headers: &hyper::HeaderMap,
    ) -> Result<Authenticated, AuthRefusal> {
        let metadata = self.jwt.as_ref().map(|j| j.metadata_url.as_str());
        let token = headers
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(toolgate_idp::bearer_token)
            .map(str::trim)
            .filter(|t| !t.is_empty());
        let Some(token) = token else {
            let challenge = match metadata {
                Some(m) => format!("Bearer resource_metadata=\"{m}\""),
                None => String::from("Bearer"),
            };
            let body = if self.jwt.is_some() {
                "a bearer token is required: a listed token, or an access token of the identity provider (see the protected-resource metadata)\n"
            } else {
                "a bearer token listed in the toolgate configuration is required\n"
            };
            return Err((hyper::StatusCode::UNAUTHORIZED, challenge, body.to_owned()));
        };
        let hash = token_hash(token);
        if let Some(agent) = self.agents.get(&hash) {
            return Ok(Authenticated {
                agent: agent.clone(),
                token: Some(hash),
                jwt: None,
            });
        }
        let unauthorized = hyper::StatusCode::UNAUTHORIZED;
        let Some(j) = &self.jwt else {
            return Err((
                unauthorized,
                String::from("Bearer error=\"invalid_token\""),
                String::from("a bearer token listed in the toolgate configuration is required\n"),
            ));
        };
        let verified = match j.verifier.verify(token).await {
            Ok(v) => v,
            Err(why) => {
                let status = if why.status() == 403 {
                    hyper::StatusCode::FORBIDDEN
                } else {
                    unauthorized
                };
                tracing::info!(target: "toolgate_mcp::serve", "a bearer token was refused: {why}");
                return Err(self.refusal(status, &why));
            }
        };
        let invalid =
            |why: String| self.refusal(unauthorized, &toolgate_idp::Rejection::Invalid(why));
        let (claim, client) =
            agent_claim_of(&verified, j.config.agent_claim.as_deref()).map_err(invalid)?;
        let Some(agent) = j.config.agents.get(client) else {
            return Err(invalid(format!(
                "the token's `{claim}` `{client}` names no agent profile (`mcp.jwt.agents`): no agent is assumed"
            )));
        };
        let subagent = match &j.config.subagent_claim {
            None => None,
            Some(c) => match verified.claims.get(c) {
                None => None,
                Some(_) => match verified.claim_str(c) {
                    Some(s) => Some(s.to_owned()),
                    None => {
                        return Err(invalid(format!(
                            "the token's `{c}` (the subagent claim) is not a non-blank string"
                        )));
                    }
                },
            },
        };
        let client = client.to_owned();
        let principal = verified.principal.clone();
        Ok(Authenticated {
            agent: agent.clone(),
            token: Some(format!(
                "jwt {}\0{}\0{client}\0{}",
                principal.issuer,
                principal.subject,
                subagent.as_deref().unwrap_or_default()
            )),
            jwt: Some(JwtCaller {
                // RFC 8693: exchanged for a server that takes calls on the caller's behalf.
                subject_token: crate::SubjectToken::new(token, principal.subject.clone()),
                principal,
                client,
                subagent,
            }),
        })
    }
}

/// The claim naming a verified token's agent and its value. With `agent_claim` written,
/// only that claim. Without it, the client the token was issued to: `client_id` (RFC 9068
/// §2.2), else `azp`; a token carrying both with different values is refused, and so is one
/// where either is present but not a non-blank string — toolgate does not choose between
/// two clients.
///
/// # Errors
///
/// Why no agent is named (the 401's text).
fn agent_claim_of<'a>(
    verified: &'a toolgate_idp::Verified,
    agent_claim: Option<&'a str>,
) -> Result<(&'a str, &'a str), String> {
    if let Some(claim) = agent_claim {
        return verified
            .claim_str(claim)
            .map(|v| (claim, v))
            .ok_or_else(|| {
                format!("the token has no `{claim}` claim naming its agent: no agent is assumed")
            });
    }
    let mut named: Vec<(&str, &str)> = Vec::new();
    for claim in DEFAULT_AGENT_CLAIMS {
        if verified.claims.contains_key(claim) {
            let Some(value) = verified.claim_str(claim) else {
                return Err(format!(
                    "the token's `{claim}` is not a non-blank string: no agent is assumed"
                ));
            };
            named.push((claim, value));
        }
    }
    match named.as_slice() {
        [] => Err(String::from(
            "the token has no `client_id` (nor `azp`) claim naming its agent: no agent is assumed",
        )),
        [one] => Ok(*one),
        [first, rest @ ..] => match rest.iter().find(|(_, v)| v != &first.1) {
            None => Ok(*first),
            Some((other, value)) => Err(format!(
                "the token's `{}` `{}` and `{other}` `{value}` name different clients: no agent is assumed",
                first.0, first.1
            )),
        },
    }
}

/// The caller of one request: the agent it speaks for, how it authenticated (for records),
/// and the key a retry must come with (the token's hash; the session on stdio); for a JWT,
/// the subagent its claim names and the verified principal.
#[derive(Debug, Clone)]
pub(super) struct Caller {
    pub(super) agent: String,
    pub(super) credential: String,
    pub(super) key: String,
    pub(super) subagent: Option<String>,
    pub(super) principal: Option<toolgate_idp::Principal>,
    /// The caller's verified token, for a server with a token exchange (RFC 8693).
    pub(super) subject_token: Option<crate::SubjectToken>,
}
