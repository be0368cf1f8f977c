//! The README's front door (issue 36): its first code is the complete dependency block, then
//! the minimal `main` — the same as `examples/minimal.rs`, which CI runs — and
//! `.ci/readme-crate.sh` builds and runs exactly these blocks as a crate of their own outside
//! the workspace.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// Every fenced block of `text`: its info string and its lines.
fn blocks(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(info)) => current = Some((info.to_owned(), String::new())),
            (Some(_), Some(_)) => out.extend(current.take()),
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

#[test]
fn issue36_the_readme_opens_with_the_dependency_block_and_the_minimal_main() {
    let readme = fs::read_to_string(root().join("README.md")).expect("README.md");
    let blocks = blocks(&readme);
    let (deps_info, deps) = &blocks[0];
    let (main_info, main) = &blocks[1];
    assert_eq!(
        deps_info, "toml",
        "the README's first code is the dependency block"
    );
    assert_eq!(main_info, "rust", "then the minimal main");
    assert!(deps.starts_with("[dependencies]\n"), "{deps}");

    // Complete: every crate the example names is a dependency, toolgate by path.
    let names: Vec<&str> = deps
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(" = ").map(|(name, _)| name))
        .collect();
    assert_eq!(
        names,
        ["toolgate", "tokio", "tower", "serde_json"],
        "{deps}"
    );
    assert!(deps.contains(r#"toolgate = { path = "../toolgate/layers/toolgate" }"#));
    for used in ["serde_json::", "toolgate::", "tower::", "tokio::main"] {
        assert!(main.contains(used), "{used} is used");
    }

    let example = fs::read_to_string(root().join("examples/minimal.rs")).expect("the example");
    assert_eq!(
        *main, example,
        "the README's minimal main is examples/minimal.rs, line for line"
    );
    let body = main
        .lines()
        .skip_while(|l| !l.starts_with("async fn main"))
        .count();
    assert!(body <= 16, "the minimal main stays about 15 lines: {body}");
}
