//! Per-tool JSON pointers (RFC 6901, with `*`): parsing them, and redacting what they point
//! at (module docs, rule 2).

use serde_json::Value;

use super::{Redactor, redacted};

#[derive(Debug, Clone)]
pub(super) struct PointerRule {
    pub(super) tool: String,
    pub(super) segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Segment {
    /// `*`: every element of an array, every value of an object.
    Any,
    /// An object key, or an array index when it reads as one.
    Key(String),
}

/// Parses an RFC 6901 pointer, with `*` as a wildcard segment.
pub(super) fn parse_pointer(pointer: &str) -> Result<Vec<Segment>, String> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(format!(
            "`{pointer}` is not a JSON pointer (RFC 6901): it must be empty or start with `/`"
        ));
    };
    let mut segments = Vec::new();
    for raw in rest.split('/') {
        if raw == "*" {
            segments.push(Segment::Any);
            continue;
        }
        let mut key = String::with_capacity(raw.len());
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            if c != '~' {
                key.push(c);
                continue;
            }
            match chars.next() {
                Some('0') => key.push('~'),
                Some('1') => key.push('/'),
                _ => {
                    return Err(format!(
                        "`{pointer}` is not a JSON pointer (RFC 6901): `~` must be followed by `0` or `1`"
                    ));
                }
            }
        }
        segments.push(Segment::Key(key));
    }
    Ok(segments)
}

/// An RFC 6901 array index: decimal digits without a leading zero.
fn array_index(segment: &str) -> Option<usize> {
    let ok = !segment.is_empty()
        && segment.bytes().all(|b| b.is_ascii_digit())
        && (segment == "0" || !segment.starts_with('0'));
    if ok { segment.parse().ok() } else { None }
}

impl Redactor {
    /// Redacts whatever `tool`'s pointers point at in `out`.
    pub(super) fn apply_pointers(&self, tool: &str, out: &mut Value) {
        for rule in &self.inner.pointers {
            if !rule.tool.eq_ignore_ascii_case(tool) {
                continue;
            }
            let mut frontier: Vec<&mut Value> = vec![&mut *out];
            for segment in &rule.segments {
                let mut next = Vec::new();
                for v in frontier {
                    match (v, segment) {
                        (Value::Object(m), Segment::Any) => next.extend(m.values_mut()),
                        (Value::Array(a), Segment::Any) => next.extend(a.iter_mut()),
                        (Value::Object(m), Segment::Key(k)) => next.extend(m.get_mut(k)),
                        (Value::Array(a), Segment::Key(k)) => {
                            next.extend(array_index(k).and_then(|i| a.get_mut(i)));
                        }
                        _ => {}
                    }
                }
                frontier = next;
            }
            for v in frontier {
                *v = redacted();
            }
        }
    }
}
