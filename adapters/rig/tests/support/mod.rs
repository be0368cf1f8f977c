//! What the tests share: the scripted model.

pub(crate) mod scripted;
