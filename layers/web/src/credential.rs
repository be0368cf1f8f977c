//! Who an approver's credential names, verified as the page verifies it (held-calls.md):
//! the one check behind the page's sign-in, the HTTP API's management keys, the page's
//! identity-provider tokens and the command line's `toolgate inbox approve` / `grant add`.
//!
//! A name alone (`--as alice`) never answers for a person when the configuration names
//! approvers: an agent with a shell could type it. A credential is one of
//!
//! - an approver's sign-in token (`approvers.auth: token`, matched against the people's
//!   `token_sha256` in constant time);
//! - a management key with the `approvals` scope (`approvers.api_keys`), answering as the
//!   approver it names;
//! - an identity-provider access token (`approvers.auth: jwt`), verified against the
//!   provider's keys, the approver named by its `name_claim` with the rights `people` and
//!   `groups` give.
//!
//! ```
//! use toolgate_engine::config::{load_str, Format};
//! use toolgate_web::{credential, hash_token};
//!
//! let text = format!(r#"{{"approvers": {{"people": [
//!     {{"name": "alice", "token_sha256": "{}"}}]}}}}"#, hash_token("alice's secret"));
//! let gov = load_str(&text, Format::Json).unwrap();
//! let approvers = gov.approver_settings().unwrap();
//! let access = toolgate_web::access::PageAccess::read(approvers).unwrap();
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! let who = rt.block_on(credential::verify(approvers, &access, None, "alice's secret")).unwrap();
//! assert_eq!(who.approver.name, "alice");
//! assert!(rt.block_on(credential::verify(approvers, &access, None, "alice")).is_err());
//! ```

use crate::access::ApiScope;
use toolgate_engine::approvers::{Approver, ApproverAuth, ApproverSettings, JwtApprovers};

/// An approver a credential was verified as.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The approver, with the rights in force.
    pub approver: Approver,
    /// The identity provider's principal, for a token of theirs (recorded with answers).
    pub principal: Option<toolgate_core::Principal>,
    /// How the credential was taken, for messages and logs: `sign-in token`,
    /// `` management key `ci` ``, `identity-provider token`.
    pub via: String,
}

/// A credential that names no approver, and why (lower case, no trailing period).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// The person among `approvers.people` whose sign-in token is `token` (constant-time
/// comparison of the SHA-256; an empty token is nobody's).
pub(crate) fn person_by_token<'a>(
    approvers: &'a ApproverSettings,
    token: &str,
) -> Option<&'a Approver> {
    if token.is_empty() {
        return None;
    }
    let hash = crate::hash_token(token);
    approvers.people.iter().find(|a| {
        a.token_sha256
            .as_deref()
            .is_some_and(|stored| crate::token::same(stored, &hash))
    })
}

/// The approver a verified identity-provider token names (`name_claim`), with the rights
/// `people` and `groups` give them; the refusal's HTTP status (401 or 403) and reason.
pub(crate) fn approver_of_token(
    approvers: &ApproverSettings,
    jwt: &JwtApprovers,
    verified: &toolgate_idp::Verified,
) -> Result<Approver, (u16, String)> {
    let Some(name) = verified.claim_str(&jwt.name_claim) else {
        return Err((
            401,
            format!(
                "the token has no `{}` claim naming the approver",
                jwt.name_claim
            ),
        ));
    };
    let groups = verified.claim_strings(&jwt.groups_claim);
    approvers.rights(name, &groups).ok_or_else(|| {
        (
            403,
            format!(
                "`{}` is no approver: neither `approvers.people` nor `approvers.groups` names them or a group of theirs",
                toolgate_core::display::visible(name)
            ),
        )
    })
}

/// Who `credential` is among `approvers` (see the module): a management key of `access`
/// ([`crate::access::PageAccess::read`] of `approvers`) with the `approvals` scope, a
/// person's sign-in token (`auth: token`), or an identity-provider token (`auth: jwt`,
/// verified with `verifier`, or with a verifier started here from the verification settings
/// of `access` when none is given).
///
/// # Errors
///
/// A credential that is nobody's, a key without the `approvals` scope, a token that does
/// not verify or names no approver; with `auth: proxy_header`, anything but a management
/// key (the proxy, not toolgate, knows who people are).
pub async fn verify(
    approvers: &ApproverSettings,
    access: &crate::access::PageAccess,
    verifier: Option<&toolgate_idp::Verifier>,
    credential: &str,
) -> Result<Verified, Refused> {
    let credential = credential.trim();
    if credential.is_empty() {
        return Err(Refused(String::from("the credential is empty")));
    }
    if let Some(key) = crate::auth::key_of(access, credential) {
        if !key.has(ApiScope::Approvals) {
            return Err(Refused(format!(
                "management key `{}` does not have the `approvals` scope",
                key.name
            )));
        }
        let approver = key
            .approver
            .as_deref()
            .and_then(|a| approvers.approver(a))
            .ok_or_else(|| {
                Refused(format!(
                    "management key `{}` answers as no approver in force",
                    key.name
                ))
            })?;
        return Ok(Verified {
            approver: approver.clone(),
            principal: None,
            via: format!("management key `{}`", key.name),
        });
    }
    match &approvers.auth {
        ApproverAuth::Token => person_by_token(approvers, credential)
            .map(|a| Verified {
                approver: a.clone(),
                principal: None,
                via: String::from("sign-in token"),
            })
            .ok_or_else(|| Refused(String::from("that credential is not an approver's"))),
        ApproverAuth::Jwt(jwt) => {
            let started;
            let verifier = match verifier {
                Some(v) => v,
                None => {
                    let settings = access.jwt.clone().ok_or_else(|| {
                        Refused(String::from(
                            "`approvers.jwt` was not read: give the page access read from these approvers",
                        ))
                    })?;
                    started = toolgate_idp::Verifier::start(settings, "approvers.jwt")
                        .await
                        .map_err(|e| Refused(e.to_string()))?;
                    &started
                }
            };
            let verified = verifier.verify(credential).await.map_err(|why| {
                Refused(format!("the identity-provider token was refused: {why}"))
            })?;
            let approver =
                approver_of_token(approvers, jwt, &verified).map_err(|(_, why)| Refused(why))?;
            Ok(Verified {
                approver,
                principal: Some(verified.principal.clone()),
                via: String::from("identity-provider token"),
            })
        }
        _ => Err(Refused(String::from(
            "with `approvers.auth: proxy_header` the proxy knows who people are, not toolgate: answer with a management key that has the `approvals` scope",
        ))),
    }
}
