//! Streamable HTTP upstreams: their secret headers.

use std::collections::HashMap;

use reqwest::header::{HeaderName, HeaderValue};
use toolgate_engine::ConfigErrors;

use super::error::GatewayError;
use crate::secret::SecretSource;

/// The headers rmcp sets itself: a configured one would conflict.
pub(crate) const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// A header name as configured, checked: a valid HTTP header name rmcp does not set itself.
pub(crate) fn header_name(name: &str) -> Result<HeaderName, String> {
    let parsed = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("`{name}` is not a valid HTTP header name"))?;
    if RESERVED_HEADERS.contains(&parsed.as_str()) {
        return Err(format!(
            "`{name}` is set by the MCP transport itself and cannot be configured"
        ));
    }
    Ok(parsed)
}

/// Reads every secret header of server `id`: each one that cannot be read, or is no
/// valid header value, is an error naming `servers.<id>.headers.<Name>`. The values are
/// marked sensitive (never shown by the HTTP stack).
pub(crate) fn secret_headers(
    id: &str,
    headers: &[(String, SecretSource)],
) -> Result<HashMap<HeaderName, HeaderValue>, GatewayError> {
    let mut errors = ConfigErrors::default();
    let mut out = HashMap::new();
    for (name, source) in headers {
        let path = format!("servers.{id}.headers.{name}");
        let parsed = match header_name(name) {
            Ok(n) => n,
            Err(e) => {
                errors.push(path, e);
                continue;
            }
        };
        if out.contains_key(&parsed) {
            errors.push(path, format!("the header `{name}` is configured twice"));
            continue;
        }
        match source.read() {
            Ok(secret) => match HeaderValue::from_str(secret.expose()) {
                Ok(mut v) => {
                    v.set_sensitive(true);
                    out.insert(parsed, v);
                }
                Err(_) => errors.push(
                    path,
                    "the secret is not a valid HTTP header value (it has a line break or another control character)",
                ),
            },
            Err(e) => errors.push(path, e),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(GatewayError::Secret {
            server: id.to_owned(),
            errors,
        })
    }
}
