// The triggers pane: every trigger's queue (pending, oldest pending age, executed and failed
// counts, recent errors), and the selected trigger's dead letters with retry and purge.
import type { TriggerStatus } from "@herald/sdk";
import type { App } from "./app.js";
import { byId, describeError, h, preview, status } from "./dom.js";

/** How often the visible pane reloads the queues. */
export const TRIGGERS_POLL_MS = 2000;

function age(ms: number | null): string {
  if (ms === null) return "–";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 120_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.round(ms / 60_000)} min`;
}

export function setupTriggers(app: App, visible: () => boolean): void {
  let selected: string | undefined;

  function row(t: TriggerStatus): HTMLTableRowElement {
    const errors = t.recentErrors.slice(-3).map((e) => h("div", { class: "err" }, `${e.task}: ${e.message}`));
    return h("tr", { "data-name": t.name, class: t.name === selected ? "selected" : "", onclick: () => select(t.name) },
      h("td", {}, t.name), h("td", {}, t.collection), h("td", { class: "num" }, String(t.pending)),
      h("td", { class: "num" }, age(t.oldestPendingAgeMs)), h("td", { class: "num" }, String(t.executed)),
      h("td", { class: "num" }, String(t.failed)), h("td", { class: "num dead" }, String(t.dead)),
      h("td", {}, ...errors));
  }

  async function reload(): Promise<void> {
    try {
      const list = await app.db.triggers();
      byId("t-table").querySelector("tbody")!.replaceChildren(...list.map(row));
      status("t-status", `${list.length} trigger(s)`);
      if (selected === undefined && list.length > 0) selected = list[0].name;
      await reloadDead();
    } catch (e) {
      status("t-status", describeError(e), "error");
    }
  }

  async function reloadDead(): Promise<void> {
    const body = byId("dead-table").querySelector("tbody")!;
    if (selected === undefined) return void body.replaceChildren();
    byId("dead-title").textContent = `Dead letters of ${selected}`;
    const checked = new Set([...body.querySelectorAll<HTMLInputElement>("input:checked")].map((i) => i.value));
    try {
      const dead = await app.db.deadLetters(selected, { limit: 100 });
      body.replaceChildren(
        ...dead.map((d) =>
          h("tr", { "data-task": d.task },
            h("td", {}, h("input", { type: "checkbox", value: d.task, checked: checked.has(d.task) })),
            h("td", {}, d.task), h("td", {}, `${d.collection}/${d.id}`), h("td", {}, d.op),
            h("td", { class: "num" }, String(d.attempts)), h("td", { class: "err" }, preview(d.lastError, 200))),
        ),
      );
    } catch (e) {
      status("dead-status", describeError(e), "error");
    }
  }

  function select(name: string): void {
    selected = name;
    for (const tr of byId("t-table").querySelectorAll("tr[data-name]"))
      tr.classList.toggle("selected", tr.getAttribute("data-name") === name);
    void reloadDead();
  }

  async function act(what: "retry" | "purge", all: boolean): Promise<void> {
    if (selected === undefined) return status("dead-status", "pick a trigger", "error");
    const tasks = all ? undefined : [...byId("dead-table").querySelectorAll<HTMLInputElement>("input:checked")].map((i) => i.value);
    if (tasks !== undefined && tasks.length === 0) return status("dead-status", "select dead letters first", "error");
    try {
      const n = what === "retry" ? await app.db.retryDead(selected, tasks) : await app.db.purgeDead(selected, tasks);
      status("dead-status", `${what === "retry" ? "retried" : "purged"} ${n}`, "ok");
      await reload();
    } catch (e) {
      status("dead-status", describeError(e), "error");
    }
  }

  byId("t-refresh").addEventListener("click", () => void reload());
  byId("dead-retry").addEventListener("click", () => void act("retry", false));
  byId("dead-retry-all").addEventListener("click", () => void act("retry", true));
  byId("dead-purge").addEventListener("click", () => void act("purge", false));
  byId("dead-purge-all").addEventListener("click", () => void act("purge", true));
  setInterval(() => {
    if (visible()) void reload();
  }, TRIGGERS_POLL_MS);
  app.onClient(() => void reload());
}
