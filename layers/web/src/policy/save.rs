//! Saving the policy from the page: one rule, a rule's deletion, or the whole document, each
//! conditional on the version the person edited (a stale base refuses the save).

use super::*;

/// Checks who may save and the CSRF token; on success, the loaded policy. The caller
/// compares the form's base `updatedAt` with it, and saves on that base
/// ([`save_on`]), so a save in between is a conflict.
pub(super) async fn may_save(
    app: &App,
    identity: &crate::auth::Identity,
    csrf: Option<&str>,
) -> Result<(Who, Loaded), Response> {
    let Some(who) = identity.who() else {
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

pub(super) fn conflict_text(base: &str, stored: &str) -> String {
    format!(
        "Conflict: the policy was saved by someone else since this page showed it (the page had updatedAt `{}`, the stored one is `{}`). Nothing was saved; reload, look at the rules again and redo your change.",
        if base.is_empty() { "none" } else { base },
        if stored.is_empty() { "none" } else { stored },
    )
}

/// Saves `text` only if the stored policy is still `loaded` (its `updatedAt`, or none
/// stored): the store compares and saves in one transaction.
pub(super) async fn save_on(
    app: &App,
    who: &Who,
    loaded: &Loaded,
    text: &str,
) -> Result<(), PutPolicyError> {
    let base = Some(loaded.updated_at.as_str()).filter(|b| !b.is_empty());
    let saved =
        put_policy_text_if_unchanged(&*app.0.store, text, &app.0.settings.limits, base).await;
    match &saved {
        Ok(stored) => tracing::info!(
            approver = %toolgate_core::display::visible(&who.approver.name),
            updated_at = %stored.updated_at,
            "the stored tenant policy was replaced from the approval page"
        ),
        Err(e) => tracing::info!(
            approver = %toolgate_core::display::visible(&who.approver.name),
            refused = %toolgate_core::display::visible(&e.to_string()),
            "a policy save on the approval page was refused"
        ),
    }
    saved.map(|_| ())
}

pub(super) async fn put(
    app: &App,
    who: &Who,
    loaded: &Loaded,
    doc: &Value,
) -> Result<(), PutPolicyError> {
    let text = serde_json::to_string(doc).unwrap_or_default();
    save_on(app, who, loaded, &text).await
}

/// The page for a save based on an older `updatedAt` than the one stored (R22: never a
/// silent overwrite).
pub(super) fn stale_base(
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
pub(super) fn refused_whole(
    app: &App,
    who: &Who,
    loaded: &Loaded,
    errs: &ConfigErrors,
) -> Response {
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

/// The page after the store refused a save as a conflict: someone saved between this
/// request's read and its save. Shows the policy as it is now stored.
pub(super) async fn lost_race(app: &App, who: &Who, base: &str, panel: Option<&Panel>) -> Response {
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

#[derive(Debug, Deserialize)]
pub(crate) struct RuleForm {
    pub(super) csrf: Option<String>,
    pub(super) updated_at: Option<String>,
    pub(super) index: Option<String>,
    pub(super) effect: Option<String>,
    pub(super) tool: Option<String>,
    pub(super) server: Option<String>,
    pub(super) kind: Option<String>,
    pub(super) agent: Option<String>,
    pub(super) when: Option<String>,
    pub(super) reason: Option<String>,
    /// `1`: preview the change (R46) instead of saving it.
    pub(super) preview: Option<String>,
}

pub(crate) async fn save_rule(
    State(app): State<App>,
    identity: crate::auth::Identity,
    Form(form): Form<RuleForm>,
) -> Response {
    let (who, loaded) = match may_save(&app, &identity, form.csrf.as_deref()).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let mut values = rule_values(&form);
    let mut panel = Panel {
        index: form.index.clone().unwrap_or_else(|| "new".into()),
        ..Panel::default()
    };
    if let Err(why) = read_when(&mut values, form.when.as_deref()) {
        panel.values = values;
        panel.field_errors.push(("when".into(), why));
        return page_response(
            &app,
            &who,
            &loaded,
            Some(&panel),
            None,
            StatusCode::UNPROCESSABLE_ENTITY,
        );
    }
    panel.values = values.clone();
    let base = form.updated_at.unwrap_or_default();
    if base != loaded.updated_at {
        return stale_base(&app, &who, &loaded, &base, Some(&panel));
    }
    let mut doc = loaded.doc.clone();
    let at = match place_rule(&mut doc, &panel.index, values) {
        Ok(Some(at)) => at,
        Ok(None) => return stale_base(&app, &who, &loaded, &base, None),
        Err(refused) => return refused,
    };
    let saved = if form.preview.as_deref() == Some("1") {
        match preview_rule(&app, &who, (&loaded, &panel), &doc).await {
            Ok(page) => return page,
            Err(invalid) => Err(invalid),
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

/// The rule's text fields as the form gives them (`effect` always), before its `when`.
fn rule_values(form: &RuleForm) -> Map<String, Value> {
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
    values
}

/// Adds the form's `when` (JSON) to the rule, when it gives one; text that is not JSON is
/// kept as written, for the form shown again, with the error for its field.
fn read_when(values: &mut Map<String, Value>, when: Option<&str>) -> Result<(), String> {
    let when_text = when.map(str::trim).unwrap_or("");
    if !when_text.is_empty() {
        match serde_json::from_str::<Value>(when_text) {
            Ok(v) => {
                values.insert("when".into(), v);
            }
            Err(e) => {
                values.insert("when".into(), Value::String(when_text.to_owned()));
                return Err(format!("when: not JSON: {e}"));
            }
        }
    }
    Ok(())
}

/// Puts the rule in `doc`'s `rules`, new at the end or in place of the one at `index`, and
/// says where; `None` when `index` names no rule of the stored policy (a stale page), or
/// the refusal when the stored `rules` is not a list.
fn place_rule(
    doc: &mut Value,
    index: &str,
    values: Map<String, Value>,
) -> Result<Option<usize>, Response> {
    let Some(list) = doc
        .as_object_mut()
        .map(|o| o.entry("rules").or_insert_with(|| json!([])))
        .and_then(Value::as_array_mut)
    else {
        return Err(html::refusal(
            StatusCode::CONFLICT,
            "Refused",
            "the stored policy's `rules` is not a list; save the whole policy as JSON instead",
        ));
    };
    if index == "new" {
        list.push(Value::Object(values));
        return Ok(Some(list.len() - 1));
    }
    match index.parse::<usize>().ok().filter(|i| *i < list.len()) {
        Some(i) => {
            if let Some(slot) = list.get_mut(i) {
                *slot = Value::Object(values);
            }
            Ok(Some(i))
        }
        None => Ok(None),
    }
}

/// R46: the page previewing the changed policy `doc` over the recorded calls (nothing is
/// saved), or why the policy is invalid.
async fn preview_rule(
    app: &App,
    who: &Who,
    (loaded, panel): (&Loaded, &Panel),
    doc: &Value,
) -> Result<Response, PutPolicyError> {
    // R46: the change replayed over the recorded calls; nothing is saved.
    let text = serde_json::to_string(doc).unwrap_or_default();
    match Policy::from_json_str(&text, &app.0.settings.limits) {
        Ok(policy) => {
            let preview = Preview {
                html: preview_of(app, loaded, policy).await,
                whole: None,
            };
            Ok(preview_response(
                app,
                who,
                (loaded, Some(panel)),
                None,
                Some(&preview),
                StatusCode::OK,
            ))
        }
        Err(errs) => Err(PutPolicyError::Invalid(errs)),
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct DeleteForm {
    pub(super) csrf: Option<String>,
    pub(super) updated_at: Option<String>,
    pub(super) index: Option<String>,
}

pub(crate) async fn delete_rule(
    State(app): State<App>,
    identity: crate::auth::Identity,
    Form(form): Form<DeleteForm>,
) -> Response {
    let (who, loaded) = match may_save(&app, &identity, form.csrf.as_deref()).await {
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
    pub(super) csrf: Option<String>,
    pub(super) updated_at: Option<String>,
    pub(super) document: Option<String>,
    /// `1`: preview the change (R46) instead of saving it.
    pub(super) preview: Option<String>,
}

pub(crate) async fn save_whole(
    State(app): State<App>,
    identity: crate::auth::Identity,
    Form(form): Form<WholeForm>,
) -> Response {
    let (who, loaded) = match may_save(&app, &identity, form.csrf.as_deref()).await {
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
