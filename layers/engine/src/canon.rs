//! Canonical hashes that bind an approval to what the person saw (R35): the call's input
//! (RFC 8785 JSON canonicalisation, then SHA-256) and the tool's definition (name,
//! description, input schema, annotations).

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use toolgate_core::ToolDeclaration;

use crate::catalog::Entry;

/// The RFC 8785 canonical form of a value. A value that cannot be canonicalised (it can
/// only be a number outside what JSON allows) yields `None`, and callers refuse.
pub fn canonical_json(value: &Value) -> Option<String> {
    serde_json_canonicalizer::to_string(value).ok()
}

/// `sha256:<hex>` of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(7 + digest.len() * 2);
    out.push_str("sha256:");
    toolgate_core::id::push_hex(&mut out, &digest);
    out
}

/// `sha256:<hex>` of the input's canonical form.
///
/// ```
/// use serde_json::json;
/// use toolgate_engine::canon::input_hash;
/// assert_eq!(input_hash(&json!({"b": 1, "a": [1.0, "x"]})), input_hash(&json!({"a": [1, "x"], "b": 1})));
/// assert_ne!(input_hash(&json!({"a": 1})), input_hash(&json!({"a": 2})));
/// ```
pub fn input_hash(value: &Value) -> Option<String> {
    canonical_json(value).map(|c| sha256_hex(c.as_bytes()))
}

/// SHA-256 of an input's compact serialisation, `None` only when serde_json cannot write the
/// value. (It was the permit's binding of the input, R38, before toolgate's permits moved to
/// an in-process keyed hash that needs no serialisation; it is kept for what must bind the
/// very bytes across processes.) Not RFC 8785: one value always serialises to the same
/// bytes, so any change, even one canonicalisation would forgive (a key reordered, `1`
/// rewritten as `1.0`), gives another hash. About ten times cheaper than canonicalising
/// (`benches/benches/permit.rs`).
///
/// ```
/// use serde_json::json;
/// use toolgate_engine::canon::{input_binding, input_hash};
///
/// // One value, one binding; a key order or `1.0` canonicalisation forgives is a change here.
/// assert_eq!(input_binding(&json!({"a": 1})), input_binding(&json!({"a": 1})));
/// assert_ne!(input_binding(&json!({"a": 1})), input_binding(&json!({"a": 1.0})));
/// assert_eq!(input_hash(&json!({"a": 1})), input_hash(&json!({"a": 1.0})));
/// ```
pub fn input_binding(input: &Value) -> Option<[u8; 32]> {
    // Serialised into the hasher through a small buffer on the stack: no heap buffer, and
    // one hasher update per 256 bytes rather than one per token.
    let mut hasher = HashWriter {
        sha: Sha256::new(),
        buf: [0; HASH_CHUNK],
        len: 0,
    };
    serde_json::to_writer(&mut hasher, input).ok()?;
    Some(hasher.finish())
}

const HASH_CHUNK: usize = 256;

/// `io::Write` into a SHA-256, in chunks.
struct HashWriter {
    sha: Sha256,
    buf: [u8; HASH_CHUNK],
    len: usize,
}

impl HashWriter {
    /// Hashes what the buffer holds and empties it.
    fn drain(&mut self) {
        self.sha
            .update(self.buf.get(..self.len).unwrap_or_default());
        self.len = 0;
    }

    fn finish(mut self) -> [u8; 32] {
        self.drain();
        self.sha.finalize().into()
    }
}

impl std::io::Write for HashWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.len + bytes.len() > HASH_CHUNK {
            self.drain();
        }
        match self.buf.get_mut(self.len..self.len + bytes.len()) {
            Some(room) if bytes.len() < HASH_CHUNK => {
                room.copy_from_slice(bytes);
                self.len += bytes.len();
            }
            // A write as long as a chunk (the buffer was drained above): hashed as it is.
            _ => {
                self.drain();
                self.sha.update(bytes);
            }
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The definition of one declaration as hashed: identity, description, input schema and
/// annotations.
fn definition_value(decl: &ToolDeclaration) -> Value {
    let id = &decl.identity;
    let ann = decl.annotations.as_ref().map(|a| {
        json!({
            "title": a.title,
            "readOnlyHint": a.read_only_hint,
            "destructiveHint": a.destructive_hint,
            "idempotentHint": a.idempotent_hint,
            "openWorldHint": a.open_world_hint,
        })
    });
    json!({
        "kind": id.kind().as_str(),
        "source": id.source(),
        "name": id.name(),
        "description": decl.description,
        "input_schema": decl.input_schema,
        "annotations": ann,
    })
}

/// A tool its MCP server listed, as an audit record carries it (R46, R52): its definition
/// as hashed ([`definition_hash`]), the name it was listed under, and the host settings the
/// gateway gave it — what a replay of the log registers again
/// ([`listed_from_record`]).
///
/// ```
/// use toolgate_core::{ApprovalMode, McpAnnotations, ToolDeclaration, ToolIdentity};
/// use toolgate_engine::canon::{listed_from_record, listed_record};
/// let decl = ToolDeclaration::new(ToolIdentity::mcp("bank", "transfer"))
///     .description("Moves money")
///     .approval(ApprovalMode::RequireApproval)
///     .annotations(McpAnnotations { read_only_hint: Some(false), ..Default::default() });
/// assert_eq!(listed_from_record(&listed_record(&decl)).unwrap(), decl);
/// ```
pub fn listed_record(decl: &ToolDeclaration) -> Value {
    let mut v = definition_value(decl);
    if let Value::Object(o) = &mut v {
        o.insert("listed_name".into(), json!(decl.listed_name));
        o.insert("approval".into(), Value::from(decl.approval.as_str()));
        o.insert("confidential".into(), Value::from(decl.confidential));
        o.insert(
            "network_override".into(),
            json!(decl.network_override.map(|n| n.as_str())),
        );
    }
    v
}

/// The declaration an audit record's [`listed_record`] holds; `None` for anything else (an
/// MCP tool only).
pub fn listed_from_record(v: &Value) -> Option<ToolDeclaration> {
    let o = v.as_object()?;
    if o.get("kind")?.as_str()? != "mcp" {
        return None;
    }
    let text = |k: &str| o.get(k).and_then(Value::as_str);
    let mut decl = ToolDeclaration::new(toolgate_core::ToolIdentity::mcp(
        text("source")?,
        text("name")?,
    ));
    decl.description = text("description").map(str::to_owned);
    decl.input_schema = o.get("input_schema").filter(|s| !s.is_null()).cloned();
    decl.listed_name = text("listed_name").map(str::to_owned);
    decl.approval = toolgate_core::ApprovalMode::parse(text("approval")?)?;
    decl.confidential = o.get("confidential")?.as_bool()?;
    decl.network_override = match o.get("network_override") {
        None | Some(Value::Null) => None,
        Some(n) => Some(toolgate_core::NetworkScope::parse(n.as_str()?)?),
    };
    decl.annotations = match o.get("annotations") {
        None | Some(Value::Null) => None,
        Some(a) => {
            let hint = |k: &str| a.get(k).and_then(Value::as_bool);
            Some(toolgate_core::McpAnnotations {
                title: a.get("title").and_then(Value::as_str).map(str::to_owned),
                read_only_hint: hint("readOnlyHint"),
                destructive_hint: hint("destructiveHint"),
                idempotent_hint: hint("idempotentHint"),
                open_world_hint: hint("openWorldHint"),
            })
        }
    };
    Some(decl)
}

/// `sha256:<hex>` of one declaration's definition.
pub fn definition_hash(decl: &ToolDeclaration) -> String {
    let v = definition_value(decl);
    sha256_hex(
        canonical_json(&v)
            .unwrap_or_else(|| v.to_string())
            .as_bytes(),
    )
}

/// `sha256:<hex>` over every record behind a qualified name, in order.
pub fn entry_definition_hash(entry: &Entry) -> String {
    let all: Vec<Value> = entry
        .records
        .iter()
        .map(|r| definition_value(&r.decl))
        .collect();
    let v = Value::Array(all);
    sha256_hex(
        canonical_json(&v)
            .unwrap_or_else(|| v.to_string())
            .as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_core::{McpAnnotations, ToolIdentity};

    #[test]
    fn r35_input_hash_is_canonical() {
        let a = input_hash(&json!({"z": {"b": 2, "a": 1}, "n": 100.0})).unwrap();
        let b = input_hash(&json!({"n": 100, "z": {"a": 1, "b": 2}})).unwrap();
        assert_eq!(a, b);
        assert!(a.starts_with("sha256:") && a.len() == 7 + 64);
    }

    #[test]
    fn r35_definition_hash_sees_every_part() {
        let base = ToolDeclaration::new(ToolIdentity::mcp("s", "t"));
        let h = definition_hash(&base);
        assert_eq!(h, definition_hash(&base.clone()));
        assert_ne!(h, definition_hash(&base.clone().description("new")));
        let mut schema = base.clone();
        schema.input_schema = Some(json!({"type": "object"}));
        assert_ne!(h, definition_hash(&schema));
        assert_ne!(
            h,
            definition_hash(&base.clone().annotations(McpAnnotations {
                read_only_hint: Some(true),
                ..Default::default()
            }))
        );
    }
}

#[cfg(test)]
mod binding_tests {
    use serde_json::json;
    use sha2::{Digest, Sha256};

    use super::input_binding;

    /// R38: the chunked writer hashes exactly the bytes serde_json writes, across every
    /// chunk boundary (short tokens, a string longer than a chunk, one ending on a boundary).
    #[test]
    fn r38_the_binding_is_sha256_of_the_compact_serialisation() {
        for n in [
            0usize, 1, 200, 240, 250, 255, 256, 257, 511, 512, 1000, 5000,
        ] {
            let v = json!({"a": "x".repeat(n), "b": [1, 2.5, null, true], "c": {"d": "y".repeat(n / 3)}});
            let want: [u8; 32] = Sha256::digest(serde_json::to_vec(&v).unwrap()).into();
            assert_eq!(input_binding(&v), Some(want), "string of {n} bytes");
        }
    }
}
