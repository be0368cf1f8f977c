//! The lifecycle of a held call (R26, R35, R47): held, answered, claimed, sent once, recovered; keys, races and refusals. Run by [`crate::run_all`].

use super::*;

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

/// R47: an answer is kept with the verified principal (`sub`, `iss`) it was given with,
/// read back by `get`, `list` and the claim; an answer without one (a static-token, header
/// or command-line approver) keeps only the name.
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
    // A key is its approver's: bob's same key is no repeat of alice's.
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
    assert_eq!(e.kind(), toolgate_inbox::InboxErrorKind::Duplicate, "{e}");
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
