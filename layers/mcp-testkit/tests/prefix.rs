//! The gateway tool prefix (SPEC R41, seed 002), end to end: real MCP servers behind
//! `toolgate-mcp-prefix-gateway`, our own gateway that lists their tools with a prefix and
//! forwards calls without it. server-memory tests skip with a printed reason when the npm
//! servers are not installed and `CI` is unset (`scripts/install-npm-servers.sh`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::sync::{Arc, Mutex};

use common::{next_event, npm_server};
use serde_json::{Value, json};
use toolgate::approval::{
    ApprovalChannel, ApprovalGateLayer, ApprovalOutcome, ApprovalRequest, FnChannel,
};
use toolgate::{AirGapLayer, ConfidentialityLayer, ExposureLayer, GovernanceHandle};
use toolgate_core::{AgentRef, ChannelKind, RefusalCode, ToolCall, ToolIdentity, ToolResponse};
use toolgate_engine::catalog::PostureStatus;
use toolgate_engine::policy::{Limits, Policy};
use toolgate_engine::{AgentProfile, Governance, GovernanceBuilder, ServerSettings};
use toolgate_mcp::{
    Aspect, GatewayError, McpCallError, McpGateway, McpServerConfig, SchemaValidationLayer,
    ToolChange,
};
use tower::util::BoxCloneService;
use tower::{ServiceBuilder, ServiceExt};

type Stack = BoxCloneService<ToolCall, ToolResponse, McpCallError>;

/// `server`'s tools behind our prefixing gateway: `--prefix prefix`, `--keep` each of
/// `keep`, then the upstream command.
fn behind_gateway(id: &str, prefix: &str, keep: &[&str], upstream: &[&str]) -> McpServerConfig {
    let mut c = McpServerConfig::stdio(id, env!("CARGO_BIN_EXE_toolgate-mcp-prefix-gateway"))
        .unwrap()
        .arg("--prefix")
        .arg(prefix);
    for k in keep {
        c = c.arg("--keep").arg(*k);
    }
    c.arg("--").args(upstream.iter().copied())
}

/// The drift server behind the gateway.
fn drift_behind_gateway(id: &str, prefix: &str) -> McpServerConfig {
    behind_gateway(
        id,
        prefix,
        &[],
        &[env!("CARGO_BIN_EXE_toolgate-mcp-drift-server")],
    )
}

fn governed(
    handle: &GovernanceHandle,
    gateway: &McpGateway,
    channel: Arc<dyn ApprovalChannel>,
) -> Stack {
    ServiceBuilder::new()
        .layer(SchemaValidationLayer::new(handle.clone()))
        .layer(ExposureLayer::new(handle.clone()))
        .layer(ConfidentialityLayer::new(handle.clone()))
        .layer(AirGapLayer::new(handle.clone()))
        .layer(ApprovalGateLayer::new(handle.clone()).shared_channel(channel))
        .service(gateway.service())
        .boxed_clone()
}

/// A scripted approver that records every question and approves.
fn approving() -> (Arc<dyn ApprovalChannel>, Arc<Mutex<Vec<ApprovalRequest>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&asked);
    let channel = FnChannel::new(ChannelKind::Interactive, move |req: &ApprovalRequest| {
        log.lock().unwrap().push(req.clone());
        ApprovalOutcome::Approved {
            approver: "script".into(),
        }
    });
    (Arc::new(channel), asked)
}

fn gov() -> GovernanceBuilder {
    Governance::builder().channel(ChannelKind::Interactive)
}

fn dev() -> AgentRef {
    AgentRef::profile("dev")
}

fn text(r: &ToolResponse) -> String {
    match r {
        ToolResponse::Completed(o) | ToolResponse::Failed(o) => o
            .content
            .as_array()
            .map(|blocks| {
                blocks
                    .iter()
                    .filter_map(|b| b["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default(),
        other => panic!("no output: {other:?}"),
    }
}

fn refusal(r: &ToolResponse) -> (RefusalCode, String) {
    let r = r.refusal().unwrap_or_else(|| panic!("not refused: {r:?}"));
    (r.code, r.reasons.join(" | "))
}

#[tokio::test]
async fn r41_a_prefixed_memory_tool_is_governed_by_its_own_name_and_sent_under_its_listed_name() {
    let Some(memory) = npm_server("server-memory") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Tenant rules name the tool's own name; a rule naming the listed name matches nothing
    // (it would deny `create_entities` and `search_nodes` if it did).
    let policy = Policy::from_json_str(
        r#"{"rules": [
            {"effect": "ask", "server": "mem", "tool": "create_entities", "reason": "writes to memory need a person"},
            {"effect": "deny", "server": "mem", "tool": "delete_entities", "reason": "deleting needs a ticket"},
            {"effect": "deny", "server": "mem", "tool": "mem-create_entities", "reason": "names the listed name"},
            {"effect": "deny", "tool": "mem-search_nodes", "reason": "names the listed name"}
        ]}"#,
        &Limits::default(),
    )
    .unwrap();
    let handle = GovernanceHandle::new(
        gov()
            .policy(policy)
            .agent(AgentProfile::new("dev").allow([
                "mem__create_entities",
                "mem__delete_entities",
                "mem__search_nodes",
                "mem__read_graph",
            ]))
            .build()
            .unwrap(),
    );
    let gateway = McpGateway::new(handle.clone());
    let memory = memory.display().to_string();
    let discovery = gateway
        .connect(
            behind_gateway("mem", "mem-", &["read_graph"], &["node", &memory])
                .env(
                    "MEMORY_FILE_PATH",
                    dir.path().join("memory.jsonl").display().to_string(),
                )
                .tool_prefix("mem-"),
        )
        .await
        .unwrap();

    // Discovery: qualified names and identities use the own name.
    let added: Vec<(&str, &ToolIdentity)> = discovery
        .changes()
        .iter()
        .filter_map(|c| match c {
            ToolChange::Added { tool, identity, .. } => Some((tool.as_str(), identity)),
            _ => None,
        })
        .collect();
    assert!(
        added.contains(&(
            "mem__create_entities",
            &ToolIdentity::mcp("mem", "create_entities")
        )),
        "{added:?}"
    );
    assert!(
        added.iter().all(|(tool, _)| !tool.contains("mem-")),
        "{added:?}"
    );
    let decls = gateway.declarations("mem").unwrap();
    let create = decls
        .iter()
        .find(|d| d.identity.name() == "create_entities")
        .unwrap();
    assert_eq!(create.listed_name.as_deref(), Some("mem-create_entities"));
    assert_eq!(create.sent_name(), "mem-create_entities");
    // A listed name without the prefix keeps its name.
    let read = decls
        .iter()
        .find(|d| d.identity.name() == "read_graph")
        .unwrap();
    assert_eq!(read.listed_name, None);
    assert_eq!(read.sent_name(), "read_graph");
    // The engine agrees: its record is the gateway's declaration, and `check` warns for the
    // unprefixed name (R41).
    let governance = handle.load();
    let record = governance
        .catalog()
        .get("mem__create_entities")
        .unwrap()
        .records[0]
        .decl
        .clone();
    assert_eq!(&record, create);
    let warnings: Vec<String> = governance
        .warnings()
        .iter()
        .map(|w| w.message.clone())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("`read_graph`") && w.contains("R41")),
        "{warnings:?}"
    );
    assert!(
        !warnings.iter().any(|w| w.contains("create_entities")),
        "{warnings:?}"
    );
    let shown: Vec<String> = gateway
        .model_tools("dev")
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert!(
        shown.contains(&"mem__create_entities".to_owned()),
        "{shown:?}"
    );
    assert!(shown.iter().all(|n| !n.contains("mem-")), "{shown:?}");

    let (channel, asked) = approving();
    let stack = governed(&handle, &gateway, channel);
    let entities = json!({"entities": [{"name": "alice", "entityType": "person", "observations": ["likes tea"]}]});

    // The rule naming `create_entities` asks (the deny naming `mem-create_entities` does not
    // match, or the strictest rule would deny); approved, the call reaches server-memory
    // through the gateway under the listed name and returns its result.
    let r = stack
        .clone()
        .oneshot(ToolCall::new(
            dev(),
            "mem__create_entities",
            entities.clone(),
        ))
        .await
        .unwrap();
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert!(text(&r).contains("alice"), "{}", text(&r));
    {
        let asked = asked.lock().unwrap();
        assert_eq!(asked.len(), 1);
        assert_eq!(
            asked[0].identities,
            [ToolIdentity::mcp("mem", "create_entities")]
        );
        let reasons: Vec<&str> = asked[0].asks.iter().map(|a| a.reason.as_str()).collect();
        assert!(
            reasons.contains(&"writes to memory need a person"),
            "{reasons:?}"
        );
    }

    // The rule naming `delete_entities` denies it; a denied call is never sent.
    let r = stack
        .clone()
        .oneshot(ToolCall::new(
            dev(),
            "mem__delete_entities",
            json!({"entityNames": ["alice"]}),
        ))
        .await
        .unwrap();
    let (code, why) = refusal(&r);
    assert_eq!(code, RefusalCode::Denied);
    assert!(why.contains("deleting needs a ticket"), "{why}");

    // By identity, with its own name: the rule naming `mem-search_nodes` does not match.
    let r = stack
        .clone()
        .oneshot(ToolCall::by_identity(
            dev(),
            ToolIdentity::mcp("mem", "search_nodes"),
            json!({"query": "alice"}),
        ))
        .await
        .unwrap();
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert!(text(&r).contains("likes tea"), "{}", text(&r));

    // The kept, unprefixed tool runs too, and shows alice was never deleted.
    let r = stack
        .clone()
        .oneshot(ToolCall::new(dev(), "mem__read_graph", json!({})))
        .await
        .unwrap();
    assert!(text(&r).contains("alice"), "{}", text(&r));
    assert_eq!(asked.lock().unwrap().len(), 1, "only create_entities asked");

    // A call naming the tool by identity gives its own name: the listed name is no
    // identity, to the stack or to the service.
    let listed = ToolIdentity::mcp("mem", "mem-create_entities");
    let r = stack
        .clone()
        .oneshot(ToolCall::by_identity(
            dev(),
            listed.clone(),
            entities.clone(),
        ))
        .await
        .unwrap();
    assert_eq!(refusal(&r).0, RefusalCode::UnknownTool);
    let r = gateway
        .service()
        .oneshot(ToolCall::by_identity(dev(), listed, entities))
        .await
        .unwrap();
    assert_eq!(refusal(&r).0, RefusalCode::UnknownTool);
    gateway.shutdown().await;
}

#[tokio::test]
async fn r41_a_tool_relisted_under_the_same_listed_name_is_a_revision_of_its_own_name() {
    let handle = GovernanceHandle::new(Governance::builder().build().unwrap());
    let gateway = McpGateway::new(handle.clone());
    let mut events = gateway.subscribe();
    gateway
        .connect(drift_behind_gateway("d", "d-").tool_prefix("d-"))
        .await
        .unwrap();
    let call = |tool: &str, input: Value| {
        // Test control, outside governance: no gate, so no permit.
        gateway
            .service()
            .with_insecure_no_permit()
            .oneshot(ToolCall::by_identity(
                dev(),
                ToolIdentity::mcp("d", tool),
                input,
            ))
    };
    // Sent as `d-lookup`: the gateway forwards it as `lookup` (it refuses any name without
    // its prefix, so a call sent under the own name would fail).
    let r = call("lookup", json!({"query": "k"})).await.unwrap();
    assert_eq!(text(&r), "found k");
    let before = gateway
        .declarations("d")
        .unwrap()
        .into_iter()
        .find(|d| d.identity.name() == "lookup")
        .unwrap();
    assert_eq!(before.sent_name(), "d-lookup");

    // The upstream changes `lookup`'s description and says so; the gateway passes the
    // notification on and `d-lookup` is listed again: a revision of `lookup`.
    call("set_mode", json!({"mode": "description"}))
        .await
        .unwrap();
    let event = next_event(&mut events, "d", |e| !e.changes().is_empty()).await;
    let changes = event.changes();
    assert_eq!(changes.len(), 1, "{changes:?}");
    let ToolChange::Changed {
        tool,
        identity,
        aspects,
        ..
    } = &changes[0]
    else {
        panic!("{changes:?}")
    };
    assert_eq!(tool, "d__lookup");
    assert_eq!(identity, &ToolIdentity::mcp("d", "lookup"));
    assert_eq!(aspects, &[Aspect::Description]);
    // One record per own name: the revision replaced the definition.
    let governance = handle.load();
    let entry = governance.catalog().get("d__lookup").unwrap();
    assert!(
        entry
            .records
            .iter()
            .all(|r| r.decl.listed_name.as_deref() == Some("d-lookup")),
        "{:?}",
        entry.records
    );
    let now = gateway
        .declarations("d")
        .unwrap()
        .into_iter()
        .find(|d| d.identity.name() == "lookup")
        .unwrap();
    assert_eq!(entry.records.last().unwrap().decl, now);
    assert_ne!(now.description, before.description);

    // The upstream counted the calls under its own names.
    let r = call("stats", json!({})).await.unwrap();
    let ToolResponse::Completed(out) = r else {
        panic!("{r:?}")
    };
    let calls = &out.structured.unwrap()["calls"];
    assert_eq!(calls["lookup"], 1, "{calls}");
    assert_eq!(calls["set_mode"], 1, "{calls}");
    gateway.shutdown().await;
}

#[tokio::test]
async fn r41_trust_and_prefix_are_set_once_and_the_configuration_prefix_applies() {
    // The configuration's `servers` entry sets the prefix: the gateway server config need
    // not repeat it, and the tools are governed by their own names.
    let configured = || {
        GovernanceHandle::new(
            Governance::builder()
                .server("d", ServerSettings::trusted().tool_prefix("d-"))
                .build()
                .unwrap(),
        )
    };
    let handle = configured();
    let gateway = McpGateway::new(handle.clone());
    let discovery = gateway
        .connect(drift_behind_gateway("d", "d-"))
        .await
        .unwrap();
    // Trust applies by the own name: `d-lookup` (read-only) of the trusted server is exempt
    // from the posture; `d-bare` (no annotations) is gated. The posture is known for both,
    // so the snapshot's records are the gateway's declarations.
    let posture = |tool: &str| match discovery.change(tool) {
        Some(ToolChange::Added { posture, .. }) => posture.clone(),
        other => panic!("{tool}: {other:?}"),
    };
    assert!(
        matches!(posture("d__lookup"), Some(PostureStatus::Exempt(_))),
        "{:?}",
        posture("d__lookup")
    );
    assert!(
        matches!(posture("d__bare"), Some(PostureStatus::Gated(_))),
        "{:?}",
        posture("d__bare")
    );
    assert!(
        handle
            .load()
            .catalog()
            .get_identity(&ToolIdentity::mcp("d", "lookup"))
            .is_some()
    );
    assert_eq!(
        handle.load().server_settings("d"),
        Some(&ServerSettings::trusted().tool_prefix("d-"))
    );
    gateway.shutdown().await;

    // The same values on both sides are one setting.
    let gateway = McpGateway::new(configured());
    gateway
        .connect(
            drift_behind_gateway("d", "d-")
                .tool_prefix("d-")
                .trust_tool_annotations(true),
        )
        .await
        .unwrap();
    gateway.shutdown().await;

    // Different values are "configured twice": an error naming both.
    for (config, field, both) in [
        (
            drift_behind_gateway("d", "d-").tool_prefix("x-"),
            "servers.d.tool_prefix",
            ["`x-`", "`d-`"],
        ),
        (
            drift_behind_gateway("d", "d-").trust_tool_annotations(false),
            "servers.d.trust_tool_annotations",
            ["false", "true"],
        ),
    ] {
        let err = McpGateway::new(configured())
            .connect(config)
            .await
            .unwrap_err();
        let GatewayError::Governance { errors, .. } = &err else {
            panic!("{err}")
        };
        let message = errors.to_string();
        assert!(message.contains(field), "{message}");
        assert!(
            both.iter().all(|v| message.contains(v)),
            "{both:?}: {message}"
        );
    }
    // A server the configuration names without a prefix is not prefixed by the gateway.
    let handle = GovernanceHandle::new(
        Governance::builder()
            .server("d", ServerSettings::trusted())
            .build()
            .unwrap(),
    );
    let err = McpGateway::new(handle)
        .connect(drift_behind_gateway("d", "d-").tool_prefix("d-"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("none"), "{err}");

    // A blank prefix is refused before anything starts.
    let err = McpGateway::new(GovernanceHandle::new(
        Governance::builder().build().unwrap(),
    ))
    .connect(drift_behind_gateway("d", "d-").tool_prefix(" "))
    .await
    .unwrap_err();
    assert!(err.to_string().contains("servers.d.tool_prefix"), "{err}");

    // Set on the gateway only, the settings enter the snapshot, and survive a reload that
    // drops them (reapply registers them again).
    let handle = GovernanceHandle::new(Governance::builder().build().unwrap());
    let gateway = McpGateway::new(handle.clone());
    gateway
        .connect(drift_behind_gateway("d", "d-").tool_prefix("d-"))
        .await
        .unwrap();
    let expected = ServerSettings::untrusted().tool_prefix("d-");
    assert_eq!(handle.load().server_settings("d"), Some(&expected));
    handle.store(Governance::builder().build().unwrap());
    gateway.reapply().await.unwrap();
    assert_eq!(handle.load().server_settings("d"), Some(&expected));
    assert!(
        handle.load().catalog().get("d__lookup").is_some(),
        "the own name again"
    );
    gateway.shutdown().await;
}
