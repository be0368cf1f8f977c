//! `toolgate serve`: the approval page starts from a configuration with approvers, refuses
//! to start without one (naming the file), reports a bad `approvers` field by its path, and
//! `hash-token` prints what `token_sha256` holds.
#![cfg(feature = "serve")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

fn toolgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
}

const HASH: &str = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";

#[test]
fn serve_refuses_to_start_without_an_approver() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("toolgate.json");
    let db = dir.path().join("inbox.db");
    std::fs::write(&config, format!(r#"{{"inbox": {{"sqlite": {:?}}}}}"#, db)).unwrap();
    let out = toolgate()
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("`{}`", config.display())), "{err}");
    assert!(err.contains("no `approvers` section"), "{err}");
    // Without --config at all.
    let out = toolgate().arg("serve").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs `--config FILE`"));
}

#[test]
fn serve_reports_a_bad_approvers_field_by_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("toolgate.json");
    std::fs::write(
        &config,
        r#"{"approvers": {"people": [{"name": "alice", "token_sha256": "plain-text"}]}}"#,
    )
    .unwrap();
    let out = toolgate()
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("approvers.people[0].token_sha256"), "{err}");
}

#[test]
fn serve_hash_token_prints_the_sha256() {
    let out = toolgate()
        .args(["serve", "hash-token", "correct horse"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let by_arg = String::from_utf8(out.stdout).unwrap();
    let mut child = toolgate()
        .args(["serve", "hash-token"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"correct horse\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let by_stdin = String::from_utf8(out.stdout).unwrap();
    assert_eq!(by_arg, by_stdin);
    assert_eq!(by_arg.trim().len(), 64);
    assert!(by_arg.trim().bytes().all(|b| b.is_ascii_hexdigit()));
}

#[test]
fn serve_starts_on_loopback_and_shows_the_sign_in_page() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("toolgate.json");
    let db = dir.path().join("inbox.db");
    std::fs::write(
        &config,
        format!(
            r#"{{"inbox": {{"sqlite": {db:?}}},
                "approvers": {{"listen": "127.0.0.1:0", "people": [{{"name": "alice", "token_sha256": "{HASH}"}}]}}}}"#
        ),
    )
    .unwrap();
    let mut child = toolgate()
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = lines.next().unwrap().unwrap();
    let url = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    assert!(url.starts_with("127.0.0.1:"), "{line}");
    let mut conn = std::net::TcpStream::connect(&url).unwrap();
    // The page answers only for its own address (issue 20: `Host` is checked).
    conn.write_all(
        format!("GET /login HTTP/1.1\r\nHost: {url}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut page = String::new();
    conn.read_to_string(&mut page).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("Sign in to approve held calls"));
    assert!(
        page.to_ascii_lowercase()
            .contains("content-security-policy")
    );
    assert!(
        db.exists(),
        "the inbox named by the configuration was opened"
    );
}
