//! `toolgate inbox show / approve` on a held call that needs two people's approvals (R51):
//! the count and the names, as text and JSON, and an approval that is not the last says it
//! waits for one more person; one person twice counts once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use toolgate::GovernanceHandle;
use toolgate::approval::ApprovalGateLayer;
use toolgate_core::{AgentRef, ToolCall, ToolOutput, ToolResponse};
use toolgate_engine::config::{Format, load_str};
use toolgate_inbox::{Inbox, SqliteInbox, SqliteOptions, State};
use tower::{ServiceBuilder, ServiceExt, service_fn};

mod common;

use common::toolgate;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json_out(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

/// Holds one `refund` call that needs two approvals in the inbox at `db`.
async fn hold(db: &Path) -> (String, Inbox) {
    let gov = load_str(
        r#"{"approval": {"channel": "inbox"},
            "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"}],
            "agents": [{"name": "support", "allowed_tools": ["refund"]}],
            "policy": {"rules": [{"effect": "ask", "tool": "refund", "reason": "two people", "approvals": 2}]}}"#,
        Format::Json,
    )
    .unwrap();
    let inbox = Inbox::new(SqliteInbox::open(db, SqliteOptions::default()).unwrap());
    let stack = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(GovernanceHandle::new(gov)).channel(inbox.channel()))
        .service(service_fn(|call: ToolCall| async move {
            Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(call.input)))
        }));
    let call = ToolCall::new(AgentRef::profile("support"), "refund", json!({"order": 51}));
    let ToolResponse::Held(h) = stack.oneshot(call).await.unwrap() else {
        panic!("R51: held")
    };
    (h.interaction_id, inbox)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r51_inbox_show_and_approve_say_how_many_approvals_and_from_whom() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("inbox.db");
    let dbs = db.to_str().unwrap();
    let (id, inbox) = hold(&db).await;

    let o = toolgate(&["inbox", "show", &id, "--db", dbs]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        stdout(&o).contains("approvals:    0 of 2 approvals; it waits for 2 more people"),
        "{}",
        stdout(&o)
    );

    let o = toolgate(&["inbox", "approve", &id, "--db", dbs, "--as", "alice"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        stdout(&o).contains(&format!(
            "{id}: approval by alice recorded: 1 of 2 approvals; it waits for one more person"
        )),
        "{}",
        stdout(&o)
    );
    let o = toolgate(&[
        "inbox", "approve", &id, "--db", dbs, "--as", "alice", "--json",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let again = json_out(&o);
    assert_eq!(again["already_approved"], true, "{again}");
    assert_eq!(again["state"], "pending");
    assert_eq!(
        (again["approvals"].clone(), again["waiting_for"].clone()),
        (json!(1), json!(1))
    );

    let o = toolgate(&["inbox", "show", &id, "--db", dbs, "--json"]);
    let v = json_out(&o);
    assert_eq!(v["state"], "pending");
    assert_eq!(v["approvals"]["needed"], 2);
    assert_eq!(v["approvals"]["given"][0]["approver"], "alice");
    assert_eq!(v["approvals"]["summary"], "1 of 2 approvals: alice");

    let o = toolgate(&["inbox", "approve", &id, "--db", dbs, "--as", "bob"]);
    assert_eq!(o.status.code(), Some(0));
    let out = stdout(&o);
    assert!(
        out.contains(&format!("{id} approved by bob"))
            && out.contains("recorded: 2 of 2 approvals; the call is approved"),
        "{out}"
    );
    let o = toolgate(&["inbox", "show", &id, "--db", dbs]);
    let text = stdout(&o);
    assert!(text.contains("approved by:  alice and bob"), "{text}");
    assert!(
        text.contains("approvals:    2 of 2 approvals: alice, bob"),
        "{text}"
    );
    assert_eq!(
        inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Approved
    );
}
