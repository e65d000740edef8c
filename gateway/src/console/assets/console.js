// tower-chat console: keeps the approvals inbox current without a reload. The only script of the console,
// served from the binary; the Content-Security-Policy forbids inline code. Values are put into the page with
// textContent and DOM properties only, never parsed as HTML.
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

  function span(seconds) {
    const s = Math.max(0, Math.floor(seconds));
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min";
    if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
    return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
  }

  function cell(row, className, text) {
    const td = document.createElement("td");
    if (className) td.className = className;
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
    cell(row, "tool", a.tool);
    const pre = document.createElement("pre");
    pre.textContent = JSON.stringify(a.arguments, null, 2);
    cell(row, "arguments").appendChild(pre);
    cell(row, "reason", a.reason || "\u2014");
    cell(row, "caller", a.caller || "(no key)");
    const link = document.createElement("a");
    link.className = "conversation";
    link.href = "/console/conversation?id=" + encodeURIComponent(a.conversation);
    link.textContent = a.conversation;
    cell(row, "").appendChild(link);
    cell(row, "age");
    cell(row, "expires");
    cell(row, "status");
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
      if (response.ok) update(await response.json());
    } catch (e) {
      // The gateway restarting or the network hiccuping: the next tick tries again.
    }
  }

  window.setInterval(refresh, 1000);
})();
