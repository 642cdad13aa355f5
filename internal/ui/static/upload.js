// Uploads through the service's resumable upload endpoint, which speaks tus 1.0: a POST
// creates the upload (destination, and the SHA-256 the page computed for files up to 256 MiB,
// in Upload-Metadata), PATCHes of up to CHUNK bytes append at the offset the server committed,
// and the server renames the part file into place on the last byte (checking the digest), so a
// failed upload never leaves a partial file. The server commits every MiB it writes, so a cut
// connection costs at most about a MiB whatever the PATCH size: the page asks the server's
// offset with HEAD and goes on from there. PATCHes are large because each costs the server a
// few round trips to the system (an open, the last write's answer, the closing), which on a far
// system made 8 MiB PATCHes crawl; a 413 (a proxy's body limit) halves them, down to MIN_CHUNK.
// The progress shown is the bytes sent (XHR upload progress). Each upload's URL is kept
// in localStorage under the system, destination, size and modification time of the file, so
// uploading the same file again after a reload or a crash resumes it; the entry is removed on
// success and when the server no longer knows the upload.

import { $, state, session, api, sysURL, join, problemText, showError, APIError, signedOut } from "./core.js";
import { refresh } from "./listing.js";

const csrfHeader = () => ({ "X-CSRF-Token": session.csrf });
const sessionEnded = () => { signedOut(); return new APIError("Your session ended: sign in again.", 401); };
const hashLimit = 256 << 20;
const CHUNK = 1 << 30;    // most bytes per PATCH
const MIN_CHUNK = 1 << 20; // a 413 (a proxy's body limit) halves the PATCHes down to this
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
    headers: { "Tus-Resumable": "1.0.0", ...csrfHeader(), ...headers } });
  if (res.status === 401) {
    throw sessionEnded();
  }
  return res;
}

// patch sends one PATCH of body at offset through XMLHttpRequest, whose upload progress fetch
// does not give: sent(n) hears of the n body bytes sent so far. It resolves to the answer as a
// Response (so that problemText reads it as any other) and rejects when the connection fails.
function patch(url, offset, body, sent) {
  return new Promise((ok, fail) => {
    const xhr = new XMLHttpRequest();
    xhr.open("PATCH", url);
    const headers = { "Tus-Resumable": "1.0.0", ...csrfHeader(), "Content-Type": "application/offset+octet-stream", "Upload-Offset": String(offset) };
    for (const [k, v] of Object.entries(headers)) xhr.setRequestHeader(k, v);
    xhr.upload.onprogress = (ev) => sent(ev.loaded);
    xhr.onerror = () => fail(new Error("the connection failed"));
    xhr.onabort = xhr.onerror;
    xhr.onload = () => {
      if (xhr.status === 401) {
        fail(sessionEnded());
        return;
      }
      if (xhr.status < 200 || xhr.status > 599) {
        fail(new Error(`the answer's status ${xhr.status} is not HTTP's`));
        return;
      }
      const h = new Headers();
      for (const line of xhr.getAllResponseHeaders().trim().split(/[\r\n]+/)) {
        const i = line.indexOf(":");
        if (i > 0) h.append(line.slice(0, i).trim(), line.slice(i + 1).trim());
      }
      const empty = [204, 205, 304].includes(xhr.status);
      ok(new Response(empty ? null : xhr.responseText, { status: xhr.status, headers: h }));
    };
    xhr.send(body);
  });
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
  let chunk = CHUNK;
  while (offset < file.size) {
    progress(offset);
    let res = null;
    try {
      const from = offset;
      res = await patch(url, from, file.slice(from, Math.min(from + chunk, file.size)), (n) => progress(from + n));
    } catch (err) {
      if (err.message.startsWith("Your session ended")) throw err;
    }
    if (res && res.ok) {
      offset = Number(res.headers.get("Upload-Offset"));
      failures = 0;
      continue;
    }
    const tooLarge = res && res.status === 413 && Math.min(chunk, file.size - offset) > MIN_CHUNK;
    if (tooLarge) { // something in front of the service refuses bodies this large: halve the PATCHes
      chunk = Math.max(MIN_CHUNK, Math.floor(Math.min(chunk, file.size - offset) / 2));
    } else if (res && ![409, 423].includes(res.status) && res.status < 500) { // the upload is over: refused, failed or gone
      localStorage.removeItem(key);
      throw new Error(`${relPath}: ${await problemText(res)}`);
    }
    // The connection failed, or another request holds the upload: wait, ask where the
    // server got to and go on from there.
    if (!tooLarge && ++failures > RETRIES) throw new Error(`${relPath}: the upload keeps failing; upload the same file again to resume it`);
    if (!tooLarge) await sleep(500 * failures);
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
  const headers = { ...csrfHeader(), "Content-Type": "application/octet-stream" };
  if (m.sha256) headers["X-Checksum-Sha256"] = m.sha256;
  const res = await fetch(sysURL("content", dest) + "?" + q, { method: "PUT", body: file, credentials: "same-origin", headers });
  if (res.status === 401) {
    throw sessionEnded();
  }
  if (!res.ok) throw new Error(`${relPath}: ${await problemText(res)}`);
}

async function uploadAll(items) {
  const status = $("upload-status");
  $("uploads").hidden = false;
  let done = 0;
  const failed = [];
  for (const { file, path, folder } of items) {
    if (folder) { // an empty folder of a dropped tree: made as it is (with its parents)
      status.textContent = `Creating folder ${done + 1} of ${items.length}: ${path}`;
      try {
        await api("POST", `/v1/systems/${encodeURIComponent(state.system)}/ops/mkdir`, { path: join(state.path, path), parents: true });
      } catch (err) {
        failed.push(`${path}: ${err.message}`);
      }
      done++;
      continue;
    }
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

// walk collects the files under a dropped entry (folders keep their relative paths), and the
// folders with nothing in them as { folder: true } items: a file's upload makes its parent
// folders, an empty folder is made on its own.
async function walk(entry, prefix, out) {
  if (entry.isFile) {
    out.push({ file: await new Promise((ok, fail) => entry.file(ok, fail)), path: prefix + entry.name });
  } else if (entry.isDirectory) {
    const reader = entry.createReader();
    let empty = true;
    for (;;) {
      const batch = await new Promise((ok, fail) => reader.readEntries(ok, fail));
      if (!batch.length) break;
      empty = false;
      for (const e of batch) await walk(e, prefix + entry.name + "/", out);
    }
    if (empty) out.push({ folder: true, path: prefix + entry.name });
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

