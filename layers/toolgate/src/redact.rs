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

use std::borrow::Cow;
use std::sync::{Arc, LazyLock};

use regex::{Regex, RegexBuilder};
use serde_json::{Map, Value};
use toolgate_engine::ConfigErrors;
use toolgate_engine::json::raw_depth;
use toolgate_engine::observe::RedactionSettings;
use toolgate_engine::policy::DEFAULT_REGEX_SIZE_LIMIT;

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

/// How many JSON-encoded strings inside JSON-encoded strings are opened; a string nested
/// deeper than this that still parses is redacted whole.
const MAX_EMBEDDED: usize = 8;

/// JSON text in a string that nests deeper than this is redacted whole without parsing
/// (serde_json refuses past 128 anyway; this keeps the answer "cannot inspect", not "text").
const MAX_EMBEDDED_DEPTH: usize = 100;

/// The built-in value patterns. A group named `secret` is replaced if the pattern has one;
/// otherwise the whole match is.
const BUILTIN_PATTERNS: &[&str] = &[
    // PEM private key blocks, multi-line; one that never ends is redacted to the end.
    r"(?s)-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----(?:.*?-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|.*)",
    // JWTs (and JWEs): base64url JSON header `eyJ…`, then two to four more parts.
    r"(?-u:\b)eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]*){0,2}",
    // AWS access key ids.
    r"(?-u:\b)(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?-u:\b)",
    // AWS secret access keys given by name.
    r#"(?i)(?-u:\b)aws[_-]?secret[_-]?(?:access[_-]?)?key["']?\s*[:=]\s*["']?(?P<secret>[A-Za-z0-9/+=]{16,})"#,
    // GitHub tokens.
    r"(?-u:\b)(?:gh[pousr]_[A-Za-z0-9]{10,}|github_pat_[A-Za-z0-9_]{10,})",
    // Slack tokens.
    r"(?-u:\b)xox[abeoprs]-[A-Za-z0-9-]{6,}",
    // `sk-…` API keys (OpenAI, Anthropic, …) and Stripe's `sk_live_…`/`rk_test_…`.
    r"(?-u:\b)(?:sk-[A-Za-z0-9_-]{17,}|[sr]k_(?:live|test)_[A-Za-z0-9]{8,})",
    // Google API keys and npm tokens.
    r"(?-u:\b)(?:AIza[A-Za-z0-9_-]{35}|npm_[A-Za-z0-9]{36})",
    // `Bearer <token>`: the scheme stays, the token goes.
    r"(?i)(?-u:\b)bearer\s+(?P<secret>[A-Za-z0-9\-._~+/]+=*)",
    // A password in a URL's user information.
    r"(?i)(?-u:\b)[a-z][a-z0-9+.\-]*://[^\s/?#@:]+:(?P<secret>[^\s/?#@]+)@",
];

/// The key/value shapes for text, each a regex for a key and its separator only: when the
/// key names a secret, the value that follows is found by [`value_span`] and replaced.
/// Matches stay short and the regex only matches keys that contain a key-name rule, so a
/// scan is linear in the text and fast where no secret key appears.
const SHAPES: &[Shape] = &[Shape::Quoted, Shape::Assigned, Shape::Header];

/// The regex of `shape`: for keys containing one of `rules` (an alternation), or for any
/// key when `rules` is `None`.
fn key_value_regex(shape: Shape, rules: Option<&str>) -> String {
    const WORD: &str = r"[A-Za-z0-9_.\-]";
    match shape {
        // "key": value and 'key': value (JSON-like and Python-like text).
        Shape::Quoted => {
            let key = rules.map_or_else(
                || r#"[^"'\\\r\n]{1,128}"#.to_owned(),
                |r| format!(r#"[^"'\\\r\n]*(?:{r})[^"'\\\r\n]*"#),
            );
            format!(r#"["'](?P<key>{key})["'][ \t]*:[ \t]*"#)
        }
        // key=value (query strings, forms, command lines, environment files).
        Shape::Assigned => {
            let key =
                rules.map_or_else(|| format!("{WORD}+"), |r| format!("{WORD}*(?:{r}){WORD}*"));
            format!(r"(?P<key>{key})[ \t]*=[ \t]*")
        }
        // `Key: value` (HTTP headers, YAML, logs): the rest of the line; an auth scheme stays.
        Shape::Header => {
            let key = rules.map_or_else(
                || format!("[A-Za-z]{WORD}*"),
                |r| format!("{WORD}*(?:{r}){WORD}*"),
            );
            format!(r"(?-u:\b)(?P<key>{key})[ \t]*:[ \t]*")
        }
    }
}

/// The key/value rules for the normalised key-name rules `keys`. Keys that are not ASCII
/// get the regexes that match any key (case folding in a regex and `to_lowercase` could
/// disagree); a regex that does not compile falls back the same way, and one of those that
/// does not either redacts everything.
fn key_value_rules(keys: &[String]) -> Vec<TextRule> {
    let ascii = keys.iter().all(|k| k.is_ascii());
    SHAPES
        .iter()
        .map(|&shape| {
            let joiner = if shape == Shape::Quoted {
                "[-_. ]*"
            } else {
                "[-_.]*"
            };
            let rules = ascii.then(|| {
                let alternatives: Vec<String> = keys
                    .iter()
                    .map(|k| {
                        let chars: Vec<String> = k
                            .chars()
                            .map(|c| regex::escape(c.encode_utf8(&mut [0; 4])))
                            .collect();
                        chars.join(joiner)
                    })
                    .collect();
                format!("(?i:{})", alternatives.join("|"))
            });
            let compiled = rules
                .and_then(|r| Regex::new(&key_value_regex(shape, Some(&r))).ok())
                .or_else(|| Regex::new(&key_value_regex(shape, None)).ok());
            compiled.map_or(TextRule::Everything, |re| TextRule::KeyValue(re, shape))
        })
        .collect()
}

/// Auth scheme words kept in front of a header value (`Authorization: Basic [REDACTED]`).
const SCHEMES: &[&str] = &["bearer", "basic", "digest", "token", "negotiate", "ntlm"];

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

#[derive(Debug, Clone)]
enum TextRule {
    /// Replace group `secret` if the pattern has one, else the whole match.
    Pattern { re: Regex, group: bool },
    /// Replace the value after a match when group `key` names a secret.
    KeyValue(Regex, Shape),
    /// A built-in that did not compile: fail closed by redacting every string whole.
    Everything,
}

/// How the value after a key is delimited in text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// After `"key":` — a quoted string, a bracketed value, or a bare word.
    Quoted,
    /// After `key=` — a quoted string, a bracketed value, or up to `&`, `;`, `,` or a space.
    Assigned,
    /// After `Key:` — a quoted string, a bracketed value, or the rest of the line.
    Header,
}

#[derive(Debug, Clone)]
struct PointerRule {
    tool: String,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// `*`: every element of an array, every value of an object.
    Any,
    /// An object key, or an array index when it reads as one.
    Key(String),
}

/// Builds a [`Redactor`]: the default rules plus any added here.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct RedactorBuilder {
    keys: Vec<String>,
    pointers: Vec<(String, String)>,
    patterns: Vec<String>,
    max_depth: Option<usize>,
    max_text_bytes: Option<usize>,
    regex_size_limit: Option<usize>,
}

impl RedactorBuilder {
    /// The rules of a configuration's `redaction` section (`keys`, `patterns`, `pointers`,
    /// `max_text_bytes`); `scrub_output` is for the caller to act on.
    pub fn from_settings(settings: &RedactionSettings) -> Self {
        let mut b = Self::default();
        b.keys.extend(settings.keys.iter().cloned());
        b.patterns.extend(settings.patterns.iter().cloned());
        b.pointers.extend(settings.pointers.iter().cloned());
        b.max_text_bytes = settings.max_text_bytes;
        b
    }

    /// Also redacts the value under any key containing `name` (compared like the default
    /// key names: case, `-`, `_`, `.` and spaces ignored).
    pub fn key(mut self, name: impl Into<String>) -> Self {
        self.keys.push(name.into());
        self
    }

    /// Redacts the value at the JSON pointer `pointer` (RFC 6901; a `*` segment matches
    /// every element or key) in the content of `tool` (its qualified name, compared ASCII
    /// case-insensitively). An empty pointer redacts the whole content. Pointers apply to
    /// structured content, not inside JSON-encoded strings.
    pub fn pointer(mut self, tool: impl Into<String>, pointer: impl Into<String>) -> Self {
        self.pointers.push((tool.into(), pointer.into()));
        self
    }

    /// Also replaces every match of the regular expression `regex` in strings; when it has a
    /// group named `secret`, only that group is replaced.
    pub fn pattern(mut self, regex: impl Into<String>) -> Self {
        self.patterns.push(regex.into());
        self
    }

    /// Containers nested deeper than `depth` (`{}` is depth 1) are redacted whole.
    /// Default [`DEFAULT_MAX_DEPTH`].
    pub fn max_depth(mut self, depth: usize) -> Self {
        self.max_depth = Some(depth);
        self
    }

    /// The longest text [`Redactor::truncate`] keeps, in bytes. Default
    /// [`DEFAULT_MAX_TEXT_BYTES`].
    pub fn max_text_bytes(mut self, n: usize) -> Self {
        self.max_text_bytes = Some(n);
        self
    }

    /// The compiled-size limit of each added pattern (R37); one past it is a configuration
    /// error. Default: the engine's `regex_size_limit` default.
    pub fn regex_size_limit(mut self, bytes: usize) -> Self {
        self.regex_size_limit = Some(bytes);
        self
    }

    /// The redactor, or every rule that is invalid, each named by its path
    /// (`redaction.keys[0]`, `redaction.patterns[2]`, `redaction.pointers[1]`).
    pub fn build(self) -> Result<Redactor, ConfigErrors> {
        let (inner, errs) = compile(&self);
        if errs.is_empty() {
            Ok(Redactor {
                inner: Arc::new(inner),
            })
        } else {
            Err(errs)
        }
    }
}

/// The built-in patterns, compiled once; one that does not compile redacts everything.
static BUILTIN: LazyLock<Vec<TextRule>> = LazyLock::new(|| {
    BUILTIN_PATTERNS
        .iter()
        .map(|p| match Regex::new(p) {
            Ok(re) => pattern_rule(re),
            Err(_) => TextRule::Everything,
        })
        .collect()
});

static DEFAULT: LazyLock<Redactor> = LazyLock::new(|| Redactor {
    inner: Arc::new(compile(&RedactorBuilder::default()).0),
});

fn pattern_rule(re: Regex) -> TextRule {
    let group = re.capture_names().any(|n| n == Some("secret"));
    TextRule::Pattern { re, group }
}

fn index(prefix: &str, i: usize) -> String {
    format!("{prefix}[{i}]")
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The redactor with every valid rule, and the errors of the invalid ones.
fn compile(b: &RedactorBuilder) -> (Inner, ConfigErrors) {
    let mut errs = ConfigErrors::default();

    let mut keys: Vec<String> = DEFAULT_KEYS.iter().map(|k| normalise(k)).collect();
    for (i, k) in b.keys.iter().enumerate() {
        let n = normalise(k);
        if n.is_empty() {
            errs.push(
                index("redaction.keys", i),
                format!("`{k}` is not a usable key name: nothing is left once case, `-`, `_`, `.` and spaces are ignored"),
            );
        } else if !keys.contains(&n) {
            keys.push(n);
        }
    }

    let mut rules = BUILTIN.clone();
    let limit = b.regex_size_limit.unwrap_or(DEFAULT_REGEX_SIZE_LIMIT);
    for (i, p) in b.patterns.iter().enumerate() {
        let path = index("redaction.patterns", i);
        if p.is_empty() {
            errs.push(path, "an empty pattern redacts nothing");
            continue;
        }
        match RegexBuilder::new(p)
            .size_limit(limit)
            .dfa_size_limit(limit)
            .build()
        {
            Ok(re) => rules.push(pattern_rule(re)),
            Err(e) => errs.push(
                path,
                format!(
                    "`{p}` is not a valid regular expression: {}",
                    one_line(&e.to_string())
                ),
            ),
        }
    }
    rules.extend(key_value_rules(&keys));

    let mut pointers = Vec::new();
    for (i, (tool, pointer)) in b.pointers.iter().enumerate() {
        let path = index("redaction.pointers", i);
        if tool.trim().is_empty() {
            errs.push(
                path.clone(),
                format!("the pointer `{pointer}` names no tool"),
            );
        }
        match parse_pointer(pointer) {
            Ok(segments) if !tool.trim().is_empty() => pointers.push(PointerRule {
                tool: tool.clone(),
                segments,
            }),
            Ok(_) => {}
            Err(message) => errs.push(path, message),
        }
    }

    let inner = Inner {
        keys,
        pointers,
        rules,
        max_depth: b.max_depth.unwrap_or(DEFAULT_MAX_DEPTH),
        max_text_bytes: b.max_text_bytes.unwrap_or(DEFAULT_MAX_TEXT_BYTES),
    };
    (inner, errs)
}

/// A key name as compared: lower case, without `-`, `_`, `.` and spaces.
fn normalise(key: &str) -> String {
    key.chars()
        .filter(|c| !matches!(c, '-' | '_' | '.' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}

/// Parses an RFC 6901 pointer, with `*` as a wildcard segment.
fn parse_pointer(pointer: &str) -> Result<Vec<Segment>, String> {
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

fn redacted() -> Value {
    Value::String(REDACTED.to_owned())
}

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

impl Default for Redactor {
    /// The default rules; cheap (the rules are compiled once per process).
    fn default() -> Self {
        DEFAULT.clone()
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

    /// The redacted copy of `root`, whose containers start at depth `base + 1`, without
    /// recursion: an explicit stack of open containers.
    fn walk(&self, root: &Value, base: usize, embedded: usize) -> Value {
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
    fn redact_str(&self, s: &str, base: usize, embedded: usize) -> String {
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

    /// Every text rule over `text`, in order.
    fn scan_text(&self, text: &str) -> String {
        let mut current: Cow<'_, str> = Cow::Borrowed(text);
        for rule in &self.inner.rules {
            let replaced = match rule {
                TextRule::Everything => return REDACTED.to_owned(),
                TextRule::Pattern { re, group } => {
                    if !re.is_match(&current) {
                        continue;
                    }
                    self.replace(re, Mode::Pattern { group: *group }, &current)
                }
                TextRule::KeyValue(re, shape) => {
                    if !re.is_match(&current) {
                        continue;
                    }
                    self.replace(re, Mode::KeyValue(*shape), &current)
                }
            };
            match replaced {
                Some(Some(s)) => current = Cow::Owned(s),
                Some(None) => {}
                // A span that is not a character boundary cannot happen; if it did, the
                // text could not be inspected.
                None => return REDACTED.to_owned(),
            }
        }
        current.into_owned()
    }

    /// `text` with each match's secret span replaced; `Some(None)` when nothing was, `None`
    /// when a span could not be cut.
    fn replace(&self, re: &Regex, mode: Mode, text: &str) -> Option<Option<String>> {
        let mut out = String::new();
        let mut copied = 0usize;
        let mut pos = 0usize;
        let mut changed = false;
        while pos <= text.len() {
            // The span to replace, and where to look next.
            let (whole, span) = match mode {
                Mode::Pattern { group: true } => {
                    let Some(caps) = re.captures_at(text, pos) else {
                        break;
                    };
                    let whole = caps.get(0)?;
                    let m = caps.name("secret").unwrap_or(whole);
                    (whole, Some((m.start(), m.end())))
                }
                Mode::Pattern { group: false } => {
                    let Some(whole) = re.find_at(text, pos) else {
                        break;
                    };
                    (whole, Some((whole.start(), whole.end())))
                }
                // A key that names a secret: its value. Any other key: look on from the
                // separator, so the value is scanned too (`x=token=…`, `note: password=…`).
                Mode::KeyValue(shape) => {
                    let Some(whole) = re.find_at(text, pos) else {
                        break;
                    };
                    let span = if self.is_secret_key(key_of(whole.as_str(), shape)) {
                        value_span(text, whole.end(), shape)
                    } else {
                        None
                    };
                    (whole, span)
                }
            };
            let mut next = span.map_or(whole.end(), |(_, end)| end.max(whole.end()));
            if let Some((start, end)) = span {
                let start = start.max(copied);
                if end > start {
                    out.push_str(text.get(copied..start)?);
                    out.push_str(REDACTED);
                    copied = end;
                    changed = true;
                }
            }
            if next <= pos {
                // An empty match where the last search began: step over one character.
                next = text
                    .get(pos..)
                    .and_then(|rest| rest.chars().next())
                    .map_or(text.len() + 1, |c| pos + c.len_utf8());
            }
            pos = next;
        }
        if !changed {
            return Some(None);
        }
        out.push_str(text.get(copied..)?);
        Some(Some(out))
    }

    fn apply_pointers(&self, tool: &str, out: &mut Value) {
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

#[derive(Clone, Copy)]
enum Mode {
    Pattern { group: bool },
    KeyValue(Shape),
}

/// The key in a key/value match (the regexes of [`key_value_regex`] put it first).
fn key_of(matched: &str, shape: Shape) -> &str {
    let is_key = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    match shape {
        Shape::Quoted => {
            let inner = matched.get(1..).unwrap_or_default();
            inner.split(['"', '\'']).next().unwrap_or_default()
        }
        Shape::Assigned | Shape::Header => {
            let end = matched.find(|c: char| !is_key(c)).unwrap_or(matched.len());
            matched.get(..end).unwrap_or_default()
        }
    }
}

/// The value that starts at `start` in `text`, if there is one to redact.
fn value_span(text: &str, start: usize, shape: Shape) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let first = *bytes.get(start)?;
    let end = match first {
        b'{' | b'[' => balanced_end(text, start),
        b'"' | b'\'' => quoted_end(text, start),
        // `key == value` compares, it does not assign.
        b'=' if shape == Shape::Assigned => return None,
        _ => {
            let stop = |b: &u8| match shape {
                Shape::Quoted => b.is_ascii_whitespace() || matches!(b, b',' | b'}' | b']'),
                Shape::Assigned => {
                    b.is_ascii_whitespace()
                        || matches!(b, b'&' | b';' | b',' | b'"' | b'\'' | b'<' | b'>')
                }
                Shape::Header => matches!(b, b'\r' | b'\n'),
            };
            let rest = bytes.get(start..)?;
            let mut end = start + rest.iter().position(stop).unwrap_or(rest.len());
            if shape == Shape::Header {
                while end > start && bytes.get(end - 1).is_some_and(u8::is_ascii_whitespace) {
                    end -= 1;
                }
                // Keep an auth scheme word when something follows it.
                let word = rest.iter().take_while(|b| b.is_ascii_alphabetic()).count();
                let gap = rest
                    .iter()
                    .skip(word)
                    .take_while(|b| matches!(b, b' ' | b'\t'))
                    .count();
                let scheme = text.get(start..start + word).unwrap_or_default();
                if gap > 0
                    && start + word + gap < end
                    && SCHEMES.iter().any(|s| s.eq_ignore_ascii_case(scheme))
                {
                    return Some((start + word + gap, end));
                }
            }
            end
        }
    };
    (end > start).then_some((start, end))
}

/// The end of the string quoted by the byte at `start` (escapes respected); an unclosed
/// string runs to the end of its line.
fn quoted_end(text: &str, start: usize) -> usize {
    let bytes = text.as_bytes();
    let Some(&quote) = bytes.get(start) else {
        return text.len();
    };
    let mut escaped = false;
    for (i, &b) in bytes.iter().enumerate().skip(start + 1) {
        if escaped {
            escaped = false;
        } else if b == b'\\' {
            escaped = true;
        } else if b == quote {
            return i + 1;
        } else if matches!(b, b'\r' | b'\n') {
            return i;
        }
    }
    text.len()
}

/// Whether the normalised `key` contains `rule`, except `auth` in `author…`/`authority`.
fn contains_rule(key: &str, rule: &str) -> bool {
    key.match_indices(rule).any(|(i, _)| {
        if rule != "auth" {
            return true;
        }
        let rest = key.get(i + rule.len()..).unwrap_or_default();
        !(rest.starts_with("or") && !rest.starts_with("oriz") && !rest.starts_with("oris"))
    })
}

/// The end of the bracketed value opening at `start` (quotes and escapes respected), or
/// the end of `text` when it never closes — an unclosed value is redacted to the end.
fn balanced_end(text: &str, start: usize) -> usize {
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    let mut escaped = false;
    for (i, b) in text.bytes().enumerate().skip(start) {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == q {
                quote = None;
            }
            continue;
        }
        match b {
            b'"' | b'\'' => quote = Some(b),
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    text.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text_of(v: &Value) -> String {
        serde_json::to_string(v).unwrap()
    }

    /// Drops a deep value without recursing.
    fn drop_iteratively(v: Value) {
        let mut stack = vec![v];
        while let Some(mut v) = stack.pop() {
            match &mut v {
                Value::Array(a) => stack.append(a),
                Value::Object(m) => stack.extend(std::mem::take(m).into_iter().map(|(_, v)| v)),
                _ => {}
            }
        }
    }

    #[test]
    fn r33_builtins_all_compile() {
        let r = Redactor::builder().key("pin").build().unwrap();
        for rules in [&Redactor::default().inner.rules, &r.inner.rules] {
            assert!(rules.iter().all(|r| !matches!(r, TextRule::Everything)));
            assert_eq!(rules.len(), BUILTIN_PATTERNS.len() + SHAPES.len());
        }
        for shape in SHAPES {
            assert!(Regex::new(&key_value_regex(*shape, None)).is_ok());
        }
    }

    #[test]
    fn r33_bearer_and_nested_password_never_reach_input_or_output() {
        let r = Redactor::default();
        let input = json!({
            "request": {"headers": [{"name": "X-Trace", "value": "Bearer tok-in-123456"}]},
            "db": {"config": {"nested": {"password": "hunter2-in"}}},
        });
        let output = json!({
            "log": "sent Authorization: Bearer tok-out-654321 to host",
            "result": [{"user": {"Password": {"plain": "hunter2-out"}}}],
        });
        let clean_in = text_of(&r.redact_value("svc__call", &input));
        let clean_out = text_of(&r.redact_value("svc__call", &output));
        for (clean, secrets) in [
            (&clean_in, ["tok-in-123456", "hunter2-in"]),
            (&clean_out, ["tok-out-654321", "hunter2-out"]),
        ] {
            for secret in secrets {
                assert!(!clean.contains(secret), "{secret} leaked in {clean}");
            }
            assert!(clean.contains(REDACTED));
        }
        assert!(clean_in.contains("Bearer [REDACTED]"), "{clean_in}");
        assert!(clean_in.contains("X-Trace"));
    }

    #[test]
    fn r33_every_default_pattern_is_redacted() {
        let r = Redactor::default();
        let cases: &[(&str, &str)] = &[
            ("Authorization: Bearer abc.DEF-ghi_123", "abc.DEF-ghi_123"),
            ("token is bearer Zm9vYmFy==", "Zm9vYmFy=="),
            (
                "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U ok",
                "eyJhbGciOiJIUzI1NiJ9",
            ),
            ("key AKIAIOSFODNN7EXAMPLE used", "AKIAIOSFODNN7EXAMPLE"),
            ("temp ASIAY34FZKBOKMUTVV7A", "ASIAY34FZKBOKMUTVV7A"),
            (
                "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            ),
            (
                "gh ghp_1234567890abcdefghijABCDEFGHIJ123456",
                "ghp_1234567890abcdef",
            ),
            (
                "gh gho_16C7e42F292c6912E7710c838347Ae178B4a",
                "gho_16C7e42F292c",
            ),
            ("gh ghs_abcdefghij0123456789", "ghs_abcdefghij0123456789"),
            (
                "pat github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
                "github_pat_11ABCDEFG0123456789",
            ),
            ("slack xoxb-123456789012-abcdefABCDEF", "xoxb-123456789012"),
            ("slack xoxp-1234-5678-abcd", "xoxp-1234-5678-abcd"),
            ("slack xoxa-2-abcdef123", "xoxa-2-abcdef123"),
            ("slack xoxr-refresh-1234", "xoxr-refresh-1234"),
            (
                "openai sk-proj-abcdefghijklmnopqrstuvwxyz012345",
                "abcdefghijklmnopqrstuvwxyz",
            ),
            (
                "anthropic sk-ant-api03-abcdefghijklmnop",
                "api03-abcdefghijklmnop",
            ),
            (
                "stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc",
                "4eC39HqLyjWDarjtT1zdp7dc",
            ),
            (
                "google AIzaSyA-1234567890abcdefghijklmnopqrstu",
                "AIzaSyA-1234567890",
            ),
            (
                "npm npm_abcdefghijklmnopqrstuvwxyz0123456789",
                "npm_abcdefghijklmnop",
            ),
            (
                "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nq1w2e3r4\n-----END RSA PRIVATE KEY-----\nafter",
                "MIIEowIBAAKCAQEA7",
            ),
            (
                "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEA",
                "b3BlbnNzaC1rZXktdjEA",
            ),
            (
                "GET /cb?code=1&access_token=ya29.a0Af-xyz&x=1",
                "ya29.a0Af-xyz",
            ),
            ("login password=hunter2&user=ada", "hunter2"),
            ("--client-secret='s p a c e d'", "s p a c e d"),
            ("DB_PASSWORD=\"pa ss\"", "pa ss"),
            ("postgres://ada:s3cret-pw@db.internal:5432/app", "s3cret-pw"),
            ("Cookie: sid=abc123; theme=dark", "sid=abc123"),
            ("X-Api-Key: live-key-998877", "live-key-998877"),
            ("  password: hunter2 ", "hunter2"),
            ("- token: t0k3n-in-a-list", "t0k3n-in-a-list"),
            ("Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
            (
                "error: {'password': 'py-repr-pw', 'user': 'ada'}",
                "py-repr-pw",
            ),
            (
                "body was {\"token\": \"in-prose\", \"ok\": true} then",
                "in-prose",
            ),
            (
                "body was {\"secret\": {\"inner\": \"obj-val\"}, \"n\": 1}",
                "obj-val",
            ),
            ("truncated {\"password\": \"never-clos", "never-clos"),
            ("chained x=token=chained-val", "chained-val"),
            (
                "{'note': 'no end, 'api_key': 'after-unclosed'}",
                "after-unclosed",
            ),
        ];
        for (input, secret) in cases {
            let out = r.redact_text(input);
            assert!(!out.contains(secret), "{secret:?} survived in {out:?}");
            assert!(out.contains(REDACTED), "{out:?}");
            // The same string as a structured value under an innocent key.
            let v = r.redact_value("t", &json!({"note": input}));
            assert!(!text_of(&v).contains(secret), "{secret:?} survived in {v}");
        }
    }

    #[test]
    fn r33_context_around_a_match_is_kept() {
        let r = Redactor::default();
        assert_eq!(
            r.redact_text("use Bearer abc123 now"),
            "use Bearer [REDACTED] now"
        );
        assert_eq!(r.redact_text("k=AKIAIOSFODNN7EXAMPLE."), "k=[REDACTED].");
        assert_eq!(
            r.redact_text("-----BEGIN PRIVATE KEY-----\nAAA\n-----END PRIVATE KEY-----\nnext line"),
            "[REDACTED]\nnext line"
        );
        assert_eq!(
            r.redact_text("https://x.test/?token=abc&page=2"),
            "https://x.test/?token=[REDACTED]&page=2"
        );
        assert_eq!(
            r.redact_text("Authorization: Basic abc"),
            "Authorization: Basic [REDACTED]"
        );
        assert_eq!(
            r.redact_text("https://ada:pw@host/"),
            "https://ada:[REDACTED]@host/"
        );
    }

    #[test]
    fn r33_json_in_a_string_is_redacted_structurally() {
        let r = Redactor::default();
        let inner =
            json!({"user": "ada", "auth": {"scheme": "basic", "value": "opaque-credential"}});
        let once = inner.to_string();
        let twice = json!({"payload": once}).to_string();
        let v = json!({"body": once, "wrapped": twice, "list": [once]});
        let clean = r.redact_value("t", &v);
        let s = text_of(&clean);
        assert!(!s.contains("opaque-credential"), "{s}");
        let body: Value = serde_json::from_str(clean["body"].as_str().unwrap()).unwrap();
        assert_eq!(body, json!({"user": "ada", "auth": REDACTED}));
        // Text that looks like JSON but is not is scanned as text.
        assert_eq!(
            r.redact_text("[INFO] token=abc123 issued"),
            "[INFO] token=[REDACTED] issued"
        );
        // Whole text that is JSON is redacted structurally too.
        assert_eq!(
            r.redact_text(r#"{"api_key": ["a", "b"], "n": 1}"#),
            r#"{"api_key":"[REDACTED]","n":1}"#
        );
    }

    #[test]
    fn r33_embedded_json_is_always_reserialised() {
        let r = Redactor::default();
        // serde_json keeps the last of two duplicate keys; the first must not survive.
        let sneaky = r#"{"note": "ghp_1234567890abcdefghij0000", "note": "fine"}"#;
        let out = r.redact_text(sneaky);
        assert!(!out.contains("ghp_"), "{out}");
        assert_eq!(out, r#"{"note":"fine"}"#);
    }

    #[test]
    fn r33_key_name_variants() {
        let r = Redactor::default();
        let keys = [
            "password",
            "PASSWORD",
            "passwd",
            "db_password",
            "X-Api-Key",
            "api_key",
            "apiKey",
            "client_secret",
            "clientSecret",
            "sessionToken",
            "session_id",
            "Authorization",
            "proxy-authorization",
            "auth",
            "oauth_token",
            "Set-Cookie",
            "cookie",
            "private_key",
            "privateKey",
            "credentials",
            "aws_access_key_id",
            "refresh_token",
            "bearer",
            "my.secret.value",
        ];
        for k in keys {
            let mut m = Map::new();
            m.insert(k.to_owned(), json!({"deep": ["x-value-x"]}));
            let out = r.redact_value("t", &Value::Object(m));
            assert_eq!(out[k], REDACTED, "{k}");
            assert!(r.is_secret_key(k), "{k}");
        }
        for k in [
            "title",
            "author",
            "authority",
            "authors",
            "name",
            "description",
            "id",
        ] {
            assert!(!r.is_secret_key(k), "{k}");
        }
        // Every type under a secret key is redacted.
        for v in [
            json!(null),
            json!(12345),
            json!(true),
            json!([1, 2]),
            json!("s"),
        ] {
            assert_eq!(r.redact_value("t", &json!({"token": v}))["token"], REDACTED);
        }
    }

    #[test]
    fn r33_non_secret_content_is_unchanged() {
        let r = Redactor::default();
        let v = json!({
            "title": "token bucket algorithm",
            "author": "Ada Lovelace",
            "body": "Sessions expire after an hour; rotate your password often.",
            "skills": ["sk-learn", "risk-analysis"],
            "count": 3,
            "ok": true,
            "nothing": null,
            "url": "https://example.com/a?page=2&sort=asc",
            "expr": "a = b + c",
        });
        assert_eq!(r.redact_value("t", &v), v);
        let prose = "A token bucket algorithm limits each session; see the Authorization section.";
        assert_eq!(r.redact_text(prose), prose);
    }

    #[test]
    fn r33_secret_in_a_key_name_is_redacted() {
        let r = Redactor::default();
        let v = json!({"AKIAIOSFODNN7EXAMPLE": {"region": "eu"}});
        let out = text_of(&r.redact_value("t", &v));
        assert!(!out.contains("AKIAIOSFODNN7EXAMPLE"), "{out}");
        assert!(out.contains("eu"));
    }

    #[test]
    fn r33_pointer_applies_only_to_its_tool() {
        let r = Redactor::builder()
            .pointer("CRM__Lookup", "/customer/ssn")
            .pointer("crm__lookup", "/rows/*/card")
            .pointer("crm__lookup", "/a~1b/c~0d")
            .pointer("crm__lookup", "/list/1")
            .pointer("vault__read", "")
            .build()
            .unwrap();
        let v = json!({
            "customer": {"ssn": "078-05-1120", "name": "Ada"},
            "rows": [{"card": "4111", "id": 1}, {"card": "5500", "id": 2}],
            "a/b": {"c~d": "odd-key", "other": 1},
            "list": ["zero", "one", "two"],
        });
        let out = r.redact_value("crm__LOOKUP", &v);
        assert_eq!(out["customer"], json!({"ssn": REDACTED, "name": "Ada"}));
        assert_eq!(
            out["rows"],
            json!([{"card": REDACTED, "id": 1}, {"card": REDACTED, "id": 2}])
        );
        assert_eq!(out["a/b"], json!({"c~d": REDACTED, "other": 1}));
        assert_eq!(out["list"], json!(["zero", REDACTED, "two"]));
        // Another tool: untouched.
        assert_eq!(r.redact_value("crm__other", &v), v);
        // The empty pointer is the whole content.
        assert_eq!(r.redact_value("vault__read", &v), json!(REDACTED));
        // Missing paths change nothing.
        assert_eq!(
            r.redact_value("crm__lookup", &json!({"x": 1})),
            json!({"x": 1})
        );
    }

    #[test]
    fn r33_invalid_rules_are_all_collected_with_paths() {
        let err = Redactor::builder()
            .pattern("ok-[0-9]+")
            .pattern("(unclosed")
            .pattern("[z-a]")
            .pointer("t", "no-slash")
            .pointer("t", "/fine")
            .pointer("t", "/bad~2escape")
            .pointer("", "/x")
            .key("   ")
            .build()
            .unwrap_err();
        let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "redaction.keys[0]",
                "redaction.patterns[1]",
                "redaction.patterns[2]",
                "redaction.pointers[0]",
                "redaction.pointers[2]",
                "redaction.pointers[3]",
            ]
        );
        assert!(err.errors.iter().all(|e| {
            let m = &e.message;
            m.chars().next().is_some_and(|c| !c.is_uppercase()) && !m.ends_with('.')
        }));
        assert!(
            err.to_string()
                .contains("`(unclosed` is not a valid regular expression")
        );
    }

    #[test]
    fn r33_regex_size_limit_is_a_config_error() {
        let err = Redactor::builder()
            .regex_size_limit(100)
            .pattern(r"\w{50}")
            .build()
            .unwrap_err();
        assert_eq!(err.errors[0].path, "redaction.patterns[0]");
    }

    #[test]
    fn r33_added_pattern_and_key() {
        let r = Redactor::builder()
            .pattern(r"EMP-\d{6}")
            .pattern(r"pin (?P<secret>\d{4})")
            .pattern("x*")
            .key("ssn")
            .build()
            .unwrap();
        assert_eq!(r.redact_text("id EMP-123456 ok"), "id [REDACTED] ok");
        assert_eq!(r.redact_text("pin 1234 please"), "pin [REDACTED] please");
        assert_eq!(r.redact_text("aaa xx bbb"), "aaa [REDACTED] bbb");
        assert_eq!(r.redact_text("héllo"), "héllo");
        assert_eq!(
            r.redact_value("t", &json!({"customer_SSN": "078-05-1120"})),
            json!({"customer_SSN": REDACTED})
        );
    }

    #[test]
    fn r33_never_fails_open() {
        // Depth: exactly at the limit is kept, one past it is redacted whole.
        let r = Redactor::builder().max_depth(3).build().unwrap();
        assert_eq!(r.redact_value("t", &json!([[[1]]])), json!([[[1]]]));
        assert_eq!(
            r.redact_value("t", &json!({"a": [[{"b": 1}]], "c": 2})),
            json!({"a": [[REDACTED]], "c": 2})
        );
        // The depth of JSON-in-string counts from where the string sits.
        assert_eq!(
            r.redact_value("t", &json!([["[[\"x\"]]"]])),
            json!([["[\"[REDACTED]\"]"]])
        );
        // JSON text too deep to parse is not treated as text.
        let deep_text = format!(
            "{}\"password\": \"x\"{}",
            "{\"a\":".repeat(200),
            "}".repeat(200)
        );
        assert_eq!(Redactor::default().redact_text(&deep_text), REDACTED);
        // JSON-in-string nested past the embedding limit is redacted whole.
        let mut s = json!(["plain"]).to_string();
        for _ in 0..MAX_EMBEDDED + 1 {
            s = Value::Array(vec![Value::String(s)]).to_string();
        }
        assert_eq!(
            Redactor::default()
                .redact_text(&s)
                .matches(REDACTED)
                .count(),
            1
        );
    }

    #[test]
    fn r33_deep_input_is_redacted_without_overflow() {
        let r = Redactor::default();
        let secret = "ghp_deepdeepdeep0123456789";
        let mut v = json!({"password": secret, "note": secret});
        for i in 0..100_000 {
            v = if i % 2 == 0 {
                Value::Array(vec![v])
            } else {
                // Not `json!`: it would copy `v` through `to_value`, recursively.
                Value::Object(Map::from_iter([("k".to_owned(), v)]))
            };
        }
        let out = r.redact_value("t", &v);
        drop_iteratively(v);
        let s = text_of(&out);
        assert!(!s.contains(secret));
        assert!(s.contains(REDACTED));
        assert_eq!(
            toolgate_engine::json::value_depth(&out, 1000),
            DEFAULT_MAX_DEPTH
        );

        let deep_text = "[".repeat(100_000) + &"]".repeat(100_000);
        assert_eq!(r.redact_text(&deep_text), REDACTED);
    }

    #[test]
    fn r33_truncate_at_a_multibyte_boundary() {
        let r = Redactor::builder().max_text_bytes(5).build().unwrap();
        // "aé€" is 1 + 2 + 3 bytes; 5 falls inside "€".
        assert_eq!(r.truncate("aé€z"), "aé…[truncated 4 bytes]");
        assert_eq!(r.truncate("short"), "short");
        assert_eq!(r.truncate("€€"), "€…[truncated 3 bytes]");
        let r = Redactor::builder().max_text_bytes(2).build().unwrap();
        assert_eq!(r.truncate("€"), "…[truncated 3 bytes]");
        assert_eq!(Redactor::default().max_text_bytes(), DEFAULT_MAX_TEXT_BYTES);
        let r = Redactor::builder().max_text_bytes(12).build().unwrap();
        let out = r.redact_and_truncate("x Bearer abcdefghijklmnop y");
        assert!(!out.contains("abcdef"), "{out}");
        assert!(out.starts_with("x Bearer [RE"), "{out}");
    }

    #[test]
    fn r33_from_settings() {
        let settings = RedactionSettings {
            keys: vec!["ssn".into()],
            patterns: vec![r"EMP-\d+".into()],
            pointers: vec![("hr__get".into(), "/salary".into())],
            max_text_bytes: Some(10),
            ..RedactionSettings::default()
        };
        let r = RedactorBuilder::from_settings(&settings).build().unwrap();
        assert_eq!(
            r.redact_value("hr__get", &json!({"ssn": 1, "salary": 2, "id": "EMP-9"})),
            json!({"ssn": REDACTED, "salary": REDACTED, "id": REDACTED})
        );
        assert_eq!(r.max_text_bytes(), 10);
    }
}
