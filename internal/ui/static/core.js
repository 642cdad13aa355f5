// Shared pieces of the page: the session's CSRF token, API calls that turn problem+json into
// sentences, paths as the API's URLs spell them, formatting, the error and notice areas, and
// the one form dialog every operation asks through. User-controlled text (file names, paths,
// contents, error details) is only ever set with textContent, never parsed as HTML.

export const $ = (id) => document.getElementById(id);

// session holds what /ui/session said; state is the file browser's (see listing.js).
export const session = { csrf: "", user: "", kinds: {} };
export const state = {
  system: null, path: "~", hidden: false, total: 0, pages: new Map(), cursors: null, gen: 0,
  selected: -1, entry: null, sort: "name", order: "asc", marked: new Map(), bucket: false,
};

// problemText turns an RFC 9457 problem+json body into a sentence: title, detail and the
// fields it names.
export async function problemText(res) {
  try {
    const p = await res.json();
    const fields = (p.errors || []).map((e) => `${e.field}: ${e.detail || e.message || ""}`)
      .filter((f) => !(p.detail || "").includes(f)).join("; "); // badField's detail names it already
    return [p.title, p.detail, fields].filter(Boolean).join(": ") || `HTTP ${res.status}`;
  } catch {
    return `HTTP ${res.status} ${res.statusText}`;
  }
}

// APIError is a refused API call: its message is the problem in words, status the HTTP status.
export class APIError extends Error {
  constructor(message, status, res) {
    super(message);
    this.status = status;
    this.res = res;
  }
}

let onSignedOut = () => {};
// setSignedOut sets what happens when a call finds the session gone.
export const setSignedOut = (fn) => { onSignedOut = fn; };
// signedOut reports a session found gone.
export const signedOut = () => onSignedOut();

// api calls the /v1 API with the session cookie (and the CSRF token on state changes). headers
// are added to the request; a failed call throws an APIError.
export async function api(method, url, body, headers = {}) {
  const opts = { method, headers: { Accept: "application/json", ...headers }, credentials: "same-origin" };
  if (method !== "GET" && method !== "HEAD") opts.headers["X-CSRF-Token"] = session.csrf;
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const res = await fetch(url, opts);
  if (res.status === 401) {
    onSignedOut();
    throw new APIError("Your session ended: sign in again.", 401, res);
  }
  if (!res.ok) throw new APIError(await problemText(res.clone()), res.status, res);
  return res;
}

// apiPath is a file path as the API's URLs take it: absolute without the leading slash, each
// segment escaped ("~" is the home directory).
export function apiPath(p) {
  if (p === "~" || p.startsWith("~/")) return p.split("/").map(encodeURIComponent).join("/");
  return p.replace(/^\/+/, "").split("/").map(encodeURIComponent).join("/");
}
export const sysURL = (what, p, system = state.system) => `/v1/systems/${encodeURIComponent(system)}/${what}/${apiPath(p)}`;
export const join = (dir, name) => (dir === "/" ? "/" + name : dir + "/" + name);
export const parentOf = (p) => (p.lastIndexOf("/") <= 0 ? "/" : p.slice(0, p.lastIndexOf("/")));
export const baseName = (p) => p.slice(p.lastIndexOf("/") + 1);

export const fmtSize = (n) => {
  if (n < 1024) return `${n} B`;
  const u = ["KiB", "MiB", "GiB", "TiB"];
  let v = n, i = -1;
  do { v /= 1024; i++; } while (v >= 1024 && i < u.length - 1);
  return `${v.toFixed(v < 10 ? 1 : 0)} ${u[i]}`;
};
export const fmtTime = (t) => (t ? new Date(t).toLocaleString() : "");

// el makes an element with properties (textContent, className, …) and children.
export function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined) continue;
    if (k.startsWith("aria-") || k.startsWith("data-") || k === "role" || k === "for") e.setAttribute(k, v);
    else e[k] = v;
  }
  e.append(...children.filter((c) => c !== null && c !== undefined));
  return e;
}

export function showError(err) {
  const msg = err instanceof Error ? err.message : String(err);
  $("error-text").textContent = msg;
  $("error").hidden = false;
  // A modal dialog hides the page's error line: say it in the dialog too.
  const inDialog = document.querySelector("dialog[open] [role=status]");
  if (inDialog) inDialog.textContent = msg;
}

// notify shows a short message in the polite live region (and keeps the last few).
export function notify(text) {
  const list = $("notice-list");
  $("notice").hidden = false;
  list.prepend(el("p", { textContent: text }));
  while (list.children.length > 4) list.lastElementChild.remove();
}
$("notice-close").addEventListener("click", () => {
  $("notice").hidden = true;
  $("notice-list").replaceChildren();
});

// ask shows the form dialog and resolves to the values of its fields keyed by name (or true
// when it has none), or null when cancelled. The first text field has the id dlg-input.
// fields: [{name, label, value, type: "text"|"checkbox"|"select"|"number"|"datetime-local", options}]
export function ask(title, fields = [], text = "", ok = "OK") {
  const dlg = $("dlg");
  $("dlg-title").textContent = title;
  $("dlg-text").textContent = text;
  $("dlg-ok").textContent = ok;
  let firstText = null;
  const inputs = fields.map((f, i) => {
    const id = !firstText && (!f.type || f.type === "text") ? "dlg-input" : `dlg-f${i}`;
    let input;
    if (f.type === "select") {
      input = el("select", { id }, ...f.options.map(([v, label]) => el("option", { value: v, textContent: label })));
      input.value = f.value ?? f.options[0][0];
    } else {
      input = el("input", { id, type: f.type || "text", autocomplete: "off" });
      if (f.type === "checkbox") input.checked = !!f.value;
      else input.value = f.value ?? "";
      if (f.min !== undefined) input.min = f.min;
    }
    if (id === "dlg-input") firstText = input;
    input.name = f.name;
    const label = el("label", { for: id, textContent: f.label, id: id === "dlg-input" ? "dlg-label" : undefined });
    return f.type === "checkbox" ? el("div", { className: "check" }, input, label) : el("div", {}, label, input);
  });
  $("dlg-fields").replaceChildren(...inputs);
  dlg.returnValue = "";
  dlg.showModal();
  if (firstText) firstText.select();
  return new Promise((resolve) => {
    dlg.addEventListener("close", () => {
      if (dlg.returnValue !== "ok") return resolve(null);
      if (!fields.length) return resolve(true);
      const out = {};
      for (const input of dlg.querySelectorAll("#dlg-fields input, #dlg-fields select")) {
        out[input.name] = input.type === "checkbox" ? input.checked : input.value;
      }
      resolve(out);
    }, { once: true });
  });
}

// busyWhile marks the app aria-busy until promise settles (and every other such promise has):
// assistive technology, and the browser tests, wait for it.
let busy = 0;
export function busyWhile(promise) {
  if (busy++ === 0) $("app").setAttribute("aria-busy", "true");
  const done = () => { if (--busy === 0) $("app").removeAttribute("aria-busy"); };
  promise.then(done, done);
  return promise;
}

// run calls fn, busy meanwhile, and shows what it throws.
export function run(fn) {
  return busyWhile((async () => {
    try {
      return await fn();
    } catch (err) {
      showError(err);
      return undefined;
    }
  })());
}
