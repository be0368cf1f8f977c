//! The execution target of a call (seed 000): where a shell command or a skill
//! script would run — the host, the working directory, the sandbox. A tool declaration names
//! the fields that make it up ([`TargetSpec`]): a field of the call's input, or the value
//! the host put on the call ([`ExecutionTarget`] in the call's extensions). Every place a
//! person reads a held or asked call shows it first.

use serde_json::Value;

/// Where one part of an execution target comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetSource {
    /// A field of the input, by dotted path (`["env", "host"]` for `input.env.host`).
    Input(Vec<String>),
    /// The same part of the [`ExecutionTarget`] the host put in the call's extensions.
    Extension,
}

impl TargetSource {
    /// The source as the configuration spells it: `input.<path>` or `extension`.
    pub fn spelling(&self) -> String {
        match self {
            TargetSource::Input(path) => format!("input.{}", path.join(".")),
            TargetSource::Extension => String::from("extension"),
        }
    }

    /// The source spelled `s` (`input.cwd`, `input.env.host`, `extension`), or why not.
    pub fn parse(s: &str) -> Result<Self, TargetSourceError> {
        if s == "extension" {
            return Ok(TargetSource::Extension);
        }
        let Some(path) = s.strip_prefix("input.") else {
            return Err(TargetSourceError::Unknown(s.to_owned()));
        };
        let parts: Vec<String> = path.split('.').map(str::to_owned).collect();
        if parts.iter().any(|p| p.trim().is_empty()) {
            return Err(TargetSourceError::EmptyPart(s.to_owned()));
        }
        Ok(TargetSource::Input(parts))
    }
}

/// Why a target source's spelling does not read ([`TargetSource::parse`]); each variant
/// holds the spelling as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TargetSourceError {
    /// Neither `input.<field>` nor `extension`.
    #[error(
        "`{0}` is neither `input.<field>` (a field of the call's input, by dotted path) nor `extension` (the host's value on the call)"
    )]
    Unknown(String),
    /// An `input.` path with an empty part (`input.`, `input.a..b`).
    #[error("`{0}` has an empty part in its dotted path")]
    EmptyPart(String),
}

/// Which fields make up a tool's execution target (a declaration's `target`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TargetSpec {
    /// The host the call runs on.
    pub host: Option<TargetSource>,
    /// The working directory.
    pub working_directory: Option<TargetSource>,
    /// The sandbox (a container, a profile, `none`).
    pub sandbox: Option<TargetSource>,
}

/// A call's execution target, as shown. Also what a host puts in a call's
/// [`Extensions`](crate::Extensions) for the parts a [`TargetSpec`] takes from `extension`.
///
/// ```
/// use serde_json::json;
/// use toolgate_core::{ExecutionTarget, TargetSource, TargetSpec};
/// let spec = TargetSpec {
///     host: Some(TargetSource::Extension),
///     working_directory: Some(TargetSource::parse("input.cwd").unwrap()),
///     sandbox: None,
/// };
/// let from_host = ExecutionTarget { host: Some("build-7".into()), ..Default::default() };
/// let t = spec.resolve(&json!({"cwd": "/srv/app", "cmd": "make"}), Some(&from_host)).unwrap();
/// assert_eq!(t.describe(), "host `build-7` · working directory `/srv/app`");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecutionTarget {
    /// The host.
    pub host: Option<String>,
    /// The working directory.
    pub working_directory: Option<String>,
    /// The sandbox.
    pub sandbox: Option<String>,
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl TargetSpec {
    /// Whether the spec names no field.
    pub fn is_empty(&self) -> bool {
        self.host.is_none() && self.working_directory.is_none() && self.sandbox.is_none()
    }

    /// The target of a call with `input`, and the host's `extension` values; `None` when
    /// no named field has a value. A named field the call lacks shows as `(not given)`, so
    /// a person sees that it is missing rather than nothing.
    pub fn resolve(
        &self,
        input: &Value,
        extension: Option<&ExecutionTarget>,
    ) -> Option<ExecutionTarget> {
        let one = |src: &Option<TargetSource>, pick: fn(&ExecutionTarget) -> &Option<String>| {
            let src = src.as_ref()?;
            let found = match src {
                TargetSource::Input(path) => {
                    let mut v = input;
                    let mut ok = true;
                    for p in path {
                        match v.get(p) {
                            Some(next) => v = next,
                            None => {
                                ok = false;
                                break;
                            }
                        }
                    }
                    (ok && !v.is_null()).then(|| text_of(v))
                }
                TargetSource::Extension => extension.and_then(|e| pick(e).clone()),
            };
            Some(found.unwrap_or_else(|| String::from("(not given)")))
        };
        let t = ExecutionTarget {
            host: one(&self.host, |e| &e.host),
            working_directory: one(&self.working_directory, |e| &e.working_directory),
            sandbox: one(&self.sandbox, |e| &e.sandbox),
        };
        (!t.is_empty()).then_some(t)
    }
}

impl ExecutionTarget {
    /// Whether no part is set.
    pub fn is_empty(&self) -> bool {
        self.host.is_none() && self.working_directory.is_none() && self.sandbox.is_none()
    }

    /// The parts that are set, labelled, in order: host, working directory, sandbox.
    pub fn parts(&self) -> Vec<(&'static str, &str)> {
        [
            ("host", &self.host),
            ("working directory", &self.working_directory),
            ("sandbox", &self.sandbox),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.as_deref().map(|v| (k, v)))
        .collect()
    }

    /// One line: ``host `build-7` · working directory `/srv/app` · sandbox `none` ``, each
    /// value with its hidden characters marked ([`crate::display::visible`]).
    pub fn describe(&self) -> String {
        self.parts()
            .into_iter()
            .map(|(k, v)| format!("{k} `{}`", crate::display::visible(v)))
            .collect::<Vec<_>>()
            .join(" · ")
    }

    /// As JSON: `{"host", "workingDirectory", "sandbox"}` with the parts that are set.
    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        for (k, v) in [
            ("host", &self.host),
            ("workingDirectory", &self.working_directory),
            ("sandbox", &self.sandbox),
        ] {
            if let Some(v) = v {
                m.insert(k.into(), Value::from(v.as_str()));
            }
        }
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn issue24_a_target_is_read_from_the_input_by_path_and_from_the_host() {
        let spec = TargetSpec {
            host: Some(TargetSource::parse("input.env.host").unwrap()),
            working_directory: Some(TargetSource::parse("input.cwd").unwrap()),
            sandbox: Some(TargetSource::Extension),
        };
        let t = spec
            .resolve(&json!({"env": {"host": "h1"}, "cwd": 3}), None)
            .unwrap();
        assert_eq!(t.host.as_deref(), Some("h1"));
        assert_eq!(t.working_directory.as_deref(), Some("3"));
        assert_eq!(t.sandbox.as_deref(), Some("(not given)"));
        assert_eq!(
            t.describe(),
            "host `h1` · working directory `3` · sandbox `(not given)`"
        );
        assert!(TargetSpec::default().resolve(&json!({}), None).is_none());
        assert!(TargetSource::parse("cwd").is_err());
        assert!(TargetSource::parse("input.").is_err());
        assert!(TargetSource::parse("input.a..b").is_err());
        let hidden = ExecutionTarget {
            host: Some("a\u{202e}b".into()),
            ..Default::default()
        };
        assert!(
            hidden.describe().contains("⟦U+202E⟧"),
            "{}",
            hidden.describe()
        );
    }
}
