//! The `mcp` section of a toolgate configuration: the upstream servers `toolgate mcp serve`
//! connects, the bearer tokens of its HTTP clients and its call timeout.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};
use toolgate_engine::{ConfigErrors, Governance};

use crate::config::McpServerConfig;

/// How long one upstream `tools/call` may take, unless `mcp.call_timeout_secs` says otherwise.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The `mcp` section of a configuration, read and checked:
///
/// ```json
/// "mcp": {
///   "servers": {
///     "everything": {"command": "node", "args": ["…/server-everything/dist/index.js"]},
///     "remote": {"url": "http://127.0.0.1:8931/mcp"}
///   },
///   "tokens": [{"sha256": "<64 hex digits: SHA-256 of the bearer token>", "agent": "dev"}],
///   "call_timeout_secs": 60
/// }
/// ```
///
/// A stdio server takes `command`, `args`, `env` (an object of strings), `cwd` and
/// `relist_every_secs`; an HTTP one `url` (and `relist_every_secs`). Tokens are stored only
/// as the SHA-256 (hex) of the token a client sends as `Authorization: Bearer <token>`, each
/// mapped to an agent profile of the configuration. The engine's own `servers.<id>` entry
/// (trust, `tool_prefix`) applies to the server with the same id.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The upstream servers, in the order written.
    pub servers: Vec<McpServerConfig>,
    /// SHA-256 (lower-case hex) of a bearer token → the agent profile it speaks for.
    pub tokens: HashMap<String, String>,
    /// How long one upstream `tools/call` may take.
    pub call_timeout: Duration,
}

const MCP: &[&str] = &["servers", "tokens", "call_timeout_secs"];
const SERVER: &[&str] = &["command", "args", "env", "cwd", "url", "relist_every_secs"];

fn unknown_fields(obj: &Map<String, Value>, path: &str, known: &[&str], errs: &mut ConfigErrors) {
    for key in obj.keys() {
        if !known.contains(&key.as_str()) {
            errs.push(
                format!("{path}.{key}"),
                format!(
                    "unknown field `{key}`; expected one of {}",
                    known
                        .iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
    }
}

fn secs(v: &Value, path: &str, errs: &mut ConfigErrors) -> Option<Duration> {
    match v.as_u64() {
        Some(n) if n > 0 => Some(Duration::from_secs(n)),
        _ => {
            errs.push(
                path,
                format!("expected a positive whole number of seconds, found {v}"),
            );
            None
        }
    }
}

fn string<'a>(v: &'a Value, path: &str, errs: &mut ConfigErrors) -> Option<&'a str> {
    match v.as_str() {
        Some(s) if !s.trim().is_empty() => Some(s),
        _ => {
            errs.push(path, format!("expected a non-blank string, found {v}"));
            None
        }
    }
}

impl ServeConfig {
    /// Splits a whole configuration document into the engine's part (everything but `mcp`)
    /// and the `mcp` section, read.
    ///
    /// # Errors
    ///
    /// Every problem of the section, each named by its path (`mcp.servers.fs.command`).
    pub fn split(mut document: Value) -> Result<(Value, Self), ConfigErrors> {
        let section = match &mut document {
            Value::Object(top) => top.remove("mcp"),
            _ => None,
        };
        let Some(section) = section else {
            return Err(ConfigErrors::one(
                "mcp",
                "the configuration has no `mcp` section: `toolgate mcp serve` needs `mcp.servers`",
            ));
        };
        Ok((document, Self::read(&section)?))
    }

    /// Reads the `mcp` section.
    ///
    /// # Errors
    ///
    /// Every problem, each named by its path.
    pub fn read(section: &Value) -> Result<Self, ConfigErrors> {
        let mut errs = ConfigErrors::default();
        let Some(obj) = section.as_object() else {
            return Err(ConfigErrors::one("mcp", "expected an object"));
        };
        unknown_fields(obj, "mcp", MCP, &mut errs);
        let mut servers = Vec::new();
        match obj.get("servers") {
            None => errs.push(
                "mcp.servers",
                "missing: name at least one upstream MCP server",
            ),
            Some(Value::Object(map)) => {
                if map.is_empty() {
                    errs.push("mcp.servers", "name at least one upstream MCP server");
                }
                for (id, v) in map {
                    if let Some(s) = read_server(id, v, &mut errs) {
                        servers.push(s);
                    }
                }
            }
            Some(other) => errs.push(
                "mcp.servers",
                format!("expected an object of servers by id, found {other}"),
            ),
        }
        let mut tokens = HashMap::new();
        match obj.get("tokens") {
            None => {}
            Some(Value::Array(list)) => {
                for (i, t) in list.iter().enumerate() {
                    let path = format!("mcp.tokens[{i}]");
                    let Some(t) = t.as_object() else {
                        errs.push(path, "expected an object with `sha256` and `agent`");
                        continue;
                    };
                    unknown_fields(t, &path, &["sha256", "agent"], &mut errs);
                    let hash = match t.get("sha256").and_then(Value::as_str) {
                        Some(h) if h.len() == 64 && h.chars().all(|c| c.is_ascii_hexdigit()) => {
                            Some(h.to_ascii_lowercase())
                        }
                        _ => {
                            errs.push(
                                format!("{path}.sha256"),
                                "expected the SHA-256 of the token as 64 hex digits (never the token itself)",
                            );
                            None
                        }
                    };
                    let agent = match t.get("agent") {
                        Some(v) => string(v, &format!("{path}.agent"), &mut errs),
                        None => {
                            errs.push(format!("{path}.agent"), "missing: the agent profile");
                            None
                        }
                    };
                    if let (Some(h), Some(a)) = (hash, agent)
                        && tokens.insert(h, a.to_owned()).is_some()
                    {
                        errs.push(
                            format!("{path}.sha256"),
                            "this token is listed twice: one token speaks for one agent",
                        );
                    }
                }
            }
            Some(other) => errs.push(
                "mcp.tokens",
                format!("expected an array of {{\"sha256\", \"agent\"}}, found {other}"),
            ),
        }
        let call_timeout = obj
            .get("call_timeout_secs")
            .and_then(|v| secs(v, "mcp.call_timeout_secs", &mut errs))
            .unwrap_or(DEFAULT_CALL_TIMEOUT);
        if errs.is_empty() {
            Ok(Self {
                servers,
                tokens,
                call_timeout,
            })
        } else {
            Err(errs)
        }
    }

    /// Checks the section against the governance configuration: every token's agent is a
    /// profile of it.
    ///
    /// # Errors
    ///
    /// `mcp.tokens[i].agent` for an agent the configuration does not have.
    pub fn check(&self, governance: &Governance) -> Result<(), ConfigErrors> {
        let mut errs = ConfigErrors::default();
        let mut agents: Vec<&String> = self.tokens.values().collect();
        agents.sort();
        agents.dedup();
        for agent in agents {
            if governance.agent(agent).is_none() {
                errs.push(
                    "mcp.tokens",
                    format!("a token speaks for agent `{agent}`, which the configuration's `agents` do not name"),
                );
            }
        }
        if errs.is_empty() { Ok(()) } else { Err(errs) }
    }
}

fn read_server(id: &str, v: &Value, errs: &mut ConfigErrors) -> Option<McpServerConfig> {
    let path = format!("mcp.servers.{id}");
    let Some(obj) = v.as_object() else {
        errs.push(path, "expected an object with `command` or `url`");
        return None;
    };
    unknown_fields(obj, &path, SERVER, errs);
    let config = match (obj.get("command"), obj.get("url")) {
        (Some(_), Some(_)) => {
            errs.push(
                path,
                "give `command` (stdio) or `url` (streamable HTTP), not both",
            );
            return None;
        }
        (None, None) => {
            errs.push(
                path,
                "missing: `command` (stdio) or `url` (streamable HTTP)",
            );
            return None;
        }
        (Some(cmd), None) => {
            let program = string(cmd, &format!("{path}.command"), errs)?;
            let mut c = McpServerConfig::stdio(id, program)
                .map_err(|e| errs.push(e.path.clone(), e.message.clone()))
                .ok()?;
            if let Some(args) = obj.get("args") {
                match args.as_array() {
                    Some(list) => {
                        for (i, a) in list.iter().enumerate() {
                            match a.as_str() {
                                Some(a) => c = c.arg(a),
                                None => errs.push(
                                    format!("{path}.args[{i}]"),
                                    format!("expected a string, found {a}"),
                                ),
                            }
                        }
                    }
                    None => errs.push(format!("{path}.args"), "expected an array of strings"),
                }
            }
            if let Some(env) = obj.get("env") {
                match env.as_object() {
                    Some(map) => {
                        for (k, val) in map {
                            match val.as_str() {
                                Some(val) => c = c.env(k, val),
                                None => errs.push(
                                    format!("{path}.env.{k}"),
                                    format!("expected a string, found {val}"),
                                ),
                            }
                        }
                    }
                    None => errs.push(format!("{path}.env"), "expected an object of strings"),
                }
            }
            if let Some(cwd) = obj.get("cwd")
                && let Some(dir) = string(cwd, &format!("{path}.cwd"), errs)
            {
                c = c.current_dir(PathBuf::from(dir));
            }
            c
        }
        (None, Some(url)) => {
            if obj.contains_key("args") || obj.contains_key("env") || obj.contains_key("cwd") {
                errs.push(
                    path.clone(),
                    "`args`, `env` and `cwd` are for a stdio server (`command`), not a `url`",
                );
            }
            let url = string(url, &format!("{path}.url"), errs)?;
            // The field is this section's `url`, whatever path the server config names.
            McpServerConfig::streamable_http(id, url)
                .map_err(|e| errs.push(format!("{path}.url"), e.message.clone()))
                .ok()?
        }
    };
    let mut config = config;
    if let Some(v) = obj.get("relist_every_secs")
        && let Some(every) = secs(v, &format!("{path}.relist_every_secs"), errs)
    {
        config = config.relist_every(every);
    }
    Some(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(v: Value) -> Vec<String> {
        ServeConfig::read(&v)
            .unwrap_err()
            .errors
            .into_iter()
            .map(|e| e.path)
            .collect()
    }

    #[test]
    fn every_error_names_its_field() {
        let p = paths(json!({
            "servers": {
                "a": {"command": "node", "args": [1], "colour": 2},
                "b": {"url": "https://x"},
                "c": {},
                "d": {"command": "x", "url": "http://127.0.0.1:1/"}
            },
            "tokens": [{"sha256": "abc", "agent": "dev"}, {"sha256": "0".repeat(64)}],
            "call_timeout_secs": 0,
            "extra": true
        }));
        for want in [
            "mcp.servers.a.args[0]",
            "mcp.servers.a.colour",
            "mcp.servers.b.url",
            "mcp.servers.c",
            "mcp.servers.d",
            "mcp.tokens[0].sha256",
            "mcp.tokens[1].agent",
            "mcp.call_timeout_secs",
            "mcp.extra",
        ] {
            assert!(p.iter().any(|x| x == want), "{want} missing from {p:?}");
        }
        assert_eq!(paths(json!({}))[0], "mcp.servers");
    }

    #[test]
    fn a_good_section_reads() {
        let c = ServeConfig::read(&json!({
            "servers": {"fs": {"command": "node", "args": ["a.js"], "env": {"K": "v"}}},
            "tokens": [{"sha256": "A".repeat(64), "agent": "dev"}],
            "call_timeout_secs": 5
        }))
        .unwrap();
        assert_eq!(c.servers.len(), 1);
        assert_eq!(
            c.tokens.get(&"a".repeat(64)).map(String::as_str),
            Some("dev")
        );
        assert_eq!(c.call_timeout, Duration::from_secs(5));
    }
}
