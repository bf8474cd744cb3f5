// DOM helpers: element construction, lookups by id, JSON fields, and status lines.

type Child = Node | string | null | undefined | false;

/** `h("button", {class: "x", onclick}, "label")`: an element with attributes or properties. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, unknown> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v as EventListener);
    else if (k === "class") el.className = String(v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) el.append(c);
  return el;
}

/** The element with this id; throws if the page lacks it (a programming error). */
export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (el === null) throw new Error(`#${id} is missing from the page`);
  return el as T;
}

/** Parses a JSON input; empty means `fallback`. Throws an Error naming the field. */
export function jsonField(id: string, fallback: unknown): unknown {
  const text = byId<HTMLInputElement | HTMLTextAreaElement>(id).value.trim();
  if (text === "") return fallback;
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new Error(`${id}: not valid JSON (${(e as Error).message})`);
  }
}

/** An optional non-negative integer input. */
export function intField(id: string): number | undefined {
  const text = byId<HTMLInputElement>(id).value.trim();
  if (text === "") return undefined;
  const n = Number(text);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${id}: expected a non-negative integer`);
  return n;
}

/** Shows a status line: `ok` in green, errors in red (with the server's code when there is one). */
export function status(id: string, text: string, kind: "ok" | "error" | "info" = "info"): void {
  const el = byId(id);
  el.textContent = text;
  el.className = `status ${kind}`;
}

/** The message of anything thrown, with a HeraldError's stable code in front. */
export function describeError(e: unknown): string {
  if (e instanceof Error) {
    const code = (e as { code?: unknown }).code;
    return typeof code === "string" ? `${code}: ${e.message}` : e.message;
  }
  return String(e);
}

/** Compact one-line JSON for table cells, cut at `max` characters. */
export function preview(v: unknown, max = 120): string {
  const s = JSON.stringify(v) ?? "undefined";
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}
