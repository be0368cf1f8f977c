//! Issue 20 at the command line: what a person reads shows hidden characters marked, and
//! a deny reason has a length bound. A call held by a real stack in this process, read and
//! answered by the command in another.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};
use toolgate::GovernanceHandle;
use toolgate::approval::ApprovalGateLayer;
use toolgate::core::{AgentRef, ToolCall, ToolOutput, ToolResponse};
use toolgate::engine::config::{Format, load_str};
use toolgate_inbox::{Inbox, InboxStore, SqliteInbox, SqliteOptions, State};
use tower::{ServiceBuilder, ServiceExt, service_fn};

fn toolgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Holds one call of agent `agent` with `input` in the inbox at `db`; returns its id.
async fn hold(db: &Path, agent: &str, reason: &str, input: Value) -> (String, Inbox) {
    let config = json!({
        "approval": {"channel": "inbox"},
        "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"}],
        "agents": [{"name": agent, "allowed_tools": ["refund"]}],
        "policy": {"rules": [{"effect": "ask", "tool": "refund", "reason": reason}]}
    });
    let gov = load_str(&config.to_string(), Format::Json).unwrap();
    let inbox = Inbox::new(SqliteInbox::open(db, SqliteOptions::default()).unwrap());
    let stack = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(GovernanceHandle::new(gov)).channel(inbox.channel()))
        .service(service_fn(move |call: ToolCall| async move {
            Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(call.input)))
        }));
    let call = ToolCall::new(AgentRef::profile(agent), "refund", input);
    let ToolResponse::Held(h) = stack.clone().oneshot(call).await.unwrap() else {
        panic!("not held")
    };
    (h.interaction_id, inbox)
}

const HIDDEN: [char; 7] = [
    '\u{202E}',
    '\u{2066}',
    '\u{200B}',
    '\u{200D}',
    '\u{FEFF}',
    '\u{061C}',
    '\u{E0041}',
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue20_inbox_show_marks_hidden_characters() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("inbox.db");
    let dbs = db.to_str().unwrap();
    let (id, inbox) = hold(
        &db,
        "sup\u{200D}port",
        "refunds\u{FEFF} need a person",
        json!({"amount": "100\u{202E}0", "to\u{200B}": "bob\u{2066}\u{061C}\u{E0041}"}),
    )
    .await;
    let o = toolgate(&["inbox", "show", &id, "--db", dbs]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    for c in HIDDEN {
        assert!(
            !text.contains(c),
            "U+{:04X} shown raw: {text}",
            u32::from(c)
        );
    }
    for part in [
        "\"amount\": \"100⟦U+202E⟧0\"",
        "\"to⟦U+200B⟧\": \"bob⟦U+2066⟧⟦U+061C⟧⟦U+E0041⟧\"",
        "agent:        sup⟦U+200D⟧port",
        "refunds⟦U+FEFF⟧ need a person",
    ] {
        assert!(text.contains(part), "{part} missing from {text}");
    }
    let o = toolgate(&["inbox", "list", "--db", dbs]);
    assert!(stdout(&o).contains("sup⟦U+200D⟧port"), "{}", stdout(&o));
    // The JSON output stays the data as stored (a program reads it).
    let o = toolgate(&["inbox", "show", &id, "--db", dbs, "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["input"]["amount"], "100\u{202E}0");
    assert_eq!(
        inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Pending
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue20_inbox_deny_refuses_a_reason_past_the_bound() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("inbox.db");
    let dbs = db.to_str().unwrap();
    let (id, inbox) = hold(&db, "support", "refunds need a person", json!({"n": 1})).await;
    let long = "x".repeat(toolgate_inbox::MAX_REASON_CHARS + 1);
    let o = toolgate(&[
        "inbox", "deny", &id, "--db", dbs, "--as", "bob", "--reason", &long,
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("`--reason` is 2001 characters long; at most 2000 are kept"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Pending
    );
    let ok = "x".repeat(toolgate_inbox::MAX_REASON_CHARS);
    let o = toolgate(&[
        "inbox", "deny", &id, "--db", dbs, "--as", "bob", "--reason", &ok,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        inbox
            .store()
            .get(&id)
            .await
            .unwrap()
            .unwrap()
            .answer_reason
            .as_deref(),
        Some(ok.as_str())
    );
}
