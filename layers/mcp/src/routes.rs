//! What the call path reads: the connected servers and their listed tools, swapped whole
//! by the gateway whenever a listing or a server changes, read by the call service.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use rmcp::{Peer, RoleClient};

use crate::declare::Listing;

/// What the call path reads, swapped whole whenever a listing or a server changes.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) servers: HashMap<String, ServerView>,
    /// Lower-cased qualified name → (server key, raw tool name), every tool that has it.
    pub(crate) by_qualified: HashMap<String, Vec<(String, String)>>,
}

/// One server, as the call path sees it.
#[derive(Debug)]
pub(crate) struct ServerView {
    pub(crate) id: String,
    pub(crate) peer: Peer<RoleClient>,
    /// The governed calls in flight on the server's connection, with their relays.
    pub(crate) inflight: Arc<crate::relay::InFlight>,
    pub(crate) stale: Option<String>,
    pub(crate) listing: Arc<Listing>,
    /// RFC 8693: calls sent on behalf of their callers, when the server has a token
    /// exchange.
    #[cfg_attr(
        not(feature = "http"),
        expect(dead_code, reason = "exchanged only over streamable HTTP")
    )]
    pub(crate) exchange: Exchange,
}

/// A server's token exchange, when it has one (only streamable HTTP servers can).
#[cfg(feature = "http")]
pub(crate) type Exchange = Option<Arc<crate::exchange::Exchanger>>;
/// A server's token exchange: never, without streamable HTTP.
#[cfg(not(feature = "http"))]
pub(crate) type Exchange = Option<Arc<std::convert::Infallible>>;

/// The gateway as its call service holds it: the current [`State`]; holding it keeps the
/// connections open.
pub(crate) trait Routes: fmt::Debug + Send + Sync {
    /// The state in force now.
    fn routes(&self) -> arc_swap::Guard<Arc<State>>;

    /// The handle of the stack the tools are governed by: only its approval gate's permits
    /// are taken (R38).
    fn handle(&self) -> &toolgate::GovernanceHandle;
}
