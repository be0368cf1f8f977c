//! The approval page's own fields of `approvers` (`api_keys`, `slack`, the verification
//! settings of `jwt`) are read by the page's crate, not the engine: `check` still reports
//! their errors, each with its path, beside the engine's in one run, and `serve` does not
//! start on them (fail closed, R5). So are the `inbox` section's, read by the inbox's crate:
//! `check` reports them and no command opens an inbox on them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use serde_json::{Value, json};

mod common;

use common::toolgate;

const HASH: &str = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";
const KEY: &str = "81b637d8fcd2c6da6359e6963113a1170de795e4b725b84d1e0b4cfd9ec58ce9";

fn write(dir: &tempfile::TempDir, config: &Value) -> String {
    let path = dir.path().join("toolgate.json");
    std::fs::write(&path, config.to_string()).unwrap();
    path.to_str().unwrap().to_owned()
}

fn paths(out: &Value) -> Vec<String> {
    out["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn check_reports_the_pages_field_errors_with_their_paths() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        &dir,
        &json!({"approvers": {
            "people": [{"name": "alice", "token_sha256": HASH}],
            "api_keys": [
                {"name": "ci", "key_sha256": KEY, "scopes": ["policy:read", "admin"]},
                {"name": "bot", "key_sha256": "nope", "scopes": ["approvals"], "approver": "mallory"}
            ],
            "slack": {"signing_secret_file": "slack.secret", "users": [{"slack_user": "U1", "approver": "bob"}]}
        }}),
    );
    let o = toolgate(&["check", &config, "--json"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(out["valid"], false);
    assert_eq!(
        paths(&out),
        [
            "approvers.api_keys[0].scopes[1]",
            "approvers.api_keys[1].key_sha256",
            "approvers.api_keys[1].approver",
            "approvers.slack.users[0].approver",
        ]
    );
}

#[test]
fn the_engines_errors_come_first_and_the_page_is_read_only_on_a_snapshot_that_builds() {
    // An engine error (an unknown field of `approvers`) refuses the whole snapshot; the
    // page's fields are read from a built snapshot only, so they are not judged twice.
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        &dir,
        &json!({"approvers": {
            "people": [{"name": "alice", "token_sha256": HASH}],
            "api_key": [],
            "slack": null
        }}),
    );
    let o = toolgate(&["check", &config, "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(paths(&out), ["approvers.api_key", "approvers.slack"]);
}

#[test]
fn serve_does_not_start_on_page_fields_that_do_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        &dir,
        &json!({"approvers": {
            "listen": "127.0.0.1:0",
            "people": [{"name": "alice", "token_sha256": HASH}],
            "api_keys": [{"name": "bot", "key_sha256": KEY, "scopes": ["approvals"]}]
        }}),
    );
    let o = toolgate(&["serve", "--config", &config]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("approvers.api_keys[0].approver"), "{err}");
}

/// `approvers.auth: jwt` with verification settings the identity provider's reader refuses:
/// keys over plain `http://` to a host that is not loopback, an HMAC algorithm. Groups alone
/// name the approvers with `auth: jwt`.
fn bad_jwt_approvers() -> Value {
    json!({"approvers": {
        "listen": "127.0.0.1:0",
        "auth": "jwt",
        "jwt": {"issuer": "https://idp.example.com/", "audience": "toolgate-approvals",
                "jwks_url": "http://idp.internal/jwks", "algorithms": ["HS256"]},
        "groups": [{"group": "sre", "tools": [{"server": "github"}]}]
    }})
}

#[test]
fn check_reports_the_jwt_verification_errors_with_their_paths() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(&dir, &bad_jwt_approvers());
    let o = toolgate(&["check", &config, "--json"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(out["valid"], false);
    assert_eq!(
        paths(&out),
        ["approvers.jwt.jwks_url", "approvers.jwt.algorithms[0]"]
    );
}

#[test]
fn serve_does_not_start_on_jwt_verification_settings_that_do_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(&dir, &bad_jwt_approvers());
    let o = toolgate(&["serve", "--config", &config]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("approvers.jwt.jwks_url"), "{err}");
    assert!(err.contains("approvers.jwt.algorithms[0]"), "{err}");
}

#[test]
fn config_print_spells_the_jwt_verification_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        &dir,
        &json!({"approvers": {
            "auth": "jwt",
            "jwt": {"issuer": "https://idp.example.com/", "audience": "toolgate-approvals",
                    "jwks_url": "https://idp.example.com/jwks", "header": "X-Forwarded-Access-Token"},
            "groups": [{"group": "sre"}]
        }}),
    );
    let o = toolgate(&["config", "print", &config]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        out["approvers"]["jwt"],
        json!({"issuer": "https://idp.example.com/", "audience": "toolgate-approvals",
               "jwks_url": "https://idp.example.com/jwks", "jwks_cache_secs": 300,
               "algorithms": ["RS256", "ES256"], "leeway_secs": 30, "required_scopes": [],
               "name_claim": "preferred_username", "groups_claim": "groups",
               "header": "X-Forwarded-Access-Token"})
    );
    // And a configuration whose verification settings do not read does not print.
    let bad = write(&dir, &bad_jwt_approvers());
    let o = toolgate(&["config", "print", &bad]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("approvers.jwt.jwks_url"), "{err}");
}

/// An `inbox` section the inbox's reader refuses: a `ttl` that is not a duration, a
/// `synchronous` that is neither `normal` nor `full`.
fn bad_inbox() -> Value {
    json!({"inbox": {"sqlite": "x.db", "ttl": "soon", "synchronous": "sometimes"}})
}

#[test]
fn check_reports_the_inbox_errors_with_their_paths() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(&dir, &bad_inbox());
    let o = toolgate(&["check", &config, "--json"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(out["valid"], false);
    assert_eq!(paths(&out), ["inbox.ttl", "inbox.synchronous"]);
}

#[test]
fn commands_that_open_the_inbox_refuse_an_inbox_section_that_does_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(&dir, &bad_inbox());
    for args in [
        vec!["inbox", "list", "--config", &config],
        vec!["mcp", "serve", "--config", &config, "--agent", "a"],
        vec!["serve", "--config", &config],
        vec!["config", "print", &config],
    ] {
        let o = toolgate(&args);
        assert!(!o.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("inbox.ttl"), "{args:?}: {err}");
        assert!(err.contains("inbox.synchronous"), "{args:?}: {err}");
    }
    assert!(
        !dir.path().join("x.db").exists(),
        "no inbox file is made for a section that does not read"
    );
}

#[test]
fn config_print_spells_the_inbox_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        &dir,
        &json!({"inbox": {"sqlite": "x.db", "ttl": "90m", "synchronous": "full"}}),
    );
    let o = toolgate(&["config", "print", &config]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    let sqlite = dir.path().join("x.db");
    assert_eq!(
        out["inbox"],
        json!({"sqlite": sqlite.to_str().unwrap(), "ttl": "1h 30m", "synchronous": "full"})
    );
}

#[test]
fn every_command_refuses_a_configuration_whose_owned_sections_do_not_read() {
    // SPEC §8: a configuration with any error is refused whole, whichever crate reads the
    // failing field — `decide`, `expose`, `explain` and `simulate` open no inbox and run no
    // page, and still refuse (exit 2, the errors named, nothing on standard output).
    let dir = tempfile::tempdir().unwrap();
    let base = json!({
        "tools": [{"kind": "http", "name": "refund"}],
        "agents": [{"name": "a", "allowed_tools": ["refund"]}],
    });
    let mut page = base.clone();
    page["approvers"] = json!({
        "people": [{"name": "alice", "token_sha256": HASH}],
        "api_keys": [{"name": "bot", "key_sha256": KEY, "scopes": ["approvals"]}]
    });
    let mut inbox = base.clone();
    inbox["inbox"] = json!({"sqlite": "x.db", "ttl": "soon"});
    let call = dir.path().join("call.json");
    std::fs::write(&call, r#"{"agent": "a", "name": "refund", "input": {}}"#).unwrap();
    let call = call.to_str().unwrap();
    for (config, path) in [
        (&page, "approvers.api_keys[0].approver"),
        (&inbox, "inbox.ttl"),
    ] {
        let cfg = write(&dir, config);
        for args in [
            vec!["decide", &cfg, "--call", call, "--json"],
            vec!["expose", &cfg, "--agent", "a", "--json"],
        ] {
            let o = toolgate(&args);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert!(o.stdout.is_empty(), "{args:?}");
            assert!(err.contains(path), "{args:?}: {err}");
        }
    }
    // The same configuration without the bad section decides.
    let cfg = write(&dir, &base);
    let o = toolgate(&["decide", &cfg, "--call", call, "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
