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
    (
        status,
        html::page("Policy", Some((who, Tab::Policy)), &body),
    )
        .into_response()
}

/// A change's preview (R46), shown above the panel before it is saved.
pub(super) struct Preview {
    /// The preview block.
    pub(super) html: String,
    /// The whole document previewed, to keep in its text area.
    pub(super) whole: Option<String>,
}

/// How many changed calls the preview lists.
pub(super) const PREVIEW_ROWS: usize = 20;

/// Replays the configured audit log's last records under the policy in force and under
/// `text` (already validated as `proposed`): the preview block, or why it could not be made.
pub(super) async fn preview_of(app: &App, loaded: &Loaded, proposed: Policy) -> String {
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
        toolgate_engine::replay::replay(&current, &proposed, &text, Some(pv.last))
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
        let side = |s: &toolgate_engine::replay::Side| {
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
