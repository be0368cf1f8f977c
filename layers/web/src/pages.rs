//! Pending approvals, one held call, the history, and answering.

use std::time::Duration;

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use toolgate_inbox::{HeldRecord, MAX_REASON_CHARS, State as CallState, Timestamp};

use crate::answer::answer_held;
use crate::auth::{check_csrf, unauthorized};
use crate::html::{self, Shown, Tab};
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
pub(crate) fn principal_html(r: &HeldRecord) -> Markup {
    principal(r.approver_principal.as_ref())
}

/// ` <span class="principal">sub (iss)</span>` for a verified principal (R47), or nothing.
fn principal(p: Option<&impl std::fmt::Display>) -> Markup {
    html! {
        @if let Some(p) = p {
            " " span class="principal" { (Shown(&p.to_string())) }
        }
    }
}

/// One card: the prompt, the model's name, every reason with its source, the agent, the
/// input as it will be sent, age and expiry, and (pending, answerable) the two forms.
/// One card with its risk cues ([`crate::risk`]); on a list (`link`), a pending call the
/// person may answer also gets the checkbox that selects it for a bulk answer, carrying the
/// hashes the card shows (R35).
pub(crate) fn card_cued(
    r: &HeldRecord,
    who: &Who,
    now: Timestamp,
    link: bool,
    cues: &[(&'static str, String)],
) -> Markup {
    let shown = r.interaction();
    let id = r.id();
    let answerable = r.state == CallState::Pending
        && who
            .approver
            .may_answer(&r.call.identities, r.call.agent.rule_name());
    let created = r.call.created_at;
    html! {
        article class={ "card state-" (r.state.as_str()) } id={ "card-" (id) } data-id=(id) {
            // The execution target first (seed 000).
            (crate::api::target::card_line(&shown))
            h3 class="prompt" {
                @if link {
                    a href={ "/calls/" (id) } { (Shown(&shown.prompt)) }
                } @else {
                    (Shown(&shown.prompt))
                }
            }
            @if link && answerable {
                label class="pick" {
                    input type="checkbox" class="pick" name="item" form="bulk" id={ "pick-" (id) }
                        value={ (id) " " (r.call.input_hash) " " (r.call.definition_hash) };
                    " Select"
                }
            }
            (crate::risk::render(cues))
            p class="as" {
                "as " code { (Shown(&shown.model_name)) } " · " span class="state" { (r.state.as_str()) }
            }
            dl {
                dt { "Agent" }
                dd class="agent" { (Shown(&agent_text(r))) }
                dt { "Why" }
                dd {
                    ul class="reasons" {
                        @for a in &r.call.reasons {
                            li { span class="source" { (Shown(&a.source.describe())) } " " (Shown(&a.reason)) }
                        }
                    }
                }
                // R49: what the session had already done when the call was asked about,
                // beside the reasons, so the person sees why a rule on session labels matched.
                @if let Some(line) = shown.labels_line() {
                    dt { "Labels" }
                    dd class="labels" { (Shown(&line)) }
                }
                dt { "Held" }
                dd {
                    span class="ago" data-since=(created.as_millis()) { (age(created.age(now))) " ago" }
                    " "
                    time datetime=(created) { (created) }
                }
                (answer_lines(r, now))
                (approvals_html(r))
                @if let Some(why) = &r.answer_reason {
                    dt { "Reason" }
                    dd class="answer-reason" { (Shown(why)) }
                }
            }
            (input_details(r))
            @if let Some(result) = &r.result {
                details class="result" { summary { "Result" } pre { (visible_json(result)) } }
            }
            @if r.state == CallState::Pending {
                @if answerable {
                    (answer_forms(r, who))
                    // R51: a grant is one person's answer, and an edit would be one
                    // approver's alone: neither is offered for a call that needs several
                    // approvals.
                    @if r.approvals_needed() <= 1 {
                        (crate::grants::grant_form(r, who))
                        (crate::api::edit::edit_form(r, who))
                    }
                } @else {
                    p class="note" { "You are not one of the approvers for this tool." }
                }
            }
            p class="hashes" {
                "input " code { (r.call.input_hash) } " · definition " code { (r.call.definition_hash) }
            }
        }
    }
}

/// The card's lines about the answer: when a pending call expires, who approved or denied
/// it (everyone whose approval counted, R51).
fn answer_lines(r: &HeldRecord, now: Timestamp) -> Markup {
    let expires = r.call.expires_at;
    let left = if now < expires {
        format!("in {}", age(now.age(expires)))
    } else {
        String::from("past: an answer will be refused")
    };
    let verb = if r.state == CallState::Denied {
        "Denied by"
    } else {
        "Approved by"
    };
    // R51: a call several people approved names them all (their principals are in the
    // approvals below).
    let several = r.state != CallState::Denied && r.approvals_needed() > 1;
    let when = r.answered_at.map(|t| t.to_string()).unwrap_or_default();
    html! {
        @if r.state == CallState::Pending {
            dt { "Expires" }
            dd {
                span class="left" data-until=(expires.as_millis()) { (left) }
                " "
                time datetime=(expires) { (expires) }
            }
        }
        @if let Some(approver) = &r.approver {
            dt { (verb) }
            dd class="approver" {
                @if several {
                    (Shown(&r.approved_by()))
                } @else {
                    (Shown(approver)) (principal_html(r))
                }
                " "
                time datetime=(when) { (when) }
            }
        }
    }
}

/// The call's input exactly as it will be sent (hidden characters marked, every number as
/// written, R20) and, for a call approved with an edited input, the input the agent sent.
fn input_details(r: &HeldRecord) -> Markup {
    // Hidden characters (a right-to-left override, a zero-width space) are shown marked:
    // the person reads the value that is sent.
    // Every number as written, too (R20: an integer past 64 bits keeps its digits).
    let input = match r.input_pretty() {
        Ok(text) => toolgate_core::display::visible_layout(text),
        Err(e) => format!("(the stored input cannot be read: {e})"),
    };
    // Approved with an edited input: the edit beside the input the agent sent, so whoever
    // reads the card later sees that the call sent is not the one asked for.
    let original = r.edited_from_pretty().map(|sent| match sent {
        Ok(text) => toolgate_core::display::visible_layout(text),
        Err(e) => format!("(the agent's input cannot be read: {e})"),
    });
    html! {
        details class="input" open {
            summary {
                @if r.edited_from.is_some() {
                    "Input, as edited by " (Shown(r.approver.as_deref().unwrap_or("an approver"))) " and approved"
                } @else {
                    "Input, exactly as it will be sent"
                }
            }
            pre class="input" { (input) }
        }
        @if let Some(original) = original {
            details class="original" open {
                summary { "Input the agent sent, replaced by the edit" }
                pre class="original" { (original) }
            }
        }
    }
}

/// R51: how many of the approvals a call needs it has, and from whom
/// (`1 of 2 approvals: alice`), for a call that needs more than one; each approver's
/// principal (R47) beside their name.
pub(crate) fn approvals_html(r: &HeldRecord) -> Markup {
    let Some(line) = r.approvals_line() else {
        return html! {};
    };
    let given = r.counted_approvals();
    html! {
        dt { "Approvals" }
        dd class="approvals" data-needed=(r.approvals_needed()) data-given=(given.len()) {
            span class="count" { (Shown(&line)) }
            @if given.iter().any(|a| a.principal.is_some()) {
                ul class="approvers" {
                    @for a in &given {
                        li {
                            (Shown(&a.approver)) (principal(a.principal.as_ref()))
                            " "
                            time datetime=(a.at) { (a.at) }
                        }
                    }
                }
            }
            @if r.state == CallState::Pending && r.approvals_missing() > 0 {
                " "
                span class="waiting" {
                    (toolgate_inbox::waits_for(r.approvals_missing()))
                    ", and is sent only once " (r.approvals_needed()) " people have approved it"
                }
            }
        }
    }
}

/// Whether `who` already approved `r`, a call that needs several approvals (R51).
fn approved_by_me(r: &HeldRecord, who: &Who) -> bool {
    r.approvals_needed() > 1 && r.approved_already_by(&who.approver.name, who.principal.as_ref())
}

/// The hidden fields every form that answers a held call carries: the sign-in's CSRF token,
/// the exact input and definition the person saw (R35: an answer binds them), and a fresh
/// idempotency key, so a form sent twice answers once.
pub(crate) fn answer_binding(r: &HeldRecord, who: &Who) -> Markup {
    html! {
        input type="hidden" name="csrf" value=(who.csrf);
        input type="hidden" name="input_hash" value=(r.call.input_hash);
        input type="hidden" name="definition_hash" value=(r.call.definition_hash);
        input type="hidden" name="idempotency_key" value=(random_hex(16));
    }
}

fn answer_forms(r: &HeldRecord, who: &Who) -> Markup {
    let id = r.id();
    let mine = approved_by_me(r, who);
    let action = format!("/calls/{id}/answer");
    html! {
        // R51: one person's approvals count once; they may still deny it.
        @if mine {
            p class="note approved-by-me" id={ "approved-by-me-" (id) } {
                "You approved this call: " (Shown(&r.approvals_line().unwrap_or_default())) "; "
                (toolgate_inbox::waits_for(r.approvals_missing())) ". Your approval counts once."
            }
        }
        div class="answer" {
            @if !mine {
                form method="post" action=(action) class="approve" {
                    (answer_binding(r, who))
                    input type="hidden" name="decision" value="approve";
                    button type="submit" class="approve" id={ "approve-" (id) } { "Approve" }
                }
            }
            form method="post" action=(action) class="deny" {
                (answer_binding(r, who))
                input type="hidden" name="decision" value="deny";
                label class="sr" for={ "reason-" (id) } { "Deny reason" }
                input type="text" name="reason" maxlength=(MAX_REASON_CHARS)
                    placeholder="Reason (optional, shown to the agent)" id={ "reason-" (id) };
                button type="submit" class="deny" id={ "deny-" (id) } { "Deny" }
            }
        }
    }
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
    let granted = match &q.granted {
        Some(gid) => crate::grants::granted_banner(&app, &r, &who, gid).await,
        None => html! {},
    };
    let ctx = crate::risk::RiskContext::load(&app).await;
    let cues = crate::risk::cues(&ctx, &r);
    let body = html! {
        @if let Some(t) = &r.call.turn {
            p class="crumb" { "Session " code { (Shown(&t.session)) } " · turn " code { (Shown(&t.turn)) } }
        }
        (answered_banner(&r, &who))
        (granted)
        (card_cued(&r, &who, Timestamp::now(), false, &cues))
    };
    html::page(&r.interaction().prompt, Some((&who, Tab::Pending)), body).into_response()
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
    let shown = crate::answer::Shown {
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
pub(crate) fn answered_banner(r: &HeldRecord, who: &Who) -> Markup {
    let next = html! { a href="/" id="next-pending" { "Next pending call" } };
    // R51: an approval that is not yet the last says so to the approver.
    if r.state == CallState::Pending && approved_by_me(r, who) {
        return html! {
            p class="banner ok" id="answered" role="status" {
                "Your approval is recorded: " (Shown(&r.approvals_line().unwrap_or_default())) "; "
                (toolgate_inbox::waits_for(r.approvals_missing())) ". " (next)
            }
        };
    }
    if r.state == CallState::Pending || r.approver.as_deref() != Some(who.approver.name.as_str()) {
        return html! {};
    }
    let verb = if r.state == CallState::Denied {
        "denied"
    } else {
        "approved"
    };
    let when = r.answered_at.map(|t| t.to_string()).unwrap_or_default();
    html! {
        p class="banner ok" id="answered" role="status" {
            "You " (verb) " this call " time datetime=(when) { (when) } ". " (next)
        }
    }
}
