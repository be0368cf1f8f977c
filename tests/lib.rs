//! Whole-stack tests live in this crate's `tests/` folder.
