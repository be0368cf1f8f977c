//! Pending approvals, one held call, the history, and answering.

use std::fmt::Write as _;
use std::time::Duration;

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use toolgate_inbox::{HeldRecord, MAX_REASON_CHARS, State as CallState, Timestamp};

use crate::answer::{Shown, answer_held};
use crate::auth::{check_csrf, unauthorized};
use crate::html::{self, Tab, esc, text};
use crate::rights::may_see;
use crate::rights::store_failed;
use crate::state::App;
use crate::state::Who;
use crate::token::random_hex;
use toolgate_core::display::visible_json;

pub(crate) fn age(d: Duration) -> String {
    if d.as_secs() == 0 {
        return String::from("0s");
    }
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

pub(crate) fn agent_text(r: &HeldRecord) -> String {
    match &r.call.agent.subagent {
        Some(sub) => format!("{} (subagent of {})", sub, r.call.agent.profile),
        None => r.call.agent.profile.clone(),
    }
}

/// The answering person's verified principal beside their name (R47): ` <span
/// class="principal">sub (iss)</span>`, or nothing for a name-only approver.
pub(crate) fn principal_html(r: &HeldRecord) -> String {
    r.approver_principal
        .as_ref()
        .map(|p| format!(" <span class=\"principal\">{}</span>", text(&p.to_string())))
        .unwrap_or_default()
}

/// One card: the prompt, the model's name, every reason with its source, the agent, the
/// input as it will be sent, age and expiry, and (pending, answerable) the two forms.
/// One card with its risk cues ([`crate::risk`]); on a list (`link`), a pending call the
/// person may answer also gets the checkbox that selects it for a bulk answer, carrying the
/// hashes the card shows (R35).
pub(crate) fn card_cued(
    out: &mut String,
    r: &HeldRecord,
    who: &Who,
    now: Timestamp,
    link: bool,
    cues: &[(&'static str, String)],
) {
    let shown = r.interaction();
    let id = esc(r.id());
    let _ = write!(
        out,
        "<article class=\"card state-{}\" id=\"card-{id}\" data-id=\"{id}\">",
        r.state.as_str()
    );
    // The execution target first (seed 000).
    out.push_str(&crate::api::target::card_line(&shown).into_string());
    out.push_str("<h3 class=\"prompt\">");
    if link {
        let _ = write!(out, "<a href=\"/calls/{id}\">{}</a>", text(&shown.prompt));
    } else {
        out.push_str(&text(&shown.prompt));
    }
    out.push_str("</h3>");
    let answerable = r.state == CallState::Pending
        && who
            .approver
            .may_answer(&r.call.identities, r.call.agent.rule_name());
    if link && answerable {
        let _ = write!(
            out,
            "<label class=\"pick\"><input type=\"checkbox\" class=\"pick\" name=\"item\" form=\"bulk\" id=\"pick-{id}\" value=\"{id} {} {}\"> Select</label>",
            esc(&r.call.input_hash),
            esc(&r.call.definition_hash)
        );
    }
    out.push_str(&crate::risk::render(cues).into_string());
    let _ = write!(
        out,
        "<p class=\"as\">as <code>{}</code> · <span class=\"state\">{}</span></p><dl>",
        text(&shown.model_name),
        r.state.as_str()
    );
    let _ = write!(
        out,
        "<dt>Agent</dt><dd class=\"agent\">{}</dd>",
        text(&agent_text(r))
    );
    out.push_str("<dt>Why</dt><dd><ul class=\"reasons\">");
    for a in &r.call.reasons {
        let _ = write!(
            out,
            "<li><span class=\"source\">{}</span> {}</li>",
            text(&a.source.describe()),
            text(&a.reason)
        );
    }
    out.push_str("</ul></dd>");
    // R49: what the session had already done when the call was asked about, beside the
    // reasons, so the person sees why a rule on session labels matched.
    if let Some(line) = shown.labels_line() {
        let _ = write!(
            out,
            "<dt>Labels</dt><dd class=\"labels\">{}</dd>",
            text(&line)
        );
    }
    let _ = write!(
        out,
        "<dt>Held</dt><dd><span class=\"ago\" data-since=\"{}\">{} ago</span> <time datetime=\"{}\">{}</time></dd>",
        r.call.created_at.as_millis(),
        age(r.call.created_at.age(now)),
        r.call.created_at,
        r.call.created_at
    );
    answer_lines(out, r, now);
    approvals_html(out, r);
    if let Some(why) = &r.answer_reason {
        let _ = write!(
            out,
            "<dt>Reason</dt><dd class=\"answer-reason\">{}</dd>",
            text(why)
        );
    }
    out.push_str("</dl>");
    input_details(out, r);
    if let Some(result) = &r.result {
        let _ = write!(
            out,
            "<details class=\"result\"><summary>Result</summary><pre>{}</pre></details>",
            esc(&visible_json(result))
        );
    }
    if r.state == CallState::Pending {
        if answerable {
            answer_forms(out, r, who);
            // R51: a grant is one person's answer, and an edit would be one approver's
            // alone: neither is offered for a call that needs several approvals.
            if r.approvals_needed() <= 1 {
                out.push_str(&crate::grants::grant_form(r, who).into_string());
                out.push_str(&crate::api::edit::edit_form(r, who).into_string());
            }
        } else {
            out.push_str("<p class=\"note\">You are not one of the approvers for this tool.</p>");
        }
    }
    let _ = write!(
        out,
        "<p class=\"hashes\">input <code>{}</code> · definition <code>{}</code></p></article>",
        esc(&r.call.input_hash),
        esc(&r.call.definition_hash)
    );
}

/// The card's lines about the answer: when a pending call expires, who approved or denied
/// it (everyone whose approval counted, R51).
fn answer_lines(out: &mut String, r: &HeldRecord, now: Timestamp) {
    if r.state == CallState::Pending {
        let left = if now < r.call.expires_at {
            format!("in {}", age(now.age(r.call.expires_at)))
        } else {
            String::from("past: an answer will be refused")
        };
        let _ = write!(
            out,
            "<dt>Expires</dt><dd><span class=\"left\" data-until=\"{}\">{left}</span> <time datetime=\"{}\">{}</time></dd>",
            r.call.expires_at.as_millis(),
            r.call.expires_at,
            r.call.expires_at
        );
    }
    if let Some(approver) = &r.approver {
        let verb = if r.state == CallState::Denied {
            "Denied by"
        } else {
            "Approved by"
        };
        // R51: a call several people approved names them all (their principals are in
        // the approvals below).
        let (approver, principal) = if r.state == CallState::Denied || r.approvals_needed() <= 1 {
            (approver.clone(), principal_html(r))
        } else {
            (r.approved_by(), String::new())
        };
        let when = r.answered_at.map(|t| t.to_string()).unwrap_or_default();
        let _ = write!(
            out,
            "<dt>{verb}</dt><dd class=\"approver\">{}{principal} <time datetime=\"{when}\">{when}</time></dd>",
            text(&approver),
        );
    }
}

/// The call's input exactly as it will be sent (hidden characters marked, every number as
/// written, R20) and, for a call approved with an edited input, the input the agent sent.
fn input_details(out: &mut String, r: &HeldRecord) {
    // Hidden characters (a right-to-left override, a zero-width space) are shown marked:
    // the person reads the value that is sent.
    // Every number as written, too (R20: an integer past 64 bits keeps its digits).
    let input = match r.input_pretty() {
        Ok(text) => toolgate_core::display::visible_layout(text),
        Err(e) => format!("(the stored input cannot be read: {e})"),
    };
    // Approved with an edited input: the edit beside the input the agent sent, so whoever
    // reads the card later sees that the call sent is not the one asked for.
    let summary = match r.edited_from.as_deref() {
        Some(_) => format!(
            "Input, as edited by {} and approved",
            text(r.approver.as_deref().unwrap_or("an approver"))
        ),
        None => String::from("Input, exactly as it will be sent"),
    };
    let _ = write!(
        out,
        "<details class=\"input\" open><summary>{summary}</summary><pre class=\"input\">{}</pre></details>",
        esc(&input)
    );
    if let Some(sent) = r.edited_from_pretty() {
        let original = match sent {
            Ok(text) => toolgate_core::display::visible_layout(text),
            Err(e) => format!("(the agent's input cannot be read: {e})"),
        };
        let _ = write!(
            out,
            "<details class=\"original\" open><summary>Input the agent sent, replaced by the edit</summary><pre class=\"original\">{}</pre></details>",
            esc(&original)
        );
    }
}

/// R51: how many of the approvals a call needs it has, and from whom
/// (`1 of 2 approvals: alice`), for a call that needs more than one; each approver's
/// principal (R47) beside their name.
pub(crate) fn approvals_html(out: &mut String, r: &HeldRecord) {
    let Some(line) = r.approvals_line() else {
        return;
    };
    let _ = write!(
        out,
        "<dt>Approvals</dt><dd class=\"approvals\" data-needed=\"{}\" data-given=\"{}\"><span class=\"count\">{}</span>",
        r.approvals_needed(),
        r.counted_approvals().len(),
        text(&line)
    );
    let given = r.counted_approvals();
    if given.iter().any(|a| a.principal.is_some()) {
        out.push_str("<ul class=\"approvers\">");
        for a in given {
            let principal = a
                .principal
                .as_ref()
                .map(|p| format!(" <span class=\"principal\">{}</span>", text(&p.to_string())))
                .unwrap_or_default();
            let _ = write!(
                out,
                "<li>{}{principal} <time datetime=\"{at}\">{at}</time></li>",
                text(&a.approver),
                at = a.at
            );
        }
        out.push_str("</ul>");
    }
    if r.state == CallState::Pending && r.approvals_missing() > 0 {
        let _ = write!(
            out,
            " <span class=\"waiting\">{}, and is sent only once {} people have approved it</span>",
            toolgate_inbox::waits_for(r.approvals_missing()),
            r.approvals_needed()
        );
    }
    out.push_str("</dd>");
}

/// Whether `who` already approved `r`, a call that needs several approvals (R51).
fn approved_by_me(r: &HeldRecord, who: &Who) -> bool {
    r.approvals_needed() > 1 && r.approved_already_by(&who.approver.name, who.principal.as_ref())
}

fn answer_forms(out: &mut String, r: &HeldRecord, who: &Who) {
    let id = esc(r.id());
    if approved_by_me(r, who) {
        // R51: one person's approvals count once; they may still deny it.
        let _ = write!(
            out,
            "<p class=\"note approved-by-me\" id=\"approved-by-me-{id}\">You approved this call: {}; {}. Your approval counts once.</p>",
            text(&r.approvals_line().unwrap_or_default()),
            toolgate_inbox::waits_for(r.approvals_missing())
        );
    }
    let hidden = format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <input type=\"hidden\" name=\"input_hash\" value=\"{}\">\
         <input type=\"hidden\" name=\"definition_hash\" value=\"{}\">",
        esc(&who.csrf),
        esc(&r.call.input_hash),
        esc(&r.call.definition_hash)
    );
    let approve = if approved_by_me(r, who) {
        String::new()
    } else {
        format!(
            "<form method=\"post\" action=\"/calls/{id}/answer\" class=\"approve\">{hidden}\
             <input type=\"hidden\" name=\"idempotency_key\" value=\"{}\">\
             <input type=\"hidden\" name=\"decision\" value=\"approve\">\
             <button type=\"submit\" class=\"approve\" id=\"approve-{id}\">Approve</button></form>",
            random_hex(16)
        )
    };
    let _ = write!(
        out,
        "<div class=\"answer\">{approve}\
         <form method=\"post\" action=\"/calls/{id}/answer\" class=\"deny\">{hidden}\
         <input type=\"hidden\" name=\"idempotency_key\" value=\"{}\">\
         <input type=\"hidden\" name=\"decision\" value=\"deny\">\
         <label class=\"sr\" for=\"reason-{id}\">Deny reason</label><input type=\"text\" name=\"reason\" maxlength=\"{MAX_REASON_CHARS}\" placeholder=\"Reason (optional, shown to the agent)\" id=\"reason-{id}\">\
         <button type=\"submit\" class=\"deny\" id=\"deny-{id}\">Deny</button></form></div>",
        random_hex(16),
    );
}

/// The query of a call's page.
#[derive(Debug, Deserialize)]
pub(crate) struct OneQuery {
    /// A grant the person just gave from this card: the page lists what it leaves open.
    granted: Option<String>,
}

pub(crate) async fn one(
    State(app): State<App>,
    identity: crate::auth::Identity,
    Path(id): Path<String>,
    Query(q): Query<OneQuery>,
) -> Response {
    let Some(who) = identity.who() else {
        return app.sign_in_first(&identity);
    };
    // A call the person may not see is answered like one that does not exist: the page
    // does not tell which ids are held for other approvers.
    let r = match app.0.store.get(&id).await {
        Ok(Some(r)) if may_see(&who, &r) => r,
        Ok(_) => {
            return html::refusal(
                StatusCode::NOT_FOUND,
                "No such held call",
                &format!("no held call `{id}` that you may answer in this inbox"),
            );
        }
        Err(e) => return store_failed(e),
    };
    let mut body = String::new();
    if let Some(t) = &r.call.turn {
        let _ = write!(
            body,
            "<p class=\"crumb\">Session <code>{}</code> · turn <code>{}</code></p>",
            text(&t.session),
            text(&t.turn)
        );
    }
    answered_banner(&mut body, &r, &who);
    if let Some(gid) = &q.granted {
        body.push_str(
            &crate::grants::granted_banner(&app, &r, &who, gid)
                .await
                .into_string(),
        );
    }
    let ctx = crate::risk::RiskContext::load(&app).await;
    let cues = crate::risk::cues(&ctx, &r);
    card_cued(&mut body, &r, &who, Timestamp::now(), false, &cues);
    html::page(&r.interaction().prompt, Some((&who, Tab::Pending)), &body).into_response()
}

#[derive(Debug, Deserialize)]
pub(crate) struct AnswerForm {
    csrf: Option<String>,
    decision: Option<String>,
    reason: Option<String>,
    input_hash: Option<String>,
    definition_hash: Option<String>,
    idempotency_key: Option<String>,
}

pub(crate) async fn answer(
    State(app): State<App>,
    identity: crate::auth::Identity,
    Path(id): Path<String>,
    Form(form): Form<AnswerForm>,
) -> Response {
    let Some(who) = identity.who() else {
        return unauthorized();
    };
    if let Err(r) = check_csrf(&who, form.csrf.as_deref()) {
        return r;
    }
    let approve = match form.decision.as_deref() {
        Some("approve") => true,
        Some("deny") => false,
        _ => {
            return html::refusal(
                StatusCode::BAD_REQUEST,
                "Refused",
                "the form says neither approve nor deny; nothing was changed",
            );
        }
    };
    let Some(key) = form.idempotency_key.filter(|k| !k.trim().is_empty()) else {
        return html::refusal(
            StatusCode::BAD_REQUEST,
            "Refused",
            "the form has no idempotency key; reload the page and answer again",
        );
    };
    let reason = form
        .reason
        .map(|r| r.trim().to_owned())
        .filter(|r| !r.is_empty() && !approve);
    if let Some(n) = reason
        .as_deref()
        .map(|r| r.chars().count())
        .filter(|&n| n > MAX_REASON_CHARS)
    {
        return html::refusal(
            StatusCode::BAD_REQUEST,
            "Refused",
            &format!(
                "`reason` is {n} characters long; at most {MAX_REASON_CHARS} are kept; nothing was changed"
            ),
        );
    }
    // R47: the verified identity behind an identity-provider token is kept with the answer
    // (a static-token or header approver has none).
    let answer = who.answer(approve, key, reason);
    // One answer path: rights in force, R35, the store.
    let shown = Shown {
        input_hash: form.input_hash.as_deref(),
        definition_hash: form.definition_hash.as_deref(),
        edited: false,
        fields: crate::answer::FORM_FIELDS,
    };
    match answer_held(&app, &who.approver, &id, shown, answer, "page").await {
        Ok(_) => Redirect::to(&format!("/calls/{id}")).into_response(),
        Err(refusal) => refusal.into_response(),
    }
}

/// The confirmation on a call's page after the person answered it: what they answered and
/// when, and the way on to the next pending call.
pub(crate) fn answered_banner(out: &mut String, r: &HeldRecord, who: &Who) {
    // R51: an approval that is not yet the last says so to the approver.
    if r.state == CallState::Pending && approved_by_me(r, who) {
        let _ = write!(
            out,
            "<p class=\"banner ok\" id=\"answered\" role=\"status\">Your approval is recorded: {}; {}. <a href=\"/\" id=\"next-pending\">Next pending call</a></p>",
            text(&r.approvals_line().unwrap_or_default()),
            toolgate_inbox::waits_for(r.approvals_missing())
        );
        return;
    }
    if r.state == CallState::Pending || r.approver.as_deref() != Some(who.approver.name.as_str()) {
        return;
    }
    let verb = if r.state == CallState::Denied {
        "denied"
    } else {
        "approved"
    };
    let when = r.answered_at.map(|t| t.to_string()).unwrap_or_default();
    let _ = write!(
        out,
        "<p class=\"banner ok\" id=\"answered\" role=\"status\">You {verb} this call <time datetime=\"{when}\">{when}</time>. <a href=\"/\" id=\"next-pending\">Next pending call</a></p>"
    );
}
