//! Answering from Slack: the webhook post as Block Kit (the execution target first, the
//! prompt, the reasons, the input, Approve and Deny buttons whose value binds the card's
//! hashes, R35), and `POST /v1/callbacks/slack`, Slack's interactive callback.
//!
//! A callback is taken only with a valid v0 signature of its body under the configured
//! signing secret, a timestamp within five minutes, and a signature not seen before by any
//! process sharing the inbox (a replay is refused, [`toolgate_inbox::Nonces::take_nonce`]);
//! its Slack user must be mapped to an approver in `approvers.slack.users`, and the answer is
//! checked as the page checks one — that approver's rights, the hashes — and recorded under
//! the approver's name. The same press retried by Slack (same `action_ts`) is the same answer.
//!
//! Slack ignores the HTTP reply to a button press: what the person sees is posted to the
//! press's `response_url` — the message replaced by its outcome once answered (its buttons
//! gone), or kept with its count brought up to date while it waits for more approvals (R51),
//! and a refusal (not an approver, no rights, already answered, changed since it was shown)
//! as an ephemeral message in toolgate's words, never an HTTP error Slack would show as a
//! generic failure. The HTTP reply carries the same JSON. A request that is not a signed,
//! fresh, first press from Slack is still refused with its HTTP status.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};
use toolgate_inbox::{Answer, AnswerReceipt, HeldRecord};

use super::{refuse, reply};
use crate::answer::AnswerRefusal;
use crate::slack::{self, SlackCallback, SlackDecision};
use crate::state::App;
use crate::webhook::mrkdwn;

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// A message Slack shows only the person who pressed.
fn ephemeral(text: &str) -> Value {
    json!({"response_type": "ephemeral", "replace_original": false, "text": text})
}

/// Shows `message` to Slack: posted to the press's `response_url` (in the background: Slack
/// wants its reply within three seconds) when it starts with the configured prefix, and
/// returned as the HTTP reply (200) too.
fn show(app: &App, response_url: Option<&str>, message: Value) -> Response {
    match response_url {
        Some(url) if url.starts_with(&app.0.settings.slack_response_url_prefix) => {
            match &app.0.slack_out {
                Some(client) => {
                    let (client, url) = (client.clone(), url.to_owned());
                    let body = message.to_string();
                    tokio::spawn(async move {
                        if let Err(why) = crate::webhook::post(&client, &url, &body).await {
                            tracing::warn!(%why, "Slack's message could not be updated through its response_url");
                        }
                    });
                }
                None => tracing::warn!("Slack's message is not updated: no outbound client"),
            }
        }
        Some(url) => tracing::warn!(
            response_url = %toolgate_core::display::visible(url),
            "a Slack press named a response_url that is not Slack's; nothing was posted there"
        ),
        None => {}
    }
    reply(StatusCode::OK, &message)
}

/// `POST /v1/callbacks/slack`.
pub(crate) async fn callback(State(app): State<App>, headers: HeaderMap, body: Bytes) -> Response {
    // The approvers in force: a Slack user whose mapping a reload removed answers nothing.
    let (approvers, access) = app.0.settings.in_force.with_access();
    let (Some(secret), Some(settings)) = (
        app.0.settings.slack_secret.as_deref(),
        access.slack.as_ref(),
    ) else {
        return refuse(
            StatusCode::NOT_FOUND,
            "not_found",
            "answering from Slack is not configured (`approvers.slack`)",
        );
    };
    let sig = match signed(secret, &headers, &body) {
        Ok(sig) => sig,
        Err(refused) => return refused,
    };
    if let Err(refused) = take_once(&app, sig).await {
        return refused;
    }
    let action = match slack::parse_callback(&body) {
        Ok(SlackCallback::Answer(a)) => a,
        // The message's link button: Slack opens the card itself; acknowledged, nothing
        // changes.
        Ok(SlackCallback::Opened { .. }) => return reply(StatusCode::OK, &json!({})),
        Err(why) => {
            return refuse(StatusCode::BAD_REQUEST, "invalid_request", why.to_string());
        }
    };
    let respond = action.response_url.as_deref();
    let Some(approver) = settings
        .approver_of(&action.user)
        .and_then(|name| approvers.approver(name))
        .cloned()
    else {
        tracing::warn!(slack_user = %toolgate_core::display::visible(&action.user), "a Slack user no approver is mapped to pressed a button");
        return show(
            &app,
            respond,
            ephemeral(&format!(
                "Slack user `{}` is not mapped to an approver (`approvers.slack.users`); nothing was changed",
                mrkdwn(&action.user)
            )),
        );
    };
    let id = &action.interaction_id;
    let approve = action.decision == SlackDecision::Approve;
    let answer = Answer {
        approve,
        idempotency_key: Some(format!("slack:{}:{}", action.user, action.action_ts)),
        approver: approver.name.clone(),
        reason: (!approve).then(|| String::from("denied from Slack")),
        principal: None,
        binding: None,
    };
    // One answer path: rights in force, R35 (the hashes the message showed), the store.
    let shown = crate::answer::Shown {
        input_hash: Some(action.input_hash.as_str()),
        definition_hash: Some(action.definition_hash.as_str()),
        edited: false,
        fields: crate::answer::FORM_FIELDS,
    };
    let surface = format!("slack, user {}", action.user);
    let answered = crate::answer::answer_held(&app, &approver, id, shown, answer, &surface).await;
    show_answered(&app, respond, approvers.public_url.as_deref(), id, answered).await
}

/// The request's signature header, once the v0 signature of its body under `secret` and its
/// timestamp are valid; otherwise the refusal (401).
fn signed<'a>(
    secret: &str,
    headers: &'a HeaderMap,
    body: &[u8],
) -> Result<Option<&'a str>, Response> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let now = now_secs();
    let sig = header("x-slack-signature");
    if let Err(why) = slack::verify(
        secret.as_bytes(),
        header("x-slack-request-timestamp"),
        sig,
        body,
        now,
    ) {
        tracing::warn!(refused = %why, "a Slack callback was refused");
        return Err(refuse(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            why.to_string(),
        ));
    }
    Ok(sig)
}

/// Takes the signature as a nonce in the inbox; a replay is refused (409), and so is
/// every request while the replay guard is unavailable (503).
async fn take_once(app: &App, sig: Option<&str>) -> Result<(), Response> {
    // A signature is taken once while its timestamp is fresh (after that, `verify` refuses
    // it as stale): a replayed request is refused.
    // Kept in the inbox, so that replicas behind a load balancer and a restarted process
    // refuse the same replay; kept past the window `verify` allows.
    let sig = sig.unwrap_or_default();
    let now_ms = toolgate_inbox::Timestamp::now();
    let until = now_ms.saturating_add(std::time::Duration::from_secs(
        u64::try_from(2 * slack::MAX_SKEW_SECS).unwrap_or(600),
    ));
    match app
        .0
        .store
        .take_nonce(&format!("slack:{sig}"), until, now_ms)
        .await
    {
        Ok(true) => Ok(()),
        Ok(false) => {
            tracing::warn!("a replayed Slack callback was refused");
            Err(refuse(
                StatusCode::CONFLICT,
                "replayed",
                "this signed request was already taken; a replay is refused",
            ))
        }
        Err(e) => Err(refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("the replay guard is unavailable: {e}"),
        )),
    }
}

/// Shows the person how their press ended: the message brought up to date while the call
/// waits for more approvals (R51), replaced by its outcome once answered, or the refusal.
async fn show_answered(
    app: &App,
    respond: Option<&str>,
    public_url: Option<&str>,
    id: &str,
    answered: Result<(HeldRecord, AnswerReceipt), AnswerRefusal>,
) -> Response {
    match answered {
        // R51: an approval that is not the last one needed leaves the message and its
        // buttons for the others, with the count brought up to date, and tells the person.
        Ok((record, receipt)) if receipt.waiting_for() > 0 => {
            let progress = receipt.progress().unwrap_or_default();
            let text = format!(
                "{} {}",
                mrkdwn(&record.interaction().prompt),
                mrkdwn(&progress)
            );
            match app.0.store.get(id).await {
                Ok(Some(now)) => show(
                    app,
                    respond,
                    json!({
                        "replace_original": true,
                        "text": text,
                        "blocks": crate::webhook::blocks(&now, public_url),
                    }),
                ),
                _ => show(app, respond, ephemeral(&text)),
            }
        }
        Ok((record, receipt)) => show(
            app,
            respond,
            json!({
                "replace_original": true,
                "text": match receipt.progress() {
                    // R51: the last approval needed, or a denial after some.
                    Some(progress) => format!(
                        "{} {} by {}: {}",
                        mrkdwn(&record.interaction().prompt),
                        if receipt.approved { "Approved" } else { "Denied" },
                        mrkdwn(&receipt.approver),
                        mrkdwn(&progress)
                    ),
                    None => format!(
                        "{} {} by {}",
                        mrkdwn(&record.interaction().prompt),
                        if receipt.approved { "Approved" } else { "Denied" },
                        mrkdwn(&receipt.approver)
                    ),
                },
            }),
        ),
        // Not an approver of this call, already answered, changed since it was shown: the
        // person is told in toolgate's words, in Slack.
        Err(refusal) => show(app, respond, ephemeral(&mrkdwn(&refusal.message()))),
    }
}
