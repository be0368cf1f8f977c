//! Issue 22, item 4 — revocation without restart on the approval page, through the real
//! binary: on SIGHUP `toolgate serve` reads its configuration again, and an approver's token
//! removed from `approvers.people` no longer signs in, and the session signed in with it is
//! refused at its next request; a configuration that does not read keeps the approvers in
//! force.
#![cfg(all(feature = "serve", unix))]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-9876543210";

fn hash(token: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "hash-token", token])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn config(db: &std::path::Path, people: &[(&str, &str)]) -> String {
    let people: Vec<String> = people
        .iter()
        .map(|(n, t)| format!(r#"{{"name": "{n}", "token_sha256": "{}"}}"#, hash(t)))
        .collect();
    format!(
        r#"{{"inbox": {{"sqlite": {db:?}}},
            "approvers": {{"listen": "127.0.0.1:0", "people": [{}]}}}}"#,
        people.join(", ")
    )
}

/// One request (`Connection: close`): the whole answer.
fn http(addr: &str, method: &str, path: &str, cookie: &str, body: &str) -> String {
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    let cookie = if cookie.is_empty() {
        String::new()
    } else {
        format!("Cookie: {cookie}\r\n")
    };
    write!(
        conn,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{cookie}Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    conn.read_to_string(&mut out).unwrap();
    out
}

fn status(resp: &str) -> u16 {
    resp.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// The `name=value` of the `Set-Cookie` named `name`.
fn set_cookie(resp: &str, name: &str) -> Option<String> {
    resp.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        let pair = v.trim().split(';').next()?;
        (k.eq_ignore_ascii_case("set-cookie") && pair.starts_with(&format!("{name}=")))
            .then(|| pair.to_owned())
    })
}

/// Signs in with `token`: the reply's status and the session cookie, when one was set.
fn sign_in(addr: &str, token: &str) -> (u16, Option<String>) {
    let form = http(addr, "GET", "/login", "", "");
    let login = set_cookie(&form, "tg_login").expect("the sign-in form's cookie");
    let nonce = form
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("the sign-in form's nonce")
        .to_owned();
    let resp = http(
        addr,
        "POST",
        "/login",
        &login,
        &format!("csrf={nonce}&token={token}"),
    );
    (status(&resp), set_cookie(&resp, "tg_session"))
}

#[test]
fn issue22_sighup_revokes_an_approvers_token_and_ends_its_session() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.json");
    let db = dir.path().join("inbox.db");
    std::fs::write(&path, config(&db, &[("alice", ALICE), ("bob", BOB)])).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("serve")
        .arg("--config")
        .arg(&path)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            eprintln!("toolgate: {l}");
            let _ = tx.send(l);
        }
    });
    let until = |want: &str| loop {
        match lines.recv_timeout(Duration::from_secs(60)) {
            Ok(l) if l.contains(want) => return l,
            Ok(_) => {}
            Err(_) => panic!("toolgate serve never said `{want}`"),
        }
    };
    let line = until("the approval page is on");
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap()
        .to_owned();
    let (s, bob) = sign_in(&addr, BOB);
    assert_eq!(s, 303);
    let bob = bob.expect("bob's session");
    let (s, alice) = sign_in(&addr, ALICE);
    assert_eq!(s, 303);
    let alice = alice.expect("alice's session");
    assert_eq!(status(&http(&addr, "GET", "/", &bob, "")), 200);

    // A configuration that does not read changes nothing.
    std::fs::write(&path, "{ not json").unwrap();
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    until("RELOAD FAILED");
    assert_eq!(status(&http(&addr, "GET", "/", &bob, "")), 200);

    // Bob's token is revoked: the operator removes it and sends SIGHUP.
    std::fs::write(&path, config(&db, &[("alice", ALICE)])).unwrap();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    until("were read again");
    let page = http(&addr, "GET", "/", &bob, "");
    assert_eq!(status(&page), 303, "bob's session is refused: {page}");
    assert!(
        page.contains("location: /login") || page.contains("Location: /login"),
        "{page}"
    );
    assert_eq!(sign_in(&addr, BOB).0, 401, "bob's token no longer signs in");
    assert_eq!(
        status(&http(&addr, "GET", "/", &alice, "")),
        200,
        "alice's stays"
    );

    // A token changed for the same name: the session signed in with the old one ends.
    std::fs::write(
        &path,
        config(&db, &[("alice", "alice-new-token-000000000")]),
    )
    .unwrap();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    until("were read again");
    assert_eq!(status(&http(&addr, "GET", "/", &alice, "")), 303);
    let _ = child.kill();
    let _ = child.wait();
}
