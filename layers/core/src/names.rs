//! Qualified (wire) names, SPEC R1–R3.
//!
//! A qualified name is normalised segments joined by `__`. Build names with
//! [`toolset_name`], [`mcp_name`] and [`http_name`] rather than by hand.
//!
//! ```
//! use toolgate_core::names::{http_name, mcp_name, toolset_name};
//!
//! assert_eq!(mcp_name("GitHub Enterprise", "list.issues").unwrap(), "GitHub_Enterprise__list_issues");
//! assert_eq!(toolset_name("coding", "write_file").unwrap(), "coding__write_file");
//! assert_eq!(http_name("refund_order").unwrap(), "refund_order");
//! assert!(http_name("!!!").is_err());
//! ```

use std::fmt;

/// The separator between the segments of a qualified name.
pub const SEPARATOR: &str = "__";

/// A segment that normalises to nothing (R1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameError {
    raw: String,
}

impl NameError {
    /// The raw text that normalised to nothing.
    pub fn raw(&self) -> &str {
        &self.raw
    }
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` has no letter, digit or `-` and normalises to an empty name segment",
            self.raw
        )
    }
}

impl std::error::Error for NameError {}

/// Normalises one name segment (R1): every character that is not an ASCII letter,
/// ASCII digit or `-` becomes `_`, runs of `_` collapse to one, leading and trailing
/// `_` are trimmed. Case is kept. An empty result is an error.
///
/// ```
/// use toolgate_core::names::normalize_segment;
/// assert_eq!(normalize_segment("  list.issues!").unwrap(), "list_issues");
/// assert!(normalize_segment("__").is_err());
/// ```
pub fn normalize_segment(raw: &str) -> Result<String, NameError> {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        let keep = c.is_ascii_alphanumeric() || c == '-';
        if keep {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    while out.ends_with('_') {
        out.pop();
    }
    if out.is_empty() {
        return Err(NameError {
            raw: raw.to_owned(),
        });
    }
    Ok(out)
}

/// Joins already-normalised segments with [`SEPARATOR`].
fn join(segments: &[&str]) -> Result<String, NameError> {
    let mut parts = Vec::with_capacity(segments.len());
    for s in segments {
        parts.push(normalize_segment(s)?);
    }
    Ok(parts.join(SEPARATOR))
}

/// The qualified name of a first-party toolset method: `toolset__method`.
pub fn toolset_name(toolset: &str, method: &str) -> Result<String, NameError> {
    join(&[toolset, method])
}

/// The qualified name of an MCP tool: `server__tool`.
pub fn mcp_name(server: &str, tool: &str) -> Result<String, NameError> {
    join(&[server, tool])
}

/// The qualified name of an operator-declared HTTP tool: its one segment.
pub fn http_name(tool: &str) -> Result<String, NameError> {
    join(&[tool])
}

/// ASCII case-insensitive equality (R2).
pub fn names_equal(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// The key two server (or toolset) names are compared by: normalised (R1), then ASCII
/// lower-cased (R2), so `evil` and `Evil.` are one server, whose tools' qualified names
/// would be the same. A name that normalises to nothing keys as itself, lower-cased.
///
/// ```
/// use toolgate_core::names::server_key;
/// assert_eq!(server_key("evil"), server_key("Evil."));
/// assert_eq!(server_key("GitHub Enterprise"), "github_enterprise");
/// assert_ne!(server_key("evil"), server_key("evil2"));
/// ```
pub fn server_key(name: &str) -> String {
    normalize_segment(name)
        .map(|s| s.to_ascii_lowercase())
        .unwrap_or_else(|_| name.to_ascii_lowercase())
}

/// The key under which a name is looked up: ASCII lower case (R2).
pub fn name_key(name: &str) -> String {
    name.to_ascii_lowercase()
}

/// As [`name_key`], borrowing when the name has no ASCII upper-case letter (no allocation
/// on the hot path).
pub fn lower_key(name: &str) -> std::borrow::Cow<'_, str> {
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Owned(name.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r1_examples_from_the_spec() {
        assert_eq!(
            mcp_name("GitHub Enterprise", "list.issues").unwrap(),
            "GitHub_Enterprise__list_issues"
        );
        assert_eq!(
            toolset_name("coding", "write_file").unwrap(),
            "coding__write_file"
        );
        assert_eq!(http_name("refund_order").unwrap(), "refund_order");
    }

    #[test]
    fn r1_runs_collapse_and_edges_trim() {
        assert_eq!(normalize_segment("a...b").unwrap(), "a_b");
        assert_eq!(normalize_segment("__a__b__").unwrap(), "a_b");
        assert_eq!(normalize_segment("-x-").unwrap(), "-x-");
        assert_eq!(normalize_segment("ünïcode").unwrap(), "n_code");
        assert_eq!(normalize_segment("Case").unwrap(), "Case");
    }

    #[test]
    fn r1_empty_segment_is_an_error() {
        for raw in ["", "!!!", "___", " ", "é"] {
            assert!(normalize_segment(raw).is_err(), "{raw:?}");
        }
        assert!(mcp_name("ok", "...").is_err());
        assert!(mcp_name("...", "ok").is_err());
    }

    #[test]
    fn r1_a_normalised_segment_never_holds_the_separator() {
        for raw in ["a__b", "a_._b", "a  b"] {
            assert!(!normalize_segment(raw).unwrap().contains(SEPARATOR));
        }
    }

    #[test]
    fn r2_comparison_is_ascii_case_insensitive() {
        assert!(names_equal("GITHUB__Create_Issue", "github__create_issue"));
        assert!(!names_equal("a", "b"));
        assert_eq!(name_key("GitHub__X"), "github__x");
    }
}
