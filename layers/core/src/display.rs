//! What a person reads: text with every hidden character shown (approval-page.md).
//!
//! A right-to-left override (U+202E) or a zero-width space (U+200B) in a call's input, a
//! tool's name, an agent's name or a reason makes a person read another value than the one
//! that is sent: `"amount": "100⁮0"` may display as `"amount": "1000"` and be `100` plus an
//! override. Every surface that shows such a value to a person — the approval page,
//! `toolgate inbox show`, the terminal prompt, the elicitation text — passes it through
//! [`visible`] (or [`visible_json`] for an input), which replaces each hidden character with
//! a marked escape, `⟦U+202E⟧`.
//!
//! Hidden ([`is_hidden`]) are:
//! - the C0 and C1 controls (U+0000–U+001F, U+007F–U+009F), newline and tab included: in a
//!   name or a reason a line break could fake a line of the prompt (an input's own line
//!   breaks are escaped by JSON, see [`visible_json`]);
//! - every format character (Unicode general category `Cf`): the bidi controls
//!   (U+061C, U+200E–U+200F, U+202A–U+202E, U+2066–U+2069), the zero-width characters
//!   (U+200B–U+200D, U+2060, U+FEFF), the soft hyphen, the invisible operators, the tag
//!   characters (U+E0000–U+E007F) and the rest of the category;
//! - the line and paragraph separators (U+2028, U+2029);
//! - the variation selectors (U+180B–U+180F, U+FE00–U+FE0F, U+E0100–U+E01EF) and the other
//!   characters that render as nothing (U+034F, U+115F, U+1160, U+17B4, U+17B5, U+3164,
//!   U+FFA0): two values differing only by one of them look the same. An emoji's
//!   presentation selector is therefore shown too (`❤⟦U+FE0F⟧`), a small price for never
//!   confusing two values;
//!
//! The marker's own opening bracket `⟦` (U+27E6) is shown marked too, so that a value cannot
//! imitate a marker: every `⟦` in the output starts one, and no two values look the same.
//! Everything else, plain text in any script included, is returned unchanged (and borrowed).
//!
//! ```
//! use toolgate_core::display::{visible, visible_json};
//! assert_eq!(visible("plain text, ünïcode 日本"), "plain text, ünïcode 日本");
//! assert_eq!(visible("100\u{202E}0"), "100⟦U+202E⟧0");
//! assert_eq!(visible("ad\u{200B}min"), "ad⟦U+200B⟧min");
//! let input = serde_json::json!({"to": "alice\u{2066}"});
//! assert_eq!(visible_json(&input), "{\n  \"to\": \"alice⟦U+2066⟧\"\n}");
//! ```

use std::borrow::Cow;
use std::fmt::Write as _;

use serde_json::Value;

/// The opening bracket of a marker; a `⟦` in a value is itself shown marked.
pub const MARK_OPEN: char = '⟦';
/// The closing bracket of a marker.
pub const MARK_CLOSE: char = '⟧';

/// Ranges (inclusive) of the general category `Cf` (format characters), Unicode 16.
const FORMAT: &[(u32, u32)] = &[
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
];

/// Other characters that render as nothing, or break a line: separators, variation
/// selectors, fillers.
const INVISIBLE: &[(u32, u32)] = &[
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x2028, 0x2029),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFFA0, 0xFFA0),
    (0xE0000, 0xE00FF),
    (0xE0100, 0xE01EF),
];

fn in_ranges(c: u32, ranges: &[(u32, u32)]) -> bool {
    ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&c))
}

/// Whether `c` is hidden from a person reading it, and so shown marked by [`visible`]: a
/// control, a format character (bidi controls, zero-width characters, tags), a separator,
/// a variation selector or another character that renders as nothing.
///
/// ```
/// use toolgate_core::display::is_hidden;
/// assert!(is_hidden('\u{202E}') && is_hidden('\u{FEFF}') && is_hidden('\n'));
/// assert!(!is_hidden('a') && !is_hidden(' ') && !is_hidden('é'));
/// ```
pub fn is_hidden(c: char) -> bool {
    let n = u32::from(c);
    n < 0x20 || (0x7F..=0x9F).contains(&n) || in_ranges(n, FORMAT) || in_ranges(n, INVISIBLE)
}

fn mark(out: &mut String, c: char) {
    let _ = write!(out, "{MARK_OPEN}U+{:04X}{MARK_CLOSE}", u32::from(c));
}

fn marked(s: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    let escape = |c: char| (is_hidden(c) || c == MARK_OPEN) && !keep(c);
    if !s.chars().any(escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if escape(c) {
            mark(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `s` with every hidden character ([`is_hidden`]), and every `⟦`, replaced by its marked
/// escape (`⟦U+202E⟧`); borrowed, unchanged, when it has none. For one value a person reads: a
/// tool's name, an agent, a reason, an id.
///
/// ```
/// use toolgate_core::display::visible;
/// assert_eq!(visible("evil\u{202E}txt.exe"), "evil⟦U+202E⟧txt.exe");
/// assert_eq!(visible("line\nbreak"), "line⟦U+000A⟧break");
/// assert_eq!(visible("⟦U+202E⟧"), "⟦U+27E6⟧U+202E⟧", "a value never imitates a marker");
/// ```
pub fn visible(s: &str) -> Cow<'_, str> {
    marked(s, |_| false)
}

/// A JSON value pretty-printed for a person, with every hidden character in its strings
/// (keys included) marked as by [`visible`]. JSON escapes the C0 controls inside strings
/// already (`\n`, `\u0000`), so the line breaks left are the layout's own.
///
/// ```
/// use toolgate_core::display::visible_json;
/// let v = serde_json::json!({"note": "a\u{200B}b", "n": 1});
/// assert_eq!(visible_json(&v), "{\n  \"n\": 1,\n  \"note\": \"a⟦U+200B⟧b\"\n}");
/// ```
pub fn visible_json(v: &Value) -> String {
    visible_layout(serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string()))
}

/// Pretty-printed JSON text (one a value's printer laid out over lines, such as one with
/// its numbers as written) for a person: every hidden character marked as by [`visible`],
/// the layout's line breaks kept.
///
/// ```
/// use toolgate_core::display::visible_layout;
/// let text = String::from("{\n  \"n\": 123456789012345678901234,\n  \"s\": \"a\u{200B}b\"\n}");
/// assert_eq!(visible_layout(text), "{\n  \"n\": 123456789012345678901234,\n  \"s\": \"a⟦U+200B⟧b\"\n}");
/// ```
pub fn visible_layout(text: String) -> String {
    match marked(&text, |c| c == '\n') {
        Cow::Borrowed(_) => text,
        Cow::Owned(s) => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Reverses [`visible`]: every marker back to its character.
    fn unmark(s: &str) -> Option<String> {
        let mut out = String::new();
        let mut rest = s;
        while let Some(at) = rest.find(MARK_OPEN) {
            out.push_str(rest.get(..at)?);
            let after = rest.get(at + MARK_OPEN.len_utf8()..)?;
            let end = after.find(MARK_CLOSE)?;
            let hex = after.get(..end)?.strip_prefix("U+")?;
            out.push(char::from_u32(u32::from_str_radix(hex, 16).ok()?)?);
            rest = after.get(end + MARK_CLOSE.len_utf8()..)?;
        }
        out.push_str(rest);
        Some(out)
    }

    #[test]
    fn issue20_every_named_hidden_character_is_marked() {
        let named = [
            0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069, 0x200E, 0x200F,
            0x061C, 0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF, 0x00AD, 0xE0001, 0xE0041, 0xE007F,
            0xFE0F, 0xE0100, 0x2028, 0x2029, 0x0000, 0x0007, 0x001B, 0x007F, 0x0085, 0x009B,
            0x000A, 0x0009,
        ];
        for n in named {
            let c = char::from_u32(n).unwrap();
            assert!(is_hidden(c), "U+{n:04X} is not hidden");
            let raw = format!("a{c}b");
            let shown = visible(&raw);
            assert_eq!(shown, format!("a⟦U+{n:04X}⟧b"));
        }
    }

    #[test]
    fn issue20_json_keeps_its_layout_and_marks_keys_and_values() {
        let v = serde_json::json!({"k\u{202E}": ["x\u{200D}", "line\nbreak", "\u{1b}[31m"]});
        let shown = visible_json(&v);
        assert_eq!(
            shown,
            "{\n  \"k⟦U+202E⟧\": [\n    \"x⟦U+200D⟧\",\n    \"line\\nbreak\",\n    \"\\u001b[31m\"\n  ]\n}"
        );
    }

    fn any_text() -> impl Strategy<Value = String> {
        // Mostly the characters that matter, mixed with arbitrary ones.
        let interesting = prop::sample::select(vec![
            '\u{202E}',
            '\u{202A}',
            '\u{2066}',
            '\u{2069}',
            '\u{200B}',
            '\u{200D}',
            '\u{2060}',
            '\u{FEFF}',
            '\u{061C}',
            '\u{200E}',
            '\u{E0041}',
            '\u{FE0F}',
            '\u{85}',
            '\u{1}',
            '\n',
            '⟦',
            '⟧',
            'U',
            '+',
            'a',
            '0',
            ' ',
            'é',
            '日',
        ]);
        prop::collection::vec(prop_oneof![interesting, any::<char>()], 0..40)
            .prop_map(|v| v.into_iter().collect())
    }

    proptest! {
        #[test]
        fn issue20_visible_output_has_no_hidden_character_and_tells_inputs_apart(s in any_text()) {
            let shown = visible(&s);
            for c in shown.chars() {
                prop_assert!(!is_hidden(c), "U+{:04X} left in {shown:?}", u32::from(c));
            }
            // Every `⟦` left starts a marker, and the markers undo exactly: two different
            // values never look the same.
            prop_assert_eq!(unmark(&shown), Some(s.clone()));
        }

        #[test]
        fn issue20_plain_text_is_unchanged(s in "[a-zA-Z0-9 _./:,;!?()\\-éüß日本語αβγ]{0,60}") {
            prop_assert!(matches!(visible(&s), Cow::Borrowed(_)));
            prop_assert_eq!(visible(&s), s.as_str());
        }

        #[test]
        fn issue20_visible_json_has_no_hidden_character_but_its_line_breaks(s in any_text()) {
            let shown = visible_json(&serde_json::json!({ s.clone(): [s.clone()] }));
            for c in shown.chars() {
                prop_assert!(!is_hidden(c) || c == '\n');
            }
            let back: Value = serde_json::from_str(&unmark(&shown).unwrap()).unwrap();
            prop_assert_eq!(back, serde_json::json!({ s.clone(): [s] }));
        }
    }
}
