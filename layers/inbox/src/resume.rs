//! Resuming a held call: the approved call goes through the same stack as any call (R38),
//! is sent at most once (R26) with exactly the input the person saw (R35), and its response
//! is recorded for the paused agent to fetch.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolgate_core::{CallId, CallOutcome, RefusalCode, ToolCall, ToolOutput, ToolResponse};
use tower_service::Service;

use crate::channel::{DEFAULT_TTL, InboxChannel, ticket};
use crate::error::{ClaimError, CompleteError, InboxError};
use crate::model::{CallResult, Claim, Completion, HeldRecord, Outcome, State};
use crate::store::InboxStore;

/// An inbox: a store, the channel that holds calls in it, and the resume path.
///
/// Cheap to clone.
#[derive(Clone)]
pub struct Inbox {
    store: Arc<dyn InboxStore>,
    ttl: Duration,
}

impl fmt::Debug for Inbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inbox")
            .field("store", &self.store)
            .field("ttl", &self.ttl)
            .finish()
    }
}

/// What resuming a held call did.
#[derive(Debug, Clone, PartialEq)]
pub struct Resumed {
    /// The stack's response, exactly as the agent would get it.
    pub response: ToolResponse,
    /// What was recorded: `done` or `failed` when this resume won the claim; `failed` too
    /// when the stack refused the call before it was claimed (the refusal is recorded and
    /// the call is never sent, R38); `None` when another sender claimed it, or when the
    /// refusal was `no_approval_channel` (the approval could not be routed — e.g. the inbox
    /// was unreachable — which says nothing about the call: it stays `approved`).
    pub recorded: Option<State>,
    /// Why the response could not be recorded, when the store failed. The response is still
    /// returned; a call this resume had claimed stays `claimed` and becomes `unknown` at the
    /// next [`HeldCalls::recover`](crate::HeldCalls::recover).
    pub record_error: Option<InboxError>,
}

/// Why a held call could not be resumed. Nothing was sent.
#[derive(Debug)]
pub enum ResumeError<E> {
    /// No held call has this id.
    UnknownId(String),
    /// The call is not `approved` (still pending, denied, expired, or already sent).
    NotApproved {
        /// The held call.
        id: String,
        /// Its state.
        state: State,
    },
    /// The store failed, or the held call cannot be read back.
    Store(InboxError),
    /// The stack failed (the call was recorded `failed` if this resume had claimed it).
    Service(E),
}

impl<E: fmt::Display> fmt::Display for ResumeError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResumeError::UnknownId(id) => {
                write!(f, "no held call `{id}`: this inbox did not issue it")
            }
            ResumeError::NotApproved { id, state } => write!(
                f,
                "held call `{id}` cannot be sent: it is `{state}`, not `approved`"
            ),
            ResumeError::Store(e) => write!(f, "{e}"),
            ResumeError::Service(e) => write!(f, "the tool stack failed: {e}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for ResumeError<E> {}

impl Inbox {
    /// An inbox over `store`, holding calls for [`DEFAULT_TTL`].
    pub fn new(store: impl InboxStore) -> Self {
        Self::shared(Arc::new(store))
    }

    /// An inbox over a shared store.
    pub fn shared(store: Arc<dyn InboxStore>) -> Self {
        Self {
            store,
            ttl: DEFAULT_TTL,
        }
    }

    /// The SQLite inbox the configuration's `inbox` section names, holding calls for its
    /// `ttl` (or [`DEFAULT_TTL`]) with its `synchronous`. A section naming a PostgreSQL
    /// inbox is refused here: connect it with `toolgate_inbox_postgres`.
    ///
    /// ```
    /// use toolgate_engine::config::{load_str, Format};
    /// use toolgate_inbox::{Inbox, InboxSettings};
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("inbox.db");
    /// let gov = load_str(&format!(r#"{{"inbox": {{"sqlite": {:?}, "ttl": "2h"}}}}"#, path), Format::Json).unwrap();
    /// let settings = InboxSettings::read(&gov).unwrap().unwrap();
    /// let inbox = Inbox::open_configured(&settings).unwrap();
    /// assert_eq!(inbox.ttl(), std::time::Duration::from_secs(7200));
    /// ```
    #[cfg(feature = "sqlite")]
    pub fn open_configured(settings: &crate::settings::InboxSettings) -> Result<Self, InboxError> {
        use crate::settings::{InboxStoreSetting, InboxSynchronous};
        let path = match &settings.store {
            InboxStoreSetting::Sqlite(path) => path,
            InboxStoreSetting::Postgres(_) => {
                return Err(InboxError::new(
                    crate::error::InboxErrorKind::Unavailable,
                    "the configuration names a PostgreSQL inbox: connect it with `toolgate_inbox_postgres::PostgresInbox`",
                ));
            }
        };
        let mut options = crate::sqlite::SqliteOptions::default();
        if settings.synchronous == Some(InboxSynchronous::Full) {
            options = options.synchronous(crate::sqlite::Synchronous::Full);
        }
        let store = crate::sqlite::SqliteInbox::open(path, options)?;
        Ok(Self::new(store).with_ttl(settings.ttl.unwrap_or(DEFAULT_TTL)))
    }

    /// How long a held call waits for an answer before it expires.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Sets how long a held call waits for an answer before it expires.
    #[must_use]
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn InboxStore> {
        &self.store
    }

    /// The approval channel to give the gate
    /// (`ApprovalGateLayer::new(handle).channel(inbox.channel())`).
    pub fn channel(&self) -> InboxChannel {
        InboxChannel::new(Arc::clone(&self.store), self.ttl)
    }

    /// What a paused agent fetches: the call's state and, once sent, the recorded response.
    pub async fn result(&self, id: &str) -> Result<Option<CallResult>, InboxError> {
        Ok(self.store.get(id).await?.map(|r| CallResult {
            state: r.state,
            result: r.result,
            finished_at: r.finished_at,
        }))
    }

    /// Sends the approved held call `id` through `service` — the same stack every call
    /// goes through (R38) — and records the response.
    ///
    /// The call is rebuilt exactly as it was held (same call id, agent, run settings, and
    /// the stored input) and carries a [`ResumeTicket`](toolgate_core::approval::ResumeTicket) with a fresh claim token. The stack
    /// runs every check again; at the approval gate the inbox channel redeems the ticket:
    /// it claims the call (committed before the tool is invoked) only if it is still
    /// `approved` with the same input and definition (R35). Of any number of concurrent
    /// resumes, exactly one wins the claim and reaches the tool; the others get a refusal.
    /// The gate redeems the ticket whatever its fresh decision is — also when nothing asks
    /// any more — so the claim is never skipped (R38). The winner records `done` (the tool's
    /// result) or `failed` (a tool failure, a refusal after the claim, or a stack error).
    /// A call the fresh decision refuses is never sent and is ended `failed` with the
    /// refusal recorded (see [`Resumed::recorded`]); a second resume is refused.
    pub async fn resume<S>(
        &self,
        id: &str,
        mut service: S,
    ) -> Result<Resumed, ResumeError<S::Error>>
    where
        S: Service<ToolCall, Response = ToolResponse>,
        S::Error: fmt::Display,
    {
        let record = match self.store.get(id).await {
            Ok(Some(r)) => r,
            Ok(None) => return Err(ResumeError::UnknownId(id.to_owned())),
            Err(e) => return Err(ResumeError::Store(e)),
        };
        if record.state != State::Approved {
            return Err(ResumeError::NotApproved {
                id: id.to_owned(),
                state: record.state,
            });
        }
        let Some(token) = toolgate_core::id::random_id("claim_") else {
            return Err(ResumeError::Store(InboxError::new(
                crate::InboxErrorKind::Backend,
                "no claim token could be made",
            )));
        };
        let mut call = rebuild(&record, &token).map_err(ResumeError::Store)?;
        // Approved with edits (approval-page.md, "Approve with edits"): the input the agent
        // sent goes with the call, for the audit record; the call itself carries the edited
        // input.
        match self.store.edit_of(id).await {
            Ok(None) => {}
            Ok(Some(edit)) => {
                let original = edit.original_input().map_err(|why| {
                    ResumeError::Store(InboxError::new(
                        crate::InboxErrorKind::Record,
                        format!("the original input of held call `{id}` cannot be read: {why}"),
                    ))
                })?;
                call.extensions.insert(toolgate_core::InputEdit {
                    original_input: original,
                    original_input_hash: edit.original_input_hash,
                    edited_by: edit.edited_by,
                });
            }
            Err(e) => return Err(ResumeError::Store(e)),
        }
        let sent = async {
            std::future::poll_fn(|cx| service.poll_ready(cx)).await?;
            service.call(call).await
        }
        .await;
        let (outcome, result) = match &sent {
            Ok(response) => (
                match response {
                    ToolResponse::Completed(_) => Outcome::Done,
                    _ => Outcome::Failed,
                },
                response_json(response),
            ),
            Err(e) => (
                Outcome::Failed,
                json!({"outcome": "error", "error": e.to_string()}),
            ),
        };
        let completion = Completion {
            outcome,
            result,
            token: token.clone(),
        };
        // Only the resume whose ticket won the claim can record: for any other, the call is
        // not `claimed` under this token and nothing is written …
        let (recorded, record_error) = match self.store.complete(id, completion).await {
            Ok(state) => (Some(state), None),
            // … except a call the fresh decision refused before anything claimed it (a layer
            // in front of the gate, or the gate itself): it is ended `failed` with the
            // refusal recorded, so a refusal that arrived while it was held wins for good
            // (R38) — never sent later when that refusal is lifted. A refusal that only says
            // the approval could not be routed (`no_approval_channel`: the inbox unreachable,
            // no channel configured) is not a decision about the call: it stays `approved`.
            Err(CompleteError::NotClaimed { .. }) if matches!(&sent, Ok(ToolResponse::Refused(r)) if r.code != RefusalCode::NoApprovalChannel) =>
            {
                let result = match &sent {
                    Ok(response) => response_json(response),
                    Err(e) => json!({"outcome": "error", "error": e.to_string()}),
                };
                self.end_refused(&record, token.clone(), result).await
            }
            Err(CompleteError::NotClaimed { .. } | CompleteError::UnknownId(_)) => (None, None),
            Err(CompleteError::Store(e)) => {
                // If this resume had claimed the call, the tool may have run: the call stays
                // `claimed` and becomes `unknown` at the next `recover`. Never sent again.
                tracing::error!(interaction_id = id, error = %e, "the response of a resumed call could not be recorded");
                (None, Some(e))
            }
        };
        match sent {
            Ok(response) => Ok(Resumed {
                response,
                recorded,
                record_error,
            }),
            Err(e) => Err(ResumeError::Service(e)),
        }
    }
}

impl Inbox {
    /// Ends a held call that the fresh decision refused before it was claimed: claims it
    /// (the same conditional `approved → claimed` every sender must win, so a concurrent
    /// resume that reaches the tool cannot also be ended, nor the reverse) and records the
    /// refusal as `failed`. Nothing is sent. A process that dies in between leaves it
    /// `claimed`, and `recover` makes it `unknown`: never sent again automatically.
    async fn end_refused(
        &self,
        record: &HeldRecord,
        token: String,
        result: Value,
    ) -> (Option<State>, Option<InboxError>) {
        let id = record.id();
        let claim = Claim {
            input_hash: record.call.input_hash.clone(),
            definition_hash: record.call.definition_hash.clone(),
            token: token.clone(),
        };
        match self.store.claim(id, claim).await {
            Ok(_) => {}
            // Another sender claimed it first, or it is no longer `approved`.
            Err(ClaimError::Store(e)) => return (None, Some(e)),
            Err(_) => return (None, None),
        }
        let completion = Completion {
            outcome: Outcome::Failed,
            result,
            token,
        };
        match self.store.complete(id, completion).await {
            Ok(state) => (Some(state), None),
            Err(CompleteError::Store(e)) => {
                tracing::error!(interaction_id = id, error = %e, "a refused resumed call could not be recorded");
                (None, Some(e))
            }
            Err(_) => (None, None),
        }
    }
}

/// The call as it was held, with a ticket for `token`.
fn rebuild(record: &HeldRecord, token: &str) -> Result<ToolCall, InboxError> {
    let held = &record.call;
    let input = record.input().map_err(|why| {
        InboxError::new(
            crate::InboxErrorKind::Record,
            format!(
                "the input of held call `{}` cannot be read: {why}",
                held.interaction_id
            ),
        )
    })?;
    let mut call = ToolCall::new(held.agent.clone(), held.tool.clone(), input)
        .with_id(CallId::new(held.call_id.clone()))
        .with_run(held.run)
        .with_turn(held.turn.clone());
    // R20: the numbers as held (an integer past 64 bits keeps its digits), so the resumed
    // call decides and redeems as the held one did.
    let literals = record.literals();
    if !literals.is_empty() {
        call.extensions.insert(literals);
    }
    call.extensions.insert(ticket(&held.interaction_id, token));
    Ok(call)
}

fn output_json(outcome: CallOutcome, o: &ToolOutput) -> Value {
    json!({"outcome": outcome.as_str(), "content": o.content, "structured": o.structured})
}

/// A response as the store records it: `{"outcome": "completed" | "failed" | "refused" |
/// "held", …}`.
pub fn response_json(response: &ToolResponse) -> Value {
    match response {
        ToolResponse::Completed(o) | ToolResponse::Failed(o) => output_json(response.outcome(), o),
        ToolResponse::Refused(r) => json!({
            "outcome": response.outcome().as_str(),
            "code": r.code.as_str(),
            "decided_by": r.decided_by.as_str(),
            "reasons": r.reasons,
        }),
        ToolResponse::Held(h) => json!({
            "outcome": response.outcome().as_str(),
            "interaction_id": h.interaction_id,
            "reasons": h.reasons,
        }),
    }
}
