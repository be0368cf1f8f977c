//! entelix's `ReActAgentBuilder`, with a scripted model (the only stand-in: entelix as
//! published), dispatching through a tool registry with toolgate's layer: the allowed tool
//! runs once, the one a rule refuses never runs, and the model reads toolgate's reason as an
//! error tool result.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use entelix_agents::{ReActAgentBuilder, ReActState};
use entelix_core::ir::{ContentPart, Message, Role, ToolResultContent};
use entelix_core::tools::{Tool, ToolMetadata};
use entelix_core::{AgentContext, ExecutionContext, Result, ToolRegistry};
use entelix_runnable::Runnable;
use serde_json::{Value, json};
use toolgate::core::AgentRef;
use toolgate::engine::config::{Format, load_str};
use toolgate::{GovernanceHandle, ToolgateLayer};
use toolgate_tower_agents::entelix::ToolgateToolLayer;

struct Scripted(Mutex<Vec<Message>>);

#[async_trait]
impl Runnable<Vec<Message>, Message> for Scripted {
    async fn invoke(&self, _input: Vec<Message>, _ctx: &ExecutionContext) -> Result<Message> {
        let mut script = self.0.lock().unwrap();
        Ok(if script.is_empty() {
            Message::assistant("nothing more to do")
        } else {
            script.remove(0)
        })
    }
}

struct Counting {
    metadata: ToolMetadata,
    runs: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for Counting {
    fn metadata(&self) -> &ToolMetadata {
        &self.metadata
    }
    async fn execute(&self, input: Value, _ctx: &AgentContext<()>) -> Result<Value> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(json!({"ran": self.metadata.name, "input": input}))
    }
}

fn counting(name: &str, runs: &Arc<AtomicUsize>) -> Arc<Counting> {
    Arc::new(Counting {
        metadata: ToolMetadata::function(
            name,
            "A tool that counts its runs.",
            json!({"type": "object"}),
        ),
        runs: Arc::clone(runs),
    })
}

fn tool_use(id: &str, name: &str, input: Value) -> Message {
    Message::new(
        Role::Assistant,
        vec![ContentPart::ToolUse {
            id: id.to_owned(),
            name: name.to_owned(),
            input,
            provider_echoes: Vec::new(),
        }],
    )
}

#[tokio::test]
async fn issue36_an_entelix_react_agent_runs_only_the_calls_toolgate_lets_through() {
    let handle = GovernanceHandle::new(
        load_str(
            r#"{"tools": [{"kind": "http", "name": "double"}, {"kind": "http", "name": "delete_account"}],
                "agents": [{"name": "research", "allowed_tools": ["double", "delete_account"]}],
                "policy": {"rules": [{"effect": "deny", "tool": "delete_account", "reason": "accounts are closed by people"}]}}"#,
            Format::Json,
        )
        .unwrap(),
    );
    let layer = ToolgateToolLayer::new(
        ToolgateLayer::builder(handle).build().unwrap(),
        AgentRef::profile("research"),
    );
    let (doubles, deletes) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let tools = ToolRegistry::new()
        .register(counting("double", &doubles))
        .unwrap()
        .register(counting("delete_account", &deletes))
        .unwrap()
        .layer_named("toolgate", layer);
    let model = Scripted(Mutex::new(vec![
        tool_use("call-1", "double", json!({"n": 21})),
        tool_use("call-2", "delete_account", json!({"user": 7})),
        Message::assistant("done"),
    ]));
    let agent = ReActAgentBuilder::new(model, tools).build().unwrap();
    let state = agent
        .execute(
            ReActState::from_user("close account 7"),
            &ExecutionContext::new(),
        )
        .await
        .unwrap()
        .into_state();
    assert_eq!(
        doubles.load(Ordering::SeqCst),
        1,
        "the allowed call ran once"
    );
    assert_eq!(
        deletes.load(Ordering::SeqCst),
        0,
        "the refused call never ran"
    );
    let refusal = state
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .find_map(|part| match part {
            ContentPart::ToolResult {
                tool_use_id,
                is_error,
                content,
                ..
            } if tool_use_id == "call-2" => Some((*is_error, content.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no tool result for the refused call: {:#?}", state.messages));
    assert!(refusal.0, "an error result");
    let text = match refusal.1 {
        ToolResultContent::Text(t) => t,
        other => format!("{other:?}"),
    };
    assert!(text.contains("accounts are closed by people"), "{text}");
}
