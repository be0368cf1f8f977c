//! Discovery, drift and the adversarial cases against our own drift server (the
//! `toolgate-mcp-drift-server` binary over stdio and streamable HTTP, and in-process).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::io::BufRead;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{drift, next_event};
use serde_json::{Value, json};
use toolgate::approval::{
    ApprovalChannel, ApprovalGateLayer, ApprovalOutcome, ApprovalRequest, FnChannel,
    InteractiveChannel,
};
use toolgate::audit::{AuditLayer, MemorySink};
use toolgate::{AirGapLayer, ConfidentialityLayer, ExposureLayer, GovernanceHandle, ToolgateLayer};
use toolgate_core::{
    AgentRef, ChannelKind, Check, RefusalCode, ToolCall, ToolIdentity, ToolResponse,
};
use toolgate_engine::policy::{Limits, Policy};
use toolgate_engine::{AgentProfile, Exemption, Governance, GovernanceBuilder};
use toolgate_mcp::{
    Aspect, DriftOutcome, DriftTrigger, GatewayError, McpCallError, McpGateway, McpServerConfig,
    SchemaValidationLayer, ToolChange,
};
use toolgate_mcp_testkit::drift_server::DriftServer;
use tower::util::BoxCloneService;
use tower::{ServiceBuilder, ServiceExt};

type Stack = BoxCloneService<ToolCall, ToolResponse, McpCallError>;

/// The whole governed stack, outermost first (see the crate docs' Ordering).
fn governed(
    handle: &GovernanceHandle,
    gateway: &McpGateway,
    channel: Option<Arc<dyn ApprovalChannel>>,
) -> Stack {
    let mut gate = ApprovalGateLayer::new(handle.clone());
    if let Some(c) = channel {
        gate = gate.shared_channel(c);
    }
    ServiceBuilder::new()
        .layer(SchemaValidationLayer::new(handle.clone()))
        .layer(ExposureLayer::new(handle.clone()))
        .layer(ConfidentialityLayer::new(handle.clone()))
        .layer(AirGapLayer::new(handle.clone()))
        .layer(gate)
        .service(gateway.service())
        .boxed_clone()
}

/// A scripted approver that records every question and answers `approve`.
fn recording(approve: bool) -> (Arc<dyn ApprovalChannel>, Arc<Mutex<Vec<ApprovalRequest>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&asked);
    let channel = FnChannel::new(ChannelKind::Interactive, move |req: &ApprovalRequest| {
        log.lock().unwrap().push(req.clone());
        if approve {
            ApprovalOutcome::Approved {
                approver: "script".into(),
            }
        } else {
            ApprovalOutcome::Denied {
                approver: "script".into(),
                reason: Some("not today".into()),
            }
        }
    });
    (Arc::new(channel), asked)
}

fn gov() -> GovernanceBuilder {
    Governance::builder()
        .channel(ChannelKind::Interactive)
        .require_approval_for_non_read_only(true)
}

fn dev() -> AgentRef {
    AgentRef::profile("dev")
}

/// Calls a drift server tool directly, outside governance (test control).
async fn raw(gateway: &McpGateway, server: &str, tool: &str, input: Value) -> ToolResponse {
    gateway
        .service()
        .with_insecure_no_permit()
        .oneshot(ToolCall::by_identity(
            AgentRef::profile("test"),
            ToolIdentity::mcp(server, tool),
            input,
        ))
        .await
        .unwrap()
}

/// How many `tools/call` requests the drift server received for `tool`.
async fn calls(gateway: &McpGateway, server: &str, tool: &str) -> u64 {
    let ToolResponse::Completed(out) = raw(gateway, server, "stats", json!({})).await else {
        panic!("stats failed")
    };
    out.structured.unwrap()["calls"][tool].as_u64().unwrap_or(0)
}

fn refusal(r: &ToolResponse) -> (RefusalCode, String) {
    let r = r.refusal().unwrap_or_else(|| panic!("not refused: {r:?}"));
    (r.code, r.reasons.join(" | "))
}

#[tokio::test]
async fn discovery_uses_the_configured_id_and_records_annotations_as_advertised() {
    let handle = GovernanceHandle::new(Governance::builder().build().unwrap());
    let gateway = McpGateway::new(handle.clone());
    // Paged listing: one tool per page.
    let event = gateway
        .connect(drift("drift").arg("--page-size").arg("1"))
        .await
        .unwrap();
    assert_eq!(event.trigger, DriftTrigger::Discovery);
    let added: Vec<&str> = event.changes().iter().map(ToolChange::tool).collect();
    assert_eq!(
        added,
        [
            "drift__lookup",
            "drift__write_note",
            "drift__bare",
            "drift__fail",
            "drift__stats",
            "drift__set_mode"
        ],
        "every page was read"
    );
    // The server calls itself something else; the source is the operator's id.
    assert_eq!(
        gateway.reported_name("drift").as_deref(),
        Some("definitely-the-trusted-server")
    );
    let g = handle.load();
    let lookup = g.catalog().get("drift__lookup").unwrap();
    let decl = &lookup.records[0].decl;
    assert_eq!(decl.identity, ToolIdentity::mcp("drift", "lookup"));
    let ann = decl.annotations.as_ref().unwrap();
    assert_eq!(
        (
            ann.read_only_hint,
            ann.destructive_hint,
            ann.idempotent_hint,
            ann.open_world_hint
        ),
        (Some(true), Some(false), Some(true), Some(false))
    );
    assert_eq!(ann.title.as_deref(), Some("Look up"));
    assert_eq!(
        decl.input_schema.as_ref().unwrap()["required"],
        json!(["query"])
    );
    assert!(
        g.catalog()
            .get("definitely-the-trusted-server__lookup")
            .is_none(),
        "the self-reported name is never a source"
    );
    assert!(
        g.catalog().get("drift__bare").unwrap().records[0]
            .decl
            .annotations
            .is_none()
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn an_untrusted_read_only_claim_on_a_writing_tool_does_not_exempt_it() {
    let handle = GovernanceHandle::new(
        gov()
            .agent(AgentProfile::new("dev").allow(["drift__write_note"]))
            .build()
            .unwrap(),
    );
    let gateway = McpGateway::new(handle.clone());
    gateway.connect(drift("drift")).await.unwrap();

    // `write_note` claims read-only; the server is not trusted, so it is shown wrapped…
    let seen = gateway.model_tools("dev").unwrap();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].wrapped, "{seen:?}");
    // …the claim is recorded and reported…
    let warnings: Vec<String> = handle
        .load()
        .warnings()
        .into_iter()
        .map(|w| w.message)
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("not trusted") && w.contains("write_note")),
        "{warnings:?}"
    );
    // …and a call asks; denied, it is never sent.
    let (channel, asked) = recording(false);
    let r = governed(&handle, &gateway, Some(channel))
        .oneshot(ToolCall::new(
            dev(),
            "drift__write_note",
            json!({"text": "hello"}),
        ))
        .await
        .unwrap();
    let (code, _) = refusal(&r);
    assert_eq!(code, RefusalCode::Rejected);
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert!(
        asked[0]
            .reasons()
            .iter()
            .any(|r| r.contains("is not trusted, so its read-only claim")),
        "{:?}",
        asked[0].reasons()
    );
    assert_eq!(calls(&gateway, "drift", "write_note").await, 0);
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_tool_with_no_annotations_is_gated_and_omitted_when_air_gapped() {
    // Not read-only: the posture gates it, even from a trusted server.
    let handle = GovernanceHandle::new(
        gov()
            .agent(AgentProfile::new("dev").allow(["drift__bare", "drift__lookup"]))
            .build()
            .unwrap(),
    );
    let gateway = McpGateway::new(handle.clone());
    gateway
        .connect(drift("drift").trust_tool_annotations(true))
        .await
        .unwrap();
    let seen = gateway.model_tools("dev").unwrap();
    let bare = seen.iter().find(|t| t.name == "drift__bare").unwrap();
    let lookup = seen.iter().find(|t| t.name == "drift__lookup").unwrap();
    assert!(bare.wrapped, "no annotations: not read-only, so gated");
    assert!(!lookup.wrapped, "a trusted read-only claim exempts");
    let (channel, asked) = recording(false);
    let r = governed(&handle, &gateway, Some(channel))
        .oneshot(ToolCall::new(dev(), "drift__bare", json!({})))
        .await
        .unwrap();
    assert_eq!(refusal(&r).0, RefusalCode::Rejected);
    assert!(
        asked.lock().unwrap()[0]
            .reasons()
            .iter()
            .any(|r| r.contains("does not declare `bare` read-only"))
    );
    gateway.shutdown().await;

    // Open-world by default: an air-gapped host omits it and refuses calls.
    let handle = GovernanceHandle::new(
        gov()
            .air_gapped(true)
            .agent(AgentProfile::new("dev").allow(["drift__bare", "drift__lookup"]))
            .build()
            .unwrap(),
    );
    let gateway = McpGateway::new(handle.clone());
    gateway.connect(drift("drift")).await.unwrap();
    let exposure = handle.load().expose("dev").unwrap();
    let omitted = exposure
        .omitted
        .iter()
        .find(|t| &*t.name == "drift__bare")
        .unwrap();
    assert_eq!(omitted.refusal.code, RefusalCode::AirGapped);
    assert!(
        exposure.tools.iter().any(|t| &*t.name == "drift__lookup"),
        "openWorldHint false keeps the closed-world tool"
    );
    let r = governed(&handle, &gateway, None)
        .oneshot(ToolCall::new(dev(), "drift__bare", json!({})))
        .await
        .unwrap();
    assert_eq!(refusal(&r).0, RefusalCode::AirGapped);
    assert_eq!(calls(&gateway, "drift", "bare").await, 0);
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_tool_name_the_server_never_listed_is_refused_before_any_message_is_sent() {
    let handle = GovernanceHandle::new(
        gov()
            .agent(AgentProfile::new("dev").allow(["drift__delete_everything"]))
            .build()
            .unwrap(),
    );
    let gateway = McpGateway::new(handle.clone());
    gateway.connect(drift("drift")).await.unwrap();
    // The MCP service on its own, by identity and by name.
    let r = raw(&gateway, "drift", "delete_everything", json!({})).await;
    assert_eq!(refusal(&r).0, RefusalCode::UnknownTool);
    let r = gateway
        .service()
        .with_insecure_no_permit()
        .oneshot(ToolCall::new(dev(), "drift__delete_everything", json!({})))
        .await
        .unwrap();
    assert_eq!(refusal(&r).0, RefusalCode::UnknownTool);
    // A server that is not connected, and a non-MCP identity.
    let r = raw(&gateway, "elsewhere", "lookup", json!({})).await;
    assert_eq!(refusal(&r).0, RefusalCode::UnknownTool);
    // The whole stack.
    let r = governed(&handle, &gateway, None)
        .oneshot(ToolCall::new(dev(), "drift__delete_everything", json!({})))
        .await
        .unwrap();
    assert_eq!(refusal(&r).0, RefusalCode::UnknownTool);
    assert_eq!(calls(&gateway, "drift", "delete_everything").await, 0);
    gateway.shutdown().await;
}

/// R35: the server changes `lookup` while a person reads the question; approved, the
/// call is not sent. Then the changed tool is decided afresh.
async fn rug_pull(mode: &str, aspect: Aspect) {
    let handle = GovernanceHandle::new(
        gov()
            .agent(AgentProfile::new("dev").allow(["drift__lookup"]))
            .build()
            .unwrap(),
    );
    let gateway = McpGateway::new(handle.clone());
    let mut events = gateway.subscribe();
    gateway.connect(drift("drift")).await.unwrap();
    let (channel, mut questions) = InteractiveChannel::new(Duration::from_secs(30));
    let stack = governed(&handle, &gateway, Some(Arc::new(channel)));
    let waiting = tokio::spawn(stack.clone().oneshot(ToolCall::new(
        dev(),
        "drift__lookup",
        json!({"query": "k1"}),
    )));
    let question = questions.recv().await.unwrap();
    assert_eq!(question.request().tool, "drift__lookup");

    // The rug pull, while the question waits.
    let r = raw(&gateway, "drift", "set_mode", json!({"mode": mode})).await;
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    let event = next_event(&mut events, "drift", |e| {
        e.change("drift__lookup").is_some()
    })
    .await;
    assert_eq!(event.trigger, DriftTrigger::ListChanged);
    let Some(ToolChange::Changed {
        old_hash,
        new_hash,
        aspects,
        ..
    }) = event.change("drift__lookup")
    else {
        panic!("{event:?}")
    };
    assert_ne!(old_hash, new_hash);
    assert_eq!(aspects, &[aspect]);

    question.approve("alice").unwrap();
    let r = waiting.await.unwrap().unwrap();
    let (code, why) = refusal(&r);
    assert_eq!(code, RefusalCode::Rejected);
    assert!(why.contains("changed while the call waited"), "{why}");
    assert_eq!(
        calls(&gateway, "drift", "lookup").await,
        0,
        "the approved call was never sent"
    );

    // Re-gated: the next call is a new question about the new definition.
    let again = tokio::spawn(stack.oneshot(ToolCall::new(
        dev(),
        "drift__lookup",
        json!({"query": "k2"}),
    )));
    let question = questions.recv().await.unwrap();
    assert_ne!(
        question.request().definition_hash,
        "",
        "the question is bound to a definition"
    );
    question.approve("alice").unwrap();
    let r = again.await.unwrap().unwrap();
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert_eq!(calls(&gateway, "drift", "lookup").await, 1);
    gateway.shutdown().await;
}

#[tokio::test]
async fn r35_a_new_description_after_an_approval_is_not_sent() {
    rug_pull("description", Aspect::Description).await;
}

#[tokio::test]
async fn r35_a_new_schema_after_an_approval_is_not_sent() {
    rug_pull("schema", Aspect::InputSchema).await;
}

#[tokio::test]
async fn r35_new_annotations_after_an_approval_are_not_sent() {
    rug_pull("annotations", Aspect::Annotations).await;
}

#[tokio::test]
async fn r29_a_trusted_server_revising_its_tool_is_believed_both_ways() {
    let handle = GovernanceHandle::new(
        gov()
            .agent(AgentProfile::new("dev").allow(["drift__lookup"]))
            .build()
            .unwrap(),
    );
    let gateway = McpGateway::new(handle.clone());
    let mut events = gateway.subscribe();
    gateway
        .connect(drift("drift").trust_tool_annotations(true))
        .await
        .unwrap();
    let (channel, asked) = recording(true);
    let stack = governed(&handle, &gateway, Some(channel));
    let call = || ToolCall::new(dev(), "drift__lookup", json!({"query": "k"}));

    // Trusted and read-only: runs without a question.
    let r = stack.clone().oneshot(call()).await.unwrap();
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert!(asked.lock().unwrap().is_empty());

    // The server now says it is destructive: believed, gated.
    raw(
        &gateway,
        "drift",
        "set_mode",
        json!({"mode": "annotations"}),
    )
    .await;
    let e = next_event(&mut events, "drift", |e| {
        e.change("drift__lookup").is_some()
    })
    .await;
    let Some(ToolChange::Changed { posture, .. }) = e.change("drift__lookup") else {
        panic!("{e:?}")
    };
    assert!(posture.as_ref().unwrap().is_gated());
    let r = stack.clone().oneshot(call()).await.unwrap();
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert_eq!(asked.lock().unwrap().len(), 1);
    assert!(
        asked.lock().unwrap()[0]
            .reasons()
            .iter()
            .any(|r| r.contains("declares `lookup` destructive"))
    );

    // And back to read-only: believed too.
    raw(&gateway, "drift", "set_mode", json!({"mode": "clean"})).await;
    next_event(&mut events, "drift", |e| {
        e.change("drift__lookup").is_some()
    })
    .await;
    let r = stack.oneshot(call()).await.unwrap();
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert_eq!(asked.lock().unwrap().len(), 1, "no new question");
    gateway.shutdown().await;
}

#[tokio::test]
async fn drift_reports_added_and_removed_tools_and_a_removed_tool_is_refused() {
    let handle = GovernanceHandle::new(
        gov()
            .agent(AgentProfile::new("dev").allow(["drift__lookup", "drift__extra"]))
            .build()
            .unwrap(),
    );
    let sink = Arc::new(MemorySink::new());
    let gateway = McpGateway::builder(handle.clone())
        .audit(sink.clone())
        .build();
    let mut events = gateway.subscribe();
    gateway.connect(drift("drift")).await.unwrap();
    let old_hash = gateway.declarations("drift").unwrap()[0].clone();
    assert_eq!(old_hash.identity.name(), "lookup");

    raw(&gateway, "drift", "set_mode", json!({"mode": "removed"})).await;
    let e = next_event(&mut events, "drift", |e| !e.changes().is_empty()).await;
    let kinds: Vec<(&str, &str)> = e.changes().iter().map(|c| (c.kind(), c.tool())).collect();
    assert_eq!(
        kinds,
        [("added", "drift__extra"), ("removed", "drift__lookup")]
    );
    let Some(ToolChange::Removed { old_hash, .. }) = e.change("drift__lookup") else {
        panic!()
    };
    assert!(old_hash.starts_with("sha256:"));

    // Gone from what the model sees; a call is refused and never sent.
    let names: Vec<String> = gateway
        .model_tools("dev")
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["drift__extra"]);
    let r = governed(&handle, &gateway, None)
        .oneshot(ToolCall::new(dev(), "drift__lookup", json!({"query": "k"})))
        .await
        .unwrap();
    assert!(r.is_refused(), "{r:?}");
    let r = raw(&gateway, "drift", "lookup", json!({"query": "k"})).await;
    assert_eq!(refusal(&r).0, RefusalCode::UnknownTool);
    assert_eq!(calls(&gateway, "drift", "lookup").await, 0);

    // Listed again: believed again.
    raw(&gateway, "drift", "set_mode", json!({"mode": "clean"})).await;
    let e = next_event(&mut events, "drift", |e| !e.changes().is_empty()).await;
    assert!(matches!(
        e.change("drift__lookup"),
        Some(ToolChange::Added { .. })
    ));
    assert!(
        gateway
            .model_tools("dev")
            .unwrap()
            .iter()
            .any(|t| t.name == "drift__lookup")
    );

    // Every event reached the audit sink, chained.
    let records: Vec<Value> = sink
        .lines()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 3, "discovery, removal, return");
    assert_eq!(records[1]["event"], "mcp_tools_changed");
    assert_eq!(records[1]["trigger"], "list_changed");
    assert_eq!(records[1]["changes"][1]["change"], "removed");
    let joined = sink.lines().join("\n");
    assert_eq!(
        toolgate::audit::verify_chain(std::io::Cursor::new(joined)).unwrap(),
        3
    );
    // R33: each is an audit event, read back and written again to the very line.
    for line in sink.lines() {
        let entry = toolgate_core::audit_record::AuditEntry::parse(&line).unwrap();
        assert!(
            matches!(entry, toolgate_core::audit_record::AuditEntry::Event(_)),
            "{line}"
        );
        let back = Value::Object(entry.to_map().unwrap());
        assert_eq!(
            toolgate_engine::canon::canonical_json(&back).as_deref(),
            Some(line.as_str())
        );
    }
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_periodic_relist_catches_a_server_that_changes_silently() {
    let handle = GovernanceHandle::new(Governance::builder().build().unwrap());
    let gateway = McpGateway::new(handle.clone());
    let mut events = gateway.subscribe();
    gateway
        .connect(drift("drift").relist_every(Duration::from_millis(200)))
        .await
        .unwrap();
    raw(
        &gateway,
        "drift",
        "set_mode",
        json!({"mode": "description", "notify": false}),
    )
    .await;
    let e = next_event(&mut events, "drift", |e| {
        e.change("drift__lookup").is_some()
    })
    .await;
    assert_eq!(e.trigger, DriftTrigger::Periodic);
    let desc = handle
        .load()
        .catalog()
        .get("drift__lookup")
        .unwrap()
        .records[0]
        .decl
        .description
        .clone()
        .unwrap();
    assert!(desc.contains("audit@example.invalid"), "{desc}");
    gateway.shutdown().await;
}

#[tokio::test]
async fn two_servers_with_the_same_tool_names_never_share_rules_exemptions_or_records() {
    let policy = Policy::from_json_str(
        r#"{"rules": [{"effect": "deny", "server": "beta", "tool": "lookup", "reason": "beta's lookup is off limits"}]}"#,
        &Limits::default(),
    )
    .unwrap();
    let handle = GovernanceHandle::new(
        gov()
            .exemption(Exemption::new("bare", "checked alpha's: it only echoes").server("alpha"))
            .policy(policy)
            .agent(AgentProfile::new("dev").allow([
                "alpha__lookup",
                "beta__lookup",
                "alpha__bare",
                "beta__bare",
            ]))
            .build()
            .unwrap(),
    );
    let gateway = McpGateway::new(handle.clone());
    gateway
        .connect(drift("alpha").trust_tool_annotations(true))
        .await
        .unwrap();
    gateway.connect(drift("beta")).await.unwrap();
    let sink = Arc::new(MemorySink::new());
    let (channel, asked) = recording(true);
    let stack = ServiceBuilder::new()
        .layer(AuditLayer::shared(sink.clone()).governance(handle.clone()))
        .service(governed(&handle, &gateway, Some(channel)));
    let call = |tool: &str| ToolCall::new(dev(), tool, json!({"query": "k"}));

    // Trust and the exemption belong to alpha: its tools run without a question.
    for tool in ["alpha__lookup", "alpha__bare"] {
        let r = stack.clone().oneshot(call(tool)).await.unwrap();
        assert!(matches!(r, ToolResponse::Completed(_)), "{tool}: {r:?}");
    }
    assert!(asked.lock().unwrap().is_empty());
    // The rule names beta: its lookup is denied, alpha's was not.
    let r = stack.clone().oneshot(call("beta__lookup")).await.unwrap();
    let (code, why) = refusal(&r);
    assert_eq!(code, RefusalCode::Denied);
    assert!(why.contains("beta's lookup is off limits"));
    // Alpha's exemption does not cover beta's `bare`: it asks.
    let r = stack.clone().oneshot(call("beta__bare")).await.unwrap();
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].identities, [ToolIdentity::mcp("beta", "bare")]);

    // Each call reached its own server only.
    assert_eq!(calls(&gateway, "alpha", "lookup").await, 1);
    assert_eq!(calls(&gateway, "beta", "lookup").await, 0);
    assert_eq!(calls(&gateway, "alpha", "bare").await, 1);
    assert_eq!(calls(&gateway, "beta", "bare").await, 1);

    // Records name the right source.
    let records: Vec<Value> = sink
        .lines()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let source_of = |tool: &str| {
        records
            .iter()
            .find(|r| r["tool"] == tool)
            .map(|r| r["identities"][0]["source"].clone())
            .unwrap()
    };
    assert_eq!(source_of("alpha__lookup"), "alpha");
    assert_eq!(source_of("beta__lookup"), "beta");
    assert_eq!(source_of("beta__bare"), "beta");
    gateway.shutdown().await;
}

#[tokio::test]
async fn results_map_content_structured_content_and_is_error() {
    let handle = GovernanceHandle::new(Governance::builder().build().unwrap());
    let gateway = McpGateway::new(handle);
    gateway.connect(drift("drift")).await.unwrap();
    let r = raw(&gateway, "drift", "lookup", json!({"query": "k"})).await;
    let ToolResponse::Completed(out) = r else {
        panic!("{r:?}")
    };
    assert_eq!(out.content, json!([{"type": "text", "text": "found k"}]));
    let r = raw(&gateway, "drift", "fail", json!({})).await;
    let ToolResponse::Failed(out) = r else {
        panic!("{r:?}")
    };
    assert_eq!(out.content[0]["text"], "it failed, as it always does");
    let r = raw(&gateway, "drift", "stats", json!({})).await;
    let ToolResponse::Completed(out) = r else {
        panic!("{r:?}")
    };
    assert_eq!(out.structured.unwrap()["mode"], "clean");
    gateway.shutdown().await;
}

#[tokio::test]
async fn r36_input_that_fails_the_advertised_schema_never_reaches_the_server() {
    let handle = GovernanceHandle::new(
        Governance::builder()
            .agent(AgentProfile::new("dev").allow(["drift__lookup"]))
            .build()
            .unwrap(),
    );
    let gateway = McpGateway::new(handle.clone());
    gateway.connect(drift("drift")).await.unwrap();
    // Outside exposure (SPEC order), and right outside the MCP service.
    let right_outside = ServiceBuilder::new()
        .layer(ExposureLayer::new(handle.clone()))
        .layer(ApprovalGateLayer::new(handle.clone()))
        .layer(SchemaValidationLayer::new(handle.clone()))
        .service(gateway.service())
        .boxed_clone();
    for stack in [governed(&handle, &gateway, None), right_outside] {
        for bad in [json!({}), json!({"query": 5})] {
            let r = stack
                .clone()
                .oneshot(ToolCall::new(dev(), "drift__lookup", bad))
                .await
                .unwrap();
            let (code, why) = refusal(&r);
            assert_eq!(code, RefusalCode::InvalidInput, "{why}");
        }
        let r = stack
            .oneshot(ToolCall::new(dev(), "drift__lookup", json!({"query": "k"})))
            .await
            .unwrap();
        assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    }
    assert_eq!(calls(&gateway, "drift", "lookup").await, 2);
    gateway.shutdown().await;
}

/// R38: the MCP service refuses what no gate passed. A stack without the gate sends
/// nothing; the composite (with schema validation in its `validate_input` slot) sends the
/// allowed call; a call whose input is changed after the gate is not sent.
#[tokio::test]
async fn r38_without_the_gate_the_mcp_service_sends_nothing() {
    let handle = GovernanceHandle::new(
        Governance::builder()
            .agent(AgentProfile::new("dev").allow(["drift__lookup", "drift__fail"]))
            .build()
            .unwrap(),
    );
    let gateway = McpGateway::new(handle.clone());
    gateway.connect(drift("drift")).await.unwrap();
    let no_gate = ServiceBuilder::new()
        .layer(ExposureLayer::new(handle.clone()))
        .layer(ConfidentialityLayer::new(handle.clone()))
        .layer(AirGapLayer::new(handle.clone()))
        .layer(SchemaValidationLayer::new(handle.clone()))
        .service(gateway.service());
    for (tool, input) in [
        ("drift__lookup", json!({"query": "k"})),
        ("drift__fail", json!({})),
    ] {
        let r = no_gate
            .clone()
            .oneshot(ToolCall::new(dev(), tool, input))
            .await
            .unwrap();
        let (code, why) = refusal(&r);
        assert_eq!(code, RefusalCode::Rejected, "{why}");
        assert!(why.contains("permit"), "{why}");
        assert_eq!(r.refusal().unwrap().decided_by, Check::Permit);
    }
    // The bare service, by identity, with no snapshot pinned at all.
    let r = gateway
        .service()
        .oneshot(ToolCall::by_identity(
            dev(),
            ToolIdentity::mcp("drift", "lookup"),
            json!({"query": "k"}),
        ))
        .await
        .unwrap();
    assert_eq!(refusal(&r).0, RefusalCode::Rejected);
    assert_eq!(calls(&gateway, "drift", "lookup").await, 0);
    assert_eq!(calls(&gateway, "drift", "fail").await, 0);

    // The composite, schema validation between the filters and the gate.
    let composite = ServiceBuilder::new()
        .layer(
            ToolgateLayer::builder(handle.clone())
                .build()
                .unwrap()
                .validate_input(SchemaValidationLayer::new(handle.clone())),
        )
        .service(gateway.service());
    let r = composite
        .clone()
        .oneshot(ToolCall::new(dev(), "drift__lookup", json!({"query": "k"})))
        .await
        .unwrap();
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    let r = composite
        .oneshot(ToolCall::new(dev(), "drift__lookup", json!({"query": 5})))
        .await
        .unwrap();
    assert_eq!(refusal(&r).0, RefusalCode::InvalidInput);
    assert_eq!(r.refusal().unwrap().decided_by, Check::InputSchema);
    assert_eq!(calls(&gateway, "drift", "lookup").await, 1);

    // A permit minted for one input does not pass another.
    let rewritten = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(handle.clone()))
        .map_request(|mut c: ToolCall| {
            c.input = json!({"query": "something else"});
            c
        })
        .service(gateway.service());
    let r = rewritten
        .oneshot(ToolCall::new(dev(), "drift__lookup", json!({"query": "k"})))
        .await
        .unwrap();
    let (code, why) = refusal(&r);
    assert_eq!(code, RefusalCode::Rejected);
    assert!(why.contains("input"), "{why}");
    assert_eq!(calls(&gateway, "drift", "lookup").await, 1);
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_failed_listing_refuses_the_servers_tools_until_one_succeeds() {
    let handle = GovernanceHandle::new(Governance::builder().build().unwrap());
    let gateway = McpGateway::new(handle);
    let mut events = gateway.subscribe();
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(DriftServer::new().serve_io(server_end));
    gateway
        .connect_with(McpServerConfig::custom("mem").unwrap(), client_end)
        .await
        .unwrap();
    let r = raw(&gateway, "mem", "lookup", json!({"query": "k"})).await;
    assert!(matches!(r, ToolResponse::Completed(_)));

    server.abort();
    let _ = server.await;
    let err = gateway.relist("mem").await.unwrap_err();
    assert!(matches!(err, GatewayError::Listing { .. }), "{err}");
    let e = next_event(&mut events, "mem", |e| {
        matches!(e.outcome, DriftOutcome::ListingFailed(_))
    })
    .await;
    assert_eq!(e.trigger, DriftTrigger::Manual);
    let r = raw(&gateway, "mem", "lookup", json!({"query": "k"})).await;
    let (code, why) = refusal(&r);
    assert_eq!(code, RefusalCode::Rejected);
    assert!(why.contains("could not be read"), "{why}");
}

#[tokio::test]
async fn connecting_refuses_duplicate_ids_and_unbounded_listings() {
    let handle = GovernanceHandle::new(Governance::builder().build().unwrap());
    let gateway = McpGateway::new(handle.clone());
    gateway.connect(drift("my server")).await.unwrap();
    let err = gateway.connect(drift("My_Server")).await.unwrap_err();
    assert!(matches!(err, GatewayError::Config(_)), "{err}");
    let err = gateway
        .connect(
            drift("paged")
                .arg("--page-size")
                .arg("1")
                .listing_bounds(3, 100),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("longer than 3 pages"), "{err}");
    // A trust setting the configuration already holds is the engine's "configured twice".
    let handle = GovernanceHandle::new(
        Governance::builder()
            .server("twice", toolgate_engine::ServerSettings::trusted())
            .build()
            .unwrap(),
    );
    let err = McpGateway::new(handle)
        .connect(drift("twice").trust_tool_annotations(false))
        .await
        .unwrap_err();
    assert!(matches!(err, GatewayError::Governance { .. }), "{err}");
    gateway.shutdown().await;
}

/// Kills the child when dropped.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn streamable_http_discovery_calls_and_list_changed() {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate-mcp-drift-server"))
        .args(["--http", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let _child = Child(child);
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_owned();

    let handle = GovernanceHandle::new(
        gov()
            .agent(AgentProfile::new("dev").allow(["web__lookup"]))
            .build()
            .unwrap(),
    );
    let gateway = McpGateway::new(handle.clone());
    let mut events = gateway.subscribe();
    let discovery = gateway
        .connect(
            McpServerConfig::streamable_http("web", url)
                .unwrap()
                .trust_tool_annotations(true),
        )
        .await
        .unwrap();
    assert_eq!(discovery.changes().len(), 6);
    let r = governed(&handle, &gateway, None)
        .oneshot(ToolCall::new(
            dev(),
            "web__lookup",
            json!({"query": "over http"}),
        ))
        .await
        .unwrap();
    let ToolResponse::Completed(out) = r else {
        panic!("{r:?}")
    };
    assert_eq!(out.content[0]["text"], "found over http");

    raw(&gateway, "web", "set_mode", json!({"mode": "annotations"})).await;
    let e = next_event(&mut events, "web", |e| e.change("web__lookup").is_some()).await;
    assert_eq!(e.trigger, DriftTrigger::ListChanged);
    // Now destructive: gated, and with no channel configured in the stack, refused.
    let r = governed(&handle, &gateway, None)
        .oneshot(ToolCall::new(dev(), "web__lookup", json!({"query": "x"})))
        .await
        .unwrap();
    assert_eq!(refusal(&r).0, RefusalCode::NoApprovalChannel);
    gateway.shutdown().await;
}

#[tokio::test]
async fn reapply_restores_the_tools_after_a_reload_and_disconnect_refuses_calls() {
    let base = || {
        Governance::builder()
            .agent(AgentProfile::new("dev").allow(["drift__lookup"]))
            .build()
            .unwrap()
    };
    let handle = GovernanceHandle::new(base());
    let gateway = McpGateway::new(handle.clone());
    gateway.connect(drift("drift")).await.unwrap();
    let call = || ToolCall::new(dev(), "drift__lookup", json!({"query": "k"}));

    // A configuration reload stores a snapshot built without the MCP tools…
    handle.store(base());
    let r = governed(&handle, &gateway, None)
        .oneshot(call())
        .await
        .unwrap();
    assert_eq!(refusal(&r).0, RefusalCode::UnknownTool);
    // …and the gateway registers them again.
    gateway.reapply().await.unwrap();
    let r = governed(&handle, &gateway, None)
        .oneshot(call())
        .await
        .unwrap();
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");

    gateway.disconnect("drift").await.unwrap();
    assert!(gateway.servers().is_empty());
    let r = governed(&handle, &gateway, None)
        .oneshot(call())
        .await
        .unwrap();
    assert_eq!(refusal(&r).0, RefusalCode::UnknownTool, "{r:?}");
    assert!(matches!(
        gateway.relist("drift").await,
        Err(GatewayError::UnknownServer(_))
    ));
}

/// R46, R52 (issue 33 item 8): the gateway's `mcp_tools_changed` record carries each added
/// tool's definition as the gateway registered it, so a replay of the log can judge calls to
/// tools no configuration declares.
#[tokio::test]
async fn r52_a_listing_record_carries_the_definitions_a_replay_registers_again() {
    let handle = GovernanceHandle::new(
        gov()
            .agent(AgentProfile::new("dev").allow(["drift__lookup"]))
            .build()
            .unwrap(),
    );
    let sink = Arc::new(MemorySink::new());
    let gateway = McpGateway::builder(handle.clone())
        .audit(sink.clone())
        .build();
    gateway.connect(drift("drift")).await.unwrap();
    let listed = gateway.declarations("drift").unwrap();
    let records: Vec<serde_json::Value> = sink
        .lines()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let record = records
        .iter()
        .find(|r| r["event"] == "mcp_tools_changed")
        .expect("the first listing is recorded");
    let changes = record["changes"].as_array().unwrap();
    assert_eq!(changes.len(), listed.len());
    for c in changes {
        let back = toolgate_engine::canon::listed_from_record(&c["definition"])
            .unwrap_or_else(|| panic!("no definition in {c}"));
        assert!(
            listed.iter().any(|d| d == &back),
            "{back:?} is not what the gateway registered"
        );
    }
    gateway.shutdown().await;
}
