//! R24 for who answers: when records collide under one qualified name, an approver may
//! answer a held call of that name only when their selectors cover every record behind it —
//! rights for one record never spread to the others.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

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

mod props {
    use proptest::prelude::*;
    use toolgate_core::{ToolIdentity, ToolKind};
    use toolgate_engine::approvers::{Approver, ToolSelector};
    use toolgate_engine::policy::Glob;

    fn identity() -> impl Strategy<Value = ToolIdentity> {
        let name = prop::sample::select(vec!["create_issue", "refund", "read"]);
        let source = prop::sample::select(vec!["github", "payments"]);
        (0..3u8, source, name).prop_map(|(k, s, n)| match k {
            0 => ToolIdentity::mcp(s, n),
            1 => ToolIdentity::toolset(s, n),
            _ => ToolIdentity::http(n),
        })
    }

    fn glob() -> impl Strategy<Value = Option<Glob>> {
        prop::option::of(
            prop::sample::select(vec!["*", "git*", "github", "create_*", "refund", "sup*"])
                .prop_map(Glob::new),
        )
    }

    fn selector() -> impl Strategy<Value = ToolSelector> {
        let kind = prop::option::of(prop::sample::select(vec![
            ToolKind::Mcp,
            ToolKind::Http,
            ToolKind::Local,
        ]));
        (glob(), glob(), kind, glob()).prop_map(|(tool, server, kind, agent)| ToolSelector {
            tool,
            server,
            kind,
            agent,
        })
    }

    proptest! {
        /// R24: an approver with selectors may answer for a name exactly when the name has
        /// records and each of them alone could be answered — rights never spread from one
        /// record of a collision to another, and adding a record never widens them.
        #[test]
        fn r24_rights_over_a_name_are_the_intersection_over_its_records(
            selectors in prop::collection::vec(selector(), 0..4),
            ids in prop::collection::vec(identity(), 0..4),
            extra in identity(),
            agent in prop::sample::select(vec!["support", "ops"]),
        ) {
            let who = Approver {
                name: "p".into(),
                token_sha256: None,
                tools: Some(selectors),
                edit_policy: false,
                may_edit: false,
            };
            let each = ids.iter().all(|id| who.may_answer(std::slice::from_ref(id), agent));
            prop_assert_eq!(who.may_answer(&ids, agent), !ids.is_empty() && each);
            let mut more = ids.clone();
            more.push(extra);
            prop_assert!(!who.may_answer(&more, agent) || who.may_answer(&ids, agent) || ids.is_empty());
        }
    }
}
