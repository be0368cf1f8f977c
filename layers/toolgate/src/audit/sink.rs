//! Where audit records go: a JSON Lines file whose records are chained by hash, and
//! `tracing` events.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Map, Value};
use toolgate_engine::chain::{GENESIS, link};
use toolgate_engine::recording::FlushPolicy;

/// A sink that could not take a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditError(pub String);

impl fmt::Display for AuditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AuditError {}

/// Where audit records go. `write` is called once per call, after its outcome; `ready`
/// before the call is sent, so a sink known to be failing can refuse calls up front. A sink
/// need implement only `write`: a write that fails is remembered by the
/// [`AuditLayer`](crate::audit::AuditLayer) itself, which then refuses every later call
/// until it is reset (R33), whatever `ready` reports.
pub trait AuditSink: fmt::Debug + Send + Sync + 'static {
    /// Whether the sink can take records now.
    fn ready(&self) -> Result<(), AuditError> {
        Ok(())
    }

    /// Writes one record: a JSON object without `seq`, `prev` or `hash` (a chaining sink
    /// adds them) — a call's [`AuditRecord`](crate::core::audit_record::AuditRecord) or an
    /// [`AuditEvent`](crate::core::audit_record::AuditEvent), as their `to_map` and
    /// `into_map` give them.
    /// A sink takes the object rather than the type so that it stays schema-agnostic:
    /// chaining, storing or shipping a record never depends on which kind it is.
    fn write(&self, record: Map<String, Value>) -> Result<(), AuditError>;
}

#[derive(Debug)]
struct FileState {
    out: Option<BufWriter<File>>,
    seq: u64,
    prev: String,
    failed: Option<String>,
}

/// An append-only JSON Lines file. Every record carries `seq`, the `prev` record's hash
/// and its own `hash` (SHA-256 of its RFC 8785 canonical form without `hash`), and each
/// line is exactly the record's canonical form, so any edit — even one a JSON parser
/// smooths over, such as a duplicated key or added whitespace — and any insertion or
/// deletion shows in `toolgate audit verify`.
///
/// Opening an existing file continues its chain from its last record; a file whose last
/// record cannot be read is refused (a chain is never silently restarted).
#[derive(Debug)]
pub struct JsonlFileSink {
    path: PathBuf,
    flush: FlushPolicy,
    state: Mutex<FileState>,
}

impl JsonlFileSink {
    /// Opens (or creates) `path` for appending.
    pub fn open(path: impl AsRef<Path>, flush: FlushPolicy) -> Result<Self, AuditError> {
        let path = path.as_ref().to_path_buf();
        let (seq, prev) = last_link(&path)?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| {
                AuditError(format!(
                    "cannot open `{}` for appending: {e}",
                    path.display()
                ))
            })?;
        Ok(Self {
            path,
            flush,
            state: Mutex::new(FileState {
                out: Some(BufWriter::new(file)),
                seq,
                prev,
                failed: None,
            }),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes the file: every later write fails (used to test fail-closed behaviour).
    pub fn close(&self) {
        if let Ok(mut st) = self.state.lock() {
            if let Some(mut out) = st.out.take() {
                let _ = out.flush();
            }
            st.failed = Some(String::from("the audit file was closed"));
        }
    }
}

/// The `seq` and `hash` of a file's last record, or the genesis link for a new file.
fn last_link(path: &Path) -> Result<(u64, String), AuditError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, GENESIS.to_owned())),
        Err(e) => return Err(AuditError(format!("cannot read `{}`: {e}", path.display()))),
    };
    let mut last = None;
    for line in BufReader::new(file).lines() {
        let line =
            line.map_err(|e| AuditError(format!("cannot read `{}`: {e}", path.display())))?;
        if !line.trim().is_empty() {
            last = Some(line);
        }
    }
    let Some(line) = last else {
        return Ok((0, GENESIS.to_owned()));
    };
    let v: Value = serde_json::from_str(&line).map_err(|e| {
        AuditError(format!(
            "the last record of `{}` is not JSON ({e}); refusing to restart its chain",
            path.display()
        ))
    })?;
    let seq = v.get("seq").and_then(Value::as_u64);
    let hash = v.get("hash").and_then(Value::as_str);
    match (seq, hash) {
        (Some(s), Some(h)) => Ok((s, h.to_owned())),
        _ => Err(AuditError(format!(
            "the last record of `{}` has no `seq` or `hash`; refusing to restart its chain",
            path.display()
        ))),
    }
}

fn chain(record: Map<String, Value>, seq: u64, prev: &str) -> Result<(String, String), AuditError> {
    link(record, seq, prev).map_err(AuditError)
}

impl AuditSink for JsonlFileSink {
    fn ready(&self) -> Result<(), AuditError> {
        let st = self
            .state
            .lock()
            .map_err(|_| AuditError(String::from("the audit sink's state is unusable")))?;
        match &st.failed {
            Some(why) => Err(AuditError(why.clone())),
            None => Ok(()),
        }
    }

    fn write(&self, record: Map<String, Value>) -> Result<(), AuditError> {
        let mut st = self
            .state
            .lock()
            .map_err(|_| AuditError(String::from("the audit sink's state is unusable")))?;
        if let Some(why) = &st.failed {
            return Err(AuditError(why.clone()));
        }
        let seq = st.seq + 1;
        let (line, hash) = chain(record, seq, &st.prev)?;
        let flush = self.flush;
        let result = match st.out.as_mut() {
            None => Err(AuditError(String::from("the audit file is closed"))),
            Some(out) => (|| {
                out.write_all(line.as_bytes())?;
                out.write_all(b"\n")?;
                if flush == FlushPolicy::EveryRecord {
                    out.flush()?;
                    out.get_ref().sync_data()?;
                }
                Ok::<(), std::io::Error>(())
            })()
            .map_err(|e| AuditError(format!("cannot write `{}`: {e}", self.path.display()))),
        };
        match result {
            Ok(()) => {
                st.seq = seq;
                st.prev = hash;
                Ok(())
            }
            Err(e) => {
                // A failed write may have left a partial line: stop writing to this file.
                st.failed = Some(e.0.clone());
                Err(e)
            }
        }
    }
}

impl Drop for JsonlFileSink {
    fn drop(&mut self) {
        if let Ok(mut st) = self.state.lock()
            && let Some(out) = st.out.as_mut()
        {
            let _ = out.flush();
        }
    }
}

/// Emits each record as a `tracing` event (target `toolgate::audit`, level INFO).
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingSink;

impl AuditSink for TracingSink {
    fn write(&self, record: Map<String, Value>) -> Result<(), AuditError> {
        let text = Value::Object(record).to_string();
        tracing::info!(target: "toolgate::audit", record = %text, "tool call");
        Ok(())
    }
}

/// Keeps records in memory, chained like the file sink (tests, embedding).
#[derive(Debug, Default)]
pub struct MemorySink {
    lines: Mutex<Vec<String>>,
}

impl MemorySink {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// The records written so far, as JSON Lines.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

impl AuditSink for MemorySink {
    fn write(&self, record: Map<String, Value>) -> Result<(), AuditError> {
        let mut lines = self
            .lines
            .lock()
            .map_err(|_| AuditError(String::from("the memory sink's state is unusable")))?;
        let prev = match lines.last() {
            None => GENESIS.to_owned(),
            Some(l) => serde_json::from_str::<Value>(l)
                .ok()
                .and_then(|v| v.get("hash").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_else(|| GENESIS.to_owned()),
        };
        let (line, _) = chain(record, lines.len() as u64 + 1, &prev)?;
        lines.push(line);
        Ok(())
    }
}
