//! Repeats of a held call (R38, R26): finding the open call a repeat answers, telling a repeat of an ended call once, cancelled turns (R47). Run by [`crate::run_all`].

use super::*;

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
    let inbox = toolgate_inbox::Inbox::shared(Arc::clone(&store));
    let e = inbox
        .resume(&approved.interaction_id, sent.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            toolgate_inbox::ResumeError::NotApproved {
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

/// What a process that finds another, stopped one's claims does (R26).
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
