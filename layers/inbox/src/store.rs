//! The storage trait every backend implements (SQLite here; Postgres next), with the same
//! conditional updates and the same shared test suite (`suite`, feature `suite`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use toolgate_core::AgentRef;
use toolgate_engine::policy::Policy;

use std::sync::Arc;

use toolgate_engine::grant::{Grant, GrantStore};

use crate::error::{AnswerError, ClaimError, CompleteError, InboxError, PolicySaveError};
use crate::grants::{RevokeError, StoredGrant, no_grants};
use crate::model::{
    Answer, AnswerReceipt, Claim, Claimed, Completion, HeldRecord, Holding, NewHeldCall, State,
    StoredPolicy, Timestamp, TurnState,
};
use crate::query::{HeldPage, HeldQuery};

/// A boxed, sendable future borrowing from its store.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Durable storage for held calls and the stored tenant policy.
///
/// The trait is object-safe (`Arc<dyn InboxStore>`): every method returns a boxed future.
///
/// # Contract
///
/// Every backend must give these guarantees; `suite::run_all` (feature `suite`) checks them.
///
/// - A state change is one conditional update (`… WHERE state = <from>`), committed before the
///   method returns; when two callers race for one transition, exactly one wins and the other
///   gets the distinct error for the state it lost to.
/// - [`answer`](HeldCalls::answer): the same idempotency key twice is one answer (the same
///   receipt, `replayed`); the same key with the other answer is
///   [`AnswerError::Conflict`]; an id never held is [`AnswerError::UnknownId`]; a call already
///   decided with another key is [`AnswerError::AlreadyDecided`]; an answer at or after the
///   call's `expires_at` marks it `expired` and is [`AnswerError::Expired`].
/// - [`claim`](HeldCalls::claim) moves `approved → claimed` only when the input hash and
///   the definition hash equal the approved ones (R35), and is committed before the caller
///   invokes the tool.
/// - [`complete`](HeldCalls::complete) moves `claimed → done | failed` only for the claim's
///   own token.
/// - [`recover`](HeldCalls::recover) moves this instance's `claimed` calls to `unknown`;
///   nothing ever moves a call back to `approved`.
/// - An answer without an idempotency key is its own: it never replays another answer.
/// - [`session_calls`](HeldCalls::session_calls) lists the calls held in a session (or in
///   one of its turns), oldest first; [`cancel_turn`](HeldCalls::cancel_turn) ends every
///   held call of the turn not yet sent — pending or approved — `cancelled` (a pending one
///   past its expiry `expired`) in one transaction (R43, R47).
/// - [`hold_unless_repeated`](HeldCalls::hold_unless_repeated) looks for the same call
///   (agent, tool, exact input) and holds it anew only when there is none open or being
///   sent and the last one's ending was already told, in one transaction serialised with
///   every other such hold of the same call: concurrent repeats never hold two cards (R26).
/// - [`find_open`](HeldCalls::find_open) finds the open held call of one agent for one
///   tool and input hash — the approved one when there is one, else the pending one,
///   newest first — by an index, not by listing (R26, R38);
///   [`find_open_all`](HeldCalls::find_open_all) returns every such candidate in that
///   order, for a caller that compares the stored input exactly (R35).
/// - [`put_policy`](StoredPolicies::put_policy) replaces the whole stored policy in one
///   transaction and stamps a strictly increasing `updatedAt`.
/// - [`put_policy_if_unchanged`](StoredPolicies::put_policy_if_unchanged) compares the stored
///   `updatedAt` with the expected one and replaces the policy in the same transaction, with
///   puts serialised across connections and processes: of two puts based on the same
///   `updatedAt`, exactly one saves and the other is [`PolicySaveError::Conflict`].
pub trait InboxStore: HeldCalls + OpenQuestions + Nonces + StoredPolicies + StoredGrants {}

impl<T> InboxStore for T where
    T: HeldCalls + OpenQuestions + Nonces + StoredPolicies + StoredGrants + ?Sized
{
}

/// Held calls (R26): holding, answering, claiming and completing them, with their sessions
/// and turns (R43), edits and repeats — the conditional updates of the contract above
/// [`InboxStore`].
pub trait HeldCalls: fmt::Debug + Send + Sync + 'static {
    /// Stores a new held call as `pending`.
    fn hold(&self, call: NewHeldCall) -> BoxFuture<'_, Result<(), InboxError>>;

    /// The held call with this id, if the store issued it.
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<HeldRecord>, InboxError>>;

    /// Held calls, oldest first, optionally only those in `state`.
    fn list(&self, state: Option<State>) -> BoxFuture<'_, Result<Vec<HeldRecord>, InboxError>>;

    /// One page of the held calls `query` selects, in its order, after its cursor
    /// (held-calls.md, "Pages of held calls"): the pending or the answered calls, filtered
    /// by agent, tool, server, session, reason source, age and input text
    /// ([`HeldQuery::matches`] says what each means).
    ///
    /// The backends answer with one statement over an index; this provided method lists
    /// every call and filters in memory (correct, but linear in the inbox).
    fn query_held<'a>(
        &'a self,
        query: &'a HeldQuery,
    ) -> BoxFuture<'a, Result<HeldPage, InboxError>> {
        Box::pin(async move { Ok(query.page_of(self.list(None).await?)) })
    }

    /// How many held calls `query`'s filters select (its cursor and limit aside).
    ///
    /// The backends count with one statement; this provided method lists and counts.
    fn count_held<'a>(&'a self, query: &'a HeldQuery) -> BoxFuture<'a, Result<u64, InboxError>> {
        Box::pin(async move {
            let n = self
                .list(None)
                .await?
                .iter()
                .filter(|r| query.matches(r))
                .count();
            Ok(u64::try_from(n).unwrap_or(u64::MAX))
        })
    }

    /// The held calls whose last change (`updated_at`) is at or after `since`, in the order
    /// of their change (then id), at most `limit` (the change feed of the page's live
    /// update: a call held, answered, expired, cancelled or sent).
    ///
    /// The backends read an index of `updated_at`; this provided method lists and filters.
    fn changed_since(
        &self,
        since: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<HeldRecord>, InboxError>> {
        Box::pin(async move {
            let mut all: Vec<HeldRecord> = self
                .list(None)
                .await?
                .into_iter()
                .filter(|r| r.updated_at >= since)
                .collect();
            all.sort_by(|a, b| (a.updated_at, a.id()).cmp(&(b.updated_at, b.id())));
            all.truncate(limit);
            Ok(all)
        })
    }

    /// The calls held in `session` (only those of turn `turn`, when given), oldest first
    /// (R43).
    fn session_calls<'a>(
        &'a self,
        session: &'a str,
        turn: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<HeldRecord>, InboxError>>;

    /// Cancels turn `turn` of `session`: each of its held calls not yet sent — pending, or
    /// approved and not claimed — ends `cancelled` (a pending one already past its expiry
    /// ends `expired`), in one transaction; returns the ids cancelled (R43, R47). A call
    /// already claimed for sending is left to finish.
    fn cancel_turn<'a>(
        &'a self,
        session: &'a str,
        turn: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, InboxError>>;

    /// A session's open interactions (held calls nobody has answered), oldest first (R43).
    /// A subagent's held call is listed on its parent's session.
    fn pending<'a>(
        &'a self,
        session: &'a str,
    ) -> BoxFuture<'a, Result<Vec<HeldRecord>, InboxError>> {
        Box::pin(async move {
            let mut calls = self.session_calls(session, None).await?;
            calls.retain(|r| r.state == State::Pending);
            Ok(calls)
        })
    }

    /// Whether turn `turn` of `session` is paused, and by which held calls (R43).
    fn turn_state<'a>(
        &'a self,
        session: &'a str,
        turn: &'a str,
    ) -> BoxFuture<'a, Result<TurnState, InboxError>> {
        Box::pin(async move {
            Ok(TurnState::new(
                self.session_calls(session, Some(turn)).await?,
            ))
        })
    }

    /// The open held call of `agent` (its profile and subagent, compared exactly) for
    /// `tool` (compared ASCII-case-insensitively, as tool names are resolved) and the input
    /// whose RFC 8785 hash is `input_hash` ([`NewHeldCall::input_hash`]): the `approved` one
    /// when there is one (to redeem, R38), else the `pending` one (to report again rather
    /// than hold twice, R26); of several, the newest (`created_at`, then the id). A call in
    /// any other state is never found.
    ///
    /// The backends answer from an index; this provided method lists the approved and then
    /// the pending calls and scans them (correct, but linear in the open calls): a store
    /// with many open calls should override it.
    fn find_open<'a>(
        &'a self,
        agent: &'a AgentRef,
        tool: &'a str,
        input_hash: &'a str,
    ) -> BoxFuture<'a, Result<Option<HeldRecord>, InboxError>> {
        Box::pin(async move {
            for state in [State::Approved, State::Pending] {
                let newest = self
                    .list(Some(state))
                    .await?
                    .into_iter()
                    .filter(|r| is_open_match(r, agent, tool, input_hash))
                    .max_by(|a, b| (a.call.created_at, a.id()).cmp(&(b.call.created_at, b.id())));
                if newest.is_some() {
                    return Ok(newest);
                }
            }
            Ok(None)
        })
    }

    /// Every open held call [`find_open`](HeldCalls::find_open) chooses among — `agent`'s
    /// (compared exactly) `approved` and `pending` calls for `tool` (up to ASCII case) whose
    /// input has the RFC 8785 hash `input_hash` — in its order: the approved ones first,
    /// then the pending ones, each newest first (`created_at`, then the id). Two different
    /// inputs can share a canonical hash (`{"amount": 1.0}` and `{"amount": 1}`), so a
    /// caller redeeming or reporting the open call of one input compares each candidate's
    /// stored input with its own, exactly, and takes the first that is its own (R35, R38).
    ///
    /// The backends answer from the same index as `find_open`; this provided method lists
    /// the approved and then the pending calls and scans them.
    fn find_open_all<'a>(
        &'a self,
        agent: &'a AgentRef,
        tool: &'a str,
        input_hash: &'a str,
    ) -> BoxFuture<'a, Result<Vec<HeldRecord>, InboxError>> {
        Box::pin(async move {
            let mut out = Vec::new();
            for state in [State::Approved, State::Pending] {
                let mut found: Vec<HeldRecord> = self
                    .list(Some(state))
                    .await?
                    .into_iter()
                    .filter(|r| is_open_match(r, agent, tool, input_hash))
                    .collect();
                found.sort_by(|a, b| (b.call.created_at, b.id()).cmp(&(a.call.created_at, a.id())));
                out.append(&mut found);
            }
            Ok(out)
        })
    }

    /// Holds `call` unless it repeats one already held: the same agent (compared exactly),
    /// tool (ASCII case-insensitively) and input (its hash, then the stored input exactly).
    /// Of the repeated calls, the newest decides (R26):
    ///
    /// - `pending` (not yet due), `approved` or `claimed`: [`Holding::Open`], nothing held —
    ///   it is still asked, can be redeemed, or is being sent;
    /// - `pending` past its expiry: marked `expired`, and told as below;
    /// - ended (`denied`, `expired`, `cancelled`, `done`, `failed`, `unknown`) and its ending
    ///   not yet told: [`Holding::Ended`], the ending marked told — so a repeat hears it
    ///   once, and the repeat after that is a fresh ask;
    /// - otherwise (none, or the ending was told): `call` is held `pending`,
    ///   [`Holding::Held`].
    ///
    /// The look-up and the hold are one transaction, serialised with every other
    /// `hold_unless_repeated` of the same call, so concurrent repeats never hold two cards.
    ///
    /// This provided method only holds (it never finds a repeat): the backends override it.
    fn hold_unless_repeated(
        &self,
        call: NewHeldCall,
    ) -> BoxFuture<'_, Result<Holding, InboxError>> {
        Box::pin(async move { self.hold(call).await.map(|()| Holding::Held) })
    }

    /// Records a person's answer: `pending → approved | denied` (or `expired`).
    fn answer<'a>(
        &'a self,
        id: &'a str,
        answer: Answer,
    ) -> BoxFuture<'a, Result<AnswerReceipt, AnswerError>>;

    /// Records an approval with an edited input (approval-page.md, "Approve with edits"):
    /// `pending → approved`, the held call's input replaced by `edit` (so its claim is
    /// bound to the edited input's hash, R35) and the input the agent sent kept beside it
    /// with who edited ([`HeldCalls::edit_of`]), in one transaction. A retry with the same
    /// key and the same edit is replayed; anything else on a call no longer pending is
    /// refused as [`HeldCalls::answer`] refuses it.
    ///
    /// This provided method refuses: a store that records edits overrides it (both backends do).
    fn answer_edited<'a>(
        &'a self,
        id: &'a str,
        answer: Answer,
        edit: crate::edit::EditedInput,
    ) -> BoxFuture<'a, Result<AnswerReceipt, AnswerError>> {
        let _ = (id, answer, edit);
        Box::pin(async {
            Err(AnswerError::Invalid(String::from(
                "this inbox cannot record an approval with an edited input",
            )))
        })
    }

    /// What an edited approval of held call `id` recorded, if it was approved with edits.
    fn edit_of<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::edit::StoredEdit>, InboxError>> {
        let _ = id;
        Box::pin(async { Ok(None) })
    }

    /// Cancels a pending call: `pending → cancelled`.
    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), AnswerError>>;

    /// Marks every pending call whose expiry is at or before `now` `expired`; returns their
    /// ids.
    fn expire_due(&self, now: Timestamp) -> BoxFuture<'_, Result<Vec<String>, InboxError>>;

    /// Claims an approved call for sending: `approved → claimed`.
    fn claim<'a>(&'a self, id: &'a str, claim: Claim)
    -> BoxFuture<'a, Result<Claimed, ClaimError>>;

    /// Records the response of a claimed call: `claimed → done | failed`.
    fn complete<'a>(
        &'a self,
        id: &'a str,
        completion: Completion,
    ) -> BoxFuture<'a, Result<State, CompleteError>>;

    /// At startup: marks the calls this instance had claimed `unknown` (the process died
    /// between claim and result); returns their ids. They are never sent again
    /// automatically.
    fn recover(&self) -> BoxFuture<'_, Result<Vec<String>, InboxError>>;

    /// Marks the calls that instance `instance` claimed `unknown`, as
    /// [`recover`](HeldCalls::recover) does for this instance's own: for an instance known
    /// to have stopped (a process killed between claim and result), never for a live one,
    /// whose claims are its own to record. Returns their ids, oldest first.
    ///
    /// This provided method refuses: a store that can recover another instance's claims
    /// overrides it (both backends do).
    fn recover_instance<'a>(
        &'a self,
        instance: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, InboxError>> {
        Box::pin(async move {
            Err(InboxError::new(
                crate::error::InboxErrorKind::Unavailable,
                format!("this inbox cannot recover the calls instance `{instance}` claimed"),
            ))
        })
    }
}

/// The questions a 2026-07-28 client took to its user (R47), kept for its retry on any
/// replica: opened once, taken once.
pub trait OpenQuestions: fmt::Debug + Send + Sync + 'static {
    /// Keeps `question` open until its expiry (R47: a question a 2026-07-28 client took to
    /// its user, answered by its retry on any replica sharing the inbox). Answers `false`,
    /// keeping nothing, when `at_most` questions are open already; questions past their
    /// expiry at `now` are pruned first. A key already open is an error (keys come from
    /// unguessable states, so two are never alike).
    ///
    /// This provided method refuses: a store that keeps questions overrides it (both
    /// backends do).
    fn open_question<'a>(
        &'a self,
        question: crate::question::OpenQuestion,
        at_most: u32,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, InboxError>> {
        let _ = (question, at_most, now);
        Box::pin(async {
            Err(InboxError::new(
                crate::error::InboxErrorKind::Unavailable,
                "this inbox cannot keep approval questions",
            ))
        })
    }

    /// Takes the question open under `key` out of the store, once: of racing takes exactly
    /// one gets it (one conditional delete), and it is never answerable again. A question
    /// past its expiry is given back too, for the caller to say so; `None` when no question
    /// is open under `key` (never opened, taken already, or pruned).
    ///
    /// This provided method refuses, like [`OpenQuestions::open_question`].
    fn take_question<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::question::OpenQuestion>, InboxError>> {
        let _ = key;
        Box::pin(async {
            Err(InboxError::new(
                crate::error::InboxErrorKind::Unavailable,
                "this inbox cannot keep approval questions",
            ))
        })
    }
}

/// The replay guard of signed callbacks: a nonce is taken once within its window.
pub trait Nonces: fmt::Debug + Send + Sync + 'static {
    /// Takes `nonce` once (the replay guard of signed callbacks such as Slack's;
    /// approval-page.md, "Answering from Slack"): records it as seen until `until` and
    /// answers `true`, or answers `false` when it was taken before and its `until` is not
    /// yet past at `now` — by any handle or process sharing the inbox, so replicas behind a
    /// load balancer and a restarted process refuse the same replay. One conditional
    /// insert: of racing takes of one nonce exactly one is `true`. Nonces whose `until` is
    /// past at `now` are pruned.
    ///
    /// This provided method refuses: a store that keeps nonces overrides it (both backends
    /// do).
    fn take_nonce<'a>(
        &'a self,
        nonce: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, InboxError>> {
        let _ = (nonce, until, now);
        Box::pin(async {
            Err(InboxError::new(
                crate::error::InboxErrorKind::Unavailable,
                "this inbox cannot keep the nonces of signed callbacks",
            ))
        })
    }
}

/// The stored tenant policy and its shadow (R22, R46), replaced whole.
pub trait StoredPolicies: fmt::Debug + Send + Sync + 'static {
    /// The stored tenant policy, if one was ever put.
    fn get_policy(&self) -> BoxFuture<'_, Result<Option<StoredPolicy>, InboxError>>;

    /// Replaces the stored policy whole. Only a validated [`Policy`] can be put: validation
    /// happens before ([`crate::put_policy_text`]), so a refused put changes nothing.
    fn put_policy<'a>(
        &'a self,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<StoredPolicy, InboxError>>;

    /// Replaces the stored policy whole only if it is still the one the caller read: its
    /// `updatedAt` equals `expected_updated_at` (`None`: only if no policy is stored). The
    /// comparison and the save are one transaction, so a put from another connection or
    /// process cannot slip in between; a stale base is [`PolicySaveError::Conflict`] with the
    /// stored `updatedAt`, and nothing is saved (R22, R23).
    fn put_policy_if_unchanged<'a>(
        &'a self,
        expected_updated_at: Option<&'a str>,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<StoredPolicy, PolicySaveError>>;

    /// The stored shadow tenant policy (R46), if one is stored: kept beside the enforced
    /// policy, decided beside it, never enforced. A store that keeps none answers `None`.
    fn get_shadow_policy(&self) -> BoxFuture<'_, Result<Option<StoredPolicy>, InboxError>> {
        Box::pin(async { Ok(None) })
    }

    /// Replaces the stored shadow policy whole (validated before, as the enforced one is),
    /// with an `updatedAt` of its own. A store that cannot keep one refuses.
    fn put_shadow_policy<'a>(
        &'a self,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<StoredPolicy, InboxError>> {
        let _ = policy;
        Box::pin(async {
            Err(InboxError::new(
                crate::error::InboxErrorKind::Unavailable,
                "this inbox cannot store a shadow policy",
            ))
        })
    }

    /// Removes the stored shadow policy: `true` when one was stored. A store that cannot
    /// keep one refuses.
    fn clear_shadow_policy(&self) -> BoxFuture<'_, Result<bool, InboxError>> {
        Box::pin(async {
            Err(InboxError::new(
                crate::error::InboxErrorKind::Unavailable,
                "this inbox cannot store a shadow policy",
            ))
        })
    }
}

/// Standing approvals (R45): added, listed, used and revoked.
pub trait StoredGrants: fmt::Debug + Send + Sync + 'static {
    /// Stores a grant (R45) after the others, unused and unrevoked, at `now`. A grant whose
    /// id is taken is [`InboxErrorKind::Duplicate`](crate::InboxErrorKind::Duplicate) and
    /// changes nothing.
    ///
    /// This provided method refuses: a store that keeps grants overrides every grant
    /// method (both backends do).
    fn add_grant<'a>(
        &'a self,
        grant: &'a Grant,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<StoredGrant, InboxError>> {
        self.add_grant_as(grant, None, now)
    }

    /// [`StoredGrants::add_grant`], recording the giver's verified principal (the `sub` and
    /// `iss` of the identity-provider token they gave it with) beside the grant.
    ///
    /// This provided method refuses: a store that keeps grants overrides it (both backends
    /// do).
    fn add_grant_as<'a>(
        &'a self,
        grant: &'a Grant,
        principal: Option<&'a toolgate_core::Principal>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<StoredGrant, InboxError>> {
        let _ = (grant, principal, now);
        Box::pin(async { Err(no_grants()) })
    }

    /// Every stored grant, in the order they were given, whatever its state.
    fn grants(&self) -> BoxFuture<'_, Result<Vec<StoredGrant>, InboxError>> {
        Box::pin(async { Err(no_grants()) })
    }

    /// The grants live at `now`, in the order they were given (what a call is answered
    /// from: the first live grant that matches it).
    fn live_grants(&self, now: Timestamp) -> BoxFuture<'_, Result<Vec<StoredGrant>, InboxError>> {
        Box::pin(async move {
            let mut all = self.grants().await?;
            all.retain(|g| g.state(now) == crate::grants::GrantState::Live);
            Ok(all)
        })
    }

    /// Counts one send under grant `id` at `now`, in one conditional update with the check
    /// that it is still live (not revoked, `now` before its expiry, fewer than `max_calls`
    /// sends): `false`, nothing counted, when it is not (or no grant has that id). Racing
    /// uses never count more than `max_calls`.
    fn use_grant<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, InboxError>> {
        let _ = (id, now);
        Box::pin(async { Err(no_grants()) })
    }

    /// The engine's grant store on this inbox's grants ([`crate::InboxGrants`]), for the
    /// stack's ledger (`GovernanceHandle::set_grants`): a grant added, spent or revoked by
    /// any process sharing the inbox takes effect on the next call.
    ///
    /// This provided method refuses; both backends override it.
    fn grant_store(&self) -> Result<Arc<dyn GrantStore>, InboxError> {
        Err(no_grants())
    }

    /// Revokes the live grant `id`: records `by` and `now`, in one conditional update. A
    /// grant that expired or was spent keeps that ending ([`RevokeError::Ended`]).
    fn revoke_grant<'a>(
        &'a self,
        id: &'a str,
        by: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<StoredGrant, RevokeError>> {
        let _ = (id, by, now);
        Box::pin(async { Err(RevokeError::Store(no_grants())) })
    }
}

/// Whether `record` is what [`HeldCalls::find_open`] looks for: open (`approved` or
/// `pending`), held for `agent` exactly, for `tool` up to ASCII case, with `input_hash`.
pub(crate) fn is_open_match(
    record: &HeldRecord,
    agent: &AgentRef,
    tool: &str,
    input_hash: &str,
) -> bool {
    matches!(record.state, State::Approved | State::Pending)
        && record.call.agent == *agent
        && record.call.tool.eq_ignore_ascii_case(tool)
        && record.call.input_hash == input_hash
}
