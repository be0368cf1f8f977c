//! Configuration errors that name their path, and a small reader that collects them.

use std::fmt;

use serde_json::{Map, Value};

/// One problem in a configuration or policy, with the path of the field it is about
/// (`agents[2].overrides[0].approval`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Where: a dotted path with `[i]` indices; empty for the whole document.
    pub path: String,
    /// What is wrong, in lower case, naming the user's input in backticks.
    pub message: String,
}

impl ConfigError {
    /// An error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every problem found in a configuration; a configuration with any is refused whole.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigErrors {
    /// The problems, in document order.
    pub errors: Vec<ConfigError>,
}

impl ConfigErrors {
    /// One error.
    pub fn one(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            errors: vec![ConfigError::new(path, message)],
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// Adds one.
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError::new(path, message));
    }

    /// The errors with `prefix` put before each path.
    #[must_use]
    pub fn prefixed(mut self, prefix: &str) -> Self {
        for e in &mut self.errors {
            e.path = join(prefix, &e.path);
        }
        self
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// A non-fatal finding of `check` (R24, R28, R40).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The path the warning is about.
    pub path: String,
    /// What to look at.
    pub message: String,
}

pub(crate) fn join(prefix: &str, path: &str) -> String {
    if prefix.is_empty() {
        path.to_owned()
    } else if path.is_empty() {
        prefix.to_owned()
    } else if path.starts_with('[') {
        format!("{prefix}{path}")
    } else {
        format!("{prefix}.{path}")
    }
}

/// The path of an object field: `path.key`, or `path["odd key"]` for a key that is not
/// plain.
///
/// ```
/// use toolgate_engine::config::section::field;
/// assert_eq!(field("approvers", "api_keys"), "approvers.api_keys");
/// assert_eq!(field("tools[0].when", "a.b"), r#"tools[0].when["a.b"]"#);
/// ```
pub fn field(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        join(path, key)
    } else {
        let quoted = serde_json::to_string(key).unwrap_or_else(|_| String::from("\"?\""));
        format!("{path}[{quoted}]")
    }
}

/// The path of an array element: `path[i]`.
///
/// ```
/// assert_eq!(toolgate_engine::config::section::index("approvers.api_keys", 2), "approvers.api_keys[2]");
/// ```
pub fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// How a JSON value is named in an error: `a string`, `a list`, `null`…
///
/// ```
/// use serde_json::json;
/// use toolgate_engine::config::section::type_name;
/// assert_eq!(format!("expected a list, found {}", type_name(&json!({}))), "expected a list, found an object");
/// ```
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Reads one JSON object field by field, collecting errors: unknown fields, `null`, wrong
/// types and unknown enum values are all errors, never defaults (R5, SPEC §8).
///
/// The engine reads its sections with it, and every other crate reads its own section of
/// the one configuration document the same way, so that every error names its path alike
/// (published as [`crate::config::section::Section`]).
///
/// ```
/// use serde_json::json;
/// use toolgate_engine::ConfigErrors;
/// use toolgate_engine::config::section::Section;
/// let v = json!({"name": "ci", "extra": 1, "scopes": "policy:read"});
/// let mut errs = ConfigErrors::default();
/// let o = Section::open(&v, "approvers.api_keys[0]", &["name", "scopes"], &mut errs).unwrap();
/// assert_eq!(o.non_blank("name", &mut errs), Some("ci"));
/// assert!(o.array("scopes", &mut errs).is_none());
/// let paths: Vec<_> = errs.errors.iter().map(|e| e.path.as_str()).collect();
/// assert_eq!(paths, ["approvers.api_keys[0].extra", "approvers.api_keys[0].scopes"]);
/// ```
#[derive(Debug)]
pub struct Obj<'a> {
    pub(crate) path: String,
    map: &'a Map<String, Value>,
}

impl<'a> Obj<'a> {
    /// Opens `value` as an object with the given known fields; reports every unknown one.
    pub fn open(
        value: &'a Value,
        path: &str,
        known: &[&str],
        errs: &mut ConfigErrors,
    ) -> Option<Self> {
        let Value::Object(map) = value else {
            errs.push(
                path,
                format!("expected an object, found {}", type_name(value)),
            );
            return None;
        };
        for key in map.keys() {
            if !known.contains(&key.as_str()) {
                errs.push(
                    field(path, key),
                    format!("unknown field `{key}`; expected one of {}", list(known)),
                );
            }
        }
        Some(Self {
            path: path.to_owned(),
            map,
        })
    }

    /// Whether the field is present (even as `null`).
    pub fn has(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// The object's own path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The path of field `key` of the object.
    pub fn path_of(&self, key: &str) -> String {
        field(&self.path, key)
    }

    /// The raw value of a present, non-null field.
    pub fn raw(&self, key: &str, errs: &mut ConfigErrors) -> Option<&'a Value> {
        match self.map.get(key) {
            None => None,
            Some(Value::Null) => {
                errs.push(
                    self.path_of(key),
                    "`null` is not a value here; leave the field out for its default",
                );
                None
            }
            Some(v) => Some(v),
        }
    }

    /// A string field.
    pub fn str(&self, key: &str, errs: &mut ConfigErrors) -> Option<&'a str> {
        match self.raw(key, errs)? {
            Value::String(s) => Some(s),
            other => {
                errs.push(
                    self.path_of(key),
                    format!("expected a string, found {}", type_name(other)),
                );
                None
            }
        }
    }

    /// A string that must not be empty or all blank (SPEC §8).
    pub fn non_blank(&self, key: &str, errs: &mut ConfigErrors) -> Option<&'a str> {
        let s = self.str(key, errs)?;
        if s.trim().is_empty() {
            errs.push(self.path_of(key), format!("`{key}` must not be blank"));
            return None;
        }
        Some(s)
    }

    /// A boolean field.
    pub fn bool(&self, key: &str, errs: &mut ConfigErrors) -> Option<bool> {
        match self.raw(key, errs)? {
            Value::Bool(b) => Some(*b),
            other => {
                errs.push(
                    self.path_of(key),
                    format!("expected true or false, found {}", type_name(other)),
                );
                None
            }
        }
    }

    /// A positive whole number.
    pub fn positive(&self, key: &str, errs: &mut ConfigErrors) -> Option<u64> {
        match self.raw(key, errs)? {
            Value::Number(n) => match n.as_u64() {
                Some(v) if v > 0 => Some(v),
                _ => {
                    errs.push(
                        self.path_of(key),
                        format!("expected a positive whole number, found `{n}`"),
                    );
                    None
                }
            },
            other => {
                errs.push(
                    self.path_of(key),
                    format!(
                        "expected a positive whole number, found {}",
                        type_name(other)
                    ),
                );
                None
            }
        }
    }

    /// A list field.
    pub fn array(&self, key: &str, errs: &mut ConfigErrors) -> Option<&'a Vec<Value>> {
        match self.raw(key, errs)? {
            Value::Array(items) => Some(items),
            other => {
                errs.push(
                    self.path_of(key),
                    format!("expected a list, found {}", type_name(other)),
                );
                None
            }
        }
    }

    /// An enum spelled exactly as one of `choices` (R5: unknown values are errors).
    pub fn choice<T>(
        &self,
        key: &str,
        choices: &[&str],
        parse: impl Fn(&str) -> Option<T>,
        errs: &mut ConfigErrors,
    ) -> Option<T> {
        let s = self.str(key, errs)?;
        match parse(s) {
            Some(v) => Some(v),
            None => {
                errs.push(
                    self.path_of(key),
                    format!("unknown value `{s}`; expected one of {}", list(choices)),
                );
                None
            }
        }
    }
}

/// The choices of an error message, each in backticks: `` `a`, `b` ``.
///
/// ```
/// use toolgate_engine::config::section::list;
/// assert_eq!(list(&["RS256", "ES256"]), "`RS256`, `ES256`");
/// ```
pub fn list(items: &[&str]) -> String {
    items
        .iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths() {
        assert_eq!(field("", "agents"), "agents");
        assert_eq!(
            field("servers", "GitHub Enterprise"),
            "servers[\"GitHub Enterprise\"]"
        );
        assert_eq!(index("agents", 2), "agents[2]");
        assert_eq!(join("policy", "rules[0].tool"), "policy.rules[0].tool");
        assert_eq!(join("policy", "[0]"), "policy[0]");
    }

    #[test]
    fn reader_collects_every_error() {
        let v = json!({"a": null, "b": 5, "c": "x", "zz": 1});
        let mut errs = ConfigErrors::default();
        let o = Obj::open(&v, "root", &["a", "b", "c"], &mut errs).unwrap();
        assert_eq!(o.str("a", &mut errs), None);
        assert_eq!(o.str("b", &mut errs), None);
        assert_eq!(
            o.choice("c", &["y"], |s| (s == "y").then_some(()), &mut errs),
            None
        );
        let paths: Vec<_> = errs.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["root.zz", "root.a", "root.b", "root.c"]);
    }
}
