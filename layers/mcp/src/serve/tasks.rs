//! Held calls as MCP tasks (the Tasks extension, SEP-2663; serve.md).
//!
//! When `mcp serve` has a durable inbox, it declares the `io.modelcontextprotocol/tasks`
//! extension. A call held in the inbox for a client that declared the extension on that
//! request comes back as a task (`CreateTaskResult`) whose id is the held call's interaction
//! id, instead of a held tool result; a client that did not declare it gets the held result
//! as before. Everything a task is lives in the inbox, so it survives a restart and any
//! replica answers for it:
//!
//! - `tasks/get` reads the held call. Pending: `working`. Approved: the poll sends it — once
//!   (the inbox's claim, R26, R38: decided afresh first, through the same stack) — and the
//!   task is `completed` with the tool's result. Claimed by another sender: `working`. Sent:
//!   `completed` with the recorded result. Denied or expired: `failed` with the reason.
//!   Cancelled: `cancelled`. Claimed and never finished (`unknown`): `failed`, saying it may
//!   or may not have run.
//! - `tasks/cancel` cancels a pending held call (R26); a call already answered is left as it
//!   is (cancellation is cooperative).
//! - A task is only its own agent's: another agent's id is answered like one that does not
//!   exist (`-32602`), so a task id reveals nothing.

use rmcp::model::{
    CancelTaskParams, CreateTaskResult, DetailedTask, GetTaskParams, GetTaskResult, JsonObject,
    Task, TaskPayload, TaskStatus,
};
use toolgate_inbox::{HeldRecord, ResumeError};

use super::*;

/// How often a client is told to poll a held call's task, in milliseconds: a person answers
/// in seconds at best.
const POLL_MS: u64 = 2_000;

/// Whether the client declared the Tasks extension for this request (its `_meta`
/// capabilities from 2026-07-28, else those it declared at `initialize`).
pub(super) fn client_takes_tasks(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.client_capabilities()
        .is_some_and(|c| c.supports_tasks())
}

fn iso(t: toolgate_inbox::Timestamp) -> String {
    t.to_string()
}

/// The task a call just held becomes.
pub(super) fn created(held: &HeldCall) -> CreateTaskResult {
    let now = iso(toolgate_inbox::Timestamp::now());
    CreateTaskResult::new(
        Task::new(
            held.interaction_id.clone(),
            TaskStatus::Working,
            now.clone(),
            now,
        )
        .with_status_message(held_message(&held.reasons))
        .with_poll_interval_ms(POLL_MS),
    )
}

fn held_message(reasons: &[String]) -> String {
    format!(
        "held for a person's approval: {}",
        if reasons.is_empty() {
            String::from("(no reason given)")
        } else {
            reasons.join("; ")
        }
    )
}

fn no_such_task(id: &str) -> ErrorData {
    ErrorData::invalid_params(format!("no task `{id}` of this agent"), None)
}

fn unavailable(e: impl fmt::Display) -> ErrorData {
    ErrorData::internal_error(format!("the durable inbox could not be read: {e}"), None)
}

/// A tool result (the recorded or just-returned response) as a completed task's `result`.
fn completed(response: ToolResponse) -> TaskPayload {
    let result = match serde_json::to_value(call_result(response)) {
        Ok(Value::Object(o)) => o,
        _ => JsonObject::new(),
    };
    TaskPayload::Completed { result }
}

fn failed(message: String) -> TaskPayload {
    let mut error = JsonObject::new();
    error.insert("code".into(), json!(-32000));
    error.insert("message".into(), Value::String(message));
    TaskPayload::Failed { error }
}

/// A response as the inbox recorded it (`toolgate_inbox::response_json`), read back.
fn recorded(result: Option<&Value>) -> ToolResponse {
    let Some(r) = result else {
        return ToolResponse::Failed(ToolOutput::new(json!(
            "the call was sent, but no result was recorded"
        )));
    };
    let output = || ToolOutput {
        content: r.get("content").cloned().unwrap_or(Value::Null),
        structured: r.get("structured").cloned().filter(|s| !s.is_null()),
    };
    match r.get("outcome").and_then(Value::as_str) {
        Some("completed") => ToolResponse::Completed(output()),
        Some("refused") => refused(
            r.get("reasons")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join("; ")
                })
                .unwrap_or_else(|| String::from("refused when it was sent")),
        ),
        _ => ToolResponse::Failed(output()),
    }
}

impl GovernedSession {
    /// The held call `id`, when it is the caller's agent's.
    async fn own_task(
        &self,
        id: &str,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(Inbox, HeldRecord), ErrorData> {
        let caller = self.caller(ctx)?;
        let Some(inbox) = self.shared.inbox.clone() else {
            return Err(no_such_task(id));
        };
        let record = inbox
            .store()
            .get(id)
            .await
            .map_err(unavailable)?
            .filter(|r| {
                r.call.agent.profile == caller.agent && r.call.agent.subagent == caller.subagent
            })
            .ok_or_else(|| no_such_task(id))?;
        Ok((inbox, record))
    }

    /// `tasks/get`: the held call's state as a task; an approved one is sent by this poll.
    pub(super) async fn task(
        &self,
        request: GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let id = request.task_id;
        let (inbox, mut record) = self.own_task(&id, &ctx).await?;
        let mut payload = None;
        if record.state == State::Approved {
            // R26, R38: sent once, whichever replica's poll claims it, after every check.
            match inbox.resume(&id, self.shared.stack()).await {
                Ok(resumed) if resumed.recorded.is_some() => {
                    payload = Some(completed(resumed.response));
                }
                // Another sender claimed it, or the approval could not be routed: as stored.
                Ok(_) | Err(ResumeError::NotApproved { .. }) => {}
                Err(e) => {
                    payload = Some(failed(format!("the approved call could not be sent: {e}")))
                }
            }
            if payload.is_none() {
                record = inbox
                    .store()
                    .get(&id)
                    .await
                    .map_err(unavailable)?
                    .ok_or_else(|| no_such_task(&id))?;
            }
        }
        let now = toolgate_inbox::Timestamp::now();
        let (payload, message) = match payload {
            Some(p) => (p, None),
            None => of_record(&record, now),
        };
        let mut task = Task::new(
            id,
            TaskStatus::Working,
            iso(record.call.created_at),
            iso(record.updated_at),
        )
        .with_poll_interval_ms(POLL_MS);
        if let Some(m) = message {
            task = task.with_status_message(m);
        }
        Ok(GetTaskResult::new(DetailedTask::new(task, payload)))
    }

    /// `tasks/cancel`: cancels a pending held call; an answered one is left as it is.
    pub(super) async fn cancel_held_task(
        &self,
        request: CancelTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let (inbox, record) = self.own_task(&request.task_id, &ctx).await?;
        if record.state == State::Pending {
            match inbox.store().cancel(record.id()).await {
                Ok(()) | Err(toolgate_inbox::AnswerError::AlreadyDecided { .. }) => {}
                Err(e) => return Err(unavailable(e)),
            }
        }
        Ok(())
    }
}

/// What a held call's state says as a task, with the status message.
fn of_record(r: &HeldRecord, now: toolgate_inbox::Timestamp) -> (TaskPayload, Option<String>) {
    let reasons: Vec<String> = r.call.reasons.iter().map(|a| a.reason.clone()).collect();
    match r.state {
        State::Pending if r.is_past_expiry(now) => (
            failed(String::from("nobody answered before the held call expired")),
            None,
        ),
        State::Pending => (TaskPayload::Working, Some(held_message(&reasons))),
        State::Approved | State::Claimed => (
            TaskPayload::Working,
            Some(String::from("approved; being sent")),
        ),
        State::Done | State::Failed => (completed(recorded(r.result.as_ref())), None),
        State::Denied => (
            failed(format!(
                "denied by {}{}",
                r.approver.as_deref().unwrap_or("an approver"),
                r.answer_reason
                    .as_deref()
                    .map(|why| format!(": {why}"))
                    .unwrap_or_default()
            )),
            None,
        ),
        State::Expired => (
            failed(String::from("nobody answered before the held call expired")),
            None,
        ),
        State::Cancelled => (
            TaskPayload::Cancelled,
            Some(String::from("the held call was cancelled")),
        ),
        State::Unknown => (
            failed(String::from(
                "the call was claimed for sending, but the process sending it stopped before its result was recorded: it may or may not have run, and it is never sent again automatically",
            )),
            None,
        ),
    }
}
