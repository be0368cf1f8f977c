//! Every attribute name (and fixed value) this crate puts on a span.
//!
//! The GenAI names follow the OpenTelemetry semantic conventions for the `execute_tool` span.
//! They are defined here rather than taken from `opentelemetry-semantic-conventions`, whose
//! GenAI constants are deprecated upstream while the conventions move to their own
//! repository; the strings are what an exporter sees, so they are what matters.
//!
//! # GenAI
//!
//! | name | meaning |
//! |---|---|
//! | [`GEN_AI_OPERATION_NAME`] | always [`values::EXECUTE_TOOL`], set when the span starts |
//! | [`GEN_AI_TOOL_NAME`] | the qualified (wire) name the tool was called by |
//! | [`GEN_AI_TOOL_CALL_ID`] | the call's id |
//! | [`GEN_AI_TOOL_TYPE`] | [`values::FUNCTION`] for a first-party toolset tool, [`values::EXTENSION`] for an MCP or HTTP tool; absent when the tool is unknown |
//! | [`GEN_AI_TOOL_DESCRIPTION`] | the tool's description, when the catalog has one (redacted and truncated) |
//! | [`GEN_AI_TOOL_CALL_ARGUMENTS`] | the input, redacted, as JSON text (only with content capture on) |
//! | [`GEN_AI_TOOL_CALL_RESULT`] | the tool's output, redacted, as JSON text (only with content capture on) |
//! | [`ERROR_TYPE`] | on a refusal its code (`not_allowed`, …); [`values::TOOL_ERROR`] for a failed tool; the inner error's type name for a transport error; [`values::CANCELLED`] when the call was dropped |
//! | [`GEN_AI_GUARDRAIL_NAME`] | always [`values::GUARDRAIL`] |
//! | [`GEN_AI_GUARDRAIL_DECISION`] | [`values::ALLOW`], [`values::ASK`] or [`values::DENY`]: see below |
//!
//! The guardrail conventions are still being drafted upstream (an `apply_guardrail` /
//! `run_guardrail` span with `gen_ai.security.*` verdict and action attributes); until they
//! settle, toolgate records its decision on the tool span itself with this small set.
//! `gen_ai.guardrail.decision` mirrors [`TOOLGATE_DECISION_OUTCOME`]: `run` → `allow`,
//! `ask` → `ask`, `refused` → `deny`.
//!
//! # toolgate
//!
//! | name | meaning |
//! |---|---|
//! | [`TOOLGATE_DECISION_OUTCOME`] | `run` (sent without asking anyone, or auto-approved), `ask` (a person was asked and approved, or the call is held), `refused` (by any check, a tenant rule, a person, a timeout or a hook); absent when no approval gate recorded a decision and nothing refused the call |
//! | [`TOOLGATE_CALL_OUTCOME`] | `completed`, `failed` (the tool reported a failure), `refused`, `held`, `error` (a transport error) or `cancelled` (the call was dropped) |
//! | [`TOOLGATE_REFUSAL_CODE`] | the refusal code, exactly as SPEC §7 spells it; present exactly when the outcome is `refused` |
//! | [`TOOLGATE_REFUSAL_RETRY_AFTER`] | for a `rate_limited` refusal (R44), the whole seconds until the call could run again |
//! | [`TOOLGATE_DECISION_CHECK`] | the check that decided (`Check::as_str`: `allowed tools`, `tenant policy`, …) |
//! | [`TOOLGATE_DECISION_RULE`] | the index of the tenant rule that denied the call, when a rule did |
//! | [`TOOLGATE_DECISION_MATCHED_RULES`] | the indexes of every tenant rule that matched |
//! | [`TOOLGATE_DECISION_ASK_SOURCES`] | who asked: `agent`, `policy_rule:N`, `policy_default`, `posture`, `hook` |
//! | [`TOOLGATE_DECISION_REASONS`] | every reason of the refusal or of the asks, each redacted and truncated |
//! | [`TOOLGATE_APPROVAL_SOURCE`] | how the approval gate's wait ended (`WaitEnd::as_str`): `not_asked`, `auto_approved`, `approved`, `denied`, `expired`, `cancelled`, `unroutable`, `held`, `refused` |
//! | [`TOOLGATE_APPROVAL_APPROVER`] | who approved or denied, when a person did |
//! | [`TOOLGATE_APPROVAL_PRINCIPAL_SUBJECT`], [`TOOLGATE_APPROVAL_PRINCIPAL_ISSUER`] | `sub` and `iss` of the answering person's verified identity-provider token, beside the approver, only when their answer came with one (R47: a JWT approver of the page, a session authenticated by JWT answering by elicitation); absent for a static-token, header or `--as` approver |
//! | [`TOOLGATE_DELEGATION_SUBJECT`], [`TOOLGATE_DELEGATION_ACTORS`] | the subject a call was sent upstream for and its `act` chain (current actor first, comma-separated), when the tool exchanged the caller's token (RFC 8693) |
//! | [`TOOLGATE_AGENT_PROFILE`] | the calling agent's profile |
//! | [`TOOLGATE_AGENT_SUBAGENT`] | the subagent's id, for a subagent |
//! | [`TOOLGATE_PRINCIPAL_SUBJECT`], [`TOOLGATE_PRINCIPAL_ISSUER`] | `sub` and `iss` of the caller's verified identity-provider token |
//! | [`TOOLGATE_TOOL_NETWORK_DECLARED`], [`TOOLGATE_TOOL_NETWORK_EFFECTIVE`] | the declared network scope of each record and the effective one (an operator's override keeps the declared value, seed 000) |
//! | [`TOOLGATE_RUN_MODE`] | the run's approval mode (`use_agent_policy`, …) |
//! | [`TOOLGATE_RUN_BACKGROUND`] | whether the run is a background task |
//!
//! Never on a span: the interaction id of an approval question (it is unguessable because it
//! is what an answer is addressed to) and the canonical input hash (a hash of a small input
//! is a dictionary attack away from the input itself).

/// `gen_ai.operation.name`: always [`values::EXECUTE_TOOL`].
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
/// `gen_ai.tool.name`: the qualified (wire) name the tool was called by.
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
/// `gen_ai.tool.call.id`: the call's id.
pub const GEN_AI_TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// `gen_ai.tool.type`: [`values::FUNCTION`] or [`values::EXTENSION`].
pub const GEN_AI_TOOL_TYPE: &str = "gen_ai.tool.type";
/// `gen_ai.tool.description`: the tool's description, when known.
pub const GEN_AI_TOOL_DESCRIPTION: &str = "gen_ai.tool.description";
/// `gen_ai.tool.call.arguments`: the redacted input (content capture only).
pub const GEN_AI_TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
/// `gen_ai.tool.call.result`: the redacted output (content capture only).
pub const GEN_AI_TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";
/// `error.type`: why the call did not complete.
pub const ERROR_TYPE: &str = "error.type";
/// `gen_ai.guardrail.name`: always [`values::GUARDRAIL`].
pub const GEN_AI_GUARDRAIL_NAME: &str = "gen_ai.guardrail.name";
/// `gen_ai.guardrail.decision`: [`values::ALLOW`], [`values::ASK`] or [`values::DENY`].
pub const GEN_AI_GUARDRAIL_DECISION: &str = "gen_ai.guardrail.decision";

/// `toolgate.decision.outcome`: `run`, `ask` or `refused`.
pub const TOOLGATE_DECISION_OUTCOME: &str = "toolgate.decision.outcome";
/// `toolgate.call.outcome`: `completed`, `failed`, `refused`, `held`, `error` or `cancelled`.
pub const TOOLGATE_CALL_OUTCOME: &str = "toolgate.call.outcome";
/// `toolgate.refusal.code`: the refusal code of a refused call.
pub const TOOLGATE_REFUSAL_CODE: &str = "toolgate.refusal.code";
/// `toolgate.refusal.retry_after_secs`: for a `rate_limited` refusal (R44), the whole seconds
/// until every covering quota has room.
pub const TOOLGATE_REFUSAL_RETRY_AFTER: &str = "toolgate.refusal.retry_after_secs";
/// `toolgate.shadow.outcome`: with a shadow policy (R46), the shadow's outcome: `run`,
/// `ask` or `refused` (never enforced).
pub const TOOLGATE_SHADOW_OUTCOME: &str = "toolgate.shadow.outcome";
/// `toolgate.shadow.refusal.code`: the refusal code the shadow policy would give.
pub const TOOLGATE_SHADOW_REFUSAL_CODE: &str = "toolgate.shadow.refusal.code";
/// `toolgate.shadow.rule`: the index of the shadow policy's rule that decided its outcome.
pub const TOOLGATE_SHADOW_RULE: &str = "toolgate.shadow.rule";
/// `toolgate.shadow.disagrees`: whether the shadow decided otherwise than the enforced
/// policy (another outcome or refusal code).
pub const TOOLGATE_SHADOW_DISAGREES: &str = "toolgate.shadow.disagrees";
/// `toolgate.shadow.kind`: a disagreement's kind, `enforced->shadow` (`run->refused`): an
/// attribute of the disagreements counter
/// ([`SHADOW_DISAGREEMENTS_METRIC`](crate::SHADOW_DISAGREEMENTS_METRIC)).
pub const TOOLGATE_SHADOW_KIND: &str = "toolgate.shadow.kind";
/// `toolgate.decision.check`: the check that decided.
pub const TOOLGATE_DECISION_CHECK: &str = "toolgate.decision.check";
/// `toolgate.decision.rule`: the index of the tenant rule that denied the call.
pub const TOOLGATE_DECISION_RULE: &str = "toolgate.decision.rule";
/// `toolgate.decision.matched_rules`: the indexes of every tenant rule that matched.
pub const TOOLGATE_DECISION_MATCHED_RULES: &str = "toolgate.decision.matched_rules";
/// `toolgate.labels.tool`: the labels of the called tool the decision read (R49), when a
/// rule or a quota selects by labels.
pub const TOOLGATE_LABELS_TOOL: &str = "toolgate.labels.tool";
/// `toolgate.labels.session`: the session's labels before the call (R49), when a rule or a
/// quota selects by them.
pub const TOOLGATE_LABELS_SESSION: &str = "toolgate.labels.session";
/// `toolgate.decision.ask_sources`: who asked.
pub const TOOLGATE_DECISION_ASK_SOURCES: &str = "toolgate.decision.ask_sources";
/// `toolgate.decision.reasons`: every reason, redacted.
pub const TOOLGATE_DECISION_REASONS: &str = "toolgate.decision.reasons";
/// `toolgate.approval.source`: how the wait for a person ended (`WaitEnd::as_str`).
pub const TOOLGATE_APPROVAL_SOURCE: &str = "toolgate.approval.source";
/// `toolgate.approval.approver`: who approved or denied.
pub const TOOLGATE_APPROVAL_APPROVER: &str = "toolgate.approval.approver";
/// `toolgate.approval.principal.subject`: the `sub` of the answering person's verified
/// identity-provider token (R47), when their answer came with one.
pub const TOOLGATE_APPROVAL_PRINCIPAL_SUBJECT: &str = "toolgate.approval.principal.subject";
/// `toolgate.approval.principal.issuer`: the `iss` of the answering person's verified
/// identity-provider token, beside [`TOOLGATE_APPROVAL_PRINCIPAL_SUBJECT`].
pub const TOOLGATE_APPROVAL_PRINCIPAL_ISSUER: &str = "toolgate.approval.principal.issuer";
/// `toolgate.delegation.subject`: the subject a call was sent upstream for, when the tool
/// exchanged the caller's token (RFC 8693).
pub const TOOLGATE_DELEGATION_SUBJECT: &str = "toolgate.delegation.subject";
/// `toolgate.delegation.actors`: the exchanged token's `act` chain, the current actor
/// first, comma-separated, beside [`TOOLGATE_DELEGATION_SUBJECT`].
pub const TOOLGATE_DELEGATION_ACTORS: &str = "toolgate.delegation.actors";
/// `toolgate.agent.profile`: the calling agent's profile.
pub const TOOLGATE_AGENT_PROFILE: &str = "toolgate.agent.profile";
/// `toolgate.agent.subagent`: the subagent's id.
pub const TOOLGATE_AGENT_SUBAGENT: &str = "toolgate.agent.subagent";
/// `toolgate.principal.subject`: the `sub` of the caller's verified identity-provider token
/// (serve.md, "Agents and approvers from the identity provider").
pub const TOOLGATE_PRINCIPAL_SUBJECT: &str = "toolgate.principal.subject";
/// `toolgate.principal.issuer`: the `iss` of the caller's verified identity-provider token.
pub const TOOLGATE_PRINCIPAL_ISSUER: &str = "toolgate.principal.issuer";
/// `toolgate.tool.network.declared`: the network scope each record behind the name declared
/// (seed 000: an operator's override keeps the declared value for audit), comma-separated.
pub const TOOLGATE_TOOL_NETWORK_DECLARED: &str = "toolgate.tool.network.declared";
/// `toolgate.tool.network.effective`: the effective network scope the air gap used (R8).
pub const TOOLGATE_TOOL_NETWORK_EFFECTIVE: &str = "toolgate.tool.network.effective";
/// `toolgate.run.mode`: the run's approval mode.
pub const TOOLGATE_RUN_MODE: &str = "toolgate.run.mode";
/// `toolgate.run.background`: whether the run is a background task.
pub const TOOLGATE_RUN_BACKGROUND: &str = "toolgate.run.background";

/// Fixed attribute values.
pub mod values {
    /// The value of `gen_ai.operation.name`, and the first word of the span name.
    pub const EXECUTE_TOOL: &str = "execute_tool";
    /// `gen_ai.tool.type` of a first-party toolset tool: code run in the host.
    pub const FUNCTION: &str = "function";
    /// `gen_ai.tool.type` of an MCP or HTTP tool: run by something outside the host.
    pub const EXTENSION: &str = "extension";
    /// `error.type` of a tool that ran and reported a failure (`ToolResponse::Failed`).
    pub const TOOL_ERROR: &str = "tool_error";
    /// `error.type` of a call whose future was dropped before it completed.
    pub const CANCELLED: &str = "cancelled";
    /// `gen_ai.guardrail.name`.
    pub const GUARDRAIL: &str = "toolgate";
    /// `gen_ai.guardrail.decision` of a call sent without asking anyone.
    pub const ALLOW: &str = "allow";
    /// `gen_ai.guardrail.decision` of a call a person was asked about (approved or held).
    pub const ASK: &str = "ask";
    /// `gen_ai.guardrail.decision` of a refused call.
    pub const DENY: &str = "deny";
}
