//! Issue 20 at the command line: what a person reads shows hidden characters marked, and
//! a deny reason has a length bound. A call held by a real stack in this process, read and
//! answered by the command in another.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::path::Path;
use std::process::{Command, Output};

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

/// One HTTP/1.1 request to `addr`; the status, the raw head and the body.
fn http(addr: &str, method: &str, path: &str, cookie: &str, body: &str) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if !cookie.is_empty() {
        req.push_str(&format!("Cookie: {cookie}\r\n"));
    }
    if method == "POST" {
        req.push_str(&format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    req.push_str(body);
    conn.write_all(req.as_bytes()).unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_owned(), body.to_owned())
}

/// The value of cookie `name` set in `head`.
fn set_cookie(head: &str, name: &str) -> String {
    head.lines()
        .filter_map(|l| l.strip_prefix("set-cookie: "))
        .find_map(|c| c.strip_prefix(&format!("{name}=")))
        .and_then(|c| c.split(';').next())
        .unwrap_or_else(|| panic!("no cookie `{name}` in {head}"))
        .to_owned()
}

/// The first `value` of the input named `name`.
fn field(html: &str, name: &str) -> String {
    let at = html.find(&format!("name=\"{name}\" value=\"")).unwrap();
    let rest = &html[at + name.len() + 15..];
    rest[..rest.find('"').unwrap()].to_owned()
}

fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue20_serve_logs_each_sign_in_answer_and_policy_save_without_secrets() {
    use std::io::{BufRead, BufReader, Read};
    use std::process::Stdio;
    // The token and its SHA-256.
    const TOKEN: &str = "correct horse";
    const HASH: &str = "4104d36f8da2c254349f85836793ebe029e0c957063a34c91c2e9203187b5631";
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("inbox.db");
    let (id, inbox) = hold(&db, "support", "refunds need a person", json!({"n": 1})).await;
    let config = d.path().join("toolgate.json");
    std::fs::write(
        &config,
        format!(
            r#"{{"inbox": {{"sqlite": {db:?}}},
                "approvers": {{"listen": "127.0.0.1:0", "people": [{{"name": "alice", "token_sha256": "{HASH}", "edit_policy": true}}]}}}}"#
        ),
    )
    .unwrap();
    /// Stops the server however the test ends.
    struct Stop(std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Stop(
        Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut err = BufReader::new(child.0.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_owned();

    // A wrong token, then the right one.
    let sign_in = |token: &str| {
        let (_, head, body) = http(&addr, "GET", "/login", "", "");
        let nonce = field(&body, "csrf");
        let login = format!("tg_login={}", set_cookie(&head, "tg_login"));
        http(
            &addr,
            "POST",
            "/login",
            &login,
            &format!("csrf={nonce}&token={}", enc(token)),
        )
    };
    assert_eq!(sign_in("a wrong guess").0, 401);
    let (status, head, _) = sign_in(TOKEN);
    assert_eq!(status, 303, "{head}");
    let session = set_cookie(&head, "tg_session");
    let cookie = format!("tg_session={session}");
    let (_, _, page) = http(&addr, "GET", "/", &cookie, "");
    let csrf = field(&page, "csrf");
    // An answer.
    let (status, head, body) = http(
        &addr,
        "POST",
        &format!("/calls/{id}/answer"),
        &cookie,
        &format!("csrf={csrf}&decision=deny&idempotency_key=k1&reason=no"),
    );
    assert_eq!(status, 303, "{head}{body}");
    // A policy save.
    let (status, head, body) = http(
        &addr,
        "POST",
        "/policy/whole",
        &cookie,
        &format!(
            "csrf={csrf}&updated_at=&document={}",
            enc(r#"{"rules": []}"#)
        ),
    );
    assert_eq!(status, 303, "{head}{body}");
    drop(child);
    let mut log = String::new();
    err.read_to_string(&mut log).unwrap();

    let line = |what: &str| {
        log.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no `{what}` in the log:\n{log}"))
            .to_owned()
    };
    let refused = line("a sign-in with an unknown token was refused");
    assert!(refused.contains("client=127.0.0.1"), "{refused}");
    let signed_in = line("an approver signed in");
    assert!(
        signed_in.contains("approver=alice") && signed_in.contains("client=127.0.0.1"),
        "{signed_in}"
    );
    let answered = line("a held call was answered");
    assert!(
        answered.contains("approver=alice")
            && answered.contains(&format!("interaction={id}"))
            && answered.contains("approved=false"),
        "{answered}"
    );
    let saved = line("the stored tenant policy was replaced");
    assert!(saved.contains("approver=alice"), "{saved}");
    for secret in [
        TOKEN,
        "a wrong guess",
        HASH,
        session.as_str(),
        csrf.as_str(),
    ] {
        assert!(!log.contains(secret), "`{secret}` is in the log:\n{log}");
    }
    assert_eq!(
        inbox.store().get(&id).await.unwrap().unwrap().state,
        State::Denied
    );
}

/// `path` with its `.` and `..` components folded (no file system access).
fn folded(path: &str) -> std::path::PathBuf {
    let mut out = std::path::PathBuf::new();
    for c in Path::new(path).components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

#[test]
fn issue20_13g_the_examples_paths_resolve_against_their_folder_from_any_directory() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let repo = repo.canonicalize().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let print = |example: &str| -> Value {
        let o = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .current_dir(elsewhere.path())
            .args(["config", "print"])
            .arg(repo.join("examples").join(example))
            .output()
            .unwrap();
        assert!(o.status.success(), "{example}: {}", stderr(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let approvals = print("approvals.json");
    assert_eq!(
        folded(approvals["inbox"]["sqlite"].as_str().unwrap()),
        repo.join("target/demo/inbox.db"),
        "the demo's inbox, whatever the working directory"
    );
    let demo = print("demo.json");
    assert_eq!(
        folded(demo["audit"]["file"].as_str().unwrap()),
        repo.join("target/demo/audit.jsonl")
    );
}

#[test]
fn issue20_13g_a_configurations_relative_inbox_is_its_folders_not_the_working_directorys() {
    let cfg = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::create_dir(cfg.path().join("data")).unwrap();
    let config = cfg.path().join("toolgate.json");
    std::fs::write(&config, r#"{"inbox": {"sqlite": "data/inbox.db"}}"#).unwrap();
    let policy = cfg.path().join("policy.json");
    std::fs::write(&policy, r#"{"rules": []}"#).unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .current_dir(elsewhere.path())
            .args(args)
            .output()
            .unwrap()
    };
    let (c, p) = (config.to_str().unwrap(), policy.to_str().unwrap());
    let put = run(&["policy", "put", "--config", c, p]);
    assert!(put.status.success(), "{}", stderr(&put));
    assert!(
        cfg.path().join("data/inbox.db").exists(),
        "beside the configuration"
    );
    assert!(
        !elsewhere.path().join("data").exists(),
        "nothing in the working directory"
    );
    let got = run(&["policy", "get", "--config", c]);
    assert!(got.status.success(), "{}", stderr(&got));
    assert!(stdout(&got).contains("rules"), "{}", stdout(&got));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r24_r47_issue34_inbox_approve_and_deny_need_an_approvers_credential_and_rights() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("inbox.db");
    let (id, inbox) = hold(&db, "support", "refunds need a person", json!({"n": 1})).await;
    let config = d.path().join("toolgate.json");
    // alice's sign-in token is `secret`, bob's `bob`; key `ci` (`123`) may only read policy.
    let text = json!({
        "inbox": {"sqlite": "inbox.db"},
        "approvers": {
            "listen": "127.0.0.1:8788",
            "people": [
                {"name": "alice", "token_sha256": "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b", "tools": [{"tool": "refund"}]},
                {"name": "bob", "token_sha256": "81b637d8fcd2c6da6359e6963113a1170de795e4b725b84d1e0b4cfd9ec58ce9", "tools": [{"tool": "transfer_*"}]}
            ],
            "api_keys": [{"name": "ci", "key_sha256": "a665a45920422f9d417e4867efdc4fb8a04a1f3fff1fa07e998e86f7f7a27ae3", "scopes": ["policy:read"]}]
        }
    });
    std::fs::write(&config, text.to_string()).unwrap();
    let c = config.to_str().unwrap();
    let credential = |name: &str, secret: &str| {
        let path = d.path().join(format!("{name}.credential"));
        std::fs::write(&path, format!("{secret}\n")).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let (bob, mallory, key) = (
        credential("bob", "bob"),
        credential("mallory", "mallory"),
        credential("ci", "123"),
    );
    let pending = || async { inbox.store().get(&id).await.unwrap().unwrap().state };
    // Issue 34 item 2, the attack: an agent with a shell names an approver. Refused, and
    // the answer says what is needed.
    for verb in ["approve", "deny"] {
        let o = toolgate(&["inbox", verb, &id, "--config", c, "--as", "alice"]);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{verb} --as alice: {}",
            stdout(&o)
        );
        let why = stderr(&o);
        assert!(why.contains("`--as` alone is not enough"), "{why}");
        assert!(why.contains("--credential-file"), "{why}");
        assert_eq!(
            pending().await,
            State::Pending,
            "{verb} --as alice changed nothing"
        );
    }
    for (verb, file, says) in [
        ("approve", &bob, "`bob` may not answer calls to `refund`"),
        ("deny", &bob, "`bob` may not answer calls to `refund`"),
        ("approve", &mallory, "not an approver's"),
        ("deny", &key, "does not have the `approvals` scope"),
    ] {
        let o = toolgate(&["inbox", verb, &id, "--config", c, "--credential-file", file]);
        assert_eq!(o.status.code(), Some(1), "{verb} {file}: {}", stdout(&o));
        let why = stderr(&o);
        assert!(why.contains(says), "{verb} {file}: {why}");
        assert_eq!(
            pending().await,
            State::Pending,
            "{verb} {file} changed nothing"
        );
    }
    // A credential answers as its own person: `--as` only confirms it.
    let o = toolgate(&[
        "inbox",
        "approve",
        &id,
        "--config",
        c,
        "--credential-file",
        &bob,
        "--as",
        "alice",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("the credential is `bob`'s"),
        "{}",
        stderr(&o)
    );
    // alice's credential, from the environment.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["inbox", "approve", &id, "--config", c, "--as", "alice"])
        .env("TOOLGATE_APPROVER_CREDENTIAL", "secret")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r = inbox.store().get(&id).await.unwrap().unwrap();
    assert_eq!(r.state, State::Approved);
    assert_eq!(r.approver.as_deref(), Some("alice"));
}
