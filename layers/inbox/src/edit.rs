//! Approve with edits (approval-page.md, "Approve with edits"): a person approves a held
//! call with an input they changed. The store replaces the held call's input with the
//! edited one in the same transaction that records the approval, and keeps the input the
//! agent sent and who edited ([`StoredEdit`]). The call is then sent — by
//! [`Inbox::resume`](crate::Inbox::resume), or by the agent calling again with the edited
//! input — through every check again on the edited input (R38), and its claim is bound to
//! the edited input's hash (R35). A call with the original input is not the approved one:
//! it is asked about afresh.

use serde_json::Value;
use toolgate_engine::canon;

use crate::codec::RecordError;
use crate::model::Timestamp;

/// An edited input, with the forms the store keeps of every input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditedInput {
    /// The input as JSON text.
    pub input_json: String,
    /// Its RFC 8785 canonical form.
    pub input_canonical: String,
    /// The SHA-256 of that (`sha256:…`).
    pub input_hash: String,
}

impl EditedInput {
    /// The forms of `input`, which must be a JSON object.
    ///
    /// ```
    /// let e = toolgate_inbox::EditedInput::new(&serde_json::json!({"b": 1, "a": 2})).unwrap();
    /// assert_eq!(e.input_canonical, r#"{"a":2,"b":1}"#);
    /// assert!(e.input_hash.starts_with("sha256:"));
    /// assert!(toolgate_inbox::EditedInput::new(&serde_json::json!([1])).is_err());
    /// ```
    pub fn new(input: &Value) -> Result<Self, EditError> {
        if !input.is_object() {
            return Err(EditError::NotAnObject);
        }
        let input_canonical = canon::canonical_json(input).ok_or(EditError::NotCanonicalisable)?;
        let input_hash = canon::sha256_hex(input_canonical.as_bytes());
        let input_json = serde_json::to_string(input).map_err(EditError::NotSerialisable)?;
        Ok(Self {
            input_json,
            input_canonical,
            input_hash,
        })
    }
}

/// Why an input cannot be an edited input ([`EditedInput::new`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EditError {
    /// Not a JSON object.
    #[error("an edited input must be a JSON object")]
    NotAnObject,
    /// No canonical form (RFC 8785).
    #[error("the edited input cannot be canonicalised")]
    NotCanonicalisable,
    /// It cannot be written as JSON text.
    #[error("the edited input cannot be serialised: {0}")]
    NotSerialisable(serde_json::Error),
}

/// What an edited approval recorded beside the call: the input the agent sent, and who
/// changed it, when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEdit {
    /// The input as the agent sent it (JSON text).
    pub original_input_json: String,
    /// Its hash.
    pub original_input_hash: String,
    /// Who edited (the approver).
    pub edited_by: String,
    /// When.
    pub edited_at: Timestamp,
    /// The idempotency key of the approval that edited.
    pub answer_key: Option<String>,
}

impl StoredEdit {
    /// The original input, parsed.
    pub fn original_input(&self) -> Result<Value, RecordError> {
        crate::codec::parse_json(&self.original_input_json)
    }
}
