//! R45 with the `approvers` section: an approver grants only what their `tools` selectors
//! cover ([`Approver::may_grant`]) — every call a grant they may give could answer is one
//! they could answer themselves.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

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

proptest! {
    /// R45, R52: whenever `may_grant` allows a grant, every tool it selects — known now or
    /// discovered later, so the whole universe of identities, not only the catalog it was
    /// checked against — is one the approver may answer, for every agent it reaches.
    #[test]
    fn r52_a_grant_an_approver_may_give_answers_no_tool_discovered_later_they_may_not(
        selectors in prop::collection::vec(selector(), 0..4),
        catalog in prop::collection::vec(prop::collection::vec(identity(), 1..3), 0..5),
        later in identity(),
        g in grant(),
    ) {
        let who = Approver {
            name: "p".into(),
            token_sha256: None,
            tools: Some(selectors),
            edit_policy: false,
            may_edit: false,
        };
        if who.may_grant(&g, catalog.iter().map(Vec::as_slice)).is_ok() && g.selects_tool(&later) {
            let pattern = g.agent().unwrap();
            for agent in AGENTS.iter().copied().filter(|a| pattern.matches(a)) {
                prop_assert!(
                    who.may_answer(std::slice::from_ref(&later), agent),
                    "granted {}, which answers {later:?} for {agent}: beyond the approver's rights",
                    g.source_text()
                );
            }
        }
    }
}

/// Issue 33 item 3 (R45, R47, R52): `bob` may answer lookups of `bank` only. A grant
/// `tool: "*"` written in his name (stored before his rights were narrowed, or put in the
/// store by hand) answers no call he could not answer himself, judged on the tools the
/// running host knows — `bank__transfer` discovered from the server's listing included —
/// and under the rights in force when the call is made.
#[test]
fn r52_a_grant_answers_a_discovered_tool_only_while_its_giver_may_answer_it() {
    use serde_json::json;
    use toolgate_core::{AgentRef, ToolCall, ToolDeclaration};
    use toolgate_engine::config::{Format, load_str};
    use toolgate_engine::grant::MemoryGrants;
    use toolgate_engine::quota::MemoryQuotaCounter;
    use toolgate_engine::{CallView, History};
    let config = |bob_tools: &str| {
        load_str(
            &format!(
                r#"{{"approval": {{"channel": "inbox"}},
                "approvers": {{"auth": "proxy_header", "header": "X-User",
                    "people": [{{"name": "bob", "tools": {bob_tools}}}]}},
                "tools": [{{"server": "bank", "name": "lookup"}}],
                "agents": [{{"name": "a", "allowed_tools": ["bank__*"]}}],
                "policy": {{"rules": [{{"effect": "ask", "server": "bank", "reason": "bank calls need a person"}}]}}}}"#
            ),
            Format::Json,
        )
        .unwrap()
        .to_builder()
        // What the server lists at run time (R52): a tool the configuration never declared.
        .listed(ToolDeclaration::new(ToolIdentity::mcp("bank", "transfer")))
        .listed(ToolDeclaration::new(ToolIdentity::mcp("bank", "lookup")))
        .build()
        .unwrap()
    };
    let wide = parse_grants(
        r#"[{"id": "g-wide", "agent": "*", "tool": "*", "expires_at": 10000000000000, "granted_by": "bob", "reason": "r"}]"#,
    )
    .unwrap();
    let grants = MemoryGrants::new(wide.clone());
    let sends = MemoryQuotaCounter::new();
    let history = History::new(1_000, &sends, &grants);
    let decide = |gov: &toolgate_engine::Governance, tool: &str| {
        let call = ToolCall::new(AgentRef::profile("a"), tool, json!({"amount": 5000}));
        gov.decide_call_at(CallView::of(&call), Vec::new(), &history)
    };

    let narrow = config(r#"[{"server": "bank", "tool": "lookup"}]"#);
    let transfer = decide(&narrow, "bank__transfer");
    assert!(transfer.decision.granted.is_none(), "{transfer:?}");
    assert!(!transfer.decision.runs(), "asked, not run: {transfer:?}");
    let lookup = decide(&narrow, "bank__lookup");
    assert_eq!(
        lookup.decision.granted.as_ref().map(|g| g.id.as_str()),
        Some("g-wide"),
        "within bob's rights the grant answers: {lookup:?}"
    );
    // The same grant is refused when it is made, though the configuration knows only
    // lookups: it selects more than bob's card.
    let bob = narrow.approver_settings().unwrap().approver("bob").unwrap();
    let records: Vec<Vec<ToolIdentity>> = vec![vec![ToolIdentity::mcp("bank", "lookup")]];
    let refused = bob
        .may_grant(&wide[0], records.iter().map(Vec::as_slice))
        .unwrap_err();
    assert_eq!(refused.field, "tool");

    // Rights in force when the call is made: once bob may answer every bank call, it does.
    let wider = config(r#"[{"server": "bank"}]"#);
    let transfer = decide(&wider, "bank__transfer");
    assert_eq!(
        transfer.decision.granted.as_ref().map(|g| g.id.as_str()),
        Some("g-wide"),
        "{transfer:?}"
    );
    // And a person no longer among the approvers answers nothing.
    let gone = load_str(
        r#"{"approval": {"channel": "inbox"},
            "approvers": {"auth": "proxy_header", "header": "X-User", "people": [{"name": "carol"}]},
            "tools": [{"server": "bank", "name": "lookup"}],
            "agents": [{"name": "a", "allowed_tools": ["bank__*"]}],
            "policy": {"rules": [{"effect": "ask", "server": "bank", "reason": "r"}]}}"#,
        Format::Json,
    )
    .unwrap();
    let lookup = decide(&gone, "bank__lookup");
    assert!(lookup.decision.granted.is_none(), "{lookup:?}");
}

/// Found by the property above (its saved regression): rights over `server: "*"` cover
/// every MCP tool and nothing else (a selector's `server` matches only MCP tools, R18), so
/// a grant `tool: "create_issue"` with no `server` or `kind` — which would also answer a
/// local or HTTP tool of that name, declared or discovered later — is wider than the card.
#[test]
fn r52_rights_over_every_server_give_no_grant_that_reaches_a_local_tool() {
    let who = Approver {
        name: "p".into(),
        token_sha256: None,
        tools: Some(vec![ToolSelector {
            tool: None,
            server: Some(Glob::new("*")),
            kind: None,
            agent: None,
        }]),
        edit_policy: false,
        may_edit: false,
    };
    let catalog = [vec![ToolIdentity::mcp("github", "create_issue")]];
    let grant = |extra: &str| {
        parse_grants(&format!(
            r#"[{{"id": "g", "agent": "support", "tool": "create_issue", "expires_at": 1, "granted_by": "p", "reason": "r"{extra}}}]"#
        ))
        .unwrap()
        .remove(0)
    };
    let wide = who.may_grant(&grant(""), catalog.iter().map(Vec::as_slice));
    assert_eq!(wide.unwrap_err().field, "tool");
    for narrowed in [r#", "server": "github""#, r#", "kind": "mcp""#] {
        assert!(
            who.may_grant(&grant(narrowed), catalog.iter().map(Vec::as_slice))
                .is_ok(),
            "{narrowed}"
        );
    }
}
