//! [`RedactorBuilder`]: the rules a redactor is built from, checked and compiled once.

use std::sync::{Arc, LazyLock};

use regex::RegexBuilder;
use toolgate_engine::ConfigErrors;
use toolgate_engine::policy::DEFAULT_REGEX_SIZE_LIMIT;
use toolgate_engine::recording::RedactionSettings;

use super::keys::normalise;
use super::patterns::{BUILTIN, key_value_rules, pattern_rule};
use super::pointer::{PointerRule, parse_pointer};
use super::{DEFAULT_KEYS, DEFAULT_MAX_DEPTH, DEFAULT_MAX_TEXT_BYTES, Inner, Redactor};

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

/// The default redactor, compiled once per process.
pub(super) static DEFAULT: LazyLock<Redactor> = LazyLock::new(|| Redactor {
    inner: Arc::new(compile(&RedactorBuilder::default()).0),
});

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
