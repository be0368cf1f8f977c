//! What a grant from a card binds, and what it leaves open, in words (approval-page.md).
//!
//! The pre-filled `when` binds every value the card shows with `equals` (R20: JSON values,
//! numbers by value, arrays whole): an object down to its leaves by dotted path, and an
//! object whole where a path cannot name one of its keys (a key with a `.`, an empty key,
//! or a path past the 200 characters a `when` path may have), so nothing the card shows is
//! dropped. A range, a pattern or a list is there only where the person writes one.
//!
//! [`coverage`] reads any `when` against the card's input and lists every way a call may
//! differ from the card and still pass: a field no test checks, a field tested by a range,
//! a pattern or a list, a top-level key no path can name, the fields a call may add beside
//! the card's (R20 cannot refuse an extra key), and a selector wider than the card's. The
//! form shows that list for the pre-filled grant; the server computes it again for what is
//! posted and saves a grant that leaves more open than the offer only once the person has
//! been shown the list ([`fingerprint`]).
//!
//! Numbers are kept as written: the card's input is read from its text with every literal
//! ([`toolgate_core::number::to_text`]), so an integer past 64 bits is bound by its digits.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use maud::{Markup, html};
use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::html::Shown;

/// The longest `when` path a grant may have (`tool_rule_field_chars`, R22).
fn path_limit() -> usize {
    toolgate_engine::policy::Limits::default().tool_rule_field_chars
}

/// How many characters of a card's value an item quotes.
const QUOTE_CHARS: usize = 80;

/// The card's input as a tree of its JSON text, every number as written.
#[derive(Debug)]
pub(crate) enum Node<'a> {
    /// A non-empty object: its text, and its members in key order.
    Object {
        /// The object's JSON text.
        raw: &'a str,
        /// Its members.
        members: Vec<(String, Node<'a>)>,
    },
    /// Anything else, compared whole: a scalar, an array, an empty object.
    Value(&'a str),
}

impl<'a> Node<'a> {
    /// The JSON text of this value.
    fn raw(&self) -> &'a str {
        match self {
            Node::Object { raw, .. } | Node::Value(raw) => raw,
        }
    }
}

fn deserializer(s: &str) -> serde_json::Deserializer<serde_json::de::StrRead<'_>> {
    let mut de = serde_json::Deserializer::from_str(s);
    // The input's depth is bounded by the input limits (R36), which may be set past
    // serde_json's default of 128.
    de.disable_recursion_limit();
    de
}

/// Reads JSON `text` (compact, as [`toolgate_core::number::to_text`] writes it) into a
/// [`Node`] tree that borrows it.
pub(crate) fn read(text: &str) -> Result<Node<'_>, String> {
    let raw = <&RawValue>::deserialize(&mut deserializer(text)).map_err(|e| e.to_string())?;
    node(raw)
}

fn node(raw: &RawValue) -> Result<Node<'_>, String> {
    let s = raw.get();
    if !s.trim_start().starts_with('{') {
        return Ok(Node::Value(s));
    }
    let map = BTreeMap::<String, &RawValue>::deserialize(&mut deserializer(s))
        .map_err(|e| e.to_string())?;
    if map.is_empty() {
        return Ok(Node::Value(s));
    }
    let members = map
        .into_iter()
        .map(|(k, v)| Ok((k, node(v)?)))
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Node::Object { raw: s, members })
}

/// Why a path cannot name a key, if it cannot: R20's paths split at `.`, an empty segment
/// is an error, and a path is at most [`path_limit`] characters.
fn unnameable(prefix: Option<&str>, key: &str) -> Option<&'static str> {
    if key.is_empty() {
        return Some("its name is empty");
    }
    if key.contains('.') {
        return Some("its name has a dot");
    }
    let len = prefix.map_or(0, |p| p.chars().count() + 1) + key.chars().count();
    (len > path_limit()).then_some("its path would be longer than a `when` path may be")
}

fn join(prefix: Option<&str>, key: &str) -> String {
    match prefix {
        Some(p) => format!("{p}.{key}"),
        None => key.to_owned(),
    }
}

/// The `when` a card's grant is offered with: every value the card shows bound with
/// `equals` (arrays whole; an object by its leaves, or whole where a path cannot name one
/// of its keys), as JSON text with every number as written. `None` when nothing can be
/// bound (an empty object, an input that is not an object, or only unnameable keys): what
/// that leaves open is in [`coverage`].
pub(crate) fn prefill(root: &Node<'_>) -> Option<String> {
    fn bind<'a>(node: &Node<'a>, path: String, out: &mut Vec<(String, &'a str)>) {
        match node {
            Node::Object { members, .. }
                if members
                    .iter()
                    .all(|(k, _)| unnameable(Some(&path), k).is_none()) =>
            {
                for (k, child) in members {
                    bind(child, join(Some(&path), k), out);
                }
            }
            other => out.push((path, other.raw())),
        }
    }
    let Node::Object { members, .. } = root else {
        return None;
    };
    let mut tests = Vec::new();
    for (k, child) in members {
        if unnameable(None, k).is_none() {
            bind(child, k.clone(), &mut tests);
        }
    }
    if tests.is_empty() {
        return None;
    }
    let mut out = String::from("{");
    for (i, (path, raw)) in tests.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            "{}:{{\"equals\":{raw}}}",
            serde_json::Value::from(path.as_str())
        );
    }
    out.push('}');
    Some(out)
}

/// One way a call may differ from the card and still be answered by the grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Open {
    /// The input is not a JSON object: a `when` cannot test it.
    NotAnObject,
    /// The stored input cannot be read (why): nothing of it can be bound.
    Unreadable(String),
    /// A field the card shows that no test checks (an object: nothing inside it either).
    Unchecked {
        /// Its dotted path.
        path: String,
        /// Its value on the card, as JSON text.
        card: String,
    },
    /// A field tested, but not bound to one value.
    Loose {
        /// Its dotted path.
        path: String,
        /// Which values pass, in words.
        what: String,
        /// Its value on the card.
        card: String,
    },
    /// A key no `when` path can name, not bound through an enclosing object.
    Unnameable {
        /// The key.
        key: String,
        /// The object it is in (`None`: the top level).
        inside: Option<String>,
        /// Why a path cannot name it.
        why: &'static str,
        /// Its value on the card.
        card: String,
    },
    /// A call may add fields the card does not show to this object (`None`: the top
    /// level): R20 has no test for "no other field".
    Added {
        /// The object's dotted path.
        inside: Option<String>,
    },
    /// A selector wider than the card's.
    Selector {
        /// `agent`, `tool`, `server` or `session`.
        field: &'static str,
        /// What the grant says (empty: any).
        given: String,
        /// What the card shows.
        card: String,
    },
}

impl Open {
    /// A stable key: two lists leave the same open when their keys are the same.
    fn key(&self) -> String {
        match self {
            Open::NotAnObject => String::from("not-an-object"),
            Open::Unreadable(_) => String::from("unreadable"),
            Open::Unchecked { path, .. } => format!("unchecked\u{0}{path}"),
            Open::Loose { path, what, .. } => format!("loose\u{0}{path}\u{0}{what}"),
            Open::Unnameable { key, inside, .. } => {
                format!(
                    "unnameable\u{0}{}\u{0}{key}",
                    inside.as_deref().unwrap_or("")
                )
            }
            Open::Added { inside } => format!("added\u{0}{}", inside.as_deref().unwrap_or("")),
            Open::Selector { field, given, .. } => format!("selector\u{0}{field}\u{0}{given}"),
        }
    }

    /// Whether only a call's added fields are open here (what every grant leaves open).
    fn is_added(&self) -> bool {
        matches!(self, Open::Added { .. })
    }
}

/// A test object of a `when`, its operands as written.
type Test<'a> = BTreeMap<String, &'a RawValue>;

/// Everything `when` (a `when` the grant checks already validated, or none) leaves open
/// of the card `root`: see [`Open`]. Selectors are the caller's ([`Open::Selector`]).
pub(crate) fn coverage(root: &Node<'_>, when: Option<&str>) -> Result<Vec<Open>, String> {
    let tests: BTreeMap<String, Test<'_>> = match when {
        Some(w) if !w.trim().is_empty() => {
            BTreeMap::deserialize(&mut deserializer(w)).map_err(|e| e.to_string())?
        }
        _ => BTreeMap::new(),
    };
    let mut out = Vec::new();
    match root {
        Node::Object { members, .. } => walk(members, None, &tests, &mut out),
        Node::Value(raw) if raw.trim() == "{}" => out.push(Open::Added { inside: None }),
        Node::Value(_) => out.push(Open::NotAnObject),
    }
    Ok(out)
}

fn quote(raw: &str) -> String {
    let mut s: String = raw.chars().take(QUOTE_CHARS).collect();
    if raw.chars().count() > QUOTE_CHARS {
        s.push('…');
    }
    s
}

fn walk(
    members: &[(String, Node<'_>)],
    inside: Option<&str>,
    tests: &BTreeMap<String, Test<'_>>,
    out: &mut Vec<Open>,
) {
    out.push(Open::Added {
        inside: inside.map(str::to_owned),
    });
    for (key, child) in members {
        if let Some(why) = unnameable(inside, key) {
            out.push(Open::Unnameable {
                key: key.clone(),
                inside: inside.map(str::to_owned),
                why,
                card: quote(child.raw()),
            });
            continue;
        }
        visit(child, join(inside, key), tests, out);
    }
}

fn visit(node: &Node<'_>, path: String, tests: &BTreeMap<String, Test<'_>>, out: &mut Vec<Open>) {
    if let Some(test) = tests.get(&path) {
        if test.contains_key("equals") {
            return; // bound (to the card's value, or to another, which only narrows)
        }
        let listed = test
            .get("in")
            .and_then(|raw| serde_json::from_str::<Vec<&RawValue>>(raw.get()).ok());
        match &listed {
            // One listed value binds as `equals` does; none passes nothing.
            Some(items) if items.len() <= 1 => return,
            _ => {}
        }
        let mut what = Vec::new();
        if let Some(items) = &listed {
            what.push(format!("one of the {} values listed", items.len()));
        }
        let range: Vec<String> = [("gt", ">"), ("gte", "≥"), ("lt", "<"), ("lte", "≤")]
            .iter()
            .filter_map(|(op, sign)| {
                test.get(*op)
                    .map(|raw| format!("{sign} {}", raw.get().trim()))
            })
            .collect();
        if !range.is_empty() {
            what.push(format!("a number {}", range.join(" and ")));
        }
        if let Some(raw) = test.get("matches") {
            what.push(format!("a string matching {}", raw.get().trim()));
        }
        if what.is_empty() {
            // A presence test: on an object, what is inside may still be tested.
            if let Node::Object { members, .. } = node
                && has_tests_below(tests, &path)
            {
                walk(members, Some(&path), tests, out);
                return;
            }
            what.push(String::from("present"));
        }
        out.push(Open::Loose {
            what: format!("any value that is {}", what.join(" and ")),
            card: quote(node.raw()),
            path,
        });
        return;
    }
    match node {
        Node::Object { members, .. } if has_tests_below(tests, &path) => {
            walk(members, Some(&path), tests, out);
        }
        _ => out.push(Open::Unchecked {
            card: quote(node.raw()),
            path,
        }),
    }
}

fn has_tests_below(tests: &BTreeMap<String, Test<'_>>, path: &str) -> bool {
    let prefix = format!("{path}.");
    tests
        .range(prefix.clone()..)
        .next()
        .is_some_and(|(k, _)| k.starts_with(&prefix))
}

/// Whether a grant leaving `given` open needs the person to have been shown that list
/// before it is saved: it does unless everything it leaves open the offer `offered` also
/// left open, and the offer left open nothing but added fields (what the form says of
/// every offer).
pub(crate) fn needs_confirmation(given: &[Open], offered: &[Open]) -> bool {
    if offered.iter().any(|o| !o.is_added()) {
        return true;
    }
    let offered: Vec<String> = offered.iter().map(Open::key).collect();
    given.iter().any(|g| !offered.contains(&g.key()))
}

/// A short digest of `list` for the call `id`: the form carries the digest of the list it
/// showed, and the server saves a grant that needs a confirmation only when the digest of
/// what it would leave open is the one carried.
pub(crate) fn fingerprint(id: &str, list: &[Open]) -> String {
    let mut keys: Vec<String> = list.iter().map(Open::key).collect();
    keys.sort();
    let mut h = Sha256::new();
    h.update(id.as_bytes());
    for k in keys {
        h.update([0xff]);
        h.update(k.as_bytes());
    }
    h.finalize()
        .iter()
        .take(16)
        .fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// The list in words, as a person reads it: one sentence an item (the added fields in one),
/// every value escaped with its hidden characters marked.
pub(crate) fn words(list: &[Open]) -> Vec<Markup> {
    let mut out = Vec::new();
    let added: Vec<Markup> = list
        .iter()
        .filter_map(|o| match o {
            Open::Added { inside } => Some(place(inside.as_deref())),
            _ => None,
        })
        .collect();
    for o in list {
        let line = match o {
            Open::NotAnObject => html! {
                "the input is not a JSON object: a " code { "when" } " cannot check it, so any input passes"
            },
            Open::Unreadable(why) => html! {
                "the stored input cannot be read (" (Shown(why)) "): nothing of it is checked, so any input passes"
            },
            Open::Unchecked { path, card } => html! {
                code { (Shown(path)) } " is not checked: any value passes (the card shows "
                code { (Shown(card)) } ")"
            },
            Open::Loose { path, what, card } => html! {
                code { (Shown(path)) } ": " (Shown(what)) " passes (the card shows "
                code { (Shown(card)) } ")"
            },
            Open::Unnameable {
                key,
                inside,
                why,
                card,
            } => html! {
                "the field " code { (Shown(&serde_json::Value::from(key.as_str()).to_string())) }
                " " (place(inside.as_deref())) " cannot be bound: a " code { "when" }
                " path cannot name it (" (why) "), so any value passes (the card shows "
                code { (Shown(card)) } ")"
            },
            Open::Selector { field, given, card } => html! {
                code { (field) } ": "
                @match (*field, given.is_empty()) {
                    ("session", _) => { "calls of any session" }
                    (f, true) => { "any " (f) }
                    (f, false) => { "any " (f) " matching " code { (Shown(given)) } }
                }
                " (the card shows " code { (Shown(card)) } ")"
            },
            Open::Added { .. } => continue,
        };
        out.push(line);
    }
    if !added.is_empty() {
        out.push(html! {
            "any field a call adds that this card does not show is not checked: "
            @for (i, place) in added.iter().enumerate() {
                @if i > 0 { ", " }
                (place)
            }
        });
    }
    out
}

/// Where an object is, in words: `at the top level`, or `inside <code>path</code>`.
fn place(inside: Option<&str>) -> Markup {
    html! {
        @match inside {
            None => { "at the top level" }
            Some(p) => { "inside " code { (Shown(p)) } }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn offer(input: &Value) -> (Option<String>, Vec<Open>) {
        let text = input.to_string();
        let root = read(&text).unwrap();
        let when = prefill(&root);
        let open = coverage(&root, when.as_deref()).unwrap();
        (when, open)
    }

    #[test]
    fn issue34_every_value_the_card_shows_is_bound_with_equals() {
        let input = json!({"to_account": 40711, "amount": -20.5, "notify": ["ops@example.com"],
            "route": {"rail": "ach", "bank": {"id": 7}, "hops": []}, "empty": {}, "note": null});
        let (when, open) = offer(&input);
        let when: Value = serde_json::from_str(&when.unwrap()).unwrap();
        assert_eq!(
            when,
            json!({"to_account": {"equals": 40711}, "amount": {"equals": -20.5},
                "notify": {"equals": ["ops@example.com"]}, "route.rail": {"equals": "ach"},
                "route.bank.id": {"equals": 7}, "route.hops": {"equals": []},
                "empty": {"equals": {}}, "note": {"equals": null}})
        );
        assert_eq!(
            open,
            vec![
                Open::Added { inside: None },
                Open::Added {
                    inside: Some("route".into())
                },
                Open::Added {
                    inside: Some("route.bank".into())
                },
            ]
        );
    }

    #[test]
    fn issue34_no_key_count_or_depth_cap_drops_a_value() {
        let mut wide = serde_json::Map::new();
        for i in 0..30 {
            wide.insert(format!("k{i:02}"), json!(i));
        }
        let deep = json!({"a": {"b": {"c": {"d": {"e": 1}}}}});
        let (when, _) = offer(&Value::Object(wide));
        let when: serde_json::Map<String, Value> = serde_json::from_str(&when.unwrap()).unwrap();
        assert_eq!(when.len(), 30);
        let (when, _) = offer(&deep);
        assert_eq!(when.unwrap(), r#"{"a.b.c.d.e":{"equals":1}}"#);
    }

    #[test]
    fn issue34_a_key_no_path_can_name_binds_its_object_whole_or_is_said_open() {
        let input = json!({"route": {"a.b": 1, "c": 2}, "x.y": "top", "": 3, "ok": true});
        let (when, open) = offer(&input);
        let when: Value = serde_json::from_str(&when.unwrap()).unwrap();
        assert_eq!(
            when,
            json!({"route": {"equals": {"a.b": 1, "c": 2}}, "ok": {"equals": true}})
        );
        let unnamed: Vec<&str> = open
            .iter()
            .filter_map(|o| match o {
                Open::Unnameable { key, .. } => Some(key.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(unnamed, ["", "x.y"]);
        assert!(
            needs_confirmation(&open, &open),
            "said, and to be confirmed"
        );
        // A path too long for a `when` binds its object whole as well.
        let long = "k".repeat(150);
        let input = json!({"outer": {long.clone(): {long: 1}}});
        let (when, open) = offer(&input);
        let when = when.unwrap();
        assert!(
            when.starts_with(&format!(r#"{{"outer.{}":{{"equals":{{"#, "k".repeat(150))),
            "{when}"
        );
        assert_eq!(
            open,
            vec![
                Open::Added { inside: None },
                Open::Added {
                    inside: Some("outer".into())
                }
            ]
        );
    }

    #[test]
    fn issue34_numbers_are_bound_as_written() {
        let (value, literals) =
            toolgate_core::number::parse_with_literals(r#"{"id": 123456789012345678901234}"#)
                .unwrap();
        let text = toolgate_core::number::to_text(&value, &literals);
        let root = read(&text).unwrap();
        assert_eq!(
            prefill(&root).unwrap(),
            r#"{"id":{"equals":123456789012345678901234}}"#
        );
    }

    #[test]
    fn issue34_coverage_says_every_field_left_open() {
        let input = json!({"to_account": 40711, "amount": 20, "notify": ["a@x"],
            "route": {"rail": "ach"}});
        let text = input.to_string();
        let root = read(&text).unwrap();
        let (_, offered) = offer(&input);
        let open = coverage(
            &root,
            Some(r#"{"amount": {"gte": 0, "lte": 100}, "to_account": {"in": [1, 2]}, "route.rail": {"equals": "x"}}"#),
        )
        .unwrap();
        assert_eq!(
            open,
            vec![
                Open::Added { inside: None },
                Open::Loose {
                    path: "amount".into(),
                    what: "any value that is a number ≥ 0 and ≤ 100".into(),
                    card: "20".into()
                },
                Open::Unchecked {
                    path: "notify".into(),
                    card: r#"["a@x"]"#.into()
                },
                Open::Added {
                    inside: Some("route".into())
                },
                Open::Loose {
                    path: "to_account".into(),
                    what: "any value that is one of the 2 values listed".into(),
                    card: "40711".into()
                },
            ]
        );
        assert!(needs_confirmation(&open, &offered));
        // Nothing checked: each top-level field is said, once.
        let none = coverage(&root, None).unwrap();
        assert_eq!(none.len(), 5, "{none:?}");
        let lines = words(&none)
            .into_iter()
            .map(Markup::into_string)
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            lines.contains("<code>route</code> is not checked"),
            "{lines}"
        );
        // Narrower than the offer (an object bound whole): no confirmation.
        let narrower = coverage(
            &root,
            Some(r#"{"to_account": {"equals": 40711}, "amount": {"equals": 20}, "notify": {"equals": ["a@x"]}, "route": {"equals": {"rail": "ach"}}}"#),
        )
        .unwrap();
        assert_eq!(narrower, vec![Open::Added { inside: None }]);
        assert!(!needs_confirmation(&narrower, &offered));
        assert!(!needs_confirmation(&offered, &offered));
        assert_ne!(fingerprint("ia_1", &open), fingerprint("ia_1", &offered));
        assert_ne!(fingerprint("ia_1", &open), fingerprint("ia_2", &open));
    }
}
