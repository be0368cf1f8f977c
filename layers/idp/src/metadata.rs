//! The protected-resource metadata (RFC 9728) a resource server publishes, and where.

use super::*;

/// The protected-resource metadata document (RFC 9728) of a resource server: its
/// `resource` identifier, the authorization servers that issue its tokens, the scopes it
/// knows and that tokens come in the `Authorization` header.
///
/// ```
/// let m = toolgate_idp::protected_resource_metadata(
///     "http://127.0.0.1:8931/mcp", &["https://idp.example.com/".into()], &["mcp:tools".into()]);
/// assert_eq!(m["authorization_servers"][0], "https://idp.example.com/");
/// assert_eq!(m["bearer_methods_supported"][0], "header");
/// ```
pub fn protected_resource_metadata(
    resource: &str,
    authorization_servers: &[String],
    scopes: &[String],
) -> Value {
    let mut m = json!({
        "resource": resource,
        "authorization_servers": authorization_servers,
        "bearer_methods_supported": ["header"],
        "resource_name": "toolgate",
    });
    if !scopes.is_empty()
        && let Some(o) = m.as_object_mut()
    {
        o.insert("scopes_supported".into(), json!(scopes));
    }
    m
}

/// The address of the metadata document for a resource URI (RFC 9728 §3.1): the
/// well-known path inserted between the host and the resource's path.
///
/// ```
/// assert_eq!(
///     toolgate_idp::metadata_url("http://127.0.0.1:8931/mcp"),
///     "http://127.0.0.1:8931/.well-known/oauth-protected-resource/mcp"
/// );
/// assert_eq!(
///     toolgate_idp::metadata_url("https://mcp.example.com"),
///     "https://mcp.example.com/.well-known/oauth-protected-resource"
/// );
/// ```
pub fn metadata_url(resource: &str) -> String {
    const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";
    let (scheme, rest) = resource.split_once("://").unwrap_or(("http", resource));
    let (host, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let path = path.trim_end_matches('/');
    format!("{scheme}://{host}{WELL_KNOWN}{path}")
}

/// The well-known paths a metadata document is served at for a resource URI: the path
/// [`metadata_url`] names and the bare well-known path.
pub fn metadata_paths(resource: &str) -> Vec<String> {
    const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";
    let full = metadata_url(resource);
    let after_host = full
        .split_once("://")
        .and_then(|(_, r)| {
            r.find('/')
                .map(|i| r.get(i..).unwrap_or_default().to_owned())
        })
        .unwrap_or_else(|| WELL_KNOWN.to_owned());
    let mut paths = vec![after_host];
    if !paths.iter().any(|p| p == WELL_KNOWN) {
        paths.push(WELL_KNOWN.to_owned());
    }
    paths
}
