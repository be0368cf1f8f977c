//! The hash of the empty token, refused wherever a token hash is configured.

/// The SHA-256 (hex) of the empty token. Configured anywhere a token hash is (an
/// approver's `token_sha256`, `mcp.tokens[i].sha256`), it is a load error: an empty token
/// is no secret, and a client that sends none must never be taken for a person.
///
/// ```
/// use toolgate_engine::config::{load_str, Format};
/// use toolgate_engine::approvers::EMPTY_TOKEN_SHA256;
/// let text = format!(r#"{{"approvers": {{"people": [{{"name": "a", "token_sha256": "{EMPTY_TOKEN_SHA256}"}}]}}}}"#);
/// let err = load_str(&text, Format::Json).unwrap_err();
/// assert_eq!(err.errors[0].path, "approvers.people[0].token_sha256");
/// assert!(err.errors[0].message.contains("empty token"));
/// ```
pub const EMPTY_TOKEN_SHA256: &str =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// The message for a configured hash of the empty token.
pub const EMPTY_TOKEN_MESSAGE: &str = "this is the SHA-256 of the empty token, which anyone can send: give the hash of a real secret (`toolgate serve hash-token` prints it)";
