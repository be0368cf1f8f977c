#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

mod policy;

pub use policy::ToolgatePolicy;
pub use toolgate::hosted::HostedStack;
