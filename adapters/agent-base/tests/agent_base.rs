//! toolgate-agent-base against agent-base as published (0.12): a real `AgentRuntime` — its
//! approval phase, its execution pipeline calling `before_call`, the tool and `after_call` —
//! driven by a scripted LLM provider (the only stand-in).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agent_base::llm_trait::response::StreamChunk;
use agent_base::llm_trait::{
    Capabilities, ChatRequest, ChatResponse, ChatStream, LlmError, LlmProvider, ProviderInfo,
};
use agent_base::{
    AgentBuilder, AgentResult, AgentRuntime, ApprovalDecision, ApprovalHandler, ApprovalRequest,
    ChatMessage, Content, Tool, ToolContext, ToolPolicy,
};
use async_trait::async_trait;
use serde_json::{Value, json};
use toolgate::approval::{ApprovalOutcome, FnChannel};
use toolgate::audit::MemorySink;
use toolgate::core::{AgentRef, ChannelKind};
use toolgate::engine::config::{Format, load_str};
use toolgate::{GovernanceHandle, ToolgateBuilder, ToolgateLayer};
use toolgate_agent_base::{HostedStack, ToolgatePolicy};

/// The model: each request takes the next scripted turn (tool calls, or text).
struct ScriptedModel {
    turns: Mutex<std::vec::IntoIter<Vec<StreamChunk>>>,
}

impl ScriptedModel {
    fn new(turns: Vec<Vec<StreamChunk>>) -> Arc<Self> {
        Arc::new(Self {
            turns: Mutex::new(turns.into_iter()),
        })
    }
}

/// A turn calling `calls` (tool, arguments), then stopping for their results.
fn calls(calls: &[(&str, Value)]) -> Vec<StreamChunk> {
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            json!({"index": i, "id": format!("call_{name}_{i}"), "type": "function",
                   "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    vec![
        StreamChunk::ToolCall(json!({"delta": {"tool_calls": tool_calls}})),
        StreamChunk::Stop {
            finish_reason: Some("tool_calls".into()),
        },
    ]
}

fn says(text: &str) -> Vec<StreamChunk> {
    vec![
        StreamChunk::Text(text.into()),
        StreamChunk::Stop {
            finish_reason: Some("stop".into()),
        },
    ]
}

#[async_trait]
impl LlmProvider for ScriptedModel {
    async fn stream(&self, _request: ChatRequest) -> Result<ChatStream, LlmError> {
        let turn = self.turns.lock().unwrap().next().unwrap_or_default();
        Ok(ChatStream::new(Box::pin(futures::stream::iter(
            turn.into_iter().map(Ok),
        ))))
    }

    async fn chat(&self, _request: ChatRequest) -> Result<ChatResponse, LlmError> {
        Err(LlmError::Llm("the scripted model only streams".into()))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            supports_streaming: true,
            supports_tools: true,
            supports_vision: false,
            supports_thinking: false,
            max_context_tokens: None,
            max_output_tokens: None,
        }
    }

    fn info(&self) -> ProviderInfo {
        ProviderInfo {
            name: "scripted".into(),
            model: "scripted".into(),
            version: None,
        }
    }
}

/// What the tools were run with.
type Ran = Arc<Mutex<Vec<(String, Value)>>>;

/// A tool that records its calls and answers `answer`.
struct Recording {
    name: &'static str,
    ran: Ran,
    answer: Value,
}

#[async_trait]
impl Tool for Recording {
    fn name(&self) -> &'static str {
        self.name
    }

    fn description(&self) -> &'static str {
        "a tool"
    }

    fn schema(&self) -> Value {
        json!({"type": "object"})
    }

    async fn call(&self, args: &Value, _ctx: &ToolContext) -> AgentResult<Vec<Content>> {
        self.ran
            .lock()
            .unwrap()
            .push((self.name.into(), args.clone()));
        Ok(vec![Content::text(self.answer.to_string())])
    }
}

/// agent-base's own approval handler: toolgate has asked already, so it never is.
#[derive(Default)]
struct NeverAsked(AtomicUsize);

#[async_trait]
impl ApprovalHandler for NeverAsked {
    async fn approve(
        &self,
        _request: ApprovalRequest,
        _cancel: tokio_util::sync::CancellationToken,
    ) -> AgentResult<ApprovalDecision> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(ApprovalDecision::Deny)
    }
}

const CONFIG: &str = r#"{
    "redaction": {"keys": ["ssn"], "scrub_output": true},
    "tools": [{"kind": "http", "name": "lookup"}, {"kind": "http", "name": "refund"},
              {"kind": "http", "name": "wipe"}],
    "agents": [{"name": "support", "allowed_tools": ["lookup", "refund"]}],
    "policy": {"rules": [{"effect": "deny", "tool": "refund", "when": {"amount": {"gt": 100}},
                          "reason": "refunds over 100 need finance"}],
               "quotas": [{"max": 2, "window_secs": 3600, "tool": "refund"}]}
}"#;

fn builder(config: &str) -> (ToolgateBuilder, Arc<MemorySink>) {
    let handle = GovernanceHandle::new(load_str(config, Format::Json).unwrap());
    let audit = Arc::new(MemorySink::new());
    (
        ToolgateLayer::builder(handle).shared_audit_sink(audit.clone()),
        audit,
    )
}

fn tools(ran: &Ran) -> Vec<Recording> {
    vec![
        Recording {
            name: "lookup",
            ran: ran.clone(),
            answer: json!({"name": "Ada", "ssn": "078-05-1120"}),
        },
        Recording {
            name: "refund",
            ran: ran.clone(),
            answer: json!("refunded"),
        },
        Recording {
            name: "wipe",
            ran: ran.clone(),
            answer: json!("wiped"),
        },
    ]
}

/// Runs one user turn of an agent-base runtime with `policy`; the tool results the model
/// was sent, in order.
async fn run(
    policy: ToolgatePolicy,
    model: Arc<ScriptedModel>,
    ran: &Ran,
    handler: Arc<NeverAsked>,
) -> Vec<String> {
    let mut builder = AgentBuilder::new(model)
        .tool_policy(Arc::new(policy))
        .approval_handler(handler);
    for tool in tools(ran) {
        builder = builder.register_tool(tool);
    }
    let runtime: AgentRuntime = builder.build().unwrap();
    let sid = runtime.create_session().await;
    runtime
        .run_turn(sid.clone(), "help", |_| Ok(()))
        .await
        .unwrap();
    let session = runtime.session(&sid).await.unwrap();
    session
        .chat_messages()
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect()
}

async fn audit_settled(audit: &MemorySink, n: usize) -> Vec<Value> {
    for _ in 0..2000 {
        if audit.lines().len() >= n {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    audit
        .lines()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn issue36_agent_base_policy_refuses_scrubs_and_audits_every_call() {
    let (builder, audit) = builder(CONFIG);
    let policy = ToolgatePolicy::new(
        HostedStack::new(builder.build().unwrap()),
        AgentRef::profile("support"),
    );
    assert_eq!(policy.exposed_tools(), ["lookup", "refund"]);
    let ran: Ran = Arc::default();
    let handler = Arc::new(NeverAsked::default());
    let model = ScriptedModel::new(vec![
        calls(&[
            ("lookup", json!({"id": 7})),
            ("refund", json!({"order": 7, "amount": 500})),
            ("wipe", json!({})),
        ]),
        says("done"),
    ]);
    let results = run(policy, model, &ran, handler.clone()).await;

    assert_eq!(
        *ran.lock().unwrap(),
        [("lookup".to_owned(), json!({"id": 7}))]
    );
    assert_eq!(results.len(), 3, "{results:#?}");
    let text = results.join("\n");
    assert!(
        text.contains("Ada") && !text.contains("078-05-1120"),
        "{text}"
    );
    assert!(text.contains("refunds over 100 need finance"), "{text}");
    assert!(
        text.contains("The call was refused (not_allowed)"),
        "{text}"
    );
    assert_eq!(handler.0.load(Ordering::SeqCst), 0);

    let records = audit_settled(&audit, 3).await;
    assert_eq!(records.len(), 3, "{records:#?}");
    let outcomes: Vec<&str> = records
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes.iter().filter(|o| **o == "refused").count(),
        2,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes.iter().filter(|o| **o == "completed").count(),
        1,
        "{outcomes:?}"
    );
}

#[tokio::test]
async fn issue36_agent_base_asks_go_to_toolgates_channel_once() {
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
    let (builder, audit) = builder(config);
    let policy = ToolgatePolicy::new(
        HostedStack::new(builder.channel(person).build().unwrap()),
        AgentRef::profile("support"),
    );
    let ran: Ran = Arc::default();
    let handler = Arc::new(NeverAsked::default());
    let model = ScriptedModel::new(vec![
        calls(&[
            ("refund", json!({"order": 1, "amount": 10})),
            ("refund", json!({"order": 2, "amount": 20})),
        ]),
        says("done"),
    ]);
    let results = run(policy, model, &ran, handler.clone()).await;

    // Each call asked once, with the input the tool gets (agent-base decides a turn's calls in
    // no fixed order).
    let mut asked = asked.lock().unwrap().clone();
    asked.sort_by_key(|input| input["order"].as_u64());
    assert_eq!(
        asked,
        [
            json!({"order": 1, "amount": 10}),
            json!({"order": 2, "amount": 20})
        ]
    );
    assert_eq!(
        *ran.lock().unwrap(),
        [("refund".to_owned(), json!({"order": 1, "amount": 10}))]
    );
    assert_eq!(
        handler.0.load(Ordering::SeqCst),
        0,
        "agent-base's handler is not asked again"
    );
    let text = results.join("\n");
    assert!(text.contains("not today"), "{text}");
    let records = audit_settled(&audit, 2).await;
    assert!(
        records.iter().any(|r| r["approval"]["approver"] == "alice"),
        "{records:#?}"
    );
}

#[tokio::test]
async fn issue36_agent_base_quotas_fill_through_the_policy() {
    let (builder, _audit) = builder(CONFIG);
    let policy = ToolgatePolicy::new(
        HostedStack::new(builder.build().unwrap()),
        AgentRef::profile("support"),
    );
    let ran: Ran = Arc::default();
    let model = ScriptedModel::new(vec![
        calls(&[
            ("refund", json!({"order": 1, "amount": 1})),
            ("refund", json!({"order": 2, "amount": 2})),
            ("refund", json!({"order": 3, "amount": 3})),
        ]),
        says("done"),
    ]);
    let results = run(policy, model, &ran, Arc::default()).await;
    assert_eq!(ran.lock().unwrap().len(), 2);
    assert!(results.join("\n").contains("rate_limited"), "{results:#?}");
}

#[tokio::test]
async fn issue36_agent_base_a_held_call_is_blocked_with_the_held_text() {
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
    let (builder, audit) = builder(config);
    let policy = ToolgatePolicy::new(
        HostedStack::new(builder.channel(inbox.channel()).build().unwrap()),
        AgentRef::profile("support"),
    )
    .with_session("conversation-1");
    let ran: Ran = Arc::default();
    let model = ScriptedModel::new(vec![
        calls(&[("refund", json!({"order": 3, "amount": 30}))]),
        says("a person will answer"),
    ]);
    let results = run(policy, model, &ran, Arc::default()).await;
    assert!(ran.lock().unwrap().is_empty());
    assert!(
        results[0].contains("The call is waiting for a person's approval (interaction "),
        "{results:#?}"
    );
    let records = audit_settled(&audit, 1).await;
    assert_eq!(records[0]["outcome"], "held");
    assert_eq!(records[0]["session"], "conversation-1");
}

/// The hooks as agent-base's pipeline calls them: a call `before_call` sees with other
/// arguments than `evaluate_approval` decided is not run.
#[tokio::test]
async fn issue36_agent_base_runs_only_the_arguments_toolgate_decided() {
    let (builder, audit) = builder(CONFIG);
    let policy = ToolgatePolicy::new(
        HostedStack::new(builder.build().unwrap()),
        AgentRef::profile("support"),
    );
    let ctx = ToolContext::for_test();
    assert!(
        policy
            .evaluate_approval("refund", &json!({"order": 1, "amount": 50}))
            .await
            .is_none()
    );
    let other = policy
        .before_call("refund", &json!({"order": 1, "amount": 5000}), &ctx)
        .unwrap();
    assert!(
        matches!(other, agent_base::ToolDecision::Block(_)),
        "{other:?}"
    );
    let same = policy
        .before_call("refund", &json!({"order": 1, "amount": 50}), &ctx)
        .unwrap();
    assert!(
        matches!(same, agent_base::ToolDecision::Proceed),
        "{same:?}"
    );
    policy
        .after_call(
            "refund",
            &json!({"order": 1, "amount": 50}),
            &[Content::text("ok")],
            &ctx,
        )
        .unwrap();
    let records = audit_settled(&audit, 1).await;
    assert_eq!(records[0]["outcome"], "completed");
}
