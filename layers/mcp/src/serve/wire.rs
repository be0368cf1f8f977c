//! The names of the downstream wire (`mcp.wire_names`): with `"own"`, the one server's tools
//! are listed by their own names and a call by own name is mapped to the tool's qualified
//! name before the governed stack (which decides by qualified names, as always).

use rmcp::model::Tool;
use toolgate_core::{Check, Refusal, RefusalCode, ToolKind};
use toolgate_engine::Governance;

use super::WireNames;
use crate::McpGateway;

/// How the tools are named on the downstream wire, with the one server `"own"` names are of.
#[derive(Debug, Clone)]
pub(super) enum Wire {
    Qualified,
    Own { server: String },
}

impl Wire {
    pub(super) fn new(names: WireNames, servers: &[crate::McpServerConfig]) -> Self {
        match (names, servers) {
            (WireNames::Own, [one]) => Wire::Own {
                server: one.id().to_owned(),
            },
            _ => Wire::Qualified,
        }
    }

    /// `tools` (by qualified name, as the exposure lists them) as the client sees them: by
    /// own name in `"own"` mode, where a tool that is not the server's is not shown (no own
    /// name could call it).
    pub(super) fn list(&self, governance: &Governance, tools: Vec<Tool>) -> Vec<Tool> {
        let Wire::Own { server } = self else {
            return tools;
        };
        tools
            .into_iter()
            .filter_map(|mut t| {
                let id = &governance
                    .catalog()
                    .get(&t.name)?
                    .records
                    .first()?
                    .decl
                    .identity;
                if id.kind() != ToolKind::Mcp || !id.source().eq_ignore_ascii_case(server) {
                    return None;
                }
                t.name = id.name().to_owned().into();
                Some(t)
            })
            .collect()
    }

    /// The qualified name a called name stands for. In `"own"` mode, by R2: the tool whose
    /// own raw name is exactly `called`, else the one whose own name matches it ASCII
    /// case-insensitively when only one does; anything else (no match, several, a qualified
    /// name) is refused `unknown_tool`.
    pub(super) fn qualified(&self, gateway: &McpGateway, called: &str) -> Result<String, Refusal> {
        let Wire::Own { server } = self else {
            return Ok(called.to_owned());
        };
        let unknown =
            |reason: String| Refusal::new(RefusalCode::UnknownTool, Check::UnknownTool, reason);
        // Shared, not copied: the exact own name is one map look-up.
        let listing = gateway.listing(server).unwrap_or_default();
        let pick = match listing.get_own(called) {
            Some(exact) => vec![exact],
            None => pick(&listing.tools, |l| l.decl.identity.name(), called),
        };
        match pick.as_slice() {
            [one] => Ok(one.qualified.clone()),
            [] => Err(unknown(format!(
                "MCP server `{server}` lists no tool named `{called}` (this server names tools by their own names on `{server}`)"
            ))),
            many => Err(unknown(format!(
                "`{called}` matches {} tools of MCP server `{server}` when case is ignored ({}); call one by its exact name",
                many.len(),
                many.iter()
                    .map(|l| format!("`{}`", l.decl.identity.name()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }
}

/// R2's look-up of a called own name among `items`: the one whose name is exactly `called`,
/// else every one whose name matches it ASCII case-insensitively (one is a match; none or
/// several are not).
fn pick<'a, T>(items: &'a [T], name: impl Fn(&T) -> &str, called: &str) -> Vec<&'a T> {
    if let Some(exact) = items.iter().find(|t| name(t) == called) {
        return vec![exact];
    }
    items
        .iter()
        .filter(|t| name(t).eq_ignore_ascii_case(called))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::pick;

    #[test]
    fn r2_exact_name_first_then_an_unambiguous_case_insensitive_match() {
        let names = ["Page", "page", "lookup", "server__lookup"];
        let found = |called| pick(&names, |n| n, called);
        // Exact raw names, even where case-insensitively two tools match.
        assert_eq!(found("Page"), [&"Page"]);
        assert_eq!(found("page"), [&"page"]);
        // One case-insensitive match: found; two: ambiguous (refused by the caller).
        assert_eq!(found("LOOKUP"), [&"lookup"]);
        assert_eq!(found("PAGE").len(), 2);
        assert!(found("nope").is_empty());
    }
}
