//! The CONFIG file format (SPEC §7): JSON, TOML, or YAML (feature `yaml`).
//!
//! One thing because it is one reader of one format: every section's reading shares the
//! path-naming error collector, and about 150 of its lines are the tests of those errors.
//!
//! Unknown fields, unknown enum values, `null`, wrong types and duplicate keys are errors;
//! every error names its path, and all of them are collected. A configuration with any
//! error is refused whole.
//!
//! ```
//! use toolgate_engine::config::{self, Format};
//! let gov = config::load_str(r#"{
//!     "tools": [{"kind": "http", "name": "refund_order", "approval": "require_approval"}],
//!     "agents": [{"name": "support", "allowed_tools": ["refund_order"]}]
//! }"#, Format::Json).unwrap();
//! assert!(gov.expose("support").unwrap().tools[0].wrapped);
//!
//! let err = config::load_str(r#"{"agents": [{"name": "a", "overrides": [{"tool": "x", "approval": "sometimes"}]}]}"#, Format::Json)
//!     .unwrap_err();
//! assert_eq!(err.errors[0].path, "agents[0].overrides[0].approval");
//! ```

use std::path::Path;

pub use crate::print::effective;

pub mod section;

use serde_json::Value;
use toolgate_core::{
    ApprovalMode, ChannelKind, McpAnnotations, NetworkScope, ToolDeclaration, ToolIdentity,
};

use crate::error::{ConfigErrors, Obj, field, index, type_name};
use crate::governance::{AgentProfile, Exemption, Governance, GovernanceBuilder, ServerSettings};
use crate::number::NumberLiterals;
use crate::policy::{Limits, Policy};

/// A configuration file's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// JSON (duplicate keys are malformed).
    Json,
    /// TOML.
    Toml,
    /// YAML (feature `yaml`).
    Yaml,
}

impl Format {
    /// The format a path's extension names: `.toml`, `.yaml`/`.yml`, else JSON.
    pub fn from_path(path: &Path) -> Self {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("toml") => Format::Toml,
            Some("yaml" | "yml") => Format::Yaml,
            _ => Format::Json,
        }
    }
}

const TOP: &[&str] = &[
    "enforce_tool_invocation",
    "air_gapped",
    "approval",
    "behavior_gating",
    "servers",
    "tools",
    "agents",
    "policy",
    "policy_shadow",
    "limits",
    "audit",
    "redaction",
    "inbox",
    "approvers",
    // Read by `toolgate mcp serve` (toolgate-mcp's `serve` module): the upstream MCP
    // servers, bearer tokens and call timeout. The engine only checks it is an object.
    "mcp",
    // The decision services asked before a call is sent and after its result (R32), read
    // by toolgate-mcp's `hooks` module. The engine only checks it is a list.
    "hooks",
];
const TOOL: &[&str] = &[
    "toolset",
    "server",
    "kind",
    "name",
    "description",
    "approval",
    "network",
    "network_override",
    "read_only",
    "confidential",
    "annotations",
    "governed",
    "ungoverned_reason",
    "target",
    "labels",
];
const ANNOTATIONS: &[&str] = &[
    "title",
    "readOnlyHint",
    "destructiveHint",
    "idempotentHint",
    "openWorldHint",
];
const AGENT: &[&str] = &[
    "name",
    "allowed_tools",
    "allowed_resources",
    "allowed_prompts",
    "confidential",
    "as_tool",
    "overrides",
    "parent",
    "approval",
    "audit",
    "subagents",
];
const LIMITS: &[&str] = &[
    "tool_rules",
    "tool_rule_field_chars",
    "tool_rule_text_chars",
    "max_input_bytes",
    "max_input_depth",
    "regex_size_limit",
];
const MODES: &[&str] = &["default", "require_approval", "auto_approve", "deny"];
const SCOPES: &[&str] = &["none", "incidental", "egress"];
const CHANNELS: &[&str] = &["none", "interactive", "inbox", "elicitation"];

/// Parses text in a format into a JSON value; duplicate keys are malformed.
pub fn parse_text(text: &str, format: Format) -> Result<Value, ConfigErrors> {
    let malformed =
        |what: &str, e: String| ConfigErrors::one("", format!("malformed {what}: {}", e.trim()));
    match format {
        Format::Json => {
            crate::json::parse_strict_json(text).map_err(|e| malformed("JSON", e.to_string()))
        }
        Format::Toml => toml::from_str::<crate::json::Strict>(text)
            .map(|s| s.0)
            .map_err(|e| malformed("TOML", e.to_string())),
        #[cfg(feature = "yaml")]
        Format::Yaml => serde_norway::from_str::<crate::json::Strict>(text)
            .map(|s| s.0)
            .map_err(|e| malformed("YAML", e.to_string())),
        #[cfg(not(feature = "yaml"))]
        Format::Yaml => Err(ConfigErrors::one(
            "",
            "YAML configuration needs the `yaml` feature of toolgate-engine",
        )),
    }
}

/// Reads a configuration value into a builder. Every schema problem is reported.
pub fn read(value: &Value) -> Result<GovernanceBuilder, ConfigErrors> {
    read_with_literals(value, &NumberLiterals::default())
}

/// As [`read`], with the number literals of the configuration's JSON text, so a policy
/// test's integer past 64 bits compares by its digits (R20, [`crate::number`]).
pub fn read_with_literals(
    value: &Value,
    literals: &NumberLiterals,
) -> Result<GovernanceBuilder, ConfigErrors> {
    let mut errs = ConfigErrors::default();
    let Some(top) = Obj::open(value, "", TOP, &mut errs) else {
        return Err(errs);
    };
    let mut b = Governance::builder();

    if let Some(v) = top.bool("enforce_tool_invocation", &mut errs) {
        b = b.enforce_tool_invocation(v);
    }
    if let Some(v) = top.bool("air_gapped", &mut errs) {
        b = b.air_gapped(v);
    }
    if let Some(v) = top.raw("approval", &mut errs)
        && let Some(o) = Obj::open(v, "approval", &["channel"], &mut errs)
        && let Some(c) = o.choice("channel", CHANNELS, ChannelKind::parse, &mut errs)
    {
        b = b.channel(c);
    }
    if let Some(v) = top.raw("mcp", &mut errs)
        && !v.is_object()
    {
        errs.push("mcp", format!("expected an object, found {v}"));
    }
    if let Some(v) = top.raw("hooks", &mut errs)
        && !v.is_array()
    {
        errs.push(
            "hooks",
            format!("expected a list of decision services, found {v}"),
        );
    }
    if let Some(v) = top.raw("limits", &mut errs) {
        b = b.limits(read_limits(v, &mut errs));
    }
    if let Some(v) = top.raw("behavior_gating", &mut errs) {
        b = read_behavior_gating(b, v, &mut errs);
    }
    if let Some(v) = top.raw("servers", &mut errs) {
        b = read_servers(b, v, &mut errs);
    }
    if let Some(items) = top.array("tools", &mut errs) {
        for (i, item) in items.iter().enumerate() {
            if let Some(decl) = read_tool(item, &index("tools", i), &mut errs) {
                b = b.tool(decl);
            }
        }
    }
    if let Some(items) = top.array("agents", &mut errs) {
        for (i, item) in items.iter().enumerate() {
            if let Some(agent) = read_agent(item, &index("agents", i), &mut errs) {
                b = b.agent(agent);
            }
        }
    }
    if let Some(v) = top.raw("audit", &mut errs) {
        b = b.audit(crate::recording::read_audit(v, &mut errs));
    }
    // The inbox's own section, kept as written: `toolgate_inbox` reads it.
    if let Some(v) = top.raw("inbox", &mut errs) {
        b = b.inbox(v.clone());
    }
    if let Some(v) = top.raw("approvers", &mut errs)
        && let Some(a) = crate::approvers::read_approvers(v, &mut errs)
    {
        b = b.approvers(a);
    }
    if let Some(v) = top.raw("redaction", &mut errs) {
        let limit = b.current_limits().regex_size_limit;
        b = b.redaction(crate::recording::read_redaction(v, limit, &mut errs));
    }
    if let Some(v) = top.raw("policy", &mut errs) {
        let limits = b.current_limits();
        let lits = crate::number::member(literals.root(), "policy");
        if let Some(p) = Policy::read(v, lits, "policy", &limits, &mut errs) {
            b = b.policy(p);
        }
    }
    // R46: the shadow policy is read like the enforced one; one that does not load is a
    // load error (it never weakens the enforced decision, nor refuses a call later).
    if let Some(v) = top.raw("policy_shadow", &mut errs) {
        let limits = b.current_limits();
        let lits = crate::number::member(literals.root(), "policy_shadow");
        if let Some(p) = Policy::read(v, lits, "policy_shadow", &limits, &mut errs) {
            b = b.shadow_policy(Some(p));
        }
    }
    if errs.is_empty() { Ok(b) } else { Err(errs) }
}

/// `behavior_gating`: the posture (R27) and its exemptions (R31), each with a reason.
fn read_behavior_gating(
    mut b: GovernanceBuilder,
    v: &Value,
    errs: &mut ConfigErrors,
) -> GovernanceBuilder {
    let Some(o) = Obj::open(
        v,
        "behavior_gating",
        &["require_approval_for_non_read_only", "exemptions"],
        errs,
    ) else {
        return b;
    };
    if let Some(on) = o.bool("require_approval_for_non_read_only", errs) {
        b = b.require_approval_for_non_read_only(on);
    }
    if let Some(items) = o.array("exemptions", errs) {
        for (i, item) in items.iter().enumerate() {
            let path = index("behavior_gating.exemptions", i);
            let Some(e) = Obj::open(item, &path, &["tool", "server", "reason"], errs) else {
                continue;
            };
            let tool = required_non_blank(&e, "tool", errs);
            let server = e.non_blank("server", errs);
            if !e.has("reason") {
                errs.push(e.path_of("reason"), "an exemption needs a `reason` (R31)");
            }
            let reason = e.str("reason", errs);
            if let (Some(tool), Some(reason)) = (tool, reason) {
                let mut ex = Exemption::new(tool, reason);
                ex.server = server.map(str::to_owned);
                b = b.exemption(ex);
            }
        }
    }
    b
}

/// `servers`: each MCP server's trust in its annotations, gateway prefix (R41) and labels
/// (R49), by name.
fn read_servers(mut b: GovernanceBuilder, v: &Value, errs: &mut ConfigErrors) -> GovernanceBuilder {
    match v {
        Value::Object(map) => {
            for (name, s) in map {
                let path = field("servers", name);
                let Some(o) = Obj::open(
                    s,
                    &path,
                    &["trust_tool_annotations", "tool_prefix", "labels"],
                    errs,
                ) else {
                    continue;
                };
                let trust = o.bool("trust_tool_annotations", errs).unwrap_or(false);
                // R41: used as written, never trimmed; blank is refused when built.
                let prefix = o.str("tool_prefix", errs).map(str::to_owned);
                // R49: the operator's labels for every tool of the server.
                let labels = o
                    .raw("labels", errs)
                    .and_then(|l| crate::labels::read_labels(l, &o.path_of("labels"), false, errs))
                    .unwrap_or_default();
                b = b.server(
                    name.clone(),
                    ServerSettings {
                        trust_tool_annotations: trust,
                        tool_prefix: prefix,
                        labels,
                    },
                );
            }
        }
        other => errs.push(
            "servers",
            format!(
                "expected an object of servers by name, found {}",
                type_name(other)
            ),
        ),
    }
    b
}

fn required_non_blank<'a>(o: &Obj<'a>, key: &str, errs: &mut ConfigErrors) -> Option<&'a str> {
    if !o.has(key) {
        errs.push(o.path_of(key), format!("`{key}` is required"));
        return None;
    }
    o.non_blank(key, errs)
}

fn read_limits(v: &Value, errs: &mut ConfigErrors) -> Limits {
    let mut l = Limits::default();
    let Some(o) = Obj::open(v, "limits", LIMITS, errs) else {
        return l;
    };
    let mut set = |key: &str, slot: &mut usize| {
        if let Some(n) = o.positive(key, errs) {
            *slot = usize::try_from(n).unwrap_or(usize::MAX);
        }
    };
    set("tool_rules", &mut l.tool_rules);
    set("tool_rule_field_chars", &mut l.tool_rule_field_chars);
    set("tool_rule_text_chars", &mut l.tool_rule_text_chars);
    set("max_input_bytes", &mut l.max_input_bytes);
    set("max_input_depth", &mut l.max_input_depth);
    set("regex_size_limit", &mut l.regex_size_limit);
    l
}

fn read_tool(v: &Value, path: &str, errs: &mut ConfigErrors) -> Option<ToolDeclaration> {
    let before = errs.errors.len();
    let o = Obj::open(v, path, TOOL, errs)?;
    let identity = read_identity(&o, path, errs);
    let mut decl = ToolDeclaration::new(identity.clone().unwrap_or_else(|| ToolIdentity::http("")));
    read_tool_fields(&o, &mut decl, errs);
    if errs.errors.len() > before {
        return None;
    }
    identity.map(|_| decl)
}

/// A tool's identity: its `name` and exactly one source — `toolset`, `server`, or
/// `"kind": "http"` (R1) — with `kind`, when written, fitting the source.
fn read_identity(o: &Obj<'_>, path: &str, errs: &mut ConfigErrors) -> Option<ToolIdentity> {
    let name = required_non_blank(o, "name", errs);
    let toolset = o.non_blank("toolset", errs);
    let server = o.non_blank("server", errs);
    let kind = o.str("kind", errs);
    let sources = usize::from(o.has("toolset")) + usize::from(o.has("server"));
    let mut identity = None;
    match (kind, sources) {
        (Some("http"), 0) => identity = name.map(ToolIdentity::http),
        (Some("http"), _) => errs.push(
            o.path_of("kind"),
            "an http tool has no `toolset` or `server`: give exactly one source",
        ),
        (Some(k @ ("local" | "mcp")), 1) => {
            let fits = (k == "local" && o.has("toolset")) || (k == "mcp" && o.has("server"));
            if !fits {
                errs.push(
                    o.path_of("kind"),
                    format!("`kind` `{k}` does not fit the tool's source"),
                );
            }
        }
        (Some(k @ ("local" | "mcp")), _) => errs.push(
            o.path_of("kind"),
            format!("a `{k}` tool needs exactly one of `toolset` or `server`"),
        ),
        (Some(other), _) => errs.push(
            o.path_of("kind"),
            format!("unknown value `{other}`; expected one of `http`, `mcp`, `local`"),
        ),
        (None, 1) => {}
        (None, 0) => {
            if !o.has("kind") {
                errs.push(
                    path,
                    "a tool needs exactly one of `toolset`, `server` or `\"kind\": \"http\"`",
                );
            }
        }
        (None, _) => errs.push(
            path,
            "a tool needs exactly one of `toolset`, `server` or `\"kind\": \"http\"`, not several",
        ),
    }
    if identity.is_none()
        && sources == 1
        && let Some(name) = name
    {
        if let Some(t) = toolset {
            identity = Some(ToolIdentity::toolset(t, name));
        } else if let Some(s) = server {
            identity = Some(ToolIdentity::mcp(s, name));
        }
    }
    identity
}

/// A declaration's fields besides its identity: description, approval, network (R8),
/// confidentiality (R7), read-only or annotations, governance (R42), target, labels (R49).
fn read_tool_fields(o: &Obj<'_>, decl: &mut ToolDeclaration, errs: &mut ConfigErrors) {
    let is_mcp = o.has("server");
    if let Some(d) = o.str("description", errs) {
        decl.description = Some(d.to_owned());
    }
    if let Some(m) = o.choice("approval", MODES, ApprovalMode::parse, errs) {
        decl.approval = m;
    }
    if let Some(n) = o.choice("network", SCOPES, NetworkScope::parse, errs) {
        decl.network = n;
    }
    if let Some(n) = o.choice("network_override", SCOPES, NetworkScope::parse, errs) {
        decl.network_override = Some(n);
    }
    if let Some(c) = o.bool("confidential", errs) {
        decl.confidential = c;
    }
    if o.has("read_only") && is_mcp {
        errs.push(
            o.path_of("read_only"),
            "`read_only` is for `toolset` and http tools; an MCP tool declares `annotations.readOnlyHint`",
        );
    } else if let Some(r) = o.bool("read_only", errs) {
        decl.read_only = r;
    }
    if o.has("annotations") && !is_mcp {
        errs.push(
            o.path_of("annotations"),
            "`annotations` are for MCP tools (with `server`) only",
        );
    } else if let Some(a) = o.raw("annotations", errs) {
        decl.annotations = read_annotations(a, &o.path_of("annotations"), errs);
    }
    // R42: `governed` and `ungoverned_reason` are toolset-only fields.
    for key in ["governed", "ungoverned_reason"] {
        if o.has(key) && !o.has("toolset") {
            errs.push(
                o.path_of(key),
                format!("`{key}` is for `toolset` tools only: an MCP or HTTP tool is always governed (R42)"),
            );
        }
    }
    if o.has("toolset") {
        if let Some(g) = o.bool("governed", errs) {
            decl.governed = g;
        }
        if let Some(r) = o.str("ungoverned_reason", errs) {
            decl.ungoverned_reason = Some(r.to_owned());
        }
    }
    if let Some(t) = o.raw("target", errs) {
        decl.target = read_target(t, &o.path_of("target"), errs);
    }
    // R49: the operator's labels; an ungoverned tool (R42) carries none.
    if let Some(l) = o.raw("labels", errs) {
        if !decl.governed {
            errs.push(
                o.path_of("labels"),
                "a tool with `governed: false` carries no labels (R49, R42)",
            );
        } else if let Some(labels) =
            crate::labels::read_labels(l, &o.path_of("labels"), false, errs)
        {
            decl.labels = labels;
        }
    }
}

/// A declaration's `target` (seed 000; configuration.md, "Gateway prefixes and the host's own
/// tools"): `host`, `working_directory`, `sandbox`, each `input.<dotted path>` or
/// `extension`; at least one.
fn read_target(
    v: &Value,
    path: &str,
    errs: &mut ConfigErrors,
) -> Option<toolgate_core::TargetSpec> {
    let o = Obj::open(v, path, &["host", "working_directory", "sandbox"], errs)?;
    let mut one = |key: &str| {
        let s = o.non_blank(key, errs)?;
        match toolgate_core::TargetSource::parse(s) {
            Ok(src) => Some(src),
            Err(why) => {
                errs.push(o.path_of(key), why.to_string());
                None
            }
        }
    };
    let spec = toolgate_core::TargetSpec {
        host: one("host"),
        working_directory: one("working_directory"),
        sandbox: one("sandbox"),
    };
    if spec.is_empty()
        && !["host", "working_directory", "sandbox"]
            .iter()
            .any(|k| o.has(k))
    {
        errs.push(
            path,
            "a `target` names at least one of `host`, `working_directory`, `sandbox`",
        );
        return None;
    }
    Some(spec)
}

fn read_annotations(v: &Value, path: &str, errs: &mut ConfigErrors) -> Option<McpAnnotations> {
    let o = Obj::open(v, path, ANNOTATIONS, errs)?;
    Some(McpAnnotations {
        title: o.str("title", errs).map(str::to_owned),
        read_only_hint: o.bool("readOnlyHint", errs),
        destructive_hint: o.bool("destructiveHint", errs),
        idempotent_hint: o.bool("idempotentHint", errs),
        open_world_hint: o.bool("openWorldHint", errs),
    })
}

/// An agent's own layer settings: `approval: {channel, timeout_secs}` and
/// `audit: {include_input, include_output}` (inherited by subagents, never looser: R39).
fn read_agent_layers(o: &Obj<'_>, a: &mut AgentProfile, errs: &mut ConfigErrors) {
    if let Some(v) = o.raw("approval", errs)
        && let Some(ap) = Obj::open(
            v,
            &o.path_of("approval"),
            &["channel", "timeout_secs"],
            errs,
        )
    {
        a.approval_channel = ap.choice("channel", CHANNELS, ChannelKind::parse, errs);
        a.approval_timeout = ap
            .positive("timeout_secs", errs)
            .map(std::time::Duration::from_secs);
    }
    if let Some(v) = o.raw("audit", errs)
        && let Some(au) = Obj::open(
            v,
            &o.path_of("audit"),
            &["include_input", "include_output"],
            errs,
        )
    {
        a.audit_content = (
            au.bool("include_input", errs),
            au.bool("include_output", errs),
        );
    }
}

fn read_agent(v: &Value, path: &str, errs: &mut ConfigErrors) -> Option<AgentProfile> {
    let before = errs.errors.len();
    let o = Obj::open(v, path, AGENT, errs)?;
    let name = required_non_blank(&o, "name", errs);
    let mut a = AgentProfile::new(name.unwrap_or_default());
    if let Some(items) = o.array("allowed_tools", errs) {
        for (i, item) in items.iter().enumerate() {
            match item {
                Value::String(s) => a.allowed_tools.push(s.clone()),
                other => errs.push(
                    index(&o.path_of("allowed_tools"), i),
                    format!("expected a qualified tool name, found {}", type_name(other)),
                ),
            }
        }
    }
    for (key, what) in [
        ("allowed_resources", "a qualified resource name"),
        ("allowed_prompts", "a qualified prompt name"),
    ] {
        if let Some(items) = o.array(key, errs) {
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) if key == "allowed_resources" => {
                        a.allowed_resources.push(s.clone());
                    }
                    Value::String(s) => a.allowed_prompts.push(s.clone()),
                    other => errs.push(
                        index(&o.path_of(key), i),
                        format!("expected {what}, found {}", type_name(other)),
                    ),
                }
            }
        }
    }
    if let Some(c) = o.bool("confidential", errs) {
        a.confidential = c;
    }
    if let Some(t) = o.bool("as_tool", errs) {
        a.as_tool = t;
    }
    if o.has("parent") {
        a.parent = o.non_blank("parent", errs).map(str::to_owned);
    }
    // The subagent ids a token may name for this profile, as R19 patterns.
    if let Some(items) = o.array("subagents", errs) {
        for (i, item) in items.iter().enumerate() {
            let ipath = index(&o.path_of("subagents"), i);
            match item {
                Value::String(s) if s.trim().is_empty() => {
                    errs.push(ipath, "a subagent id pattern must not be blank");
                }
                Value::String(s) if s.chars().any(|c| c.is_whitespace() || c.is_control()) => {
                    errs.push(
                        ipath,
                        format!(
                            "`{}`: a subagent id holds no white space or control characters",
                            s.escape_debug()
                        ),
                    );
                }
                Value::String(s) => a.subagents.push(s.clone()),
                other => errs.push(
                    ipath,
                    format!("expected a subagent id pattern, found {}", type_name(other)),
                ),
            }
        }
    }
    read_agent_layers(&o, &mut a, errs);
    if let Some(items) = o.array("overrides", errs) {
        for (i, item) in items.iter().enumerate() {
            let opath = index(&o.path_of("overrides"), i);
            let Some(ov) = Obj::open(item, &opath, &["tool", "approval"], errs) else {
                continue;
            };
            // SPEC §8: an entry without `tool` is a load error; a blank one is ignored (R9).
            if !ov.has("tool") {
                errs.push(
                    ov.path_of("tool"),
                    "an override needs `tool`, the qualified name it applies to",
                );
            }
            let tool = ov.str("tool", errs).unwrap_or("");
            let mode = ov
                .choice("approval", MODES, ApprovalMode::parse, errs)
                .unwrap_or(ApprovalMode::Default);
            a.overrides.push((tool.to_owned(), mode));
        }
    }
    if errs.errors.len() > before {
        return None;
    }
    Some(a)
}

/// Parses and reads configuration text into a builder.
pub fn builder_from_str(text: &str, format: Format) -> Result<GovernanceBuilder, ConfigErrors> {
    let value = parse_text(text, format)?;
    let literals = match format {
        Format::Json => NumberLiterals::scan(text),
        _ => NumberLiterals::default(),
    };
    read_with_literals(&value, &literals)
}

/// Loads configuration text: parse, read and build. Any error refuses it whole.
pub fn load_str(text: &str, format: Format) -> Result<Governance, ConfigErrors> {
    builder_from_str(text, format)?.build()
}

mod paths;
pub use paths::{config_dir, resolve_relative_paths};

/// [`builder_from_str`] for the text of a configuration file in folder `dir`: its relative
/// paths resolved against `dir` ([`resolve_relative_paths`]), not the working directory.
pub fn builder_from_str_in(
    text: &str,
    format: Format,
    dir: &Path,
) -> Result<GovernanceBuilder, ConfigErrors> {
    let mut value = parse_text(text, format)?;
    resolve_relative_paths(&mut value, dir);
    let literals = match format {
        Format::Json => NumberLiterals::scan(text),
        _ => NumberLiterals::default(),
    };
    read_with_literals(&value, &literals)
}

/// [`load_str`] for the text of a configuration file in folder `dir` (relative paths
/// resolved against it).
pub fn load_str_in(text: &str, format: Format, dir: &Path) -> Result<Governance, ConfigErrors> {
    builder_from_str_in(text, format, dir)?.build()
}

/// Loads a configuration file, its format chosen by extension ([`Format::from_path`]).
/// Relative paths in it (`audit.file`, `inbox.sqlite`) are resolved against the file's own
/// folder ([`config_dir`]), whatever the working directory.
///
/// The engine's one file read: a thin convenience over [`load_str`] for callers at
/// start-up. It reads the whole file at `path` once, synchronously (a blocking
/// `std::fs::read_to_string`, so call it before serving or from a blocking task, never on an
/// async worker), and then does exactly what [`load_str`] does. It opens nothing else, keeps
/// no handle and never watches the file: reloading is the caller's (a
/// `GovernanceHandle` swap). A file that cannot be read is one error at the path `""`
/// naming the file; the decision functions themselves never touch the file system.
pub fn load_path(path: &Path) -> Result<Governance, ConfigErrors> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigErrors::one("", format!("cannot read `{}`: {e}", path.display())))?;
    load_str_in(&text, Format::from_path(path), &config_dir(path))
}

#[cfg(test)]
mod tests;
