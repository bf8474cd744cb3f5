// The collection list (sidebar) and the document browser: the first documents of the selected
// collection by id, and an editor that saves a whole document with PUT (`set`) or deletes it.
import type { Doc } from "@herald/sdk";
import type { App } from "./app.js";
import { byId, describeError, h, preview, status } from "./dom.js";

/** Documents shown per collection (by `_id`); the Query pane pages through more. */
export const BROWSE_DOCS_MAX = 200;

export function setupDocs(app: App): { reloadCollections(): Promise<void> } {
  let open: string | undefined; // the id in the editor

  async function reloadCollections(): Promise<void> {
    try {
      const list = await app.db.listCollections();
      const ul = byId("collections");
      ul.replaceChildren(
        ...list.map((c) =>
          h("li", { class: c.name === app.collection ? "selected" : "", "data-name": c.name },
            h("button", { onclick: () => app.select(c.name) }, c.name)),
        ),
      );
      status("collections-status", list.length === 0 ? "no documents yet" : `${list.length} collection(s)`);
    } catch (e) {
      status("collections-status", describeError(e), "error");
    }
  }

  async function reloadDocs(): Promise<void> {
    const c = app.collection;
    if (c === undefined) return;
    byId("docs-title").textContent = c;
    const body = byId("docs-table").querySelector("tbody")!;
    try {
      const snap = await app.db.get(app.db.query(c, { sort: { _id: 1 }, limit: BROWSE_DOCS_MAX }));
      body.replaceChildren(
        ...snap.docs.map((d) =>
          h("tr", { "data-id": d.id, class: d.id === open ? "selected" : "", onclick: () => void openDoc(d.id) },
            h("td", {}, d.id), h("td", { class: "json" }, preview(d.data))),
        ),
      );
    } catch (e) {
      status("doc-status", describeError(e), "error");
    }
  }

  async function openDoc(id: string): Promise<void> {
    const c = app.collection;
    if (c === undefined || id === "") return;
    open = id;
    byId("editor-title").textContent = `${c}/${id}`;
    try {
      const snap = await app.db.get(app.db.doc(`${c}/${id}`));
      byId<HTMLTextAreaElement>("doc-json").value = snap.exists ? JSON.stringify(snap.data, null, 2) : "{}";
      status("doc-status", snap.exists ? "loaded" : "new document (not saved yet)");
    } catch (e) {
      status("doc-status", describeError(e), "error");
    }
    for (const tr of byId("docs-table").querySelectorAll("tr[data-id]"))
      tr.classList.toggle("selected", tr.getAttribute("data-id") === id);
  }

  async function save(): Promise<void> {
    const c = app.collection;
    if (c === undefined || open === undefined) return status("doc-status", "open a document first", "error");
    let data: Doc;
    try {
      const v: unknown = JSON.parse(byId<HTMLTextAreaElement>("doc-json").value);
      if (typeof v !== "object" || v === null || Array.isArray(v)) throw new Error("a document is a JSON object");
      data = v as Doc;
    } catch (e) {
      return status("doc-status", `not saved: ${describeError(e)}`, "error");
    }
    status("doc-status", "saving…");
    try {
      const r = await app.db.set(app.db.doc(`${c}/${open}`), data);
      status("doc-status", `saved: version ${r.results[0]?.version}, seq ${r.seq}`, "ok");
      await reloadDocs();
    } catch (e) {
      status("doc-status", `not saved: ${describeError(e)}`, "error");
    }
  }

  async function remove(): Promise<void> {
    const c = app.collection;
    if (c === undefined || open === undefined) return;
    try {
      const r = await app.db.remove(app.db.doc(`${c}/${open}`));
      status("doc-status", `deleted at seq ${r.seq}`, "ok");
      await Promise.all([reloadDocs(), reloadCollections()]);
    } catch (e) {
      status("doc-status", describeError(e), "error");
    }
  }

  byId("collections-refresh").addEventListener("click", () => void reloadCollections());
  byId("docs-refresh").addEventListener("click", () => void reloadDocs());
  byId("doc-open").addEventListener("click", () => void openDoc(byId<HTMLInputElement>("doc-id").value.trim()));
  byId("doc-save").addEventListener("click", () => void save());
  byId("doc-delete").addEventListener("click", () => void remove());
  app.onSelect(() => {
    open = undefined;
    byId("editor-title").textContent = "No document open";
    byId<HTMLTextAreaElement>("doc-json").value = "";
    status("doc-status", "");
    for (const li of byId("collections").querySelectorAll("li"))
      li.classList.toggle("selected", li.getAttribute("data-name") === app.collection);
    void reloadDocs();
  });
  app.onClient(() => void reloadCollections().then(reloadDocs));
  return { reloadCollections };
}
