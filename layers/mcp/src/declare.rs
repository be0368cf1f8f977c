//! Discovery: an advertised MCP tool becomes a [`ToolDeclaration`], and two listings of
//! one server become a list of changes.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use rmcp::model::Tool;
use serde_json::Value;
use toolgate_core::{McpAnnotations, ToolDeclaration, ToolIdentity};
use toolgate_engine::{ServerSettings, canon};

use crate::config::McpServerConfig;
use crate::drift::{Aspect, ToolChange};

/// One listed tool, as the gateway records it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Listed {
    /// The tool's name as the server listed it (what `tools/call` sends). Behind a
    /// prefixing gateway (R41) this is the listed name; the own name is
    /// `decl.identity.name()`.
    pub(crate) raw: String,
    /// The qualified (wire) name.
    pub(crate) qualified: String,
    /// The declaration registered in the governance snapshot.
    pub(crate) decl: ToolDeclaration,
    /// [`canon::definition_hash`] of `decl`.
    pub(crate) hash: String,
    /// Why the governance snapshot would not take it, if it would not (or the gateway
    /// withholds it): calls are refused.
    pub(crate) unregistered: Option<String>,
    /// The tool as the server listed it (what `toolgate.lock` hashes).
    pub(crate) listed: Tool,
}

/// One server's tool list, in the server's order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Listing {
    pub(crate) tools: Vec<Arc<Listed>>,
    /// Listed name → index.
    pub(crate) by_name: HashMap<String, usize>,
    /// Own name (R41; the listed name without a gateway prefix) → index.
    pub(crate) by_own: HashMap<String, usize>,
    /// Tools that could not be declared at all (raw name, reason), in order.
    pub(crate) rejected: Vec<(String, String)>,
}

impl Listing {
    /// The tool listed under this exact name.
    pub(crate) fn get(&self, raw: &str) -> Option<&Arc<Listed>> {
        self.by_name.get(raw).and_then(|&i| self.tools.get(i))
    }

    /// The tool whose own name (its identity's name, R41) is exactly this.
    pub(crate) fn get_own(&self, own: &str) -> Option<&Arc<Listed>> {
        self.by_own.get(own).and_then(|&i| self.tools.get(i))
    }
}

/// The declaration of one advertised tool (R5): source = the configured server id,
/// annotations recorded as advertised, the host's settings from the server config.
///
/// Behind a prefixing gateway (`settings.tool_prefix`, R41) the identity carries the own
/// name and `listed_name` the name as listed: the form the engine's builder gives it, so
/// the snapshot's record and the listing's declaration compare equal. The host's settings
/// (approval mode, confidential) name the own name.
///
/// The title is the annotations' `title`, or the tool's top-level `title` when the
/// annotations have none: both are what a person is shown, so both are bound by R35.
pub(crate) fn declaration(
    config: &McpServerConfig,
    settings: Option<&ServerSettings>,
    tool: &Tool,
) -> ToolDeclaration {
    let listed = tool.name.as_ref();
    let own = settings.and_then(|s| s.own_name(listed));
    let name = own.unwrap_or(listed);
    let mut decl = ToolDeclaration::new(ToolIdentity::mcp(config.id(), name))
        .approval(config.approval_for(name))
        .confidential(config.withholds(name));
    if own.is_some() {
        decl.listed_name = Some(listed.to_owned());
    }
    if let Some(d) = &tool.description {
        decl = decl.description(d.as_ref());
    }
    if let Some(scope) = config.network() {
        decl = decl.network_override(scope);
    }
    let ann = tool.annotations.as_ref();
    if ann.is_some() || tool.title.is_some() {
        decl = decl.annotations(McpAnnotations {
            title: ann
                .and_then(|a| a.title.clone())
                .or_else(|| tool.title.clone()),
            read_only_hint: ann.and_then(|a| a.read_only_hint),
            destructive_hint: ann.and_then(|a| a.destructive_hint),
            idempotent_hint: ann.and_then(|a| a.idempotent_hint),
            open_world_hint: ann.and_then(|a| a.open_world_hint),
        });
    }
    decl.input_schema = Some(Value::Object((*tool.input_schema).clone()));
    decl
}

/// Builds a listing from what the server advertised. A tool whose name normalises to
/// nothing (R1), that is listed twice, or whose own name behind the gateway prefix is
/// another listed tool's too (R41), is rejected: calls to it are refused.
pub(crate) fn listing(
    config: &McpServerConfig,
    settings: Option<&ServerSettings>,
    tools: &[Tool],
) -> Listing {
    let mut out = Listing::default();
    let mut seen = HashSet::new();
    for tool in tools {
        let raw = tool.name.to_string();
        if !seen.insert(raw.clone()) {
            // The first listing of a name is kept; a second one is an incoherent
            // declaration, reported rather than silently merged.
            out.rejected.push((
                raw.clone(),
                format!("the server lists `{raw}` more than once; only the first is used"),
            ));
            continue;
        }
        let decl = declaration(config, settings, tool);
        if let Some(first) = out.get_own(decl.identity.name()) {
            // R41: two listed names, one own name. The first keeps it.
            out.rejected.push((
                raw.clone(),
                format!(
                    "`{raw}` and `{}` are both the tool `{}` once the gateway prefix `{}` is taken off (R41); only the first is used",
                    first.raw,
                    decl.identity.name(),
                    settings
                        .and_then(|s| s.tool_prefix.as_deref())
                        .unwrap_or_default()
                ),
            ));
            continue;
        }
        let qualified = match decl.identity.qualified_name() {
            Ok(q) => q,
            Err(e) => {
                out.rejected.push((raw, e.to_string()));
                continue;
            }
        };
        let hash = canon::definition_hash(&decl);
        out.by_name.insert(raw.clone(), out.tools.len());
        out.by_own
            .insert(decl.identity.name().to_owned(), out.tools.len());
        out.tools.push(Arc::new(Listed {
            raw,
            qualified,
            decl,
            hash,
            unregistered: None,
            listed: tool.clone(),
        }));
    }
    out
}

fn aspects(old: &ToolDeclaration, new: &ToolDeclaration) -> Vec<Aspect> {
    let mut out = Vec::new();
    if old.description != new.description {
        out.push(Aspect::Description);
    }
    if old.input_schema != new.input_schema {
        out.push(Aspect::InputSchema);
    }
    if old.annotations != new.annotations {
        out.push(Aspect::Annotations);
    }
    if old.confidential != new.confidential
        || old.network_override != new.network_override
        || old.approval != new.approval
    {
        out.push(Aspect::HostSettings);
    }
    out
}

/// What changed from `old` to `new`: added and changed tools in the new listing's order,
/// then removed ones in the old listing's order, then rejections that are new. Postures
/// are filled in once the snapshot is built.
pub(crate) fn diff(old: &Listing, new: &Listing) -> Vec<ToolChange> {
    let mut out = Vec::new();
    for t in &new.tools {
        match old.get(&t.raw) {
            None => out.push(ToolChange::Added {
                tool: t.qualified.clone(),
                identity: t.decl.identity.clone(),
                hash: t.hash.clone(),
                posture: None,
            }),
            Some(o) if o.hash != t.hash => out.push(ToolChange::Changed {
                tool: t.qualified.clone(),
                identity: t.decl.identity.clone(),
                old_hash: o.hash.clone(),
                new_hash: t.hash.clone(),
                aspects: aspects(&o.decl, &t.decl),
                posture: None,
            }),
            Some(_) => {}
        }
    }
    for o in &old.tools {
        if new.get(&o.raw).is_none() {
            out.push(ToolChange::Removed {
                tool: o.qualified.clone(),
                identity: o.decl.identity.clone(),
                old_hash: o.hash.clone(),
            });
        }
    }
    for (name, reason) in &new.rejected {
        if !old.rejected.iter().any(|(n, r)| n == name && r == reason) {
            out.push(ToolChange::Rejected {
                name: name.clone(),
                reason: reason.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ToolAnnotations;
    use serde_json::json;

    fn tool(name: &str, description: &str, ann: Option<ToolAnnotations>) -> Tool {
        let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        let Value::Object(schema) = schema else {
            unreachable!()
        };
        let mut t = Tool::new(name.to_owned(), description.to_owned(), Arc::new(schema));
        t.annotations = ann;
        t
    }

    fn config() -> McpServerConfig {
        McpServerConfig::custom("kb").unwrap()
    }

    #[test]
    fn r5_annotations_are_recorded_as_advertised_and_absent_stays_absent() {
        let ro = ToolAnnotations::new().read_only(true).open_world(false);
        let d = declaration(&config(), None, &tool("page", "Reads a page", Some(ro)));
        let a = d.annotations.unwrap();
        assert_eq!(a.read_only_hint, Some(true));
        assert_eq!(a.open_world_hint, Some(false));
        assert_eq!(a.destructive_hint, None, "unset stays unset");
        assert_eq!(d.identity, ToolIdentity::mcp("kb", "page"));
        assert_eq!(d.description.as_deref(), Some("Reads a page"));
        assert!(d.input_schema.is_some());

        let bare = declaration(&config(), None, &tool("bare", "x", None));
        assert!(bare.annotations.is_none());
    }

    #[test]
    fn r35_drift_diff_reports_every_change_with_hashes() {
        let c = config();
        let old = listing(
            &c,
            None,
            &[
                tool("a", "A", None),
                tool("b", "B", None),
                tool("gone", "G", None),
            ],
        );
        let new = listing(
            &c,
            None,
            &[
                tool("a", "A", None),
                tool("b", "B, and it also deletes", None),
                tool("new", "N", None),
            ],
        );
        let d = diff(&old, &new);
        let kinds: Vec<_> = d.iter().map(|c| (c.kind(), c.tool().to_owned())).collect();
        assert_eq!(
            kinds,
            [
                ("changed", "kb__b".to_owned()),
                ("added", "kb__new".to_owned()),
                ("removed", "kb__gone".to_owned())
            ]
        );
        let ToolChange::Changed {
            old_hash,
            new_hash,
            aspects,
            ..
        } = &d[0]
        else {
            panic!()
        };
        assert_ne!(old_hash, new_hash);
        assert_eq!(aspects, &[Aspect::Description]);
        assert!(diff(&new, &new).is_empty());
    }

    #[test]
    fn duplicates_and_unnameable_tools_are_rejected() {
        let l = listing(
            &config(),
            None,
            &[
                tool("a", "1", None),
                tool("a", "2", None),
                tool("!!!", "x", None),
            ],
        );
        assert_eq!(l.tools.len(), 1);
        assert_eq!(l.get("a").unwrap().decl.description.as_deref(), Some("1"));
        assert_eq!(l.rejected.len(), 2);
    }

    #[test]
    fn r41_prefixed_tools_are_declared_by_their_own_name_and_keep_the_listed_one() {
        let settings = ServerSettings::untrusted().tool_prefix("kb-");
        let c = config().approval("page", toolgate_core::ApprovalMode::Deny);
        let l = listing(
            &c,
            Some(&settings),
            &[
                tool("kb-page", "P", None),
                tool("KB-find", "F", None),
                tool("plain", "N", None),
                tool("kb-", "only the prefix", None),
            ],
        );
        assert!(l.rejected.is_empty(), "{:?}", l.rejected);
        let page = l.get("kb-page").unwrap();
        assert_eq!(page.decl.identity, ToolIdentity::mcp("kb", "page"));
        assert_eq!(page.decl.listed_name.as_deref(), Some("kb-page"));
        assert_eq!(page.qualified, "kb__page");
        assert_eq!(page.raw, "kb-page", "sent as listed");
        assert_eq!(
            page.decl.approval,
            toolgate_core::ApprovalMode::Deny,
            "host settings name the own name"
        );
        assert!(Arc::ptr_eq(page, l.get_own("page").unwrap()));
        assert_eq!(l.get_own("find").unwrap().raw, "KB-find");
        assert!(
            l.get_own("kb-page").is_none(),
            "the listed name is no own name"
        );
        for kept in ["plain", "kb-"] {
            let t = l.get_own(kept).unwrap();
            assert_eq!(t.decl.listed_name, None);
            assert_eq!(t.raw, kept);
        }
    }

    #[test]
    fn r41_two_listed_names_with_one_own_name_keep_the_first() {
        let settings = ServerSettings::untrusted().tool_prefix("kb-");
        let l = listing(
            &config(),
            Some(&settings),
            &[
                tool("kb-page", "1", None),
                tool("KB-page", "2", None),
                tool("page", "3", None),
            ],
        );
        assert_eq!(l.tools.len(), 1);
        assert_eq!(l.get_own("page").unwrap().raw, "kb-page");
        assert_eq!(l.rejected.len(), 2, "{:?}", l.rejected);
        assert!(l.rejected[0].1.contains("R41"), "{:?}", l.rejected);
        assert!(l.rejected[1].1.contains("`kb-page`"), "{:?}", l.rejected);
    }

    #[test]
    fn r41_relisting_the_same_listed_name_is_a_change_not_an_addition() {
        let settings = ServerSettings::untrusted().tool_prefix("kb-");
        let c = config();
        let old = listing(&c, Some(&settings), &[tool("kb-page", "old", None)]);
        let new = listing(&c, Some(&settings), &[tool("kb-page", "new", None)]);
        let d = diff(&old, &new);
        assert_eq!(d.len(), 1);
        let ToolChange::Changed { tool, identity, .. } = &d[0] else {
            panic!("{d:?}")
        };
        assert_eq!(tool, "kb__page");
        assert_eq!(identity, &ToolIdentity::mcp("kb", "page"));
    }
}
