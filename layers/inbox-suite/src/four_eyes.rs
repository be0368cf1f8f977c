//! Four eyes (R51): a held call that needs N approvals is `approved` only once N distinct
//! people approved the input and definition it holds; the first denial ends it; one
//! person's second approval changes nothing and says so; an approval bound to another
//! input or definition is refused; an answer to a call that ended is refused as before.

use std::sync::Arc;

use serde_json::{Value, json};
use toolgate_core::Principal;

use super::{Fixture, HOUR, claim_of, request, state};
use toolgate_inbox::InboxStore;
use toolgate_inbox::{Answer, AnswerReceipt, NewHeldCall, State, Timestamp};
use toolgate_inbox::{AnswerError, ClaimError};

/// Runs every four-eyes case (also run by [`super::run_all`]).
pub async fn run_four_eyes(fixture: &dyn Fixture) {
    macro_rules! case {
        ($name:ident) => {{
            eprintln!("suite: {}", stringify!($name));
            $name(fixture).await;
        }};
    }
    case!(r51_a_call_that_needs_two_is_approved_only_by_the_second_distinct_person);
    case!(r51_one_person_approving_twice_counts_once);
    case!(r51_a_name_and_a_principal_are_one_person_when_either_matches);
    case!(r51_the_first_denial_ends_the_call);
    case!(r51_an_approval_bound_to_another_input_or_definition_is_refused);
    case!(r51_retries_are_one_answer_and_an_answer_after_the_end_is_refused);
    case!(r51_an_answer_past_the_expiry_is_refused_whatever_was_gathered);
    case!(r51_racing_approvals_of_distinct_people_approve_once_with_exactly_n);
    case!(r51_racing_approvals_of_one_person_never_reach_n_alone);
    case!(r51_a_call_that_needs_several_approvals_is_not_approved_with_an_edit);
    case!(r51_a_call_needs_one_to_five_approvals);
}

/// A held call for `input` that needs `n` approvals, created now, expiring in an hour.
pub fn held_needing(n: u8, input: Value) -> NewHeldCall {
    let mut r = request(input);
    r.approvals = n;
    NewHeldCall::from_request(&r, Timestamp::now(), HOUR).expect("a holdable call")
}

fn principal(sub: &str) -> Principal {
    Principal {
        subject: sub.into(),
        issuer: "https://idp.example/".into(),
    }
}

async fn hold(store: &dyn InboxStore, c: &NewHeldCall) {
    store.hold(c.clone()).await.unwrap();
}

async fn approve(store: &dyn InboxStore, c: &NewHeldCall, who: &str) -> AnswerReceipt {
    store
        .answer(&c.interaction_id, Answer::approve(format!("k-{who}"), who))
        .await
        .unwrap_or_else(|e| panic!("{who}'s approval: {e}"))
}

pub async fn r51_a_call_that_needs_two_is_approved_only_by_the_second_distinct_person(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    let c = held_needing(2, json!({"amount": 900}));
    match store.hold_unless_repeated(c.clone()).await.unwrap() {
        toolgate_inbox::Holding::Held => {}
        other => panic!("R51: held anew, got {other:?}"),
    }
    let r = store.get(&c.interaction_id).await.unwrap().unwrap();
    assert_eq!(
        r.approvals_needed(),
        2,
        "R51: the call records what it needs"
    );
    assert_eq!(r.approvals_line().as_deref(), Some("0 of 2 approvals"));

    let first = approve(&*store, &c, "alice").await;
    assert!(first.approved && !first.replayed && !first.already_approved);
    assert_eq!((first.approvals, first.approvals_needed), (1, 2));
    assert_eq!(first.waiting_for(), 1);
    assert_eq!(
        first.progress().as_deref(),
        Some("recorded: 1 of 2 approvals; it waits for one more person"),
        "R51: an approval that is not the last says so"
    );
    assert_eq!(
        state(&*store, &c.interaction_id).await,
        State::Pending,
        "R51: one approval of two leaves the call pending"
    );
    // Not sendable yet: the claim is refused, nothing is sent.
    assert!(matches!(
        store.claim(&c.interaction_id, claim_of(&c, "early")).await,
        Err(ClaimError::NotApproved {
            state: State::Pending,
            ..
        })
    ));
    // Kept across a restart, and read by every listing.
    let reopened = fixture.reopen(&store).await;
    let r = reopened.get(&c.interaction_id).await.unwrap().unwrap();
    assert_eq!(
        r.approvals_line().as_deref(),
        Some("1 of 2 approvals: alice")
    );
    assert_eq!(r.approvals[0].input_hash, c.input_hash);
    assert_eq!(r.approvals[0].definition_hash, c.definition_hash);
    assert_eq!(r.approvals[0].key.as_deref(), Some("k-alice"));
    let listed = reopened.list(Some(State::Pending)).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].approvals, r.approvals);
    assert!(r.updated_at >= r.call.created_at);

    let second = approve(&*reopened, &c, "bob").await;
    assert_eq!((second.approvals, second.approvals_needed), (2, 2));
    assert_eq!(second.waiting_for(), 0);
    assert_eq!(
        second.progress().as_deref(),
        Some("recorded: 2 of 2 approvals; the call is approved")
    );
    let r = reopened.get(&c.interaction_id).await.unwrap().unwrap();
    assert_eq!(
        r.state,
        State::Approved,
        "R51: the second person approves it"
    );
    assert_eq!(
        r.approver.as_deref(),
        Some("bob"),
        "whoever gave the last one"
    );
    assert_eq!(r.approved_by(), "alice and bob");
    assert!(r.has_every_approval());
    // Sent once.
    reopened
        .claim(&c.interaction_id, claim_of(&c, "t1"))
        .await
        .unwrap();
    assert!(
        reopened
            .claim(&c.interaction_id, claim_of(&c, "t2"))
            .await
            .is_err()
    );
}

pub async fn r51_one_person_approving_twice_counts_once(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = held_needing(2, json!({"amount": 901}));
    hold(&*store, &c).await;
    approve(&*store, &c, "alice").await;
    // Again, with another key and without one: a no-op that says so.
    for again in [
        Answer::approve("k-alice-2", "alice"),
        Answer::approved_by("alice"),
    ] {
        let r = store.answer(&c.interaction_id, again).await.unwrap();
        assert!(r.already_approved, "R51: {r:?}");
        assert!(!r.replayed);
        assert_eq!(
            (r.approvals, r.approvals_needed, r.waiting_for()),
            (1, 2, 1)
        );
        let said = r.progress().unwrap();
        assert!(
            said.starts_with("alice had already approved it: still 1 of 2 approvals")
                && said.contains("one person's approvals count once")
                && said.ends_with("it waits for one more person"),
            "{said}"
        );
    }
    let r = store.get(&c.interaction_id).await.unwrap().unwrap();
    assert_eq!(r.state, State::Pending, "R51: one person never reaches two");
    assert_eq!(r.approvals.len(), 1);
}

pub async fn r51_a_name_and_a_principal_are_one_person_when_either_matches(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    // An identity-provider approval, then the same subject under another name, then the
    // same name with no principal (the command line): one person throughout.
    let c = held_needing(3, json!({"amount": 902}));
    hold(&*store, &c).await;
    let p = principal("u-alice");
    store
        .answer(
            &c.interaction_id,
            Answer::approve("k1", "alice").principal(Some(p.clone())),
        )
        .await
        .unwrap();
    let same_subject = store
        .answer(
            &c.interaction_id,
            Answer::approve("k2", "alice.smith").principal(Some(p.clone())),
        )
        .await
        .unwrap();
    assert!(same_subject.already_approved, "R47: issuer and subject");
    let same_name = store
        .answer(&c.interaction_id, Answer::approve("k3", "alice"))
        .await
        .unwrap();
    assert!(same_name.already_approved, "R47: the same name");
    // Two subjects shown under one name cannot be told apart: one person (the stricter).
    let shared_name = store
        .answer(
            &c.interaction_id,
            Answer::approve("k4", "alice").principal(Some(principal("u-other"))),
        )
        .await
        .unwrap();
    assert!(shared_name.already_approved);
    // Another subject of another name is another person.
    let bob = store
        .answer(
            &c.interaction_id,
            Answer::approve("k5", "bob").principal(Some(principal("u-bob"))),
        )
        .await
        .unwrap();
    assert!(!bob.already_approved);
    assert_eq!((bob.approvals, bob.waiting_for()), (2, 1));
    let r = store.get(&c.interaction_id).await.unwrap().unwrap();
    assert_eq!(r.state, State::Pending);
    assert_eq!(r.approvals.len(), 2);
    assert_eq!(
        r.approvals[0].principal,
        Some(p),
        "R47: kept with the approval"
    );
    assert_eq!(r.approvals[1].approver, "bob");
}

pub async fn r51_the_first_denial_ends_the_call(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = held_needing(2, json!({"amount": 903}));
    hold(&*store, &c).await;
    approve(&*store, &c, "alice").await;
    let denied = store
        .answer(
            &c.interaction_id,
            Answer::deny("k-carol", "carol", Some("not this one".into())),
        )
        .await
        .unwrap();
    assert!(!denied.approved);
    assert_eq!((denied.approvals, denied.approvals_needed), (1, 2));
    assert_eq!(
        denied.progress().as_deref(),
        Some("denied after 1 of 2 approvals; the call will not be sent")
    );
    let r = store.get(&c.interaction_id).await.unwrap().unwrap();
    assert_eq!(r.state, State::Denied, "R51: the first denial ends it");
    assert_eq!(r.approver.as_deref(), Some("carol"));
    assert_eq!(r.answer_reason.as_deref(), Some("not this one"));
    assert_eq!(r.approvals.len(), 1, "the approval given before is kept");
    match store
        .answer(&c.interaction_id, Answer::approve("k-bob", "bob"))
        .await
    {
        Err(AnswerError::AlreadyDecided {
            state: State::Denied,
            ..
        }) => {}
        other => panic!("R51: an approval after the denial is refused, got {other:?}"),
    }
    // A denial before any approval ends it too; one who approved may still deny.
    let c2 = held_needing(2, json!({"amount": 904}));
    hold(&*store, &c2).await;
    approve(&*store, &c2, "alice").await;
    store
        .answer(
            &c2.interaction_id,
            Answer::deny("k-alice-no", "alice", None),
        )
        .await
        .unwrap();
    assert_eq!(state(&*store, &c2.interaction_id).await, State::Denied);
}

pub async fn r51_an_approval_bound_to_another_input_or_definition_is_refused(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    for needed in [2, 1] {
        let c = held_needing(needed, json!({"amount": 905, "needed": needed}));
        hold(&*store, &c).await;
        let other = crate::held(json!({"amount": 1}), HOUR);
        let refused = store
            .answer(
                &c.interaction_id,
                Answer::approve("k-a", "alice").bound(&other.input_hash, &c.definition_hash),
            )
            .await;
        assert_eq!(
            refused,
            Err(AnswerError::NotAsShown {
                id: c.interaction_id.clone(),
                input: true,
                definition: false
            }),
            "R35: needed {needed}"
        );
        let refused = store
            .answer(
                &c.interaction_id,
                Answer::approve("k-b", "alice").bound(&c.input_hash, "sha256:another-definition"),
            )
            .await;
        assert!(
            matches!(
                refused,
                Err(AnswerError::NotAsShown {
                    input: false,
                    definition: true,
                    ..
                })
            ),
            "R35: {refused:?}"
        );
        let r = store.get(&c.interaction_id).await.unwrap().unwrap();
        assert_eq!(r.state, State::Pending, "nothing was recorded");
        assert!(r.approvals.is_empty());
        // Bound to what it holds: recorded.
        let ok = store
            .answer(
                &c.interaction_id,
                Answer::approve("k-c", "alice").bound(&c.input_hash, &c.definition_hash),
            )
            .await
            .unwrap();
        assert_eq!(ok.approvals, 1);
        if needed == 1 {
            assert_eq!(state(&*store, &c.interaction_id).await, State::Approved);
            continue;
        }
        // A denial is never refused for what it was shown.
        store
            .answer(
                &c.interaction_id,
                Answer::deny("k-d", "carol", None).bound("sha256:x", "sha256:y"),
            )
            .await
            .unwrap();
        assert_eq!(state(&*store, &c.interaction_id).await, State::Denied);
    }
}

pub async fn r51_retries_are_one_answer_and_an_answer_after_the_end_is_refused(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    let c = held_needing(2, json!({"amount": 906}));
    hold(&*store, &c).await;
    let first = approve(&*store, &c, "alice").await;
    // The first approver's key retried while it waits: the same answer.
    let again = approve(&*store, &c, "alice").await;
    assert!(again.replayed, "{again:?}");
    assert_eq!(again.answered_at, first.answered_at);
    // The same key with the other answer is a conflict.
    assert!(matches!(
        store
            .answer(&c.interaction_id, Answer::deny("k-alice", "alice", None))
            .await,
        Err(AnswerError::Conflict {
            recorded_approve: true,
            ..
        })
    ));
    approve(&*store, &c, "bob").await;
    // Both keys retried after the call was approved: replayed, nothing changes.
    for who in ["alice", "bob"] {
        let r = approve(&*store, &c, who).await;
        assert!(r.replayed, "{who}: {r:?}");
        assert_eq!((r.approvals, r.approvals_needed), (2, 2));
    }
    // Anyone else, after the end: refused as before.
    match store
        .answer(&c.interaction_id, Answer::approve("k-carol", "carol"))
        .await
    {
        Err(AnswerError::AlreadyDecided {
            state: State::Approved,
            ..
        }) => {}
        other => panic!("R26: {other:?}"),
    }
    assert_eq!(
        store
            .get(&c.interaction_id)
            .await
            .unwrap()
            .unwrap()
            .approvals
            .len(),
        2
    );
}

pub async fn r51_an_answer_past_the_expiry_is_refused_whatever_was_gathered(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let mut c = held_needing(2, json!({"amount": 907}));
    let now = Timestamp::now();
    c.created_at = now.saturating_sub(std::time::Duration::from_secs(60));
    c.expires_at = now.saturating_add(std::time::Duration::from_millis(1500));
    hold(&*store, &c).await;
    approve(&*store, &c, "alice").await;
    tokio::time::sleep(std::time::Duration::from_millis(1600)).await;
    assert_eq!(
        store
            .answer(&c.interaction_id, Answer::approve("k-bob", "bob"))
            .await,
        Err(AnswerError::Expired(c.interaction_id.clone()))
    );
    let r = store.get(&c.interaction_id).await.unwrap().unwrap();
    assert_eq!(r.state, State::Expired);
    assert_eq!(r.approvals.len(), 1);
}

pub async fn r51_racing_approvals_of_distinct_people_approve_once_with_exactly_n(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    for round in 0..4 {
        let c = held_needing(2, json!({"amount": 908, "round": round}));
        hold(&*store, &c).await;
        let people = ["alice", "bob", "carol", "dave", "erin", "frank"];
        let mut tasks = Vec::new();
        for who in people {
            let s = Arc::clone(&store);
            let id = c.interaction_id.clone();
            tasks.push(tokio::spawn(async move {
                s.answer(&id, Answer::approve(format!("k-{who}"), who))
                    .await
            }));
        }
        let mut receipts = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                Ok(r) => receipts.push(r),
                Err(AnswerError::AlreadyDecided {
                    state: State::Approved,
                    ..
                }) => {}
                Err(e) => panic!("R51: {e}"),
            }
        }
        receipts.sort_by_key(|r| r.approvals);
        assert_eq!(receipts.len(), 2, "R51: two approvals taken, {receipts:?}");
        assert_eq!((receipts[0].approvals, receipts[0].waiting_for()), (1, 1));
        assert_eq!((receipts[1].approvals, receipts[1].waiting_for()), (2, 0));
        let r = store.get(&c.interaction_id).await.unwrap().unwrap();
        assert_eq!(r.state, State::Approved);
        assert_eq!(r.approvals.len(), 2, "R51: exactly N approvals");
        assert_eq!(r.approver.as_deref(), Some(receipts[1].approver.as_str()));
    }
}

pub async fn r51_racing_approvals_of_one_person_never_reach_n_alone(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = held_needing(2, json!({"amount": 909}));
    hold(&*store, &c).await;
    let mut tasks = Vec::new();
    for i in 0..6 {
        let s = Arc::clone(&store);
        let id = c.interaction_id.clone();
        tasks.push(tokio::spawn(async move {
            s.answer(&id, Answer::approve(format!("k-{i}"), "alice"))
                .await
        }));
    }
    let mut counted = 0;
    for t in tasks {
        let r = t.await.unwrap().unwrap();
        assert_eq!(r.approvals, 1, "R51: {r:?}");
        if !r.already_approved {
            counted += 1;
        }
    }
    assert_eq!(counted, 1, "R51: one person's approvals count once");
    let r = store.get(&c.interaction_id).await.unwrap().unwrap();
    assert_eq!(r.state, State::Pending);
    assert_eq!(r.approvals.len(), 1);
}

pub async fn r51_a_call_that_needs_several_approvals_is_not_approved_with_an_edit(
    fixture: &dyn Fixture,
) {
    let store = fixture.fresh().await;
    let c = held_needing(2, json!({"amount": 910}));
    hold(&*store, &c).await;
    let edit = toolgate_inbox::EditedInput::new(&json!({"amount": 10})).unwrap();
    match store
        .answer_edited(&c.interaction_id, Answer::approve("k-e", "alice"), edit)
        .await
    {
        Err(AnswerError::Invalid(why)) => assert!(why.contains("needs 2 approvals"), "{why}"),
        other => panic!("R51: {other:?}"),
    }
    let r = store.get(&c.interaction_id).await.unwrap().unwrap();
    assert_eq!(r.state, State::Pending);
    assert_eq!(r.call.input_hash, c.input_hash, "the input is unchanged");
    assert!(store.edit_of(&c.interaction_id).await.unwrap().is_none());
}

pub async fn r51_a_call_needs_one_to_five_approvals(fixture: &dyn Fixture) {
    let store = fixture.fresh().await;
    let c = held_needing(5, json!({"amount": 911}));
    hold(&*store, &c).await;
    for (i, who) in ["a", "b", "c", "d"].into_iter().enumerate() {
        let r = approve(&*store, &c, who).await;
        assert_eq!(r.waiting_for(), u8::try_from(4 - i).unwrap());
    }
    assert_eq!(state(&*store, &c.interaction_id).await, State::Pending);
    approve(&*store, &c, "e").await;
    assert_eq!(state(&*store, &c.interaction_id).await, State::Approved);
    let mut six = request(json!({"amount": 912}));
    six.approvals = 6;
    assert!(
        NewHeldCall::from_request(&six, Timestamp::now(), HOUR).is_err(),
        "R51: no inbox call needs more than five"
    );
    // A call held as needing none needs one.
    let mut zero = request(json!({"amount": 913}));
    zero.approvals = 0;
    let z = NewHeldCall::from_request(&zero, Timestamp::now(), HOUR).unwrap();
    assert_eq!(z.approvals, 1);
}
