//! The preview of a policy change over the last recorded calls (R46's replay).

use super::*;

pub(super) fn preview_response(
    app: &App,
    who: &Who,
    (loaded, panel): (&Loaded, Option<&Panel>),
    banner: Option<(&str, &str)>,
    preview: Option<&Preview>,
    status: StatusCode,
) -> Response {
    let body = render(app, who, loaded, panel, banner, preview);
    (status, html::page("Policy", Some((who, Tab::Policy)), body)).into_response()
}

/// A change's preview (R46), shown above the panel before it is saved.
pub(super) struct Preview {
    /// The preview block.
    pub(super) html: Markup,
    /// The whole document previewed, to keep in its text area.
    pub(super) whole: Option<String>,
}

/// How many changed calls the preview lists.
pub(super) const PREVIEW_ROWS: usize = 20;

/// Replays the configured audit log's last records under the policy in force and under
/// `text` (already validated as `proposed`): the preview block, or why it could not be made.
pub(super) async fn preview_of(app: &App, loaded: &Loaded, proposed: Policy) -> Markup {
    let Some(pv) = app.0.settings.preview.clone() else {
        return html! {
            section class="preview" id="preview" {
                p id="preview-summary" {
                    "No audit file is configured (" code { "audit.file" }
                    "), so there are no recorded calls to replay the change over."
                }
            }
        };
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
        (Err(e), _) | (_, Err(e)) => return not_replayed(&e.to_string()),
    };
    let file = pv.audit_file.clone();
    let replayed = tokio::task::spawn_blocking(move || {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("the audit file `{}` cannot be read: {e}", file.display()))?;
        toolgate_engine::replay::replay(&current, &proposed, &text, Some(pv.last))
            .map_err(|e| format!("the audit file `{}`: {e}", file.display()))
    })
    .await
    .unwrap_or_else(|e| Err(format!("the replay did not finish: {e}")));
    match replayed {
        Ok(report) => report_html(&report),
        Err(why) => not_replayed(&why),
    }
}

/// The preview block saying why the change cannot be replayed.
fn not_replayed(why: &str) -> Markup {
    html! {
        section class="preview error" id="preview" {
            p id="preview-summary" { "The change cannot be replayed: " (why) }
        }
    }
}

/// The preview block of a replay: the counts, and the calls it changes (the first
/// [`PREVIEW_ROWS`]).
fn report_html(report: &toolgate_engine::replay::Report) -> Markup {
    let sentence = report.sentence();
    let mut sentence = sentence.chars();
    let capital: String = sentence
        .next()
        .map(|c| c.to_uppercase().collect::<String>() + sentence.as_str())
        .unwrap_or_default();
    let side = |s: &toolgate_engine::replay::Side| {
        let code = s.refusal.map(|c| format!(" {c}")).unwrap_or_default();
        format!("{}{} by {}", s.outcome, code, s.decided_by)
    };
    let t = &report.totals;
    html! {
        section class="preview" id="preview" {
            p id="preview-summary" { (capital) "." }
            p class="meta" {
                "Not saved yet. " span id="preview-refused" { (t.now_refused) } " refused, "
                span id="preview-asked" { (t.now_asked) } " asked, "
                span id="preview-run" { (t.now_run) } " run, of "
                span id="preview-replayed" { (report.replayed) } " replayed; "
                (report.skipped) " without a recorded input skipped"
                @if report.redacted_inputs > 0 {
                    "; " (report.redacted_inputs) " inputs were recorded redacted"
                }
                "."
            }
            @if !report.changed.is_empty() {
                table class="rules" id="preview-changes" {
                    thead {
                        tr { th { "Time" } th { "Agent" } th { "Tool" } th { "Now" } th { "After the change" } }
                    }
                    tbody {
                        @for c in report.changed.iter().take(PREVIEW_ROWS) {
                            tr {
                                td { (c.time) }
                                td { (Shown(&c.agent)) }
                                td { (Shown(&c.tool)) }
                                td { (side(&c.current)) }
                                td { (side(&c.proposed)) }
                            }
                        }
                    }
                }
                @if report.changed.len() > PREVIEW_ROWS {
                    p class="meta" {
                        "and " (report.changed.len() - PREVIEW_ROWS) " more ("
                        code { "toolgate policy simulate" } " lists them all)"
                    }
                }
            }
        }
    }
}
