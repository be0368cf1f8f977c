//! The policy tab: the stored tenant policy's rules, strictest first; edit one in a panel,
//! add one, delete one, or replace the whole document. Every save goes through
//! [`toolgate_inbox::put_policy_text_if_unchanged`] (the validation `toolgate policy put`
//! uses, R22) and is refused as a conflict when the page's `updatedAt` is not the stored one.
//! The store compares and saves in one transaction, so a save from another page process or
//! from `toolgate policy put` between this page's read and its save is a conflict too, never
//! a silent overwrite.
//!
//! One thing because it is one page: loading, rendering and saving the policy tab share the
//! `Loaded` snapshot and its `updatedAt`; the rule checks themselves are the engine's.

use axum::Form;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use toolgate_engine::policy::Policy;
use toolgate_engine::{ConfigErrors, PolicyState};
use toolgate_inbox::{PutPolicyError, put_policy_text_if_unchanged};

use crate::auth::{check_csrf, unauthorized};
use crate::html::{self, Shown, Tab};
use crate::state::App;
use crate::state::Who;

mod preview;
mod save;

use preview::{Preview, preview_of, preview_response};
pub(crate) use save::{delete_rule, save_rule, save_whole};

/// The fields of a rule the panel edits, in the order shown.
const FIELDS: &[&str] = &[
    "effect", "tool", "server", "kind", "agent", "when", "reason",
];

/// The stored policy as the tab shows it.
struct Loaded {
    /// The document without `updatedAt` (the empty policy when none is stored).
    doc: Value,
    /// The stored `updatedAt`; empty when no policy was ever stored.
    updated_at: String,
    /// Why the stored policy cannot be read, if it cannot (R22).
    unreadable: Option<String>,
    /// The stored document as stored (`None`: none stored), for the preview's policy in
    /// force.
    body: Option<String>,
}

async fn load(app: &App) -> Result<Loaded, Response> {
    let stored = app.0.store.get_policy().await.map_err(|e| {
        html::refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "The stored policy cannot be read",
            &e.to_string(),
        )
    })?;
    let Some(stored) = stored else {
        return Ok(Loaded {
            doc: json!({"default": "allow", "rules": []}),
            updated_at: String::new(),
            unreadable: None,
            body: None,
        });
    };
    // A stored policy is untrusted input: read the way every inbox and the gate read it
    // (R22), its JSON depth measured before anything recursive runs.
    let unreadable = match PolicyState::from_json_str(&stored.body, &app.0.settings.limits, None) {
        PolicyState::Unreadable(why) => Some(why),
        _ => None,
    };
    let doc = toolgate_inbox::codec::parse_json(&stored.body)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({"default": "allow", "rules": []}));
    Ok(Loaded {
        doc,
        updated_at: stored.updated_at,
        unreadable,
        body: Some(stored.body),
    })
}

fn rules(doc: &Value) -> &[Value] {
    doc.get("rules")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn strictness(rule: &Value) -> u8 {
    match rule.get("effect").and_then(Value::as_str) {
        Some("deny") => 0,
        Some("ask") => 1,
        Some("allow") => 2,
        _ => 3,
    }
}

fn text_of(rule: &Value, key: &str) -> String {
    match rule.get(key) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) if key == "when" => {
            serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string())
        }
        Some(other) => other.to_string(),
    }
}

/// The edit panel's contents: which rule, its field values, and the errors to show.
#[derive(Debug, Default)]
struct Panel {
    /// `new`, or the rule's index in the stored `rules`.
    index: String,
    values: Map<String, Value>,
    /// Errors by field (`tool`, `when`, …).
    field_errors: Vec<(String, String)>,
    /// Errors about the policy as a whole, with their paths.
    errors: Vec<String>,
}

/// Which of `errs` are about the rule at `at` (`rules[3]`), by field; the rest in full.
fn split_errors(errs: &ConfigErrors, at: Option<usize>) -> (Vec<(String, String)>, Vec<String>) {
    let mut by_field = Vec::new();
    let mut rest = Vec::new();
    for e in &errs.errors {
        let field = at.and_then(|i| {
            let prefix = format!("rules[{i}]");
            let tail = e.path.strip_prefix(&prefix)?;
            let tail = tail.strip_prefix('.').unwrap_or(tail);
            let name: String = tail
                .chars()
                .take_while(|c| *c != '.' && *c != '[')
                .collect();
            FIELDS.contains(&name.as_str()).then_some(name)
        });
        match field {
            Some(f) => by_field.push((f, e.to_string())),
            None => rest.push(e.to_string()),
        }
    }
    (by_field, rest)
}

fn render(
    app: &App,
    who: &Who,
    loaded: &Loaded,
    panel: Option<&Panel>,
    banner: Option<(&str, &str)>,
    preview: Option<&Preview>,
) -> Markup {
    let previews = app.0.settings.preview.is_some();
    let default = loaded
        .doc
        .get("default")
        .and_then(Value::as_str)
        .unwrap_or("allow");
    let stamp = if loaded.updated_at.is_empty() {
        String::from("never saved")
    } else {
        format!("updated {}", loaded.updated_at)
    };
    let may_edit = who.approver.edit_policy;
    html! {
        h1 { "Tenant policy" }
        @if let Some((class, text)) = banner {
            p class=(class) id="banner" role="status" { (text) }
        }
        @if let Some(why) = &loaded.unreadable {
            p class="error" id="unreadable" {
                "The stored policy cannot be read, so every mcp and http call is refused "
                code { "policy_unreadable" } " until a corrected policy is saved: " (why)
            }
        }
        p class="meta" {
            "A call no rule matches: " strong { (default) } " · " span id="updated-at" { (stamp) }
        }
        @if !may_edit {
            p class="note" { "You may read the policy; editing it is not among your permissions." }
        }
        @if let Some(p) = preview { (p.html) }
        @if may_edit && let Some(p) = panel { (panel_html(who, loaded, p, previews)) }
        (rules_table(&loaded.doc, may_edit))
        @if may_edit {
            p { a href="/policy?edit=new" id="add-rule" class="button" { "Add rule" } }
            (whole_form(who, loaded, preview, previews))
        }
    }
}

/// The table of the stored rules, strictest first, each with its Edit and Delete links for
/// a person who may edit.
fn rules_table(doc: &Value, may_edit: bool) -> Markup {
    let list = rules(doc);
    let mut order: Vec<usize> = (0..list.len()).collect();
    order.sort_by_key(|i| list.get(*i).map_or(3, strictness));
    html! {
        table class="rules" id="rules" {
            thead {
                tr {
                    th { "#" } th { "Effect" } th { "Tool" } th { "Kind" } th { "Agent" } th { "When" }
                    th { "Reason" } th {}
                }
            }
            tbody {
                @for i in order {
                    @if let Some(rule) = list.get(i) { (rule_row(i, rule, may_edit)) }
                }
            }
        }
        @if list.is_empty() {
            p class="empty" { "No rule: every call runs (unless the default says otherwise)." }
        }
    }
}

/// The row of the stored rule `i`.
fn rule_row(i: usize, rule: &Value, may_edit: bool) -> Markup {
    let effect = text_of(rule, "effect");
    let server = text_of(rule, "server");
    let tool = text_of(rule, "tool");
    let target = match (server.is_empty(), tool.is_empty()) {
        (true, true) => String::from("any"),
        (false, true) => format!("{server} / any"),
        (true, false) => tool,
        (false, false) => format!("{server} / {tool}"),
    };
    let when = rule.get("when").map(Value::to_string).unwrap_or_default();
    html! {
        tr id={ "rule-" (i) } class={ "effect-" (effect) } {
            td { (i) }
            td class="effect" { (effect) }
            td { (Shown(&target)) }
            td { (text_of(rule, "kind")) }
            td { (Shown(&text_of(rule, "agent"))) }
            td { code { (Shown(&when)) } }
            td { (Shown(&text_of(rule, "reason"))) }
            td {
                @if may_edit {
                    a href={ "/policy?edit=" (i) } id={ "edit-" (i) } { "Edit" }
                    " "
                    a href={ "/policy?delete=" (i) } class="button" id={ "delete-" (i) }
                        aria-label={ "Delete rule " (i) } { "Delete" }
                }
            }
        }
    }
}

/// The form editing the whole policy as JSON: the proposed document when a preview shows
/// one (and the form open), else the stored one.
fn whole_form(who: &Who, loaded: &Loaded, preview: Option<&Preview>, previews: bool) -> Markup {
    let proposed = preview.and_then(|p| p.whole.as_deref());
    let whole = match proposed {
        Some(text) => text.to_owned(),
        None => serde_json::to_string_pretty(&loaded.doc).unwrap_or_default(),
    };
    html! {
        details class="whole" open[proposed.is_some()] {
            summary { "Edit the whole policy as JSON" }
            form method="post" action="/policy/whole" {
                input type="hidden" name="csrf" value=(who.csrf);
                input type="hidden" name="updated_at" value=(loaded.updated_at);
                textarea name="document" rows="16" id="whole" { (whole) }
                button type="submit" id="save-whole" { "Save the whole policy" }
                @if previews {
                    " "
                    button type="submit" name="preview" value="1" id="preview-whole" { "Preview" }
                }
            }
        }
    }
}

fn panel_html(who: &Who, loaded: &Loaded, p: &Panel, previews: bool) -> Markup {
    let title = if p.index == "new" {
        String::from("Add a rule")
    } else {
        format!("Edit rule {}", p.index)
    };
    html! {
        aside class="panel" id="panel" {
            h2 { (title) }
            @if !p.errors.is_empty() {
                ul class="error" id="panel-errors" { @for e in &p.errors { li { (e) } } }
            }
            form method="post" action="/policy/rule" id="rule-form" {
                input type="hidden" name="csrf" value=(who.csrf);
                input type="hidden" name="updated_at" value=(loaded.updated_at);
                input type="hidden" name="index" value=(p.index);
                @for field in FIELDS { (field_html(p, field)) }
                button type="submit" id="save-rule" { "Save policy" }
                " "
                @if previews {
                    button type="submit" name="preview" value="1" id="preview-rule" { "Preview" }
                    " "
                }
                a href="/policy" { "Cancel" }
            }
        }
    }
}

/// One field of the rule panel, with its errors. A value is shown as written: the form
/// sends it back.
fn field_html(p: &Panel, field: &str) -> Markup {
    let value = p
        .values
        .get(field)
        .map(|v| text_of(&json!({ field: v }), field))
        .unwrap_or_default();
    let errors: Vec<&str> = p
        .field_errors
        .iter()
        .filter(|(f, _)| f == field)
        .map(|(_, m)| m.as_str())
        .collect();
    let invalid = (!errors.is_empty()).then_some("true");
    html! {
        div class="field" id={ "field-" (field) } {
            label for={ "in-" (field) } { (field) }
            @match field {
                "effect" => {
                    select name="effect" id="in-effect" aria-invalid=[invalid] {
                        @for e in ["deny", "ask", "allow"] {
                            option value=(e) selected[value == e] { (e) }
                        }
                    }
                }
                "kind" => {
                    select name="kind" id="in-kind" aria-invalid=[invalid] {
                        @for (v, label) in [("", "any"), ("mcp", "mcp"), ("http", "http"), ("local", "local")] {
                            option value=(v) selected[value == v] { (label) }
                        }
                    }
                }
                "when" => {
                    textarea name="when" id="in-when" rows="4" placeholder=r#"{"amount": {"gt": 100}}"#
                        aria-invalid=[invalid] { (value) }
                }
                _ => {
                    input type="text" name=(field) id={ "in-" (field) } value=(value) aria-invalid=[invalid];
                }
            }
            @for m in errors {
                p class="field-error" id={ "error-" (field) } { (m) }
            }
        }
    }
}

fn page_response(
    app: &App,
    who: &Who,
    loaded: &Loaded,
    panel: Option<&Panel>,
    banner: Option<(&str, &str)>,
    status: StatusCode,
) -> Response {
    preview_response(app, who, (loaded, panel), banner, None, status)
}

#[derive(Debug, Deserialize)]
pub(crate) struct PageQuery {
    edit: Option<String>,
    saved: Option<String>,
    /// A rule to delete, after the confirmation this shows.
    delete: Option<String>,
}

/// The confirmation before a rule is deleted (approval-page.md): the rule as written, and
/// the form that deletes it (on the `updatedAt` the page was read at, so a change in
/// between is a conflict).
fn confirm_delete(who: &Who, loaded: &Loaded, i: usize, rule: &Value) -> Response {
    let body = html! {
        section class="panel" id="confirm" {
            h1 { "Delete rule " (i) "?" }
            p { "This rule is removed from the stored policy, and the next call is decided without it:" }
            pre class="input" { (serde_json::to_string_pretty(rule).unwrap_or_default()) }
            form method="post" action="/policy/delete" class="inline" {
                input type="hidden" name="csrf" value=(who.csrf);
                input type="hidden" name="updated_at" value=(loaded.updated_at);
                input type="hidden" name="index" value=(i);
                button type="submit" class="deny" id="confirm-delete" { "Delete rule " (i) }
            }
            " "
            a href="/policy" class="button" id="cancel-delete" { "Cancel" }
        }
    };
    html::page("Delete a rule", Some((who, Tab::Policy)), body).into_response()
}

pub(crate) async fn page(
    State(app): State<App>,
    identity: crate::auth::Identity,
    Query(q): Query<PageQuery>,
) -> Response {
    let Some(who) = identity.who() else {
        return app.sign_in_first(&identity);
    };
    let loaded = match load(&app).await {
        Ok(l) => l,
        Err(r) => return r,
    };
    if let Some(i) = q.delete.as_deref().and_then(|d| d.parse::<usize>().ok())
        && who.approver.edit_policy
        && let Some(rule) = rules(&loaded.doc).get(i)
    {
        return confirm_delete(&who, &loaded, i, rule);
    }
    let panel = q.edit.as_deref().and_then(|e| {
        if e == "new" {
            let mut values = Map::new();
            values.insert("effect".into(), "ask".into());
            return Some(Panel {
                index: e.to_owned(),
                values,
                ..Panel::default()
            });
        }
        let i: usize = e.parse().ok()?;
        let rule = rules(&loaded.doc).get(i)?.as_object()?.clone();
        Some(Panel {
            index: i.to_string(),
            values: rule,
            ..Panel::default()
        })
    });
    let banner = q
        .saved
        .as_ref()
        .map(|_| ("saved", "Saved. The new policy decides the next call."));
    page_response(&app, &who, &loaded, panel.as_ref(), banner, StatusCode::OK)
}

/// The store could not save (unreachable, damaged): nothing was saved.
fn store_failed(e: &impl std::fmt::Display) -> Response {
    html::refusal(
        StatusCode::SERVICE_UNAVAILABLE,
        "The policy could not be saved",
        &e.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use toolgate_engine::{ConfigError, ConfigErrors};

    #[test]
    fn r22_errors_of_the_edited_rule_go_to_their_field() {
        let errs = ConfigErrors {
            errors: vec![
                ConfigError::new("rules[2].tool", "contains `__`"),
                ConfigError::new("rules[2].when.amount.gt", "compares numbers"),
                ConfigError::new("rules[20].tool", "another rule"),
                ConfigError::new("rules", "too many rules"),
            ],
        };
        let (by_field, rest) = super::split_errors(&errs, Some(2));
        let fields: Vec<&str> = by_field.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(fields, ["tool", "when"]);
        assert_eq!(rest.len(), 2, "{rest:?}");
        assert!(rest[0].starts_with("rules[20].tool"));
    }
}
