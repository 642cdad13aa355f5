// The file table: server paging and sorting, a bounded page cache, virtual rows, breadcrumbs,
// the selection of several entries, and the keyboard.
//
// An SSH system's listing pages by offset, sorted by the server (sort=name|size|time,
// order=asc|desc), and says its total. An S3 bucket's pages follow one another by cursor (its
// first page answers with next_cursor) in name order only, and have no total: page n is fetched
// after page n-1, whose cursor is kept in state.cursors, and the table grows by a page while
// more remain ("N+ entries"). At most MAX_PAGES pages of PAGE entries are kept, and at most
// MAX_ROWS rows are in the DOM, however large the directory.

import { $, state, session, api, apiPath, sysURL, join, parentOf, fmtSize, fmtTime, el, showError, busyWhile } from "./core.js";
import { showDetails, closeDetails } from "./details.js";
import { removeEntries } from "./ops.js";

const PAGE = 200;          // entries per listing request
const MAX_PAGES = 12;      // listing pages kept in memory; older ones are dropped
const ROW = 32;            // row height in px (matches --row in app.css)
const MAX_ROWS = 150;      // rows in the DOM at most

export const go = (p) => { location.hash = "#/" + encodeURIComponent(state.system) + "/" + apiPath(p); };

export function open(system, p) {
  if (state.system !== system || state.path !== p) state.marked = new Map();
  state.system = system;
  state.bucket = session.kinds[system] === "s3";
  state.path = p;
  state.pages = new Map();
  state.cursors = null;
  state.total = 0;
  state.selected = -1;
  state.gen++;
  closeDetails();
  for (const a of document.querySelectorAll(".systems a")) a.setAttribute("aria-current", String(a.dataset.system === system));
  $("viewport").scrollTop = 0;
  $("viewport").replaceChildren($("spacer")); // no row of the previous listing stays clickable
  renderCrumbs();
  renderSortHeaders();
  renderSelection();
  $("btn-archive").href = sysURL("content", p) + "?archive=tar.gz";
  busyWhile(loadPage(0)).then(render).catch(showError);
}

export function refresh() {
  open(state.system, state.path);
}

function renderCrumbs() {
  const items = [];
  const add = (label, p, current) => {
    if (current) {
      items.push(el("li", { textContent: label, "aria-current": "page" }));
      return;
    }
    items.push(el("li", {}, el("a", { href: "#/" + encodeURIComponent(state.system) + "/" + apiPath(p), textContent: label })));
  };
  add(state.system, "/", false);
  const segs = state.path.split("/").filter(Boolean);
  let acc = "";
  segs.forEach((s, i) => {
    acc = acc === "" && s === "~" ? "~" : acc === "" ? "/" + s : acc + "/" + s;
    add(s, acc, i === segs.length - 1);
  });
  $("crumbs").replaceChildren(...items);
}

// ---------- sorting ----------

function renderSortHeaders() {
  for (const b of document.querySelectorAll("button.sort")) {
    const key = b.dataset.sort;
    const on = state.sort === key;
    b.closest("[role=columnheader]").setAttribute("aria-sort", on ? (state.order === "asc" ? "ascending" : "descending") : "none");
    b.querySelector(".dir").textContent = on ? (state.order === "asc" ? " ▲" : " ▼") : "";
    b.disabled = state.bucket && key !== "name";
    b.title = b.disabled ? "A bucket lists in name order only" : `Sort by ${key}`;
  }
}

for (const b of document.querySelectorAll("button.sort")) {
  b.addEventListener("click", () => {
    const key = b.dataset.sort;
    if (state.bucket && (key !== "name" || state.order === "asc")) return;
    if (state.sort === key) state.order = state.order === "asc" ? "desc" : "asc";
    else [state.sort, state.order] = [key, key === "name" ? "asc" : "desc"];
    refresh();
  });
}

// ---------- paging ----------

export async function loadPage(n) {
  if (state.pages.has(n)) return state.pages.get(n);
  const gen = state.gen;
  const q = new URLSearchParams({ limit: PAGE });
  if (n > 0 && state.cursors) {
    if (state.cursors[n] === undefined) await loadPage(n - 1);
    if (gen !== state.gen) return null;
    if (!state.cursors[n]) return [];
    q.set("cursor", state.cursors[n]);
  } else if (!state.bucket) {
    q.set("offset", n * PAGE);
  }
  if (!state.bucket && (state.sort !== "name" || state.order !== "asc")) {
    q.set("sort", state.sort);
    q.set("order", state.order);
  }
  if (state.hidden) q.set("show_hidden", "true");
  if (state.pages.has(n)) return state.pages.get(n);
  const promise = api("GET", sysURL("ls", state.path) + "?" + q).then((r) => r.json()).then((l) => {
    if (gen !== state.gen) return null;
    const entries = l.entries || [];
    if (n === 0 && l.next_cursor) state.cursors = [];
    if (state.cursors) {
      state.cursors[n + 1] = l.next_cursor || "";
      const end = n * PAGE + entries.length;
      state.total = l.next_cursor ? Math.max(state.total, end + PAGE) : end;
      $("count").textContent = l.next_cursor ? `${end}+ entries` : `${end} entr${end === 1 ? "y" : "ies"}`;
    } else {
      state.total = l.total;
      $("count").textContent = `${l.total} entr${l.total === 1 ? "y" : "ies"}`;
    }
    if (n === 0 && l.path && l.path !== state.path) {
      state.path = l.path; // "~" resolved to the home directory
      renderCrumbs();
      $("btn-archive").href = sysURL("content", state.path) + "?archive=tar.gz";
    }
    return entries;
  }).then((entries) => {
    promise.value = entries; // readable synchronously by render
    return entries;
  });
  state.pages.set(n, promise);
  while (state.pages.size > MAX_PAGES) state.pages.delete(state.pages.keys().next().value);
  try {
    return await promise;
  } catch (e) {
    state.pages.delete(n);
    throw e;
  }
}

export function entryAt(i) {
  const p = state.pages.get(Math.floor(i / PAGE));
  return p && p.value ? p.value[i % PAGE] : undefined;
}

// ---------- rows ----------

const kindMark = { dir: "▣", file: "▢", symlink: "↪", other: "•" }; // in every font, unlike emoji

function rowOf(i, e) {
  const row = el("div", { className: "row", role: "row", "data-index": i, "aria-rowindex": i + 2 });
  row.style.top = i * ROW + "px";
  if (i === state.selected) row.setAttribute("aria-selected", "true");
  if (!e) {
    row.classList.add("placeholder");
    row.textContent = "…";
    return row;
  }
  const box = el("input", { type: "checkbox", className: "mark", checked: state.marked.has(e.name), tabIndex: -1, "aria-label": "Select " + e.name });
  const name = el("span", { className: "c-name", role: "cell", title: e.name },
    el("span", { className: "kind " + e.type, "aria-hidden": "true", textContent: kindMark[e.type] || "•" }),
    el("span", { textContent: e.name }));
  row.append(el("span", { className: "c-mark", role: "cell" }, box), name,
    el("span", { className: "c-size", role: "cell", textContent: e.type === "dir" ? "" : fmtSize(e.size) }),
    el("span", { className: "c-time", role: "cell", textContent: fmtTime(e.mtime) }));
  return row;
}

export function render() {
  const vp = $("viewport");
  $("spacer").style.height = state.total * ROW + "px";
  // The viewport's height comes from the layout; the cap keeps a broken layout from turning
  // into a request for every page of a huge directory.
  const first = Math.max(0, Math.floor(vp.scrollTop / ROW) - 5);
  const last = Math.min(state.total, first + MAX_ROWS, Math.ceil((vp.scrollTop + vp.clientHeight) / ROW) + 5);
  const rows = [];
  const missing = new Set();
  for (let i = first; i < last; i++) {
    const e = entryAt(i);
    if (!e) missing.add(Math.floor(i / PAGE));
    rows.push(rowOf(i, e));
  }
  vp.replaceChildren($("spacer"), ...rows);
  for (const n of missing) busyWhile(loadPage(n)).then(render).catch(showError);
}

$("viewport").addEventListener("scroll", () => requestAnimationFrame(render));
window.addEventListener("resize", () => requestAnimationFrame(render));

function activate(i) {
  const e = entryAt(i);
  if (!e) return;
  if (e.type === "dir") go(join(state.path, e.name));
  else showDetails(e);
}

// ---------- selection of several entries ----------

function toggleMark(e) {
  if (state.marked.has(e.name)) state.marked.delete(e.name);
  else state.marked.set(e.name, e);
  renderSelection();
}

export function renderSelection() {
  const n = state.marked.size;
  $("selbar").hidden = n === 0;
  $("sel-count").textContent = `${n} selected`;
  const q = new URLSearchParams({ archive: "tar.gz" });
  for (const name of state.marked.keys()) q.append("name", name);
  $("sel-download").href = sysURL("content", state.path) + "?" + q;
  $("sel-download").hidden = state.bucket;
}

export function clearSelection() {
  state.marked = new Map();
  renderSelection();
  render();
}
$("sel-clear").addEventListener("click", clearSelection);

$("viewport").addEventListener("click", (ev) => {
  const row = ev.target.closest(".row");
  if (!row || row.classList.contains("placeholder")) return;
  if (!entryAt(Number(row.dataset.index))) return;
  state.selected = Number(row.dataset.index);
  if (ev.target.classList.contains("mark")) {
    toggleMark(entryAt(state.selected));
    return;
  }
  activate(state.selected);
  render();
});

// Keyboard: arrows and Page Up/Down move, Enter opens, Space selects, Backspace goes up,
// Delete deletes (after confirmation).
$("viewport").addEventListener("keydown", (ev) => {
  const vp = $("viewport");
  const move = { ArrowDown: 1, ArrowUp: -1, PageDown: 10, PageUp: -10 }[ev.key];
  const cur = state.selected >= 0 ? entryAt(state.selected) : undefined;
  if (move) {
    ev.preventDefault();
    state.selected = Math.max(0, Math.min(state.total - 1, state.selected + move));
    const top = state.selected * ROW;
    if (top < vp.scrollTop) vp.scrollTop = top;
    else if (top + ROW > vp.scrollTop + vp.clientHeight) vp.scrollTop = top + ROW - vp.clientHeight;
    render();
  } else if (ev.key === "Enter" && state.selected >= 0) {
    activate(state.selected);
  } else if (ev.key === " " && cur) {
    ev.preventDefault();
    toggleMark(cur);
    render();
  } else if (ev.key === "Backspace") {
    go(parentOf(state.path));
  } else if (ev.key === "Delete" && cur) {
    showDetails(cur);
    removeEntries([cur]);
  }
});

$("btn-refresh").addEventListener("click", refresh);
$("hidden-toggle").addEventListener("change", (ev) => {
  state.hidden = ev.target.checked;
  refresh();
});
