//! Errors: a store that cannot be used, and answers, claims and completions it refuses.

use std::fmt;

use crate::model::State;

/// What kind of store failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InboxErrorKind {
    /// Another connection holds a lock longer than the busy timeout.
    Busy,
    /// The file is not a database, or the database is damaged.
    Corrupt,
    /// The database cannot be opened (missing file, permissions, a directory).
    Unavailable,
    /// The database was written by a newer schema, or is not a toolgate inbox.
    Schema,
    /// A held call with that interaction id already exists.
    Duplicate,
    /// A stored row cannot be read back.
    Record,
    /// Any other failure of the backend.
    Backend,
}

/// The inbox could not be read or written. Callers fail closed: a call that cannot be held
/// or redeemed is refused, never sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxError {
    kind: InboxErrorKind,
    message: String,
}

impl InboxError {
    /// An error of `kind` saying `message` (lower case, no trailing period).
    pub fn new(kind: InboxErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// The kind of failure.
    pub fn kind(&self) -> InboxErrorKind {
        self.kind
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for InboxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for InboxError {}

/// Why an answer was refused (R26). Each case is distinct.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerError {
    /// No held call has this id: the store did not issue it.
    UnknownId(String),
    /// This key already answered the other way.
    Conflict {
        /// The held call.
        id: String,
        /// The key.
        key: String,
        /// What the key answered first: `true` for approve.
        recorded_approve: bool,
    },
    /// The call was already decided (with another key), or is past pending.
    AlreadyDecided {
        /// The held call.
        id: String,
        /// Its state.
        state: State,
    },
    /// Nobody answered in time: the call is (now) `expired`.
    Expired(String),
    /// The idempotency key or the approver's name is empty, or a text contains a NUL
    /// character ([`Answer::validate`](crate::Answer::validate)).
    Invalid(String),
    /// An approval bound to an input or a definition that the held call does not hold (R35,
    /// [`Answer::bound`](crate::Answer::bound)): nothing was recorded.
    NotAsShown {
        /// The held call.
        id: String,
        /// The input differs from the one shown.
        input: bool,
        /// The tool's definition differs from the one shown.
        definition: bool,
    },
    /// The store failed.
    Store(InboxError),
}

impl fmt::Display for AnswerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnswerError::UnknownId(id) => {
                write!(f, "no held call `{id}`: this inbox did not issue it")
            }
            AnswerError::Conflict {
                id,
                key,
                recorded_approve,
            } => write!(
                f,
                "idempotency key `{key}` already {} `{id}`; the same key cannot give the other answer",
                if *recorded_approve {
                    "approved"
                } else {
                    "denied"
                }
            ),
            AnswerError::AlreadyDecided { id, state } => write!(
                f,
                "held call `{id}` is no longer pending (state `{state}`); it was already decided"
            ),
            AnswerError::Expired(id) => write!(
                f,
                "held call `{id}` expired before it was answered; the answer is refused"
            ),
            AnswerError::Invalid(why) => f.write_str(why),
            AnswerError::NotAsShown {
                id,
                input,
                definition,
            } => {
                let what = match (input, definition) {
                    (true, true) => "its input and the tool's definition differ",
                    (true, false) => "its input differs",
                    _ => "the tool's definition differs",
                };
                write!(
                    f,
                    "held call `{id}` is not the call that was approved: {what} from what was shown (R35); look at the call again; nothing was approved"
                )
            }
            AnswerError::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for AnswerError {}

impl From<InboxError> for AnswerError {
    fn from(e: InboxError) -> Self {
        AnswerError::Store(e)
    }
}

/// Why a claim for sending was refused (R26, R35).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimError {
    /// No held call has this id.
    UnknownId(String),
    /// The call is not `approved` (pending, denied, already claimed or sent, …).
    NotApproved {
        /// The held call.
        id: String,
        /// Its state.
        state: State,
    },
    /// The input about to be sent is not the input that was approved (R35).
    InputChanged(String),
    /// The tool's definition is not the one that was approved (R35).
    DefinitionChanged(String),
    /// The store failed.
    Store(InboxError),
}

impl fmt::Display for ClaimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClaimError::UnknownId(id) => {
                write!(f, "no held call `{id}`: this inbox did not issue it")
            }
            ClaimError::NotApproved { id, state } => {
                write!(f, "held call `{id}` is `{state}`, not `approved`")
            }
            ClaimError::InputChanged(id) => write!(
                f,
                "the input differs from what was approved for held call `{id}`"
            ),
            ClaimError::DefinitionChanged(id) => write!(
                f,
                "the tool's definition changed since held call `{id}` was approved"
            ),
            ClaimError::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ClaimError {}

impl From<InboxError> for ClaimError {
    fn from(e: InboxError) -> Self {
        ClaimError::Store(e)
    }
}

/// Why a result was not recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompleteError {
    /// No held call has this id.
    UnknownId(String),
    /// The call is not claimed under this token (another sender claimed it, or it was
    /// already recorded, or `recover` marked it `unknown`).
    NotClaimed {
        /// The held call.
        id: String,
        /// Its state.
        state: State,
    },
    /// The store failed.
    Store(InboxError),
}

impl fmt::Display for CompleteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompleteError::UnknownId(id) => {
                write!(f, "no held call `{id}`: this inbox did not issue it")
            }
            CompleteError::NotClaimed { id, state } => write!(
                f,
                "held call `{id}` is not claimed by this sender (state `{state}`)"
            ),
            CompleteError::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for CompleteError {}

impl From<InboxError> for CompleteError {
    fn from(e: InboxError) -> Self {
        CompleteError::Store(e)
    }
}

/// Why a conditional policy put ([`StoredPolicies::put_policy_if_unchanged`]) saved nothing.
///
/// [`StoredPolicies::put_policy_if_unchanged`]: crate::StoredPolicies::put_policy_if_unchanged
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicySaveError {
    /// The stored policy is not the one the put was based on: someone saved since (R22, R23).
    /// Nothing was saved.
    Conflict {
        /// The `updatedAt` the put was based on (`None`: no policy stored).
        expected: Option<String>,
        /// The stored `updatedAt` (`None`: no policy is stored).
        stored: Option<String>,
    },
    /// The store failed.
    Store(InboxError),
}

impl fmt::Display for PolicySaveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicySaveError::Conflict { expected, stored } => {
                write_conflict(f, expected.as_deref(), stored.as_deref())
            }
            PolicySaveError::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PolicySaveError {}

/// The text of a policy conflict: which `updatedAt` the put expected, which one is stored.
pub(crate) fn write_conflict(
    f: &mut fmt::Formatter<'_>,
    expected: Option<&str>,
    stored: Option<&str>,
) -> fmt::Result {
    write!(
        f,
        "conflict: the stored policy changed since it was read (expected updatedAt `{}`, the stored one is `{}`); nothing was saved",
        expected.unwrap_or("none"),
        stored.unwrap_or("none"),
    )
}

impl From<InboxError> for PolicySaveError {
    fn from(e: InboxError) -> Self {
        PolicySaveError::Store(e)
    }
}
