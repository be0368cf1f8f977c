use super::*;

#[test]
fn ids_must_normalise() {
    assert!(McpServerConfig::stdio("", "x").is_err());
    assert!(McpServerConfig::stdio("!!!", "x").is_err());
    let c = McpServerConfig::stdio("GitHub Enterprise", "x").unwrap();
    assert_eq!(c.key(), "github_enterprise");
}

#[test]
fn http_urls_only() {
    assert!(McpServerConfig::streamable_http("a", "ftp://x").is_err());
    assert!(McpServerConfig::streamable_http("a", "https://x").is_ok());
    assert!(McpServerConfig::streamable_http("a", "http://127.0.0.1:1/mcp").is_ok());
}

#[test]
fn tool_settings_compare_names_case_insensitively() {
    let c = McpServerConfig::custom("s")
        .unwrap()
        .confidential_tool("Create_Entities")
        .approval("wipe", ApprovalMode::Deny)
        .approval("WIPE", ApprovalMode::RequireApproval);
    assert!(c.withholds("create_entities"));
    assert!(!c.withholds("read_graph"));
    assert_eq!(c.approval_for("wipe"), ApprovalMode::RequireApproval);
    assert_eq!(c.approval_for("other"), ApprovalMode::Default);
    assert!(c.clone().confidential(true).withholds("anything"));
}

#[test]
fn r41_settings_are_set_once_and_a_conflict_names_both() {
    let prefixed = ServerSettings::untrusted().tool_prefix("gh-");
    let c = McpServerConfig::custom("gh").unwrap();
    // Nothing anywhere: nothing to add.
    assert_eq!(c.settle(None, None), Ok(None));
    // The configuration's alone.
    assert_eq!(c.settle(Some(&prefixed), None), Ok(Some(prefixed.clone())));
    // The gateway's alone.
    let mine = c.clone().tool_prefix("gh-");
    assert_eq!(mine.settle(None, None), Ok(Some(prefixed.clone())));
    // Both, equal.
    assert_eq!(
        mine.settle(Some(&prefixed), None),
        Ok(Some(prefixed.clone()))
    );
    // Both, different: one error per field, naming both values.
    let err = c
        .clone()
        .tool_prefix("x-")
        .trust_tool_annotations(true)
        .settle(Some(&prefixed), None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("servers.gh.tool_prefix"), "{err}");
    assert!(err.contains("`x-`") && err.contains("`gh-`"), "{err}");
    assert!(err.contains("servers.gh.trust_tool_annotations"), "{err}");
    // Connected with a prefix, a snapshot that drops it conflicts with the listing.
    let err = c
        .settle(Some(&ServerSettings::untrusted()), Some(Some("gh-")))
        .unwrap_err()
        .to_string();
    assert!(err.contains("none"), "{err}");
    // Blank is refused.
    let err = c.clone().tool_prefix("  ").settle(None, None).unwrap_err();
    assert!(err.to_string().contains("must not be blank"), "{err}");
}
