//! `toolgate inbox …` and `toolgate policy …` end to end (R22, R26): a call held by a real
//! stack in this process, answered by the command in another.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use toolgate::GovernanceHandle;
use toolgate::approval::ApprovalGateLayer;
use toolgate_core::{AgentRef, ToolCall, ToolOutput, ToolResponse};
use toolgate_engine::config::{Format, load_str};
use toolgate_inbox::{Inbox, SqliteInbox, SqliteOptions, State};
use tower::{ServiceBuilder, ServiceExt, service_fn};

mod common;

use common::toolgate;
use toolgate_inbox::StoredPolicies;

fn toolgate_stdin(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json_out(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

/// Holds one `refund` call with `input` in the inbox at `db`; returns its id.
async fn hold(db: &Path, input: Value) -> (String, Inbox, Arc<AtomicUsize>) {
    let gov = load_str(
        r#"{"approval": {"channel": "inbox"},
            "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"}],
            "agents": [{"name": "support", "allowed_tools": ["refund"]}],
            "policy": {"rules": [{"effect": "ask", "tool": "refund", "reason": "refunds need a person"}]}}"#,
        Format::Json,
    )
    .unwrap();
    let inbox = Inbox::new(SqliteInbox::open(db, SqliteOptions::default()).unwrap());
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let stack = ServiceBuilder::new()
        .layer(ApprovalGateLayer::new(GovernanceHandle::new(gov)).channel(inbox.channel()))
        .service(service_fn(move |call: ToolCall| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move {
                Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(
                    call.input,
                )))
            }
        }));
    let call = ToolCall::new(AgentRef::profile("support"), "refund", input);
    let ToolResponse::Held(h) = stack.clone().oneshot(call).await.unwrap() else {
        panic!("not held")
    };
    let id = h.interaction_id;
    (id, inbox, runs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r26_inbox_list_show_approve_from_another_process() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("inbox.db");
    let dbs = db.to_str().unwrap();
    let input = json!({"order": "A-17", "amount": 120, "note": "ünïcødé"});
    let (id, inbox, _runs) = hold(&db, input.clone()).await;

    let o = toolgate(&["inbox", "list", "--db", dbs]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&id) && stdout(&o).contains("pending"),
        "{}",
        stdout(&o)
    );
    let o = toolgate(&[
        "inbox", "list", "--db", dbs, "--state", "approved", "--json",
    ]);
    assert_eq!(json_out(&o), json!([]));
    let o = toolgate(&["inbox", "list", "--db", dbs, "--state", "waiting"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "an unknown state is a usage error"
    );

    // show: the tool, the full input, every reason, the age.
    let o = toolgate(&["inbox", "show", &id, "--db", dbs]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    for needle in [
        "tool:         refund",
        "\"order\": \"A-17\"",
        "ünïcødé",
        "tenant policy rule 0: refunds need a person",
        "agent approval mode:",
        "age:",
        "state:        pending",
    ] {
        assert!(text.contains(needle), "`{needle}` missing from:\n{text}");
    }
    let o = toolgate(&["inbox", "show", &id, "--db", dbs, "--json"]);
    let v = json_out(&o);
    assert_eq!(v["input"], input);
    assert_eq!(v["reasons"].as_array().unwrap().len(), 2);
    assert_eq!(v["state"], "pending");
    let o = toolgate(&["inbox", "show", "ia_nope", "--db", dbs]);
    assert_eq!(o.status.code(), Some(2));

    // approve, twice with the same key: one approval.
    let approve = [
        "inbox",
        "approve",
        &id,
        "--db",
        dbs,
        "--idempotency-key",
        "K-1",
        "--as",
        "alice",
        "--json",
    ];
    let o = toolgate(&approve);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let first = json_out(&o);
    assert_eq!(first["state"], "approved");
    assert_eq!(first["replayed"], false);
    let o = toolgate(&approve);
    assert_eq!(
        o.status.code(),
        Some(0),
        "R26: the same key twice is one approval"
    );
    let again = json_out(&o);
    assert_eq!(again["replayed"], true);
    assert_eq!(again["answered_at"], first["answered_at"]);

    // the same key with the other answer: a conflict; another key: already decided.
    let o = toolgate(&[
        "inbox",
        "deny",
        &id,
        "--db",
        dbs,
        "--idempotency-key",
        "K-1",
        "--as",
        "alice",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot give the other answer"),
        "{}",
        stderr(&o)
    );
    let o = toolgate(&[
        "inbox", "deny", &id, "--db", dbs, "--as", "bob", "--reason", "no",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no longer pending"), "{}", stderr(&o));
    let o = toolgate(&[
        "inbox",
        "approve",
        "ia_nope",
        "--db",
        dbs,
        "--idempotency-key",
        "K",
        "--as",
        "alice",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("did not issue"), "{}", stderr(&o));

    assert_eq!(
        inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Approved
    );
    let o = toolgate(&["inbox", "show", &id, "--db", dbs]);
    assert!(stdout(&o).contains("approved by:  alice"), "{}", stdout(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r26_inbox_deny_with_a_reason_and_usage_errors() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("inbox.db");
    let dbs = db.to_str().unwrap();
    let (id, inbox, runs) = hold(&db, json!({"n": 1})).await;
    let o = toolgate(&[
        "inbox",
        "deny",
        &id,
        "--db",
        dbs,
        "--as",
        "carol",
        "--reason",
        "not today",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r = inbox.store().get(&id).await.unwrap().unwrap();
    assert_eq!(r.state, State::Denied);
    assert_eq!(r.answer_reason.as_deref(), Some("not today"));
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // approve needs a name.
    let o = toolgate(&["inbox", "approve", &id, "--db", dbs]);
    assert_eq!(o.status.code(), Some(2));
    // a database that does not exist is not created.
    let missing = d.path().join("missing.db");
    let o = toolgate(&["inbox", "list", "--db", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no inbox database"), "{}", stderr(&o));
    assert!(!missing.exists());
    // a file that is not a database.
    let junk = d.path().join("junk.db");
    std::fs::write(&junk, vec![0xAB; 8192]).unwrap();
    let o = toolgate(&["inbox", "list", "--db", junk.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not a database"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&junk).unwrap(), vec![0xAB; 8192]);
}

#[test]
fn r22_policy_get_prints_what_put_takes_back() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("inbox.db");
    let dbs = db.to_str().unwrap();
    let file = d.path().join("policy.json");
    std::fs::write(
        &file,
        r#"{"default": "ask", "rules": [{"effect": "deny", "tool": "refund_*", "reason": "no refunds"}]}"#,
    )
    .unwrap();
    let o = toolgate(&["policy", "put", "--db", dbs, file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let put = json_out(&o);
    let o = toolgate(&["policy", "get", "--db", dbs]);
    assert_eq!(o.status.code(), Some(0));
    let got = json_out(&o);
    assert_eq!(got, put);
    assert_eq!(got["rules"][0]["reason"], "no refunds");
    assert!(got["updatedAt"].is_string());

    // What get prints, put takes back (from standard input).
    let o = toolgate_stdin(
        &["policy", "put", "--db", dbs, "-"],
        &stdout(&toolgate(&["policy", "get", "--db", dbs])),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let back = json_out(&o);
    assert_eq!(back["rules"], got["rules"]);
    assert_ne!(back["updatedAt"], got["updatedAt"]);

    // A refused put keeps the old policy.
    let o = toolgate_stdin(
        &["policy", "put", "--db", dbs],
        r#"{"rules": [{"effect": "maybe"}]}"#,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("rules[0].effect"), "{}", stderr(&o));
    assert_eq!(json_out(&toolgate(&["policy", "get", "--db", dbs])), back);

    // Limits from a configuration.
    let cfg = d.path().join("c.json");
    std::fs::write(&cfg, r#"{"limits": {"tool_rules": 1}}"#).unwrap();
    let o = toolgate_stdin(
        &[
            "policy",
            "put",
            "--db",
            dbs,
            "--config",
            cfg.to_str().unwrap(),
        ],
        r#"{"rules": [{"effect": "ask"}, {"effect": "deny"}]}"#,
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));

    // An unreadable stored policy: get says so, prints nothing and exits 1 (R22; seed 002
    // answers 409 here), as for every stored policy that cannot be read.
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute("UPDATE stored_policy SET body = 'garbage'", [])
        .unwrap();
    let o = toolgate(&["policy", "get", "--db", dbs]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).is_empty());
    assert!(stderr(&o).contains("cannot be read"), "{}", stderr(&o));
}

#[test]
fn r20_r22_policy_get_keeps_integers_past_64_bits() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("inbox.db");
    let dbs = db.to_str().unwrap();
    let policy = r#"{"default": "deny", "rules": [{"effect": "allow", "when": {"id": {"equals": 18446744073709551617}}}]}"#;
    let o = toolgate_stdin(&["policy", "put", "--db", dbs, "-"], policy);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("18446744073709551617"),
        "{}",
        stdout(&o)
    );
    // Put back what get prints, twice: the literal survives every round trip.
    for _ in 0..2 {
        let got = stdout(&toolgate(&["policy", "get", "--db", dbs]));
        assert!(got.contains("18446744073709551617"), "{got}");
        let o = toolgate_stdin(&["policy", "put", "--db", dbs, "-"], &got);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    // The stored policy decides on the digits: an id that rounds to the same double is not
    // the one allowed.
    let store = SqliteInbox::open(&db, SqliteOptions::default()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let stored = rt.block_on(store.get_policy()).unwrap().unwrap();
    let state = toolgate_inbox::policy_state_of(&stored, &Default::default());
    let toolgate_engine::PolicyState::Readable(p) = state else {
        panic!("readable")
    };
    let subject = toolgate_engine::policy::Subject {
        kind: toolgate_core::ToolKind::Http,
        tool: "t",
        server: None,
        agent: "a",
    };
    let eval = |text: &str| {
        let (v, l) = toolgate_core::number::parse_with_literals(text).unwrap();
        p.evaluate_exact(&subject, &v, &l).effect
    };
    assert_eq!(
        eval(r#"{"id": 18446744073709551617}"#),
        Some(toolgate_engine::policy::Effect::Allow)
    );
    assert_eq!(
        eval(r#"{"id": 18446744073709551616}"#),
        Some(toolgate_engine::policy::Effect::Deny)
    );
}

#[test]
fn r22_policy_get_on_an_inbox_without_a_policy_prints_the_empty_policy() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("inbox.db");
    SqliteInbox::open(&db, SqliteOptions::default()).unwrap();
    let o = toolgate(&["policy", "get", "--db", db.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(json_out(&o), json!({"default": "allow", "rules": []}));
}

#[test]
fn r22_policy_put_if_updated_at_refuses_a_stale_base_as_a_conflict() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("inbox.db");
    let dbs = db.to_str().unwrap();
    let ask = r#"{"rules": [{"effect": "ask"}]}"#;
    let deny = r#"{"rules": [{"effect": "deny", "reason": "closed"}]}"#;
    // `none`: only if no policy is stored.
    let o = toolgate_stdin(
        &["policy", "put", "--db", dbs, "--if-updated-at", "none"],
        ask,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let first = json_out(&o);
    let first_at = first["updatedAt"].as_str().unwrap().to_owned();
    let o = toolgate_stdin(
        &["policy", "put", "--db", dbs, "--if-updated-at", "none"],
        deny,
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stdout(&o).is_empty());
    assert!(stderr(&o).contains("conflict"), "{}", stderr(&o));
    assert!(stderr(&o).contains(&first_at), "{}", stderr(&o));
    // On the stored `updatedAt`: saved.
    let o = toolgate_stdin(
        &["policy", "put", "--db", dbs, "--if-updated-at", &first_at],
        deny,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let second = json_out(&o);
    let second_at = second["updatedAt"].as_str().unwrap().to_owned();
    assert_eq!(second["rules"][0]["reason"], "closed");
    // On the older one again: refused as a conflict naming both stamps; nothing changed.
    let o = toolgate_stdin(
        &["policy", "put", "--db", dbs, "--if-updated-at", &first_at],
        ask,
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("the policy is refused; the stored policy is unchanged"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "`--if-updated-at` is `{first_at}` but the stored policy's updatedAt is `{second_at}`"
        )),
        "R22: the conflict names both stamps: {err}"
    );
    assert_eq!(json_out(&toolgate(&["policy", "get", "--db", dbs])), second);
    // An invalid policy is refused as invalid (exit 1), whatever its base.
    let o = toolgate_stdin(
        &["policy", "put", "--db", dbs, "--if-updated-at", &second_at],
        r#"{"rules": [{"effect": "maybe"}]}"#,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("rules[0].effect"), "{}", stderr(&o));
    assert_eq!(json_out(&toolgate(&["policy", "get", "--db", dbs])), second);
}

/// Six `policy put --if-updated-at` processes on one base, started together on one SQLite
/// file: exactly one saves; every other is refused as a conflict and saves nothing.
#[test]
fn r22_racing_policy_puts_from_processes_on_one_base_have_exactly_one_winner() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("inbox.db");
    let dbs = db.to_str().unwrap();
    let o = toolgate_stdin(&["policy", "put", "--db", dbs], r#"{"rules": []}"#);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let base = json_out(&o)["updatedAt"].as_str().unwrap().to_owned();
    let children: Vec<_> = (0..6)
        .map(|i| {
            let file = d.path().join(format!("p{i}.json"));
            std::fs::write(
                &file,
                format!(r#"{{"rules": [{{"effect": "deny", "reason": "saver {i}"}}]}}"#),
            )
            .unwrap();
            Command::new(env!("CARGO_BIN_EXE_toolgate"))
                .args(["policy", "put", "--db", dbs, "--if-updated-at", &base])
                .arg(&file)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut winners = Vec::new();
    for child in children {
        let o = child.wait_with_output().unwrap();
        match o.status.code() {
            Some(0) => winners.push(json_out(&o)),
            Some(1) => assert!(stderr(&o).contains("conflict"), "{}", stderr(&o)),
            other => panic!("unexpected exit {other:?}: {}", stderr(&o)),
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "R22: exactly one save on one base wins; the others are conflicts"
    );
    assert_eq!(
        json_out(&toolgate(&["policy", "get", "--db", dbs])),
        winners[0]
    );
}

#[test]
fn r46_policy_put_shadow_is_stored_beside_the_enforced_policy_got_and_cleared() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("inbox.db");
    let dbs = db.to_str().unwrap();
    let o = toolgate_stdin(
        &["policy", "put", "--db", dbs, "-"],
        r#"{"rules": [{"effect": "allow"}]}"#,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let enforced = json_out(&o);

    let o = toolgate(&["policy", "get", "--db", dbs, "--shadow"]);
    assert_eq!(o.status.code(), Some(1), "none stored yet");
    assert!(stderr(&o).contains("no shadow policy"), "{}", stderr(&o));
    assert!(o.stdout.is_empty());

    let o = toolgate_stdin(
        &["policy", "put", "--db", dbs, "--shadow", "-"],
        r#"{"default": "deny", "rules": [{"effect": "ask", "tool": "refund_*"}]}"#,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let put = json_out(&o);
    assert_eq!(put["default"], "deny");
    let o = toolgate(&["policy", "get", "--db", dbs, "--shadow"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(json_out(&o), put);
    // The enforced policy is untouched.
    assert_eq!(
        json_out(&toolgate(&["policy", "get", "--db", dbs])),
        enforced
    );

    // A refused shadow keeps the old one.
    let o = toolgate_stdin(
        &["policy", "put", "--db", dbs, "--shadow"],
        r#"{"rules": [{"effect": "maybe"}]}"#,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("stored shadow policy is unchanged"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("rules[0].effect"), "{}", stderr(&o));
    assert_eq!(
        json_out(&toolgate(&["policy", "get", "--db", dbs, "--shadow"])),
        put
    );

    let o = toolgate(&["policy", "clear-shadow", "--db", dbs]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("removed"), "{}", stderr(&o));
    let o = toolgate(&["policy", "get", "--db", dbs, "--shadow"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        json_out(&toolgate(&["policy", "get", "--db", dbs])),
        enforced
    );
}

/// Issue 22, R47: `toolgate inbox show` prints the answering approver's verified subject
/// and issuer beside the name (text and `--json`); a name-only answer has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue22_inbox_show_names_the_approvers_subject_and_issuer() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("inbox.db");
    let dbs = db.to_str().unwrap();
    let (id, inbox, _runs) = hold(&db, json!({"order": "P-22"})).await;
    let p = toolgate_core::Principal {
        subject: "00u-dave".into(),
        issuer: "https://idp.example/realms/people".into(),
    };
    inbox
        .store()
        .answer(
            &id,
            toolgate_inbox::Answer::approved_by("dave").principal(Some(p)),
        )
        .await
        .unwrap();
    let o = toolgate(&["inbox", "show", &id, "--db", dbs]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("approved by:  dave"), "{text}");
    assert!(
        text.contains("principal:    00u-dave (issuer https://idp.example/realms/people)"),
        "{text}"
    );
    let o = toolgate(&["inbox", "show", &id, "--db", dbs, "--json"]);
    let v = json_out(&o);
    assert_eq!(
        v["approver_principal"],
        json!({"subject": "00u-dave", "issuer": "https://idp.example/realms/people"}),
        "{v}"
    );

    // Answered by `--as` on the command line: the name only.
    let (other, _inbox, _runs) = hold(&db, json!({"order": "P-23"})).await;
    let o = toolgate(&["inbox", "deny", &other, "--as", "erin", "--db", dbs]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = toolgate(&["inbox", "show", &other, "--db", dbs]);
    assert!(!stdout(&o).contains("principal:"), "{}", stdout(&o));
    let v = json_out(&toolgate(&["inbox", "show", &other, "--db", dbs, "--json"]));
    assert_eq!(v["approver"], "erin");
    assert_eq!(v["approver_principal"], Value::Null, "{v}");
}
