//! SPEC's second round (§9): R2 raw names, R41 gateway prefixes, R42 the host's own tools,
//! and the settled details of §8 (subagent ids, override entries, blank names). Each test is
//! named after the rule it guards.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use serde_json::json;
use toolgate_core::{
    AgentRef, ApprovalMode, RefusalCode, RunContext, ToolDeclaration, ToolIdentity, ToolRef,
    Verdict,
};
use toolgate_engine::config::{self, Format};
use toolgate_engine::policy::Policy;
use toolgate_engine::{AgentProfile, CallInput, CallView, Governance, ServerSettings};

fn load(v: serde_json::Value) -> Governance {
    config::load_str(&v.to_string(), Format::Json).unwrap_or_else(|e| panic!("{e}"))
}

fn load_err(v: serde_json::Value) -> Vec<(String, String)> {
    config::load_str(&v.to_string(), Format::Json)
        .expect_err("the configuration must not load")
        .errors
        .into_iter()
        .map(|e| (e.path, e.message))
        .collect()
}

fn decide(gov: &Governance, agent: AgentRef, tool: ToolRef) -> toolgate_core::Decision {
    let input = json!({});
    gov.decide(CallView {
        tool: &tool,
        agent: &agent,
        input: CallInput::Value(&input),
        run: RunContext::default(),
    })
}

fn name(n: &str) -> ToolRef {
    ToolRef::Name(n.to_owned())
}

fn refusal(d: &toolgate_core::Decision) -> Option<RefusalCode> {
    match d.verdict {
        Verdict::Refused(code) => Some(code),
        _ => None,
    }
}

fn warnings(gov: &Governance) -> Vec<String> {
    gov.warnings()
        .into_iter()
        .map(|w| format!("{}: {}", w.path, w.message))
        .collect()
}

// ----- R2 -----

#[test]
fn r2_raw_names_differing_in_case_are_two_tools_that_collide() {
    let gov = load(json!({
        "approval": {"channel": "interactive"},
        "tools": [
            {"server": "kb", "name": "Page", "approval": "require_approval"},
            {"server": "kb", "name": "page"}
        ],
        "agents": [{"name": "a", "allowed_tools": ["kb__page"]}]
    }));
    let entry = gov.catalog().get("kb__page").unwrap();
    assert_eq!(
        entry.records.len(),
        2,
        "two identities behind one name (R24)"
    );
    assert!(
        warnings(&gov).iter().any(|w| w.contains("collision")),
        "check warns about the collision"
    );
    // R24: the strictest aspect wins, so the call asks.
    let d = decide(&gov, AgentRef::profile("a"), name("kb__page"));
    assert!(matches!(d.verdict, Verdict::Ask { .. }), "{d:?}");
}

// ----- R41 -----

fn prefixed() -> serde_json::Value {
    json!({
        "approval": {"channel": "interactive"},
        "behavior_gating": {
            "require_approval_for_non_read_only": true,
            "exemptions": [{"tool": "list_issues", "server": "github", "reason": "reads only"}]
        },
        "servers": {"github": {"tool_prefix": "github-"}},
        "tools": [
            {"server": "github", "name": "github-create_issue"},
            {"server": "github", "name": "GitHub-list_issues"},
            {"server": "github", "name": "search"}
        ],
        "agents": [{"name": "dev", "allowed_tools": ["github__create_issue", "github__list_issues", "github__search"]}],
        "policy": {"rules": [
            {"effect": "deny", "server": "github", "tool": "create_issue", "reason": "no new issues"},
            {"effect": "deny", "server": "github", "tool": "github-*", "reason": "names the listed name"}
        ]}
    })
}

#[test]
fn r41_prefix_comes_off_for_identity_name_rules_and_exemptions() {
    let gov = load(prefixed());
    let entry = gov
        .catalog()
        .get("github__create_issue")
        .expect("qualified by its own name");
    let decl = &entry.records[0].decl;
    assert_eq!(decl.identity.name(), "create_issue");
    assert_eq!(
        decl.sent_name(),
        "github-create_issue",
        "sent under the listed name"
    );
    assert!(gov.catalog().get("github__github-create_issue").is_none());

    // A rule naming the own name matches; one naming the listed name never does.
    let d = decide(&gov, AgentRef::profile("dev"), name("github__create_issue"));
    assert_eq!(refusal(&d), Some(RefusalCode::Denied));
    assert!(
        d.reasons.iter().any(|r| r.contains("no new issues")),
        "{d:?}"
    );

    // The exemption names the own name (R31), so the posture does not ask.
    let d = decide(&gov, AgentRef::profile("dev"), name("github__list_issues"));
    assert!(matches!(d.verdict, Verdict::Run { .. }), "{d:?}");
    assert_eq!(
        gov.catalog().get("github__list_issues").unwrap().records[0]
            .decl
            .sent_name(),
        "GitHub-list_issues",
        "the prefix matches ASCII case-insensitively; the listed spelling is kept for sending"
    );

    // A call by identity gives the own name.
    let by_id = ToolRef::Identity(ToolIdentity::mcp("github", "create_issue"));
    assert_eq!(
        refusal(&decide(&gov, AgentRef::profile("dev"), by_id)),
        Some(RefusalCode::Denied)
    );
    let by_listed = ToolRef::Identity(ToolIdentity::mcp("github", "github-create_issue"));
    assert_eq!(
        refusal(&decide(&gov, AgentRef::profile("dev"), by_listed)),
        Some(RefusalCode::UnknownTool)
    );
}

#[test]
fn r41_listed_name_without_the_prefix_keeps_it_and_check_warns() {
    let gov = load(prefixed());
    assert!(gov.catalog().get("github__search").is_some());
    let w = warnings(&gov);
    assert!(
        w.iter()
            .any(|w| w.contains("`search`") && w.contains("`github`") && w.contains("R41")),
        "{w:?}"
    );
    // Only the prefix: kept as listed, warned.
    let gov = load(json!({
        "servers": {"gw": {"tool_prefix": "gw-"}},
        "tools": [{"server": "gw", "name": "gw-"}]
    }));
    assert!(gov.catalog().get("gw__gw-").is_some());
    assert!(warnings(&gov).iter().any(|w| w.contains("`gw-`")));
}

#[test]
fn r41_blank_prefix_is_a_load_error_and_prefix_is_never_trimmed() {
    let errs = load_err(json!({"servers": {"github": {"tool_prefix": "  "}}}));
    assert!(
        errs.iter().any(|(p, _)| p == "servers.github.tool_prefix"),
        "{errs:?}"
    );
    let errs = load_err(json!({"servers": {"github": {"tool_prefix": ""}}}));
    assert!(
        errs.iter().any(|(p, _)| p == "servers.github.tool_prefix"),
        "{errs:?}"
    );
    // " x-" is used as written: `x-tool` does not carry it.
    let gov = load(json!({
        "servers": {"s": {"tool_prefix": " x-"}},
        "tools": [{"server": "s", "name": "x-tool"}, {"server": "s", "name": " x-other"}]
    }));
    assert!(gov.catalog().get("s__x-tool").is_some());
    assert!(gov.catalog().get("s__other").is_some());
}

#[test]
fn r41_two_listed_names_with_one_own_name_are_a_load_error() {
    let errs = load_err(json!({
        "servers": {"github": {"tool_prefix": "github-"}},
        "tools": [
            {"server": "github", "name": "github-create_issue"},
            {"server": "github", "name": "GITHUB-create_issue"}
        ]
    }));
    assert!(
        errs.iter()
            .any(|(p, m)| p == "tools[1].name" && m.contains("R41")),
        "{errs:?}"
    );
    let errs = load_err(json!({
        "servers": {"github": {"tool_prefix": "github-"}},
        "tools": [
            {"server": "github", "name": "create_issue"},
            {"server": "github", "name": "github-create_issue"}
        ]
    }));
    assert!(errs.iter().any(|(p, _)| p == "tools[1].name"), "{errs:?}");
    // The same listed name again is a revision.
    let gov = load(json!({
        "servers": {"github": {"tool_prefix": "github-"}},
        "tools": [
            {"server": "github", "name": "github-create_issue"},
            {"server": "github", "name": "github-create_issue", "annotations": {"readOnlyHint": true}}
        ]
    }));
    assert_eq!(
        gov.catalog()
            .get("github__create_issue")
            .unwrap()
            .records
            .len(),
        1
    );
}

#[test]
fn r41_to_builder_round_trips_a_prefixed_snapshot() {
    let gov = load(prefixed());
    let again = gov.to_builder().build().expect("a snapshot rebuilds");
    let e = again.catalog().get("github__create_issue").unwrap();
    assert_eq!(e.records[0].decl.identity.name(), "create_issue");
    assert_eq!(e.records[0].decl.sent_name(), "github-create_issue");
}

#[test]
fn r41_builder_api_takes_the_prefix_from_server_settings() {
    let gov = Governance::builder()
        .server("gw", ServerSettings::untrusted().tool_prefix("gw_"))
        .tool(ToolDeclaration::new(ToolIdentity::mcp("gw", "gw_fetch")))
        .agent(AgentProfile::new("a").allow(["gw__fetch"]))
        .build()
        .unwrap();
    let d = decide(&gov, AgentRef::profile("a"), name("gw__fetch"));
    assert!(matches!(d.verdict, Verdict::Run { .. }), "{d:?}");
    assert_eq!(
        gov.server_settings("GW")
            .and_then(|s| s.tool_prefix.as_deref()),
        Some("gw_")
    );
}

// ----- R42 -----

fn host_tools() -> serde_json::Value {
    json!({
        "approval": {"channel": "interactive"},
        "air_gapped": true,
        "behavior_gating": {"require_approval_for_non_read_only": true},
        "tools": [
            {"toolset": "skills", "name": "read_skill", "governed": false,
             "ungoverned_reason": "reads the skill instructions the agent was already given"},
            {"toolset": "skills", "name": "fetch_skill", "governed": false, "network": "egress",
             "ungoverned_reason": "fetches a skill"},
            {"toolset": "skills", "name": "secret_skill", "governed": false, "confidential": true,
             "ungoverned_reason": "reads a private skill"},
            {"toolset": "skills", "name": "gone_skill", "governed": false, "approval": "deny",
             "ungoverned_reason": "switched off"},
            {"toolset": "coding", "name": "write_file"}
        ],
        "agents": [
            {"name": "dev", "allowed_tools": ["skills__read_skill", "skills__fetch_skill",
              "skills__secret_skill", "skills__gone_skill", "coding__write_file"]},
            {"name": "sub", "parent": "dev", "as_tool": true, "confidential": true,
             "allowed_tools": ["skills__read_skill", "skills__secret_skill"],
             "overrides": [{"tool": "skills__read_skill", "approval": "auto_approve"}]},
            {"name": "locked", "allowed_tools": ["skills__read_skill"],
             "overrides": [{"tool": "skills__read_skill", "approval": "deny"}]}
        ],
        "policy": {"rules": [
            {"effect": "deny", "kind": "local", "reason": "no local tools"}
        ]}
    })
}

#[test]
fn r42_ungoverned_tool_bypasses_rules_posture_and_agent_asks() {
    let gov = load(host_tools());
    let seen = gov.expose("dev").unwrap();
    let read = seen
        .tools
        .iter()
        .find(|t| &*t.name == "skills__read_skill")
        .unwrap();
    assert!(!read.wrapped, "exposed raw under the posture");
    let d = decide(&gov, AgentRef::profile("dev"), name("skills__read_skill"));
    assert!(
        matches!(
            d.verdict,
            Verdict::Run {
                auto_approved: false
            }
        ),
        "{d:?}"
    );
    assert!(
        d.matched_rules.is_empty(),
        "no tenant rule is even evaluated"
    );
    // The governed tool beside it meets the `kind: local` deny.
    let d = decide(&gov, AgentRef::profile("dev"), name("coding__write_file"));
    assert_eq!(refusal(&d), Some(RefusalCode::Denied));
    // Hooks' asks are not joined either.
    let input = json!({});
    let tool = name("skills__read_skill");
    let agent = AgentRef::profile("dev");
    let d = gov.decide_with(
        CallView {
            tool: &tool,
            agent: &agent,
            input: CallInput::Value(&input),
            run: RunContext::default(),
        },
        vec![toolgate_core::Ask::new(
            toolgate_core::AskSource::Hook,
            String::from("hook"),
        )],
    );
    assert!(matches!(d.verdict, Verdict::Run { .. }), "{d:?}");
}

#[test]
fn r42_ungoverned_tool_still_meets_the_other_checks() {
    let gov = load(host_tools());
    let code =
        |agent: &str, tool: &str| refusal(&decide(&gov, AgentRef::profile(agent), name(tool)));
    assert_eq!(
        code("dev", "skills__fetch_skill"),
        Some(RefusalCode::AirGapped)
    );
    assert_eq!(
        code("dev", "skills__gone_skill"),
        Some(RefusalCode::Denied),
        "declared deny"
    );
    assert_eq!(
        code("locked", "skills__read_skill"),
        Some(RefusalCode::Denied),
        "override deny"
    );
    assert_eq!(
        code("sub", "skills__secret_skill"),
        Some(RefusalCode::Confidential)
    );
    assert_eq!(
        code("sub", "skills__fetch_skill"),
        Some(RefusalCode::NotAllowed)
    );
    assert_eq!(code("dev", "skills__nope"), Some(RefusalCode::UnknownTool));
    // A subagent that runs as a tool still gets the ungoverned tool: it is never wrapped.
    assert_eq!(code("sub", "skills__read_skill"), None);
    let seen = gov.expose("sub").unwrap();
    assert!(
        seen.tools
            .iter()
            .any(|t| &*t.name == "skills__read_skill" && !t.wrapped)
    );
    // Input bounds apply.
    let tool = name("skills__read_skill");
    let agent = AgentRef::profile("dev");
    let deep = (0..100).fold(json!(1), |v, _| json!([v]));
    let input = json!({ "x": deep });
    let d = gov.decide(CallView {
        tool: &tool,
        agent: &agent,
        input: CallInput::Value(&input),
        run: RunContext::default(),
    });
    assert_eq!(refusal(&d), Some(RefusalCode::InvalidInput));
}

#[test]
fn r42_check_warns_once_per_ungoverned_name_with_its_reason() {
    let gov = load(host_tools());
    let w = warnings(&gov);
    let read: Vec<_> = w
        .iter()
        .filter(|w| w.contains("`skills__read_skill` is not governed"))
        .collect();
    assert_eq!(read.len(), 1, "{w:?}");
    assert!(read[0].contains("reads the skill instructions the agent was already given"));
}

#[test]
fn r42_every_load_error() {
    let cases = [
        (
            json!({"server": "s", "name": "t", "governed": false, "ungoverned_reason": "x"}),
            "tools[0].governed",
        ),
        (
            json!({"kind": "http", "name": "t", "ungoverned_reason": "x"}),
            "tools[0].ungoverned_reason",
        ),
        (
            json!({"server": "s", "name": "t", "governed": true}),
            "tools[0].governed",
        ),
        (
            json!({"toolset": "s", "name": "t", "governed": false}),
            "tools[0].ungoverned_reason",
        ),
        (
            json!({"toolset": "s", "name": "t", "governed": false, "ungoverned_reason": " \u{2003}\n"}),
            "tools[0].ungoverned_reason",
        ),
        (
            json!({"toolset": "s", "name": "t", "ungoverned_reason": "x"}),
            "tools[0].ungoverned_reason",
        ),
        (
            json!({"toolset": "s", "name": "t", "governed": true, "ungoverned_reason": "x"}),
            "tools[0].ungoverned_reason",
        ),
        (
            json!({"toolset": "s", "name": "t", "governed": false, "ungoverned_reason": "x", "approval": "require_approval"}),
            "tools[0].approval",
        ),
    ];
    for (tool, path) in cases {
        let errs = load_err(json!({"tools": [tool]}));
        assert!(
            errs.iter().any(|(p, m)| p == path && m.contains("R42")),
            "{path}: {errs:?}"
        );
    }
    // An override `require_approval` naming it, a parent's included.
    let errs = load_err(json!({
        "tools": [{"toolset": "s", "name": "t", "governed": false, "ungoverned_reason": "x"}],
        "agents": [
            {"name": "p", "allowed_tools": ["s__t"], "overrides": [{"tool": "S__T", "approval": "require_approval"}]},
            {"name": "c", "parent": "p", "allowed_tools": ["s__t"]}
        ]
    }));
    assert!(
        errs.iter()
            .any(|(p, _)| p == "agents[0].overrides[0].approval"),
        "{errs:?}"
    );
}

#[test]
fn r42_a_collision_is_ungoverned_only_if_every_record_is() {
    let gov = load(json!({
        "approval": {"channel": "interactive"},
        "tools": [
            {"toolset": "github", "name": "read", "governed": false, "ungoverned_reason": "host copy"},
            {"server": "github", "name": "read"}
        ],
        "agents": [{"name": "a", "allowed_tools": ["github__read"]}],
        "policy": {"rules": [{"effect": "ask", "server": "github", "reason": "github asks"}]}
    }));
    let d = decide(&gov, AgentRef::profile("a"), name("github__read"));
    assert!(matches!(d.verdict, Verdict::Ask { .. }), "governed: {d:?}");
    assert!(!warnings(&gov).iter().any(|w| w.contains("is not governed")));
    // The per-record errors still apply to the record that says `governed: false`.
    let errs = load_err(json!({
        "tools": [
            {"toolset": "github", "name": "read", "governed": false},
            {"server": "github", "name": "read"}
        ]
    }));
    assert!(
        errs.iter().any(|(p, _)| p == "tools[0].ungoverned_reason"),
        "{errs:?}"
    );
}

#[test]
fn r42_builder_api_declares_an_ungoverned_tool() {
    let gov = Governance::builder()
        .require_approval_for_non_read_only(true)
        .tool(
            ToolDeclaration::new(ToolIdentity::toolset("skills", "read"))
                .ungoverned("reads instructions"),
        )
        .agent(AgentProfile::new("a").allow(["skills__read"]))
        .policy(
            Policy::from_json_str(
                r#"{"rules": [{"effect": "deny", "kind": "local"}]}"#,
                &Default::default(),
            )
            .unwrap(),
        )
        .build()
        .unwrap();
    let d = decide(&gov, AgentRef::profile("a"), name("skills__read"));
    assert!(matches!(d.verdict, Verdict::Run { .. }), "{d:?}");
    let err = Governance::builder()
        .tool(ToolDeclaration::new(ToolIdentity::http("x")).ungoverned("no"))
        .build()
        .unwrap_err();
    assert!(
        err.errors.iter().any(|e| e.path == "tools[0].governed"),
        "{err}"
    );
}

// ----- SPEC §8 -----

#[test]
fn sec8_subagent_id_may_not_shadow_a_profile() {
    let gov = load(json!({
        "tools": [{"kind": "http", "name": "refund_order"}],
        "agents": [
            {"name": "support", "allowed_tools": ["refund_order"]},
            {"name": "admin", "allowed_tools": ["refund_order"]}
        ],
        "policy": {"rules": [{"effect": "allow", "agent": "admin"}, {"effect": "deny", "agent": "support"}]}
    }));
    let d = decide(
        &gov,
        AgentRef::subagent("support", "ADMIN"),
        name("refund_order"),
    );
    assert_eq!(refusal(&d), Some(RefusalCode::NotAllowed), "{d:?}");
    assert!(
        d.reasons.iter().any(|r| r.contains("may not shadow")),
        "{d:?}"
    );
    // The profile's own name as the id is fine (it shadows nothing else).
    let d = decide(
        &gov,
        AgentRef::subagent("support", "support"),
        name("refund_order"),
    );
    assert_eq!(refusal(&d), Some(RefusalCode::Denied));
    // An id that is no profile's name takes rules by the id.
    let d = decide(
        &gov,
        AgentRef::subagent("support", "helper-1"),
        name("refund_order"),
    );
    assert!(matches!(d.verdict, Verdict::Run { .. }), "{d:?}");
    // Unknown tool still comes first.
    let d = decide(&gov, AgentRef::subagent("support", "admin"), name("nope"));
    assert_eq!(refusal(&d), Some(RefusalCode::UnknownTool));
}

#[test]
fn sec8_override_without_tool_is_a_load_error_blank_is_ignored() {
    let errs = load_err(json!({"agents": [{"name": "a", "overrides": [{"approval": "deny"}]}]}));
    assert!(
        errs.iter().any(|(p, _)| p == "agents[0].overrides[0].tool"),
        "{errs:?}"
    );
    let gov = load(json!({
        "tools": [{"kind": "http", "name": "t"}],
        "agents": [{"name": "a", "allowed_tools": ["t"], "overrides": [{"tool": " ", "approval": "deny"}]}]
    }));
    assert!(matches!(
        decide(&gov, AgentRef::profile("a"), name("t")).verdict,
        Verdict::Run { .. }
    ));
}

#[test]
fn r9_override_naming_no_tool_and_r6_allowed_name_naming_no_tool_warn() {
    let gov = load(json!({
        "tools": [{"server": "github", "name": "create.issue"}],
        "agents": [{"name": "a", "allowed_tools": ["github__create_issue", "github__create.issue"],
                    "overrides": [{"tool": "github__create.issue", "approval": "deny"}]}]
    }));
    let w = warnings(&gov);
    assert!(
        w.iter()
            .any(|w| w.starts_with("agents[0].overrides[0].tool")
                && w.contains("github__create.issue")),
        "{w:?}"
    );
    assert!(
        w.iter()
            .any(|w| w.starts_with("agents[0].allowed_tools[1]")
                && w.contains("github__create.issue")),
        "{w:?}"
    );
    assert!(
        !w.iter()
            .any(|w| w.starts_with("agents[0].allowed_tools[0]")),
        "{w:?}"
    );
}

#[test]
fn sec8_blank_is_unicode_white_space() {
    for blank in ["\u{2003}", "\u{3000}\t", "\u{85}"] {
        let errs = load_err(json!({"agents": [{"name": blank}]}));
        assert!(
            errs.iter().any(|(p, _)| p == "agents[0].name"),
            "{blank:?}: {errs:?}"
        );
    }
}

#[test]
fn r26_check_warns_when_asks_can_never_be_answered() {
    let gov = load(json!({
        "tools": [{"kind": "http", "name": "t", "approval": "require_approval"}],
        "agents": [{"name": "a", "allowed_tools": ["t"]}]
    }));
    assert!(
        warnings(&gov)
            .iter()
            .any(|w| w.starts_with("approval.channel"))
    );
    let gov = load(json!({
        "approval": {"channel": "interactive"},
        "tools": [{"kind": "http", "name": "t", "approval": "require_approval"}],
        "agents": [{"name": "a", "allowed_tools": ["t"]}]
    }));
    assert!(
        !warnings(&gov)
            .iter()
            .any(|w| w.starts_with("approval.channel"))
    );
    let gov = load(json!({"behavior_gating": {"require_approval_for_non_read_only": true}}));
    assert!(
        warnings(&gov)
            .iter()
            .any(|w| w.starts_with("approval.channel"))
    );
}

#[test]
fn r9_builder_override_to_default_removes_it() {
    let gov = Governance::builder()
        .channel(toolgate_core::ChannelKind::Interactive)
        .tool(ToolDeclaration::new(ToolIdentity::http("t")).approval(ApprovalMode::RequireApproval))
        .agent(
            AgentProfile::new("a")
                .allow(["t"])
                .override_mode("t", ApprovalMode::AutoApprove)
                .override_mode("T", ApprovalMode::Default),
        )
        .build()
        .unwrap();
    let d = decide(&gov, AgentRef::profile("a"), name("t"));
    assert!(matches!(d.verdict, Verdict::Ask { .. }), "{d:?}");
}

// ----- seed 000: overrides changed at run time, the effective configuration -----

#[test]
fn seed000_effective_config_round_trips_and_keeps_only_overrides_in_force() {
    let mut cfg = host_tools();
    cfg["servers"] = json!({"github": {"tool_prefix": "github-", "trust_tool_annotations": true}});
    cfg["tools"]
        .as_array_mut()
        .unwrap()
        .push(json!({"server": "github", "name": "github-create_issue", "annotations": {"readOnlyHint": true, "title": "Create"}}));
    cfg["agents"][0]["overrides"] = json!([
        {"tool": "coding__write_file", "approval": "deny"},
        {"tool": "skills__read_skill", "approval": "auto_approve"},
        {"tool": "CODING__write_file", "approval": "default"}
    ]);
    cfg["audit"] = json!({"file": "a.jsonl", "include_input": true});
    cfg["redaction"] = json!({"keys": ["ssn"], "scrub_output": true});
    let gov = load(cfg);
    let v = config::effective(&gov);
    assert_eq!(
        v["agents"][0]["overrides"],
        json!([{"tool": "skills__read_skill", "approval": "auto_approve"}]),
        "an override set back to `default` is gone"
    );
    assert_eq!(
        v["tools"][5]["name"], "github-create_issue",
        "written as listed (R41)"
    );
    let again = config::load_str(&v.to_string(), Format::Json).unwrap();
    assert_eq!(
        config::effective(&again),
        v,
        "it loads back into the same configuration"
    );
    let seen = |g: &Governance| format!("{:?}", g.expose("dev").unwrap());
    assert_eq!(seen(&gov), seen(&again));
}

#[test]
fn seed000_remove_tool_and_set_override_at_run_time() {
    let gov = load(prefixed());
    let next = gov
        .to_builder()
        .remove_tool(&ToolIdentity::mcp("github", "github-create_issue"))
        .set_override("dev", "github__search", ApprovalMode::Deny)
        .build()
        .unwrap();
    assert!(
        next.catalog().get("github__create_issue").is_none(),
        "removed by its listed name"
    );
    let d = decide(&next, AgentRef::profile("dev"), name("github__search"));
    assert_eq!(refusal(&d), Some(RefusalCode::Denied));
    let back = next
        .to_builder()
        .set_override("DEV", "github__search", ApprovalMode::Default)
        .build()
        .unwrap();
    let d = decide(&back, AgentRef::profile("dev"), name("github__search"));
    assert_ne!(
        refusal(&d),
        Some(RefusalCode::Denied),
        "`default` removes the override"
    );
    assert!(
        config::effective(&back)["agents"][0]
            .get("overrides")
            .is_none()
    );
    let err = gov
        .to_builder()
        .set_override("nobody", "github__search", ApprovalMode::Deny)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("nobody"), "{err}");
}

// ----- R13: exposure computed once per snapshot -----

#[test]
fn r13_exposure_is_computed_once_per_snapshot_and_never_outlives_it() {
    let gov = load(host_tools());
    let first = gov.exposure("dev").unwrap();
    assert!(std::sync::Arc::ptr_eq(
        &first,
        &gov.exposure("Dev").unwrap()
    ));
    assert_eq!(*first, gov.expose("dev").unwrap());
    // A policy replacement keeps the snapshot's exposures (they read no policy).
    let relaxed = gov
        .with_policy(toolgate_engine::PolicyState::readable(Policy::empty()))
        .unwrap();
    assert!(std::sync::Arc::ptr_eq(
        &first,
        &relaxed.exposure("dev").unwrap()
    ));
    // Any other change is a new snapshot with its own.
    let changed = gov
        .to_builder()
        .set_override("dev", "coding__write_file", ApprovalMode::Deny)
        .build()
        .unwrap();
    let after = changed.exposure("dev").unwrap();
    assert!(!std::sync::Arc::ptr_eq(&first, &after));
    assert!(
        after
            .omitted
            .iter()
            .any(|o| &*o.name == "coding__write_file")
    );
    assert!(first.tools.iter().any(|t| &*t.name == "coding__write_file"));
    assert!(gov.exposure("nobody").is_err());
}
