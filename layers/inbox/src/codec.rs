//! The stored text forms of a held call and of the stored policy, shared by every backend so
//! a row reads back the same whichever store wrote it: the identities and reasons kept as
//! JSON, the run mode, the policy's body and its `updatedAt` stamp, and a reader for stored
//! JSON.
//!
//! Reading never recurses without a bound: stored JSON's depth is measured first.

use std::time::{Duration, SystemTime};

use serde::Deserialize;
use serde_json::{Map, Value, json};
use toolgate_core::json::raw_depth;
use toolgate_core::{Ask, AskSource, RunMode, ToolIdentity};
use toolgate_engine::policy::{MAX_INPUT_DEPTH_CEILING, Policy};

/// Why stored text (a held call's row, its input, its approvals, a policy body) cannot be
/// read back: the record is then unreadable, never guessed at.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// Stored JSON nested deeper than the engine's ceiling.
    #[error("the stored JSON nests deeper than {MAX_INPUT_DEPTH_CEILING} levels")]
    TooDeep,
    /// Stored JSON that does not parse.
    #[error("malformed JSON: {0}")]
    MalformedJson(serde_json::Error),
    /// A stored policy body that is JSON but not an object.
    #[error("the stored policy is not a JSON object")]
    PolicyNotObject,
    /// The identities' text is not JSON.
    #[error("identities: {0}")]
    IdentitiesJson(serde_json::Error),
    /// The identities' text is not a list.
    #[error("identities: not a list")]
    IdentitiesNotList,
    /// An identity without one of its fields.
    #[error("identities: `{field}` is missing")]
    IdentityField {
        /// The field (`kind`, `source`, `name`).
        field: &'static str,
    },
    /// An identity of a kind this version does not know.
    #[error("identities: unknown kind `{kind}`")]
    IdentityKind {
        /// The kind stored.
        kind: String,
    },
    /// The reasons' text is not JSON.
    #[error("reasons: {0}")]
    ReasonsJson(serde_json::Error),
    /// The reasons' text is not a list.
    #[error("reasons: not a list")]
    ReasonsNotList,
    /// A reason without its text.
    #[error("reasons: `reason` is missing")]
    ReasonMissing,
    /// A policy rule's reason without the rule's index.
    #[error("reasons: a policy rule's index is missing")]
    RuleIndexMissing,
    /// A reason of a source this version does not know.
    #[error("reasons: unknown source")]
    ReasonSource,
    /// A run mode this version does not spell.
    #[error("unknown run mode `{mode}`")]
    RunMode {
        /// The run mode stored.
        mode: String,
    },
    /// A number of approvals needed that is not from 1 to
    /// [`MAX_APPROVALS`](crate::MAX_APPROVALS).
    #[error(
        "the call needs {needed} approvals, not a number from 1 to {}",
        crate::model::MAX_APPROVALS
    )]
    ApprovalsNeeded {
        /// The number stored.
        needed: i64,
    },
    /// The approvals' text is not a JSON array.
    #[error("the stored approvals are not a JSON array")]
    ApprovalsNotList,
    /// An approval without one of its fields.
    #[error("an approval without `{field}`")]
    ApprovalField {
        /// The field (`approver`, `at`, `inputHash`, `definitionHash`).
        field: &'static str,
    },
    /// An approval with a subject and no issuer, or an issuer and no subject.
    #[error("an approval with half a principal")]
    HalfPrincipal,
    /// A state this version does not know.
    #[error("unknown state `{state}`")]
    State {
        /// The state stored.
        state: String,
    },
}

/// Parses stored JSON text (an input, a result, a policy body), refusing text nested deeper
/// than the engine's ceiling before anything recursive runs. Inputs were bounded by the gate
/// (R36) before they were held; the depth is measured again here, without recursing.
///
/// # Errors
///
/// [`RecordError::TooDeep`], [`RecordError::MalformedJson`].
pub fn parse_json(text: &str) -> Result<Value, RecordError> {
    if raw_depth(text) > MAX_INPUT_DEPTH_CEILING {
        return Err(RecordError::TooDeep);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    let value = Value::deserialize(&mut de).map_err(RecordError::MalformedJson)?;
    de.end().map_err(RecordError::MalformedJson)?;
    Ok(value)
}

/// The stored text of the identities behind a held call's tool (a JSON list of
/// `{kind, source, name}`).
pub fn identities_json(ids: &[ToolIdentity]) -> String {
    Value::Array(
        ids.iter()
            .map(|id| json!({"kind": id.kind().as_str(), "source": id.source(), "name": id.name()}))
            .collect(),
    )
    .to_string()
}

/// Reads [`identities_json`]'s text back.
pub fn identities_from_json(text: &str) -> Result<Vec<ToolIdentity>, RecordError> {
    let value: Value = serde_json::from_str(text).map_err(RecordError::IdentitiesJson)?;
    let Value::Array(items) = value else {
        return Err(RecordError::IdentitiesNotList);
    };
    items
        .iter()
        .map(|item| {
            let field = |field: &'static str| {
                item.get(field)
                    .and_then(Value::as_str)
                    .ok_or(RecordError::IdentityField { field })
            };
            let (kind, source, name) = (field("kind")?, field("source")?, field("name")?);
            match kind {
                "local" => Ok(ToolIdentity::toolset(source, name)),
                "mcp" => Ok(ToolIdentity::mcp(source, name)),
                "http" => Ok(ToolIdentity::http(name)),
                other => Err(RecordError::IdentityKind {
                    kind: other.to_owned(),
                }),
            }
        })
        .collect()
}

/// The stored text of every ask with its source (a JSON list of `{source, rule?, reason}`).
pub fn reasons_json(asks: &[Ask]) -> String {
    Value::Array(
        asks.iter()
            .map(|a| {
                let mut m = Map::new();
                if let AskSource::PolicyRule(i) = a.source {
                    m.insert("rule".into(), Value::from(i));
                }
                m.insert("source".into(), Value::from(a.source.kind()));
                m.insert("reason".into(), Value::from(a.reason.clone()));
                Value::Object(m)
            })
            .collect(),
    )
    .to_string()
}

/// Reads [`reasons_json`]'s text back.
pub fn reasons_from_json(text: &str) -> Result<Vec<Ask>, RecordError> {
    let value: Value = serde_json::from_str(text).map_err(RecordError::ReasonsJson)?;
    let Value::Array(items) = value else {
        return Err(RecordError::ReasonsNotList);
    };
    items
        .iter()
        .map(|item| {
            let reason = item
                .get("reason")
                .and_then(Value::as_str)
                .ok_or(RecordError::ReasonMissing)?
                .to_owned();
            // The kinds are `AskSource::kind`'s spellings, read back exactly.
            let kind = item.get("source").and_then(Value::as_str);
            let source = if kind == Some(AskSource::PolicyRule(0).kind()) {
                AskSource::PolicyRule(
                    item.get("rule")
                        .and_then(Value::as_u64)
                        .and_then(|i| usize::try_from(i).ok())
                        .ok_or(RecordError::RuleIndexMissing)?,
                )
            } else {
                [
                    AskSource::Agent,
                    AskSource::PolicyDefault,
                    AskSource::Posture,
                    AskSource::Hook,
                ]
                .into_iter()
                .find(|s| Some(s.kind()) == kind)
                .ok_or(RecordError::ReasonSource)?
            };
            Ok(Ask::new(source, reason))
        })
        .collect()
}

/// Reads a stored run mode back (its exact spelling).
pub fn run_mode_from(s: &str) -> Result<RunMode, RecordError> {
    RunMode::parse(s).ok_or_else(|| RecordError::RunMode { mode: s.to_owned() })
}

/// Reads a stored number of approvals needed (R51) back: 1 to
/// [`MAX_APPROVALS`](crate::MAX_APPROVALS); anything else makes the record unreadable
/// (never read as fewer).
///
/// ```
/// assert_eq!(toolgate_inbox::codec::approvals_needed_from(2).ok(), Some(2));
/// assert!(toolgate_inbox::codec::approvals_needed_from(0).is_err());
/// let e = toolgate_inbox::codec::approvals_needed_from(6).unwrap_err();
/// assert_eq!(e.to_string(), "the call needs 6 approvals, not a number from 1 to 5");
/// ```
pub fn approvals_needed_from(n: i64) -> Result<u8, RecordError> {
    match u8::try_from(n) {
        Ok(needed) if (1..=crate::model::MAX_APPROVALS).contains(&needed) => Ok(needed),
        _ => Err(RecordError::ApprovalsNeeded { needed: n }),
    }
}

/// The body stored for a policy: its document without `updatedAt`, every number as
/// written (an integer past 64 bits keeps its digits, R20).
pub fn policy_body(policy: &Policy) -> String {
    policy.body_text()
}

/// `updatedAt` for a policy put at `now`: RFC 3339 with microseconds, strictly after
/// `previous` even when this instance's clock is behind the one that wrote it (R23).
pub fn next_updated_at(previous: Option<&str>, now: SystemTime) -> String {
    let at = match previous.and_then(|p| humantime::parse_rfc3339(p).ok()) {
        Some(prev) if now <= prev => prev + Duration::from_micros(1),
        _ => now,
    };
    humantime::format_rfc3339_micros(at).to_string()
}

/// The stored text of a held call's execution target (seed 000): its JSON form (`{"host",
/// "workingDirectory", "sandbox"}`, the parts it has), or none.
///
/// ```
/// use toolgate_core::ExecutionTarget;
/// let t = ExecutionTarget { host: Some("build-7".into()), ..Default::default() };
/// let text = toolgate_inbox::codec::target_json(Some(&t)).unwrap();
/// assert_eq!(text, r#"{"host":"build-7"}"#);
/// assert_eq!(toolgate_inbox::codec::target_from_json(&text), Some(t));
/// assert_eq!(toolgate_inbox::codec::target_json(None), None);
/// ```
pub fn target_json(target: Option<&toolgate_core::ExecutionTarget>) -> Option<String> {
    target.map(|t| t.to_json().to_string())
}

/// A stored execution target read back; one that does not read, or has no part, is none
/// (it is display only: the call itself is decided on its input).
pub fn target_from_json(text: &str) -> Option<toolgate_core::ExecutionTarget> {
    let v: Value = parse_json(text).ok()?;
    let part = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let t = toolgate_core::ExecutionTarget {
        host: part("host"),
        working_directory: part("workingDirectory"),
        sandbox: part("sandbox"),
    };
    (!t.is_empty()).then_some(t)
}

/// The stored text of the labels a decision read (R49): `{"tool": [...], "session": [...]}`
/// (`session` absent when the decision read none).
///
/// ```
/// use toolgate_core::{LabelSet, LabelsRead};
/// use toolgate_inbox::codec::{labels_from_json, labels_json};
/// let read = LabelsRead::new(LabelSet::of(["egress"]), Some(LabelSet::of(["private"])));
/// assert_eq!(labels_json(&read), r#"{"session":["private"],"tool":["egress"]}"#);
/// assert_eq!(labels_from_json(&labels_json(&read)), Some(read));
/// assert_eq!(labels_from_json("{"), None);
/// ```
pub fn labels_json(read: &toolgate_core::LabelsRead) -> String {
    let mut m = Map::new();
    m.insert("tool".into(), Value::from(&read.tool));
    if let Some(session) = &read.session {
        m.insert("session".into(), Value::from(session));
    }
    Value::Object(m).to_string()
}

/// [`labels_json`]'s text read back; text that does not read is none (the labels are shown
/// to a person only: the call itself is decided again when it is sent, R38).
pub fn labels_from_json(text: &str) -> Option<toolgate_core::LabelsRead> {
    let v: Value = parse_json(text).ok()?;
    let list = |v: &Value| -> Option<toolgate_core::LabelSet> {
        v.as_array()?
            .iter()
            .map(|l| l.as_str().map(str::to_owned))
            .collect::<Option<Vec<String>>>()
            .map(toolgate_core::LabelSet::of)
    };
    Some(toolgate_core::LabelsRead::new(
        list(v.get("tool")?)?,
        match v.get("session") {
            Some(s) => Some(list(s)?),
            None => None,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_and_identities_round_trip() {
        let asks: Vec<Ask> = [
            AskSource::Agent,
            AskSource::PolicyRule(3),
            AskSource::PolicyDefault,
            AskSource::Posture,
            AskSource::Hook,
        ]
        .into_iter()
        .map(|source| {
            let reason = source.describe();
            Ask::new(source, reason)
        })
        .collect();
        assert_eq!(reasons_from_json(&reasons_json(&asks)).unwrap(), asks);
        let ids = vec![
            ToolIdentity::mcp("GitHub", "list.issues"),
            ToolIdentity::toolset("coding", "write"),
            ToolIdentity::http("refund"),
        ];
        assert_eq!(identities_from_json(&identities_json(&ids)).unwrap(), ids);
        assert!(identities_from_json("{}").is_err());
        assert!(reasons_from_json("[{\"source\": \"nobody\", \"reason\": \"x\"}]").is_err());
        assert!(
            reasons_from_json("[{\"source\": \"policy_rule\", \"reason\": \"x\"}]")
                .unwrap_err()
                .to_string()
                .contains("index is missing")
        );
        // The stored form is fixed: rows written before keep reading back.
        assert_eq!(
            serde_json::from_str::<Value>(&reasons_json(&asks[1..2])).unwrap(),
            json!([{"reason": "tenant policy rule 3", "rule": 3, "source": "policy_rule"}])
        );
    }

    #[test]
    fn run_modes_read_back_exactly() {
        for mode in [
            RunMode::UseAgentPolicy,
            RunMode::AutoApproveRequired,
            RunMode::AutoRejectRequired,
        ] {
            assert_eq!(run_mode_from(mode.as_str()).ok(), Some(mode));
        }
        assert!(
            run_mode_from("nonsense")
                .unwrap_err()
                .to_string()
                .contains("`nonsense`")
        );
    }

    #[test]
    fn stored_json_deeper_than_the_ceiling_is_refused_without_recursing() {
        let deep =
            "[".repeat(MAX_INPUT_DEPTH_CEILING + 1) + &"]".repeat(MAX_INPUT_DEPTH_CEILING + 1);
        assert!(
            parse_json(&deep)
                .unwrap_err()
                .to_string()
                .contains("nests deeper")
        );
        let ok = "[".repeat(MAX_INPUT_DEPTH_CEILING) + &"]".repeat(MAX_INPUT_DEPTH_CEILING);
        assert!(parse_json(&ok).is_ok());
        assert!(
            parse_json("[1] 2")
                .unwrap_err()
                .to_string()
                .contains("malformed")
        );
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
