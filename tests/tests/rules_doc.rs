//! Rule numbers resolve inside the repository: every `R<n>` cited by a Rust, Markdown or TOML
//! file of the checkout (build output and scratch folders aside) has its heading
//! (`### R<n> — …`) in `docs/rules.md`, and that page has one heading per rule, in order.
//! A range such as `R44–R46` cites every rule in it.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// Folders never read, at any depth: build output (`target/`, `fuzz/target/`), scratch
/// space (`.tmp/`, installed npm packages) and git's own.
const SKIPPED: &[&str] = &["target", ".tmp", ".git", "node_modules"];

/// The files whose citations count.
const EXTENSIONS: &[&str] = &["rs", "md", "toml"];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if !SKIPPED.iter().any(|s| name == *s) {
                sources(&path, out);
            }
        } else if kind.is_file()
            && path
                .extension()
                .is_some_and(|e| EXTENSIONS.iter().any(|x| e == *x))
        {
            out.push(path);
        }
    }
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The number of a citation `R<digits>` starting at `at`, and where it ends: `R` not
/// preceded by a letter, digit or `_`, and the digits not followed by one.
fn citation_at(bytes: &[u8], at: usize) -> Option<(u32, usize)> {
    if bytes.get(at) != Some(&b'R') || (at > 0 && bytes.get(at - 1).copied().is_some_and(is_word)) {
        return None;
    }
    let start = at + 1;
    let end = start
        + bytes
            .get(start..)?
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
    if end == start || bytes.get(end).copied().is_some_and(is_word) {
        return None;
    }
    let n = std::str::from_utf8(bytes.get(start..end)?)
        .ok()?
        .parse()
        .ok()?;
    Some((n, end))
}

/// Every rule `text` cites; `R44–R46` (en dash or hyphen) cites R44, R45 and R46.
fn citations(text: &str) -> BTreeSet<u32> {
    let bytes = text.as_bytes();
    let mut out = BTreeSet::new();
    let mut at = 0;
    while at < bytes.len() {
        let Some((n, end)) = citation_at(bytes, at) else {
            at += 1;
            continue;
        };
        out.insert(n);
        at = end;
        let rest = bytes.get(end..).unwrap_or_default();
        let dash = ["–", "-"]
            .iter()
            .find(|d| rest.starts_with(d.as_bytes()))
            .map(|d| d.len());
        if let Some(len) = dash
            && let Some((last, range_end)) = citation_at(bytes, end + len)
            && last > n
        {
            out.extend(n..=last);
            at = range_end;
        }
    }
    out
}

/// The rule numbers `docs/rules.md` has a heading for, in the page's order.
fn headings(doc: &str) -> Vec<u32> {
    doc.lines()
        .filter_map(|line| line.strip_prefix("### R"))
        .filter_map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

/// The citations that `doc` has no heading for, each with the files citing it.
fn unresolved(doc: &str, files: &[(PathBuf, String)]) -> Vec<(u32, Vec<String>)> {
    let known: BTreeSet<u32> = headings(doc).into_iter().collect();
    let mut missing: Vec<(u32, Vec<String>)> = Vec::new();
    for (path, text) in files {
        for n in citations(text).difference(&known) {
            let shown = path
                .strip_prefix(root())
                .unwrap_or(path)
                .display()
                .to_string();
            match missing.iter_mut().find(|(m, _)| m == n) {
                Some((_, paths)) => paths.push(shown),
                None => missing.push((*n, vec![shown])),
            }
        }
    }
    missing.sort();
    missing
}

fn rules_doc() -> String {
    fs::read_to_string(root().join("docs/rules.md")).expect("docs/rules.md")
}

fn checkout() -> Vec<(PathBuf, String)> {
    let mut paths = Vec::new();
    sources(&root(), &mut paths);
    paths.sort();
    paths
        .into_iter()
        .filter_map(|p| fs::read_to_string(&p).ok().map(|t| (p, t)))
        .collect()
}

#[test]
fn every_rule_cited_in_the_repository_has_its_paragraph_in_docs_rules_md() {
    let files = checkout();
    let citing = files
        .iter()
        .filter(|(_, t)| !citations(t).is_empty())
        .count();
    // The walk found the code: a broken walk must not pass by reading nothing.
    assert!(citing >= 100, "only {citing} files cite a rule");
    let missing = unresolved(&rules_doc(), &files);
    assert!(
        missing.is_empty(),
        "rules cited but without a `### R<n>` heading in docs/rules.md:\n{}",
        missing
            .iter()
            .map(|(n, paths)| format!("  R{n}: {}", paths.join(", ")))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn docs_rules_md_has_one_heading_per_rule_in_order() {
    let found = headings(&rules_doc());
    let expected: Vec<u32> = (1..=u32::try_from(found.len()).expect("few rules")).collect();
    assert_eq!(found, expected, "R1, R2, … each once, in order");
    assert!(found.len() >= 52, "R1–R52 at least: {}", found.len());
}

#[test]
fn a_rule_missing_from_the_page_is_reported_with_its_citers() {
    let doc = rules_doc();
    let without: String = doc
        .lines()
        .filter(|l| !l.starts_with("### R26 "))
        .map(|l| format!("{l}\n"))
        .collect();
    let files = vec![(
        root().join("layers/x.rs"),
        String::from("// R26: routed (R44–R46, not AR5 nor R7x nor r3)"),
    )];
    assert!(unresolved(&doc, &files).is_empty());
    assert_eq!(
        unresolved(&without, &files),
        vec![(26, vec![String::from("layers/x.rs")])]
    );
    assert_eq!(
        citations("R26, R44–R46, R1-R2; AR5 R7x r3 R_1 R8"),
        BTreeSet::from([1, 2, 8, 26, 44, 45, 46])
    );
    // Built, so that this file cites no rule beyond the last.
    let beyond = vec![(root().join("README.md"), format!("R1–R{}", 60))];
    assert_eq!(
        unresolved(&doc, &beyond).first().map(|(n, _)| *n),
        Some(53),
        "a range past the last rule is caught"
    );
}

/// The shipped crates' source folders (`src/` of `layers/*`, `cli`, `adapters/*`).
fn shipped_sources() -> Vec<PathBuf> {
    let root = root();
    let mut dirs = vec![root.join("cli/src")];
    for group in ["layers", "adapters"] {
        if let Ok(entries) = fs::read_dir(root.join(group)) {
            dirs.extend(entries.flatten().map(|e| e.path().join("src")));
        }
    }
    let mut out = Vec::new();
    for d in dirs {
        sources(&d, &mut out);
    }
    out.retain(|p| p.extension().is_some_and(|e| e == "rs"));
    out
}

/// The house (STYLE.md, "Round four"): shipped code cites rules and chapters, never a
/// tracker's issue numbers — in comments, doc comments and messages. Names of the suite's
/// cases (`fn issue24_…`) are names, not citations.
#[test]
fn shipped_code_cites_no_issue_numbers() {
    let mut found = Vec::new();
    for path in shipped_sources() {
        let text = fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_ascii_lowercase();
            let bytes = lower.as_bytes();
            let cites = lower.match_indices("issue").any(|(at, _)| {
                let rest = &bytes[at + "issue".len()..];
                let rest = rest.strip_prefix(b"s").unwrap_or(rest);
                rest.strip_prefix(b" ")
                    .and_then(|r| r.first())
                    .is_some_and(u8::is_ascii_digit)
            });
            if cites {
                found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "cite the rule (docs/rules.md) or the chapter instead:\n{}",
        found.join("\n")
    );
}
