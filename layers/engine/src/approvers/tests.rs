use crate::config::{Format, load_str};
use toolgate_core::ToolIdentity;

const HASH: &str = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";

fn paths(text: &str) -> Vec<String> {
    load_str(text, Format::Json)
        .unwrap_err()
        .errors
        .into_iter()
        .map(|e| e.path)
        .collect()
}

#[test]
fn issue20_the_hash_of_the_empty_token_is_a_load_error() {
    let text = format!(
        r#"{{"approvers": {{"people": [{{"name": "a", "token_sha256": "{HASH}"}}, {{"name": "b", "token_sha256": "{}"}}]}}}}"#,
        super::EMPTY_TOKEN_SHA256
    );
    let err = load_str(&text, Format::Json).unwrap_err();
    assert_eq!(err.errors.len(), 1, "{err}");
    assert_eq!(err.errors[0].path, "approvers.people[1].token_sha256");
    assert!(err.errors[0].message.contains("empty token"), "{err}");
}

#[test]
fn issue20_allowed_hosts_are_read_checked_and_defaulted() {
    let with = |hosts: &str| {
        format!(
            r#"{{"approvers": {{"allowed_hosts": {hosts}, "people": [{{"name": "a", "token_sha256": "{HASH}"}}]}}}}"#
        )
    };
    let gov = load_str(
        &with(r#"["Approve.Example.com", "10.0.0.5:8788", "[::1]:9000"]"#),
        Format::Json,
    )
    .unwrap();
    let a = gov.approver_settings().unwrap();
    assert_eq!(
        a.hosts("127.0.0.1:8788".parse().unwrap()),
        ["approve.example.com", "10.0.0.5:8788", "[::1]:9000"]
    );
    assert_eq!(a.to_json()["allowed_hosts"][0], "approve.example.com");
    for (bad, path) in [
        (r#"[]"#, "approvers.allowed_hosts"),
        (r#"["https://x.example"]"#, "approvers.allowed_hosts[0]"),
        (r#"["ok", "x.example/path"]"#, "approvers.allowed_hosts[1]"),
        (r#"["x:99999"]"#, "approvers.allowed_hosts[0]"),
        (r#"[7]"#, "approvers.allowed_hosts[0]"),
        (r#""x""#, "approvers.allowed_hosts"),
    ] {
        assert_eq!(paths(&with(bad)), [path], "{bad}");
    }
    let gov = load_str(
        &format!(r#"{{"approvers": {{"people": [{{"name": "a", "token_sha256": "{HASH}"}}]}}}}"#),
        Format::Json,
    )
    .unwrap();
    let a = gov.approver_settings().unwrap();
    assert_eq!(a.allowed_hosts, None);
    assert_eq!(
        a.hosts("0.0.0.0:80".parse().unwrap()),
        ["localhost:80", "127.0.0.1:80", "[::1]:80"],
        "an unspecified address is no host"
    );
    assert_eq!(
        a.hosts("192.168.1.4:8788".parse().unwrap()),
        [
            "localhost:8788",
            "127.0.0.1:8788",
            "[::1]:8788",
            "192.168.1.4:8788"
        ]
    );
}

#[test]
fn issue22_jwt_approvers_and_groups_read_print_back_and_name_their_errors() {
    let jwt = r#""jwt": {"issuer": "https://idp.test/", "audience": "toolgate-approvals", "jwks_file": "k.json", "header": "X-Forwarded-Access-Token", "groups_claim": "roles"}"#;
    let text = format!(
        r#"{{"approvers": {{"auth": "jwt", {jwt}, "groups": [{{"group": "sre", "tools": [{{"server": "github"}}]}}, {{"group": "leads", "edit_policy": true}}]}}}}"#
    );
    let gov = load_str(&text, Format::Json).unwrap();
    let a = gov.approver_settings().unwrap();
    let super::ApproverAuth::Jwt(j) = &a.auth else {
        panic!("{:?}", a.auth)
    };
    assert_eq!(j.name_claim, "preferred_username");
    assert_eq!(j.groups_claim, "roles");
    assert_eq!(j.header.as_deref(), Some("X-Forwarded-Access-Token"));
    assert!(a.people.is_empty());
    let both = a.rights("erin", &["sre", "leads"]).unwrap();
    assert!(both.edit_policy, "edit from `leads`");
    assert_eq!(both.tools, None, "`leads` answers every call");
    let again = load_str(&crate::config::effective(&gov).to_string(), Format::Json).unwrap();
    assert_eq!(again.approver_settings(), gov.approver_settings());
    let cases = [
        (r#"{"approvers": {"auth": "jwt", "groups": [{"group": "g"}]}}"#.to_owned(), "approvers.jwt"),
        (format!(r#"{{"approvers": {{"auth": "jwt", {jwt}}}}}"#), "approvers.people"),
        (format!(r#"{{"approvers": {{"auth": "jwt", {jwt}, "groups": [{{"tools": []}}]}}}}"#), "approvers.groups[0].group"),
        (format!(r#"{{"approvers": {{"auth": "jwt", {jwt}, "groups": [{{"group": "g"}}, {{"group": "g"}}]}}}}"#), "approvers.groups[1].group"),
        (format!(r#"{{"approvers": {{"auth": "jwt", {jwt}, "people": [{{"name": "a", "token_sha256": "{HASH}"}}]}}}}"#), "approvers.people[0].token_sha256"),
        (format!(r#"{{"approvers": {{"people": [{{"name": "a", "token_sha256": "{HASH}"}}], "groups": [{{"group": "g"}}]}}}}"#), "approvers.groups"),
        (format!(r#"{{"approvers": {{"people": [{{"name": "a", "token_sha256": "{HASH}"}}], {jwt}}}}}"#), "approvers.jwt"),
        (r#"{"approvers": {"auth": "jwt", "jwt": "https://idp.test/", "groups": [{"group": "g"}]}}"#.to_owned(), "approvers.jwt"),
        (r#"{"approvers": {"auth": "jwt", "jwt": null, "groups": [{"group": "g"}]}}"#.to_owned(), "approvers.jwt"),
        (r#"{"approvers": {"auth": "jwt", "jwt": {"issuer": "i", "header": "a b"}, "groups": [{"group": "g"}]}}"#.to_owned(), "approvers.jwt.header"),
        (r#"{"approvers": {"auth": "jwt", "jwt": {"issuer": "i", "name_claim": null}, "groups": [{"group": "g"}]}}"#.to_owned(), "approvers.jwt.name_claim"),
    ];
    for (text, path) in cases {
        let got = paths(&text);
        assert!(got.iter().any(|p| p == path), "{text}: {got:?}");
    }
}

#[test]
fn the_jwt_verification_settings_are_kept_as_written_for_the_identity_provider_reader() {
    let gov = |jwt: &str| {
        let text = format!(
            r#"{{"approvers": {{"auth": "jwt", "jwt": {jwt}, "groups": [{{"group": "sre"}}]}}}}"#
        );
        load_str(&text, Format::Json).unwrap()
    };
    // The engine decides nothing with them: `toolgate_idp::JwtSettings` checks them.
    let odd = gov(
        r#"{"issuer": "i", "audience": "a", "jwks_url": "http://idp.internal/jwks", "algorithms": ["HS256"], "colour": 1, "name_claim": "email"}"#,
    );
    let a = odd.approver_settings().unwrap();
    let super::ApproverAuth::Jwt(j) = &a.auth else {
        panic!("{:?}", a.auth)
    };
    assert_eq!(j.name_claim, "email");
    let mut keys: Vec<&str> = j.verification().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["algorithms", "audience", "colour", "issuer", "jwks_url"]
    );
    assert_eq!(j.verification()["algorithms"], serde_json::json!(["HS256"]));
    // Printed as written, with the engine's own fields spelled; it loads back the same.
    let printed = a.to_json();
    assert_eq!(printed["jwt"]["colour"], 1);
    assert_eq!(printed["jwt"]["groups_claim"], "groups");
    let again = load_str(&crate::config::effective(&odd).to_string(), Format::Json).unwrap();
    assert_eq!(again.approver_settings(), Some(a));
    // Any change of the verification settings is a change of `auth` (a reload refuses it).
    let base = r#"{"issuer": "i", "audience": "a", "jwks_file": "k.json"}"#;
    let other = r#"{"issuer": "i", "audience": "a", "jwks_file": "k.json", "leeway_secs": 5}"#;
    let auth = |g: &crate::Governance| g.approver_settings().unwrap().auth.clone();
    assert_eq!(auth(&gov(base)), auth(&gov(base)));
    assert_ne!(auth(&gov(base)), auth(&gov(other)));
}

#[test]
fn approvers_errors_name_their_field() {
    let cases = [
        (r#"{"approvers": {}}"#, "approvers.people"),
        (r#"{"approvers": {"people": []}}"#, "approvers.people"),
        (
            r#"{"approvers": {"people": [{"token_sha256": "HASH"}]}}"#,
            "approvers.people[0].name",
        ),
        (
            r#"{"approvers": {"people": [{"name": "a"}]}}"#,
            "approvers.people[0].token_sha256",
        ),
        (
            r#"{"approvers": {"people": [{"name": "a", "token_sha256": "HASH", "role": "x"}]}}"#,
            "approvers.people[0].role",
        ),
        (
            r#"{"approvers": {"listen": "everywhere", "people": [{"name": "a", "token_sha256": "HASH"}]}}"#,
            "approvers.listen",
        ),
        (
            r#"{"approvers": {"auth": "proxy_header", "people": [{"name": "a"}]}}"#,
            "approvers.header",
        ),
        (
            r#"{"approvers": {"auth": "proxy_header", "header": "X-User", "people": [{"name": "a", "token_sha256": "HASH"}]}}"#,
            "approvers.people[0].token_sha256",
        ),
        (
            r#"{"approvers": {"people": [{"name": "a", "token_sha256": "HASH"}, {"name": "a", "token_sha256": "HASH"}]}}"#,
            "approvers.people[1].name",
        ),
        (
            r#"{"approvers": {"people": [{"name": "a", "token_sha256": "HASH", "tools": [{}]}]}}"#,
            "approvers.people[0].tools[0]",
        ),
        (
            r#"{"approvers": {"people": [{"name": "a", "token_sha256": "HASH", "tools": [{"kind": "ftp"}]}]}}"#,
            "approvers.people[0].tools[0].kind",
        ),
        (
            r#"{"approvers": {"webhook": "ftp://x", "people": [{"name": "a", "token_sha256": "HASH"}]}}"#,
            "approvers.webhook",
        ),
    ];
    for (text, path) in cases {
        let text = text.replace("HASH", HASH);
        let got = paths(&text);
        assert!(got.iter().any(|p| p == path), "{text}: {got:?}");
    }
}

#[test]
fn approvers_load_print_back_and_select_tools() {
    let text = r#"{"approvers": {"auth": "proxy_header", "header": "X-Forwarded-User",
        "people": [{"name": "ops", "tools": [{"server": "git*", "tool": "create_*"}, {"kind": "http", "agent": "support"}]},
                   {"name": "lead", "edit_policy": true}]}}"#;
    let gov = load_str(text, Format::Json).unwrap();
    let a = gov.approver_settings().unwrap();
    assert_eq!(a.listen.to_string(), super::DEFAULT_LISTEN);
    let ops = a.approver("ops").unwrap();
    assert!(ops.may_answer(&[ToolIdentity::mcp("github", "create_issue")], "x"));
    assert!(!ops.may_answer(&[ToolIdentity::mcp("github", "delete_repo")], "x"));
    assert!(!ops.may_answer(&[ToolIdentity::http("create_issue")], "x"));
    assert!(ops.may_answer(&[ToolIdentity::http("refund")], "support"));
    assert!(!ops.may_answer(&[ToolIdentity::http("refund")], "sales"));
    assert!(a.approver("lead").unwrap().may_answer(&[], "any"));
    let printed = crate::config::effective(&gov);
    let again = load_str(&printed.to_string(), Format::Json).unwrap();
    assert_eq!(again.approver_settings(), gov.approver_settings());
}
