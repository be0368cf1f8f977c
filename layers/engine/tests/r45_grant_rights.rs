//! R45 with the `approvers` section: an approver grants only what their `tools` selectors
//! cover ([`Approver::may_grant`]) — every call a grant they may give could answer is one
//! they could answer themselves.

use proptest::prelude::*;
use toolgate_core::{ToolIdentity, ToolKind};
use toolgate_engine::approvers::{Approver, ToolSelector};
use toolgate_engine::grant::{Grant, parse_grants};
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
        prop::sample::select(vec![
            "*", "git*", "github", "create_*", "refund", "sup*", "support",
        ])
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

fn grant() -> impl Strategy<Value = Grant> {
    let agent = prop::sample::select(vec!["support", "ops", "sup*", "*"]);
    let tool = prop::sample::select(vec!["create_issue", "refund", "read", "*", "re*"]);
    let server = prop::option::of(prop::sample::select(vec!["github", "payments", "git*"]));
    let kind = prop::option::of(prop::sample::select(vec!["mcp", "http", "local"]));
    (agent, tool, server, kind).prop_map(|(agent, tool, server, kind)| {
        let mut g = format!(
            r#"{{"id": "g", "agent": "{agent}", "tool": "{tool}", "expires_at": 1, "granted_by": "p", "reason": "r""#
        );
        if let Some(s) = server {
            g.push_str(&format!(r#", "server": "{s}""#));
        }
        if let Some(k) = kind {
            g.push_str(&format!(r#", "kind": "{k}""#));
        }
        g.push('}');
        parse_grants(&format!("[{g}]")).unwrap().remove(0)
    })
}

/// Agent names a call may come from.
const AGENTS: [&str; 5] = ["support", "ops", "supervisor", "sub-7", "other"];

proptest! {
    /// R45: whenever `may_grant` allows a grant, every configured tool it selects, for
    /// every agent its `agent` pattern reaches, is one the approver may answer.
    #[test]
    fn r45_a_grant_an_approver_may_give_answers_only_calls_they_may_answer(
        selectors in prop::collection::vec(selector(), 0..4),
        catalog in prop::collection::vec(prop::collection::vec(identity(), 1..3), 0..5),
        g in grant(),
    ) {
        let who = Approver {
            name: "p".into(),
            token_sha256: None,
            tools: Some(selectors),
            edit_policy: false,
            may_edit: false,
        };
        if who.may_grant(&g, catalog.iter().map(Vec::as_slice)).is_ok() {
            let pattern = g.agent().unwrap();
            let mut selected = 0;
            for records in &catalog {
                if !records.iter().any(|id| g.selects_tool(id)) {
                    continue;
                }
                selected += 1;
                for agent in AGENTS.iter().copied().filter(|a| pattern.matches(a)) {
                    prop_assert!(
                        who.may_answer(records, agent),
                        "granted {} for {agent}, but it may not answer {records:?}",
                        g.source_text()
                    );
                }
            }
            prop_assert!(selected > 0, "a grant selecting no configured tool is refused");
        }
    }
}

#[test]
fn r45_an_approver_without_selectors_may_give_any_grant() {
    let who = Approver {
        name: "alice".into(),
        token_sha256: None,
        tools: None,
        edit_policy: false,
        may_edit: false,
    };
    let g = parse_grants(
        r#"[{"id": "g", "agent": "*", "tool": "*", "expires_at": 1, "granted_by": "alice", "reason": "r"}]"#,
    )
    .unwrap()
    .remove(0);
    assert!(who.may_grant(&g, std::iter::empty()).is_ok());
}
