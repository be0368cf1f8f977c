//! The conformance cases of approve-with-edits and the execution target (approval-page.md,
//! "Approve with edits"): every backend's [`HeldCalls::answer_edited`](toolgate_inbox::HeldCalls::answer_edited),
//! [`HeldCalls::edit_of`](toolgate_inbox::HeldCalls::edit_of) and the target a held call keeps. Run by [`super::run_all`].
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "a conformance suite: a broken promise of the store fails the case that found it"
)]

use std::time::Duration;

use serde_json::json;
use toolgate_core::ExecutionTarget;

use super::{Fixture, held, held_expired};
use toolgate_inbox::EditedInput;
use toolgate_inbox::{Answer, Claim, Completion, Holding, NewHeldCall, Outcome, State};
use toolgate_inbox::{AnswerError, ClaimError};

const HOUR: Duration = Duration::from_secs(3600);

/// The cases of this file (also run by [`super::run_all`]).
pub async fn run_edit(fixture: &dyn Fixture) {
    macro_rules! case {
        ($name:ident) => {{
            eprintln!("suite: {}", stringify!($name));
            $name(fixture).await;
        }};
    }
    case!(issue24_r35_an_edited_approval_replaces_the_input_and_keeps_the_original);
    case!(issue24_an_edited_approval_is_replayed_only_as_the_same_edit);
    case!(issue24_only_a_pending_unexpired_call_is_approved_with_edits);
    case!(issue24_racing_edited_and_plain_answers_have_exactly_one_winner);
    case!(issue24_a_held_call_keeps_its_execution_target);
    case!(issue35_r26_a_repeat_of_the_input_the_agent_sent_finds_the_edited_call);
}

fn claim(c: &NewHeldCall, input_hash: &str, token: &str) -> Claim {
    Claim {
        input_hash: input_hash.into(),
        definition_hash: c.definition_hash.clone(),
        token: token.into(),
    }
}

pub async fn issue24_r35_an_edited_approval_replaces_the_input_and_keeps_the_original(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    let c = held(json!({"amount": 900, "order": "A-1"}), HOUR);
    let id = c.interaction_id.clone();
    store.hold(c.clone()).await.unwrap();
    assert_eq!(store.edit_of(&id).await.unwrap(), None, "not edited yet");
    let edit = EditedInput::new(&json!({"amount": 90, "order": "A-1"})).unwrap();
    let p = toolgate_core::Principal {
        subject: "00u-alice".into(),
        issuer: "https://idp.example/".into(),
    };
    let receipt = store
        .answer_edited(
            &id,
            Answer::approve("k-edit", "alice").principal(Some(p.clone())),
            edit.clone(),
        )
        .await
        .unwrap();
    assert!(receipt.approved);
    assert!(!receipt.replayed);
    let r = store.get(&id).await.unwrap().unwrap();
    assert_eq!(r.state, State::Approved);
    assert_eq!(
        r.call.input_json, edit.input_json,
        "the held input is the edited one"
    );
    assert_eq!(r.call.input_canonical, edit.input_canonical);
    assert_eq!(r.call.input_hash, edit.input_hash);
    assert_eq!(r.approver.as_deref(), Some("alice"));
    assert_eq!(
        r.approver_principal.as_ref(),
        Some(&p),
        "R47: an edited approval keeps the principal too"
    );
    let kept = store.edit_of(&id).await.unwrap().expect("the edit is kept");
    assert_eq!(kept.original_input_json, c.input_json);
    assert_eq!(kept.original_input_hash, c.input_hash);
    assert_eq!(
        kept.original_input().unwrap(),
        json!({"amount": 900, "order": "A-1"})
    );
    assert_eq!(kept.edited_by, "alice");
    assert_eq!(kept.answer_key.as_deref(), Some("k-edit"));
    assert!(kept.edited_at >= c.created_at);
    // R35: the claim is bound to the edited input's hash; the original one is not approved.
    assert!(matches!(
        store.claim(&id, claim(&c, &c.input_hash, "t-orig")).await,
        Err(ClaimError::InputChanged(_))
    ));
    let claimed = store
        .claim(&id, claim(&c, &edit.input_hash, "t-edit"))
        .await
        .unwrap();
    assert_eq!(claimed.approver, "alice");
    // The same input is found open by its edited hash, never by the original one.
    let agent = &c.agent;
    assert!(
        store
            .find_open(agent, &c.tool, &c.input_hash)
            .await
            .unwrap()
            .is_none()
    );
}

pub async fn issue24_an_edited_approval_is_replayed_only_as_the_same_edit(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = held(json!({"amount": 5}), HOUR);
    let id = c.interaction_id.clone();
    store.hold(c.clone()).await.unwrap();
    let edit = EditedInput::new(&json!({"amount": 4})).unwrap();
    store
        .answer_edited(&id, Answer::approve("k-1", "alice"), edit.clone())
        .await
        .unwrap();
    // The same key and the same edit: one answer.
    let again = store
        .answer_edited(&id, Answer::approve("k-1", "alice"), edit.clone())
        .await
        .unwrap();
    assert!(
        again.replayed,
        "the same edited approval retried is replayed"
    );
    assert!(again.approved);
    // The same key with another edit: refused, and the first edit stays.
    let other = EditedInput::new(&json!({"amount": 3})).unwrap();
    assert!(matches!(
        store
            .answer_edited(&id, Answer::approve("k-1", "alice"), other)
            .await,
        Err(AnswerError::AlreadyDecided { .. })
    ));
    // Another key: already decided.
    assert!(matches!(
        store
            .answer_edited(&id, Answer::approve("k-2", "alice"), edit.clone())
            .await,
        Err(AnswerError::AlreadyDecided { .. })
    ));
    let r = store.get(&id).await.unwrap().unwrap();
    assert_eq!(r.call.input_hash, edit.input_hash);
    assert_eq!(
        store
            .edit_of(&id)
            .await
            .unwrap()
            .unwrap()
            .answer_key
            .as_deref(),
        Some("k-1")
    );
    // A plain approval answered first: an edit with its key is not a replay of it.
    let d = held(json!({"amount": 6}), HOUR);
    let did = d.interaction_id.clone();
    store.hold(d.clone()).await.unwrap();
    store
        .answer(&did, Answer::approve("k-3", "bob"))
        .await
        .unwrap();
    assert!(matches!(
        store
            .answer_edited(&did, Answer::approve("k-3", "bob"), edit)
            .await,
        Err(AnswerError::AlreadyDecided { .. })
    ));
    let r = store.get(&did).await.unwrap().unwrap();
    assert_eq!(
        r.call.input_hash, d.input_hash,
        "a plain approval keeps its input"
    );
    assert_eq!(store.edit_of(&did).await.unwrap(), None);
}

pub async fn issue24_only_a_pending_unexpired_call_is_approved_with_edits(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let edit = EditedInput::new(&json!({"amount": 1})).unwrap();
    // An id never held.
    assert!(matches!(
        store
            .answer_edited("ia_never", Answer::approve("k", "alice"), edit.clone())
            .await,
        Err(AnswerError::UnknownId(_))
    ));
    // A denial carries no edit.
    let c = held(json!({"amount": 2}), HOUR);
    store.hold(c.clone()).await.unwrap();
    assert!(matches!(
        store
            .answer_edited(
                &c.interaction_id,
                Answer::denied_by("alice", None).key("k-d"),
                edit.clone()
            )
            .await,
        Err(AnswerError::Invalid(_))
    ));
    assert_eq!(
        store.get(&c.interaction_id).await.unwrap().unwrap().state,
        State::Pending
    );
    // Past its expiry: refused as expired, and marked so; the input stays the agent's.
    let e = held_expired(json!({"amount": 3}));
    store.hold(e.clone()).await.unwrap();
    assert!(matches!(
        store
            .answer_edited(
                &e.interaction_id,
                Answer::approve("k-e", "alice"),
                edit.clone()
            )
            .await,
        Err(AnswerError::Expired(_))
    ));
    let r = store.get(&e.interaction_id).await.unwrap().unwrap();
    assert_eq!(r.state, State::Expired);
    assert_eq!(r.call.input_hash, e.input_hash);
    assert_eq!(store.edit_of(&e.interaction_id).await.unwrap(), None);
    // Cancelled: already decided.
    let k = held(json!({"amount": 4}), HOUR);
    store.hold(k.clone()).await.unwrap();
    store.cancel(&k.interaction_id).await.unwrap();
    assert!(matches!(
        store
            .answer_edited(&k.interaction_id, Answer::approve("k-k", "alice"), edit)
            .await,
        Err(AnswerError::AlreadyDecided { .. })
    ));
}

pub async fn issue24_racing_edited_and_plain_answers_have_exactly_one_winner(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    for round in 0..4 {
        let c = held(json!({"race": round}), HOUR);
        let id = c.interaction_id.clone();
        store.hold(c.clone()).await.unwrap();
        let mut tasks = Vec::new();
        for i in 0..6 {
            let store = store.clone();
            let id = id.clone();
            tasks.push(tokio::spawn(async move {
                if i % 2 == 0 {
                    let edit = EditedInput::new(&json!({"race": round, "by": i})).unwrap();
                    store
                        .answer_edited(&id, Answer::approve(format!("k-{i}"), "alice"), edit)
                        .await
                } else {
                    store
                        .answer(&id, Answer::denied_by("bob", None).key(format!("k-{i}")))
                        .await
                }
            }));
        }
        let mut won = Vec::new();
        for (i, t) in tasks.into_iter().enumerate() {
            match t.await.unwrap() {
                Ok(r) => {
                    assert!(!r.replayed);
                    won.push(i);
                }
                Err(AnswerError::AlreadyDecided { .. }) => {}
                Err(other) => panic!("a lost race is already decided, not {other:?}"),
            }
        }
        assert_eq!(won.len(), 1, "exactly one answer wins: {won:?}");
        let r = store.get(&id).await.unwrap().unwrap();
        let edit = store.edit_of(&id).await.unwrap();
        if won[0] % 2 == 0 {
            assert_eq!(r.state, State::Approved);
            let kept = edit.expect("the winner's edit is kept");
            assert_eq!(kept.answer_key, Some(format!("k-{}", won[0])));
            assert_eq!(kept.original_input_hash, c.input_hash);
            assert_ne!(r.call.input_hash, c.input_hash);
        } else {
            assert_eq!(r.state, State::Denied);
            assert_eq!(edit, None, "a losing edit leaves nothing");
            assert_eq!(r.call.input_hash, c.input_hash);
        }
    }
}

pub async fn issue24_a_held_call_keeps_its_execution_target(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let mut c = held(json!({"cmd": "make", "cwd": "/srv/app"}), HOUR);
    let target = ExecutionTarget {
        host: Some("build-7".into()),
        working_directory: Some("/srv/app".into()),
        sandbox: Some("none".into()),
    };
    c.target = Some(target.clone());
    store.hold(c.clone()).await.unwrap();
    let r = store.get(&c.interaction_id).await.unwrap().unwrap();
    assert_eq!(r.call.target.as_ref(), Some(&target), "kept as held");
    let listed = store.list(Some(State::Pending)).await.unwrap();
    assert_eq!(
        listed[0].call.target.as_ref(),
        Some(&target),
        "and listed with it"
    );
    // A part only; and a call with none keeps none. Through the repeat-aware hold too.
    let mut part = held(json!({"cmd": "ls"}), HOUR);
    part.target = Some(ExecutionTarget {
        working_directory: Some("/tmp".into()),
        ..Default::default()
    });
    store.hold_unless_repeated(part.clone()).await.unwrap();
    let none = held(json!({"cmd": "pwd"}), HOUR);
    store.hold(none.clone()).await.unwrap();
    let r = store.get(&part.interaction_id).await.unwrap().unwrap();
    assert_eq!(r.call.target, part.target);
    let r = store.get(&none.interaction_id).await.unwrap().unwrap();
    assert_eq!(r.call.target, None);
    // It survives a restart and an answer.
    let again = fixture.reopen(&store).await;
    again
        .answer(&c.interaction_id, Answer::approve("k-t", "alice"))
        .await
        .unwrap();
    let r = again.get(&c.interaction_id).await.unwrap().unwrap();
    assert_eq!(r.call.target, Some(target));
}

/// R26: after a person approved a held call with an edited input, the agent repeats the
/// input it sent. The repeat finds the edited call (open, then sent) by that input, never
/// holds a fresh card for it, and is told once that it was sent; another input is its own
/// call.
pub async fn issue35_r26_a_repeat_of_the_input_the_agent_sent_finds_the_edited_call(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    let sent = json!({"amount": 1000, "order": "A-1"});
    let c = held(sent.clone(), HOUR);
    let id = c.interaction_id.clone();
    store.hold(c.clone()).await.unwrap();
    let edit = EditedInput::new(&json!({"amount": 100, "order": "A-1"})).unwrap();
    store
        .answer_edited(&id, Answer::approve("k-edit", "alice"), edit.clone())
        .await
        .unwrap();
    let found = store
        .find_open_all(&c.agent, &c.tool, &c.input_hash)
        .await
        .unwrap();
    assert_eq!(
        found.len(),
        1,
        "found by the input the agent sent: {found:?}"
    );
    assert_eq!(found[0].id(), id);
    assert_eq!(
        found[0].call.input_hash, edit.input_hash,
        "it holds the edited input"
    );
    assert_eq!(
        found[0].edited_from.as_deref(),
        Some(c.input_json.as_str()),
        "and keeps the agent's"
    );
    let literals = toolgate_core::number::NumberLiterals::scan(&c.input_json);
    assert!(found[0].repeated_by(&sent, &literals));
    assert!(!found[0].repeated_by(&json!({"amount": 1001, "order": "A-1"}), &literals));
    let plain = store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        plain.edited_from, found[0].edited_from,
        "every read says so"
    );

    let mut repeat = c.clone();
    repeat.interaction_id = format!("{id}-again");
    match store.hold_unless_repeated(repeat.clone()).await.unwrap() {
        Holding::Open(r) => {
            assert_eq!(r.id(), id, "R26: the edited call, not a fresh card");
            assert_eq!(r.state, State::Approved);
        }
        other => panic!("R26: a repeat of an edited, approved call finds it, got {other:?}"),
    }
    store
        .claim(&id, claim(&c, &edit.input_hash, "t-edit"))
        .await
        .unwrap();
    store
        .complete(
            &id,
            Completion {
                outcome: Outcome::Done,
                result: json!({"outcome": "completed", "content": "ok"}),
                token: "t-edit".into(),
            },
        )
        .await
        .unwrap();
    match store.hold_unless_repeated(repeat.clone()).await.unwrap() {
        Holding::Ended(r) => {
            assert_eq!(r.id(), id, "R26: told that the edited call was sent");
            assert_eq!(r.state, State::Done);
        }
        other => panic!("R26: a repeat of a sent edited call is told so, got {other:?}"),
    }
    assert!(
        store.get(&repeat.interaction_id).await.unwrap().is_none(),
        "nothing new was held"
    );
    // Told once: the repeat after that asks anew.
    let mut third = c.clone();
    third.interaction_id = format!("{id}-third");
    assert_eq!(
        store.hold_unless_repeated(third).await.unwrap(),
        Holding::Held
    );
}
