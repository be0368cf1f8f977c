//! Reading the `approvers` section: every field checked at its path (`approvers.people[2].tools`),
//! every error reported, nothing defaulted silently.

use super::*;

pub(super) const SECTION: &[&str] = &[
    "auth",
    "header",
    "jwt",
    "groups",
    "listen",
    "people",
    "webhook",
    "public_url",
    "allowed_hosts",
    "api_keys",
    "slack",
];

pub(super) const PERSON: &[&str] = &["name", "token_sha256", "tools", "edit_policy", "may_edit"];

pub(super) const SELECTOR: &[&str] = &["tool", "server", "kind", "agent"];

pub(super) const GROUP: &[&str] = &["group", "tools", "edit_policy"];

pub(super) fn is_header_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

pub(super) fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The authority (`host` or `host:port`, lower case) of an `http(s)://` URL.
pub(super) fn url_authority(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = rest.get(..end)?;
    let authority = authority.rsplit('@').next()?;
    is_host(authority).then(|| authority.to_ascii_lowercase())
}

/// Whether `s` is a `Host` value: a name, an IPv4 address or a bracketed IPv6 address,
/// with an optional port.
pub(super) fn is_host(s: &str) -> bool {
    let (host, port) = if let Some(v6) = s.strip_prefix('[') {
        let Some((addr, rest)) = v6.split_once(']') else {
            return false;
        };
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return false;
        }
        match rest {
            "" => return true,
            r => match r.strip_prefix(':') {
                Some(p) => ("x", Some(p)),
                None => return false,
            },
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|n| n > 0));
    host_ok && port_ok
}

pub(super) fn http_url(o: &Obj<'_>, key: &str, errs: &mut ConfigErrors) -> Option<String> {
    let url = o.non_blank(key, errs)?;
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        errs.push(
            o.path_of(key),
            format!("`{url}` is not an `http://` or `https://` URL"),
        );
        return None;
    }
    Some(url.to_owned())
}

pub(crate) fn read_approvers(v: &Value, errs: &mut ConfigErrors) -> Option<ApproverSettings> {
    let o = Obj::open(v, "approvers", SECTION, errs)?;
    let before = errs.errors.len();
    let auth = read_auth(&o, errs);
    let jwt_auth = matches!(auth, Some(ApproverAuth::Jwt(_)));
    let groups = read_groups(&o, jwt_auth, errs);
    let listen = read_listen(&o, errs);
    let webhook = http_url(&o, "webhook", errs);
    let public_url = http_url(&o, "public_url", errs);
    let allowed_hosts = read_allowed_hosts(&o, errs);
    let token_auth = matches!(auth, Some(ApproverAuth::Token));
    // With `auth: jwt`, groups alone may name every approver.
    let groups_suffice = jwt_auth && !groups.is_empty();
    let people = read_people(&o, (token_auth, jwt_auth, groups_suffice), errs);
    // The page's own fields are kept as written: the page reads them (`null` is still an
    // error here, as everywhere).
    let page = ApproverSettings::PAGE_FIELDS
        .into_iter()
        .filter_map(|k| o.raw(k, errs).map(|v| (k.to_owned(), v.clone())))
        .collect();
    if errs.errors.len() > before {
        return None;
    }
    Some(ApproverSettings {
        page,
        auth: auth?,
        listen: listen?,
        people,
        webhook,
        public_url,
        allowed_hosts,
        groups,
    })
}

/// `auth` and its settings (`header` for a proxy header, `jwt` for an identity provider).
fn read_auth(o: &Obj<'_>, errs: &mut ConfigErrors) -> Option<ApproverAuth> {
    let auth = match o.choice(
        "auth",
        &["token", "proxy_header", "jwt"],
        |s| match s {
            "token" => Some(0),
            "proxy_header" => Some(1),
            "jwt" => Some(2),
            _ => None,
        },
        errs,
    ) {
        Some(1) => match o.non_blank("header", errs) {
            Some(h) if is_header_name(h) => Some(ApproverAuth::ProxyHeader(h.to_owned())),
            Some(h) => {
                errs.push(
                    o.path_of("header"),
                    format!("`{h}` is not an HTTP header name"),
                );
                None
            }
            None => {
                if !o.has("header") {
                    errs.push(
                        o.path_of("header"),
                        "`auth: proxy_header` needs the `header` that carries the approver's name",
                    );
                }
                None
            }
        },
        Some(2) => {
            if o.has("header") {
                errs.push(
                    o.path_of("header"),
                    "with `auth: jwt`, a proxy header carrying the access token is `jwt.header`",
                );
            }
            match o.raw("jwt", errs) {
                None => {
                    if !o.has("jwt") {
                        errs.push(
                            o.path_of("jwt"),
                            "`auth: jwt` needs the `jwt` settings (issuer, audience, jwks_file or jwks_url)",
                        );
                    }
                    None
                }
                Some(v) => {
                    read_jwt(v, &o.path_of("jwt"), errs).map(|j| ApproverAuth::Jwt(Box::new(j)))
                }
            }
        }
        None if o.has("auth") => None,
        _ => {
            if o.has("header") {
                errs.push(
                    o.path_of("header"),
                    "`header` applies only with `auth: proxy_header`",
                );
            }
            Some(ApproverAuth::Token)
        }
    };
    let jwt_auth = matches!(auth, Some(ApproverAuth::Jwt(_)));
    if o.has("jwt") && !jwt_auth && auth.is_some() {
        errs.push(o.path_of("jwt"), "`jwt` applies only with `auth: jwt`");
    }
    auth
}

/// `groups` (only with `auth: jwt`), none named twice.
fn read_groups(o: &Obj<'_>, jwt_auth: bool, errs: &mut ConfigErrors) -> Vec<ApproverGroup> {
    match o.array("groups", errs) {
        None => Vec::new(),
        Some(_) if !jwt_auth => {
            errs.push(
                o.path_of("groups"),
                "`groups` applies only with `auth: jwt` (groups come from the identity provider's tokens)",
            );
            Vec::new()
        }
        Some(items) => {
            let mut groups: Vec<ApproverGroup> = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let path = index(&o.path_of("groups"), i);
                if let Some(g) = read_group(item, &path, errs) {
                    if groups.iter().any(|x| x.group == g.group) {
                        errs.push(
                            format!("{path}.group"),
                            format!("group `{}` is listed twice", g.group),
                        );
                    }
                    groups.push(g);
                }
            }
            groups
        }
    }
}

/// `listen`, the page's address (`127.0.0.1:8788` when not set).
fn read_listen(o: &Obj<'_>, errs: &mut ConfigErrors) -> Option<SocketAddr> {
    match o.non_blank("listen", errs) {
        None => DEFAULT_LISTEN.parse().ok(),
        Some(text) => match text.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                errs.push(
                    o.path_of("listen"),
                    format!("`{text}` is not an address like `127.0.0.1:8788`"),
                );
                None
            }
        },
    }
}

/// `allowed_hosts`, each a host (and port) without scheme or path, at least one.
fn read_allowed_hosts(o: &Obj<'_>, errs: &mut ConfigErrors) -> Option<Vec<String>> {
    o.array("allowed_hosts", errs).map(|items| {
        let mut hosts = Vec::new();
        if items.is_empty() {
            errs.push(
                o.path_of("allowed_hosts"),
                "at least one host is required (leave `allowed_hosts` out for the listen address and the loopback names)",
            );
        }
        for (i, item) in items.iter().enumerate() {
            let path = index(&o.path_of("allowed_hosts"), i);
            match item.as_str() {
                Some(h) if is_host(h) => hosts.push(h.to_ascii_lowercase()),
                Some(h) => errs.push(
                    path,
                    format!("`{h}` is not a host like `approve.example.com` or `127.0.0.1:8788` (no scheme, no path)"),
                ),
                None => errs.push(path, "expected a host name, like `approve.example.com:8788`"),
            }
        }
        hosts
    })
}

/// `people`, each named once and with a token of their own; required unless `groups` name
/// every approver (`auth: jwt`).
fn read_people(
    o: &Obj<'_>,
    (token_auth, jwt_auth, groups_suffice): (bool, bool, bool),
    errs: &mut ConfigErrors,
) -> Vec<Approver> {
    let mut people = Vec::new();
    match o.array("people", errs) {
        None => {
            if !o.has("people") && !groups_suffice {
                errs.push(
                    o.path_of("people"),
                    if jwt_auth {
                        "`people` or `groups` is required: at least one approver"
                    } else {
                        "`people` is required: at least one approver"
                    },
                );
            }
        }
        Some(items) if items.is_empty() && !groups_suffice => {
            errs.push(o.path_of("people"), "at least one approver is required");
        }
        Some(items) => {
            for (i, item) in items.iter().enumerate() {
                let path = index(&o.path_of("people"), i);
                if let Some(a) = read_person(item, &path, token_auth, errs) {
                    if people.iter().any(|p: &Approver| p.name == a.name) {
                        errs.push(
                            format!("{path}.name"),
                            format!("approver `{}` is named twice", a.name),
                        );
                    }
                    if a.token_sha256.is_some()
                        && people
                            .iter()
                            .any(|p: &Approver| p.token_sha256 == a.token_sha256)
                    {
                        errs.push(
                            format!("{path}.token_sha256"),
                            "two approvers share this token; each needs their own",
                        );
                    }
                    people.push(a);
                }
            }
        }
    }
    people
}

/// `approvers.jwt`: the engine's own fields ([`JwtApprovers::FIELDS`]) read and checked,
/// every other one kept as written for the identity provider's reader (which reports the
/// unknown ones).
pub(super) fn read_jwt(v: &Value, path: &str, errs: &mut ConfigErrors) -> Option<JwtApprovers> {
    let written = v.as_object();
    let every: Vec<&str> = written
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let o = Obj::open(v, path, &every, errs)?;
    let claim = |key: &str, default: &str, errs: &mut ConfigErrors| {
        o.non_blank(key, errs).unwrap_or(default).to_owned()
    };
    let name_claim = claim("name_claim", "preferred_username", errs);
    let groups_claim = claim("groups_claim", "groups", errs);
    let header = match o.non_blank("header", errs) {
        Some(h) if is_header_name(h) => Some(h.to_owned()),
        Some(h) => {
            errs.push(
                o.path_of("header"),
                format!("`{h}` is not an HTTP header name"),
            );
            None
        }
        None => None,
    };
    let verification = written
        .into_iter()
        .flatten()
        .filter(|(k, _)| !JwtApprovers::FIELDS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Some(JwtApprovers {
        name_claim,
        groups_claim,
        header,
        verification,
    })
}

pub(super) fn read_group(v: &Value, path: &str, errs: &mut ConfigErrors) -> Option<ApproverGroup> {
    let o = Obj::open(v, path, GROUP, errs)?;
    let group = o.non_blank("group", errs);
    if group.is_none() && !o.has("group") {
        errs.push(o.path_of("group"), "`group` is required");
    }
    let tools = o.array("tools", errs).map(|items| {
        items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| read_selector(item, &index(&o.path_of("tools"), i), errs))
            .collect::<Vec<_>>()
    });
    let edit_policy = o.bool("edit_policy", errs).unwrap_or(false);
    Some(ApproverGroup {
        group: group?.to_owned(),
        tools,
        edit_policy,
    })
}

pub(super) fn read_person(
    v: &Value,
    path: &str,
    token_auth: bool,
    errs: &mut ConfigErrors,
) -> Option<Approver> {
    let o = Obj::open(v, path, PERSON, errs)?;
    let name = o.non_blank("name", errs);
    if name.is_none() && !o.has("name") {
        errs.push(o.path_of("name"), "`name` is required");
    }
    let token = match o.str("token_sha256", errs) {
        Some(_) if !token_auth => {
            errs.push(
                o.path_of("token_sha256"),
                "a token applies only with `auth: token`; with `proxy_header` the proxy signs people in, with `jwt` the identity provider",
            );
            None
        }
        Some(t) if t == EMPTY_TOKEN_SHA256 => {
            errs.push(o.path_of("token_sha256"), EMPTY_TOKEN_MESSAGE);
            None
        }
        Some(t) if is_sha256_hex(t) => Some(t.to_owned()),
        Some(_) => {
            errs.push(
                o.path_of("token_sha256"),
                "expected the token's SHA-256 as 64 lower-case hex digits (`toolgate serve hash-token` prints it)",
            );
            None
        }
        None => {
            if token_auth && !o.has("token_sha256") {
                errs.push(
                    o.path_of("token_sha256"),
                    "`token_sha256` is required with `auth: token` (`toolgate serve hash-token` prints it)",
                );
            }
            None
        }
    };
    let tools = o.array("tools", errs).map(|items| {
        items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| read_selector(item, &index(&o.path_of("tools"), i), errs))
            .collect::<Vec<_>>()
    });
    let edit_policy = o.bool("edit_policy", errs).unwrap_or(false);
    let may_edit = o.bool("may_edit", errs).unwrap_or(false);
    Some(Approver {
        name: name?.to_owned(),
        token_sha256: token,
        tools,
        edit_policy,
        may_edit,
    })
}

pub(super) fn read_selector(
    v: &Value,
    path: &str,
    errs: &mut ConfigErrors,
) -> Option<ToolSelector> {
    let o = Obj::open(v, path, SELECTOR, errs)?;
    let kind = o.choice(
        "kind",
        &["mcp", "http", "local"],
        |s| match s {
            "mcp" => Some(ToolKind::Mcp),
            "http" => Some(ToolKind::Http),
            "local" => Some(ToolKind::Local),
            _ => None,
        },
        errs,
    );
    let sel = ToolSelector {
        tool: o.non_blank("tool", errs).map(Glob::new),
        server: o.non_blank("server", errs).map(Glob::new),
        kind,
        agent: o.non_blank("agent", errs).map(Glob::new),
    };
    if sel == ToolSelector::default() {
        errs.push(
            path,
            "a selector sets at least one of `tool`, `server`, `kind`, `agent`; leave `tools` out to allow every tool",
        );
        return None;
    }
    Some(sel)
}
