//! Sessions and turns (R43): what a held call records of them, paused turns, cancelled turns, idempotency keys. Run by [`crate::run_all`].

use super::*;

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
    let ids = |st: &toolgate_inbox::TurnState| {
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

/// A key is its approver's: another person giving the same key is told the call was already
/// answered, never handed the first person's receipt.
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
