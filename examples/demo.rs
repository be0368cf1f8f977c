//! The main demo (written next).
fn main() {}
