//! Deferred tools (`mcp.deferred_tools: true`; R13, R38): instead of a long list, each
//! agent sees two tools,
//!
//! - `tool_search` (`query`, optional `limit`, 1–50, default 10): the tools of the agent's
//!   own exposure — never anything omitted from it (R13) — whose names and descriptions match
//!   the query's words best, each with its description, input schema and annotations, in
//!   `structuredContent.tools`;
//! - `tool_call` (`name`, `arguments`): the inner call, unwrapped before anything else and
//!   then made exactly as a `tools/call` of `name` would be — through the whole governed stack
//!   (R38: there is no second path), so its audit record, span, approval question and refusal
//!   all name the inner tool. The numbers of `arguments` as written (R20) are kept.

use std::sync::{Arc, OnceLock};

use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, Tool};
use serde_json::{Map, Value, json};
use toolgate_core::number::NumberLiterals;
use toolgate_core::{Refusal, RefusalCode};

/// The name of the search tool.
pub const TOOL_SEARCH: &str = "tool_search";
/// The name of the call tool.
pub const TOOL_CALL: &str = "tool_call";

/// The largest `limit` of a search.
pub const MAX_SEARCH_RESULTS: usize = 50;
const DEFAULT_SEARCH_RESULTS: usize = 10;

fn object(v: Value) -> Arc<Map<String, Value>> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => Arc::new(Map::new()),
    }
}

/// The two tools an agent sees instead of its list.
pub(super) fn meta_tools() -> Vec<Tool> {
    static TOOLS: OnceLock<Vec<Tool>> = OnceLock::new();
    TOOLS
        .get_or_init(|| {
            vec![
                Tool::new(
                    TOOL_SEARCH,
                    "Find the tools you may use: give a few words of what you want to do; the best matches come back with their names, descriptions and input schemas. Then call one with tool_call.",
                    object(json!({
                        "type": "object",
                        "properties": {
                            "query": {"type": "string", "description": "words describing the tool you need"},
                            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_RESULTS, "description": "at most this many tools (default 10)"}
                        },
                        "required": ["query"]
                    })),
                ),
                Tool::new(
                    TOOL_CALL,
                    "Call a tool found with tool_search: its name and its arguments, as its input schema says.",
                    object(json!({
                        "type": "object",
                        "properties": {
                            "name": {"type": "string", "description": "the tool's name, as tool_search gave it"},
                            "arguments": {"type": "object", "description": "the tool's input"}
                        },
                        "required": ["name"]
                    })),
                ),
            ]
        })
        .clone()
}

/// A search index over one agent's exposed tools: each tool's name and description, lower
/// case, built once per governance snapshot.
///
/// ```
/// use std::sync::Arc;
/// use toolgate_mcp::rmcp::model::Tool;
/// use toolgate_mcp::serve::ToolIndex;
///
/// let tools = vec![
///     Tool::new("github__create_issue", "Create an issue in a repository.", Arc::new(Default::default())),
///     Tool::new("fs__read_file", "Read a file.", Arc::new(Default::default())),
/// ];
/// let index = ToolIndex::new(Arc::new(tools));
/// let found = index.search("create issue", 5);
/// assert_eq!(found[0].name, "github__create_issue");
/// assert_eq!(found.len(), 1);
/// ```
#[derive(Debug)]
pub struct ToolIndex {
    tools: Arc<Vec<Tool>>,
    /// (lower-case name, lower-case description), by the tools' index.
    text: Vec<(String, String)>,
}

fn words(query: &str) -> Vec<String> {
    let mut out: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    out.sort();
    out.dedup();
    out
}

impl ToolIndex {
    /// The index of `tools` (an agent's exposure, as listed).
    pub fn new(tools: Arc<Vec<Tool>>) -> Self {
        let text = tools
            .iter()
            .map(|t| {
                (
                    t.name.to_lowercase(),
                    t.description.as_deref().unwrap_or_default().to_lowercase(),
                )
            })
            .collect();
        ToolIndex { tools, text }
    }

    /// The tools best matching `query`, at most `limit`: each word of the query found in a
    /// tool's name counts 3, in its description 1; tools matching no word are not returned
    /// (an empty query returns the first `limit` tools). Ties keep the list's order.
    pub fn search(&self, query: &str, limit: usize) -> Vec<Tool> {
        let words = words(query);
        let limit = limit.clamp(1, MAX_SEARCH_RESULTS);
        if words.is_empty() {
            return self.tools.iter().take(limit).cloned().collect();
        }
        // One finder per word, built once for the whole index.
        let finders: Vec<memchr::memmem::Finder<'_>> = words
            .iter()
            .map(|w| memchr::memmem::Finder::new(w.as_bytes()))
            .collect();
        // The best `limit` by (score desc, index asc), kept in a small sorted buffer.
        let mut best: Vec<(u32, usize)> = Vec::with_capacity(limit + 1);
        for (i, (name, desc)) in self.text.iter().enumerate() {
            let mut score = 0u32;
            for f in &finders {
                if f.find(name.as_bytes()).is_some() {
                    score += 3;
                } else if f.find(desc.as_bytes()).is_some() {
                    score += 1;
                }
            }
            if score == 0 {
                continue;
            }
            if best.len() == limit && best.last().is_some_and(|&(s, _)| s >= score) {
                continue;
            }
            let at = best.partition_point(|&(s, _)| s >= score);
            best.insert(at, (score, i));
            best.truncate(limit);
        }
        best.into_iter()
            .filter_map(|(_, i)| self.tools.get(i).cloned())
            .collect()
    }
}

/// `tool_search`'s result: the tools found, in text and in `structuredContent.tools`.
pub(super) fn search_result(
    index: &ToolIndex,
    arguments: Option<&Map<String, Value>>,
) -> CallToolResult {
    let query = arguments.and_then(|a| a.get("query"));
    let Some(query) = query.and_then(Value::as_str) else {
        return refused_result(format!(
            "`{TOOL_SEARCH}` needs `query`, a string of words describing the tool you need"
        ));
    };
    let limit = match arguments.and_then(|a| a.get("limit")) {
        None => DEFAULT_SEARCH_RESULTS,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_SEARCH_RESULTS as u64).contains(&n) => n as usize,
            _ => {
                return refused_result(format!(
                    "`{TOOL_SEARCH}`'s `limit` must be a whole number from 1 to {MAX_SEARCH_RESULTS}, found {v}"
                ));
            }
        },
    };
    // MCP Apps references are judged per agent only in `tools/list`: a search gives none.
    let found: Vec<Tool> = index
        .search(query, limit)
        .into_iter()
        .map(|mut t| {
            t.meta = None;
            t
        })
        .collect();
    let text = if found.is_empty() {
        format!("no tool you may use matches `{query}`")
    } else {
        found
            .iter()
            .map(|t| {
                format!(
                    "{}: {}",
                    t.name,
                    t.description.as_deref().unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(json!({ "tools": found }));
    r
}

/// Why a `tool_call` wrapper is malformed: answered as a refused tool result
/// ([`Malformed::into_result`]), never a protocol error. Only the reason is carried, so the
/// `Result` of [`unwrap_call`] stays small (the tool result is built on the rare error).
#[derive(Debug)]
pub(super) struct Malformed(String);

impl Malformed {
    /// The refused tool result (`invalid_input`) the client is answered with.
    pub(super) fn into_result(self) -> CallToolResult {
        super::call_result(toolgate_core::ToolResponse::Refused(Refusal::new(
            RefusalCode::InvalidInput,
            toolgate_core::Check::InputBounds,
            self.0,
        )))
    }
}

fn refused_result(reason: String) -> CallToolResult {
    Malformed(reason).into_result()
}

/// Unwraps a `tool_call`: the inner request and the inner arguments' numbers as written
/// (R20), or why the wrapper is malformed.
pub(super) fn unwrap_call(
    mut request: CallToolRequestParams,
    literals: &NumberLiterals,
) -> Result<(CallToolRequestParams, NumberLiterals), Malformed> {
    let mut outer = request.arguments.take().unwrap_or_default();
    let name = match outer.remove("name") {
        Some(Value::String(n)) if !n.trim().is_empty() => n,
        other => {
            return Err(Malformed(format!(
                "`{TOOL_CALL}` needs `name`, the tool's name as `{TOOL_SEARCH}` gave it, found {}",
                other.map_or_else(|| String::from("nothing"), |v| v.to_string())
            )));
        }
    };
    if name == TOOL_CALL || name == TOOL_SEARCH {
        return Err(Malformed(format!(
            "`{TOOL_CALL}` calls a tool found with `{TOOL_SEARCH}`, not `{name}`"
        )));
    }
    let inner = match outer.get("arguments") {
        None => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => {
            return Err(Malformed(format!(
                "`{TOOL_CALL}`'s `arguments` must be an object (the tool's input), found {other}"
            )));
        }
    };
    if let Some(extra) = outer.keys().find(|k| k.as_str() != "arguments") {
        return Err(Malformed(format!(
            "`{TOOL_CALL}` takes `name` and `arguments`, not `{extra}`"
        )));
    }
    // R20: the inner arguments' literals, from the outer ones written out exactly.
    let inner_literals = if literals.is_empty() {
        NumberLiterals::default()
    } else {
        let outer_text = toolgate_core::number::to_text(
            &Value::Object(Map::from_iter([
                (String::from("name"), Value::String(name.clone())),
                (String::from("arguments"), Value::Object(inner.clone())),
            ])),
            literals,
        );
        match inner_text(&outer_text) {
            Some(t) => match toolgate_core::number::parse_with_literals(&t) {
                Ok((_, l)) => l,
                Err(_) => {
                    return Err(Malformed(String::from(
                        "toolgate could not keep this call's arguments as written (R20); it is refused rather than decided on rounded numbers",
                    )));
                }
            },
            None => NumberLiterals::default(),
        }
    };
    request.name = name.into();
    request.arguments = Some(inner);
    Ok((request, inner_literals))
}

/// The raw text of the `arguments` member of an object's JSON text.
fn inner_text(outer: &str) -> Option<String> {
    let m: std::collections::HashMap<String, Box<serde_json::value::RawValue>> =
        serde_json::from_str(outer).ok()?;
    m.get("arguments").map(|r| r.get().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, desc: &str) -> Tool {
        Tool::new(name.to_owned(), desc.to_owned(), Arc::new(Map::new()))
    }

    #[test]
    fn r13_search_ranks_names_over_descriptions_and_keeps_only_matches() {
        let index = ToolIndex::new(Arc::new(vec![
            tool("kb__page", "Read a wiki page about issues."),
            tool("gh__create_issue", "Create an issue."),
            tool("fs__read", "Read a file."),
        ]));
        let found: Vec<String> = index
            .search("issue", 10)
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        assert_eq!(found, ["gh__create_issue", "kb__page"]);
        assert_eq!(index.search("", 2).len(), 2);
        assert!(index.search("nothing-like-it", 10).is_empty());
        assert_eq!(index.search("read", 1).len(), 1);
    }

    #[test]
    fn r38_a_tool_call_unwraps_to_the_inner_call_and_keeps_its_numbers_as_written() {
        let text = r#"{"name":"kb__page","arguments":{"id":123456789012345678901234}}"#;
        let (value, literals) = toolgate_core::number::parse_with_literals(text).unwrap();
        let Value::Object(args) = value else { panic!() };
        let req = CallToolRequestParams::new(TOOL_CALL).with_arguments(args);
        let (inner, lits) = unwrap_call(req, &literals).unwrap();
        assert_eq!(inner.name, "kb__page");
        let args = Value::Object(inner.arguments.unwrap());
        assert_eq!(
            toolgate_core::number::to_text(&args, &lits),
            r#"{"id":123456789012345678901234}"#
        );
        for bad in [
            json!({}),
            json!({"name": 1}),
            json!({"name": "x", "arguments": []}),
            json!({"name": "x", "extra": 1}),
            json!({"name": "tool_call"}),
        ] {
            let Value::Object(args) = bad else { panic!() };
            let req = CallToolRequestParams::new(TOOL_CALL).with_arguments(args);
            assert!(unwrap_call(req, &NumberLiterals::default()).is_err());
        }
    }
}
