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
            "b": {"url": "http://10.0.0.1/mcp"},
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
fn issue22_5_every_bad_secret_field_is_named_and_no_value_is_echoed() {
    let p = paths(json!({
        "servers": {
            "a": {"command": "x", "env_secrets": {"K": {"file": "f", "env": "E"}, "L": {}, "M": "plain-value-1"}, "headers": {}},
            "b": {"url": "http://127.0.0.1:1/", "env_secrets": {}, "headers": {
                "Accept": {"env": "E"}, "bad name": {"env": "E"}, "X-A": {"env": "E", "prefix": 1}, "X-B": {"file": "f", "colour": 1}
            }},
            "c": {"url": "http://127.0.0.1:1/", "oauth": {
                "token_url": "https://idp/token", "client_id": " ", "client_secret": "plain-value-2", "client_auth": "jwt", "size": 1
            }},
            "d": {"url": "http://127.0.0.1:1/", "oauth": {"token_url": "http://idp/token", "client_id": "x"}},
            "e": {"command": "x", "oauth": {}}
        }
    }));
    for want in [
        "mcp.servers.a.env_secrets.K",
        "mcp.servers.a.env_secrets.L",
        "mcp.servers.a.env_secrets.M",
        "mcp.servers.a.headers",
        "mcp.servers.b.env_secrets",
        "mcp.servers.b.headers.Accept",
        "mcp.servers.b.headers.bad name",
        "mcp.servers.b.headers.X-A.prefix",
        "mcp.servers.b.headers.X-B.colour",
        "mcp.servers.c.oauth.client_id",
        "mcp.servers.c.oauth.client_secret",
        "mcp.servers.c.oauth.client_auth",
        "mcp.servers.c.oauth.size",
        "mcp.servers.d.oauth.client_secret",
        "mcp.servers.e.oauth",
    ] {
        assert!(p.iter().any(|x| x == want), "{want} missing from {p:?}");
    }
    let text = ServeConfig::read(&json!({"servers": {
        "a": {"command": "x", "env_secrets": {"M": "plain-value-1"}},
        "c": {"url": "http://127.0.0.1:1/", "oauth": {"token_url": "https://idp/token", "client_id": "x", "client_secret": "plain-value-2"}}
    }}))
    .unwrap_err()
    .to_string();
    assert!(!text.contains("plain-value"), "{text}");
    // A good one reads, and its secrets are only sources until loaded.
    let good = ServeConfig::read(&json!({"servers": {"c": {"url": "http://127.0.0.1:1/", "oauth": {
        "token_url": "http://127.0.0.1:1/token", "client_id": "x", "client_secret": {"env": "E"}, "scope": "a b", "client_auth": "post"
    }}}}))
    .unwrap();
    assert!(format!("{good:?}").contains(r#"env: "E""#));
}

#[test]
fn issue35_11_every_bad_token_exchange_field_is_named() {
    let p = paths(json!({
        "servers": {
            "a": {"command": "x", "token_exchange": {}},
            "b": {"url": "http://127.0.0.1:1/", "token_exchange": {
                "token_url": "http://idp.internal/token", "client_id": "gw", "client_secret": {"env": "E"},
                "subject_token_type": "id_token", "actor": "me"
            }},
            "c": {"url": "http://127.0.0.1:1/", "token_exchange": {
                "token_url": "http://127.0.0.1:2/token", "client_id": "gw", "client_secret": {"env": "E"}
            }}
        }
    }));
    for want in [
        "mcp.servers.a.token_exchange",
        "mcp.servers.b.token_exchange.token_url",
        "mcp.servers.b.token_exchange.subject_token_type",
        "mcp.servers.b.token_exchange.actor",
        // Without `mcp.jwt` no caller has a token to exchange.
        "mcp.servers.c.token_exchange",
    ] {
        assert!(p.iter().any(|x| x == want), "{want} missing from {p:?}");
    }
    let good = ServeConfig::read(&json!({
        "servers": {"c": {"url": "http://127.0.0.1:1/", "token_exchange": {
            "token_url": "http://127.0.0.1:2/token", "client_id": "gw", "client_secret": {"env": "E"},
            "audience": "crm", "subject_token_type": "jwt", "scope": "crm:read"
        }}},
        "jwt": {"issuer": "i", "audience": "a", "jwks_file": "k", "agents": {"c": "dev"}}
    }))
    .unwrap();
    let x = good.servers[0].exchange().unwrap();
    assert_eq!(x.audience.as_deref(), Some("crm"));
    assert_eq!(x.subject_token_type, crate::SubjectTokenType::Jwt);
    assert_eq!(x.token_url(), "http://127.0.0.1:2/token");
}

#[test]
fn own_wire_names_need_exactly_one_server() {
    let two = ServeConfig::read(&json!({
        "servers": {"a": {"command": "x"}, "b": {"command": "y"}},
        "wire_names": "own"
    }))
    .unwrap_err();
    let e = &two.errors[0];
    assert_eq!(e.path, "mcp.wire_names");
    assert!(e.message.contains("exactly one server"), "{}", e.message);
    assert!(e.message.contains("names 2"), "{}", e.message);
    assert_eq!(
        paths(json!({"servers": {"a": {"command": "x"}}, "wire_names": "bare"})),
        ["mcp.wire_names"]
    );
    let one = ServeConfig::read(&json!({
        "servers": {"a": {"command": "x"}},
        "wire_names": "own"
    }))
    .unwrap();
    assert_eq!(one.wire_names, WireNames::Own);
    let printed = ServeConfig::effective(&json!({"servers": {"a": {"command": "x"}}})).unwrap();
    assert_eq!(printed["wire_names"], "qualified");
}

#[test]
fn issue20_the_hash_of_the_empty_token_is_a_load_error() {
    for h in [
        toolgate_engine::approvers::EMPTY_TOKEN_SHA256.to_owned(),
        toolgate_engine::approvers::EMPTY_TOKEN_SHA256.to_ascii_uppercase(),
    ] {
        let e = ServeConfig::read(&json!({
            "servers": {"a": {"command": "x"}},
            "tokens": [{"sha256": h, "agent": "dev"}]
        }))
        .unwrap_err();
        assert_eq!(e.errors[0].path, "mcp.tokens[0].sha256");
        assert!(
            e.errors[0].message.contains("empty token"),
            "{}",
            e.errors[0].message
        );
    }
}

#[test]
fn issue20_13g_a_stdio_servers_relative_paths_are_the_configurations_folders() {
    let dir = std::path::Path::new("/etc/toolgate");
    let c = ServeConfig::read(&json!({"servers": {
        "a": {"command": "bin/server", "cwd": "work"},
        "b": {"command": "node", "args": ["server.js"]},
        "c": {"command": "/usr/bin/server", "cwd": "/srv"},
        "d": {"url": "http://127.0.0.1:9/mcp"}
    }}))
    .unwrap()
    .relative_to(dir);
    let by_id = |id: &str| c.servers.iter().find(|s| s.id() == id).unwrap().clone();
    let stdio = |id: &str, cmd: &str| McpServerConfig::stdio(id, cmd).unwrap();
    assert_eq!(
        by_id("a"),
        stdio("a", "/etc/toolgate/bin/server").current_dir("/etc/toolgate/work")
    );
    assert_eq!(
        by_id("b"),
        stdio("b", "node").arg("server.js").current_dir(dir),
        "a bare command is looked up in `PATH`; the server starts in the folder"
    );
    assert_eq!(
        by_id("c"),
        stdio("c", "/usr/bin/server").current_dir("/srv")
    );
    assert_eq!(
        by_id("d"),
        McpServerConfig::streamable_http("d", "http://127.0.0.1:9/mcp").unwrap()
    );
}

#[test]
fn issue22_every_mcp_jwt_error_names_its_field() {
    let p = paths(json!({
        "servers": {"a": {"command": "x"}},
        "jwt": {"issuer": "i", "audience": "http://127.0.0.1:1/mcp", "jwks_file": "k",
            "algorithms": ["none"], "agents": {"c": 7}, "agent_claim": "",
            "authorization_servers": ["ftp://x"], "subagent_claim": "azp", "extra": 1}
    }));
    for want in [
        "mcp.jwt.algorithms[0]",
        "mcp.jwt.agents.c",
        "mcp.jwt.agent_claim",
        "mcp.jwt.authorization_servers[0]",
        "mcp.jwt.extra",
    ] {
        assert!(p.iter().any(|x| x == want), "{want} missing from {p:?}");
    }
    assert_eq!(
        paths(json!({"servers": {"a": {"command": "x"}},
            "jwt": {"issuer": "i", "audience": "a", "jwks_file": "k"}})),
        ["mcp.jwt.agents"]
    );
    let ok = ServeConfig::read(&json!({"servers": {"a": {"command": "x"}},
        "jwt": {"issuer": "i", "audience": "a", "jwks_file": "k", "agents": {"c": "dev"}}}))
    .unwrap();
    let j = ok.jwt.unwrap();
    assert_eq!(
        j.agent_claim, None,
        "the default agent claim: client_id, else azp"
    );
    assert_eq!(j.token_type, toolgate_idp::TokenType::Any);
    assert_eq!(j.authorization_servers, ["i"], "the issuer by default");
    let gov = toolgate_engine::config::load_str(
        r#"{"agents": [{"name": "dev"}]}"#,
        toolgate_engine::config::Format::Json,
    )
    .unwrap();
    let unmapped = ServeConfig::read(&json!({"servers": {"a": {"command": "x"}},
        "jwt": {"issuer": "i", "audience": "a", "jwks_file": "k", "agents": {"c": "ops"}}}))
    .unwrap();
    let e = unmapped.check(&gov).unwrap_err();
    assert_eq!(e.errors[0].path, "mcp.jwt.agents.c");
    let printed = ServeConfig::effective(&json!({"servers": {"a": {"command": "x"}},
        "jwt": {"issuer": "https://idp.test/", "audience": "a", "jwks_file": "k", "agents": {"c": "dev"}}}))
    .unwrap();
    assert_eq!(printed["jwt"]["leeway_secs"], 30);
    assert_eq!(printed["jwt"]["algorithms"], json!(["RS256", "ES256"]));
    ServeConfig::read(&printed).unwrap();
}

/// `token_type` reads, prints back and names its field; without `agent_claim` none is
/// printed (the default is `client_id`, else `azp`, which no one claim spells), and a
/// subagent claim cannot be one of those two.
#[test]
fn issue34_token_type_and_the_default_agent_claim_read_and_print_back() {
    let section = |jwt: Value| json!({"servers": {"a": {"command": "x"}}, "jwt": jwt});
    let base = json!({"issuer": "https://idp.test/", "audience": "a", "jwks_file": "k",
        "agents": {"c": "dev"}});
    let with = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        section(b)
    };
    let printed = ServeConfig::effective(&with("token_type", json!("at+jwt"))).unwrap();
    assert_eq!(printed["jwt"]["token_type"], "at+jwt");
    assert!(printed["jwt"].get("agent_claim").is_none(), "{printed}");
    let again = ServeConfig::read(&printed).unwrap().jwt.unwrap();
    assert_eq!(again.token_type, toolgate_idp::TokenType::AccessToken);
    assert_eq!(again.agent_claim, None);
    let printed = ServeConfig::effective(&section(base.clone())).unwrap();
    assert!(printed["jwt"].get("token_type").is_none(), "{printed}");
    let explicit = ServeConfig::effective(&with("agent_claim", json!("azp"))).unwrap();
    assert_eq!(explicit["jwt"]["agent_claim"], "azp");
    assert_eq!(
        ServeConfig::read(&explicit)
            .unwrap()
            .jwt
            .unwrap()
            .agent_claim,
        Some(String::from("azp"))
    );
    assert_eq!(
        paths(with("token_type", json!("JWT"))),
        ["mcp.jwt.token_type"]
    );
    for claim in ["client_id", "azp"] {
        assert_eq!(
            paths(with("subagent_claim", json!(claim))),
            ["mcp.jwt.subagent_claim"],
            "{claim}"
        );
    }
    let mut named = base.clone();
    named["agent_claim"] = json!("tenant_client");
    named["subagent_claim"] = json!("azp");
    assert!(ServeConfig::read(&section(named)).is_ok());
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
