// The query pane: filter, sort, skip, limit and projection as JSON, run on the server with
// `explain`, showing the documents and the plan (index or scan, keys and documents examined);
// with "Collection group" ticked, over every collection whose last segment is the name given.
import type { QuerySpec } from "@herald/sdk";
import type { App } from "./app.js";
import { byId, describeError, h, intField, jsonField, preview, status } from "./dom.js";

/** The query typed into the inputs whose ids start with `prefix` (`q-` or `l-`). */
export function readSpec(prefix: string, withProjection: boolean): { collection: string; spec: QuerySpec } {
  const collection = byId<HTMLInputElement>(`${prefix}collection`).value.trim();
  if (collection === "") throw new Error("collection: required");
  const spec: Record<string, unknown> = {};
  const filter = jsonField(`${prefix}filter`, undefined);
  const sort = jsonField(`${prefix}sort`, undefined);
  const skip = intField(`${prefix}skip`);
  const limit = intField(`${prefix}limit`);
  if (filter !== undefined) spec.filter = filter;
  if (sort !== undefined) spec.sort = sort;
  if (skip !== undefined) spec.skip = skip;
  if (limit !== undefined) spec.limit = limit;
  if (withProjection) {
    const projection = jsonField(`${prefix}projection`, undefined);
    if (projection !== undefined) spec.projection = projection;
  }
  return { collection, spec: spec as QuerySpec };
}

export function setupQuery(app: App): void {
  async function run(): Promise<void> {
    const body = byId("q-results").querySelector("tbody")!;
    try {
      const { collection, spec } = readSpec("q-", true);
      status("q-status", "running…");
      // A collection group: every collection with that last segment; each result has `_path`.
      const group = byId<HTMLInputElement>("q-group").checked;
      const target = group ? app.db.collectionGroup(collection) : collection;
      // `query` parses locally first, so a malformed query fails here with its stable code.
      const r = await app.db.explain(app.db.query(target, spec));
      const label = (d: Record<string, unknown>): string => String(group ? d._path : d._id);
      body.replaceChildren(
        ...r.docs.map((d, i) =>
          h("tr", { "data-id": label(d) }, h("td", {}, String(i)), h("td", {}, label(d)), h("td", { class: "json" }, preview(d, 200))),
        ),
      );
      byId("q-explain").textContent = JSON.stringify(r.explain, null, 2);
      status("q-status", `${r.docs.length} document(s) at seq ${r.seq}; plan ${String(r.explain.plan.type)}`, "ok");
    } catch (e) {
      body.replaceChildren();
      byId("q-explain").textContent = "";
      status("q-status", describeError(e), "error");
    }
  }
  byId("q-run").addEventListener("click", () => void run());
  app.onSelect((c) => {
    byId<HTMLInputElement>("q-collection").value = c;
  });
}
