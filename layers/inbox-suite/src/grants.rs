//! Stored grants (R45): order, spending, expiry, revocation, racing uses, the grant store. Run by [`crate::run_all`].

use super::*;

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

/// A grant given with an identity-provider token keeps its giver's `sub` and `iss`, as an
/// approval does; one given without keeps none.
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
