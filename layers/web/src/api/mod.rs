//! The HTTP API on `toolgate serve` (seed 002; approval-page.md, "The HTTP API"): the
//! stored tenant policy read and written as JSON, a session's held calls listed and
//! answered, one call's state, and the OpenAPI document describing it all
//! (`/v1/openapi.json`).
//!
//! Who may call it: a management key (`Authorization: Bearer <key>`, its SHA-256 in
//! `approvers.api_keys`, with scopes `policy:read`, `policy:write`, `approvals`), or, with
//! `approvers.auth: jwt`, an identity-provider token of an approver (who may read the
//! policy and answer what their rights cover, and write the policy with `edit_policy`).
//! An answer is checked as the page checks one: the approver's rights over the tool, the
//! hashes of the input and definition they saw (R35), the idempotency key.
//!
//! Every answer is JSON; every refusal is `{"code", "message"}` (with `errors`, each a
//! `path` and a `message`, for an invalid policy), and changes nothing.

use crate::access::ApiScope;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use toolgate_engine::approvers::{Approver, ApproverAuth};

use crate::auth::key_of;
use crate::state::App;

pub(crate) mod calls;
pub(crate) mod edit;
pub(crate) mod openapi;
pub(crate) mod policy;
pub(crate) mod routes;
pub(crate) mod slack;
pub(crate) mod target;

/// A refusal: `status`, `{"code", "message"}`.
pub(crate) fn refuse(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let message = message.into();
    (
        status,
        json_headers(),
        json!({"code": code, "message": message}).to_string(),
    )
        .into_response()
}

/// A JSON answer.
pub(crate) fn reply(status: StatusCode, body: &Value) -> Response {
    (status, json_headers(), body.to_string()).into_response()
}

fn json_headers() -> [(header::HeaderName, HeaderValue); 1] {
    [(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    )]
}

/// Who is calling the API, and what they may do.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    /// What the log names: `key `ci``, or the approver's name.
    pub(crate) label: String,
    /// The scopes.
    pub(crate) scopes: Vec<ApiScope>,
    /// The approver whose rights answers are checked with, and whose name they are
    /// recorded under (`approvals`).
    pub(crate) approver: Option<Approver>,
    /// The verified principal of an identity-provider caller (R47), kept with its answers;
    /// a management key has none.
    pub(crate) principal: Option<toolgate_core::Principal>,
}

impl Caller {
    /// The caller's approver if they have `scope`, else the refusal (403).
    pub(crate) fn require(&self, scope: ApiScope) -> Result<(), Response> {
        if self.scopes.contains(&scope) {
            Ok(())
        } else {
            Err(refuse(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "{} does not have the `{}` scope; nothing was changed",
                    self.label,
                    scope.as_str()
                ),
            ))
        }
    }

    /// The approver an `approvals` caller answers as.
    pub(crate) fn approver(&self) -> Result<&Approver, Response> {
        self.require(ApiScope::Approvals)?;
        self.approver.as_ref().ok_or_else(|| {
            refuse(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("{} answers as no approver", self.label),
            )
        })
    }
}

/// The bearer token of a request, if any.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(toolgate_idp::bearer_token)
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// Who is calling: a management key, else (with `auth: jwt`) the identity-provider
/// approver the request's token names; else 401 (403 for a verified token of no
/// approver).
pub(crate) fn caller(
    app: &App,
    headers: &HeaderMap,
    identity: &crate::auth::Identity,
) -> Result<Caller, Response> {
    // The approvers in force: a key or person a reload removed is gone.
    let (approvers, access) = app.0.settings.in_force.with_access();
    if let Some(key) = bearer(headers).and_then(|t| key_of(&access, t)) {
        return Ok(Caller {
            label: format!("key `{}`", key.name),
            scopes: key.scopes.clone(),
            approver: key
                .approver
                .as_deref()
                .and_then(|a| approvers.approver(a))
                .cloned(),
            principal: None,
        });
    }
    if let ApproverAuth::Jwt(_) = &approvers.auth {
        if let Some(who) = identity.who() {
            let mut scopes = vec![ApiScope::PolicyRead, ApiScope::Approvals];
            if who.approver.edit_policy {
                scopes.push(ApiScope::PolicyWrite);
            }
            return Ok(Caller {
                label: format!("approver `{}`", who.approver.name),
                scopes,
                principal: who.principal.clone(),
                approver: Some(who.approver),
            });
        }
        let (status, why) = identity.refusal().unwrap_or((
            StatusCode::UNAUTHORIZED,
            String::from("no access token came with the request"),
        ));
        let code = if status == StatusCode::FORBIDDEN {
            "forbidden"
        } else {
            "unauthorized"
        };
        return Err(challenge(refuse(status, code, why)));
    }
    let why = if bearer(headers).is_some() {
        "the bearer token is not a management key of this configuration (`approvers.api_keys`)"
    } else {
        "no management key came with the request (`Authorization: Bearer <key>`)"
    };
    Err(challenge(refuse(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        why,
    )))
}

fn challenge(mut res: Response) -> Response {
    res.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    res
}

/// The request body as a JSON object, parsed with the inbox's bounded reader; else 400.
pub(crate) fn body_object(body: &[u8]) -> Result<serde_json::Map<String, Value>, Response> {
    let text = std::str::from_utf8(body).map_err(|_| {
        refuse(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "the request body is not UTF-8",
        )
    })?;
    match toolgate_inbox::codec::parse_json(text) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(refuse(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "the request body is not a JSON object",
        )),
        Err(e) => Err(refuse(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!("the request body is not JSON: {e}"),
        )),
    }
}
