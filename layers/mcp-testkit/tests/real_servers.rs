//! Against the reference MCP servers from the npm registry (installed by
//! `scripts/install-npm-servers.sh`): server-everything, server-filesystem, server-memory.
//! Each test skips with a printed reason when they are not installed and `CI` is unset.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::sync::{Arc, Mutex};

use common::{node, npm_server};
use serde_json::{Value, json};
use toolgate::approval::{
    ApprovalChannel, ApprovalGateLayer, ApprovalOutcome, ApprovalRequest, FnChannel,
};
use toolgate::audit::{AuditLayer, MemorySink};
use toolgate::redact::Redactor;
use toolgate::scrub::ScrubOutputLayer;
use toolgate::{AirGapLayer, ConfidentialityLayer, ExposureLayer, GovernanceHandle};
use toolgate_core::{AgentRef, ChannelKind, McpAnnotations, RefusalCode, ToolCall, ToolResponse};
use toolgate_engine::{AgentProfile, Exemption, Governance, GovernanceBuilder};
use toolgate_mcp::{McpCallError, McpGateway, SchemaValidationLayer};
use tower::util::BoxCloneService;
use tower::{ServiceBuilder, ServiceExt};

type Stack = BoxCloneService<ToolCall, ToolResponse, McpCallError>;

macro_rules! server {
    ($package:literal) => {
        match npm_server($package) {
            Some(entry) => entry,
            None => return,
        }
    };
}

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
        .layer(ScrubOutputLayer::new(Redactor::default()))
        .service(gateway.service())
        .boxed_clone()
}

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
                reason: None,
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

fn hints(a: &McpAnnotations) -> [Option<bool>; 4] {
    [
        a.read_only_hint,
        a.destructive_hint,
        a.idempotent_hint,
        a.open_world_hint,
    ]
}

#[tokio::test]
async fn the_real_annotations_are_recorded_as_advertised() {
    let everything = server!("server-everything");
    let filesystem = server!("server-filesystem");
    let memory = server!("server-memory");
    let dir = tempfile::tempdir().unwrap();
    let handle = GovernanceHandle::new(Governance::builder().build().unwrap());
    let gateway = McpGateway::new(handle.clone());
    gateway
        .connect(node("everything", &everything))
        .await
        .unwrap();
    gateway
        .connect(node("fs", &filesystem).arg(dir.path().display().to_string()))
        .await
        .unwrap();
    gateway
        .connect(node("memory", &memory).env(
            "MEMORY_FILE_PATH",
            dir.path().join("memory.jsonl").display().to_string(),
        ))
        .await
        .unwrap();

    let mut table = String::new();
    for server in ["everything", "fs", "memory"] {
        for d in gateway.declarations(server).unwrap() {
            let a = d.annotations.clone().unwrap_or_default();
            table.push_str(&format!(
                "{server}__{}: readOnly={:?} destructive={:?} idempotent={:?} openWorld={:?}\n",
                d.identity.name(),
                a.read_only_hint,
                a.destructive_hint,
                a.idempotent_hint,
                a.open_world_hint
            ));
        }
    }
    eprintln!("{table}");

    let ann = |server: &str, tool: &str| {
        gateway
            .declarations(server)
            .unwrap()
            .into_iter()
            .find(|d| d.identity.name() == tool)
            .unwrap_or_else(|| panic!("{server} does not list {tool}"))
            .annotations
            .unwrap_or_else(|| panic!("{server}__{tool} has no annotations"))
    };
    // server-everything annotates every tool, with all four hints.
    for d in gateway.declarations("everything").unwrap() {
        let a = d.annotations.unwrap();
        assert!(hints(&a).iter().all(Option::is_some), "{:?}", d.identity);
    }
    assert_eq!(
        hints(&ann("everything", "get-env")),
        [Some(true), Some(false), Some(true), Some(false)]
    );
    assert_eq!(
        hints(&ann("everything", "gzip-file-as-resource")),
        [Some(false), Some(false), Some(true), Some(true)]
    );
    // server-filesystem: read tools read-only (destructive and idempotent unset), write
    // tools destructive; every tool closed-world.
    for tool in [
        "read_text_file",
        "list_directory",
        "search_files",
        "get_file_info",
    ] {
        assert_eq!(
            hints(&ann("fs", tool)),
            [Some(true), None, None, Some(false)],
            "{tool}"
        );
    }
    for tool in ["write_file", "edit_file", "move_file"] {
        let a = ann("fs", tool);
        assert_eq!(
            (a.read_only_hint, a.destructive_hint),
            (Some(false), Some(true)),
            "{tool}"
        );
    }
    assert_eq!(
        hints(&ann("fs", "create_directory")),
        [Some(false), Some(false), Some(true), Some(false)]
    );
    // server-memory: writes additive or destructive, reads read-only, all closed-world.
    assert_eq!(
        hints(&ann("memory", "create_entities")),
        [Some(false), Some(false), Some(false), Some(false)]
    );
    assert_eq!(
        hints(&ann("memory", "delete_entities")),
        [Some(false), Some(true), Some(true), Some(false)]
    );
    assert_eq!(
        hints(&ann("memory", "read_graph")),
        [Some(true), Some(false), Some(true), Some(false)]
    );
    // The sources are the configured ids, not the names the servers report.
    assert_eq!(
        gateway.reported_name("fs").as_deref(),
        Some("secure-filesystem-server")
    );
    assert!(handle.load().catalog().get("fs__read_text_file").is_some());
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_trusted_filesystem_read_runs_and_a_write_asks() {
    let filesystem = server!("server-filesystem");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("a.txt"), "alpha").unwrap();
    let handle = GovernanceHandle::new(
        gov()
            .agent(AgentProfile::new("dev").allow(["fs__read_text_file", "fs__write_file"]))
            .build()
            .unwrap(),
    );
    let gateway = McpGateway::new(handle.clone());
    gateway
        .connect(
            node("fs", &filesystem)
                .arg(root.display().to_string())
                .trust_tool_annotations(true),
        )
        .await
        .unwrap();
    let dev = AgentRef::profile("dev");
    let path = |f: &str| root.join(f).display().to_string();

    let (deny, asked) = recording(false);
    let stack = governed(&handle, &gateway, Some(deny));
    let read = stack
        .clone()
        .oneshot(ToolCall::new(
            dev.clone(),
            "fs__read_text_file",
            json!({"path": path("a.txt")}),
        ))
        .await
        .unwrap();
    assert_eq!(text(&read), "alpha");
    assert!(
        asked.lock().unwrap().is_empty(),
        "a trusted read-only tool runs"
    );

    let write = json!({"path": path("b.txt"), "content": "beta"});
    let r = stack
        .oneshot(ToolCall::new(dev.clone(), "fs__write_file", write.clone()))
        .await
        .unwrap();
    assert_eq!(r.refusal().unwrap().code, RefusalCode::Rejected);
    assert_eq!(asked.lock().unwrap().len(), 1, "the write asked");
    assert!(!root.join("b.txt").exists(), "denied: never written");

    let (approve, asked) = recording(true);
    let r = governed(&handle, &gateway, Some(approve))
        .oneshot(ToolCall::new(dev, "fs__write_file", write))
        .await
        .unwrap();
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert!(
        asked.lock().unwrap()[0]
            .reasons()
            .iter()
            .any(|r| r.contains("declares `write_file` destructive"))
    );
    assert_eq!(std::fs::read_to_string(root.join("b.txt")).unwrap(), "beta");

    // A real tool error is a failed result, not a transport error.
    let r = gateway
        .service()
        .with_insecure_no_permit()
        .oneshot(ToolCall::new(
            AgentRef::profile("x"),
            "fs__read_text_file",
            json!({"path": path("missing.txt")}),
        ))
        .await
        .unwrap();
    assert!(matches!(r, ToolResponse::Failed(_)), "{r:?}");
    gateway.shutdown().await;
}

#[tokio::test]
async fn an_untrusted_filesystem_servers_read_only_claims_exempt_nothing() {
    let filesystem = server!("server-filesystem");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("a.txt"), "alpha").unwrap();
    let handle = GovernanceHandle::new(
        gov()
            .agent(AgentProfile::new("dev").allow(["fs__read_text_file"]))
            .build()
            .unwrap(),
    );
    let gateway = McpGateway::new(handle.clone());
    gateway
        .connect(node("fs", &filesystem).arg(root.display().to_string()))
        .await
        .unwrap();
    assert!(gateway.model_tools("dev").unwrap()[0].wrapped);
    let (approve, asked) = recording(true);
    let r = governed(&handle, &gateway, Some(approve))
        .oneshot(ToolCall::new(
            AgentRef::profile("dev"),
            "fs__read_text_file",
            json!({"path": root.join("a.txt").display().to_string()}),
        ))
        .await
        .unwrap();
    assert_eq!(text(&r), "alpha");
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert!(
        asked[0]
            .reasons()
            .iter()
            .any(|r| r.contains("is not trusted, so its read-only claim"))
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn two_filesystem_servers_share_tool_names_without_leaking() {
    let filesystem = server!("server-filesystem");
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (docs_root, scratch_root) = (
        a.path().canonicalize().unwrap(),
        b.path().canonicalize().unwrap(),
    );
    std::fs::write(docs_root.join("a.txt"), "docs").unwrap();
    let handle = GovernanceHandle::new(
        gov()
            .exemption(
                Exemption::new("write_file", "docs is a scratch copy we reviewed").server("docs"),
            )
            .agent(AgentProfile::new("dev").allow([
                "docs__write_file",
                "scratch__write_file",
                "docs__read_text_file",
                "scratch__read_text_file",
            ]))
            .build()
            .unwrap(),
    );
    let gateway = McpGateway::new(handle.clone());
    gateway
        .connect(
            node("docs", &filesystem)
                .arg(docs_root.display().to_string())
                .trust_tool_annotations(true),
        )
        .await
        .unwrap();
    gateway
        .connect(node("scratch", &filesystem).arg(scratch_root.display().to_string()))
        .await
        .unwrap();
    let sink = Arc::new(MemorySink::new());
    let (deny, asked) = recording(false);
    let stack = ServiceBuilder::new()
        .layer(AuditLayer::shared(sink.clone()).governance(handle.clone()))
        .service(governed(&handle, &gateway, Some(deny)));
    let dev = AgentRef::profile("dev");

    // docs' exemption: its write runs without a question.
    let r = stack
        .clone()
        .oneshot(ToolCall::new(
            dev.clone(),
            "docs__write_file",
            json!({"path": docs_root.join("new.txt").display().to_string(), "content": "x"}),
        ))
        .await
        .unwrap();
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    assert!(asked.lock().unwrap().is_empty());
    // Not scratch's: same tool name, another server, so it asks (and is denied).
    let r = stack
        .clone()
        .oneshot(ToolCall::new(
            dev.clone(),
            "scratch__write_file",
            json!({"path": scratch_root.join("new.txt").display().to_string(), "content": "x"}),
        ))
        .await
        .unwrap();
    assert_eq!(r.refusal().unwrap().code, RefusalCode::Rejected);
    assert_eq!(asked.lock().unwrap().len(), 1);
    assert!(!scratch_root.join("new.txt").exists());
    // docs' trust does not make scratch's reads exempt either.
    let read = |server: &str| {
        ToolCall::new(
            dev.clone(),
            format!("{server}__read_text_file"),
            json!({"path": docs_root.join("a.txt").display().to_string()}),
        )
    };
    let r = stack.clone().oneshot(read("docs")).await.unwrap();
    assert_eq!(text(&r), "docs");
    let r = stack.clone().oneshot(read("scratch")).await.unwrap();
    assert_eq!(r.refusal().unwrap().code, RefusalCode::Rejected, "{r:?}");
    assert_eq!(asked.lock().unwrap().len(), 2);
    // And each call went to its own server: scratch cannot read docs' folder.
    let r = gateway
        .service()
        .with_insecure_no_permit()
        .oneshot(read("scratch"))
        .await
        .unwrap();
    assert!(matches!(r, ToolResponse::Failed(_)), "{r:?}");
    // The records say which server each call was for.
    let records: Vec<Value> = sink
        .lines()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for r in &records {
        let tool = r["tool"].as_str().unwrap();
        let source = r["identities"][0]["source"].as_str().unwrap();
        assert!(tool.starts_with(&format!("{source}__")), "{r}");
    }
    gateway.shutdown().await;
}

#[tokio::test]
async fn air_gapped_omits_the_open_world_gzip_tool() {
    let everything = server!("server-everything");
    let handle = GovernanceHandle::new(
        Governance::builder()
            .air_gapped(true)
            .agent(
                AgentProfile::new("dev")
                    .allow(["everything__gzip-file-as-resource", "everything__echo"]),
            )
            .build()
            .unwrap(),
    );
    let gateway = McpGateway::new(handle.clone());
    gateway
        .connect(node("everything", &everything))
        .await
        .unwrap();
    let exposure = handle.load().expose("dev").unwrap();
    let gzip = exposure
        .omitted
        .iter()
        .find(|t| &*t.name == "everything__gzip-file-as-resource")
        .unwrap();
    assert_eq!(gzip.refusal.code, RefusalCode::AirGapped);
    let names: Vec<&str> = exposure.tools.iter().map(|t| &*t.name).collect();
    assert_eq!(names, ["everything__echo"]);
    let stack = governed(&handle, &gateway, None);
    let r = stack
        .clone()
        .oneshot(ToolCall::new(
            AgentRef::profile("dev"),
            "everything__gzip-file-as-resource",
            json!({}),
        ))
        .await
        .unwrap();
    assert_eq!(r.refusal().unwrap().code, RefusalCode::AirGapped);
    let r = stack
        .oneshot(ToolCall::new(
            AgentRef::profile("dev"),
            "everything__echo",
            json!({"message": "hi"}),
        ))
        .await
        .unwrap();
    assert_eq!(text(&r), "Echo: hi");
    gateway.shutdown().await;
}

#[tokio::test]
async fn get_env_output_is_redacted_and_the_host_environment_stays_home() {
    let everything = server!("server-everything");
    let token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";
    let handle = GovernanceHandle::new(
        Governance::builder()
            .agent(AgentProfile::new("dev").allow(["everything__get-env"]))
            .build()
            .unwrap(),
    );
    let gateway = McpGateway::new(handle.clone());
    gateway
        .connect(
            node("everything", &everything)
                .env("GITHUB_TOKEN", token)
                .env("DB_PASSWORD", "hunter2-but-longer"),
        )
        .await
        .unwrap();
    // Unscrubbed: the secrets are there, and nothing of the host's own environment beyond
    // the default set (cargo sets CARGO_MANIFEST_DIR for this test process).
    let raw = gateway
        .service()
        .with_insecure_no_permit()
        .oneshot(ToolCall::new(
            AgentRef::profile("x"),
            "everything__get-env",
            json!({}),
        ))
        .await
        .unwrap();
    let raw = text(&raw);
    assert!(raw.contains(token) && raw.contains("hunter2-but-longer"));
    assert!(raw.contains("\"PATH\""));
    assert!(!raw.contains("CARGO_MANIFEST_DIR"), "{raw}");
    // Through the stack with output scrubbing: neither secret reaches the model.
    let r = governed(&handle, &gateway, None)
        .oneshot(ToolCall::new(
            AgentRef::profile("dev"),
            "everything__get-env",
            json!({}),
        ))
        .await
        .unwrap();
    let seen = serde_json::to_string(&match &r {
        ToolResponse::Completed(o) => o.content.clone(),
        other => panic!("{other:?}"),
    })
    .unwrap();
    assert!(!seen.contains(token), "{seen}");
    assert!(!seen.contains("hunter2"), "{seen}");
    assert!(
        seen.contains("GITHUB_TOKEN") && seen.contains("[REDACTED]"),
        "{seen}"
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_memory_write_from_a_confidential_agent_is_refused() {
    let memory = server!("server-memory");
    let dir = tempfile::tempdir().unwrap();
    let handle = GovernanceHandle::new(
        Governance::builder()
            .agent(
                AgentProfile::new("analyst")
                    .confidential(true)
                    .allow(["memory__create_entities", "memory__read_graph"]),
            )
            .agent(AgentProfile::new("helper").allow(["memory__create_entities"]))
            .build()
            .unwrap(),
    );
    let gateway = McpGateway::new(handle.clone());
    gateway
        .connect(
            node("memory", &memory)
                .env(
                    "MEMORY_FILE_PATH",
                    dir.path().join("m.jsonl").display().to_string(),
                )
                .confidential_tool("create_entities"),
        )
        .await
        .unwrap();
    let exposure = handle.load().expose("analyst").unwrap();
    let create = exposure
        .omitted
        .iter()
        .find(|t| &*t.name == "memory__create_entities")
        .unwrap();
    assert_eq!(create.refusal.code, RefusalCode::Confidential);
    assert!(
        exposure
            .tools
            .iter()
            .any(|t| &*t.name == "memory__read_graph")
    );
    let entities = json!({"entities": [{"name": "acme", "entityType": "customer", "observations": ["secret deal"]}]});
    let stack = governed(&handle, &gateway, None);
    let r = stack
        .clone()
        .oneshot(ToolCall::new(
            AgentRef::profile("analyst"),
            "memory__create_entities",
            entities.clone(),
        ))
        .await
        .unwrap();
    assert_eq!(r.refusal().unwrap().code, RefusalCode::Confidential);
    let r = stack
        .clone()
        .oneshot(ToolCall::new(
            AgentRef::profile("analyst"),
            "memory__read_graph",
            json!({}),
        ))
        .await
        .unwrap();
    assert!(!text(&r).contains("acme"), "nothing was written");
    let r = stack
        .oneshot(ToolCall::new(
            AgentRef::profile("helper"),
            "memory__create_entities",
            entities,
        ))
        .await
        .unwrap();
    assert!(matches!(r, ToolResponse::Completed(_)), "{r:?}");
    gateway.shutdown().await;
}

#[tokio::test]
async fn per_agent_stacks_over_several_servers() {
    let everything = server!("server-everything");
    let filesystem = server!("server-filesystem");
    let memory = server!("server-memory");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let handle = GovernanceHandle::new(
        gov()
            .agent(AgentProfile::new("reader").allow([
                "fs__read_text_file",
                "fs__list_directory",
                "memory__read_graph",
                "everything__get-sum",
            ]))
            .agent(AgentProfile::new("writer").allow(["fs__write_file", "memory__create_entities"]))
            .build()
            .unwrap(),
    );
    let gateway = McpGateway::new(handle.clone());
    gateway
        .connect(node("everything", &everything).trust_tool_annotations(true))
        .await
        .unwrap();
    gateway
        .connect(
            node("fs", &filesystem)
                .arg(root.display().to_string())
                .trust_tool_annotations(true),
        )
        .await
        .unwrap();
    gateway
        .connect(
            node("memory", &memory)
                .env(
                    "MEMORY_FILE_PATH",
                    root.join("m.jsonl").display().to_string(),
                )
                .trust_tool_annotations(true),
        )
        .await
        .unwrap();
    let seen = |agent: &str| -> Vec<(String, bool)> {
        gateway
            .model_tools(agent)
            .unwrap()
            .into_iter()
            .map(|t| {
                assert!(t.input_schema.is_some(), "{}", t.name);
                (t.name, t.wrapped)
            })
            .collect()
    };
    assert_eq!(
        seen("reader"),
        [
            ("everything__get-sum".to_owned(), false),
            ("fs__list_directory".to_owned(), false),
            ("fs__read_text_file".to_owned(), false),
            ("memory__read_graph".to_owned(), false),
        ]
    );
    assert_eq!(
        seen("writer"),
        [
            ("fs__write_file".to_owned(), true),
            ("memory__create_entities".to_owned(), true)
        ]
    );
    // Tool search draws from the exposed set only (R13).
    let exposure = handle.load().expose("reader").unwrap();
    let found: Vec<&str> = exposure.search("file").map(|t| &*t.name).collect();
    assert_eq!(found, ["fs__list_directory", "fs__read_text_file"]);
    assert!(exposure.search("write").next().is_none());

    // Each agent's stack: the reader's calls run, and the schema is the server's.
    let (deny, _) = recording(false);
    let stack = governed(&handle, &gateway, Some(deny));
    let reader = AgentRef::profile("reader");
    let r = stack
        .clone()
        .oneshot(ToolCall::new(
            reader.clone(),
            "everything__get-sum",
            json!({"a": 2, "b": 3}),
        ))
        .await
        .unwrap();
    assert!(text(&r).contains('5'), "{r:?}");
    let r = stack
        .clone()
        .oneshot(ToolCall::new(
            reader.clone(),
            "everything__get-sum",
            json!({"a": "two", "b": 3}),
        ))
        .await
        .unwrap();
    assert_eq!(r.refusal().unwrap().code, RefusalCode::InvalidInput);
    let r = stack
        .oneshot(ToolCall::new(
            reader,
            "fs__write_file",
            json!({"path": "x", "content": "y"}),
        ))
        .await
        .unwrap();
    assert_eq!(r.refusal().unwrap().code, RefusalCode::NotAllowed);
    gateway.shutdown().await;
}
