//! The outbound URL policy: which addresses toolgate fetches credentials from (an identity
//! provider's `jwks_url`, an upstream's OAuth `token_url`) or posts to (a hook's `url`).
//! Shared by every crate that reads such an address, so that all of them refuse the same
//! ones with the same reason.
//!
//! ```
//! use toolgate_core::outbound::{fetch_url_problem, is_https};
//! assert!(is_https("HTTPS://idp.example.com/jwks"));
//! assert!(fetch_url_problem("http://idp.internal/jwks").is_some());
//! ```

/// Whether `url` is an `https://` URL (the scheme in any case).
///
/// ```
/// use toolgate_core::outbound::is_https;
/// assert!(is_https("https://idp.example.com/jwks"));
/// assert!(is_https("HTTPS://idp.example.com/jwks"));
/// assert!(!is_https("http://127.0.0.1:9000/jwks"));
/// assert!(!is_https("https:"));
/// ```
pub fn is_https(url: &str) -> bool {
    url.get(..8)
        .is_some_and(|p| p.eq_ignore_ascii_case("https://"))
}

/// What is wrong with `url` as an address toolgate fetches credentials from (a `jwks_url`,
/// an upstream's OAuth `token_url`), or `None` when it may be fetched: an `https://` URL
/// with a host, or an `http://` URL whose host is a loopback address (`127.0.0.0/8`,
/// `[::1]`, `localhost`). Plain `http://` to any other host is refused: keys or tokens read
/// off the network unprotected could be replaced by anyone on the path.
///
/// ```
/// use toolgate_core::outbound::fetch_url_problem;
/// assert_eq!(fetch_url_problem("https://idp.example.com/jwks"), None);
/// assert_eq!(fetch_url_problem("http://127.0.0.1:9000/jwks"), None);
/// assert_eq!(fetch_url_problem("http://localhost/jwks"), None);
/// assert_eq!(fetch_url_problem("http://[::1]:80/jwks"), None);
/// let why = fetch_url_problem("http://idp.internal/jwks").unwrap();
/// assert!(why.contains("loopback"), "{why}");
/// assert!(fetch_url_problem("ftp://idp/jwks").is_some());
/// assert!(fetch_url_problem("https:///jwks").is_some());
/// ```
pub fn fetch_url_problem(url: &str) -> Option<String> {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) if s.eq_ignore_ascii_case("https") || s.eq_ignore_ascii_case("http") => {
            (s.to_ascii_lowercase(), r)
        }
        _ => return Some(format!("`{url}` is not an `https://` URL")),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Some(format!(
            "`{url}` carries credentials in its address; give them in their own fields"
        ));
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    if host.is_empty() {
        return Some(format!("`{url}` names no host"));
    }
    if scheme == "https" {
        return None;
    }
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        None
    } else {
        Some(format!(
            "`{url}` is plain `http://` to `{host}`, which is not a loopback address: credentials are fetched over `https://` (plain `http://` only from this machine, `127.0.0.1`, `[::1]` or `localhost`)"
        ))
    }
}
