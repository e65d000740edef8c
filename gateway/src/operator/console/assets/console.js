// tower-chat console: keeps the approvals inbox (the pending and the decided calls, their counts in the
// headings, the navigation and the tab's title), every other page's count of waiting calls (navigation and tab
// title) and the call log's newest page current without a reload, says
// when it last heard from the gateway (and when it cannot reach it), and sends decisions without leaving the
// page, so one that fails to reach the gateway is shown as failed and stays in its form. The only script of the
// console, served from the binary; the Content-Security-Policy forbids inline code. Values are put into the page
// with textContent and DOM properties; inbox rows are never built from strings: new rows are the server's own
// (escaped) rows, taken from the inbox page parsed as an inert document (DOMParser runs no script) and moved in
// as nodes.
"use strict";

(function () {
  const table = document.getElementById("approvals");
  const decidedTable = document.getElementById("decided-approvals");
  if (!table || !decidedTable) {
    return;
  }
  const more = document.getElementById("more-approvals");
  const sections = [
    { table: table, empty: document.getElementById("no-approvals"), count: document.getElementById("pending-count") },
    { table: decidedTable, empty: document.getElementById("no-decided"), count: document.getElementById("decided-count") },
  ];
  const baseTitle = document.title.replace(/^\(\d+\+?\) /, "");

  // "updated N s ago", or that the gateway cannot be reached, above the inbox.
  const liveness = document.createElement("p");
  liveness.id = "liveness";
  liveness.className = "liveness";
  liveness.setAttribute("role", "status");
  table.closest("section").before(liveness);
  let heard = Date.now();
  let reachable = true;

  function showLiveness() {
    const ago = span((Date.now() - heard) / 1000);
    liveness.classList.toggle("error", !reachable);
    liveness.dataset.state = reachable ? "live" : "unreachable";
    liveness.textContent = reachable
      ? "Updated " + ago + " ago."
      : "Gateway unreachable: the list below is from " + ago + " ago and may be stale. Retrying…";
    for (const s of sections) s.table.classList.toggle("stale", !reachable);
  }

  // A decision is sent with fetch: on success the page moves to the gateway's answer (the inbox with its
  // banner naming the decision); on a network failure or a server error the form stays as it was, with the
  // error beside it.
  const failure = document.createElement("p");
  failure.id = "decision-error";
  failure.className = "error hidden";
  failure.setAttribute("role", "alert");
  liveness.after(failure);

  document.addEventListener("submit", async (event) => {
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

  // Which approvals the page shows, in which state: "id:status" of every row, pending table first.
  function shown() {
    return sections
      .map((s) => Array.from(s.table.tBodies[0].rows, (r) => r.dataset.id + ":" + r.dataset.status).join(","))
      .join("|");
  }

  function listed(list) {
    const pending = list.data.filter((a) => a.status === "pending");
    const decided = list.data.filter((a) => a.status !== "pending");
    return [pending, decided].map((l) => l.map((a) => a.id + ":" + a.status).join(",")).join("|");
  }

  // The rows changed: take both tables' rows from the inbox as the server renders it now. A reason typed into a
  // form that stays is kept.
  async function replaceRows() {
    const response = await fetch("/console", { credentials: "same-origin", headers: { accept: "text/html" } });
    if (!response.ok) throw new Error("HTTP " + response.status);
    const page = new DOMParser().parseFromString(await response.text(), "text/html");
    for (const s of sections) {
      const fresh = page.getElementById(s.table.id);
      if (!fresh) throw new Error("the inbox page has no #" + s.table.id);
      const typed = new Map();
      for (const input of s.table.querySelectorAll("tr[data-id] input[name=reason]")) {
        if (input.value) typed.set(input.closest("tr").dataset.id, input.value);
      }
      const body = document.importNode(fresh.tBodies[0], true);
      for (const [id, value] of typed) {
        const row = Array.from(body.rows).find((r) => r.dataset.id === id);
        const input = row && row.querySelector("input[name=reason]");
        if (input) input.value = value;
      }
      s.table.tBodies[0].replaceWith(body);
    }
  }

  function counts(list) {
    const waiting = list.data.filter((a) => a.status === "pending").length;
    const label = waiting + (list.has_more ? "+" : "");
    sections[0].count.textContent = label;
    sections[1].count.textContent = String(list.data.length - waiting);
    const nav = document.getElementById("nav-pending-count");
    if (nav) nav.textContent = "(" + label + ")";
    document.title = "(" + label + ") " + baseTitle;
  }

  async function update(list) {
    if (listed(list) !== shown()) {
      await replaceRows();
    }
    const byId = new Map(list.data.map((a) => [a.id, a]));
    for (const s of sections) {
      for (const row of Array.from(s.table.tBodies[0].rows)) {
        const a = byId.get(row.dataset.id);
        if (!a) continue;
        row.querySelector("td.age").textContent = span(list.now - a.paused_at);
        row.querySelector("td.expires").textContent = span(a.expires_in);
      }
      const none = s.table.tBodies[0].rows.length === 0;
      s.table.classList.toggle("hidden", none);
      s.empty.classList.toggle("hidden", !none);
    }
    counts(list);
    if (more) more.classList.toggle("hidden", !list.has_more);
    document.body.dataset.inboxUpdated = String(list.now);
  }

  let refreshing = false;

  async function refresh() {
    // A slow answer is not asked for again before it arrives.
    if (refreshing) return;
    refreshing = true;
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
        await update(await response.json());
        heard = Date.now();
        reachable = true;
      } else {
        reachable = false;
      }
    } catch (e) {
      // The gateway restarting or the network down: said on the page; the next tick tries again.
      reachable = false;
    } finally {
      refreshing = false;
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

// Every page but the inbox (which refreshes its whole list): the navigation's count of the calls waiting for a
// decision and the tab's title follow what waits, polled from a small JSON answer.
(function () {
  const nav = document.getElementById("nav-pending-count");
  if (!nav || document.getElementById("approvals")) {
    return;
  }
  const baseTitle = document.title.replace(/^\(\d+\+?\) /, "");
  let busy = false;

  async function poll() {
    if (busy) return;
    busy = true;
    try {
      const response = await fetch("/console/api/waiting", { credentials: "same-origin", headers: { accept: "application/json" } });
      if (response.status === 401) {
        window.location.assign("/console/login");
        return;
      }
      if (!response.ok) return;
      const waiting = await response.json();
      const label = waiting.count + (waiting.more ? "+" : "");
      nav.textContent = "(" + label + ")";
      document.title = "(" + label + ") " + baseTitle;
      document.body.dataset.waitingUpdated = String(Date.now());
    } catch (e) {
      // The gateway restarting: the next tick asks again.
    } finally {
      busy = false;
    }
  }

  window.setInterval(poll, 2000);
})();

// A link to a turn, a call or a message inside a collapsed turn of a timeline (its turn index, the call log's
// links) opens that turn, so the browser has something to scroll to.
(function () {
  function reveal() {
    if (!window.location.hash) return;
    let target = null;
    try {
      target = document.getElementById(decodeURIComponent(window.location.hash.slice(1)));
    } catch (e) {
      return;
    }
    const turn = target && target.closest("details.turn");
    if (turn && !turn.open) {
      turn.open = true;
      target.scrollIntoView();
    }
  }
  window.addEventListener("hashchange", reveal);
  reveal();
})();
