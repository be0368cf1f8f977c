//! The conformance suite every [`InboxStore`] backend must pass (R22, R26, R35).
//!
//! A backend's tests implement [`Fixture`] (a fresh, empty store per case; a way to damage
//! the stored policy behind the store's back; a way to reopen after a "restart") and call
//! [`run_all`]. Each case panics with a message naming the rule it checks, like `assert!`.
//!
//! One file per rule family — the lifecycle of a held call (R26), the stored and shadow
//! policy (R22, R46), sessions (R43), repeats (R38), grants (R45), edits, four eyes (R51),
//! pages, visibility, nonces and open questions (R47) — each case a function named after the rule it protects;
//! `run_all` runs them all. A test kit, not shipped: `publish = false`, so no shipped crate
//! carries panicking test code or a feature for it.
//!
//! ```no_run
//! # async fn f(fixture: &dyn toolgate_inbox_suite::Fixture) {
//! toolgate_inbox_suite::run_all(fixture).await;
//! # }
//! ```
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "a conformance suite: a broken promise of the store fails the case that found it; its cases are named, not documented one by one"
)]

pub mod edit;
pub mod four_eyes;
mod grants;
mod lifecycle;
pub mod nonce;
mod policy;
pub mod query;
pub mod questions;
mod repeats;
mod sessions;
pub mod visible;

pub use grants::*;
pub use lifecycle::*;
pub use policy::*;
pub use repeats::*;
pub use sessions::*;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolgate_core::approval::ApprovalRequest;
use toolgate_core::{AgentRef, Ask, AskSource, CallId, RunContext, RunMode, ToolIdentity, Turn};
use toolgate_engine::PolicyState;
use toolgate_engine::canon;
use toolgate_engine::policy::Limits;

use toolgate_engine::grant::{Grant, parse_grants};

use toolgate_inbox::{Answer, Claim, Completion, Holding, NewHeldCall, Outcome, State, Timestamp};
use toolgate_inbox::{AnswerError, ClaimError, CompleteError, InboxErrorKind, PolicySaveError};
use toolgate_inbox::{BoxFuture, InboxStore};
use toolgate_inbox::{GrantState, Revocation, RevokeError};
use toolgate_inbox::{
    PutPolicyError, load_policy_state, put_policy_text, put_policy_text_if_unchanged,
};

/// What a backend provides to the suite.
pub trait Fixture: Send + Sync {
    /// A fresh, empty store (nothing held, no stored policy).
    fn fresh(&self) -> BoxFuture<'_, Arc<dyn InboxStore>>;

    /// A new store handle on the same data as `store`, as a restarted process opens it (same
    /// instance name).
    fn reopen<'a>(&'a self, store: &'a Arc<dyn InboxStore>) -> BoxFuture<'a, Arc<dyn InboxStore>>;

    /// Overwrites the stored policy's row with text that is not a policy, behind the store's
    /// back (a corrupted row).
    fn corrupt_policy<'a>(&'a self, store: &'a Arc<dyn InboxStore>) -> BoxFuture<'a, ()>;

    /// Stores `body` as the policy's row behind the store's back, bypassing validation (a
    /// policy written before a rule was refused, seed 002).
    fn write_policy_body<'a>(
        &'a self,
        store: &'a Arc<dyn InboxStore>,
        body: &'a str,
    ) -> BoxFuture<'a, ()>;
}

/// A fresh interaction id.
pub fn new_id() -> String {
    toolgate_core::id::random_id("ia_").expect("the operating system has randomness")
}

/// An approval request as the gate builds it, for `refund` with `input`.
pub fn request(input: Value) -> ApprovalRequest {
    let hash = canon::input_hash(&input).expect("a canonicalisable input");
    ApprovalRequest {
        interaction_id: new_id(),
        call_id: CallId::new("call-suite-1"),
        tool: "payments__refund".into(),
        identities: vec![ToolIdentity::mcp("payments", "refund")],
        agent: AgentRef::subagent("support", "sub-7"),
        input: Arc::new(input),
        literals: Default::default(),
        input_hash: hash,
        definition_hash: "sha256:definition-v1".into(),
        asks: vec![
            Ask::new(AskSource::Agent, "agent `support` requires approval"),
            Ask::new(AskSource::PolicyRule(2), "refunds need a person"),
        ],
        run: RunContext {
            mode: RunMode::UseAgentPolicy,
            background: true,
        },
        turn: Some(Turn::new("session-suite", "turn-1")),
        ticket: None,
        target: None,
        approvals: 1,
        labels: None,
    }
}

/// A held call for `input` by `agent` in turn `turn` of `session` (or in no turn), created
/// `age` ago.
pub fn held_in(
    input: Value,
    agent: AgentRef,
    turn: Option<(&str, &str)>,
    age: Duration,
) -> NewHeldCall {
    let mut r = request(input);
    r.agent = agent;
    r.turn = turn.map(|(s, t)| Turn::new(s, t));
    let created = Timestamp::now().saturating_sub(age);
    NewHeldCall::from_request(&r, created, HOUR + age).expect("a holdable call")
}

/// A held call for `input`, created now, expiring after `ttl`.
pub fn held(input: Value, ttl: Duration) -> NewHeldCall {
    NewHeldCall::from_request(&request(input), Timestamp::now(), ttl).expect("a holdable call")
}

/// A held call that expired a second ago.
pub fn held_expired(input: Value) -> NewHeldCall {
    let now = Timestamp::now();
    let mut c = held(input, Duration::from_secs(60));
    c.created_at = now.saturating_sub(Duration::from_secs(60));
    c.expires_at = now.saturating_sub(Duration::from_secs(1));
    c
}

const HOUR: Duration = Duration::from_secs(3600);

fn claim_of(c: &NewHeldCall, token: &str) -> Claim {
    Claim {
        input_hash: c.input_hash.clone(),
        definition_hash: c.definition_hash.clone(),
        token: token.into(),
    }
}

async fn approved(store: &dyn InboxStore, input: Value) -> NewHeldCall {
    let c = held(input, HOUR);
    store.hold(c.clone()).await.unwrap();
    store
        .answer(&c.interaction_id, Answer::approve("k-approve", "alice"))
        .await
        .unwrap();
    c
}

async fn state(store: &dyn InboxStore, id: &str) -> State {
    store
        .get(id)
        .await
        .unwrap()
        .expect("the held call exists")
        .state
}

/// Runs every case, each on a fresh store, printing its name.
pub async fn run_all(fixture: &dyn Fixture) {
    macro_rules! case {
        ($name:ident) => {{
            eprintln!("suite: {}", stringify!($name));
            $name(fixture).await;
        }};
    }
    case!(r26_a_held_call_keeps_the_call_exactly_as_decided);
    case!(r26_the_happy_path_pending_approved_claimed_done);
    case!(r26_a_failed_send_is_recorded_failed);
    case!(r26_the_same_key_twice_is_one_answer);
    case!(r26_the_same_key_with_the_other_answer_is_a_conflict);
    case!(r26_an_id_the_store_did_not_issue_is_refused);
    case!(r26_a_call_already_decided_is_refused);
    case!(r26_a_denial_is_final_and_keeps_its_reason);
    case!(r26_an_answer_after_expiry_is_refused_and_the_record_says_expired);
    case!(r26_expire_due_marks_only_pending_calls_past_expiry);
    case!(r26_only_a_pending_call_can_be_cancelled);
    case!(r26_answers_are_checked_for_a_key_and_a_name);
    case!(r26_an_answer_with_a_nul_character_is_refused_by_every_backend);
    case!(r35_a_claim_needs_the_approved_input_and_definition);
    case!(r26_an_approved_call_is_claimed_once);
    case!(r26_only_the_claims_token_records_the_result);
    case!(r26_recover_marks_claimed_calls_unknown_and_nothing_else);
    case!(r26_a_duplicate_interaction_id_is_refused);
    case!(r26_list_filters_by_state_oldest_first);
    case!(r26_racing_answers_have_exactly_one_winner);
    case!(r26_racing_claims_have_exactly_one_winner);
    case!(r22_a_stored_policy_round_trips_with_updated_at);
    case!(r22_a_refused_put_keeps_the_old_policy);
    case!(r22_a_stored_policy_that_cannot_be_read_is_unreadable);
    case!(seed002_r22_a_stored_rule_naming_the_wire_name_makes_the_policy_unreadable);
    case!(r22_a_policy_save_based_on_a_stale_updated_at_is_refused_as_a_conflict);
    case!(r22_racing_policy_saves_on_the_same_base_have_exactly_one_winner);
    case!(r46_a_shadow_policy_is_stored_beside_the_enforced_one_and_cleared);
    case!(r46_a_running_gate_picks_up_a_stored_shadow_and_its_removal);
    case!(r43_a_held_call_records_its_session_and_turn);
    case!(r43_the_interaction_has_every_field_a_person_sees);
    case!(r43_a_turn_is_paused_until_every_held_call_is_answered);
    case!(r43_cancel_turn_ends_each_pending_call_cancelled);
    case!(r43_pending_lists_a_sessions_open_interactions_oldest_first);
    case!(r43_a_subagents_call_is_listed_on_the_parents_session_a_flow_agents_on_its_own);
    case!(r43_without_an_idempotency_key_each_answer_is_its_own);
    case!(r43_the_same_key_retried_is_one_answer_and_the_other_answer_conflicts);
    case!(issue34_an_idempotency_key_is_its_approvers);
    case!(r26_a_repeat_of_a_denied_call_is_told_the_denial_once);
    case!(r26_a_repeat_of_an_expired_or_cancelled_call_is_told_so_once);
    case!(r26_a_repeat_of_an_open_or_sent_call_holds_nothing_new);
    case!(r26_concurrent_repeats_never_hold_two_cards);
    case!(r47_cancelling_a_turn_ends_its_approved_unsent_calls_for_good);
    case!(r26_a_stopped_instances_claims_become_unknown_and_a_repeat_is_told_so);
    case!(r47_an_answer_keeps_the_approvers_verified_principal);
    run_find_open(fixture).await;
    run_grants(fixture).await;
    query::run_query(fixture).await;
    edit::run_edit(fixture).await;
    visible::run_visible(fixture).await;
    nonce::run_nonce(fixture).await;
    questions::run_questions(fixture).await;
    four_eyes::run_four_eyes(fixture).await;
}

/// The cases of stored grants only (R45; also run by [`run_all`]).
pub async fn run_grants(fixture: &dyn Fixture) {
    macro_rules! case {
        ($name:ident) => {{
            eprintln!("suite: {}", stringify!($name));
            $name(fixture).await;
        }};
    }
    case!(r45_grants_are_kept_in_the_order_given_with_unique_ids_across_a_restart);
    case!(r45_a_grant_answers_until_spent_and_spent_is_neither_expired_nor_revoked);
    case!(r45_an_expired_grant_answers_nothing_and_keeps_its_ending);
    case!(r45_a_revocation_records_who_and_when_and_ends_the_grant_for_good);
    case!(r45_racing_uses_never_pass_max_calls);
    case!(r45_the_grant_store_answers_by_the_first_live_matching_grant_and_counts_its_sends);
    case!(issue34_a_grant_keeps_its_givers_principal_across_a_restart);
}

/// The cases of [`HeldCalls::find_open`](toolgate_inbox::HeldCalls::find_open) only (also run by [`run_all`]): for a store that
/// keeps the provided, scanning method.
pub async fn run_find_open(fixture: &dyn Fixture) {
    macro_rules! case {
        ($name:ident) => {{
            eprintln!("suite: {}", stringify!($name));
            $name(fixture).await;
        }};
    }
    case!(r38_find_open_prefers_the_approved_call_then_the_newest);
    case!(r26_r38_find_open_finds_only_this_agents_call_for_this_tool_and_input);
    case!(r26_r38_find_open_compares_the_tool_ascii_case_insensitively);
    case!(r26_r38_find_open_never_finds_a_decided_or_sent_call);
    case!(r35_r38_find_open_all_returns_every_open_call_sharing_the_hash);
}
