//! # toolgate-inbox
//!
//! Durable held calls for toolgate (SPEC R26, R35, R38, R22): with
//! `approval.channel = "inbox"`, an asked call is stored and the gate answers at once with a
//! held response carrying an unguessable interaction id; nothing holds a process while a
//! person decides. A person answers later — after deploys and restarts, from another machine
//! (`toolgate inbox approve`) — and the approved call is sent **once**, through the **same**
//! layer stack as any call, with **exactly** the input the person saw.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use std::sync::{Arc, atomic::{AtomicUsize, Ordering}};
//! use serde_json::json;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! use toolgate::GovernanceHandle;
//! use toolgate::approval::ApprovalGateLayer;
//! use toolgate_core::{AgentRef, ToolCall, ToolOutput, ToolResponse};
//! use toolgate_engine::config::{load_str, Format};
//! use toolgate_inbox::{Answer, Inbox, InboxStore, SqliteInbox, SqliteOptions, State};
//!
//! let handle = GovernanceHandle::new(load_str(r#"{"approval": {"channel": "inbox"},
//!     "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"}],
//!     "agents": [{"name": "support", "allowed_tools": ["refund"]}]}"#, Format::Json).unwrap());
//! let dir = tempfile::tempdir().unwrap();
//! let inbox = Inbox::new(SqliteInbox::open(dir.path().join("inbox.db"), SqliteOptions::default()).unwrap());
//! let runs = Arc::new(AtomicUsize::new(0));
//! let counter = Arc::clone(&runs);
//! let stack = ServiceBuilder::new()
//!     .layer(ApprovalGateLayer::new(handle).channel(inbox.channel()))
//!     .service(service_fn(move |call: ToolCall| {
//!         counter.fetch_add(1, Ordering::SeqCst);
//!         async move { Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(call.input))) }
//!     }));
//!
//! // The call is held: the agent pauses its turn.
//! let call = ToolCall::new(AgentRef::profile("support"), "refund", json!({"order": 7}));
//! let ToolResponse::Held(held) = stack.clone().oneshot(call).await.unwrap() else { panic!() };
//!
//! // Later, maybe from another process: a person approves (idempotently).
//! inbox.store().answer(&held.interaction_id, Answer::approve("ticket-42", "alice")).await.unwrap();
//!
//! // The approved call is sent through the same stack, exactly once.
//! let resumed = inbox.resume(&held.interaction_id, stack.clone()).await.unwrap();
//! assert_eq!(resumed.response, ToolResponse::Completed(ToolOutput::new(json!({"order": 7}))));
//! assert_eq!(resumed.recorded, Some(State::Done));
//! assert!(inbox.resume(&held.interaction_id, stack).await.is_err(), "never twice");
//! assert_eq!(runs.load(Ordering::SeqCst), 1);
//!
//! // A person who denies with another key is refused: the call was already decided.
//! let refused = inbox.store().answer(&held.interaction_id, Answer::deny("ticket-43", "bob", None)).await;
//! assert!(refused.is_err());
//! # }
//! ```
//!
//! ## The state machine
//!
//! ```text
//! pending ──► approved ──► claimed ──► done
//!    │                        │  └───► failed
//!    ├──► denied              └──────► unknown   (recover(): the process died after the claim)
//!    ├──► expired
//!    └──► cancelled
//! ```
//!
//! Every arrow is a conditional update (`UPDATE … WHERE state = <from>`), so racing answers
//! or racing senders have exactly one winner. The claim is committed before the tool is
//! invoked; a process that dies between the claim and recording the result leaves the call
//! `claimed`, and [`HeldCalls::recover`] at the next start marks it `unknown` — never sent
//! again automatically.
//!
//! ## Pieces
//!
//! | item | what it is |
//! |---|---|
//! | [`InboxStore`] | the object-safe storage trait (SQLite here; PostgreSQL in `toolgate-inbox-postgres`) |
//! | `SqliteInbox` | embedded SQLite (feature `sqlite`, on by default): WAL, `synchronous=NORMAL` (or `FULL`), busy timeout, schema on open |
//! | [`InboxChannel`] | the `ApprovalChannel` the gate talks to: holds calls, redeems resume tickets |
//! | [`Inbox`] | a store + its channel + [`Inbox::resume`] and [`Inbox::result`] |
//! | [`put_policy_text`], [`put_policy_text_if_unchanged`], [`load_policy_state`], [`poll_policy`] | the stored tenant policy (R22, R23); a put based on a stale `updatedAt` is a conflict |
//! | [`put_shadow_policy_text`], [`load_shadow_policy`], [`PolicyWatch::poll_shadow_once`] | the stored shadow policy (R46), beside the enforced one: decided on every call and recorded, never enforced; one that cannot be read is a load error at start-up and changes nothing at run time |
//! | `toolgate-inbox-suite` | the conformance suite every backend runs: a test kit of its own (`publish = false`), not part of this crate |
//! | [`state`] | the state machine's decisions (answer, replay, expiry, claim, result), pure, shared by every backend |
//! | [`StoredGrant`], [`InboxGrants`] | grants kept in the inbox (R45): `live`, `expired`, `spent` or `revoked`; the engine's grant store on any inbox |
//! | [`codec`] | the stored text forms (identities, reasons, run mode, policy body, `updatedAt`), shared by every backend |
//!
//! ## Sessions and turns (R43)
//!
//! A call placed in a turn (`ToolCall::in_turn(session, turn)`) is held with its session and
//! turn. [`HeldCalls::pending`] lists a session's open interactions oldest first (a
//! subagent's held calls on its parent's session, with the subagent's id as `agent`);
//! [`HeldCalls::turn_state`] says whether a turn is paused and by which held calls
//! ([`TurnState`]); [`HeldCalls::cancel_turn`] ends each held call of a turn not yet sent
//! (pending or approved) `cancelled`. [`HeldRecord::interaction`] is what a person sees: the prompt
//! (`Approve server / tool?`), every reason, the identity, the model's name and the input. An
//! [`Answer`] may carry an idempotency key; without one each answer is its own.
//!
//! ## Exactly once, and exactly what was seen
//!
//! A resumed call carries a [`toolgate_core::approval::ResumeTicket`] and passes every layer again
//! (R38). At the approval gate the inbox channel approves it only when the held call is
//! `approved` for the same tool and agent, the input is equal (as JSON values, and by its
//! RFC 8785 hash) and the tool's definition hash is unchanged (R35), and the fresh decision
//! asks for no reason the person was not asked about (R38); then it claims the call. The
//! gate redeems the ticket whatever its fresh decision is — also when nothing asks any more
//! (a relaxed policy or posture, a new exemption or override, `auto_approve_required` with
//! only an agent-level ask left) — so the claim is never skipped. A call that the fresh
//! decision refuses is never sent: it is ended `failed` with the refusal recorded (except
//! for `no_approval_channel`, which says only that the inbox could not be reached: the call
//! stays `approved`).
//! The input sent is the stored one, serialised exactly as received (RFC 8785's canonical form
//! is kept for the hash only, because it rounds large integers through doubles).
#![forbid(unsafe_code)]

/// Guides: the chapters of the manual about this crate, every example compiled and run as
/// a doctest.
pub mod guide {
    #[doc = include_str!("../docs/held-calls.md")]
    pub mod held_calls {}
}

mod channel;
pub mod codec;
mod edit;
mod error;
mod grant_store;
mod grants;
mod model;
mod policy;
mod query;
mod question;
#[cfg(feature = "sqlite")]
mod quota;
mod resume;
pub mod settings;
#[cfg(feature = "sqlite")]
mod sqlite;
pub mod state;
mod store;
#[cfg(test)]
mod test_calls;

pub use channel::{DEFAULT_TTL, INBOX_APPROVER, InboxChannel};
pub use codec::RecordError;
pub use edit::{EditError, EditedInput, StoredEdit};
pub use error::{
    AnswerError, ClaimError, CompleteError, InboxError, InboxErrorKind, PolicySaveError,
};
pub use grant_store::{GRANT_TIMEOUT, InboxGrants};
pub use grants::{
    GrantRequest, GrantState, MayNotRevoke, Revocation, RevokeError, StoredGrant, grant_from_text,
    may_revoke, new_grant_id, summary_line as grant_summary_line,
};
pub use model::{
    Answer, AnswerBinding, AnswerReceipt, CallResult, Claim, Claimed, Completion, GivenApproval,
    HeldRecord, HoldError, Holding, InvalidAnswer, MAX_APPROVALS, MAX_REASON_CHARS, NewHeldCall,
    Outcome, State, StoredPolicy, Timestamp, TurnState, waits_for,
};
pub use policy::{
    PolicyPoll, PolicyWatch, PutPolicyError, ShadowPoll, load_policy_state, load_shadow_policy,
    log_shadow_poll, policy_state_of, poll_policy, put_policy_text, put_policy_text_if_unchanged,
    put_shadow_policy_text,
};
pub use query::{HeldCursor, HeldPage, HeldQuery, Listing, MAX_PAGE, Order, SqlDialect, VisibleTo};
pub use question::OpenQuestion;
#[cfg(feature = "sqlite")]
pub use quota::SqliteQuotaCounter;
pub use resume::{Inbox, ResumeError, Resumed, response_json};
pub use settings::{InboxSettings, InboxStoreSetting, InboxSynchronous};
#[cfg(feature = "sqlite")]
pub use sqlite::{
    APPLICATION_ID, GRANTS_TABLE, OPEN_INDEX, PAGE_INDEXES, REPEAT_COLUMN, REPEAT_INDEX, SCHEMA_V1,
    SCHEMA_V2, SCHEMA_VERSION, SqliteInbox, SqliteOptions, Synchronous,
};
pub use store::{
    BoxFuture, HeldCalls, InboxStore, Nonces, OpenQuestions, StoredGrants, StoredPolicies,
};

/// The store's traits, to call a backend's methods on its own type
/// (`use toolgate_inbox::prelude::*;`): [`InboxStore`] is their union, and a
/// `dyn InboxStore` has every method without them.
pub mod prelude {
    pub use crate::store::{
        HeldCalls, InboxStore, Nonces, OpenQuestions, StoredGrants, StoredPolicies,
    };
}
