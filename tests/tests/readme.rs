//! The README's Rust examples are the doctested ones (issue 25): each block of the README is a
//! subsequence of the visible lines of one Rust block in a crate's guide (`layers/*/docs/*.md`,
//! included in that crate's documentation and run as a doctest), so what the README shows is
//! what compiles and runs.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// The fenced blocks of `text` whose info string starts with `rust`, as lines.
fn rust_blocks(text: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in text.lines() {
        let fence = line.trim_start().starts_with("```");
        match (&mut current, fence) {
            (None, true) if line.trim_start()["```".len()..].starts_with("rust") => {
                current = Some(Vec::new());
            }
            (Some(_), true) => blocks.extend(current.take()),
            (Some(block), false) => block.push(line.to_owned()),
            _ => {}
        }
    }
    blocks
}

/// A doctest's visible lines: rustdoc hides `# ` lines and a lone `#`.
fn visible(block: &[String]) -> Vec<&str> {
    block
        .iter()
        .map(String::as_str)
        .filter(|l| {
            let t = l.trim_start();
            !(t == "#" || t.starts_with("# "))
        })
        .collect()
}

fn is_subsequence(shown: &[&str], of: &[&str]) -> bool {
    let mut at = of.iter();
    shown.iter().all(|line| at.any(|l| l == line))
}

fn guides() -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for dir in ["layers", "cli"] {
        let Ok(entries) = fs::read_dir(root().join(dir)) else {
            continue;
        };
        let mut crates: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        if dir == "cli" {
            crates = vec![root().join("cli")];
        }
        for krate in crates {
            let Ok(docs) = fs::read_dir(krate.join("docs")) else {
                continue;
            };
            for doc in docs.flatten() {
                let path = doc.path();
                if path.extension().is_some_and(|e| e == "md") {
                    let text = fs::read_to_string(&path).expect("a readable guide");
                    out.push((path, text));
                }
            }
        }
    }
    out
}

#[test]
fn issue25_every_rust_example_of_the_readme_is_a_doctested_guide_example() {
    let readme = fs::read_to_string(root().join("README.md")).expect("README.md");
    let shown = rust_blocks(&readme);
    assert!(!shown.is_empty(), "the README shows Rust");
    let guides = guides();
    assert!(guides.len() >= 8, "the guides are found: {}", guides.len());
    for block in &shown {
        let lines: Vec<&str> = block
            .iter()
            .map(String::as_str)
            .filter(|l| !l.trim().is_empty())
            .collect();
        let found = guides.iter().any(|(_, text)| {
            rust_blocks(text)
                .iter()
                .any(|b| is_subsequence(&lines, &visible(b)))
        });
        assert!(
            found,
            "this README example is in no guide's doctest, so nothing compiles it:\n{}",
            block.join("\n")
        );
    }
}

#[test]
fn issue25_the_readme_is_a_start_not_the_manual() {
    let readme = fs::read_to_string(root().join("README.md")).expect("README.md");
    assert!(
        readme.lines().count() <= 200,
        "README.md is {} lines",
        readme.lines().count()
    );
    for (path, _) in guides() {
        let rel = path.strip_prefix(root()).expect("inside the workspace");
        let rel = rel.to_string_lossy();
        assert!(
            readme.contains(rel.as_ref()),
            "the README's map names {rel}"
        );
    }
}

#[test]
fn issue25_every_guide_is_included_in_its_crates_documentation() {
    for (path, _) in guides() {
        let krate = path
            .parent()
            .and_then(Path::parent)
            .expect("a crate folder");
        let name = path
            .file_name()
            .expect("a file")
            .to_string_lossy()
            .into_owned();
        if krate.ends_with("cli") {
            continue; // a binary: its chapter is read on the page, not in rustdoc
        }
        let needle = format!("include_str!(\"../docs/{name}\")");
        let lib = fs::read_to_string(krate.join("src/lib.rs")).expect("the crate's lib.rs");
        assert!(
            lib.contains(&needle),
            "{} includes docs/{name}",
            krate.display()
        );
    }
}
