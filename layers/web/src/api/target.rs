//! The execution target on the card (seed 000): where the call would run, shown before
//! anything else, every value escaped and its hidden characters marked.

use std::fmt::Write as _;

use toolgate_core::Interaction;

use crate::html::{esc, text};

/// The card's first line, when the call has an execution target.
pub(crate) fn card_line(out: &mut String, shown: &Interaction) {
    let Some(t) = &shown.target else { return };
    let _ = write!(
        out,
        "<p class=\"target\" id=\"target-{}\"><strong>Runs on</strong> ",
        esc(&shown.id)
    );
    let parts: Vec<String> = t
        .parts()
        .into_iter()
        .map(|(k, v)| format!("{k} <code>{}</code>", text(v)))
        .collect();
    out.push_str(&parts.join(" · "));
    out.push_str("</p>");
}
