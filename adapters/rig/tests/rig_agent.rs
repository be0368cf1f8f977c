//! toolgate-rig against rig as published (rig-core and rig-agent 0.44): a real `Agent`, its
//! bus, hooks and tool dispatch, driven by a scripted completion model (the only stand-in).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod support;

use std::sync::{Arc, Mutex};

use rig_agent::AgentBuilder;
use rig_agent::agent::{AgentHook, DispatchAction, DispatchEvent, HookContext};
use rig_core::completion::Message;
use rig_core::message::{ToolResultContent, UserContent};
use rig_core::tool::{PortableTool, ToolExecutionError};
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate::approval::{ApprovalOutcome, FnChannel};
use toolgate::audit::MemorySink;
use toolgate::core::{AgentRef, ChannelKind};
use toolgate::engine::config::{Format, load_str};
use toolgate::{GovernanceHandle, ToolgateLayer};
use toolgate_rig::{AgentGate, HostedStack};

use support::scripted::{Scripted, call, say};

/// What the tools were run with, in order.
type Ran = Arc<Mutex<Vec<(String, Value)>>>;

#[derive(Deserialize)]
struct LookupArgs {
    id: u64,
}

/// Looks a customer up (its answer carries a secret the configuration scrubs).
struct Lookup(Ran);

impl PortableTool for Lookup {
    const NAME: &'static str = "lookup";
    type Args = LookupArgs;
    type Output = Value;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "Look a customer up".into()
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]})
    }

    async fn call(&self, args: LookupArgs) -> Result<Value, ToolExecutionError> {
        self.0
            .lock()
            .unwrap()
            .push(("lookup".into(), json!({"id": args.id})));
        Ok(json!({"id": args.id, "name": "Ada", "ssn": "078-05-1120"}))
    }
}

#[derive(Deserialize)]
struct RefundArgs {
    order: u64,
    amount: u64,
}

/// Refunds an order.
struct Refund(Ran);

impl PortableTool for Refund {
    const NAME: &'static str = "refund";
    type Args = RefundArgs;
    type Output = String;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "Refund an order".into()
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"order": {"type": "integer"}, "amount": {"type": "integer"}}})
    }

    async fn call(&self, args: RefundArgs) -> Result<String, ToolExecutionError> {
        self.0.lock().unwrap().push((
            "refund".into(),
            json!({"order": args.order, "amount": args.amount}),
        ));
        Ok(format!("refunded {} on order {}", args.amount, args.order))
    }
}

/// Deletes everything: declared, never exposed to `support`.
struct Wipe(Ran);

impl PortableTool for Wipe {
    const NAME: &'static str = "wipe";
    type Args = Value;
    type Output = String;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        "Delete everything".into()
    }

    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }

    async fn call(&self, _args: Value) -> Result<String, ToolExecutionError> {
        self.0.lock().unwrap().push(("wipe".into(), json!({})));
        Ok("wiped".into())
    }
}

const CONFIG: &str = r#"{
    "redaction": {"keys": ["ssn"], "scrub_output": true},
    "tools": [{"kind": "http", "name": "lookup"}, {"kind": "http", "name": "refund"},
              {"kind": "http", "name": "wipe"}],
    "agents": [{"name": "support", "allowed_tools": ["lookup", "refund"]}],
    "policy": {"rules": [{"effect": "deny", "tool": "refund", "when": {"amount": {"gt": 100}},
                          "reason": "refunds over 100 need finance"}]}
}"#;

fn stack(config: &str) -> (HostedStack, Arc<MemorySink>) {
    let handle = GovernanceHandle::new(load_str(config, Format::Json).unwrap());
    let audit = Arc::new(MemorySink::new());
    let layer = ToolgateLayer::builder(handle)
        .shared_audit_sink(audit.clone())
        .build()
        .unwrap();
    (HostedStack::new(layer), audit)
}

/// The text of every tool result the model was sent, in order.
fn tool_results(history: &[Message]) -> Vec<String> {
    let mut out = Vec::new();
    for message in history {
        if let Message::User { content } = message {
            for item in content.iter() {
                if let UserContent::ToolResult(result) = item {
                    for c in result.content.iter() {
                        match c {
                            ToolResultContent::Text(t) => out.push(t.text.clone()),
                            ToolResultContent::Json { value } => out.push(value.to_string()),
                            other => out.push(format!("{other:?}")),
                        }
                    }
                }
            }
        }
    }
    out
}

fn audit_lines(audit: &MemorySink) -> Vec<Value> {
    audit
        .lines()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn issue36_rig_agent_is_shown_its_exposure_and_refusals_are_skipped_with_their_text() {
    let ran: Ran = Arc::default();
    let (hosted, audit) = stack(CONFIG);
    let gate = AgentGate::new(hosted, AgentRef::profile("support"));
    let (model, script) = Scripted::model([
        vec![
            call("c1", "lookup", json!({"id": 7})),
            call("c2", "refund", json!({"order": 7, "amount": 500})),
        ],
        // A tool the model was not shown (rig holds back the rest of a turn with such a
        // call, so it comes alone).
        vec![call("c3", "wipe", json!({}))],
        vec![say("done")],
    ]);
    let agent = AgentBuilder::new(model)
        .tool(gate.tool(Lookup(ran.clone())))
        .tool(gate.tool(Refund(ran.clone())))
        .tool(gate.tool(Wipe(ran.clone())))
        .add_hook(gate.hook())
        .build();

    let response = agent.prompt("help").max_turns(4).await.unwrap();
    assert_eq!(response.output(), "done");

    // The model was shown the agent's exposure only: `wipe` is declared but not allowed.
    assert_eq!(script.advertised()[0], ["lookup", "refund"]);
    // Only the allowed, passed call ran, with the input the gate passed.
    assert_eq!(
        *ran.lock().unwrap(),
        [("lookup".to_owned(), json!({"id": 7}))]
    );

    let results = tool_results(&script.requests()[2].chat_history);
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(
        results[0].contains("Ada") && !results[0].contains("078-05-1120"),
        "{}",
        results[0]
    );
    assert!(
        results[1].contains("The call was refused (denied)"),
        "{}",
        results[1]
    );
    assert!(
        results[1].contains("refunds over 100 need finance"),
        "{}",
        results[1]
    );
    assert!(
        results[2].contains("The call was refused (not_allowed)"),
        "{}",
        results[2]
    );

    // Every call is audited: the refused ones too.
    let records = audit_lines(&audit);
    assert_eq!(records.len(), 3, "{records:#?}");
    eprintln!("{records:#?}");
}

/// Rewrites every `refund` call's amount, after toolgate decided it (registered after its
/// hook).
struct RewriteAmount(u64);

impl AgentHook for RewriteAmount {
    async fn on_dispatch(&self, _ctx: &HookContext, event: DispatchEvent<'_>) -> DispatchAction {
        if event.tool_name() != Some("refund") {
            return DispatchAction::proceed();
        }
        let mut args: Value = serde_json::from_str(event.tool_args().unwrap()).unwrap();
        args["amount"] = json!(self.0);
        DispatchAction::rewrite_tool_args(event.kind, args)
    }
}

#[tokio::test]
async fn issue36_a_call_rewritten_after_toolgate_passed_it_is_decided_again_before_it_runs() {
    for (rewritten, runs) in [(5000, false), (60, true)] {
        let ran: Ran = Arc::default();
        let (hosted, audit) = stack(CONFIG);
        let gate = AgentGate::new(hosted, AgentRef::profile("support"));
        let (model, script) = Scripted::model([
            vec![call("c1", "refund", json!({"order": 7, "amount": 50}))],
            vec![say("done")],
        ]);
        let agent = AgentBuilder::new(model)
            .tool(gate.tool(Refund(ran.clone())))
            .add_hook(gate.hook())
            .add_hook(RewriteAmount(rewritten))
            .build();
        agent.prompt("refund order 7").max_turns(3).await.unwrap();

        let results = tool_results(&script.requests()[1].chat_history);
        let records = audit_lines(&audit);
        // The passed call (50) is recorded as not run; the rewritten one decided on its own.
        assert_eq!(records.len(), 2, "{records:#?}");
        let passed = records
            .iter()
            .find(|r| r["outcome"] == "failed")
            .expect("the passed call is recorded as not run");
        assert_eq!(passed["decision"]["outcome"], "run");
        let rewritten = records.iter().find(|r| r["outcome"] != "failed").unwrap();
        if runs {
            // INVARIANT: the tool runs only an input the gate passed — here the rewritten one,
            // passed in its own decision.
            assert_eq!(
                *ran.lock().unwrap(),
                [("refund".to_owned(), json!({"order": 7, "amount": 60}))]
            );
            assert_eq!(results, ["refunded 60 on order 7"]);
            assert_eq!(rewritten["outcome"], "completed");
        } else {
            assert!(ran.lock().unwrap().is_empty(), "the rewritten refund ran");
            assert!(
                results[0].contains("refunds over 100 need finance"),
                "{results:?}"
            );
            assert_eq!(rewritten["decision"]["refusal"], "denied");
        }
    }
}

#[tokio::test]
async fn issue36_asks_go_to_the_configured_channel_and_a_denial_is_a_skip() {
    let config = r#"{
        "approval": {"channel": "interactive"},
        "tools": [{"kind": "http", "name": "refund"}],
        "agents": [{"name": "support", "allowed_tools": ["refund"]}],
        "policy": {"rules": [{"effect": "ask", "tool": "refund", "reason": "refunds need a person"}]}
    }"#;
    let asked: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = asked.clone();
    let person = FnChannel::new(ChannelKind::Interactive, move |question| {
        let input = (*question.input).clone();
        seen.lock().unwrap().push(input.clone());
        if input["amount"] == json!(10) {
            ApprovalOutcome::Approved {
                approver: "alice".into(),
            }
        } else {
            ApprovalOutcome::Denied {
                approver: "bob".into(),
                reason: Some("not today".into()),
            }
        }
    });
    let handle = GovernanceHandle::new(load_str(config, Format::Json).unwrap());
    let layer = ToolgateLayer::builder(handle)
        .channel(person)
        .build()
        .unwrap();
    let gate = AgentGate::new(HostedStack::new(layer), AgentRef::profile("support"));
    let ran: Ran = Arc::default();
    let (model, script) = Scripted::model([
        vec![call("c1", "refund", json!({"order": 1, "amount": 10}))],
        vec![call("c2", "refund", json!({"order": 2, "amount": 20}))],
        vec![say("done")],
    ]);
    let agent = AgentBuilder::new(model)
        .tool(gate.tool(Refund(ran.clone())))
        .add_hook(gate.hook())
        .build();
    agent.prompt("refunds").max_turns(4).await.unwrap();

    assert_eq!(
        *asked.lock().unwrap(),
        [
            json!({"order": 1, "amount": 10}),
            json!({"order": 2, "amount": 20})
        ],
        "each call asked once, with the input the tool gets"
    );
    assert_eq!(
        *ran.lock().unwrap(),
        [("refund".to_owned(), json!({"order": 1, "amount": 10}))]
    );
    let results = tool_results(&script.requests()[2].chat_history);
    assert_eq!(results[0], "refunded 10 on order 1");
    assert!(results[1].contains("The call was refused"), "{results:?}");
    assert!(results[1].contains("not today"), "{results:?}");
}

#[tokio::test]
async fn issue36_a_held_call_is_a_skip_with_the_held_text() {
    let config = r#"{
        "approval": {"channel": "inbox"},
        "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"}],
        "agents": [{"name": "support", "allowed_tools": ["refund"]}]
    }"#;
    let dir = tempfile::tempdir().unwrap();
    let store = toolgate_inbox::SqliteInbox::open(
        dir.path().join("inbox.db"),
        toolgate_inbox::SqliteOptions::default(),
    )
    .unwrap();
    let inbox = toolgate_inbox::Inbox::new(store);
    let handle = GovernanceHandle::new(load_str(config, Format::Json).unwrap());
    let audit = Arc::new(MemorySink::new());
    let layer = ToolgateLayer::builder(handle)
        .channel(inbox.channel())
        .shared_audit_sink(audit.clone())
        .build()
        .unwrap();
    let gate = AgentGate::new(HostedStack::new(layer), AgentRef::profile("support"))
        .with_session("conversation-1");
    let ran: Ran = Arc::default();
    let (model, script) = Scripted::model([
        vec![call("c1", "refund", json!({"order": 3, "amount": 30}))],
        vec![say("I asked a person")],
    ]);
    let agent = AgentBuilder::new(model)
        .tool(gate.tool(Refund(ran.clone())))
        .add_hook(gate.hook())
        .build();
    agent.prompt("refund").max_turns(3).await.unwrap();

    assert!(ran.lock().unwrap().is_empty(), "a held call does not run");
    let results = tool_results(&script.requests()[1].chat_history);
    assert!(
        results[0].starts_with("The call is waiting for a person's approval (interaction "),
        "{results:?}"
    );
    let records = audit_lines(&audit);
    assert_eq!(records[0]["outcome"], "held");
    assert_eq!(records[0]["session"], "conversation-1");
}

#[tokio::test]
async fn issue36_quotas_fill_through_the_hook() {
    let config = r#"{
        "tools": [{"kind": "http", "name": "lookup"}],
        "agents": [{"name": "support", "allowed_tools": ["lookup"]}],
        "policy": {"rules": [], "quotas": [{"max": 2, "window_secs": 3600, "tool": "lookup", "per": ["agent"]}]}
    }"#;
    let (hosted, _audit) = stack(config);
    let gate = AgentGate::new(hosted, AgentRef::profile("support"));
    let ran: Ran = Arc::default();
    let (model, script) = Scripted::model([
        vec![
            call("c1", "lookup", json!({"id": 1})),
            call("c2", "lookup", json!({"id": 2})),
        ],
        vec![call("c3", "lookup", json!({"id": 3}))],
        vec![say("done")],
    ]);
    let agent = AgentBuilder::new(model)
        .tool(gate.tool(Lookup(ran.clone())))
        .add_hook(gate.hook())
        .build();
    agent.prompt("look").max_turns(4).await.unwrap();

    assert_eq!(ran.lock().unwrap().len(), 2);
    let results = tool_results(&script.requests()[2].chat_history);
    assert!(
        results[2].contains("The call was refused (rate_limited)"),
        "{results:?}"
    );
}

/// A tool given to the agent unwrapped: the hook alone governs it.
#[tokio::test]
async fn issue36_an_unwrapped_tool_is_decided_audited_and_scrubbed_by_the_hook() {
    let ran: Ran = Arc::default();
    let (hosted, audit) = stack(CONFIG);
    let gate = AgentGate::new(hosted, AgentRef::profile("support"));
    gate.declare("lookup");
    let (model, script) = Scripted::model([
        vec![call("c1", "lookup", json!({"id": 9}))],
        vec![say("done")],
    ]);
    let agent = AgentBuilder::new(model)
        .tool(Lookup(ran.clone()))
        .add_hook(gate.hook())
        .build();
    agent.prompt("look").max_turns(3).await.unwrap();

    assert_eq!(script.advertised()[0], ["lookup"]);
    let results = tool_results(&script.requests()[1].chat_history);
    assert!(
        results[0].contains("Ada") && !results[0].contains("078-05-1120"),
        "{results:?}"
    );
    let records = audit_lines(&audit);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["outcome"], "completed");
}

/// Without the hook, the governed tool sends its calls down the stack itself.
#[tokio::test]
async fn issue36_a_governed_tool_alone_runs_only_what_the_stack_passes() {
    use rig_core::tool::{Tool, ToolContext};
    let ran: Ran = Arc::default();
    let (hosted, audit) = stack(CONFIG);
    let gate = AgentGate::new(hosted, AgentRef::profile("support"));
    let refund = gate.tool(Refund(ran.clone()));
    let mut context = ToolContext::new();
    let ok = refund
        .call(&mut context, json!({"order": 1, "amount": 5}))
        .await
        .unwrap();
    assert_eq!(ok.as_text(), Some("refunded 5 on order 1"));
    let no = refund
        .call(&mut context, json!({"order": 1, "amount": 500}))
        .await
        .unwrap_err();
    assert!(no.is_refusal());
    assert!(
        no.message().contains("refunds over 100 need finance"),
        "{}",
        no.message()
    );
    assert_eq!(ran.lock().unwrap().len(), 1);
    assert_eq!(audit.lines().len(), 2);
}
