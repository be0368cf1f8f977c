//! Settings for what is recorded and redacted (R33): the `audit` and `redaction` sections
//! of the configuration. Pure data, validated here; the `toolgate` crate builds the sinks
//! and the redactor from them.

use serde_json::Value;

use crate::error::{ConfigErrors, Obj, index, type_name};

/// When the audit file is flushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FlushPolicy {
    /// Flush (and sync) after every record: nothing acknowledged is lost.
    #[default]
    EveryRecord,
    /// Buffer records; flush when the buffer fills and when the sink is dropped.
    Buffered,
}

/// What happens to calls when the audit sink fails (R33).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnSinkFailure {
    /// Refuse calls (the default): nothing runs unrecorded.
    #[default]
    Refuse,
    /// Let calls run and emit an error event for each record that could not be written.
    Log,
}

/// The `audit` section.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuditSettings {
    /// A JSON Lines file to append records to.
    pub file: Option<String>,
    /// When to flush it.
    pub flush: FlushPolicy,
    /// What a sink failure does to calls.
    pub on_sink_failure: OnSinkFailure,
    /// Put the (redacted) input in each record.
    pub include_input: bool,
    /// Put the (redacted) output in each record.
    pub include_output: bool,
}

/// The `redaction` section.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RedactionSettings {
    /// Extra key names whose values are always redacted.
    pub keys: Vec<String>,
    /// Extra value patterns (regular expressions).
    pub patterns: Vec<String>,
    /// JSON pointers to redact, per tool (qualified name).
    pub pointers: Vec<(String, String)>,
    /// Also scrub what the model receives (seed 004's `after_call`).
    pub scrub_output: bool,
    /// Longest text kept before truncation.
    pub max_text_bytes: Option<usize>,
}

pub(crate) fn read_audit(v: &Value, errs: &mut ConfigErrors) -> AuditSettings {
    let mut a = AuditSettings::default();
    let Some(o) = Obj::open(
        v,
        "audit",
        &[
            "file",
            "flush",
            "on_sink_failure",
            "include_input",
            "include_output",
        ],
        errs,
    ) else {
        return a;
    };
    a.file = o.non_blank("file", errs).map(str::to_owned);
    if let Some(f) = o.choice(
        "flush",
        &["every_record", "buffered"],
        |s| match s {
            "every_record" => Some(FlushPolicy::EveryRecord),
            "buffered" => Some(FlushPolicy::Buffered),
            _ => None,
        },
        errs,
    ) {
        a.flush = f;
    }
    if let Some(f) = o.choice(
        "on_sink_failure",
        &["refuse", "log"],
        |s| match s {
            "refuse" => Some(OnSinkFailure::Refuse),
            "log" => Some(OnSinkFailure::Log),
            _ => None,
        },
        errs,
    ) {
        a.on_sink_failure = f;
    }
    a.include_input = o.bool("include_input", errs).unwrap_or(false);
    a.include_output = o.bool("include_output", errs).unwrap_or(false);
    a
}

pub(crate) fn read_redaction(
    v: &Value,
    regex_limit: usize,
    errs: &mut ConfigErrors,
) -> RedactionSettings {
    let mut r = RedactionSettings::default();
    let Some(o) = Obj::open(
        v,
        "redaction",
        &[
            "keys",
            "patterns",
            "pointers",
            "scrub_output",
            "max_text_bytes",
        ],
        errs,
    ) else {
        return r;
    };
    if let Some(items) = o.array("keys", errs) {
        for (i, item) in items.iter().enumerate() {
            match item.as_str() {
                Some(s) if !s.trim().is_empty() => r.keys.push(s.to_owned()),
                _ => errs.push(
                    index("redaction.keys", i),
                    format!(
                        "expected a key name that is not blank, found {}",
                        type_name(item)
                    ),
                ),
            }
        }
    }
    if let Some(items) = o.array("patterns", errs) {
        for (i, item) in items.iter().enumerate() {
            let path = index("redaction.patterns", i);
            match item.as_str() {
                Some("") => errs.push(path, "an empty pattern would match everywhere"),
                Some(p) => match regex::RegexBuilder::new(p)
                    .size_limit(regex_limit)
                    .dfa_size_limit(regex_limit)
                    .build()
                {
                    Ok(_) => r.patterns.push(p.to_owned()),
                    Err(e) => errs.push(
                        path,
                        format!(
                            "`{p}` is not a valid regular expression: {}",
                            e.to_string()
                                .split_whitespace()
                                .collect::<Vec<_>>()
                                .join(" ")
                        ),
                    ),
                },
                None => errs.push(
                    path,
                    format!("expected a regular expression, found {}", type_name(item)),
                ),
            }
        }
    }
    if let Some(items) = o.array("pointers", errs) {
        for (i, item) in items.iter().enumerate() {
            let path = index("redaction.pointers", i);
            let Some(p) = Obj::open(item, &path, &["tool", "pointer"], errs) else {
                continue;
            };
            let tool = p.non_blank("tool", errs);
            if !p.has("tool") {
                errs.push(p.path_of("tool"), "`tool` is required");
            }
            if !p.has("pointer") {
                errs.push(p.path_of("pointer"), "`pointer` is required");
            }
            let pointer = p.str("pointer", errs);
            if let Some(ptr) = pointer
                && !(ptr.is_empty() || ptr.starts_with('/'))
            {
                errs.push(
                    path.clone(),
                    format!("`{ptr}` is not a JSON pointer (RFC 6901): it must be empty or start with `/`"),
                );
                continue;
            }
            if let (Some(t), Some(ptr)) = (tool, pointer) {
                r.pointers.push((t.to_owned(), ptr.to_owned()));
            }
        }
    }
    r.scrub_output = o.bool("scrub_output", errs).unwrap_or(false);
    r.max_text_bytes = o
        .positive("max_text_bytes", errs)
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    r
}
