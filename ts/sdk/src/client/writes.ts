// The local effect of a write (its wire form, `WireWrite`, is in protocol.ts) on a document,
// which is what latency compensation shows before the server answers; and client-made ids.
import { Filter } from "../query/filter.js";
import { Update } from "../query/update.js";
import { clone, type Doc } from "../query/value.js";
import type { WireWrite } from "../protocol.js";

export type { WireWrite } from "../protocol.js";

/** What the local view knows of a document: its content, absent, or unknown (not cached). */
export type Known = Doc | null | undefined;

/** Validates a write before it is queued, so a malformed one fails at once, locally. */
export function validate(w: WireWrite): void {
  if (w.op === "update") Update.parse(w.update);
}

/**
 * The document after `w`, given what is known before it. An update of an unknown document stays
 * unknown (the server has the base), except an upsert of one known not to exist. A write the
 * server would refuse (a type mismatch) leaves the document as it was; the server's refusal
 * rolls it back.
 */
export function applyWrite(w: WireWrite, before: Known, nowMs: number): Known {
  switch (w.op) {
    case "put":
    case "insert":
      return { _id: w.id, ...stripId(clone(w.doc)) };
    case "delete":
      return null;
    case "update": {
      try {
        const u = Update.parse(w.update);
        if (before === undefined) return undefined;
        if (before === null) {
          if (!w.upsert) return null;
          return u.upsertDocument(Filter.parse({ _id: w.id }), nowMs);
        }
        const after = u.apply(before, nowMs);
        return { _id: w.id, ...stripId(after) };
      } catch {
        return before;
      }
    }
  }
}

function stripId(d: Doc): Doc {
  const { _id: _ignored, ...rest } = d;
  return rest;
}

/** A 20-character id from the same alphabet the server uses, uniformly random. */
export function generateId(): string {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  let out = "";
  while (out.length < 20) {
    const bytes = new Uint8Array(32);
    globalThis.crypto.getRandomValues(bytes);
    // 248 = 4 * 62: bytes above it would favour the first letters, so they are skipped.
    for (const b of bytes) if (b < 248 && out.length < 20) out += alphabet[b % 62];
  }
  return out;
}
