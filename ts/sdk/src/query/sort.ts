// Sort specifications and the total order of results (crates/query sort.rs and sortkey.rs): each
// key reduces a document to one value (arrays: smallest ascending, largest descending; missing
// as null; an empty array at the end of the path below null), keys crossing the same array pair
// values per element, and ties are broken by `_id` ascending.
import { QueryError, SORT_KEYS_MAX } from "./errors.js";
import { parsePath, type FieldPath, type Segment } from "./path.js";
import { compare, isObject, isNumber, numberValue, type Doc, type Value } from "./value.js";

/** The member of a collection-group result document that holds its full path
 * (`collection/id`): the last key of a group's order, since ids repeat across collections. */
export const PATH_MEMBER = "_path";

export interface SortKey {
  path: FieldPath;
  desc: boolean;
}

/** One key's value for one document: an empty array, null/missing, or a value. */
export type KeyValue = { k: "empty" } | { k: "null" } | { k: "v"; v: Value };

const NULL: KeyValue = { k: "null" };
const EMPTY: KeyValue = { k: "empty" };
const TUPLES_MAX = 10_000;

function rank(kv: KeyValue): number {
  if (kv.k === "empty") return 0;
  if (kv.k === "null" || kv.v === null) return 1;
  return 2;
}

export function order(a: KeyValue, b: KeyValue): number {
  if (a.k === "v" && b.k === "v") return compare(a.v, b.v);
  return rank(a) - rank(b);
}

export class Sort {
  private constructor(readonly keys: SortKey[]) {}

  static byId(): Sort {
    return new Sort([idKey()]);
  }

  /** Parses `{"year": -1, "title": 1}`; `undefined`/`null` is "by _id". */
  static parse(spec: unknown): Sort {
    if (spec === null || spec === undefined) return Sort.byId();
    const s = Sort.parseWithoutId(spec);
    if (!s.keys.some((k) => k.path.dotted === "_id")) s.keys.push(idKey());
    return s;
  }

  static parseWithoutId(spec: unknown): Sort {
    if (!isObject(spec))
      throw new QueryError("bad_sort", `bad sort: sort must be an object, got ${JSON.stringify(spec)}`);
    const fields = Object.keys(spec);
    if (fields.length > SORT_KEYS_MAX)
      throw new QueryError("limit_exceeded", `limit exceeded: sort has more than ${SORT_KEYS_MAX} keys`);
    const keys: SortKey[] = [];
    for (const field of fields) {
      const dir = spec[field];
      const d = isNumber(dir) ? numberValue(dir) : NaN;
      if (d !== 1 && d !== -1)
        throw new QueryError(
          "bad_sort",
          `bad sort: sort direction for '${field}' must be 1 or -1, got ${JSON.stringify(dir)}`,
        );
      const path = parsePath(field);
      if (typeof path === "string") throw new QueryError("bad_sort", `bad sort: ${path}`);
      if (field.startsWith("$")) throw new QueryError("bad_sort", `bad sort: cannot sort by '${field}'`);
      keys.push({ path, desc: d === -1 });
    }
    return new Sort(keys);
  }

  /** A collection group's result order: this sort, then `_path` in the direction of `_id`. */
  forGroup(): Sort {
    const desc = this.keys.find((k) => k.path.dotted === "_id")?.desc === true;
    return new Sort([...this.keys, { path: parsePath(PATH_MEMBER) as FieldPath, desc }]);
  }

  /** Compares two documents in result order. */
  compare(a: Value, b: Value): number {
    return this.compareKeys(this.keyValues(a), this.keyValues(b));
  }

  /** Sorts documents in result order (keys computed once per document). */
  sort<T extends Value>(docs: T[]): T[] {
    const keyed = docs.map((d) => ({ d, k: this.keyValues(d) }));
    keyed.sort((x, y) => this.compareKeys(x.k, y.k));
    return keyed.map((x) => x.d);
  }

  keyValues(doc: Value): KeyValue[] {
    if (!isObject(doc)) return this.keys.map(() => NULL);
    return sortKey(
      doc,
      this.keys.map((k) => k.path.segments),
      this.keys.map((k) => k.desc),
    );
  }

  compareKeys(a: KeyValue[], b: KeyValue[]): number {
    for (let i = 0; i < this.keys.length; i++) {
      let o = order(a[i], b[i]);
      if (this.keys[i].desc) o = -o;
      if (o !== 0) return o;
    }
    return 0;
  }
}

function idKey(): SortKey {
  return { path: parsePath("_id") as FieldPath, desc: false };
}

type Cursor =
  | { c: "done"; kv: KeyValue }
  | { c: "at"; obj: Doc; path: readonly Segment[]; from: number }
  | { c: "arr"; arr: Value[]; path: readonly Segment[]; from: number };

function advance(c: Cursor): Cursor {
  if (c.c !== "at") return c;
  let obj = c.obj;
  const path = c.path;
  for (let i = c.from; i < path.length; i++) {
    const v = Object.prototype.hasOwnProperty.call(obj, path[i].name) ? obj[path[i].name] : undefined;
    if (v === undefined) return { c: "done", kv: NULL };
    if (Array.isArray(v)) return { c: "arr", arr: v, path, from: i + 1 };
    if (i + 1 === path.length) return { c: "done", kv: { k: "v", v } };
    if (isObject(v)) obj = v;
    else return { c: "done", kv: NULL };
  }
  return { c: "done", kv: NULL };
}

function stepInto(elem: Value, pos: number, path: readonly Segment[], from: number): Cursor {
  if (from === path.length) return { c: "done", kv: { k: "v", v: elem } };
  const next = path[from];
  if (isObject(elem)) return advance({ c: "at", obj: elem, path, from });
  if (next.index === pos) {
    if (from + 1 === path.length) return { c: "done", kv: { k: "v", v: elem } };
    if (Array.isArray(elem)) return { c: "arr", arr: elem, path, from: from + 1 };
  }
  return { c: "done", kv: NULL };
}

function sortKey(doc: Doc, paths: (readonly Segment[])[], desc: boolean[]): KeyValue[] {
  const cursors = paths.map((path) => advance({ c: "at", obj: doc, path, from: 0 }));
  const st = { best: undefined as KeyValue[] | undefined, budget: TUPLES_MAX };
  explore(cursors, desc, st);
  return st.best ?? paths.map(() => NULL);
}

function explore(cursors: Cursor[], desc: boolean[], st: { best: KeyValue[] | undefined; budget: number }): void {
  if (st.budget === 0) return;
  const first = cursors.find((c) => c.c === "arr") as Extract<Cursor, { c: "arr" }> | undefined;
  if (first === undefined) {
    st.budget--;
    const tuple = cursors.map((c) => (c.c === "done" ? c.kv : NULL));
    if (st.best === undefined || better(tuple, st.best, desc)) st.best = tuple;
    return;
  }
  const array = first.arr;
  const same = (c: Cursor): c is Extract<Cursor, { c: "arr" }> => c.c === "arr" && c.arr === array;
  if (array.length === 0) {
    const next = cursors.map((c): Cursor => (same(c) ? { c: "done", kv: c.from === c.path.length ? EMPTY : NULL } : c));
    explore(next, desc, st);
    return;
  }
  array.forEach((elem, pos) => {
    explore(
      cursors.map((c) => (same(c) ? stepInto(elem, pos, c.path, c.from) : c)),
      desc,
      st,
    );
  });
}

function better(a: KeyValue[], b: KeyValue[], desc: boolean[]): boolean {
  for (let i = 0; i < a.length; i++) {
    let o = order(a[i], b[i]);
    if (desc[i]) o = -o;
    if (o !== 0) return o < 0;
  }
  return false;
}
