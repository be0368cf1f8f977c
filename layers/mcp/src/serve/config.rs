//! The `mcp` section of a toolgate configuration: the upstream servers `toolgate mcp serve`
//! connects, the bearer tokens of its HTTP clients and its call timeout.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};
use toolgate_engine::{ConfigErrors, Governance};
use toolgate_idp::JwtSettings;

use crate::config::McpServerConfig;
use crate::secret::SecretSource;

mod jwt;
mod read;

pub(super) use jwt::DEFAULT_AGENT_CLAIMS;
pub use jwt::McpJwt;
use jwt::read_jwt;
use read::{MCP, read_server, secs, string, unknown_fields};

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
///   "tokens": [{"sha256": "<64 hex digits: SHA-256 of the bearer token>", "agent": "dev", "name": "laptop"}],
///   "call_timeout_secs": 60,
///   "wire_names": "qualified"
/// }
/// ```
///
/// A stdio server takes `command`, `args`, `env` (an object of strings), `cwd`,
/// `env_secrets` and `relist_every_secs`; an HTTP one `url`, `headers` (and
/// `relist_every_secs`). `env_secrets` and `headers` are objects of secrets by name, each
/// `{"file": "<path>"}` (relative to the configuration's folder, trailing newline trimmed)
/// or `{"env": "<VARIABLE>"}` (the host's), a header with an optional `"prefix"` such as
/// `"Bearer "`: read once at start, never written in the configuration, never shown. Tokens are stored only
/// as the SHA-256 (hex) of the token a client sends as `Authorization: Bearer <token>`, each
/// mapped to an agent profile of the configuration, with an optional `name` that records
/// show for the token (an answer given by elicitation names it, R47; without one, the first
/// twelve hex digits of the hash stand for it). The engine's own `servers.<id>` entry
/// (trust, `tool_prefix`) applies to the server with the same id.
///
/// `wire_names` is how the downstream client names the tools (see [`WireNames`]):
/// `"qualified"` (the default: `server__tool`, R1) or `"own"` (each tool by its own name on
/// its server, after any R41 `tool_prefix` strip) — `"own"` only with exactly one server.
/// Governance (allowed names, overrides, policy, audit) is by qualified names either way.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The upstream servers, in the order written.
    pub servers: Vec<McpServerConfig>,
    /// SHA-256 (lower-case hex) of a bearer token → the agent profile it speaks for.
    pub tokens: HashMap<String, String>,
    /// SHA-256 (lower-case hex) of a bearer token → the name records give it
    /// (`mcp.tokens[i].name`), for the tokens that have one.
    pub token_names: HashMap<String, String>,
    /// How long one upstream `tools/call` may take.
    pub call_timeout: Duration,
    /// How the downstream client names the tools.
    pub wire_names: WireNames,
    /// Bearer JWTs from an identity provider (`mcp.jwt`), beside or instead of the static
    /// tokens.
    pub jwt: Option<McpJwt>,
    /// The gateway's own settings: the definition lock, the description scanner, deferred
    /// tools.
    pub gateway: super::options::GatewayOptions,
    /// The decision services asked before a call is sent and after its result (the
    /// configuration's top-level `hooks`, R32; [`crate::hooks`]).
    pub hooks: Vec<crate::hooks::HookService>,
}

/// How `toolgate mcp serve` names the tools on its downstream wire (`mcp.wire_names`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireNames {
    /// `server__tool` (R1): what every other part of toolgate shows a model. The default.
    #[default]
    Qualified,
    /// Each tool by its own name on the one configured server (after the R41 `tool_prefix`
    /// strip): `tools/list` shows own names, and a `tools/call` by own name (R2: exact raw
    /// name first, an ASCII case-insensitive match only when it is unambiguous) is mapped to
    /// the tool's qualified name before the governed stack, which decides, audits and
    /// refuses by qualified names as always. Valid only with exactly one server: a client
    /// that talks to one server expects that server's names.
    Own,
}

impl WireNames {
    /// As written in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            WireNames::Qualified => "qualified",
            WireNames::Own => "own",
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
        // R32: the decision services of the top-level `hooks` (the engine checks only that
        // it is a list); every problem of both sections is reported.
        let hooks = document.get("hooks").map(crate::hooks::read_hooks);
        match (Self::read(&section), hooks) {
            (Ok(config), None) => Ok((document, config)),
            (Ok(mut config), Some(Ok(hooks))) => {
                config.hooks = hooks;
                Ok((document, config))
            }
            (Ok(_), Some(Err(e))) => Err(e),
            (Err(mut e), hooks) => {
                if let Some(Err(more)) = hooks {
                    e.errors.extend(more.errors);
                }
                Err(e)
            }
        }
    }

    /// Resolves the relative paths of every stdio server against `dir`, the configuration
    /// file's folder ([`McpServerConfig::relative_to`]: `cwd`, a relative `command` path, and
    /// no `cwd` at all becomes `dir`), so the configuration works from any directory.
    pub fn relative_to(mut self, dir: &std::path::Path) -> Self {
        self.servers = self
            .servers
            .into_iter()
            .map(|s| s.relative_to(dir))
            .collect();
        self.gateway = self.gateway.relative_to(dir);
        self
    }

    /// Reads every upstream server's secrets now ([`McpServerConfig::load_secrets`]: the
    /// files and environment variables of `env_secrets` and `headers`), so one that cannot
    /// be read stops the start with an error naming its field. Call it after
    /// [`relative_to`](Self::relative_to), once at start.
    ///
    /// # Errors
    ///
    /// One per secret that cannot be read, by its path
    /// (`mcp.servers.<id>.headers.Authorization`) and the problem, never the value.
    pub fn load_secrets(mut self) -> Result<Self, ConfigErrors> {
        let mut errs = ConfigErrors::default();
        let mut servers = Vec::new();
        for s in self.servers {
            match s.load_secrets() {
                Ok(s) => servers.push(s),
                Err(e) => errs.errors.extend(e.prefixed("mcp").errors),
            }
        }
        self.servers = servers;
        if errs.is_empty() { Ok(self) } else { Err(errs) }
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
        let servers = read_servers(obj, &mut errs);
        let (tokens, token_names) = read_tokens(obj, &mut errs);
        let call_timeout = obj
            .get("call_timeout_secs")
            .and_then(|v| secs(v, "mcp.call_timeout_secs", &mut errs))
            .unwrap_or(DEFAULT_CALL_TIMEOUT);
        let wire_names = read_wire_names(obj, &mut errs);
        let jwt = obj.get("jwt").and_then(|v| read_jwt(v, &mut errs));
        exchange_needs_jwt(obj, &servers, &mut errs);
        let gateway = super::options::GatewayOptions::read(obj, &mut errs);
        if errs.is_empty() {
            Ok(Self {
                servers,
                tokens,
                token_names,
                call_timeout,
                wire_names,
                jwt,
                gateway,
                // Read from the top-level `hooks` by [`ServeConfig::split`].
                hooks: Vec::new(),
            })
        } else {
            Err(errs)
        }
    }

    /// The section as `toolgate config print` shows it: read and checked, as written, with
    /// the defaults spelled (`tokens`, `call_timeout_secs`, `wire_names`). Tokens are only
    /// ever hashes.
    ///
    /// # Errors
    ///
    /// Every problem of the section, each named by its path, as [`ServeConfig::read`].
    pub fn effective(section: &Value) -> Result<Value, ConfigErrors> {
        let read = Self::read(section)?;
        let mut out = section.as_object().cloned().unwrap_or_default();
        out.entry("tokens")
            .or_insert_with(|| Value::Array(Vec::new()));
        out.insert(
            "call_timeout_secs".into(),
            read.call_timeout.as_secs().into(),
        );
        out.insert("wire_names".into(), read.wire_names.as_str().into());
        read.gateway.effective(&mut out);
        if let Some(j) = &read.jwt {
            let mut o = j.settings.to_json();
            if let Some(t) = j.token_type.config_value() {
                o.insert(toolgate_idp::TOKEN_TYPE_FIELD.into(), t.into());
            }
            // Not written: `client_id`, else `azp` (no one claim spells that default).
            if let Some(c) = &j.agent_claim {
                o.insert("agent_claim".into(), c.clone().into());
            }
            let mut agents: Vec<(&String, &String)> = j.agents.iter().collect();
            agents.sort();
            o.insert(
                "agents".into(),
                Value::Object(
                    agents
                        .into_iter()
                        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                        .collect(),
                ),
            );
            if let Some(c) = &j.subagent_claim {
                o.insert("subagent_claim".into(), c.clone().into());
            }
            o.insert(
                "authorization_servers".into(),
                j.authorization_servers.clone().into(),
            );
            out.insert("jwt".into(), Value::Object(o));
        }
        Ok(Value::Object(out))
    }

    /// Checks the section against the governance configuration: every token's agent is a
    /// profile of it; `"own"` wire names have exactly one server.
    ///
    /// # Errors
    ///
    /// `mcp.tokens[i].agent` for an agent the configuration does not have;
    /// `mcp.wire_names` for `"own"` with other than one server.
    pub fn check(&self, governance: &Governance) -> Result<(), ConfigErrors> {
        let mut errs = ConfigErrors::default();
        if self.wire_names == WireNames::Own && self.servers.len() != 1 {
            errs.push(
                "mcp.wire_names",
                format!(
                    "`\"own\"` names each tool by its own name on its server, which is unambiguous only with exactly one server; {} are configured: use `\"qualified\"` (`server__tool`)",
                    self.servers.len()
                ),
            );
        }
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
        if let Some(j) = &self.jwt {
            let mut mapped: Vec<(&String, &String)> = j.agents.iter().collect();
            mapped.sort();
            for (claim, agent) in mapped {
                if governance.agent(agent).is_none() {
                    errs.push(
                        format!("mcp.jwt.agents.{claim}"),
                        format!("agent `{agent}` is not a profile of the configuration's `agents`"),
                    );
                }
            }
        }
        if errs.is_empty() { Ok(()) } else { Err(errs) }
    }

    /// R44: quotas count in one place. A policy with quotas and no inbox would be counted
    /// in each `toolgate mcp serve` process alone — every stdio connection and every
    /// restart starting at zero — so it is refused unless the operator opts into that in so
    /// many words (`mcp.quota_counting: "per_process"`). With an inbox, its store (the
    /// SQLite file or the PostgreSQL database) counts for every process.
    ///
    /// # Errors
    ///
    /// `policy.quotas`, naming both ways out.
    ///
    /// ```
    /// use toolgate_engine::config::{load_str, Format};
    /// use toolgate_mcp::serve::ServeConfig;
    /// let gov = load_str(r#"{"tools": [{"kind": "http", "name": "send"}],
    ///     "policy": {"rules": [], "quotas": [{"max": 3, "window_secs": 3600, "reason": "three an hour"}]}}"#,
    ///     Format::Json).unwrap();
    /// let read = |extra: &str| ServeConfig::read(&serde_json::from_str(&format!(
    ///     r#"{{"servers": {{"s": {{"command": "srv"}}}}{extra}}}"#)).unwrap()).unwrap();
    /// let err = read("").check_quota_store(&gov).unwrap_err();
    /// assert_eq!(err.errors[0].path, "policy.quotas");
    /// assert!(read(r#", "quota_counting": "per_process""#).check_quota_store(&gov).is_ok());
    /// ```
    pub fn check_quota_store(&self, governance: &Governance) -> Result<(), ConfigErrors> {
        let quotas = match governance.policy() {
            toolgate_engine::PolicyState::Readable(p) => p.quotas().len(),
            _ => 0,
        };
        if quotas == 0 || governance.inbox_section().is_some() || self.gateway.quotas_per_process {
            return Ok(());
        }
        Err(ConfigErrors::one(
            "policy.quotas",
            format!(
                "the policy has {quotas} quota{} but no `inbox` to count them in: each `toolgate mcp serve` process (every stdio connection, every restart) would count from zero. Add an `inbox` (a SQLite file shared by the processes of one host, or PostgreSQL for replicas), or set `mcp.quota_counting: \"per_process\"` to count in each process alone (R44)",
                if quotas == 1 { "" } else { "s" }
            ),
        ))
    }
}

/// `mcp.servers`: each upstream server by its id, none of two ids that normalise alike.
fn read_servers(obj: &Map<String, Value>, errs: &mut ConfigErrors) -> Vec<McpServerConfig> {
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
            // Two ids that normalise alike would be one server's tools (R1, R2): one
            // answer for `check` and `mcp serve`, named at the second id's path.
            let mut seen: HashMap<String, &str> = HashMap::new();
            for (id, v) in map {
                if let Some(first) = seen.insert(toolgate_core::names::server_key(id), id) {
                    errs.push(
                        format!("mcp.servers.{id}"),
                        format!(
                            "server `{id}` and server `{first}` normalise to the same id (R1, R2: their tools' names would be the same); rename one"
                        ),
                    );
                    continue;
                }
                if let Some(s) = read_server(id, v, errs) {
                    servers.push(s);
                }
            }
        }
        Some(other) => errs.push(
            "mcp.servers",
            format!("expected an object of servers by id, found {other}"),
        ),
    }
    servers
}

/// `mcp.tokens`: the SHA-256 of each bearer token → its agent profile, and → its name for
/// the tokens that have one.
fn read_tokens(
    obj: &Map<String, Value>,
    errs: &mut ConfigErrors,
) -> (HashMap<String, String>, HashMap<String, String>) {
    let mut tokens = HashMap::new();
    let mut token_names = HashMap::new();
    match obj.get("tokens") {
        None => {}
        Some(Value::Array(list)) => {
            for (i, t) in list.iter().enumerate() {
                let path = format!("mcp.tokens[{i}]");
                let Some(t) = t.as_object() else {
                    errs.push(path, "expected an object with `sha256` and `agent`");
                    continue;
                };
                unknown_fields(t, &path, &["sha256", "agent", "name"], errs);
                let hash = match t.get("sha256").and_then(Value::as_str) {
                    Some(h)
                        if h.eq_ignore_ascii_case(
                            toolgate_engine::approvers::EMPTY_TOKEN_SHA256,
                        ) =>
                    {
                        errs.push(
                            format!("{path}.sha256"),
                            toolgate_engine::approvers::EMPTY_TOKEN_MESSAGE,
                        );
                        None
                    }
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
                    Some(v) => string(v, &format!("{path}.agent"), errs),
                    None => {
                        errs.push(format!("{path}.agent"), "missing: the agent profile");
                        None
                    }
                };
                let name = t
                    .get("name")
                    .and_then(|v| string(v, &format!("{path}.name"), errs));
                if let (Some(h), Some(n)) = (&hash, name) {
                    token_names.insert(h.clone(), n.to_owned());
                }
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
    (tokens, token_names)
}

/// `mcp.wire_names`: `"qualified"` (the default) or `"own"`, the latter with at most one
/// server.
fn read_wire_names(obj: &Map<String, Value>, errs: &mut ConfigErrors) -> WireNames {
    match obj.get("wire_names") {
        None => WireNames::Qualified,
        Some(Value::String(s)) if s == "qualified" => WireNames::Qualified,
        Some(Value::String(s)) if s == "own" => {
            // Counted as written, whether or not each entry reads.
            let named = obj.get("servers").and_then(Value::as_object).map(Map::len);
            if let Some(n) = named.filter(|n| *n > 1) {
                errs.push(
                    "mcp.wire_names",
                    format!(
                        "`\"own\"` names each tool by its own name on its server, which is unambiguous only with exactly one server; `mcp.servers` names {n}: use `\"qualified\"` (`server__tool`)"
                    ),
                );
            }
            WireNames::Own
        }
        Some(other) => {
            errs.push(
                "mcp.wire_names",
                format!("expected `\"qualified\"` or `\"own\"`, found {other}"),
            );
            WireNames::Qualified
        }
    }
}

/// Without `mcp.jwt`, no server may exchange the caller's token (RFC 8693).
fn exchange_needs_jwt(
    obj: &Map<String, Value>,
    servers: &[McpServerConfig],
    errs: &mut ConfigErrors,
) {
    // RFC 8693: a call is exchanged on behalf of the caller's verified token; without
    // `mcp.jwt` no caller would have one, and every call to the server would be refused.
    if !obj.contains_key("jwt") {
        for s in servers.iter().filter(|s| s.exchange().is_some()) {
            errs.push(
                format!("mcp.servers.{}.token_exchange", s.id()),
                "calls are exchanged on behalf of the caller's verified identity-provider token, and no caller has one without `mcp.jwt`: configure `mcp.jwt`, or authenticate the server with `oauth` or `headers`",
            );
        }
    }
}

#[cfg(test)]
mod tests;
