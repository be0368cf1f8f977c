//! Numbers as written: compared exactly in `when` tests (R20) and counted as written in the
//! input size bound (R36, SPEC §8).
//!
//! A `serde_json::Value` cannot hold every JSON number: an integer literal past 64 bits
//! (`18446744073709551617`) becomes the nearest double, and any literal is re-spelled the
//! way serde_json writes it (`10000000000000000000000` becomes `1e22`). Turning on
//! serde_json's `arbitrary_precision` would change `Value` for every crate in a build
//! (features unify), so the engine keeps the literals beside the value instead:
//! [`NumberLiterals`] records, by position, every number whose text the value does not
//! reproduce, and the engine reads those positions from it.
//!
//! # Semantics
//!
//! - An integer literal (no fraction, no exponent) is an integer of any size, compared
//!   digit by digit with other integers and exactly with doubles.
//! - A literal with a fraction or an exponent is the nearest double, as every JSON parser
//!   reads it; doubles compare as doubles, and with integers exactly.
//! - A number the value holds (`u64`, `i64`, `f64`) with no literal recorded is that number:
//!   a call built from a `Value` carries the rounded double, which is also what its tool is
//!   sent.
//! - The input size bound counts each number as written.
//!
//! Text inputs (the CLI's CALL, `toolgate_engine::policy::Policy::from_json_str`,
//! JSON configuration) get their literals automatically. A host that parses a model's
//! arguments itself keeps them with [`parse_with_literals`] and puts the [`NumberLiterals`]
//! in the call's extensions, where `toolgate_engine::CallView::of` finds them:
//!
//! ```
//! use serde_json::json;
//! use toolgate_core::{AgentRef, ToolCall};
//! use toolgate_core::number::parse_with_literals;
//!
//! let (input, literals) = parse_with_literals(r#"{"amount": 18446744073709551617}"#).unwrap();
//! assert_eq!(input, json!({"amount": 18446744073709551616.0}), "the value rounds");
//! assert!(!literals.is_empty(), "the literal is kept");
//! let mut call = ToolCall::new(AgentRef::profile("support"), "refund", input);
//! call.extensions.insert(literals);
//! ```
//!
//! A literal only applies where the value still holds the number it was read as: a value
//! changed after parsing falls back to what it holds.
//!
//! TOML and YAML configurations cannot carry such integers: their parsers refuse them, so
//! such a file is malformed, never silently rounded. A policy built from a `Value`
//! (`toolgate_engine::policy::Policy::from_json`) has the value's numbers;
//! `toolgate_engine::policy::Policy::to_json_text` writes a policy back with
//! its literals (what a store keeps).

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::OnceLock;

use crate::ToolCall;
use serde_json::{Number, Value};

mod exact;
mod scan;

#[doc(hidden)]
pub use exact::Exact;
use scan::Scanner;

/// Every number literal of some JSON text whose value does not reproduce it, by position.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NumberLiterals {
    root: Option<Node>,
}

/// One position in the literal tree.
#[derive(Debug, Clone, PartialEq)]
#[doc(hidden)]
pub enum Node {
    /// A number as written, and the double the parser read it as (to tell a changed value).
    Leaf { text: Box<str>, read: f64 },
    /// Members of an object that hold literals.
    Object(HashMap<String, Node>),
    /// Items of an array that hold literals.
    Array(HashMap<usize, Node>),
}

/// A position in the literal tree, or none.
#[doc(hidden)]
pub type Lit<'a> = Option<&'a Node>;

/// The literal tree below an object member.
#[doc(hidden)]
pub fn member<'a>(lit: Lit<'a>, key: &str) -> Lit<'a> {
    match lit {
        Some(Node::Object(m)) => m.get(key),
        _ => None,
    }
}

/// The literal tree below an array item.
#[doc(hidden)]
pub fn item(lit: Lit<'_>, index: usize) -> Lit<'_> {
    match lit {
        Some(Node::Array(m)) => m.get(&index),
        _ => None,
    }
}

impl NumberLiterals {
    /// No literals: every number is what the value holds.
    pub fn none() -> &'static NumberLiterals {
        static NONE: OnceLock<NumberLiterals> = OnceLock::new();
        NONE.get_or_init(NumberLiterals::default)
    }

    /// The literals a call carries in its extensions, or [`NumberLiterals::none`].
    pub fn of(call: &ToolCall) -> &NumberLiterals {
        call.extensions
            .get::<NumberLiterals>()
            .unwrap_or_else(|| NumberLiterals::none())
    }

    /// Whether no number needs its literal.
    pub fn is_empty(&self) -> bool {
        self.root.is_none()
    }

    #[doc(hidden)]
    pub fn root(&self) -> Lit<'_> {
        self.root.as_ref()
    }

    /// Scans JSON text that serde_json has already parsed (last duplicate key wins, as it
    /// does) for number literals the parsed value does not reproduce. Never recurses; stops
    /// quietly at anything that is not JSON (the literals found so far still only apply
    /// where the value holds what they were read as).
    pub fn scan(text: &str) -> Self {
        Scanner::default().run(text)
    }

    /// The first integer literal the value holds only rounded (one past 64 bits, read as
    /// the nearest double), if any: what a host that can pass on only the value — an MCP
    /// client sending `serde_json::Value`s — could not send as written (R20, R26).
    ///
    /// ```
    /// use toolgate_core::number::parse_with_literals;
    /// let (v, l) = parse_with_literals(r#"{"a": 1e2, "b": [123456789012345678901234]}"#).unwrap();
    /// assert_eq!(l.first_inexact_integer(&v), Some("123456789012345678901234"));
    /// let (v, l) = parse_with_literals(r#"{"a": 1e2, "b": 18446744073709551615, "c": 1.50}"#).unwrap();
    /// assert_eq!(l.first_inexact_integer(&v), None, "re-spelled, but the same number");
    /// ```
    pub fn first_inexact_integer(&self, value: &Value) -> Option<&str> {
        let mut stack: Vec<(&Node, &Value)> = vec![(self.root.as_ref()?, value)];
        while let Some((node, v)) = stack.pop() {
            match (node, v) {
                (Node::Leaf { text, read }, Value::Number(n)) if holds(n, *read) => {
                    // An integer literal is sent as written when the value holds it as a
                    // 64-bit integer, or as a double that is that integer exactly (`-0`).
                    let integer = !text.contains(['.', 'e', 'E']);
                    let as_int = n
                        .as_i64()
                        .map(i128::from)
                        .or_else(|| n.as_u64().map(i128::from));
                    let exact = match (as_int, text.parse::<i128>()) {
                        (Some(held), Ok(written)) => held == written,
                        _ => n.as_f64().is_some_and(|f| {
                            f.abs() <= 9_007_199_254_740_992.0 && text.parse::<f64>() == Ok(f)
                        }),
                    };
                    if integer && !exact {
                        return Some(text);
                    }
                }
                (Node::Object(m), Value::Object(o)) => {
                    stack.extend(m.iter().filter_map(|(k, c)| o.get(k).map(|cv| (c, cv))));
                }
                (Node::Array(m), Value::Array(a)) => {
                    stack.extend(m.iter().filter_map(|(i, c)| a.get(*i).map(|cv| (c, cv))));
                }
                _ => {}
            }
        }
        None
    }

    /// How many bytes the literals add to (or take from) the value's compact form.
    fn len_delta(&self, value: &Value) -> i128 {
        let mut delta = 0i128;
        let mut stack: Vec<(&Node, &Value)> = match &self.root {
            Some(n) => vec![(n, value)],
            None => return 0,
        };
        while let Some((node, v)) = stack.pop() {
            match (node, v) {
                (Node::Leaf { text, read }, Value::Number(n)) if holds(n, *read) => {
                    delta += len_i128(text.len()) - len_i128(crate::json::number_len(n));
                }
                (Node::Object(m), Value::Object(o)) => {
                    stack.extend(m.iter().filter_map(|(k, c)| o.get(k).map(|cv| (c, cv))));
                }
                (Node::Array(m), Value::Array(a)) => {
                    stack.extend(m.iter().filter_map(|(i, c)| a.get(*i).map(|cv| (c, cv))));
                }
                _ => {}
            }
        }
        delta
    }
}

fn len_i128(n: usize) -> i128 {
    i128::try_from(n).unwrap_or(i128::MAX)
}

/// Whether a value's number is still the one a literal was read as.
fn holds(n: &Number, read: f64) -> bool {
    n.as_f64().is_some_and(|f| f == read)
}

/// Writes a value as compact JSON text with every number as written. Recursion is bounded
/// by the value's depth, which serde_json's parser limits to 128 for the policies this
/// writes.
#[doc(hidden)]
pub fn write_text(out: &mut String, value: &Value, lit: Lit<'_>) {
    match value {
        Value::Number(n) => match lit {
            Some(Node::Leaf { text, read }) if holds(n, *read) => out.push_str(text),
            _ => out.push_str(&n.to_string()),
        },
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_text(out, v, item(lit, i));
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(k.as_str()).to_string());
                out.push(':');
                write_text(out, v, member(lit, k));
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A value as compact JSON text with every number as written where `literals` records it
/// (what a store or a printout keeps so that reading it back decides the same).
pub fn to_text(value: &Value, literals: &NumberLiterals) -> String {
    let mut out = String::new();
    write_text(&mut out, value, literals.root());
    out
}

/// [`to_text`] pretty-printed as `serde_json::to_string_pretty` lays a value out (two
/// spaces per level, `": "` between a key and its value), every number as written: what a
/// person reads of an input (`inbox show`, the approval page). Recursion is bounded by the
/// value's depth, which the input bounds limit (R36).
///
/// ```
/// use toolgate_core::number::{parse_with_literals, to_pretty_text};
///
/// let (v, lits) = parse_with_literals(r#"{"n":123456789012345678901234,"s":[1]}"#).unwrap();
/// assert_eq!(
///     to_pretty_text(&v, &lits),
///     "{\n  \"n\": 123456789012345678901234,\n  \"s\": [\n    1\n  ]\n}"
/// );
/// let plain = toolgate_core::number::NumberLiterals::none();
/// assert_eq!(to_pretty_text(&v, plain), serde_json::to_string_pretty(&v).unwrap());
/// ```
pub fn to_pretty_text(value: &Value, literals: &NumberLiterals) -> String {
    let mut out = String::new();
    write_pretty(&mut out, value, literals.root(), 0);
    out
}

fn indent(out: &mut String, level: usize) {
    for _ in 0..level {
        out.push_str("  ");
    }
}

fn write_pretty(out: &mut String, value: &Value, lit: Lit<'_>, level: usize) {
    match value {
        Value::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                out.push_str(if i > 0 { ",\n" } else { "\n" });
                indent(out, level + 1);
                write_pretty(out, v, item(lit, i), level + 1);
            }
            out.push('\n');
            indent(out, level);
            out.push(']');
        }
        Value::Object(map) if !map.is_empty() => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                out.push_str(if i > 0 { ",\n" } else { "\n" });
                indent(out, level + 1);
                out.push_str(&Value::from(k.as_str()).to_string());
                out.push_str(": ");
                write_pretty(out, v, member(lit, k), level + 1);
            }
            out.push('\n');
            indent(out, level);
            out.push('}');
        }
        other => write_text(out, other, lit),
    }
}

/// Whether two inputs are the same JSON value with every number as written (R20, R35): the
/// values are equal as serde_json compares them (so `1` and `1.0` differ), and every number
/// with a literal on either side is the same number exactly, so two integers past 64 bits
/// that round to one double (`123456789012345678901234`, `…235`) are two inputs. Never
/// recurses.
///
/// ```
/// use toolgate_core::number::{parse_with_literals, same_input};
///
/// let (a, la) = parse_with_literals(r#"{"n":123456789012345678901234}"#).unwrap();
/// let (b, lb) = parse_with_literals(r#"{"n":123456789012345678901235}"#).unwrap();
/// assert_eq!(a, b, "the values round to one double");
/// assert!(!same_input(&a, &la, &b, &lb));
/// assert!(same_input(&a, &la, &a, &la));
/// ```
pub fn same_input(a: &Value, la: &NumberLiterals, b: &Value, lb: &NumberLiterals) -> bool {
    if a != b {
        return false;
    }
    if la.is_empty() && lb.is_empty() {
        return true;
    }
    let mut stack: Vec<(&Value, Lit<'_>, &Value, Lit<'_>)> = vec![(a, la.root(), b, lb.root())];
    while let Some((x, lx, y, ly)) = stack.pop() {
        if lx.is_none() && ly.is_none() {
            continue;
        }
        match (x, y) {
            (Value::Number(m), Value::Number(n)) => match (Exact::of(m, lx), Exact::of(n, ly)) {
                (Some(p), Some(q)) if p.compare(&q) == Some(Ordering::Equal) => {}
                _ => return false,
            },
            (Value::Array(p), Value::Array(q)) => {
                for (i, (u, v)) in p.iter().zip(q).enumerate() {
                    stack.push((u, item(lx, i), v, item(ly, i)));
                }
            }
            (Value::Object(p), Value::Object(q)) => {
                for (k, u) in p {
                    if let Some(v) = q.get(k) {
                        stack.push((u, member(lx, k), v, member(ly, k)));
                    }
                }
            }
            _ => {}
        }
    }
    true
}

/// Parses JSON text into a value and the literals it does not reproduce. Nesting is
/// bounded by serde_json's recursion limit (128).
pub fn parse_with_literals(text: &str) -> Result<(Value, NumberLiterals), crate::json::ParseError> {
    let value: Value = serde_json::from_str(text)?;
    Ok((value, NumberLiterals::scan(text)))
}

/// The byte length of the compact serialisation with every number as written (SPEC §8),
/// or `None` once it is past `limit`. Never recurses.
pub fn compact_len_within(value: &Value, literals: &NumberLiterals, limit: usize) -> Option<usize> {
    let delta = literals.len_delta(value);
    // Literals shorter than serde_json's spelling make room: measure that far.
    let room = usize::try_from(delta.min(0).unsigned_abs()).unwrap_or(usize::MAX);
    let base = crate::json::compact_len_within(value, limit.saturating_add(room))?;
    let total = len_i128(base) + delta;
    usize::try_from(total).ok().filter(|t| *t <= limit)
}

/// The input-bounds walk with every number as written (SPEC §8): whether the value nests
/// past `depth_limit`, and whether its compact length (numbers as written) is within
/// `len_limit`. With no literals (the common case) one walk ([`crate::json::measure`]);
/// with literals, the depth walk and the exact length.
pub fn measure(
    value: &Value,
    literals: &NumberLiterals,
    depth_limit: usize,
    len_limit: usize,
) -> crate::json::Measure {
    if literals.is_empty() {
        return crate::json::measure(value, depth_limit, len_limit);
    }
    let too_deep = crate::json::value_depth(value, depth_limit) > depth_limit;
    crate::json::Measure {
        too_deep,
        within: !too_deep && compact_len_within(value, literals, len_limit).is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn exact(text: &str) -> Exact {
        let (v, lits) = parse_with_literals(&format!("[{text}]")).unwrap();
        let n = v[0].as_number().unwrap().clone();
        Exact::of(&n, item(lits.root(), 0)).unwrap()
    }

    #[test]
    fn r20_integers_of_any_size_compare_by_their_digits() {
        let lt = |a: &str, b: &str| {
            assert_eq!(
                exact(a).compare(&exact(b)),
                Some(Ordering::Less),
                "{a} < {b}"
            );
            assert_eq!(
                exact(b).compare(&exact(a)),
                Some(Ordering::Greater),
                "{b} > {a}"
            );
        };
        let eq = |a: &str, b: &str| {
            assert_eq!(
                exact(a).compare(&exact(b)),
                Some(Ordering::Equal),
                "{a} = {b}"
            )
        };
        lt("18446744073709551616", "18446744073709551617");
        lt("-18446744073709551617", "-18446744073709551616");
        lt(
            "170141183460469231731687303715884105727",
            "170141183460469231731687303715884105728",
        );
        lt("-170141183460469231731687303715884105729", "-5");
        lt(
            "99999999999999999999999999999999999999999",
            "100000000000000000000000000000000000000000",
        );
        lt(
            "-100000000000000000000000000000000000000000",
            "-99999999999999999999999999999999999999999",
        );
        eq("18446744073709551617", "18446744073709551617");
        eq("-0", "0");
        // Integers against doubles, exactly.
        lt("18446744073709551616.0", "18446744073709551617");
        eq("18446744073709551616.0", "18446744073709551616");
        eq("1e22", "10000000000000000000000");
        lt("10000000000000000000000", "10000000000000000000001");
        // The double nearest 1e40 is a little above 10^40.
        lt("10000000000000000000000000000000000000001", "1e40");
        eq("1e40", "10000000000000000303786028427003666890752");
        lt("-1e40", "-10000000000000000000000000000000000000001");
        lt("1e300", "1e301");
        lt("123456789012345678901234567890123456789012", "1e300");
        lt("0.5", "1");
        lt("-1", "-0.5");
    }

    #[test]
    fn r20_only_integers_a_value_holds_rounded_are_inexact() {
        let inexact = |text: &str| {
            let (v, l) = parse_with_literals(text).unwrap();
            l.first_inexact_integer(&v).map(str::to_owned)
        };
        assert_eq!(
            inexact(r#"{"a": 18446744073709551616}"#).as_deref(),
            Some("18446744073709551616")
        );
        assert_eq!(
            inexact(r#"{"a": -9223372036854775809}"#).as_deref(),
            Some("-9223372036854775809")
        );
        assert_eq!(
            inexact(r#"{"a": {"b": [1, 1180591620717411303424]}}"#).as_deref(),
            Some("1180591620717411303424")
        );
        for same in [
            r#"{"a": -0}"#,
            r#"{"a": 1e30}"#,
            r#"{"a": 0.1000}"#,
            r#"{"a": -9223372036854775808}"#,
            r#"{"a": 18446744073709551615}"#,
        ] {
            assert_eq!(inexact(same), None, "{same}");
        }
    }

    #[test]
    fn r20_literals_follow_their_position_and_the_last_duplicate() {
        let (v, lits) =
            parse_with_literals(r#"{"a": [1, 18446744073709551617, {"b": -18446744073709551617}], "c": 18446744073709551617, "c": 2}"#)
                .unwrap();
        let a = lits.root();
        let n = |v: &Value| v.as_number().unwrap().clone();
        assert_eq!(
            Exact::of(&n(&v["a"][1]), item(member(a, "a"), 1)),
            Some(Exact::Small(18_446_744_073_709_551_617))
        );
        assert_eq!(
            Exact::of(&n(&v["a"][2]["b"]), member(item(member(a, "a"), 2), "b")),
            Some(Exact::Small(-18_446_744_073_709_551_617))
        );
        assert_eq!(member(a, "c"), None, "the later `c` wins");
        assert_eq!(
            Exact::of(&n(&v["c"]), member(a, "c")),
            Some(Exact::Small(2))
        );
        // A literal no longer applies once the value changed.
        let lit = item(member(a, "a"), 1);
        assert_eq!(Exact::of(&Number::from(7), lit), Some(Exact::Small(7)));
        assert!(
            NumberLiterals::scan(r#"{"x": [1, 2.5, -3, "1e400", 1e2]}"#)
                .root()
                .is_some(),
            "`1e2` is re-spelled `100.0`"
        );
        assert!(
            NumberLiterals::scan(r#"{"x": [1, 2.5, -3, "10000000000000000000000"]}"#).is_empty()
        );
    }

    #[test]
    fn r36_numbers_count_as_written() {
        for text in [
            r#"{"x":10000000000000000000000}"#,
            r#"{"x":[1e2,18446744073709551617,-0,0.50]}"#,
            r#"{"a":{"b":[{"c":1.0E+2}]},"x":"10000000000000000000000"}"#,
            r#"{"x":1,"x":100000000000000000000000000}"#,
        ] {
            let (v, lits) = parse_with_literals(text).unwrap();
            let want = if text.contains(r#""x":1,"#) {
                text.len() - r#""x":1,"#.len()
            } else {
                text.len()
            };
            assert_eq!(
                compact_len_within(&v, &lits, usize::MAX),
                Some(want),
                "{text}"
            );
            assert_eq!(compact_len_within(&v, &lits, want), Some(want), "{text}");
            assert_eq!(compact_len_within(&v, &lits, want - 1), None, "{text}");
        }
        let v = json!({"x": 1e22});
        assert_eq!(
            compact_len_within(&v, NumberLiterals::none(), 100),
            Some(serde_json::to_string(&v).unwrap().len())
        );
    }

    fn arb_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            "[\\PC\"\\\\]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(6, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z\"]{0,3}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(2048))]
        /// With no literals the pretty text is serde_json's, and reads back as the value;
        /// `same_input` is the values' equality.
        #[test]
        fn r20_pretty_text_and_same_input_without_literals_are_serde_jsons(
            a in arb_value(),
            b in arb_value(),
        ) {
            let none = NumberLiterals::none();
            proptest::prop_assert_eq!(to_pretty_text(&a, none), serde_json::to_string_pretty(&a).unwrap());
            proptest::prop_assert_eq!(same_input(&a, none, &b, none), a == b);
            proptest::prop_assert!(same_input(&a, none, &a, none));
        }

        /// Two integers past 64 bits at the same place are the same input exactly when their
        /// digits are (R20, R35), whatever double they round to; the text keeps the digits.
        #[test]
        fn r20_r35_integers_past_64_bits_are_one_input_only_when_their_digits_are(
            x in "[1-9][0-9]{20,30}",
            y in "[1-9][0-9]{20,30}",
            key in "[a-z]{1,4}",
        ) {
            let text = |d: &str| format!(r#"{{"{key}":[1,{{"n":{d}}}]}}"#);
            let (a, la) = parse_with_literals(&text(&x)).unwrap();
            let (b, lb) = parse_with_literals(&text(&y)).unwrap();
            let same = same_input(&a, &la, &b, &lb);
            proptest::prop_assert_eq!(same, x == y);
            proptest::prop_assert_eq!(to_text(&a, &la), text(&x));
            proptest::prop_assert!(to_pretty_text(&a, &la).contains(&x));
        }
    }
}
