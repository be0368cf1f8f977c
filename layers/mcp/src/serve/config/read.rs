//! Reading the `mcp` section's servers, OAuth client credentials and secrets, each error at
//! its path (`mcp.servers[1].oauth.token_url`).

use super::*;

pub(super) const MCP: &[&str] = &[
    "servers",
    "tokens",
    "call_timeout_secs",
    "wire_names",
    "jwt",
    "locked",
    "lock_file",
    "scan",
    "deferred_tools",
    "quota_counting",
];

pub(super) const SERVER: &[&str] = &[
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "relist_every_secs",
    "env_secrets",
    "headers",
    "oauth",
    "token_exchange",
    "confidential",
    "network",
    "tls",
    "plain_http",
];

pub(super) const TLS: &[&str] = &["ca_file", "client_cert", "client_key"];

pub(super) const OAUTH: &[&str] = &[
    "token_url",
    "client_id",
    "client_secret",
    "scope",
    "resource",
    "client_auth",
    "ca_file",
];

/// `mcp.servers.<id>.token_exchange`: the client of [`OAUTH`], and what to ask for.
pub(super) const TOKEN_EXCHANGE: &[&str] = &[
    "token_url",
    "client_id",
    "client_secret",
    "scope",
    "resource",
    "audience",
    "subject_token_type",
    "client_auth",
    "ca_file",
];

pub(super) fn unknown_fields(
    obj: &Map<String, Value>,
    path: &str,
    known: &[&str],
    errs: &mut ConfigErrors,
) {
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

pub(super) fn secs(v: &Value, path: &str, errs: &mut ConfigErrors) -> Option<Duration> {
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

pub(super) fn string<'a>(v: &'a Value, path: &str, errs: &mut ConfigErrors) -> Option<&'a str> {
    match v.as_str() {
        Some(s) if !s.trim().is_empty() => Some(s),
        _ => {
            errs.push(path, format!("expected a non-blank string, found {v}"));
            None
        }
    }
}

pub(super) fn read_server(id: &str, v: &Value, errs: &mut ConfigErrors) -> Option<McpServerConfig> {
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
        (Some(cmd), None) => read_stdio(id, &path, obj, cmd, errs)?,
        (None, Some(url)) => read_http(id, &path, obj, url, errs)?,
    };
    Some(read_common(config, &path, obj, errs))
}

/// A stdio server: `command`, its `args`, `env`, `cwd` and `env_secrets` (and not the
/// settings of a streamable HTTP server).
fn read_stdio(
    id: &str,
    path: &str,
    obj: &serde_json::Map<String, Value>,
    cmd: &Value,
    errs: &mut ConfigErrors,
) -> Option<McpServerConfig> {
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
    for field in ["oauth", "token_exchange"] {
        if obj.contains_key(field) {
            errs.push(
                format!("{path}.{field}"),
                format!("`{field}` is for a streamable HTTP server (`url`), not a `command`"),
            );
        }
    }
    if obj.contains_key("headers") {
        errs.push(
            format!("{path}.headers"),
            "`headers` are for a streamable HTTP server (`url`), not a `command`: a stdio server takes its secrets in `env_secrets`",
        );
    }
    for (key, source) in secrets(
        obj.get("env_secrets"),
        &format!("{path}.env_secrets"),
        false,
        errs,
    ) {
        if obj
            .get("env")
            .and_then(Value::as_object)
            .is_some_and(|e| e.contains_key(&key))
        {
            errs.push(
                format!("{path}.env_secrets.{key}"),
                format!("`{key}` is set in `env` too: give it once"),
            );
        }
        c = c.env_secret(key, source);
    }
    Some(c)
}

/// A streamable HTTP server: `url`, its secret `headers`, `tls`, `plain_http` and `oauth`
/// (and not the settings of a stdio server).
fn read_http(
    id: &str,
    path: &str,
    obj: &serde_json::Map<String, Value>,
    url: &Value,
    errs: &mut ConfigErrors,
) -> Option<McpServerConfig> {
    if obj.contains_key("args") || obj.contains_key("env") || obj.contains_key("cwd") {
        errs.push(
            path,
            "`args`, `env` and `cwd` are for a stdio server (`command`), not a `url`",
        );
    }
    if obj.contains_key("env_secrets") {
        errs.push(
            format!("{path}.env_secrets"),
            "`env_secrets` are for a stdio server (`command`), not a `url`: an HTTP server takes its secrets in `headers`",
        );
    }
    let url = string(url, &format!("{path}.url"), errs)?;
    // The field is this section's `url`, whatever path the server config names.
    let mut c = McpServerConfig::streamable_http(id, url)
        .map_err(|e| errs.push(format!("{path}.url"), e.message.clone()))
        .ok()?;
    let mut seen: Vec<String> = Vec::new();
    for (name, source) in secrets(obj.get("headers"), &format!("{path}.headers"), true, errs) {
        let at = format!("{path}.headers.{name}");
        #[cfg(feature = "http")]
        if let Err(e) = crate::gateway::header_name(&name) {
            errs.push(at.clone(), e.to_string());
        }
        if seen.iter().any(|n| n.eq_ignore_ascii_case(&name)) {
            errs.push(at, format!("the header `{name}` is given twice"));
        }
        seen.push(name.clone());
        c = c.header(name, source);
    }
    // The server's TLS, and plain HTTP opted into by name.
    if let Some(t) = obj.get("tls") {
        c = read_tls(c, t, &format!("{path}.tls"), errs);
    }
    if let Some(v) = obj.get("plain_http") {
        match v {
            Value::Bool(b) => c = c.plain_http(*b),
            other => errs.push(
                format!("{path}.plain_http"),
                format!("expected `true` or `false`, found {other}"),
            ),
        }
    }
    if let Some(why) = c.url_problem() {
        errs.push(format!("{path}.url"), why);
    }
    if let Some(x) = obj.get("token_exchange")
        && let Some(exchange) = read_token_exchange(x, &format!("{path}.token_exchange"), errs)
    {
        c = c.token_exchange(exchange);
    }
    if let Some(o) = obj.get("oauth")
        && let Some(creds) = read_oauth(o, &format!("{path}.oauth"), OAUTH, errs)
    {
        if let Some(name) = seen
            .iter()
            .find(|n| n.eq_ignore_ascii_case("authorization"))
        {
            errs.push(
                format!("{path}.headers.{name}"),
                "the server authenticates with `oauth`, which sends the `Authorization` header: give one of them",
            );
        }
        c = c.oauth(creds);
    }
    Some(c)
}

/// What any server may set: `relist_every_secs`, and the operator's word on its tools,
/// resources and prompts (`confidential`, `network`).
fn read_common(
    mut config: McpServerConfig,
    path: &str,
    obj: &serde_json::Map<String, Value>,
    errs: &mut ConfigErrors,
) -> McpServerConfig {
    if let Some(v) = obj.get("relist_every_secs")
        && let Some(every) = secs(v, &format!("{path}.relist_every_secs"), errs)
    {
        config = config.relist_every(every);
    }
    // R7, R8: the operator's word on what this server's tools, resources and prompts are —
    // withheld from confidential work (`true`: all of them; a list: those names), and their
    // network scope (`"none"` or `"egress"`), whatever the server says.
    match obj.get("confidential") {
        None | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => config = config.confidential(true),
        Some(Value::Array(names)) => {
            for (i, n) in names.iter().enumerate() {
                match n.as_str().filter(|n| !n.trim().is_empty()) {
                    Some(n) => config = config.confidential_tool(n),
                    None => errs.push(
                        format!("{path}.confidential[{i}]"),
                        format!("expected the name of a tool, resource or prompt, found {n}"),
                    ),
                }
            }
        }
        Some(other) => errs.push(
            format!("{path}.confidential"),
            format!("expected `true`, `false` or a list of names, found {other}"),
        ),
    }
    match obj.get("network") {
        None => {}
        Some(Value::String(s)) if s == "none" => {
            config = config.network_override(toolgate_core::NetworkScope::None);
        }
        Some(Value::String(s)) if s == "egress" => {
            config = config.network_override(toolgate_core::NetworkScope::Egress);
        }
        Some(other) => errs.push(
            format!("{path}.network"),
            format!("expected `\"none\"` or `\"egress\"`, found {other}"),
        ),
    }
    config
}

/// `mcp.servers.<id>.token_exchange`: an RFC 8693 token exchange on behalf of the caller —
/// the client of `oauth`, with the `audience` and `subject_token_type` to ask for.
fn read_token_exchange(
    v: &Value,
    path: &str,
    errs: &mut ConfigErrors,
) -> Option<crate::TokenExchange> {
    let client = read_oauth(v, path, TOKEN_EXCHANGE, errs);
    let obj = v.as_object()?;
    let audience = obj
        .get("audience")
        .and_then(|a| string(a, &format!("{path}.audience"), errs))
        .map(str::to_owned);
    let kind = match obj.get("subject_token_type") {
        None => Some(crate::SubjectTokenType::AccessToken),
        Some(Value::String(s)) if s == "access_token" => Some(crate::SubjectTokenType::AccessToken),
        Some(Value::String(s)) if s == "jwt" => Some(crate::SubjectTokenType::Jwt),
        Some(other) => {
            errs.push(
                format!("{path}.subject_token_type"),
                format!("expected `\"access_token\"` or `\"jwt\"`, found {other}"),
            );
            None
        }
    };
    let mut exchange = crate::TokenExchange::new(client?).subject_token_type(kind?);
    if let Some(a) = audience {
        exchange = exchange.audience(a);
    }
    Some(exchange)
}

/// `mcp.servers.<id>.oauth`: OAuth 2.0 client credentials (the fields `known` allows).
pub(super) fn read_oauth(
    v: &Value,
    path: &str,
    known: &[&str],
    errs: &mut ConfigErrors,
) -> Option<crate::OAuthClientCredentials> {
    let Some(obj) = v.as_object() else {
        errs.push(
            path,
            format!(
                "expected an object with `token_url`, `client_id` and `client_secret`, found {}",
                kind(v)
            ),
        );
        return None;
    };
    unknown_fields(obj, path, known, errs);
    let field = |name: &str, errs: &mut ConfigErrors| match obj.get(name) {
        Some(v) => string(v, &format!("{path}.{name}"), errs).map(str::to_owned),
        None => {
            errs.push(format!("{path}.{name}"), "missing");
            None
        }
    };
    let token_url = field("token_url", errs);
    let client_id = field("client_id", errs);
    let secret = match obj.get("client_secret") {
        Some(v) => read_secret(v, &format!("{path}.client_secret"), false, errs),
        None => {
            errs.push(
                format!("{path}.client_secret"),
                "missing: `{\"file\": …}` or `{\"env\": …}`",
            );
            None
        }
    };
    let optional = |name: &str, errs: &mut ConfigErrors| {
        obj.get(name)
            .and_then(|v| string(v, &format!("{path}.{name}"), errs))
            .map(str::to_owned)
    };
    let scope = optional("scope", errs);
    let resource = optional("resource", errs);
    let ca_file = optional("ca_file", errs);
    let client_auth = match obj.get("client_auth") {
        None => Some(crate::ClientAuth::Basic),
        Some(Value::String(s)) if s == "basic" => Some(crate::ClientAuth::Basic),
        Some(Value::String(s)) if s == "post" => Some(crate::ClientAuth::Post),
        Some(other) => {
            errs.push(
                format!("{path}.client_auth"),
                format!("expected `\"basic\"` or `\"post\"`, found {other}"),
            );
            None
        }
    };
    let (token_url, client_id, secret, client_auth) =
        (token_url?, client_id?, secret?, client_auth?);
    let mut creds = crate::OAuthClientCredentials::new(token_url, client_id, secret)
        .map_err(|e| {
            let at = e.path.strip_prefix("oauth.").unwrap_or(&e.path);
            errs.push(format!("{path}.{at}"), e.message.clone());
        })
        .ok()?
        .client_auth(client_auth);
    if let Some(s) = scope {
        creds = creds.scope(s);
    }
    if let Some(r) = resource {
        creds = creds.resource(r);
    }
    if let Some(ca) = ca_file {
        if !toolgate_core::outbound::is_https(&creds.token_url) {
            errs.push(
                format!("{path}.ca_file"),
                "`ca_file` applies only with an `https://` `token_url` (the CA that signed its server's certificate)",
            );
            return None;
        }
        creds = creds.ca_file(ca);
    }
    Some(creds)
}

/// The secrets of `field` (`env_secrets`, `headers`): an object of sources by name, each
/// `{"file": "<path>"}` or `{"env": "<VARIABLE>"}` (with `"prefix"` where `prefix` is
/// allowed). A value written in the configuration is refused: secrets are never in it.
pub(super) fn secrets(
    field: Option<&Value>,
    path: &str,
    prefix: bool,
    errs: &mut ConfigErrors,
) -> Vec<(String, SecretSource)> {
    let Some(field) = field else {
        return Vec::new();
    };
    let Some(map) = field.as_object() else {
        errs.push(
            path,
            format!(
                "expected an object of secrets by name, found {}",
                kind(field)
            ),
        );
        return Vec::new();
    };
    map.iter()
        .filter_map(|(name, v)| {
            read_secret(v, &format!("{path}.{name}"), prefix, errs).map(|s| (name.clone(), s))
        })
        .collect()
}

/// What a value is, never what it says (it may be a secret written by mistake).
pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// One secret source: `{"file": "<path>"}` or `{"env": "<VARIABLE>"}`, with an optional
/// `"prefix"` where allowed.
pub(crate) fn read_secret(
    v: &Value,
    path: &str,
    prefix: bool,
    errs: &mut ConfigErrors,
) -> Option<SecretSource> {
    let Some(obj) = v.as_object() else {
        errs.push(
            path,
            format!(
                "expected {{\"file\": \"<path>\"}} or {{\"env\": \"<VARIABLE>\"}}, found {}: a secret is never written in the configuration",
                kind(v)
            ),
        );
        return None;
    };
    let known: &[&str] = if prefix {
        &["file", "env", "prefix"]
    } else {
        &["file", "env"]
    };
    unknown_fields(obj, path, known, errs);
    let source = match (obj.get("file"), obj.get("env")) {
        (Some(_), Some(_)) => {
            errs.push(path, "give `file` or `env`, not both");
            return None;
        }
        (None, None) => {
            errs.push(
                path,
                "missing: `file` (a file holding the secret) or `env` (an environment variable holding it)",
            );
            return None;
        }
        (Some(f), None) => SecretSource::file(string(f, &format!("{path}.file"), errs)?),
        (None, Some(e)) => SecretSource::env(string(e, &format!("{path}.env"), errs)?),
    };
    match obj.get("prefix") {
        None => Some(source),
        Some(Value::String(p)) => Some(source.prefix(p.clone())),
        Some(other) => {
            errs.push(
                format!("{path}.prefix"),
                format!("expected a string, found {}", kind(other)),
            );
            None
        }
    }
}

/// `mcp.servers.<id>.tls` (deploy/README.md): `ca_file` (trust only its CA certificates),
/// `client_cert` and `client_key` (mutual TLS, both or neither).
fn read_tls(
    mut c: McpServerConfig,
    v: &Value,
    path: &str,
    errs: &mut ConfigErrors,
) -> McpServerConfig {
    let Some(obj) = v.as_object() else {
        errs.push(
            path,
            format!("expected an object with `ca_file`, `client_cert`, `client_key`, found {v}"),
        );
        return c;
    };
    unknown_fields(obj, path, TLS, errs);
    let mut file = |key: &str| {
        obj.get(key)
            .and_then(|f| string(f, &format!("{path}.{key}"), errs))
            .map(std::path::PathBuf::from)
    };
    let (ca, cert, key) = (file("ca_file"), file("client_cert"), file("client_key"));
    if let Some(ca) = ca {
        c = c.ca_file(ca);
    }
    match (cert, key) {
        (Some(cert), Some(key)) => c = c.client_identity(cert, key),
        (None, None) => {}
        (Some(_), None) => errs.push(
            format!("{path}.client_key"),
            "missing: `client_cert` needs its `client_key`",
        ),
        (None, Some(_)) => errs.push(
            format!("{path}.client_cert"),
            "missing: `client_key` needs its `client_cert`",
        ),
    }
    if c.trust().is_none() && obj.keys().next().is_some() {
        errs.push(path, "`tls` applies only to an `https://` `url`");
    }
    c
}
