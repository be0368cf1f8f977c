//! R26, R38 on Postgres: two gate instances (each its own `PostgresInbox`, instance name and
//! toolgate stack) resume the same approved held calls at the same moment after the reason
//! to ask went away (the tenant rule removed, or only an agent-level ask left under
//! `auto_approve_required`). The fresh decision runs the call without asking, and the ticket
//! is still redeemed — the conditional claim — first: each call is sent exactly once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::*;
use serde_json::json;
use toolgate::GovernanceHandle;
use toolgate_core::{RunContext, RunMode, ToolCall, ToolResponse};
use toolgate_engine::CallView;
use toolgate_engine::Governance;
use toolgate_engine::config::{Format, load_str};
use toolgate_inbox::HeldCalls;
use toolgate_inbox::{Answer, Inbox, ResumeError, State};
use toolgate_inbox_postgres::PostgresInbox;

const CALLS: usize = 16;

/// `charge` asks through a tenant rule (and, with `agent_ask`, at the agent level too);
/// `relaxed` removes the rule.
fn governance(agent_ask: bool, relaxed: bool) -> Governance {
    let mut c = json!({
        "approval": {"channel": "inbox"},
        "tools": [{"kind": "http", "name": "charge", "description": "Charge a card"}],
        "agents": [{"name": "support", "allowed_tools": ["charge"]}]
    });
    if agent_ask {
        c["tools"][0]["approval"] = json!("require_approval");
    }
    if !relaxed {
        c["policy"] = json!({"rules": [{"effect": "ask", "tool": "charge", "reason": "charges need a person"}]});
    }
    load_str(&c.to_string(), Format::Json).unwrap()
}

struct Gate {
    store: PostgresInbox,
    inbox: Inbox,
    tool: Tool,
    stack: Stack,
}

async fn gate(url: &str, schema: &str, instance: &str, governance: Governance) -> Gate {
    let store = connect(url, schema, instance).await;
    let handle = GovernanceHandle::new(governance);
    let inbox = Inbox::new(store.clone());
    let tool = Tool::default();
    let stack = stack(&handle, &inbox, &tool);
    Gate {
        store,
        inbox,
        tool,
        stack,
    }
}

async fn two_instances_send_each_once(agent_ask: bool) {
    let url = require_pg!();
    let schema = fresh_schema();
    let run = RunContext {
        mode: if agent_ask {
            RunMode::AutoApproveRequired
        } else {
            RunMode::UseAgentPolicy
        },
        background: false,
    };
    let call = |i: usize| ToolCall::new(support(), "charge", json!({"order": i})).with_run(run);

    // Held under the asking configuration …
    let holder = gate(&url, &schema, "holder", governance(agent_ask, false)).await;
    let mut ids = Vec::new();
    for i in 0..CALLS {
        let id = held(&holder.stack, call(i)).await;
        holder
            .store
            .answer(&id, Answer::approve(format!("k-{i}"), "alice"))
            .await
            .unwrap();
        ids.push(id);
    }
    // … resumed by two instances under the relaxed one, where nothing asks any more.
    let relaxed = governance(agent_ask, true);
    assert!(relaxed.decide(CallView::of(&call(0))).runs());
    let a = gate(&url, &schema, "gate-a", governance(agent_ask, true)).await;
    let b = gate(&url, &schema, "gate-b", governance(agent_ask, true)).await;

    let barrier = Arc::new(tokio::sync::Barrier::new(2 * CALLS));
    let mut tasks = Vec::new();
    for g in [&a, &b] {
        for id in &ids {
            let (inbox, stack, id, barrier) = (
                g.inbox.clone(),
                g.stack.clone(),
                id.clone(),
                Arc::clone(&barrier),
            );
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                inbox.resume(&id, stack).await
            }));
        }
    }
    let mut done = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(r) if r.recorded == Some(State::Done) => {
                assert!(matches!(r.response, ToolResponse::Completed(_)));
                done += 1;
            }
            Ok(r) => {
                assert!(r.response.refusal().is_some(), "a loser is refused: {r:?}");
                assert_eq!(r.recorded, None, "a loser records nothing");
            }
            Err(ResumeError::NotApproved { state, .. }) => {
                assert!(matches!(state, State::Claimed | State::Done), "{state}");
            }
            Err(e) => panic!("unexpected: {e}"),
        }
    }
    eprintln!(
        "agent_ask={agent_ask}: gate-a sent {}, gate-b sent {} of {CALLS}",
        a.tool.runs(),
        b.tool.runs()
    );
    assert_eq!(done, CALLS, "R26: every held call is sent");
    assert_eq!(
        a.tool.runs() + b.tool.runs(),
        CALLS,
        "R26, R38: exactly one tool invocation per held call"
    );
    let mut seen: HashMap<String, usize> = HashMap::new();
    for r in a.tool.received().into_iter().chain(b.tool.received()) {
        *seen.entry(r.input.to_string()).or_default() += 1;
    }
    assert_eq!(seen.len(), CALLS);
    for id in &ids {
        assert_eq!(a.store.get(id).await.unwrap().unwrap().state, State::Done);
        // A later resume, on either instance, is refused.
        for g in [&a, &b] {
            match g.inbox.resume(id, g.stack.clone()).await {
                Err(ResumeError::NotApproved {
                    state: State::Done, ..
                }) => {}
                other => panic!("R26: never twice: {other:?}"),
            }
        }
    }
    assert_eq!(a.tool.runs() + b.tool.runs(), CALLS);
    assert_eq!(holder.tool.runs(), 0);
    drop_schemas(&url, &[schema]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r38_two_instances_resuming_held_calls_whose_policy_was_relaxed_send_each_once() {
    two_instances_send_each_once(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r38_two_instances_resuming_auto_approved_agent_only_held_calls_send_each_once() {
    two_instances_send_each_once(true).await;
}
