use super::*;

fn paths(text: &str) -> Vec<String> {
    load_str(text, Format::Json)
        .unwrap_err()
        .errors
        .into_iter()
        .map(|e| e.path)
        .collect()
}

#[test]
fn every_error_with_its_path() {
    let p = paths(
        r#"{
            "colour": 1,
            "approval": {"channel": "pager"},
            "tools": [
                {"kind": "http", "name": "a", "approval": "sometimes"},
                {"server": "s", "name": "b", "read_only": true},
                {"toolset": "t", "name": "c", "annotations": {}},
                {"name": "d"},
                {"toolset": "t", "server": "s", "name": "e"}
            ],
            "agents": [
                {"name": "x", "overrides": [{"tool": "a", "approval": "maybe"}], "confidential": null}
            ],
            "limits": {"tool_rules": 0}
        }"#,
    );
    assert_eq!(
        p,
        [
            "colour",
            "approval.channel",
            "limits.tool_rules",
            "tools[0].approval",
            "tools[1].read_only",
            "tools[2].annotations",
            "tools[3]",
            "tools[4]",
            "agents[0].confidential",
            "agents[0].overrides[0].approval",
        ]
    );
}

#[test]
fn r1_empty_segment_is_a_load_error() {
    assert_eq!(
        paths(r#"{"tools": [{"kind": "http", "name": "!!!"}]}"#),
        ["tools[0].name"]
    );
    assert_eq!(
        paths(r#"{"tools": [{"server": "!!", "name": "ok"}]}"#),
        ["tools[0].server"]
    );
}

#[test]
fn r15_r27_inert_settings_are_load_errors() {
    assert_eq!(
        paths(
            r#"{"enforce_tool_invocation": false, "behavior_gating": {"require_approval_for_non_read_only": true}}"#
        ),
        ["behavior_gating.require_approval_for_non_read_only"]
    );
    assert_eq!(
        paths(r#"{"enforce_tool_invocation": false, "policy": {"rules": [{"effect": "ask"}]}}"#),
        ["policy"]
    );
    assert!(
        load_str(
            r#"{"enforce_tool_invocation": false, "policy": {"rules": []}}"#,
            Format::Json
        )
        .is_ok()
    );
}

#[test]
fn r31_exemptions() {
    assert_eq!(
        paths(
            r#"{"behavior_gating": {"require_approval_for_non_read_only": true, "exemptions": [{"tool": "x", "server": "s", "reason": " "}]}}"#
        ),
        ["behavior_gating.exemptions[0].reason"]
    );
    assert_eq!(
        paths(
            r#"{"behavior_gating": {"require_approval_for_non_read_only": true, "exemptions": [{"tool": "search", "reason": "r"}]},
                      "tools": [{"server": "web", "name": "search"}]}"#
        ),
        ["behavior_gating.exemptions[0].server"]
    );
    assert!(load_str(r#"{"behavior_gating": {"require_approval_for_non_read_only": true, "exemptions": [{"tool": "search", "reason": "r"}]},
                      "servers": {"web": {"trust_tool_annotations": true}},
                      "tools": [{"server": "web", "name": "search"}]}"#, Format::Json).is_ok());
}

#[test]
fn r39_parent_errors() {
    assert_eq!(
        paths(r#"{"agents": [{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}]}"#),
        ["agents[0].parent", "agents[1].parent"]
    );
    assert_eq!(
        paths(r#"{"agents": [{"name": "a", "parent": "zz"}]}"#),
        ["agents[0].parent"]
    );
    assert_eq!(
        paths(r#"{"agents": [{"name": "a", "parent": "a"}]}"#),
        ["agents[0].parent"]
    );
}

#[test]
fn duplicates_and_malformed() {
    assert_eq!(paths(r#"{"air_gapped": true, "air_gapped": false}"#), [""]);
    assert_eq!(paths(r#"{"tools": ["#), [""]);
    assert_eq!(paths("[]"), [""]);
    assert_eq!(
        paths(r#"{"agents": [{"name": "a"}, {"name": "A"}]}"#),
        ["agents[1].name"]
    );
}

#[test]
fn toml_reads_the_same_model() {
    let g = load_str(
        r#"
            air_gapped = true
            [[tools]]
            kind = "http"
            name = "fetch"
            network = "egress"
            [[agents]]
            name = "dev"
            allowed_tools = ["fetch"]
            "#,
        Format::Toml,
    )
    .unwrap();
    let e = g.expose("dev").unwrap();
    assert_eq!(
        e.omitted[0].refusal.code,
        toolgate_core::RefusalCode::AirGapped
    );
    let err = load_str("colour = 1", Format::Toml).unwrap_err();
    assert_eq!(err.errors[0].path, "colour");
}

#[test]
fn issue23_allowed_resources_and_prompts_are_patterns_intersected_with_the_parent() {
    let g = load_str(
            r#"{"agents": [
                {"name": "a", "allowed_resources": ["kb__*", "Docs__Readme"], "allowed_prompts": ["kb__summarise"]},
                {"name": "sub", "parent": "a", "allowed_resources": ["*"], "allowed_prompts": ["kb__*"]},
                {"name": "none"}
            ]}"#,
            Format::Json,
        )
        .unwrap();
    let a = g.agent("a").unwrap();
    assert!(a.allows_resource("KB__page") && a.allows_resource("docs__readme"));
    assert!(!a.allows_resource("docs__other") && !a.allows_resource("kbx__page"));
    assert!(a.allows_prompt("kb__summarise") && !a.allows_prompt("kb__other"));
    // R39: the subagent's `*` allows only what its parent's lists allow.
    let sub = g.agent("sub").unwrap();
    assert!(sub.allows_resource("kb__page") && !sub.allows_resource("web__page"));
    assert!(sub.allows_prompt("kb__summarise") && !sub.allows_prompt("kb__other"));
    // Nothing by default.
    let none = g.agent("none").unwrap();
    assert!(!none.allows_resource("kb__page") && !none.allows_prompt("kb__summarise"));
    let p =
        paths(r#"{"agents": [{"name": "a", "allowed_resources": [1], "allowed_prompts": "x"}]}"#);
    assert!(
        p.contains(&String::from("agents[0].allowed_resources[0]")),
        "{p:?}"
    );
    assert!(
        p.contains(&String::from("agents[0].allowed_prompts")),
        "{p:?}"
    );
}

#[test]
fn r20_toml_refuses_integers_past_64_bits_rather_than_rounding_them() {
    let t = "[[tools]]\nkind = \"http\"\nname = \"echo\"\n[[agents]]\nname = \"dev\"\n\
             allowed_tools = [\"echo\"]\n[policy]\n\
             rules = [{effect = \"deny\", when = {amount = {gt = 18446744073709551617}}}]\n";
    let err = super::load_str(t, super::Format::Toml).unwrap_err();
    assert!(err.to_string().contains("18446744073709551617"), "{err}");
}
