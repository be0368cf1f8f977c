//! `GET` and `PUT /v1/tenant/tool-policy` (seed 002): the stored tenant policy as JSON,
//! `{default, rules, quotas?, updatedAt}`; what `GET` answers, `PUT` takes back.
//!
//! - `GET` answers 409 `request_rejected` for a stored policy that cannot be read (R22):
//!   every mcp and http call is refused until a corrected policy is put.
//! - `PUT` validates through the same path as `toolgate policy put` and the page (R22): an
//!   invalid policy is 400 `invalid_policy` with every error and its path, nothing saved.
//!   `If-Match: <updatedAt>` (the value of `GET`'s `ETag`, quoted or not) saves only if the
//!   stored policy is still that one, checked by the store in the save's own transaction:
//!   412 `precondition_failed` otherwise. `If-None-Match: *` saves only if no policy is
//!   stored. Without either, the put replaces the policy whole.

use crate::access::ApiScope;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};
use toolgate_engine::PolicyState;
use toolgate_inbox::{PutPolicyError, StoredPolicy, put_policy_text, put_policy_text_if_unchanged};

use super::{caller, refuse, reply};
use crate::state::App;

fn etag(res: &mut Response, updated_at: &str) {
    if let Ok(v) = HeaderValue::from_str(&format!("\"{updated_at}\"")) {
        res.headers_mut().insert(header::ETAG, v);
    }
}

/// The document of a stored policy with every number as written.
fn document(stored: &StoredPolicy) -> Result<String, String> {
    match stored.document_literals().map_err(|e| e.to_string())? {
        Some(text) => Ok(text),
        None => Ok(stored.document().map_err(|e| e.to_string())?.to_string()),
    }
}

fn answer_stored(status: StatusCode, stored: &StoredPolicy) -> Response {
    match document(stored) {
        Ok(text) => {
            let mut res = reply_text(status, text);
            etag(&mut res, &stored.updated_at);
            res
        }
        Err(why) => refuse(
            StatusCode::CONFLICT,
            "request_rejected",
            format!("the stored policy cannot be read: {why}"),
        ),
    }
}

fn reply_text(status: StatusCode, text: String) -> Response {
    use axum::response::IntoResponse;
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        text,
    )
        .into_response()
}

/// `GET /v1/tenant/tool-policy` (`policy:read`).
pub(crate) async fn get_policy(
    State(app): State<App>,
    headers: HeaderMap,
    identity: crate::auth::Identity,
) -> Response {
    let who = match caller(&app, &headers, &identity) {
        Ok(c) => c,
        Err(r) => return r,
    };
    if let Err(r) = who.require(ApiScope::PolicyRead) {
        return r;
    }
    let stored = match app.0.store.get_policy().await {
        Ok(s) => s,
        Err(e) => {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                format!("the stored policy cannot be read: {e}"),
            );
        }
    };
    let Some(stored) = stored else {
        return reply(
            StatusCode::OK,
            &json!({"default": "allow", "rules": [], "updatedAt": Value::Null}),
        );
    };
    if let PolicyState::Unreadable(why) =
        PolicyState::from_json_str(&stored.body, &app.0.settings.limits, None)
    {
        return refuse(
            StatusCode::CONFLICT,
            "request_rejected",
            format!(
                "the stored policy (updated {}) cannot be read, so every mcp and http call is refused `policy_unreadable` until a corrected policy is put: {why}",
                stored.updated_at
            ),
        );
    }
    answer_stored(StatusCode::OK, &stored)
}

/// What `If-Match` / `If-None-Match` ask for: `None` unconditional; `Some(None)` only if
/// nothing is stored; `Some(Some(stamp))` only if `stamp` is stored.
fn precondition(headers: &HeaderMap) -> Result<Option<Option<String>>, Response> {
    let text = |name: header::HeaderName| -> Result<Option<String>, Response> {
        match headers.get(&name) {
            None => Ok(None),
            Some(v) => match v.to_str() {
                Ok(s) => Ok(Some(s.trim().to_owned())),
                Err(_) => Err(refuse(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    format!("the `{name}` header is not readable text"),
                )),
            },
        }
    };
    let if_match = text(header::IF_MATCH)?;
    let if_none = text(header::IF_NONE_MATCH)?;
    match (if_match, if_none) {
        (Some(_), Some(_)) => Err(refuse(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "send `If-Match` or `If-None-Match`, not both",
        )),
        (None, Some(n)) if n == "*" => Ok(Some(None)),
        (None, Some(n)) => Err(refuse(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!("`If-None-Match` takes only `*` (save only if no policy is stored), not `{n}`"),
        )),
        (Some(m), None) => {
            let stamp = m
                .strip_prefix("W/")
                .unwrap_or(&m)
                .trim_matches('"')
                .to_owned();
            if stamp.is_empty() || stamp == "*" || stamp.contains(',') {
                return Err(refuse(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    format!("`If-Match` takes the one `updatedAt` the put is based on, not `{m}`"),
                ));
            }
            Ok(Some(Some(stamp)))
        }
        (None, None) => Ok(None),
    }
}

/// `PUT /v1/tenant/tool-policy` (`policy:write`).
pub(crate) async fn put_policy(
    State(app): State<App>,
    headers: HeaderMap,
    identity: crate::auth::Identity,
    body: Bytes,
) -> Response {
    let who = match caller(&app, &headers, &identity) {
        Ok(c) => c,
        Err(r) => return r,
    };
    if let Err(r) = who.require(ApiScope::PolicyWrite) {
        return r;
    }
    let condition = match precondition(&headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let Ok(text) = std::str::from_utf8(&body) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "the request body is not UTF-8",
        );
    };
    let limits = &app.0.settings.limits;
    let store = &*app.0.store;
    let put = match &condition {
        None => put_policy_text(store, text, limits).await,
        Some(expected) => {
            put_policy_text_if_unchanged(store, text, limits, expected.as_deref()).await
        }
    };
    match put {
        Ok(stored) => {
            tracing::info!(
                by = %toolgate_core::display::visible(&who.label),
                updated_at = %stored.updated_at,
                "the stored policy was replaced over the API"
            );
            answer_stored(StatusCode::OK, &stored)
        }
        Err(PutPolicyError::Invalid(errs)) => {
            let n = errs.errors.len();
            let list: Vec<Value> = errs
                .errors
                .iter()
                .map(|e| json!({"path": e.path, "message": e.message}))
                .collect();
            reply(
                StatusCode::BAD_REQUEST,
                &json!({
                    "code": "invalid_policy",
                    "message": format!(
                        "the policy is invalid ({n} error{}); nothing was saved",
                        if n == 1 { "" } else { "s" }
                    ),
                    "errors": list,
                }),
            )
        }
        Err(PutPolicyError::Conflict { stored, .. }) => refuse(
            StatusCode::PRECONDITION_FAILED,
            "precondition_failed",
            match stored {
                Some(s) => format!(
                    "the stored policy is the one of `{s}`, not the one the put was based on; read it again; nothing was saved"
                ),
                None => String::from(
                    "no policy is stored, so none matches `If-Match`; nothing was saved",
                ),
            },
        ),
        Err(e) => refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("the policy cannot be saved: {e}"),
        ),
    }
}
