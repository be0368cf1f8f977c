//! Issue 23 item 3 through the real binary: `toolgate mcp lock` writes `toolgate.lock`,
//! `--check` exits 1 once the upstream changes a description, and `toolgate mcp serve`
//! with `mcp.locked: true` withholds the changed tool (our drift server over streamable
//! HTTP, in this process, whose `lookup` changes on request).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::path::Path;
use std::process::Command;

use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};
use toolgate_mcp_testkit::drift_server::Mode;

mod common;

use common::upstream;

fn write_config(dir: &Path, upstream: &str, mcp_extra: Value) -> std::path::PathBuf {
    let mut mcp = json!({"servers": {"drift": {"url": upstream}}});
    if let (Some(m), Value::Object(extra)) = (mcp.as_object_mut(), mcp_extra) {
        m.extend(extra);
    }
    let config = json!({
        "agents": [{"name": "dev", "allowed_tools": ["drift__lookup", "drift__bare"]}],
        "mcp": mcp,
    });
    let path = dir.join("toolgate.json");
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    path
}

/// `toolgate mcp lock --config PATH [--check]`: (exit code, standard error).
async fn lock(config: &Path, check: bool) -> (i32, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.args(["mcp", "lock", "--config"]).arg(config);
    if check {
        cmd.arg("--check");
    }
    let out = cmd.output().await.unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn listed_by_serve(config: &Path) -> Vec<String> {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.args(["mcp", "serve", "--agent", "dev", "--config"])
        .arg(config);
    let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
    let tools = client.list_all_tools().await.unwrap();
    client.cancel().await.unwrap();
    tools.into_iter().map(|t| t.name.to_string()).collect()
}

#[tokio::test]
async fn issue23_mcp_lock_writes_the_lock_check_exits_1_on_a_changed_description_and_serve_withholds_it()
 {
    let dir = tempfile::tempdir().unwrap();
    let (drift, url) = upstream().await;
    let config = write_config(dir.path(), &url, json!({"locked": true}));

    let (code, err) = lock(&config, false).await;
    assert_eq!(code, 0, "{err}");
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("toolgate.lock")).unwrap())
            .unwrap();
    assert_eq!(written["version"], 1);
    let entry = &written["servers"]["drift"]["lookup"];
    assert!(
        entry["definition"].as_str().unwrap().starts_with("sha256:"),
        "{written}"
    );
    assert!(
        entry["description"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(entry["annotations"]["readOnlyHint"], true);

    let (code, err) = lock(&config, true).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        listed_by_serve(&config)
            .await
            .contains(&String::from("drift__lookup"))
    );

    // The rug pull.
    drift.set_mode(Mode::Description, true).await;
    let (code, err) = lock(&config, true).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("`lookup` of `drift`"), "{err}");
    assert!(err.contains("description"), "{err}");
    // The scanner's warning on the new description.
    assert!(err.contains("model_instruction"), "{err}");

    // Served locked: the changed tool is withheld, the others stay.
    let listed = listed_by_serve(&config).await;
    assert!(
        !listed.contains(&String::from("drift__lookup")),
        "{listed:?}"
    );
    assert!(listed.contains(&String::from("drift__bare")), "{listed:?}");
    assert_eq!(drift.calls("lookup"), 0);
}

#[tokio::test]
async fn issue34_mcp_lock_prints_no_scanner_findings_with_scan_off() {
    let dir = tempfile::tempdir().unwrap();
    let (drift, url) = upstream().await;
    // The drift server's poisoned description, listed from the start.
    drift.set_mode(Mode::Description, true).await;
    for (scan, warned) in [("warn", true), ("off", false)] {
        let config = write_config(dir.path(), &url, json!({"scan": scan}));
        let (code, err) = lock(&config, false).await;
        assert_eq!(code, 0, "{scan}: {err}");
        assert_eq!(
            err.contains("model_instruction"),
            warned,
            "scan {scan}: {err}"
        );
        assert_eq!(err.contains("description scanner"), warned, "{scan}: {err}");
        // The lock is written either way.
        assert!(err.contains("toolgate: locked "), "{scan}: {err}");
    }
}

#[test]
fn issue23_the_lock_and_scan_settings_are_checked_by_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        dir.path(),
        "http://127.0.0.1:9/mcp",
        json!({"locked": "yes", "scan": "loud", "deferred_tools": 1, "lock_file": ""}),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["check"])
        .arg(&path)
        .arg("--json")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let paths: Vec<&str> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    for want in [
        "mcp.locked",
        "mcp.scan",
        "mcp.deferred_tools",
        "mcp.lock_file",
    ] {
        assert!(paths.contains(&want), "{want} missing from {paths:?}");
    }
    // A missing lock file stops `toolgate mcp serve` naming `mcp.locked`.
    let path = write_config(
        dir.path(),
        "http://127.0.0.1:9/mcp",
        json!({"locked": true}),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["mcp", "serve", "--agent", "dev", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("mcp.locked") && err.contains("toolgate mcp lock"),
        "{err}"
    );
}
