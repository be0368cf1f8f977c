//! Governing real MCP servers: an agent over the reference filesystem and memory servers
//! (from the npm registry), the behaviour posture on, the filesystem server trusted.
//!
//! ```sh
//! layers/mcp/scripts/install-npm-servers.sh   # once: installs the servers into .tmp/
//! cargo run --example mcp_gateway
//! ```
//!
//! It prints what the model is shown, then runs a read (runs: a trusted read-only tool), a
//! write (asks: a scripted approver approves it), a memory write from a confidential agent
//! (refused `confidential`), and a "rug pull" by our own drift server while a call waits
//! for approval (caught: the approved call is not sent).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use toolgate::approval::{
    ApprovalChannel, ApprovalOutcome, ApprovalRequest, BoxFuture, InteractiveChannel,
};
use toolgate::core::{AgentRef, ChannelKind, ToolCall, ToolResponse};
use toolgate::engine::recording::RedactionSettings;
use toolgate::engine::{AgentProfile, Governance};
use toolgate::{GovernanceHandle, ToolgateLayer};
use toolgate_mcp::{
    DriftTrigger, McpCallError, McpGateway, McpServerConfig, SchemaValidationLayer, ToolChange,
};
use toolgate_mcp_testkit::drift_server::{DriftServer, Mode};
use tower::util::BoxCloneService;
use tower::{ServiceBuilder, ServiceExt};

const INSTALL: &str = "layers/mcp/scripts/install-npm-servers.sh";

/// Approves writes to files, and says so; denies everything else.
#[derive(Debug)]
struct ScriptedApprover;

impl ApprovalChannel for ScriptedApprover {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Interactive
    }

    fn request(&self, request: ApprovalRequest) -> BoxFuture<ApprovalOutcome> {
        for line in request.render().lines() {
            println!("    │ {line}");
        }
        let outcome = if request.tool == "fs__write_file" {
            println!("    │ scripted approver: approve (a write inside the sandbox)");
            ApprovalOutcome::Approved {
                approver: "scripted-approver".into(),
            }
        } else {
            println!("    │ scripted approver: deny");
            ApprovalOutcome::Denied {
                approver: "scripted-approver".into(),
                reason: None,
            }
        };
        Box::pin(std::future::ready(outcome))
    }
}

type Stack = BoxCloneService<ToolCall, ToolResponse, McpCallError>;

/// The governed stack: toolgate's composite (the configuration's redaction applied to what
/// the model reads), schema validation in its input slot, over the MCP service.
fn stack(
    handle: &GovernanceHandle,
    gateway: &McpGateway,
    channel: Arc<dyn ApprovalChannel>,
) -> Result<Stack, toolgate::engine::ConfigErrors> {
    let governed = ToolgateLayer::builder(handle.clone())
        .shared_channel(channel)
        .build()?
        .validate_input(SchemaValidationLayer::new(handle.clone()));
    Ok(ServiceBuilder::new()
        .layer(governed)
        .service(gateway.service())
        .boxed_clone())
}

fn servers_dir() -> PathBuf {
    match std::env::var_os("TOOLGATE_MCP_SERVERS") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tmp/mcp-servers"),
    }
}

fn entry(package: &str) -> PathBuf {
    servers_dir()
        .join("node_modules/@modelcontextprotocol")
        .join(package)
        .join("dist/index.js")
}

fn node(id: &str, entry: &Path) -> Result<McpServerConfig, Box<dyn std::error::Error>> {
    Ok(McpServerConfig::stdio(id, "node")?.arg(entry.display().to_string()))
}

fn show(r: &ToolResponse) -> String {
    let text = match r {
        ToolResponse::Completed(o) | ToolResponse::Failed(o) => o
            .content
            .as_array()
            .map(|b| {
                b.iter()
                    .filter_map(|c| c["text"].as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default(),
        other => other.model_text(),
    };
    let kind = match r {
        ToolResponse::Completed(_) => "completed",
        ToolResponse::Failed(_) => "failed",
        ToolResponse::Refused(_) => "refused",
        ToolResponse::Held(_) => "held",
    };
    format!("{kind}: {text}")
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp_gateway: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let (filesystem, memory) = (entry("server-filesystem"), entry("server-memory"));
    for e in [&filesystem, &memory] {
        if !e.is_file() {
            return Err(format!(
                "the reference MCP servers are not installed ({} is missing); run {INSTALL} first",
                e.display()
            )
            .into());
        }
    }
    let sandbox = std::env::temp_dir().join(format!("toolgate-mcp-gateway-{}", std::process::id()));
    std::fs::create_dir_all(&sandbox)?;
    let sandbox = sandbox.canonicalize()?;
    std::fs::write(sandbox.join("notes.txt"), "The launch is on Tuesday.\n")?;
    let result = demo(&sandbox, &filesystem, &memory).await;
    let _ = std::fs::remove_dir_all(&sandbox);
    result
}

async fn demo(
    sandbox: &Path,
    filesystem: &Path,
    memory: &Path,
) -> Result<(), Box<dyn std::error::Error>> {
    // The operator's configuration: posture on, two agent profiles. Tools arrive from the
    // servers at runtime.
    let handle = GovernanceHandle::new(
        Governance::builder()
            .channel(ChannelKind::Interactive)
            .require_approval_for_non_read_only(true)
            .redaction(RedactionSettings {
                scrub_output: true,
                ..RedactionSettings::default()
            })
            .agent(AgentProfile::new("assistant").allow([
                "fs__read_text_file",
                "fs__list_directory",
                "fs__write_file",
                "memory__read_graph",
                "memory__create_entities",
                "drift__lookup",
            ]))
            .agent(
                AgentProfile::new("analyst")
                    .confidential(true)
                    .allow(["memory__read_graph", "memory__create_entities"]),
            )
            .build()?,
    );
    let gateway = McpGateway::new(handle.clone());
    let mut drift_events = gateway.subscribe();

    println!("== connecting ==");
    // Trusted: the operator has assessed this publisher, so its read-only claims exempt.
    let fs = gateway
        .connect(
            node("fs", filesystem)?
                .arg(sandbox.display().to_string())
                .trust_tool_annotations(true),
        )
        .await?;
    // Untrusted (the default); its write tools are withheld from confidential work.
    let mem = gateway
        .connect(
            node("memory", memory)?
                .env(
                    "MEMORY_FILE_PATH",
                    sandbox.join("memory.jsonl").display().to_string(),
                )
                .confidential_tool("create_entities")
                .confidential_tool("create_relations")
                .confidential_tool("add_observations"),
        )
        .await?;
    // Our own drift server, in-process, untrusted.
    let drift_server = DriftServer::new();
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    tokio::spawn(drift_server.clone().serve_io(server_end));
    let drift = gateway
        .connect_with(McpServerConfig::custom("drift")?, client_end)
        .await?;
    for (id, event) in [("fs", &fs), ("memory", &mem), ("drift", &drift)] {
        println!(
            "  {id}: {} tools (the server calls itself `{}`; the source is `{id}`)",
            event.changes().len(),
            gateway.reported_name(id).unwrap_or_default()
        );
    }

    println!("\n== what the model sees (agent `assistant`) ==");
    for tool in gateway.model_tools("assistant")? {
        let how = if tool.wrapped { "asks first" } else { "runs" };
        let description = tool.description.unwrap_or_default();
        let short: String = description.chars().take(60).collect();
        let more = if short.len() < description.len() {
            "…"
        } else {
            ""
        };
        println!("  {:<26} {:<10} {short}{more}", tool.name, how);
    }
    println!("  (and `analyst`, confidential:)");
    for tool in gateway.model_tools("analyst")? {
        println!(
            "  {:<26} {}",
            tool.name,
            if tool.wrapped { "asks first" } else { "runs" }
        );
    }
    let omitted = handle.load().expose("analyst")?.omitted;
    if let Some(o) = omitted
        .iter()
        .find(|o| &*o.name == "memory__create_entities")
    {
        println!("  {:<26} omitted ({})", o.name, o.refusal.code);
    }

    let approver: Arc<dyn ApprovalChannel> = Arc::new(ScriptedApprover);
    let svc = stack(&handle, &gateway, approver)?;
    let assistant = AgentRef::profile("assistant");
    let path = |f: &str| sandbox.join(f).display().to_string();

    println!("\n== a read (trusted, read-only: runs) ==");
    let r = svc
        .clone()
        .oneshot(ToolCall::new(
            assistant.clone(),
            "fs__read_text_file",
            json!({"path": path("notes.txt")}),
        ))
        .await?;
    println!("  fs__read_text_file → {}", show(&r));

    println!("\n== a write (destructive: asks) ==");
    let r = svc
        .clone()
        .oneshot(ToolCall::new(
            assistant.clone(),
            "fs__write_file",
            json!({"path": path("summary.txt"), "content": "Launch: Tuesday."}),
        ))
        .await?;
    println!("  fs__write_file → {}", show(&r));
    println!(
        "  summary.txt now reads: {:?}",
        std::fs::read_to_string(sandbox.join("summary.txt")).unwrap_or_default()
    );

    println!("\n== a memory write from a confidential agent (refused) ==");
    let r = svc
        .clone()
        .oneshot(ToolCall::new(
            AgentRef::profile("analyst"),
            "memory__create_entities",
            json!({"entities": [{"name": "Project X", "entityType": "project", "observations": ["acquisition target"]}]}),
        ))
        .await?;
    println!("  memory__create_entities → {}", show(&r));

    println!("\n== drift: the server changes a tool while a call waits for approval ==");
    let (channel, mut questions) = InteractiveChannel::new(Duration::from_secs(30));
    let waiting_svc = stack(&handle, &gateway, Arc::new(channel))?;
    let waiting = tokio::spawn(waiting_svc.clone().oneshot(ToolCall::new(
        assistant.clone(),
        "drift__lookup",
        json!({"query": "Q3 numbers"}),
    )));
    let question = questions.recv().await.ok_or("no question was asked")?;
    println!(
        "  a person is asked about `{}` with input {}",
        question.request().tool,
        question.request().input
    );
    println!("  …meanwhile the server re-advertises `lookup` with a new description");
    drift_server.set_mode(Mode::Description, true).await;
    let event = loop {
        let e = drift_events.recv().await?;
        if e.server == "drift" && e.trigger == DriftTrigger::ListChanged {
            break e;
        }
    };
    for change in event.changes() {
        if let ToolChange::Changed {
            tool,
            old_hash,
            new_hash,
            aspects,
            ..
        } = change
        {
            let parts: Vec<&str> = aspects.iter().map(|a| a.as_str()).collect();
            println!(
                "  drift caught: {tool} changed {} ({}… → {}…)",
                parts.join(", "),
                &old_hash[..19],
                &new_hash[..19]
            );
        }
    }
    println!("  the person approves the question they were shown");
    question.approve("alice").map_err(|e| e.to_string())?;
    let r = waiting.await??;
    println!("  drift__lookup → {}", show(&r));
    println!(
        "  calls the drift server received for `lookup`: {}",
        drift_server.calls("lookup")
    );
    gateway.shutdown().await;
    Ok(())
}
