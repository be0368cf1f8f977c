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

use std::fmt::Write as _;

use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use toolgate::engine::policy::Policy;
use toolgate::engine::{ConfigErrors, PolicyState};
use toolgate_inbox::{PutPolicyError, put_policy_text_if_unchanged};

use crate::app::App;
use crate::auth::{Who, check_csrf, unauthorized};
use crate::html::{self, Tab, esc, text};

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
) -> String {
    let mut out = String::from("<h1>Tenant policy</h1>");
    let previews = app.0.settings.preview.is_some();
    if let Some((class, text)) = banner {
        let _ = write!(
            out,
            "<p class=\"{class}\" id=\"banner\" role=\"status\">{}</p>",
            esc(text)
        );
    }
    if let Some(why) = &loaded.unreadable {
        let _ = write!(
            out,
            "<p class=\"error\" id=\"unreadable\">The stored policy cannot be read, so every mcp and http call is refused <code>policy_unreadable</code> until a corrected policy is saved: {}</p>",
            esc(why)
        );
    }
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
    let _ = write!(
        out,
        "<p class=\"meta\">A call no rule matches: <strong>{}</strong> · <span id=\"updated-at\">{}</span></p>",
        esc(default),
        esc(&stamp)
    );
    let may_edit = who.approver.edit_policy;
    if !may_edit {
        out.push_str("<p class=\"note\">You may read the policy; editing it is not among your permissions.</p>");
    }
    if let Some(p) = preview {
        out.push_str(&p.html);
    }
    if may_edit && let Some(p) = panel {
        panel_html(&mut out, who, loaded, p, previews);
    }
    let list = rules(&loaded.doc);
    let mut order: Vec<usize> = (0..list.len()).collect();
    order.sort_by_key(|i| list.get(*i).map_or(3, strictness));
    out.push_str("<table class=\"rules\" id=\"rules\"><thead><tr><th>#</th><th>Effect</th><th>Tool</th><th>Kind</th><th>Agent</th><th>When</th><th>Reason</th><th></th></tr></thead><tbody>");
    for i in order {
        let Some(rule) = list.get(i) else { continue };
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
        let _ = write!(
            out,
            "<tr id=\"rule-{i}\" class=\"effect-{e}\"><td>{i}</td><td class=\"effect\">{e}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>",
            text(&target),
            esc(&text_of(rule, "kind")),
            text(&text_of(rule, "agent")),
            text(&when),
            text(&text_of(rule, "reason")),
            e = esc(&effect),
        );
        if may_edit {
            let _ = write!(
                out,
                "<a href=\"/policy?edit={i}\" id=\"edit-{i}\">Edit</a> \
                 <a href=\"/policy?delete={i}\" class=\"button\" id=\"delete-{i}\" aria-label=\"Delete rule {i}\">Delete</a>"
            );
        }
        out.push_str("</td></tr>");
    }
    out.push_str("</tbody></table>");
    if list.is_empty() {
        out.push_str(
            "<p class=\"empty\">No rule: every call runs (unless the default says otherwise).</p>",
        );
    }
    if may_edit {
        out.push_str(
            "<p><a href=\"/policy?edit=new\" id=\"add-rule\" class=\"button\">Add rule</a></p>",
        );
        let proposed = preview.and_then(|p| p.whole.as_deref());
        let whole = match proposed {
            Some(text) => text.to_owned(),
            None => serde_json::to_string_pretty(&loaded.doc).unwrap_or_default(),
        };
        let _ = write!(
            out,
            "<details class=\"whole\"{}><summary>Edit the whole policy as JSON</summary>\
             <form method=\"post\" action=\"/policy/whole\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <input type=\"hidden\" name=\"updated_at\" value=\"{}\">\
             <textarea name=\"document\" rows=\"16\" id=\"whole\">{}</textarea>\
             <button type=\"submit\" id=\"save-whole\">Save the whole policy</button>{}</form></details>",
            if proposed.is_some() { " open" } else { "" },
            esc(&who.csrf),
            esc(&loaded.updated_at),
            esc(&whole),
            if previews {
                " <button type=\"submit\" name=\"preview\" value=\"1\" id=\"preview-whole\">Preview</button>"
            } else {
                ""
            }
        );
    }
    out
}

fn panel_html(out: &mut String, who: &Who, loaded: &Loaded, p: &Panel, previews: bool) {
    let title = if p.index == "new" {
        String::from("Add a rule")
    } else {
        format!("Edit rule {}", p.index)
    };
    let _ = write!(
        out,
        "<aside class=\"panel\" id=\"panel\"><h2>{}</h2>",
        esc(&title)
    );
    if !p.errors.is_empty() {
        out.push_str("<ul class=\"error\" id=\"panel-errors\">");
        for e in &p.errors {
            let _ = write!(out, "<li>{}</li>", esc(e));
        }
        out.push_str("</ul>");
    }
    let _ = write!(
        out,
        "<form method=\"post\" action=\"/policy/rule\" id=\"rule-form\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <input type=\"hidden\" name=\"updated_at\" value=\"{}\">\
         <input type=\"hidden\" name=\"index\" value=\"{}\">",
        esc(&who.csrf),
        esc(&loaded.updated_at),
        esc(&p.index)
    );
    for field in FIELDS {
        let value = p
            .values
            .get(*field)
            .map(|v| text_of(&json!({ *field: v }), field))
            .unwrap_or_default();
        let errors: Vec<&str> = p
            .field_errors
            .iter()
            .filter(|(f, _)| f == field)
            .map(|(_, m)| m.as_str())
            .collect();
        let invalid = if errors.is_empty() {
            ""
        } else {
            " aria-invalid=\"true\""
        };
        let _ = write!(
            out,
            "<div class=\"field\" id=\"field-{field}\"><label for=\"in-{field}\">{field}</label>"
        );
        match *field {
            "effect" => {
                let _ = write!(out, "<select name=\"effect\" id=\"in-effect\"{invalid}>");
                for e in ["deny", "ask", "allow"] {
                    let sel = if value == e { " selected" } else { "" };
                    let _ = write!(out, "<option value=\"{e}\"{sel}>{e}</option>");
                }
                out.push_str("</select>");
            }
            "kind" => {
                let _ = write!(out, "<select name=\"kind\" id=\"in-kind\"{invalid}>");
                for (v, label) in [
                    ("", "any"),
                    ("mcp", "mcp"),
                    ("http", "http"),
                    ("local", "local"),
                ] {
                    let sel = if value == v { " selected" } else { "" };
                    let _ = write!(out, "<option value=\"{v}\"{sel}>{label}</option>");
                }
                out.push_str("</select>");
            }
            "when" => {
                let _ = write!(
                    out,
                    "<textarea name=\"when\" id=\"in-when\" rows=\"4\" placeholder='{{\"amount\": {{\"gt\": 100}}}}'{invalid}>{}</textarea>",
                    esc(&value)
                );
            }
            _ => {
                let _ = write!(
                    out,
                    "<input type=\"text\" name=\"{field}\" id=\"in-{field}\" value=\"{}\"{invalid}>",
                    esc(&value)
                );
            }
        }
        for m in errors {
            let _ = write!(
                out,
                "<p class=\"field-error\" id=\"error-{field}\">{}</p>",
                esc(m)
            );
        }
        out.push_str("</div>");
    }
    out.push_str("<button type=\"submit\" id=\"save-rule\">Save policy</button> ");
    if previews {
        out.push_str("<button type=\"submit\" name=\"preview\" value=\"1\" id=\"preview-rule\">Preview</button> ");
    }
    out.push_str("<a href=\"/policy\">Cancel</a></form></aside>");
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

fn preview_response(
    app: &App,
    who: &Who,
    (loaded, panel): (&Loaded, Option<&Panel>),
    banner: Option<(&str, &str)>,
    preview: Option<&Preview>,
    status: StatusCode,
) -> Response {
    let body = render(app, who, loaded, panel, banner, preview);
    (
        status,
        html::page("Policy", Some((who, Tab::Policy)), &body),
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
pub(crate) struct PageQuery {
    edit: Option<String>,
    saved: Option<String>,
    /// A rule to delete, after the confirmation this shows (issue 24).
    delete: Option<String>,
}

/// The confirmation before a rule is deleted (issue 24): the rule as written, and the form
/// that deletes it (on the `updatedAt` the page was read at, so a change in between is a
/// conflict).
fn confirm_delete(who: &Who, loaded: &Loaded, i: usize, rule: &Value) -> Response {
    let body = format!(
        "<section class=\"panel\" id=\"confirm\"><h1>Delete rule {i}?</h1>\
         <p>This rule is removed from the stored policy, and the next call is decided without it:</p>\
         <pre class=\"input\">{}</pre>\
         <form method=\"post\" action=\"/policy/delete\" class=\"inline\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <input type=\"hidden\" name=\"updated_at\" value=\"{}\">\
         <input type=\"hidden\" name=\"index\" value=\"{i}\">\
         <button type=\"submit\" class=\"deny\" id=\"confirm-delete\">Delete rule {i}</button></form> \
         <a href=\"/policy\" class=\"button\" id=\"cancel-delete\">Cancel</a></section>",
        esc(&serde_json::to_string_pretty(rule).unwrap_or_default()),
        esc(&who.csrf),
        esc(&loaded.updated_at)
    );
    html::page("Delete a rule", Some((who, Tab::Policy)), &body).into_response()
}

pub(crate) async fn page(
    State(app): State<App>,
    headers: HeaderMap,
    Query(q): Query<PageQuery>,
) -> Response {
    let Some(who) = app.who(&headers) else {
        return app.sign_in_first();
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

/// Checks who may save and the CSRF token; on success, the loaded policy. The caller
/// compares the form's base `updatedAt` with it, and saves on that base
/// ([`save_on`]), so a save in between is a conflict.
async fn may_save(
    app: &App,
    headers: &HeaderMap,
    csrf: Option<&str>,
) -> Result<(Who, Loaded), Response> {
    let Some(who) = app.who(headers) else {
        return Err(unauthorized());
    };
    check_csrf(&who, csrf)?;
    if !who.approver.edit_policy {
        return Err(html::refusal(
            StatusCode::FORBIDDEN,
            "Refused",
            &format!(
                "approver `{}` may not edit the policy (`edit_policy` is not set); nothing was saved",
                who.approver.name
            ),
        ));
    }
    let loaded = load(app).await?;
    Ok((who, loaded))
}

fn conflict_text(base: &str, stored: &str) -> String {
    format!(
        "Conflict: the policy was saved by someone else since this page showed it (the page had updatedAt `{}`, the stored one is `{}`). Nothing was saved; reload, look at the rules again and redo your change.",
        if base.is_empty() { "none" } else { base },
        if stored.is_empty() { "none" } else { stored },
    )
}

/// Saves `text` only if the stored policy is still `loaded` (its `updatedAt`, or none
/// stored): the store compares and saves in one transaction.
async fn save_on(app: &App, who: &Who, loaded: &Loaded, text: &str) -> Result<(), PutPolicyError> {
    let base = Some(loaded.updated_at.as_str()).filter(|b| !b.is_empty());
    let saved =
        put_policy_text_if_unchanged(&*app.0.store, text, &app.0.settings.limits, base).await;
    match &saved {
        Ok(stored) => tracing::info!(
            approver = %toolgate::core::display::visible(&who.approver.name),
            updated_at = %stored.updated_at,
            "the stored tenant policy was replaced from the approval page"
        ),
        Err(e) => tracing::info!(
            approver = %toolgate::core::display::visible(&who.approver.name),
            refused = %toolgate::core::display::visible(&e.to_string()),
            "a policy save on the approval page was refused"
        ),
    }
    saved.map(|_| ())
}

async fn put(app: &App, who: &Who, loaded: &Loaded, doc: &Value) -> Result<(), PutPolicyError> {
    let text = serde_json::to_string(doc).unwrap_or_default();
    save_on(app, who, loaded, &text).await
}

/// The page for a save based on an older `updatedAt` than the one stored (R22: never a
/// silent overwrite).
fn stale_base(
    app: &App,
    who: &Who,
    loaded: &Loaded,
    base: &str,
    panel: Option<&Panel>,
) -> Response {
    let text = conflict_text(base, &loaded.updated_at);
    page_response(
        app,
        who,
        loaded,
        panel,
        Some(("error", &text)),
        StatusCode::CONFLICT,
    )
}

/// The page for a whole document the policy's validation refused: every error, in the
/// new-rule panel.
fn refused_whole(app: &App, who: &Who, loaded: &Loaded, errs: &ConfigErrors) -> Response {
    let panel = Panel {
        index: "new".into(),
        errors: errs.errors.iter().map(ToString::to_string).collect(),
        ..Panel::default()
    };
    page_response(
        app,
        who,
        loaded,
        Some(&panel),
        Some((
            "error",
            "The policy is refused; the stored policy is unchanged.",
        )),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
}

/// The store could not save (unreachable, damaged): nothing was saved.
fn store_failed(e: &impl std::fmt::Display) -> Response {
    html::refusal(
        StatusCode::SERVICE_UNAVAILABLE,
        "The policy could not be saved",
        &e.to_string(),
    )
}

/// The page after the store refused a save as a conflict: someone saved between this
/// request's read and its save. Shows the policy as it is now stored.
async fn lost_race(app: &App, who: &Who, base: &str, panel: Option<&Panel>) -> Response {
    let now = match load(app).await {
        Ok(now) => now,
        Err(r) => return r,
    };
    let text = conflict_text(base, &now.updated_at);
    page_response(
        app,
        who,
        &now,
        panel,
        Some(("error", &text)),
        StatusCode::CONFLICT,
    )
}

/// A change's preview (R46), shown above the panel before it is saved.
struct Preview {
    /// The preview block.
    html: String,
    /// The whole document previewed, to keep in its text area.
    whole: Option<String>,
}

/// How many changed calls the preview lists.
const PREVIEW_ROWS: usize = 20;

/// Replays the configured audit log's last records under the policy in force and under
/// `text` (already validated as `proposed`): the preview block, or why it could not be made.
async fn preview_of(app: &App, loaded: &Loaded, proposed: Policy) -> String {
    let Some(pv) = app.0.settings.preview.clone() else {
        return String::from(
            "<section class=\"preview\" id=\"preview\"><p id=\"preview-summary\">No audit file is configured (<code>audit.file</code>), so there are no recorded calls to replay the change over.</p></section>",
        );
    };
    let limits = app.0.settings.limits;
    let current = match &loaded.body {
        None => Ok((*pv.governance).clone()),
        Some(body) => pv
            .governance
            .with_policy(PolicyState::from_json_str(body, &limits, None)),
    };
    let proposed = pv.governance.with_policy(PolicyState::readable(proposed));
    let (current, proposed) = match (current, proposed) {
        (Ok(c), Ok(p)) => (c, p),
        (Err(e), _) | (_, Err(e)) => {
            return format!(
                "<section class=\"preview error\" id=\"preview\"><p id=\"preview-summary\">The change cannot be replayed: {}</p></section>",
                esc(&e.to_string())
            );
        }
    };
    let file = pv.audit_file.clone();
    let replayed = tokio::task::spawn_blocking(move || {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("the audit file `{}` cannot be read: {e}", file.display()))?;
        toolgate::engine::replay::replay(&current, &proposed, &text, Some(pv.last))
            .map_err(|e| format!("the audit file `{}`: {e}", file.display()))
    })
    .await
    .unwrap_or_else(|e| Err(format!("the replay did not finish: {e}")));
    let report = match replayed {
        Ok(r) => r,
        Err(why) => {
            return format!(
                "<section class=\"preview error\" id=\"preview\"><p id=\"preview-summary\">The change cannot be replayed: {}</p></section>",
                esc(&why)
            );
        }
    };
    let mut out = String::from("<section class=\"preview\" id=\"preview\">");
    let sentence = report.sentence();
    let mut sentence = sentence.chars();
    let capital: String = sentence
        .next()
        .map(|c| c.to_uppercase().collect::<String>() + sentence.as_str())
        .unwrap_or_default();
    let _ = write!(
        out,
        "<p id=\"preview-summary\">{}.</p><p class=\"meta\">Not saved yet. <span id=\"preview-refused\">{}</span> refused, <span id=\"preview-asked\">{}</span> asked, <span id=\"preview-run\">{}</span> run, of <span id=\"preview-replayed\">{}</span> replayed; {} without a recorded input skipped{}.</p>",
        esc(&capital),
        report.totals.now_refused,
        report.totals.now_asked,
        report.totals.now_run,
        report.replayed,
        report.skipped,
        if report.redacted_inputs > 0 {
            format!("; {} inputs were recorded redacted", report.redacted_inputs)
        } else {
            String::new()
        }
    );
    if !report.changed.is_empty() {
        out.push_str("<table class=\"rules\" id=\"preview-changes\"><thead><tr><th>Time</th><th>Agent</th><th>Tool</th><th>Now</th><th>After the change</th></tr></thead><tbody>");
        let side = |s: &toolgate::engine::replay::Side| {
            let code = s.refusal.map(|c| format!(" {c}")).unwrap_or_default();
            format!("{}{} by {}", s.outcome, code, s.decided_by)
        };
        for c in report.changed.iter().take(PREVIEW_ROWS) {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&c.time),
                text(&c.agent),
                text(&c.tool),
                esc(&side(&c.current)),
                esc(&side(&c.proposed))
            );
        }
        out.push_str("</tbody></table>");
        if report.changed.len() > PREVIEW_ROWS {
            let _ = write!(
                out,
                "<p class=\"meta\">and {} more (<code>toolgate policy simulate</code> lists them all)</p>",
                report.changed.len() - PREVIEW_ROWS
            );
        }
    }
    out.push_str("</section>");
    out
}

#[derive(Debug, Deserialize)]
pub(crate) struct RuleForm {
    csrf: Option<String>,
    updated_at: Option<String>,
    index: Option<String>,
    effect: Option<String>,
    tool: Option<String>,
    server: Option<String>,
    kind: Option<String>,
    agent: Option<String>,
    when: Option<String>,
    reason: Option<String>,
    /// `1`: preview the change (R46) instead of saving it.
    preview: Option<String>,
}

pub(crate) async fn save_rule(
    State(app): State<App>,
    headers: HeaderMap,
    Form(form): Form<RuleForm>,
) -> Response {
    let (who, loaded) = match may_save(&app, &headers, form.csrf.as_deref()).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    // The rule as the form gives it; an empty text field is left out.
    let mut values = Map::new();
    values.insert(
        "effect".into(),
        form.effect.clone().unwrap_or_default().into(),
    );
    for (key, v) in [
        ("tool", &form.tool),
        ("server", &form.server),
        ("kind", &form.kind),
        ("agent", &form.agent),
        ("reason", &form.reason),
    ] {
        if let Some(v) = v.as_deref().filter(|v| !v.is_empty()) {
            values.insert(key.into(), v.into());
        }
    }
    let mut panel = Panel {
        index: form.index.clone().unwrap_or_else(|| "new".into()),
        ..Panel::default()
    };
    let when_text = form.when.as_deref().map(str::trim).unwrap_or("");
    if !when_text.is_empty() {
        match serde_json::from_str::<Value>(when_text) {
            Ok(v) => {
                values.insert("when".into(), v);
            }
            Err(e) => {
                values.insert("when".into(), Value::String(when_text.to_owned()));
                panel.values = values;
                panel
                    .field_errors
                    .push(("when".into(), format!("when: not JSON: {e}")));
                return page_response(
                    &app,
                    &who,
                    &loaded,
                    Some(&panel),
                    None,
                    StatusCode::UNPROCESSABLE_ENTITY,
                );
            }
        }
    }
    panel.values = values.clone();
    let base = form.updated_at.unwrap_or_default();
    if base != loaded.updated_at {
        return stale_base(&app, &who, &loaded, &base, Some(&panel));
    }
    let mut doc = loaded.doc.clone();
    let Some(list) = doc
        .as_object_mut()
        .map(|o| o.entry("rules").or_insert_with(|| json!([])))
        .and_then(Value::as_array_mut)
    else {
        return html::refusal(
            StatusCode::CONFLICT,
            "Refused",
            "the stored policy's `rules` is not a list; save the whole policy as JSON instead",
        );
    };
    let at = if panel.index == "new" {
        list.push(Value::Object(values));
        list.len() - 1
    } else {
        match panel
            .index
            .parse::<usize>()
            .ok()
            .filter(|i| *i < list.len())
        {
            Some(i) => {
                if let Some(slot) = list.get_mut(i) {
                    *slot = Value::Object(values);
                }
                i
            }
            None => {
                return stale_base(&app, &who, &loaded, &base, None);
            }
        }
    };
    let saved = if form.preview.as_deref() == Some("1") {
        // R46: the change replayed over the recorded calls; nothing is saved.
        let text = serde_json::to_string(&doc).unwrap_or_default();
        match Policy::from_json_str(&text, &app.0.settings.limits) {
            Ok(policy) => {
                let preview = Preview {
                    html: preview_of(&app, &loaded, policy).await,
                    whole: None,
                };
                return preview_response(
                    &app,
                    &who,
                    (&loaded, Some(&panel)),
                    None,
                    Some(&preview),
                    StatusCode::OK,
                );
            }
            Err(errs) => Err(PutPolicyError::Invalid(errs)),
        }
    } else {
        put(&app, &who, &loaded, &doc).await
    };
    match saved {
        Ok(()) => Redirect::to("/policy?saved=1").into_response(),
        Err(PutPolicyError::Conflict { .. }) => lost_race(&app, &who, &base, Some(&panel)).await,
        Err(PutPolicyError::Invalid(errs)) => {
            let (by_field, rest) = split_errors(&errs, Some(at));
            panel.field_errors = by_field;
            panel.errors = rest;
            let banner = "The policy is refused; the stored policy is unchanged. Each problem is shown next to its field.";
            page_response(
                &app,
                &who,
                &loaded,
                Some(&panel),
                Some(("error", banner)),
                StatusCode::UNPROCESSABLE_ENTITY,
            )
        }
        Err(PutPolicyError::Store(e)) => store_failed(&e),
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct DeleteForm {
    csrf: Option<String>,
    updated_at: Option<String>,
    index: Option<String>,
}

pub(crate) async fn delete_rule(
    State(app): State<App>,
    headers: HeaderMap,
    Form(form): Form<DeleteForm>,
) -> Response {
    let (who, loaded) = match may_save(&app, &headers, form.csrf.as_deref()).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let base = form.updated_at.unwrap_or_default();
    let mut doc = loaded.doc.clone();
    let index = form.index.as_deref().and_then(|i| i.parse::<usize>().ok());
    let removed = doc
        .get_mut("rules")
        .and_then(Value::as_array_mut)
        .zip(index)
        .filter(|(list, i)| *i < list.len())
        .map(|(list, i)| list.remove(i));
    if base != loaded.updated_at || removed.is_none() {
        return stale_base(&app, &who, &loaded, &base, None);
    }
    match put(&app, &who, &loaded, &doc).await {
        Ok(()) => Redirect::to("/policy?saved=1").into_response(),
        Err(PutPolicyError::Conflict { .. }) => lost_race(&app, &who, &base, None).await,
        Err(PutPolicyError::Invalid(errs)) => refused_whole(&app, &who, &loaded, &errs),
        Err(PutPolicyError::Store(e)) => store_failed(&e),
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct WholeForm {
    csrf: Option<String>,
    updated_at: Option<String>,
    document: Option<String>,
    /// `1`: preview the change (R46) instead of saving it.
    preview: Option<String>,
}

pub(crate) async fn save_whole(
    State(app): State<App>,
    headers: HeaderMap,
    Form(form): Form<WholeForm>,
) -> Response {
    let (who, loaded) = match may_save(&app, &headers, form.csrf.as_deref()).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let base = form.updated_at.unwrap_or_default();
    if base != loaded.updated_at {
        return stale_base(&app, &who, &loaded, &base, None);
    }
    let text = form.document.unwrap_or_default();
    if form.preview.as_deref() == Some("1") {
        // R46: the change replayed over the recorded calls; nothing is saved.
        return match Policy::from_json_str(&text, &app.0.settings.limits) {
            Ok(policy) => {
                let preview = Preview {
                    html: preview_of(&app, &loaded, policy).await,
                    whole: Some(text),
                };
                preview_response(
                    &app,
                    &who,
                    (&loaded, None),
                    None,
                    Some(&preview),
                    StatusCode::OK,
                )
            }
            Err(errs) => refused_whole(&app, &who, &loaded, &errs),
        };
    }
    match save_on(&app, &who, &loaded, &text).await {
        Ok(()) => Redirect::to("/policy?saved=1").into_response(),
        Err(PutPolicyError::Conflict { .. }) => lost_race(&app, &who, &base, None).await,
        Err(PutPolicyError::Invalid(errs)) => refused_whole(&app, &who, &loaded, &errs),
        Err(PutPolicyError::Store(e)) => store_failed(&e),
    }
}

#[cfg(test)]
mod tests {
    use toolgate::engine::{ConfigError, ConfigErrors};

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
