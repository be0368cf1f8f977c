//! The approval interaction on the interactive stream and the terminal's text (R43, seed
//! 002): the prompt names the tool's own name (with its server for an MCP tool), every
//! reason (a rule without a `reason` is described), the identity as the rule matched it,
//! the model's name, the agent (a subagent's id), the input as it will be sent, and the
//! call's session and turn.

use std::time::Duration;

use serde_json::json;
use toolgate::GovernanceHandle;
use toolgate::approval::{ApprovalGateLayer, InteractiveChannel};
use toolgate_core::{AgentRef, ToolCall, ToolIdentity, ToolOutput, ToolResponse, Turn};
use toolgate_engine::config::{Format, load_str};
use tower::{ServiceBuilder, ServiceExt, service_fn};

fn handle() -> GovernanceHandle {
    GovernanceHandle::new(
        load_str(
            &json!({
                "approval": {"channel": "interactive"},
                "tools": [
                    {"kind": "mcp", "server": "github", "name": "create_issue"},
                    {"kind": "http", "name": "refund"}
                ],
                "agents": [{"name": "support", "allowed_tools": ["github__create_issue", "refund"]}],
                "policy": {"rules": [
                    {"effect": "ask", "server": "github", "tool": "create_*"},
                    {"effect": "ask", "tool": "refund", "reason": "Refunds need a person"}
                ]}
            })
            .to_string(),
            Format::Json,
        )
        .unwrap(),
    )
}

#[tokio::test]
async fn r43_the_interactive_stream_shows_every_field_of_the_interaction() {
    let (channel, mut questions) = InteractiveChannel::new(Duration::from_secs(600));
    let stack = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle()).channel(channel))
        .service(service_fn(|call: ToolCall| async move {
            Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(call.input)))
        }));

    let call = ToolCall::new(
        AgentRef::subagent("support", "researcher"),
        "github__create_issue",
        json!({"title": "Broken build", "labels": ["ci"]}),
    )
    .in_turn("sess-1", "turn-2");
    let waiting = tokio::spawn(stack.clone().oneshot(call));
    let question = questions.recv().await.unwrap();
    let shown = question.request().interaction();
    assert_eq!(shown.id, question.request().interaction_id);
    assert_eq!(shown.prompt, "Approve github / create_issue?");
    assert_eq!(
        shown.reasons,
        vec!["tenant policy rule 0 asks about server `github`, tool `create_*`".to_owned()],
        "R43: a rule without a reason is described"
    );
    assert_eq!(shown.identity, ToolIdentity::mcp("github", "create_issue"));
    assert_eq!(shown.model_name, "github__create_issue");
    assert_eq!(shown.agent, "researcher", "R43: a subagent's id");
    assert_eq!(
        shown.input,
        json!({"title": "Broken build", "labels": ["ci"]})
    );
    assert_eq!(shown.turn, Some(Turn::new("sess-1", "turn-2")));
    let text = question.request().render();
    for needle in [
        "Approve github / create_issue?",
        "`github__create_issue`",
        "researcher",
        "session: sess-1  turn: turn-2",
        "tenant policy rule 0 asks about",
        "\"title\": \"Broken build\"",
    ] {
        assert!(
            text.contains(needle),
            "`{needle}` missing from the terminal text:\n{text}"
        );
    }
    question.approve("alice").unwrap();
    assert!(matches!(
        waiting.await.unwrap().unwrap(),
        ToolResponse::Completed(_)
    ));

    // An HTTP tool: `Approve tool?`, the rule's own reason, no session.
    let call = ToolCall::new(AgentRef::profile("support"), "refund", json!({"order": 7}));
    let waiting = tokio::spawn(stack.clone().oneshot(call));
    let question = questions.recv().await.unwrap();
    let shown = question.request().interaction();
    assert_eq!(shown.prompt, "Approve refund?");
    assert_eq!(shown.reasons, vec!["Refunds need a person".to_owned()]);
    assert_eq!(shown.agent, "support");
    assert_eq!(shown.turn, None);
    assert!(shown.to_json().get("session").is_none());
    question.deny("bob", None).unwrap();
    assert!(waiting.await.unwrap().unwrap().refusal().is_some());
}

#[tokio::test]
async fn r43_r41_the_prompt_names_the_own_name_behind_a_prefixing_gateway() {
    let handle = GovernanceHandle::new(
        load_str(
            &json!({
                "approval": {"channel": "interactive"},
                "servers": {"github": {"tool_prefix": "github-"}},
                "tools": [{"server": "github", "name": "github-create_issue"}],
                "agents": [{"name": "dev", "allowed_tools": ["github__create_issue"]}],
                "policy": {"rules": [{"effect": "ask", "server": "github", "tool": "create_issue", "reason": "issues need a person"}]}
            })
            .to_string(),
            Format::Json,
        )
        .unwrap(),
    );
    let (channel, mut questions) = InteractiveChannel::new(Duration::from_secs(600));
    let stack = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle).channel(channel))
        .service(service_fn(|call: ToolCall| async move {
            Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(call.input)))
        }));
    let call = ToolCall::new(AgentRef::profile("dev"), "github__create_issue", json!({}))
        .in_turn("s", "t");
    let waiting = tokio::spawn(stack.oneshot(call));
    let question = questions.recv().await.unwrap();
    let shown = question.request().interaction();
    assert_eq!(
        shown.prompt, "Approve github / create_issue?",
        "R41: the own name, never the listed `github-create_issue`"
    );
    assert_eq!(shown.identity.name(), "create_issue");
    assert_eq!(shown.model_name, "github__create_issue");
    question.deny("bob", None).unwrap();
    let _ = waiting.await.unwrap();
}
