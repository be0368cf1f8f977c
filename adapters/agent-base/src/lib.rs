#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod policy;

pub use policy::ToolgatePolicy;
pub use toolgate::hosted::HostedStack;
