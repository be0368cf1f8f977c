//! The conformance suite every [`InboxStore`] backend must pass (R22, R26, R35).
//!
//! A backend's tests implement [`Fixture`] (a fresh, empty store per case; a way to damage
//! the stored policy behind the store's back; a way to reopen after a "restart") and call
//! [`run_all`]. Each case panics with a message naming the rule it checks, like `assert!`.
//!
//! One file, one thing: a flat list of independent cases, each a function named after the
//! rule it protects; splitting it would only scatter `run_all`'s list.
//!
//! ```no_run
//! # async fn f(fixture: &dyn toolgate_inbox::suite::Fixture) {
//! toolgate_inbox::suite::run_all(fixture).await;
//! # }
//! ```
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

pub mod edit;
pub mod four_eyes;
pub mod nonce;
pub mod query;
pub mod visible;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolgate_core::{AgentRef, Ask, AskSource, CallId, RunContext, RunMode, ToolIdentity, Turn};
use toolgate_engine::PolicyState;
use toolgate_engine::approval::ApprovalRequest;
use toolgate_engine::canon;
use toolgate_engine::policy::Limits;

use toolgate_engine::grant::{Grant, parse_grants};

use crate::error::{AnswerError, ClaimError, CompleteError, InboxErrorKind, PolicySaveError};
use crate::grants::{GrantState, Revocation, RevokeError};
use crate::model::{Answer, Claim, Completion, Holding, NewHeldCall, Outcome, State, Timestamp};
use crate::policy::{
    PutPolicyError, load_policy_state, put_policy_text, put_policy_text_if_unchanged,
};
use crate::store::{BoxFuture, InboxStore};

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
            Ask {
                source: AskSource::Agent,
                reason: "agent `support` requires approval".into(),
            },
            Ask {
                source: AskSource::PolicyRule(2),
                reason: "refunds need a person".into(),
            },
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

/// The cases of [`InboxStore::find_open`] only (also run by [`run_all`]): for a store that
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

pub async fn r26_a_held_call_keeps_the_call_exactly_as_decided(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    // A number RFC 8785 would round (2^63 - 1) is kept exactly in the input sent.
    let input = json!({"order": "A-1", "amount": 12.5, "big": 9_223_372_036_854_775_807_i64, "note": "ünï"});
    let c = held(input.clone(), HOUR);
    store.hold(c.clone()).await.unwrap();
    let r = store.get(&c.interaction_id).await.unwrap().unwrap();
    assert_eq!(r.call, c, "R26: the held call is kept exactly as decided");
    assert_eq!(r.state, State::Pending);
    assert_eq!(r.input().unwrap(), input, "the exact input is kept");
    assert_eq!(
        canon::sha256_hex(r.call.input_canonical.as_bytes()),
        r.call.input_hash
    );
    assert_eq!(r.call.reasons.len(), 2, "every reason, with its source");
    assert_eq!(r.call.reasons[1].source, AskSource::PolicyRule(2));
    assert_eq!(r.call.agent.subagent.as_deref(), Some("sub-7"));
    assert!(r.call.run.background);
    assert!(r.approver.is_none() && r.answer_key.is_none() && r.result.is_none());
}

pub async fn r26_the_happy_path_pending_approved_claimed_done(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = held(json!({"n": 1}), HOUR);
    let id = c.interaction_id.clone();
    store.hold(c.clone()).await.unwrap();
    let receipt = store
        .answer(&id, Answer::approve("key-1", "alice"))
        .await
        .unwrap();
    assert!(receipt.approved && !receipt.replayed);
    assert_eq!(receipt.approver, "alice");
    assert_eq!(state(&*store, &id).await, State::Approved);
    let claimed = store.claim(&id, claim_of(&c, "t1")).await.unwrap();
    assert_eq!(claimed.approver, "alice");
    let r = store.get(&id).await.unwrap().unwrap();
    assert_eq!(r.state, State::Claimed);
    assert!(r.claimed_at.is_some() && r.claimed_by.is_some());
    let done = store
        .complete(
            &id,
            Completion {
                outcome: Outcome::Done,
                result: json!({"outcome": "completed", "content": "ok"}),
                token: "t1".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(done, State::Done);
    let r = store.get(&id).await.unwrap().unwrap();
    assert_eq!(r.state, State::Done);
    assert_eq!(r.result.unwrap()["content"], "ok");
    assert!(r.finished_at.is_some());
}

/// R47, issue 22: an answer is kept with the verified principal (`sub`, `iss`) it was given
/// with, read back by `get`, `list` and the claim; an answer without one (a static-token,
/// header or command-line approver) keeps only the name.
pub async fn r47_an_answer_keeps_the_approvers_verified_principal(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let p = toolgate_core::Principal {
        subject: "00u-alice".into(),
        issuer: "https://idp.example/".into(),
    };
    let c = held(json!({"n": 22}), HOUR);
    let id = c.interaction_id.clone();
    store.hold(c.clone()).await.unwrap();
    store
        .answer(
            &id,
            Answer::approve("k-22", "alice").principal(Some(p.clone())),
        )
        .await
        .unwrap();
    let r = store.get(&id).await.unwrap().unwrap();
    assert_eq!(r.approver.as_deref(), Some("alice"));
    assert_eq!(
        r.approver_principal.as_ref(),
        Some(&p),
        "R47: kept with the answer"
    );
    let listed = store.list(Some(State::Approved)).await.unwrap();
    let row = listed.iter().find(|r| r.id() == id).unwrap();
    assert_eq!(row.approver_principal.as_ref(), Some(&p));
    // The same key again replays the first answer: the principal stays the first one's.
    let other = toolgate_core::Principal {
        subject: "00u-mallory".into(),
        issuer: "https://idp.example/".into(),
    };
    let replay = store
        .answer(&id, Answer::approve("k-22", "alice").principal(Some(other)))
        .await
        .unwrap();
    assert!(replay.replayed);
    let r = store.get(&id).await.unwrap().unwrap();
    assert_eq!(r.approver_principal.as_ref(), Some(&p));
    let claimed = store.claim(&id, claim_of(&c, "t22")).await.unwrap();
    assert_eq!(claimed.approver, "alice");
    assert_eq!(
        claimed.approver_principal,
        Some(p.clone()),
        "the sender learns it"
    );

    // A name-only approver (static token, proxy header, `--as`): no principal, never a
    // constant or another answer's.
    let d = held(json!({"n": 23}), HOUR);
    let did = d.interaction_id.clone();
    store.hold(d).await.unwrap();
    store
        .answer(&did, Answer::denied_by("bob", Some("no".into())))
        .await
        .unwrap();
    let r = store.get(&did).await.unwrap().unwrap();
    assert_eq!(r.approver.as_deref(), Some("bob"));
    assert_eq!(r.approver_principal, None);
    // A principal with a NUL character is refused like any other text of an answer.
    let e = held(json!({"n": 24}), HOUR);
    let eid = e.interaction_id.clone();
    store.hold(e).await.unwrap();
    let nul = toolgate_core::Principal {
        subject: "a\0b".into(),
        issuer: "i".into(),
    };
    assert!(matches!(
        store
            .answer(&eid, Answer::approved_by("carol").principal(Some(nul)))
            .await,
        Err(AnswerError::Invalid(_))
    ));
    assert_eq!(state(&*store, &eid).await, State::Pending);
}

pub async fn r26_a_failed_send_is_recorded_failed(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = approved(&*store, json!({"n": 2})).await;
    store
        .claim(&c.interaction_id, claim_of(&c, "t"))
        .await
        .unwrap();
    let s = store
        .complete(
            &c.interaction_id,
            Completion {
                outcome: Outcome::Failed,
                result: json!({"outcome": "failed"}),
                token: "t".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(s, State::Failed);
    assert_eq!(state(&*store, &c.interaction_id).await, State::Failed);
}

pub async fn r26_the_same_key_twice_is_one_answer(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = held(json!({}), HOUR);
    let id = c.interaction_id.clone();
    store.hold(c).await.unwrap();
    let first = store
        .answer(&id, Answer::approve("K", "alice"))
        .await
        .unwrap();
    let second = store
        .answer(&id, Answer::approve("K", "alice"))
        .await
        .unwrap();
    assert!(second.replayed, "R26: the same key twice is one answer");
    assert_eq!(
        (first.approved, &first.approver, first.answered_at),
        (second.approved, &second.approver, second.answered_at)
    );
    // Still one answer after the call moved on.
    let c2 = store.get(&id).await.unwrap().unwrap().call;
    store.claim(&id, claim_of(&c2, "t")).await.unwrap();
    let third = store
        .answer(&id, Answer::approve("K", "alice"))
        .await
        .unwrap();
    assert!(third.replayed && third.approved);
    assert_eq!(third.approver, "alice", "the first answer stands");
    // A key is its approver's (issue 34 item 5): bob's same key is no repeat of alice's.
    let bobs = store
        .answer(&id, Answer::approve("K", "bob"))
        .await
        .unwrap_err();
    assert!(
        matches!(bobs, AnswerError::AlreadyDecided { .. }),
        "{bobs:?}"
    );
    assert_eq!(state(&*store, &id).await, State::Claimed);
}

pub async fn r26_the_same_key_with_the_other_answer_is_a_conflict(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = held(json!({}), HOUR);
    let id = c.interaction_id.clone();
    store.hold(c).await.unwrap();
    store
        .answer(&id, Answer::approve("K", "alice"))
        .await
        .unwrap();
    let e = store
        .answer(&id, Answer::deny("K", "alice", None))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            AnswerError::Conflict {
                recorded_approve: true,
                ..
            }
        ),
        "R26: the same key with the other answer is a conflict, got {e:?}"
    );
    assert_eq!(
        state(&*store, &id).await,
        State::Approved,
        "nothing changed"
    );

    let c = held(json!({}), HOUR);
    let id = c.interaction_id.clone();
    store.hold(c).await.unwrap();
    store
        .answer(&id, Answer::deny("D", "bob", Some("no".into())))
        .await
        .unwrap();
    let e = store
        .answer(&id, Answer::approve("D", "bob"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            AnswerError::Conflict {
                recorded_approve: false,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(state(&*store, &id).await, State::Denied);
}

pub async fn r26_an_id_the_store_did_not_issue_is_refused(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let e = store
        .answer("ia_never_issued", Answer::approve("K", "alice"))
        .await
        .unwrap_err();
    assert_eq!(e, AnswerError::UnknownId("ia_never_issued".into()));
    assert!(store.get("ia_never_issued").await.unwrap().is_none());
    let c = held(json!({}), HOUR);
    let e = store
        .claim("ia_never_issued", claim_of(&c, "t"))
        .await
        .unwrap_err();
    assert!(matches!(e, ClaimError::UnknownId(_)), "{e:?}");
    assert!(matches!(
        store.cancel("ia_never_issued").await.unwrap_err(),
        AnswerError::UnknownId(_)
    ));
    let e = store
        .complete(
            "ia_never_issued",
            Completion {
                outcome: Outcome::Done,
                result: json!(null),
                token: "t".into(),
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(e, CompleteError::UnknownId(_)), "{e:?}");
}

pub async fn r26_a_call_already_decided_is_refused(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = held(json!({}), HOUR);
    let id = c.interaction_id.clone();
    store.hold(c).await.unwrap();
    store
        .answer(&id, Answer::approve("K1", "alice"))
        .await
        .unwrap();
    let e = store
        .answer(&id, Answer::approve("K2", "bob"))
        .await
        .unwrap_err();
    assert_eq!(
        e,
        AnswerError::AlreadyDecided {
            id: id.clone(),
            state: State::Approved
        },
        "R26: an answer to a call already decided is refused"
    );
    let e = store
        .answer(&id, Answer::deny("K3", "bob", None))
        .await
        .unwrap_err();
    assert!(matches!(e, AnswerError::AlreadyDecided { .. }), "{e:?}");
    let r = store.get(&id).await.unwrap().unwrap();
    assert_eq!(r.approver.as_deref(), Some("alice"));
    assert_eq!(r.answer_key.as_deref(), Some("K1"));
}

pub async fn r26_a_denial_is_final_and_keeps_its_reason(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = held(json!({}), HOUR);
    let id = c.interaction_id.clone();
    store.hold(c.clone()).await.unwrap();
    let r = store
        .answer(&id, Answer::deny("K", "carol", Some("too large".into())))
        .await
        .unwrap();
    assert!(!r.approved);
    assert_eq!(r.reason.as_deref(), Some("too large"));
    let rec = store.get(&id).await.unwrap().unwrap();
    assert_eq!(rec.state, State::Denied);
    assert_eq!(rec.approver.as_deref(), Some("carol"));
    assert_eq!(rec.answer_reason.as_deref(), Some("too large"));
    let e = store.claim(&id, claim_of(&c, "t")).await.unwrap_err();
    assert_eq!(
        e,
        ClaimError::NotApproved {
            id: id.clone(),
            state: State::Denied
        }
    );
}

pub async fn r26_an_answer_after_expiry_is_refused_and_the_record_says_expired(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    let c = held_expired(json!({}));
    let id = c.interaction_id.clone();
    store.hold(c.clone()).await.unwrap();
    assert_eq!(state(&*store, &id).await, State::Pending);
    let e = store
        .answer(&id, Answer::approve("K", "alice"))
        .await
        .unwrap_err();
    assert_eq!(
        e,
        AnswerError::Expired(id.clone()),
        "R26: refused after expiry"
    );
    let r = store.get(&id).await.unwrap().unwrap();
    assert_eq!(r.state, State::Expired, "R26: the record says `expired`");
    assert!(r.approver.is_none(), "a timeout is not a person's answer");
    let e = store
        .answer(&id, Answer::deny("K2", "alice", None))
        .await
        .unwrap_err();
    assert_eq!(e, AnswerError::Expired(id.clone()));
    let e = store.claim(&id, claim_of(&c, "t")).await.unwrap_err();
    assert!(
        matches!(
            e,
            ClaimError::NotApproved {
                state: State::Expired,
                ..
            }
        ),
        "{e:?}"
    );
}

pub async fn r26_expire_due_marks_only_pending_calls_past_expiry(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let late = held_expired(json!({"late": true}));
    let fresh = held(json!({"fresh": true}), HOUR);
    let mut answered = held(json!({"answered": true}), Duration::from_secs(2));
    answered.expires_at = Timestamp::now().saturating_add(Duration::from_secs(2));
    for c in [&late, &fresh, &answered] {
        store.hold(c.clone()).await.unwrap();
    }
    store
        .answer(&answered.interaction_id, Answer::approve("K", "alice"))
        .await
        .unwrap();
    let expired = store
        .expire_due(Timestamp::now().saturating_add(Duration::from_secs(5)))
        .await
        .unwrap();
    // `fresh` is an hour away; `answered` is past its expiry but already approved.
    let _ = &fresh;
    assert_eq!(expired, vec![late.interaction_id.clone()]);
    assert_eq!(state(&*store, &late.interaction_id).await, State::Expired);
    assert_eq!(state(&*store, &fresh.interaction_id).await, State::Pending);
    assert_eq!(
        state(&*store, &answered.interaction_id).await,
        State::Approved
    );
}

pub async fn r26_only_a_pending_call_can_be_cancelled(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = held(json!({}), HOUR);
    store.hold(c.clone()).await.unwrap();
    store.cancel(&c.interaction_id).await.unwrap();
    assert_eq!(state(&*store, &c.interaction_id).await, State::Cancelled);
    let e = store
        .answer(&c.interaction_id, Answer::approve("K", "alice"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            AnswerError::AlreadyDecided {
                state: State::Cancelled,
                ..
            }
        ),
        "{e:?}"
    );
    let a = approved(&*store, json!({})).await;
    let e = store.cancel(&a.interaction_id).await.unwrap_err();
    assert!(
        matches!(
            e,
            AnswerError::AlreadyDecided {
                state: State::Approved,
                ..
            }
        ),
        "{e:?}"
    );
    let x = held_expired(json!({}));
    store.hold(x.clone()).await.unwrap();
    assert_eq!(
        store.cancel(&x.interaction_id).await.unwrap_err(),
        AnswerError::Expired(x.interaction_id.clone())
    );
    assert_eq!(state(&*store, &x.interaction_id).await, State::Expired);
}

pub async fn r26_answers_are_checked_for_a_key_and_a_name(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = held(json!({}), HOUR);
    store.hold(c.clone()).await.unwrap();
    let e = store
        .answer(&c.interaction_id, Answer::approve("  ", "alice"))
        .await
        .unwrap_err();
    assert!(matches!(e, AnswerError::Invalid(_)), "{e:?}");
    let e = store
        .answer(&c.interaction_id, Answer::approve("K", ""))
        .await
        .unwrap_err();
    assert!(matches!(e, AnswerError::Invalid(_)), "{e:?}");
    assert_eq!(state(&*store, &c.interaction_id).await, State::Pending);
}

/// PostgreSQL cannot store a NUL character in text, so no backend accepts one: an answer is
/// refused (`Invalid`, before the store is touched) the same whichever store keeps the call.
pub async fn r26_an_answer_with_a_nul_character_is_refused_by_every_backend(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = held(json!({}), HOUR);
    store.hold(c.clone()).await.unwrap();
    for answer in [
        Answer::approve("key\0", "alice"),
        Answer::approve("key", "al\0ice"),
        Answer::deny("key", "bob", Some(String::from("no\0"))),
        Answer::denied_by("bob", Some(String::from("\0"))),
    ] {
        let e = store
            .answer(&c.interaction_id, answer.clone())
            .await
            .unwrap_err();
        assert!(
            matches!(&e, AnswerError::Invalid(m) if m.contains("NUL")),
            "{answer:?}: {e:?}"
        );
    }
    assert_eq!(state(&*store, &c.interaction_id).await, State::Pending);
    let r = store
        .answer(&c.interaction_id, Answer::approve("key", "alice"))
        .await
        .unwrap();
    assert!(r.approved && !r.replayed, "a clean answer still wins");
}

pub async fn r35_a_claim_needs_the_approved_input_and_definition(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = approved(&*store, json!({"amount": 5})).await;
    let id = c.interaction_id.clone();
    let mut other_input = claim_of(&c, "t");
    other_input.input_hash = canon::input_hash(&json!({"amount": 5000})).unwrap();
    assert_eq!(
        store.claim(&id, other_input).await.unwrap_err(),
        ClaimError::InputChanged(id.clone()),
        "R35: a changed input is refused"
    );
    let mut other_definition = claim_of(&c, "t");
    other_definition.definition_hash = "sha256:definition-v2".into();
    assert_eq!(
        store.claim(&id, other_definition).await.unwrap_err(),
        ClaimError::DefinitionChanged(id.clone()),
        "R35: a changed definition is refused"
    );
    assert_eq!(
        state(&*store, &id).await,
        State::Approved,
        "nothing changed"
    );
    store.claim(&id, claim_of(&c, "t")).await.unwrap();
}

pub async fn r26_an_approved_call_is_claimed_once(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = approved(&*store, json!({})).await;
    let id = c.interaction_id.clone();
    store.claim(&id, claim_of(&c, "first")).await.unwrap();
    let e = store.claim(&id, claim_of(&c, "second")).await.unwrap_err();
    assert_eq!(
        e,
        ClaimError::NotApproved {
            id: id.clone(),
            state: State::Claimed
        }
    );
    let e = store.claim(&id, claim_of(&c, "first")).await.unwrap_err();
    assert!(
        matches!(e, ClaimError::NotApproved { .. }),
        "even the same token cannot claim twice: {e:?}"
    );
}

pub async fn r26_only_the_claims_token_records_the_result(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = approved(&*store, json!({})).await;
    let id = c.interaction_id.clone();
    let completion = |token: &str| Completion {
        outcome: Outcome::Done,
        result: json!({"by": token}),
        token: token.into(),
    };
    let e = store.complete(&id, completion("t")).await.unwrap_err();
    assert_eq!(
        e,
        CompleteError::NotClaimed {
            id: id.clone(),
            state: State::Approved
        },
        "an approved but unclaimed call records nothing"
    );
    store.claim(&id, claim_of(&c, "t")).await.unwrap();
    let e = store
        .complete(&id, completion("intruder"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            CompleteError::NotClaimed {
                state: State::Claimed,
                ..
            }
        ),
        "{e:?}"
    );
    store.complete(&id, completion("t")).await.unwrap();
    let e = store.complete(&id, completion("t")).await.unwrap_err();
    assert!(
        matches!(
            e,
            CompleteError::NotClaimed {
                state: State::Done,
                ..
            }
        ),
        "{e:?}"
    );
    let r = store.get(&id).await.unwrap().unwrap();
    assert_eq!(r.result.unwrap()["by"], "t", "the first record stands");
}

pub async fn r26_recover_marks_claimed_calls_unknown_and_nothing_else(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let pending = held(json!({"p": 1}), HOUR);
    store.hold(pending.clone()).await.unwrap();
    let waiting = approved(&*store, json!({"a": 1})).await;
    let sent = approved(&*store, json!({"s": 1})).await;
    store
        .claim(&sent.interaction_id, claim_of(&sent, "t"))
        .await
        .unwrap();
    let before = store.list(None).await.unwrap();

    // The process dies here; a new one opens the same inbox.
    let restarted = fixture.reopen(&store).await;
    let unknown = restarted.recover().await.unwrap();
    assert_eq!(unknown, vec![sent.interaction_id.clone()]);
    let after = restarted.list(None).await.unwrap();
    assert_eq!(before.len(), after.len());
    for (b, a) in before.iter().zip(&after) {
        if a.id() == sent.interaction_id {
            assert_eq!(a.state, State::Unknown, "R26: claimed at restart → unknown");
            assert_eq!(a.call, b.call);
        } else {
            assert_eq!(a, b, "R26: nothing else changed");
        }
    }
    // Never sent again automatically: an `unknown` call cannot be claimed or completed.
    let e = restarted
        .claim(&sent.interaction_id, claim_of(&sent, "t2"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            ClaimError::NotApproved {
                state: State::Unknown,
                ..
            }
        ),
        "{e:?}"
    );
    let e = restarted
        .complete(
            &sent.interaction_id,
            Completion {
                outcome: Outcome::Done,
                result: json!(null),
                token: "t".into(),
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            CompleteError::NotClaimed {
                state: State::Unknown,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        restarted.recover().await.unwrap().is_empty(),
        "recover is idempotent"
    );
    let _ = (&pending, &waiting);
}

pub async fn r26_a_duplicate_interaction_id_is_refused(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = held(json!({"first": true}), HOUR);
    store.hold(c.clone()).await.unwrap();
    store
        .answer(&c.interaction_id, Answer::approve("K", "alice"))
        .await
        .unwrap();
    let mut again = held(json!({"second": true}), HOUR);
    again.interaction_id = c.interaction_id.clone();
    let e = store.hold(again).await.unwrap_err();
    assert_eq!(e.kind(), crate::InboxErrorKind::Duplicate, "{e}");
    let r = store.get(&c.interaction_id).await.unwrap().unwrap();
    assert_eq!(r.call, c, "the first call is untouched");
    assert_eq!(r.state, State::Approved);
}

pub async fn r26_list_filters_by_state_oldest_first(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let mut c = held(json!({"i": i}), HOUR);
        c.created_at = Timestamp::from_millis(c.created_at.as_millis() - 1000 + i);
        ids.push(c.interaction_id.clone());
        store.hold(c).await.unwrap();
    }
    store
        .answer(&ids[1], Answer::approve("K", "alice"))
        .await
        .unwrap();
    let all: Vec<String> = store
        .list(None)
        .await
        .unwrap()
        .iter()
        .map(|r| r.id().to_owned())
        .collect();
    assert_eq!(all, ids);
    let pending: Vec<String> = store
        .list(Some(State::Pending))
        .await
        .unwrap()
        .iter()
        .map(|r| r.id().to_owned())
        .collect();
    assert_eq!(pending, vec![ids[0].clone(), ids[2].clone()]);
    assert_eq!(store.list(Some(State::Approved)).await.unwrap().len(), 1);
    assert!(store.list(Some(State::Done)).await.unwrap().is_empty());
}

/// 50 answers with distinct keys race (both answers, each its own key): exactly one wins,
/// every other is refused `AlreadyDecided`.
pub async fn r26_racing_answers_have_exactly_one_winner(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = held(json!({}), HOUR);
    let id = c.interaction_id.clone();
    store.hold(c).await.unwrap();
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let store = Arc::clone(&store);
            let id = id.clone();
            tokio::spawn(async move {
                let answer = if i % 2 == 0 {
                    Answer::approve(format!("key-{i}"), format!("approver-{i}"))
                } else {
                    Answer::deny(format!("key-{i}"), format!("approver-{i}"), None)
                };
                store.answer(&id, answer).await
            })
        })
        .collect();
    let mut winners = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(r) => winners.push(r),
            Err(AnswerError::AlreadyDecided { .. }) => {}
            Err(e) => panic!("R26: a losing answer must be refused as already decided, got {e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "R26: exactly one answer wins");
    let r = store.get(&id).await.unwrap().unwrap();
    assert_eq!(Some(&winners[0].approver), r.approver.as_ref());
}

/// 50 claims with distinct tokens race: exactly one wins.
pub async fn r26_racing_claims_have_exactly_one_winner(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = approved(&*store, json!({})).await;
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let store = Arc::clone(&store);
            let c = c.clone();
            tokio::spawn(async move {
                store
                    .claim(&c.interaction_id, claim_of(&c, &format!("token-{i}")))
                    .await
            })
        })
        .collect();
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => wins += 1,
            Err(ClaimError::NotApproved {
                state: State::Claimed,
                ..
            }) => {}
            Err(e) => panic!("R26: a losing claim must see `claimed`, got {e:?}"),
        }
    }
    assert_eq!(wins, 1, "R26: exactly one sender wins the claim");
}

pub async fn r22_a_stored_policy_round_trips_with_updated_at(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    assert!(store.get_policy().await.unwrap().is_none());
    assert!(
        load_policy_state(&*store, &Limits::default())
            .await
            .is_none()
    );
    let text = r#"{"default": "ask", "rules": [{"effect": "deny", "tool": "refund_*", "reason": "no refunds"}]}"#;
    let first = put_policy_text(&*store, text, &Limits::default())
        .await
        .unwrap();
    let got = store.get_policy().await.unwrap().unwrap();
    assert_eq!(got, first);
    let doc = got.document().unwrap();
    assert_eq!(doc["default"], "ask");
    assert_eq!(doc["rules"][0]["tool"], "refund_*");
    assert_eq!(doc["updatedAt"], Value::from(first.updated_at.clone()));
    // What `get` prints, `put` takes back; each put gets a later `updatedAt`.
    let second = put_policy_text(&*store, &doc.to_string(), &Limits::default())
        .await
        .unwrap();
    assert_ne!(second.updated_at, first.updated_at);
    assert!(
        humantime::parse_rfc3339(&second.updated_at).unwrap()
            > humantime::parse_rfc3339(&first.updated_at).unwrap()
    );
    assert_eq!(second.body, first.body);
    match load_policy_state(&*store, &Limits::default()).await {
        Some(PolicyState::Readable(p)) => {
            assert_eq!(p.rules().len(), 1);
            assert_eq!(p.updated_at(), Some(second.updated_at.as_str()));
        }
        other => panic!("expected a readable policy, got {other:?}"),
    }
}

pub async fn r46_a_shadow_policy_is_stored_beside_the_enforced_one_and_cleared(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    let limits = Limits::default();
    assert!(store.get_shadow_policy().await.unwrap().is_none());
    assert!(matches!(
        crate::policy::load_shadow_policy(&*store, &limits).await,
        Ok(None)
    ));
    let enforced = put_policy_text(&*store, r#"{"rules": [{"effect": "allow"}]}"#, &limits)
        .await
        .unwrap();
    let text = r#"{"default": "deny", "rules": [{"effect": "ask", "tool": "refund_*"}]}"#;
    let first = crate::policy::put_shadow_policy_text(&*store, text, &limits)
        .await
        .unwrap();
    let got = store.get_shadow_policy().await.unwrap().unwrap();
    assert_eq!(got, first);
    assert_eq!(got.document().unwrap()["default"], "deny");
    let second = crate::policy::put_shadow_policy_text(&*store, text, &limits)
        .await
        .unwrap();
    assert!(
        humantime::parse_rfc3339(&second.updated_at).unwrap()
            > humantime::parse_rfc3339(&first.updated_at).unwrap(),
        "R46: each shadow put gets a later `updatedAt`"
    );
    match crate::policy::load_shadow_policy(&*store, &limits).await {
        Ok(Some((p, at))) => {
            assert_eq!(p.rules().len(), 1);
            assert_eq!(at, second.updated_at);
        }
        other => panic!("R46: expected the stored shadow, got {other:?}"),
    }
    // An invalid shadow is refused and keeps the old one.
    let refused = crate::policy::put_shadow_policy_text(
        &*store,
        r#"{"rules": [{"effect": "maybe"}]}"#,
        &limits,
    )
    .await;
    assert!(
        matches!(refused, Err(PutPolicyError::Invalid(_))),
        "{refused:?}"
    );
    assert_eq!(store.get_shadow_policy().await.unwrap().unwrap(), second);
    // The enforced policy is untouched by all of it.
    assert_eq!(store.get_policy().await.unwrap().unwrap(), enforced);
    assert!(store.clear_shadow_policy().await.unwrap(), "one was stored");
    assert!(store.get_shadow_policy().await.unwrap().is_none());
    assert!(
        !store.clear_shadow_policy().await.unwrap(),
        "none is stored"
    );
    assert_eq!(store.get_policy().await.unwrap().unwrap(), enforced);
    // Kept across a restart.
    crate::policy::put_shadow_policy_text(&*store, text, &limits)
        .await
        .unwrap();
    let reopened = fixture.reopen(&store).await;
    assert!(reopened.get_shadow_policy().await.unwrap().is_some());
}

pub async fn r46_a_running_gate_picks_up_a_stored_shadow_and_its_removal(fixture: &dyn Fixture) {
    use crate::policy::{PolicyWatch, ShadowPoll};
    let store = fixture.fresh().await;
    let limits = Limits::default();
    // The gate allows one rule: a stored shadow with two cannot be read by it.
    let tight = Limits {
        tool_rules: 1,
        ..Limits::default()
    };
    let handle = toolgate::GovernanceHandle::new(
        toolgate_engine::Governance::builder()
            .limits(tight)
            .build()
            .unwrap(),
    );
    let mut watch = PolicyWatch::new(handle.clone(), None).with_shadow_seen(None);
    assert_eq!(watch.poll_shadow_once(&*store).await, ShadowPoll::Unchanged);
    let stored = crate::policy::put_shadow_policy_text(
        &*store,
        r#"{"rules": [{"effect": "deny"}]}"#,
        &limits,
    )
    .await
    .unwrap();
    assert_eq!(
        watch.poll_shadow_once(&*store).await,
        ShadowPoll::Replaced {
            updated_at: Some(stored.updated_at.clone())
        }
    );
    assert_eq!(handle.load().shadow_policy().unwrap().rules().len(), 1);
    assert!(
        matches!(handle.load().policy(), PolicyState::Readable(p) if p.is_empty()),
        "R46: the enforced policy is untouched"
    );
    assert_eq!(watch.poll_shadow_once(&*store).await, ShadowPoll::Unchanged);
    // A stored shadow the gate cannot read changes nothing at run time (the shadow in force
    // stays, no call is refused for it) and is a load error at start-up.
    crate::policy::put_shadow_policy_text(
        &*store,
        r#"{"rules": [{"effect": "ask"}, {"effect": "allow"}]}"#,
        &limits,
    )
    .await
    .unwrap();
    let polled = watch.poll_shadow_once(&*store).await;
    assert!(
        matches!(&polled, ShadowPoll::Refused(why) if why.contains("cannot be read")),
        "R46: {polled:?}"
    );
    assert_eq!(
        handle.load().shadow_policy().unwrap().rules()[0].effect(),
        toolgate_core::Effect::Deny,
        "R46: the shadow in force stays"
    );
    let at_start = crate::policy::load_shadow_policy(&*store, &tight).await;
    assert!(
        matches!(&at_start, Err(why) if why.contains("policy_shadow")),
        "R46: {at_start:?}"
    );
    assert!(store.clear_shadow_policy().await.unwrap());
    assert_eq!(
        watch.poll_shadow_once(&*store).await,
        ShadowPoll::Replaced { updated_at: None }
    );
    assert!(handle.load().shadow_policy().is_none());
}

pub async fn r22_a_refused_put_keeps_the_old_policy(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let good = put_policy_text(
        &*store,
        r#"{"rules": [{"effect": "ask"}]}"#,
        &Limits::default(),
    )
    .await
    .unwrap();
    for bad in [
        r#"{"rules": [{"effect": "maybe"}]}"#,
        r#"{"rules": [{"effect": "deny", "tool": "a__b"}]}"#,
        r#"{"rules": [{"effect": "deny", "when": {"x": {"matches": "("}}}]}"#,
        r#"{"rules": [], "extra": 1}"#,
        r#"{"rules": [{"effect": "deny"}, "#,
    ] {
        let e = put_policy_text(&*store, bad, &Limits::default())
            .await
            .unwrap_err();
        assert!(matches!(e, PutPolicyError::Invalid(_)), "{bad}: {e:?}");
        assert_eq!(
            store.get_policy().await.unwrap().unwrap(),
            good,
            "R22: a refused put keeps the old policy ({bad})"
        );
    }
    let tight = Limits {
        tool_rules: 1,
        ..Limits::default()
    };
    let e = put_policy_text(
        &*store,
        r#"{"rules": [{"effect": "ask"}, {"effect": "deny"}]}"#,
        &tight,
    )
    .await
    .unwrap_err();
    assert!(matches!(e, PutPolicyError::Invalid(_)));
    assert_eq!(store.get_policy().await.unwrap().unwrap(), good);
}

pub async fn r22_a_policy_save_based_on_a_stale_updated_at_is_refused_as_a_conflict(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    let limits = Limits::default();
    let ask = r#"{"rules": [{"effect": "ask"}]}"#;
    let deny = r#"{"rules": [{"effect": "deny", "reason": "closed"}]}"#;
    // Nothing stored: a save based on some `updatedAt` is stale.
    let e =
        put_policy_text_if_unchanged(&*store, ask, &limits, Some("2030-01-01T00:00:00.000000Z"))
            .await
            .unwrap_err();
    assert_eq!(
        e,
        PutPolicyError::Conflict {
            expected: Some("2030-01-01T00:00:00.000000Z".into()),
            stored: None,
        },
        "R22: a save based on a policy that is not stored is a conflict"
    );
    assert!(store.get_policy().await.unwrap().is_none());
    // Based on "nothing stored": saved.
    let first = put_policy_text_if_unchanged(&*store, ask, &limits, None)
        .await
        .unwrap();
    assert_eq!(store.get_policy().await.unwrap().unwrap(), first);
    // "Nothing stored" is now stale.
    let e = put_policy_text_if_unchanged(&*store, deny, &limits, None)
        .await
        .unwrap_err();
    assert_eq!(
        e,
        PutPolicyError::Conflict {
            expected: None,
            stored: Some(first.updated_at.clone()),
        }
    );
    // Based on the stored `updatedAt`: saved, with a later one.
    let second = put_policy_text_if_unchanged(&*store, deny, &limits, Some(&first.updated_at))
        .await
        .unwrap();
    assert_ne!(second.updated_at, first.updated_at);
    // Based on the first again (a page opened before the second save): refused, and the
    // error carries the stored `updatedAt`; nothing changed.
    let e = put_policy_text_if_unchanged(&*store, ask, &limits, Some(&first.updated_at))
        .await
        .unwrap_err();
    assert_eq!(
        e,
        PutPolicyError::Conflict {
            expected: Some(first.updated_at.clone()),
            stored: Some(second.updated_at.clone()),
        },
        "R22: a save based on an older `updatedAt` than the stored one is a conflict"
    );
    assert!(e.to_string().contains(&second.updated_at), "{e}");
    assert_eq!(
        store.get_policy().await.unwrap().unwrap(),
        second,
        "R22: a refused save keeps the stored policy"
    );
    // A put from another handle (another process) makes the base stale too.
    let elsewhere = fixture.reopen(&store).await;
    let third = put_policy_text(&*elsewhere, ask, &limits).await.unwrap();
    let policy = toolgate_engine::policy::Policy::from_json_str(deny, &limits).unwrap();
    let e = store
        .put_policy_if_unchanged(Some(&second.updated_at), &policy)
        .await
        .unwrap_err();
    assert_eq!(
        e,
        PolicySaveError::Conflict {
            expected: Some(second.updated_at.clone()),
            stored: Some(third.updated_at.clone()),
        }
    );
    assert_eq!(store.get_policy().await.unwrap().unwrap(), third);
    // An invalid policy is refused as invalid, whatever its base.
    let e = put_policy_text_if_unchanged(
        &*store,
        r#"{"rules": [{"effect": "maybe"}]}"#,
        &limits,
        Some(&third.updated_at),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, PutPolicyError::Invalid(_)), "{e:?}");
    assert_eq!(store.get_policy().await.unwrap().unwrap(), third);
}

/// Eight saves based on the same `updatedAt`, each through its own handle (its own
/// connection), race: exactly one is saved, every other is a conflict naming the winner's
/// `updatedAt`, and the stored policy is the winner's.
pub async fn r22_racing_policy_saves_on_the_same_base_have_exactly_one_winner(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    let limits = Limits::default();
    let base = put_policy_text(&*store, r#"{"rules": []}"#, &limits)
        .await
        .unwrap();
    let mut handles = Vec::new();
    for _ in 0..8 {
        handles.push(fixture.reopen(&store).await);
    }
    let tasks: Vec<_> = handles
        .into_iter()
        .enumerate()
        .map(|(i, handle)| {
            let base = base.updated_at.clone();
            tokio::spawn(async move {
                let text = format!(r#"{{"rules": [{{"effect": "deny", "reason": "saver {i}"}}]}}"#);
                put_policy_text_if_unchanged(&*handle, &text, &Limits::default(), Some(&base)).await
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut losers = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(stored) => winners.push(stored),
            Err(PutPolicyError::Conflict { expected, stored }) => {
                assert_eq!(expected.as_deref(), Some(base.updated_at.as_str()));
                losers.push(stored);
            }
            Err(e) => panic!("R22: a losing save must be a conflict, got {e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "R22: exactly one save on one base wins");
    let winner = &winners[0];
    assert_eq!(losers.len(), 7);
    for stored in losers {
        assert_eq!(stored.as_deref(), Some(winner.updated_at.as_str()));
    }
    assert_eq!(&store.get_policy().await.unwrap().unwrap(), winner);
}

pub async fn r22_a_stored_policy_that_cannot_be_read_is_unreadable(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    put_policy_text(
        &*store,
        r#"{"rules": [{"effect": "ask"}]}"#,
        &Limits::default(),
    )
    .await
    .unwrap();
    fixture.corrupt_policy(&store).await;
    match load_policy_state(&*store, &Limits::default()).await {
        Some(PolicyState::Unreadable(reason)) => {
            assert!(reason.contains("cannot be read"), "{reason}");
        }
        other => panic!("R22: expected an unreadable policy, got {other:?}"),
    }
    // A valid put replaces it.
    put_policy_text(&*store, r#"{"rules": []}"#, &Limits::default())
        .await
        .unwrap();
    assert!(matches!(
        load_policy_state(&*store, &Limits::default()).await,
        Some(PolicyState::Readable(_))
    ));
}

pub async fn seed002_r22_a_stored_rule_naming_the_wire_name_makes_the_policy_unreadable(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    put_policy_text(&*store, r#"{"rules": []}"#, &Limits::default())
        .await
        .unwrap();
    fixture
        .write_policy_body(
            &store,
            r#"{"rules": [{"effect": "allow"}, {"effect": "ask", "tool": "github__create_issue"}]}"#,
        )
        .await;
    let state = load_policy_state(&*store, &Limits::default()).await;
    match &state {
        Some(PolicyState::Unreadable(reason)) => {
            assert!(
                reason.contains("rules[1].tool") && reason.contains("__"),
                "seed 002: the reason names the rule: {reason}"
            );
        }
        other => panic!("seed 002: expected an unreadable policy, got {other:?}"),
    }
    // Every MCP and HTTP call is refused `policy_unreadable`, naming the rule; a local tool
    // is unaffected (R22).
    let governance = toolgate_engine::config::load_str(
        &json!({
            "tools": [
                {"kind": "mcp", "server": "github", "name": "create_issue"},
                {"kind": "http", "name": "refund"},
                {"toolset": "notes", "name": "read", "read_only": true}
            ],
            "agents": [{"name": "support", "allowed_tools": ["github__create_issue", "refund", "notes__read"]}]
        })
        .to_string(),
        toolgate_engine::config::Format::Json,
    )
    .unwrap()
    .with_policy(state.unwrap())
    .unwrap();
    let agent = AgentRef::profile("support");
    for tool in ["github__create_issue", "refund"] {
        let call = toolgate_core::ToolCall::new(agent.clone(), tool, json!({}));
        let d = governance.decide(toolgate_engine::CallView::of(&call));
        assert_eq!(
            d.verdict,
            toolgate_core::Verdict::Refused(toolgate_core::RefusalCode::PolicyUnreadable),
            "seed 002: {tool} is refused: {d:?}"
        );
        assert!(
            d.reasons.iter().any(|r| r.contains("rules[1].tool")),
            "seed 002: the reason names the rule: {:?}",
            d.reasons
        );
    }
    let local = toolgate_core::ToolCall::new(agent, "notes__read", json!({}));
    assert!(matches!(
        governance
            .decide(toolgate_engine::CallView::of(&local))
            .verdict,
        toolgate_core::Verdict::Run { .. }
    ));
    put_policy_text(
        &*store,
        r#"{"rules": [{"effect": "ask", "server": "github", "tool": "create_issue"}]}"#,
        &Limits::default(),
    )
    .await
    .unwrap();
    assert!(
        matches!(
            load_policy_state(&*store, &Limits::default()).await,
            Some(PolicyState::Readable(_))
        ),
        "seed 002: a valid put replaces the unreadable policy"
    );
}

pub async fn r43_a_held_call_records_its_session_and_turn(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let a = held_in(
        json!({"n": 1}),
        AgentRef::profile("support"),
        Some(("s-1", "t-1")),
        Duration::ZERO,
    );
    let b = held_in(
        json!({"n": 2}),
        AgentRef::profile("support"),
        None,
        Duration::ZERO,
    );
    store.hold(a.clone()).await.unwrap();
    store.hold(b.clone()).await.unwrap();
    let ra = store.get(&a.interaction_id).await.unwrap().unwrap();
    assert_eq!(
        ra.call.turn,
        Some(Turn::new("s-1", "t-1")),
        "R43: the turn is kept"
    );
    assert_eq!(ra.call, a);
    let rb = store.get(&b.interaction_id).await.unwrap().unwrap();
    assert_eq!(rb.call.turn, None, "a call without a session keeps none");
    assert_eq!(store.list(None).await.unwrap().len(), 2);
}

pub async fn r43_the_interaction_has_every_field_a_person_sees(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let input = json!({"order": "A-1", "amount": 12.5});
    let c = held(input.clone(), HOUR);
    store.hold(c.clone()).await.unwrap();
    let r = store.get(&c.interaction_id).await.unwrap().unwrap();
    let i = r.interaction();
    assert_eq!(i.id, c.interaction_id);
    assert_eq!(
        i.prompt, "Approve payments / refund?",
        "R43: the own name, with the server"
    );
    assert_eq!(
        i.reasons,
        vec![
            "agent `support` requires approval".to_owned(),
            "refunds need a person".to_owned()
        ],
        "R43: every reason"
    );
    assert_eq!(i.identity, ToolIdentity::mcp("payments", "refund"));
    assert_eq!(
        i.model_name, "payments__refund",
        "R43: the model's name for the tool"
    );
    assert_eq!(i.agent, "sub-7", "R19: a subagent's id");
    assert_eq!(i.input, input, "R43: the input as it will be sent");
    assert_eq!(i.turn, Some(Turn::new("session-suite", "turn-1")));
    let j = i.to_json();
    assert_eq!(j["server"], "payments");
    assert_eq!(j["tool"], "refund");
    assert_eq!(j["toolName"], "payments__refund");
}

pub async fn r43_a_turn_is_paused_until_every_held_call_is_answered(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let who = || AgentRef::profile("support");
    let a = held_in(
        json!({"n": 1}),
        who(),
        Some(("s", "t1")),
        Duration::from_secs(3),
    );
    let b = held_in(
        json!({"n": 2}),
        who(),
        Some(("s", "t1")),
        Duration::from_secs(2),
    );
    let other = held_in(
        json!({"n": 3}),
        who(),
        Some(("s", "t2")),
        Duration::from_secs(1),
    );
    for c in [&a, &b, &other] {
        store.hold(c.clone()).await.unwrap();
    }
    let ids = |st: &crate::model::TurnState| {
        st.pausing()
            .iter()
            .map(|r| r.id().to_owned())
            .collect::<Vec<_>>()
    };
    let st = store.turn_state("s", "t1").await.unwrap();
    assert!(st.is_paused() && !st.can_go_on());
    assert_eq!(
        ids(&st),
        vec![a.interaction_id.clone(), b.interaction_id.clone()]
    );

    store
        .answer(&a.interaction_id, Answer::approved_by("alice"))
        .await
        .unwrap();
    let st = store.turn_state("s", "t1").await.unwrap();
    assert!(st.is_paused(), "R43: one held call is still unanswered");
    assert_eq!(ids(&st), vec![b.interaction_id.clone()]);

    store
        .answer(&b.interaction_id, Answer::denied_by("bob", None))
        .await
        .unwrap();
    let st = store.turn_state("s", "t1").await.unwrap();
    assert!(
        st.can_go_on(),
        "R43: every held call is answered: the turn goes on"
    );
    assert_eq!(st.held.len(), 2, "the answered calls are still the turn's");
    assert!(
        store.turn_state("s", "t2").await.unwrap().is_paused(),
        "another turn is not affected"
    );
    let empty = store.turn_state("s", "t9").await.unwrap();
    assert!(empty.can_go_on() && empty.held.is_empty());
}

pub async fn r43_cancel_turn_ends_each_pending_call_cancelled(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let who = || AgentRef::profile("support");
    let approved_one = held_in(
        json!({"n": 1}),
        who(),
        Some(("s", "t")),
        Duration::from_secs(4),
    );
    let a = held_in(
        json!({"n": 2}),
        who(),
        Some(("s", "t")),
        Duration::from_secs(3),
    );
    let b = held_in(
        json!({"n": 3}),
        who(),
        Some(("s", "t")),
        Duration::from_secs(2),
    );
    let elsewhere = held_in(
        json!({"n": 4}),
        who(),
        Some(("s", "u")),
        Duration::from_secs(1),
    );
    let other_session = held_in(json!({"n": 5}), who(), Some(("s2", "t")), Duration::ZERO);
    for c in [&approved_one, &a, &b, &elsewhere, &other_session] {
        store.hold(c.clone()).await.unwrap();
    }
    store
        .answer(&approved_one.interaction_id, Answer::approved_by("alice"))
        .await
        .unwrap();
    let cancelled = store.cancel_turn("s", "t").await.unwrap();
    assert_eq!(
        cancelled,
        vec![
            approved_one.interaction_id.clone(),
            a.interaction_id.clone(),
            b.interaction_id.clone()
        ],
        "R43, R47: each held call of the turn not yet sent, approved ones too, oldest first"
    );
    assert_eq!(state(&*store, &a.interaction_id).await, State::Cancelled);
    assert_eq!(state(&*store, &b.interaction_id).await, State::Cancelled);
    assert_eq!(
        state(&*store, &approved_one.interaction_id).await,
        State::Cancelled,
        "R47: an approved, unsent call of the cancelled turn ends too"
    );
    assert_eq!(
        state(&*store, &elsewhere.interaction_id).await,
        State::Pending
    );
    assert_eq!(
        state(&*store, &other_session.interaction_id).await,
        State::Pending
    );
    assert!(store.turn_state("s", "t").await.unwrap().can_go_on());
    assert!(
        store.cancel_turn("s", "t").await.unwrap().is_empty(),
        "twice is nothing"
    );
    let e = store
        .answer(&a.interaction_id, Answer::approved_by("alice"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            AnswerError::AlreadyDecided {
                state: State::Cancelled,
                ..
            }
        ),
        "a cancelled call cannot be answered: {e:?}"
    );
}

pub async fn r43_pending_lists_a_sessions_open_interactions_oldest_first(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let who = || AgentRef::profile("support");
    // Held out of order: listed by when they were held.
    let newest = held_in(
        json!({"n": 1}),
        who(),
        Some(("s", "t2")),
        Duration::from_secs(1),
    );
    let oldest = held_in(
        json!({"n": 2}),
        who(),
        Some(("s", "t1")),
        Duration::from_secs(9),
    );
    let middle = held_in(
        json!({"n": 3}),
        who(),
        Some(("s", "t1")),
        Duration::from_secs(5),
    );
    let answered = held_in(
        json!({"n": 4}),
        who(),
        Some(("s", "t1")),
        Duration::from_secs(7),
    );
    let foreign = held_in(
        json!({"n": 5}),
        who(),
        Some(("s-other", "t1")),
        Duration::from_secs(8),
    );
    let loose = held_in(json!({"n": 6}), who(), None, Duration::from_secs(6));
    for c in [&newest, &oldest, &middle, &answered, &foreign, &loose] {
        store.hold(c.clone()).await.unwrap();
    }
    store
        .answer(&answered.interaction_id, Answer::denied_by("bob", None))
        .await
        .unwrap();
    let listed: Vec<String> = store
        .pending("s")
        .await
        .unwrap()
        .iter()
        .map(|r| r.id().to_owned())
        .collect();
    assert_eq!(
        listed,
        vec![
            oldest.interaction_id.clone(),
            middle.interaction_id.clone(),
            newest.interaction_id.clone()
        ],
        "R43: the session's open interactions, oldest first"
    );
    let all = store.session_calls("s", None).await.unwrap();
    assert_eq!(
        all.len(),
        4,
        "every held call of the session, answered ones included"
    );
    assert!(store.pending("nobody").await.unwrap().is_empty());
}

pub async fn r43_a_subagents_call_is_listed_on_the_parents_session_a_flow_agents_on_its_own(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    // A subagent's call carries its parent's session and turn.
    let sub = held_in(
        json!({"n": 1}),
        AgentRef::subagent("support", "researcher"),
        Some(("parent", "t1")),
        Duration::from_secs(2),
    );
    // A flow agent runs in a session of its own.
    let flow = held_in(
        json!({"n": 2}),
        AgentRef::subagent("support", "refund-flow"),
        Some(("flow-session", "f1")),
        Duration::from_secs(1),
    );
    store.hold(sub.clone()).await.unwrap();
    store.hold(flow.clone()).await.unwrap();

    let parent = store.pending("parent").await.unwrap();
    assert_eq!(
        parent.len(),
        1,
        "R43: only the subagent's call is on the parent's session"
    );
    assert_eq!(parent[0].id(), sub.interaction_id);
    assert_eq!(
        parent[0].interaction().agent,
        "researcher",
        "R43: `agent` is the subagent's id"
    );
    assert!(store.turn_state("parent", "t1").await.unwrap().is_paused());

    let own = store.pending("flow-session").await.unwrap();
    assert_eq!(own.len(), 1);
    assert_eq!(
        own[0].id(),
        flow.interaction_id,
        "R43: a flow agent holds on its own session"
    );
    assert_eq!(own[0].interaction().agent, "refund-flow");

    // Answered on the parent's session: the parent's turn goes on.
    store
        .answer(&parent[0].call.interaction_id, Answer::approved_by("alice"))
        .await
        .unwrap();
    assert!(store.turn_state("parent", "t1").await.unwrap().can_go_on());
    assert!(
        store
            .turn_state("flow-session", "f1")
            .await
            .unwrap()
            .is_paused()
    );
}

pub async fn r43_without_an_idempotency_key_each_answer_is_its_own(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = held(json!({}), HOUR);
    store.hold(c.clone()).await.unwrap();
    let first = store
        .answer(&c.interaction_id, Answer::approved_by("alice"))
        .await
        .unwrap();
    assert!(first.approved && !first.replayed);
    let r = store.get(&c.interaction_id).await.unwrap().unwrap();
    assert_eq!(r.state, State::Approved);
    assert_eq!(r.answer_key, None, "no key is recorded");
    // The same answer again, without a key, is a second answer: the call is decided.
    let e = store
        .answer(&c.interaction_id, Answer::approved_by("alice"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            AnswerError::AlreadyDecided {
                state: State::Approved,
                ..
            }
        ),
        "R43: without a key each answer is its own: {e:?}"
    );
    // A keyed answer never replays an unkeyed one.
    let e = store
        .answer(&c.interaction_id, Answer::approve("k1", "alice"))
        .await
        .unwrap_err();
    assert!(matches!(e, AnswerError::AlreadyDecided { .. }), "{e:?}");
}

/// Issue 34 item 5: a key is its approver's: another person giving the same key is told the
/// call was already answered, never handed the first person's receipt.
pub async fn issue34_an_idempotency_key_is_its_approvers(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = held(json!({}), HOUR);
    store.hold(c.clone()).await.unwrap();
    let first = store
        .answer(&c.interaction_id, Answer::approve("k1", "alice"))
        .await
        .unwrap();
    assert!(first.approved && !first.replayed);
    let again = store
        .answer(&c.interaction_id, Answer::approve("k1", "alice"))
        .await
        .unwrap();
    assert!(again.replayed, "alice's own retry replays");
    let e = store
        .answer(&c.interaction_id, Answer::approve("k1", "mallory"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, AnswerError::AlreadyDecided { .. }),
        "another approver's same key replays nothing: {e:?}"
    );
}

pub async fn r43_the_same_key_retried_is_one_answer_and_the_other_answer_conflicts(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    let c = held(json!({}), HOUR);
    store.hold(c.clone()).await.unwrap();
    let first = store
        .answer(
            &c.interaction_id,
            Answer::denied_by("bob", Some("no".into())).key("k"),
        )
        .await
        .unwrap();
    let again = store
        .answer(
            &c.interaction_id,
            Answer::denied_by("bob", Some("no".into())).key("k"),
        )
        .await
        .unwrap();
    assert!(again.replayed && !again.approved);
    assert_eq!(again.answered_at, first.answered_at, "one answer");
    let e = store
        .answer(&c.interaction_id, Answer::approved_by("bob").key("k"))
        .await
        .unwrap_err();
    assert!(matches!(e, AnswerError::Conflict { .. }), "{e:?}");
    assert_eq!(
        state(&*store, &c.interaction_id).await,
        State::Denied,
        "the conflict changes nothing"
    );
}

/// The tool every suite call is held for.
const TOOL: &str = "payments__refund";

async fn found(
    store: &dyn InboxStore,
    agent: &AgentRef,
    tool: &str,
    c: &NewHeldCall,
) -> Option<String> {
    store
        .find_open(agent, tool, &c.input_hash)
        .await
        .unwrap()
        .map(|r| r.id().to_owned())
}

pub async fn r38_find_open_prefers_the_approved_call_then_the_newest(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let who = AgentRef::subagent("support", "sub-7");
    let at = |secs| {
        held_in(
            json!({"order": 7}),
            who.clone(),
            None,
            Duration::from_secs(secs),
        )
    };
    let (old_pending, approved_old, approved_new, new_pending) = (at(40), at(30), at(20), at(10));
    assert_eq!(
        found(&*store, &who, TOOL, &old_pending).await,
        None,
        "nothing held yet"
    );
    store.hold(old_pending.clone()).await.unwrap();
    let first = store
        .find_open(&who, TOOL, &old_pending.input_hash)
        .await
        .unwrap();
    assert_eq!(
        first.as_ref().map(|r| (&r.call, r.state)),
        Some((&old_pending, State::Pending)),
        "R26: the pending call is found, exactly as held"
    );
    for c in [&approved_old, &approved_new, &new_pending] {
        store.hold(c.clone()).await.unwrap();
    }
    assert_eq!(
        found(&*store, &who, TOOL, &old_pending).await,
        Some(new_pending.interaction_id.clone()),
        "R26: of several pending calls, the newest"
    );
    store
        .answer(&approved_old.interaction_id, Answer::approved_by("alice"))
        .await
        .unwrap();
    let got = store
        .find_open(&who, TOOL, &old_pending.input_hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (got.id(), got.state, got.approver.as_deref()),
        (
            approved_old.interaction_id.as_str(),
            State::Approved,
            Some("alice")
        ),
        "R38: an approved call is preferred to newer pending ones"
    );
    store
        .answer(&approved_new.interaction_id, Answer::approved_by("bob"))
        .await
        .unwrap();
    assert_eq!(
        found(&*store, &who, TOOL, &old_pending).await,
        Some(approved_new.interaction_id.clone()),
        "R38: of several approved calls, the newest"
    );
    store
        .claim(&approved_new.interaction_id, claim_of(&approved_new, "t1"))
        .await
        .unwrap();
    assert_eq!(
        found(&*store, &who, TOOL, &old_pending).await,
        Some(approved_old.interaction_id.clone()),
        "R38: a claimed call is no longer open; the other approved one is"
    );
}

pub async fn r26_r38_find_open_finds_only_this_agents_call_for_this_tool_and_input(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    let sub = AgentRef::subagent("support", "sub-7");
    let parent = AgentRef::profile("support");
    let of_sub = held_in(
        json!({"order": 7}),
        sub.clone(),
        None,
        Duration::from_secs(2),
    );
    let of_parent = held_in(
        json!({"order": 8}),
        parent.clone(),
        None,
        Duration::from_secs(1),
    );
    store.hold(of_sub.clone()).await.unwrap();
    store.hold(of_parent.clone()).await.unwrap();
    assert_eq!(
        found(&*store, &sub, TOOL, &of_sub).await,
        Some(of_sub.interaction_id.clone())
    );
    assert_eq!(
        found(&*store, &parent, TOOL, &of_parent).await,
        Some(of_parent.interaction_id.clone()),
        "R26: an agent without a subagent finds its own call"
    );
    for other in [
        AgentRef::profile("support"),
        AgentRef::subagent("support", "sub-8"),
        AgentRef::subagent("billing", "sub-7"),
        AgentRef::subagent("Support", "sub-7"),
    ] {
        assert_eq!(
            found(&*store, &other, TOOL, &of_sub).await,
            None,
            "R26: another agent ({other:?}) does not find the subagent's call"
        );
    }
    assert_eq!(
        found(&*store, &sub, TOOL, &of_parent).await,
        None,
        "R26: a subagent does not find its parent's call"
    );
    let other_input = held(json!({"order": 9}), HOUR);
    assert_eq!(
        found(&*store, &sub, TOOL, &other_input).await,
        None,
        "R35: another input is another call"
    );
    for tool in ["payments__refund_all", "payments__refun", "crm__refund", ""] {
        assert_eq!(
            found(&*store, &sub, tool, &of_sub).await,
            None,
            "R26: another tool (`{tool}`) is another call"
        );
    }
}

pub async fn r26_r38_find_open_compares_the_tool_ascii_case_insensitively(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let who = AgentRef::subagent("support", "sub-7");
    let c = held_in(
        json!({"order": 7}),
        who.clone(),
        None,
        Duration::from_secs(1),
    );
    store.hold(c.clone()).await.unwrap();
    for spelling in ["payments__refund", "PAYMENTS__REFUND", "Payments__Refund"] {
        assert_eq!(
            found(&*store, &who, spelling, &c).await,
            Some(c.interaction_id.clone()),
            "R26: `{spelling}` names the same tool"
        );
    }
    let mut accented = held_in(
        json!({"order": 8}),
        who.clone(),
        None,
        Duration::from_secs(1),
    );
    accented.tool = "payments__Ärger".into();
    store.hold(accented.clone()).await.unwrap();
    assert_eq!(
        found(&*store, &who, "PAYMENTS__Ärger", &accented).await,
        Some(accented.interaction_id.clone()),
        "ASCII letters fold"
    );
    assert_eq!(
        found(&*store, &who, "payments__ärger", &accented).await,
        None,
        "only ASCII letters fold, as `eq_ignore_ascii_case` (Ä is not ä)"
    );
}

pub async fn r26_r38_find_open_never_finds_a_decided_or_sent_call(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let who = AgentRef::subagent("support", "sub-7");
    let input = json!({"order": 7});
    let next = || held_in(input.clone(), who.clone(), None, Duration::from_secs(1));

    let denied = next();
    store.hold(denied.clone()).await.unwrap();
    store
        .answer(&denied.interaction_id, Answer::denied_by("bob", None))
        .await
        .unwrap();
    assert_eq!(
        found(&*store, &who, TOOL, &denied).await,
        None,
        "R26: denied"
    );

    let mut expired = next();
    expired.expires_at = Timestamp::now().saturating_sub(Duration::from_millis(1));
    store.hold(expired.clone()).await.unwrap();
    store.expire_due(Timestamp::now()).await.unwrap();
    assert_eq!(
        state(&*store, &expired.interaction_id).await,
        State::Expired
    );
    assert_eq!(
        found(&*store, &who, TOOL, &expired).await,
        None,
        "R26: expired"
    );

    let cancelled = next();
    store.hold(cancelled.clone()).await.unwrap();
    store.cancel(&cancelled.interaction_id).await.unwrap();
    assert_eq!(
        found(&*store, &who, TOOL, &cancelled).await,
        None,
        "R26: cancelled"
    );

    let sent = next();
    store.hold(sent.clone()).await.unwrap();
    store
        .answer(&sent.interaction_id, Answer::approved_by("alice"))
        .await
        .unwrap();
    assert_eq!(
        found(&*store, &who, TOOL, &sent).await,
        Some(sent.interaction_id.clone()),
        "R38: approved, not yet sent"
    );
    store
        .claim(&sent.interaction_id, claim_of(&sent, "t1"))
        .await
        .unwrap();
    assert_eq!(
        found(&*store, &who, TOOL, &sent).await,
        None,
        "R38: claimed"
    );
    store
        .complete(
            &sent.interaction_id,
            Completion {
                outcome: Outcome::Done,
                result: json!({"ok": true}),
                token: "t1".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(found(&*store, &who, TOOL, &sent).await, None, "R38: done");

    let failed = next();
    store.hold(failed.clone()).await.unwrap();
    store
        .answer(&failed.interaction_id, Answer::approved_by("alice"))
        .await
        .unwrap();
    store
        .claim(&failed.interaction_id, claim_of(&failed, "t2"))
        .await
        .unwrap();
    store
        .complete(
            &failed.interaction_id,
            Completion {
                outcome: Outcome::Failed,
                result: json!({"error": "boom"}),
                token: "t2".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        found(&*store, &who, TOOL, &failed).await,
        None,
        "R38: failed"
    );

    let lost = next();
    store.hold(lost.clone()).await.unwrap();
    store
        .answer(&lost.interaction_id, Answer::approved_by("alice"))
        .await
        .unwrap();
    store
        .claim(&lost.interaction_id, claim_of(&lost, "t3"))
        .await
        .unwrap();
    store.recover().await.unwrap();
    assert_eq!(state(&*store, &lost.interaction_id).await, State::Unknown);
    assert_eq!(
        found(&*store, &who, TOOL, &lost).await,
        None,
        "R38: an unknown call is never found to be sent again"
    );
}

/// Two inputs that share a canonical hash (`1.0` and `1`): every open one is a candidate,
/// in `find_open`'s order, each stored exactly as held, so the caller can take its own.
pub async fn r35_r38_find_open_all_returns_every_open_call_sharing_the_hash(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let who = AgentRef::subagent("support", "sub-7");
    let at = |input: Value, secs| held_in(input, who.clone(), None, Duration::from_secs(secs));
    let float_old = at(json!({"amount": 1.0}), 40);
    let int_new = at(json!({"amount": 1}), 30);
    let gone = at(json!({"amount": 1}), 20);
    let pending = at(json!({"amount": 1.0}), 10);
    assert_eq!(
        float_old.input_hash, int_new.input_hash,
        "the two inputs share one canonical hash"
    );
    assert!(
        store
            .find_open_all(&who, TOOL, &float_old.input_hash)
            .await
            .unwrap()
            .is_empty(),
        "nothing held yet"
    );
    for c in [&float_old, &int_new, &gone, &pending] {
        store.hold(c.clone()).await.unwrap();
    }
    for c in [&float_old, &int_new] {
        store
            .answer(&c.interaction_id, Answer::approved_by("alice"))
            .await
            .unwrap();
    }
    store
        .answer(&gone.interaction_id, Answer::denied_by("bob", None))
        .await
        .unwrap();
    let all = store
        .find_open_all(&who, "PAYMENTS__Refund", &float_old.input_hash)
        .await
        .unwrap();
    let ids: Vec<&str> = all.iter().map(|r| r.id()).collect();
    assert_eq!(
        ids,
        [
            int_new.interaction_id.as_str(),
            float_old.interaction_id.as_str(),
            pending.interaction_id.as_str()
        ],
        "approved newest first, then pending; the denied call is not open"
    );
    let own = all
        .iter()
        .find(|r| r.input().ok() == Some(json!({"amount": 1.0})))
        .map(|r| r.id());
    assert_eq!(
        own,
        Some(float_old.interaction_id.as_str()),
        "R35: the stored input tells `1.0` from `1`: the approved `1.0` is its own"
    );
    assert_eq!(
        found(&*store, &who, TOOL, &float_old).await.as_deref(),
        ids.first().copied(),
        "find_open picks the first of them"
    );
    assert!(
        store
            .find_open_all(&AgentRef::profile("support"), TOOL, &float_old.input_hash)
            .await
            .unwrap()
            .is_empty(),
        "another agent (the parent profile) has none"
    );
}

// ----- repeats of a held call (R26) and cancelled turns (R47) -----

/// A repeat of `c`: the same call made again, with the gate's fresh interaction id.
fn repeat_of(c: &NewHeldCall) -> NewHeldCall {
    let mut again = c.clone();
    again.interaction_id = new_id();
    again.created_at = Timestamp::now();
    again.expires_at = again.created_at.saturating_add(HOUR);
    again
}

fn ended_state(h: &Holding) -> Option<State> {
    match h {
        Holding::Ended(r) => Some(r.state),
        _ => None,
    }
}

pub async fn r26_a_repeat_of_a_denied_call_is_told_the_denial_once(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = held(json!({"amount": 5}), HOUR);
    assert_eq!(
        store.hold_unless_repeated(c.clone()).await.unwrap(),
        Holding::Held,
        "a first call is held"
    );
    store
        .answer(
            &c.interaction_id,
            Answer::deny("k", "alice", Some("not this one".into())),
        )
        .await
        .unwrap();
    let again = repeat_of(&c);
    match store.hold_unless_repeated(again.clone()).await.unwrap() {
        Holding::Ended(r) => {
            assert_eq!(
                r.id(),
                c.interaction_id,
                "R26: the denied call is the one told"
            );
            assert_eq!(r.state, State::Denied);
            assert_eq!(r.approver.as_deref(), Some("alice"));
            assert_eq!(r.answer_reason.as_deref(), Some("not this one"));
        }
        other => panic!("R26: a repeat of a denied call is told the denial, got {other:?}"),
    }
    assert!(
        store.get(&again.interaction_id).await.unwrap().is_none(),
        "R26: the repeat told the denial holds nothing"
    );
    assert!(store.list(Some(State::Pending)).await.unwrap().is_empty());
    // Told once: the repeat after that is a fresh ask.
    let third = repeat_of(&c);
    assert_eq!(
        store.hold_unless_repeated(third.clone()).await.unwrap(),
        Holding::Held,
        "R26: after the denial was told once, a repeat asks anew"
    );
    assert_eq!(state(&*store, &third.interaction_id).await, State::Pending);
    // Another agent's, or another input's, call is its own.
    let mut other = repeat_of(&c);
    other.agent = AgentRef::profile("billing");
    store
        .answer(&third.interaction_id, Answer::deny("k2", "bob", None))
        .await
        .unwrap();
    assert_eq!(
        store.hold_unless_repeated(other).await.unwrap(),
        Holding::Held
    );
    let reopened = fixture.reopen(&store).await;
    assert_eq!(
        ended_state(&reopened.hold_unless_repeated(repeat_of(&c)).await.unwrap()),
        Some(State::Denied),
        "R26: what was told is durable, and the second denial is told once too"
    );
}

pub async fn r26_a_repeat_of_an_expired_or_cancelled_call_is_told_so_once(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    // A pending call past its expiry: the repeat marks it expired and is told so.
    let late = held_expired(json!({"n": 1}));
    store.hold(late.clone()).await.unwrap();
    assert_eq!(
        ended_state(&store.hold_unless_repeated(repeat_of(&late)).await.unwrap()),
        Some(State::Expired),
        "R26: a repeat of a call nobody answered in time is told it expired"
    );
    assert_eq!(state(&*store, &late.interaction_id).await, State::Expired);
    assert_eq!(
        store.hold_unless_repeated(repeat_of(&late)).await.unwrap(),
        Holding::Held,
        "R26: told once"
    );
    let c = held(json!({"n": 2}), HOUR);
    store.hold(c.clone()).await.unwrap();
    store.cancel(&c.interaction_id).await.unwrap();
    assert_eq!(
        ended_state(&store.hold_unless_repeated(repeat_of(&c)).await.unwrap()),
        Some(State::Cancelled),
        "R26: a repeat of a cancelled call is told it was cancelled"
    );
    assert_eq!(
        store.hold_unless_repeated(repeat_of(&c)).await.unwrap(),
        Holding::Held
    );
}

pub async fn r26_a_repeat_of_an_open_or_sent_call_holds_nothing_new(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = held(json!({"n": 3}), HOUR);
    store.hold(c.clone()).await.unwrap();
    let open_id = |h: Holding| match h {
        Holding::Open(r) => (r.id().to_owned(), r.state),
        other => panic!("R26: the repeat finds the open call, got {other:?}"),
    };
    assert_eq!(
        open_id(store.hold_unless_repeated(repeat_of(&c)).await.unwrap()),
        (c.interaction_id.clone(), State::Pending),
        "R26: a repeat of a pending call is the same card"
    );
    store
        .answer(&c.interaction_id, Answer::approved_by("alice"))
        .await
        .unwrap();
    assert_eq!(
        open_id(store.hold_unless_repeated(repeat_of(&c)).await.unwrap()),
        (c.interaction_id.clone(), State::Approved)
    );
    store
        .claim(&c.interaction_id, claim_of(&c, "t"))
        .await
        .unwrap();
    for _ in 0..2 {
        assert_eq!(
            open_id(store.hold_unless_repeated(repeat_of(&c)).await.unwrap()),
            (c.interaction_id.clone(), State::Claimed),
            "R26: a repeat of a call being sent says so, every time"
        );
    }
    store
        .complete(
            &c.interaction_id,
            Completion {
                outcome: Outcome::Done,
                result: json!({"ok": true}),
                token: "t".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        ended_state(&store.hold_unless_repeated(repeat_of(&c)).await.unwrap()),
        Some(State::Done),
        "R26: a repeat of a call already sent is told so"
    );
    assert_eq!(store.list(Some(State::Pending)).await.unwrap().len(), 0);
    assert_eq!(
        store.hold_unless_repeated(repeat_of(&c)).await.unwrap(),
        Holding::Held,
        "R26: once told, the same call again is a fresh ask"
    );
}

/// 16 repeats of one call race, on a fresh store, after an approval that was sent, and
/// after a denial: exactly one card is held each time.
pub async fn r26_concurrent_repeats_never_hold_two_cards(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = held(json!({"n": 4}), HOUR);
    let race = |store: Arc<dyn InboxStore>| {
        let c = c.clone();
        async move {
            let tasks: Vec<_> = (0..16)
                .map(|_| {
                    let store = Arc::clone(&store);
                    let again = repeat_of(&c);
                    tokio::spawn(async move { store.hold_unless_repeated(again).await.unwrap() })
                })
                .collect();
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.unwrap());
            }
            out
        }
    };
    let pending =
        |store: Arc<dyn InboxStore>| async move { store.list(Some(State::Pending)).await.unwrap() };
    let outcomes = race(Arc::clone(&store)).await;
    assert_eq!(
        outcomes.iter().filter(|h| **h == Holding::Held).count(),
        1,
        "R26: one of the racing repeats holds the call, {outcomes:?}"
    );
    let cards = pending(Arc::clone(&store)).await;
    assert_eq!(cards.len(), 1, "R26: never two pending cards");
    let id = cards[0].id().to_owned();
    store
        .answer(&id, Answer::approved_by("alice"))
        .await
        .unwrap();
    let mut claim = claim_of(&c, "t");
    claim.input_hash = cards[0].call.input_hash.clone();
    store.claim(&id, claim).await.unwrap();
    store
        .complete(
            &id,
            Completion {
                outcome: Outcome::Done,
                result: json!({}),
                token: "t".into(),
            },
        )
        .await
        .unwrap();
    let outcomes = race(Arc::clone(&store)).await;
    assert_eq!(
        outcomes
            .iter()
            .filter(|h| ended_state(h) == Some(State::Done))
            .count(),
        1,
        "R26: one repeat is told the call was sent, {outcomes:?}"
    );
    assert_eq!(
        pending(Arc::clone(&store)).await.len(),
        1,
        "R26: the others hold one fresh card between them"
    );
}

/// A tool stack that counts the calls it is sent.
#[derive(Clone, Default)]
struct Counting(Arc<std::sync::atomic::AtomicUsize>);

impl tower_service::Service<toolgate_core::ToolCall> for Counting {
    type Response = toolgate_core::ToolResponse;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;
    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn call(&mut self, _: toolgate_core::ToolCall) -> Self::Future {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::future::ready(Ok(toolgate_core::ToolResponse::Completed(
            toolgate_core::ToolOutput::new(json!("sent")),
        )))
    }
}

pub async fn r47_cancelling_a_turn_ends_its_approved_unsent_calls_for_good(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let who = || AgentRef::profile("support");
    let approved = held_in(
        json!({"n": 1}),
        who(),
        Some(("s", "t")),
        Duration::from_secs(3),
    );
    let sending = held_in(
        json!({"n": 2}),
        who(),
        Some(("s", "t")),
        Duration::from_secs(2),
    );
    for c in [&approved, &sending] {
        store.hold(c.clone()).await.unwrap();
        store
            .answer(&c.interaction_id, Answer::approved_by("alice"))
            .await
            .unwrap();
    }
    store
        .claim(&sending.interaction_id, claim_of(&sending, "t"))
        .await
        .unwrap();
    assert_eq!(
        store.cancel_turn("s", "t").await.unwrap(),
        vec![approved.interaction_id.clone()],
        "R47: the approved, unsent call is cancelled; the one being sent is left to finish"
    );
    assert_eq!(
        state(&*store, &approved.interaction_id).await,
        State::Cancelled
    );
    assert_eq!(
        state(&*store, &sending.interaction_id).await,
        State::Claimed
    );
    // A resume of the cancelled call is refused and sends nothing.
    let sent = Counting::default();
    let inbox = crate::Inbox::shared(Arc::clone(&store));
    let e = inbox
        .resume(&approved.interaction_id, sent.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            crate::ResumeError::NotApproved {
                state: State::Cancelled,
                ..
            }
        ),
        "R47: a cancelled call is never resumed: {e}"
    );
    assert_eq!(
        sent.0.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "nothing sent"
    );
    let e = store
        .claim(&approved.interaction_id, claim_of(&approved, "t2"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            ClaimError::NotApproved {
                state: State::Cancelled,
                ..
            }
        ),
        "{e:?}"
    );
    // A repeat of it is told the cancellation, once.
    assert_eq!(
        ended_state(
            &store
                .hold_unless_repeated(repeat_of(&approved))
                .await
                .unwrap()
        ),
        Some(State::Cancelled),
        "R47: a repeat of a cancelled call is refused as cancelled"
    );
}

/// What a process that finds another, stopped one's claims does (issue 20 item 11).
pub async fn r26_a_stopped_instances_claims_become_unknown_and_a_repeat_is_told_so(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    let sent = approved(&*store, json!({"k": 1})).await;
    store
        .claim(&sent.interaction_id, claim_of(&sent, "t"))
        .await
        .unwrap();
    let by = store
        .get(&sent.interaction_id)
        .await
        .unwrap()
        .unwrap()
        .claimed_by
        .expect("a claim records its instance");
    assert!(
        store
            .recover_instance("some-other-instance")
            .await
            .unwrap()
            .is_empty(),
        "R26: another instance's claims are left alone"
    );
    assert_eq!(state(&*store, &sent.interaction_id).await, State::Claimed);
    let other = fixture.reopen(&store).await;
    assert_eq!(
        other.recover_instance(&by).await.unwrap(),
        vec![sent.interaction_id.clone()]
    );
    assert_eq!(state(&*other, &sent.interaction_id).await, State::Unknown);
    let told = other.hold_unless_repeated(repeat_of(&sent)).await.unwrap();
    assert_eq!(
        ended_state(&told),
        Some(State::Unknown),
        "R26: a repeat of a call left `unknown` is told so, and nothing is held"
    );
    assert!(other.list(Some(State::Pending)).await.unwrap().is_empty());
}

// ----- grants (R45) -----

/// One grant, read as `toolgate grant add` builds it; `extra` is spliced into the object.
pub fn grant(id: &str, expires_at: u64, extra: &str) -> Grant {
    let text = format!(
        r#"[{{"id": "{id}", "agent": "support", "tool": "refund_order", "expires_at": {expires_at},
            "granted_by": "alice", "reason": "the backlog"{extra}}}]"#
    );
    parse_grants(&text).expect("a valid grant").remove(0)
}

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms)
}

/// Issue 34 item 5: a grant given with an identity-provider token keeps its giver's `sub` and
/// `iss`, as an approval does; one given without keeps none.
pub async fn issue34_a_grant_keeps_its_givers_principal_across_a_restart(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let giver = toolgate_core::Principal {
        subject: "id-alice".into(),
        issuer: "https://idp.test".into(),
    };
    let added = store
        .add_grant_as(&grant("g-p", 60_000, ""), Some(&giver), at(1))
        .await
        .unwrap();
    assert_eq!(added.principal.as_ref(), Some(&giver));
    store
        .add_grant(&grant("g-n", 60_000, ""), at(2))
        .await
        .unwrap();
    let store = fixture.reopen(&store).await;
    let all = store.grants().await.unwrap();
    assert_eq!(
        all[0].principal.as_ref(),
        Some(&giver),
        "kept across a restart"
    );
    assert_eq!(all[1].principal, None);
    assert_eq!(
        all[0].to_json(at(3))["granted_by_principal"],
        json!({"subject": "id-alice", "issuer": "https://idp.test"})
    );
}

pub async fn r45_grants_are_kept_in_the_order_given_with_unique_ids_across_a_restart(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    assert!(store.grants().await.unwrap().is_empty());
    let when = r#", "when": {"amount": {"lte": 100}}, "session": "s-1", "max_calls": 5"#;
    let added = store
        .add_grant(&grant("g-b", 60_000, when), at(1))
        .await
        .unwrap();
    assert_eq!((added.uses, added.created_at), (0, at(1)));
    store
        .add_grant(&grant("g-a", 60_000, ""), at(2))
        .await
        .unwrap();
    let err = store
        .add_grant(&grant("g-b", 90_000, ""), at(3))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), InboxErrorKind::Duplicate, "R45: ids are unique");
    assert!(err.message().contains("`g-b`"), "{err}");

    let store = fixture.reopen(&store).await;
    let all = store.grants().await.unwrap();
    let ids: Vec<&str> = all.iter().map(|g| g.grant.id()).collect();
    assert_eq!(
        ids,
        ["g-b", "g-a"],
        "R45: in the order the grants were given"
    );
    let first = &all[0];
    assert_eq!(first.grant.session(), Some("s-1"));
    assert_eq!(first.grant.max_calls(), Some(5));
    assert_eq!(
        first.grant.expires_at(),
        60_000,
        "the second add changed nothing"
    );
    assert_eq!(first.grant.granted_by(), "alice");
    let source: Value = serde_json::from_str(first.grant.source_text()).unwrap();
    assert_eq!(source["when"], json!({"amount": {"lte": 100}}));
    assert_eq!(first.state(at(10)), GrantState::Live);
    assert_eq!(first.to_json(at(10))["state"], "live");
}

pub async fn r45_a_grant_answers_until_spent_and_spent_is_neither_expired_nor_revoked(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    store
        .add_grant(&grant("g", 60_000, r#", "max_calls": 2"#), at(0))
        .await
        .unwrap();
    assert!(store.use_grant("g", at(100)).await.unwrap());
    assert!(store.use_grant("g", at(200)).await.unwrap());
    assert!(
        !store.use_grant("g", at(300)).await.unwrap(),
        "R45: never more than max_calls sends"
    );
    assert!(!store.use_grant("never-given", at(300)).await.unwrap());
    let g = store.grants().await.unwrap().remove(0);
    assert_eq!(g.uses, 2);
    assert_eq!(g.state(at(300)), GrantState::Spent);
    assert_eq!(
        g.state(at(90_000)),
        GrantState::Spent,
        "R45: a spent grant stays spent after its expiry passes"
    );
    assert_eq!(g.ended_at(at(300)), Some(at(200)), "spent at its last send");
    assert!(g.revoked.is_none());
    assert!(store.live_grants(at(300)).await.unwrap().is_empty());
    match store.revoke_grant("g", "bob", at(400)).await {
        Err(RevokeError::Ended { state, .. }) => assert_eq!(state, GrantState::Spent),
        other => panic!("R45: a spent grant is not revoked, got {other:?}"),
    }
    let g = store.grants().await.unwrap().remove(0);
    assert!(g.revoked.is_none(), "R45: a spent grant keeps its ending");
}

pub async fn r45_an_expired_grant_answers_nothing_and_keeps_its_ending(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    store
        .add_grant(&grant("g", 10_000, ""), at(0))
        .await
        .unwrap();
    assert_eq!(store.live_grants(at(9_999)).await.unwrap().len(), 1);
    assert!(
        store.live_grants(at(10_000)).await.unwrap().is_empty(),
        "R45: live only while now < expires_at"
    );
    assert!(!store.use_grant("g", at(10_000)).await.unwrap());
    let g = store.grants().await.unwrap().remove(0);
    assert_eq!((g.uses, g.state(at(10_000))), (0, GrantState::Expired));
    assert_eq!(g.ended_at(at(20_000)), Some(at(10_000)));
    match store.revoke_grant("g", "bob", at(20_000)).await {
        Err(RevokeError::Ended { state, .. }) => assert_eq!(state, GrantState::Expired),
        other => panic!("R45: an expired grant is not one that was revoked, got {other:?}"),
    }
    let g = store.grants().await.unwrap().remove(0);
    assert_eq!(g.state(at(20_000)), GrantState::Expired);
    assert!(g.revoked.is_none());
}

pub async fn r45_a_revocation_records_who_and_when_and_ends_the_grant_for_good(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    store
        .add_grant(&grant("g", 60_000, r#", "max_calls": 3"#), at(0))
        .await
        .unwrap();
    assert!(store.use_grant("g", at(10)).await.unwrap());
    let revoked = store.revoke_grant("g", "bob", at(20)).await.unwrap();
    assert_eq!(
        revoked.revoked,
        Some(Revocation {
            by: "bob".into(),
            at: at(20)
        })
    );
    assert_eq!(revoked.state(at(20)), GrantState::Revoked);
    assert_eq!(
        revoked.state(at(90_000)),
        GrantState::Revoked,
        "a revoked grant is not reported expired later"
    );
    assert_eq!(revoked.uses, 1);
    assert!(
        !store.use_grant("g", at(30)).await.unwrap(),
        "R45: revoked answers nothing"
    );
    assert!(store.live_grants(at(30)).await.unwrap().is_empty());
    match store.revoke_grant("g", "carol", at(40)).await {
        Err(RevokeError::Ended { state, .. }) => assert_eq!(state, GrantState::Revoked),
        other => panic!("revoked twice: {other:?}"),
    }
    let g = fixture
        .reopen(&store)
        .await
        .grants()
        .await
        .unwrap()
        .remove(0);
    assert_eq!(
        g.revoked.as_ref().map(|r| r.by.as_str()),
        Some("bob"),
        "the first revocation stands"
    );
    assert_eq!(g.to_json(at(50))["revoked_by"], "bob");
    assert!(matches!(
        store.revoke_grant("nope", "bob", at(40)).await,
        Err(RevokeError::UnknownId(id)) if id == "nope"
    ));
}

pub async fn r45_racing_uses_never_pass_max_calls(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    store
        .add_grant(&grant("g", 60_000, r#", "max_calls": 5"#), at(0))
        .await
        .unwrap();
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { store.use_grant("g", at(100 + i)).await.unwrap() })
        })
        .collect();
    let mut counted = 0;
    for t in tasks {
        counted += usize::from(t.await.unwrap());
    }
    assert_eq!(counted, 5, "R45: exactly max_calls of 40 racing uses count");
    assert_eq!(store.grants().await.unwrap()[0].uses, 5);

    // The same through the engine's grant store, from threads.
    store
        .add_grant(&grant("h", 60_000, r#", "max_calls": 7"#), at(0))
        .await
        .unwrap();
    let grants = store.grant_store().unwrap();
    let counted = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (grants, counted) = (&grants, &counted);
            s.spawn(move || {
                for i in 0..10u64 {
                    if grants.record_use("h", 1_000 + t * 10 + i).unwrap() {
                        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            });
        }
    });
    assert_eq!(
        counted.into_inner(),
        7,
        "R45: 4 threads × 10 uses, max_calls 7"
    );
}

pub async fn r45_the_grant_store_answers_by_the_first_live_matching_grant_and_counts_its_sends(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    let grants = store.grant_store().unwrap();
    assert!(grants.first_live(0, &mut |_| true).unwrap().is_none());
    // Added after the grant store started: seen on the next look-up (no restart).
    store
        .add_grant(&grant("old", 5_000, ""), at(0))
        .await
        .unwrap();
    store
        .add_grant(&grant("small", 60_000, r#", "max_calls": 1"#), at(0))
        .await
        .unwrap();
    store
        .add_grant(&grant("other", 60_000, ""), at(0))
        .await
        .unwrap();
    let first = grants.first_live(1_000, &mut |_| true).unwrap().unwrap();
    assert_eq!(
        (first.id.as_str(), first.granted_by.as_str()),
        ("old", "alice")
    );
    let later = grants.first_live(5_000, &mut |_| true).unwrap().unwrap();
    assert_eq!(later.id, "small", "R45: an expired grant is skipped");
    let picky = grants
        .first_live(5_000, &mut |g| g.id() == "other")
        .unwrap()
        .unwrap();
    assert_eq!(picky.id, "other", "the first live one the matcher accepts");
    assert!(grants.record_use("small", 6_000).unwrap());
    assert!(!grants.record_use("small", 6_001).unwrap(), "spent");
    assert_eq!(
        grants.first_live(6_002, &mut |_| true).unwrap().unwrap().id,
        "other"
    );
    store.revoke_grant("other", "bob", at(7_000)).await.unwrap();
    assert!(
        grants.first_live(7_001, &mut |_| true).unwrap().is_none(),
        "R45: a revocation takes effect on the next call"
    );
    assert!(!grants.record_use("other", 7_002).unwrap());
    let uses: Vec<u64> = store
        .grants()
        .await
        .unwrap()
        .iter()
        .map(|g| g.uses)
        .collect();
    assert_eq!(uses, [0, 1, 0]);
}
