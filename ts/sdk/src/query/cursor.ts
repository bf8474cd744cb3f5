// Query cursors (crates/query cursor.rs): `startAt`/`startAfter`/`endAt`/`endBefore`, each an
// array of values in the order of the sort keys (a prefix of them), optionally followed by an
// `_id` for the tie-break every sort ends with. A value is compared with the document's sort key
// (arrays by their smallest element ascending, largest descending) in the key's direction.
// A collection-group query's cursors are positions in the group's order (the sort, `_id`, then
// `_path`), so they may end with a document's full path (`Cursors.parseGroup`).
import { CURSOR_ID_BYTES_MAX, CURSOR_PATH_BYTES_MAX, QueryError } from "./errors.js";
import { order, PATH_MEMBER, type KeyValue, type Sort } from "./sort.js";
import type { Value } from "./value.js";

/** One bound: its values, and whether documents equal to it are inside (`startAt`, `endAt`). */
export interface Cursor {
  values: Value[];
  inclusive: boolean;
}

export class Cursors {
  private constructor(
    readonly start: Cursor | undefined,
    readonly end: Cursor | undefined,
  ) {}

  static none(): Cursors {
    return new Cursors(undefined, undefined);
  }

  /** Parses the four members (`undefined`/`null` is absent) against the query's sort. */
  static parse(sort: Sort, spec: { startAt?: unknown; startAfter?: unknown; endAt?: unknown; endBefore?: unknown }): Cursors {
    return new Cursors(
      oneOf(sort, ["startAt", spec.startAt], ["startAfter", spec.startAfter]),
      oneOf(sort, ["endAt", spec.endAt], ["endBefore", spec.endBefore]),
    );
  }

  /** Parses the cursors of a collection-group query against the group's order
   * (`sort.forGroup()`: the sort, then `_path` in the direction of `_id`). */
  static parseGroup(sort: Sort, spec: { startAt?: unknown; startAfter?: unknown; endAt?: unknown; endBefore?: unknown }): Cursors {
    return Cursors.parse(sort.forGroup(), spec);
  }

  isNone(): boolean {
    return this.start === undefined && this.end === undefined;
  }

  /** Whether a document lies between the cursors. */
  admits(sort: Sort, doc: Value): boolean {
    if (this.isNone()) return true;
    const key = sort.keyValues(doc);
    if (this.start !== undefined) {
      const o = position(sort, key, this.start);
      if (!(o > 0 || (this.start.inclusive && o === 0))) return false;
    }
    if (this.end !== undefined) {
      const o = position(sort, key, this.end);
      if (!(o < 0 || (this.end.inclusive && o === 0))) return false;
    }
    return true;
  }
}

/** Where a document with sort key `key` is relative to the cursor, on the cursor's keys only. */
function position(sort: Sort, key: KeyValue[], c: Cursor): number {
  for (let i = 0; i < c.values.length; i++) {
    let o = order(key[i], { k: "v", v: c.values[i] });
    if (sort.keys[i].desc) o = -o;
    if (o !== 0) return o < 0 ? -1 : 1;
  }
  return 0;
}

function oneOf(sort: Sort, [aName, a]: [string, unknown], [bName, b]: [string, unknown]): Cursor | undefined {
  const absent = (v: unknown) => v === undefined || v === null;
  if (absent(a) && absent(b)) return undefined;
  if (absent(b)) return parseOne(sort, aName, a, true);
  if (absent(a)) return parseOne(sort, bName, b, false);
  throw new QueryError(
    "bad_query",
    `bad query: ${aName} and ${bName} cannot both be given: a query has one cursor at each end`,
  );
}

function parseOne(sort: Sort, name: string, v: unknown, inclusive: boolean): Cursor {
  const bad = (why: string) => new QueryError("bad_query", `bad query: ${name} ${why}`);
  if (!Array.isArray(v))
    throw bad(`must be an array of values in the order of the sort fields, got ${JSON.stringify(v)}`);
  if (v.length === 0) throw bad("must have at least one value");
  const keys = sort.keys;
  if (v.length > keys.length) {
    const then =
      keys[keys.length - 1]?.path.dotted === PATH_MEMBER
        ? "then an _id, then a _path (a collection group's tie-break)"
        : "then an _id";
    throw bad(
      `has ${v.length} values but the query is ordered by ${keys.length} key(s) (${keys
        .map((k) => k.path.dotted)
        .join(", ")}): at most one value per sort field, ${then}`,
    );
  }
  v.forEach((value, i) => {
    const field = keys[i].path.dotted;
    const [what, max] =
      field === "_id"
        ? ["a document id", CURSOR_ID_BYTES_MAX]
        : field === PATH_MEMBER
          ? ["a document's full path (collection/id)", CURSOR_PATH_BYTES_MAX]
          : [undefined, 0];
    if (what === undefined) return;
    const ok = typeof value === "string" && value.length > 0 && new TextEncoder().encode(value).length <= max;
    if (!ok) throw bad(`has ${JSON.stringify(value)} for ${field}: ${what} is a string of 1 to ${max} bytes`);
  });
  return { values: v as Value[], inclusive };
}
