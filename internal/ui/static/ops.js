// Operations on entries, from the details panel or on the selection: new folder, rename, move,
// copy, permissions, delete (confirmed). Everything runs on the server: a move is a rename there;
// a file is copied by the API's copy operation (cp on the server), and a folder or a large file
// by a transfer, whose progress the transfers view shows and whose end is announced.

import { $, state, api, sysURL, join, ask, run, notify } from "./core.js";
import { refresh, clearSelection } from "./listing.js";
import { closeDetails } from "./details.js";
import { submitTransfer } from "./transfers.js";

const opURL = (op) => `/v1/systems/${encodeURIComponent(state.system)}/ops/${op}`;

// A file larger than this is copied as a transfer (progress, cancel) rather than in one request.
const COPY_INLINE_MAX = 64 << 20;

$("btn-mkdir").addEventListener("click", () => run(async () => {
  const v = await ask("New folder", [{ name: "name", label: "New folder name", value: "" }]);
  if (!v || !v.name) return;
  await api("POST", opURL("mkdir"), { path: join(state.path, v.name) });
  refresh();
}));

$("act-rename").addEventListener("click", () => run(async () => {
  const e = state.entry;
  if (!e) return;
  const v = await ask("Rename", [{ name: "name", label: `Rename “${e.name}” to`, value: e.name }]);
  if (!v || !v.name || v.name === e.name) return;
  await api("POST", opURL("move"), { source: e.path, destination: join(state.path, v.name) });
  refresh();
}));

// entries the action applies to: the selection when the action is the selection bar's, else
// the entry in the details panel.
const targets = (fromSelection) => (fromSelection ? [...state.marked.values()] : state.entry ? [state.entry] : []);

async function moveOrCopy(kind, fromSelection) {
  const list = targets(fromSelection);
  if (!list.length) return;
  const what = list.length === 1 ? `“${list[0].name}”` : `${list.length} entries`;
  const v = await ask(`${kind === "move" ? "Move" : "Copy"} ${what}`,
    [{ name: "dest", label: "To the folder", value: state.path }],
    `On ${state.system}. An entry of the same name there is not replaced.`, kind === "move" ? "Move" : "Copy");
  if (!v || !v.dest) return;
  let transfers = 0;
  for (const e of list) {
    const dest = join(v.dest.replace(/\/+$/, "") || "/", e.name);
    if (kind === "move") {
      await api("POST", opURL("move"), { source: e.path, destination: dest });
    } else if (e.type === "dir" || e.size > COPY_INLINE_MAX) {
      await submitTransfer({ source: { system: state.system, path: e.path }, destination: { system: state.system, path: e.type === "dir" ? dest : v.dest.replace(/\/*$/, "/") }, recursive: e.type === "dir" });
      transfers++;
    } else {
      await api("POST", opURL("copy"), { source: e.path, destination: dest });
    }
  }
  if (transfers) notify(`${transfers} cop${transfers === 1 ? "y" : "ies"} started as transfers: see Transfers for progress.`);
  if (fromSelection) clearSelection();
  refresh();
}

$("act-move").addEventListener("click", () => run(() => moveOrCopy("move", false)));
$("act-copy").addEventListener("click", () => run(() => moveOrCopy("copy", false)));
$("sel-move").addEventListener("click", () => run(() => moveOrCopy("move", true)));
$("sel-copy").addEventListener("click", () => run(() => moveOrCopy("copy", true)));

$("act-chmod").addEventListener("click", () => run(async () => {
  const e = state.entry;
  if (!e) return;
  const fields = [{ name: "mode", label: `Permissions of “${e.name}” (octal, e.g. 0640)`, value: e.mode }];
  if (e.type === "dir") fields.push({ name: "recursive", label: "Also everything inside", type: "checkbox" });
  const v = await ask("Permissions", fields, "", "Change");
  if (!v || !v.mode || (v.mode === e.mode && !v.recursive)) return;
  await api("POST", opURL("chmod"), { path: e.path, mode: v.mode, recursive: !!v.recursive });
  refresh();
}));

// removeEntries deletes the entries after one confirmation.
export async function removeEntries(list) {
  if (!list.length) return;
  const one = list.length === 1;
  const what = one ? (list[0].type === "dir" ? "the folder and everything in it" : "the file") : `${list.length} entries (folders with everything in them)`;
  const ok = await ask(one ? `Delete “${list[0].name}”?` : `Delete ${list.length} entries?`, [],
    `This deletes ${what} on ${state.system}. It cannot be undone.`, "Delete");
  if (!ok) return;
  for (const e of list) {
    await api("DELETE", sysURL("files", e.path) + (e.type === "dir" ? "?recursive=true" : ""));
    state.marked.delete(e.name);
  }
  closeDetails();
  clearSelection();
  refresh();
}

$("act-delete").addEventListener("click", () => run(() => removeEntries(targets(false))));
$("sel-delete").addEventListener("click", () => run(() => removeEntries(targets(true))));

