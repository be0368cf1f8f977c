//! Approval questions a client took to its user (R47, protocol 2026-07-28): kept in the
//! store every replica shares, so the client's retry is answered by whichever replica it
//! reaches ([`OpenQuestions::open_question`], [`OpenQuestions::take_question`]).
//!
//! [`OpenQuestions::open_question`]: crate::OpenQuestions::open_question
//! [`OpenQuestions::take_question`]: crate::OpenQuestions::take_question

use crate::model::Timestamp;

/// One open question, as the store keeps it. The store knows nothing of what it asks: the
/// server that asked writes `body` and reads it back.
///
/// ```
/// use toolgate_inbox::{OpenQuestion, Timestamp};
///
/// let q = OpenQuestion {
///     key: String::from("sha256:…"),
///     body: String::from(r#"{"tool": "github__create_issue"}"#),
///     expires_at: Timestamp::from_millis(1_000),
/// };
/// assert!(q.is_past(Timestamp::from_millis(1_001)));
/// assert!(!q.is_past(Timestamp::from_millis(1_000)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenQuestion {
    /// The key it is found by: a hash of the unguessable state the client was given (the
    /// state itself is never stored, so reading the store answers nothing).
    pub key: String,
    /// What the server that asked needs to take the retry as its answer (JSON).
    pub body: String,
    /// When it stops being answerable.
    pub expires_at: Timestamp,
}

impl OpenQuestion {
    /// Whether it is past its expiry at `now`.
    pub fn is_past(&self, now: Timestamp) -> bool {
        now > self.expires_at
    }
}
