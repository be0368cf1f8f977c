//! Records of other things than a call: `{time, event, …}`.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::cow;

/// An audit record of something other than a call, told apart by its `event` field: a
/// gateway's tool listing (`mcp_tools_changed`, `mcp_listing_failed`: `server`, `trigger`,
/// `changes` or `error`) or a governed content request (`mcp_resource_read`,
/// `mcp_resource_subscribe`, `mcp_prompt_get`, `mcp_completion`: `agent`, `session`,
/// `server`, `name`, the request's own fields, `outcome` `allowed` or `refused`, and for a
/// refusal `code` and `reasons`).
///
/// A separate type rather than a kind of [`AuditRecord`](super::AuditRecord): an event
/// shares none of a call's fields but `time`, and each kind has its own, so only the
/// envelope is typed and the rest is kept as written, in [`fields`](Self::fields) (the
/// chain's `seq`, `prev` and `hash` included). Replay reads `mcp_tools_changed` events
/// (R46, R52) and counts the others.
///
/// ```
/// use toolgate_core::audit_record::AuditEvent;
/// let event = AuditEvent::new("2030-01-01T00:00:00Z", AuditEvent::MCP_LISTING_FAILED)
///     .with("server", "kb")
///     .with("error", "connection refused");
/// let line = serde_json::to_string(&event).unwrap();
/// assert!(line.starts_with(r#"{"time":"2030-01-01T00:00:00Z","event":"mcp_listing_failed","#));
/// assert!(line.contains(r#""server":"kb""#));
/// let back: AuditEvent<'_> = serde_json::from_str(&line).unwrap();
/// assert_eq!(back, event);
/// assert_eq!(back.str("server"), Some("kb"));
/// assert_eq!(serde_json::Value::Object(back.into_map()), serde_json::from_str::<serde_json::Value>(&line).unwrap());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AuditEvent<'a> {
    /// When it happened (RFC 3339, UTC); absent only in records written by hand.
    #[serde(
        borrow,
        default,
        deserialize_with = "cow::opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub time: Option<Cow<'a, str>>,
    /// What happened: one of the constants below, or a kind this version does not know.
    #[serde(borrow)]
    pub event: Cow<'a, str>,
    /// Every other field, as written.
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

impl<'a> AuditEvent<'a> {
    /// A gateway's listing of a server changed its tools (R52).
    pub const MCP_TOOLS_CHANGED: &'static str = "mcp_tools_changed";
    /// A gateway could not list a server's tools.
    pub const MCP_LISTING_FAILED: &'static str = "mcp_listing_failed";
    /// A session read a resource.
    pub const MCP_RESOURCE_READ: &'static str = "mcp_resource_read";
    /// A session subscribed to a resource.
    pub const MCP_RESOURCE_SUBSCRIBE: &'static str = "mcp_resource_subscribe";
    /// A session got a prompt.
    pub const MCP_PROMPT_GET: &'static str = "mcp_prompt_get";
    /// A session asked for a completion.
    pub const MCP_COMPLETION: &'static str = "mcp_completion";

    /// The event `event` at `time` (RFC 3339), with no other field yet.
    pub fn new(time: impl Into<Cow<'a, str>>, event: impl Into<Cow<'a, str>>) -> Self {
        Self {
            time: Some(time.into()),
            event: event.into(),
            fields: Map::new(),
        }
    }

    /// With the field `key` set to `value` (after those set before it).
    pub fn with(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.fields.insert(key.into(), value.into());
        self
    }

    /// The field `key`, when it is a string.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.fields.get(key).and_then(Value::as_str)
    }

    /// The event as the JSON object an audit sink takes: `time`, `event`, then the other
    /// fields in the order they were set (when `serde_json` keeps insertion order).
    pub fn into_map(self) -> Map<String, Value> {
        let mut m = Map::new();
        if let Some(time) = self.time {
            m.insert("time".into(), Value::from(time.into_owned()));
        }
        m.insert("event".into(), Value::from(self.event.into_owned()));
        m.extend(self.fields);
        m
    }
}
