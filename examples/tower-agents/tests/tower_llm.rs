//! tower-llm's agent loop, with a scripted model (the only stand-in: tower-llm as published),
//! calling two tools wrapped by `governed_tool`: the allowed one runs once, the one a rule
//! refuses never runs, and the model's next turn reads toolgate's refusal as the tool result.

use std::future::Ready;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use async_openai::types::{ChatCompletionResponseMessage, CreateChatCompletionRequest};
use serde_json::{Value, json};
use toolgate::core::AgentRef;
use toolgate::engine::config::{Format, load_str};
use toolgate::{GovernanceHandle, ToolgateLayer};
use toolgate_tower_agents::tower_llm::governed_tool;
use tower::BoxError;
use tower_llm::provider::ProviderResponse;
use tower_llm::{Agent, CompositePolicy, ToolDef, policies};

/// A model that answers each request with the next scripted assistant message.
#[derive(Clone)]
struct Scripted {
    replies: Arc<Mutex<Vec<Value>>>,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl tower::Service<CreateChatCompletionRequest> for Scripted {
    type Response = ProviderResponse;
    type Error = BoxError;
    type Future = Ready<Result<ProviderResponse, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: CreateChatCompletionRequest) -> Self::Future {
        self.seen
            .lock()
            .unwrap()
            .push(serde_json::to_value(&req.messages).unwrap());
        let mut replies = self.replies.lock().unwrap();
        let reply = if replies.is_empty() {
            json!({"role": "assistant", "content": "nothing more to do"})
        } else {
            replies.remove(0)
        };
        std::future::ready(
            serde_json::from_value::<ChatCompletionResponseMessage>(reply)
                .map(|assistant| ProviderResponse {
                    assistant,
                    prompt_tokens: 0,
                    completion_tokens: 0,
                })
                .map_err(Into::into),
        )
    }
}

fn counting(name: &'static str, runs: Arc<AtomicUsize>) -> ToolDef {
    ToolDef::from_handler(
        name,
        "A tool that counts its runs.",
        json!({"type": "object"}),
        Arc::new(move |args: Value| {
            let runs = Arc::clone(&runs);
            Box::pin(async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(json!({"ran": name, "args": args}))
            })
        }),
    )
}

fn tool_call(id: &str, name: &str, args: Value) -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}
    ]})
}

#[tokio::test]
async fn issue36_a_tower_llm_agent_runs_only_the_calls_toolgate_lets_through() {
    let handle = GovernanceHandle::new(
        load_str(
            r#"{"tools": [{"kind": "http", "name": "lookup"}, {"kind": "http", "name": "delete_account"}],
                "agents": [{"name": "support", "allowed_tools": ["lookup", "delete_account"]}],
                "policy": {"rules": [{"effect": "deny", "tool": "delete_account", "reason": "accounts are closed by people"}]}}"#,
            Format::Json,
        )
        .unwrap(),
    );
    let layer = ToolgateLayer::builder(handle).build().unwrap();
    let (lookups, deletes) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let support = AgentRef::profile("support");
    let model = Scripted {
        replies: Arc::new(Mutex::new(vec![
            tool_call("call-1", "lookup", json!({"q": "order 7"})),
            tool_call("call-2", "delete_account", json!({"user": 7})),
            json!({"role": "assistant", "content": "done"}),
        ])),
        seen: Arc::default(),
    };
    let seen = Arc::clone(&model.seen);
    let client = Arc::new(async_openai::Client::new());
    let mut agent = Agent::builder(client)
        .with_provider(model)
        .tool(governed_tool(
            counting("lookup", Arc::clone(&lookups)),
            &layer,
            support.clone(),
        ))
        .tool(governed_tool(
            counting("delete_account", Arc::clone(&deletes)),
            &layer,
            support,
        ))
        .policy(CompositePolicy::new(vec![
            policies::until_no_tool_calls(),
            policies::max_steps(6),
        ]))
        .build();
    let run = tower_llm::run(&mut agent, "You help with orders.", "close account 7")
        .await
        .unwrap();
    assert_eq!(
        lookups.load(Ordering::SeqCst),
        1,
        "the allowed call ran once"
    );
    assert_eq!(
        deletes.load(Ordering::SeqCst),
        0,
        "the refused call never ran"
    );
    // The model's turn after the refusal read it as the tool's result.
    let messages = serde_json::to_value(&run.messages).unwrap();
    let refusal = messages
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "call-2")
        .unwrap_or_else(|| panic!("no tool message for the refused call: {messages:#}"));
    let text = refusal["content"].to_string();
    assert!(text.contains("accounts are closed by people"), "{text}");
    assert!(text.contains("refused"), "{text}");
    let later = seen.lock().unwrap();
    assert!(
        later
            .last()
            .unwrap()
            .to_string()
            .contains("accounts are closed by people"),
        "the model's last turn saw the refusal"
    );
}
