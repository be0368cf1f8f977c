//! Issue 22 item 5 at the command line: an upstream server's secrets are read when
//! `toolgate mcp serve` starts (one that cannot be read stops it, naming the field), and
//! `toolgate check` and `toolgate config print` show where they come from, never a value.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::process::{Command, Output};

use serde_json::{Value, json};

fn config(dir: &std::path::Path) -> std::path::PathBuf {
    let config = json!({
        "agents": [{"name": "dev", "allowed_tools": []}],
        "mcp": {"servers": {"remote": {
            "url": "http://127.0.0.1:1/mcp",
            "headers": {
                "Authorization": {"file": "secrets/token", "prefix": "Bearer "},
                "X-Team": {"env": "TOOLGATE_TEST_TEAM"}
            }
        }}}
    });
    let path = dir.join("toolgate.json");
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

fn toolgate(args: &[&str], team: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.args(args);
    match team {
        Some(t) => cmd.env("TOOLGATE_TEST_TEAM", t),
        None => cmd.env_remove("TOOLGATE_TEST_TEAM"),
    };
    cmd.output().expect("the binary runs")
}

#[test]
fn issue22_5_config_print_and_check_show_the_source_of_a_secret_never_its_value() {
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path());
    std::fs::create_dir(dir.path().join("secrets")).unwrap();
    std::fs::write(dir.path().join("secrets/token"), "cli-secret-42\n").unwrap();
    let p = path.to_str().unwrap();

    let o = toolgate(&["config", "print", p], Some("team-secret-7"));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let printed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        printed["mcp"]["servers"]["remote"]["headers"]["Authorization"],
        json!({"file": "secrets/token", "prefix": "Bearer "})
    );
    assert!(
        !out.contains("cli-secret-42") && !out.contains("team-secret-7"),
        "{out}"
    );

    let o = toolgate(&["check", p], Some("team-secret-7"));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(0), "{all}");
    assert!(
        !all.contains("cli-secret-42") && !all.contains("team-secret-7"),
        "{all}"
    );
}

#[test]
fn issue22_5_mcp_serve_stops_at_start_naming_a_secret_that_cannot_be_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path());
    let p = path.to_str().unwrap();
    let o = toolgate(&["mcp", "serve", "--config", p, "--agent", "dev"], None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("mcp.servers.remote.headers.Authorization: cannot read the file `")
            && err.contains("secrets/token`"),
        "{err}"
    );
    assert!(
        err.contains("mcp.servers.remote.headers.X-Team: the environment variable `TOOLGATE_TEST_TEAM` is not set"),
        "{err}"
    );
}
