//! The effective configuration of a snapshot, written back as CONFIG (SPEC §7): what
//! `toolgate config print` shows and what a host saves after changing a snapshot at run
//! time. Only what differs from a default is written, overrides included: an agent's
//! override set back to `default` is gone (R9), so the file says only what is in force.
//!
//! ```
//! use toolgate_engine::config::{self, Format};
//! let gov = config::load_str(r#"{
//!     "tools": [{"kind": "http", "name": "refund_order"}],
//!     "agents": [{"name": "support", "allowed_tools": ["refund_order"], "overrides": [
//!         {"tool": "refund_order", "approval": "require_approval"},
//!         {"tool": "refund_order", "approval": "default"}
//!     ]}]
//! }"#, Format::Json).unwrap();
//! let v = config::effective(&gov);
//! assert!(v["agents"][0].get("overrides").is_none(), "the override was set back to default");
//! let again = config::load_str(&v.to_string(), Format::Json).unwrap();
//! assert_eq!(config::effective(&again), v);
//! ```

use serde_json::{Map, Value, json};
use toolgate_core::names::name_key;
use toolgate_core::{ApprovalMode, NetworkScope, ToolDeclaration, ToolKind};

use crate::governance::{AgentProfile, Governance, PolicyState};
use crate::policy::Limits;
use crate::recording::{FlushPolicy, OnSinkFailure};

/// The snapshot as a CONFIG value that loads back into an equal snapshot. A stored policy
/// that cannot be read is left out (it is not configuration). One section per step.
pub fn effective(gov: &Governance) -> Value {
    let s = gov.settings();
    let mut top = Map::new();
    top.insert(
        "enforce_tool_invocation".into(),
        s.enforce_tool_invocation.into(),
    );
    top.insert("air_gapped".into(), s.air_gapped.into());
    top.insert("approval".into(), json!({ "channel": s.channel.as_str() }));
    top.insert("behavior_gating".into(), behavior_gating(gov));
    if let Some(servers) = servers(gov) {
        top.insert("servers".into(), servers);
    }
    top.insert(
        "tools".into(),
        Value::Array(gov.declarations.iter().map(tool).collect()),
    );
    top.insert(
        "agents".into(),
        Value::Array(gov.profiles.iter().map(agent).collect()),
    );
    if let PolicyState::Readable(p) = gov.policy()
        && !(p.is_empty() && p.updated_at().is_none())
    {
        top.insert("policy".into(), p.to_json());
    }
    if let Some(p) = gov.shadow_policy() {
        top.insert("policy_shadow".into(), p.to_json());
    }
    top.insert("limits".into(), limits(&s.limits));
    if let Some(a) = audit(gov) {
        top.insert("audit".into(), a);
    }
    if let Some(i) = gov.inbox_section() {
        // As written: the inbox reads it (`toolgate config print` spells it read).
        top.insert("inbox".into(), i.clone());
    }
    if let Some(a) = gov.approver_settings() {
        top.insert("approvers".into(), a.to_json());
    }
    if let Some(r) = redaction(gov) {
        top.insert("redaction".into(), r);
    }
    Value::Object(top)
}

/// `behavior_gating`: the non-read-only rule and its exemptions.
fn behavior_gating(gov: &Governance) -> Value {
    let mut gating = Map::new();
    gating.insert(
        "require_approval_for_non_read_only".into(),
        gov.settings().require_approval_for_non_read_only.into(),
    );
    if !gov.exemptions.is_empty() {
        let list = gov
            .exemptions
            .iter()
            .map(|e| {
                let mut o = Map::new();
                o.insert("tool".into(), e.tool.clone().into());
                if let Some(server) = &e.server {
                    o.insert("server".into(), server.clone().into());
                }
                o.insert("reason".into(), e.reason.clone().into());
                Value::Object(o)
            })
            .collect();
        gating.insert("exemptions".into(), Value::Array(list));
    }
    Value::Object(gating)
}

/// `servers`, by name: trust, prefix and the operator's labels (R41, R49); none when empty.
fn servers(gov: &Governance) -> Option<Value> {
    let mut names: Vec<&String> = gov.servers.keys().collect();
    names.sort();
    let mut servers = Map::new();
    for name in names {
        let Some(settings) = gov.servers.get(name) else {
            continue;
        };
        let mut o = Map::new();
        o.insert(
            "trust_tool_annotations".into(),
            settings.trust_tool_annotations.into(),
        );
        if let Some(p) = &settings.tool_prefix {
            o.insert("tool_prefix".into(), p.clone().into());
        }
        // R49: the operator's labels for every tool of the server.
        if !settings.labels.is_empty() {
            o.insert("labels".into(), json!(settings.labels));
        }
        servers.insert(name.clone(), Value::Object(o));
    }
    (!servers.is_empty()).then_some(Value::Object(servers))
}

/// `audit`, when it is not the default.
fn audit(gov: &Governance) -> Option<Value> {
    let a = gov.audit_settings();
    if *a == Default::default() {
        return None;
    }
    let mut o = Map::new();
    if let Some(f) = &a.file {
        o.insert("file".into(), f.clone().into());
    }
    let flush = match a.flush {
        FlushPolicy::Buffered => "buffered",
        _ => "every_record",
    };
    let failure = match a.on_sink_failure {
        OnSinkFailure::Log => "log",
        _ => "refuse",
    };
    o.insert("flush".into(), flush.into());
    o.insert("on_sink_failure".into(), failure.into());
    o.insert("include_input".into(), a.include_input.into());
    o.insert("include_output".into(), a.include_output.into());
    Some(Value::Object(o))
}

/// `redaction`, when it is not the default.
fn redaction(gov: &Governance) -> Option<Value> {
    let r = gov.redaction_settings();
    if *r == Default::default() {
        return None;
    }
    let mut o = Map::new();
    o.insert("keys".into(), json!(r.keys));
    o.insert("patterns".into(), json!(r.patterns));
    o.insert(
        "pointers".into(),
        Value::Array(
            r.pointers
                .iter()
                .map(|(tool, pointer)| json!({"tool": tool, "pointer": pointer}))
                .collect(),
        ),
    );
    o.insert("scrub_output".into(), r.scrub_output.into());
    if let Some(n) = r.max_text_bytes {
        o.insert("max_text_bytes".into(), n.into());
    }
    Some(Value::Object(o))
}

fn tool(d: &ToolDeclaration) -> Value {
    let id = &d.identity;
    let mut o = Map::new();
    match id.kind() {
        ToolKind::Mcp => {
            o.insert("server".into(), id.source().into());
        }
        ToolKind::Http => {
            o.insert("kind".into(), "http".into());
        }
        _ => {
            o.insert("toolset".into(), id.source().into());
        }
    }
    // Behind a prefixing gateway the file names the tool as listed (R41).
    o.insert("name".into(), d.sent_name().into());
    if let Some(desc) = &d.description {
        o.insert("description".into(), desc.clone().into());
    }
    if d.approval != ApprovalMode::Default {
        o.insert("approval".into(), d.approval.as_str().into());
    }
    if d.network != NetworkScope::None {
        o.insert("network".into(), d.network.as_str().into());
    }
    if let Some(n) = d.network_override {
        o.insert("network_override".into(), n.as_str().into());
    }
    if d.read_only && id.kind() != ToolKind::Mcp {
        o.insert("read_only".into(), true.into());
    }
    if d.confidential {
        o.insert("confidential".into(), true.into());
    }
    // R49: the operator's labels for the tool.
    if !d.labels.is_empty() {
        o.insert("labels".into(), json!(d.labels));
    }
    if let Some(a) = &d.annotations {
        let mut ann = Map::new();
        let mut put = |k: &str, v: Option<bool>| {
            if let Some(v) = v {
                ann.insert(k.into(), v.into());
            }
        };
        put("readOnlyHint", a.read_only_hint);
        put("destructiveHint", a.destructive_hint);
        put("idempotentHint", a.idempotent_hint);
        put("openWorldHint", a.open_world_hint);
        if let Some(t) = &a.title {
            ann.insert("title".into(), t.clone().into());
        }
        o.insert("annotations".into(), Value::Object(ann));
    }
    if !d.governed {
        o.insert("governed".into(), false.into());
    }
    if let Some(r) = &d.ungoverned_reason {
        o.insert("ungoverned_reason".into(), r.clone().into());
    }
    if let Some(t) = &d.target {
        let mut m = Map::new();
        for (k, v) in [
            ("host", &t.host),
            ("working_directory", &t.working_directory),
            ("sandbox", &t.sandbox),
        ] {
            if let Some(v) = v {
                m.insert(k.into(), v.spelling().into());
            }
        }
        o.insert("target".into(), Value::Object(m));
    }
    Value::Object(o)
}

fn agent(a: &AgentProfile) -> Value {
    let mut o = Map::new();
    o.insert("name".into(), a.name.clone().into());
    o.insert("allowed_tools".into(), json!(a.allowed_tools));
    if !a.allowed_resources.is_empty() {
        o.insert("allowed_resources".into(), json!(a.allowed_resources));
    }
    if !a.allowed_prompts.is_empty() {
        o.insert("allowed_prompts".into(), json!(a.allowed_prompts));
    }
    if a.confidential {
        o.insert("confidential".into(), true.into());
    }
    if a.as_tool {
        o.insert("as_tool".into(), true.into());
    }
    if let Some(p) = &a.parent {
        o.insert("parent".into(), p.clone().into());
    }
    if !a.subagents.is_empty() {
        o.insert("subagents".into(), json!(a.subagents));
    }
    // R9: the last entry for a name wins; `default` removes the override. Only what is in
    // force is written, in the order each name first appeared.
    let mut order: Vec<String> = Vec::new();
    let mut last: std::collections::HashMap<String, (&str, ApprovalMode)> = Default::default();
    for (tool, mode) in &a.overrides {
        if tool.trim().is_empty() {
            continue;
        }
        let key = name_key(tool);
        if !last.contains_key(&key) {
            order.push(key.clone());
        }
        last.insert(key, (tool.as_str(), *mode));
    }
    let overrides: Vec<Value> = order
        .iter()
        .filter_map(|k| last.get(k))
        .filter(|(_, mode)| *mode != ApprovalMode::Default)
        .map(|(tool, mode)| json!({"tool": tool, "approval": mode.as_str()}))
        .collect();
    if !overrides.is_empty() {
        o.insert("overrides".into(), Value::Array(overrides));
    }
    Value::Object(o)
}

fn limits(l: &Limits) -> Value {
    json!({
        "tool_rules": l.tool_rules,
        "tool_rule_field_chars": l.tool_rule_field_chars,
        "tool_rule_text_chars": l.tool_rule_text_chars,
        "max_input_bytes": l.max_input_bytes,
        "max_input_depth": l.max_input_depth,
        "regex_size_limit": l.regex_size_limit,
    })
}
