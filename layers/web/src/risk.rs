//! Risk cues on a card (approval-page.md): what should make a person look twice before
//! approving — the posture's claim that the tool is destructive, a tool whose purpose is
//! egress, and a `deny` rule of the stored policy that selects the tool but whose condition
//! this input did not meet (one step from a refusal).

use toolgate_core::{AskSource, NetworkScope, ToolKind};
use toolgate_engine::Governance;
use toolgate_engine::policy::{Effect, Policy};
use toolgate_inbox::HeldRecord;

use maud::{Markup, html};

use crate::html::Shown;

/// What the cues are read from: the configuration (the tools' declarations) and the stored
/// policy, each when there is one.
#[derive(Default)]
pub(crate) struct RiskContext {
    pub(crate) governance: Option<std::sync::Arc<Governance>>,
    pub(crate) policy: Option<Policy>,
}

impl RiskContext {
    /// The context for one page: the configuration the page was started with and the
    /// stored policy as it is now (an unreadable or absent one gives no rule cue).
    pub(crate) async fn load(app: &crate::state::App) -> Self {
        let policy = match app.0.store.get_policy().await {
            Ok(Some(stored)) => Policy::from_json_str(&stored.body, &app.0.settings.limits).ok(),
            _ => None,
        };
        Self {
            governance: app.0.settings.in_force.governance(),
            policy,
        }
    }
}

/// The cues for `r`: (a short class, the text a person reads).
pub(crate) fn cues(ctx: &RiskContext, r: &HeldRecord) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let entry = ctx
        .governance
        .as_ref()
        .and_then(|g| g.catalog().get(&r.call.tool));
    let destructive_decl = entry.and_then(|e| {
        e.records.iter().find_map(|rec| {
            rec.decl
                .annotations
                .as_ref()
                .filter(|a| a.destructive_hint == Some(true))
                .map(|_| {
                    format!(
                        "destructive: `{}` declares `{}` destructive",
                        rec.identity().source(),
                        rec.identity().name()
                    )
                })
        })
    });
    let destructive_reason = r
        .call
        .reasons
        .iter()
        .find(|a| a.source == AskSource::Posture && a.reason.contains("destructive"))
        .map(|a| format!("destructive: {}", a.reason));
    if let Some(d) = destructive_decl.or(destructive_reason) {
        out.push(("destructive", d));
    }
    if entry.is_some_and(|e| e.network == NetworkScope::Egress) {
        out.push((
            "egress",
            String::from("egress: the tool's purpose is outbound network access"),
        ));
    }
    if let Some(policy) = &ctx.policy {
        let agent = r.call.agent.rule_name();
        for (i, rule) in policy.rules().iter().enumerate() {
            if rule.effect() != Effect::Deny || !rule.has_when() {
                continue;
            }
            if rule.agent().is_some_and(|g| !g.matches(agent)) {
                continue;
            }
            let selected = r.call.identities.iter().any(|id| {
                let server = (id.kind() == ToolKind::Mcp).then(|| id.source());
                rule.selects(id.kind(), &r.call.tool, server)
                    || rule.selects(id.kind(), id.name(), server)
            });
            if selected {
                let why = rule
                    .reason()
                    .map_or_else(String::new, |w| format!(" (“{w}”)"));
                out.push((
                    "deny-near",
                    format!(
                        "a deny rule is near: `rules[{i}]`{why} refuses this tool when its `when` holds; this input did not meet it"
                    ),
                ));
            }
        }
    }
    out
}

/// The cues as a list on the card (nothing when there are none).
pub(crate) fn render(cues: &[(&'static str, String)]) -> Markup {
    html! {
        @if !cues.is_empty() {
            ul class="risks" aria-label="Risk cues" {
                @for (class, why) in cues {
                    li class={ "risk risk-" (class) } { (Shown(why)) }
                }
            }
        }
    }
}
