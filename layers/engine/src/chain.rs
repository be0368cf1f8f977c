//! The audit hash chain (R33): linking records and verifying a file (`toolgate audit
//! verify FILE`). Pure: no I/O beyond the reader you pass.

use std::fmt;
use std::io::BufRead;

use serde_json::Value;

use serde_json::Map;

use crate::canon;

/// The `prev` of the first record in a chain.
pub const GENESIS: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// Adds `seq`, `prev` and `hash` (SHA-256 of the RFC 8785 canonical form of the record
/// without `hash`) to a record; returns the JSON line and the hash.
pub fn link(
    mut record: Map<String, Value>,
    seq: u64,
    prev: &str,
) -> Result<(String, String), String> {
    record.insert("seq".into(), Value::from(seq));
    record.insert("prev".into(), Value::from(prev));
    record.remove("hash");
    let body = Value::Object(record);
    let canonical = canon::canonical_json(&body)
        .ok_or_else(|| String::from("the record cannot be canonicalised"))?;
    let hash = canon::sha256_hex(canonical.as_bytes());
    let Value::Object(mut record) = body else {
        return Err(String::from("the record is not an object"));
    };
    record.insert("hash".into(), Value::from(hash.as_str()));
    let line = serde_json::to_string(&Value::Object(record))
        .map_err(|e| format!("the record cannot be serialised: {e}"))?;
    Ok((line, hash))
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

/// Checks every record: its hash, its link to the previous record, and its sequence
/// number. Returns the number of records, or the first that breaks the chain. A chain may
/// start at any `seq` whose `prev` is the genesis link (a new file) — anything else at the
/// start is reported, so a truncated head shows.
pub fn verify_chain(reader: impl BufRead) -> Result<usize, ChainBreak> {
    let mut prev = GENESIS.to_owned();
    let mut expected_seq: Option<u64> = None;
    let mut count = 0usize;
    for (i, line) in reader.lines().enumerate() {
        let n = i + 1;
        let line = line.map_err(|e| ChainBreak {
            line: n,
            seq: None,
            problem: format!("cannot read the line: {e}"),
        })?;
        if line.trim().is_empty() {
            return Err(ChainBreak {
                line: n,
                seq: None,
                problem: String::from("an empty line inside the chain"),
            });
        }
        let v: Value = serde_json::from_str(&line).map_err(|e| ChainBreak {
            line: n,
            seq: None,
            problem: format!("not a JSON record: {e}"),
        })?;
        let Value::Object(record) = v else {
            return Err(ChainBreak {
                line: n,
                seq: None,
                problem: String::from("not a JSON object"),
            });
        };
        let seq = record.get("seq").and_then(Value::as_u64);
        let brk = |problem: String| ChainBreak {
            line: n,
            seq,
            problem,
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
        let Some(stated_hash) = record
            .get("hash")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return Err(brk(String::from("no `hash`")));
        };
        let stated_prev = stated_prev.to_owned();
        let (_, computed) = link(record, s, &stated_prev).map_err(brk)?;
        if computed != stated_hash {
            return Err(brk(String::from(
                "the record's contents do not match its `hash` (it was changed)",
            )));
        }
        prev = stated_hash;
        expected_seq = Some(s + 1);
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
            let (line, hash) = link(m, i, &prev).unwrap();
            prev = hash;
            out.push(line);
        }
        out
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
