//! Grants on the page (R45): "Approve, and allow matching calls for …" beside Approve on a
//! held call's card, and the Grants tab (every grant with its state, and Revoke).
//!
//! The grant form is pre-filled from the card — agent, tool (and server), session, a `when`
//! that binds every value the input shows with `equals` ([`cover`]), how long, how many
//! calls — and editable; it says in words what the grant leaves open. It is bound to the
//! card's hashes like Approve (R35): a call whose input or tool definition differs from
//! what the page showed is refused, nothing approved and nothing granted. The grant is
//! checked before anything is written (every field as `toolgate grant add` checks it, and
//! the person's rights: an approver grants only what their `tools` selectors cover; then
//! what it leaves open of the card: one that leaves more open than the offer is shown in
//! words first and saved only from there); then the call is approved — with the approver's
//! verified `sub` and `iss` when they signed in with an identity-provider token, as every
//! answer of the page — and the grant stored. A double submit is one approval and one
//! grant. The call's page then lists what the saved grant leaves open.
//!
//! Revoking asks for a confirmation first; only a person with rights over what the grant
//! answers may revoke it.

use std::time::Duration;

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;
use toolgate_core::ToolKind;
use toolgate_engine::grant::Grant;
use toolgate_inbox::{
    AnswerReceipt, GrantRequest, GrantState, HeldRecord, RevokeError, StoredGrant, Timestamp,
    may_revoke,
};

mod cover;
mod list;

use cover::Open;
use list::source_field;
pub(crate) use list::{confirm_revoke, page, query_escape, revoke};

use crate::auth::{check_csrf, unauthorized};
use crate::html::{self, Shown, Tab};
use crate::state::App;
use crate::state::Who;

/// How long a grant from a card lasts unless the person says otherwise.
const DEFAULT_FOR: &str = "30m";

/// How many calls a grant from a card answers unless the person says otherwise.
const DEFAULT_MAX_CALLS: u64 = 5;

/// What a card offers to grant: the pre-filled `when` ([`cover::prefill`]: every value the
/// card shows bound with `equals`) and what that `when` leaves open of the card's input.
#[derive(Debug)]
struct Offer {
    /// The pre-filled `when`, as JSON text; `None` when nothing can be bound.
    when: Option<String>,
    /// What it leaves open ([`cover::coverage`]).
    open: Vec<Open>,
}

/// The card's input as compact JSON text, every number as written (R20).
fn card_text(r: &HeldRecord) -> Result<String, String> {
    let value = r.input().map_err(|e| e.to_string())?;
    Ok(toolgate_core::number::to_text(&value, &r.literals()))
}

/// The offer of a card whose input reads as `root`.
fn offer_of(root: &cover::Node<'_>) -> Offer {
    let when = cover::prefill(root);
    let open = cover::coverage(root, when.as_deref()).unwrap_or_else(|e| vec![Open::Unreadable(e)]);
    Offer { when, open }
}

/// The offer of the card `r`.
fn offer(r: &HeldRecord) -> Offer {
    match card_text(r).and_then(|t| cover::read(&t).map(|root| offer_of(&root))) {
        Ok(o) => o,
        Err(e) => Offer {
            when: None,
            open: vec![Open::Unreadable(e)],
        },
    }
}

/// The fields of a grant that select calls, as given.
#[derive(Debug, Clone, Copy)]
struct Selects<'a> {
    agent: &'a str,
    tool: &'a str,
    server: Option<&'a str>,
    session: Option<&'a str>,
    when: Option<&'a str>,
}

/// Everything a grant selecting `given` leaves open of the card `r`: the input's fields
/// ([`cover::coverage`]), and every selector that differs from the card's.
fn open_of(r: &HeldRecord, given: Selects<'_>) -> Vec<Open> {
    let mut open = match card_text(r) {
        Ok(t) => match cover::read(&t).and_then(|root| cover::coverage(&root, given.when)) {
            Ok(o) => o,
            Err(e) => vec![Open::Unreadable(e)],
        },
        Err(e) => vec![Open::Unreadable(e)],
    };
    let (tool, server) = tool_of(r);
    let card_session = r.call.turn.as_ref().map(|t| t.session.as_str());
    let mut wider = |field: &'static str, given: &str, card: &str| {
        open.push(Open::Selector {
            field,
            given: given.to_owned(),
            card: card.to_owned(),
        });
    };
    if given.agent != r.call.agent.rule_name() {
        wider("agent", given.agent, r.call.agent.rule_name());
    }
    if given.tool != tool {
        wider("tool", given.tool, &tool);
    }
    if let Some(card) = &server
        && given.server != Some(card.as_str())
    {
        wider("server", given.server.unwrap_or(""), card);
    }
    if let Some(card) = card_session
        && given.session.is_none()
    {
        wider("session", "", card);
    }
    open
}

/// The list in words, as `<ul>` items.
fn open_items(list: &[Open]) -> Markup {
    html! {
        @for line in cover::words(list) {
            li { (line) }
        }
    }
}

/// The tool a card's grant names: the own name of its (first) record, and the server when
/// every record is the same MCP server's.
fn tool_of(r: &HeldRecord) -> (String, Option<String>) {
    let ids = &r.call.identities;
    let Some(first) = ids.first() else {
        return (r.call.tool.clone(), None);
    };
    let server = match first.server() {
        Some(s)
            if ids
                .iter()
                .all(|i| i.kind() == ToolKind::Mcp && i.server() == Some(s)) =>
        {
            Some(s.to_owned())
        }
        _ => None,
    };
    (first.name().to_owned(), server)
}

/// The "Approve, and allow matching calls for …" form of a pending card the person may
/// answer, pre-filled and editable, bound to the card's hashes. The `when` binds every value
/// the card shows with `equals` ([`cover::prefill`]); the form says in words what the grant
/// leaves open as offered, and that an edited grant is shown with what it leaves open
/// before anything is saved. An offer that leaves a field of the card open (a top-level
/// key no path can name) carries a box the person ticks to save it so. Every pre-filled
/// value is shown with its hidden characters marked: a value a person cannot read is never
/// put in a form raw, and its marked spelling never matches the original, so such a field
/// can only make the grant narrower.
pub(crate) fn grant_form(r: &HeldRecord, who: &Who) -> Markup {
    let id = r.id();
    let (tool, server) = tool_of(r);
    let offer = offer(r);
    let session = r.call.turn.as_ref().map(|t| t.session.clone());
    let input = |name: &str, label: &str, value: &str, hint: &str| {
        html! {
            label class="field" {
                (label) " "
                input type="text" name=(name) value=(Shown(value)) id={ "grant-" (name) "-" (id) } placeholder=(hint);
            }
        }
    };
    html! {
        details class="grant" id={ "grant-panel-" (id) } {
            summary id={ "grant-open-" (id) } { "Approve, and allow matching calls for …" }
            form method="post" action={ "/calls/" (id) "/grant" } class="grant" {
                (crate::pages::answer_binding(r, who))
                p class="note" {
                    "Approves this call, and lets matching calls run without asking until the grant expires, is spent or is revoked. It never runs a refused call and never changes what the agent is shown."
                }
                (input("for", "For", DEFAULT_FOR, "30m, 2h, 1d"))
                (input("max_calls", "At most (calls)", &DEFAULT_MAX_CALLS.to_string(), "empty: no limit"))
                (input("agent", "Agent", r.call.agent.rule_name(), "a name or a * pattern"))
                (input("tool", "Tool", &tool, "a name or a * pattern"))
                (input("server", "Server", server.as_deref().unwrap_or(""), "empty: any"))
                label class="field" {
                    "When (JSON, a rule's " code { "when" } "; empty: any input)"
                    textarea name="when" id={ "grant-when-" (id) } rows="3" {
                        (Shown(offer.when.as_deref().unwrap_or("")))
                    }
                }
                (input("session", "Session", session.as_deref().unwrap_or(""), "empty: any session"))
                (input("reason", "Reason", &format!("allowed with held call {}", r.id()), "why"))
                (offer_open(r, &offer))
                button type="submit" class="approve" id={ "grant-" (id) } { "Approve and allow" }
            }
        }
    }
}

/// What the card's offer leaves open, in words; a field of the card left open is saved only
/// once the person ticks that they read it.
fn offer_open(r: &HeldRecord, offer: &Offer) -> Markup {
    let id = r.id();
    html! {
        div class="open-fields" id={ "grant-open-fields-" (id) } {
            p {
                "As offered, the grant checks every value this card shows, each equal to it (a list whole); a range or a pattern is only there if you write one. It leaves open:"
            }
            ul { (open_items(&offer.open)) }
            @if cover::needs_confirmation(&offer.open, &offer.open) {
                label class="accept" {
                    input type="checkbox" name="open_fields" value=(cover::fingerprint(r.id(), &offer.open))
                        id={ "grant-accept-" (id) } required;
                    " I have read what this grant leaves open, and save it so"
                }
            }
            p class="note" {
                "Edit the grant and, before anything is saved, you are shown what the edited grant leaves open."
            }
        }
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct GrantForm {
    csrf: Option<String>,
    input_hash: Option<String>,
    definition_hash: Option<String>,
    idempotency_key: Option<String>,
    agent: Option<String>,
    tool: Option<String>,
    server: Option<String>,
    session: Option<String>,
    when: Option<String>,
    #[serde(rename = "for")]
    lasts: Option<String>,
    max_calls: Option<String>,
    reason: Option<String>,
    /// The digest of the open fields the person was shown ([`cover::fingerprint`]).
    open_fields: Option<String>,
}

/// A form field, trimmed; `None` when empty.
fn given(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

fn refused(status: StatusCode, why: &str) -> Response {
    html::refusal(status, "Refused", why)
}

/// Why a grant form asks for no grant, naming the field.
#[derive(Debug, thiserror::Error)]
enum FormError {
    #[error("`for`: say how long the grant lasts (30m, 2h)")]
    NoDuration,
    #[error("`for`: `{given}` is not a duration: {error}")]
    Duration {
        given: String,
        error: humantime::DurationError,
    },
    #[error("`max_calls`: `{0}` is not a whole number")]
    MaxCalls(String),
}

/// The grant the form asks for, or why not (naming the field).
fn request_of(form: &GrantForm, who: &Who) -> Result<GrantRequest, FormError> {
    let lasts = given(form.lasts.clone()).ok_or(FormError::NoDuration)?;
    let lasts: Duration =
        humantime::parse_duration(&lasts).map_err(|error| FormError::Duration {
            given: lasts,
            error,
        })?;
    let max_calls = match given(form.max_calls.clone()) {
        None => None,
        Some(n) => Some(n.parse::<u64>().map_err(|_| FormError::MaxCalls(n))?),
    };
    Ok(GrantRequest {
        agent: given(form.agent.clone()).unwrap_or_default(),
        tool: given(form.tool.clone()).unwrap_or_default(),
        server: given(form.server.clone()),
        kind: None,
        when: given(form.when.clone()),
        session: given(form.session.clone()),
        lasts,
        max_calls,
        granted_by: who.approver.name.clone(),
        reason: given(form.reason.clone()).unwrap_or_default(),
    })
}

/// `POST /calls/{id}/grant`: approve the held call and store the grant (R35, R45).
pub(crate) async fn approve_and_grant(
    State(app): State<App>,
    identity: crate::auth::Identity,
    Path(id): Path<String>,
    Form(form): Form<GrantForm>,
) -> Response {
    let Some(who) = identity.who() else {
        return unauthorized();
    };
    if let Err(r) = check_csrf(&who, form.csrf.as_deref()) {
        return r;
    }
    let Some(key) = form
        .idempotency_key
        .clone()
        .filter(|k| !k.trim().is_empty())
    else {
        return refused(
            StatusCode::BAD_REQUEST,
            "the form has no idempotency key; reload the page and answer again",
        );
    };
    // The configuration in force: rights a reload narrowed are narrow.
    let Some(gov) = app.0.settings.in_force.governance() else {
        return refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "this page was started without the configuration's tools, so a grant's rights cannot be checked; nothing was changed",
        );
    };
    // One answer path: rights in force and R35 — the approval and the grant answer exactly
    // what the page showed.
    let shown = crate::answer::Shown {
        input_hash: form.input_hash.as_deref(),
        definition_hash: form.definition_hash.as_deref(),
        edited: false,
        fields: crate::answer::FORM_FIELDS,
    };
    let record = match crate::answer::answerable(&app, &who.approver, &id, true, shown).await {
        Ok(r) => r,
        Err(refusal) => return refusal.into_response(),
    };
    // R51: a grant is one person's answer and never answers a call that needs several.
    if let Err(r) = crate::answer::one_approval_only(
        &record,
        "a grant is one person's answer and never answers such a call, so none is given from its card",
    ) {
        return r;
    }
    let (request, grant, now) = match checked_grant(&form, &who, &gov) {
        Ok(g) => g,
        Err(refused) => return refused,
    };
    let given = match confirmed_open(&id, &form, &request, &record, &who) {
        Ok(given) => given,
        Err(confirm) => return confirm,
    };
    let receipt = match approve_then_store(&app, &record, &who, key, (&grant, now)).await {
        Ok(r) => r,
        Err(failed) => return failed,
    };
    tracing::info!(
        interaction = %toolgate_core::display::visible(record.id()),
        grant = %grant.id(),
        approver = %toolgate_core::display::visible(&who.approver.name),
        principal = %who.principal.as_ref().map(ToString::to_string).unwrap_or_default(),
        open = given.len(),
        replayed = receipt.replayed,
        "a held call was approved with a grant on the approval page"
    );
    // The call's page confirms the grant with what it leaves open.
    Redirect::to(&format!(
        "/calls/{}?granted={}",
        query_escape(&id),
        query_escape(grant.id())
    ))
    .into_response()
}

/// What the grant leaves open of the card, or the confirmation step first when it leaves
/// more open than the offer and the form does not carry this very list's digest.
fn confirmed_open(
    id: &str,
    form: &GrantForm,
    request: &GrantRequest,
    record: &HeldRecord,
    who: &Who,
) -> Result<Vec<Open>, Response> {
    // What the grant leaves open of the card, computed here whatever the form said. Wider
    // than the offer (or an offer that already leaves a field of the card open) is saved
    // only with the digest of this very list, which the person is shown first: nothing is
    // widened without the words.
    let given = open_of(
        record,
        Selects {
            agent: &request.agent,
            tool: &request.tool,
            server: request.server.as_deref(),
            session: request.session.as_deref(),
            when: request.when.as_deref(),
        },
    );
    let print = cover::fingerprint(record.id(), &given);
    if cover::needs_confirmation(&given, &offer(record).open)
        && form.open_fields.as_deref() != Some(print.as_str())
    {
        return Err(confirm_open(id, form, request, &given, &print, who));
    }
    Ok(given)
}

/// The grant the form asks for, built and checked against `gov` now (and that moment), or
/// the page refusing it.
fn checked_grant(
    form: &GrantForm,
    who: &Who,
    gov: &toolgate_engine::Governance,
) -> Result<(GrantRequest, Grant, Timestamp), Response> {
    // Everything is checked before anything is written: a refused grant approves nothing.
    let request = match request_of(form, who) {
        Ok(r) => r,
        Err(why) => {
            return Err(refused(
                StatusCode::BAD_REQUEST,
                &format!("{why}; nothing was changed"),
            ));
        }
    };
    let now = Timestamp::now();
    let grant = match request.build(gov, now) {
        Ok(g) => g,
        Err(errs) => {
            let why = errs
                .errors
                .iter()
                .map(|e| {
                    if e.path.is_empty() {
                        e.message.clone()
                    } else {
                        format!("`{}`: {}", e.path, e.message)
                    }
                })
                .collect::<Vec<_>>()
                .join("; ");
            return Err(refused(
                StatusCode::BAD_REQUEST,
                &format!("the grant is refused: {why}; nothing was changed"),
            ));
        }
    };
    Ok((request, grant, now))
}

/// Approves the held call with the person's answer, then stores the grant (unless the
/// answer replays an approval, whose first submit gave it); or the page saying what failed.
async fn approve_then_store(
    app: &App,
    record: &HeldRecord,
    who: &Who,
    key: String,
    (grant, now): (&Grant, Timestamp),
) -> Result<AnswerReceipt, Response> {
    // One answer, as every form of the page gives it: the approver's name and, signed in
    // with an identity-provider token, their `sub` and `iss` (R47).
    let answer = who.answer(true, key, None);
    let receipt = match crate::answer::store(app, record, answer, "page grant").await {
        Ok(r) => r,
        Err(refusal) => {
            return Err(html::refusal(
                refusal.status(),
                "The answer was refused",
                &format!("{}; no grant was given", refusal.message()),
            ));
        }
    };
    // A double submit replays the approval: the grant was given by the first.
    if !receipt.replayed
        && let Err(e) = app
            .0
            .store
            .add_grant_as(grant, who.principal.as_ref(), now)
            .await
    {
        return Err(html::refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "The grant was not stored",
            &format!("the call was approved, but the grant was not stored: {e}"),
        ));
    }
    Ok(receipt)
}

/// The step before a grant that leaves more open than the card's offer is saved: the
/// grant as posted, what it leaves open in words, and the same form again carrying the
/// list's digest. Nothing is changed until the person saves it from here.
fn confirm_open(
    id: &str,
    form: &GrantForm,
    request: &GrantRequest,
    open: &[Open],
    print: &str,
    who: &Who,
) -> Response {
    let print = Some(print.to_owned());
    let fields = [
        ("csrf", &form.csrf),
        ("input_hash", &form.input_hash),
        ("definition_hash", &form.definition_hash),
        ("idempotency_key", &form.idempotency_key),
        ("agent", &form.agent),
        ("tool", &form.tool),
        ("server", &form.server),
        ("session", &form.session),
        ("when", &form.when),
        ("for", &form.lasts),
        ("max_calls", &form.max_calls),
        ("reason", &form.reason),
        ("open_fields", &print),
    ];
    let body = html! {
        section class="panel" id="grant-check" {
            h1 { "Check what this grant leaves open" }
            p {
                "Nothing is saved yet. This grant approves call " code { (id) }
                " and lets matching calls of " code { (Shown(&request.tool)) }
                @if let Some(s) = &request.server { " on server " code { (Shown(s)) } }
                " by " code { (Shown(&request.agent)) } " "
                @match &request.session {
                    Some(s) => { "in session " code { (Shown(s)) } }
                    None => { "in any session" }
                }
                " run without asking, for " (Shown(&humantime::format_duration(request.lasts).to_string())) ", "
                @match request.max_calls {
                    Some(m) => { "at most " (m) " call" @if m != 1 { "s" } }
                    None => { "with no limit on calls" }
                }
                ", "
                @match &request.when {
                    Some(w) => { "when the input passes " code { (Shown(w)) } }
                    None => { "whatever the input" }
                }
                "."
            }
            p { "Compared with what the card shows, it leaves open:" }
            ul class="open-fields" id="grant-open-list" { (open_items(open)) }
            form method="post" action={ "/calls/" (id) "/grant" } {
                @for (name, value) in fields {
                    input type="hidden" name=(name) value=(value.as_deref().unwrap_or(""));
                }
                button type="submit" class="approve" id="grant-confirm" { "Approve and allow, leaving these open" }
                " "
                a href={ "/calls/" (id) } class="button" id="grant-back" { "Back to the call" }
            }
        }
    };
    html::page("Check the grant", Some((who, Tab::Pending)), body).into_response()
}

/// On a call's page after "Approve and allow" (`?granted=`): the grant given, and what it
/// leaves open of this card, in words, read back from the stored grant. Nothing for a
/// grant that is not in the store or not the person's.
pub(crate) async fn granted_banner(app: &App, r: &HeldRecord, who: &Who, gid: &str) -> Markup {
    let Ok(grants) = app.0.store.grants().await else {
        return html! {};
    };
    let Some(g) = grants
        .iter()
        .find(|g| g.grant.id() == gid && g.grant.granted_by() == who.approver.name)
    else {
        return html! {};
    };
    let string = |k: &str| match source_field(g, k) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    };
    let when = serde_json::from_str::<
        std::collections::BTreeMap<String, &serde_json::value::RawValue>,
    >(g.grant.source_text())
    .ok()
    .and_then(|m| m.get("when").map(|w| w.get().to_owned()));
    let (agent, tool) = (
        string("agent").unwrap_or_default(),
        string("tool").unwrap_or_default(),
    );
    let (server, session) = (string("server"), string("session"));
    let open = open_of(
        r,
        Selects {
            agent: &agent,
            tool: &tool,
            server: server.as_deref(),
            session: session.as_deref(),
            when: when.as_deref(),
        },
    );
    html! {
        section class="banner ok" id="granted" role="status" {
            p {
                "You gave grant " code { (Shown(g.grant.id())) }
                ": matching calls run without asking until it expires, is spent or is revoked (the Grants tab). Compared with this card, it leaves open:"
            }
            ul class="open-fields" id="granted-open" { (open_items(&open)) }
        }
    }
}
