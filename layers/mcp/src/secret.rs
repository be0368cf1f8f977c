//! Secrets for upstream servers: read from a file or the environment when the server is
//! connected, never written in the configuration, never shown.

use std::fmt;
use std::path::{Path, PathBuf};

/// A secret value (a token, a password). Its `Debug` never shows it; it has no `Display`.
///
/// ```
/// use toolgate_mcp::Secret;
/// let s = Secret::new("hunter2");
/// assert_eq!(s.expose(), "hunter2");
/// assert!(!format!("{s:?}").contains("hunter2"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for sending it where it belongs.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

#[derive(Clone, PartialEq, Eq)]
enum From {
    File(PathBuf),
    Env(String),
    Value(Secret),
    /// Read at start ([`SecretSource::loaded`]): the value, and where it was read from, to
    /// read it again ([`SecretSource::read_again`]).
    Loaded(Secret, Box<SecretSource>),
}

/// Where a secret comes from: a file (its trailing newline trimmed), an environment
/// variable of the host, or a value handed over in code. File and variable are read when
/// the server is connected (or by [`McpServerConfig::load_secrets`](crate::McpServerConfig::load_secrets));
/// one that cannot be read, or is empty, is an error naming the field and the problem,
/// never the value. An optional `prefix` (such as `"Bearer "`) is put before the value.
///
/// ```
/// use toolgate_mcp::SecretSource;
/// let token = SecretSource::env("TOOLGATE_DOC_TOKEN").prefix("Bearer ");
/// assert!(token.read().unwrap_err().to_string().contains("`TOOLGATE_DOC_TOKEN` is not set"));
/// assert_eq!(format!("{token:?}"), r#"SecretSource { env: "TOOLGATE_DOC_TOKEN", prefix: "Bearer " }"#);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct SecretSource {
    from: From,
    prefix: String,
}

impl fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("SecretSource");
        match &self.from {
            From::File(p) => d.field("file", p),
            From::Env(v) => d.field("env", v),
            From::Value(s) => d.field("value", s),
            From::Loaded(_, source) => d.field("loaded_from", source),
        };
        d.field("prefix", &self.prefix).finish()
    }
}

impl SecretSource {
    /// The content of the file at `path` (a relative path is resolved against the
    /// configuration's folder by [`McpServerConfig::relative_to`](crate::McpServerConfig::relative_to),
    /// else against the working directory), its trailing line ends trimmed.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Self {
            from: From::File(path.into()),
            prefix: String::new(),
        }
    }

    /// The value of the host's environment variable `name`.
    pub fn env(name: impl Into<String>) -> Self {
        Self {
            from: From::Env(name.into()),
            prefix: String::new(),
        }
    }

    /// A value you already hold (from a vault client, say).
    pub fn value(secret: Secret) -> Self {
        Self {
            from: From::Value(secret),
            prefix: String::new(),
        }
    }

    /// Puts `prefix` before the value (`"Bearer "` for an `Authorization` header).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Reads the secret (prefix included).
    ///
    /// # Errors
    ///
    /// What is wrong (the file cannot be read or is empty, the variable is not set or is
    /// empty), naming the file or variable and never the value.
    pub fn read(&self) -> Result<Secret, SecretError> {
        let value = match &self.from {
            From::Value(s) | From::Loaded(s, _) => s.0.clone(),
            From::File(path) => {
                let bytes = std::fs::read(path).map_err(|error| SecretError::ReadFile {
                    path: path.clone(),
                    error,
                })?;
                let mut text = String::from_utf8(bytes)
                    .map_err(|_| SecretError::FileNotUtf8 { path: path.clone() })?;
                let end = text.trim_end_matches(['\n', '\r']).len();
                text.truncate(end);
                if text.trim().is_empty() {
                    return Err(SecretError::EmptyFile { path: path.clone() });
                }
                text
            }
            From::Env(name) => match std::env::var(name) {
                Ok(v) if v.trim().is_empty() => {
                    return Err(SecretError::EmptyVariable { name: name.clone() });
                }
                Ok(v) => v,
                Err(std::env::VarError::NotPresent) => {
                    return Err(SecretError::UnsetVariable { name: name.clone() });
                }
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(SecretError::VariableNotUtf8 { name: name.clone() });
                }
            },
        };
        if value.trim().is_empty() {
            return Err(SecretError::Empty);
        }
        Ok(Secret(format!("{}{value}", self.prefix)))
    }

    /// This source with its value read now (a file or variable becomes a value).
    pub(crate) fn loaded(&self) -> Result<Self, SecretError> {
        Ok(Self {
            from: From::Loaded(self.read()?, Box::new(self.clone())),
            prefix: String::new(),
        })
    }

    /// Reads the secret again from where it came from (a rotated client secret is taken
    /// without a restart): a file is read again, a variable looked up again, a value handed
    /// over in code is that value.
    #[cfg(feature = "http")]
    pub(crate) fn read_again(&self) -> Result<Secret, SecretError> {
        match &self.from {
            From::Loaded(_, source) => source.read_again(),
            _ => self.read(),
        }
    }

    /// A relative file resolved against `dir`.
    pub(crate) fn relative_to(mut self, dir: &Path) -> Self {
        if let From::File(p) = &mut self.from
            && p.is_relative()
        {
            *p = dir.join(&*p);
        }
        self
    }
}

/// Why a secret cannot be read ([`SecretSource::read`]): the file or variable, named, and
/// what is wrong with it; never the value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// The file cannot be read.
    #[error("cannot read the file `{}`: {error}", .path.display())]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The file is not UTF-8 text.
    #[error("the file `{}` is not UTF-8 text", .path.display())]
    FileNotUtf8 {
        /// The file.
        path: PathBuf,
    },
    /// The file is empty (or holds only line ends and blanks).
    #[error("the file `{}` is empty", .path.display())]
    EmptyFile {
        /// The file.
        path: PathBuf,
    },
    /// The environment variable is empty.
    #[error("the environment variable `{name}` is empty")]
    EmptyVariable {
        /// The variable.
        name: String,
    },
    /// The environment variable is not set.
    #[error("the environment variable `{name}` is not set")]
    UnsetVariable {
        /// The variable.
        name: String,
    },
    /// The environment variable is not UTF-8.
    #[error("the environment variable `{name}` is not UTF-8")]
    VariableNotUtf8 {
        /// The variable.
        name: String,
    },
    /// The secret is blank.
    #[error("the secret is empty")]
    Empty,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_files_trailing_newline_is_trimmed_and_empty_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tok");
        std::fs::write(&f, "s3cret\r\n\n").unwrap();
        let got = SecretSource::file("tok")
            .prefix("Bearer ")
            .relative_to(dir.path())
            .read()
            .unwrap();
        assert_eq!(got.expose(), "Bearer s3cret");
        std::fs::write(&f, "\n").unwrap();
        let err = SecretSource::file(&f).read().unwrap_err().to_string();
        assert!(err.ends_with("is empty"), "{err}");
        let err = SecretSource::file(dir.path().join("none"))
            .read()
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("cannot read the file `"), "{err}");
        let v = SecretSource::value(Secret::new("abc")).loaded().unwrap();
        assert!(!format!("{v:?}").contains("abc"));
    }
}
