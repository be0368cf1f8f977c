// toolgate approval page. No inline script; the page works without this file (every form
// posts, every filter is a GET). With it:
// - the pending list updates in place from server-sent events on /events: a card added, a
//   card ended (answered, expired, cancelled) — never the whole list (issue 24); other
//   pages refresh their live part when something changed;
// - times are local and tick ("3 min ago");
// - keyboard shortcuts (j/k next/previous, a approve, d deny, r the reason, x select,
//   u undo) and the bulk bar answer after a short undo window, then confirm.
(function () {
  "use strict";
  var UNDO_MS = 4000;
  var live = document.getElementById("live");
  var stale = document.getElementById("stale");
  var toastBox = document.getElementById("toast");

  // ----- times -----
  function span(ms) {
    var s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) { return s + " s"; }
    var m = Math.floor(s / 60);
    if (m < 60) { return m + " min"; }
    var h = Math.floor(m / 60);
    if (h < 48) { return h + " h" + (m % 60 ? " " + (m % 60) + " min" : ""); }
    return Math.floor(h / 24) + " days";
  }
  function tick(root) {
    var now = Date.now();
    var el, i, list;
    list = (root || document).querySelectorAll(".ago[data-since]");
    for (i = 0; i < list.length; i++) {
      el = list[i];
      el.textContent = span(now - Number(el.getAttribute("data-since"))) + " ago";
    }
    list = (root || document).querySelectorAll(".left[data-until]");
    for (i = 0; i < list.length; i++) {
      el = list[i];
      var left = Number(el.getAttribute("data-until")) - now;
      var card = el.closest(".card");
      if (left > 0) {
        el.textContent = "in " + span(left);
      } else {
        el.textContent = "past: an answer will be refused";
        if (card) { card.classList.add("expired-now"); }
      }
    }
    list = (root || document).querySelectorAll("time[datetime]:not([data-local])");
    for (i = 0; i < list.length; i++) {
      el = list[i];
      var d = new Date(el.getAttribute("datetime"));
      if (!isNaN(d.getTime())) {
        el.title = el.getAttribute("datetime") + " (UTC)";
        el.textContent = d.toLocaleString();
        el.setAttribute("data-local", "1");
      }
    }
  }
  tick();
  setInterval(function () { tick(); }, 10000);

  // ----- confirmations and the undo window -----
  var waiting = null; // {timer, cancel}
  function toast(html, opts) {
    if (!toastBox) { return; }
    opts = opts || {};
    toastBox.innerHTML = "";
    var msg = document.createElement("span");
    msg.id = "toast-text";
    msg.textContent = html;
    toastBox.appendChild(msg);
    if (opts.undo) {
      var b = document.createElement("button");
      b.type = "button";
      b.id = "undo";
      b.textContent = "Undo";
      b.addEventListener("click", opts.undo);
      toastBox.appendChild(b);
    }
    if (opts.link) {
      var a = document.createElement("a");
      a.href = opts.link;
      a.textContent = "Open";
      a.style.color = "inherit";
      toastBox.appendChild(a);
    }
    toastBox.className = "toast" + (opts.error ? " error" : "");
    toastBox.setAttribute("role", opts.error ? "alert" : "status");
    toastBox.hidden = false;
    if (!opts.undo) {
      var shown = toastBox.innerHTML;
      setTimeout(function () { if (toastBox.innerHTML === shown) { toastBox.hidden = true; } }, 8000);
    }
  }
  function later(what, send, undone) {
    if (waiting) { clearTimeout(waiting.timer); waiting.go(); }
    var w = { timer: 0, go: function () { waiting = null; send(); }, undone: undone };
    w.timer = setTimeout(w.go, UNDO_MS);
    waiting = w;
    toast(what + " in " + Math.round(UNDO_MS / 1000) + " s…", {
      undo: function () { undo(what); }
    });
  }
  function undo(what) {
    if (!waiting) { return; }
    clearTimeout(waiting.timer);
    var back = waiting.undone;
    waiting = null;
    if (back) { back(); }
    toast("Undone: " + what.charAt(0).toLowerCase() + what.slice(1) + " was not sent.");
  }
  function refusalText(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var r = doc.getElementById("refusal");
    return r ? r.textContent : "the answer was refused";
  }
  function post(url, body) {
    return fetch(url, {
      method: "POST", credentials: "same-origin", body: body,
      headers: { "Content-Type": "application/x-www-form-urlencoded" }
    }).then(function (r) { return r.text().then(function (t) { return { ok: r.ok, text: t }; }); });
  }

  // ----- the pending list -----
  var delta = live && live.getAttribute("data-delta") === "1";
  function cardsBox() { return document.getElementById("cards"); }
  function cards() { var b = cardsBox(); return b ? Array.prototype.slice.call(b.querySelectorAll(".card")) : []; }
  function countEl() { return document.getElementById("pending-count"); }
  function bump(n) { var c = countEl(); if (c) { c.textContent = String(Math.max(0, Number(c.textContent) + n)); } }
  var current = null;
  function setCurrent(card) {
    if (current) { current.classList.remove("current"); }
    current = card;
    if (card) {
      card.classList.add("current");
      card.setAttribute("tabindex", "-1");
      card.focus({ preventScroll: true });
      card.scrollIntoView({ block: "nearest" });
    }
  }
  function removeCard(card) {
    if (!card) { return; }
    if (card === current) {
      var all = cards(), i = all.indexOf(card);
      setCurrent(all[i + 1] || all[i - 1] || null);
      if (current === card) { current = null; }
    }
    var turn = card.closest("section.turn");
    card.remove();
    if (turn && !turn.querySelector(".card")) {
      var session = turn.closest("section.session");
      turn.remove();
      if (session && !session.querySelector(".card")) { session.remove(); }
    }
    if (!cards().length && countEl() && Number(countEl().textContent) === 0 && !document.getElementById("empty")) {
      var p = document.createElement("p");
      p.className = "empty";
      p.id = "empty";
      p.textContent = "No held call is waiting for an answer.";
      cardsBox().parentNode.insertBefore(p, cardsBox());
    }
    picked();
  }
  function added(html) {
    var box = cardsBox();
    if (!box) { return; }
    var t = document.createElement("template");
    t.innerHTML = html;
    var card = t.content.querySelector(".card");
    if (!card) { return; }
    var shown = document.getElementById(card.id);
    if (shown) {
      // R51: a card already shown takes the approvals given since; nothing else of it
      // changes (a reason being typed stays).
      var fresh = card.querySelector("dd.approvals");
      var old = shown.querySelector("dd.approvals");
      if (fresh && old) { old.replaceWith(fresh); }
      return;
    }
    bump(1);
    var where = box.getAttribute("data-add");
    if (where === "none") {
      var note = document.getElementById("new-note");
      if (note) {
        var n = Number(note.getAttribute("data-n") || "0") + 1;
        note.setAttribute("data-n", String(n));
        note.textContent = n + " new held call" + (n === 1 ? "" : "s") + " arrived beyond this page.";
        note.hidden = false;
      }
      return;
    }
    var empty = document.getElementById("empty");
    if (empty) { empty.remove(); }
    var bar = document.getElementById("bulk");
    if (bar) { bar.hidden = false; }
    var turn = t.content.querySelector("section.turn");
    var key = turn ? turn.getAttribute("data-key") : null;
    var found = null;
    var turns = box.querySelectorAll("section.turn");
    for (var i = 0; i < turns.length; i++) { if (turns[i].getAttribute("data-key") === key) { found = turns[i]; } }
    if (found) {
      var first = found.querySelector(".card");
      if (where === "top" && first) { found.insertBefore(card, first); } else { found.appendChild(card); }
    } else {
      var section = t.content.firstElementChild;
      if (where === "top") { box.insertBefore(section, box.firstChild); } else { box.appendChild(section); }
    }
    tick(box);
  }
  function ended(data) {
    var d;
    try { d = JSON.parse(data); } catch (e) { return; }
    if (d.counted) { bump(-1); }
    removeCard(document.getElementById("card-" + d.id));
  }
  function picked() {
    var boxes = document.querySelectorAll("input.pick");
    var n = 0;
    for (var i = 0; i < boxes.length; i++) {
      var card = boxes[i].closest(".card");
      if (boxes[i].checked) { n++; }
      if (card) { card.classList.toggle("picked", boxes[i].checked); }
    }
    var out = document.getElementById("picked");
    if (out) { out.textContent = n ? n + " selected" : ""; }
    return n;
  }
  if (delta) {
    var all = document.querySelector("label.pick-all");
    if (all) { all.hidden = false; }
    document.addEventListener("change", function (e) {
      if (e.target && e.target.id === "pick-all") {
        var boxes = document.querySelectorAll("input.pick");
        for (var i = 0; i < boxes.length; i++) { boxes[i].checked = e.target.checked; }
      }
      if (e.target && (e.target.id === "pick-all" || e.target.classList.contains("pick"))) { picked(); }
    });
    var bulk = document.getElementById("bulk");
    if (bulk) {
      bulk.addEventListener("submit", function (e) {
        e.preventDefault();
        var approve = !(e.submitter && e.submitter.value === "deny");
        var body = new URLSearchParams(new FormData(bulk));
        body.set("decision", approve ? "approve" : "deny");
        var n = body.getAll("item").length;
        if (!n) { toast("Select at least one held call first.", { error: true }); return; }
        var what = (approve ? "Approving " : "Denying ") + n + " held call" + (n === 1 ? "" : "s");
        later(what, function () {
          post("/bulk", body).then(function (r) {
            if (!r.ok && r.text.indexOf("bulk-result") < 0) { toast(refusalText(r.text), { error: true }); return; }
            var doc = new DOMParser().parseFromString(r.text, "text/html");
            var done = doc.querySelectorAll("li[id^=done-]");
            for (var i = 0; i < done.length; i++) { removeCard(document.getElementById("card-" + done[i].id.slice(5))); }
            var msg = doc.getElementById("bulk-done");
            var failed = doc.querySelectorAll("li[id^=failed-]").length;
            toast((msg ? msg.textContent : "Answered.") + (failed ? " " + failed + " could not be answered." : ""), { error: failed > 0 });
            var pa = document.getElementById("pick-all");
            if (pa) { pa.checked = false; }
            picked();
          }).catch(function () { toast("The answer could not be sent; nothing is known to be answered.", { error: true }); });
        });
      });
    }
  }
  function answer(card, approve) {
    if (!card) { return; }
    var form = card.querySelector(approve ? "form.approve" : "form.deny");
    if (!form) { toast("You may not answer this call.", { error: true }); return; }
    var prompt = card.querySelector("h3.prompt");
    var name = prompt ? prompt.textContent : card.id;
    var body = new URLSearchParams(new FormData(form));
    var what = (approve ? "Approving “" : "Denying “") + name + "”";
    card.classList.add("leaving");
    later(what, function () {
      post(form.action, body).then(function (r) {
        if (!r.ok) { card.classList.remove("leaving"); toast(refusalText(r.text), { error: true }); return; }
        removeCard(card);
        toast((approve ? "Approved “" : "Denied “") + name + "”.", { link: "/calls/" + card.getAttribute("data-id") });
      }).catch(function () { card.classList.remove("leaving"); toast("The answer could not be sent.", { error: true }); });
    }, function () { card.classList.remove("leaving"); setCurrent(card); });
    var next = cards()[cards().indexOf(card) + 1];
    if (next) { setCurrent(next); }
  }
  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey) { return; }
    var tag = e.target && e.target.tagName;
    if (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT") {
      if (e.key === "Escape") { e.target.blur(); if (current) { current.focus({ preventScroll: true }); } }
      return;
    }
    if (e.key === "u") { if (waiting) { e.preventDefault(); var t = document.getElementById("toast-text"); undo(t ? t.textContent.replace(/ in \d+ s…$/, "") : "the answer"); } return; }
    if (!delta) { return; }
    var list = cards();
    var i = current ? list.indexOf(current) : -1;
    if (e.key === "j") { e.preventDefault(); setCurrent(list[Math.min(i + 1, list.length - 1)] || null); }
    else if (e.key === "k") { e.preventDefault(); setCurrent(list[Math.max(i - 1, 0)] || null); }
    else if (e.key === "a") { e.preventDefault(); answer(current, true); }
    else if (e.key === "d") { e.preventDefault(); answer(current, false); }
    else if (e.key === "r") {
      e.preventDefault();
      if (!current) { setCurrent(list[0] || null); }
      var reason = current && current.querySelector("form.deny input[name=reason]");
      if (reason) { reason.focus(); }
    }
    else if (e.key === "x") {
      e.preventDefault();
      var box = current && current.querySelector("input.pick");
      if (box) { box.checked = !box.checked; picked(); }
    }
    else if (e.key === "?") { e.preventDefault(); var k = document.getElementById("keys"); if (k) { k.open = !k.open; } }
  });

  // ----- approve with edits -----
  // The card's edit form: JSON that does not read, or is not an object, is refused on the
  // card before anything is sent; the server's refusal (the tool's schema, the hashes, the
  // rights) is shown on the card too, the person's text kept. The server checks everything
  // again: this only saves a round trip and a lost edit.
  document.addEventListener("submit", function (e) {
    var f = e.target;
    if (!f || f.tagName !== "FORM" || !f.classList.contains("edit")) { return; }
    var area = f.querySelector("textarea[name=input]");
    var box = f.querySelector(".edit-error");
    if (!area || !box || !window.fetch) { return; }
    e.preventDefault();
    function say(m) {
      box.textContent = m;
      box.hidden = false;
      area.setAttribute("aria-invalid", "true");
      area.focus();
    }
    var v;
    try { v = JSON.parse(area.value); } catch (err) {
      say("The input is not JSON (" + err.message + "); nothing was sent.");
      return;
    }
    if (v === null || typeof v !== "object" || Array.isArray(v)) {
      say("The input must be a JSON object; nothing was sent.");
      return;
    }
    box.hidden = true;
    area.removeAttribute("aria-invalid");
    var card = f.closest(".card");
    post(f.action, new URLSearchParams(new FormData(f))).then(function (r) {
      if (!r.ok) { say(refusalText(r.text)); return; }
      var id = card ? card.getAttribute("data-id") : "";
      var prompt = card && card.querySelector("h3.prompt");
      var name = prompt ? prompt.textContent : id;
      // On the list the card leaves with a confirmation — also when the live update took
      // it away first (the answer's own `ended` event can outrun this response).
      if (card && cardsBox()) {
        if (cardsBox().contains(card)) { removeCard(card); }
        toast("Approved “" + name + "” with the edited input.", { link: "/calls/" + id });
      } else {
        window.location.assign("/calls/" + id);
      }
    }).catch(function () { say("The answer could not be sent; nothing is known to be approved."); });
  });

  // ----- live updates -----
  if (!live || !window.EventSource) { return; }
  function busy() {
    // Never replace a form someone is typing in.
    var el = document.activeElement;
    if (el && live.contains(el) && (el.tagName === "INPUT" || el.tagName === "TEXTAREA")) { return true; }
    // A field counts once a person changed it (the grant form comes pre-filled), and an
    // open grant form counts as soon as it is opened.
    var inputs = live.querySelectorAll("input[type=text], textarea");
    for (var i = 0; i < inputs.length; i++) { if (inputs[i].value !== inputs[i].defaultValue) { return true; } }
    if (live.querySelector("details.grant[open], details.edit[open]")) { return true; }
    return false;
  }
  function refresh() {
    if (busy()) { if (stale) { stale.hidden = false; } return; }
    var url = window.location.pathname + window.location.search + (window.location.search ? "&" : "?") + "fragment=1";
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { if (!r.ok) { throw new Error(String(r.status)); } return r.text(); })
      .then(function (html) { live.innerHTML = html; live.setAttribute("data-refreshed", String(Date.now())); tick(live); })
      .catch(function () { if (stale) { stale.hidden = false; } });
  }
  var source = new EventSource(live.getAttribute("data-events") || "/events");
  if (delta) {
    source.addEventListener("added", function (e) { added(e.data); live.setAttribute("data-refreshed", String(Date.now())); });
    source.addEventListener("ended", function (e) { ended(e.data); live.setAttribute("data-refreshed", String(Date.now())); });
    source.addEventListener("resync", function () { if (stale) { stale.hidden = false; } });
  } else {
    source.addEventListener("changed", refresh);
    source.addEventListener("resync", refresh);
  }
})();
