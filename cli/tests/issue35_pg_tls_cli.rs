//! Issue 35 item 4 through the `toolgate` command: `check` says how the PostgreSQL inbox
//! will be reached (plain text or TLS, and which certificates it trusts) and refuses a URL
//! that cannot connect as written; `inbox list --pg-url` reaches the CI's server over TLS
//! (`TOOLGATE_PG_TLS_URL`, `.ci/postgres.sh`'s test CA) and refuses a root file of another CA.
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

fn toolgate(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.args(args).env_remove("TOOLGATE_PG_PLAINTEXT_HOSTS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("the binary runs")
}

/// `check --json` on a configuration whose inbox is `url`.
fn check(dir: &Path, url: &str, env: &[(&str, &str)]) -> (bool, Value) {
    let config = json!({
        "approval": {"channel": "inbox"},
        "inbox": {"postgres": url},
        "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"}],
        "agents": [{"name": "support", "allowed_tools": ["refund"]}]
    });
    let path = dir.join("toolgate.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let out = toolgate(&["check", path.to_str().unwrap(), "--json"], env);
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.success(), v)
}

#[test]
fn issue35_check_says_which_trust_roots_the_postgres_inbox_uses() {
    let dir = tempfile::tempdir().unwrap();
    let ca = toolgate_idp_kit::tls::TestCa::new().write(dir.path());
    let ca = ca.display().to_string();

    let url =
        format!("postgres://toolgate@db.internal/toolgate?sslmode=verify-full&sslrootcert={ca}");
    let (ok, v) = check(dir.path(), &url, &[]);
    assert!(ok, "{v}");
    let note = v["notes"][0].as_str().unwrap_or_default();
    assert!(
        note.starts_with("inbox.postgres: TLS to db.internal (sslmode=verify-full)")
            && note.contains(&format!(
                "a CA certificate of sslrootcert `{ca}` (1 certificate; no other CA is trusted)"
            ))
            && note.contains("be for the host"),
        "{v}"
    );
    // In words too.
    let path = dir.path().join("toolgate.json");
    let out = toolgate(&["check", path.to_str().unwrap()], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("note: inbox.postgres: TLS to db.internal"),
        "{text}"
    );

    // Loopback without sslmode: plain text, and it says so.
    let (ok, v) = check(
        dir.path(),
        "postgres://toolgate@127.0.0.1:5432/toolgate",
        &[],
    );
    assert!(ok, "{v}");
    assert!(
        v["notes"][0]
            .as_str()
            .unwrap_or_default()
            .contains("plain text to the loopback host 127.0.0.1"),
        "{v}"
    );

    // Plain text to another host: an error naming the setting, unless the host is named.
    let plain = "postgres://toolgate@db.internal/toolgate?sslmode=disable";
    let (ok, v) = check(dir.path(), plain, &[]);
    assert!(!ok, "{v}");
    assert_eq!(v["errors"][0]["path"], "inbox.postgres", "{v}");
    let message = v["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("`sslmode=disable`") && message.contains("TOOLGATE_PG_PLAINTEXT_HOSTS"),
        "{v}"
    );
    let (ok, v) = check(
        dir.path(),
        plain,
        &[("TOOLGATE_PG_PLAINTEXT_HOSTS", "cache.internal, db.internal")],
    );
    assert!(ok, "{v}");
    assert!(
        v["notes"][0]
            .as_str()
            .unwrap_or_default()
            .contains("plain text to db.internal"),
        "{v}"
    );

    // An unknown mode and a root file that is not there are errors too.
    let (ok, v) = check(
        dir.path(),
        "postgres://toolgate@db.internal/toolgate?sslmode=strict",
        &[],
    );
    assert!(!ok, "{v}");
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("`sslmode=strict`"),
        "{v}"
    );
    let (ok, v) = check(
        dir.path(),
        "postgres://toolgate@db.internal/toolgate?sslrootcert=/nonexistent/ca.pem",
        &[],
    );
    assert!(!ok, "{v}");
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("sslrootcert"),
        "{v}"
    );
}

/// `TOOLGATE_PG_URL` and `TOOLGATE_PG_TLS_URL` (the same server), or why the test does not
/// run.
fn pg_urls() -> Option<(String, String)> {
    let var = |name| {
        std::env::var(name)
            .ok()
            .filter(|u: &String| !u.trim().is_empty())
    };
    match (var("TOOLGATE_PG_URL"), var("TOOLGATE_PG_TLS_URL")) {
        (Some(plain), Some(tls)) => Some((plain, tls)),
        _ if std::env::var_os("CI").is_some() => panic!(
            "TOOLGATE_PG_URL or TOOLGATE_PG_TLS_URL is unset under CI: run `eval \"$(bash .ci/postgres.sh)\"` before `cargo test`"
        ),
        _ => {
            eprintln!(
                "skipped: TOOLGATE_PG_URL or TOOLGATE_PG_TLS_URL is unset (start a throwaway server with `eval \"$(bash .ci/postgres.sh)\"`)"
            );
            None
        }
    }
}

#[tokio::test]
async fn issue35_inbox_commands_reach_the_postgres_inbox_over_tls() {
    let Some((plain, url)) = pg_urls() else {
        return;
    };
    let schema = format!("cli_tls_{}", std::process::id());
    let (admin, connection) = plain
        .parse::<tokio_postgres::Config>()
        .unwrap()
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    admin
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        ))
        .await
        .unwrap();
    let scoped = format!("{url}&options=-c%20search_path%3D{schema}");
    let out = toolgate(&["inbox", "list", "--pg-url", &scoped, "--json"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.is_array() || v.is_object(), "{v}");
    // The inbox's tables were made, over TLS.
    let made: i64 = admin
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'held_calls'",
            &[&schema],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(made, 1);

    // Another CA's root file: refused, naming it, nothing sent in plain text.
    let dir = tempfile::tempdir().unwrap();
    let other = toolgate_idp_kit::tls::TestCa::new().write(dir.path());
    let (head, query) = url.split_once('?').unwrap();
    let query: Vec<&str> = query
        .split('&')
        .filter(|p| !p.starts_with("sslrootcert="))
        .collect();
    let wrong = format!(
        "{head}?{}&sslrootcert={}&options=-c%20search_path%3D{schema}",
        query.join("&"),
        other.display()
    );
    let out = toolgate(&["inbox", "list", "--pg-url", &wrong], &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "not signed by a CA of sslrootcert `{}`",
            other.display()
        )),
        "{err}"
    );
    admin
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
}
