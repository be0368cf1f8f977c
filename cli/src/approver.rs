//! Who answers a held call or gives a grant from the command line (held-calls.md).
//!
//! Without an `approvers` section (or without `--config`), `--as NAME` is recorded as given:
//! whoever can open the inbox store answers, so the store must not be writable by the
//! agents' account (`toolgate check` warns about a SQLite file its group or anyone may
//! write). With `--config` naming approvers, a name alone never answers: the command needs
//! an approver's credential — a sign-in token, a management key with the `approvals` scope,
//! or an identity-provider access token — read from `--credential-file FILE` or the
//! `TOOLGATE_APPROVER_CREDENTIAL` environment variable (never from the command line, where
//! other accounts can read it), and verified exactly as the approval page verifies it
//! (`toolgate_web::credential::verify`). `--as`, when given too, must name the same person.

use std::path::{Path, PathBuf};

use clap::Args;
use toolgate_engine::Governance;
use toolgate_engine::approvers::Approver;

/// The environment variable a credential may come in instead of `--credential-file`.
pub(crate) const CREDENTIAL_ENV: &str = "TOOLGATE_APPROVER_CREDENTIAL";

/// How a command proves whom it answers as.
#[derive(Debug, Clone, Args)]
pub(crate) struct CredentialArgs {
    /// A file holding an approver's credential (a sign-in token, a management key with the
    /// `approvals` scope, or an identity-provider access token); required, or
    /// `TOOLGATE_APPROVER_CREDENTIAL`, when `--config` names approvers.
    #[arg(long = "credential-file", value_name = "FILE")]
    pub(crate) credential_file: Option<PathBuf>,
}

/// Whom an answer, grant or revocation is given as.
#[derive(Debug, Clone)]
pub(crate) struct Acting {
    /// The name recorded.
    pub(crate) name: String,
    /// The approver, with the rights in force, when the configuration names approvers.
    pub(crate) approver: Option<Approver>,
    /// The identity provider's principal, for a token of theirs.
    pub(crate) principal: Option<toolgate_core::Principal>,
}

impl CredentialArgs {
    /// The credential: the file's contents (trimmed), else the environment variable's.
    fn read(&self) -> Result<Option<String>, String> {
        if let Some(path) = &self.credential_file {
            let text = read_file(path)?;
            return Ok(Some(text));
        }
        match std::env::var(CREDENTIAL_ENV) {
            Ok(v) if !v.trim().is_empty() => Ok(Some(v.trim().to_owned())),
            Ok(_) => Err(format!("`{CREDENTIAL_ENV}` is set but empty")),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(format!("`{CREDENTIAL_ENV}` is not valid UTF-8"))
            }
        }
    }
}

fn read_file(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("`--credential-file`: cannot read {}: {e}", path.display()))?;
    let text = text.trim();
    if text.is_empty() {
        return Err(format!("`--credential-file`: {} is empty", path.display()));
    }
    Ok(text.to_owned())
}

/// Whom the command acts as (see the module): `named` is `--as`.
///
/// `Ok(Err(why))`: a credential or name that is refused (exit 1).
///
/// # Errors
///
/// A usage problem (exit 2), as a sentence naming the option: no `--as` where a name is
/// needed, no credential where one is, a credential file that cannot be read.
pub(crate) async fn acting(
    gov: Option<&Governance>,
    named: Option<&str>,
    credential: &CredentialArgs,
) -> Result<Result<Acting, String>, String> {
    let Some(approvers) = gov.and_then(Governance::approver_settings) else {
        if credential.credential_file.is_some() {
            return Err(String::from(
                "`--credential-file`: the configuration names no approvers to verify it against (give `--config` with an `approvers` section, or `--as NAME` alone)",
            ));
        }
        return match named.map(str::trim).filter(|n| !n.is_empty()) {
            Some(n) => Ok(Ok(Acting {
                name: n.to_owned(),
                approver: None,
                principal: None,
            })),
            None => Err(String::from("`--as`: name who answers")),
        };
    };
    let Some(secret) = credential.read()? else {
        return Err(format!(
            "the configuration names approvers, so an answer or grant needs an approver's credential: give `--credential-file FILE` or set `{CREDENTIAL_ENV}` (a sign-in token, a management key with the `approvals` scope, or an identity-provider access token); `--as` alone is not enough"
        ));
    };
    let (approver, principal, via) = match verify(approvers, &secret).await {
        Ok(v) => v,
        Err(why) => return Ok(Err(why)),
    };
    if let Some(n) = named
        && n != approver.name
    {
        return Ok(Err(format!(
            "`--as`: the credential is `{}`'s ({via}), not `{}`'s",
            toolgate_core::display::visible(&approver.name),
            toolgate_core::display::visible(n)
        )));
    }
    Ok(Ok(Acting {
        name: approver.name.clone(),
        approver: Some(approver),
        principal,
    }))
}

/// The approver a credential is, verified as the page verifies it: the approver, the
/// identity provider's principal if any, and how it was taken.
#[cfg(feature = "serve")]
async fn verify(
    approvers: &toolgate_engine::approvers::ApproverSettings,
    secret: &str,
) -> Result<(Approver, Option<toolgate_core::Principal>, String), String> {
    let access = toolgate_web::access::PageAccess::read(approvers)
        .map_err(|e| format!("the configuration's approvers do not load:\n{e}"))?;
    toolgate_web::credential::verify(approvers, &access, None, secret)
        .await
        .map(|v| (v.approver, v.principal, v.via))
        .map_err(|e| format!("the approver's credential was refused: {e}"))
}

/// Without the approval page's crate there is no way to verify a credential: refused.
#[cfg(not(feature = "serve"))]
async fn verify(
    _approvers: &toolgate_engine::approvers::ApproverSettings,
    _secret: &str,
) -> Result<(Approver, Option<toolgate_core::Principal>, String), String> {
    Err(String::from(
        "this toolgate was built without the `serve` feature and cannot verify an approver's credential: use a build with it, or the approval page",
    ))
}
