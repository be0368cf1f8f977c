//! The execution target on the card (seed 000): where the call would run, shown before
//! anything else, every value escaped and its hidden characters marked.

use maud::{Markup, html};
use toolgate_core::Interaction;

use crate::html::Shown;

/// The card's first line, when the call has an execution target.
pub(crate) fn card_line(shown: &Interaction) -> Markup {
    html! {
        @if let Some(t) = &shown.target {
            p class="target" id={ "target-" (shown.id) } {
                strong { "Runs on" }
                " "
                @for (i, (k, v)) in t.parts().into_iter().enumerate() {
                    @if i > 0 { " · " }
                    (k) " " code { (Shown(v)) }
                }
            }
        }
    }
}
