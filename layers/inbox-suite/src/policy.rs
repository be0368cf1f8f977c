//! The stored tenant policy (R22) and the shadow policy beside it (R46). Run by [`crate::run_all`].

use super::*;

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
        toolgate_inbox::load_shadow_policy(&*store, &limits).await,
        Ok(None)
    ));
    let enforced = put_policy_text(&*store, r#"{"rules": [{"effect": "allow"}]}"#, &limits)
        .await
        .unwrap();
    let text = r#"{"default": "deny", "rules": [{"effect": "ask", "tool": "refund_*"}]}"#;
    let first = toolgate_inbox::put_shadow_policy_text(&*store, text, &limits)
        .await
        .unwrap();
    let got = store.get_shadow_policy().await.unwrap().unwrap();
    assert_eq!(got, first);
    assert_eq!(got.document().unwrap()["default"], "deny");
    let second = toolgate_inbox::put_shadow_policy_text(&*store, text, &limits)
        .await
        .unwrap();
    assert!(
        humantime::parse_rfc3339(&second.updated_at).unwrap()
            > humantime::parse_rfc3339(&first.updated_at).unwrap(),
        "R46: each shadow put gets a later `updatedAt`"
    );
    match toolgate_inbox::load_shadow_policy(&*store, &limits).await {
        Ok(Some((p, at))) => {
            assert_eq!(p.rules().len(), 1);
            assert_eq!(at, second.updated_at);
        }
        other => panic!("R46: expected the stored shadow, got {other:?}"),
    }
    // An invalid shadow is refused and keeps the old one.
    let refused = toolgate_inbox::put_shadow_policy_text(
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
    toolgate_inbox::put_shadow_policy_text(&*store, text, &limits)
        .await
        .unwrap();
    let reopened = fixture.reopen(&store).await;
    assert!(reopened.get_shadow_policy().await.unwrap().is_some());
}

pub async fn r46_a_running_gate_picks_up_a_stored_shadow_and_its_removal(fixture: &dyn Fixture) {
    use toolgate_inbox::{PolicyWatch, ShadowPoll};
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
    let stored = toolgate_inbox::put_shadow_policy_text(
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
    toolgate_inbox::put_shadow_policy_text(
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
    let at_start = toolgate_inbox::load_shadow_policy(&*store, &tight).await;
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
