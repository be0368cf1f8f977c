#![doc = include_str!("../README.md")]
//!
//! ## Ordering
//!
//! The hook decides at dispatch, before any hook registered after it; a hook registered
//! before it may rewrite the arguments it sees (it decides the rewritten call). Between the
//! hook and the tool, a [`GovernedTool`] checks the call's permit against the input it is
//! about to run (R38), so nothing rewritten after the decision runs undecided. The onion
//! inside the stack is toolgate's own ([`toolgate::guide::layers`]).
#![forbid(unsafe_code)]

mod gate;
mod hook;
mod output;
mod tool;

pub use gate::AgentGate;
pub use hook::ToolgateHook;
pub use tool::GovernedTool;

pub use toolgate::hosted::HostedStack;
