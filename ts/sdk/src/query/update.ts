// Updates: parsing operators or a replacement (crates/query update.rs) and applying them to a
// document, including upsert seeding (apply.rs). Operators apply in the order of their target
// paths; on any error the input document is untouched (we work on a copy).
import { EACH_VALUES_MAX, QueryError, UPDATE_PATHS_MAX } from "./errors.js";
import { Filter, opMatchesValue, exprMatches, type Expr, type FieldOp } from "./filter.js";
import { isPrefixOf, parsePath, type FieldPath, type Segment } from "./path.js";
import { Sort } from "./sort.js";
import {
  clone,
  compare,
  compareStrings,
  Double,
  isNumber,
  isObject,
  num,
  numberValue,
  valuesEqual,
  type Doc,
  type Value,
} from "./value.js";

type Op =
  | { t: "set" | "setOnInsert" | "min" | "max"; v: Value }
  | { t: "unset" }
  | { t: "inc" | "mul"; v: number | bigint | Double }
  | { t: "rename"; to: FieldPath }
  | { t: "currentDate"; timestamp: boolean }
  | { t: "push"; each: Value[]; position?: number; slice?: number; sort?: { desc: boolean } | Sort }
  | { t: "addToSet"; values: Value[] }
  | { t: "pop"; first: boolean }
  | { t: "pull"; cond: { t: "eq"; v: Value } | { t: "ops"; ops: FieldOp[] } | { t: "query"; f: Filter } }
  | { t: "pullAll"; values: Value[] };

interface Entry {
  path: FieldPath;
  op: Op;
}

let losslessDoubles = false;

/** Whether integral doubles produced by update arithmetic are kept as `Double` (lossless mode). */
export function setLosslessDoubles(on: boolean): void {
  losslessDoubles = on;
}

function makeDouble(f: number): number | Double {
  return losslessDoubles && Number.isInteger(f) ? new Double(f) : f;
}

function makeInt(i: bigint): number | bigint {
  return i >= BigInt(Number.MIN_SAFE_INTEGER) && i <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(i) : i;
}

function bad(msg: string): QueryError {
  return new QueryError("bad_update", `bad update: ${msg}`);
}

function show(v: unknown): string {
  return JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? x.toString() : x)) ?? String(v);
}

export class Update {
  private constructor(
    private readonly replace: Doc | undefined,
    private readonly entries: Entry[],
  ) {}

  static parse(spec: unknown): Update {
    if (!isObject(spec)) throw bad(`an update must be an object, got ${show(spec)}`);
    const keys = Object.keys(spec);
    const nOps = keys.filter((k) => k.startsWith("$")).length;
    if (nOps === 0) {
      checkValues(spec);
      return new Update(spec, []);
    }
    if (nOps !== keys.length) throw bad("an update cannot mix operators and plain fields");
    const entries: Entry[] = [];
    for (const op of keys) {
      const arg = spec[op];
      if (!isObject(arg)) throw bad(`the argument of ${op} must be an object, got ${show(arg)}`);
      for (const field of Object.keys(arg)) {
        if (entries.length >= UPDATE_PATHS_MAX)
          throw new QueryError("limit_exceeded", `limit exceeded: update touches more than ${UPDATE_PATHS_MAX} paths`);
        const path = updatePath(field);
        entries.push({ path, op: parseOp(op, path, arg[field]) });
      }
    }
    checkConflicts(entries);
    const orderPath = (e: Entry) => (e.op.t === "rename" ? e.op.to : e.path);
    entries.sort((a, b) => pathOrder(orderPath(a), orderPath(b)));
    return new Update(undefined, entries);
  }

  isReplacement(): boolean {
    return this.replace !== undefined;
  }

  /** The document after the update; throws QueryError (the input is never changed). */
  apply(doc: Doc, nowMs = Date.now()): Doc {
    return this.applyInner(doc, nowMs, false);
  }

  /** The document an upsert inserts when `filter` matched nothing. */
  upsertDocument(filter: Filter, nowMs = Date.now()): Doc {
    const eqs: [FieldPath, Value][] = [];
    collectEqualities(filter.root, (path, v) => {
      const other = eqs.find(([p]) => isPrefixOf(p, path) || isPrefixOf(path, p));
      if (other)
        throw new QueryError(
          "conflicting_update_paths",
          `updating the path '${path.dotted}' would conflict with '${other[0].dotted}'`,
        );
      eqs.push([path, v]);
    });
    eqs.sort((a, b) => compareStrings(a[0].dotted, b[0].dotted));
    const seed: Doc = {};
    for (const [path, v] of eqs) setPath(seed, path.segments, clone(v));
    let out: Doc;
    if (this.replace !== undefined) {
      out = clone(this.replace);
      if ("_id" in seed) {
        if ("_id" in out) {
          if (!valuesEqual(out._id, seed._id)) throw immutable();
        } else out._id = seed._id;
      }
    } else out = this.applyInner(seed, nowMs, true);
    if ("_id" in out) {
      const { _id, ...rest } = out;
      out = { _id, ...rest };
    }
    return out;
  }

  private applyInner(orig: Doc, nowMs: number, insert: boolean): Doc {
    if (!isObject(orig)) throw bad("the target of an update must be a document");
    if (this.replace !== undefined) {
      const out: Doc = {};
      if ("_id" in orig) out._id = orig._id;
      for (const k of Object.keys(this.replace)) {
        const v = this.replace[k];
        if (k === "_id") {
          if ("_id" in orig && !valuesEqual(orig._id, v)) throw immutable();
          if ("_id" in out) continue;
        }
        out[k] = clone(v);
      }
      return out;
    }
    const doc = clone(orig);
    for (const e of this.entries) applyEntry(doc, e, nowMs, insert);
    const before = orig._id;
    const after = doc._id;
    const unchanged =
      before !== undefined && after !== undefined
        ? JSON.stringify(before) === JSON.stringify(after) && valuesEqual(before, after)
        : before === undefined && after === undefined
          ? true
          : before === undefined
            ? insert
            : false;
    if (!unchanged) throw immutable();
    return doc;
  }
}

function immutable(): QueryError {
  return new QueryError("immutable_field", "the update would change the immutable field '_id'");
}

function updatePath(field: string): FieldPath {
  const path = parsePath(field);
  if (typeof path === "string") throw bad(path);
  const seg = path.segments.find((s) => s.name.startsWith("$"));
  if (seg)
    throw bad(`'${field}': positional and '$'-prefixed path segments ('${seg.name}') are not supported`);
  return path;
}

function pathOrder(a: FieldPath, b: FieldPath): number {
  const n = Math.min(a.segments.length, b.segments.length);
  for (let i = 0; i < n; i++) {
    const x = a.segments[i];
    const y = b.segments[i];
    const o = x.index >= 0 && y.index >= 0 ? x.index - y.index : compareStrings(x.name, y.name);
    if (o !== 0) return o;
  }
  return a.segments.length - b.segments.length;
}

function checkConflicts(entries: Entry[]): void {
  const paths: FieldPath[] = [];
  for (const e of entries) {
    paths.push(e.path);
    if (e.op.t === "rename") paths.push(e.op.to);
  }
  paths.sort((a, b) => {
    const n = Math.min(a.segments.length, b.segments.length);
    for (let i = 0; i < n; i++) {
      const o = compareStrings(a.segments[i].name, b.segments[i].name);
      if (o !== 0) return o;
    }
    return a.segments.length - b.segments.length;
  });
  for (let i = 0; i + 1 < paths.length; i++) {
    if (isPrefixOf(paths[i], paths[i + 1]))
      throw new QueryError(
        "conflicting_update_paths",
        `updating the path '${paths[i + 1].dotted}' would conflict with '${paths[i].dotted}'`,
      );
  }
}

/** Refuses field names a stored document cannot have (empty, `$`-prefixed, dotted). */
export function checkValues(v: Value): void {
  if (isObject(v)) {
    for (const k of Object.keys(v)) {
      if (k === "" || k.startsWith("$") || k.includes(".") || k.includes("\0"))
        throw bad(`field name '${k}' is not allowed in a stored document`);
      checkValues(v[k]);
    }
  } else if (Array.isArray(v)) v.forEach(checkValues);
}

function integer(what: string, v: Value): number {
  if (isNumber(v)) {
    const n = num(v);
    if (n.int !== undefined && n.int >= -(2n ** 63n) && n.int < 2n ** 63n) return Number(n.int);
    if (n.f !== undefined && Number.isInteger(n.f) && Math.abs(n.f) < 9.0e15) return n.f;
  }
  throw bad(`${what} must be an integer, got ${show(v)}`);
}

function parseOp(op: string, path: FieldPath, v: Value): Op {
  switch (op) {
    case "$set":
    case "$setOnInsert":
    case "$min":
    case "$max":
      checkValues(v);
      return { t: op.slice(1) as "set", v };
    case "$unset":
      return { t: "unset" };
    case "$inc":
    case "$mul":
      if (!isNumber(v))
        throw new QueryError("type_mismatch", `${op} at '${path.dotted}' needs a numeric argument, got ${show(v)}`);
      return { t: op.slice(1) as "inc", v };
    case "$rename": {
      if (typeof v !== "string") throw bad(`$rename target for '${path.dotted}' must be a string, got ${show(v)}`);
      const to = updatePath(v);
      if (isPrefixOf(path, to) || isPrefixOf(to, path))
        throw bad(`$rename source '${path.dotted}' and target '${to.dotted}' must not be on the same path`);
      return { t: "rename", to };
    }
    case "$currentDate": {
      const msg = `$currentDate for '${path.dotted}' needs true or {"$type": "date"|"timestamp"}`;
      if (v === true) return { t: "currentDate", timestamp: false };
      if (isObject(v) && Object.keys(v).length === 1) {
        if (v.$type === "date") return { t: "currentDate", timestamp: false };
        if (v.$type === "timestamp") return { t: "currentDate", timestamp: true };
      }
      throw bad(msg);
    }
    case "$push":
      return push(path, v);
    case "$addToSet":
      if (isObject(v) && "$each" in v) {
        const k = Object.keys(v).find((k) => k !== "$each");
        if (k !== undefined) throw bad(`$addToSet for '${path.dotted}' allows only $each, got '${k}'`);
        return { t: "addToSet", values: eachList(path, "$addToSet", v.$each) };
      }
      checkValues(v);
      return { t: "addToSet", values: [v] };
    case "$pop": {
      const f = isNumber(v) ? numberValue(v) : NaN;
      if (f === 1) return { t: "pop", first: false };
      if (f === -1) return { t: "pop", first: true };
      throw bad(`$pop for '${path.dotted}' needs 1 or -1, got ${show(v)}`);
    }
    case "$pull":
      return { t: "pull", cond: pull(path, v) };
    case "$pullAll":
      if (!Array.isArray(v)) throw bad(`$pullAll for '${path.dotted}' needs an array, got ${show(v)}`);
      return { t: "pullAll", values: v };
    default:
      throw new QueryError("unknown_operator", `unknown update operator '${op}'`);
  }
}

function eachList(path: FieldPath, op: string, each: Value): Value[] {
  if (!Array.isArray(each)) throw bad(`$each in ${op} for '${path.dotted}' needs an array, got ${show(each)}`);
  if (each.length > EACH_VALUES_MAX)
    throw new QueryError("limit_exceeded", `limit exceeded: $each has more than ${EACH_VALUES_MAX} values`);
  each.forEach(checkValues);
  return each;
}

function push(path: FieldPath, v: Value): Op {
  if (!isObject(v) || !("$each" in v)) {
    if (isObject(v) && Object.keys(v).some((k) => k.startsWith("$")))
      throw bad(`$push modifiers for '${path.dotted}' need $each`);
    checkValues(v);
    return { t: "push", each: [v] };
  }
  const out: Extract<Op, { t: "push" }> = { t: "push", each: eachList(path, "$push", v.$each) };
  for (const k of Object.keys(v)) {
    const arg = v[k];
    switch (k) {
      case "$each":
        break;
      case "$position":
        out.position = integer("$position", arg);
        break;
      case "$slice":
        out.slice = integer("$slice", arg);
        break;
      case "$sort":
        if (isNumber(arg)) {
          const f = numberValue(arg);
          if (f !== 1 && f !== -1) throw bad(`$sort must be 1, -1 or a sort document, got ${show(arg)}`);
          out.sort = { desc: f === -1 };
        } else if (isObject(arg) && Object.keys(arg).length > 0) {
          try {
            out.sort = Sort.parseWithoutId(arg);
          } catch (e) {
            throw bad(`$sort: ${(e as Error).message}`);
          }
        } else throw bad(`$sort must be 1, -1 or a sort document, got ${show(arg)}`);
        break;
      default:
        throw bad(`unknown $push modifier '${k}' for '${path.dotted}'`);
    }
  }
  return out;
}

function pull(path: FieldPath, v: Value): Extract<Op, { t: "pull" }>["cond"] {
  if (isObject(v)) {
    const first = Object.keys(v)[0];
    if (first !== undefined && first.startsWith("$")) {
      if (first === "$and" || first === "$or" || first === "$nor") return { t: "query", f: Filter.parse(v) };
      const probe = Filter.parse({ [path.dotted]: v });
      if (probe.root.t === "field") return { t: "ops", ops: probe.root.ops };
      throw bad(`bad $pull condition for '${path.dotted}'`);
    }
    return { t: "query", f: Filter.parse(v) };
  }
  return { t: "eq", v };
}

function collectEqualities(e: Expr, f: (path: FieldPath, v: Value) => void): void {
  if (e.t === "and") e.xs.forEach((x) => collectEqualities(x, f));
  else if (e.t === "or" && e.xs.length === 1) collectEqualities(e.xs[0], f);
  else if (e.t === "field") {
    for (const op of e.ops) {
      if (op.t !== "test") continue;
      if (op.test.t === "eq") f(e.path, op.test.v);
      else if (op.test.t === "in" && dedupCount(op.test.values) === 1) f(e.path, op.test.values[0]);
    }
  }
}

function dedupCount(values: Value[]): number {
  const sorted = [...values].sort(compare);
  let n = 0;
  for (let i = 0; i < sorted.length; i++) if (i === 0 || compare(sorted[i - 1], sorted[i]) !== 0) n++;
  return n;
}

function applyEntry(doc: Doc, e: Entry, nowMs: number, insert: boolean): void {
  const segs = e.path.segments;
  const path = e.path.dotted;
  const op = e.op;
  switch (op.t) {
    case "set":
      return setPath(doc, segs, clone(op.v));
    case "setOnInsert":
      if (insert) setPath(doc, segs, clone(op.v));
      return;
    case "unset":
      unsetPath(doc, segs);
      return;
    case "inc":
    case "mul": {
      const cur = getPath(doc, segs);
      if (cur === undefined) {
        if (op.t === "inc") return setPath(doc, segs, op.v);
        return setPath(doc, segs, num(op.v).f !== undefined ? makeDouble(0) : 0);
      }
      if (!isNumber(cur))
        throw new QueryError("type_mismatch", `cannot apply $${op.t} to the non-numeric value ${show(cur)} at '${path}'`);
      return setPath(doc, segs, arith(path, op.t, cur, op.v));
    }
    case "min":
    case "max": {
      const want = op.t === "min" ? -1 : 1;
      const cur = getPath(doc, segs);
      if (cur !== undefined && Math.sign(compare(op.v, cur)) !== want) return;
      return setPath(doc, segs, clone(op.v));
    }
    case "rename": {
      for (const p of [e.path, op.to]) {
        if (throughArray(doc, p.segments))
          throw new QueryError(
            "path_not_viable",
            `$rename cannot move '${path}' to '${op.to.dotted}': '${p.dotted}' goes through an array`,
          );
      }
      const v = unsetPath(doc, segs);
      if (v !== undefined) setPath(doc, op.to.segments, v);
      return;
    }
    case "currentDate":
      return setPath(doc, segs, op.timestamp ? nowMs : iso8601(nowMs));
    case "push": {
      const items = arrayAt(doc, e.path, "$push") ?? [];
      applyPush(items, op);
      return setPath(doc, segs, items);
    }
    case "addToSet": {
      const items = arrayAt(doc, e.path, "$addToSet") ?? [];
      for (const v of op.values) if (!items.some((x) => valuesEqual(x, v))) items.push(clone(v));
      return setPath(doc, segs, items);
    }
    case "pop": {
      const items = arrayAt(doc, e.path, "$pop");
      if (items === undefined) return;
      if (items.length > 0) {
        if (op.first) items.shift();
        else items.pop();
      }
      return setPath(doc, segs, items);
    }
    case "pull": {
      const items = arrayAt(doc, e.path, "$pull");
      if (items === undefined) return;
      const c = op.cond;
      const hit = (x: Value) =>
        c.t === "eq"
          ? valuesEqual(x, c.v)
          : c.t === "ops"
            ? c.ops.every((o) => opMatchesValue(o, x))
            : isObject(x) && exprMatches(c.f.root, x);
      return setPath(
        doc,
        segs,
        items.filter((x) => !hit(x)),
      );
    }
    case "pullAll": {
      const items = arrayAt(doc, e.path, "$pullAll");
      if (items === undefined) return;
      return setPath(
        doc,
        segs,
        items.filter((x) => !op.values.some((v) => valuesEqual(x, v))),
      );
    }
  }
}

function arrayAt(doc: Doc, path: FieldPath, op: string): Value[] | undefined {
  const blocked = blockedAt(doc, path.segments);
  if (blocked !== undefined) {
    const prefix = path.segments
      .slice(0, blocked)
      .map((s) => s.name)
      .join(".");
    throw new QueryError(
      "path_not_viable",
      `${op} cannot reach '${path.dotted}': the value at '${prefix}' is neither a document nor an array the next segment indexes`,
    );
  }
  const v = getPath(doc, path.segments);
  if (v === undefined) return undefined;
  if (Array.isArray(v)) return [...v];
  throw new QueryError("type_mismatch", `${op} needs an array at '${path.dotted}', found ${show(v)}`);
}

function applyPush(items: Value[], p: Extract<Op, { t: "push" }>): void {
  const len = items.length;
  const at = p.position === undefined ? len : p.position >= 0 ? Math.min(p.position, len) : Math.max(len + p.position, 0);
  items.splice(at, 0, ...p.each.map(clone));
  if (p.sort instanceof Sort) {
    const keys = p.sort.keys;
    items.sort((a, b) => {
      for (const k of keys) {
        let o = compare(getPath(a, k.path.segments) ?? null, getPath(b, k.path.segments) ?? null);
        if (k.desc) o = -o;
        if (o !== 0) return o;
      }
      return 0;
    });
  } else if (p.sort !== undefined) {
    const desc = p.sort.desc;
    items.sort((a, b) => (desc ? -compare(a, b) : compare(a, b)));
  }
  if (p.slice !== undefined) {
    if (p.slice >= 0) items.length = Math.min(items.length, p.slice);
    else if (items.length > -p.slice) items.splice(0, items.length + p.slice);
  }
}

const I64_MIN = -(2n ** 63n);
const I64_MAX = 2n ** 63n - 1n;

function arith(path: string, op: "inc" | "mul", cur: number | bigint | Double, by: number | bigint | Double): Value {
  const a = num(cur);
  const b = num(by);
  const overflow = () => new QueryError("numeric_overflow", `numeric overflow: $${op} at '${path}' overflows`);
  if (a.int !== undefined && b.int !== undefined) {
    if (a.int > I64_MAX || b.int > I64_MAX) throw overflow();
    const r = op === "inc" ? a.int + b.int : a.int * b.int;
    if (r < I64_MIN || r > I64_MAX) throw overflow();
    return makeInt(r);
  }
  const x = numberValue(cur);
  const y = numberValue(by);
  const r = op === "inc" ? x + y : x * y;
  if (!Number.isFinite(r)) throw overflow();
  return makeDouble(r);
}

// The array position a segment addresses in an update (-1 for none). Updates read a number with
// leading zeros as a position (MongoDB's a.02 sets element 2), unlike query paths.
function position(seg: Segment): number {
  if (seg.index >= 0) return seg.index;
  if (seg.name === "" || !/^[0-9]+$/.test(seg.name)) return -1;
  const digits = seg.name.replace(/^0+/, "");
  return digits.length <= 9 ? Number(digits || "0") : -1;
}

function getPath(doc: Value, segs: readonly Segment[]): Value | undefined {
  let cur: Value | undefined = doc;
  for (const seg of segs) {
    if (isObject(cur)) cur = Object.prototype.hasOwnProperty.call(cur, seg.name) ? cur[seg.name] : undefined;
    else if (Array.isArray(cur)) cur = position(seg) >= 0 ? cur[position(seg)] : undefined;
    else return undefined;
    if (cur === undefined) return undefined;
  }
  return cur;
}

// The index of the first segment the path cannot go through because the value before it is a
// scalar, or an array and the segment is not a position (MongoDB's PathNotViable for $pull,
// $pop and the other array operators); undefined when the path exists or ends at a missing field.
function blockedAt(doc: Value, segs: readonly Segment[]): number | undefined {
  let cur: Value | undefined = doc;
  for (let i = 0; i < segs.length; i++) {
    const seg = segs[i];
    if (isObject(cur)) {
      if (!Object.prototype.hasOwnProperty.call(cur, seg.name)) return undefined;
      cur = cur[seg.name];
    } else if (Array.isArray(cur)) {
      const p = position(seg);
      if (p < 0) return i;
      if (p >= cur.length) return undefined;
      cur = cur[p];
    } else return i;
  }
  return undefined;
}

function throughArray(doc: Value, segs: readonly Segment[]): boolean {
  let cur: Value = doc;
  for (const seg of segs) {
    if (isObject(cur)) {
      if (!Object.prototype.hasOwnProperty.call(cur, seg.name)) return false;
      cur = cur[seg.name];
    } else return Array.isArray(cur);
  }
  return false;
}

function notViable(segs: readonly Segment[], i: number, why: string): QueryError {
  const full = segs.map((s) => s.name).join(".");
  const prefix = segs
    .slice(0, i)
    .map((s) => s.name)
    .join(".");
  return new QueryError("path_not_viable", `cannot create '${full}': the value at '${prefix}' ${why}`);
}

function setPath(doc: Value, segs: readonly Segment[], v: Value): void {
  let cur: Value = doc;
  for (let i = 0; i < segs.length; i++) {
    const seg = segs[i];
    const last = i + 1 === segs.length;
    if (isObject(cur)) {
      if (last) {
        cur[seg.name] = v;
        return;
      }
      if (!Object.prototype.hasOwnProperty.call(cur, seg.name)) cur[seg.name] = {};
      cur = cur[seg.name];
    } else if (Array.isArray(cur)) {
      const at = position(seg);
      if (at < 0) throw notViable(segs, i, "is an array and the segment is not a position");
      if (at >= cur.length) {
        while (cur.length <= at) cur.push(null);
        if (!last) cur[at] = {};
      }
      if (last) {
        cur[at] = v;
        return;
      }
      cur = cur[at];
    } else throw notViable(segs, i, "is not a document");
  }
}

function unsetPath(doc: Value, segs: readonly Segment[]): Value | undefined {
  if (segs.length === 0) return undefined;
  const parent = getPath(doc, segs.slice(0, -1));
  const last = segs[segs.length - 1];
  if (isObject(parent)) {
    if (!Object.prototype.hasOwnProperty.call(parent, last.name)) return undefined;
    const v = parent[last.name];
    delete parent[last.name];
    return v;
  }
  const at = position(last);
  if (Array.isArray(parent) && at >= 0 && at < parent.length) {
    const v = parent[at];
    parent[at] = null;
    return v;
  }
  return undefined;
}

function iso8601(ms: number): string {
  return new Date(ms).toISOString();
}
