//! Direct engine tests of SPEC R1–R14, R24, R27–R31, R36 and R39, for the corners the
//! public conformance cases (`/work/shared/conformance/cases`) cover thinly: collisions by
//! normalisation and by kind, every name comparison in another case, combined aspects of
//! colliding records, cross-source posture records in both arrival orders, exemption scope,
//! input bounds exactly at and one past the limit, grandparent chains, override edge cases,
//! and the order of the checks when a call fails several.
//!
//! Each test drives the pure engine: `config::load_str` → `Governance::expose` /
//! `Governance::decide` / `Governance::warnings`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use serde_json::{Value, json};
use toolgate_core::{
    AgentRef, AskSource, ChannelKind, Check, Decision, NetworkScope, RefusalCode, RunContext,
    RunMode, ToolIdentity, ToolKind, ToolRef, Verdict,
};
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::policy::{Limits, Policy};
use toolgate_engine::{CallInput, CallView, Governance, PolicyState};

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

fn load(config: &Value) -> Governance {
    load_str(&config.to_string(), Format::Json)
        .unwrap_or_else(|e| panic!("the configuration must load: {e}\n{config:#}"))
}

/// The paths of every load error.
fn load_errors(config: &Value) -> Vec<String> {
    match load_str(&config.to_string(), Format::Json) {
        Ok(_) => panic!("the configuration must not load:\n{config:#}"),
        Err(e) => e.errors.into_iter().map(|e| e.path).collect(),
    }
}

fn with_policy(gov: &Governance, policy: &Value) -> Governance {
    let p = Policy::from_json(policy, &Limits::default())
        .unwrap_or_else(|e| panic!("the policy must be valid: {e}\n{policy:#}"));
    gov.with_policy(PolicyState::readable(p)).unwrap()
}

fn mode(mode: RunMode) -> RunContext {
    RunContext {
        mode,
        background: false,
    }
}

fn decide_ref(
    gov: &Governance,
    agent: &str,
    tool: ToolRef,
    input: &Value,
    run: RunContext,
) -> Decision {
    let agent = AgentRef::profile(agent);
    gov.decide(CallView {
        tool: &tool,
        agent: &agent,
        input: CallInput::Value(input),
        run,
    })
}

fn decide_with(
    gov: &Governance,
    agent: &str,
    tool: &str,
    input: &Value,
    run: RunContext,
) -> Decision {
    decide_ref(gov, agent, ToolRef::Name(tool.to_owned()), input, run)
}

fn decide_text(gov: &Governance, agent: &str, tool: &str, text: &str) -> Decision {
    let tool = ToolRef::Name(tool.to_owned());
    let agent = AgentRef::profile(agent);
    gov.decide(CallView {
        tool: &tool,
        agent: &agent,
        input: CallInput::Text(text),
        run: RunContext::default(),
    })
}

/// What a call comes to, in short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Out {
    Run,
    AutoApproved,
    Ask(ChannelKind),
    Refused(RefusalCode),
}

fn out(d: &Decision) -> Out {
    match d.verdict {
        Verdict::Run {
            auto_approved: false,
        } => Out::Run,
        Verdict::Run {
            auto_approved: true,
        } => Out::AutoApproved,
        Verdict::Ask { channel } => Out::Ask(channel),
        Verdict::Refused(code) => Out::Refused(code),
    }
}

/// A plain call: input `{}`, default run settings.
fn call(gov: &Governance, agent: &str, tool: &str) -> Out {
    out(&decide_with(
        gov,
        agent,
        tool,
        &json!({}),
        RunContext::default(),
    ))
}

/// The check that decided a plain call.
fn decided_by(gov: &Governance, agent: &str, tool: &str) -> Check {
    decide_with(gov, agent, tool, &json!({}), RunContext::default()).decided_by
}

const ASK: Out = Out::Ask(ChannelKind::Interactive);

fn refused(code: RefusalCode) -> Out {
    Out::Refused(code)
}

/// Exposure as `(name, "raw" | "wrapped")` and `(name, code)`, in the engine's order.
#[allow(
    clippy::type_complexity,
    reason = "a table of cases, read where it is written"
)]
fn exposure(
    gov: &Governance,
    agent: &str,
) -> (Vec<(String, &'static str)>, Vec<(String, RefusalCode)>) {
    let e = gov.expose(agent).expect("a configured agent");
    (
        e.tools
            .iter()
            .map(|t| {
                (
                    t.name.to_string(),
                    if t.wrapped { "wrapped" } else { "raw" },
                )
            })
            .collect(),
        e.omitted
            .iter()
            .map(|o| (o.name.to_string(), o.refusal.code))
            .collect(),
    )
}

fn names(list: &[(&str, &'static str)]) -> Vec<(String, &'static str)> {
    list.iter().map(|(n, a)| ((*n).to_owned(), *a)).collect()
}

fn omitted(list: &[(&str, RefusalCode)]) -> Vec<(String, RefusalCode)> {
    list.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect()
}

fn collision_warnings(gov: &Governance) -> Vec<(String, String)> {
    gov.warnings()
        .into_iter()
        .filter(|w| w.message.contains("collision"))
        .map(|w| (w.path, w.message))
        .collect()
}

/// An object nested `depth` levels deep (SPEC §8: `{}` is depth 1).
fn nested_objects(depth: usize) -> Value {
    let mut v = json!({});
    for _ in 1..depth {
        v = json!({ "a": v });
    }
    v
}

/// An object around `depth - 1` nested arrays: depth `depth`.
fn nested_arrays(depth: usize) -> Value {
    let mut v = json!([]);
    for _ in 2..depth {
        v = json!([v]);
    }
    json!({ "a": v })
}

// ---------------------------------------------------------------------------------------
// R1, R2, R3: names
// ---------------------------------------------------------------------------------------

#[test]
fn r1_wire_names_normalise_every_segment_and_keep_case() {
    let gov = load(&json!({
        "tools": [
            {"server": "GitHub Enterprise", "name": "list.issues"},
            {"toolset": "my tools!!", "name": "__init__"},
            {"kind": "http", "name": "--refund--order--"},
            {"server": "kb", "name": "ünïcode-ok"}
        ],
        "agents": [{"name": "dev", "allowed_tools": [
            "GITHUB_ENTERPRISE__LIST_ISSUES", "my_tools__init", "--REFUND--ORDER--", "kb__n_code-ok"
        ]}]
    }));
    let (tools, gone) = exposure(&gov, "dev");
    assert_eq!(
        tools,
        names(&[
            ("--refund--order--", "raw"),
            ("GitHub_Enterprise__list_issues", "raw"),
            ("kb__n_code-ok", "raw"),
            ("my_tools__init", "raw"),
        ]),
        "case kept, runs of `_` collapsed, edges trimmed, `-` kept; sorted by lower-cased name"
    );
    assert!(gone.is_empty());
    assert_eq!(
        call(&gov, "dev", "github_enterprise__LIST_ISSUES"),
        Out::Run
    );
    let by_identity = ToolRef::Identity(ToolIdentity::mcp("GitHub Enterprise", "list.issues"));
    assert_eq!(
        out(&decide_ref(
            &gov,
            "dev",
            by_identity,
            &json!({}),
            RunContext::default()
        )),
        Out::Run
    );

    assert_eq!(
        load_errors(&json!({"tools": [{"toolset": "!!!", "name": "x"}]})),
        ["tools[0].toolset"],
        "R1: a segment that normalises to nothing is an error"
    );
    assert_eq!(
        load_errors(&json!({"tools": [{"server": "kb", "name": "___"}]})),
        ["tools[0].name"]
    );
}

#[test]
fn r1_r24_normalisation_can_make_two_http_tools_collide() {
    let gov = load(&json!({
        "tools": [{"kind": "http", "name": "a.b"}, {"kind": "http", "name": "a b", "approval": "deny"}],
        "agents": [{"name": "dev", "allowed_tools": ["a_b"]}]
    }));
    assert_eq!(gov.catalog().len(), 1);
    assert_eq!(gov.catalog().get("A_B").unwrap().records.len(), 2);
    let warnings = collision_warnings(&gov);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].0, "tools[1]");
    assert!(warnings[0].1.contains("`a_b`"), "{warnings:?}");
    assert_eq!(
        call(&gov, "dev", "a_b"),
        refused(RefusalCode::Denied),
        "R24: the strictest mode"
    );
}

#[test]
fn r2_list_dot_issues_and_list_underscore_issues_collide_on_one_server() {
    let gov = load(&json!({
        "approval": {"channel": "interactive"},
        "tools": [
            {"server": "github", "name": "list.issues", "description": "List issues"},
            {"server": "github", "name": "list_issues", "approval": "require_approval"}
        ],
        "agents": [{"name": "dev", "allowed_tools": ["GITHUB__LIST_ISSUES"]}]
    }));
    let entry = gov.catalog().get("github__list_issues").expect("one entry");
    assert_eq!(gov.catalog().len(), 1);
    let raw: Vec<&str> = entry.records.iter().map(|r| r.identity().name()).collect();
    assert_eq!(
        raw,
        ["list.issues", "list_issues"],
        "two identities behind one name"
    );
    let warnings = collision_warnings(&gov);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].0, "tools[1]");
    assert!(
        warnings[0].1.contains("`github__list_issues`"),
        "{warnings:?}"
    );
    assert!(warnings[0].1.contains("list.issues") && warnings[0].1.contains("list_issues"));

    assert_eq!(
        exposure(&gov, "dev").0,
        names(&[("github__list_issues", "wrapped")])
    );
    assert_eq!(call(&gov, "dev", "GitHub__List_Issues"), ASK);
    for id in [
        ToolIdentity::mcp("GITHUB", "list.issues"),
        ToolIdentity::mcp("github", "list_issues"),
    ] {
        let d = decide_ref(
            &gov,
            "dev",
            ToolRef::Identity(id.clone()),
            &json!({}),
            RunContext::default(),
        );
        assert_eq!(
            out(&d),
            ASK,
            "{id}: the same entry, the same strictest mode"
        );
    }
    let other = ToolRef::Identity(ToolIdentity::toolset("github", "list.issues"));
    assert_eq!(
        out(&decide_ref(
            &gov,
            "dev",
            other,
            &json!({}),
            RunContext::default()
        )),
        refused(RefusalCode::UnknownTool),
        "an identity must match a record of that kind and source"
    );
}

#[test]
fn r2_toolset_and_server_of_one_name_collide() {
    let gov = load(&json!({
        "air_gapped": true,
        "tools": [
            {"toolset": "github", "name": "create_issue"},
            {"server": "github", "name": "create_issue"}
        ],
        "agents": [{"name": "dev", "allowed_tools": ["github__create_issue"]}]
    }));
    let entry = gov.catalog().get("github__create_issue").unwrap();
    let kinds: Vec<ToolKind> = entry.records.iter().map(|r| r.identity().kind()).collect();
    assert_eq!(kinds, [ToolKind::Local, ToolKind::Mcp]);
    assert_eq!(collision_warnings(&gov).len(), 1);
    assert_eq!(
        call(&gov, "dev", "github__create_issue"),
        refused(RefusalCode::AirGapped),
        "R24: the MCP record is open-world, so the combined scope is egress"
    );
}

#[test]
fn r2_a_source_spelled_in_another_case_is_a_revision_not_a_collision() {
    let gov = load(&json!({
        "tools": [
            {"server": "GitHub", "name": "x", "approval": "deny"},
            {"server": "github", "name": "x"}
        ],
        "agents": [{"name": "dev", "allowed_tools": ["github__x"]}]
    }));
    let entry = gov.catalog().get("github__x").unwrap();
    assert_eq!(
        entry.records.len(),
        1,
        "one identity: the source compares case-insensitively"
    );
    assert_eq!(entry.name, "GitHub__x", "the first spelling is kept");
    assert!(collision_warnings(&gov).is_empty());
    assert_eq!(
        call(&gov, "dev", "GITHUB__X"),
        Out::Run,
        "R29: the revision is believed"
    );
}

#[test]
fn r2_every_name_comparison_is_ascii_case_insensitive() {
    let gov = load(&json!({
        "approval": {"channel": "interactive"},
        "behavior_gating": {"require_approval_for_non_read_only": true,
            "exemptions": [{"tool": "CREATE_ISSUE", "server": "GITHUB", "reason": "reviewed"}]},
        "tools": [
            {"server": "GitHub", "name": "create_issue"},
            {"server": "github", "name": "close_issue"}
        ],
        "agents": [
            {"name": "Support", "allowed_tools": ["GITHUB__CREATE_ISSUE", "github__Close_Issue"],
             "overrides": [{"tool": "github__CLOSE_ISSUE", "approval": "require_approval"}]},
            {"name": "sub", "parent": "SUPPORT", "allowed_tools": ["GitHub__create_issue"]}
        ],
        "policy": {"rules": [{"effect": "ask", "server": "GITHUB", "tool": "Create_*",
                              "agent": "SUP*", "reason": "issues need a person"}]}
    }));
    // allowed names, the exemption (tool and server), the rule's globs and the profile name
    let d = decide_with(
        &gov,
        "support",
        "GitHub__Create_Issue",
        &json!({}),
        RunContext::default(),
    );
    assert_eq!(out(&d), ASK);
    assert_eq!(
        d.reasons,
        ["issues need a person"],
        "exempt from the posture; the rule asks"
    );
    // the override key
    let d = decide_with(
        &gov,
        "SUPPORT",
        "github__close_issue",
        &json!({}),
        RunContext::default(),
    );
    assert_eq!(out(&d), ASK);
    let sources: Vec<AskSource> = d.asks.iter().map(|a| a.source.clone()).collect();
    assert_eq!(sources, [AskSource::Agent, AskSource::Posture]);
    // the parent name; `sub` does not match the rule's `SUP*`
    assert_eq!(call(&gov, "SUB", "github__create_issue"), Out::Run);
    assert_eq!(
        call(&gov, "sub", "github__close_issue"),
        refused(RefusalCode::NotAllowed)
    );
    assert_eq!(gov.expose("SUPPORT").unwrap().agent, "Support");
}

#[test]
fn r3_rules_match_the_tools_own_name_and_server_never_the_wire_name() {
    let gov = load(&json!({
        "tools": [{"server": "GitHub Enterprise", "name": "list.issues"}],
        "agents": [{"name": "dev", "allowed_tools": ["GitHub_Enterprise__list_issues"]}]
    }));
    let wire = "GitHub_Enterprise__list_issues";
    for (rule, want) in [
        (json!({"effect": "deny", "tool": "list_issues"}), Out::Run),
        (
            json!({"effect": "deny", "server": "GitHub_Enterprise"}),
            Out::Run,
        ),
        (
            json!({"effect": "deny", "tool": "list.issues"}),
            refused(RefusalCode::Denied),
        ),
        (
            json!({"effect": "deny", "tool": "LIST.*", "server": "github enterprise"}),
            refused(RefusalCode::Denied),
        ),
    ] {
        let g = with_policy(&gov, &json!({ "rules": [rule.clone()] }));
        assert_eq!(call(&g, "dev", wire), want, "{rule}");
    }
    assert!(
        Policy::from_json(
            &json!({"rules": [{"effect": "deny", "tool": wire}]}),
            &Limits::default()
        )
        .is_err(),
        "R22: a `tool` containing `__` (a wire name) is refused"
    );
}

// ---------------------------------------------------------------------------------------
// R4, R5, R8: declarations, defaults and the air gap
// ---------------------------------------------------------------------------------------

#[test]
fn r4_r8_effective_network_scope_decides_the_air_gap() {
    let gov = load(&json!({
        "air_gapped": true,
        "servers": {"kb": {"trust_tool_annotations": true}},
        "tools": [
            {"kind": "http", "name": "sync", "network": "egress", "network_override": "none"},
            {"server": "kb", "name": "fetch", "network_override": "incidental"},
            {"toolset": "calc", "name": "add", "network": "none", "network_override": "egress"},
            {"server": "kb", "name": "index", "network": "egress", "annotations": {"openWorldHint": false}},
            {"server": "kb", "name": "quiet", "annotations": {"openWorldHint": false}},
            {"server": "kb", "name": "ann", "annotations": {"readOnlyHint": true}},
            {"kind": "http", "name": "ping", "network": "incidental"}
        ],
        "agents": [{"name": "dev", "allowed_tools": [
            "sync", "kb__fetch", "calc__add", "kb__index", "kb__quiet", "kb__ann", "ping"
        ]}]
    }));
    for (tool, want) in [
        ("sync", Out::Run),
        ("kb__fetch", Out::Run),
        ("calc__add", refused(RefusalCode::AirGapped)),
        ("kb__index", refused(RefusalCode::AirGapped)),
        ("kb__quiet", Out::Run),
        ("kb__ann", refused(RefusalCode::AirGapped)),
        ("ping", Out::Run),
    ] {
        assert_eq!(call(&gov, "dev", tool), want, "{tool}");
    }
    let sync = gov.catalog().get("sync").unwrap();
    assert_eq!(
        sync.records[0].decl.network,
        NetworkScope::Egress,
        "R4: the declared scope is kept"
    );
    assert_eq!(
        sync.network,
        NetworkScope::None,
        "R4: the effective scope is used"
    );
}

#[test]
fn r5_unknown_enum_values_wrong_types_and_misplaced_fields_are_load_errors() {
    for (config, path) in [
        (
            json!({"tools": [{"kind": "http", "name": "a", "approval": "Deny"}]}),
            "tools[0].approval",
        ),
        (
            json!({"tools": [{"kind": "http", "name": "a", "network": "internet"}]}),
            "tools[0].network",
        ),
        (
            json!({"tools": [{"kind": "http", "name": "a", "network_override": "all"}]}),
            "tools[0].network_override",
        ),
        (
            json!({"approval": {"channel": "slack"}}),
            "approval.channel",
        ),
        (
            json!({"tools": [{"kind": "grpc", "name": "a"}]}),
            "tools[0].kind",
        ),
        (
            json!({"tools": [{"kind": "http", "name": "a", "read_only": null}]}),
            "tools[0].read_only",
        ),
        (
            json!({"tools": [{"server": "s", "name": "a", "read_only": true}]}),
            "tools[0].read_only",
        ),
        (
            json!({"tools": [{"toolset": "t", "name": "a", "annotations": {}}]}),
            "tools[0].annotations",
        ),
        (
            json!({"agents": [{"name": "a", "overrides": [{"tool": "x", "approval": "never"}]}]}),
            "agents[0].overrides[0].approval",
        ),
    ] {
        assert_eq!(load_errors(&config), [path], "{config}");
    }
    let errs = load_errors(
        &json!({"tools": [{"server": "s", "name": "a", "annotations": {"readOnlyHint": "true"}}]}),
    );
    assert_eq!(errs.len(), 1);
    assert!(errs[0].starts_with("tools[0].annotations"), "{errs:?}");
}

#[test]
fn r5_first_party_and_http_tools_are_assumed_to_write() {
    let gov = load(&json!({
        "approval": {"channel": "interactive"},
        "behavior_gating": {"require_approval_for_non_read_only": true},
        "tools": [
            {"toolset": "fs", "name": "write"},
            {"toolset": "fs", "name": "read", "read_only": true},
            {"kind": "http", "name": "post"},
            {"kind": "http", "name": "get", "read_only": true}
        ],
        "agents": [{"name": "dev", "allowed_tools": ["fs__write", "fs__read", "post", "get"]}]
    }));
    assert_eq!(
        exposure(&gov, "dev").0,
        names(&[
            ("fs__read", "raw"),
            ("fs__write", "wrapped"),
            ("get", "raw"),
            ("post", "wrapped")
        ])
    );
}

// ---------------------------------------------------------------------------------------
// R6, R9–R13: exposure
// ---------------------------------------------------------------------------------------

#[test]
fn r6_allowed_names_that_match_no_tool_are_skipped() {
    let gov = load(&json!({
        "tools": [{"kind": "http", "name": "lookup"}, {"kind": "http", "name": "other"}],
        "agents": [{"name": "dev", "allowed_tools": ["ghost", "", " ", "LOOKUP", "lookup"]}]
    }));
    let (tools, gone) = exposure(&gov, "dev");
    assert_eq!(tools, names(&[("lookup", "raw")]));
    assert_eq!(gone, omitted(&[("other", RefusalCode::NotAllowed)]));
    assert_eq!(
        call(&gov, "dev", "ghost"),
        refused(RefusalCode::UnknownTool)
    );
    assert_eq!(call(&gov, "dev", ""), refused(RefusalCode::UnknownTool));
}

#[test]
fn r9_override_edge_cases() {
    let gov = load(&json!({
        "approval": {"channel": "interactive"},
        "tools": [
            {"kind": "http", "name": "t_req", "approval": "require_approval"},
            {"kind": "http", "name": "t_deny", "approval": "deny"},
            {"kind": "http", "name": "t_auto", "approval": "auto_approve"},
            {"kind": "http", "name": "t_plain"},
            {"kind": "http", "name": "t_req2", "approval": "require_approval"},
            {"kind": "http", "name": "other"},
            {"server": "github", "name": "create_issue", "approval": "require_approval"}
        ],
        "agents": [{"name": "dev",
            "allowed_tools": ["t_req", "t_deny", "t_auto", "t_plain", "t_req2", "github__create_issue"],
            "overrides": [
                {"tool": "T_REQ", "approval": "auto_approve"},
                {"tool": "t_plain", "approval": "deny"},
                {"tool": "T_Plain", "approval": "require_approval"},
                {"tool": "t_auto", "approval": "deny"},
                {"tool": "t_auto", "approval": "default"},
                {"tool": "t_req2", "approval": "auto_approve"},
                {"tool": "t_req2", "approval": "default"},
                {"tool": "t_deny", "approval": "auto_approve"},
                {"tool": "", "approval": "deny"},
                {"tool": "   ", "approval": "deny"},
                {"tool": "other", "approval": "auto_approve"},
                {"tool": "ghost", "approval": "auto_approve"},
                {"tool": "create_issue", "approval": "auto_approve"}
            ]}]
    }));
    let (tools, gone) = exposure(&gov, "dev");
    assert_eq!(
        tools,
        names(&[
            // keyed by qualified name: the tool's own name `create_issue` is not its key
            ("github__create_issue", "wrapped"),
            // `deny` then `default`: the last wins and restores the declared `auto_approve`
            ("t_auto", "raw"),
            // R9 as written: a non-default override is the effective mode, over a declared deny
            ("t_deny", "raw"),
            // `deny` then `require_approval` under another case: the last wins
            ("t_plain", "wrapped"),
            // a case-insensitive key
            ("t_req", "raw"),
            // `auto_approve` then `default`: the declared `require_approval` is back
            ("t_req2", "wrapped"),
        ])
    );
    // An override for a tool the agent may not use, or for no tool, makes nothing available.
    assert_eq!(gone, omitted(&[("other", RefusalCode::NotAllowed)]));
    assert_eq!(
        call(&gov, "dev", "ghost"),
        refused(RefusalCode::UnknownTool)
    );
    // The overridden `require_approval` is an agent-level ask: the run mode may approve it.
    let d = decide_with(
        &gov,
        "dev",
        "t_plain",
        &json!({}),
        mode(RunMode::AutoApproveRequired),
    );
    assert_eq!(out(&d), Out::AutoApproved);
}

#[test]
fn r11_r14_as_tool_wrap_is_refused_at_step_6_before_any_run_mode() {
    let gov = load(&json!({
        "approval": {"channel": "interactive"},
        "behavior_gating": {"require_approval_for_non_read_only": true},
        "tools": [
            {"kind": "http", "name": "refund", "approval": "require_approval", "read_only": true},
            {"toolset": "fs", "name": "write"},
            {"toolset": "fs", "name": "read", "read_only": true}
        ],
        "agents": [
            {"name": "helper", "as_tool": true, "allowed_tools": ["refund", "fs__write", "fs__read"]},
            {"name": "dev", "allowed_tools": ["refund", "fs__write", "fs__read"]}
        ]
    }));
    let d = |agent, tool, m| {
        let d = decide_with(&gov, agent, tool, &json!({}), mode(m));
        (out(&d), d.decided_by)
    };
    let nac = refused(RefusalCode::NoApprovalChannel);
    for m in [
        RunMode::UseAgentPolicy,
        RunMode::AutoApproveRequired,
        RunMode::AutoRejectRequired,
    ] {
        // The agent-level wrap: step 6, before the approval decision and its run modes.
        assert_eq!(d("helper", "refund", m), (nac, Check::AgentMode), "{m:?}");
        assert_eq!(
            d("helper", "fs__read", m),
            (Out::Run, Check::Passed),
            "{m:?}"
        );
    }
    // The posture's ask: step 7, routed (R26): auto-reject first, then no channel — no run
    // mode approves an operator's ask (R25).
    assert_eq!(
        d("helper", "fs__write", RunMode::UseAgentPolicy),
        (nac, Check::Routing)
    );
    assert_eq!(
        d("helper", "fs__write", RunMode::AutoApproveRequired),
        (nac, Check::Routing)
    );
    assert_eq!(
        d("helper", "fs__write", RunMode::AutoRejectRequired),
        (refused(RefusalCode::Rejected), Check::Routing)
    );
    // The same tools for an agent with a channel.
    assert_eq!(
        d("dev", "refund", RunMode::AutoApproveRequired).0,
        Out::AutoApproved
    );
    assert_eq!(d("dev", "fs__write", RunMode::AutoApproveRequired).0, ASK);
}

#[test]
fn r13_search_and_load_draw_from_the_exposed_set_only() {
    let gov = load(&json!({
        "tools": [
            {"kind": "http", "name": "refund_order", "description": "Refund a customer's order"},
            {"kind": "http", "name": "refund_all", "approval": "deny", "description": "Refund every order"},
            {"kind": "http", "name": "lookup_order", "description": "Look up an order"},
            {"kind": "http", "name": "secret_refund", "description": "Refund quietly"}
        ],
        "agents": [{"name": "dev", "allowed_tools": ["refund_order", "refund_all", "lookup_order"]}]
    }));
    let e = gov.expose("dev").unwrap();
    let found = |q: &str| e.search(q).map(|t| t.name.to_string()).collect::<Vec<_>>();
    assert_eq!(found("refund"), ["refund_order"]);
    assert_eq!(found("ORDER"), ["lookup_order", "refund_order"]);
    assert_eq!(
        found("customer REFUND"),
        ["refund_order"],
        "every term, in any order"
    );
    assert!(
        found("every").is_empty(),
        "a denied tool is never found by its description"
    );
    assert!(
        found("quietly").is_empty(),
        "nor a tool outside the allowed names"
    );
    assert!(e.load("REFUND_ORDER").is_some());
    for hidden in ["refund_all", "secret_refund", "ghost"] {
        assert!(e.load(hidden).is_none(), "{hidden}");
    }
}

// ---------------------------------------------------------------------------------------
// R14: the order of the checks
// ---------------------------------------------------------------------------------------

fn everything_wrong(air_gapped: bool) -> Governance {
    load(&json!({
        "air_gapped": air_gapped,
        "limits": {"max_input_bytes": 64},
        "tools": [
            {"kind": "http", "name": "bad", "confidential": true, "network": "egress", "approval": "deny"},
            {"toolset": "calc", "name": "add"}
        ],
        "agents": [
            {"name": "stranger", "allowed_tools": ["calc__add"]},
            {"name": "secret", "confidential": true, "allowed_tools": ["bad"]},
            {"name": "open", "allowed_tools": ["bad", "calc__add"]},
            {"name": "open_auto", "allowed_tools": ["bad"],
             "overrides": [{"tool": "bad", "approval": "auto_approve"}]},
            {"name": "open_req", "allowed_tools": ["bad"],
             "overrides": [{"tool": "bad", "approval": "require_approval"}]},
            {"name": "open_req_tool", "as_tool": true, "allowed_tools": ["bad"],
             "overrides": [{"tool": "bad", "approval": "require_approval"}]}
        ],
        "policy": {"rules": [{"effect": "deny", "tool": "bad", "reason": "tenant says no"}]}
    }))
}

#[test]
fn r14_first_refusal_wins_in_check_order() {
    let big = json!({ "blob": "x".repeat(100) });
    let plain = RunContext::default();
    let check = |gov: &Governance, agent, tool, input: &Value| {
        let d = decide_with(gov, agent, tool, input, plain);
        (out(&d), d.decided_by)
    };
    let gov = everything_wrong(true);
    use RefusalCode as C;
    assert_eq!(
        check(&gov, "nobody", "nope", &big),
        (refused(C::UnknownTool), Check::UnknownTool)
    );
    assert_eq!(
        check(&gov, "nobody", "bad", &big),
        (refused(C::InvalidInput), Check::InputBounds),
        "SPEC §8: input bounds right after the look-up, before the missing profile"
    );
    assert_eq!(
        check(&gov, "nobody", "bad", &json!({})),
        (refused(C::NotAllowed), Check::Allowed)
    );
    assert_eq!(
        check(&gov, "stranger", "bad", &json!({})),
        (refused(C::NotAllowed), Check::Allowed)
    );
    assert_eq!(
        check(&gov, "secret", "bad", &json!({})),
        (refused(C::Confidential), Check::Confidentiality)
    );
    assert_eq!(
        check(&gov, "open", "bad", &json!({})),
        (refused(C::AirGapped), Check::AirGap)
    );

    let gov = everything_wrong(false);
    assert_eq!(
        check(&gov, "open", "bad", &json!({})),
        (refused(C::Denied), Check::AgentMode)
    );
    assert_eq!(
        check(&gov, "open_req_tool", "bad", &json!({})),
        (refused(C::NoApprovalChannel), Check::AgentMode)
    );
    assert_eq!(
        check(&gov, "open_auto", "bad", &json!({})),
        (refused(C::Denied), Check::TenantPolicy)
    );
    let d = decide_with(&gov, "open_req", "bad", &json!({}), plain);
    assert_eq!(
        (out(&d), d.decided_by),
        (refused(C::Denied), Check::TenantPolicy),
        "a tenant deny before routing"
    );
    assert_eq!(d.reasons, ["tenant says no"]);

    // An unreadable stored policy: after steps 1–6, before the tenant rules and routing; a
    // local tool is unaffected (R22).
    let gov = gov
        .with_policy(PolicyState::Unreadable(String::from("bad bytes")))
        .unwrap();
    assert_eq!(
        check(&gov, "open", "bad", &json!({})),
        (refused(C::Denied), Check::AgentMode)
    );
    assert_eq!(
        check(&gov, "open_auto", "bad", &json!({})),
        (refused(C::PolicyUnreadable), Check::TenantPolicy)
    );
    assert_eq!(
        check(&gov, "open_req", "bad", &json!({})),
        (refused(C::PolicyUnreadable), Check::TenantPolicy)
    );
    assert_eq!(
        check(&gov, "open", "calc__add", &json!({})),
        (Out::Run, Check::Passed)
    );
    assert_eq!(
        check(&gov, "open", "calc__add", &big),
        (refused(C::InvalidInput), Check::InputBounds)
    );
}

// ---------------------------------------------------------------------------------------
// R24: collisions never loosen
// ---------------------------------------------------------------------------------------

/// A toolset `github` and an MCP server `github` both declaring `create_issue`.
fn collision(local: Value, mcp: Value, extra: Value) -> Governance {
    let mut local_decl = json!({"toolset": "github", "name": "create_issue"});
    let mut mcp_decl = json!({"server": "github", "name": "create_issue"});
    for (decl, add) in [(&mut local_decl, local), (&mut mcp_decl, mcp)] {
        for (k, v) in add.as_object().unwrap() {
            decl[k] = v.clone();
        }
    }
    let mut config = json!({
        "approval": {"channel": "interactive"},
        "tools": [local_decl, mcp_decl],
        "agents": [{"name": "dev", "allowed_tools": ["github__create_issue"]}]
    });
    for (k, v) in extra.as_object().unwrap() {
        config[k] = v.clone();
    }
    load(&config)
}

const CI: &str = "github__create_issue";

#[test]
fn r24_collision_takes_the_strictest_approval_mode() {
    let closed = json!({"annotations": {"openWorldHint": false}});
    let g = collision(json!({"approval": "deny"}), closed.clone(), json!({}));
    assert_eq!(
        (call(&g, "dev", CI), decided_by(&g, "dev", CI)),
        (refused(RefusalCode::Denied), Check::AgentMode)
    );
    let g = collision(
        json!({"approval": "auto_approve"}),
        json!({"approval": "require_approval", "annotations": {"openWorldHint": false}}),
        json!({}),
    );
    assert_eq!(call(&g, "dev", CI), ASK);
}

#[test]
fn r24_collision_network_egress_wins() {
    let gapped = json!({"air_gapped": true});
    let closed = json!({"annotations": {"openWorldHint": false}});
    let g = collision(
        json!({"network": "incidental"}),
        closed.clone(),
        gapped.clone(),
    );
    assert_eq!(call(&g, "dev", CI), Out::Run, "no record is egress");
    let g = collision(json!({}), json!({}), gapped.clone());
    assert_eq!(
        call(&g, "dev", CI),
        refused(RefusalCode::AirGapped),
        "the MCP record is open-world"
    );
    let g = collision(json!({"network": "egress"}), closed, gapped.clone());
    assert_eq!(
        call(&g, "dev", CI),
        refused(RefusalCode::AirGapped),
        "the local record is egress"
    );
    let g = collision(
        json!({"network_override": "egress"}),
        json!({"network_override": "none"}),
        gapped,
    );
    assert_eq!(
        call(&g, "dev", CI),
        refused(RefusalCode::AirGapped),
        "overrides combine too"
    );
}

#[test]
fn r24_collision_is_confidential_if_any_record_is() {
    let closed = json!({"annotations": {"openWorldHint": false}});
    let secret = json!({"agents": [{"name": "dev", "confidential": true, "allowed_tools": [CI]}]});
    for (local, mcp) in [
        (json!({"confidential": true}), closed.clone()),
        (
            json!({}),
            json!({"confidential": true, "annotations": {"openWorldHint": false}}),
        ),
    ] {
        let g = collision(local.clone(), mcp.clone(), secret.clone());
        assert_eq!(
            call(&g, "dev", CI),
            refused(RefusalCode::Confidential),
            "{local} {mcp}"
        );
    }
}

#[test]
fn r24_collision_posture_one_non_exempt_record_gates() {
    let posture = |trusted: bool, exemptions: Value| {
        json!({
            "behavior_gating": {"require_approval_for_non_read_only": true, "exemptions": exemptions},
            "servers": {"github": {"trust_tool_annotations": trusted}}
        })
    };
    let ro = json!({"read_only": true});
    let mcp_ro = json!({"annotations": {"readOnlyHint": true}});
    let g = collision(ro.clone(), mcp_ro.clone(), posture(true, json!([])));
    assert_eq!(call(&g, "dev", CI), Out::Run, "both records exempt");
    let g = collision(json!({}), mcp_ro.clone(), posture(true, json!([])));
    assert_eq!(call(&g, "dev", CI), ASK, "the local record writes");
    let g = collision(ro.clone(), json!({}), posture(true, json!([])));
    assert_eq!(
        call(&g, "dev", CI),
        ASK,
        "the MCP record has no read-only claim"
    );
    let g = collision(ro, mcp_ro, posture(false, json!([])));
    assert_eq!(
        call(&g, "dev", CI),
        ASK,
        "the MCP record's claim comes from an untrusted server"
    );
    // An exemption without `server` covers the local record and the trusted server's.
    let all = json!([{"tool": "create_issue", "reason": "reviewed"}]);
    let g = collision(
        json!({}),
        json!({"annotations": {"destructiveHint": true}}),
        posture(true, all),
    );
    assert_eq!(call(&g, "dev", CI), Out::Run);
    // An exemption naming the server covers only the MCP record.
    let mcp_only = json!([{"tool": "create_issue", "server": "github", "reason": "reviewed"}]);
    let g = collision(json!({}), json!({}), posture(true, mcp_only));
    assert_eq!(call(&g, "dev", CI), ASK);
}

#[test]
fn r24_collision_tenant_policy_is_evaluated_per_record_strictest_wins() {
    let closed = json!({"annotations": {"openWorldHint": false}});
    let base = collision(json!({}), closed, json!({}));
    let run = |policy: Value| {
        let g = with_policy(&base, &policy);
        decide_with(&g, "dev", CI, &json!({}), RunContext::default())
    };
    // A rule with `server` matches only the MCP record; one with `kind: local` only the
    // local record: either denies the call.
    for policy in [
        json!({"rules": [{"effect": "deny", "server": "github"}]}),
        json!({"rules": [{"effect": "deny", "kind": "local"}]}),
        json!({"rules": [{"effect": "allow", "server": "github"}, {"effect": "deny", "kind": "local"}]}),
    ] {
        let d = run(policy.clone());
        assert_eq!(
            (out(&d), d.decided_by),
            (refused(RefusalCode::Denied), Check::TenantPolicy),
            "{policy}"
        );
    }
    let d = run(json!({"rules": [
        {"effect": "allow", "server": "github"},
        {"effect": "ask", "kind": "local", "reason": "local asks"}
    ]}));
    assert_eq!(out(&d), ASK);
    assert_eq!(d.reasons, ["local asks"]);
    // The default applies to the MCP record only (R21); an allow lets it through, and the
    // local record has no default: the call runs.
    let d = run(json!({"default": "deny", "rules": [{"effect": "allow", "kind": "mcp"}]}));
    assert_eq!(out(&d), Out::Run);
    // Called by the local identity, the same entry and the same records decide.
    let g = with_policy(
        &base,
        &json!({"rules": [{"effect": "deny", "server": "github"}]}),
    );
    let by_local = ToolRef::Identity(ToolIdentity::toolset("github", "create_issue"));
    assert_eq!(
        out(&decide_ref(
            &g,
            "dev",
            by_local,
            &json!({}),
            RunContext::default()
        )),
        refused(RefusalCode::Denied)
    );

    // Two http records: an `allow` matching one does not let the other through the default.
    let http = load(&json!({
        "approval": {"channel": "interactive"},
        "tools": [{"kind": "http", "name": "a.b"}, {"kind": "http", "name": "a b"}],
        "agents": [{"name": "dev", "allowed_tools": ["a_b"]}]
    }));
    let g = with_policy(
        &http,
        &json!({"default": "deny", "rules": [{"effect": "allow", "tool": "a.b"}]}),
    );
    let d = decide_with(&g, "dev", "a_b", &json!({}), RunContext::default());
    assert_eq!(
        (out(&d), d.decided_by),
        (refused(RefusalCode::Denied), Check::TenantPolicy)
    );
    // One rule matching both records asks once (R17).
    let g = with_policy(
        &http,
        &json!({"rules": [{"effect": "ask", "tool": "a*", "reason": "one question"}]}),
    );
    let d = decide_with(&g, "dev", "a_b", &json!({}), RunContext::default());
    assert_eq!(out(&d), ASK);
    assert_eq!(d.reasons, ["one question"]);
    assert_eq!(d.matched_rules.len(), 1);
}

#[test]
fn r24_check_warns_with_the_qualified_name_spelled_by_the_first_record() {
    let gov = load(&json!({
        "tools": [
            {"kind": "http", "name": "lookup"},
            {"server": "GitHub", "name": "Create.Issue"},
            {"toolset": "github", "name": "create_issue"},
            {"server": "github", "name": "create-issue"}
        ]
    }));
    let warnings = collision_warnings(&gov);
    assert_eq!(
        warnings.len(),
        1,
        "`create-issue` keeps its `-`: no collision: {warnings:?}"
    );
    assert_eq!(warnings[0].0, "tools[2]");
    assert!(
        warnings[0].1.contains("`GitHub__Create_Issue`"),
        "{warnings:?}"
    );
    assert_eq!(gov.catalog().get(CI).unwrap().name, "GitHub__Create_Issue");
}

// ---------------------------------------------------------------------------------------
// R27–R31: the behaviour posture
// ---------------------------------------------------------------------------------------

fn posture(tools: Value, extra: Value) -> Governance {
    let allowed: Vec<String> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let name = t["name"].as_str().unwrap();
            match (t.get("toolset"), t.get("server")) {
                (Some(ts), _) => toolgate_core::names::toolset_name(ts.as_str().unwrap(), name),
                (_, Some(s)) => toolgate_core::names::mcp_name(s.as_str().unwrap(), name),
                _ => toolgate_core::names::http_name(name),
            }
            .unwrap()
        })
        .collect();
    let mut config = json!({
        "approval": {"channel": "interactive"},
        "behavior_gating": {"require_approval_for_non_read_only": true},
        "servers": {"kb": {"trust_tool_annotations": true}, "web": {"trust_tool_annotations": false}},
        "tools": tools,
        "agents": [{"name": "dev", "allowed_tools": allowed}]
    });
    for (k, v) in extra.as_object().unwrap() {
        config[k] = v.clone();
    }
    load(&config)
}

#[test]
fn r27_r28_r30_posture_trust_matrix() {
    let gov = posture(
        json!([
            {"server": "kb", "name": "search", "annotations": {"readOnlyHint": true}},
            {"server": "kb", "name": "search2", "annotations": {"readOnlyHint": true, "destructiveHint": false}},
            {"server": "kb", "name": "page"},
            {"server": "kb", "name": "nohint", "annotations": {"destructiveHint": false}},
            {"server": "kb", "name": "ro_false", "annotations": {"readOnlyHint": false}},
            {"server": "kb", "name": "wipe", "annotations": {"readOnlyHint": true, "destructiveHint": true}},
            {"server": "web", "name": "search", "annotations": {"readOnlyHint": true}},
            {"server": "other", "name": "peek", "annotations": {"readOnlyHint": true}},
            {"server": "web", "name": "nuke", "annotations": {"destructiveHint": true}},
            {"toolset": "fs", "name": "read", "read_only": true},
            {"toolset": "fs", "name": "write"},
            {"kind": "http", "name": "status", "read_only": true},
            {"kind": "http", "name": "post", "read_only": false}
        ]),
        json!({}),
    );
    let (tools, gone) = exposure(&gov, "dev");
    assert!(gone.is_empty());
    assert_eq!(
        tools,
        names(&[
            ("fs__read", "raw"),
            ("fs__write", "wrapped"),
            ("kb__nohint", "wrapped"),
            ("kb__page", "wrapped"),
            ("kb__ro_false", "wrapped"),
            ("kb__search", "raw"),
            ("kb__search2", "raw"),
            ("kb__wipe", "wrapped"),
            ("other__peek", "wrapped"),
            ("post", "wrapped"),
            ("status", "raw"),
            ("web__nuke", "wrapped"),
            ("web__search", "wrapped"),
        ])
    );
    let d = decide_with(
        &gov,
        "dev",
        "web__search",
        &json!({}),
        RunContext::default(),
    );
    assert_eq!(out(&d), ASK);
    assert_eq!(d.asks.len(), 1);
    assert_eq!(d.asks[0].source, AskSource::Posture);
    assert!(d.reasons[0].contains("web__search"), "{:?}", d.reasons);
    // R28: the untrusted claim is recorded and reported.
    let w = gov.warnings();
    assert!(
        w.iter()
            .any(|w| w.message.contains("`web`") && w.message.contains("`search`")),
        "{w:?}"
    );
    assert!(
        w.iter()
            .any(|w| w.message.contains("`other`") && w.message.contains("`peek`")),
        "{w:?}"
    );
    assert!(
        !w.iter().any(|w| w.message.contains("`kb`")),
        "trusted claims are not warned about: {w:?}"
    );
}

#[test]
fn r29_cross_source_the_record_that_does_not_exempt_wins_in_either_order() {
    let local_ro = json!({"toolset": "github", "name": "create_issue", "read_only": true});
    let local_rw = json!({"toolset": "github", "name": "create_issue"});
    let mcp_ro =
        json!({"server": "github", "name": "create_issue", "annotations": {"readOnlyHint": true}});
    let mcp_destructive = json!({"server": "github", "name": "create_issue",
                                 "annotations": {"readOnlyHint": true, "destructiveHint": true}});
    let trusted = json!({"servers": {"github": {"trust_tool_annotations": true}}});
    let untrusted = json!({"servers": {"github": {"trust_tool_annotations": false}}});
    for (a, b, servers, want) in [
        (&local_ro, &mcp_ro, &trusted, "raw"),
        (&local_ro, &mcp_ro, &untrusted, "wrapped"),
        (&local_rw, &mcp_ro, &trusted, "wrapped"),
        (&local_ro, &mcp_destructive, &trusted, "wrapped"),
    ] {
        for (first, second) in [(a, b), (b, a)] {
            let gov = posture(json!([first, second]), servers.clone());
            assert_eq!(
                exposure(&gov, "dev").0,
                names(&[(CI, want)]),
                "{first} then {second} with {servers}"
            );
        }
    }
}

#[test]
fn r29_a_source_revising_its_own_tool_is_believed_in_both_directions() {
    let kb = |name: &str, ann: Value| json!({"server": "kb", "name": name, "annotations": ann});
    let cases = [
        (
            json!([
                kb("page", json!({"readOnlyHint": true})),
                kb("page", json!({"readOnlyHint": false}))
            ]),
            "kb__page",
            "wrapped",
        ),
        (
            json!([
                kb("page", json!({"readOnlyHint": false})),
                kb("page", json!({"readOnlyHint": true}))
            ]),
            "kb__page",
            "raw",
        ),
        (
            json!([kb("wipe", json!({"destructiveHint": true})),
                   {"server": "KB", "name": "wipe", "annotations": {"readOnlyHint": true, "destructiveHint": false}}]),
            "kb__wipe",
            "raw",
        ),
        (
            json!([
                kb("wipe", json!({"readOnlyHint": true})),
                kb(
                    "wipe",
                    json!({"readOnlyHint": true, "destructiveHint": true})
                )
            ]),
            "kb__wipe",
            "wrapped",
        ),
        (
            json!([{"toolset": "fs", "name": "x", "read_only": true}, {"toolset": "FS", "name": "x", "read_only": false}]),
            "fs__x",
            "wrapped",
        ),
        (
            json!([{"toolset": "fs", "name": "x"}, {"toolset": "fs", "name": "x", "read_only": true}]),
            "fs__x",
            "raw",
        ),
    ];
    for (tools, name, want) in cases {
        let gov = posture(json!([tools[0].clone()]), json!({"tools": tools.clone()}));
        assert_eq!(
            gov.catalog().get(name).unwrap().records.len(),
            1,
            "{tools}: a revision"
        );
        assert_eq!(exposure(&gov, "dev").0, names(&[(name, want)]), "{tools}");
    }
}

#[test]
fn r31_exemption_scope() {
    let gov = posture(
        json!([
            {"toolset": "notion", "name": "search"},
            {"kind": "http", "name": "lookup"},
            {"server": "web", "name": "fetch"},
            {"server": "notion", "name": "delete_page", "annotations": {"destructiveHint": true}},
            {"server": "kb", "name": "purge", "annotations": {"destructiveHint": true}},
            {"toolset": "fs", "name": "write"},
            {"kind": "http", "name": "post"}
        ]),
        json!({"behavior_gating": {"require_approval_for_non_read_only": true, "exemptions": [
            {"tool": "search", "server": "notion", "reason": "an entry with server never covers local"},
            {"tool": "lookup", "server": "kb", "reason": "nor http"},
            {"tool": "fetch", "server": "other", "reason": "naming another server never applies"},
            {"tool": "DELETE_PAGE", "server": "NOTION", "reason": "its own server, even destructive"},
            {"tool": "purge", "reason": "no server: a trusted server's tool"},
            {"tool": "Write", "reason": "no server: a local tool"},
            {"tool": "POST", "reason": "no server: an http tool"}
        ]}}),
    );
    assert_eq!(
        exposure(&gov, "dev").0,
        names(&[
            ("fs__write", "raw"),
            ("kb__purge", "raw"),
            ("lookup", "wrapped"),
            ("notion__delete_page", "raw"),
            ("notion__search", "wrapped"),
            ("post", "raw"),
            ("web__fetch", "wrapped"),
        ])
    );
    // Without `server`, an exemption for a tool an untrusted server declares is refused.
    let errs = load_errors(&json!({
        "behavior_gating": {"require_approval_for_non_read_only": true,
                            "exemptions": [{"tool": "delete_page", "reason": "r"}]},
        "tools": [{"server": "notion", "name": "delete_page"}]
    }));
    assert_eq!(errs, ["behavior_gating.exemptions[0].server"]);
}

// ---------------------------------------------------------------------------------------
// R36: input bounds
// ---------------------------------------------------------------------------------------

fn echo(limits: Value) -> Governance {
    load(&json!({
        "tools": [{"kind": "http", "name": "echo"}],
        "agents": [{"name": "dev", "allowed_tools": ["echo"]}],
        "limits": limits
    }))
}

fn input_out(gov: &Governance, input: &Value) -> Out {
    out(&decide_with(
        gov,
        "dev",
        "echo",
        input,
        RunContext::default(),
    ))
}

#[test]
fn r36_depth_exactly_at_the_bound_runs_one_past_is_refused() {
    let gov = echo(json!({}));
    let invalid = refused(RefusalCode::InvalidInput);
    for (depth, want) in [
        (1, Out::Run),
        (63, Out::Run),
        (64, Out::Run),
        (65, invalid),
        (66, invalid),
    ] {
        assert_eq!(
            input_out(&gov, &nested_objects(depth)),
            want,
            "objects, depth {depth}"
        );
        assert_eq!(
            input_out(&gov, &nested_arrays(depth)),
            want,
            "arrays, depth {depth}"
        );
    }
    // Text, measured before parsing — also far past any parser's recursion limit.
    let text = |depth: usize| {
        format!(
            "{}{{}}{}",
            "{\"a\":".repeat(depth - 1),
            "}".repeat(depth - 1)
        )
    };
    assert_eq!(out(&decide_text(&gov, "dev", "echo", &text(64))), Out::Run);
    assert_eq!(out(&decide_text(&gov, "dev", "echo", &text(65))), invalid);
    let deep = format!("{{\"a\":{}{}}}", "[".repeat(99_999), "]".repeat(99_999));
    assert_eq!(
        out(&decide_text(&gov, "dev", "echo", &deep)),
        invalid,
        "depth 100000"
    );
    // Brackets inside strings are not nesting.
    let s = format!("{{\"a\":\"{}\"}}", "[".repeat(100));
    assert_eq!(out(&decide_text(&gov, "dev", "echo", &s)), Out::Run);

    let gov = echo(json!({"max_input_depth": 3}));
    assert_eq!(input_out(&gov, &json!({"a": {"b": {}}})), Out::Run);
    assert_eq!(
        input_out(&gov, &json!({"a": {"b": [1, "x", null]}})),
        Out::Run,
        "scalars add no level"
    );
    assert_eq!(input_out(&gov, &json!({"a": {"b": {"c": {}}}})), invalid);
    assert_eq!(input_out(&gov, &json!({"a": [[[]]]})), invalid);
}

#[test]
fn r36_size_exactly_at_the_bound_runs_one_past_is_refused() {
    let gov = echo(json!({"max_input_bytes": 64}));
    let invalid = refused(RefusalCode::InvalidInput);
    // `{"t":"…"}` is 8 bytes around the serialised string.
    for (what, at, over) in [
        ("ascii", "x".repeat(56), "x".repeat(57)),
        (
            "two-byte UTF-8",
            "é".repeat(28),
            format!("{}x", "é".repeat(28)),
        ),
        (
            "escaped newlines",
            "\n".repeat(28),
            format!("{}x", "\n".repeat(28)),
        ),
        (
            "escaped control",
            "\u{1}".repeat(9) + "xx",
            "\u{1}".repeat(9) + "xxx",
        ),
    ] {
        let at = json!({ "t": at });
        let over = json!({ "t": over });
        assert_eq!(serde_json::to_vec(&at).unwrap().len(), 64, "{what}");
        assert_eq!(serde_json::to_vec(&over).unwrap().len(), 65, "{what}");
        assert_eq!(
            input_out(&gov, &at),
            Out::Run,
            "{what}: exactly at the bound"
        );
        assert_eq!(input_out(&gov, &over), invalid, "{what}: one byte past");
    }
    // The size is the compact serialisation's, whatever the text looked like.
    let spaced = format!("{{ \"t\" :   \"{}\"   }}", "x".repeat(56));
    assert!(spaced.len() > 64);
    assert_eq!(out(&decide_text(&gov, "dev", "echo", &spaced)), Out::Run);
    let escaped = format!("{{\"t\":\"{}\"}}", "\\u00e9".repeat(28));
    assert_eq!(
        out(&decide_text(&gov, "dev", "echo", &escaped)),
        Out::Run,
        "é is 2 bytes compact"
    );
    let spaced_over = format!("{{ \"t\" : \"{}\" }}", "x".repeat(57));
    assert_eq!(
        out(&decide_text(&gov, "dev", "echo", &spaced_over)),
        invalid
    );
}

#[test]
fn r36_input_must_be_an_object_and_is_checked_before_any_policy() {
    let gov = echo(json!({"max_input_bytes": 64}));
    let invalid = refused(RefusalCode::InvalidInput);
    for input in [json!([]), json!("x"), json!(1), json!(null)] {
        assert_eq!(input_out(&gov, &input), invalid, "{input}");
    }
    for text in ["[]", "{", "{\"a\": 1} trailing", ""] {
        assert_eq!(
            out(&decide_text(&gov, "dev", "echo", text)),
            invalid,
            "{text:?}"
        );
    }
    let big = json!({"t": "x".repeat(100)});
    let denied = with_policy(&gov, &json!({"rules": [{"effect": "deny"}]}));
    assert_eq!(input_out(&denied, &big), invalid);
    let unreadable = gov
        .with_policy(PolicyState::Unreadable(String::from("x")))
        .unwrap();
    assert_eq!(input_out(&unreadable, &big), invalid);
    assert_eq!(
        input_out(&unreadable, &json!({})),
        refused(RefusalCode::PolicyUnreadable)
    );
}

// ---------------------------------------------------------------------------------------
// R39: subagents never get more than their parent
// ---------------------------------------------------------------------------------------

fn family() -> Governance {
    load(&json!({
        "approval": {"channel": "interactive"},
        "tools": [
            {"kind": "http", "name": "a"},
            {"kind": "http", "name": "b"},
            {"kind": "http", "name": "c"},
            {"kind": "http", "name": "d", "confidential": true},
            {"kind": "http", "name": "e", "approval": "require_approval"},
            {"kind": "http", "name": "f", "approval": "deny"},
            {"kind": "http", "name": "g"}
        ],
        "agents": [
            // listed child first: the order in the file does not matter
            {"name": "leaf", "parent": "MID",
             "allowed_tools": ["a", "b", "c", "d", "e", "f", "g"],
             "overrides": [{"tool": "a", "approval": "auto_approve"}, {"tool": "e", "approval": "auto_approve"},
                           {"tool": "f", "approval": "auto_approve"}, {"tool": "g", "approval": "deny"}]},
            {"name": "mid", "parent": "root",
             "allowed_tools": ["a", "b", "d", "e", "f", "g"],
             "overrides": [{"tool": "b", "approval": "deny"}]},
            {"name": "root", "confidential": true,
             "allowed_tools": ["a", "b", "c", "d", "e", "f", "g"],
             "overrides": [{"tool": "a", "approval": "require_approval"}]},
            {"name": "boss", "as_tool": true, "allowed_tools": ["a", "e"]},
            {"name": "deputy", "parent": "boss", "allowed_tools": ["a", "e"]},
            {"name": "intern", "parent": "Deputy", "allowed_tools": ["a", "e"]}
        ]
    }))
}

#[test]
fn r39_grandparent_chain_intersects_allowed_names_and_takes_the_strictest_mode() {
    let gov = family();
    let (tools, gone) = exposure(&gov, "leaf");
    assert_eq!(
        tools,
        names(&[
            // the grandparent's `require_approval` beats the leaf's `auto_approve`
            ("a", "wrapped"),
            // declared `require_approval`: the parents have no override, so theirs is the
            // declared mode, stricter than the leaf's `auto_approve`
            ("e", "wrapped"),
        ])
    );
    assert_eq!(
        gone,
        omitted(&[
            ("b", RefusalCode::Denied),       // the parent's deny
            ("c", RefusalCode::NotAllowed),   // not in the parent's names
            ("d", RefusalCode::Confidential), // confidential through the grandparent
            ("f", RefusalCode::Denied), // declared deny: the leaf's override cannot loosen the chain
            ("g", RefusalCode::Denied), // a child may be stricter
        ])
    );
    let leaf = gov.agent("LEAF").unwrap();
    assert!(leaf.confidential && !leaf.as_tool);
    // The inherited wrap is still an agent-level ask.
    let d = decide_with(
        &gov,
        "leaf",
        "a",
        &json!({}),
        mode(RunMode::AutoApproveRequired),
    );
    assert_eq!(out(&d), Out::AutoApproved);
}

#[test]
fn r39_as_tool_is_inherited_down_the_chain() {
    let gov = family();
    for agent in ["boss", "deputy", "intern"] {
        assert!(gov.agent(agent).unwrap().as_tool, "{agent}");
        let (tools, gone) = exposure(&gov, agent);
        assert_eq!(tools, names(&[("a", "raw")]), "{agent}");
        assert_eq!(
            gone.iter().find(|(n, _)| n == "e").map(|(_, c)| *c),
            Some(RefusalCode::NoApprovalChannel),
            "{agent}"
        );
        assert_eq!(
            call(&gov, agent, "e"),
            refused(RefusalCode::NoApprovalChannel),
            "{agent}"
        );
    }
}

#[test]
fn r39_parent_cycles_of_any_length_are_load_errors() {
    let errs = load_errors(&json!({"agents": [
        {"name": "a", "parent": "b"}, {"name": "b", "parent": "C"}, {"name": "c", "parent": "a"},
        {"name": "d", "parent": "a"}
    ]}));
    assert!(
        ["agents[0].parent", "agents[1].parent", "agents[2].parent"]
            .iter()
            .all(|p| errs.iter().any(|e| e == p)),
        "{errs:?}"
    );
}
