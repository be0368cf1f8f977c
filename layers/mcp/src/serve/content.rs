//! Resources, prompts and completion, governed (serve.md).
//!
//! Offered downstream when an upstream server has them. Each is named like a tool: a
//! resource, resource template or prompt of server `kb` named `page` is `kb__page`; a
//! resource's URI is kept as the server gave it, attributed to the server that listed it.
//! What an agent sees and may read, subscribe to, get or complete:
//!
//! 1. **allowed**: its qualified name is matched by the agent's `allowed_resources` /
//!    `allowed_prompts` (names or R48 patterns, ASCII case-insensitive), and by every
//!    ancestor's (R39); nothing is allowed by default;
//! 2. **confidentiality** (R7): a confidential agent is not shown what the server's
//!    `confidential` setting withholds (every name, or these names);
//! 3. **air gap** (R8, resources only): on an air-gapped host, a resource of an open-world
//!    server is egress — one of whose tools is open-world (`openWorldHint` true or absent),
//!    or that lists no tools — unless the operator's `network` for the server says otherwise.
//!
//! A resource's URI is attributed by RFC 3986 normalisation (the stricter reading,
//! [`claim_key`]): every spelling of a listed resource's URI is that resource, and a
//! template answers only a URI no listed resource claims.
//!
//! A read, subscription, get or completion of what the agent may not see — not allowed,
//! withheld, egress on an air-gapped host, or offered by no server at all — is refused
//! before anything is sent, with one and the same JSON-RPC error whose `data.toolgate`
//! carries the outcome, the code `not_allowed` and one reason, so the caller learns nothing
//! about what exists that it may not see. The audit record keeps the true code
//! (`not_allowed`, `confidential`, `air_gapped`, `unknown_tool`) and reason. Every read,
//! subscription, get and completion, refused or not, is audited (`event`:
//! `mcp_resource_read`, `mcp_resource_subscribe`, `mcp_prompt_get`, `mcp_completion`; URIs
//! and arguments redacted) before it is sent — an audit record that cannot be written
//! refuses it — and traced in a span (`toolgate.mcp.content`).
//! `notifications/resources/list_changed` and `…/prompts/list_changed` of any upstream go
//! to every session that listed; a `notifications/resources/updated` goes to the sessions
//! subscribed to that URI whose agent may still read it.

use std::collections::HashMap;

use rmcp::model::{
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, Prompt,
    ReadResourceRequestParams, ReadResourceResult, Reference, Resource, ResourceTemplate,
    SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::{Peer, RoleClient};
use toolgate::audit::AuditSink;
use toolgate::redact::Redactor;
use toolgate_core::audit_record::AuditEvent;
use toolgate_core::{NetworkScope, RefusalCode};

use super::*;
use crate::ContentEvent;

mod requests;

/// What one upstream server offers, as last listed (dropped on its `list_changed`).
#[derive(Default)]
struct Catalog {
    resources: Vec<Resource>,
    templates: Vec<ResourceTemplate>,
    prompts: Vec<Prompt>,
}

pub(super) struct Subscription {
    /// The session, or a `subscriptions/listen` stream's key.
    pub(super) session: String,
    pub(super) agent: String,
    pub(super) to: notify::Notify,
    pub(super) server: String,
    pub(super) name: String,
    pub(super) uri: String,
}

/// The content state of one `toolgate mcp serve`.
pub(super) struct Content {
    audit: Option<Arc<dyn AuditSink>>,
    redactor: Redactor,
    catalogs: tokio::sync::Mutex<HashMap<String, Arc<Catalog>>>,
    pub(super) subscriptions: Mutex<Vec<Subscription>>,
    /// Sessions that listed resources or prompts (and `subscriptions/listen` streams that
    /// asked for their changes): told when a list changes.
    pub(super) listeners: Mutex<Vec<(String, notify::Notify)>>,
}

impl Content {
    pub(super) fn new(audit: Option<Arc<dyn AuditSink>>, redactor: Redactor) -> Self {
        Content {
            audit,
            redactor,
            catalogs: tokio::sync::Mutex::default(),
            subscriptions: Mutex::default(),
            listeners: Mutex::default(),
        }
    }
}

/// A refusal: (code, reason).
type Refused = (RefusalCode, String);

fn refusal_error(what: &str, (code, reason): &Refused) -> ErrorData {
    ErrorData::invalid_request(
        format!("toolgate refused {what} ({code}): {reason}"),
        Some(
            json!({"toolgate": {"outcome": "refused", "code": code.to_string(), "reasons": [reason]}}),
        ),
    )
}

/// Whether an RFC 6570 URI template matches a URI: `{x}` stands for a non-empty run without
/// `/`, `{+x}` and `{#x}` for any run, `{?x}` / `{&x}` for an optional query.
pub(crate) fn template_matches(template: &str, uri: &str) -> bool {
    enum Part<'a> {
        Lit(&'a str),
        Var(char),
    }
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            return false;
        };
        if open > 0 {
            parts.push(Part::Lit(&rest[..open]));
        }
        let expr = &rest[open + 1..open + close];
        parts.push(Part::Var(expr.chars().next().unwrap_or('x')));
        rest = &rest[open + close + 1..];
    }
    if !rest.is_empty() {
        parts.push(Part::Lit(rest));
    }
    fn go(parts: &[Part<'_>], uri: &str, depth: usize) -> bool {
        if depth > 64 {
            return false;
        }
        let Some((first, more)) = parts.split_first() else {
            return uri.is_empty();
        };
        match first {
            Part::Lit(l) => uri.strip_prefix(l).is_some_and(|u| go(more, u, depth + 1)),
            Part::Var(op) => {
                let (min, slash) = match op {
                    '+' | '#' => (0, true),
                    '?' | '&' => (0, true),
                    _ => (1, false),
                };
                let ends: Vec<usize> = uri
                    .char_indices()
                    .map(|(i, _)| i)
                    .chain(std::iter::once(uri.len()))
                    .collect();
                for &end in &ends {
                    if end < min {
                        continue;
                    }
                    let taken = uri.get(..end).unwrap_or_default();
                    if !slash && taken.contains('/') {
                        break;
                    }
                    if go(more, uri.get(end..).unwrap_or_default(), depth + 1) {
                        return true;
                    }
                }
                false
            }
        }
    }
    go(&parts, uri, 0)
}

/// What a URI is compared by when deciding which listed resource it names: RFC 3986
/// syntax-based normalisation (section 6.2.2: percent-encodings of unreserved characters
/// decoded, the others' hex upper-cased, dot segments removed), then the stricter reading:
/// the fragment and the query dropped (a server may well ignore them) and ASCII case folded
/// (scheme and host are case-insensitive, and a server may fold the path too). So
/// `kb://docs/payroll?`, `…/payroll#`, `…/%70ayroll` and `…/PAYROLL` are all the listed
/// `kb://docs/payroll`, never a template's.
pub(crate) fn claim_key(uri: &str) -> String {
    let uri = uri.split('#').next().unwrap_or_default();
    let uri = uri.split('?').next().unwrap_or_default();
    // Percent-decoding of unreserved characters, hex upper-cased for the rest.
    let bytes = uri.as_bytes();
    let mut decoded = String::with_capacity(uri.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = |at: usize| bytes.get(at).and_then(|c| (*c as char).to_digit(16));
        if b == b'%'
            && let (Some(h), Some(l)) = (hex(i + 1), hex(i + 2))
        {
            let c = char::from(u8::try_from(h * 16 + l).unwrap_or(0));
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~') {
                decoded.push(c);
            } else {
                decoded.push('%');
                decoded.extend(
                    uri.get(i + 1..i + 3)
                        .unwrap_or_default()
                        .chars()
                        .map(|c| c.to_ascii_uppercase()),
                );
            }
            i += 3;
            continue;
        }
        let len = uri
            .get(i..)
            .and_then(|r| r.chars().next())
            .map_or(1, char::len_utf8);
        decoded.push_str(uri.get(i..i + len).unwrap_or_default());
        i += len;
    }
    // Dot segments (RFC 3986 section 5.2.4) of the path after `scheme://authority`.
    let (head, path) = match decoded.find("://") {
        Some(at) => {
            let after = at + 3;
            let path_at = decoded
                .get(after..)
                .and_then(|r| r.find('/'))
                .map_or(decoded.len(), |p| after + p);
            decoded.split_at(path_at)
        }
        None => match decoded.find(':') {
            Some(at) => decoded.split_at(at + 1),
            None => ("", decoded.as_str()),
        },
    };
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').collect();
    let last = segments.len().saturating_sub(1);
    for (n, seg) in segments.iter().enumerate() {
        match *seg {
            "." => {
                if n == last {
                    out.push("");
                }
            }
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
                if n == last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    format!("{head}{}", out.join("/")).to_ascii_lowercase()
}

impl Shared {
    /// How the client sees the name of a resource, template or prompt: qualified
    /// (`server__name`), or its own name with `mcp.wire_names: "own"`.
    fn wire_name(&self, server: &str, name: &str) -> String {
        match &self.wire {
            wire::Wire::Own { .. } => name.to_owned(),
            wire::Wire::Qualified => format!("{server}__{name}"),
        }
    }

    /// The connected servers offering what `has` says, with their connections.
    fn offering(
        &self,
        has: impl Fn(&rmcp::model::ServerCapabilities) -> bool,
    ) -> Vec<(String, Peer<RoleClient>, rmcp::model::ServerCapabilities)> {
        self.gateway
            .servers()
            .into_iter()
            .filter_map(|id| {
                let (peer, caps) = self.gateway.upstream(&id)?;
                let caps = caps?;
                has(&caps).then_some((id, peer, caps))
            })
            .collect()
    }

    /// One server's catalog, listed now when it is not cached. A listing that fails is
    /// empty (nothing of that server is offered), and not cached.
    async fn catalog(&self, server: &str, peer: &Peer<RoleClient>) -> Arc<Catalog> {
        if let Some(c) = self.content.catalogs.lock().await.get(server) {
            return Arc::clone(c);
        }
        let caps = peer.peer_info().map(|i| i.capabilities.clone());
        let mut cat = Catalog::default();
        let mut ok = true;
        if caps.as_ref().is_some_and(|c| c.resources.is_some()) {
            match peer.list_all_resources().await {
                Ok(r) => cat.resources = r,
                Err(e) => {
                    ok = false;
                    tracing::warn!(target: "toolgate_mcp::content", server, "the resources of MCP server `{server}` could not be listed: {e}");
                }
            }
            match peer.list_all_resource_templates().await {
                Ok(t) => cat.templates = t,
                Err(e) => {
                    ok = false;
                    tracing::warn!(target: "toolgate_mcp::content", server, "the resource templates of MCP server `{server}` could not be listed: {e}");
                }
            }
        }
        if caps.as_ref().is_some_and(|c| c.prompts.is_some()) {
            match peer.list_all_prompts().await {
                Ok(p) => cat.prompts = p,
                Err(e) => {
                    ok = false;
                    tracing::warn!(target: "toolgate_mcp::content", server, "the prompts of MCP server `{server}` could not be listed: {e}");
                }
            }
        }
        let cat = Arc::new(cat);
        if ok {
            self.content
                .catalogs
                .lock()
                .await
                .insert(server.to_owned(), Arc::clone(&cat));
        }
        cat
    }

    /// Whether `agent` may read the resource at `uri` (its owner found as `resources/read`
    /// finds it, then the content policy), recording nothing: for listings.
    pub(super) async fn may_read_uri(&self, agent: &str, uri: &str) -> bool {
        match self.owner_of(uri).await {
            Ok((server, name, _)) => self.content_verdict(agent, &server, &name, true).is_ok(),
            Err(_) => false,
        }
    }

    /// Why `agent` may not see the resource (or prompt) `name` of `server`, if it may not.
    fn content_verdict(
        &self,
        agent: &str,
        server: &str,
        name: &str,
        resource: bool,
    ) -> Result<(), Refused> {
        let governance = self.gateway.handle().load();
        let qualified = format!("{server}__{name}");
        let Some(profile) = governance.agent(agent) else {
            return Err((
                RefusalCode::NotAllowed,
                format!("no agent profile `{agent}`"),
            ));
        };
        let (allowed, field) = if resource {
            (profile.allows_resource(&qualified), "allowed_resources")
        } else {
            (profile.allows_prompt(&qualified), "allowed_prompts")
        };
        if !allowed {
            return Err((
                RefusalCode::NotAllowed,
                format!("`{qualified}` is not in agent `{agent}`'s `{field}`"),
            ));
        }
        let config = self.gateway.server_config(server);
        if profile.confidential && config.as_ref().is_some_and(|c| c.withholds(name)) {
            return Err((
                RefusalCode::Confidential,
                format!(
                    "agent `{agent}` does confidential work and server `{server}` withholds `{name}` from it"
                ),
            ));
        }
        if resource && governance.settings().air_gapped {
            let scope = config
                .as_ref()
                .and_then(|c| c.network())
                .unwrap_or_else(|| {
                    if self.gateway.open_world(server) {
                        NetworkScope::Egress
                    } else {
                        NetworkScope::None
                    }
                });
            if scope == NetworkScope::Egress {
                return Err((
                    RefusalCode::AirGapped,
                    format!(
                        "the host is air-gapped and `{qualified}` is a resource of an open-world server (egress; set the server's `network` to say otherwise)"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Writes one audit record (and traces it); `false` when the record could not be
    /// written (the request is then refused, R33).
    fn content_record(&self, record: AuditEvent<'_>) -> bool {
        tracing::info!(
            target: "toolgate_mcp::content",
            event = record.event.as_ref(),
            agent = record.str("agent").unwrap_or_default(),
            name = record.str("name").unwrap_or_default(),
            outcome = record.str("outcome").unwrap_or_default(),
            "MCP content request"
        );
        match &self.content.audit {
            None => true,
            Some(sink) => match sink.write(record.into_map()) {
                Ok(()) => true,
                Err(e) => {
                    tracing::error!(target: "toolgate_mcp::content", "the audit record could not be written: {e}");
                    false
                }
            },
        }
    }

    /// Ends `key`'s subscription to `uri` (a session's `resources/unsubscribe`, or a
    /// `subscriptions/listen` stream that ended); the upstream is told when nobody else
    /// listens to it.
    pub(super) async fn unsubscribe_uri(&self, key: &str, uri: &str) {
        let (server, last) = {
            let mut subs = lock(&self.content.subscriptions);
            let Some(i) = subs.iter().position(|s| s.session == key && s.uri == uri) else {
                return;
            };
            let gone = subs.remove(i);
            let last = !subs.iter().any(|s| s.server == gone.server && s.uri == uri);
            (gone.server, last)
        };
        if last && let Some((peer, _)) = self.gateway.upstream(&server) {
            #[allow(
                deprecated,
                reason = "resources/unsubscribe: what today's servers take"
            )]
            let _ = peer
                .unsubscribe(UnsubscribeRequestParams::new(uri.to_owned()))
                .await;
        }
    }

    pub(super) fn listen(&self, session: &str, to: &notify::Notify) {
        let mut l = lock(&self.content.listeners);
        l.retain(|(_, p)| !p.closed());
        if !l.iter().any(|(s, _)| s == session) {
            l.push((session.to_owned(), to.clone()));
        }
    }

    /// The server and name of what `uri` is: a listed resource that claims it
    /// ([`claims`]: RFC 3986 normalisation, the stricter reading), else a template that
    /// matches it — a template answers only a URI no listed resource of any server claims.
    /// Several servers: refused (`unknown_tool`, ambiguous).
    async fn owner_of(&self, uri: &str) -> Result<(String, String, Peer<RoleClient>), Refused> {
        let mut found: Vec<(String, String, Peer<RoleClient>)> = Vec::new();
        let servers = self.offering(|c| c.resources.is_some());
        let key = claim_key(uri);
        for (id, peer, _) in &servers {
            let cat = self.catalog(id, peer).await;
            if let Some(r) = cat.resources.iter().find(|r| claim_key(&r.uri) == key) {
                found.push((id.clone(), r.name.clone(), peer.clone()));
            }
        }
        if found.is_empty() {
            for (id, peer, _) in &servers {
                let cat = self.catalog(id, peer).await;
                if let Some(t) = cat
                    .templates
                    .iter()
                    .find(|t| template_matches(&t.uri_template, uri))
                {
                    found.push((id.clone(), t.name.clone(), peer.clone()));
                }
            }
        }
        match found.len() {
            1 => Ok(found.remove(0)),
            0 => Err((
                RefusalCode::UnknownTool,
                format!("no upstream server lists the resource `{uri}` or a template matching it"),
            )),
            _ => Err((
                RefusalCode::UnknownTool,
                format!(
                    "the resource `{uri}` is listed by several upstream servers ({}); toolgate does not guess which",
                    found
                        .iter()
                        .map(|(s, _, _)| format!("`{s}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }

    /// The server and the listed name of a qualified prompt name (`server__name`, R2).
    async fn prompt_owner(
        &self,
        qualified: &str,
    ) -> Result<(String, String, Peer<RoleClient>), Refused> {
        let unknown = || {
            (
                RefusalCode::UnknownTool,
                format!("no upstream server lists the prompt `{qualified}`"),
            )
        };
        // `mcp.wire_names: "own"`: the one server's prompts by their own names.
        let (server, own) = match &self.wire {
            wire::Wire::Own { server } => (server.as_str(), qualified),
            wire::Wire::Qualified => qualified.split_once("__").ok_or_else(unknown)?,
        };
        for (id, peer, _) in self.offering(|c| c.prompts.is_some()) {
            if !id.eq_ignore_ascii_case(server) {
                continue;
            }
            let cat = self.catalog(&id, &peer).await;
            let exact = cat.prompts.iter().find(|p| p.name == own);
            let folded: Vec<&Prompt> = cat
                .prompts
                .iter()
                .filter(|p| p.name.eq_ignore_ascii_case(own))
                .collect();
            let p = exact.or(match folded.as_slice() {
                [one] => Some(*one),
                _ => None,
            });
            return p
                .map(|p| (id.clone(), p.name.clone(), peer.clone()))
                .ok_or_else(unknown);
        }
        Err(unknown())
    }

    /// Drops the catalog of a server whose list changed and tells the listening sessions.
    pub(super) async fn content_changed(&self, event: ContentEvent) {
        match event {
            ContentEvent::ResourcesChanged(server) => {
                self.content.catalogs.lock().await.remove(&server);
                for to in self.listeners() {
                    to.resources_changed().await;
                }
            }
            ContentEvent::PromptsChanged(server) => {
                self.content.catalogs.lock().await.remove(&server);
                for to in self.listeners() {
                    to.prompts_changed().await;
                }
            }
            ContentEvent::ResourceUpdated { server, uri } => {
                let due: Vec<(notify::Notify, String, String)> = {
                    let mut subs = lock(&self.content.subscriptions);
                    subs.retain(|s| !s.to.closed());
                    subs.iter()
                        .filter(|s| s.server == server && s.uri == uri)
                        .map(|s| (s.to.clone(), s.agent.clone(), s.name.clone()))
                        .collect()
                };
                for (to, agent, name) in due {
                    // Only while the agent may still read it (a reload may have changed that).
                    if self.content_verdict(&agent, &server, &name, true).is_ok() {
                        to.resource_updated(&uri).await;
                    }
                }
            }
        }
    }

    fn listeners(&self) -> Vec<notify::Notify> {
        let mut l = lock(&self.content.listeners);
        l.retain(|(_, p)| !p.closed());
        l.iter().map(|(_, p)| p.clone()).collect()
    }
}

/// Forwards the gateway's content notifications to the sessions, until the server is gone.
pub(super) fn spawn_content_watcher(weak: Weak<Shared>, gateway: &McpGateway) {
    let mut events = gateway.subscribe_content();
    tokio::spawn(async move {
        loop {
            let event = match events.recv().await {
                Ok(e) => e,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            };
            let Some(shared) = weak.upgrade() else { break };
            shared.content_changed(event).await;
        }
    });
}

/// The capabilities the session declares for content: what any upstream has.
pub(super) fn declared(gateway: &McpGateway) -> (bool, bool, bool, bool) {
    let (mut resources, mut subscribe, mut prompts, mut completions) = (false, false, false, false);
    for id in gateway.servers() {
        if let Some((_, Some(c))) = gateway.upstream(&id) {
            resources |= c.resources.is_some();
            subscribe |= c
                .resources
                .as_ref()
                .is_some_and(|r| r.subscribe == Some(true));
            prompts |= c.prompts.is_some();
            completions |= c.completions.is_some();
        }
    }
    (resources, subscribe, prompts, completions)
}

#[cfg(test)]
mod tests {
    use super::template_matches;

    #[test]
    fn issue33_every_spelling_of_a_listed_uri_is_claimed_by_it() {
        use super::claim_key;
        let listed = claim_key("kb://docs/payroll");
        for spelling in [
            "kb://docs/payroll",
            "kb://docs/payroll?",
            "kb://docs/payroll#",
            "kb://docs/payroll?x=1#y",
            "kb://docs/%70ayroll",
            "kb://docs/%70AYROLL",
            "kb://docs/PAYROLL",
            "KB://DOCS/payroll",
            "kb://docs/./payroll",
            "kb://docs/other/../payroll",
        ] {
            assert_eq!(claim_key(spelling), listed, "{spelling}");
        }
        for other in [
            "kb://docs/payrolls",
            "kb://docs/pay%2Froll",
            "kb://doc/payroll",
        ] {
            assert_ne!(claim_key(other), listed, "{other}");
        }
        assert_eq!(claim_key("file:///a/b/../c"), "file:///a/c");
        assert_eq!(claim_key("urn:x:%7e"), "urn:x:~");
    }

    #[test]
    fn uri_templates_match_as_rfc_6570_level_one_and_two() {
        assert!(template_matches(
            "test://template/{id}/data",
            "test://template/123/data"
        ));
        assert!(!template_matches(
            "test://template/{id}/data",
            "test://template//data"
        ));
        assert!(!template_matches(
            "test://template/{id}/data",
            "test://template/1/2/data"
        ));
        assert!(template_matches("file:///{+path}", "file:///a/b/c.txt"));
        assert!(template_matches("demo://r/{id}{?q}", "demo://r/7?q=1"));
        assert!(template_matches("demo://r/{id}{?q}", "demo://r/7"));
        assert!(!template_matches("demo://r/{id}", "other://r/7"));
        assert!(!template_matches("demo://r/{id", "demo://r/7"));
    }
}
