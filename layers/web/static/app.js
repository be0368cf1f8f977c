// toolgate approval page: refresh the live part when the server says something changed
// (server-sent events on /events). No inline script; the page works without this file.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.EventSource) { return; }
  var stale = document.getElementById("stale");
  function busy() {
    // Never replace a form someone is typing in.
    var el = document.activeElement;
    if (el && live.contains(el) && (el.tagName === "INPUT" || el.tagName === "TEXTAREA")) { return true; }
    // A field counts once a person changed it (the grant form comes pre-filled), and an
    // open grant form counts as soon as it is opened.
    var inputs = live.querySelectorAll("input[type=text], textarea");
    for (var i = 0; i < inputs.length; i++) { if (inputs[i].value !== inputs[i].defaultValue) { return true; } }
    if (live.querySelector("details.grant[open]")) { return true; }
    return false;
  }
  function refresh() {
    if (busy()) { if (stale) { stale.hidden = false; } return; }
    var url = window.location.pathname + "?fragment=1";
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { if (!r.ok) { throw new Error(String(r.status)); } return r.text(); })
      .then(function (html) { live.innerHTML = html; live.setAttribute("data-refreshed", String(Date.now())); })
      .catch(function () { if (stale) { stale.hidden = false; } });
  }
  var source = new EventSource("/events");
  source.addEventListener("changed", refresh);
})();
