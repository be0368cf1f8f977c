//! The fields a rule, a quota and a grant share (R18–R20, R44, R45): the `tool`, `server`,
//! `kind` and `agent` selectors, `when` and its tests, and `reason`, read and validated alike,
//! every problem with its path.

use regex::RegexBuilder;
use serde_json::Value;
use toolgate_core::ToolKind;

use super::rule::{Operand, Rule, Test};
use super::{Effect, Glob, Limits};
use crate::error::{ConfigErrors, Obj, field, type_name};
use crate::number::{self, Exact, Lit};

const TEST_FIELDS: &[&str] = &["equals", "in", "gt", "gte", "lt", "lte", "matches"];
const KINDS: &[&str] = &["mcp", "http", "local"];

pub(super) fn chars(s: &str) -> usize {
    s.chars().count()
}

pub(super) fn read_selector(
    obj: &Obj<'_>,
    key: &str,
    limits: &Limits,
    errs: &mut ConfigErrors,
) -> Option<Glob> {
    let s = obj.non_blank(key, errs)?;
    if chars(s) > limits.tool_rule_field_chars {
        errs.push(
            obj.path_of(key),
            format!(
                "`{key}` is {} characters, more than the limit `tool_rule_field_chars` ({})",
                chars(s),
                limits.tool_rule_field_chars
            ),
        );
        return None;
    }
    Some(Glob::new(s))
}

/// The fields a rule and a quota share (R18–R20, R44): selectors, `when` and `reason`,
/// validated alike, as a rule whose effect the caller sets. Its `source` is `value` as
/// written.
pub(crate) fn read_selection(
    obj: &Obj<'_>,
    value: &Value,
    lits: Lit<'_>,
    limits: &Limits,
    errs: &mut ConfigErrors,
) -> Rule {
    let tool = read_selector(obj, "tool", limits, errs);
    if let Some(t) = &tool
        && t.as_str().contains("__")
    {
        errs.push(
            obj.path_of("tool"),
            format!(
                "`{}` contains `__`: a rule names the tool's own name on its server (with `server`), never the qualified name the model sees (R3)",
                t.as_str()
            ),
        );
    }
    let server = read_selector(obj, "server", limits, errs);
    let agent = read_selector(obj, "agent", limits, errs);
    let kind = obj.choice("kind", KINDS, parse_kind, errs);
    let reason: Option<Box<str>> = obj.str("reason", errs).map(Box::from);
    if let Some(r) = &reason
        && chars(r) > limits.tool_rule_text_chars
    {
        errs.push(
            obj.path_of("reason"),
            format!(
                "`reason` is {} characters, more than the limit `tool_rule_text_chars` ({})",
                chars(r),
                limits.tool_rule_text_chars
            ),
        );
    }
    let mut when = Vec::new();
    if let Some(w) = obj.raw("when", errs) {
        when = read_when(
            w,
            number::member(lits, "when"),
            &obj.path_of("when"),
            limits,
            errs,
        );
    }
    Rule {
        effect: Effect::Ask,
        tool,
        server,
        kind,
        agent,
        when,
        reason,
        source: {
            let mut text = String::new();
            number::write_text(&mut text, value, lits);
            text.into_boxed_str()
        },
        all_kinds: false,
        labels: Box::default(),
        session_labels: Box::default(),
        approvals: 1,
    }
}

/// A rule's or a quota's list of labels (R49), validated.
pub(super) type LabelList = Box<[Box<str>]>;

/// A rule's or a quota's `labels` and `session_labels` (R49): each, when set, a non-empty
/// list of well-formed labels, none repeated; every problem at its path.
pub(super) fn read_label_selectors(
    obj: &Obj<'_>,
    errs: &mut ConfigErrors,
) -> (LabelList, LabelList) {
    let mut one = |key: &str| -> LabelList {
        obj.raw(key, errs)
            .and_then(|v| crate::labels::read_labels(v, &obj.path_of(key), true, errs))
            .map(|l| l.into_iter().map(String::into_boxed_str).collect())
            .unwrap_or_default()
    };
    (one("labels"), one("session_labels"))
}

pub(crate) fn parse_kind(s: &str) -> Option<ToolKind> {
    match s {
        "mcp" => Some(ToolKind::Mcp),
        "http" => Some(ToolKind::Http),
        "local" => Some(ToolKind::Local),
        _ => None,
    }
}

/// A `when` object (R20) at `wpath`: its tests by path, every problem reported.
pub(crate) fn read_when(
    w: &Value,
    lits: Lit<'_>,
    wpath: &str,
    limits: &Limits,
    errs: &mut ConfigErrors,
) -> Vec<(String, Vec<String>, Test)> {
    let mut when = Vec::new();
    match w {
        Value::Object(map) => {
            for (p, test) in map {
                let tpath = field(wpath, p);
                if chars(p) > limits.tool_rule_field_chars {
                    errs.push(
                        &tpath,
                        format!(
                            "the path is {} characters, more than the limit `tool_rule_field_chars` ({})",
                            chars(p),
                            limits.tool_rule_field_chars
                        ),
                    );
                }
                let segs: Vec<String> = p.split('.').map(str::to_owned).collect();
                if segs.iter().any(String::is_empty) {
                    errs.push(&tpath, format!("the path `{p}` has an empty segment"));
                }
                let lit = number::member(lits, p);
                if let Some(t) = read_test(test, lit, &tpath, limits, errs) {
                    when.push((p.clone(), segs, t));
                }
            }
        }
        other => errs.push(
            wpath,
            format!(
                "expected an object of tests by path, found {}",
                type_name(other)
            ),
        ),
    }
    when
}

pub(crate) fn read_test(
    value: &Value,
    lits: Lit<'_>,
    path: &str,
    limits: &Limits,
    errs: &mut ConfigErrors,
) -> Option<Test> {
    let before = errs.errors.len();
    let obj = Obj::open(value, path, TEST_FIELDS, errs)?;
    // `equals` and `in` take any JSON value, `null` included (SPEC §8).
    let raw = |key: &str| -> Option<&Value> { value.as_object().and_then(|m| m.get(key)) };
    let equals = raw("equals").map(|v| Operand {
        value: v.clone(),
        literals: number::member(lits, "equals").cloned(),
    });
    let in_list = match raw("in") {
        None => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| Operand {
                    value: v.clone(),
                    literals: number::item(number::member(lits, "in"), i).cloned(),
                })
                .collect(),
        ),
        Some(other) => {
            errs.push(
                obj.path_of("in"),
                format!("`in` must be a list, found {}", type_name(other)),
            );
            None
        }
    };
    let mut num = |key: &str| -> Option<Exact> {
        match raw(key) {
            None => None,
            Some(Value::Number(n)) => {
                let exact = Exact::of(n, number::member(lits, key));
                if exact.is_none() {
                    errs.push(obj.path_of(key), format!("`{key}` is not a finite number"));
                }
                exact
            }
            Some(other) => {
                errs.push(
                    obj.path_of(key),
                    format!("`{key}` compares numbers; found {}", type_name(other)),
                );
                None
            }
        }
    };
    let gt = num("gt");
    let gte = num("gte");
    let lt = num("lt");
    let lte = num("lte");
    let mut matches = None;
    if let Some(pattern) = obj.str("matches", errs) {
        if chars(pattern) > limits.tool_rule_text_chars {
            errs.push(
                obj.path_of("matches"),
                format!(
                    "`matches` is {} characters, more than the limit `tool_rule_text_chars` ({})",
                    chars(pattern),
                    limits.tool_rule_text_chars
                ),
            );
        } else {
            // R37: compiled with a size limit; past it is a validation error, never a slow call.
            match RegexBuilder::new(pattern)
                .size_limit(limits.regex_size_limit)
                .dfa_size_limit(limits.regex_size_limit)
                .build()
            {
                Ok(re) => matches = Some(re),
                Err(e) => errs.push(
                    obj.path_of("matches"),
                    format!(
                        "`{pattern}` is not a valid regular expression: {}",
                        one_line(&e.to_string())
                    ),
                ),
            }
        }
    }
    if errs.errors.len() > before {
        return None;
    }
    Some(Test {
        equals,
        in_list,
        gt,
        gte,
        lt,
        lte,
        matches,
    })
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
