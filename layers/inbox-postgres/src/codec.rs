//! The text forms of the parts of a held call kept as JSON, the stored policy's body and its
//! `updatedAt` stamp.
//!
//! These are the same forms the SQLite backend writes (`toolgate-inbox` keeps its helpers
//! shared in `toolgate_inbox::codec`, so a row moved between backends reads back the same). Reading never recurses without a bound: stored JSON's depth is measured first.

use std::time::{Duration, SystemTime};

use serde::Deserialize;
use serde_json::Value;
use toolgate::core::RunMode;
use toolgate::engine::json::raw_depth;
use toolgate::engine::policy::{MAX_INPUT_DEPTH_CEILING, Policy};

/// Parses stored JSON text, refusing text nested deeper than the engine's ceiling before
/// anything recursive runs.
pub(crate) fn parse_json(text: &str) -> Result<Value, String> {
    if raw_depth(text) > MAX_INPUT_DEPTH_CEILING {
        return Err(format!(
            "the stored JSON nests deeper than {MAX_INPUT_DEPTH_CEILING} levels"
        ));
    }
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    let value = Value::deserialize(&mut de).map_err(|e| format!("malformed JSON: {e}"))?;
    de.end().map_err(|e| format!("malformed JSON: {e}"))?;
    Ok(value)
}

pub(crate) use toolgate_inbox::codec::{
    identities_from_json, identities_json, reasons_from_json, reasons_json,
};

pub(crate) fn run_mode_from(s: &str) -> Result<RunMode, String> {
    RunMode::parse(s).ok_or_else(|| format!("unknown run mode `{s}`"))
}

/// The body stored for a policy: its document without `updatedAt`, every number as
/// written (an integer past 64 bits keeps its digits, R20).
pub(crate) fn policy_body(policy: &Policy) -> String {
    policy.body_text()
}

/// `updatedAt` for a policy put at `now`: RFC 3339 with microseconds, strictly after
/// `previous` even when this instance's clock is behind the one that wrote it.
pub(crate) fn next_updated_at(previous: Option<&str>, now: SystemTime) -> String {
    let at = match previous.and_then(|p| humantime::parse_rfc3339(p).ok()) {
        Some(prev) if now <= prev => prev + Duration::from_micros(1),
        _ => now,
    };
    humantime::format_rfc3339_micros(at).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate::core::{Ask, AskSource, ToolIdentity};

    #[test]
    fn reasons_and_identities_round_trip() {
        let asks = vec![
            Ask {
                source: AskSource::PolicyRule(3),
                reason: "r".into(),
            },
            Ask {
                source: AskSource::Hook,
                reason: "h".into(),
            },
        ];
        assert_eq!(reasons_from_json(&reasons_json(&asks)).unwrap(), asks);
        let ids = vec![
            ToolIdentity::mcp("GitHub", "list.issues"),
            ToolIdentity::toolset("coding", "write"),
            ToolIdentity::http("refund"),
        ];
        assert_eq!(identities_from_json(&identities_json(&ids)).unwrap(), ids);
        assert!(identities_from_json("{}").is_err());
        assert!(reasons_from_json("[{\"source\": \"nobody\", \"reason\": \"x\"}]").is_err());
    }

    #[test]
    fn stored_json_deeper_than_the_ceiling_is_refused_without_recursing() {
        let deep =
            "[".repeat(MAX_INPUT_DEPTH_CEILING + 1) + &"]".repeat(MAX_INPUT_DEPTH_CEILING + 1);
        assert!(parse_json(&deep).unwrap_err().contains("nests deeper"));
        let ok = "[".repeat(MAX_INPUT_DEPTH_CEILING) + &"]".repeat(MAX_INPUT_DEPTH_CEILING);
        assert!(parse_json(&ok).is_ok());
    }

    #[test]
    fn updated_at_is_strictly_after_a_later_previous_stamp() {
        let now = humantime::parse_rfc3339("2030-01-01T00:00:00.000001Z").unwrap();
        let ahead = "2030-01-01T00:00:05.000000Z";
        assert_eq!(
            next_updated_at(Some(ahead), now),
            "2030-01-01T00:00:05.000001Z"
        );
        assert_eq!(
            next_updated_at(Some("2029-12-31T23:59:59.000000Z"), now),
            "2030-01-01T00:00:00.000001Z"
        );
        assert_eq!(
            next_updated_at(Some("not a time"), now),
            "2030-01-01T00:00:00.000001Z"
        );
        assert_eq!(next_updated_at(None, now), "2030-01-01T00:00:00.000001Z");
    }
}
