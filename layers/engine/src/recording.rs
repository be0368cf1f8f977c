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

/// Where a durable inbox keeps its held calls and stored policy (the `inbox` section).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InboxStoreSetting {
    /// An embedded SQLite file (`{"sqlite": PATH}`).
    Sqlite(String),
    /// A shared PostgreSQL database (`{"postgres": URL}`).
    Postgres(String),
}

/// SQLite's `synchronous` setting for an inbox file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InboxSynchronous {
    /// `normal`: durable against a process crash (the default).
    #[default]
    Normal,
    /// `full`: durable against power loss too.
    Full,
}

/// The `inbox` section: which store a durable inbox uses, how long an unanswered held call
/// waits (`ttl`), and SQLite's `synchronous`. `toolgate inbox …` and `toolgate policy …`
/// take their store from it with `--config`.
///
/// ```
/// use std::time::Duration;
/// use toolgate_engine::config::{load_str, Format};
/// use toolgate_engine::recording::{InboxStoreSetting, InboxSynchronous};
/// let gov = load_str(r#"{"inbox": {"sqlite": "/var/lib/toolgate/inbox.db", "ttl": "24h", "synchronous": "full"}}"#, Format::Json).unwrap();
/// let inbox = gov.inbox_settings().unwrap();
/// assert_eq!(inbox.store, InboxStoreSetting::Sqlite("/var/lib/toolgate/inbox.db".into()));
/// assert_eq!(inbox.ttl, Some(Duration::from_secs(24 * 3600)));
/// assert_eq!(inbox.synchronous, Some(InboxSynchronous::Full));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxSettings {
    /// The store.
    pub store: InboxStoreSetting,
    /// How long an unanswered held call waits before it expires (the inbox's default when
    /// not set).
    pub ttl: Option<std::time::Duration>,
    /// SQLite's `synchronous` (SQLite only).
    pub synchronous: Option<InboxSynchronous>,
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

pub(crate) fn read_inbox(v: &Value, errs: &mut ConfigErrors) -> Option<InboxSettings> {
    let o = Obj::open(
        v,
        "inbox",
        &["sqlite", "postgres", "ttl", "synchronous"],
        errs,
    )?;
    let sqlite = o.non_blank("sqlite", errs);
    let postgres = o.non_blank("postgres", errs);
    let store = match (sqlite, postgres) {
        (Some(path), None) => Some(InboxStoreSetting::Sqlite(path.to_owned())),
        (None, Some(url)) => {
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                errs.push(
                    o.path_of("postgres"),
                    "expected a PostgreSQL URL (`postgres://…` or `postgresql://…`)",
                );
            }
            Some(InboxStoreSetting::Postgres(url.to_owned()))
        }
        (Some(_), Some(_)) => {
            errs.push(
                String::from("inbox"),
                "give either `sqlite` or `postgres`, not both",
            );
            None
        }
        (None, None) => {
            if !o.has("sqlite") && !o.has("postgres") {
                errs.push(
                    String::from("inbox"),
                    "the store is required: `sqlite` (a file path) or `postgres` (a URL)",
                );
            }
            None
        }
    };
    let ttl = match o.str("ttl", errs) {
        None => None,
        Some(text) => match humantime::parse_duration(text) {
            Ok(d) if d.is_zero() => {
                errs.push(o.path_of("ttl"), "a held call must wait longer than zero");
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                errs.push(
                    o.path_of("ttl"),
                    format!("`{text}` is not a duration like `24h` or `30m`: {e}"),
                );
                None
            }
        },
    };
    let synchronous = o.choice(
        "synchronous",
        &["normal", "full"],
        |s| match s {
            "normal" => Some(InboxSynchronous::Normal),
            "full" => Some(InboxSynchronous::Full),
            _ => None,
        },
        errs,
    );
    if synchronous.is_some() && matches!(store, Some(InboxStoreSetting::Postgres(_))) {
        errs.push(
            o.path_of("synchronous"),
            "`synchronous` applies to a `sqlite` inbox only",
        );
    }
    Some(InboxSettings {
        store: store?,
        ttl,
        synchronous,
    })
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

#[cfg(test)]
mod inbox_tests {
    use crate::config::{Format, effective, load_str};

    fn errors(text: &str) -> Vec<String> {
        load_str(text, Format::Json)
            .unwrap_err()
            .errors
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn r26_inbox_settings_load_and_print_back() {
        for text in [
            r#"{"inbox": {"sqlite": "inbox.db", "ttl": "90m", "synchronous": "normal"}}"#,
            r#"{"inbox": {"postgres": "postgres://toolgate@127.0.0.1/toolgate", "ttl": "1day"}}"#,
        ] {
            let gov = load_str(text, Format::Json).unwrap();
            assert!(gov.inbox_settings().is_some());
            let printed = effective(&gov);
            assert!(printed.get("inbox").is_some(), "{printed}");
            let again = load_str(&printed.to_string(), Format::Json).unwrap();
            assert_eq!(again.inbox_settings(), gov.inbox_settings());
        }
        assert!(
            effective(&load_str("{}", Format::Json).unwrap())
                .get("inbox")
                .is_none()
        );
    }

    #[test]
    fn r26_inbox_settings_errors_name_their_path() {
        let cases: [(&str, &str); 7] = [
            (r#"{"inbox": {}}"#, "inbox: the store is required"),
            (
                r#"{"inbox": {"sqlite": "a", "postgres": "postgres://h/d"}}"#,
                "not both",
            ),
            (r#"{"inbox": {"sqlite": "  "}}"#, "inbox.sqlite"),
            (r#"{"inbox": {"postgres": "mysql://h"}}"#, "inbox.postgres"),
            (r#"{"inbox": {"sqlite": "a", "ttl": "soon"}}"#, "inbox.ttl"),
            (
                r#"{"inbox": {"sqlite": "a", "synchronous": "sometimes"}}"#,
                "inbox.synchronous",
            ),
            (
                r#"{"inbox": {"postgres": "postgres://h/d", "synchronous": "full"}}"#,
                "inbox.synchronous",
            ),
        ];
        for (text, want) in cases {
            let errs = errors(text);
            assert!(
                errs.iter().any(|e| e.contains(want)),
                "{text}: {want} not in {errs:?}"
            );
        }
        let errs = errors(r#"{"inbox": {"sqlite": "a", "ttl": "0s", "size": 1}}"#);
        assert!(errs.iter().any(|e| e.contains("inbox.ttl")), "{errs:?}");
        assert!(errs.iter().any(|e| e.contains("inbox.size")), "{errs:?}");
    }
}
