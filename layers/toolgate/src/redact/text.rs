//! Scanning text: every text rule over a string, each match's secret span replaced, and the
//! value after a secret key found (module docs, rules 3 and 4).

use std::borrow::Cow;

use regex::Regex;

use super::patterns::{Shape, TextRule};
use super::{REDACTED, Redactor};

/// Auth scheme words kept in front of a header value (`Authorization: Basic [REDACTED]`).
const SCHEMES: &[&str] = &["bearer", "basic", "digest", "token", "negotiate", "ntlm"];

impl Redactor {
    /// Every text rule over `text`, in order.
    pub(super) fn scan_text(&self, text: &str) -> String {
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
