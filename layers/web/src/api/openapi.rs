//! The OpenAPI 3.1 document of the HTTP API (`GET /v1/openapi.json`). A test checks that it
//! names exactly the routes the router serves.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::reply;

fn error(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

fn ok(description: &str, schema: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}})
}

fn id_param(description: &str) -> Value {
    json!({"name": "id", "in": "path", "required": true, "description": description, "schema": {"type": "string"}})
}

/// The document.
pub(crate) fn openapi() -> Value {
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "toolgate approval API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The stored tenant policy, and held calls listed and answered, on `toolgate serve`. Refusals are `{code, message}` and change nothing."
        },
        "components": {
            "securitySchemes": {
                "managementKey": {"type": "http", "scheme": "bearer", "description": "A management key (its SHA-256 in `approvers.api_keys`, with scopes `policy:read`, `policy:write`, `approvals`), or with `approvers.auth: jwt` an approver's identity-provider token."}
            },
            "schemas": merged([policy_schemas(), call_schemas()])
        },
        "paths": merged([policy_paths(), call_paths()])
    })
}

/// The members of `parts` (objects), in order, as one object.
fn merged<const N: usize>(parts: [Value; N]) -> Value {
    let mut all = Map::new();
    for part in parts {
        if let Value::Object(members) = part {
            all.extend(members);
        }
    }
    Value::Object(all)
}

/// The schemas of errors and of the stored policy.
fn policy_schemas() -> Value {
    json!({
    "Error": {
        "type": "object", "required": ["code", "message"],
        "properties": {
            "code": {"type": "string", "examples": ["request_rejected", "invalid_policy", "precondition_failed", "not_as_shown", "unauthorized", "forbidden", "not_found"]},
            "message": {"type": "string"},
            "errors": {"type": "array", "items": {"type": "object", "required": ["path", "message"], "properties": {"path": {"type": "string"}, "message": {"type": "string"}}}}
        }
    },
    "Policy": {
        "type": "object", "required": ["rules"],
        "properties": {
            "default": {"enum": ["allow", "ask", "deny"]},
            "rules": {"type": "array", "items": {"type": "object"}},
            "quotas": {"type": "array", "items": {"type": "object"}},
            "updatedAt": {"type": ["string", "null"]}
        }
    }
    })
}

/// The schemas of held calls, their interactions and answers.
fn call_schemas() -> Value {
    json!({
    "Interaction": {
        "type": "object",
        "required": ["id", "prompt", "reason", "tool", "input", "inputHash", "definitionHash"],
        "properties": {
            "id": {"type": "string"}, "prompt": {"type": "string"}, "reason": {"type": "string"},
            "reasons": {"type": "array", "items": {"type": "object"}},
            "server": {"type": ["string", "null"]}, "tool": {"type": "string"}, "toolName": {"type": "string"},
            "agent": {"type": "string"}, "input": {"type": "object"},
            "inputHash": {"type": "string"}, "definitionHash": {"type": "string"},
            "target": {"type": "object"},
            "session": {"type": ["string", "null"]}, "turn": {"type": ["string", "null"]},
            "createdAt": {"type": "string"}, "expiresAt": {"type": "string"},
            "approvals": {"type": "object", "description": "R51: how many distinct people must approve the call (`needed`), the approvals it has (`given`: `approver`, `principal`, `at`), how many are `missing`, and a `summary` such as `1 of 2 approvals: alice` (`null` for a call that needs one)."}
        }
    },
    "Pending": {
        "type": "object", "required": ["session", "interactions"],
        "properties": {"session": {"type": "string"}, "interactions": {"type": "array", "items": {"$ref": "#/components/schemas/Interaction"}}}
    },
    "AnswerRequest": {
        "type": "object", "required": ["approved"], "additionalProperties": false,
        "properties": {
            "approved": {"type": "boolean"},
            "reason": {"type": "string", "description": "Shown to the agent with a denial."},
            "idempotencyKey": {"type": "string", "description": "The same key makes a retry the same answer."},
            "inputHash": {"type": "string", "description": "Required to approve: the `inputHash` the caller was shown (R35)."},
            "definitionHash": {"type": "string", "description": "Required to approve: the `definitionHash` the caller was shown (R35)."},
            "input": {"type": "object", "description": "Approve with this input instead (`may_edit`); decided again in full before it is sent (R38)."}
        }
    },
    "AnswerReceipt": {
        "type": "object", "required": ["id", "approved", "approver", "answeredAt", "replayed"],
        "properties": {"id": {"type": "string"}, "approved": {"type": "boolean"}, "approver": {"type": "string"}, "reason": {"type": ["string", "null"]}, "answeredAt": {"type": "string"}, "replayed": {"type": "boolean"},
            "approvals": {"type": "integer", "description": "R51: the distinct people who approved the call so far, this answer included."},
            "approvalsNeeded": {"type": "integer"}, "waitingFor": {"type": "integer", "description": "How many more people must approve before it is approved (0 once it is)."},
            "alreadyApproved": {"type": "boolean", "description": "This person had approved it already: nothing changed (one person's approvals count once)."},
            "message": {"type": ["string", "null"], "description": "For a call that needs several approvals: `recorded: 1 of 2 approvals; it waits for one more person`."}}
    },
    "Call": {
        "allOf": [{"$ref": "#/components/schemas/Interaction"}, {"type": "object", "required": ["state"], "properties": {
            "state": {"enum": ["pending", "approved", "denied", "expired", "cancelled", "claimed", "done", "failed", "unknown"]},
            "approver": {"type": ["string", "null"]}, "answerReason": {"type": ["string", "null"]},
            "answeredAt": {"type": ["string", "null"]}, "result": {}, "finishedAt": {"type": ["string", "null"]},
            "edit": {"type": ["object", "null"]}, "open": {"type": "boolean"}
        }}]
    }
    })
}

/// The paths of this document and of the tenant's tool policy.
fn policy_paths() -> Value {
    let auth = json!([{"managementKey": []}]);
    json!({
    "/v1/openapi.json": {
        "get": {"operationId": "openapi", "summary": "This document", "security": [], "responses": {"200": {"description": "The OpenAPI document", "content": {"application/json": {}}}}}
    },
    "/v1/tenant/tool-policy": {
        "get": {
            "operationId": "getToolPolicy", "summary": "Get the tenant's tool policy (`policy:read`)", "security": auth,
            "responses": {"200": ok("The stored policy; `ETag` is its `updatedAt`", "Policy"), "401": error("No or an unknown credential"), "403": error("Without the `policy:read` scope"), "409": error("`request_rejected`: the stored policy cannot be read"), "503": error("The store failed")}
        },
        "put": {
            "operationId": "putToolPolicy", "summary": "Replace the tenant's tool policy whole (`policy:write`)", "security": auth,
            "parameters": [
                {"name": "If-Match", "in": "header", "required": false, "description": "The `updatedAt` the put is based on.", "schema": {"type": "string"}},
                {"name": "If-None-Match", "in": "header", "required": false, "description": "`*`: only if no policy is stored.", "schema": {"type": "string"}}
            ],
            "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Policy"}}}},
            "responses": {"200": ok("The stored policy", "Policy"), "400": error("`invalid_policy`: every error with its path"), "401": error("No or an unknown credential"), "403": error("Without the `policy:write` scope"), "412": error("`precondition_failed`: the stored policy is not the one `If-Match` names"), "503": error("The store failed")}
        }
    }
    })
}

/// The paths of held calls: a session's pending interactions, answers (also from Slack)
/// and one call.
fn call_paths() -> Value {
    let auth = json!([{"managementKey": []}]);
    json!({
    "/v1/sessions/{id}/pending": {
        "get": {
            "operationId": "sessionPending", "summary": "A session's open interactions the caller may answer (`approvals`)", "security": auth,
            "parameters": [id_param("The session")],
            "responses": {"200": ok("Oldest first", "Pending"), "401": error("No or an unknown credential"), "403": error("Without the `approvals` scope"), "503": error("The store failed")}
        }
    },
    "/v1/interactions/{id}/answer": {
        "post": {
            "operationId": "answerInteraction", "summary": "Approve or deny one held call (`approvals`)", "security": auth,
            "parameters": [id_param("The interaction")],
            "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AnswerRequest"}}}},
            "responses": {"200": ok("Recorded (or replayed for the same key)", "AnswerReceipt"), "400": error("A malformed answer, or an approval without its hashes"), "401": error("No or an unknown credential"), "403": error("Without the scope, or no rights over the tool"), "404": error("No such held call"), "409": error("Already answered, expired, or not the call shown (`not_as_shown`)"), "503": error("The store failed")}
        }
    },
    "/v1/callbacks/slack": {
        "post": {
            "operationId": "slackCallback", "summary": "Slack's interactive callback: Approve or Deny pressed on a held call's message", "security": [],
            "description": "Signed by Slack (`X-Slack-Signature`, v0 HMAC-SHA256 over `v0:<timestamp>:<body>` with `approvers.slack`'s signing secret) with `X-Slack-Request-Timestamp` within five minutes; a replayed request is refused; the Slack user answers as the approver `approvers.slack.users` maps them to.",
            "parameters": [
                {"name": "X-Slack-Signature", "in": "header", "required": true, "schema": {"type": "string"}},
                {"name": "X-Slack-Request-Timestamp", "in": "header", "required": true, "schema": {"type": "string"}}
            ],
            "requestBody": {"required": true, "content": {"application/x-www-form-urlencoded": {"schema": {"type": "object", "required": ["payload"], "properties": {"payload": {"type": "string", "description": "Slack's `block_actions` JSON"}}}}}},
            "responses": {"200": {"description": "Answered; the message Slack shows", "content": {"application/json": {}}}, "400": error("A body that is not one button press"), "401": error("A missing, stale or forged signature"), "403": {"description": "A Slack user mapped to no approver, or without rights over the tool"}, "404": error("Slack is not configured, or no such held call"), "409": error("A replayed request, a call already answered, or not the call shown")}
        }
    },
    "/v1/calls/{id}": {
        "get": {
            "operationId": "getCall", "summary": "One held call: its state, who answered, the recorded response (`approvals`)", "security": auth,
            "parameters": [id_param("The interaction")],
            "responses": {"200": ok("The call", "Call"), "401": error("No or an unknown credential"), "403": error("Without the `approvals` scope"), "404": error("No such held call the caller may see"), "503": error("The store failed")}
        }
    }
    })
}

/// `GET /v1/openapi.json`.
pub(crate) async fn document() -> Response {
    reply(StatusCode::OK, &openapi())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    #[test]
    fn issue24_the_openapi_document_names_exactly_the_routes_served() {
        let doc = super::openapi();
        let mut documented = BTreeSet::new();
        for (path, ops) in doc["paths"].as_object().unwrap() {
            for method in ops.as_object().unwrap().keys() {
                documented.insert((method.clone(), path.clone()));
            }
        }
        let served: BTreeSet<(String, String)> = crate::api::routes::routes()
            .into_iter()
            .map(|(m, p, _)| (m.to_owned(), p.to_owned()))
            .collect();
        assert_eq!(documented, served);
        // Every operation documents its refusals and names its operation.
        for (path, ops) in doc["paths"].as_object().unwrap() {
            for (method, op) in ops.as_object().unwrap() {
                assert!(op["operationId"].is_string(), "{method} {path}");
                assert!(op["responses"]["200"].is_object(), "{method} {path}");
                if path != "/v1/openapi.json" && path != "/v1/callbacks/slack" {
                    assert!(op["responses"]["401"].is_object(), "{method} {path}");
                }
            }
        }
        // Every `$ref` resolves.
        fn refs(v: &serde_json::Value, out: &mut Vec<String>) {
            match v {
                serde_json::Value::Object(o) => {
                    for (k, v) in o {
                        if k == "$ref" {
                            out.push(v.as_str().unwrap().to_owned());
                        } else {
                            refs(v, out);
                        }
                    }
                }
                serde_json::Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
                _ => {}
            }
        }
        let mut all = Vec::new();
        refs(&doc, &mut all);
        for r in all {
            let name = r.strip_prefix("#/components/schemas/").unwrap();
            assert!(doc["components"]["schemas"][name].is_object(), "{r}");
        }
    }
}
