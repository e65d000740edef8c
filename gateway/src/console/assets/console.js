// tower-chat console: keeps the approvals inbox and the call log's newest page current without a reload, says when it last heard from the
// gateway (and when it cannot reach it), and sends decisions without leaving the page, so one that fails to
// reach the gateway is shown as failed and stays in its form. The only script of the console, served from the
// binary; the Content-Security-Policy forbids inline code. Values are put into the page with textContent and
// DOM properties only, never as HTML.
"use strict";

(function () {
  const table = document.getElementById("approvals");
  if (!table) {
    return;
  }
  const csrf = document.querySelector('meta[name="csrf-token"]').getAttribute("content");
  const body = table.tBodies[0];
  const empty = document.getElementById("no-approvals");
  const more = document.getElementById("more-approvals");

  // "updated N s ago", or that the gateway cannot be reached, above the inbox.
  const liveness = document.createElement("p");
  liveness.id = "liveness";
  liveness.className = "liveness";
  liveness.setAttribute("role", "status");
  table.before(liveness);
  let heard = Date.now();
  let reachable = true;

  function showLiveness() {
    const ago = span((Date.now() - heard) / 1000);
    liveness.classList.toggle("error", !reachable);
    liveness.dataset.state = reachable ? "live" : "unreachable";
    liveness.textContent = reachable
      ? "Updated " + ago + " ago."
      : "Gateway unreachable: the list below is from " + ago + " ago and may be stale. Retrying…";
    table.classList.toggle("stale", !reachable);
  }

  // A decision is sent with fetch: on success the page moves to the gateway's answer (the inbox with its
  // notice); on a network failure or a server error the form stays as it was, with the error beside it.
  const failure = document.createElement("p");
  failure.id = "decision-error";
  failure.className = "error hidden";
  failure.setAttribute("role", "alert");
  liveness.after(failure);

  table.addEventListener("submit", async (event) => {
    const form = event.target;
    if (!form.classList.contains("decide")) return;
    event.preventDefault();
    const data = new URLSearchParams(new FormData(form, event.submitter));
    const buttons = form.querySelectorAll("button");
    buttons.forEach((b) => (b.disabled = true));
    try {
      const response = await fetch(form.action, {
        method: "POST",
        credentials: "same-origin",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: data,
      });
      if (response.ok) {
        window.location.assign(response.url);
        return;
      }
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const said = page.querySelector(".error");
      fail((said ? said.textContent : "") + " (HTTP " + response.status + ")");
    } catch (e) {
      fail("The decision did not reach the gateway (it cannot be reached). Nothing was decided; try again.");
    } finally {
      buttons.forEach((b) => (b.disabled = false));
    }
  });

  function fail(message) {
    failure.textContent = message;
    failure.classList.remove("hidden");
  }

  function span(seconds) {
    const s = Math.max(0, Math.floor(seconds));
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min";
    if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
    return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
  }

  function cell(row, className, text, label) {
    const td = document.createElement("td");
    if (className) td.className = className;
    if (label) td.dataset.label = label;
    if (text !== undefined) td.textContent = text;
    row.appendChild(td);
    return td;
  }

  function button(value, className, label) {
    const b = document.createElement("button");
    b.type = "submit";
    b.name = "decision";
    b.value = value;
    b.className = className;
    b.textContent = label;
    return b;
  }

  // The same row the server renders (pages.rs, approval_row).
  function build(a) {
    const row = document.createElement("tr");
    row.dataset.id = a.id;
    cell(row, "tool", a.tool, "Tool");
    const pre = document.createElement("pre");
    pre.textContent = JSON.stringify(a.arguments, null, 2);
    cell(row, "arguments", undefined, "Arguments").appendChild(pre);
    cell(row, "reason", a.reason || "\u2014", "Policy's reason");
    cell(row, "caller", a.caller || "(no key)", "Caller");
    const link = document.createElement("a");
    link.className = "conversation";
    link.href = "/console/conversation?id=" + encodeURIComponent(a.conversation);
    link.textContent = a.conversation;
    cell(row, "", undefined, "Conversation").appendChild(link);
    cell(row, "age", undefined, "Age");
    cell(row, "expires", undefined, "Expires in");
    cell(row, "status", undefined, "Status");
    cell(row, "actions");
    return row;
  }

  function actions(row, a) {
    const td = row.querySelector("td.actions");
    if (row.dataset.status === a.status) return;
    row.dataset.status = a.status;
    td.replaceChildren();
    if (a.status !== "pending") {
      const waiting = document.createElement("span");
      waiting.className = "waiting";
      waiting.textContent = "waiting for the client to resume";
      td.appendChild(waiting);
      return;
    }
    const form = document.createElement("form");
    form.method = "post";
    form.action = "/console/approvals/" + encodeURIComponent(a.id) + "/decision";
    form.className = "decide";
    const token = document.createElement("input");
    token.type = "hidden";
    token.name = "csrf";
    token.value = csrf;
    const reason = document.createElement("input");
    reason.type = "text";
    reason.name = "reason";
    reason.placeholder = "reason";
    reason.maxLength = 4096;
    reason.setAttribute("aria-label", "reason");
    form.append(token, reason, button("approve", "approve", "Approve"), button("deny", "deny", "Deny"));
    td.appendChild(form);
  }

  function update(list) {
    const seen = new Set();
    const rows = new Map();
    for (const row of Array.from(body.rows)) rows.set(row.dataset.id, row);
    for (const a of list.data) {
      seen.add(a.id);
      let row = rows.get(a.id);
      if (!row) {
        row = build(a);
        body.appendChild(row);
      }
      row.querySelector("td.age").textContent = span(list.now - a.paused_at);
      row.querySelector("td.expires").textContent = span(a.expires_in);
      row.querySelector("td.status").textContent = a.status;
      actions(row, a);
    }
    for (const [id, row] of rows) {
      if (!seen.has(id)) row.remove();
    }
    const none = list.data.length === 0;
    table.classList.toggle("hidden", none);
    empty.classList.toggle("hidden", !none);
    if (more) more.classList.toggle("hidden", !list.has_more);
    document.body.dataset.inboxUpdated = String(list.now);
  }

  async function refresh() {
    try {
      const response = await fetch("/console/api/approvals", {
        credentials: "same-origin",
        headers: { accept: "application/json" },
      });
      if (response.status === 401) {
        window.location.assign("/console/login");
        return;
      }
      if (response.ok) {
        update(await response.json());
        heard = Date.now();
        reachable = true;
      } else {
        reachable = false;
      }
    } catch (e) {
      // The gateway restarting or the network down: said on the page; the next tick tries again.
      reachable = false;
    }
    showLiveness();
  }

  showLiveness();
  window.setInterval(refresh, 1000);
})();

// The call log's newest page: calls recorded since the newest row (with the page's filters) are put on top,
// built like the server's rows (calls.rs, Row::markup) from the text the gateway formatted.
(function () {
  const table = document.getElementById("calls");
  if (!table || !table.dataset.poll) {
    return;
  }
  const body = table.tBodies[0];
  const empty = document.getElementById("no-calls");
  const announce = document.createElement("p");
  announce.id = "calls-live";
  announce.className = "liveness";
  announce.setAttribute("role", "status");
  announce.dataset.state = "live";
  announce.textContent = "New calls appear at the top.";
  table.before(announce);
  let busy = false;

  function cell(row, className, label, text) {
    const td = document.createElement("td");
    td.className = className;
    td.dataset.label = label;
    if (text !== undefined) td.textContent = text;
    row.appendChild(td);
    return td;
  }

  function build(c) {
    const row = document.createElement("tr");
    row.dataset.callId = c.call_id;
    row.dataset.status = c.status;
    if (c.is_error) row.className = "failed";
    const link = document.createElement("a");
    link.href = c.timeline;
    link.textContent = c.time;
    cell(row, "time", "Time").appendChild(link);
    cell(row, "caller", "Caller", c.caller);
    cell(row, "model", "Model", c.model);
    const outcome = cell(row, "outcome", "Outcome");
    if (c.is_error) {
      const strong = document.createElement("strong");
      strong.className = "outcome-error";
      strong.textContent = c.outcome;
      outcome.appendChild(strong);
    } else {
      outcome.textContent = c.outcome;
    }
    cell(row, "first-message", "First message", c.first_message);
    cell(row, "number", "Tokens", c.tokens);
    cell(row, "number", "Cost", c.cost);
    cell(row, "number", "Latency", c.latency);
    cell(row, "number", "Time to first token", c.ttft);
    return row;
  }

  async function poll() {
    if (busy) return;
    busy = true;
    try {
      const url = new URL(table.dataset.poll, window.location.href);
      if (table.dataset.newest) url.searchParams.set("after", table.dataset.newest);
      const response = await fetch(url, { credentials: "same-origin", headers: { accept: "application/json" } });
      if (response.status === 401) {
        window.location.assign("/console/login");
        return;
      }
      if (!response.ok) throw new Error("HTTP " + response.status);
      const page = await response.json();
      // Newest first: inserted in reverse, each on top.
      for (const c of page.data.slice().reverse()) {
        if (body.querySelector('tr[data-call-id="' + CSS.escape(c.call_id) + '"]')) continue;
        body.insertBefore(build(c), body.firstChild);
      }
      if (page.newest) table.dataset.newest = page.newest;
      if (page.data.length > 0) {
        table.classList.remove("hidden");
        empty.classList.add("hidden");
        announce.textContent = page.data.length + (page.data.length === 1 ? " new call" : " new calls") + " added at the top.";
      }
      announce.dataset.state = "live";
      announce.classList.remove("error");
    } catch (e) {
      announce.dataset.state = "unreachable";
      announce.classList.add("error");
      announce.textContent = "Gateway unreachable: new calls will appear once it answers again.";
    } finally {
      busy = false;
    }
  }

  window.setInterval(poll, 2000);
})();
