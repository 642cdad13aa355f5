// sshapi web interface: a file browser over the /v1 API, authenticated by the session cookie.
// Plain ES module, no framework and no build step. User-controlled text (file names, paths,
// file contents, error details) is only ever set with textContent, never parsed as HTML.

const PAGE = 200;          // entries per listing request
const MAX_PAGES = 12;      // listing pages kept in memory; older ones are dropped
const ROW = 32;            // row height in px (matches --row in app.css)
const MAX_ROWS = 150;      // rows in the DOM at most

const $ = (id) => document.getElementById(id);
let csrf = "";
const state = { system: null, path: "~", hidden: false, total: 0, pages: new Map(), cursors: null, gen: 0, selected: -1, entry: null };

// ---------- API calls ----------

// problemText turns an RFC 9457 problem+json body into a sentence.
async function problemText(res) {
  try {
    const p = await res.json();
    const fields = (p.errors || []).map((e) => `${e.field}: ${e.detail || e.message || ""}`).join("; ");
    return [p.title, p.detail, fields].filter(Boolean).join(": ") || `HTTP ${res.status}`;
  } catch {
    return `HTTP ${res.status} ${res.statusText}`;
  }
}

async function api(method, url, body) {
  const opts = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
  if (method !== "GET" && method !== "HEAD") opts.headers["X-CSRF-Token"] = csrf;
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const res = await fetch(url, opts);
  if (res.status === 401) {
    showSignIn(true);
    throw new Error("Your session ended: sign in again.");
  }
  if (!res.ok) throw new Error(await problemText(res));
  return res;
}

// apiPath is a file path as the API's URLs take it: absolute without the leading slash, each
// segment escaped ("~" is the home directory).
function apiPath(p) {
  if (p === "~" || p.startsWith("~/")) return p.split("/").map(encodeURIComponent).join("/");
  return p.replace(/^\/+/, "").split("/").map(encodeURIComponent).join("/");
}
const sysURL = (what, p) => `/v1/systems/${encodeURIComponent(state.system)}/${what}/${apiPath(p)}`;
const join = (dir, name) => (dir === "/" ? "/" + name : dir + "/" + name);
const parentOf = (p) => (p.lastIndexOf("/") <= 0 ? "/" : p.slice(0, p.lastIndexOf("/")));

function showError(err) {
  $("error-text").textContent = err instanceof Error ? err.message : String(err);
  $("error").hidden = false;
}
$("error-close").addEventListener("click", () => { $("error").hidden = true; });

// ---------- session ----------

function showSignIn(provider) {
  $("app").hidden = true;
  $("who").hidden = true;
  $("signin").hidden = false;
  $("signin-provider").hidden = !provider;
  $("signin-dev").hidden = provider;
}

async function start() {
  const res = await fetch("/ui/session", { credentials: "same-origin" });
  const info = await res.json();
  if (!res.ok) return showSignIn(info.provider);
  csrf = info.csrf_token;
  $("logout-csrf").value = csrf;
  $("user").textContent = info.user;
  $("who").hidden = false;
  $("app").hidden = false;
  await loadSystems();
  window.addEventListener("hashchange", route);
  route();
}

// ---------- systems ----------

function systemLink(id, label) {
  const li = document.createElement("li");
  const a = document.createElement("a");
  a.href = "#/" + encodeURIComponent(id) + "/~";
  a.textContent = label;
  a.dataset.system = id;
  li.append(a);
  return li;
}

async function loadSystems() {
  const data = await (await api("GET", "/v1/systems")).json();
  const own = $("systems-own");
  const shared = $("systems-shared");
  own.replaceChildren(...data.systems.map((s) => systemLink(s.id, s.id)));
  shared.replaceChildren(...(data.shared || []).map((s) => {
    const li = systemLink(s.id, `${s.system} (${s.owner})`);
    const first = (s.paths || [])[0];
    if (first) li.firstChild.href = "#/" + encodeURIComponent(s.id) + "/" + apiPath(first.path);
    return li;
  }));
  $("shared-h").hidden = !(data.shared || []).length;
  $("systems-none").hidden = data.systems.length + (data.shared || []).length > 0;
  if (!location.hash && data.systems.length) location.hash = "#/" + encodeURIComponent(data.systems[0].id) + "/~";
}

// ---------- routing: #/<system>/<path> ----------

function route() {
  const m = location.hash.match(/^#\/([^/]+)\/?(.*)$/);
  if (!m) return;
  const system = decodeURIComponent(m[1]);
  let p = m[2].split("/").map(decodeURIComponent).join("/");
  if (p === "") p = "/";
  else if (p !== "~" && !p.startsWith("~/")) p = "/" + p;
  open(system, p);
}

const go = (p) => { location.hash = "#/" + encodeURIComponent(state.system) + "/" + apiPath(p); };

function open(system, p) {
  state.system = system;
  state.path = p;
  state.pages = new Map();
  state.cursors = null;
  state.total = 0;
  state.selected = -1;
  state.gen++;
  closeDetails();
  for (const a of document.querySelectorAll(".systems a")) a.setAttribute("aria-current", String(a.dataset.system === system));
  $("viewport").scrollTop = 0;
  renderCrumbs();
  $("btn-archive").href = sysURL("content", p) + "?archive=tar.gz";
  loadPage(0).then(render).catch(showError);
}

function renderCrumbs() {
  const ol = $("crumbs");
  const items = [];
  const add = (label, p, current) => {
    const li = document.createElement("li");
    if (current) {
      li.textContent = label;
      li.setAttribute("aria-current", "page");
    } else {
      const a = document.createElement("a");
      a.href = "#/" + encodeURIComponent(state.system) + "/" + apiPath(p);
      a.textContent = label;
      li.append(a);
    }
    items.push(li);
  };
  add(state.system, "/", false);
  const segs = state.path.split("/").filter(Boolean);
  let acc = "";
  segs.forEach((s, i) => {
    acc = acc === "" && s === "~" ? "~" : acc === "" ? "/" + s : acc + "/" + s;
    add(s, acc, i === segs.length - 1);
  });
  ol.replaceChildren(...items);
}

// ---------- listing: server paging, bounded cache, virtual rows ----------

// An SSH system's listing pages by offset and says its total. An S3 bucket's pages follow one
// another by cursor (its first page answers with next_cursor) and has no total: page n is
// fetched after page n-1, whose cursor is kept in state.cursors, and the table grows by a page
// while more remain ("N+ entries").
async function loadPage(n) {
  if (state.pages.has(n)) return state.pages.get(n);
  const gen = state.gen;
  const q = new URLSearchParams({ limit: PAGE });
  if (n > 0 && state.cursors) {
    if (state.cursors[n] === undefined) await loadPage(n - 1);
    if (gen !== state.gen) return null;
    if (!state.cursors[n]) return [];
    q.set("cursor", state.cursors[n]);
  } else {
    q.set("offset", n * PAGE);
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

function entryAt(i) {
  const p = state.pages.get(Math.floor(i / PAGE));
  return p && p.value ? p.value[i % PAGE] : undefined;
}

const fmtSize = (n) => {
  if (n < 1024) return `${n} B`;
  const u = ["KiB", "MiB", "GiB", "TiB"];
  let v = n, i = -1;
  do { v /= 1024; i++; } while (v >= 1024 && i < u.length - 1);
  return `${v.toFixed(v < 10 ? 1 : 0)} ${u[i]}`;
};
const fmtTime = (t) => new Date(t).toLocaleString();
const kindMark = { dir: "▣", file: "▢", symlink: "↪", other: "•" }; // in every font, unlike emoji

function render() {
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
    const row = document.createElement("div");
    row.className = "row";
    row.setAttribute("role", "row");
    row.style.top = i * ROW + "px";
    row.dataset.index = i;
    row.setAttribute("aria-rowindex", i + 2);
    if (i === state.selected) row.setAttribute("aria-selected", "true");
    if (!e) {
      row.classList.add("placeholder");
      row.textContent = "…";
      missing.add(Math.floor(i / PAGE));
    } else {
      const name = document.createElement("span");
      name.className = "c-name";
      name.setAttribute("role", "cell");
      const mark = document.createElement("span");
      mark.className = "kind " + e.type;
      mark.setAttribute("aria-hidden", "true");
      mark.textContent = kindMark[e.type] || "•";
      const label = document.createElement("span");
      label.textContent = e.name;
      name.title = e.name;
      name.append(mark, label);
      const size = document.createElement("span");
      size.className = "c-size";
      size.setAttribute("role", "cell");
      size.textContent = e.type === "dir" ? "" : fmtSize(e.size);
      const time = document.createElement("span");
      time.className = "c-time";
      time.setAttribute("role", "cell");
      time.textContent = fmtTime(e.mtime);
      row.append(name, size, time);
    }
    rows.push(row);
  }
  vp.replaceChildren($("spacer"), ...rows);
  for (const n of missing) {
    // Keep resolved pages readable synchronously for the next render.
    loadPage(n).then(render).catch(showError);
  }
}

$("viewport").addEventListener("scroll", () => requestAnimationFrame(render));
window.addEventListener("resize", () => requestAnimationFrame(render));

function activate(i) {
  const e = entryAt(i);
  if (!e) return;
  if (e.type === "dir") go(join(state.path, e.name));
  else showDetails(e);
}

$("viewport").addEventListener("click", (ev) => {
  const row = ev.target.closest(".row");
  if (!row || row.classList.contains("placeholder")) return;
  state.selected = Number(row.dataset.index);
  activate(state.selected);
  render();
});

$("viewport").addEventListener("keydown", (ev) => {
  const vp = $("viewport");
  const move = { ArrowDown: 1, ArrowUp: -1, PageDown: 10, PageUp: -10 }[ev.key];
  if (move) {
    ev.preventDefault();
    state.selected = Math.max(0, Math.min(state.total - 1, state.selected + move));
    const top = state.selected * ROW;
    if (top < vp.scrollTop) vp.scrollTop = top;
    else if (top + ROW > vp.scrollTop + vp.clientHeight) vp.scrollTop = top + ROW - vp.clientHeight;
    render();
  } else if (ev.key === "Enter" && state.selected >= 0) {
    activate(state.selected);
  } else if (ev.key === "Backspace") {
    go(parentOf(state.path));
  } else if (ev.key === "Delete" && state.selected >= 0 && entryAt(state.selected)) {
    showDetails(entryAt(state.selected));
    remove();
  }
});

// ---------- details, view, download ----------

function showDetails(e) {
  state.entry = e;
  const dl = $("details-list");
  const rows = [["Name", e.name], ["Path", e.path], ["Type", e.type], ["Size", `${fmtSize(e.size)} (${e.size} bytes)`],
    ["Mode", e.mode], ["Modified", fmtTime(e.mtime)], ["Owner", `${e.uid}:${e.gid}`]];
  if (e.link_target) rows.push(["Link target", e.link_target]);
  dl.replaceChildren(...rows.flatMap(([k, v]) => {
    const dt = document.createElement("dt");
    dt.textContent = k;
    const dd = document.createElement("dd");
    dd.textContent = v;
    return [dt, dd];
  }));
  $("act-download").href = sysURL("content", e.path);
  $("act-download").hidden = e.type === "dir";
  $("act-view").hidden = e.type === "dir";
  $("preview").replaceChildren();
  $("details").hidden = false;
}

function closeDetails() {
  $("details").hidden = true;
  state.entry = null;
}
$("act-close").addEventListener("click", closeDetails);

// Images are shown from a blob whose type the page chose by extension (never SVG, which can
// carry script); everything else is shown as text.
const imageTypes = { png: "image/png", jpg: "image/jpeg", jpeg: "image/jpeg", gif: "image/gif", webp: "image/webp", bmp: "image/bmp" };

$("act-view").addEventListener("click", async () => {
  const e = state.entry;
  if (!e) return;
  const out = $("preview");
  try {
    const ext = e.name.includes(".") ? e.name.split(".").pop().toLowerCase() : "";
    if (imageTypes[ext] && e.size <= 20 << 20) {
      const buf = await (await api("GET", sysURL("content", e.path))).arrayBuffer();
      const img = document.createElement("img");
      img.alt = "Preview of " + e.name;
      img.src = URL.createObjectURL(new Blob([buf], { type: imageTypes[ext] }));
      out.replaceChildren(img);
      return;
    }
    const ex = await (await api("GET", sysURL("head", e.path) + "?bytes=65536")).json();
    const pre = document.createElement("pre");
    pre.textContent = ex.encoding === "utf-8" ? ex.content : "(binary content, not shown: download it)";
    out.replaceChildren(pre);
    if (ex.truncated) {
      const p = document.createElement("p");
      p.textContent = "Showing the first 64 KiB.";
      out.append(p);
    }
  } catch (err) {
    showError(err);
  }
});

// ---------- operations ----------

// ask shows the dialog: with a value it asks for a name, without it asks for confirmation.
function ask(label, value, text) {
  const dlg = $("dlg");
  $("dlg-label").textContent = label;
  $("dlg-input").hidden = value === undefined;
  $("dlg-input").value = value ?? "";
  $("dlg-text").textContent = text ?? "";
  dlg.returnValue = "";
  dlg.showModal();
  if (value !== undefined) $("dlg-input").select();
  return new Promise((resolve) => {
    dlg.addEventListener("close", () => resolve(dlg.returnValue === "ok" ? $("dlg-input").value : null), { once: true });
  });
}

function refresh() {
  open(state.system, state.path);
}

$("btn-refresh").addEventListener("click", refresh);
$("hidden-toggle").addEventListener("change", (ev) => {
  state.hidden = ev.target.checked;
  refresh();
});

$("btn-mkdir").addEventListener("click", async () => {
  const name = await ask("New folder name", "");
  if (!name) return;
  try {
    await api("POST", `/v1/systems/${encodeURIComponent(state.system)}/ops/mkdir`, { path: join(state.path, name) });
    refresh();
  } catch (err) {
    showError(err);
  }
});

$("act-rename").addEventListener("click", async () => {
  const e = state.entry;
  if (!e) return;
  const name = await ask(`Rename “${e.name}” to`, e.name);
  if (!name || name === e.name) return;
  try {
    await api("POST", `/v1/systems/${encodeURIComponent(state.system)}/ops/move`, { source: e.path, destination: join(parentOf(e.path), name) });
    refresh();
  } catch (err) {
    showError(err);
  }
});

async function remove() {
  const e = state.entry;
  if (!e) return;
  const what = e.type === "dir" ? "the folder and everything in it" : "the file";
  const ok = await ask(`Delete “${e.name}”?`, undefined, `This deletes ${what} on ${state.system}. It cannot be undone.`);
  if (ok === null) return;
  try {
    await api("DELETE", sysURL("files", e.path) + (e.type === "dir" ? "?recursive=true" : ""));
    refresh();
  } catch (err) {
    showError(err);
  }
}
$("act-delete").addEventListener("click", remove);

// ---------- uploads ----------
// Files go through the service's resumable upload endpoint, which speaks tus 1.0: a POST
// creates the upload (destination, and the SHA-256 the page computed for files up to 256 MiB,
// in Upload-Metadata), PATCHes of CHUNK bytes append at the offset the server committed, and
// the server renames the part file into place on the last byte (checking the digest), so a
// failed upload never leaves a partial file. A cut connection costs at most the chunk in flight:
// the page asks the server's offset with HEAD and goes on from there. Each upload's URL is kept
// in localStorage under the system, destination, size and modification time of the file, so
// uploading the same file again after a reload or a crash resumes it; the entry is removed on
// success and when the server no longer knows the upload.

const hashLimit = 256 << 20;
const CHUNK = 8 << 20;    // bytes per PATCH
const RETRIES = 5;        // consecutive failed PATCHes before giving up (the upload stays resumable)

async function sha256Hex(file) {
  const digest = await crypto.subtle.digest("SHA-256", await file.arrayBuffer());
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
const base64 = (s) => btoa(Array.from(new TextEncoder().encode(s), (b) => String.fromCharCode(b)).join(""));
const resumeKey = (dest, file) => `sshapi.tus ${state.system} ${dest} ${file.size} ${file.lastModified}`;

// tus sends one request of the protocol with the session's CSRF token.
async function tus(method, url, headers = {}, body = undefined) {
  const res = await fetch(url, { method, body, credentials: "same-origin",
    headers: { "Tus-Resumable": "1.0.0", "X-CSRF-Token": csrf, ...headers } });
  if (res.status === 401) {
    showSignIn(true);
    throw new Error("Your session ended: sign in again.");
  }
  return res;
}

// committedOffset asks the server how much of the upload at url it has (null: it has no such
// upload any more).
async function committedOffset(url) {
  const res = await tus("HEAD", url);
  return res.ok ? Number(res.headers.get("Upload-Offset")) : null;
}

async function uploadOne(file, relPath, progress) {
  const dest = join(state.path, relPath);
  const key = resumeKey(dest, file);
  let url = localStorage.getItem(key);
  let offset = url ? await committedOffset(url) : null;
  if (offset === null) {
    const meta = [["path", dest], ["filename", file.name]];
    if (relPath.includes("/")) meta.push(["parents", "true"]);
    if (file.size <= hashLimit && crypto.subtle) meta.push(["sha256", await sha256Hex(file)]);
    const res = await tus("POST", `/v1/systems/${encodeURIComponent(state.system)}/uploads`, {
      "Upload-Length": String(file.size),
      "Upload-Metadata": meta.map(([k, v]) => `${k} ${base64(v)}`).join(","),
    });
    if (res.status === 409) {
      const problem = await res.clone().json().catch(() => ({}));
      if (problem.capability === "resumable_uploads") return putWhole(file, dest, relPath, meta); // a bucket
    }
    if (!res.ok) throw new Error(`${relPath}: ${await problemText(res)}`);
    url = res.headers.get("Location");
    offset = 0;
    if (file.size > 0) localStorage.setItem(key, url);
  }
  let failures = 0;
  while (offset < file.size) {
    progress(offset);
    let res = null;
    try {
      res = await tus("PATCH", url, { "Content-Type": "application/offset+octet-stream", "Upload-Offset": String(offset) },
        file.slice(offset, Math.min(offset + CHUNK, file.size)));
    } catch (err) {
      if (err.message.startsWith("Your session ended")) throw err;
    }
    if (res && res.ok) {
      offset = Number(res.headers.get("Upload-Offset"));
      failures = 0;
      continue;
    }
    if (res && ![409, 423].includes(res.status) && res.status < 500) { // the upload is over: refused, failed or gone
      localStorage.removeItem(key);
      throw new Error(`${relPath}: ${await problemText(res)}`);
    }
    // The connection failed, or another request holds the upload: wait, ask where the
    // server got to and go on from there.
    if (++failures > RETRIES) throw new Error(`${relPath}: the upload keeps failing; upload the same file again to resume it`);
    await sleep(500 * failures);
    const committed = await committedOffset(url);
    if (committed === null) {
      localStorage.removeItem(key);
      throw new Error(`${relPath}: the service no longer has this upload (expired?); upload the file again`);
    }
    offset = committed;
  }
  localStorage.removeItem(key);
}

// putWhole uploads file in one verified PUT: the way to a system without resumable uploads (an
// S3 bucket, where the service sends it as a multipart upload, aborted if anything fails). meta
// holds what the tus request would have carried (parents, sha256).
async function putWhole(file, dest, relPath, meta) {
  const m = Object.fromEntries(meta);
  const q = new URLSearchParams({ overwrite: "true" });
  if (m.parents) q.set("parents", "true");
  const headers = { "X-CSRF-Token": csrf, "Content-Type": "application/octet-stream" };
  if (m.sha256) headers["X-Checksum-Sha256"] = m.sha256;
  const res = await fetch(sysURL("content", dest) + "?" + q, { method: "PUT", body: file, credentials: "same-origin", headers });
  if (res.status === 401) {
    showSignIn(true);
    throw new Error("Your session ended: sign in again.");
  }
  if (!res.ok) throw new Error(`${relPath}: ${await problemText(res)}`);
}

async function uploadAll(items) {
  const status = $("upload-status");
  $("uploads").hidden = false;
  let done = 0;
  const failed = [];
  for (const { file, path } of items) {
    const progress = (n) => {
      const pct = file.size ? ` (${Math.floor((100 * n) / file.size)}%)` : "";
      status.textContent = `Uploading ${done + 1} of ${items.length}: ${path}${pct}`;
    };
    try {
      await uploadOne(file, path, progress);
    } catch (err) {
      failed.push(err.message);
    }
    done++;
  }
  status.textContent = `Uploaded ${items.length - failed.length} of ${items.length}.`;
  if (failed.length) showError(failed.join("; "));
  refresh();
}

$("upload-input").addEventListener("change", (ev) => {
  const items = [...ev.target.files].map((file) => ({ file, path: file.name }));
  ev.target.value = "";
  if (items.length) uploadAll(items).catch(showError);
});

// walk collects the files under a dropped entry (folders keep their relative paths).
async function walk(entry, prefix, out) {
  if (entry.isFile) {
    out.push({ file: await new Promise((ok, fail) => entry.file(ok, fail)), path: prefix + entry.name });
  } else if (entry.isDirectory) {
    const reader = entry.createReader();
    for (;;) {
      const batch = await new Promise((ok, fail) => reader.readEntries(ok, fail));
      if (!batch.length) break;
      for (const e of batch) await walk(e, prefix + entry.name + "/", out);
    }
  }
}

const drop = $("drop");
drop.addEventListener("dragover", (ev) => { ev.preventDefault(); drop.classList.add("dragover"); });
drop.addEventListener("dragleave", () => drop.classList.remove("dragover"));
drop.addEventListener("drop", async (ev) => {
  ev.preventDefault();
  drop.classList.remove("dragover");
  const entries = [...ev.dataTransfer.items].map((i) => i.webkitGetAsEntry && i.webkitGetAsEntry()).filter(Boolean);
  const items = [];
  try {
    if (entries.length) for (const e of entries) await walk(e, "", items);
    else for (const f of ev.dataTransfer.files) items.push({ file: f, path: f.name });
    if (items.length) await uploadAll(items);
  } catch (err) {
    showError(err);
  }
});

start().catch(showError);
