//! A `toolgate mcp serve` killed (SIGKILL) while it sends an approved held call leaves the
//! call `claimed`; the next start marks it `unknown`, and a repeat of it is told so, never
//! sent (issue 20 item 11, R26). Real processes: the binary over stdio, in front of an
//! upstream MCP server of our own behind a loopback relay that stops passing requests on.
#![cfg(feature = "mcp")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};
use toolgate_inbox::{Answer, SqliteInbox, SqliteOptions, State};

mod common;

use common::{hanging_relay, upstream_at};
use toolgate_inbox::HeldCalls;

fn write_config(dir: &Path, upstream: &str) -> std::path::PathBuf {
    let config = json!({
        "approval": {"channel": "inbox"},
        "inbox": {"sqlite": dir.join("inbox.db")},
        "servers": {"drift": {"trust_tool_annotations": true}},
        "behavior_gating": {"require_approval_for_non_read_only": true},
        "agents": [{"name": "dev", "allowed_tools": ["drift__bare"]}],
        "mcp": {"servers": {"drift": {"url": upstream}}, "call_timeout_secs": 60}
    });
    let path = dir.join("toolgate.json");
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    path
}

/// `toolgate mcp serve --agent dev` as a child process, and its process id.
async fn serve(config: &Path) -> (RunningService<RoleClient, ()>, u32) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.args(["mcp", "serve", "--agent", "dev", "--config"])
        .arg(config);
    let transport = TokioChildProcess::new(cmd).unwrap();
    let pid = transport.id().expect("the child runs");
    (().serve(transport).await.unwrap(), pid)
}

fn bare(input: Value) -> CallToolRequestParams {
    let Value::Object(args) = input else { panic!() };
    CallToolRequestParams::new("drift__bare").with_arguments(args)
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join(" ")
}

async fn state_of(store: &SqliteInbox, id: &str) -> State {
    store.get(id).await.unwrap().unwrap().state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r26_a_killed_mcp_serve_leaves_its_call_unknown_at_the_next_start_and_a_repeat_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (drift, upstream_addr) = upstream_at().await;
    let hang = Arc::new(AtomicBool::new(false));
    let relay = hanging_relay(upstream_addr, Arc::clone(&hang));
    let config = write_config(dir.path(), &format!("http://{relay}/mcp"));
    let (dev, pid) = serve(&config).await;
    let input = json!({"n": 1});

    let held = dev.call_tool(bare(input.clone())).await.unwrap();
    let id = held.structured_content.as_ref().unwrap()["toolgate"]["interaction_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a held call: {held:?}"))
        .to_owned();
    let store = SqliteInbox::open(dir.path().join("inbox.db"), SqliteOptions::default()).unwrap();
    store
        .answer(&id, Answer::approved_by("alice"))
        .await
        .unwrap();

    // The repeat redeems the approval: the call is claimed, and its request never answered.
    hang.store(true, Ordering::SeqCst);
    let peer = dev.peer().clone();
    let sending = tokio::spawn({
        let input = input.clone();
        async move { peer.call_tool(bare(input)).await }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while state_of(&store, &id).await != State::Claimed {
        assert!(Instant::now() < deadline, "the approved call is claimed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let _ = sending.await;
    drop(dev);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        state_of(&store, &id).await,
        State::Claimed,
        "the killed process left its claim"
    );

    // The next start marks it `unknown` …
    hang.store(false, Ordering::SeqCst);
    let (again, _) = serve(&config).await;
    assert_eq!(
        state_of(&store, &id).await,
        State::Unknown,
        "R26: a call claimed by a process that stopped is `unknown` once toolgate starts again"
    );
    // … and a repeat of the call is told so: nothing sent, nothing held.
    let told = again.call_tool(bare(input.clone())).await.unwrap();
    assert_eq!(told.is_error, Some(true), "{told:?}");
    assert_eq!(
        told.structured_content.as_ref().unwrap()["toolgate"]["code"],
        "rejected",
        "{told:?}"
    );
    assert!(
        text(&told).contains(&id) && text(&told).contains("unknown"),
        "R26: the repeat says the call is `unknown`: {}",
        text(&told)
    );
    assert_eq!(drift.calls("bare"), 0, "never sent");
    assert!(
        store.list(Some(State::Pending)).await.unwrap().is_empty(),
        "nothing new held"
    );
    again.cancel().await.unwrap();

    // `toolgate inbox recover` finds nothing left to recover.
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["inbox", "recover", "--json", "--db"])
        .arg(dir.path().join("inbox.db"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v, json!({"unknown": []}));
}

/// A held call of agent `dev` for `drift__bare`, as the gate asks it.
fn held_call(input: Value) -> toolgate_inbox::NewHeldCall {
    use toolgate_core::{AgentRef, Ask, AskSource, CallId, RunContext, RunMode, ToolIdentity};
    let request = toolgate::approval::ApprovalRequest {
        interaction_id: String::from("ia_recover_test_1"),
        call_id: CallId::new("call-1"),
        tool: "drift__bare".into(),
        identities: vec![ToolIdentity::mcp("drift", "bare")],
        agent: AgentRef::profile("dev"),
        input_hash: toolgate_engine::canon::input_hash(&input).unwrap(),
        input: Arc::new(input),
        literals: Default::default(),
        definition_hash: "sha256:d".into(),
        asks: vec![Ask::new(AskSource::Agent, "a person decides")],
        run: RunContext {
            mode: RunMode::UseAgentPolicy,
            background: false,
        },
        turn: None,
        ticket: None,
        target: None,
        approvals: 1,
        labels: None,
    };
    toolgate_inbox::NewHeldCall::from_request(
        &request,
        toolgate_inbox::Timestamp::now(),
        Duration::from_secs(3600),
    )
    .unwrap()
}

#[test]
fn r26_toolgate_inbox_recover_names_an_instance_an_operator_knows_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.db");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let id = rt.block_on(async {
        let host =
            SqliteInbox::open(&path, SqliteOptions::default().instance("gate-eu-1")).unwrap();
        let c = held_call(json!({"n": 1}));
        host.hold(c.clone()).await.unwrap();
        host.answer(&c.interaction_id, Answer::approved_by("alice"))
            .await
            .unwrap();
        host.claim(
            &c.interaction_id,
            toolgate_inbox::Claim {
                input_hash: c.input_hash.clone(),
                definition_hash: c.definition_hash.clone(),
                token: "t".into(),
            },
        )
        .await
        .unwrap();
        c.interaction_id
    });
    let recover = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["inbox", "recover", "--json", "--db"])
            .arg(&path)
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    assert_eq!(
        recover(&[]),
        json!({"unknown": []}),
        "a claim by an instance not known to have stopped is left alone"
    );
    assert_eq!(
        recover(&["--instance", "gate-eu-1"]),
        json!({"unknown": [id]})
    );
}
