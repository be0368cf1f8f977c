//! The Grants tab (R45): the grants a person may see, and revoking one after a confirmation.

use super::*;

/// Whether `who` is shown `g` on the Grants tab: one they gave, or one they have the rights
/// to give.
pub(crate) fn may_see(app: &App, who: &Who, g: &StoredGrant) -> bool {
    g.grant.granted_by() == who.approver.name
        || app
            .0
            .settings
            .in_force
            .governance()
            .is_some_and(|gov| may_revoke(&gov, &who.approver.name, &g.grant).is_ok())
}

/// Why a person may not revoke a grant on this page.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotHere {
    /// No configuration to check rights against.
    #[error("this page was started without the configuration's tools, so rights cannot be checked")]
    NoConfiguration,
    /// The configuration's rights say no.
    #[error(transparent)]
    Refused(#[from] toolgate_inbox::MayNotRevoke),
}

pub(crate) fn may_revoke_here(app: &App, who: &Who, g: &StoredGrant) -> Result<(), NotHere> {
    match app.0.settings.in_force.governance() {
        Some(gov) => Ok(may_revoke(&gov, &who.approver.name, &g.grant)?),
        None => Err(NotHere::NoConfiguration),
    }
}

pub(crate) fn source_field(g: &StoredGrant, key: &str) -> Option<Value> {
    serde_json::from_str::<Value>(g.grant.source_text())
        .ok()?
        .get(key)
        .cloned()
}

#[derive(Debug, Deserialize)]
pub(crate) struct GrantsQuery {
    revoked: Option<String>,
}

/// `GET /grants`: every grant the person may see, in the order given, with its state.
pub(crate) async fn page(
    State(app): State<App>,
    identity: crate::auth::Identity,
    Query(q): Query<GrantsQuery>,
) -> Response {
    let Some(who) = identity.who() else {
        return app.sign_in_first(&identity);
    };
    let grants = match app.0.store.grants().await {
        Ok(g) => g,
        Err(e) => return crate::rights::store_failed(e),
    };
    let now = Timestamp::now();
    let shown: Vec<&StoredGrant> = grants.iter().filter(|g| may_see(&app, &who, g)).collect();
    let body = html! {
        h1 { "Grants" }
        @if let Some(id) = &q.revoked {
            p class="saved" id="banner" role="status" {
                "Grant " code { (Shown(id)) } " was revoked: matching calls are asked again."
            }
        }
        table class="grants" id="grants" {
            thead {
                tr {
                    th { "Grant" } th { "State" } th { "Agent" } th { "Tool" } th { "When" } th { "Session" }
                    th { "Calls" } th { "Until" } th { "Given by" } th { "Reason" } th {}
                }
            }
            tbody { @for g in &shown { (grant_row(&app, &who, g, now)) } }
        }
        @if shown.is_empty() {
            p class="empty" id="no-grants" {
                "No grants yet. Give one with “Approve, and allow matching calls for …” on a held call, or "
                code { "toolgate grant add" } "."
            }
        }
    };
    html::page("Grants", Some((&who, Tab::Grants)), body).into_response()
}

/// One grant's row on the Grants tab, with Revoke for a live grant the person may revoke.
fn grant_row(app: &App, who: &Who, g: &StoredGrant, now: Timestamp) -> Markup {
    let state = g.state(now);
    let gid = g.grant.id();
    let field = |k: &str| match source_field(g, k) {
        Some(Value::String(s)) => s,
        Some(v) => v.to_string(),
        None => String::new(),
    };
    let tool = match source_field(g, "server") {
        Some(Value::String(s)) => format!("{s} / {}", field("tool")),
        _ => field("tool"),
    };
    let calls = match g.grant.max_calls() {
        Some(m) => format!("{} of {m}", g.uses),
        None => format!("{}", g.uses),
    };
    let ending = match (state, &g.revoked) {
        (GrantState::Revoked, Some(r)) => html! {
            "revoked by " span class="revoked-by" { (Shown(&r.by)) } " " time { (r.at) }
        },
        (GrantState::Live, _) => html! {
            time {
                (toolgate_inbox::Timestamp::from_millis(
                    i64::try_from(g.grant.expires_at()).unwrap_or(i64::MAX)
                ))
            }
        },
        (s, _) => html! {
            (s) " " time { (g.ended_at(now).map(|t| t.to_string()).unwrap_or_default()) }
        },
    };
    let revocable = state == GrantState::Live && may_revoke_here(app, who, g).is_ok();
    html! {
        tr id={ "grant-row-" (gid) } class={ "grant-" (state) } {
            td { code { (gid) } }
            td class="state" { (state) }
            td { (Shown(&field("agent"))) }
            td { (Shown(&tool)) }
            td class="when" { code { (Shown(&field("when"))) } }
            td { (Shown(&field("session"))) }
            td class="calls" { (calls) }
            td class="until" { (ending) }
            td class="granted-by" { (Shown(g.grant.granted_by())) }
            td class="reason" { (Shown(g.grant.reason())) }
            td {
                @if revocable {
                    a class="button" href={ "/grants/" (gid) "/revoke" } id={ "revoke-" (gid) } { "Revoke" }
                }
            }
        }
    }
}

pub(crate) async fn find(app: &App, id: &str) -> Result<StoredGrant, Response> {
    match app.0.store.grants().await {
        Ok(all) => all.into_iter().find(|g| g.grant.id() == id).ok_or_else(|| {
            html::refusal(
                StatusCode::NOT_FOUND,
                "No such grant",
                &format!("no grant `{id}` in this inbox; nothing was changed"),
            )
        }),
        Err(e) => Err(crate::rights::store_failed(e)),
    }
}

/// `GET /grants/{id}/revoke`: the confirmation step.
pub(crate) async fn confirm_revoke(
    State(app): State<App>,
    identity: crate::auth::Identity,
    Path(id): Path<String>,
) -> Response {
    let Some(who) = identity.who() else {
        return app.sign_in_first(&identity);
    };
    let g = match find(&app, &id).await {
        Ok(g) if may_see(&app, &who, &g) => g,
        Ok(_) => {
            return html::refusal(
                StatusCode::NOT_FOUND,
                "No such grant",
                &format!("no grant `{id}` that you may revoke in this inbox"),
            );
        }
        Err(r) => return r,
    };
    if let Err(why) = may_revoke_here(&app, &who, &g) {
        return refused(
            StatusCode::FORBIDDEN,
            &format!("{why}; nothing was changed"),
        );
    }
    let gid = g.grant.id();
    let body = html! {
        section class="panel" {
            h1 { "Revoke grant " code { (gid) } "?" }
            p {
                "Given by " strong { (Shown(g.grant.granted_by())) } " (" (Shown(g.grant.reason())) "); it answered "
                (g.uses) " call" @if g.uses != 1 { "s" }
                " so far. From now on matching calls are asked again. A revocation cannot be undone."
            }
            form method="post" action={ "/grants/" (gid) "/revoke" } {
                input type="hidden" name="csrf" value=(who.csrf);
                button type="submit" class="deny" id="confirm-revoke" { "Revoke" }
                " "
                a href="/grants" class="button" id="cancel-revoke" { "Keep it" }
            }
        }
    };
    html::page("Revoke a grant", Some((&who, Tab::Grants)), body).into_response()
}

#[derive(Debug, Deserialize)]
pub(crate) struct RevokeForm {
    csrf: Option<String>,
}

/// `POST /grants/{id}/revoke`: revokes a live grant, as the signed-in person.
pub(crate) async fn revoke(
    State(app): State<App>,
    identity: crate::auth::Identity,
    Path(id): Path<String>,
    Form(form): Form<RevokeForm>,
) -> Response {
    let Some(who) = identity.who() else {
        return unauthorized();
    };
    if let Err(r) = check_csrf(&who, form.csrf.as_deref()) {
        return r;
    }
    let g = match find(&app, &id).await {
        Ok(g) => g,
        Err(r) => return r,
    };
    if let Err(why) = may_revoke_here(&app, &who, &g) {
        return refused(
            StatusCode::FORBIDDEN,
            &format!("{why}; nothing was changed"),
        );
    }
    match app
        .0
        .store
        .revoke_grant(&id, &who.approver.name, Timestamp::now())
        .await
    {
        Ok(_) => {
            tracing::info!(
                grant = %toolgate_core::display::visible(&id),
                approver = %toolgate_core::display::visible(&who.approver.name),
                "a grant was revoked on the approval page"
            );
            Redirect::to(&format!(
                "/grants?revoked={}",
                crate::grants::query_escape(&id)
            ))
            .into_response()
        }
        Err(RevokeError::Store(e)) => crate::rights::store_failed(e),
        Err(e @ RevokeError::UnknownId(_)) => refused(StatusCode::NOT_FOUND, &e.to_string()),
        Err(e) => refused(StatusCode::CONFLICT, &format!("{e}; nothing was changed")),
    }
}

/// Percent-encodes a query value.
pub(crate) fn query_escape(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
