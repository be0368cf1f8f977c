//! The `inbox` section of the configuration: which store a durable inbox uses, how long an
//! unanswered held call waits and SQLite's `synchronous`. The engine keeps the section as
//! written ([`Governance::inbox_section`]); the inbox reads it here with the engine's
//! section reader, so that its errors are named by their path as the engine's are.

use serde_json::{Map, Value};
use toolgate_engine::config::section::Section;
use toolgate_engine::{ConfigErrors, Governance};

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
/// use toolgate_inbox::{InboxSettings, InboxStoreSetting, InboxSynchronous};
/// let gov = load_str(r#"{"inbox": {"sqlite": "/var/lib/toolgate/inbox.db", "ttl": "24h", "synchronous": "full"}}"#, Format::Json).unwrap();
/// let inbox = InboxSettings::read(&gov).unwrap().unwrap();
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

impl InboxSettings {
    /// Reads the configuration's `inbox` section: `None` when there is none, every error
    /// named by its path (`inbox.ttl`, `inbox.synchronous`, …) when it does not read.
    pub fn read(governance: &Governance) -> Result<Option<Self>, ConfigErrors> {
        let Some(section) = governance.inbox_section() else {
            return Ok(None);
        };
        let mut errs = ConfigErrors::default();
        let settings = read_section(section, &mut errs);
        if errs.is_empty() {
            Ok(settings)
        } else {
            Err(errs)
        }
    }

    /// The section as `toolgate config print` prints it: the store, `ttl` spelled as a
    /// duration and `synchronous`, each when set.
    pub fn to_json(&self) -> Map<String, Value> {
        let mut o = Map::new();
        match &self.store {
            InboxStoreSetting::Sqlite(path) => o.insert("sqlite".into(), path.clone().into()),
            InboxStoreSetting::Postgres(url) => o.insert("postgres".into(), url.clone().into()),
        };
        if let Some(ttl) = self.ttl {
            o.insert(
                "ttl".into(),
                humantime::format_duration(ttl).to_string().into(),
            );
        }
        if let Some(s) = self.synchronous {
            let s = match s {
                InboxSynchronous::Full => "full",
                InboxSynchronous::Normal => "normal",
            };
            o.insert("synchronous".into(), s.into());
        }
        o
    }
}

fn read_store(o: &Section<'_>, errs: &mut ConfigErrors) -> Option<InboxStoreSetting> {
    let sqlite = o.non_blank("sqlite", errs);
    let postgres = o.non_blank("postgres", errs);
    match (sqlite, postgres) {
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
            errs.push(o.path(), "give either `sqlite` or `postgres`, not both");
            None
        }
        (None, None) => {
            if !o.has("sqlite") && !o.has("postgres") {
                errs.push(
                    o.path(),
                    "the store is required: `sqlite` (a file path) or `postgres` (a URL)",
                );
            }
            None
        }
    }
}

fn read_section(v: &Value, errs: &mut ConfigErrors) -> Option<InboxSettings> {
    let o = Section::open(
        v,
        "inbox",
        &["sqlite", "postgres", "ttl", "synchronous"],
        errs,
    )?;
    let store = read_store(&o, errs);
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

#[cfg(test)]
mod tests {
    use super::InboxSettings;
    use toolgate_engine::config::{Format, effective, load_str};

    fn errors(text: &str) -> Vec<String> {
        let gov = load_str(text, Format::Json).unwrap();
        InboxSettings::read(&gov)
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
            let settings = InboxSettings::read(&gov).unwrap().unwrap();
            let printed = effective(&gov);
            assert!(printed.get("inbox").is_some(), "{printed}");
            let mut spelled = printed.clone();
            spelled["inbox"] = serde_json::Value::Object(settings.to_json());
            let again = load_str(&spelled.to_string(), Format::Json).unwrap();
            assert_eq!(InboxSettings::read(&again).unwrap(), Some(settings));
        }
        let none = load_str("{}", Format::Json).unwrap();
        assert!(effective(&none).get("inbox").is_none());
        assert_eq!(InboxSettings::read(&none).unwrap(), None);
    }

    #[test]
    fn r26_inbox_settings_errors_name_their_path() {
        let cases: [(&str, &str); 8] = [
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
            (r#"{"inbox": "inbox.db"}"#, "inbox: expected an object"),
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

    #[test]
    fn a_null_inbox_is_still_the_engines_error() {
        let err = load_str(r#"{"inbox": null}"#, Format::Json).unwrap_err();
        assert!(
            err.errors.iter().any(|e| e.path == "inbox"),
            "{:?}",
            err.errors
        );
    }
}
