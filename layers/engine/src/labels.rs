//! Labels (R49): the operator's words for what a tool does, and what a session has already
//! done.
//!
//! A label is 1–64 characters of ASCII lower-case letters, digits, `_` and `-`, starting
//! with a letter or digit; a list holds at most 16 distinct labels. A tool carries the labels
//! of its declarations (`tools[].labels`), of its server (`servers.NAME.labels`, for every
//! tool of that server, present or discovered later) and `egress` when its effective network
//! scope is `egress` (R8, R24). A **session's labels** are the union of the labels of the
//! tools of every call sent in it (counted when the send is recorded, as quotas count). A
//! rule or a quota selects by `labels` (the called tool carries every one) and
//! `session_labels` (the session's labels before this call include every one).
//!
//! ```
//! use toolgate_engine::labels::{LabelSet, check_label};
//! assert!(check_label("private").is_ok());
//! assert!(check_label("Private").is_err());
//! let mut session = LabelSet::of(["private"]);
//! session.extend(&LabelSet::of(["untrusted", "private"]));
//! assert!(session.contains_all(["private", "untrusted"]));
//! assert_eq!(session.to_vec(), ["private", "untrusted"]);
//! ```

use serde_json::Value;

use crate::error::{ConfigErrors, index, type_name};

/// The label every tool whose effective network scope is `egress` carries (R49).
pub const EGRESS: &str = "egress";

/// The most distinct labels one list may hold (R49).
pub const MAX_LABELS: usize = 16;

/// The longest a label may be, in characters (R49).
pub const MAX_LABEL_CHARS: usize = 64;

/// What is wrong with a label ([`check_label`], R49). Each variant holds the label as
/// given; `Display` shows it escaped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LabelError {
    /// The label is empty.
    #[error("a label is not empty")]
    Empty,
    /// The label is longer than [`MAX_LABEL_CHARS`].
    #[error("`{}` is {} characters long; a label has at most {MAX_LABEL_CHARS}", .0.escape_debug(), .0.chars().count())]
    TooLong(String),
    /// The label holds something other than ASCII lower-case letters, digits, `_` and `-`.
    #[error("`{}` is not a label: ASCII lower-case letters, digits, `_` and `-` only", .0.escape_debug())]
    BadCharacter(String),
    /// The label starts with `_` or `-`.
    #[error("`{}` is not a label: it starts with a letter or a digit", .0.escape_debug())]
    BadStart(String),
}

/// Whether `label` is a well-formed label (R49); the problem otherwise.
///
/// # Errors
///
/// What is wrong with it; its `Display` is a sentence saying so.
pub fn check_label(label: &str) -> Result<(), LabelError> {
    if label.is_empty() {
        return Err(LabelError::Empty);
    }
    if label.len() > MAX_LABEL_CHARS {
        return Err(LabelError::TooLong(label.to_owned()));
    }
    if !label
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    {
        return Err(LabelError::BadCharacter(label.to_owned()));
    }
    if !label
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        return Err(LabelError::BadStart(label.to_owned()));
    }
    Ok(())
}

pub use toolgate_core::labels::{LabelSet, NO_LABELS};

/// Reads a list of labels at `path` (R49): a list of well-formed labels, none repeated, at
/// most [`MAX_LABELS`]; with `non_empty`, at least one (a rule's and a quota's lists). Every
/// problem is reported with its path; `None` when there was one.
pub(crate) fn read_labels(
    value: &Value,
    path: &str,
    non_empty: bool,
    errs: &mut ConfigErrors,
) -> Option<Vec<String>> {
    let before = errs.errors.len();
    let Value::Array(items) = value else {
        errs.push(
            path,
            format!("expected a list of labels, found {}", type_name(value)),
        );
        return None;
    };
    if non_empty && items.is_empty() {
        errs.push(
            path,
            "an empty list of labels selects nothing: name at least one, or leave the field out",
        );
    }
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let ipath = index(path, i);
        match item {
            Value::String(s) => match check_label(s) {
                Err(why) => errs.push(ipath, why.to_string()),
                Ok(()) if out.contains(s) => {
                    errs.push(ipath, format!("`{s}` is listed twice"));
                }
                Ok(()) => out.push(s.clone()),
            },
            other => errs.push(
                ipath,
                format!("expected a label, found {}", type_name(other)),
            ),
        }
    }
    if out.len() > MAX_LABELS {
        errs.push(
            path,
            format!(
                "{} labels is more than a list may hold ({MAX_LABELS})",
                out.len()
            ),
        );
    }
    (errs.errors.len() == before).then_some(out)
}
