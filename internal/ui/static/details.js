// The details panel of one entry: its attributes, download, view (text as text, images from a
// blob whose type the page chose, never SVG), and the editor for small text files, which saves
// with If-Match so a change made on the server since it was opened is never overwritten.

import { $, state, api, sysURL, fmtSize, fmtTime, el, showError, run, APIError } from "./core.js";

export function showDetails(e) {
  state.entry = e;
  const rows = [["Name", e.name], ["Path", e.path], ["Type", e.type], ["Size", `${fmtSize(e.size)} (${e.size} bytes)`],
    ["Mode", e.mode], ["Modified", fmtTime(e.mtime)], ["Owner", `${e.uid}:${e.gid}`]];
  if (e.link_target) rows.push(["Link target", e.link_target]);
  $("details-list").replaceChildren(...rows.flatMap(([k, v]) => [el("dt", { textContent: k }), el("dd", { textContent: v ?? "" })]));
  $("act-download").href = e.type === "dir" ? sysURL("content", e.path) + "?archive=tar.gz" : sysURL("content", e.path);
  $("act-download").textContent = e.type === "dir" ? "Download (.tar.gz)" : "Download";
  $("act-view").hidden = e.type === "dir";
  $("act-edit").hidden = e.type !== "file" || e.size > 512 << 10;
  $("act-chmod").hidden = state.bucket;
  $("act-checksum").hidden = e.type !== "file";
  $("checksum").textContent = "";
  $("preview").replaceChildren();
  $("details").hidden = false;
}

export function closeDetails() {
  $("details").hidden = true;
  state.entry = null;
}
$("act-close").addEventListener("click", closeDetails);

const imageTypes = { png: "image/png", jpg: "image/jpeg", jpeg: "image/jpeg", gif: "image/gif", webp: "image/webp", bmp: "image/bmp" };

$("act-view").addEventListener("click", () => run(async () => {
  const e = state.entry;
  if (!e) return;
  const out = $("preview");
  const ext = e.name.includes(".") ? e.name.split(".").pop().toLowerCase() : "";
  if (imageTypes[ext] && e.size <= 20 << 20) {
    const buf = await (await api("GET", sysURL("content", e.path))).arrayBuffer();
    const img = el("img", { alt: "Preview of " + e.name, src: URL.createObjectURL(new Blob([buf], { type: imageTypes[ext] })) });
    out.replaceChildren(img);
    return;
  }
  const ex = await (await api("GET", sysURL("head", e.path) + "?bytes=65536")).json();
  out.replaceChildren(el("pre", { textContent: ex.encoding === "utf-8" ? ex.content : "(binary content, not shown: download it)" }));
  if (ex.truncated) out.append(el("p", { textContent: "Showing the first 64 KiB." }));
}));

// The SHA-256 is computed on the server (sha256sum or openssl there) on demand.
$("act-checksum").addEventListener("click", () => run(async () => {
  const e = state.entry;
  if (!e) return;
  $("checksum").textContent = "Computing the SHA-256…";
  const c = await (await api("GET", sysURL("checksum", e.path) + "?algorithm=sha256")).json();
  if (state.entry === e) $("checksum").textContent = `SHA-256: ${c.checksum}`;
}));

// ---------- the editor ----------

const editor = { path: "", etag: "" };

async function loadEditor(path) {
  const res = await api("GET", sysURL("text", path));
  const t = await res.json();
  editor.path = path;
  editor.etag = res.headers.get("ETag");
  $("editor-text").value = t.content;
  $("editor-status").textContent = `${t.size} bytes, version ${editor.etag.slice(8, 16)}`;
  $("editor-reload").hidden = true;
}

$("act-edit").addEventListener("click", () => run(async () => {
  const e = state.entry;
  if (!e) return;
  $("editor-title").textContent = "Edit " + e.name;
  await loadEditor(e.path);
  $("editor").showModal();
  $("editor-text").focus();
}));

$("editor-save").addEventListener("click", async () => {
  try {
    const res = await api("PUT", sysURL("text", editor.path), { content: $("editor-text").value }, { "If-Match": editor.etag });
    editor.etag = res.headers.get("ETag");
    $("editor-status").textContent = "Saved.";
    const { refresh } = await import("./listing.js");
    refresh();
    $("editor").close();
  } catch (err) {
    if (err instanceof APIError && err.status === 412) {
      $("editor-status").textContent = "Not saved: the file changed on the server since you opened it. " +
        "Your text is still here: copy what you need, then Reload to see the current version.";
      $("editor-reload").hidden = false;
      return;
    }
    $("editor-status").textContent = "Not saved: " + err.message;
  }
});
$("editor-reload").addEventListener("click", () => loadEditor(editor.path).catch(showError));
$("editor-cancel").addEventListener("click", () => $("editor").close());
