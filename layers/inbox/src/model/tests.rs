use super::*;

#[test]
fn states_round_trip() {
    for s in State::ALL {
        assert_eq!(State::parse(s.as_str()), Some(s));
    }
    assert_eq!(State::parse("Pending"), None);
}

fn record(needed: u8) -> HeldRecord {
    let mut call = crate::test_calls::held(serde_json::json!({"n": 1}), Duration::from_secs(60));
    call.approvals = needed;
    HeldRecord {
        call,
        state: State::Pending,
        approver: None,
        approver_principal: None,
        approvals: vec![],
        answer_key: None,
        answer_reason: None,
        answered_at: None,
        claimed_by: None,
        claimed_at: None,
        result: None,
        finished_at: None,
        updated_at: Timestamp::from_millis(1),
        edited_from: None,
    }
}

#[test]
fn r51_the_approvals_line_counts_only_approvals_of_the_input_and_definition_held() {
    let mut r = record(2);
    assert_eq!(r.approvals_line().as_deref(), Some("0 of 2 approvals"));
    let (i, d) = (r.call.input_hash.clone(), r.call.definition_hash.clone());
    r.approvals.push(GivenApproval::new(
        "alice",
        None,
        Timestamp::from_millis(1),
        &i,
        &d,
    ));
    assert_eq!(
        r.approvals_line().as_deref(),
        Some("1 of 2 approvals: alice")
    );
    assert!(!r.has_every_approval());
    // An approval of another input is not counted (R35).
    r.approvals.push(GivenApproval::new(
        "bob",
        None,
        Timestamp::from_millis(2),
        "sha256:other",
        &d,
    ));
    assert_eq!(
        r.approvals_line().as_deref(),
        Some("1 of 2 approvals: alice")
    );
    assert!(!r.has_every_approval());
    r.approvals.push(GivenApproval::new(
        "carol",
        None,
        Timestamp::from_millis(3),
        &i,
        &d,
    ));
    assert_eq!(
        r.approvals_line().as_deref(),
        Some("2 of 2 approvals: alice, carol")
    );
    assert!(r.has_every_approval());
    assert_eq!(r.approved_by(), "alice and carol");
    assert_eq!(record(1).approvals_line(), None);
}

#[test]
fn r51_stored_approvals_round_trip_and_a_damaged_list_is_refused() {
    let p = Principal {
        subject: "u-1".into(),
        issuer: "https://idp".into(),
    };
    let mut a = GivenApproval::new(
        "alice",
        Some(p),
        Timestamp::from_millis(5),
        "sha256:i",
        "sha256:d",
    );
    a.key = Some("k".into());
    let b = GivenApproval::new(
        "bob",
        None,
        Timestamp::from_millis(6),
        "sha256:i",
        "sha256:d",
    );
    let text = GivenApproval::list_to_text(&[a.clone(), b.clone()]).unwrap();
    assert_eq!(
        GivenApproval::list_from_text(Some(&text)).unwrap(),
        vec![a, b]
    );
    assert_eq!(GivenApproval::list_to_text(&[]), None);
    assert_eq!(GivenApproval::list_from_text(None).unwrap(), vec![]);
    assert!(GivenApproval::list_from_text(Some("{}")).is_err());
    assert!(GivenApproval::list_from_text(Some(r#"[{"approver": "x"}]"#)).is_err());
}

#[test]
fn timestamps_before_the_epoch_survive() {
    let t = Timestamp::from_millis(-1500);
    assert_eq!(Timestamp::from(t.to_system_time()), t);
}
