// Sharing: the dialog that grants a user or group access to a path and makes links (expiry,
// uses, copy to the clipboard), lists both with Revoke, and the "Shared with me" view. Only a
// system's owner can share it; the API says so in words otherwise.

import { $, state, api, el, fmtTime, run, notify } from "./core.js";

const sysBase = () => `/v1/systems/${encodeURIComponent(state.system)}`;
let sharing = null; // the entry the dialog is about

async function renderGrants() {
  const data = await (await api("GET", sysBase() + "/grants")).json();
  const mine = (data.grants || []).filter((g) => g.path === sharing.path);
  $("grant-list").replaceChildren(...mine.map((g) => el("li", {},
    el("span", { textContent: `${g.principal}: ${g.access}${g.expires_at ? ", until " + fmtTime(g.expires_at) : ""}` }), " ",
    revokeButton(`Revoke ${g.principal}'s access`, `${sysBase()}/grants/${encodeURIComponent(g.id)}`, renderGrants))));
  if (!mine.length) $("grant-list").replaceChildren(el("li", { className: "muted", textContent: "Not shared with anyone." }));
}

async function renderLinks() {
  const data = await (await api("GET", sysBase() + "/links")).json();
  const mine = (data.links || []).filter((l) => l.path === sharing.path);
  $("link-list").replaceChildren(...mine.map((l) => el("li", {},
    el("span", { textContent: `${l.access} link, used ${l.uses}${l.max_uses ? " of " + l.max_uses : ""} times, expires ${fmtTime(l.expires_at)}` }), " ",
    revokeButton("Revoke this link", `${sysBase()}/links/${encodeURIComponent(l.id)}`, renderLinks))));
  if (!mine.length) $("link-list").replaceChildren(el("li", { className: "muted", textContent: "No links." }));
}

function revokeButton(label, url, again) {
  const b = el("button", { type: "button", className: "danger", textContent: "Revoke", "aria-label": label });
  b.addEventListener("click", () => run(async () => {
    await api("DELETE", url);
    notify("Revoked.");
    await again();
  }));
  return b;
}

$("act-share").addEventListener("click", () => run(async () => {
  sharing = state.entry;
  if (!sharing) return;
  $("share-title").textContent = `Share “${sharing.name}”`;
  $("link-new").hidden = true;
  $("share-status").textContent = "";
  $("share").showModal();
  await Promise.all([renderGrants(), renderLinks()]);
}));
$("share-close").addEventListener("click", () => $("share").close());

$("grant-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  run(async () => {
    let principal = $("grant-principal").value.trim();
    if (!principal) return;
    if (!principal.includes(":") && principal !== "authenticated") principal = "user:" + principal;
    const body = { principal, path: sharing.path, access: $("grant-access").value };
    if ($("grant-expiry").value) body.expires_at = new Date($("grant-expiry").value).toISOString();
    await api("POST", sysBase() + "/grants", body);
    $("grant-principal").value = "";
    $("share-status").textContent = `Shared with ${principal}.`;
    await renderGrants();
  });
});

$("link-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  run(async () => {
    const body = { path: sharing.path, access: $("link-access").value };
    const hours = Number($("link-hours").value);
    if (hours > 0) body.expires_in_s = Math.round(hours * 3600);
    const uses = Number($("link-uses").value);
    if (uses > 0) body.max_uses = uses;
    const l = await (await api("POST", sysBase() + "/links", body)).json();
    $("link-url").value = sharing.type === "dir" ? l.url + "?archive=tar.gz" : l.url;
    $("link-new").hidden = false;
    $("share-status").textContent = "Link created: copy it now, it is shown only once.";
    $("link-url").select();
    await renderLinks();
  });
});

$("link-copy").addEventListener("click", async () => {
  try {
    await navigator.clipboard.writeText($("link-url").value);
    $("share-status").textContent = "Copied to the clipboard.";
  } catch {
    $("link-url").select();
    $("share-status").textContent = "Press Ctrl+C (⌘C) to copy the selected link.";
  }
});

// ---------- shared with me ----------

export async function showShared() {
  const data = await (await api("GET", "/v1/systems")).json();
  const rows = [];
  for (const s of data.shared || []) {
    for (const p of s.paths || []) {
      const a = el("a", { href: "#/" + encodeURIComponent(s.id) + "/" + p.path.replace(/^\/+/, "").split("/").map(encodeURIComponent).join("/"), textContent: p.path });
      rows.push(el("tr", {}, el("td", { textContent: s.system }), el("td", { textContent: s.owner }), el("td", {}, a),
        el("td", { textContent: p.access }), el("td", { textContent: p.via }), el("td", { textContent: p.expires_at ? fmtTime(p.expires_at) : "never" })));
    }
  }
  $("shared-rows").replaceChildren(...rows);
  $("shared-none").hidden = rows.length > 0;
}

