// sshapi web interface: a file browser over the /v1 API, authenticated by the session cookie.
// Plain ES modules, no framework and no build step:
//   core.js       API calls, problem+json in words, paths, the dialog, errors and notices
//   listing.js    the file table: server paging and sorting, virtual rows, selection, keyboard
//   details.js    one entry's details, view, and the text editor (ETag / If-Match)
//   ops.js        new folder, rename, move, copy, permissions, delete
//   upload.js     resumable uploads (tus) of picked or dropped files and folders
//   share.js      grants and links of an entry, and the "Shared with me" view
//   transfers.js  the two-pane transfers view, live progress (SSE), cancel, notices
// This file signs in, lists the systems and routes: #/<system>/<path> browses, #transfers and
// #shared open those views.

import { $, session, api, apiPath, el, showError, setSignedOut } from "./core.js";
import { open } from "./listing.js";
import "./ops.js";
import "./upload.js";
import { showShared } from "./share.js";
import { showTransfers } from "./transfers.js";

$("error-close").addEventListener("click", () => { $("error").hidden = true; });

function showSignIn(provider) {
  $("app").hidden = true;
  $("who").hidden = true;
  $("views").hidden = true;
  $("signin").hidden = false;
  $("signin-provider").hidden = !provider;
  $("signin-dev").hidden = provider;
}
setSignedOut(() => showSignIn(true));

async function start() {
  const res = await fetch("/ui/session", { credentials: "same-origin" });
  const info = await res.json();
  if (!res.ok) return showSignIn(info.provider);
  session.csrf = info.csrf_token;
  session.user = info.user;
  $("logout-csrf").value = session.csrf;
  $("user").textContent = info.user;
  $("who").hidden = false;
  $("views").hidden = false;
  $("app").hidden = false;
  await loadSystems();
  window.addEventListener("hashchange", route);
  route();
}

// ---------- systems ----------

function systemLink(id, label, href) {
  return el("li", {}, el("a", { href: href || "#/" + encodeURIComponent(id) + "/~", textContent: label, "data-system": id }));
}

async function loadSystems() {
  const data = await (await api("GET", "/v1/systems")).json();
  const shared = data.shared || [];
  session.kinds = {};
  for (const s of data.systems) session.kinds[s.id] = s.kind || "ssh";
  for (const s of shared) session.kinds[s.id] = s.kind || "ssh";
  $("systems-own").replaceChildren(...data.systems.map((s) => systemLink(s.id, s.id)));
  $("systems-shared").replaceChildren(...shared.map((s) => {
    const first = (s.paths || [])[0];
    return systemLink(s.id, `${s.system} (${s.owner})`, first ? "#/" + encodeURIComponent(s.id) + "/" + apiPath(first.path) : undefined);
  }));
  $("shared-h").hidden = !shared.length;
  $("systems-none").hidden = data.systems.length + shared.length > 0;
  if (!location.hash && data.systems.length) location.hash = "#/" + encodeURIComponent(data.systems[0].id) + "/~";
}

// ---------- routing ----------

function showView(name) {
  $("files-view").hidden = name !== "files";
  $("transfers-view").hidden = name !== "transfers";
  $("shared-view").hidden = name !== "shared";
  if (name !== "files") $("details").hidden = true;
  for (const a of document.querySelectorAll("#views a")) a.setAttribute("aria-current", String(a.dataset.view === name));
}

function route() {
  if (location.hash === "#transfers") {
    showView("transfers");
    showTransfers().catch(showError);
    return;
  }
  if (location.hash === "#shared") {
    showView("shared");
    showShared().catch(showError);
    return;
  }
  const m = location.hash.match(/^#\/([^/]+)\/?(.*)$/);
  if (!m) {
    const first = Object.keys(session.kinds)[0];
    if (first) location.hash = "#/" + encodeURIComponent(first) + "/~";
    return;
  }
  showView("files");
  $("view-files").href = location.hash;
  const system = decodeURIComponent(m[1]);
  let p = m[2].split("/").map(decodeURIComponent).join("/");
  if (p === "") p = "/";
  else if (p !== "~" && !p.startsWith("~/")) p = "/" + p;
  open(system, p);
}

start().catch(showError);
