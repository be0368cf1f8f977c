//! The text rules: the built-in value patterns and the key/value shapes, compiled (module
//! docs, rules 3 and 4). Scanning text with them is `text`'s.

use std::sync::LazyLock;

use regex::Regex;

/// The built-in value patterns. A group named `secret` is replaced if the pattern has one;
/// otherwise the whole match is.
pub(super) const BUILTIN_PATTERNS: &[&str] = &[
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
/// key names a secret, the value that follows is found by `text::value_span` and replaced.
/// Matches stay short and the regex only matches keys that contain a key-name rule, so a
/// scan is linear in the text and fast where no secret key appears.
pub(super) const SHAPES: &[Shape] = &[Shape::Quoted, Shape::Assigned, Shape::Header];

/// The regex of `shape`: for keys containing one of `rules` (an alternation), or for any
/// key when `rules` is `None`.
pub(super) fn key_value_regex(shape: Shape, rules: Option<&str>) -> String {
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
pub(super) fn key_value_rules(keys: &[String]) -> Vec<TextRule> {
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

#[derive(Debug, Clone)]
pub(super) enum TextRule {
    /// Replace group `secret` if the pattern has one, else the whole match.
    Pattern { re: Regex, group: bool },
    /// Replace the value after a match when group `key` names a secret.
    KeyValue(Regex, Shape),
    /// A built-in that did not compile: fail closed by redacting every string whole.
    Everything,
}

/// How the value after a key is delimited in text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// After `"key":` — a quoted string, a bracketed value, or a bare word.
    Quoted,
    /// After `key=` — a quoted string, a bracketed value, or up to `&`, `;`, `,` or a space.
    Assigned,
    /// After `Key:` — a quoted string, a bracketed value, or the rest of the line.
    Header,
}

/// The built-in patterns, compiled once; one that does not compile redacts everything.
pub(super) static BUILTIN: LazyLock<Vec<TextRule>> = LazyLock::new(|| {
    BUILTIN_PATTERNS
        .iter()
        .map(|p| match Regex::new(p) {
            Ok(re) => pattern_rule(re),
            Err(_) => TextRule::Everything,
        })
        .collect()
});

pub(super) fn pattern_rule(re: Regex) -> TextRule {
    let group = re.capture_names().any(|n| n == Some("secret"));
    TextRule::Pattern { re, group }
}
