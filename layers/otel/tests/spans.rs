//! The `execute_tool` spans of a whole toolgate stack (R33, R34), exported in memory.
//!
//! Every test drives a real `ServiceBuilder` stack: ToolSpanLayer → ExposureLayer →
//! ConfidentialityLayer → AirGapLayer → ApprovalGateLayer (with a scripted `FnChannel`) →
//! a `service_fn` tool.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::io;

use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer, TracerProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::{Value, json};
use toolgate::approval::{ApprovalGateLayer, ApprovalOutcome, ApprovalRequest, FnChannel};
use toolgate::core::{
    AgentRef, ChannelKind, DecisionSink, RefusalCode, RunContext, RunMode, ToolCall, ToolOutput,
    ToolResponse,
};
use toolgate::engine::PolicyState;
use toolgate::engine::config::{Format, load_str};
use toolgate::{AirGapLayer, ConfidentialityLayer, ExposureLayer, GovernanceHandle};
use toolgate_otel::ToolSpanLayer;
use toolgate_otel::attributes as attr;
use tower::util::BoxCloneService;
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};

type Stack = BoxCloneService<ToolCall, ToolResponse, io::Error>;

const CONFIG: &str = r#"{
    "air_gapped": true,
    "approval": {"channel": "interactive"},
    "tools": [
        {"toolset": "notes", "name": "read", "description": "Read a note", "read_only": true},
        {"toolset": "notes", "name": "other"},
        {"toolset": "notes", "name": "secret", "confidential": true},
        {"toolset": "notes", "name": "fail"},
        {"toolset": "notes", "name": "boom"},
        {"toolset": "notes", "name": "echo"},
        {"toolset": "notes", "name": "hang"},
        {"kind": "http", "name": "fetch", "network": "egress"},
        {"kind": "http", "name": "lookup", "network": "egress", "network_override": "incidental"},
        {"kind": "http", "name": "refund", "description": "Refund an order", "approval": "require_approval"},
        {"kind": "http", "name": "wipe", "approval": "deny"},
        {"kind": "http", "name": "transfer"},
        {"server": "gh", "name": "list_issues", "network_override": "none"}
    ],
    "agents": [{"name": "dev", "confidential": true, "allowed_tools": [
        "notes__read", "notes__secret", "notes__fail", "notes__boom", "notes__echo", "notes__hang",
        "fetch", "refund", "wipe", "transfer", "gh__list_issues", "lookup"]}],
    "policy": {"rules": [
        {"effect": "allow", "tool": "list_issues"},
        {"effect": "deny", "tool": "transfer", "when": {"amount": {"gt": 1000}}, "reason": "transfers over 1000 need finance"}
    ]}
}"#;

const TOKEN: &str = "abcdef0123456789abcdef0123456789";
const PASSWORD: &str = "hunter2";

fn handle() -> GovernanceHandle {
    GovernanceHandle::new(load_str(CONFIG, Format::Json).unwrap())
}

/// A person who approves unless the input says otherwise.
fn person(request: &ApprovalRequest) -> ApprovalOutcome {
    match request.input.get("answer").and_then(Value::as_str) {
        Some("deny") => ApprovalOutcome::Denied {
            approver: "bob".into(),
            reason: Some("not today".into()),
        },
        Some("expire") => ApprovalOutcome::Expired,
        _ => ApprovalOutcome::Approved {
            approver: "alice".into(),
        },
    }
}

/// The tool: fails, errors, echoes or hangs by name; otherwise completes.
async fn tool(call: ToolCall) -> Result<ToolResponse, io::Error> {
    // As the MCP tool service does for a call it sent on behalf of its caller (RFC 8693).
    if let (Some(subject), Some(sink)) = (
        call.input.get("sent_for").and_then(Value::as_str),
        call.extensions.get::<DecisionSink>(),
    ) {
        sink.record_delegation(toolgate::core::Delegation::new(
            "crm",
            subject,
            vec!["support-bot".into(), "planner".into()],
            "https://idp.example/token",
        ));
    }
    match call.tool.display_name().as_str() {
        "notes__fail" => Ok(ToolResponse::Failed(ToolOutput::new(json!("disk full")))),
        "notes__boom" => Err(io::Error::other("connection reset")),
        "notes__echo" => Ok(ToolResponse::Completed(ToolOutput {
            content: json!({"echo": call.input}),
            structured: Some(json!({"session": format!("Bearer {TOKEN}")})),
        })),
        "notes__hang" => std::future::pending().await,
        _ => Ok(ToolResponse::Completed(ToolOutput::new(json!("ok")))),
    }
}

fn stack_with(layer: ToolSpanLayer, handle: &GovernanceHandle, channel: bool) -> Stack {
    let gate = ApprovalGateLayer::new(handle.clone());
    let gate = if channel {
        gate.channel(FnChannel::new(ChannelKind::Interactive, person))
    } else {
        gate
    };
    BoxCloneService::new(
        ServiceBuilder::new()
            .layer(layer.with_governance(handle.clone()))
            .layer(ExposureLayer::new(handle.clone()))
            .layer(ConfidentialityLayer::new(handle.clone()))
            .layer(AirGapLayer::new(handle.clone()))
            .layer(gate)
            .service(service_fn(tool)),
    )
}

struct Harness {
    exporter: InMemorySpanExporter,
    provider: SdkTracerProvider,
}

impl Harness {
    fn new() -> Self {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        Self { exporter, provider }
    }

    fn stack(&self) -> Stack {
        stack_with(ToolSpanLayer::new(&self.provider), &handle(), true)
    }

    fn spans(&self) -> Vec<SpanData> {
        self.exporter.get_finished_spans().unwrap()
    }

    /// Calls `name` as agent `dev` through `stack` and returns the one span it made.
    async fn span_of(&self, stack: &Stack, name: &str, input: Value) -> (ToolResponse, SpanData) {
        self.span_of_call(stack, ToolCall::new(AgentRef::profile("dev"), name, input))
            .await
    }

    /// Sends `call` through `stack` and returns the one span it made.
    async fn span_of_call(&self, stack: &Stack, call: ToolCall) -> (ToolResponse, SpanData) {
        self.exporter.reset();
        let response = stack.clone().oneshot(call).await.unwrap();
        let mut spans = self.spans();
        assert_eq!(spans.len(), 1, "one span per call: {spans:?}");
        (response, spans.remove(0))
    }
}

fn attr_of(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

#[track_caller]
fn assert_attr(span: &SpanData, key: &str, value: &str) {
    assert_eq!(
        attr_of(span, key).as_deref(),
        Some(value),
        "`{key}` on {}",
        span.name
    );
}

#[track_caller]
fn assert_no_attr(span: &SpanData, key: &str) {
    assert_eq!(attr_of(span, key), None, "`{key}` on {}", span.name);
}

#[track_caller]
fn assert_execute_tool(span: &SpanData, tool: &str) {
    assert_eq!(span.name, format!("execute_tool {tool}"));
    assert_eq!(span.span_kind, SpanKind::Internal);
    assert_attr(span, attr::GEN_AI_OPERATION_NAME, "execute_tool");
    assert_attr(span, attr::GEN_AI_TOOL_NAME, tool);
    assert!(attr_of(span, attr::GEN_AI_TOOL_CALL_ID).is_some_and(|id| id.starts_with("call-")));
    assert_attr(span, attr::TOOLGATE_AGENT_PROFILE, "dev");
    assert_attr(span, attr::GEN_AI_GUARDRAIL_NAME, "toolgate");
}

/// A refusal: outcome, code, check, `error.type` and an error status.
#[track_caller]
fn assert_refused(span: &SpanData, code: RefusalCode, check: &str) {
    assert_attr(span, attr::TOOLGATE_DECISION_OUTCOME, "refused");
    assert_attr(span, attr::GEN_AI_GUARDRAIL_DECISION, "deny");
    assert_attr(span, attr::TOOLGATE_CALL_OUTCOME, "refused");
    assert_attr(span, attr::TOOLGATE_REFUSAL_CODE, code.as_str());
    assert_attr(span, attr::ERROR_TYPE, code.as_str());
    assert_attr(span, attr::TOOLGATE_DECISION_CHECK, check);
    assert!(
        matches!(&span.status, Status::Error { description } if description.contains(code.as_str())),
        "{:?}",
        span.status
    );
    assert!(attr_of(span, attr::TOOLGATE_DECISION_REASONS).is_some());
}

#[tokio::test]
async fn r34_a_call_that_runs_gets_one_execute_tool_span() {
    let h = Harness::new();
    let (response, span) = h.span_of(&h.stack(), "notes__read", json!({})).await;
    assert!(matches!(response, ToolResponse::Completed(_)));
    assert_execute_tool(&span, "notes__read");
    assert_attr(&span, attr::GEN_AI_TOOL_TYPE, "function");
    assert_attr(&span, attr::GEN_AI_TOOL_DESCRIPTION, "Read a note");
    assert_attr(&span, attr::TOOLGATE_DECISION_OUTCOME, "run");
    assert_attr(&span, attr::GEN_AI_GUARDRAIL_DECISION, "allow");
    assert_attr(&span, attr::TOOLGATE_CALL_OUTCOME, "completed");
    assert_attr(&span, attr::TOOLGATE_DECISION_CHECK, "all checks passed");
    assert_attr(&span, attr::TOOLGATE_APPROVAL_SOURCE, "not_asked");
    assert_attr(&span, attr::TOOLGATE_RUN_MODE, "use_agent_policy");
    assert_attr(&span, attr::TOOLGATE_RUN_BACKGROUND, "false");
    for key in [
        attr::ERROR_TYPE,
        attr::TOOLGATE_REFUSAL_CODE,
        attr::TOOLGATE_APPROVAL_APPROVER,
        attr::TOOLGATE_DECISION_RULE,
    ] {
        assert_no_attr(&span, key);
    }
    assert_eq!(span.status, Status::Unset);
}

#[tokio::test]
async fn r34_mcp_and_http_tools_are_extensions_and_matched_rules_are_recorded() {
    let h = Harness::new();
    let (_, span) = h.span_of(&h.stack(), "gh__list_issues", json!({})).await;
    assert_execute_tool(&span, "gh__list_issues");
    assert_attr(&span, attr::GEN_AI_TOOL_TYPE, "extension");
    assert_no_attr(&span, attr::GEN_AI_TOOL_DESCRIPTION);
    assert_attr(&span, attr::TOOLGATE_DECISION_OUTCOME, "run");
    assert_attr(&span, attr::TOOLGATE_DECISION_MATCHED_RULES, "[0]");
    // An allow rule matched; no rule denied.
    assert_no_attr(&span, attr::TOOLGATE_DECISION_RULE);
}

#[tokio::test]
async fn seed000_the_declared_network_scope_is_kept_beside_the_effective_one() {
    let h = Harness::new();
    let (response, span) = h.span_of(&h.stack(), "lookup", json!({})).await;
    assert!(
        matches!(response, ToolResponse::Completed(_)),
        "{response:?}"
    );
    assert_attr(&span, attr::TOOLGATE_TOOL_NETWORK_DECLARED, "egress");
    assert_attr(&span, attr::TOOLGATE_TOOL_NETWORK_EFFECTIVE, "incidental");
}

#[tokio::test]
async fn r34_an_asked_call_approved_by_a_person_records_the_approver() {
    let h = Harness::new();
    let (response, span) = h.span_of(&h.stack(), "refund", json!({"amount": 5})).await;
    assert!(matches!(response, ToolResponse::Completed(_)));
    assert_execute_tool(&span, "refund");
    assert_attr(&span, attr::GEN_AI_TOOL_TYPE, "extension");
    assert_attr(&span, attr::GEN_AI_TOOL_DESCRIPTION, "Refund an order");
    assert_attr(&span, attr::TOOLGATE_DECISION_OUTCOME, "ask");
    assert_attr(&span, attr::GEN_AI_GUARDRAIL_DECISION, "ask");
    assert_attr(&span, attr::TOOLGATE_CALL_OUTCOME, "completed");
    assert_attr(&span, attr::TOOLGATE_DECISION_CHECK, "approval routing");
    assert_attr(&span, attr::TOOLGATE_DECISION_ASK_SOURCES, r#"["agent"]"#);
    assert_attr(&span, attr::TOOLGATE_APPROVAL_SOURCE, "approved");
    assert_attr(&span, attr::TOOLGATE_APPROVAL_APPROVER, "alice");
    assert_no_attr(&span, attr::ERROR_TYPE);
    assert_eq!(span.status, Status::Unset);
}

#[tokio::test]
async fn r34_an_agent_level_ask_approved_by_the_run_mode_runs() {
    let h = Harness::new();
    let call = ToolCall::new(AgentRef::profile("dev"), "refund", json!({})).with_run(RunContext {
        mode: RunMode::AutoApproveRequired,
        background: false,
    });
    let (response, span) = h.span_of_call(&h.stack(), call).await;
    assert!(matches!(response, ToolResponse::Completed(_)));
    assert_attr(&span, attr::TOOLGATE_DECISION_OUTCOME, "run");
    assert_attr(&span, attr::GEN_AI_GUARDRAIL_DECISION, "allow");
    assert_attr(&span, attr::TOOLGATE_APPROVAL_SOURCE, "auto_approved");
    assert_attr(&span, attr::TOOLGATE_RUN_MODE, "auto_approve_required");
    assert_no_attr(&span, attr::TOOLGATE_APPROVAL_APPROVER);
}

#[tokio::test]
async fn r34_a_call_held_in_an_inbox_is_asked_not_failed() {
    let h = Harness::new();
    let inbox = GovernanceHandle::new(
        load_str(&CONFIG.replace("interactive", "inbox"), Format::Json).unwrap(),
    );
    let stack = BoxCloneService::new(
        ServiceBuilder::new()
            .layer(ToolSpanLayer::new(&h.provider).with_governance(inbox.clone()))
            .layer(ExposureLayer::new(inbox.clone()))
            .layer(ApprovalGateLayer::new(inbox).channel(FnChannel::new(
                ChannelKind::Inbox,
                |_req: &ApprovalRequest| ApprovalOutcome::Held {
                    interaction_id: "ia_0123456789abcdef".into(),
                },
            )))
            .service(service_fn(tool)),
    );
    let (response, span) = h.span_of(&stack, "refund", json!({})).await;
    assert!(matches!(response, ToolResponse::Held(_)));
    assert_execute_tool(&span, "refund");
    assert_attr(&span, attr::TOOLGATE_DECISION_OUTCOME, "ask");
    assert_attr(&span, attr::GEN_AI_GUARDRAIL_DECISION, "ask");
    assert_attr(&span, attr::TOOLGATE_CALL_OUTCOME, "held");
    assert_attr(&span, attr::TOOLGATE_APPROVAL_SOURCE, "held");
    assert_no_attr(&span, attr::ERROR_TYPE);
    assert_eq!(span.status, Status::Unset);
    // The interaction id is what an answer is addressed to: never on a span.
    for text in everything_on(&span) {
        assert!(!text.contains("ia_0123456789abcdef"), "{text}");
    }
}

#[tokio::test]
async fn r34_filter_refusals_unknown_tool_invalid_input_not_allowed_confidential_air_gapped() {
    let h = Harness::new();
    let stack = h.stack();
    let mut deep = json!(0);
    for _ in 0..100 {
        deep = json!([deep]);
    }
    for (tool, input, code, check) in [
        (
            "notes__nope",
            json!({}),
            RefusalCode::UnknownTool,
            "tool lookup",
        ),
        (
            "notes__read",
            json!({ "x": deep }),
            RefusalCode::InvalidInput,
            "input bounds",
        ),
        (
            "notes__other",
            json!({}),
            RefusalCode::NotAllowed,
            "allowed tools",
        ),
        (
            "notes__secret",
            json!({}),
            RefusalCode::Confidential,
            "confidentiality",
        ),
        ("fetch", json!({}), RefusalCode::AirGapped, "air gap"),
    ] {
        let (response, span) = h.span_of(&stack, tool, input).await;
        assert_eq!(response.refusal().map(|r| r.code), Some(code), "{tool}");
        assert_execute_tool(&span, tool);
        assert_refused(&span, code, check);
        // A filter refused it: the gate never waited.
        assert_no_attr(&span, attr::TOOLGATE_APPROVAL_SOURCE);
        if code == RefusalCode::UnknownTool {
            assert_no_attr(&span, attr::GEN_AI_TOOL_TYPE);
            assert_no_attr(&span, attr::GEN_AI_TOOL_DESCRIPTION);
        } else {
            assert!(attr_of(&span, attr::GEN_AI_TOOL_TYPE).is_some(), "{tool}");
        }
    }
}

#[tokio::test]
async fn r34_denied_by_the_agent_mode() {
    let h = Harness::new();
    let (_, span) = h.span_of(&h.stack(), "wipe", json!({})).await;
    assert_execute_tool(&span, "wipe");
    assert_refused(&span, RefusalCode::Denied, "agent approval mode");
    assert_attr(&span, attr::TOOLGATE_APPROVAL_SOURCE, "refused");
    assert_no_attr(&span, attr::TOOLGATE_DECISION_RULE);
}

#[tokio::test]
async fn r34_denied_by_a_tenant_rule_records_the_rule_index() {
    let h = Harness::new();
    let stack = h.stack();
    let (_, span) = h.span_of(&stack, "transfer", json!({"amount": 5000})).await;
    assert_execute_tool(&span, "transfer");
    assert_refused(&span, RefusalCode::Denied, "tenant policy");
    assert_attr(&span, attr::TOOLGATE_DECISION_RULE, "1");
    assert_attr(&span, attr::TOOLGATE_DECISION_MATCHED_RULES, "[1]");
    assert!(
        attr_of(&span, attr::TOOLGATE_DECISION_REASONS)
            .is_some_and(|r| r.contains("transfers over 1000 need finance"))
    );
    // Under the limit, no rule matches and the call runs.
    let (_, span) = h.span_of(&stack, "transfer", json!({"amount": 5})).await;
    assert_attr(&span, attr::TOOLGATE_DECISION_OUTCOME, "run");
    assert_no_attr(&span, attr::TOOLGATE_DECISION_RULE);
}

#[tokio::test]
async fn r34_no_approval_channel() {
    let h = Harness::new();
    let stack = stack_with(ToolSpanLayer::new(&h.provider), &handle(), false);
    let (_, span) = h.span_of(&stack, "refund", json!({})).await;
    assert_execute_tool(&span, "refund");
    assert_refused(&span, RefusalCode::NoApprovalChannel, "approval routing");
    assert_attr(&span, attr::TOOLGATE_DECISION_ASK_SOURCES, r#"["agent"]"#);
}

#[tokio::test]
async fn r34_rejected_by_the_approver_records_who_denied() {
    let h = Harness::new();
    let (_, span) = h
        .span_of(&h.stack(), "refund", json!({"answer": "deny"}))
        .await;
    assert_execute_tool(&span, "refund");
    assert_refused(&span, RefusalCode::Rejected, "approval routing");
    assert_attr(&span, attr::TOOLGATE_APPROVAL_SOURCE, "denied");
    assert_attr(&span, attr::TOOLGATE_APPROVAL_APPROVER, "bob");
}

#[tokio::test]
async fn r34_rejected_when_the_wait_expired_is_not_a_persons_denial() {
    let h = Harness::new();
    let (_, span) = h
        .span_of(&h.stack(), "refund", json!({"answer": "expire"}))
        .await;
    assert_refused(&span, RefusalCode::Rejected, "approval routing");
    assert_attr(&span, attr::TOOLGATE_APPROVAL_SOURCE, "expired");
    assert_no_attr(&span, attr::TOOLGATE_APPROVAL_APPROVER);
}

#[tokio::test]
async fn r34_policy_unreadable() {
    let h = Harness::new();
    let unreadable = handle()
        .load()
        .with_policy(PolicyState::Unreadable(
            "the policy store is corrupt".into(),
        ))
        .unwrap();
    let stack = stack_with(
        ToolSpanLayer::new(&h.provider),
        &GovernanceHandle::new(unreadable),
        true,
    );
    let (_, span) = h.span_of(&stack, "transfer", json!({"amount": 5})).await;
    assert_execute_tool(&span, "transfer");
    assert_refused(&span, RefusalCode::PolicyUnreadable, "tenant policy");
    assert_no_attr(&span, attr::TOOLGATE_DECISION_RULE);
}

#[tokio::test]
async fn r34_a_failed_tool_is_a_tool_error() {
    let h = Harness::new();
    let (response, span) = h.span_of(&h.stack(), "notes__fail", json!({})).await;
    assert!(matches!(response, ToolResponse::Failed(_)));
    assert_execute_tool(&span, "notes__fail");
    assert_attr(&span, attr::TOOLGATE_DECISION_OUTCOME, "run");
    assert_attr(&span, attr::TOOLGATE_CALL_OUTCOME, "failed");
    assert_attr(&span, attr::ERROR_TYPE, "tool_error");
    assert_no_attr(&span, attr::TOOLGATE_REFUSAL_CODE);
    assert!(matches!(span.status, Status::Error { .. }));
}

#[tokio::test]
async fn r34_a_transport_error_keeps_its_type_and_the_error_type_is_unchanged() {
    let h = Harness::new();
    h.exporter.reset();
    let result = h
        .stack()
        .oneshot(ToolCall::new(
            AgentRef::profile("dev"),
            "notes__boom",
            json!({}),
        ))
        .await;
    // The inner service's error comes back as it was.
    let error: io::Error = result.unwrap_err();
    assert_eq!(error.to_string(), "connection reset");
    let spans = h.spans();
    assert_eq!(spans.len(), 1);
    let span = &spans[0];
    assert_execute_tool(span, "notes__boom");
    assert_attr(span, attr::ERROR_TYPE, std::any::type_name::<io::Error>());
    assert_attr(span, attr::TOOLGATE_CALL_OUTCOME, "error");
    assert!(matches!(span.status, Status::Error { .. }));
    // The error's text (which could carry anything) is not on the span.
    assert!(
        span.attributes
            .iter()
            .all(|kv| !kv.value.to_string().contains("connection reset"))
    );
}

#[tokio::test]
async fn r34_content_is_off_by_default() {
    let h = Harness::new();
    let input = json!({"nested": {"password": PASSWORD}});
    let (_, span) = h.span_of(&h.stack(), "notes__echo", input).await;
    assert_no_attr(&span, attr::GEN_AI_TOOL_CALL_ARGUMENTS);
    assert_no_attr(&span, attr::GEN_AI_TOOL_CALL_RESULT);
}

/// Every string a span carries: its name, every attribute value, its status, its events.
fn everything_on(span: &SpanData) -> Vec<String> {
    let mut all = vec![span.name.to_string()];
    for kv in &span.attributes {
        all.push(format!("{}={}", kv.key, kv.value));
    }
    if let Status::Error { description } = &span.status {
        all.push(description.to_string());
    }
    for event in span.events.iter() {
        all.push(event.name.to_string());
        for kv in &event.attributes {
            all.push(format!("{}={}", kv.key, kv.value));
        }
    }
    all
}

#[tokio::test]
async fn r33_r34_with_content_on_secrets_reach_no_span_attribute() {
    let h = Harness::new();
    let stack = stack_with(
        ToolSpanLayer::new(&h.provider).with_content(true),
        &handle(),
        true,
    );
    let input = json!({
        "headers": {"authorization": format!("Bearer {TOKEN}")},
        "note": format!("call it with Bearer {TOKEN} please"),
        "nested": {"password": PASSWORD},
    });
    let (response, span) = h.span_of(&stack, "notes__echo", input.clone()).await;
    // The model still gets the tool's real output: the span layer only observes.
    assert!(
        matches!(&response, ToolResponse::Completed(o) if o.content.to_string().contains(PASSWORD))
    );
    let arguments = attr_of(&span, attr::GEN_AI_TOOL_CALL_ARGUMENTS).expect("arguments recorded");
    let result = attr_of(&span, attr::GEN_AI_TOOL_CALL_RESULT).expect("result recorded");
    assert!(arguments.contains("nested"), "{arguments}");
    assert!(result.contains("echo"), "{result}");
    for text in everything_on(&span) {
        assert!(!text.contains(PASSWORD), "password on the span: {text}");
        assert!(!text.contains(TOKEN), "bearer token on the span: {text}");
    }

    // Asked calls, refusals and failures carry no secret either.
    for (tool, extra) in [
        ("refund", json!("approve")),
        ("refund", json!("deny")),
        ("notes__fail", json!(null)),
        ("notes__other", json!(null)),
    ] {
        let mut input = input.clone();
        input["answer"] = extra;
        let (_, span) = h.span_of(&stack, tool, input).await;
        for text in everything_on(&span) {
            assert!(!text.contains(PASSWORD), "{tool}: {text}");
            assert!(!text.contains(TOKEN), "{tool}: {text}");
        }
    }
}

#[tokio::test]
async fn r33_an_unknown_tool_name_is_redacted_before_it_names_a_span() {
    let h = Harness::new();
    let name = format!("Bearer {TOKEN}");
    let (_, span) = h.span_of(&h.stack(), &name, json!({})).await;
    for text in everything_on(&span) {
        assert!(!text.contains(TOKEN), "{text}");
    }
    assert_attr(&span, attr::TOOLGATE_REFUSAL_CODE, "unknown_tool");
}

#[tokio::test]
async fn r33_the_span_reads_the_gates_note_without_taking_it() {
    let h = Harness::new();
    let sink = DecisionSink::default();
    let mut call = ToolCall::new(AgentRef::profile("dev"), "wipe", json!({}));
    call.extensions.insert(sink.clone());
    h.stack().oneshot(call).await.unwrap();
    let spans = h.spans();
    assert_attr(&spans[0], attr::TOOLGATE_REFUSAL_CODE, "denied");
    // An outer layer (audit) sharing the sink still finds the note.
    let note = sink.take().expect("the note is still there");
    assert_eq!(note.decision.decided_by.as_str(), "agent approval mode");
}

#[tokio::test]
async fn r34_spans_made_inside_the_call_are_children_of_the_tool_span() {
    let h = Harness::new();
    let tracer = h.provider.tracer("the-tool");
    let svc = ServiceBuilder::new()
        .layer(ToolSpanLayer::new(&h.provider))
        .service(service_fn(move |_call: ToolCall| {
            let inner = tracer.start("inner work");
            let cx = opentelemetry::Context::current_with_span(inner);
            async move {
                cx.span().end();
                Ok::<_, io::Error>(ToolResponse::Completed(ToolOutput::default()))
            }
        }));
    svc.oneshot(ToolCall::new(AgentRef::profile("dev"), "x", json!({})))
        .await
        .unwrap();
    let spans = h.spans();
    let outer = spans.iter().find(|s| s.name == "execute_tool x").unwrap();
    let inner = spans.iter().find(|s| s.name == "inner work").unwrap();
    assert_eq!(inner.parent_span_id, outer.span_context.span_id());
    assert_eq!(inner.span_context.trace_id(), outer.span_context.trace_id());
    // Without a gate nothing recorded a decision: the span claims none.
    assert_attr(outer, attr::TOOLGATE_CALL_OUTCOME, "completed");
    for key in [
        attr::TOOLGATE_DECISION_OUTCOME,
        attr::GEN_AI_GUARDRAIL_DECISION,
        attr::TOOLGATE_APPROVAL_SOURCE,
    ] {
        assert_no_attr(outer, key);
    }
    // Without a catalog, an unconfirmed name gets no type.
    assert_no_attr(outer, attr::GEN_AI_TOOL_TYPE);
}

#[tokio::test]
async fn r34_a_dropped_call_ends_its_span_as_cancelled() {
    let h = Harness::new();
    let mut stack = h.stack();
    let mut future = Box::pin(stack.ready().await.unwrap().call(ToolCall::new(
        AgentRef::profile("dev"),
        "notes__hang",
        json!({}),
    )));
    assert!(futures_poll_once(future.as_mut()).await.is_none());
    assert!(h.spans().is_empty(), "the span is still open");
    drop(future);
    let spans = h.spans();
    assert_eq!(spans.len(), 1);
    assert_attr(&spans[0], attr::ERROR_TYPE, "cancelled");
    assert_attr(&spans[0], attr::TOOLGATE_CALL_OUTCOME, "cancelled");
    assert_attr(&spans[0], attr::TOOLGATE_DECISION_OUTCOME, "run");
    assert!(matches!(spans[0].status, Status::Error { .. }));
}

/// Polls a future once.
async fn futures_poll_once<F: std::future::Future + Unpin>(mut f: F) -> Option<F::Output> {
    std::future::poll_fn(move |cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

#[tokio::test]
async fn readiness_is_forwarded() {
    let h = Harness::new();
    let (mut svc, mut mock) =
        tower_test::mock::spawn_layer::<ToolCall, ToolResponse, _>(ToolSpanLayer::new(&h.provider));
    mock.allow(0);
    assert!(svc.poll_ready().is_pending());
    mock.allow(1);
    assert!(svc.poll_ready().is_ready());
}

#[tokio::test]
async fn r34_the_global_provider_can_be_used() {
    let h = Harness::new();
    opentelemetry::global::set_tracer_provider(h.provider.clone());
    let svc = ServiceBuilder::new()
        .layer(ToolSpanLayer::global())
        .service(service_fn(|_call: ToolCall| async {
            Ok::<_, io::Error>(ToolResponse::Completed(ToolOutput::default()))
        }));
    svc.oneshot(ToolCall::new(AgentRef::profile("dev"), "x", json!({})))
        .await
        .unwrap();
    let spans = h.spans();
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0].instrumentation_scope.name(), "toolgate-otel");
}

#[tokio::test]
async fn issue22_a_call_with_a_verified_principal_names_it_on_its_span() {
    let h = Harness::new();
    let mut call = ToolCall::new(AgentRef::profile("dev"), "notes__read", json!({}));
    call.extensions.insert(toolgate::core::Principal {
        subject: String::from("alice@example.com"),
        issuer: String::from("https://idp.test/"),
    });
    let (_, span) = h.span_of_call(&h.stack(), call).await;
    assert_attr(&span, attr::TOOLGATE_PRINCIPAL_SUBJECT, "alice@example.com");
    assert_attr(&span, attr::TOOLGATE_PRINCIPAL_ISSUER, "https://idp.test/");
    let (_, span) = h.span_of(&h.stack(), "notes__read", json!({})).await;
    assert_no_attr(&span, attr::TOOLGATE_PRINCIPAL_SUBJECT);
}

#[tokio::test]
async fn issue35_11_a_call_sent_on_behalf_of_its_caller_names_the_subject_and_the_act_chain() {
    let h = Harness::new();
    let (response, span) = h
        .span_of(&h.stack(), "notes__read", json!({"sent_for": "alice"}))
        .await;
    assert!(matches!(response, ToolResponse::Completed(_)));
    assert_attr(&span, attr::TOOLGATE_DELEGATION_SUBJECT, "alice");
    assert_attr(
        &span,
        attr::TOOLGATE_DELEGATION_ACTORS,
        "support-bot,planner",
    );
    let (_, span) = h.span_of(&h.stack(), "notes__read", json!({})).await;
    assert_no_attr(&span, attr::TOOLGATE_DELEGATION_SUBJECT);
    assert_no_attr(&span, attr::TOOLGATE_DELEGATION_ACTORS);
}
