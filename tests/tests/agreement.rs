//! Property tests: the layered tower stack, exposure and the pure engine never disagree
//! (SPEC R6–R17, R24–R31, R39; STYLE "The CLI's `decide` and the call-time layers give the
//! same answer because they run the same code").
//!
//! A generator builds random configurations as `serde_json::Value` — tools of all three
//! kinds with random approval modes, network scopes and overrides, `read_only`,
//! `confidential` and MCP annotations (absent ones included); trusted and untrusted
//! servers; the behaviour posture on or off (the governor armed whenever anything needs
//! it); agents with random allowed lists (random case, unknown and blank names included),
//! confidential and `as_tool` flags, overrides (duplicates, blanks, `default`, unknown
//! names) and optional acyclic `parent` chains; every approval channel; a small random
//! tenant policy — and random calls (catalog names in random case per R2, unknown names,
//! identities, unknown agents, subagents, every run mode, background or not). Every
//! generated configuration must load: the generator only produces valid ones.
//!
//! Properties:
//!
//! - (i) [`r14_stack_agrees_with_decide`]: the full stack (exposure → confidentiality →
//!   air gap → approval gate with an approving [`FnChannel`] of the configured kind) gives
//!   the engine's outcome: the same refusal; `Run` ↔ the tool ran once; `Ask` ↔ one
//!   question (carrying every reason, R17), then the tool ran once.
//! - (ii) [`r13_r14_exposure_and_invocation_never_disagree`]: what exposure says about a
//!   tool is what a plain call to it gets.
//! - (iii) [`r13_exposed_and_omitted_partition_the_catalog`]: every registered tool is in
//!   exactly one list, unknown allowed names in neither, both lists sorted, and search
//!   draws from the exposed list only.
//!
//! - (iv) [`r14_r33_the_composite_decides_as_the_hand_built_stack`]: the composite
//!   ([`ToolgateLayer`]) and a stack built by hand in the documented order (audit →
//!   exposure → confidentiality → air gap → approval gate → scrub → the tool), over the
//!   same configuration with a `redaction` section, give the same response, send the same
//!   inputs, ask the same questions and write the same audit records.
//!
//! Case counts: [`DEFAULT_CASES`] per property, or `TOOLGATE_PROPTEST_CASES` when set.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;
use serde_json::{Map, Value, json};
use toolgate::approval::{ApprovalGateLayer, ApprovalOutcome, FnChannel};
use toolgate::audit::{AuditLayer, MemorySink};
use toolgate::redact::RedactorBuilder;
use toolgate::scrub::ScrubOutputLayer;
use toolgate::{AirGapLayer, ConfidentialityLayer, ExposureLayer, GovernanceHandle, ToolgateLayer};
use toolgate_core::names::{http_name, mcp_name, toolset_name};
use toolgate_core::{
    AgentRef, ChannelKind, Check, RefusalCode, RunContext, RunMode, ToolCall, ToolIdentity,
    ToolOutput, ToolRef, ToolResponse, Verdict,
};
use toolgate_engine::config::{Format, load_str};
use toolgate_engine::{CallInput, CallView, Governance, PolicyState};
use tower::{ServiceBuilder, ServiceExt, service_fn};

/// Cases per property when `TOOLGATE_PROPTEST_CASES` is not set: a few seconds in debug.
const DEFAULT_CASES: u32 = 256;

fn cases() -> u32 {
    std::env::var("TOOLGATE_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

fn proptest_config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        // Keep the source tree clean: a failure prints its minimal case and seed.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------
// Vocabulary the generator draws from
// ---------------------------------------------------------------------------------------

const TOOLSETS: &[&str] = &["coding", "github", "Notes"];
/// `GitHub` and `github` are one server (R2): a second declaration is a revision.
const SERVERS: &[&str] = &["github", "GitHub", "kb", "web"];
/// Server names as the `servers` map may configure them (each at most once).
const SERVER_KEYS: &[&str] = &["github", "kb", "web"];
/// `list.issues`/`list_issues` and `Search`/`search` collide (R2, R24).
const TOOL_NAMES: &[&str] = &[
    "create_issue",
    "list.issues",
    "list_issues",
    "refund_order",
    "lookup",
    "write_file",
    "Search",
    "search",
    "wipe-all",
];
const MODES: &[&str] = &["default", "require_approval", "auto_approve", "deny"];
const SCOPES: &[&str] = &["none", "incidental", "egress"];
const CHANNELS: &[&str] = &["none", "interactive", "inbox"];
const AGENTS: &[&str] = &["support", "dev", "Sub", "helper"];
const UNKNOWN_TOOLS: &[&str] = &["ghost", "github__nothing"];
const TOOL_GLOBS: &[&str] = &[
    "refund_*",
    "*issue*",
    "list.issues",
    "search",
    "*",
    "LOOKUP",
    "write_file",
];
const SERVER_GLOBS: &[&str] = &["github", "k*", "WEB"];
const RULE_KINDS: &[&str] = &["mcp", "http", "local"];
const AGENT_GLOBS: &[&str] = &["support", "s*", "sub-1", "DEV"];
const EFFECTS: &[&str] = &["allow", "ask", "deny"];
const RUN_MODES: &[RunMode] = &[
    RunMode::UseAgentPolicy,
    RunMode::AutoApproveRequired,
    RunMode::AutoRejectRequired,
];

fn whens() -> [Value; 3] {
    [
        json!({"amount": {"gt": 100}}),
        json!({"customer.tier": {"equals": "gold"}}),
        json!({"amount": {}}),
    ]
}

/// Call inputs. With the tight limits some configurations set (`max_input_bytes` 40,
/// `max_input_depth` 2), the third is one byte too large (41 bytes compact) and the fifth
/// one level too deep; the last is never an object. All three are refused `invalid_input`
/// (R36) when over a bound.
fn inputs() -> [Value; 6] {
    [
        json!({}),
        json!({"amount": 5}),
        json!({"amount": 500, "customer": {"tier": "gold"}}),
        json!({"amount": null, "customer": {"tier": "silver"}}),
        json!({"a": {"b": {}}}),
        json!([1]),
    ]
}

/// Flips the ASCII case of the characters whose bit is set in `mask` (R2: names compare
/// ASCII case-insensitively, so every such spelling names the same thing).
fn recase(s: &str, mask: u64) -> String {
    s.chars()
        .enumerate()
        .map(|(i, c)| {
            if mask >> (i % 64) & 1 == 1 {
                if c.is_ascii_lowercase() {
                    c.to_ascii_uppercase()
                } else {
                    c.to_ascii_lowercase()
                }
            } else {
                c
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The generator
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct ToolSpec {
    /// 0 toolset, 1 MCP server, 2 http.
    source: u8,
    toolset: usize,
    server: usize,
    name: usize,
    explicit_kind: bool,
    approval: Option<usize>,
    network: Option<usize>,
    network_override: Option<usize>,
    read_only: Option<bool>,
    confidential: Option<bool>,
    /// `None`: no annotations at all; otherwise readOnly, destructive, idempotent,
    /// openWorld, each possibly absent.
    annotations: Option<[Option<bool>; 4]>,
    described: bool,
}

fn tool_spec() -> impl Strategy<Value = ToolSpec> {
    let a = (
        0u8..3,
        0..TOOLSETS.len(),
        0..SERVERS.len(),
        0..TOOL_NAMES.len(),
        any::<bool>(),
        proptest::option::of(0..MODES.len()),
        proptest::option::of(0..SCOPES.len()),
        proptest::option::weighted(0.25, 0..SCOPES.len()),
    );
    let b = (
        proptest::option::of(any::<bool>()),
        proptest::option::weighted(0.3, any::<bool>()),
        proptest::option::weighted(
            0.7,
            proptest::array::uniform4(proptest::option::of(any::<bool>())),
        ),
        any::<bool>(),
    );
    (a, b).prop_map(
        |(
            (source, toolset, server, name, explicit_kind, approval, network, network_override),
            (read_only, confidential, annotations, described),
        )| ToolSpec {
            source,
            toolset,
            server,
            name,
            explicit_kind,
            approval,
            network,
            network_override,
            read_only,
            confidential,
            annotations,
            described,
        },
    )
}

impl ToolSpec {
    fn identity(&self) -> ToolIdentity {
        let name = TOOL_NAMES[self.name];
        match self.source {
            0 => ToolIdentity::toolset(TOOLSETS[self.toolset], name),
            1 => ToolIdentity::mcp(SERVERS[self.server], name),
            _ => ToolIdentity::http(name),
        }
    }

    fn qualified_name(&self) -> String {
        let name = TOOL_NAMES[self.name];
        match self.source {
            0 => toolset_name(TOOLSETS[self.toolset], name),
            1 => mcp_name(SERVERS[self.server], name),
            _ => http_name(name),
        }
        .expect("every name in the vocabulary normalises to a non-empty segment")
    }

    fn to_json(&self) -> Value {
        let mut o = Map::new();
        let name = TOOL_NAMES[self.name];
        match self.source {
            0 => {
                o.insert("toolset".into(), json!(TOOLSETS[self.toolset]));
                if self.explicit_kind {
                    o.insert("kind".into(), json!("local"));
                }
            }
            1 => {
                o.insert("server".into(), json!(SERVERS[self.server]));
                if self.explicit_kind {
                    o.insert("kind".into(), json!("mcp"));
                }
            }
            _ => {
                o.insert("kind".into(), json!("http"));
            }
        }
        o.insert("name".into(), json!(name));
        if self.described {
            o.insert("description".into(), json!(format!("Does {name} things")));
        }
        if let Some(m) = self.approval {
            o.insert("approval".into(), json!(MODES[m]));
        }
        if let Some(n) = self.network {
            o.insert("network".into(), json!(SCOPES[n]));
        }
        if let Some(n) = self.network_override {
            o.insert("network_override".into(), json!(SCOPES[n]));
        }
        if let Some(c) = self.confidential {
            o.insert("confidential".into(), json!(c));
        }
        // SPEC §7: `read_only` only on toolset and http tools, `annotations` only on MCP.
        if self.source == 1 {
            if let Some(hints) = self.annotations {
                let mut a = Map::new();
                for (key, hint) in [
                    "readOnlyHint",
                    "destructiveHint",
                    "idempotentHint",
                    "openWorldHint",
                ]
                .into_iter()
                .zip(hints)
                {
                    if let Some(h) = hint {
                        a.insert(key.into(), json!(h));
                    }
                }
                o.insert("annotations".into(), Value::Object(a));
            }
        } else if let Some(r) = self.read_only {
            o.insert("read_only".into(), json!(r));
        }
        Value::Object(o)
    }
}

#[derive(Debug, Clone)]
enum OverrideTarget {
    /// A catalog name, in random case.
    Catalog(Index, u64),
    /// A blank name (R9: ignored).
    Blank(&'static str),
    /// A name that resolves to no tool (R9: makes nothing available).
    Ghost,
}

#[derive(Debug, Clone)]
struct AgentSpec {
    name: String,
    parent: Option<String>,
    allowed: Vec<(Index, u64)>,
    allow_ghost: bool,
    allow_blank: bool,
    confidential: Option<bool>,
    as_tool: Option<bool>,
    overrides: Vec<(OverrideTarget, usize)>,
}

fn override_target() -> impl Strategy<Value = OverrideTarget> {
    prop_oneof![
        6 => (any::<Index>(), any::<u64>()).prop_map(|(i, m)| OverrideTarget::Catalog(i, m)),
        1 => prop_oneof![Just(""), Just("   ")].prop_map(OverrideTarget::Blank),
        1 => Just(OverrideTarget::Ghost),
    ]
}

/// Agents named `AGENTS[0..n]`; agent `i` may name an earlier one as its parent (so chains
/// never cycle, R39), spelled in random case; then the list is shuffled so a parent may
/// come after its child in the file.
fn agents() -> impl Strategy<Value = Vec<AgentSpec>> {
    let one = (
        proptest::collection::vec((any::<Index>(), any::<u64>()), 0..7),
        any::<bool>(),
        proptest::bool::weighted(0.15),
        proptest::option::weighted(0.4, any::<bool>()),
        proptest::option::weighted(0.4, any::<bool>()),
        proptest::collection::vec((override_target(), 0..MODES.len()), 0..4),
        proptest::option::weighted(0.4, (any::<Index>(), any::<u64>())),
    );
    proptest::collection::vec(one, 1..=AGENTS.len())
        .prop_map(|specs| {
            specs
                .into_iter()
                .enumerate()
                .map(
                    |(
                        i,
                        (
                            allowed,
                            allow_ghost,
                            allow_blank,
                            confidential,
                            as_tool,
                            overrides,
                            parent,
                        ),
                    )| {
                        AgentSpec {
                            name: AGENTS[i].to_owned(),
                            parent: parent
                                .filter(|_| i > 0)
                                .map(|(p, mask)| recase(AGENTS[p.index(i)], mask)),
                            allowed,
                            allow_ghost,
                            allow_blank,
                            confidential,
                            as_tool,
                            overrides,
                        }
                    },
                )
                .collect::<Vec<_>>()
        })
        .prop_shuffle()
}

#[derive(Debug, Clone)]
struct RuleSpec {
    effect: usize,
    tool: Option<usize>,
    server: Option<usize>,
    kind: Option<usize>,
    agent: Option<usize>,
    when: Option<usize>,
    reason: bool,
}

fn rule() -> impl Strategy<Value = RuleSpec> {
    (
        0..EFFECTS.len(),
        proptest::option::of(0..TOOL_GLOBS.len()),
        proptest::option::weighted(0.3, 0..SERVER_GLOBS.len()),
        proptest::option::weighted(0.3, 0..RULE_KINDS.len()),
        proptest::option::weighted(0.25, 0..AGENT_GLOBS.len()),
        proptest::option::weighted(0.3, 0..3usize),
        any::<bool>(),
    )
        .prop_map(
            |(effect, tool, server, kind, agent, when, reason)| RuleSpec {
                effect,
                tool,
                server,
                kind,
                agent,
                when,
                reason,
            },
        )
}

#[derive(Debug, Clone)]
struct ConfigSpec {
    tools: Vec<ToolSpec>,
    /// Per `SERVER_KEYS` entry: not configured, or (trusted, spelled in upper case).
    servers: [Option<(bool, bool)>; 3],
    posture: bool,
    enforce: bool,
    air_gapped: bool,
    channel: usize,
    exemptions: Vec<(usize, Option<usize>)>,
    agents: Vec<AgentSpec>,
    policy: Option<(Option<usize>, Vec<RuleSpec>)>,
    /// Replace the loaded policy with an unreadable stored one (R22).
    unreadable: bool,
    /// Set `max_input_bytes` 40 and `max_input_depth` 2 (R36).
    tight_limits: bool,
}

fn config_spec() -> impl Strategy<Value = ConfigSpec> {
    (
        proptest::collection::vec(tool_spec(), 1..8),
        proptest::array::uniform3(proptest::option::of((any::<bool>(), any::<bool>()))),
        any::<bool>(),
        any::<bool>(),
        proptest::bool::weighted(0.3),
        0..CHANNELS.len(),
        proptest::collection::vec(
            (0..TOOL_NAMES.len(), proptest::option::of(0..SERVERS.len())),
            0..3,
        ),
        agents(),
        proptest::option::of((
            proptest::option::of(0..EFFECTS.len()),
            proptest::collection::vec(rule(), 0..4),
        )),
        proptest::bool::weighted(0.1),
        proptest::bool::weighted(0.2),
    )
        .prop_map(
            |(
                tools,
                servers,
                posture,
                enforce,
                air_gapped,
                channel,
                exemptions,
                agents,
                policy,
                unreadable,
                tight_limits,
            )| {
                ConfigSpec {
                    tools,
                    servers,
                    posture,
                    enforce,
                    air_gapped,
                    channel,
                    exemptions,
                    agents,
                    policy,
                    unreadable,
                    tight_limits,
                }
            },
        )
}

impl ConfigSpec {
    /// Whether the `servers` map marks this server trusted (names compare
    /// case-insensitively, R2).
    fn trusted(&self, server: &str) -> bool {
        SERVER_KEYS
            .iter()
            .zip(&self.servers)
            .any(|(key, s)| key.eq_ignore_ascii_case(server) && s.is_some_and(|(t, _)| t))
    }

    /// The catalog's qualified names, one per case-insensitive key, first spelling kept.
    fn catalog_names(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for t in &self.tools {
            let q = t.qualified_name();
            if seen.insert(q.to_ascii_lowercase()) {
                out.push(q);
            }
        }
        out
    }

    fn channel(&self) -> ChannelKind {
        ChannelKind::parse(CHANNELS[self.channel]).expect("a channel spelling")
    }

    fn to_json(&self) -> Value {
        let names = self.catalog_names();
        let mut top = Map::new();
        // R15, R27: a non-empty policy or the posture needs the governor armed; with
        // neither, the governor's setting is free (and then changes nothing).
        let enforce = self.enforce || self.posture || self.policy.is_some();
        top.insert("enforce_tool_invocation".into(), json!(enforce));
        top.insert("air_gapped".into(), json!(self.air_gapped));
        if self.tight_limits {
            top.insert(
                "limits".into(),
                json!({"max_input_bytes": 40, "max_input_depth": 2}),
            );
        }
        top.insert(
            "approval".into(),
            json!({ "channel": CHANNELS[self.channel] }),
        );
        let mut servers = Map::new();
        for (key, s) in SERVER_KEYS.iter().zip(&self.servers) {
            if let Some((trusted, upper)) = s {
                let spelled = if *upper {
                    key.to_ascii_uppercase()
                } else {
                    (*key).to_owned()
                };
                servers.insert(spelled, json!({ "trust_tool_annotations": trusted }));
            }
        }
        top.insert("servers".into(), Value::Object(servers));
        top.insert(
            "tools".into(),
            Value::Array(self.tools.iter().map(ToolSpec::to_json).collect()),
        );

        let mut exemptions = Vec::new();
        for (i, (tool, server)) in self.exemptions.iter().enumerate() {
            let tool = TOOL_NAMES[*tool];
            let mut server = server.map(|s| SERVERS[s].to_owned());
            if server.is_none() {
                // R31: `server` is required when a declared tool of that name comes from
                // an MCP server not marked trusted; name that server so the config loads.
                server = self
                    .tools
                    .iter()
                    .filter(|t| t.source == 1)
                    .map(ToolSpec::identity)
                    .find(|id| id.name().eq_ignore_ascii_case(tool) && !self.trusted(id.source()))
                    .map(|id| id.source().to_owned());
            }
            let mut e = Map::new();
            e.insert("tool".into(), json!(recase(tool, i as u64 * 5)));
            if let Some(s) = server {
                e.insert("server".into(), json!(s));
            }
            e.insert("reason".into(), json!("reviewed: does not mutate"));
            exemptions.push(Value::Object(e));
        }
        top.insert(
            "behavior_gating".into(),
            json!({
                "require_approval_for_non_read_only": self.posture,
                "exemptions": exemptions,
            }),
        );

        let mut agents = Vec::new();
        for a in &self.agents {
            let mut o = Map::new();
            o.insert("name".into(), json!(a.name));
            let mut allowed: Vec<Value> = a
                .allowed
                .iter()
                .map(|(i, mask)| json!(recase(i.get::<String>(&names), *mask)))
                .collect();
            if a.allow_ghost {
                allowed.push(json!("ghost"));
            }
            if a.allow_blank {
                allowed.push(json!(" "));
            }
            if !allowed.is_empty() {
                o.insert("allowed_tools".into(), Value::Array(allowed));
            }
            if let Some(c) = a.confidential {
                o.insert("confidential".into(), json!(c));
            }
            if let Some(t) = a.as_tool {
                o.insert("as_tool".into(), json!(t));
            }
            if let Some(p) = &a.parent {
                o.insert("parent".into(), json!(p));
            }
            if !a.overrides.is_empty() {
                let ovs: Vec<Value> = a
                    .overrides
                    .iter()
                    .map(|(target, mode)| {
                        let tool = match target {
                            OverrideTarget::Catalog(i, mask) => {
                                recase(i.get::<String>(&names), *mask)
                            }
                            OverrideTarget::Blank(b) => (*b).to_owned(),
                            OverrideTarget::Ghost => String::from("ghost"),
                        };
                        json!({ "tool": tool, "approval": MODES[*mode] })
                    })
                    .collect();
                o.insert("overrides".into(), Value::Array(ovs));
            }
            agents.push(Value::Object(o));
        }
        top.insert("agents".into(), Value::Array(agents));

        if let Some((default, rules)) = &self.policy {
            let whens = whens();
            let mut p = Map::new();
            if let Some(d) = default {
                p.insert("default".into(), json!(EFFECTS[*d]));
            }
            let rules: Vec<Value> = rules
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let mut o = Map::new();
                    o.insert("effect".into(), json!(EFFECTS[r.effect]));
                    if let Some(t) = r.tool {
                        o.insert("tool".into(), json!(TOOL_GLOBS[t]));
                    }
                    if let Some(s) = r.server {
                        o.insert("server".into(), json!(SERVER_GLOBS[s]));
                    }
                    if let Some(k) = r.kind {
                        o.insert("kind".into(), json!(RULE_KINDS[k]));
                    }
                    if let Some(a) = r.agent {
                        o.insert("agent".into(), json!(AGENT_GLOBS[a]));
                    }
                    if let Some(w) = r.when {
                        o.insert("when".into(), whens[w].clone());
                    }
                    if r.reason {
                        o.insert("reason".into(), json!(format!("rule {i} says so")));
                    }
                    Value::Object(o)
                })
                .collect();
            p.insert("rules".into(), Value::Array(rules));
            top.insert("policy".into(), Value::Object(p));
        }
        Value::Object(top)
    }
}

#[derive(Debug, Clone)]
struct CallSpec {
    agent: Index,
    agent_mask: u64,
    unknown_agent: bool,
    subagent: bool,
    /// 0: a catalog name, 1: an unknown name, 2: a declared identity.
    by: u8,
    tool: Index,
    mask: u64,
    mode: usize,
    background: bool,
    input: usize,
}

fn call_spec() -> impl Strategy<Value = CallSpec> {
    (
        any::<Index>(),
        any::<u64>(),
        proptest::bool::weighted(0.1),
        proptest::bool::weighted(0.15),
        prop_oneof![6 => Just(0u8), 1 => Just(1u8), 2 => Just(2u8)],
        any::<Index>(),
        any::<u64>(),
        0..RUN_MODES.len(),
        proptest::bool::weighted(0.2),
        0..inputs().len(),
    )
        .prop_map(
            |(
                agent,
                agent_mask,
                unknown_agent,
                subagent,
                by,
                tool,
                mask,
                mode,
                background,
                input,
            )| {
                CallSpec {
                    agent,
                    agent_mask,
                    unknown_agent,
                    subagent,
                    by,
                    tool,
                    mask,
                    mode,
                    background,
                    input,
                }
            },
        )
}

/// One call, ready to decide and to send.
#[derive(Debug, Clone)]
struct Call {
    tool: ToolRef,
    agent: AgentRef,
    input: Value,
    run: RunContext,
}

impl Call {
    fn resolve(spec: &CallSpec, config: &ConfigSpec) -> Self {
        let names = config.catalog_names();
        let profile = if spec.unknown_agent {
            String::from("nobody")
        } else {
            recase(&spec.agent.get(&config.agents).name, spec.agent_mask)
        };
        let agent = if spec.subagent {
            AgentRef::subagent(profile, "sub-1")
        } else {
            AgentRef::profile(profile)
        };
        let tool = match spec.by {
            0 => ToolRef::Name(recase(spec.tool.get::<String>(&names), spec.mask)),
            1 => ToolRef::Name(recase(spec.tool.get::<&str>(UNKNOWN_TOOLS), spec.mask)),
            _ => {
                let id = spec.tool.get(&config.tools).identity();
                let recased = match id.kind() {
                    toolgate_core::ToolKind::Local => {
                        ToolIdentity::toolset(recase(id.source(), spec.mask), id.name())
                    }
                    toolgate_core::ToolKind::Mcp => {
                        ToolIdentity::mcp(recase(id.source(), spec.mask), id.name())
                    }
                    _ => id,
                };
                ToolRef::Identity(recased)
            }
        };
        Self {
            tool,
            agent,
            input: inputs()[spec.input].clone(),
            run: RunContext {
                mode: RUN_MODES[spec.mode],
                background: spec.background,
            },
        }
    }

    fn view(&self) -> CallView<'_> {
        CallView {
            tool: &self.tool,
            agent: &self.agent,
            input: CallInput::Value(&self.input),
            run: self.run,
        }
    }

    fn to_tool_call(&self) -> ToolCall {
        let mut c = ToolCall::new(self.agent.clone(), "", self.input.clone()).with_run(self.run);
        c.tool = self.tool.clone();
        c
    }
}

fn case() -> impl Strategy<Value = (ConfigSpec, Vec<CallSpec>)> {
    (config_spec(), proptest::collection::vec(call_spec(), 1..8))
}

fn load_generated(spec: &ConfigSpec) -> Result<Governance, TestCaseError> {
    let config = spec.to_json();
    let gov = load_str(&config.to_string(), Format::Json).map_err(|e| {
        TestCaseError::fail(format!(
            "the generator made a configuration that does not load:\n{e}\n{config:#}"
        ))
    })?;
    if spec.unreadable {
        return gov
            .with_policy(PolicyState::Unreadable(String::from(
                "the stored policy is not valid JSON",
            )))
            .map_err(|e| TestCaseError::fail(format!("an unreadable policy was refused: {e}")));
    }
    Ok(gov)
}

// ---------------------------------------------------------------------------------------
// (i) The layered stack agrees with the engine
// ---------------------------------------------------------------------------------------

/// What one trip through the stack did.
#[derive(Debug)]
struct Trip {
    response: ToolResponse,
    /// The inputs the tool saw.
    sent: Vec<Value>,
    /// The reasons of every question the channel was asked.
    questions: Vec<Vec<String>>,
}

fn through_stack(
    rt: &tokio::runtime::Runtime,
    gov: &Governance,
    kind: ChannelKind,
    call: &Call,
) -> Trip {
    let handle = GovernanceHandle::new(gov.clone());
    let questions: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
    let q = Arc::clone(&questions);
    let channel = FnChannel::new(kind, move |req| {
        q.lock().unwrap().push(req.reasons());
        ApprovalOutcome::Approved {
            approver: String::from("prop"),
        }
    });
    let sent: Arc<Mutex<Vec<Value>>> = Arc::default();
    let s = Arc::clone(&sent);
    let tool = service_fn(move |c: ToolCall| {
        let s = Arc::clone(&s);
        async move {
            s.lock().unwrap().push(c.input.clone());
            Ok::<_, Infallible>(ToolResponse::Completed(ToolOutput::new(json!("ran"))))
        }
    });
    let stack = ServiceBuilder::new()
        .layer(ExposureLayer::new(handle.clone()))
        .layer(ConfidentialityLayer::new(handle.clone()))
        .layer(AirGapLayer::new(handle.clone()))
        .layer(ApprovalGateLayer::new(handle).channel(channel))
        .service(tool);
    let response = rt
        .block_on(stack.oneshot(call.to_tool_call()))
        .unwrap_or_else(|e: Infallible| match e {});
    let sent = sent.lock().unwrap().clone();
    let questions = questions.lock().unwrap().clone();
    Trip {
        response,
        sent,
        questions,
    }
}

fn check_agreement(
    rt: &tokio::runtime::Runtime,
    spec: &ConfigSpec,
    calls: &[CallSpec],
) -> Result<(), TestCaseError> {
    let gov = load_generated(spec)?;
    let kind = spec.channel();
    for c in calls {
        let call = Call::resolve(c, spec);
        let decision = gov.decide(call.view());
        let trip = through_stack(rt, &gov, kind, &call);
        let ctx = || format!("call {call:?}\ndecision {decision:?}\ntrip {trip:?}");
        match decision.verdict {
            Verdict::Refused(code) => {
                let want = decision.refusal().expect("INVARIANT: Refused ↔ refusal()");
                prop_assert_eq!(want.code, code);
                prop_assert_eq!(
                    trip.response.refusal(),
                    Some(&want),
                    "same refusal: code, deciding check and reasons\n{}",
                    ctx()
                );
                prop_assert!(
                    trip.sent.is_empty(),
                    "a refused call reached the tool\n{}",
                    ctx()
                );
                prop_assert!(
                    trip.questions.is_empty(),
                    "asked about a refused call\n{}",
                    ctx()
                );
            }
            Verdict::Run { .. } => {
                prop_assert!(
                    matches!(trip.response, ToolResponse::Completed(_)),
                    "{}",
                    ctx()
                );
                prop_assert_eq!(&trip.sent, &vec![call.input.clone()], "{}", ctx());
                prop_assert!(
                    trip.questions.is_empty(),
                    "asked about a call that runs\n{}",
                    ctx()
                );
            }
            Verdict::Ask { channel } => {
                prop_assert_eq!(channel, kind, "{}", ctx());
                prop_assert_eq!(
                    &trip.questions,
                    &vec![decision.reasons.clone()],
                    "R17: exactly one question, carrying every reason\n{}",
                    ctx()
                );
                prop_assert!(
                    matches!(trip.response, ToolResponse::Completed(_)),
                    "{}",
                    ctx()
                );
                prop_assert_eq!(&trip.sent, &vec![call.input.clone()], "{}", ctx());
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// (ii) Exposure and invocation agree
// ---------------------------------------------------------------------------------------

/// R13/R14: exposure is built from the same checks as invocation, so a plain call — run
/// mode `use_agent_policy`, not in the background, input `{}` — to a tool gets what
/// exposure said about it, *with no tenant policy* (a tenant rule is per call: it is not
/// part of exposure, and at call time it comes before routing at step 7):
///
/// - omitted with code C (R6–R11) → refused with C by the same check. Steps 2–6 are the
///   same functions. The one omission decided at step 7 is a posture wrap for an agent
///   that runs as a tool (R11, R12): exposure omits it `no_approval_channel`
///   ([`Check::Routing`]) and the call's posture ask is refused with the same code by the
///   routing (R26: no channel when the agent runs as a tool).
/// - exposed raw (effective mode not `require_approval`, and no posture ask) → nothing asks
///   → it runs, not auto-approved.
/// - exposed wrapped (R10 `require_approval` or R12 posture) → it asks on the configured
///   channel (R25 `use_agent_policy` routes to it; the run is not in the background), or,
///   with `approval.channel: none`, it is refused `no_approval_channel` (R26).
fn check_exposure_agrees(spec: &ConfigSpec) -> Result<(), TestCaseError> {
    let gov = load_generated(spec)?
        .with_policy(PolicyState::default())
        .expect("an empty policy is always accepted");
    let kind = spec.channel();
    let plain = RunContext {
        mode: RunMode::UseAgentPolicy,
        background: false,
    };
    let empty = json!({});
    for name in gov.agent_names() {
        let exposure = gov.expose(name).expect("a configured agent");
        let agent = AgentRef::profile(name);
        let decide = |tool: &str| {
            let tool = ToolRef::Name(tool.to_owned());
            gov.decide(CallView {
                tool: &tool,
                agent: &agent,
                input: CallInput::Value(&empty),
                run: plain,
            })
        };
        for o in &exposure.omitted {
            let d = decide(&o.name);
            prop_assert_eq!(
                &d.verdict,
                &Verdict::Refused(o.refusal.code),
                "agent {} tool {}: omitted as {:?}, called: {:?}",
                name,
                &o.name,
                &o.refusal,
                &d
            );
            prop_assert_eq!(d.decided_by, o.refusal.decided_by, "{} {}", name, &o.name);
        }
        for t in &exposure.tools {
            let d = decide(&t.name);
            let want = match (t.wrapped, kind) {
                (false, _) => Verdict::Run {
                    auto_approved: false,
                },
                (true, ChannelKind::None) => Verdict::Refused(RefusalCode::NoApprovalChannel),
                (true, channel) => Verdict::Ask { channel },
            };
            prop_assert_eq!(
                &d.verdict,
                &want,
                "agent {} tool {} exposed {}: {:?}",
                name,
                &t.name,
                if t.wrapped { "wrapped" } else { "raw" },
                &d
            );
            if let Verdict::Refused(_) = d.verdict {
                prop_assert_eq!(d.decided_by, Check::Routing, "R26: refused by the routing");
            }
            prop_assert_eq!(
                d.asks.is_empty(),
                !t.wrapped,
                "wrapped ↔ something asks: {:?}",
                &d
            );
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// (iii) The two lists partition the catalog; search draws from the exposed list only
// ---------------------------------------------------------------------------------------

fn check_partition(spec: &ConfigSpec) -> Result<(), TestCaseError> {
    let gov = load_generated(spec)?;
    let catalog: BTreeSet<String> = gov
        .catalog()
        .entries()
        .iter()
        .map(|e| e.key.clone())
        .collect();
    prop_assert_eq!(catalog.len(), gov.catalog().len(), "one entry per key");
    let expected: BTreeSet<String> = spec
        .catalog_names()
        .iter()
        .map(|n| n.to_ascii_lowercase())
        .collect();
    prop_assert_eq!(&catalog, &expected, "the catalog holds every declared name");
    prop_assert!(
        gov.expose("nobody").is_err(),
        "an unknown agent has no exposure"
    );
    for name in gov.agent_names() {
        let e = gov.expose(name).expect("a configured agent");
        let shown: Vec<String> = e
            .tools
            .iter()
            .map(|t| t.name.to_ascii_lowercase())
            .collect();
        let kept: Vec<String> = e
            .omitted
            .iter()
            .map(|t| t.name.to_ascii_lowercase())
            .collect();
        let mut all: Vec<String> = shown.iter().chain(&kept).cloned().collect();
        all.sort();
        let before = all.len();
        all.dedup();
        prop_assert_eq!(
            before,
            all.len(),
            "a tool in both lists (or twice): {:?}",
            &e
        );
        prop_assert_eq!(
            all.into_iter().collect::<BTreeSet<_>>(),
            catalog.clone(),
            "R13: every registered tool in exactly one list; nothing else"
        );
        for list in [&shown, &kept] {
            prop_assert!(
                list.windows(2).all(|w| w[0] < w[1]),
                "sorted by the lower-cased name: {:?}",
                list
            );
        }
        for unknown in UNKNOWN_TOOLS.iter().chain(&[" ", ""]) {
            let k = unknown.to_ascii_lowercase();
            prop_assert!(!shown.contains(&k) && !kept.contains(&k));
        }
        let found: Vec<_> = e.search("").cloned().collect();
        prop_assert_eq!(&found, &e.tools, "search(\"\") is exactly the exposed list");
        for o in &e.omitted {
            prop_assert!(
                e.load(&o.name).is_none(),
                "R13: an omitted tool cannot be loaded"
            );
            prop_assert!(
                e.load(&o.name.to_ascii_uppercase()).is_none(),
                "R13: not in any case"
            );
            let hits: Vec<_> = e.search(&o.name).collect();
            prop_assert!(
                hits.iter().all(|t| !t.name.eq_ignore_ascii_case(&o.name)),
                "R13: search never finds an omitted tool"
            );
        }
        for t in &e.tools {
            prop_assert_eq!(e.load(&t.name.to_ascii_uppercase()), Some(t));
            prop_assert!(e.search(&t.name).any(|h| h == t));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// (iv) The composite decides as the hand-built stack in the documented order
// ---------------------------------------------------------------------------------------

const SSN: &str = "078-05-1120";

/// What one trip through a stack did, audit records included (without the fields that
/// differ between two runs of the same call: time, duration, call and interaction ids,
/// chain links).
#[derive(Debug, PartialEq)]
struct FullTrip {
    response: ToolResponse,
    sent: Vec<Value>,
    questions: Vec<Vec<String>>,
    records: Vec<Value>,
}

type Boxed = tower::util::BoxCloneService<ToolCall, ToolResponse, Infallible>;

/// One stack and what it saw, drained after each call.
struct Recorded {
    stack: Boxed,
    sent: Arc<Mutex<Vec<Value>>>,
    questions: Arc<Mutex<Vec<Vec<String>>>>,
    sink: Arc<MemorySink>,
    seen: usize,
}

impl Recorded {
    fn new(gov: &Governance, kind: ChannelKind, composite: bool) -> Self {
        let handle = GovernanceHandle::new(gov.clone());
        let questions: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
        let q = Arc::clone(&questions);
        let channel = FnChannel::new(kind, move |req| {
            q.lock().unwrap().push(req.reasons());
            ApprovalOutcome::Approved {
                approver: String::from("prop"),
            }
        });
        let sent: Arc<Mutex<Vec<Value>>> = Arc::default();
        let s = Arc::clone(&sent);
        let tool = service_fn(move |c: ToolCall| {
            let s = Arc::clone(&s);
            async move {
                s.lock().unwrap().push(c.input.clone());
                Ok::<_, Infallible>(ToolResponse::Completed(ToolOutput::new(
                    json!({"ran": c.input, "ssn": SSN}),
                )))
            }
        });
        let sink = Arc::new(MemorySink::new());
        let stack = if composite {
            let governed = ToolgateLayer::builder(handle)
                .channel(channel)
                .shared_audit_sink(sink.clone())
                .build()
                .expect("the channel is of the configured kind");
            Boxed::new(ServiceBuilder::new().layer(governed).service(tool))
        } else {
            let redactor = RedactorBuilder::from_settings(gov.redaction_settings())
                .build()
                .unwrap();
            Boxed::new(
                ServiceBuilder::new()
                    .layer(
                        AuditLayer::shared(sink.clone())
                            .settings(gov.audit_settings())
                            .governance(handle.clone())
                            .redactor(redactor.clone()),
                    )
                    .layer(ExposureLayer::new(handle.clone()))
                    .layer(ConfidentialityLayer::new(handle.clone()))
                    .layer(AirGapLayer::new(handle.clone()))
                    .layer(ApprovalGateLayer::new(handle).channel(channel))
                    .layer(ScrubOutputLayer::new(redactor))
                    .service(tool),
            )
        };
        Self {
            stack,
            sent,
            questions,
            sink,
            seen: 0,
        }
    }

    fn trip(&mut self, rt: &tokio::runtime::Runtime, call: &Call) -> FullTrip {
        let response = rt
            .block_on(self.stack.clone().oneshot(call.to_tool_call()))
            .unwrap_or_else(|e: Infallible| match e {});
        let lines = self.sink.lines();
        let records = lines
            .get(self.seen..)
            .unwrap_or_default()
            .iter()
            .map(|l| {
                let mut v: Value = serde_json::from_str(l).unwrap();
                let o = v.as_object_mut().unwrap();
                for k in ["time", "duration_ms", "call_id", "seq", "prev", "hash"] {
                    o.remove(k);
                }
                if let Some(a) = o.get_mut("approval").and_then(Value::as_object_mut) {
                    a.remove("interaction_id");
                }
                v
            })
            .collect();
        self.seen = lines.len();
        FullTrip {
            response,
            sent: std::mem::take(&mut *self.sent.lock().unwrap()),
            questions: std::mem::take(&mut *self.questions.lock().unwrap()),
            records,
        }
    }
}

fn check_composite_agrees(
    rt: &tokio::runtime::Runtime,
    spec: &ConfigSpec,
    calls: &[CallSpec],
) -> Result<(), TestCaseError> {
    let mut config = spec.to_json();
    config["redaction"] = json!({"keys": ["ssn"], "scrub_output": true});
    config["audit"] = json!({"include_input": true, "include_output": true});
    let mut gov = load_str(&config.to_string(), Format::Json)
        .map_err(|e| TestCaseError::fail(format!("does not load: {e}\n{config:#}")))?;
    if spec.unreadable {
        gov = gov
            .with_policy(PolicyState::Unreadable(String::from("unreadable")))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    let kind = spec.channel();
    let mut composite = Recorded::new(&gov, kind, true);
    let mut by_hand = Recorded::new(&gov, kind, false);
    for c in calls {
        let call = Call::resolve(c, spec);
        let a = composite.trip(rt, &call);
        let b = by_hand.trip(rt, &call);
        prop_assert_eq!(&a, &b, "call {:?}", call);
        prop_assert_eq!(a.records.len(), 1, "one record per call");
        prop_assert!(!format!("{a:?}").contains(SSN), "the SSN escaped: {:?}", a);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The properties
// ---------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(proptest_config())]

    /// (i) R14, R16, R17, R25, R26: the full stack and `Governance::decide` agree.
    #[test]
    fn r14_stack_agrees_with_decide((spec, calls) in case()) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        check_agreement(&rt, &spec, &calls)?;
    }

    /// (ii) R13, R14: what exposure says is what a plain call gets.
    #[test]
    fn r13_r14_exposure_and_invocation_never_disagree(spec in config_spec()) {
        check_exposure_agrees(&spec)?;
    }

    /// (iii) R13: exposed and omitted partition the catalog; search sees only the exposed.
    #[test]
    fn r13_exposed_and_omitted_partition_the_catalog(spec in config_spec()) {
        check_partition(&spec)?;
    }

    /// (iv) R14, R33: the composite decides, asks, sends and records as the hand-built
    /// stack in the documented order.
    #[test]
    fn r14_r33_the_composite_decides_as_the_hand_built_stack((spec, calls) in case()) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        check_composite_agrees(&rt, &spec, &calls)?;
    }
}

/// The generator's vocabulary really produces the interesting shapes: collisions (R2),
/// revisions, and a configuration with every feature at once loads.
#[test]
fn generator_vocabulary_loads_with_every_feature() {
    let all_tools: Vec<ToolSpec> = (0..3u8)
        .flat_map(|source| {
            (0..TOOL_NAMES.len()).map(move |name| ToolSpec {
                source,
                toolset: usize::from(source) % TOOLSETS.len(),
                server: name % SERVERS.len(),
                name,
                explicit_kind: name % 2 == 0,
                approval: Some(name % MODES.len()),
                network: Some(name % SCOPES.len()),
                network_override: (name % 3 == 0).then_some(0),
                read_only: Some(name % 2 == 1),
                confidential: Some(name % 4 == 0),
                annotations: Some([Some(true), None, Some(false), None]),
                described: true,
            })
        })
        .collect();
    let spec = ConfigSpec {
        tools: all_tools,
        servers: [Some((true, true)), Some((false, false)), None],
        posture: true,
        enforce: true,
        air_gapped: true,
        channel: 1,
        exemptions: vec![(0, None), (1, Some(0)), (7, None)],
        // Agents are written by hand below (an `Index` cannot be built outside proptest).
        agents: vec![],
        policy: Some((
            Some(1),
            vec![RuleSpec {
                effect: 2,
                tool: Some(0),
                server: Some(1),
                kind: Some(0),
                agent: Some(1),
                when: Some(0),
                reason: true,
            }],
        )),
        unreadable: false,
        tight_limits: true,
    };
    let mut config = spec.to_json();
    let names = spec.catalog_names();
    config["agents"] = json!([
        {"name": "support", "confidential": true, "as_tool": false,
         "allowed_tools": [names[0].to_ascii_uppercase(), names[names.len() / 2], "ghost", " "],
         "overrides": [
            {"tool": names[0], "approval": "require_approval"},
            {"tool": names[0].to_ascii_uppercase(), "approval": "default"},
            {"tool": "", "approval": "deny"},
            {"tool": "ghost", "approval": "auto_approve"}
         ]},
        {"name": "Sub", "parent": "SUPPORT", "as_tool": true, "allowed_tools": [names[0]]}
    ]);
    let gov =
        load_str(&config.to_string(), Format::Json).unwrap_or_else(|e| panic!("{e}\n{config:#}"));
    let warnings = gov.warnings();
    assert!(
        warnings.iter().any(|w| w.message.contains("collision")),
        "the vocabulary makes collisions: {warnings:?}"
    );
    assert_eq!(gov.catalog().len(), spec.catalog_names().len());
    let sub = gov.agent("sub").expect("the child profile");
    assert!(sub.confidential, "R39: inherited from `SUPPORT`");
    assert!(sub.as_tool);
}

/// The generator reaches every outcome the stack can give: each refusal code, a run, an
/// auto-approved run, and an ask on each channel. Without this, the properties above could
/// pass while exercising little.
#[test]
fn generator_reaches_every_outcome() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let strategy = case();
    let mut seen = BTreeSet::new();
    for _ in 0..400 {
        let (spec, calls) = strategy.new_tree(&mut runner).unwrap().current();
        let gov = load_generated(&spec).unwrap_or_else(|e| panic!("{e}"));
        for c in &calls {
            let d = gov.decide(Call::resolve(c, &spec).view());
            seen.insert(match d.verdict {
                Verdict::Refused(code) => code.as_str().to_owned(),
                Verdict::Run { auto_approved } => format!("run auto_approved={auto_approved}"),
                Verdict::Ask { channel } => format!("ask {}", channel.as_str()),
            });
        }
    }
    // `decide` sees no history of sends, so no quota is ever full for it (R44, SPEC §7):
    // `rate_limited` needs a counter (layers/engine/tests/spec_round3.rs).
    let mut want: BTreeSet<String> = RefusalCode::ALL
        .iter()
        .filter(|c| **c != RefusalCode::RateLimited)
        .map(|c| c.as_str().to_owned())
        .collect();
    want.extend([
        String::from("run auto_approved=false"),
        String::from("run auto_approved=true"),
        String::from("ask interactive"),
        String::from("ask inbox"),
    ]);
    let missing: Vec<_> = want.difference(&seen).collect();
    assert!(missing.is_empty(), "never generated: {missing:?}");
}
