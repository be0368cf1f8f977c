//! R24 for who answers: when records collide under one qualified name, an approver may
//! answer a held call of that name only when their selectors cover every record behind it —
//! rights for one record never spread to the others.

use toolgate_core::ToolIdentity;
use toolgate_engine::config::{Format, load_str};

const CONFIG: &str = r#"{
    "tools": [{"kind": "mcp", "server": "github", "name": "create_issue"},
              {"toolset": "github", "name": "create_issue"}],
    "agents": [{"name": "support", "allowed_tools": ["github__create_issue"]}],
    "approvers": {"auth": "proxy_header", "header": "X-Remote-User", "people": [
        {"name": "bob", "tools": [{"server": "github"}]},
        {"name": "carol", "tools": [{"server": "github"}, {"kind": "local"}]},
        {"name": "dave", "tools": [{"server": "github", "agent": "support"},
                                   {"kind": "local", "agent": "ops"}]},
        {"name": "alice"}
    ]}
}"#;

#[test]
fn r24_an_approver_for_one_record_of_a_collision_may_not_answer_for_the_name() {
    let gov = load_str(CONFIG, Format::Json).unwrap();
    let entry = gov.catalog().get("github__create_issue").unwrap();
    let identities: Vec<ToolIdentity> =
        entry.records.iter().map(|r| r.identity().clone()).collect();
    assert_eq!(
        identities.len(),
        2,
        "the two records collide: {identities:?}"
    );
    let a = gov.approver_settings().unwrap();
    let may = |who: &str, agent: &str| a.approver(who).unwrap().may_answer(&identities, agent);

    // bob's selector covers the MCP record only (a `server` never matches a local tool).
    assert!(!may("bob", "support"), "bob covers one record of two");
    // carol's selectors cover both records between them.
    assert!(may("carol", "support"));
    // dave covers both only for an agent each selector names: not for `support`'s call.
    assert!(!may("dave", "support"));
    // alice may answer everything.
    assert!(may("alice", "support"));
    // Each record alone stays as before.
    assert!(
        a.approver("bob")
            .unwrap()
            .may_answer(&identities[..1], "support")
    );
}

#[test]
fn r24_with_selectors_no_identity_is_nothing_to_answer_for() {
    // Fail closed: a held call naming no record is answered only by an approver of every
    // call, never by one whose selectors would vacuously cover nothing.
    let gov = load_str(CONFIG, Format::Json).unwrap();
    let a = gov.approver_settings().unwrap();
    assert!(!a.approver("carol").unwrap().may_answer(&[], "support"));
    assert!(a.approver("alice").unwrap().may_answer(&[], "support"));
}
