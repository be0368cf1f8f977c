//! The `toolgate` command end to end (SPEC §7): exit codes, JSON shapes, formats.
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

mod common;

use common::toolgate;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

fn json_out(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&o.stdout)))
}

const CONFIG: &str = r#"{
  "approval": {"channel": "interactive"},
  "tools": [{"server": "github", "name": "create_issue"}, {"kind": "http", "name": "refund_order"},
            {"toolset": "github", "name": "create_issue", "approval": "require_approval"}],
  "agents": [{"name": "support", "allowed_tools": ["github__create_issue", "refund_order"]}],
  "policy": {"rules": [{"effect": "deny", "kind": "http", "tool": "refund_*", "when": {"amount": {"gt": 100}}, "reason": "too much"},
                       {"effect": "ask", "server": "gitlab", "reason": "never matches"}]}
}"#;

#[test]
fn check_reports_warnings_and_errors_with_paths() {
    let d = tempfile::tempdir().unwrap();
    let cfg = write(d.path(), "c.json", CONFIG);
    let o = toolgate(&["check", &cfg, "--json"]);
    assert_eq!(o.status.code(), Some(0));
    let v = json_out(&o);
    assert_eq!(v["valid"], true);
    let w = v["warnings"].to_string();
    assert!(w.contains("github__create_issue"), "R24 collision: {w}");
    assert!(w.contains("R40"), "R40 warnings: {w}");

    let bad = write(
        d.path(),
        "bad.json",
        r#"{"agents": [{"name": "a", "overrides": [{"tool": "x", "approval": "maybe"}]}], "colour": 1}"#,
    );
    let o = toolgate(&["check", &bad, "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v = json_out(&o);
    let paths: Vec<&str> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["colour", "agents[0].overrides[0].approval"]);

    let policy = write(
        d.path(),
        "p.json",
        r#"{"rules": [{"effect": "ask", "tool": "github__create_issue"}]}"#,
    );
    let o = toolgate(&["check", &cfg, "--policy", &policy, "--json"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(json_out(&o)["errors"][0]["path"], "policy.rules[0].tool");

    assert_eq!(
        toolgate(&["check", "/nonexistent.json", "--json"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        toolgate(&["check", &cfg, "--policy", "/nonexistent.json"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(toolgate(&["check"]).status.code(), Some(2), "usage error");
}

#[test]
fn expose_decide_explain() {
    let d = tempfile::tempdir().unwrap();
    let cfg = write(d.path(), "c.json", CONFIG);
    let o = toolgate(&["expose", &cfg, "--agent", "support", "--json"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        json_out(&o),
        json!({"agent": "support",
               "tools": [{"name": "github__create_issue", "approval": "wrapped"}, {"name": "refund_order", "approval": "raw"}],
               "omitted": []})
    );
    assert_eq!(
        toolgate(&["expose", &cfg, "--agent", "ghost", "--json"])
            .status
            .code(),
        Some(2)
    );

    let call = write(
        d.path(),
        "call.json",
        r#"{"agent": "support", "name": "refund_order", "input": {"amount": 500}}"#,
    );
    let o = toolgate(&["decide", &cfg, "--call", &call, "--json"]);
    assert_eq!(
        json_out(&o),
        json!({"outcome": "refused", "refusal": "denied", "auto_approved": false, "granted": null, "reasons": ["too much"]})
    );
    let o = toolgate(&["explain", &cfg, "--call", &call]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("tenant policy") && text.contains("rules[0]") && text.contains("too much"),
        "{text}"
    );

    let bad_call = write(
        d.path(),
        "bad.json",
        r#"{"agent": "support", "name": "refund_order", "run": {"mode": "sometimes"}}"#,
    );
    assert_eq!(
        toolgate(&["decide", &cfg, "--call", &bad_call, "--json"])
            .status
            .code(),
        Some(2)
    );

    let unreadable = write(d.path(), "p.json", "{not json");
    let o = toolgate(&[
        "decide",
        &cfg,
        "--policy",
        &unreadable,
        "--call",
        &call,
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(json_out(&o)["refusal"], "policy_unreadable");
}

#[test]
fn a_config_that_fails_to_load_prints_nothing_on_stdout() {
    let d = tempfile::tempdir().unwrap();
    let cfg = write(
        d.path(),
        "c.json",
        r#"{"tools": [{"kind": "http", "name": "!!!"}]}"#,
    );
    let call = write(d.path(), "call.json", r#"{"agent": "x", "name": "y"}"#);
    for args in [
        vec!["expose", cfg.as_str(), "--agent", "x", "--json"],
        vec!["decide", cfg.as_str(), "--call", call.as_str(), "--json"],
    ] {
        let o = toolgate(&args);
        assert_eq!(o.status.code(), Some(2));
        assert!(o.stdout.is_empty());
        assert!(String::from_utf8_lossy(&o.stderr).contains("tools[0].name"));
    }
}

#[test]
fn toml_and_yaml_configs() {
    let d = tempfile::tempdir().unwrap();
    let toml = write(
        d.path(),
        "c.toml",
        "air_gapped = true\n[[tools]]\nkind = \"http\"\nname = \"fetch\"\nnetwork = \"egress\"\n[[agents]]\nname = \"dev\"\nallowed_tools = [\"fetch\"]\n",
    );
    let yaml = write(
        d.path(),
        "c.yaml",
        "air_gapped: true\ntools:\n  - kind: http\n    name: fetch\n    network: egress\nagents:\n  - name: dev\n    allowed_tools: [fetch]\n",
    );
    for cfg in [toml, yaml] {
        let o = toolgate(&["expose", &cfg, "--agent", "dev", "--json"]);
        assert_eq!(
            json_out(&o)["omitted"],
            json!([{"name": "fetch", "refusal": "air_gapped"}]),
            "{cfg}"
        );
    }
}

#[test]
fn audit_verify() {
    use toolgate_engine::chain::{GENESIS, link};
    let d = tempfile::tempdir().unwrap();
    let mut prev = GENESIS.to_owned();
    let mut lines = Vec::new();
    for i in 1..=3u64 {
        let mut m = serde_json::Map::new();
        m.insert("tool".into(), json!(format!("t{i}")));
        let (line, hash) = link(m, i, &prev).unwrap();
        prev = hash;
        lines.push(line);
    }
    let good = write(d.path(), "a.jsonl", &(lines.join("\n") + "\n"));
    let o = toolgate(&["audit", "verify", &good, "--json"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(json_out(&o), json!({"valid": true, "records": 3}));
    lines[1] = lines[1].replace("t2", "tX");
    let bad = write(d.path(), "b.jsonl", &lines.join("\n"));
    let o = toolgate(&["audit", "verify", &bad, "--json"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(json_out(&o)["line"], 2);
}

/// SPEC round 2 through the command: R41, R42, §8 (subagent ids, non-finite numbers,
/// non-object input), and `config print` loading back into the same configuration.
#[test]
fn round2_prefix_ungoverned_subagent_and_config_print() {
    let d = tempfile::tempdir().unwrap();
    let cfg = write(
        d.path(),
        "c.json",
        r#"{
  "approval": {"channel": "interactive"},
  "behavior_gating": {"require_approval_for_non_read_only": true},
  "servers": {"github": {"tool_prefix": "github-"}},
  "tools": [{"server": "github", "name": "github-create_issue"}, {"server": "github", "name": "list"},
            {"toolset": "skills", "name": "read_skill", "governed": false, "ungoverned_reason": "reads instructions"}],
  "agents": [{"name": "support", "allowed_tools": ["github__create_issue", "skills__read_skill"]},
             {"name": "admin", "allowed_tools": ["github__create_issue"]}],
  "policy": {"rules": [{"effect": "deny", "server": "github", "tool": "create_issue", "agent": "support", "reason": "not support"}]}
}"#,
    );
    let o = toolgate(&["check", &cfg, "--json"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let w = json_out(&o)["warnings"].to_string();
    assert!(
        w.contains("`list`") && w.contains("R41"),
        "R41 warning: {w}"
    );
    assert!(
        w.contains("skills__read_skill") && w.contains("reads instructions"),
        "R42 warning: {w}"
    );

    let decide = |call: &str| {
        let c = write(d.path(), "call.json", call);
        toolgate(&["decide", &cfg, "--call", &c, "--json"])
    };
    let v = json_out(&decide(
        r#"{"agent": "support", "server": "github", "tool": "create_issue"}"#,
    ));
    assert_eq!(v["refusal"], "denied", "{v}");
    let v = json_out(&decide(
        r#"{"agent": "support", "name": "skills__read_skill"}"#,
    ));
    assert_eq!(v["outcome"], "run", "{v}");
    let v = json_out(&decide(
        r#"{"agent": "admin", "profile": "support", "name": "github__create_issue"}"#,
    ));
    assert_eq!(
        v["refusal"], "not_allowed",
        "a subagent id may not shadow a profile: {v}"
    );
    for bad in [
        r#"{"agent": "support", "name": "skills__read_skill", "input": {"n": 1e999}}"#,
        r#"{"agent": "support", "name": "skills__read_skill", "input": "text"}"#,
    ] {
        let o = decide(bad);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        assert!(o.stdout.is_empty());
    }

    let o = toolgate(&["config", "print", &cfg]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let printed = write(
        d.path(),
        "printed.json",
        &String::from_utf8_lossy(&o.stdout),
    );
    let again = toolgate(&["config", "print", &printed]);
    assert_eq!(
        json_out(&o),
        json_out(&again),
        "the printed configuration loads back the same"
    );
}

/// R49: `config print` keeps the operator's labels of servers and tools, so the printed
/// configuration decides as the original (before, both were dropped: a rule on session
/// labels loaded back matching nothing).
#[test]
fn r49_config_print_keeps_server_and_tool_labels() {
    let d = tempfile::tempdir().unwrap();
    let cfg = write(
        d.path(),
        "labels.json",
        r#"{"servers": {"gh": {"labels": ["private"]}},
            "tools": [{"kind": "mcp", "server": "gh", "name": "read_issue", "labels": ["untrusted"]}],
            "agents": [{"name": "a", "allowed_tools": ["gh__read_issue"]}],
            "policy": {"rules": [{"effect": "ask", "tool": "*", "labels": ["private"]}]}}"#,
    );
    let o = toolgate(&["config", "print", &cfg]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let printed = json_out(&o);
    assert_eq!(
        printed["servers"]["gh"]["labels"],
        serde_json::json!(["private"]),
        "{printed}"
    );
    assert_eq!(
        printed["tools"][0]["labels"],
        serde_json::json!(["untrusted"]),
        "{printed}"
    );
    let again = toolgate(&[
        "config",
        "print",
        &write(
            d.path(),
            "printed.json",
            &String::from_utf8_lossy(&o.stdout),
        ),
    ]);
    assert_eq!(
        printed,
        json_out(&again),
        "the printed configuration loads back the same"
    );
}

#[test]
fn r33_audit_verify_refuses_a_record_edited_with_a_duplicate_key() {
    use toolgate_engine::chain::{GENESIS, link};
    let d = tempfile::tempdir().unwrap();
    let mut prev = GENESIS.to_owned();
    let mut lines = Vec::new();
    for i in 1..=3u64 {
        let mut m = serde_json::Map::new();
        m.insert("outcome".into(), json!("refused"));
        let (line, hash) = link(m, i, &prev).unwrap();
        prev = hash;
        lines.push(line);
    }
    // A last-wins parser still reads `refused` and the hash of the parsed record matches;
    // grep and first-wins readers see `completed`.
    lines[1] = lines[1].replacen('{', r#"{"outcome":"completed","#, 1);
    let bad = write(d.path(), "dup.jsonl", &(lines.join("\n") + "\n"));
    let o = toolgate(&["audit", "verify", &bad, "--json"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let out = json_out(&o);
    assert_eq!(
        (out["line"].clone(), out["seq"].clone()),
        (json!(2), json!(2))
    );
    assert!(out["problem"].as_str().unwrap().contains("twice"), "{out}");
}

#[test]
fn r36_r20_decide_reads_numbers_as_written() {
    let d = tempfile::tempdir().unwrap();
    let cfg = write(
        d.path(),
        "n.json",
        r#"{"limits": {"max_input_bytes": 20},
            "tools": [{"kind": "http", "name": "echo"}],
            "agents": [{"name": "dev", "allowed_tools": ["echo"]}]}"#,
    );
    let decide = |cfg: &str, policy: Option<&str>, input: &str| {
        let call = write(
            d.path(),
            "call.json",
            &format!(r#"{{"agent": "dev", "name": "echo", "input": {input}}}"#),
        );
        let mut args = vec!["decide", cfg, "--call", &call, "--json"];
        if let Some(p) = policy {
            args.extend(["--policy", p]);
        }
        let o = toolgate(&args);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        json_out(&o)
    };
    // R36: 29 bytes as written, though its double prints as `1e22`.
    let out = decide(&cfg, None, r#"{"x":10000000000000000000000}"#);
    assert_eq!(out["refusal"], "invalid_input", "{out}");
    assert_eq!(decide(&cfg, None, r#"{"x":1e22}"#)["outcome"], "run");

    // R20: a stored policy (`--policy`) and the config's own policy compare by digits.
    let big = write(
        d.path(),
        "big.json",
        r#"{"tools": [{"kind": "http", "name": "echo"}],
            "agents": [{"name": "dev", "allowed_tools": ["echo"]}],
            "policy": {"default": "deny", "rules": [
              {"effect": "deny", "when": {"amount": {"gt": 18446744073709551616}}},
              {"effect": "allow", "when": {"amount": {"in": [18446744073709551617, 18446744073709551619]}}}]}}"#,
    );
    let policy = write(
        d.path(),
        "p.json",
        r#"{"default": "deny", "rules": [{"effect": "allow", "when": {"id": {"equals": 18446744073709551617}}}]}"#,
    );
    let out = decide(&big, None, r#"{"amount": 18446744073709551617}"#);
    assert_eq!(out["refusal"], "denied", "gt 2^64: {out}");
    let out = decide(&big, None, r#"{"amount": 18446744073709551616}"#);
    assert_eq!(out["refusal"], "denied", "not in the list: {out}");
    let out = decide(&big, Some(&policy), r#"{"id": 18446744073709551616}"#);
    assert_eq!(out["refusal"], "denied", "equals never over-matches: {out}");
    let out = decide(&big, Some(&policy), r#"{"id": 18446744073709551617}"#);
    assert_eq!(out["outcome"], "run", "{out}");
}

#[test]
fn r26_explain_shows_the_channel_and_timeout_that_answer_an_ask() {
    let d = tempfile::tempdir().unwrap();
    let cfg = write(
        d.path(),
        "c.json",
        r#"{"approval": {"channel": "interactive"},
            "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"}],
            "agents": [{"name": "dev", "allowed_tools": ["refund"]},
                       {"name": "nightly", "allowed_tools": ["refund"],
                        "approval": {"channel": "inbox", "timeout_secs": 30}},
                       {"name": "nightly-sub", "parent": "nightly", "allowed_tools": ["refund"]}]}"#,
    );
    let explain = |agent: &str| {
        let call = write(
            d.path(),
            "call.json",
            &format!(r#"{{"agent": "{agent}", "name": "refund", "input": {{}}}}"#),
        );
        json_out(&toolgate(&["explain", &cfg, "--call", &call, "--json"]))
    };
    let v = explain("dev");
    assert_eq!(v["outcome"], "ask");
    assert_eq!(v["channel"], "interactive", "SPEC §7's field is unchanged");
    assert_eq!(
        v["approval"],
        json!({"channel": "interactive", "channel_from": "host", "timeout_secs": null})
    );
    // R39: the subagent inherits its parent's channel and timeout.
    for agent in ["nightly", "nightly-sub"] {
        let v = explain(agent);
        assert_eq!(v["channel"], "inbox", "{agent}");
        assert_eq!(
            v["approval"],
            json!({"channel": "inbox", "channel_from": "agent", "timeout_secs": 30}),
            "{agent}"
        );
    }
    let call = write(
        d.path(),
        "call.json",
        r#"{"agent": "nightly", "name": "refund", "input": {}}"#,
    );
    let o = toolgate(&["explain", &cfg, "--call", &call]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("`inbox` channel") && text.contains("30 s"),
        "{text}"
    );
    // No ask, no `approval` field.
    let d2 = tempfile::tempdir().unwrap();
    let plain = write(
        d2.path(),
        "c.json",
        r#"{"tools": [{"kind": "http", "name": "lookup"}],
            "agents": [{"name": "dev", "allowed_tools": ["lookup"]}]}"#,
    );
    let call = write(
        d2.path(),
        "call.json",
        r#"{"agent": "dev", "name": "lookup", "input": {}}"#,
    );
    let v = json_out(&toolgate(&["explain", &plain, "--call", &call, "--json"]));
    assert_eq!(v["outcome"], "run");
    assert!(v.get("approval").is_none(), "{v}");
}

const ROUND3: &str = r#"{
  "approval": {"channel": "inbox"},
  "tools": [{"kind": "http", "name": "refund", "approval": "require_approval"},
            {"kind": "http", "name": "search"}],
  "agents": [{"name": "support", "allowed_tools": ["refund", "search"]}],
  "policy": {"rules": [], "quotas": [{"max": 1, "window_secs": 10, "tool": "search", "reason": "one search per 10 s"}]}
}"#;

const GRANTS: &str = r#"[{"id": "g-1", "agent": "support", "tool": "refund", "session": "s-1",
  "expires_at": 60000, "max_calls": 1, "granted_by": "alice", "reason": "backlog"}]"#;

#[test]
fn r45_decide_with_grants_names_the_grant_judged_at_the_calls_time() {
    let d = tempfile::tempdir().unwrap();
    let cfg = write(d.path(), "c.json", ROUND3);
    let grants = write(d.path(), "g.json", GRANTS);
    let decide = |call: &str| {
        let call = write(d.path(), "call.json", call);
        let o = toolgate(&[
            "decide", &cfg, "--grants", &grants, "--call", &call, "--json",
        ]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        json_out(&o)
    };
    let v = decide(r#"{"agent": "support", "name": "refund", "session": "s-1", "at": 59999}"#);
    assert_eq!(
        (v["outcome"].as_str(), v["granted"].as_str()),
        (Some("run"), Some("g-1"))
    );
    let v = decide(r#"{"agent": "support", "name": "refund", "session": "s-1", "at": 60000}"#);
    assert_eq!(v["outcome"], "ask", "expired: now < expires_at fails");
    assert_eq!(v["granted"], Value::Null);
    let v = decide(r#"{"agent": "support", "name": "refund", "session": "s-2", "at": 0}"#);
    assert_eq!(v["granted"], Value::Null, "another session");

    let explain = write(
        d.path(),
        "e.json",
        r#"{"agent": "support", "name": "refund", "session": "s-1", "at": 1}"#,
    );
    let o = toolgate(&["explain", &cfg, "--grants", &grants, "--call", &explain]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("grant `g-1`") && text.contains("alice"),
        "{text}"
    );

    for bad in [
        r#"[{"id": "g", "agent": "support", "tool": "refund"}]"#,
        r#"[{"id": "g", "agent": "a", "tool": "x__y", "expires_at": 1, "granted_by": "p", "reason": "r"}]"#,
        r#"{"id": "g"}"#,
        "[",
    ] {
        let g = write(d.path(), "bad.json", bad);
        let call = write(
            d.path(),
            "call.json",
            r#"{"agent": "support", "name": "refund"}"#,
        );
        let o = toolgate(&["decide", &cfg, "--grants", &g, "--call", &call, "--json"]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        assert!(o.stdout.is_empty());
        let calls = write(
            d.path(),
            "calls.json",
            r#"[{"agent": "support", "name": "refund", "at": 0}]"#,
        );
        let o = toolgate(&[
            "simulate", &cfg, "--grants", &g, "--calls", &calls, "--json",
        ]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
    }
    for bad in [
        r#"{"agent": "support", "name": "refund", "session": "  "}"#,
        r#"{"agent": "support", "name": "refund", "at": -5}"#,
        r#"{"agent": "support", "name": "refund", "answer": "approve"}"#,
    ] {
        let call = write(d.path(), "call.json", bad);
        let o = toolgate(&["decide", &cfg, "--call", &call, "--json"]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
    }
}

#[test]
fn r44_r46_simulate_decides_calls_in_order_with_their_history() {
    let d = tempfile::tempdir().unwrap();
    let cfg = write(d.path(), "c.json", ROUND3);
    let grants = write(d.path(), "g.json", GRANTS);
    let calls = write(
        d.path(),
        "calls.json",
        r#"[{"agent": "support", "name": "search", "at": 0},
            {"agent": "support", "name": "search", "at": 500},
            {"agent": "support", "name": "refund", "session": "s-1", "at": 1000},
            {"agent": "support", "name": "refund", "session": "s-1", "at": 2000, "answer": "approve"},
            {"agent": "support", "name": "refund", "at": 3000, "answer": "deny"},
            {"agent": "support", "name": "refund", "at": 3000}]"#,
    );
    let o = toolgate(&[
        "simulate", &cfg, "--grants", &grants, "--calls", &calls, "--json",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = json_out(&o);
    let r = &v["results"];
    assert_eq!(r[0]["sent"], true);
    assert_eq!(r[1]["refusal"], "rate_limited");
    assert_eq!(r[1]["retry_after_secs"], 10, "9.5 s rounded up");
    assert!(r[1]["reasons"].to_string().contains("one search per 10 s"));
    assert_eq!(
        (r[2]["granted"].as_str(), r[2]["sent"].as_bool()),
        (Some("g-1"), Some(true))
    );
    assert_eq!(r[3]["outcome"], "ask", "g-1 is spent (max_calls 1)");
    assert_eq!(r[3]["sent"], true, "approved");
    assert_eq!(r[4]["sent"], false, "denied");
    assert_eq!(r[5]["sent"], false, "still held");
    for res in r.as_array().unwrap() {
        let keys: Vec<&str> = res
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "auto_approved",
                "granted",
                "outcome",
                "reasons",
                "refusal",
                "retry_after_secs",
                "sent"
            ]
        );
    }
    assert_eq!(v["summary"], json!({"sent": 3, "asked": 3, "refused": 1}));

    let o = toolgate(&["simulate", &cfg, "--grants", &grants, "--calls", &calls]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("3 sent, 3 asked, 1 refused") && text.contains("retry after 10 s"),
        "{text}"
    );

    for bad in [
        r#"[{"agent": "support", "name": "search", "at": 5}, {"agent": "support", "name": "search", "at": 4}]"#,
        r#"[{"agent": "support", "name": "search"}]"#,
        r#"[{"agent": "support", "name": "search", "at": 0, "answer": "later"}]"#,
        r#"[{"agent": "support", "name": "search", "at": 0, "colour": 1}]"#,
        r#"{"agent": "support", "name": "search", "at": 0}"#,
    ] {
        let calls = write(d.path(), "bad.json", bad);
        let o = toolgate(&["simulate", &cfg, "--calls", &calls, "--json"]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        assert!(o.stdout.is_empty(), "{bad}");
    }
    let broken = write(
        d.path(),
        "broken.json",
        r#"{"tools": [{"kind": "ftp", "name": "x"}]}"#,
    );
    let o = toolgate(&["simulate", &broken, "--calls", &calls, "--json"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
}

/// Issue 23 (R6): the tools of an `mcp` server are listed when `toolgate mcp serve` connects,
/// so `check` cannot see them; a thousand allowed names of one such server are one warning per
/// agent with their count, and a typo of a declared tool still has its own.
#[test]
fn issue23_check_groups_the_unseen_names_of_a_discovered_server() {
    let d = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..1000).map(|i| format!("big__tool_{i}")).collect();
    let mut allowed = names.clone();
    allowed.push("refnud".into()); // a typo of `refund`
    let cfg = write(
        d.path(),
        "c.json",
        &json!({
            "tools": [{"kind": "http", "name": "refund"}],
            "agents": [{"name": "a", "allowed_tools": allowed},
                       {"name": "b", "allowed_tools": ["big__tool_1", "other__tool"]}],
            "mcp": {"servers": {"big": {"command": "node", "args": ["server.js"]}},
                    "tokens": [{"sha256": "a".repeat(64), "agent": "a"}]},
        })
        .to_string(),
    );
    let o = toolgate(&["check", &cfg, "--json"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let v = json_out(&o);
    let warnings = v["warnings"].as_array().unwrap();
    let about = |needle: &str| -> Vec<&Value> {
        warnings
            .iter()
            .filter(|w| w["message"].as_str().unwrap().contains(needle))
            .collect()
    };
    let big = about("of server `big`");
    assert_eq!(big.len(), 2, "one per agent: {warnings:?}");
    assert_eq!(big[0]["path"], "agents[0].allowed_tools");
    assert!(
        big[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("1000 allowed names of server `big`")
    );
    assert!(
        big[1]["message"]
            .as_str()
            .unwrap()
            .starts_with("1 allowed name of server `big`")
    );
    let typo = about("`refnud` names no registered tool");
    assert_eq!(
        typo.len(),
        1,
        "the typo keeps its own warning: {warnings:?}"
    );
    assert_eq!(typo[0]["path"], "agents[0].allowed_tools[1000]");
    // A server the configuration does not connect is not discovered: its names stay one each.
    assert_eq!(about("`other__tool` names no registered tool").len(), 1);
    assert!(warnings.len() < 10, "{} warnings", warnings.len());
}
