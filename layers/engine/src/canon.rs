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
