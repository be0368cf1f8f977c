//! The demo's files (issue 20): `cargo run --example demo -- --hold` creates its directory
//! itself, and puts it in the workspace's `target/demo/` from any working directory.

use std::path::PathBuf;
use std::process::Command;

/// The demo example's binary, built by `cargo test` next to this test's.
fn demo() -> PathBuf {
    let me = std::env::current_exe().unwrap();
    let profile = me.parent().and_then(|deps| deps.parent()).unwrap();
    profile
        .join("examples")
        .join(format!("demo{}", std::env::consts::EXE_SUFFIX))
}

#[test]
fn issue20_demo_hold_creates_its_directory_from_any_working_directory() {
    let cwd = tempfile::tempdir().unwrap();
    let dir = cwd.path().join("not").join("there").join("yet");
    let out = Command::new(demo())
        .arg("--hold")
        .current_dir(cwd.path())
        .env("TOOLGATE_DEMO_DIR", &dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("HELD ia_"));
    assert!(dir.join("inbox.db").is_file(), "the inbox was not created");

    // Without the override: the workspace's `target/demo/`, not the working directory's.
    let out = Command::new(demo())
        .arg("--hold")
        .current_dir(cwd.path())
        .env_remove("TOOLGATE_DEMO_DIR")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !cwd.path().join("target").exists(),
        "written under the working directory"
    );
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    assert!(workspace.join("target/demo/inbox.db").is_file());
}
