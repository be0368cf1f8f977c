//! Issue 22: the tool span carries the answering approver's verified principal
//! (`toolgate.approval.principal.subject` / `.issuer`) beside the approver's name, only when
//! their answer came with a verified identity-provider token. A call is held in a real
//! (SQLite) inbox, approved, and resumed through a stack whose spans are exported in memory.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::convert::Infallible;

use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::json;
use toolgate::approval::ApprovalGateLayer;
use toolgate::core::{AgentRef, Principal, ToolCall, ToolOutput, ToolResponse};
use toolgate::engine::config::{Format, load_str};
use toolgate::{ExposureLayer, GovernanceHandle};
use toolgate_inbox::{Answer, Inbox, SqliteInbox, SqliteOptions};
use toolgate_otel::ToolSpanLayer;
use toolgate_otel::attributes as attr;
use tower::util::BoxCloneService;
use tower::{ServiceBuilder, ServiceExt, service_fn};

type Stack = BoxCloneService<ToolCall, ToolResponse, Infallible>;

const CONFIG: &str = r#"{
    "approval": {"channel": "inbox"},
    "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"}],
    "agents": [{"name": "dev", "allowed_tools": ["refund"]}]
}"#;

fn stack(provider: &SdkTracerProvider, handle: &GovernanceHandle, inbox: &Inbox) -> Stack {
    BoxCloneService::new(
        ServiceBuilder::new()
            .layer(ToolSpanLayer::new(provider).with_governance(handle.clone()))
            .layer(ExposureLayer::new(handle.clone()))
            .layer(ApprovalGateLayer::new(handle.clone()).channel(inbox.channel()))
            .service(service_fn(|_call: ToolCall| async {
                Ok::<_, Infallible>(ToolResponse::Completed(ToolOutput::new(json!("refunded"))))
            })),
    )
}

fn attr_of(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| match &kv.value {
            Value::String(s) => s.as_str().to_owned(),
            other => other.to_string(),
        })
}

/// Holds a call to `refund`, answers it with `answer`, resumes it, and gives the span of
/// the resumed call.
async fn resumed_span(answer: Answer) -> SpanData {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteInbox::open(dir.path().join("inbox.db"), SqliteOptions::default()).unwrap();
    let inbox = Inbox::new(store);
    let handle = GovernanceHandle::new(load_str(CONFIG, Format::Json).unwrap());
    let s = stack(&provider, &handle, &inbox);
    let call = ToolCall::new(AgentRef::profile("dev"), "refund", json!({"order": 7}));
    let ToolResponse::Held(held) = s.clone().oneshot(call).await.unwrap() else {
        panic!("the call is held");
    };
    inbox
        .store()
        .answer(&held.interaction_id, answer)
        .await
        .unwrap();
    let resumed = inbox.resume(&held.interaction_id, s).await.unwrap();
    assert!(
        matches!(resumed.response, ToolResponse::Completed(_)),
        "{resumed:?}"
    );
    let spans = exporter.get_finished_spans().unwrap();
    assert_eq!(
        spans.len(),
        2,
        "the held call's span and the resumed call's"
    );
    let held_span = &spans[0];
    assert_eq!(
        attr_of(held_span, attr::TOOLGATE_APPROVAL_SOURCE).as_deref(),
        Some("held")
    );
    assert_eq!(
        attr_of(held_span, attr::TOOLGATE_APPROVAL_PRINCIPAL_SUBJECT),
        None,
        "nobody answered the held call yet"
    );
    let span = spans[1].clone();
    assert_eq!(
        attr_of(&span, attr::TOOLGATE_APPROVAL_SOURCE).as_deref(),
        Some("approved")
    );
    assert_eq!(
        attr_of(&span, attr::TOOLGATE_CALL_OUTCOME).as_deref(),
        Some("completed")
    );
    span
}

#[tokio::test]
async fn issue22_the_span_of_a_call_approved_by_a_jwt_approver_names_their_subject_and_issuer() {
    let p = Principal {
        subject: "u-7f3a".into(),
        issuer: "https://idp.example.com/realms/people".into(),
    };
    let span = resumed_span(Answer::approve("k-1", "alice").principal(Some(p))).await;
    assert_eq!(
        attr_of(&span, attr::TOOLGATE_APPROVAL_APPROVER).as_deref(),
        Some("alice")
    );
    assert_eq!(
        attr_of(&span, attr::TOOLGATE_APPROVAL_PRINCIPAL_SUBJECT).as_deref(),
        Some("u-7f3a")
    );
    assert_eq!(
        attr_of(&span, attr::TOOLGATE_APPROVAL_PRINCIPAL_ISSUER).as_deref(),
        Some("https://idp.example.com/realms/people")
    );
    // The caller had no verified token: the caller's principal is not the approver's.
    assert_eq!(attr_of(&span, attr::TOOLGATE_PRINCIPAL_SUBJECT), None);
}

#[tokio::test]
async fn issue22_the_span_of_a_call_approved_by_a_static_token_or_as_approver_has_no_principal() {
    // A static-token, header or `--as` approver answers with a name only.
    let span = resumed_span(Answer::approve("k-1", "ops-oncall")).await;
    assert_eq!(
        attr_of(&span, attr::TOOLGATE_APPROVAL_APPROVER).as_deref(),
        Some("ops-oncall")
    );
    assert_eq!(
        attr_of(&span, attr::TOOLGATE_APPROVAL_PRINCIPAL_SUBJECT),
        None
    );
    assert_eq!(
        attr_of(&span, attr::TOOLGATE_APPROVAL_PRINCIPAL_ISSUER),
        None
    );
}
