//! What the operator says about servers and the behaviour posture's verdict on one record
//! (R27–R31, R41).

use std::collections::HashMap;

use toolgate_core::ToolKind;
use toolgate_core::names::name_key;

use crate::catalog::{PostureStatus, Record};

/// What the operator says about one MCP server.
///
/// ```
/// use toolgate_engine::ServerSettings;
/// let s = ServerSettings::trusted().tool_prefix("github-");
/// assert_eq!(s.own_name("github-create_issue"), Some("create_issue"));
/// assert_eq!(s.own_name("GitHub-create_issue"), Some("create_issue"), "ASCII case-insensitively");
/// assert_eq!(s.own_name("github-"), None, "only the prefix: kept as listed");
/// assert_eq!(s.own_name("create_issue"), None, "no prefix: kept as listed");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerSettings {
    /// Believe the server's read-only annotations for the posture (R28).
    pub trust_tool_annotations: bool,
    /// The server is reached through a gateway that lists each tool as this prefix followed
    /// by the tool's own name (R41). Used as written, never trimmed; must not be blank.
    pub tool_prefix: Option<String>,
    /// The operator's labels for every tool of the server, present or discovered later
    /// (`servers.NAME.labels`, R49).
    pub labels: Vec<String>,
}

impl ServerSettings {
    /// A server whose read-only claims are believed.
    pub fn trusted() -> Self {
        Self {
            trust_tool_annotations: true,
            ..Self::default()
        }
    }

    /// A server whose read-only claims exempt nothing (the default).
    pub fn untrusted() -> Self {
        Self::default()
    }

    /// Gives every tool of the server these labels (R49).
    #[must_use]
    pub fn labels<I, S>(mut self, labels: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.labels = labels.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the gateway tool prefix (R41).
    #[must_use]
    pub fn tool_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.tool_prefix = Some(prefix.into());
        self
    }

    /// A listed name's own name behind this server's gateway prefix (R41): the listed name
    /// without the prefix when it starts with it (ASCII case-insensitively) and is longer;
    /// `None` when the name keeps its listed spelling.
    pub fn own_name<'a>(&self, listed: &'a str) -> Option<&'a str> {
        let prefix = self.tool_prefix.as_deref()?;
        if listed.len() <= prefix.len() {
            return None;
        }
        let head = listed.as_bytes().get(..prefix.len())?;
        if !head.eq_ignore_ascii_case(prefix.as_bytes()) {
            return None;
        }
        // Equal bytes up to ASCII case: the split point is a character boundary.
        listed.get(prefix.len()..)
    }
}

/// An exemption from the behaviour posture (R31).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exemption {
    /// The tool's own name, compared case-insensitively.
    pub tool: String,
    /// The MCP server it covers; without one, local and HTTP tools and tools of trusted
    /// servers.
    pub server: Option<String>,
    /// Why; required, not blank.
    pub reason: String,
}

impl Exemption {
    /// An exemption for `tool` with a reason.
    pub fn new(tool: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            tool: tool.into(),
            server: None,
            reason: reason.into(),
        }
    }

    /// Limits the exemption to one MCP server.
    #[must_use]
    pub fn server(mut self, server: impl Into<String>) -> Self {
        self.server = Some(server.into());
        self
    }

    /// Whether the entry covers this record's actual source (R31).
    fn covers(&self, record: &Record, servers: &HashMap<String, ServerSettings>) -> bool {
        let id = record.identity();
        if !self.tool.eq_ignore_ascii_case(id.name()) {
            return false;
        }
        match (&self.server, id.kind()) {
            (Some(server), ToolKind::Mcp) => server.eq_ignore_ascii_case(id.source()),
            (Some(_), _) => false,
            (None, ToolKind::Mcp) => trusted(servers, id.source()),
            (None, _) => true,
        }
    }
}

pub(super) fn trusted(servers: &HashMap<String, ServerSettings>, server: &str) -> bool {
    servers
        .get(&name_key(server))
        .is_some_and(|s| s.trust_tool_annotations)
}

/// The posture's verdict on one record (R28–R31).
pub(super) fn posture_of(
    record: &Record,
    servers: &HashMap<String, ServerSettings>,
    exemptions: &[Exemption],
) -> PostureStatus {
    if let Some(ex) = exemptions.iter().find(|e| e.covers(record, servers)) {
        return PostureStatus::Exempt(format!("exempted: {}", ex.reason.trim()));
    }
    let id = record.identity();
    match id.kind() {
        ToolKind::Mcp => {
            let ann = record.decl.annotations.clone().unwrap_or_default();
            let trusted = trusted(servers, id.source());
            if ann.destructive_hint == Some(true) {
                // R29/R30: a destructive claim outranks a read-only one and is always believed.
                PostureStatus::Gated(format!(
                    "server `{}` declares `{}` destructive",
                    id.source(),
                    id.name()
                ))
            } else if ann.read_only_hint == Some(true) && trusted {
                PostureStatus::Exempt(format!(
                    "trusted server `{}` declares `{}` read-only",
                    id.source(),
                    id.name()
                ))
            } else if ann.read_only_hint == Some(true) {
                PostureStatus::Gated(format!(
                    "server `{}` is not trusted, so its read-only claim for `{}` exempts nothing",
                    id.source(),
                    id.name()
                ))
            } else {
                PostureStatus::Gated(format!(
                    "server `{}` does not declare `{}` read-only",
                    id.source(),
                    id.name()
                ))
            }
        }
        _ if record.decl.read_only => {
            PostureStatus::Exempt(format!("the host declares `{}` read-only", id.name()))
        }
        _ => PostureStatus::Gated(format!(
            "the host does not declare `{}` read-only",
            id.name()
        )),
    }
}
