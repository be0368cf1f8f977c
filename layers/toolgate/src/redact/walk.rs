//! Walking structured content without recursion: an explicit stack of open containers,
//! secret keys redacted on the way, strings handed to the text rules, and JSON-encoded
//! strings opened (module docs).

use serde_json::{Map, Value};
use toolgate_core::json::raw_depth;

use super::{REDACTED, Redactor, redacted};

/// How many JSON-encoded strings inside JSON-encoded strings are opened; a string nested
/// deeper than this that still parses is redacted whole.
pub(super) const MAX_EMBEDDED: usize = 8;

/// JSON text in a string that nests deeper than this is redacted whole without parsing
/// (serde_json refuses past 128 anyway; this keeps the answer "cannot inspect", not "text").
const MAX_EMBEDDED_DEPTH: usize = 100;

/// One open container of the walk.
enum Frame<'a> {
    Array {
        rest: std::slice::Iter<'a, Value>,
        out: Vec<Value>,
    },
    Object {
        rest: serde_json::map::Iter<'a>,
        out: Map<String, Value>,
        /// The (redacted) key of the child being walked.
        key: String,
    },
}

impl Frame<'_> {
    fn into_value(self) -> Value {
        match self {
            Frame::Array { out, .. } => Value::Array(out),
            Frame::Object { out, .. } => Value::Object(out),
        }
    }
}

impl Redactor {
    /// The redacted copy of `root`, whose containers start at depth `base + 1`, without
    /// recursion: an explicit stack of open containers.
    pub(super) fn walk(&self, root: &Value, base: usize, embedded: usize) -> Value {
        let mut stack: Vec<Frame<'_>> = Vec::new();
        let mut next = root;
        loop {
            // The depth `next` has if it is a container.
            let depth = base.saturating_add(stack.len()).saturating_add(1);
            let mut finished = match next {
                Value::Array(items) if depth <= self.inner.max_depth => {
                    stack.push(Frame::Array {
                        rest: items.iter(),
                        out: Vec::with_capacity(items.len()),
                    });
                    None
                }
                Value::Object(map) if depth <= self.inner.max_depth => {
                    stack.push(Frame::Object {
                        rest: map.iter(),
                        out: Map::new(),
                        key: String::new(),
                    });
                    None
                }
                // INVARIANT (r33_never_fails_open): too deep to inspect → redacted whole.
                Value::Array(_) | Value::Object(_) => Some(redacted()),
                Value::String(s) => Some(Value::String(self.redact_str(
                    s,
                    base.saturating_add(stack.len()),
                    embedded,
                ))),
                scalar => Some(scalar.clone()),
            };
            loop {
                if let Some(value) = finished.take() {
                    match stack.last_mut() {
                        None => return value,
                        Some(Frame::Array { out, .. }) => out.push(value),
                        Some(Frame::Object { out, key, .. }) => {
                            out.insert(std::mem::take(key), value);
                        }
                    }
                }
                let Some(top) = stack.last_mut() else {
                    return redacted();
                };
                if let Some(child) = self.next_child(top) {
                    next = child;
                    break;
                }
                finished = stack.pop().map(Frame::into_value);
            }
        }
    }

    /// The next child of `frame` to walk; values under secret keys are redacted on the way.
    fn next_child<'a>(&self, frame: &mut Frame<'a>) -> Option<&'a Value> {
        match frame {
            Frame::Array { rest, .. } => rest.next(),
            Frame::Object { rest, out, key } => {
                for (k, v) in rest.by_ref() {
                    let clean_key = self.scan_text(k);
                    if self.is_secret_key(k) {
                        out.insert(clean_key, redacted());
                    } else {
                        *key = clean_key;
                        return Some(v);
                    }
                }
                None
            }
        }
    }

    /// A string found `base` containers deep, after `embedded` levels of JSON-in-string.
    pub(super) fn redact_str(&self, s: &str, base: usize, embedded: usize) -> String {
        let trimmed = s.trim_start();
        if trimmed.starts_with('{') || trimmed.starts_with('[') {
            // INVARIANT (r33_never_fails_open): JSON too deep to parse is not "text".
            if raw_depth(trimmed) > MAX_EMBEDDED_DEPTH {
                return REDACTED.to_owned();
            }
            if let Ok(parsed) = serde_json::from_str::<Value>(trimmed) {
                if embedded >= MAX_EMBEDDED {
                    return REDACTED.to_owned();
                }
                let clean = self.walk(&parsed, base, embedded + 1);
                // INVARIANT (r33_embedded_json_is_always_reserialised): never hand back the
                // original text, even when nothing changed — a duplicate key can hide a
                // secret that the parse dropped.
                return serde_json::to_string(&clean).unwrap_or_else(|_| REDACTED.to_owned());
            }
        }
        self.scan_text(s)
    }
}
