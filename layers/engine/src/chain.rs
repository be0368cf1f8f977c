//! The audit hash chain (R33): linking records and verifying a file (`toolgate audit
//! verify FILE`). Pure: no I/O beyond the reader you pass.
//!
//! Schema-agnostic on purpose: the chain works on a record's JSON object and reads only its
//! own fields (`seq`, `prev`, `hash`), never a record through
//! [`AuditRecord`](toolgate_core::audit_record::AuditRecord). It links and verifies any line
//! — a call's record, an [event](toolgate_core::audit_record::AuditEvent), a record a newer
//! version wrote with fields this one does not know — and it hashes what the line holds:
//! read into the type and written again, a record would lose the fields the type does not
//! know and gain the ones an older writer did not write, and hash otherwise.

use std::fmt;
use std::io::BufRead;

use serde_json::{Map, Value};

use crate::{canon, json};

/// The `prev` of the first record in a chain.
pub const GENESIS: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// Adds `seq`, `prev` and `hash` (SHA-256 of the RFC 8785 canonical form of the record
/// without `hash`) to a record; returns the JSON line and the hash.
///
/// The line is the RFC 8785 canonical form of the whole record (with `hash`): one spelling
/// per record, so [`verify_chain`] can require a line's bytes to be exactly that form and
/// no edit that a JSON parser would smooth over (whitespace, escapes, key order, a
/// duplicated key) goes unseen.
pub fn link(
    mut record: Map<String, Value>,
    seq: u64,
    prev: &str,
) -> Result<(String, String), String> {
    record.insert("seq".into(), Value::from(seq));
    record.insert("prev".into(), Value::from(prev));
    record.remove("hash");
    let hash = body_hash(&record)?;
    record.insert("hash".into(), Value::from(hash.as_str()));
    let line = canon::canonical_json(&Value::Object(record))
        .ok_or_else(|| String::from("the record cannot be canonicalised"))?;
    Ok((line, hash))
}

/// SHA-256 of the canonical form of a record without its `hash`.
fn body_hash(record: &Map<String, Value>) -> Result<String, String> {
    // Serialised by reference: the canonicaliser takes any `Serialize`, so a map view
    // without `hash` avoids copying the record.
    struct WithoutHash<'a>(&'a Map<String, Value>);
    impl serde::Serialize for WithoutHash<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_map(self.0.iter().filter(|(k, _)| k.as_str() != "hash"))
        }
    }
    let canonical = serde_json_canonicalizer::to_string(&WithoutHash(record))
        .map_err(|_| String::from("the record cannot be canonicalised"))?;
    Ok(canon::sha256_hex(canonical.as_bytes()))
}

/// The first record that breaks the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainBreak {
    /// The 1-based line number.
    pub line: usize,
    /// The record's `seq`, when it has one.
    pub seq: Option<u64>,
    /// What is wrong.
    pub problem: String,
}

impl fmt::Display for ChainBreak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.seq {
            Some(s) => write!(f, "line {} (record {}): {}", self.line, s, self.problem),
            None => write!(f, "line {}: {}", self.line, self.problem),
        }
    }
}

impl std::error::Error for ChainBreak {}

/// Checks every record, byte for byte: the line is exactly the record's canonical form
/// (RFC 8785, as [`link`] writes it; a duplicated key, added whitespace, a changed escape,
/// reordered keys or a respelled number all break it), then its hash, its link to the
/// previous record, and its sequence number. Returns the number of records, or the first
/// that breaks the chain. A chain may start at any `seq` whose `prev` is the genesis link
/// (a new file) — anything else at the start is reported, so a truncated head shows. A
/// last line cut short is not a record and is reported; only the final newline may be
/// missing. (Whole records removed from the end cannot show in the chain itself: compare
/// the last `seq` with a count kept elsewhere.)
pub fn verify_chain(mut reader: impl BufRead) -> Result<usize, ChainBreak> {
    let mut prev = GENESIS.to_owned();
    let mut expected_seq: Option<u64> = None;
    let mut count = 0usize;
    let mut bytes = Vec::new();
    let mut n = 0usize;
    loop {
        bytes.clear();
        let read = reader
            .read_until(b'\n', &mut bytes)
            .map_err(|e| ChainBreak {
                line: n + 1,
                seq: None,
                problem: format!("cannot read the line: {e}"),
            })?;
        if read == 0 {
            break;
        }
        n += 1;
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
        }
        let bare = |problem: String| ChainBreak {
            line: n,
            seq: None,
            problem,
        };
        let line =
            std::str::from_utf8(&bytes).map_err(|e| bare(format!("the line is not UTF-8: {e}")))?;
        if line.trim().is_empty() {
            return Err(bare(String::from("an empty line inside the chain")));
        }
        let v = json::parse_strict_json(line).map_err(|e| {
            // Name the record when a lenient reader can still find its `seq`.
            let seq = serde_json::from_str::<Value>(line)
                .ok()
                .and_then(|v| v.get("seq").and_then(Value::as_u64));
            let problem = if e.is_duplicate_key() {
                format!(
                    "a key appears twice ({e}): readers disagree on which value is the record's"
                )
            } else {
                format!("not a JSON record: {e}")
            };
            ChainBreak {
                line: n,
                seq,
                problem,
            }
        })?;
        let Value::Object(record) = v else {
            return Err(bare(String::from("not a JSON object")));
        };
        let seq = record.get("seq").and_then(Value::as_u64);
        let brk = |problem: String| ChainBreak {
            line: n,
            seq,
            problem,
        };
        // INVARIANT: a line is exactly its record's canonical form, so what a verifier hashes
        // is what every reader of the line (grep, a first-wins parser) sees.
        let record = Value::Object(record);
        if canon::canonical_json(&record).as_deref() != Some(line) {
            return Err(brk(String::from(
                "the line is not its record's canonical form (RFC 8785): it was edited \
                 (whitespace, escapes, key order or number spelling)",
            )));
        }
        let Value::Object(record) = record else {
            return Err(brk(String::from("not a JSON object")));
        };
        let Some(s) = seq else {
            return Err(brk(String::from("no `seq`")));
        };
        if let Some(want) = expected_seq
            && s != want
        {
            return Err(brk(format!(
                "`seq` is {s}, expected {want} (a record is missing or out of order)"
            )));
        }
        let stated_prev = record.get("prev").and_then(Value::as_str).unwrap_or("");
        if stated_prev != prev {
            return Err(brk(String::from(
                "`prev` does not match the previous record's hash (a record was removed, inserted or changed before it)",
            )));
        }
        let Some(stated_hash) = record.get("hash").and_then(Value::as_str) else {
            return Err(brk(String::from("no `hash`")));
        };
        let computed = body_hash(&record).map_err(brk)?;
        if computed != stated_hash {
            return Err(brk(String::from(
                "the record's contents do not match its `hash` (it was changed)",
            )));
        }
        prev = stated_hash.to_owned();
        expected_seq = Some(s.wrapping_add(1));
        count += 1;
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(n: u64) -> Vec<String> {
        let mut prev = GENESIS.to_owned();
        let mut out = Vec::new();
        for i in 1..=n {
            let mut m = Map::new();
            m.insert("tool".into(), Value::from(format!("t{i}")));
            m.insert("agent".into(), Value::from(format!("Alpha{i}")));
            m.insert("outcome".into(), Value::from("refused"));
            m.insert("duration_ms".into(), serde_json::json!(1.5));
            let (line, hash) = link(m, i, &prev).unwrap();
            prev = hash;
            out.push(line);
        }
        out
    }

    fn verify(lines: &[String]) -> Result<usize, ChainBreak> {
        verify_chain((lines.join("\n") + "\n").as_bytes())
    }

    #[test]
    fn r33_the_line_written_is_the_canonical_form_and_verifies() {
        let lines = file(3);
        for line in &lines {
            let v: Value = serde_json::from_str(line).unwrap();
            assert_eq!(canon::canonical_json(&v).as_deref(), Some(line.as_str()));
        }
        assert_eq!(verify(&lines).unwrap(), 3);
        assert_eq!(
            verify_chain(lines.join("\n").as_bytes()).unwrap(),
            3,
            "only the final newline may be missing"
        );
    }

    #[test]
    fn r33_awkward_records_verify_as_written() {
        // Numbers JCS writes differently from serde_json, keys whose UTF-16 order differs
        // from their byte order, escapes and control characters.
        let records = [
            serde_json::json!({"n": [u64::MAX, i64::MIN, 0.1, 1e300, -0.0, 1.0, 1e21, 5e-7]}),
            serde_json::json!({"\u{e000}": 1, "\u{10000}": 2, "a": {"\u{7f}": "\u{0}\n\"\\/\u{2028}"}}),
            serde_json::json!({"input": {"deep": [[[{"x": null}]]], "text": "é 日本 🎉"}}),
        ];
        let mut prev = GENESIS.to_owned();
        let mut lines = Vec::new();
        for (i, r) in records.into_iter().enumerate() {
            let serde_json::Value::Object(m) = r else {
                unreachable!()
            };
            let (line, hash) = link(m, i as u64 + 1, &prev).unwrap();
            assert!(!line.contains('\n'), "{line}");
            prev = hash;
            lines.push(line);
        }
        assert_eq!(verify(&lines).unwrap(), 3, "{lines:#?}");
    }

    #[test]
    fn r33_verify_reports_each_tampering_kind_at_its_line_and_seq() {
        type Edit = fn(&mut Vec<String>);
        let cases: [(&str, Edit, usize, Option<u64>, &str); 9] = [
            (
                "a duplicated key (first-wins readers see `completed`)",
                |l| l[2] = l[2].replacen('{', r#"{"outcome":"completed","#, 1),
                3,
                Some(3),
                "twice",
            ),
            (
                "whitespace added",
                |l| l[1] = l[1].replacen(",\"", ", \"", 1),
                2,
                Some(2),
                "canonical form",
            ),
            (
                "a trailing carriage return",
                |l| l[0].push('\r'),
                1,
                Some(1),
                "canonical form",
            ),
            (
                "an escape changed",
                |l| l[3] = l[3].replace("Alpha", r"\u0041lpha"),
                4,
                Some(4),
                "canonical form",
            ),
            (
                "keys reordered",
                |l| {
                    let inner = &l[1][1..l[1].len() - 1];
                    let mut members: Vec<&str> = inner.split(',').collect();
                    members.reverse();
                    l[1] = format!("{{{}}}", members.join(","));
                },
                2,
                Some(2),
                "canonical form",
            ),
            (
                "a number respelled",
                |l| l[2] = l[2].replace("1.5", "1.50"),
                3,
                Some(3),
                "canonical form",
            ),
            (
                "a deleted line",
                |l| {
                    l.remove(2);
                },
                3,
                Some(4),
                "missing or out of order",
            ),
            (
                "a swapped pair of lines",
                |l| l.swap(1, 2),
                2,
                Some(3),
                "missing or out of order",
            ),
            (
                "a truncated last line",
                |l| {
                    let last = l.len() - 1;
                    let cut = l[last].len() - 7;
                    l[last].truncate(cut);
                },
                5,
                None,
                "not a JSON record",
            ),
        ];
        for (what, edit, line, seq, problem) in cases {
            let mut lines = file(5);
            edit(&mut lines);
            let e = verify(&lines).expect_err(what);
            assert_eq!((e.line, e.seq), (line, seq), "{what}: {e}");
            assert!(e.problem.contains(problem), "{what}: {e}");
        }
    }

    #[test]
    fn r33_a_duplicated_key_is_refused_even_when_its_value_repeats() {
        // The hash of the parsed record still matches: only the bytes show the edit.
        let mut lines = file(2);
        lines[0] = lines[0].replacen('{', r#"{"outcome":"refused","#, 1);
        let e = verify(&lines).unwrap_err();
        assert_eq!((e.line, e.seq), (1, Some(1)), "{e}");
    }

    #[test]
    fn r33_an_intact_chain_verifies() {
        assert_eq!(verify_chain(file(5).join("\n").as_bytes()).unwrap(), 5);
        assert_eq!(verify_chain(&b""[..]).unwrap(), 0);
    }

    #[test]
    fn r33_tampering_shows_at_the_right_record() {
        let mut lines = file(5);
        lines[2] = lines[2].replace("t3", "tX");
        let e = verify_chain(lines.join("\n").as_bytes()).unwrap_err();
        assert_eq!((e.line, e.seq), (3, Some(3)));

        let mut lines = file(5);
        lines.remove(1);
        let e = verify_chain(lines.join("\n").as_bytes()).unwrap_err();
        assert_eq!(e.line, 2);

        let mut lines = file(5);
        lines.remove(0);
        let e = verify_chain(lines.join("\n").as_bytes()).unwrap_err();
        assert_eq!(e.line, 1, "a truncated head shows");

        let mut lines = file(3);
        lines.swap(0, 1);
        assert_eq!(
            verify_chain(lines.join("\n").as_bytes()).unwrap_err().line,
            1
        );
    }
}
