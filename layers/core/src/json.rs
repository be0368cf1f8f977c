//! Bounded JSON helpers: a parser that refuses duplicate keys, and input measures that
//! never recurse (R36, SPEC §8).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// A JSON value parsed with duplicate object keys refused (SPEC §8: such files are malformed).
#[derive(Debug)]
#[doc(hidden)]
pub struct Strict(pub Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number that is not finite"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format_args!("duplicate key `{key}`")));
            }
            let Strict(v) = map.next_value()?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

/// Why JSON text did not parse ([`parse_strict_json`],
/// [`crate::number::parse_with_literals`]): malformed text, a duplicate key, nesting past
/// the recursion limit. Its `Display` is the parser's message, unchanged.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ParseError(serde_json::Error);

impl ParseError {
    /// Whether the text repeats a key within one object (SPEC §8).
    pub fn is_duplicate_key(&self) -> bool {
        self.0.to_string().contains("duplicate key")
    }
}

impl From<serde_json::Error> for ParseError {
    fn from(e: serde_json::Error) -> Self {
        ParseError(e)
    }
}

/// Parses JSON text, refusing duplicate keys. Nesting is bounded by serde_json's own
/// recursion limit (128), so this never overflows the stack.
pub fn parse_strict_json(text: &str) -> Result<Value, ParseError> {
    serde_json::from_str::<Strict>(text)
        .map(|s| s.0)
        .map_err(ParseError)
}

/// The nesting depth of JSON text without building it (SPEC §8: each object or array adds
/// one level, scalars none). Counts brackets outside strings; never recurses, so an input
/// nested past any parser's recursion limit is still measured.
pub fn raw_depth(text: &str) -> usize {
    let mut depth = 0usize;
    let mut max = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for b in text.bytes() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                max = max.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// The nesting depth of a value (SPEC §8), measured with an explicit stack, stopping as
/// soon as `limit` is exceeded (returns `limit + 1` then).
pub fn value_depth(value: &Value, limit: usize) -> usize {
    fn level_of(v: &Value) -> bool {
        v.is_array() || v.is_object()
    }
    if !level_of(value) {
        return 0;
    }
    let mut max = 0usize;
    let mut stack: Vec<(&Value, usize)> = vec![(value, 1)];
    while let Some((v, level)) = stack.pop() {
        max = max.max(level);
        if max > limit {
            return limit.saturating_add(1);
        }
        match v {
            Value::Array(items) => {
                stack.extend(items.iter().filter(|c| level_of(c)).map(|c| (c, level + 1)))
            }
            Value::Object(map) => {
                stack.extend(map.values().filter(|c| level_of(c)).map(|c| (c, level + 1)))
            }
            _ => {}
        }
    }
    max
}

/// The compact length of a JSON string literal: quotes plus each byte, escaped exactly as
/// serde_json escapes (`"` and `\\` and `\b \t \n \f \r` take two bytes, other control
/// characters six, everything else one).
fn string_len(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | 0x08 | 0x09 | 0x0a | 0x0c | 0x0d => 2,
            0x00..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

/// Counts what a number's `Display` writes (the same text serde_json serialises).
struct CountWriter(usize);

impl fmt::Write for CountWriter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

#[doc(hidden)]
pub fn number_len(n: &serde_json::Number) -> usize {
    use fmt::Write as _;
    // Integers (nearly every number a tool call carries): count the digits. A negative
    // integer is `-` and its magnitude's digits; `-0` and floats take `Display`, whatever
    // serde_json's features make it write.
    if let Some(u) = n.as_u64() {
        return digits(u);
    }
    if let Some(i) = n.as_i64()
        && i < 0
    {
        return 1 + digits(i.unsigned_abs());
    }
    let mut w = CountWriter(0);
    let _ = write!(w, "{n}");
    w.0
}

/// Decimal digits of `u` (`0` has one).
fn digits(u: u64) -> usize {
    u.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// What one walk of an input found: whether it nests past the depth limit, and whether
/// its compact serialisation fits the length limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measure {
    /// The value nests deeper than the depth limit (SPEC §8).
    pub too_deep: bool,
    /// The compact serialisation is at most the length limit (meaningful only when the
    /// value is not too deep).
    pub within: bool,
}

/// Depth limits up to this are measured by one recursive walk (its recursion is bounded by
/// the limit); a larger limit takes the explicit-stack walks, which never recurse.
const RECURSIVE_DEPTH: usize = 256;

/// The input-bounds walk (R36): [`value_depth`] against `depth_limit` and
/// [`compact_len_within`] against `len_limit` in **one** walk of the value's nodes, with
/// no heap allocation and without reading strings byte by byte: a string counts as its
/// bytes plus quotes, with up to five more per byte set aside for escapes; only when that
/// bound passes the limit are the escapes counted exactly ([`compact_len_within`]).
/// Equal to the two separate walks.
pub fn measure(value: &Value, depth_limit: usize, len_limit: usize) -> Measure {
    struct Walk {
        depth_limit: usize,
        len_limit: usize,
        /// The length with no string escaped (a lower bound).
        len: usize,
        /// What escapes could add at most (five bytes per string byte: `\u001f`).
        slack: usize,
    }
    impl Walk {
        fn string(&mut self, s: &str) {
            self.len = self.len.saturating_add(2 + s.len());
            self.slack = self.slack.saturating_add(s.len().saturating_mul(5));
        }
    }
    /// `Err(true)`: too deep; `Err(false)`: too long (depth not known past that point).
    fn walk(w: &mut Walk, v: &Value, level: usize) -> Result<(), bool> {
        match v {
            Value::Null | Value::Bool(true) => w.len = w.len.saturating_add(4),
            Value::Bool(false) => w.len = w.len.saturating_add(5),
            Value::Number(n) => w.len = w.len.saturating_add(number_len(n)),
            Value::String(s) => w.string(s),
            Value::Array(items) => {
                if level + 1 > w.depth_limit {
                    return Err(true);
                }
                w.len = w.len.saturating_add(2 + items.len().saturating_sub(1));
                for item in items {
                    walk(w, item, level + 1)?;
                }
            }
            Value::Object(map) => {
                if level + 1 > w.depth_limit {
                    return Err(true);
                }
                w.len = w
                    .len
                    .saturating_add(2 + map.len().saturating_sub(1) + map.len());
                for (k, item) in map {
                    w.string(k);
                    walk(w, item, level + 1)?;
                }
            }
        }
        if w.len > w.len_limit {
            return Err(false);
        }
        Ok(())
    }
    let exact = |too_deep: bool| Measure {
        too_deep,
        within: !too_deep && compact_len_within(value, len_limit).is_some(),
    };
    if depth_limit > RECURSIVE_DEPTH {
        return exact(value_depth(value, depth_limit) > depth_limit);
    }
    let mut w = Walk {
        depth_limit,
        len_limit,
        len: 0,
        slack: 0,
    };
    match walk(&mut w, value, 0) {
        // Fits even if every string byte were escaped the longest way.
        Ok(()) if w.len.saturating_add(w.slack) <= len_limit => Measure {
            too_deep: false,
            within: true,
        },
        // Near the limit: count the escapes.
        Ok(()) => exact(false),
        Err(true) => Measure {
            too_deep: true,
            within: false,
        },
        // Past the length limit before the walk saw all of the value: whether it is also
        // too deep (which SPEC §8 reports first) takes the depth walk.
        Err(false) => Measure {
            too_deep: value_depth(value, depth_limit) > depth_limit,
            within: false,
        },
    }
}

/// The byte length of the compact UTF-8 serialisation (SPEC §8), or `None` once it is past
/// `limit`. Computed in one walk with an explicit stack, without serialising: nothing is
/// written and nothing recurses, whatever the value's depth.
pub fn compact_len_within(value: &Value, limit: usize) -> Option<usize> {
    let mut total = 0usize;
    let mut stack: Vec<&Value> = vec![value];
    while let Some(v) = stack.pop() {
        total = total.saturating_add(match v {
            Value::Null => 4,
            Value::Bool(true) => 4,
            Value::Bool(false) => 5,
            Value::Number(n) => number_len(n),
            Value::String(s) => string_len(s),
            Value::Array(items) => {
                stack.extend(items.iter());
                2 + items.len().saturating_sub(1)
            }
            Value::Object(map) => {
                stack.extend(map.values());
                2 + map.len().saturating_sub(1)
                    + map.keys().map(|k| string_len(k) + 1).sum::<usize>()
            }
        });
        if total > limit {
            return None;
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn duplicate_keys_are_malformed() {
        assert!(parse_strict_json(r#"{"a": 1, "a": 2}"#).is_err());
        assert!(parse_strict_json(r#"{"a": {"b": 1, "b": 1}}"#).is_err());
        assert_eq!(
            parse_strict_json(r#"{"a": [1, {"b": null}]}"#).unwrap(),
            json!({"a": [1, {"b": null}]})
        );
    }

    #[test]
    fn deep_text_is_an_error_not_a_crash() {
        let deep = "[".repeat(100_000) + &"]".repeat(100_000);
        assert!(parse_strict_json(&deep).is_err());
    }

    #[test]
    fn r36_depth_counts_containers_only() {
        assert_eq!(raw_depth("{}"), 1);
        assert_eq!(raw_depth(r#"{"a": [1]}"#), 2);
        assert_eq!(
            raw_depth(r#"{"a": "[[[{{"}"#),
            1,
            "brackets in strings do not count"
        );
        assert_eq!(
            raw_depth(r#"{"a": "\"[["}"#),
            1,
            "escaped quotes stay in the string"
        );
        assert_eq!(raw_depth("5"), 0);
        assert_eq!(value_depth(&json!({}), 64), 1);
        assert_eq!(value_depth(&json!({"a": [1]}), 64), 2);
        assert_eq!(value_depth(&json!(5), 64), 0);
        let deep = "[".repeat(100_000) + &"]".repeat(100_000);
        assert_eq!(raw_depth(&deep), 100_000);
    }

    #[test]
    fn r36_value_depth_stops_past_the_limit() {
        let v = json!([[[[[[1]]]]]]);
        assert_eq!(value_depth(&v, 64), 6);
        assert_eq!(value_depth(&v, 3), 4);
    }

    #[test]
    fn r36_compact_len_equals_serde_jsons_compact_output() {
        for v in [
            json!({}),
            json!([]),
            json!(null),
            json!({"a": [1, 2.5, -3, 1e300, 0.1, u64::MAX, i64::MIN], "b": {"c": null, "d": true, "e": false}}),
            json!({"esc": "quote\" back\\ nl\n tab\t cr\r bs\u{8} ff\u{c} nul\u{0} us\u{1f} del\u{7f}"}),
            json!({"ünï\"cödé": "日本語 🎉", "": ""}),
            json!([[[[]]], {"x": [{}]}]),
            json!(100.0),
        ] {
            let exact = serde_json::to_string(&v).unwrap().len();
            assert_eq!(compact_len_within(&v, usize::MAX), Some(exact), "{v}");
        }
    }

    #[test]
    fn r36_compact_len() {
        let v = json!({"text": "hello", "n": [[1]]});
        let exact = serde_json::to_string(&v).unwrap().len();
        assert_eq!(compact_len_within(&v, 1 << 20), Some(exact));
        assert_eq!(compact_len_within(&v, exact), Some(exact));
        assert_eq!(compact_len_within(&v, exact - 1), None);
    }

    #[test]
    fn r36_number_len_counts_what_serde_json_writes() {
        for n in [
            json!(0),
            json!(9),
            json!(10),
            json!(-1),
            json!(-10),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(i64::MAX),
            json!(0.5),
            json!(-0.0),
            json!(1e300),
            json!(100.0),
        ] {
            let Value::Number(num) = &n else {
                unreachable!()
            };
            assert_eq!(number_len(num), n.to_string().len(), "{n}");
        }
    }

    fn arb_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            "[\\PC\\u{0}-\\u{1f}\"\\\\]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(8, 48, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z\"]{0,3}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(4096))]
        /// The one-walk measure equals the two walks it replaces (R36, SPEC §8): the depth
        /// verdict always, the length whenever the value is not too deep.
        #[test]
        fn r36_one_walk_measure_equals_the_depth_and_length_walks(
            v in arb_value(),
            depth_limit in 0usize..10,
            len_limit in 0usize..400,
        ) {
            let m = measure(&v, depth_limit, len_limit);
            let too_deep = value_depth(&v, depth_limit) > depth_limit;
            proptest::prop_assert_eq!(m.too_deep, too_deep);
            if !too_deep {
                let fits = serde_json::to_string(&v).unwrap().len() <= len_limit;
                proptest::prop_assert_eq!(m.within, fits);
                proptest::prop_assert_eq!(m.within, compact_len_within(&v, len_limit).is_some());
            }
        }
    }

    #[test]
    fn r36_escapes_near_the_limit_are_counted_exactly() {
        // Ten control characters, six bytes each escaped: `{"a":"…"}` is 68 bytes.
        let v = json!({"a": "\u{1}".repeat(10)});
        let exact = serde_json::to_string(&v).unwrap().len();
        assert_eq!(exact, 68);
        assert!(measure(&v, 64, exact).within);
        assert!(!measure(&v, 64, exact - 1).within);
        let quotes = json!({"a": "\"".repeat(10)});
        let exact = serde_json::to_string(&quotes).unwrap().len();
        assert!(measure(&quotes, 64, exact).within);
        assert!(!measure(&quotes, 64, exact - 1).within);
    }

    #[test]
    fn r36_measure_past_the_recursive_limit_takes_the_explicit_walks() {
        let deep = serde_json::from_str::<Value>(&("[".repeat(100) + &"]".repeat(100))).unwrap();
        let m = measure(&deep, 1000, 1 << 20);
        assert_eq!(
            m,
            Measure {
                too_deep: false,
                within: true
            }
        );
        assert!(measure(&deep, 1000, 200).within);
        assert!(!measure(&deep, 1000, 199).within);
        assert!(measure(&deep, 99, 1 << 20).too_deep);
        assert!(
            measure(&deep, 99, 5).too_deep,
            "depth is reported before length"
        );
        assert!(!measure(&deep, 100, 5).within);
    }
}
