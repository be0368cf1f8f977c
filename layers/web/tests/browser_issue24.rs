//! Issue 24 in a real browser (Debian's `chromium` through `chromedriver`): filter and page
//! the pending list, answer a selection in bulk (after the undo window), answer with the
//! keyboard (and undo one), the phone layout at 360 px with every control reachable, and an
//! accessibility audit (labels, names, roles, contrast, focus styles) in the light and the
//! dark scheme. Screenshots go to `target/screenshots/`.
//!
//! Without `chromium` and `chromedriver` the tests skip loudly, except under `CI=true`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

#[path = "support/browser.rs"]
mod browser_kit;
mod common;

use std::time::Duration;

use browser_kit::*;
use common::*;
use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::{Client, Locator};
use serde_json::{Value, json};
use toolgate_core::{AgentRef, ToolCall};
use toolgate_inbox::State;

async fn sign_in(c: &Client, s: &Server) {
    c.goto(&format!("{}/login", s.base)).await.unwrap();
    wait_for(c, "#token").await.send_keys(ALICE).await.unwrap();
    click(c, "#sign-in").await;
    assert_eq!(text(c, "#who").await, "alice");
}

async fn key(c: &Client, k: char) {
    let keys = KeyActions::new("keyboard".into())
        .then(KeyAction::Down { value: k })
        .then(KeyAction::Up { value: k });
    c.perform_actions(keys).await.unwrap();
}

async fn js(c: &Client, script: &str) -> Value {
    c.execute(script, vec![]).await.unwrap()
}

async fn state_when(s: &Server, id: &str, want: State) -> State {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let st = s.inbox.store().get(id).await.unwrap().unwrap().state;
        if st == want || std::time::Instant::now() > deadline {
            return st;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn card_count(c: &Client) -> usize {
    c.find_all(Locator::Css("#cards .card"))
        .await
        .unwrap()
        .len()
}

async fn hold_mix(s: &Server, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let id = if i % 4 == 0 {
            s.hold(
                ToolCall::new(
                    AgentRef::profile("support"),
                    "github__create_issue",
                    json!({"title": format!("Crash {i}")}),
                )
                .in_turn("sess-9", format!("turn-{}", i % 3)),
            )
            .await
        } else {
            s.hold_refund(json!({"order": format!("B-{i}"), "amount": 10 + i}))
                .await
        };
        ids.push(id);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    ids
}

/// The audit: every form control has an accessible name, every button and link a name,
/// the document a language, landmarks for the navigation and the content, text contrast at
/// least 4.5:1 (3:1 for large text) against its effective background, and a visible focus
/// style on a control reached with Tab. Returns the failures.
const AUDIT: &str = r#"
const fails = [];
if (!document.documentElement.lang) fails.push("no lang on <html>");
if (!document.querySelector("main")) fails.push("no <main> landmark");
if (!document.querySelector("nav")) fails.push("no <nav> landmark");
function visible(el) { const r = el.getBoundingClientRect(); const s = getComputedStyle(el);
  return r.width > 0 && r.height > 0 && s.visibility !== "hidden" && s.display !== "none"; }
function name(el) {
  if (el.getAttribute("aria-label")) return el.getAttribute("aria-label");
  if (el.getAttribute("aria-labelledby")) return (document.getElementById(el.getAttribute("aria-labelledby")) || {}).textContent;
  if (el.id) { const l = document.querySelector('label[for="' + CSS.escape(el.id) + '"]'); if (l && l.textContent.trim()) return l.textContent; }
  const wrap = el.closest("label"); if (wrap && wrap.textContent.trim()) return wrap.textContent;
  if (el.title) return el.title;
  if (el.tagName === "BUTTON" || el.tagName === "A" || el.tagName === "SUMMARY") return el.textContent;
  return "";
}
for (const el of document.querySelectorAll("input:not([type=hidden]), select, textarea, button, a[href], summary")) {
  if (!(name(el) || "").trim()) fails.push("no accessible name: " + el.outerHTML.slice(0, 120));
}
function rgb(c) { const m = c.match(/rgba?\(([^)]+)\)/); if (!m) return null; const p = m[1].split(/[ ,\/]+/).filter(Boolean).map(Number); return { r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1 }; }
function lum(c) { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }; return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); }
function bg(el) { for (let e = el; e; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor); if (c && c.a > 0.5) return c; } return { r: 255, g: 255, b: 255, a: 1 }; }
let checked = 0;
for (const el of document.querySelectorAll("main *, header *")) {
  if (!visible(el)) continue;
  const own = Array.from(el.childNodes).some(n => n.nodeType === 3 && n.textContent.trim());
  if (!own) continue;
  const s = getComputedStyle(el); const fg = rgb(s.color); if (!fg) continue;
  const b = bg(el); const l1 = lum(fg), l2 = lum(b);
  const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
  const px = parseFloat(s.fontSize); const bold = Number(s.fontWeight) >= 700;
  const need = (px >= 24 || (bold && px >= 18.66)) ? 3 : 4.5;
  checked++;
  if (ratio < need) fails.push("contrast " + ratio.toFixed(2) + " < " + need + ": " + el.tagName + " " + JSON.stringify(el.textContent.trim().slice(0, 40)));
}
if (checked < 10) fails.push("only " + checked + " text elements checked");
return fails;
"#;

/// After a Tab: whether the focused element shows an outline.
const FOCUS_SHOWN: &str = r#"
const el = document.activeElement;
if (!el || el === document.body) return "nothing focused";
const s = getComputedStyle(el);
return (s.outlineStyle !== "none" && parseFloat(s.outlineWidth) >= 2) ? "ok" : ("no focus style on " + el.outerHTML.slice(0, 80));
"#;

/// Controls that reach past the viewport's right edge (the phone layout).
const OFF_SCREEN: &str = r#"
const w = document.documentElement.clientWidth;
const out = [];
for (const el of document.querySelectorAll("button, input:not([type=hidden]), select, textarea, a[href], summary")) {
  const r = el.getBoundingClientRect();
  if (r.width === 0 && r.height === 0) continue;
  if (el.closest("details:not([open])") && el.tagName !== "SUMMARY") continue;
  if (el.closest("table")) continue; // tables scroll sideways in their own box
  if (r.right > w + 1 || r.left < -1) out.push(el.id || el.outerHTML.slice(0, 60));
}
return { width: w, scroll: document.documentElement.scrollWidth, out: out };
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_issue24_filter_page_bulk_and_keyboard_answers() {
    let Some((driver, binary)) =
        chromedriver_or_skip("browser_issue24_filter_page_bulk_and_keyboard_answers")
    else {
        return;
    };
    let s = start_with("token", Duration::from_millis(100)).await;
    let ids = hold_mix(&s, 20).await;
    let c = browser(&driver, &binary).await;
    sign_in(&c, &s).await;
    assert_eq!(text(&c, "#pending-count").await, "20");
    assert_eq!(card_count(&c).await, 15, "issue 24: one page of 15");
    // Times are local and tick: "… ago".
    assert!(text(&c, ".ago").await.ends_with("ago"));

    // Page: the next page has the other five.
    click(&c, "#page-next").await;
    wait_for(&c, "#page-first").await;
    assert_eq!(card_count(&c).await, 5);
    shot(&c, "issue24-page-2.png").await;
    click(&c, "#page-first").await;

    // Filter: only github's calls.
    let tool = wait_for(&c, "#f-tool").await;
    tool.send_keys("github__create_issue").await.unwrap();
    click(&c, "#f-apply").await;
    assert_eq!(
        text_when(&c, "#pending-count", |t| t == "5").await,
        "5",
        "issue 24: filtered by tool"
    );
    assert_eq!(card_count(&c).await, 5);
    assert!(
        c.current_url()
            .await
            .unwrap()
            .as_str()
            .contains("tool=github__create_issue")
    );
    shot(&c, "issue24-filtered.png").await;
    // Search by input text.
    c.goto(&format!("{}/?q=B-7%22", s.base)).await.unwrap();
    assert_eq!(text_when(&c, "#pending-count", |t| t == "1").await, "1");
    wait_for(&c, &format!("#card-{}", ids[7])).await;

    // Bulk: select three refunds and approve them; the undo window, then the confirmation.
    c.goto(&format!("{}/?tool=refund", s.base)).await.unwrap();
    let picked: Vec<&String> = ids
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 4 != 0)
        .map(|(_, id)| id)
        .take(3)
        .collect();
    for id in &picked {
        click(&c, &format!("#pick-{id}")).await;
    }
    assert_eq!(text(&c, "#picked").await, "3 selected");
    shot(&c, "issue24-bulk-selected.png").await;
    click(&c, "#bulk-approve").await;
    assert!(
        text(&c, "#toast-text")
            .await
            .starts_with("Approving 3 held calls")
    );
    wait_for(&c, "#undo").await;
    let done = text_when(&c, "#toast-text", |t| t.starts_with("Approved 3")).await;
    assert!(done.starts_with("Approved 3"), "{done}");
    shot(&c, "issue24-bulk-done.png").await;
    for id in &picked {
        assert_eq!(state_when(&s, id, State::Approved).await, State::Approved);
        let rec = s.inbox.store().get(id).await.unwrap().unwrap();
        assert_eq!(rec.approver.as_deref(), Some("alice"));
    }
    // The cards left the page (the live update, or the answer itself).
    for id in &picked {
        let gone = c
            .find_all(Locator::Css(&format!("#card-{id}")))
            .await
            .unwrap();
        assert!(gone.is_empty(), "{id} is still shown");
    }

    // Keyboard: j to the first card, a approves it after the undo window.
    c.goto(&format!("{}/?tool=refund", s.base)).await.unwrap();
    wait_for(&c, "#cards .card").await;
    let first = c
        .find(Locator::Css("#cards .card"))
        .await
        .unwrap()
        .attr("data-id")
        .await
        .unwrap()
        .unwrap();
    key(&c, 'j').await;
    wait_for(&c, &format!("#card-{first}.current")).await;
    shot(&c, "issue24-keyboard-current.png").await;
    key(&c, 'a').await;
    assert!(text(&c, "#toast-text").await.starts_with("Approving"));
    let ok = text_when(&c, "#toast-text", |t| t.starts_with("Approved")).await;
    assert!(ok.starts_with("Approved"), "{ok}");
    assert_eq!(
        state_when(&s, &first, State::Approved).await,
        State::Approved
    );

    // r focuses the current card's reason; d denies with it; u undoes within the window.
    let current = js(
        &c,
        "return document.querySelector('#cards .card.current').getAttribute('data-id')",
    )
    .await;
    let current = current.as_str().unwrap().to_owned();
    key(&c, 'r').await;
    let focused = js(&c, "return document.activeElement.id").await;
    assert_eq!(focused.as_str(), Some(format!("reason-{current}").as_str()));
    c.find(Locator::Css(&format!("#reason-{current}")))
        .await
        .unwrap()
        .send_keys("not this one")
        .await
        .unwrap();
    // Escape leaves the field; d denies the current card; u undoes it.
    key(&c, '\u{e00c}').await;
    key(&c, 'd').await;
    assert!(text(&c, "#toast-text").await.starts_with("Denying"));
    key(&c, 'u').await;
    assert!(
        text_when(&c, "#toast-text", |t| t.starts_with("Undone"))
            .await
            .starts_with("Undone")
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        s.inbox.store().get(&current).await.unwrap().unwrap().state,
        State::Pending,
        "issue 24: an undone answer is never sent"
    );
    // Now deny it for real, with the reason typed.
    key(&c, 'd').await;
    let denied = text_when(&c, "#toast-text", |t| t.starts_with("Denied")).await;
    assert!(denied.starts_with("Denied"), "{denied}");
    assert_eq!(state_when(&s, &current, State::Denied).await, State::Denied);
    let rec = s.inbox.store().get(&current).await.unwrap().unwrap();
    assert_eq!(rec.answer_reason.as_deref(), Some("not this one"));
    shot(&c, "issue24-keyboard-denied.png").await;
    c.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_issue24_phone_layout_and_accessibility_audit() {
    let Some((driver, binary)) =
        chromedriver_or_skip("browser_issue24_phone_layout_and_accessibility_audit")
    else {
        return;
    };
    let gov = governance_tweaked("token", |c| {
        c["tools"][0]["network"] = json!("egress");
        c["tools"][2]["annotations"] = json!({"destructiveHint": true});
    });
    let s = start_gov(gov, Duration::from_millis(100)).await;
    hold_mix(&s, 4).await;
    let c = browser(&driver, &binary).await;
    sign_in(&c, &s).await;
    wait_for(&c, ".risk-destructive").await;
    wait_for(&c, ".risk-egress").await;

    // The audit, on the wide page.
    let fails = js(&c, AUDIT).await;
    assert_eq!(fails, json!([]), "accessibility audit (light, 1280 px)");
    let tab = KeyActions::new("keyboard".into())
        .then(KeyAction::Down { value: '\u{e004}' })
        .then(KeyAction::Up { value: '\u{e004}' });
    c.perform_actions(tab).await.unwrap();
    assert_eq!(
        js(&c, FOCUS_SHOWN).await,
        json!("ok"),
        "a focus style after Tab"
    );
    shot(&c, "issue24-wide.png").await;

    // The phone: 360 px, every control on screen, nothing wider than the page.
    c.set_window_size(360, 800).await.unwrap();
    c.refresh().await.unwrap();
    wait_for(&c, "#cards .card").await;
    let layout = js(&c, OFF_SCREEN).await;
    assert_eq!(
        layout["out"],
        json!([]),
        "issue 24: every control reachable at 360 px: {layout}"
    );
    assert!(
        layout["scroll"].as_u64().unwrap() <= layout["width"].as_u64().unwrap() + 1,
        "no sideways scrolling: {layout}"
    );
    let fails = js(&c, AUDIT).await;
    assert_eq!(fails, json!([]), "accessibility audit (light, 360 px)");
    shot(&c, "issue24-phone.png").await;
    js(
        &c,
        "window.scrollTo(0, document.body.scrollHeight); return 1",
    )
    .await;
    shot(&c, "issue24-phone-bottom.png").await;
    // The card page and the history at 360 px too.
    let id = c
        .find(Locator::Css("#cards .card"))
        .await
        .unwrap()
        .attr("data-id")
        .await
        .unwrap()
        .unwrap();
    c.goto(&format!("{}/calls/{id}", s.base)).await.unwrap();
    wait_for(&c, &format!("#deny-{id}")).await;
    let layout = js(&c, OFF_SCREEN).await;
    assert_eq!(
        layout["out"],
        json!([]),
        "the card page at 360 px: {layout}"
    );
    shot(&c, "issue24-phone-card.png").await;
    c.close().await.unwrap();

    // The dark scheme (prefers-color-scheme: dark): the same audit.
    let dark = browser_with(
        &driver,
        &binary,
        &[
            "--force-dark-mode",
            "--blink-settings=preferredColorScheme=0",
        ],
    )
    .await;
    sign_in(&dark, &s).await;
    let is_dark = js(
        &dark,
        "return matchMedia('(prefers-color-scheme: dark)').matches",
    )
    .await;
    if is_dark == json!(true) {
        let bg = js(
            &dark,
            "return getComputedStyle(document.body).backgroundColor",
        )
        .await;
        assert_eq!(bg, json!("rgb(17, 22, 28)"), "the dark scheme applies");
        let fails = js(&dark, AUDIT).await;
        assert_eq!(fails, json!([]), "accessibility audit (dark)");
        shot(&dark, "issue24-dark.png").await;
    } else {
        eprintln!(
            "*** this chromium does not take a dark preference from its flags: the dark audit was not run ***"
        );
    }
    dark.close().await.unwrap();
}
