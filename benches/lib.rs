//! Fixtures shared by toolgate's criterion benches (see `README.md` beside this file).
//!
//! One generator writes a tenant policy of any size with a fixed mix of rules — 75% exact
//! names (an MCP server and a tool), 20% `*` patterns (tool prefixes, tool suffixes, server
//! globs), 5% `when` rules (`gt`, `matches`, `in`) — both as toolgate policy JSON and as the
//! equivalent Cedar policy text, so that every engine decides the same rules. It also writes
//! the configuration around the policy (catalog, agent, limits) and the call every bench
//! decides: an allowed call that reaches the tool.
//!
//! The call is `srv3`'s `create_invoice` from agent `support`. It matches no `ask` or `deny`
//! rule, but it is not a call the index can dismiss for free: at every size one exact rule
//! names the same tool on another server, and from 200 rules on three `when` rules select
//! the call by tool or server and fail only on the input (`amount` is not over 10000, `note`
//! does not mention a wire transfer, `customer.tier` is not blocked).
//!
//! ```
//! use toolgate_benches::{Mix, policy_json};
//! let mix = Mix::of(200);
//! assert_eq!((mix.exact, mix.patterns, mix.when), (150, 40, 10));
//! assert_eq!(policy_json(200)["rules"].as_array().map(Vec::len), Some(200));
//! ```

use std::fmt::Write as _;

use serde_json::{Value, json};
use toolgate_core::{AgentRef, ToolKind, ToolRef};
use toolgate_engine::Governance;
use toolgate_engine::config::{self, Format};
use toolgate_engine::policy::{Policy, Subject};

/// The MCP servers the exact-name rules are spread over.
pub const SERVERS: usize = 10;
/// Tools registered per server in the catalog (`tool_0` … `tool_14`).
pub const TOOLS_PER_SERVER: usize = 15;
/// The server of the benched call.
pub const CALL_SERVER: &str = "srv3";
/// The tool of the benched call (its own name on [`CALL_SERVER`]).
pub const CALL_TOOL: &str = "create_invoice";
/// The benched call's wire name (R1).
pub const CALL_WIRE_NAME: &str = "srv3__create_invoice";
/// The calling agent's profile.
pub const AGENT: &str = "support";
/// The rule counts of the scaling bench.
pub const SIZES: [usize; 4] = [10, 200, 2_000, 20_000];

const VERBS: [&str; 8] = [
    "refund", "delete", "drop", "transfer", "wipe", "export", "purge", "revoke",
];
const NOUNS: [&str; 8] = [
    "order", "user", "table", "account", "key", "repo", "file", "secret",
];
const TEAMS: [&str; 8] = [
    "billing", "hr", "crm", "prod", "ops", "legal", "infra", "data",
];

/// How many rules of each sort a policy of `n` rules holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mix {
    /// Exact `server` + `tool` rules (75%).
    pub exact: usize,
    /// `*` pattern rules (20%).
    pub patterns: usize,
    /// `when` rules (the rest, 5%).
    pub when: usize,
}

impl Mix {
    /// The split for `n` rules.
    pub fn of(n: usize) -> Self {
        let exact = n * 75 / 100;
        let patterns = n * 20 / 100;
        Self {
            exact,
            patterns,
            when: n - exact - patterns,
        }
    }
}

/// A name selector: exact, or a `*` pattern (the same syntax in toolgate and in Cedar's
/// `like`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sel {
    Exact(String),
    Glob(String),
}

impl Sel {
    fn as_str(&self) -> &str {
        match self {
            Sel::Exact(s) | Sel::Glob(s) => s,
        }
    }
}

/// A `when` condition on the call's input.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cond {
    /// `{"amount": {"gt": N}}`.
    AmountOver(i64),
    /// `{"note": {"matches": LITERAL}}` (a literal, so Cedar's `like "*LITERAL*"` agrees).
    NoteMentions(&'static str),
    /// `{"customer.tier": {"in": [...]}}`.
    TierIn(&'static [&'static str]),
}

/// One rule, written once and rendered for both engines.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Spec {
    deny: bool,
    server: Option<Sel>,
    tool: Option<Sel>,
    when: Option<Cond>,
}

const BLOCKED_TIERS: &[&str] = &["blocked", "suspended"];

/// A numbered variant of a vocabulary word: `refund`, then `refund1`, `refund2`, …
fn word(list: &[&str; 8], i: usize) -> String {
    let round = i / list.len();
    let base = list.get(i % list.len()).copied().unwrap_or("x");
    if round == 0 {
        base.to_owned()
    } else {
        format!("{base}{round}")
    }
}

fn specs(n: usize) -> Vec<Spec> {
    let mix = Mix::of(n);
    let mut out = Vec::with_capacity(n);
    for k in 0..mix.exact {
        out.push(if k == 0 {
            // The benched tool's name on another server: a hash hit the rule then rejects.
            Spec {
                deny: true,
                server: Some(Sel::Exact("srv7".into())),
                tool: Some(Sel::Exact(CALL_TOOL.into())),
                when: None,
            }
        } else {
            Spec {
                deny: k % 2 == 1,
                server: Some(Sel::Exact(format!("srv{}", k % SERVERS))),
                tool: Some(Sel::Exact(format!("tool_{}", k / SERVERS))),
                when: None,
            }
        });
    }
    for j in 0..mix.patterns {
        let i = j / 4;
        out.push(match j % 4 {
            0 => Spec {
                deny: false,
                server: None,
                tool: Some(Sel::Glob(format!("{}_*", word(&VERBS, i)))),
                when: None,
            },
            1 => Spec {
                deny: true,
                server: None,
                tool: Some(Sel::Glob(format!("*_{}", word(&NOUNS, i)))),
                when: None,
            },
            2 => Spec {
                deny: false,
                server: Some(Sel::Glob(format!("{}-*", word(&TEAMS, i)))),
                tool: None,
                when: None,
            },
            _ => Spec {
                deny: true,
                server: Some(Sel::Glob("srv*".into())),
                tool: Some(Sel::Glob(format!("{}_*", word(&VERBS, i + 3)))),
                when: None,
            },
        });
    }
    for w in 0..mix.when {
        let other_tool = Sel::Exact(format!("tool_{}", w % TOOLS_PER_SERVER));
        let other_server = Sel::Exact(format!("srv{}", w % SERVERS));
        out.push(match w % 3 {
            0 => Spec {
                deny: false,
                server: Some(if w == 0 {
                    Sel::Exact(CALL_SERVER.into())
                } else {
                    other_server
                }),
                tool: Some(if w == 0 {
                    Sel::Exact(CALL_TOOL.into())
                } else {
                    other_tool
                }),
                when: Some(Cond::AmountOver(10_000)),
            },
            1 => Spec {
                deny: true,
                server: None,
                tool: Some(if w == 1 {
                    Sel::Glob("create_*".into())
                } else {
                    Sel::Glob(format!("send{w}_*"))
                }),
                when: Some(Cond::NoteMentions("wire transfer")),
            },
            _ => Spec {
                deny: true,
                server: Some(if w == 2 {
                    Sel::Exact(CALL_SERVER.into())
                } else {
                    other_server
                }),
                tool: if w == 2 { None } else { Some(other_tool) },
                when: Some(Cond::TierIn(BLOCKED_TIERS)),
            },
        });
    }
    out
}

fn rule_json(spec: &Spec) -> Value {
    let mut rule = serde_json::Map::new();
    rule.insert(
        "effect".into(),
        json!(if spec.deny { "deny" } else { "ask" }),
    );
    if let Some(s) = &spec.server {
        rule.insert("server".into(), json!(s.as_str()));
    }
    if let Some(t) = &spec.tool {
        rule.insert("tool".into(), json!(t.as_str()));
    }
    match spec.when {
        None => {}
        Some(Cond::AmountOver(n)) => {
            rule.insert("when".into(), json!({"amount": {"gt": n}}));
            rule.insert("reason".into(), json!("Large invoices need a person"));
        }
        Some(Cond::NoteMentions(text)) => {
            rule.insert("when".into(), json!({"note": {"matches": text}}));
            rule.insert("reason".into(), json!("No wire transfers from agents"));
        }
        Some(Cond::TierIn(list)) => {
            rule.insert("when".into(), json!({"customer.tier": {"in": list}}));
            rule.insert("reason".into(), json!("Blocked customers"));
        }
    }
    Value::Object(rule)
}

/// The tenant policy of `n` rules, as toolgate reads it (`{"default", "rules"}`).
pub fn policy_json(n: usize) -> Value {
    json!({
        "default": "allow",
        "rules": specs(n).iter().map(rule_json).collect::<Vec<_>>(),
    })
}

/// The whole configuration around a policy of `n` rules: ten MCP servers with fifteen
/// tools each plus the benched tool, an air-gapped host (every tool says
/// `openWorldHint: false`), and a confidential agent allowed every tool of `srv3`.
/// `limits.tool_rules` is raised to `n` so that every size validates.
pub fn config_json(n: usize) -> Value {
    let mut tools = Vec::new();
    let mut servers = serde_json::Map::new();
    for s in 0..SERVERS {
        let server = format!("srv{s}");
        servers.insert(server.clone(), json!({"trust_tool_annotations": false}));
        let names = (0..TOOLS_PER_SERVER).map(|t| format!("tool_{t}"));
        let names: Vec<String> = if server == CALL_SERVER {
            names.chain(std::iter::once(CALL_TOOL.to_owned())).collect()
        } else {
            names.collect()
        };
        for name in names {
            tools.push(json!({
                "server": server,
                "name": name,
                "description": format!("{name} on {server}"),
                "annotations": {"readOnlyHint": false, "openWorldHint": false},
            }));
        }
    }
    let allowed: Vec<String> = tools
        .iter()
        .filter(|t| t["server"] == CALL_SERVER)
        .filter_map(|t| t["name"].as_str().map(|n| format!("{CALL_SERVER}__{n}")))
        .collect();
    json!({
        "enforce_tool_invocation": true,
        "air_gapped": true,
        "approval": {"channel": "none"},
        "servers": servers,
        "tools": tools,
        "agents": [{"name": AGENT, "allowed_tools": allowed, "confidential": true}],
        "policy": policy_json(n),
        "limits": {"tool_rules": n.max(200)},
    })
}

/// Loads [`config_json`] through the same loader as the `toolgate` command.
///
/// # Panics
///
/// When the generated configuration does not load (a bug in this generator).
pub fn governance(n: usize) -> Governance {
    let text = config_json(n).to_string();
    match config::load_str(&text, Format::Json) {
        Ok(g) => g,
        Err(e) => panic!("the generated configuration of {n} rules does not load: {e:?}"),
    }
}

/// The tenant policy of `n` rules, compiled (for `Policy::evaluate` alone).
///
/// # Panics
///
/// When the generated policy does not validate (a bug in this generator).
pub fn policy(n: usize) -> Policy {
    let limits = toolgate_engine::policy::Limits {
        tool_rules: n.max(200),
        ..Default::default()
    };
    match Policy::from_json(&policy_json(n), &limits) {
        Ok(p) => p,
        Err(e) => panic!("the generated policy of {n} rules does not validate: {e:?}"),
    }
}

/// The benched call's input: a small, realistic invoice.
pub fn call_input() -> Value {
    json!({
        "customer": {"id": "cus_8f2a91", "tier": "gold", "country": "DE"},
        "amount": 1250,
        "currency": "EUR",
        "lines": [
            {"sku": "SKU-1042", "qty": 2, "unit_price": 500},
            {"sku": "SKU-2210", "qty": 1, "unit_price": 250}
        ],
        "note": "Quarterly maintenance, net 30",
        "due_days": 30
    })
}

/// The benched call's tool, as the model names it.
pub fn call_tool() -> ToolRef {
    ToolRef::Name(CALL_WIRE_NAME.to_owned())
}

/// The benched call's agent.
pub fn call_agent() -> AgentRef {
    AgentRef::profile(AGENT)
}

/// The benched call as the policy sees it (R3).
pub fn call_subject() -> Subject<'static> {
    Subject {
        kind: ToolKind::Mcp,
        tool: CALL_TOOL,
        server: Some(CALL_SERVER),
        agent: AGENT,
    }
}

/// The Cedar translation of [`policy_json`]: one `permit` for the default `allow`, then one
/// `forbid` per rule, annotated `@effect("ask")` or `@effect("deny")` (Cedar has no third
/// effect; a caller tells an ask from a deny by the annotations of the deciding policies).
///
/// Names go in the request's context (`context.server`, `context.tool`, `context.kind`,
/// lower-cased by the caller, as toolgate compares names ASCII case-insensitively), the
/// call's input in `context.input`. An exact server-and-tool rule is a scope constraint on
/// the resource (`Tool::"srv7/create_invoice"`), the cheapest form Cedar has; patterns are
/// `like`; a rule with a server also tests `context.kind == "mcp"` (R19); `matches` with a
/// literal becomes `like "*literal*"`.
pub fn cedar_policies(n: usize) -> String {
    let mut out = String::from("@id(\"default\")\npermit(principal, action, resource);\n");
    for (i, spec) in specs(n).iter().enumerate() {
        let effect = if spec.deny { "deny" } else { "ask" };
        let mut conds: Vec<String> = Vec::new();
        let resource = match (&spec.server, &spec.tool) {
            (Some(Sel::Exact(s)), Some(Sel::Exact(t))) => {
                conds.push("context.kind == \"mcp\"".into());
                format!("resource == Tool::\"{s}/{t}\"")
            }
            (server, tool) => {
                if let Some(s) = server {
                    conds.push("context.kind == \"mcp\"".into());
                    conds.push(cedar_sel("context.server", s));
                }
                if let Some(t) = tool {
                    conds.push(cedar_sel("context.tool", t));
                }
                "resource".to_owned()
            }
        };
        match spec.when {
            None => {}
            Some(Cond::AmountOver(n)) => conds.push(format!(
                "context.input has amount && context.input.amount > {n}"
            )),
            Some(Cond::NoteMentions(text)) => conds.push(format!(
                "context.input has note && context.input.note like \"*{text}*\""
            )),
            Some(Cond::TierIn(list)) => {
                let items: Vec<String> = list.iter().map(|t| format!("\"{t}\"")).collect();
                conds.push(format!(
                    "context.input has customer && context.input.customer has tier && [{}].contains(context.input.customer.tier)",
                    items.join(", ")
                ));
            }
        }
        let _ = write!(
            out,
            "@id(\"rule{i}\")\n@effect(\"{effect}\")\nforbid(principal, action == Action::\"call\", {resource})"
        );
        if conds.is_empty() {
            out.push_str(";\n");
        } else {
            let _ = writeln!(out, "\nwhen {{ {} }};", conds.join(" && "));
        }
    }
    out
}

fn cedar_sel(attr: &str, sel: &Sel) -> String {
    match sel {
        Sel::Exact(s) => format!("{attr} == \"{s}\""),
        Sel::Glob(g) => format!("{attr} like \"{g}\""),
    }
}

/// The Cedar request context for a call: names lower-cased, the input as given.
pub fn cedar_context_json(kind: &str, server: &str, tool: &str, input: &Value) -> Value {
    json!({
        "kind": kind,
        "server": server.to_ascii_lowercase(),
        "tool": tool.to_ascii_lowercase(),
        "input": input,
    })
}

/// A catalog of `n` MCP tools on 50 servers (half of them trusted for their annotations),
/// one agent allowed nine in ten, air-gapped host, posture on: the exposure and memory
/// benches' fixture (issue 12).
pub fn catalog(n: usize) -> Governance {
    let tools: Vec<_> = (0..n)
        .map(|i| {
            json!({
                "server": format!("srv{}", i % 50),
                "name": format!("tool_{i}"),
                "description": format!("tool number {i}"),
                "annotations": {"readOnlyHint": i % 3 == 0, "openWorldHint": i % 7 == 0},
            })
        })
        .collect();
    let allowed: Vec<String> = (0..n)
        .filter(|i| i % 10 != 0)
        .map(|i| format!("srv{}__tool_{i}", i % 50))
        .collect();
    let servers: serde_json::Map<_, _> = (0..50)
        .map(|s| {
            (
                format!("srv{s}"),
                json!({"trust_tool_annotations": s % 2 == 0}),
            )
        })
        .collect();
    let cfg = json!({
        "air_gapped": true,
        "approval": {"channel": "interactive"},
        "behavior_gating": {"require_approval_for_non_read_only": true},
        "servers": servers,
        "tools": tools,
        "agents": [{"name": "support", "allowed_tools": allowed}],
    });
    match config::load_str(&cfg.to_string(), Format::Json) {
        Ok(g) => g,
        Err(e) => panic!("the generated catalog does not load: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_core::Verdict;
    use toolgate_engine::{CallInput, CallView};

    #[test]
    fn the_mix_validates_at_every_size() {
        for n in SIZES {
            let rules = match governance(n).policy() {
                toolgate_engine::PolicyState::Readable(p) => p.rules().len(),
                toolgate_engine::PolicyState::Unreadable(_) => 0,
            };
            assert_eq!(rules, n);
            let mix = Mix::of(n);
            assert_eq!(mix.exact + mix.patterns + mix.when, n);
        }
    }

    #[test]
    fn the_benched_call_runs_and_matches_no_rule() {
        for n in SIZES {
            let gov = governance(n);
            let (tool, agent, input) = (call_tool(), call_agent(), call_input());
            let view = CallView {
                tool: &tool,
                agent: &agent,
                input: CallInput::Value(&input),
                run: Default::default(),
            };
            let d = gov.decide(view);
            assert_eq!(
                d.verdict,
                Verdict::Run {
                    auto_approved: false
                },
                "{n}: {d:?}"
            );
            let p = policy(n);
            let eval = p.evaluate(&call_subject(), &input);
            assert!(eval.matched.is_empty(), "{n}: {eval:?}");
            assert_eq!(eval, p.evaluate_naive(&call_subject(), &input));
        }
    }
}

#[cfg(all(test, feature = "cedar"))]
mod cedar_tests {
    use super::*;
    use std::str::FromStr;

    use cedar_policy::{
        Authorizer, Context, Decision, Entities, EntityId, EntityTypeName, EntityUid, PolicySet,
        Request,
    };
    use toolgate_engine::policy::Effect;

    fn cedar_effect(set: &PolicySet, server: &str, tool: &str, input: &Value) -> Option<Effect> {
        let uid = |ty: &str, id: &str| {
            EntityUid::from_type_name_and_id(
                EntityTypeName::from_str(ty).unwrap(),
                EntityId::new(id),
            )
        };
        let ctx =
            Context::from_json_value(cedar_context_json("mcp", server, tool, input), None).unwrap();
        let req = Request::new(
            uid("Agent", AGENT),
            uid("Action", "call"),
            uid("Tool", &format!("{server}/{tool}")),
            ctx,
            None,
        )
        .unwrap();
        let resp = Authorizer::new().is_authorized(&req, set, &Entities::empty());
        assert!(
            resp.diagnostics().errors().next().is_none(),
            "{:?}",
            resp.diagnostics()
        );
        match resp.decision() {
            Decision::Allow => None,
            Decision::Deny => {
                let deny = resp
                    .diagnostics()
                    .reason()
                    .any(|id| set.annotation(id, "effect") == Some("deny"));
                Some(if deny { Effect::Deny } else { Effect::Ask })
            }
        }
    }

    #[test]
    fn cedar_agrees_with_the_engine() {
        let n = 200;
        let set = PolicySet::from_str(&cedar_policies(n)).unwrap();
        assert_eq!(set.policies().count(), n + 1);
        let p = policy(n);
        let big = json!({"amount": 20000, "note": "x", "customer": {"tier": "gold"}});
        let wire =
            json!({"amount": 5, "note": "pay by wire transfer", "customer": {"tier": "gold"}});
        let blocked = json!({"amount": 5, "customer": {"tier": "blocked"}});
        let cases: Vec<(&str, &str, Value)> = vec![
            (CALL_SERVER, CALL_TOOL, call_input()),
            (CALL_SERVER, CALL_TOOL, big),
            (CALL_SERVER, CALL_TOOL, wire),
            (CALL_SERVER, CALL_TOOL, blocked.clone()),
            ("srv9", CALL_TOOL, blocked),
            ("srv7", CALL_TOOL, json!({})),
            ("srv4", "tool_3", json!({})),
            ("srv5", "tool_3", json!({})),
            ("srv1", "refund_order", json!({})),
            ("srv1", "refund_x", json!({})),
            ("srv1", "list_secret", json!({})),
            ("billing-eu", "anything", json!({})),
            ("srv2", "drop_table", json!({})),
            ("mysrv", "drop_x", json!({})),
            ("srv1", "create_user", json!({"note": "wire transfer"})),
        ];
        let mut refused = 0;
        for (server, tool, input) in &cases {
            let subject = Subject {
                kind: ToolKind::Mcp,
                tool,
                server: Some(server),
                agent: AGENT,
            };
            let effect = p.evaluate(&subject, input).effect;
            assert_eq!(
                effect,
                cedar_effect(&set, server, tool, input),
                "{server}/{tool} {input}"
            );
            refused += usize::from(effect.is_some());
        }
        assert!(
            refused >= 10,
            "the cases exercise asks and denials: {refused}"
        );
    }
}
