// The dashboard page: a small vanilla script (no build step, nothing fetched but this server's
// API). Two views by path: the board (/) and a run (/runs/<id>). Live: /api/stream says the
// board changed, the page reads its current page again; /api/runs/<id>/stream does the same
// for one run and relays agent events.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) e.append(c.nodeType ? c : String(c));
  return e;
};
const LABELS = { "needs-you": "Needs you", orphaned: "Orphaned", working: "Working", stale: "Stale", failed: "Failed", completed: "Completed" };
const PER_COLUMN = 50;
let session = null;
let stream = null;
let selected = 0;
let rendered = 0; // board renders, for tests waiting on a fresh one

async function api(path, opts = {}) {
  const res = await fetch(path, { credentials: "same-origin", ...opts });
  if (res.status === 401) { location.reload(); throw new Error("logged out"); }
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw Object.assign(new Error(body.error || res.statusText), { code: body.code });
  return body;
}

async function post(path, body) {
  const send = () => api(path, { method: "POST", headers: { "content-type": "application/json", "x-babysitter-csrf": session.csrf }, body: JSON.stringify(body) });
  try {
    return await send();
  } catch (e) {
    // Another orchestrator took over since the session was read (its CSRF secret is its own):
    // read the session again and try once more.
    if (e.code !== "csrf") throw e;
    session = await api("/api/session");
    return send();
  }
}

// ---------------------------------------------------------------- theme
function applyTheme(t) {
  if (t) document.documentElement.dataset.theme = t; else delete document.documentElement.dataset.theme;
}
function toggleTheme() {
  const dark = document.documentElement.dataset.theme
    ? document.documentElement.dataset.theme === "dark"
    : matchMedia("(prefers-color-scheme: dark)").matches;
  const next = dark ? "light" : "dark";
  localStorage.setItem("babysitter-theme", next);
  applyTheme(next);
}
applyTheme(localStorage.getItem("babysitter-theme"));

// ---------------------------------------------------------------- board
function params() {
  const p = new URLSearchParams();
  const q = $("#search").value.trim();
  if (q) p.set("q", q);
  const s = $("#status").value;
  if (s) p.set("status", s);
  return p;
}

async function loadBoard() {
  const p = params();
  p.set("limit", String(PER_COLUMN));
  renderBoard(await api("/api/board?" + p));
}

function card(d) {
  const pending = Object.entries(d.pending || {}).filter(([, n]) => n > 0).map(([k, n]) => `${n} ${k}`).join(", ");
  return el("a", { class: "card", href: "/runs/" + encodeURIComponent(d.runId), "data-run": d.runId, "data-bucket": d.bucket },
    el("div", { class: "id" }, d.runId),
    el("div", {}, d.processId || "(no process id)"),
    el("div", { class: "meta" }, [d.project, d.status, pending, d.corrupt ? "journal corrupt" : ""].filter(Boolean).join(" · ")));
}

function renderBoard(b) {
  const needs = b.counts["needs-you"] || 0;
  const banner = $("#banner");
  banner.hidden = needs === 0;
  banner.textContent = needs === 1 ? "1 run needs you" : `${needs} runs need you`;
  const keep = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.run : null;
  const board = el("div", { class: "board", "data-version": String(b.version) });
  for (const bucket of session.buckets) {
    const cards = b.columns[bucket] || [];
    const total = b.counts[bucket] || 0;
    const col = el("section", { class: "column", "data-bucket": bucket, "aria-label": LABELS[bucket] },
      el("h2", {}, el("span", {}, LABELS[bucket]), el("span", { class: "count" }, String(total))));
    for (const d of cards) col.append(card(d));
    if (total > cards.length) col.append(el("div", { class: "more muted" }, `+${total - cards.length} more: search to narrow`));
    board.append(col);
  }
  const main = $("#main");
  main.replaceChildren(board);
  rendered++;
  main.dataset.rendered = String(rendered);
  const cards = [...document.querySelectorAll(".card")];
  if (keep) {
    const i = cards.findIndex((c) => c.dataset.run === keep);
    if (i >= 0) { selected = i; cards[i].focus(); }
  }
}

let pending = null;
function refreshSoon(fn) {
  // One read per animation frame however many versions arrived.
  if (pending) return;
  pending = requestAnimationFrame(() => { pending = null; fn().catch((e) => console.warn(e)); });
}

function follow(url, handlers) {
  if (stream) stream.close();
  stream = new EventSource(url);
  for (const [ev, fn] of Object.entries(handlers)) stream.addEventListener(ev, fn);
}

// ---------------------------------------------------------------- run detail
function fmtMs(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  return Math.round(ms / 60000) + " min";
}

function taskBox(t, d) {
  const facts = [
    t.kind,
    t.attempt ? "attempt " + t.attempt : "",
    t.worker ? "worker " + t.worker : "",
    t.harness ? "harness " + t.harness : "",
    fmtMs(t.durationMs),
    t.costUsd ? "$" + t.costUsd.toFixed(4) : "",
    t.inputTokens || t.outputTokens ? `${t.inputTokens || 0}/${t.outputTokens || 0} tokens` : "",
    t.sleepUntil ? "until " + t.sleepUntil : "",
  ].filter(Boolean).join(" · ");
  const box = el("div", { class: "task", "data-effect": t.effectId, "data-state": t.state, "data-kind": t.kind },
    el("div", {}, el("span", { class: "state" }, t.state), " ", t.label || t.title),
    el("div", { class: "muted" }, facts));
  if (t.childRun) box.append(el("a", { href: "/runs/" + encodeURIComponent(t.childRun) }, "subprocess run"));
  if (t.error) box.append(el("div", { class: "error" }, t.error.message || JSON.stringify(t.error)));
  if (t.kind !== "breakpoint" && t.kind !== "sleep") {
    for (const s of ["stdout", "stderr"]) {
      box.append(el("button", { type: "button", class: "log-btn", onclick: () => showLog(d.run.runId, t.effectId, s, 0) }, s));
    }
  }
  if (t.agentEvents) {
    box.append(el("button", { type: "button", class: "log-btn agent-btn", onclick: () => showAgentEvents(d.run.runId, t.effectId) }, `agent events (${t.agentEvents})`));
  }
  return box;
}

// One universal agent event as a line: its type and what it says (text, tool call, result).
function agentText(type, data) {
  const cut = (s) => (s.length > 300 ? s.slice(0, 300) + "…" : s);
  const item = data && data.item;
  if (item) {
    const parts = (item.content || []).map((p) =>
      p.type === "tool_call" ? `${p.name}(${p.arguments || ""})`
        : p.type === "tool_result" ? `→ ${p.output || ""}`
        : p.type === "status" ? `${p.label}${p.detail ? " " + p.detail : ""}`
        : p.text || "");
    return cut(`${item.kind}${item.role ? " " + item.role : ""}${item.status === "failed" ? " (failed)" : ""}: ${parts.join(" ")}`);
  }
  if (data && data.message) return cut(data.message);
  if (data && data.delta) return cut(data.delta);
  if (data && data.turn_id) return data.turn_id;
  if (data && data.metadata) return cut(Object.entries(data.metadata).filter(([, v]) => v !== null).map(([k, v]) => `${k} ${v}`).join(", "));
  return "";
}

// The live agent events of the run on screen.
const liveAgent = [];

function agentItem(time, type, data, effectId) {
  return el("li", { class: "agent-event", "data-type": type },
    el("span", { class: "muted" }, `${time ? time.slice(11, 23) : ""} ${effectId || ""} `),
    el("b", {}, type), " ", agentText(type, data));
}

// An agent task's stored events (its JSON lines, read whole) as a timeline.
async function showAgentEvents(runId, effectId) {
  let text = "", offset = 0, total = 0;
  for (;;) {
    const r = await api(`/api/runs/${encodeURIComponent(runId)}/tasks/${encodeURIComponent(effectId)}/log/agentEvents?offset=${offset}`);
    text += r.text || "";
    total = r.total;
    if (r.next === null || r.next === undefined) break;
    offset = r.next;
  }
  const events = text.split("\n").filter(Boolean).map((l) => { try { return JSON.parse(l); } catch { return null; } }).filter(Boolean);
  $("#log-view").replaceChildren(
    el("h3", {}, `${effectId} agent events (${events.length}, ${total} bytes)`),
    el("ol", { id: "agent-timeline", class: "timeline" },
      events.filter((e) => e.type !== "item.started").map((e) => agentItem(e.time, e.type, e.data))));
}

async function showLog(runId, effectId, stream, offset) {
  const r = await api(`/api/runs/${encodeURIComponent(runId)}/tasks/${encodeURIComponent(effectId)}/log/${stream}?offset=${offset}`);
  let pre = $("#log-view");
  if (offset === 0) {
    pre.replaceChildren(el("h3", {}, `${effectId} ${stream} (${r.total} bytes)`), el("pre", { class: "log" }, r.text || "(empty)"));
  } else {
    $("pre.log", pre).append(r.text);
  }
  $("#log-more")?.remove();
  if (r.next !== null && r.next !== undefined) {
    pre.append(el("button", { id: "log-more", type: "button", onclick: () => showLog(runId, effectId, stream, r.next) }, "more"));
  }
}

function breakpointForm(d, t) {
  const comment = el("textarea", { "aria-label": "Comment", id: "bp-comment-" + t.effectId });
  const decide = (approved) => async () => {
    try {
      await post(`/api/runs/${encodeURIComponent(d.run.runId)}/breakpoints/${encodeURIComponent(t.effectId)}`, { approved, comment: comment.value });
      await loadRun(d.run.runId);
    } catch (e) { alert(e.message); }
  };
  return el("div", { class: "breakpoint", "data-effect": t.effectId },
    el("strong", {}, "Breakpoint: ", t.question || t.label || t.title),
    comment,
    el("div", { class: "actions" },
      el("button", { type: "button", class: "primary approve", onclick: decide(true) }, "Approve"),
      el("button", { type: "button", class: "reject", onclick: decide(false) }, "Reject")));
}

function costSection(c) {
  const s = c.spent || {};
  const b = c.budget || null;
  const rows = [];
  const line = (name, spent, max) => {
    const pct = max ? Math.min(100, (100 * spent) / max) : 0;
    rows.push(el("div", {}, `${name}: ${spent}${max ? " of " + max : ""}`,
      max ? el("div", { class: "bar", role: "img", "aria-label": `${pct.toFixed(0)}% of the budget` }, el("span", { style: `width:${pct}%` })) : ""));
  };
  line("tokens", s.tokens || 0, b && b.maxTokens);
  line("cost USD", (s.costUsd || 0).toFixed(4), b && b.maxCostUsd);
  if (s.tasks !== undefined) line("tasks", s.tasks, b && b.maxTasks);
  if (c.exceeded) rows.push(el("div", { class: "error" }, "budget exceeded: " + c.exceeded.limit));
  return el("section", { id: "cost" }, el("h2", {}, b ? "Cost against budget" : "Cost (no budget set)"), ...rows);
}

async function loadJournal(runId, from) {
  const j = await api(`/api/runs/${encodeURIComponent(runId)}/journal?from=${from}`);
  const body = $("#journal-rows");
  if (from <= 1) body.replaceChildren();
  for (const e of j.events) {
    body.append(e.verified
      ? el("tr", { "data-seq": e.seq }, el("td", {}, e.seq), el("td", {}, e.type), el("td", {}, e.recordedAt),
        el("td", { class: "verified" }, "✓ checksum " + e.checksum.slice(0, 12) + (e.prevHash ? " · chain ok" : "")), el("td", { class: "data" }, e.data))
      : el("tr", { "data-seq": e.seq, class: "corrupt-row" }, el("td", {}, e.seq), el("td", { class: "corrupt", colspan: "4" }, "✗ does not verify: " + e.error)));
  }
  $("#journal-more")?.remove();
  if (j.next) $("#journal").append(el("button", { id: "journal-more", type: "button", onclick: () => loadJournal(runId, j.next) }, "more events"));
}

async function loadRun(runId) {
  const d = await api("/api/runs/" + encodeURIComponent(runId));
  const r = d.run;
  const tasks = Object.fromEntries(d.tasks.map((t) => [t.effectId, t]));
  const caps = d.capabilities;
  const j = d.journal;
  const main = $("#main");
  // A live refresh keeps what was typed into comments (and where the cursor was).
  const typed = Object.fromEntries([...main.querySelectorAll("textarea[id]")].map((t) => [t.id, t.value]));
  const focused = document.activeElement && document.activeElement.id;
  const waiting = d.tasks.filter((t) => t.kind === "breakpoint" && (t.state === "requested" || t.state === "queued"));
  const actions = el("div", { class: "actions" });
  if (!["completed", "failed", "cancelled", "halted"].includes(r.status)) {
    if (caps.cancel) actions.append(el("button", { type: "button", id: "cancel-run", onclick: async () => { if (confirm("Cancel this run?")) { await post(`/api/runs/${encodeURIComponent(runId)}/cancel`, { reason: "cancelled from the dashboard" }); loadRun(runId); } } }, "Cancel run"));
    if (caps.halt) actions.append(el("button", { type: "button", id: "halt-run", onclick: async () => { if (confirm("Halt this run?")) { await post(`/api/runs/${encodeURIComponent(runId)}/halt`, { reason: "halted from the dashboard" }); loadRun(runId); } } }, "Halt run"));
  }
  main.replaceChildren(
    el("p", {}, el("a", { href: "/", id: "back" }, "← board")),
    el("h1", { id: "run-title" }, r.processId || r.runId),
    el("p", { id: "run-status", "data-bucket": r.bucket, "data-status": r.status },
      `${r.runId} · ${r.project} · ${r.status} · ${LABELS[r.bucket] || r.bucket}`, r.statusReason ? " · " + r.statusReason : ""),
    j.corrupt ? el("p", { class: "corrupt", id: "journal-corrupt" }, `Journal corrupt at event ${j.corrupt.seq}: ${j.corrupt.message}`)
      : el("p", { class: "verified", id: "journal-ok" }, `Journal verified: ${j.verified} events${j.linked ? ", hash chain intact" : " (checksums; this layout has no hash chain)"}`),
    actions,
    ...(caps.resolve ? waiting.map((t) => breakpointForm(d, t)) : waiting.map((t) => el("p", { class: "breakpoint" }, "Waiting on breakpoint: ", t.question || t.label))),
    el("section", {}, el("h2", {}, "Pipeline"),
      el("div", { class: "pipeline", id: "pipeline" },
        d.stages.map((ids, i) => el("div", { class: "stage", "data-stage": String(i), "data-size": String(ids.length) },
          el("h3", {}, ids.length > 1 ? `stage ${i + 1}: ${ids.length} in parallel` : `stage ${i + 1}`),
          ids.map((id) => tasks[id] ? taskBox(tasks[id], d) : null))))),
    el("section", { id: "log-view" }),
    costSection(d.cost || {}),
    el("section", {}, el("h2", {}, "Timeline"),
      el("ol", { id: "timeline" }, d.timeline.slice(-200).map((e) => el("li", {}, `${e.at} ${e.type} ${e.text || ""}`))),
      el("h3", {}, "Live agent events"),
      el("ol", { id: "agent-events", class: "timeline" }, liveAgent.map((e) => agentItem(e.time, e.kind, e.data, e.effectId)))),
    el("section", { id: "journal" }, el("h2", {}, "Raw journal"),
      el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "seq"), el("th", {}, "type"), el("th", {}, "recorded"), el("th", {}, "verification"), el("th", {}, "data"))),
        el("tbody", { id: "journal-rows" }))),
  );
  for (const [id, value] of Object.entries(typed)) { const t = document.getElementById(id); if (t) t.value = value; }
  if (focused) document.getElementById(focused)?.focus();
  rendered++;
  main.dataset.rendered = String(rendered);
  await loadJournal(runId, 1);
}

// ---------------------------------------------------------------- routing and keys
function route() {
  const m = location.pathname.match(/^\/runs\/(.+)$/);
  if (m) {
    const runId = decodeURIComponent(m[1]);
    loadRun(runId).catch((e) => $("#main").replaceChildren(el("p", { class: "error" }, e.message)));
    follow(`/api/runs/${encodeURIComponent(runId)}/stream`, {
      run: () => refreshSoon(() => loadRun(runId)),
      agent: (ev) => {
        const d = JSON.parse(ev.data);
        if (d.kind === "item.delta" || d.kind === "item.started") return;
        // Kept across re-renders of the page (each run change renders it anew); the last 500.
        const e = { time: new Date().toISOString(), kind: d.kind, data: d.data, effectId: d.effectId };
        liveAgent.push(e);
        if (liveAgent.length > 500) liveAgent.shift();
        $("#agent-events")?.append(agentItem(e.time, e.kind, e.data, e.effectId));
      },
    });
  } else {
    follow("/api/stream", { board: () => refreshSoon(loadBoard) });
  }
}

function move(delta) {
  const cards = [...document.querySelectorAll(".card, .task, .approve")];
  if (!cards.length) return;
  selected = Math.max(0, Math.min(cards.length - 1, selected + delta));
  const c = cards[selected];
  if (c.tabIndex < 0) c.tabIndex = 0;
  c.focus();
}

document.addEventListener("keydown", (e) => {
  const typing = ["INPUT", "TEXTAREA", "SELECT"].includes(e.target.tagName);
  if (e.key === "/" && !typing) { e.preventDefault(); $("#search").focus(); return; }
  if (e.key === "Escape") { if (typing) e.target.blur(); else if (location.pathname !== "/") location.href = "/"; return; }
  if (typing) return;
  if (e.key === "j" || e.key === "ArrowDown" || e.key === "ArrowRight") { e.preventDefault(); move(1); }
  else if (e.key === "k" || e.key === "ArrowUp" || e.key === "ArrowLeft") { e.preventDefault(); move(-1); }
  else if (e.key === "t") toggleTheme();
});

document.addEventListener("DOMContentLoaded", async () => {
  session = await api("/api/session");
  $("#mode").textContent = session.mode;
  $("#who").textContent = session.authEnabled ? `${session.principal} (${session.role})` : "";
  $("#logout").hidden = !session.authEnabled;
  $("#theme").addEventListener("click", toggleTheme);
  let t = null;
  const onFilter = () => {
    clearTimeout(t);
    t = setTimeout(() => { if (location.pathname !== "/") history.pushState(null, "", "/"); route(); loadBoard(); }, 150);
  };
  $("#search").addEventListener("input", onFilter);
  $("#status").addEventListener("change", onFilter);
  route();
  if (location.pathname === "/") loadBoard();
});
