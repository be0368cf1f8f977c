//! A differential property test of the whole decision (`Governance::decide`) against a plain
//! reference written in this file straight from SPEC.md: names (R1–R2), the catalog with
//! collisions combined aspect by aspect (R24), allowed names (R6), confidential work (R7),
//! the air gap with `openWorldHint` (R8), the effective approval mode with overrides (R9) and
//! a parent's intersection (R39), the tenant policy (R15, R18–R23), the behaviour posture
//! with its trust rule and exemptions (R27–R31), the input bounds (R36, §8), and the routing
//! of asks by run mode, background and channel (R25–R26), in R14's order; and SPEC §9's
//! second round: identities by exact raw name (R2), gateway tool prefixes and own names
//! (R41), the host's own ungoverned toolset tools (R42), and subagent ids that would shadow
//! another profile (§8).
//!
//! Random configurations are written as CONFIG JSON (SPEC §7) and loaded by the engine's own
//! loader; the reference reads the same generated structure. For each configuration several
//! random calls are decided by both, and the outcome, refusal code, `auto_approved`, the
//! channel of an ask, and the reasons the SPEC fixes (a tenant `deny`'s rule reason, R16; every
//! asking rule's reason in the one question, R17) must agree. Where the SPEC makes a
//! configuration a load error that the generator can produce (R15/R27 inert settings, R31's
//! required `server`, R41's blank prefix and two listed names with one own name, R42's
//! misplaced, missing or inert `governed`/`ungoverned_reason` settings), the engine must
//! refuse to load it.
//!
//! The reference shares no code with the engine: its globs are a small backtracking matcher,
//! its catalog a list of groups, its policy a loop over every rule. Only `regex` is shared,
//! for `matches` (R20 defines that syntax as the crate's).
//!
//! Case counts: [`DEFAULT_CASES`] configurations (each with several calls), or
//! `TOOLGATE_PROPTEST_CASES` when set (the long run: `TOOLGATE_PROPTEST_CASES=100000 cargo
//! test -p toolgate-engine --release --test decide_reference`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

use proptest::prelude::*;
use proptest::sample::select;
use regex::Regex;
use serde_json::{Map, Value, json};
use toolgate_core::{AgentRef, ChannelKind, RunContext, RunMode, ToolIdentity, ToolRef, Verdict};
use toolgate_engine::config::{self, Format};
use toolgate_engine::{CallInput, CallView, Governance, PolicyState};

/// Configurations per run when `TOOLGATE_PROPTEST_CASES` is not set: a few seconds in CI.
const DEFAULT_CASES: u32 = 256;

fn cases() -> u32 {
    std::env::var("TOOLGATE_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

// =======================================================================================
// The generated model: what the generator chose, before it is written as CONFIG JSON.
// =======================================================================================

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Local,
    Mcp,
    Http,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Local => "local",
            Kind::Mcp => "mcp",
            Kind::Http => "http",
        }
    }
}

/// An approval mode as written (R4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Default,
    AutoApprove,
    RequireApproval,
    Deny,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Default => "default",
            Mode::AutoApprove => "auto_approve",
            Mode::RequireApproval => "require_approval",
            Mode::Deny => "deny",
        }
    }

    /// R39's order: deny, then require_approval, then the rest (which behave alike).
    fn strictness(self) -> u8 {
        match self {
            Mode::Deny => 2,
            Mode::RequireApproval => 1,
            Mode::Default | Mode::AutoApprove => 0,
        }
    }

    fn stricter(self, other: Mode) -> Mode {
        if other.strictness() > self.strictness() {
            other
        } else {
            self
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Hints {
    read_only: Option<bool>,
    destructive: Option<bool>,
    open_world: Option<bool>,
}

/// One `tools[]` entry.
#[derive(Debug, Clone)]
struct Decl {
    kind: Kind,
    /// The toolset or server as written; empty for http.
    source: String,
    /// The name as written.
    name: String,
    approval: Option<Mode>,
    network: Option<&'static str>,
    network_override: Option<&'static str>,
    /// `toolset` and http tools only.
    read_only: Option<bool>,
    confidential: Option<bool>,
    /// MCP tools only.
    hints: Option<Hints>,
    /// R41: the `tool_prefix` of this tool's server, copied here when the configuration is
    /// assembled (MCP tools only); [`own_name`] reads it.
    prefix: Option<String>,
    /// R41: listed through its server's gateway: when the server has a `tool_prefix`, the
    /// name gets that prefix (in the case mask given) as the configuration is assembled.
    gateway: Option<u32>,
    /// R42: `governed` as written (toolset tools; elsewhere a load error).
    governed: Option<bool>,
    /// R42: `ungoverned_reason` as written.
    ungoverned_reason: Option<String>,
}

#[derive(Debug, Clone)]
struct Exemption {
    tool: String,
    server: Option<String>,
}

#[derive(Debug, Clone)]
struct Agent {
    name: String,
    allowed: Vec<String>,
    confidential: Option<bool>,
    as_tool: Option<bool>,
    overrides: Vec<(String, Mode)>,
    parent: Option<String>,
}

#[derive(Debug, Clone)]
struct Rule {
    effect: &'static str,
    tool: Option<String>,
    server: Option<String>,
    kind: Option<Kind>,
    agent: Option<String>,
    /// `when`: a dotted path and its test object.
    when: Vec<(&'static str, Map<String, Value>)>,
    reason: Option<String>,
}

#[derive(Debug, Clone)]
struct Pol {
    default: Option<&'static str>,
    rules: Vec<Rule>,
}

/// Settings from SPEC §9 (see [`round_two`]): R41's `servers.NAME.tool_prefix`, by server
/// as written in `servers`. R42's fields are per tool ([`Decl::governed`]) and §8's
/// shadowing subagent ids are in [`SUBAGENT_IDS`].
#[derive(Debug, Clone, Default)]
struct RoundTwo {
    /// `(server as written in servers, tool_prefix as written)`.
    prefixes: Vec<(String, String)>,
}

#[derive(Debug, Clone)]
struct Cfg {
    enforce: Option<bool>,
    air_gapped: Option<bool>,
    channel: Option<&'static str>,
    posture: Option<bool>,
    exemptions: Vec<Exemption>,
    /// `servers`: name as written, `trust_tool_annotations`.
    servers: Vec<(String, bool)>,
    tools: Vec<Decl>,
    agents: Vec<Agent>,
    policy: Option<Pol>,
    /// The stored policy is replaced by an unreadable one after loading (R22).
    unreadable: bool,
    max_input_bytes: Option<usize>,
    max_input_depth: Option<usize>,
    round_two: RoundTwo,
}

#[derive(Debug, Clone)]
enum ToolSpec {
    Name(String),
    Identity(Kind, String, String),
    Both(String, Kind, String, String),
}

#[derive(Debug, Clone)]
struct Call {
    /// `agent`: a profile name, or a subagent id when `profile` is set.
    agent: String,
    profile: Option<String>,
    tool: ToolSpec,
    input: Value,
    /// Pass the input as text (compact or pretty) rather than as a value.
    as_text: Option<bool>,
    mode: RunMode,
    background: bool,
}

// =======================================================================================
// Writing the model as CONFIG JSON (SPEC §7).
// =======================================================================================

fn rule_json(r: &Rule) -> Value {
    let mut o = Map::new();
    o.insert("effect".into(), json!(r.effect));
    if let Some(t) = &r.tool {
        o.insert("tool".into(), json!(t));
    }
    if let Some(s) = &r.server {
        o.insert("server".into(), json!(s));
    }
    if let Some(k) = r.kind {
        o.insert("kind".into(), json!(k.as_str()));
    }
    if let Some(a) = &r.agent {
        o.insert("agent".into(), json!(a));
    }
    if !r.when.is_empty() {
        let w: Map<String, Value> = r
            .when
            .iter()
            .map(|(p, t)| ((*p).to_owned(), Value::Object(t.clone())))
            .collect();
        o.insert("when".into(), Value::Object(w));
    }
    if let Some(reason) = &r.reason {
        o.insert("reason".into(), json!(reason));
    }
    Value::Object(o)
}

fn config_json(c: &Cfg) -> Value {
    let mut top = Map::new();
    if let Some(v) = c.enforce {
        top.insert("enforce_tool_invocation".into(), json!(v));
    }
    if let Some(v) = c.air_gapped {
        top.insert("air_gapped".into(), json!(v));
    }
    if let Some(ch) = c.channel {
        top.insert("approval".into(), json!({ "channel": ch }));
    }
    if c.posture.is_some() || !c.exemptions.is_empty() {
        let mut g = Map::new();
        if let Some(p) = c.posture {
            g.insert("require_approval_for_non_read_only".into(), json!(p));
        }
        if !c.exemptions.is_empty() {
            let ex: Vec<Value> = c
                .exemptions
                .iter()
                .map(|e| {
                    let mut o = Map::new();
                    o.insert("tool".into(), json!(e.tool));
                    if let Some(s) = &e.server {
                        o.insert("server".into(), json!(s));
                    }
                    o.insert("reason".into(), json!("generated exemption"));
                    Value::Object(o)
                })
                .collect();
            g.insert("exemptions".into(), Value::Array(ex));
        }
        top.insert("behavior_gating".into(), Value::Object(g));
    }
    if !c.servers.is_empty() {
        let s: Map<String, Value> = c
            .servers
            .iter()
            .map(|(n, t)| {
                let mut o = Map::new();
                o.insert("trust_tool_annotations".into(), json!(t));
                if let Some((_, p)) = c.round_two.prefixes.iter().find(|(s, _)| s == n) {
                    o.insert("tool_prefix".into(), json!(p));
                }
                (n.clone(), Value::Object(o))
            })
            .collect();
        top.insert("servers".into(), Value::Object(s));
    }
    let tools: Vec<Value> = c
        .tools
        .iter()
        .map(|d| {
            let mut o = Map::new();
            match d.kind {
                Kind::Local => {
                    o.insert("toolset".into(), json!(d.source));
                }
                Kind::Mcp => {
                    o.insert("server".into(), json!(d.source));
                }
                Kind::Http => {
                    o.insert("kind".into(), json!("http"));
                }
            }
            o.insert("name".into(), json!(d.name));
            if let Some(m) = d.approval {
                o.insert("approval".into(), json!(m.as_str()));
            }
            if let Some(n) = d.network {
                o.insert("network".into(), json!(n));
            }
            if let Some(n) = d.network_override {
                o.insert("network_override".into(), json!(n));
            }
            if let Some(r) = d.read_only {
                o.insert("read_only".into(), json!(r));
            }
            if let Some(cf) = d.confidential {
                o.insert("confidential".into(), json!(cf));
            }
            if let Some(h) = &d.hints {
                let mut a = Map::new();
                if let Some(v) = h.read_only {
                    a.insert("readOnlyHint".into(), json!(v));
                }
                if let Some(v) = h.destructive {
                    a.insert("destructiveHint".into(), json!(v));
                }
                if let Some(v) = h.open_world {
                    a.insert("openWorldHint".into(), json!(v));
                }
                o.insert("annotations".into(), Value::Object(a));
            }
            if let Some(g) = d.governed {
                o.insert("governed".into(), json!(g));
            }
            if let Some(r) = &d.ungoverned_reason {
                o.insert("ungoverned_reason".into(), json!(r));
            }
            Value::Object(o)
        })
        .collect();
    top.insert("tools".into(), Value::Array(tools));
    let agents: Vec<Value> = c
        .agents
        .iter()
        .map(|a| {
            let mut o = Map::new();
            o.insert("name".into(), json!(a.name));
            o.insert("allowed_tools".into(), json!(a.allowed));
            if let Some(v) = a.confidential {
                o.insert("confidential".into(), json!(v));
            }
            if let Some(v) = a.as_tool {
                o.insert("as_tool".into(), json!(v));
            }
            if !a.overrides.is_empty() {
                let ov: Vec<Value> = a
                    .overrides
                    .iter()
                    .map(|(t, m)| json!({ "tool": t, "approval": m.as_str() }))
                    .collect();
                o.insert("overrides".into(), Value::Array(ov));
            }
            if let Some(p) = &a.parent {
                o.insert("parent".into(), json!(p));
            }
            Value::Object(o)
        })
        .collect();
    top.insert("agents".into(), Value::Array(agents));
    if let Some(p) = &c.policy {
        let mut o = Map::new();
        if let Some(d) = p.default {
            o.insert("default".into(), json!(d));
        }
        o.insert(
            "rules".into(),
            Value::Array(p.rules.iter().map(rule_json).collect()),
        );
        top.insert("policy".into(), Value::Object(o));
    }
    let mut limits = Map::new();
    if let Some(b) = c.max_input_bytes {
        limits.insert("max_input_bytes".into(), json!(b));
    }
    if let Some(d) = c.max_input_depth {
        limits.insert("max_input_depth".into(), json!(d));
    }
    if !limits.is_empty() {
        top.insert("limits".into(), Value::Object(limits));
    }
    Value::Object(top)
}

fn call_json(c: &Call) -> Value {
    let mut o = Map::new();
    o.insert("agent".into(), json!(c.agent));
    if let Some(p) = &c.profile {
        o.insert("profile".into(), json!(p));
    }
    let identity = |o: &mut Map<String, Value>, k: Kind, s: &str, t: &str| {
        match k {
            Kind::Local => o.insert("toolset".into(), json!(s)),
            Kind::Mcp => o.insert("server".into(), json!(s)),
            Kind::Http => o.insert("kind".into(), json!("http")),
        };
        o.insert("tool".into(), json!(t));
    };
    match &c.tool {
        ToolSpec::Name(n) => {
            o.insert("name".into(), json!(n));
        }
        ToolSpec::Identity(k, s, t) => identity(&mut o, *k, s, t),
        ToolSpec::Both(n, k, s, t) => {
            o.insert("name".into(), json!(n));
            identity(&mut o, *k, s, t);
        }
    }
    o.insert("input".into(), c.input.clone());
    o.insert(
        "run".into(),
        json!({ "mode": c.mode.as_str(), "background": c.background }),
    );
    Value::Object(o)
}

// =======================================================================================
// The reference, from SPEC.md.
// =======================================================================================

/// R1: one segment normalised; `None` when empty.
fn normalise(segment: &str) -> Option<String> {
    let mut out = String::new();
    for c in segment.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '-' {
            c
        } else {
            '_'
        };
        if c == '_' && out.ends_with('_') {
            continue;
        }
        out.push(c);
    }
    let out = out.trim_matches('_').to_owned();
    (!out.is_empty()).then_some(out)
}

/// The tool's own name (R2, R3, R41): for a tool of a server with a `tool_prefix`, whose
/// listed name starts with the prefix (ASCII case-insensitively) and is longer than it, the
/// listed name without the prefix; otherwise the listed name.
fn own_name(d: &Decl) -> &str {
    let Some(p) = d.prefix.as_deref().filter(|_| d.kind == Kind::Mcp) else {
        return &d.name;
    };
    match (d.name.get(..p.len()), d.name.get(p.len()..)) {
        (Some(head), Some(rest)) if !rest.is_empty() && same(head, p) => rest,
        _ => &d.name,
    }
}

/// R42: a group is ungoverned only when every record behind its name says `governed: false`
/// (R24: otherwise the tool and each of its records are governed).
fn ungoverned(g: &Group) -> bool {
    g.records
        .iter()
        .all(|r| r.kind == Kind::Local && r.governed == Some(false))
}

/// §8: a subagent id never shadows a profile: a call whose `agent` names a profile (ASCII
/// case-insensitively) other than the one `profile` names.
fn shadows(cfg: &Cfg, call: &Call) -> bool {
    call.profile.as_deref().is_some_and(|p| {
        cfg.agents
            .iter()
            .any(|a| same(&a.name, &call.agent) && !same(&a.name, p))
    })
}

/// §8 (blank): empty or Unicode White_Space only, as `str::trim`.
fn blank(s: &str) -> bool {
    s.trim().is_empty()
}

/// R1: the qualified (wire) name.
fn qualified(d: &Decl) -> String {
    let name = normalise(own_name(d)).unwrap_or_default();
    match d.kind {
        Kind::Http => name,
        Kind::Local | Kind::Mcp => {
            format!("{}__{}", normalise(&d.source).unwrap_or_default(), name)
        }
    }
}

/// R2: ASCII case-insensitive comparison.
fn same(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// R2: a tool's identity is (kind, source ASCII case-insensitively, raw own name exactly).
fn same_identity(a: &Decl, b: &Decl) -> bool {
    a.kind == b.kind && same(&a.source, &b.source) && own_name(a) == own_name(b)
}

/// The records behind one qualified name (R24), each the latest revision of its identity.
#[derive(Debug)]
struct Group {
    qualified: String,
    records: Vec<Decl>,
}

/// The catalog: tools in arrival order, a same-identity entry revising its record (R29,
/// SPEC §7 `tools`), a different identity with an equal qualified name joining its group.
fn catalog(cfg: &Cfg) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for d in &cfg.tools {
        let q = qualified(d);
        match groups.iter_mut().find(|g| same(&g.qualified, &q)) {
            Some(g) => match g.records.iter_mut().find(|r| same_identity(r, d)) {
                Some(r) => *r = d.clone(),
                None => g.records.push(d.clone()),
            },
            None => groups.push(Group {
                qualified: q,
                records: vec![d.clone()],
            }),
        }
    }
    groups
}

fn trusted(cfg: &Cfg, server: &str) -> bool {
    cfg.servers.iter().any(|(n, t)| *t && same(n, server))
}

/// R8: one record's effective network scope is `egress`.
fn egress(d: &Decl) -> bool {
    if let Some(o) = d.network_override {
        return o == "egress";
    }
    if d.kind == Kind::Mcp {
        let open = d.hints.as_ref().and_then(|h| h.open_world).unwrap_or(true);
        if open {
            return true;
        }
    }
    d.network == Some("egress")
}

/// R28–R31: one record is exempt from the posture.
fn exempt(cfg: &Cfg, d: &Decl) -> bool {
    let by_declaration = match d.kind {
        Kind::Local | Kind::Http => d.read_only == Some(true),
        Kind::Mcp => {
            let h = d.hints.clone().unwrap_or_default();
            trusted(cfg, &d.source) && h.read_only == Some(true) && h.destructive != Some(true)
        }
    };
    let by_entry = cfg.exemptions.iter().any(|e| {
        same(&e.tool, own_name(d))
            && match &e.server {
                Some(s) => d.kind == Kind::Mcp && same(s, &d.source),
                None => d.kind != Kind::Mcp || trusted(cfg, &d.source),
            }
    });
    by_declaration || by_entry
}

/// An agent profile with its parent chain folded in (R39).
#[derive(Debug, Clone)]
struct Resolved {
    chain: Vec<Agent>,
}

impl Resolved {
    fn allows(&self, q: &str) -> bool {
        self.chain
            .iter()
            .all(|a| a.allowed.iter().any(|n| same(n, q)))
    }
    fn confidential(&self) -> bool {
        self.chain.iter().any(|a| a.confidential == Some(true))
    }
    fn as_tool(&self) -> bool {
        self.chain.iter().any(|a| a.as_tool == Some(true))
    }
    /// R9 per profile, R39 across the chain: the stricter of each profile's effective mode.
    fn mode(&self, q: &str, declared: Mode) -> Mode {
        self.chain
            .iter()
            .map(|a| {
                let last = a
                    .overrides
                    .iter()
                    .rev()
                    .find(|(t, _)| !t.trim().is_empty() && same(t, q));
                match last {
                    Some((_, m)) if *m != Mode::Default => *m,
                    _ => declared,
                }
            })
            .fold(Mode::Default, Mode::stricter)
    }
}

fn resolve(cfg: &Cfg, name: &str) -> Option<Resolved> {
    let mut chain = Vec::new();
    let mut next = cfg.agents.iter().find(|a| same(&a.name, name));
    while let Some(a) = next {
        chain.push(a.clone());
        if chain.len() > cfg.agents.len() {
            return None;
        }
        next = a
            .parent
            .as_deref()
            .and_then(|p| cfg.agents.iter().find(|b| same(&b.name, p)));
    }
    (!chain.is_empty()).then_some(Resolved { chain })
}

/// R19: `*` matches any run of characters, the rest literally, the whole name, ASCII
/// case-insensitively (R2). A plain backtracking matcher.
fn glob(pattern: &str, name: &str) -> bool {
    fn go(p: &[char], n: &[char]) -> bool {
        match p.split_first() {
            None => n.is_empty(),
            Some(('*', rest)) => (0..=n.len()).any(|i| go(rest, &n[i..])),
            Some((c, rest)) => match n.split_first() {
                Some((d, nrest)) => c.eq_ignore_ascii_case(d) && go(rest, nrest),
                None => false,
            },
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    go(&p, &n)
}

/// R20: numbers by numeric value (the generator's numbers are exact in `f64`).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// R20: one `when` entry against the input.
fn when_holds(input: &Value, path: &str, test: &Map<String, Value>) -> bool {
    let mut at = input;
    for seg in path.split('.') {
        match at {
            Value::Object(m) => match m.get(seg) {
                Some(v) => at = v,
                None => return false,
            },
            _ => return false,
        }
    }
    test.iter().all(|(op, operand)| match op.as_str() {
        "equals" => json_eq(at, operand),
        "in" => operand
            .as_array()
            .is_some_and(|l| l.iter().any(|x| json_eq(at, x))),
        "gt" | "gte" | "lt" | "lte" => match (at.as_f64(), operand.as_f64()) {
            (Some(v), Some(o)) if at.is_number() => match op.as_str() {
                "gt" => v > o,
                "gte" => v >= o,
                "lt" => v < o,
                _ => v <= o,
            },
            _ => false,
        },
        "matches" => match (at, operand) {
            (Value::String(s), Value::String(re)) => Regex::new(re).is_ok_and(|r| r.is_match(s)),
            _ => false,
        },
        other => panic!("the generator wrote an unknown test `{other}`"),
    })
}

/// R18–R19: a rule matches one record of the call.
fn rule_matches(rule: &Rule, d: &Decl, agent_name: &str, input: &Value) -> bool {
    let kind_ok = match rule.kind {
        Some(k) => k == d.kind,
        // R15, R18: a rule that names no kind applies to `mcp` and `http` tools only.
        None => d.kind != Kind::Local,
    };
    kind_ok
        && rule.tool.as_deref().is_none_or(|p| glob(p, own_name(d)))
        && rule
            .server
            .as_deref()
            .is_none_or(|p| d.kind == Kind::Mcp && glob(p, &d.source))
        && rule.agent.as_deref().is_none_or(|p| glob(p, agent_name))
        && rule.when.iter().all(|(p, t)| when_holds(input, p, t))
}

/// The tenant policy's verdict on one record (R16, R21).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Tenant {
    Allow,
    Ask,
    Deny,
}

/// What the reference expects of one call.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Run { auto_approved: bool },
    Ask,
    Refused(&'static str),
}

#[derive(Debug)]
struct Expected {
    outcome: Outcome,
    /// When non-empty, at least one of these must be among the decision's reasons (R16: a
    /// tenant `deny` refuses with the rule's reason).
    one_of: Vec<String>,
    /// Each of these must be among the reasons (R17: every reason that asked).
    all_of: Vec<String>,
}

impl Expected {
    fn just(outcome: Outcome) -> Self {
        Expected {
            outcome,
            one_of: Vec::new(),
            all_of: Vec::new(),
        }
    }
}

/// R36, §8: depth counts objects and arrays, a scalar none.
fn depth(v: &Value) -> usize {
    match v {
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// R14 step 1 and R2: the group a call's tool names, if any.
fn lookup<'g>(groups: &'g [Group], tool: &ToolSpec) -> Option<&'g Group> {
    let by_name = |n: &str| groups.iter().find(|g| same(&g.qualified, n));
    let by_identity = |k: Kind, s: &str, t: &str| {
        groups.iter().find(|g| {
            g.records.iter().any(|r| {
                r.kind == k && (k == Kind::Http || same(&r.source, s)) && same(own_name(r), t)
            })
        })
    };
    match tool {
        ToolSpec::Name(n) => by_name(n),
        ToolSpec::Identity(k, s, t) => by_identity(*k, s, t),
        ToolSpec::Both(n, k, s, t) => match (by_name(n), by_identity(*k, s, t)) {
            (Some(a), Some(b)) if std::ptr::eq(a, b) => Some(a),
            _ => None,
        },
    }
}

/// Whether the generated configuration must fail to load, and why.
fn load_error(cfg: &Cfg) -> Option<&'static str> {
    let enforce = cfg.enforce.unwrap_or(true);
    let posture = cfg.posture.unwrap_or(false);
    if !enforce && posture {
        return Some("R27: the posture is on while the governor is disarmed");
    }
    if let Some(p) = &cfg.policy {
        // R23: only no rules with the default `allow` is an empty policy.
        let empty = p.rules.is_empty() && p.default.is_none_or(|d| d == "allow");
        if !enforce && !empty {
            return Some("R15: a non-empty tenant policy while the governor is disarmed");
        }
    }
    for e in &cfg.exemptions {
        if e.server.is_none()
            && cfg.tools.iter().any(|d| {
                d.kind == Kind::Mcp && same(own_name(d), &e.tool) && !trusted(cfg, &d.source)
            })
        {
            return Some("R31: an exemption without `server` names a tool of an untrusted server");
        }
    }
    for (_, p) in &cfg.round_two.prefixes {
        if blank(p) {
            return Some("R41: a blank `tool_prefix`");
        }
    }
    for (i, a) in cfg.tools.iter().enumerate() {
        for b in &cfg.tools[..i] {
            if a.kind == Kind::Mcp
                && b.kind == Kind::Mcp
                && a.prefix.is_some()
                && same(&a.source, &b.source)
                && a.name != b.name
                && own_name(a) == own_name(b)
            {
                return Some("R41: two listed names of one prefixed server, one own name");
            }
        }
    }
    for d in &cfg.tools {
        if d.kind != Kind::Local && (d.governed.is_some() || d.ungoverned_reason.is_some()) {
            return Some("R42: `governed`/`ungoverned_reason` on an MCP or HTTP tool");
        }
        if d.governed == Some(false) && d.ungoverned_reason.as_deref().is_none_or(blank) {
            return Some("R42: `governed: false` without a reason");
        }
        if d.governed != Some(false) && d.ungoverned_reason.is_some() {
            return Some("R42: `ungoverned_reason` without `governed: false`");
        }
        if d.governed == Some(false) && d.approval == Some(Mode::RequireApproval) {
            return Some("R42: `approval: require_approval` on an ungoverned tool");
        }
    }
    let groups = catalog(cfg);
    for a in &cfg.agents {
        for (t, m) in &a.overrides {
            if *m == Mode::RequireApproval
                && !blank(t)
                && groups
                    .iter()
                    .any(|g| same(&g.qualified, t) && ungoverned(g))
            {
                return Some("R42: an override `require_approval` names an ungoverned tool");
            }
        }
    }
    None
}

/// The whole decision for one call, in R14's order.
fn reference(cfg: &Cfg, groups: &[Group], call: &Call) -> Expected {
    use Outcome::Refused;
    let enforce = cfg.enforce.unwrap_or(true);

    // 1. unknown_tool.
    let Some(group) = lookup(groups, &call.tool) else {
        return Expected::just(Refused("unknown_tool"));
    };
    // R36 (§7: checked right after unknown_tool).
    let bytes = serde_json::to_string(&call.input).unwrap_or_default().len();
    if depth(&call.input) > cfg.max_input_depth.unwrap_or(64)
        || bytes > cfg.max_input_bytes.unwrap_or(1 << 20)
    {
        return Expected::just(Refused("invalid_input"));
    }
    // 2. not_allowed: a missing profile, or a name not allowed (with the parent's, R39).
    let profile = call.profile.as_deref().unwrap_or(&call.agent);
    let Some(agent) = resolve(cfg, profile) else {
        return Expected::just(Refused("not_allowed"));
    };
    // §8: a subagent id never shadows another profile.
    if shadows(cfg, call) {
        return Expected::just(Refused("not_allowed"));
    }
    let q = &group.qualified;
    if !agent.allows(q) {
        return Expected::just(Refused("not_allowed"));
    }
    // 3. confidential (R7, R24: withheld if any record is).
    if agent.confidential() && group.records.iter().any(|r| r.confidential == Some(true)) {
        return Expected::just(Refused("confidential"));
    }
    // 4. air_gapped (R8, R24: egress if any record is).
    if cfg.air_gapped == Some(true) && group.records.iter().any(egress) {
        return Expected::just(Refused("air_gapped"));
    }
    // 5. denied by the effective mode (R9, R10, R24: the strictest declared mode, R39).
    let declared = group
        .records
        .iter()
        .map(|r| r.approval.unwrap_or(Mode::Default))
        .fold(Mode::Default, Mode::stricter);
    let mode = agent.mode(q, declared);
    if mode == Mode::Deny {
        return Expected::just(Refused("denied"));
    }
    // R42: the host's own ungoverned tool bypasses the approval decision entirely (its
    // effective mode cannot be `require_approval`: that is a load error).
    if ungoverned(group) {
        return Expected::just(Outcome::Run {
            auto_approved: false,
        });
    }
    // 6. no_approval_channel for the agent-level wrap (R11).
    if mode == Mode::RequireApproval && agent.as_tool() {
        return Expected::just(Refused("no_approval_channel"));
    }
    // 7. the approval decision.
    let agent_ask = mode == Mode::RequireApproval;
    // R22: an unreadable stored policy refuses every mcp and http call.
    if cfg.unreadable && group.records.iter().any(|r| r.kind != Kind::Local) {
        return Expected::just(Refused("policy_unreadable"));
    }
    let mut operator_ask = false;
    let mut ask_reasons = Vec::new();
    if enforce
        && !cfg.unreadable
        && let Some(p) = &cfg.policy
    {
        let rule_name = call.agent.as_str();
        let mut worst = Tenant::Allow;
        let mut deny_reasons = Vec::new();
        let mut deny_unexplained = false;
        for r in &group.records {
            let matching: Vec<&Rule> = p
                .rules
                .iter()
                .filter(|rule| rule_matches(rule, r, rule_name, &call.input))
                .collect();
            let effect_of = |e: &str| match e {
                "deny" => Tenant::Deny,
                "ask" => Tenant::Ask,
                _ => Tenant::Allow,
            };
            let verdict = if matching.is_empty() {
                // R21: the default applies to mcp and http calls no rule matches.
                if r.kind == Kind::Local {
                    Tenant::Allow
                } else {
                    effect_of(p.default.unwrap_or("allow"))
                }
            } else {
                matching
                    .iter()
                    .map(|rule| effect_of(rule.effect))
                    .max()
                    .unwrap_or(Tenant::Allow)
            };
            for rule in &matching {
                match (rule.effect, &rule.reason) {
                    ("deny", Some(why)) => deny_reasons.push(why.clone()),
                    ("deny", None) => deny_unexplained = true,
                    ("ask", Some(why)) => ask_reasons.push(why.clone()),
                    _ => {}
                }
            }
            if verdict == Tenant::Deny && matching.is_empty() {
                deny_unexplained = true;
            }
            worst = worst.max(verdict);
        }
        if worst == Tenant::Deny {
            // R16: refused `denied` with the deciding rule's reason.
            return Expected {
                outcome: Refused("denied"),
                one_of: if deny_unexplained {
                    Vec::new()
                } else {
                    deny_reasons
                },
                all_of: Vec::new(),
            };
        }
        operator_ask |= worst == Tenant::Ask;
    }
    // R27–R31, R24: one non-exempt record gates the tool (R15: only with the governor armed).
    if enforce && cfg.posture == Some(true) && group.records.iter().any(|r| !exempt(cfg, r)) {
        operator_ask = true;
    }
    if !agent_ask && !operator_ask {
        return Expected::just(Outcome::Run {
            auto_approved: false,
        });
    }
    // R25–R26: routing.
    // R17 fixes the reasons of the one question; a routed refusal's reasons are free.
    let routed = |outcome: Outcome| Expected {
        all_of: if outcome == Outcome::Ask {
            ask_reasons.clone()
        } else {
            Vec::new()
        },
        outcome,
        one_of: Vec::new(),
    };
    if call.mode == RunMode::AutoRejectRequired {
        return routed(Refused("rejected"));
    }
    if !operator_ask && call.mode == RunMode::AutoApproveRequired {
        return routed(Outcome::Run {
            auto_approved: true,
        });
    }
    let channel = cfg.channel.unwrap_or("none");
    if agent.as_tool() || channel == "none" {
        return routed(Refused("no_approval_channel"));
    }
    if call.background && channel == "interactive" {
        return routed(Refused("rejected"));
    }
    routed(Outcome::Ask)
}

// =======================================================================================
// Generators.
// =======================================================================================

/// Flips the ASCII case of the letters `mask` selects (R2 case variants).
fn recase(word: &str, mask: u32) -> String {
    word.chars()
        .enumerate()
        .map(|(i, c)| {
            if mask >> (i % 32) & 1 == 1 {
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

/// A word from `vocab`, usually as written, sometimes in another ASCII case (R2).
fn variant(vocab: &'static [&'static str]) -> impl Strategy<Value = String> + Clone {
    (
        select(vocab),
        prop_oneof![3 => Just(0u32), 1 => any::<u32>()],
    )
        .prop_map(|(w, mask)| recase(w, mask))
}

const TOOLSETS: &[&str] = &["coding", "Coding", "github", "memory"];
const SERVERS: &[&str] = &["github", "GitHub", "notion", "Web Search"];
/// Own names, with R1 collisions (`list.issues`/`list_issues`) and R2 case variants.
const TOOL_NAMES: &[&str] = &[
    "list.issues",
    "list_issues",
    "List_Issues",
    "create_issue",
    "search",
    "Search",
    "write_file",
    "refund_order",
    "memory_save",
];
const AGENT_NAMES: &[&str] = &["support", "Billing", "ops", "dev"];
/// Subagent ids; the last four spell profile names (§8: an id naming another profile than
/// the call's `profile` is refused `not_allowed`; its own profile's name is fine).
const SUBAGENT_IDS: &[&str] = &[
    "sub-1", "Sub-2", "helper-7", "support", "Billing", "ops", "dev",
];
/// R41: prefixes a gateway may list MCP tools under (recased sometimes).
const LISTED_PREFIXES: &[&str] = &["gh-", "GH-", "list", "n."];
/// R41: `servers.NAME.tool_prefix` values: used as written (` gh-` never matches `gh-x`),
/// `search` is a whole tool name (kept, R41), and the blank ones are load errors.
const SERVER_PREFIXES: &[&str] = &["gh-", "Gh-", "list", "n.", "search", " gh-"];
const BLANK_PREFIXES: &[&str] = &["", " ", "\u{2003}"];
/// R42: `(governed, ungoverned_reason)` pairs that are load errors on a toolset tool.
const BAD_GOVERNED: &[(Option<bool>, Option<&str>)] = &[
    (Some(false), None),
    (Some(false), Some(" ")),
    (Some(false), Some("\u{2003}")),
    (None, Some("reads what it was given")),
    (Some(true), Some("reads what it was given")),
];
const UNKNOWN_NAMES: &[&str] = &[
    "nope",
    "github__nope",
    "github__list.issues",
    "coding____write_file",
    "GITHUB__LIST_ISSUES",
    "refund",
];
const TOOL_PATTERNS: &[&str] = &[
    "*",
    "list_*",
    "LIST*",
    "search",
    "*issue*",
    "refund_order",
    "create_issue",
    "list.issues",
    "*_file",
    "Search",
    "gh-*",
    "GH-create_issue",
];
const SERVER_PATTERNS: &[&str] = &["github", "GIT*", "notion", "web search", "*", "Web*"];
const AGENT_PATTERNS: &[&str] = &["support", "sub-*", "*", "Billing", "OPS", "helper-?"];

fn kind() -> impl Strategy<Value = Kind> + Clone {
    prop_oneof![Just(Kind::Local), Just(Kind::Mcp), Just(Kind::Http)]
}

fn mode() -> impl Strategy<Value = Mode> + Clone {
    prop_oneof![
        Just(Mode::Default),
        Just(Mode::AutoApprove),
        Just(Mode::RequireApproval),
        Just(Mode::Deny),
    ]
}

fn scope() -> impl Strategy<Value = &'static str> + Clone {
    select(&["none", "incidental", "egress"][..])
}

fn decl() -> impl Strategy<Value = Decl> + Clone {
    (
        kind(),
        variant(TOOLSETS),
        variant(SERVERS),
        select(TOOL_NAMES),
        proptest::option::weighted(0.5, mode()),
        proptest::option::weighted(0.4, scope()),
        proptest::option::weighted(0.2, scope()),
        proptest::option::weighted(0.5, any::<bool>()),
        proptest::option::weighted(0.3, any::<bool>()),
        proptest::option::weighted(
            0.7,
            (
                proptest::option::of(any::<bool>()),
                proptest::option::weighted(0.3, any::<bool>()),
                proptest::option::of(any::<bool>()),
            ),
        ),
        (
            listed_name(),
            governed(),
            proptest::option::weighted(0.8, prop_oneof![3 => Just(0u32), 1 => any::<u32>()]),
        ),
    )
        .prop_map(
            |(
                kind,
                toolset,
                server,
                name,
                approval,
                network,
                network_override,
                ro,
                conf,
                hints,
                (listed, (governed, ungoverned_reason, stray), gateway),
            )| {
                // R42's fields belong to toolset tools; on another kind they are a load
                // error, written only now and then (`stray`).
                let (governed, ungoverned_reason) = if kind == Kind::Local || stray {
                    (governed, ungoverned_reason)
                } else {
                    (None, None)
                };
                Decl {
                    kind,
                    source: match kind {
                        Kind::Local => toolset,
                        Kind::Mcp => server,
                        Kind::Http => String::new(),
                    },
                    // R41: a gateway lists an MCP tool under a prefix, sometimes.
                    name: match (kind, listed) {
                        (Kind::Mcp, Some(l)) => l,
                        _ => name.to_owned(),
                    },
                    approval,
                    network,
                    network_override,
                    read_only: if kind == Kind::Mcp { None } else { ro },
                    confidential: conf,
                    hints: if kind == Kind::Mcp {
                        hints.map(|(read_only, destructive, open_world)| Hints {
                            read_only,
                            destructive,
                            open_world,
                        })
                    } else {
                        None
                    },
                    prefix: None,
                    gateway,
                    governed,
                    ungoverned_reason,
                }
            },
        )
}

/// R41: an MCP tool's listed name under some gateway prefix: the prefix and an own name, or
/// only the prefix; `None` keeps the plain name.
fn listed_name() -> impl Strategy<Value = Option<String>> + Clone {
    prop_oneof![
        4 => Just(None),
        4 => (variant(LISTED_PREFIXES), select(TOOL_NAMES))
            .prop_map(|(p, n)| Some(format!("{p}{n}"))),
        1 => variant(LISTED_PREFIXES).prop_map(Some),
    ]
}

/// R42: `(governed, ungoverned_reason, stray)`: mostly unset, often a valid ungoverned
/// tool, now and then a combination that is a load error; `stray` writes the fields on an
/// MCP or HTTP tool too (a load error).
fn governed() -> impl Strategy<Value = (Option<bool>, Option<String>, bool)> + Clone {
    let pair = prop_oneof![
        12 => Just((None, None)),
        5 => Just((Some(false), Some(String::from("reads a skill's instructions")))),
        1 => Just((Some(true), None)),
        1 => select(BAD_GOVERNED).prop_map(|(g, r)| (g, r.map(str::to_owned))),
    ];
    (pair, proptest::bool::weighted(0.02)).prop_map(|((g, r), stray)| (g, r, stray))
}

/// A qualified name an agent may list or a call may use: mostly one of the declared tools'
/// (in another case sometimes), else an unregistered or un-normalised name.
fn name_for(tools: &[Decl]) -> BoxedStrategy<String> {
    let known: Vec<String> = tools.iter().map(qualified).collect();
    if known.is_empty() {
        return select(UNKNOWN_NAMES).prop_map(str::to_owned).boxed();
    }
    prop_oneof![
        8 => (select(known), prop_oneof![3 => Just(0u32), 1 => any::<u32>()])
            .prop_map(|(n, mask)| recase(&n, mask)),
        1 => select(UNKNOWN_NAMES).prop_map(str::to_owned),
    ]
    .boxed()
}

fn agents(tools: &[Decl]) -> impl Strategy<Value = Vec<Agent>> + use<> {
    let every: Vec<String> = tools.iter().map(qualified).collect();
    let allowed = prop_oneof![
        1 => proptest::collection::vec(name_for(tools), 0..6),
        5 => (Just(every), proptest::collection::vec(name_for(tools), 0..3))
            .prop_map(|(mut all, extra)| {
                all.extend(extra);
                all
            }),
    ];
    let one = (
        allowed,
        proptest::option::weighted(0.3, any::<bool>()),
        proptest::option::weighted(0.3, any::<bool>()),
        proptest::collection::vec(
            (
                prop_oneof![
                    6 => name_for(tools),
                    1 => select(&[" ", "\u{2003}", ""][..]).prop_map(str::to_owned),
                ],
                mode(),
            ),
            0..3,
        ),
        proptest::option::weighted(0.35, (any::<prop::sample::Index>(), any::<u32>())),
    );
    (
        proptest::sample::subsequence(AGENT_NAMES, 1..=AGENT_NAMES.len()),
        proptest::collection::vec(one, AGENT_NAMES.len()),
    )
        .prop_map(|(names, parts)| {
            let mut out: Vec<Agent> = Vec::new();
            for (name, (allowed, confidential, as_tool, overrides, parent)) in
                names.into_iter().zip(parts)
            {
                // Only an earlier profile may be a parent: no cycles (R39's cycles are a
                // load error this test does not generate).
                let parent = parent.and_then(|(i, mask)| {
                    (!out.is_empty()).then(|| recase(&out[i.index(out.len())].name, mask))
                });
                out.push(Agent {
                    name: name.to_owned(),
                    allowed,
                    confidential,
                    as_tool,
                    overrides,
                    parent,
                });
            }
            out
        })
}

fn when_entry() -> impl Strategy<Value = (&'static str, Map<String, Value>)> + Clone {
    let number = || select(&[0.0, 10.0, 100.0, 100.5, 1000.0][..]).prop_map(|n| json!(n));
    let int = || select(&[0i64, 10, 100, 1000][..]).prop_map(|n| json!(n));
    let test = |op: &'static str, v: BoxedStrategy<Value>| {
        v.prop_map(move |v| {
            let mut m = Map::new();
            m.insert(op.to_owned(), v);
            m
        })
    };
    prop_oneof![
        (
            Just("amount"),
            prop_oneof![
                test("gt", int().boxed()),
                test("gte", number().boxed()),
                test("lt", int().boxed()),
                test("lte", number().boxed()),
                test("equals", prop_oneof![int(), number()].boxed()),
                test(
                    "in",
                    proptest::collection::vec(int(), 0..3)
                        .prop_map(Value::from)
                        .boxed()
                ),
                Just(Map::new()),
            ]
        ),
        (
            Just("customer.tier"),
            prop_oneof![
                test(
                    "equals",
                    select(&["gold", "free", "Gold"][..])
                        .prop_map(|s| json!(s))
                        .boxed()
                ),
                test(
                    "matches",
                    select(&["^gold", "(?i)GOLD", "e{2}", "^$"][..])
                        .prop_map(|s| json!(s))
                        .boxed()
                ),
                test("in", Just(json!(["gold", "silver"])).boxed()),
            ]
        ),
        (
            Just("note"),
            prop_oneof![
                test("equals", Just(Value::Null).boxed()),
                test("matches", Just(json!("urgent")).boxed()),
                Just(Map::new()),
            ]
        ),
    ]
}

fn rule() -> impl Strategy<Value = Rule> + Clone {
    (
        select(&["allow", "ask", "deny"][..]),
        proptest::option::weighted(0.6, select(TOOL_PATTERNS)),
        proptest::option::weighted(0.25, select(SERVER_PATTERNS)),
        proptest::option::weighted(0.35, kind()),
        proptest::option::weighted(0.25, select(AGENT_PATTERNS)),
        proptest::collection::vec(when_entry(), 0..2),
        proptest::option::weighted(0.7, 0u32..1000),
    )
        .prop_map(|(effect, tool, server, kind, agent, when, reason)| {
            let mut when = when;
            when.dedup_by_key(|(p, _)| *p);
            Rule {
                effect,
                tool: tool.map(str::to_owned),
                server: server.map(str::to_owned),
                kind,
                agent: agent.map(str::to_owned),
                when,
                reason: reason.map(|n| format!("rule reason {n}")),
            }
        })
}

fn policy() -> impl Strategy<Value = Pol> + Clone {
    (
        proptest::option::weighted(0.5, select(&["allow", "ask", "deny"][..])),
        proptest::collection::vec(rule(), 0..5),
    )
        .prop_map(|(default, rules)| Pol { default, rules })
}

/// SPEC §9's second round: R41's `servers.NAME.tool_prefix`, one draw per possible server
/// entry (zipped with the generated `servers` in [`cfg`], which copies each prefix onto its
/// server's MCP tools for [`own_name`]). R42's `governed: false` tools come from
/// [`governed`], R41's prefixed listed names from [`listed_name`], and §8's shadowing ids
/// from [`SUBAGENT_IDS`].
///
/// The second value sometimes lists one MCP tool again under another spelling: its own name
/// without the prefix, or the prefix in another case (R41: a load error when the server is
/// prefixed and the listed names differ; the same listed name is a revision).
fn round_two() -> impl Strategy<Value = (Vec<Option<String>>, Option<Echo>)> + Clone {
    (
        proptest::collection::vec(
            proptest::option::weighted(
                0.7,
                prop_oneof![
                    20 => select(SERVER_PREFIXES),
                    1 => select(BLANK_PREFIXES),
                ]
                .prop_map(str::to_owned),
            ),
            3,
        ),
        proptest::option::weighted(0.08, (any::<prop::sample::Index>(), any::<u32>())),
    )
}

/// R41: which MCP tool to list again, and the case mask of its new spelling (mask 0: its
/// own name alone).
type Echo = (prop::sample::Index, u32);

/// Lists a tool of a prefixed server again under another spelling (see [`round_two`]).
fn echo(tools: &mut Vec<Decl>, (i, mask): Echo) {
    let prefixed: Vec<&Decl> = tools
        .iter()
        .filter(|d| d.kind == Kind::Mcp && d.prefix.is_some())
        .collect();
    if prefixed.is_empty() {
        return;
    }
    let mut again = prefixed[i.index(prefixed.len())].clone();
    let own = own_name(&again).to_owned();
    let head = again.name.len() - own.len();
    again.name = if mask == 0 {
        own
    } else {
        format!("{}{own}", recase(&again.name[..head], mask))
    };
    tools.push(again);
}

fn cfg() -> impl Strategy<Value = Cfg> {
    proptest::collection::vec(decl(), 1..7)
        .prop_flat_map(|tools| {
            let servers =
                proptest::sample::subsequence(&["github", "notion", "web search"][..], 0..=3)
                    .prop_flat_map(|names| {
                        let n = names.len();
                        (
                            Just(names),
                            proptest::collection::vec((any::<u32>(), any::<bool>()), n),
                        )
                    })
                    .prop_map(|(names, trust)| {
                        names
                            .into_iter()
                            .zip(trust)
                            .map(|(n, (mask, t))| (recase(n, mask), t))
                            .collect::<Vec<_>>()
                    });
            let exemptions = proptest::collection::vec(
                (variant(TOOL_NAMES), proptest::option::of(variant(SERVERS)))
                    .prop_map(|(tool, server)| Exemption { tool, server }),
                0..3,
            );
            (
                Just(tools.clone()),
                agents(&tools),
                (
                    proptest::option::weighted(0.15, any::<bool>()),
                    proptest::option::weighted(0.3, any::<bool>()),
                    proptest::option::weighted(0.8, select(&["none", "interactive", "inbox"][..])),
                    proptest::option::weighted(0.4, any::<bool>()),
                ),
                exemptions,
                servers,
                proptest::option::weighted(0.7, policy()),
                prop_oneof![15 => Just(false), 1 => Just(true)],
                (
                    proptest::option::weighted(0.15, 8usize..120),
                    proptest::option::weighted(0.15, 1usize..5),
                ),
                round_two(),
            )
        })
        .prop_map(
            |(
                tools,
                agents,
                (enforce, air_gapped, channel, posture),
                exemptions,
                servers,
                policy,
                unreadable,
                (max_input_bytes, max_input_depth),
                (prefixes, echoed),
            )| {
                let round_two = RoundTwo {
                    prefixes: servers
                        .iter()
                        .zip(prefixes)
                        .filter_map(|((n, _), p)| Some((n.clone(), p?)))
                        .collect(),
                };
                let mut tools: Vec<Decl> = tools
                    .into_iter()
                    .map(|mut d| {
                        if d.kind == Kind::Mcp {
                            d.prefix = round_two
                                .prefixes
                                .iter()
                                .find(|(n, _)| same(n, &d.source))
                                .map(|(_, p)| p.clone());
                            if let (Some(p), Some(mask)) = (&d.prefix, d.gateway) {
                                d.name = format!("{}{}", recase(p, mask), d.name);
                            }
                        }
                        d
                    })
                    .collect();
                if let Some(e) = echoed {
                    echo(&mut tools, e);
                }
                Cfg {
                    enforce,
                    air_gapped,
                    channel,
                    posture,
                    exemptions,
                    servers,
                    tools,
                    agents,
                    policy,
                    unreadable,
                    max_input_bytes,
                    max_input_depth,
                    round_two,
                }
            },
        )
}

fn input() -> impl Strategy<Value = Value> {
    (
        proptest::option::of(select(vec![
            json!(-5),
            json!(0),
            json!(10),
            json!(10.0),
            json!(99),
            json!(100),
            json!(100.5),
            json!(101),
            json!(1000),
            json!("100"),
        ])),
        proptest::option::of(prop_oneof![
            select(&["gold", "free", "Gold", "", "green"][..]).prop_map(|t| json!({ "tier": t })),
            Just(json!("gold")),
            Just(json!({})),
        ]),
        proptest::option::of(select(vec![Value::Null, json!("urgent"), json!("x")])),
        prop_oneof![4 => Just(0usize), 1 => 1usize..6],
    )
        .prop_map(|(amount, customer, note, nest)| {
            let mut m = Map::new();
            if let Some(a) = amount {
                m.insert("amount".into(), a);
            }
            if let Some(c) = customer {
                m.insert("customer".into(), c);
            }
            if let Some(n) = note {
                m.insert("note".into(), n);
            }
            if nest > 0 {
                let mut v = json!([1]);
                for _ in 1..nest {
                    v = json!({ "n": v });
                }
                m.insert("nest".into(), v);
            }
            Value::Object(m)
        })
}

fn tool_spec(tools: &[Decl]) -> BoxedStrategy<ToolSpec> {
    let by_name = name_for(tools).prop_map(ToolSpec::Name);
    if tools.is_empty() {
        return by_name.boxed();
    }
    let ids: Vec<Decl> = tools.to_vec();
    let identity = (
        select(ids.clone()),
        any::<u32>(),
        any::<u32>(),
        prop_oneof![8 => Just(None), 1 => kind().prop_map(Some)],
        proptest::bool::weighted(0.15),
    )
        .prop_map(|(d, m1, m2, other_kind, listed)| {
            // R41: a call by identity gives the own name; the listed name is a wrong one
            // (unless the two are the same).
            let name = if listed { &d.name } else { own_name(&d) };
            (
                other_kind.unwrap_or(d.kind),
                recase(&d.source, m1 & 1),
                recase(name, m2 & 3),
            )
        });
    let both = (identity.clone(), name_for(tools))
        .prop_flat_map(|((k, s, t), other)| {
            let own = Decl {
                kind: k,
                source: s.clone(),
                name: t.clone(),
                approval: None,
                network: None,
                network_override: None,
                read_only: None,
                confidential: None,
                hints: None,
                prefix: None,
                gateway: None,
                governed: None,
                ungoverned_reason: None,
            };
            let consistent = qualified(&own);
            (
                prop_oneof![5 => Just(consistent), 1 => Just(other)],
                Just((k, s, t)),
            )
        })
        .prop_map(|(n, (k, s, t))| ToolSpec::Both(n, k, s, t));
    prop_oneof![
        3 => by_name,
        2 => identity.prop_map(|(k, s, t)| ToolSpec::Identity(k, s, t)),
        1 => both,
    ]
    .boxed()
}

fn calls(cfg: &Cfg) -> impl Strategy<Value = Vec<Call>> + use<> {
    let profiles: Vec<String> = cfg.agents.iter().map(|a| a.name.clone()).collect();
    let profile = prop_oneof![
        8 => select(profiles),
        1 => Just(String::from("nobody")),
    ];
    let one = (
        profile,
        any::<u32>(),
        proptest::option::weighted(0.25, variant(SUBAGENT_IDS)),
        tool_spec(&cfg.tools),
        input(),
        proptest::option::weighted(0.3, any::<bool>()),
        prop_oneof![
            Just(RunMode::UseAgentPolicy),
            Just(RunMode::AutoApproveRequired),
            Just(RunMode::AutoRejectRequired),
        ],
        any::<bool>(),
    )
        .prop_map(
            |(profile, mask, sub, tool, input, as_text, mode, background)| {
                let profile = recase(&profile, mask);
                let (agent, profile) = match sub {
                    Some(id) => (id, Some(profile)),
                    None => (profile, None),
                };
                Call {
                    agent,
                    profile,
                    tool,
                    input,
                    as_text,
                    mode,
                    background,
                }
            },
        );
    proptest::collection::vec(one, 1..10)
}

// =======================================================================================
// The comparison.
// =======================================================================================

fn to_ref(k: Kind, s: &str, t: &str) -> ToolIdentity {
    match k {
        Kind::Local => ToolIdentity::toolset(s, t),
        Kind::Mcp => ToolIdentity::mcp(s, t),
        Kind::Http => ToolIdentity::http(t),
    }
}

fn engine_outcome(verdict: &Verdict) -> Outcome {
    match verdict {
        Verdict::Run { auto_approved } => Outcome::Run {
            auto_approved: *auto_approved,
        },
        Verdict::Ask { .. } => Outcome::Ask,
        Verdict::Refused(code) => Outcome::Refused(code.as_str()),
    }
}

/// Loads `cfg` with the engine; `None` when it (rightly) refused to load.
fn load(cfg: &Cfg) -> Result<Option<Governance>, TestCaseError> {
    let text = serde_json::to_string_pretty(&config_json(cfg)).unwrap_or_default();
    let loaded = config::load_str(&text, Format::Json);
    match (load_error(cfg), loaded) {
        (Some(_), Err(_)) => Ok(None),
        (Some(why), Ok(_)) => Err(TestCaseError::fail(format!(
            "the engine loaded a configuration the SPEC refuses ({why}):\n{text}"
        ))),
        (None, Err(e)) => Err(TestCaseError::fail(format!(
            "the engine refused a valid configuration: {e:?}\n{text}"
        ))),
        (None, Ok(gov)) if cfg.unreadable => gov
            .with_policy(PolicyState::Unreadable(String::from("generated")))
            .map(Some)
            .map_err(|e| TestCaseError::fail(format!("with_policy: {e:?}"))),
        (None, Ok(gov)) => Ok(Some(gov)),
    }
}

fn check_call(
    cfg: &Cfg,
    groups: &[Group],
    gov: &Governance,
    call: &Call,
) -> Result<(), TestCaseError> {
    let tool = match &call.tool {
        ToolSpec::Name(n) => ToolRef::Name(n.clone()),
        ToolSpec::Identity(k, s, t) => ToolRef::Identity(to_ref(*k, s, t)),
        ToolSpec::Both(n, k, s, t) => ToolRef::Both {
            name: n.clone(),
            identity: to_ref(*k, s, t),
        },
    };
    let agent = match &call.profile {
        Some(p) => AgentRef::subagent(p.clone(), call.agent.clone()),
        None => AgentRef::profile(call.agent.clone()),
    };
    let text = match call.as_text {
        Some(true) => serde_json::to_string_pretty(&call.input).unwrap_or_default(),
        Some(false) => serde_json::to_string(&call.input).unwrap_or_default(),
        None => String::new(),
    };
    let input = match call.as_text {
        Some(_) => CallInput::Text(&text),
        None => CallInput::Value(&call.input),
    };
    let d = gov.decide(CallView {
        tool: &tool,
        agent: &agent,
        input,
        run: RunContext {
            mode: call.mode,
            background: call.background,
        },
    });
    let want = reference(cfg, groups, call);
    let got = engine_outcome(&d.verdict);
    let show = || {
        format!(
            "config:\n{}\ncall:\n{}\nengine: {:?} reasons {:?}\nreference: {:?}",
            serde_json::to_string_pretty(&config_json(cfg)).unwrap_or_default(),
            serde_json::to_string_pretty(&call_json(call)).unwrap_or_default(),
            d.verdict,
            d.reasons,
            want
        )
    };
    prop_assert_eq!(&got, &want.outcome, "outcome differs\n{}", show());
    if let Verdict::Ask { channel } = d.verdict {
        let configured = match cfg.channel.unwrap_or("none") {
            "interactive" => ChannelKind::Interactive,
            "inbox" => ChannelKind::Inbox,
            _ => ChannelKind::None,
        };
        prop_assert_eq!(channel, configured, "the ask's channel\n{}", show());
    }
    if !want.one_of.is_empty() {
        prop_assert!(
            want.one_of
                .iter()
                .any(|w| d.reasons.iter().any(|r| r.contains(w.as_str()))),
            "R16: a tenant deny gives its rule's reason\n{}",
            show()
        );
    }
    for w in &want.all_of {
        prop_assert!(
            d.reasons.iter().any(|r| r.contains(w.as_str())),
            "R17: every reason that asked is in the one question ({w})\n{}",
            show()
        );
    }
    Ok(())
}

/// What exposure shows of one tool (R6–R13): raw, wrapped, or omitted with a code.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Standing {
    Raw,
    Wrapped,
    Omitted(&'static str),
}

/// R6–R13 for one agent, per group, with the same aspects as the call-time checks.
fn reference_exposure(cfg: &Cfg, groups: &[Group], agent: &Resolved) -> Vec<(String, Standing)> {
    let enforce = cfg.enforce.unwrap_or(true);
    groups
        .iter()
        .map(|g| {
            let q = &g.qualified;
            let declared = g
                .records
                .iter()
                .map(|r| r.approval.unwrap_or(Mode::Default))
                .fold(Mode::Default, Mode::stricter);
            let mode = agent.mode(q, declared);
            let posture =
                enforce && cfg.posture == Some(true) && g.records.iter().any(|r| !exempt(cfg, r));
            let standing = if !agent.allows(q) {
                Standing::Omitted("not_allowed")
            } else if agent.confidential() && g.records.iter().any(|r| r.confidential == Some(true))
            {
                Standing::Omitted("confidential")
            } else if cfg.air_gapped == Some(true) && g.records.iter().any(egress) {
                Standing::Omitted("air_gapped")
            } else if mode == Mode::Deny {
                Standing::Omitted("denied")
            } else if ungoverned(g) {
                // R42: exposed raw, even to an agent that runs as a tool.
                Standing::Raw
            } else if mode == Mode::RequireApproval || posture {
                // R11: with no approval channel, a tool that would be wrapped is omitted.
                if agent.as_tool() {
                    Standing::Omitted("no_approval_channel")
                } else {
                    Standing::Wrapped
                }
            } else {
                Standing::Raw
            };
            (q.to_ascii_lowercase(), standing)
        })
        .collect()
}

/// R6–R13: `expose` for every profile equals the reference; every registered tool is in
/// exactly one of the two lists (R13).
fn check_exposure(cfg: &Cfg, groups: &[Group], gov: &Governance) -> Result<(), TestCaseError> {
    for a in &cfg.agents {
        let Some(agent) = resolve(cfg, &a.name) else {
            return Err(TestCaseError::fail(format!(
                "the reference lost `{}`",
                a.name
            )));
        };
        let e = gov
            .expose(&a.name)
            .map_err(|e| TestCaseError::fail(format!("expose: {e}")))?;
        let mut got: Vec<(String, Standing)> = e
            .tools
            .iter()
            .map(|t| {
                let s = if t.wrapped {
                    Standing::Wrapped
                } else {
                    Standing::Raw
                };
                (t.name.to_ascii_lowercase(), s)
            })
            .chain(e.omitted.iter().map(|t| {
                (
                    t.name.to_ascii_lowercase(),
                    Standing::Omitted(t.refusal.code.as_str()),
                )
            }))
            .collect();
        got.sort_by(|x, y| x.0.cmp(&y.0));
        let mut want = reference_exposure(cfg, groups, &agent);
        want.sort_by(|x, y| x.0.cmp(&y.0));
        prop_assert_eq!(
            &got,
            &want,
            "exposure of `{}` differs\nconfig:\n{}",
            a.name,
            serde_json::to_string_pretty(&config_json(cfg)).unwrap_or_default()
        );
    }
    Ok(())
}

/// Counters for the figure the long run reports (configurations, calls, exposures).
static CONFIGS: AtomicUsize = AtomicUsize::new(0);
static LOADED: AtomicUsize = AtomicUsize::new(0);
static CALLS: AtomicUsize = AtomicUsize::new(0);
static EXPOSED: AtomicUsize = AtomicUsize::new(0);

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// R6–R31, R36, R39, R41, R42, §8: the engine's whole decision equals the SPEC reference's, for
    /// random configurations and calls; and so does each profile's exposure (R6–R13).
    #[test]
    fn decide_matches_the_spec_reference(
        (cfg, calls) in cfg().prop_flat_map(|c| {
            let calls = calls(&c);
            (Just(c), calls)
        })
    ) {
        let done = CONFIGS.fetch_add(1, Relaxed) + 1;
        if let Some(gov) = load(&cfg)? {
            let groups = catalog(&cfg);
            for call in &calls {
                check_call(&cfg, &groups, &gov, call)?;
            }
            check_exposure(&cfg, &groups, &gov)?;
            LOADED.fetch_add(1, Relaxed);
            CALLS.fetch_add(calls.len(), Relaxed);
            EXPOSED.fetch_add(cfg.agents.len(), Relaxed);
        }
        if done == cases() as usize {
            eprintln!(
                "decide_reference: {done} configurations ({} loaded, the rest rightly refused), \
                 {} calls decided, {} exposures compared",
                LOADED.load(Relaxed),
                CALLS.load(Relaxed),
                EXPOSED.load(Relaxed)
            );
        }
    }
}

/// Which second-round features (SPEC §9) decided or shaped one call, for the tally of
/// [`the_generator_reaches_every_outcome`].
fn round_two_features(
    cfg: &Cfg,
    groups: &[Group],
    call: &Call,
    outcome: &Outcome,
) -> Vec<&'static str> {
    let mut out = Vec::new();
    let Some(group) = lookup(groups, &call.tool) else {
        return out;
    };
    let ran = matches!(outcome, Outcome::Run { .. });
    let posture = cfg.enforce.unwrap_or(true) && cfg.posture == Some(true);
    if ungoverned(group) {
        if ran && posture {
            out.push("R42: ungoverned runs under the posture");
        }
        let local_rule = cfg.policy.as_ref().is_some_and(|p| {
            p.rules.iter().any(|rule| {
                rule.kind == Some(Kind::Local)
                    && rule.effect != "allow"
                    && group
                        .records
                        .iter()
                        .any(|r| rule_matches(rule, r, &call.agent, &call.input))
            })
        });
        if ran && local_rule && cfg.enforce.unwrap_or(true) && !cfg.unreadable {
            out.push("R42: ungoverned runs past a `kind: local` deny or ask rule");
        }
        if *outcome == Outcome::Refused("denied") {
            out.push("R42: ungoverned refused by an explicit deny");
        }
    } else if group.records.iter().any(|r| r.governed == Some(false))
        && !matches!(outcome, Outcome::Refused(_))
    {
        out.push("R24+R42: a mixed collision is governed");
    }
    let prefixed = |r: &Decl| own_name(r) != r.name;
    if !matches!(outcome, Outcome::Run { .. }) {
        let own_rule = cfg.policy.as_ref().is_some_and(|p| {
            p.rules.iter().any(|rule| {
                rule.effect != "allow"
                    && group.records.iter().any(|r| {
                        prefixed(r)
                            && rule.tool.as_deref().is_some_and(|t| !glob(t, &r.name))
                            && rule_matches(rule, r, &call.agent, &call.input)
                    })
            })
        });
        if own_rule && !cfg.unreadable {
            out.push("R41: a prefixed tool decided by an own-name rule");
        }
    }
    if let ToolSpec::Identity(_, _, t) = &call.tool
        && group
            .records
            .iter()
            .any(|r| prefixed(r) && same(own_name(r), t) && !same(&r.name, t))
    {
        out.push("R41: a prefixed tool called by identity with its own name");
    }
    if group
        .records
        .iter()
        .any(|r| r.kind == Kind::Mcp && r.prefix.is_some() && !prefixed(r))
    {
        out.push("R41: a listed name kept (no prefix match)");
    }
    if shadows(cfg, call) && *outcome == Outcome::Refused("not_allowed") {
        let profile = call.profile.as_deref().unwrap_or_default();
        if resolve(cfg, profile).is_some_and(|a| a.allows(&group.qualified)) {
            out.push("§8: a shadowing subagent id refused");
        }
    }
    if call
        .profile
        .as_deref()
        .is_some_and(|p| same(p, &call.agent))
        && ran
    {
        out.push("§8: a subagent id spelling its own profile runs");
    }
    out
}

/// The generator reaches every outcome of the reference — each refusal code, `run`,
/// `auto_approved`, `ask` — and valid as well as refused configurations (each second-round
/// load error on its own), and each second-round feature deciding a call (see
/// [`round_two_features`]), so the property above compares more than one branch.
/// Deterministic (a fixed seed).
#[test]
fn the_generator_reaches_every_outcome() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    use std::collections::BTreeMap;

    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    );
    let strategy = cfg().prop_flat_map(|c| {
        let calls = calls(&c);
        (Just(c), calls)
    });
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..2000 {
        let (cfg, calls) = strategy
            .new_tree(&mut runner)
            .map(|t| t.current())
            .unwrap_or_else(|e| panic!("generator: {e}"));
        if let Some(why) = load_error(&cfg) {
            // Second-round load errors each count on their own (SPEC §9).
            let key = if why.starts_with("R41") || why.starts_with("R42") {
                why
            } else {
                &why[..3]
            };
            *seen.entry(format!("load error: {key}")).or_default() += 1;
            continue;
        }
        let groups = catalog(&cfg);
        for call in &calls {
            let outcome = reference(&cfg, &groups, call).outcome;
            let key = match outcome {
                Outcome::Run { auto_approved } => format!("run auto_approved={auto_approved}"),
                Outcome::Ask => String::from("ask"),
                Outcome::Refused(code) => format!("refused {code}"),
            };
            *seen.entry(key).or_default() += 1;
            for f in round_two_features(&cfg, &groups, call, &outcome) {
                *seen.entry(f.to_owned()).or_default() += 1;
            }
        }
        for a in &cfg.agents {
            let Some(agent) = resolve(&cfg, &a.name) else {
                continue;
            };
            for (g, (_, standing)) in groups.iter().zip(reference_exposure(&cfg, &groups, &agent)) {
                if ungoverned(g) && standing == Standing::Raw && agent.as_tool() {
                    *seen
                        .entry(String::from(
                            "R42: ungoverned exposed raw to an as_tool agent",
                        ))
                        .or_default() += 1;
                }
            }
        }
    }
    let want = [
        "run auto_approved=false",
        "run auto_approved=true",
        "ask",
        "refused unknown_tool",
        "refused invalid_input",
        "refused not_allowed",
        "refused confidential",
        "refused air_gapped",
        "refused denied",
        "refused no_approval_channel",
        "refused rejected",
        "refused policy_unreadable",
        "load error: R15",
        "load error: R27",
        "load error: R31",
        "load error: R41: a blank `tool_prefix`",
        "load error: R41: two listed names of one prefixed server, one own name",
        "load error: R42: `governed`/`ungoverned_reason` on an MCP or HTTP tool",
        "load error: R42: `governed: false` without a reason",
        "load error: R42: `ungoverned_reason` without `governed: false`",
        "load error: R42: `approval: require_approval` on an ungoverned tool",
        "load error: R42: an override `require_approval` names an ungoverned tool",
        "R41: a prefixed tool decided by an own-name rule",
        "R41: a prefixed tool called by identity with its own name",
        "R41: a listed name kept (no prefix match)",
        "R42: ungoverned runs under the posture",
        "R42: ungoverned runs past a `kind: local` deny or ask rule",
        "R42: ungoverned refused by an explicit deny",
        "R42: ungoverned exposed raw to an as_tool agent",
        "R24+R42: a mixed collision is governed",
        "§8: a shadowing subagent id refused",
        "§8: a subagent id spelling its own profile runs",
    ];
    for w in want {
        assert!(
            seen.get(w).is_some_and(|&n| n >= 5),
            "the generator rarely or never reaches `{w}`: {seen:#?}"
        );
    }
    eprintln!("{seen:#?}");
}

/// The exposure as it was read before issue 26 shared its strings: every entry in
/// lower-cased name order, names and descriptions copied, each omission's reason written by
/// the `format!` the engine used then (the texts are copied here verbatim, not shared with
/// the engine's).
type OldReading = (
    Vec<(String, bool, Option<String>)>,
    Vec<(String, toolgate_core::Refusal)>,
);

fn old_reading(gov: &Governance, agent: &toolgate_engine::ResolvedAgent) -> OldReading {
    use toolgate_core::{ApprovalMode, Check, Refusal, RefusalCode};
    let mut entries: Vec<_> = gov.catalog().entries().iter().collect();
    entries.sort_by(|a, b| a.key.cmp(&b.key));
    let (mut tools, mut omitted) = (Vec::new(), Vec::new());
    for entry in entries {
        let (tool, who) = (&entry.name, &agent.name);
        let refused = if !agent.allows(&entry.key) {
            Some(Refusal::new(
                RefusalCode::NotAllowed,
                Check::Allowed,
                format!("`{tool}` is not among the allowed tools of agent `{who}`"),
            ))
        } else if agent.confidential && entry.confidential {
            Some(Refusal::new(
                RefusalCode::Confidential,
                Check::Confidentiality,
                format!(
                    "agent `{who}` does confidential work and `{tool}` is withheld from confidential work"
                ),
            ))
        } else if gov.check_air_gap(entry).is_err() {
            Some(Refusal::new(
                RefusalCode::AirGapped,
                Check::AirGap,
                format!("the host is air-gapped and `{tool}` has effective network scope `egress`"),
            ))
        } else {
            let mode = gov.effective_mode(agent, entry);
            let as_tool = |check| {
                Refusal::new(
                    RefusalCode::NoApprovalChannel,
                    check,
                    format!(
                        "`{tool}` needs approval and agent `{who}` runs as a tool of another agent, with no approval channel"
                    ),
                )
            };
            if mode == ApprovalMode::Deny {
                Some(Refusal::new(
                    RefusalCode::Denied,
                    Check::AgentMode,
                    format!("the effective approval mode of `{tool}` for agent `{who}` is `deny`"),
                ))
            } else if mode == ApprovalMode::RequireApproval && agent.as_tool {
                Some(as_tool(Check::AgentMode))
            } else if entry.ungoverned {
                tools.push((tool.clone(), false, entry.description().map(str::to_owned)));
                None
            } else if mode == ApprovalMode::RequireApproval || gov.posture_ask(entry).is_some() {
                if agent.as_tool {
                    Some(as_tool(Check::Routing))
                } else {
                    tools.push((tool.clone(), true, entry.description().map(str::to_owned)));
                    None
                }
            } else {
                tools.push((tool.clone(), false, entry.description().map(str::to_owned)));
                None
            }
        };
        if let Some(r) = refused {
            omitted.push((tool.clone(), r));
        }
    }
    (tools, omitted)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Issue 26 (R6–R13, R16): the exposure built from shared names and reasons written on
    /// demand reads exactly as the copied one did — every name as spelled, in order, the
    /// descriptions, and each omission's code, check and reason text; and invocation's own
    /// checks (steps 3–6) still give those very refusals.
    #[test]
    fn issue26_r16_the_shared_exposure_reads_as_the_copied_one(cfg in cfg()) {
        if let Some(gov) = load(&cfg)? {
            for a in &cfg.agents {
                let Some(agent) = gov.agent(&a.name) else {
                    return Err(TestCaseError::fail(format!("no profile `{}`", a.name)));
                };
                let e = gov
                    .expose(&a.name)
                    .map_err(|e| TestCaseError::fail(format!("expose: {e}")))?;
                let tools: Vec<_> = e
                    .tools
                    .iter()
                    .map(|t| (t.name.to_string(), t.wrapped, t.description.as_deref().map(str::to_owned)))
                    .collect();
                let mut omitted = Vec::new();
                for o in &e.omitted {
                    let r = o.refusal.to_refusal();
                    prop_assert_eq!((r.code, r.decided_by), (o.refusal.code, o.refusal.decided_by));
                    prop_assert_eq!(&r.reasons, &vec![o.refusal.to_string()]);
                    prop_assert_eq!(o.refusal.reason(), o.refusal.to_string());
                    omitted.push((o.name.to_string(), r));
                }
                let (want_tools, want_omitted) = old_reading(&gov, agent);
                prop_assert_eq!(&tools, &want_tools, "tools of `{}`", a.name);
                prop_assert_eq!(&omitted, &want_omitted, "omitted of `{}`", a.name);
                for (name, want) in &want_omitted {
                    if want.decided_by == toolgate_core::Check::Allowed
                        || want.decided_by == toolgate_core::Check::Routing
                    {
                        continue;
                    }
                    let Some(entry) = gov.catalog().get(name) else {
                        return Err(TestCaseError::fail(format!("no entry `{name}`")));
                    };
                    let invoked = gov
                        .check_confidential(agent, entry)
                        .and_then(|()| gov.check_air_gap(entry))
                        .and_then(|()| gov.check_agent_mode(agent, entry));
                    prop_assert_eq!(invoked.as_ref().err(), Some(want), "invocation of `{}`", name);
                }
            }
        }
    }
}
