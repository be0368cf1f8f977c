//! Reading one section of the configuration document, as the engine reads its own: a crate
//! that owns a section (the approval page its `approvers.api_keys` and `approvers.slack`)
//! reads it with [`Section`], so that unknown fields, `null` and wrong types are
//! errors named by their path everywhere alike, and `check` reports every section's errors
//! together; [`type_name`] and [`list`] word its messages as the
//! engine's.

pub use crate::error::{Obj as Section, field, index, list, type_name};
