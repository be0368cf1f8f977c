//! A call's response as the downstream client receives it: refusals and held calls as tool
//! results with `isError: true` and `structuredContent.toolgate`.

use super::*;

pub(super) fn refused(reason: String) -> ToolResponse {
    ToolResponse::Refused(toolgate_core::Refusal::new(
        toolgate_core::RefusalCode::Rejected,
        toolgate_core::Check::Routing,
        reason,
    ))
}

/// A tool result as the downstream client receives it. Refusals and held calls are
/// results with `isError: true`, their text the model-facing explanation and their
/// `structuredContent.toolgate` the outcome, code and reasons.
pub fn call_result(response: ToolResponse) -> CallToolResult {
    call_result_with_page(response, None)
}

/// The address of a held call's card on the approval page (`toolgate serve`):
/// `approvers.public_url`, else `http://` + `approvers.listen`, then `/calls/<id>`; `None`
/// when the configuration has no `approvers` section (no page).
pub fn approval_page_link(governance: &Governance, interaction_id: &str) -> Option<String> {
    let a = governance.approver_settings()?;
    let base = match &a.public_url {
        Some(u) => u.trim_end_matches('/').to_owned(),
        None => format!("http://{}", a.listen),
    };
    Some(format!("{base}/calls/{interaction_id}"))
}

/// [`call_result`], with a held call's text and `structuredContent.toolgate.approval_url`
/// naming `page`, the address of its card on the approval page, when there is one.
pub fn call_result_with_page(response: ToolResponse, page: Option<&str>) -> CallToolResult {
    // Read from the value in place: no copy of the content to decode it.
    fn blocks(content: Value) -> Vec<ContentBlock> {
        match <Vec<ContentBlock> as serde::Deserialize>::deserialize(&content) {
            Ok(b) => b,
            Err(_) => vec![ContentBlock::text(match content {
                Value::String(s) => s,
                other => other.to_string(),
            })],
        }
    }
    match response {
        ToolResponse::Completed(o) => {
            let mut r = CallToolResult::success(blocks(o.content));
            r.structured_content = o.structured;
            r
        }
        ToolResponse::Failed(o) => {
            let mut r = CallToolResult::error(blocks(o.content));
            r.structured_content = o.structured;
            r
        }
        ToolResponse::Refused(ref refusal) => {
            let mut r = CallToolResult::error(vec![ContentBlock::text(response.model_text())]);
            let mut meta = Map::new();
            meta.insert("outcome".into(), json!("refused"));
            meta.insert("code".into(), json!(refusal.code.to_string()));
            meta.insert("reasons".into(), json!(refusal.reasons));
            // R44: when a full quota refused the call, when it could run again.
            if let Some(secs) = refusal.retry_after_secs {
                meta.insert("retry_after_secs".into(), json!(secs));
            }
            r.structured_content = Some(json!({ "toolgate": meta }));
            r
        }
        ToolResponse::Held(ref held) => {
            // The text the model reads never names a way to answer (no command, no page): a
            // person answers where people answer. The page's address is in
            // `structuredContent.toolgate.approval_url`, for the client to show.
            let text = format!(
                "{} Do not retry now: once a person has approved it, call this tool again with exactly the same input and the approved call runs once.",
                response.model_text(),
            );
            let mut r = CallToolResult::error(vec![ContentBlock::text(text)]);
            let mut meta = Map::new();
            meta.insert("outcome".into(), json!("held"));
            meta.insert("interaction_id".into(), json!(held.interaction_id));
            meta.insert("reasons".into(), json!(held.reasons));
            if let Some(url) = page {
                meta.insert("approval_url".into(), Value::String(url.to_owned()));
            }
            r.structured_content = Some(json!({ "toolgate": meta }));
            r
        }
    }
}
