// Transfers: a two-pane view (source and destination systems side by side) that submits
// transfers of the selected entries, the caller's recent transfers with live progress over
// Server-Sent Events (GET /v1/transfers/{id}/events), cancel, and a notice when one finishes,
// whichever view is open. At most MAX_STREAMS event streams are open at once (the API allows 16
// per user, shared with other tabs); further running transfers are polled.

import { $, session, api, apiPath, el, fmtSize, fmtTime, run, notify, baseName, join, parentOf } from "./core.js";

const MAX_STREAMS = 4;
const POLL_MS = 2000;
const terminal = new Set(["succeeded", "failed", "canceled"]);
const known = new Map();   // id → the latest Transfer seen
const watching = new Map(); // id → EventSource or timer

// submitTransfer starts a transfer and watches it.
export async function submitTransfer(body) {
  const t = await (await api("POST", "/v1/transfers", body)).json();
  update(t);
  watch(t.id);
  return t;
}

function finished(t) {
  const src = baseName(t.source.path) || t.source.path;
  const words = { succeeded: "finished", failed: "failed", canceled: "was canceled" }[t.status];
  notify(`Transfer of ${src} to ${t.destination.system}:${t.destination.path} ${words}` + (t.error ? `: ${t.error}` : "."));
}

function update(t) {
  const before = known.get(t.id);
  known.set(t.id, t);
  if (before && !terminal.has(before.status) && terminal.has(t.status)) finished(t);
  renderRow(t);
}

// watch follows transfer id until it ends: over an event stream while fewer than MAX_STREAMS
// are open, else by polling.
export function watch(id) {
  if (watching.has(id)) return;
  const streams = [...watching.values()].filter((w) => w instanceof EventSource).length;
  if (streams < MAX_STREAMS && window.EventSource) {
    const es = new EventSource(`/v1/transfers/${encodeURIComponent(id)}/events`);
    watching.set(id, es);
    es.addEventListener("progress", (ev) => update(JSON.parse(ev.data)));
    es.addEventListener("done", (ev) => {
      es.close();
      watching.delete(id);
      update(JSON.parse(ev.data));
    });
    es.addEventListener("error", () => {
      if (es.readyState !== EventSource.CLOSED) return; // the browser reconnects by itself
      watching.delete(id);
      poll(id);
    });
    return;
  }
  poll(id);
}

function poll(id) {
  const timer = setTimeout(async () => {
    watching.delete(id);
    try {
      const t = await (await api("GET", `/v1/transfers/${encodeURIComponent(id)}`)).json();
      update(t);
      if (!terminal.has(t.status)) watch(id);
    } catch {
      // the transfer or the session is gone; the history shows what is known
    }
  }, POLL_MS);
  watching.set(id, timer);
}

// ---------- history ----------

function renderRow(t) {
  const body = $("tr-rows");
  let row = body.querySelector(`tr[data-id="${CSS.escape(t.id)}"]`);
  if (!row) {
    row = el("tr", { "data-id": t.id });
    body.prepend(row);
  }
  const bar = el("progress", { max: t.bytes_total || 1, value: terminal.has(t.status) && t.status === "succeeded" ? t.bytes_total || 1 : t.bytes_done || 0,
    "aria-label": `Progress of the transfer of ${baseName(t.source.path)}` });
  const pct = t.bytes_total ? Math.floor((100 * (t.bytes_done || 0)) / t.bytes_total) + "%" : "";
  const cells = [
    el("td", { className: "tr-status", textContent: t.status }),
    el("td", { textContent: `${t.source.system}:${t.source.path}` }),
    el("td", { textContent: `${t.destination.system}:${t.destination.path}` }),
    el("td", {}, bar, el("span", { className: "muted", textContent: ` ${pct} ${fmtSize(t.bytes_done || 0)} of ${fmtSize(t.bytes_total || 0)}, ${t.files_done || 0}/${t.files_total || 0} files` })),
    el("td", { textContent: fmtTime(t.created_at) }),
  ];
  const act = el("td");
  if (!terminal.has(t.status)) {
    const b = el("button", { type: "button", className: "danger", textContent: "Cancel", "aria-label": `Cancel the transfer of ${baseName(t.source.path)}` });
    b.addEventListener("click", () => run(async () => update(await (await api("DELETE", `/v1/transfers/${encodeURIComponent(t.id)}`)).json())));
    act.append(b);
  } else if (t.error) {
    act.append(el("span", { className: "danger", textContent: t.error }));
  }
  cells.push(act);
  row.replaceChildren(...cells);
}

async function loadHistory() {
  const data = await (await api("GET", "/v1/transfers?limit=20")).json();
  $("tr-rows").replaceChildren();
  for (const t of (data.transfers || []).slice().reverse()) {
    known.set(t.id, t);
    renderRow(t);
    if (!terminal.has(t.status)) watch(t.id);
  }
}

// ---------- the two panes ----------

const panes = {
  src: { system: "", path: "~", entries: [], gen: 0 },
  dst: { system: "", path: "~", entries: [], gen: 0 },
};

async function openPane(side) {
  const p = panes[side];
  p.system = $(side + "-system").value;
  const gen = ++p.gen; // a slower answer for a folder left since must not overwrite the pane
  const q = new URLSearchParams({ limit: 200 });
  const l = await (await api("GET", `/v1/systems/${encodeURIComponent(p.system)}/ls/${apiPath(p.path)}?${q}`)).json();
  if (gen !== p.gen) return;
  p.path = l.path || p.path;
  p.entries = l.entries || [];
  $(side + "-path").value = p.path;
  const items = p.entries.map((e, i) => {
    const li = el("li", {});
    if (side === "src") {
      const id = `src-mark-${i}`;
      li.append(el("input", { type: "checkbox", id, "data-index": i }), el("label", { for: id, textContent: e.name + (e.type === "dir" ? "/" : "") }));
    } else {
      li.append(el("span", { textContent: e.name + (e.type === "dir" ? "/" : "") }));
    }
    if (e.type === "dir") {
      const b = el("button", { type: "button", className: "open", textContent: "Open", "aria-label": `Open folder ${e.name} (${side === "src" ? "from" : "to"})` });
      b.addEventListener("click", () => { p.path = join(p.path, e.name); run(() => openPane(side)); });
      li.append(" ", b);
    }
    return li;
  });
  $(side + "-list").replaceChildren(...items);
  $(side + "-count").textContent = l.total > p.entries.length ? `First ${p.entries.length} of ${l.total} entries.` : `${p.entries.length} entries.`;
}

for (const side of ["src", "dst"]) {
  $(side + "-system").addEventListener("change", () => { panes[side].path = "~"; run(() => openPane(side)); });
  $(side + "-go").addEventListener("click", () => { panes[side].path = $(side + "-path").value || "~"; run(() => openPane(side)); });
  $(side + "-path").addEventListener("keydown", (ev) => { if (ev.key === "Enter") $(side + "-go").click(); });
  $(side + "-up").addEventListener("click", () => { panes[side].path = parentOf(panes[side].path); run(() => openPane(side)); });
}

$("tr-submit").addEventListener("click", () => run(async () => {
  const chosen = [...document.querySelectorAll("#src-list input:checked")].map((c) => panes.src.entries[Number(c.dataset.index)]);
  if (!chosen.length) {
    $("tr-hint").textContent = "Select what to copy in the From pane first.";
    return;
  }
  const dst = panes.dst;
  for (const e of chosen) {
    await submitTransfer({
      source: { system: panes.src.system, path: e.path },
      destination: { system: dst.system, path: e.type === "dir" ? join(dst.path, e.name) : dst.path.replace(/\/*$/, "/") },
      recursive: e.type === "dir",
    });
  }
  $("tr-hint").textContent = `${chosen.length} transfer${chosen.length === 1 ? "" : "s"} submitted.`;
  for (const c of document.querySelectorAll("#src-list input:checked")) c.checked = false;
}));

$("tr-refresh").addEventListener("click", () => run(async () => { await loadHistory(); await openPane("dst"); }));

// showTransfers fills the view: both panes on the caller's first system (or the ones chosen
// before) and the history.
export async function showTransfers() {
  const ids = Object.keys(session.kinds);
  for (const side of ["src", "dst"]) {
    const sel = $(side + "-system");
    const cur = sel.value || panes[side].system || ids[Math.min(ids.length - 1, side === "src" ? 0 : 1)] || ids[0];
    sel.replaceChildren(...ids.map((id) => el("option", { value: id, textContent: id })));
    if (cur) sel.value = cur;
  }
  if (!ids.length) return;
  await Promise.all([openPane("src"), openPane("dst"), loadHistory()]);
}
