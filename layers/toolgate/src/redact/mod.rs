//! Redaction (R33, R34): what reaches an audit record, a span — and, when output scrubbing
//! is on, the model — passes through a [`Redactor`] first.
//!
//! A redactor never fails open: anything it cannot inspect is replaced whole by
//! [`REDACTED`]. Four kinds of rule apply, in this order of strength:
//!
//! 1. **Key names.** In structured content, the whole value under a key that names a secret
//!    (`password`, `token`, `Authorization`, `client_secret`, … see [`DEFAULT_KEYS`]) is
//!    replaced, whatever its type. Keys are compared after removing `-`, `_`, `.` and spaces
//!    and lower-casing, and a key matches when it merely *contains* a rule (`X-Api-Key`,
//!    `sessionToken`, `db_password`). The one carve-out: `auth` followed by `or` (`author`,
//!    `authority`) is not a secret, while `authorization` still is. This errs on the side of
//!    hiding: `max_tokens` or `session_count` are redacted too.
//! 2. **Per-tool JSON pointers** ([RFC 6901]; a `*` segment stands for every element or key)
//!    redact exactly the fields a tool is known to return secrets in. They apply to the
//!    structured content (not inside JSON-encoded strings), after the other rules.
//! 3. **Value patterns** run over every string — values, array elements, object keys and
//!    [`Redactor::redact_text`] input — and replace each match: `Bearer <token>` (the word
//!    `Bearer` stays), JWTs, AWS access key ids and `aws_secret_access_key=…`, GitHub,
//!    Slack, Google and npm tokens, `sk-…` API keys, PEM private key blocks and passwords in
//!    URLs (`scheme://user:password@host`). Patterns target the *formats* of secrets, not
//!    words: `{"title": "token bucket algorithm"}` is left alone.
//! 4. **Key/value pairs in text**, the key judged by the key-name rules:
//!    `password=…`/`token=…` query, form and command-line parameters, `"password": …`
//!    pairs in JSON-like or Python-like text (a bracketed value to its closing bracket), and
//!    `Authorization: …` / `password: …` in headers, YAML or logs (the rest of the line; an
//!    auth scheme word such as `Basic` stays). This is best effort for text that is not
//!    JSON — a value on the next line of a YAML block is not seen — which is why structured
//!    content should be handed over as a value.
//!
//! A string that is itself JSON (it starts with `{` or `[` and parses) is parsed, redacted
//! as structured content and serialised again (compact, keys sorted), so a secret hidden in
//! a JSON-encoded string is still caught; one that does not parse is treated as text. Such
//! strings are opened up to 8 levels deep, and JSON text nesting deeper than 100 is not
//! parsed: in both cases the string is redacted whole, like a container nested past
//! [`max_depth`](RedactorBuilder::max_depth).
//!
//! The rules lean towards hiding. Known over-redaction: the word after `bearer` in prose
//! (`the bearer [REDACTED] bad news`), the rest of a line after `Session:` or `Token:`,
//! counts such as `max_tokens`, and identifiers shaped like keys (`sk-` and 17 more
//! characters). All scans run in time linear in the text (the `regex` crate).
//!
//! Redact first, then [`truncate`](Redactor::truncate): truncating first could cut a secret
//! in two so that no pattern recognises what is left.
//!
//! [RFC 6901]: https://www.rfc-editor.org/rfc/rfc6901
//!
//! # Example
//!
//! ```
//! use serde_json::json;
//! use toolgate::redact::{REDACTED, Redactor};
//!
//! let redactor = Redactor::builder()
//!     .pointer("crm__lookup", "/customer/ssn")
//!     .build()
//!     .unwrap();
//! let output = json!({
//!     "customer": {"name": "Ada", "ssn": "078-05-1120"},
//!     "headers": {"Authorization": "Bearer abc.def"},
//!     "note": "call back on Tuesday",
//! });
//! let clean = redactor.redact_value("crm__lookup", &output);
//! assert_eq!(clean["customer"]["ssn"], REDACTED);
//! assert_eq!(clean["headers"]["Authorization"], REDACTED);
//! assert_eq!(clean["customer"]["name"], "Ada");
//! assert_eq!(clean["note"], "call back on Tuesday");
//!
//! // The pointer belongs to `crm__lookup` only.
//! assert_eq!(redactor.redact_value("crm__other", &output)["customer"]["ssn"], "078-05-1120");
//! ```

mod builder;
mod keys;
mod patterns;
mod pointer;
mod text;
mod walk;

use std::sync::Arc;

use serde_json::Value;

pub use builder::RedactorBuilder;
use keys::{contains_rule, normalise};
use patterns::TextRule;
use pointer::PointerRule;

/// What every redacted value or match is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// How deep structured content may nest before the rest is redacted whole (`{}` is depth 1,
/// as for the input bound of R36).
pub const DEFAULT_MAX_DEPTH: usize = 64;

/// The longest text [`Redactor::truncate`] keeps by default: 64 KiB.
pub const DEFAULT_MAX_TEXT_BYTES: usize = 64 * 1024;

/// The key names whose values are always redacted, before normalisation (see the module
/// docs for how a key is compared with them).
pub const DEFAULT_KEYS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "api_key",
    "apikey",
    "authorization",
    "auth",
    "cookie",
    "set-cookie",
    "private_key",
    "credential",
    "credentials",
    "session",
    "access_key",
    "refresh_token",
    "client_secret",
    "bearer",
];

/// A redactor for structured content and text (R33). Cheap to clone.
///
/// ```
/// use serde_json::json;
/// use toolgate::redact::{REDACTED, Redactor};
///
/// let redactor = Redactor::default();
/// let clean = redactor.redact_value("db__query", &json!({
///     "db_password": "hunter2",
///     "title": "token bucket algorithm",
/// }));
/// assert_eq!(clean, json!({"db_password": REDACTED, "title": "token bucket algorithm"}));
///
/// let text = redactor.redact_text("curl -H 'Authorization: Bearer s3cr3t-t0ken' https://api.example");
/// assert!(!text.contains("s3cr3t-t0ken"));
/// assert!(text.contains("Bearer [REDACTED]"));
/// assert_eq!(redactor.redact_text("all clear"), "all clear");
/// ```
#[derive(Debug, Clone)]
pub struct Redactor {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Normalised key-name rules (defaults first).
    keys: Vec<String>,
    pointers: Vec<PointerRule>,
    /// Built-in patterns, then the user's, then the key/value shapes.
    rules: Vec<TextRule>,
    max_depth: usize,
    max_text_bytes: usize,
}

impl Default for Redactor {
    /// The default rules; cheap (the rules are compiled once per process).
    fn default() -> Self {
        builder::DEFAULT.clone()
    }
}

impl Redactor {
    /// A builder starting from the default rules.
    pub fn builder() -> RedactorBuilder {
        RedactorBuilder::default()
    }

    /// The nesting depth past which content is redacted whole.
    pub fn max_depth(&self) -> usize {
        self.inner.max_depth
    }

    /// The longest text [`truncate`](Self::truncate) keeps.
    pub fn max_text_bytes(&self) -> usize {
        self.inner.max_text_bytes
    }

    /// Structured content with every secret replaced by [`REDACTED`]: values under secret
    /// key names, `tool`'s pointers, pattern matches in every string (JSON-encoded strings
    /// are opened), and containers nested past the depth limit. `tool` is the qualified tool
    /// name the content belongs to.
    pub fn redact_value(&self, tool: &str, value: &Value) -> Value {
        let mut out = self.walk(value, 0, 0);
        self.apply_pointers(tool, &mut out);
        out
    }

    /// Text with every secret replaced by [`REDACTED`]. Text that is a JSON document is
    /// redacted as structured content and comes back compact.
    pub fn redact_text(&self, text: &str) -> String {
        self.redact_str(text, 0, 0)
    }

    /// [`redact_text`](Self::redact_text), then [`truncate`](Self::truncate) — in that order,
    /// so that no secret is cut into a piece no pattern recognises.
    pub fn redact_and_truncate(&self, text: &str) -> String {
        self.truncate(&self.redact_text(text))
    }

    /// `text` cut to at most `max_text_bytes` on a character boundary, followed by a marker
    /// `…[truncated N bytes]` giving how many bytes were cut; text that fits is returned as
    /// it is. Redact before truncating (see [`redact_and_truncate`](Self::redact_and_truncate)).
    pub fn truncate(&self, text: &str) -> String {
        let max = self.inner.max_text_bytes;
        if text.len() <= max {
            return text.to_owned();
        }
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let head = text.get(..cut).unwrap_or_default();
        format!("{head}…[truncated {} bytes]", text.len() - cut)
    }

    /// Whether the value under an object key called `key` is redacted whole.
    pub fn is_secret_key(&self, key: &str) -> bool {
        let key = normalise(key);
        self.inner.keys.iter().any(|rule| contains_rule(&key, rule))
    }
}

fn redacted() -> Value {
    Value::String(REDACTED.to_owned())
}

#[cfg(test)]
mod tests;
