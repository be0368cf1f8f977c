//! The main demo: a scripted support agent calls tools through the whole toolgate stack on
//! an embedded configuration (`examples/demo.json`), and every call's outcome is printed
//! with the reason.
//!
//! ```sh
//! cargo run --example demo
//! ```
//!
//! Asked calls go to a terminal prompt when standard input is a terminal, and otherwise to
//! a scripted approver (approves refunds of at most 100, denies everything else).
//!
//! Every call gets an OpenTelemetry span (printed by the stdout exporter at the end; with
//! `--features otlp`, also sent over OTLP/HTTP to `OTEL_EXPORTER_OTLP_ENDPOINT`) and one
//! audit record in `target/demo/audit.jsonl`, whose hash chain the demo verifies. The demo's
//! files go to the workspace's `target/demo/` from any working directory (created when
//! missing; `TOOLGATE_DEMO_DIR` puts them elsewhere).
//!
//! Last, the restart story of a durable inbox (`examples/demo-inbox.json`): a first process
//! makes a call that is held in `target/demo/inbox.db` and exits; a second process approves
//! it with `toolgate inbox approve`; a third sends the approved call — once.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::approval::{
    ApprovalChannel, ApprovalOutcome, ApprovalRequest, BoxFuture, TerminalChannel,
};
use toolgate::audit::verify_chain;
use toolgate::core::{AgentRef, ChannelKind, ToolCall, ToolOutput, ToolResponse};
use toolgate::engine::config::{self, Format};
use toolgate::{GovernanceHandle, ToolgateLayer};
use toolgate_otel::ToolgateLayerExt;
use tower::{ServiceBuilder, ServiceExt, service_fn};

const CONFIG: &str = include_str!("demo.json");
const INBOX_CONFIG: &str = include_str!("demo-inbox.json");
/// Where the demo keeps its files: the workspace's `target/demo/`, whatever the working
/// directory (or `TOOLGATE_DEMO_DIR`), created when missing.
fn demo_dir() -> Result<std::path::PathBuf, Box<dyn std::error::Error>> {
    let dir = match std::env::var_os("TOOLGATE_DEMO_DIR") {
        Some(d) => std::path::PathBuf::from(d),
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/demo"),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
    Ok(dir.canonicalize().unwrap_or(dir))
}

/// The durable inbox of the restart story (`examples/approvals.json` names the same file).
fn inbox_db() -> Result<std::path::PathBuf, Box<dyn std::error::Error>> {
    Ok(demo_dir()?.join("inbox.db"))
}

/// Answers like a cautious person would, and says so.
#[derive(Debug)]
struct ScriptedApprover;

impl ApprovalChannel for ScriptedApprover {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Interactive
    }

    fn request(&self, request: ApprovalRequest) -> BoxFuture<ApprovalOutcome> {
        print!("{}", indent(&request.render(), "    │ "));
        let small_refund = request.tool == "refund_order"
            && request
                .input
                .get("amount")
                .and_then(Value::as_f64)
                .is_some_and(|a| a <= 100.0);
        let outcome = if small_refund {
            println!("    │ scripted approver: approve (a refund of at most 100)");
            ApprovalOutcome::Approved {
                approver: String::from("scripted-approver"),
            }
        } else {
            println!("    │ scripted approver: deny (not a small refund)");
            ApprovalOutcome::Denied {
                approver: String::from("scripted-approver"),
                reason: Some(String::from(
                    "only small refunds are approved by the script",
                )),
            }
        };
        Box::pin(std::future::ready(outcome))
    }
}

fn indent(text: &str, prefix: &str) -> String {
    text.lines().map(|l| format!("{prefix}{l}\n")).collect()
}

/// The tools themselves: what the agent's host would run.
async fn run_tool(call: ToolCall) -> Result<ToolResponse, std::convert::Infallible> {
    let name = call.tool.display_name();
    let content = match name.as_str() {
        "notes__read" => json!("Note 7: customer 42 prefers email."),
        "kb__search" => json!(["How refunds work", "Refund limits"]),
        // `redaction.keys` names `card` and `scrub_output` is on: the model never sees it.
        "refund_order" => json!({"refunded": call.input["amount"], "card": "4111 1111 1111 1111"}),
        "web__lookup" => json!({"customer": 42, "tier": "gold"}),
        other => json!(format!("{other} ran")),
    };
    Ok(ToolResponse::Completed(ToolOutput::new(content)))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--hold") => return hold().await,
        Some("--approve") => {
            return approve(args.get(1).map(String::as_str).unwrap_or_default()).await;
        }
        Some("--send") => {
            return send_held(args.get(1).map(String::as_str).unwrap_or_default()).await;
        }
        _ => {}
    }
    tour().await?;
    restart_story()
}

/// The first part: every outcome kind, spans and an audit file.
async fn tour() -> Result<(), Box<dyn std::error::Error>> {
    // Audit: the configuration's `audit.file`, put in the demo's directory (whatever the
    // working directory) and started fresh.
    let audit_path = demo_dir()?.join("audit.jsonl");
    let _ = std::fs::remove_file(&audit_path);
    let mut doc: Value = serde_json::from_str(CONFIG)?;
    doc["audit"]["file"] = json!(audit_path.display().to_string());
    let governance = config::load_str(&doc.to_string(), Format::Json)?;

    println!("== What the model of agent `support` is shown (R6–R13) ==");
    let seen = governance.expose("support")?;
    for t in &seen.tools {
        println!(
            "  shown    {:<14} {}",
            t.name,
            if t.wrapped {
                "wrapped for approval"
            } else {
                "raw"
            }
        );
    }
    for t in &seen.omitted {
        println!(
            "  omitted  {:<14} {} — {}",
            t.name, t.refusal.code, t.refusal
        );
    }

    let handle = GovernanceHandle::new(governance);

    // Spans: the OpenTelemetry SDK with the stdout exporter (and OTLP with `--features otlp`).
    let provider = tracer_provider()?;
    let channel: Arc<dyn ApprovalChannel> = if std::io::stdin().is_terminal() {
        println!("\n(standard input is a terminal: asked calls are put to you)");
        Arc::new(TerminalChannel::new("you", Duration::from_secs(120)))
    } else {
        println!("\n(standard input is not a terminal: a scripted approver answers)");
        Arc::new(ScriptedApprover)
    };
    // The whole stack in the security order, every section of the configuration applied:
    // span → audit → exposure → confidentiality → air gap → approval gate → scrub → tool.
    let governed = ToolgateLayer::builder(handle)
        .shared_channel(channel)
        .build()?
        .tracer_provider(&provider);
    let stack = ServiceBuilder::new()
        .layer(governed)
        .service(service_fn(run_tool));

    let agent = AgentRef::profile("support");
    let calls: [(&str, Value, &str); 7] = [
        (
            "notes__read",
            json!({"id": 7}),
            "a read-only first-party tool: runs",
        ),
        (
            "kb__search",
            json!({"q": "refund"}),
            "a trusted server's read-only tool: runs",
        ),
        (
            "refund_order",
            json!({"amount": 50, "order": "A-1"}),
            "needs approval: asked once, approved; the card number is scrubbed",
        ),
        (
            "refund_order",
            json!({"amount": 5000, "order": "A-2"}),
            "a tenant rule denies it",
        ),
        (
            "fetch_url",
            json!({"url": "https://example.com"}),
            "egress on an air-gapped host",
        ),
        (
            "web__lookup",
            json!({"customer": 42}),
            "an untrusted server claims read-only: the posture asks",
        ),
        (
            "delete_everything",
            json!({}),
            "a name the model was never shown",
        ),
    ];
    println!("\n== Calls ==");
    for (i, (tool, input, what)) in calls.into_iter().enumerate() {
        println!("\n[{}] {tool} {input}  ({what})", i + 1);
        let response = stack
            .clone()
            .oneshot(ToolCall::new(agent.clone(), tool, input))
            .await?;
        match &response {
            ToolResponse::Completed(out) => println!("  => ran: {}", out.content),
            ToolResponse::Failed(out) => println!("  => the tool failed: {}", out.content),
            ToolResponse::Refused(r) => {
                println!("  => refused `{}` by the {} check", r.code, r.decided_by);
                for reason in &r.reasons {
                    println!("     - {reason}");
                }
            }
            ToolResponse::Held(h) => println!("  => held as {}", h.interaction_id),
        }
    }
    drop(stack);

    println!("\n== Audit ({}) ==", audit_path.display());
    let text = std::fs::read_to_string(&audit_path)?;
    for line in text.lines() {
        let r: Value = serde_json::from_str(line)?;
        println!(
            "  #{} {:<18} decision={:<7} wait={:<10} outcome={}",
            r["seq"],
            r["tool"].as_str().unwrap_or("?"),
            r["decision"]["outcome"].as_str().unwrap_or("?"),
            r["approval"]["wait"].as_str().unwrap_or("-"),
            r["outcome"].as_str().unwrap_or("?"),
        );
    }
    match verify_chain(text.as_bytes()) {
        Ok(n) => println!("  the hash chain of {n} records is intact"),
        Err(b) => println!("  the hash chain is broken at {b}"),
    }
    println!(
        "  verify it yourself: cargo run -q -p toolgate-cli -- audit verify {}",
        audit_path.display()
    );

    println!("\n== Spans (OpenTelemetry stdout exporter) ==");
    provider.shutdown()?;
    Ok(())
}

/// The inbox stack: the approval gate with a durable SQLite inbox in front of the tool.
fn inbox_stack(
    inbox: &toolgate_inbox::Inbox,
) -> Result<
    tower::util::BoxCloneService<ToolCall, ToolResponse, std::convert::Infallible>,
    Box<dyn std::error::Error>,
> {
    let governed = ToolgateLayer::builder(GovernanceHandle::new(config::load_str(
        INBOX_CONFIG,
        Format::Json,
    )?))
    .channel(inbox.channel())
    .build()?;
    let stack =
        ServiceBuilder::new()
            .layer(governed)
            .service(service_fn(|call: ToolCall| async move {
                println!("    (the tool runs: refund_order {})", call.input);
                Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(json!(
                    format!("refunded order {}", call.input["order"])
                ))))
            }));
    Ok(tower::util::BoxCloneService::new(stack))
}

fn open_inbox() -> Result<toolgate_inbox::Inbox, Box<dyn std::error::Error>> {
    let store =
        toolgate_inbox::SqliteInbox::open(inbox_db()?, toolgate_inbox::SqliteOptions::default())?;
    Ok(toolgate_inbox::Inbox::new(store))
}

/// Process 1: the call is held, and the process exits.
async fn hold() -> Result<(), Box<dyn std::error::Error>> {
    let inbox = open_inbox()?;
    // A new order each time: the same call made again after its held call was sent would be
    // told so, not held anew (R26: an approval covers one call), and `--hold` must hold.
    let order = format!(
        "B-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    let call = ToolCall::new(
        AgentRef::profile("support"),
        "refund_order",
        json!({"order": order, "amount": 80}),
    );
    match inbox_stack(&inbox)?.oneshot(call).await? {
        ToolResponse::Held(h) => {
            println!(
                "  process 1: the call is held as {} — the agent pauses; this process exits",
                h.interaction_id
            );
            println!("HELD {}", h.interaction_id);
            Ok(())
        }
        other => Err(format!("expected a held call, got {other:?}").into()),
    }
}

/// Process 2 without the CLI at hand: the same answer the CLI gives.
async fn approve(id: &str) -> Result<(), Box<dyn std::error::Error>> {
    let inbox = open_inbox()?;
    let receipt = inbox
        .store()
        .answer(
            id,
            toolgate_inbox::Answer::approve("demo-approval-1", "alice"),
        )
        .await?;
    println!("  process 2: approved as alice ({receipt:?})");
    Ok(())
}

/// Process 3: the approved call is sent through the same stack — once.
async fn send_held(id: &str) -> Result<(), Box<dyn std::error::Error>> {
    let inbox = open_inbox()?;
    let _ = inbox.store().recover().await?;
    let stack = inbox_stack(&inbox)?;
    let first = inbox.resume(id, stack.clone()).await?;
    println!("  process 3: sent once => {}", first.response.model_text());
    match inbox.resume(id, stack).await {
        Ok(again) => println!(
            "  process 3: sent again?! => {}",
            again.response.model_text()
        ),
        Err(e) => println!("  process 3: a second send is refused: {e}"),
    }
    Ok(())
}

/// Runs the three processes of the restart story.
fn restart_story() -> Result<(), Box<dyn std::error::Error>> {
    println!("\n== A held call survives its process (durable inbox, R26) ==");
    let db = inbox_db()?;
    let db_text = db.display().to_string();
    let _ = std::fs::remove_file(&db);
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{db_text}{suffix}"));
    }
    let me = std::env::current_exe()?;
    let out = std::process::Command::new(&me).arg("--hold").output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    print!(
        "{}",
        text.lines()
            .filter(|l| !l.starts_with("HELD "))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    );
    let id = text
        .lines()
        .find_map(|l| l.strip_prefix("HELD "))
        .ok_or("process 1 did not hold the call")?
        .to_owned();

    // Process 2: a person approves from the command line.
    let cli = std::env::var_os("CARGO").map(|cargo| {
        let mut c = std::process::Command::new(cargo);
        c.args([
            "run",
            "-q",
            "-p",
            "toolgate-cli",
            "--",
            "inbox",
            "approve",
            &id,
            "--db",
            &db_text,
            "--idempotency-key",
            "demo-approval-1",
            "--as",
            "alice",
        ]);
        c
    });
    let approved = match cli {
        Some(mut c) => {
            println!(
                "  process 2: toolgate inbox approve {id} --db {db_text} --idempotency-key demo-approval-1 --as alice"
            );
            let out = c.output()?;
            print!("{}", indent(&String::from_utf8_lossy(&out.stdout), "    "));
            out.status.success()
        }
        None => false,
    };
    if !approved {
        let out = std::process::Command::new(&me)
            .args(["--approve", &id])
            .output()?;
        print!("{}", String::from_utf8_lossy(&out.stdout));
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
        }
    }

    let out = std::process::Command::new(&me)
        .args(["--send", &id])
        .output()?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
    }
    Ok(())
}

/// A tracer provider exporting to stdout, and over OTLP/HTTP with the `otlp` feature.
fn tracer_provider()
-> Result<opentelemetry_sdk::trace::SdkTracerProvider, Box<dyn std::error::Error>> {
    let builder = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(opentelemetry_stdout::SpanExporter::default());
    #[cfg(feature = "otlp")]
    let builder = builder.with_batch_exporter(
        opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()?,
    );
    Ok(builder.build())
}
