//! Criterion benches live in this crate's `benches/` folder.
