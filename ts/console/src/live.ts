// The live query pane: one `onSnapshot` subscription whose rows are edited in place as the
// snapshot's `docChanges()` say (remove at oldIndex, insert at newIndex, in order), each edit
// briefly highlighted by kind. A removed row fades out as a "ghost" that no longer counts as a
// position, so the rows that do count always equal the snapshot's docs.
import type { DocumentChange, QuerySnapshot } from "@herald/sdk";
import type { App } from "./app.js";
import { byId, describeError, h, preview, status } from "./dom.js";
import { readSpec } from "./query.js";

/** How long a highlight (and a removed row's ghost) stays. */
export const FLASH_MS = 1200;
/** Lines kept in the event log. */
export const LOG_LINES_MAX = 200;

/** Keeps a list element's rows equal to a query's docs by applying document changes. */
export class LiveList {
  /** The rows that count, in result order (ghosts excluded). */
  private rows: HTMLLIElement[] = [];

  constructor(private readonly list: HTMLElement) {}

  reset(): void {
    this.rows = [];
    this.list.replaceChildren();
  }

  ids(): string[] {
    return this.rows.map((r) => r.dataset.id ?? "");
  }

  /** Writes each row's position (0-based, as the changes' indexes are) into its first cell. */
  renumber(): void {
    this.rows.forEach((r, i) => {
      const pos = r.firstElementChild;
      if (pos !== null) pos.textContent = String(i);
    });
  }

  /** Applies one change; `highlight` false for the initial result (nothing happened yet). */
  apply(c: DocumentChange, highlight = true): void {
    const flash = (el: HTMLElement, cls: string) => {
      if (!highlight) return;
      el.classList.remove("flash-add", "flash-change", "flash-changeIndex");
      void el.offsetWidth; // restart the animation
      el.classList.add(cls);
      setTimeout(() => el.classList.remove(cls), FLASH_MS);
    };
    let row: HTMLLIElement | undefined;
    if (c.oldIndex >= 0) {
      row = this.rows.splice(c.oldIndex, 1)[0];
      if (row === undefined || row.dataset.id !== c.doc.id) throw new Error(`live list out of step at ${c.oldIndex}`);
      if (c.kind === "remove") {
        row.classList.add("removing");
        if (row.firstElementChild !== null) row.firstElementChild.textContent = "";
        setTimeout(() => row!.remove(), FLASH_MS);
        return;
      }
    }
    if (row === undefined) row = h("li", { "data-id": c.doc.id });
    row.replaceChildren(h("span", { class: "pos" }), h("span", { class: "id" }, c.doc.id), h("span", { class: "json" }, preview(c.doc.data, 160)));
    if (c.kind === "change") {
      // In place: oldIndex === newIndex.
      this.rows.splice(c.newIndex, 0, row);
      flash(row, "flash-change");
      return;
    }
    const before = this.rows[c.newIndex];
    if (before !== undefined) this.list.insertBefore(row, before);
    else {
      const last = this.rows[this.rows.length - 1];
      if (last !== undefined) last.after(row);
      else this.list.prepend(row);
    }
    this.rows.splice(c.newIndex, 0, row);
    flash(row, c.kind === "add" ? "flash-add" : "flash-changeIndex");
  }
}

export function setupLive(app: App): void {
  const list = new LiveList(byId("live-rows"));
  const log = byId("live-log");
  let stop: (() => void) | undefined;

  function logLine(text: string, kind: string): void {
    log.prepend(h("li", { class: kind }, text));
    while (log.children.length > LOG_LINES_MAX) log.lastElementChild?.remove();
  }

  function unsubscribe(): void {
    stop?.();
    stop = undefined;
    byId<HTMLButtonElement>("l-stop").disabled = true;
  }

  function subscribe(): void {
    unsubscribe();
    list.reset();
    log.replaceChildren();
    try {
      const { collection, spec } = readSpec("l-", false);
      const q = app.db.query(collection, spec);
      let first = true;
      stop = app.db.onSnapshot(
        q,
        (snap: QuerySnapshot) => {
          for (const c of snap.docChanges()) {
            list.apply(c, !first);
            const where = c.kind === "add" ? `at ${c.newIndex}` : c.kind === "remove" ? `from ${c.oldIndex}` : c.kind === "change" ? `at ${c.newIndex}` : `${c.oldIndex} → ${c.newIndex}`;
            logLine(`seq ${snap.seq}: ${c.kind} ${c.doc.id} ${where}`, c.kind);
          }
          list.renumber();
          first = false;
          const m = snap.metadata;
          status("l-status", `${snap.size} row(s) at seq ${snap.seq}${m.fromCache ? ", from cache" : ""}${m.hasPendingWrites ? ", pending writes" : ""}`, "ok");
        },
        (e: Error) => {
          status("l-status", describeError(e), "error");
          unsubscribe();
        },
      );
      byId<HTMLButtonElement>("l-stop").disabled = false;
      status("l-status", "subscribing…");
    } catch (e) {
      status("l-status", describeError(e), "error");
    }
  }

  byId("l-subscribe").addEventListener("click", subscribe);
  byId("l-stop").addEventListener("click", () => {
    unsubscribe();
    status("l-status", "stopped");
  });
  app.onSelect((c) => {
    byId<HTMLInputElement>("l-collection").value = c;
  });
  app.onClient(() => {
    if (stop !== undefined) subscribe();
  });
}
