//! The optional webhook: one JSON POST per new held call, with the interaction's fields and
//! a link to its card, retried with backoff. It runs beside the page, reading the store;
//! it never touches the gate, so a slow or failing receiver never blocks a call.
//!
//! It is sent with the project's one outbound client (`toolgate_idp::FetchClient`):
//! `https://` receivers (Slack's incoming webhooks among them) directly, trusting the
//! system's roots; plain `http://` only to a loopback receiver (the post carries the call's
//! input).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::JoinHandle;
use toolgate_inbox::{HeldRecord, InboxStore, State, Timestamp};

const TRIES: u32 = 6;

/// The JSON posted for one held call.
pub(crate) fn payload(r: &HeldRecord, public_url: Option<&str>) -> Value {
    let shown = r.interaction();
    let base = public_url.unwrap_or("").trim_end_matches('/');
    json!({
        "event": "held",
        "id": r.id(),
        "prompt": shown.prompt,
        "server": (shown.identity.kind() == toolgate_core::ToolKind::Mcp).then(|| shown.identity.source().to_owned()),
        "tool": shown.identity.name(),
        "model_name": shown.model_name,
        "agent": shown.agent,
        "reasons": r.call.reasons.iter().map(|a| json!({"source": a.source.describe(), "reason": a.reason})).collect::<Vec<_>>(),
        "input": shown.input,
        "session": r.call.turn.as_ref().map(|t| t.session.clone()),
        "turn": r.call.turn.as_ref().map(|t| t.turn.clone()),
        "created_at": r.call.created_at.to_string(),
        "expires_at": r.call.expires_at.to_string(),
        "link": format!("{base}/calls/{}", r.id()),
        "target": r.call.target.as_ref().map(toolgate_core::ExecutionTarget::to_json),
        // R51: how many distinct people must approve the call before it is sent.
        "approvals_needed": r.approvals_needed(),
        // R49: the labels the decision read (the tool's, the session's when asked).
        "labels": shown.to_json().get("labels").cloned(),
        // The same post is a Slack message (incoming webhook) with Approve and Deny
        // buttons, answered through `POST /v1/callbacks/slack`.
        "text": fallback_text(r),
        "blocks": blocks(r, public_url),
    })
}

/// Why a post did not reach its receiver, or was not taken.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PostError {
    /// The post could not be made (the URL, the connection, TLS, a timeout).
    #[error(transparent)]
    Fetch(#[from] toolgate_idp::FetchError),
    /// The receiver answered a status other than 2xx.
    #[error("the receiver answered `{0}`")]
    Status(u16),
}

/// Posts `body` to `url` through the outbound client; `Ok` on a 2xx answer.
pub(crate) async fn post(
    client: &toolgate_idp::FetchClient,
    url: &str,
    body: &str,
) -> Result<(), PostError> {
    use axum::http::{HeaderValue, header};
    let headers = [
        (
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        ),
        (header::USER_AGENT, HeaderValue::from_static("toolgate-web")),
    ];
    let answer = client
        .post(
            url,
            &headers,
            body.to_owned(),
            4096,
            Duration::from_secs(10),
        )
        .await?;
    if (200..300).contains(&answer.status) {
        Ok(())
    } else {
        Err(PostError::Status(answer.status))
    }
}

/// Posts one held call, retrying with exponential backoff (1 s, 2 s, 4 s, …).
async fn deliver(client: toolgate_idp::FetchClient, url: String, body: String, id: String) {
    let mut wait = Duration::from_secs(1);
    for attempt in 1..=TRIES {
        match post(&client, &url, &body).await {
            Ok(()) => return,
            Err(why) => {
                tracing::warn!(interaction = %id, attempt, %why, "the webhook post failed");
            }
        }
        tokio::time::sleep(wait).await;
        wait = wait.saturating_mul(2);
    }
    tracing::warn!(interaction = %id, "the webhook post was given up after {TRIES} tries");
}

/// Watches the store and posts each held call held after the page started, once.
pub(crate) fn spawn(
    store: Arc<dyn InboxStore>,
    url: String,
    public_url: Option<String>,
    every: Duration,
) -> JoinHandle<()> {
    let started = Timestamp::now();
    tokio::spawn(async move {
        let client = match toolgate_idp::FetchClient::new(None) {
            Ok(c) => c,
            Err(why) => {
                tracing::error!(%why, "the webhook cannot be sent: no outbound client");
                return;
            }
        };
        let mut seen: HashSet<String> = HashSet::new();
        loop {
            if let Ok(pending) = store.list(Some(State::Pending)).await {
                for r in pending.iter().filter(|r| r.call.created_at >= started) {
                    if seen.insert(r.id().to_owned()) {
                        let body = payload(r, public_url.as_deref()).to_string();
                        tokio::spawn(deliver(
                            client.clone(),
                            url.clone(),
                            body,
                            r.id().to_owned(),
                        ));
                    }
                }
                // A call no longer pending never comes back: forget it.
                let open: HashSet<&str> = pending.iter().map(HeldRecord::id).collect();
                seen.retain(|id| open.contains(id.as_str()));
            }
            tokio::time::sleep(every).await;
        }
    })
}

pub(crate) fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(n).collect();
        t.push('…');
        t
    }
}

/// Slack's mrkdwn escaping (`&`, `<`, `>`), with hidden characters marked.
pub(crate) fn mrkdwn(s: &str) -> String {
    escape(&toolgate_core::display::visible(s))
}

/// Slack's mrkdwn escaping alone, for text whose hidden characters are marked already (the
/// input, laid out over lines by [`toolgate_core::display::visible_json`]: its line breaks
/// are shown as line breaks).
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The message's plain text (notifications, and clients without blocks).
pub(crate) fn fallback_text(r: &HeldRecord) -> String {
    let shown = r.interaction();
    match &r.call.target {
        Some(t) => format!("{} — {}", mrkdwn(&shown.prompt), mrkdwn(&t.describe())),
        None => mrkdwn(&shown.prompt),
    }
}

/// The held call as Block Kit blocks: the execution target first, the prompt, who asks and
/// why, the input, and Approve / Deny (their `value`: `<id>|<input hash>|<definition hash>`).
pub(crate) fn blocks(r: &HeldRecord, public_url: Option<&str>) -> Value {
    let shown = r.interaction();
    let mut blocks = Vec::new();
    if let Some(t) = &r.call.target {
        let parts: Vec<String> = t
            .parts()
            .into_iter()
            .map(|(k, v)| format!("{k} `{}`", mrkdwn(v).replace('`', "'")))
            .collect();
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": format!("*Runs on* {}", parts.join(" · "))}}));
    }
    blocks.push(json!({"type": "header", "text": {"type": "plain_text", "text": clip(&toolgate_core::display::visible(&shown.prompt), 140)}}));
    let mut reasons: Vec<String> = r
        .call
        .reasons
        .iter()
        .map(|a| format!("• {} ({})", mrkdwn(&a.reason), mrkdwn(&a.source.describe())))
        .collect();
    // R49: what the session had already done when the call was asked about.
    if let Some(line) = shown.labels_line() {
        reasons.push(format!("_{}_", mrkdwn(&line)));
    }
    blocks.push(
        json!({"type": "section", "text": {"type": "mrkdwn", "text": clip(&format!(
        "*Agent* {} · *as* `{}`\n{}",
        mrkdwn(&shown.agent),
        mrkdwn(&shown.model_name).replace('`', "'"),
        reasons.join("\n")
    ), SECTION_CHARS)}}),
    );
    let input = toolgate_core::display::visible_json(&shown.input).replace("```", "'''");
    blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": format!("```{}```", clip(&escape(&input), SECTION_CHARS))}}));
    // R51: a call that needs several people's approvals says how many it has, and whose.
    if let Some(line) = r.approvals_line() {
        let waits = if r.approvals_missing() > 0 {
            format!(
                " · {}; sent only once {} different people have approved it",
                toolgate_inbox::waits_for(r.approvals_missing()),
                r.approvals_needed()
            )
        } else {
            String::new()
        };
        blocks.push(json!({"type": "section", "block_id": format!("toolgate-approvals:{}", r.id()),
            "text": {"type": "mrkdwn", "text": clip(&format!("*{}*{waits}", mrkdwn(&line)), SECTION_CHARS)}}));
    }
    let value = format!(
        "{}|{}|{}",
        r.id(),
        r.call.input_hash,
        r.call.definition_hash
    );
    let mut elements = vec![
        json!({"type": "button", "action_id": "approve", "style": "primary", "text": {"type": "plain_text", "text": "Approve"}, "value": value}),
        json!({"type": "button", "action_id": "deny", "style": "danger", "text": {"type": "plain_text", "text": "Deny"}, "value": value}),
    ];
    if let Some(base) = public_url {
        elements.push(json!({"type": "button", "action_id": "open", "text": {"type": "plain_text", "text": "Open the card"},
            "url": format!("{}/calls/{}", base.trim_end_matches('/'), r.id())}));
    }
    blocks.push(json!({"type": "actions", "block_id": format!("toolgate:{}", r.id()), "elements": elements}));
    Value::Array(blocks)
}

/// Slack limits a section's text to 3,000 characters.
pub(crate) const SECTION_CHARS: usize = 2_800;
