// Filters: parsing a MongoDB filter into a plan and evaluating it (crates/query filter.rs and
// parse.rs). A field predicate holds when any value the path reaches passes it; negations ($ne,
// $nin, $not, $exists: false) negate the whole "any".
import { FILTER_DEPTH_MAX, FILTER_NODES_MAX, IN_VALUES_MAX, QueryError } from "./errors.js";
import { parsePath, type FieldPath } from "./path.js";
import { Pattern } from "./regex.js";
import { walk } from "./walk.js";
import {
  bracket,
  compare,
  Double,
  isObject,
  num,
  numberValue,
  valuesEqual,
  type Doc,
  type Value,
} from "./value.js";

export type Expr =
  | { t: "and" | "or" | "nor"; xs: Expr[] }
  | { t: "field"; path: FieldPath; ops: FieldOp[] }
  | { t: "const"; v: boolean };

export type FieldOp = { t: "test"; test: Test } | { t: "not"; ops: FieldOp[] };

export type Test =
  | { t: "eq"; v: Value }
  | { t: "cmp"; op: "gt" | "gte" | "lt" | "lte"; v: Value }
  | { t: "in"; values: Value[]; hasNull: boolean }
  | { t: "exists" }
  | { t: "type"; bits: number }
  | { t: "regex"; p: Pattern }
  | { t: "mod"; divisor: bigint; remainder: bigint }
  | { t: "size"; n: number }
  | { t: "elemDoc"; expr: Expr }
  | { t: "elemValue"; ops: FieldOp[] }
  | { t: "never" };

const T_DOUBLE = 1 << 0;
const T_STRING = 1 << 1;
const T_OBJECT = 1 << 2;
const T_ARRAY = 1 << 3;
const T_BOOL = 1 << 4;
const T_NULL = 1 << 5;
const T_INT = 1 << 6;
const T_LONG = 1 << 7;

function typeBit(v: Value): number {
  if (v === null) return T_NULL;
  if (typeof v === "boolean") return T_BOOL;
  if (typeof v === "string") return T_STRING;
  if (Array.isArray(v)) return T_ARRAY;
  if (typeof v === "number" || typeof v === "bigint" || v instanceof Double) {
    const n = num(v);
    if (n.int === undefined) return T_DOUBLE;
    return n.int >= -2147483648n && n.int <= 2147483647n ? T_INT : T_LONG;
  }
  return T_OBJECT;
}

/** A parsed filter, ready to evaluate many times. */
export class Filter {
  private constructor(readonly root: Expr) {}

  static all(): Filter {
    return new Filter({ t: "const", v: true });
  }

  static parse(filter: unknown): Filter {
    const p = new Parser();
    return new Filter(p.filter(filter as Value, 0));
  }

  matches(doc: Value | undefined): boolean {
    return isObject(doc) && exprMatches(this.root, doc);
  }
}

export function exprMatches(e: Expr, doc: Doc): boolean {
  switch (e.t) {
    case "and":
      return e.xs.every((x) => exprMatches(x, doc));
    case "or":
      return e.xs.some((x) => exprMatches(x, doc));
    case "nor":
      return !e.xs.some((x) => exprMatches(x, doc));
    case "const":
      return e.v;
    case "field":
      return e.ops.every((op) => opWalked(op, doc, e.path));
  }
}

function opWalked(op: FieldOp, doc: Doc, path: FieldPath): boolean {
  if (op.t === "not") return !op.ops.every((o) => opWalked(o, doc, path));
  const t = op.test;
  return walk(doc, path.segments, wantsWhole(t), (v) => single(t, v));
}

function wantsWhole(t: Test): boolean {
  return t.t === "size" || t.t === "elemDoc" || t.t === "elemValue";
}

/** Evaluates as if `v` were the value at the end of a path (how `$pull` conditions match). */
export function opMatchesValue(op: FieldOp, v: Value): boolean {
  if (op.t === "not") return !op.ops.every((o) => opMatchesValue(o, v));
  const t = op.test;
  if (Array.isArray(v) && !wantsWhole(t)) return v.some((e) => single(t, e)) || single(t, v);
  return single(t, v);
}

function opSingle(op: FieldOp, v: Value | undefined): boolean {
  if (op.t === "not") return !op.ops.every((o) => opSingle(o, v));
  return single(op.test, v);
}

function arrayAsDocument(items: Value[]): Doc {
  const out: Doc = {};
  items.forEach((v, i) => (out[String(i)] = v));
  return out;
}

function single(t: Test, v: Value | undefined): boolean {
  switch (t.t) {
    case "eq":
      return v === undefined ? t.v === null : bracket(v) === bracket(t.v) && valuesEqual(v, t.v);
    case "cmp": {
      if (v === undefined) return t.v === null && (t.op === "gte" || t.op === "lte");
      if (bracket(v) !== bracket(t.v)) return false;
      const o = compare(v, t.v);
      return t.op === "gt" ? o > 0 : t.op === "gte" ? o >= 0 : t.op === "lt" ? o < 0 : o <= 0;
    }
    case "in":
      return v === undefined ? t.hasNull : t.values.some((x) => bracket(x) === bracket(v) && valuesEqual(x, v));
    case "exists":
      return v !== undefined;
    case "type":
      return v !== undefined && (typeBit(v) & t.bits) !== 0;
    case "regex":
      return typeof v === "string" && t.p.test(v);
    case "mod": {
      if (!(typeof v === "number" || typeof v === "bigint" || v instanceof Double)) return false;
      const n = num(v);
      let x: bigint;
      if (n.int !== undefined) x = BigInt.asIntN(64, n.int);
      else if (Number.isFinite(n.f) && Math.abs(n.f) < 9.223372036854775e18) x = BigInt(Math.trunc(n.f));
      else return false;
      return x % t.divisor === t.remainder;
    }
    case "size":
      return Array.isArray(v) && v.length === t.n;
    case "elemDoc":
      return (
        Array.isArray(v) &&
        v.some((e) =>
          isObject(e) ? exprMatches(t.expr, e) : Array.isArray(e) ? exprMatches(t.expr, arrayAsDocument(e)) : false,
        )
      );
    case "elemValue":
      return Array.isArray(v) && v.some((e) => t.ops.every((op) => opSingle(op, e)));
    case "never":
      return false;
  }
}

const UNSUPPORTED = new Set([
  "$where",
  "$expr",
  "$text",
  "$jsonSchema",
  "$geoWithin",
  "$geoIntersects",
  "$near",
  "$nearSphere",
  "$bitsAllSet",
  "$bitsAnySet",
  "$bitsAllClear",
  "$bitsAnyClear",
  "$sampleRate",
]);

function show(v: unknown): string {
  try {
    return JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? x.toString() : x)) ?? String(v);
  } catch {
    return String(v);
  }
}

function isOperatorObject(m: Doc): boolean {
  const first = Object.keys(m)[0];
  return first !== undefined && first.startsWith("$");
}

function operand(path: string, op: string, reason: string): QueryError {
  return new QueryError("bad_operand", `bad operand for '${op}' at '${path}': ${reason}`);
}

function unknown(path: string, op: string): QueryError {
  const why = UNSUPPORTED.has(op) ? " (not supported by Herald)" : "";
  return new QueryError("unknown_operator", `unknown operator '${op}' at '${path}'${why}`);
}

function truthy(v: Value): boolean {
  if (v === null) return false;
  if (typeof v === "boolean") return v;
  if (typeof v === "number" || typeof v === "bigint" || v instanceof Double) return numberValue(v) !== 0;
  return true;
}

class Parser {
  private nodes = 0;

  private count(): void {
    if (++this.nodes > FILTER_NODES_MAX)
      throw new QueryError("limit_exceeded", `limit exceeded: filter has more than ${FILTER_NODES_MAX} predicates`);
  }

  private static deeper(depth: number): number {
    if (depth + 1 > FILTER_DEPTH_MAX)
      throw new QueryError("limit_exceeded", `limit exceeded: filter nests deeper than ${FILTER_DEPTH_MAX} levels`);
    return depth + 1;
  }

  filter(v: Value, depth: number): Expr {
    if (!isObject(v)) throw new QueryError("bad_filter", `bad filter: a filter must be an object, got ${show(v)}`);
    const clauses: Expr[] = [];
    for (const key of Object.keys(v)) {
      const arg = v[key];
      if (key.startsWith("$")) {
        if (key === "$and" || key === "$or" || key === "$nor") {
          clauses.push({ t: key.slice(1) as "and", xs: this.logical(key, arg, depth) });
        } else if (key !== "$comment") throw unknown("", key);
      } else {
        const path = parsePath(key);
        if (typeof path === "string") throw new QueryError("bad_filter", `bad filter: ${path}`);
        clauses.push({ t: "field", path, ops: this.fieldValue(path, arg, depth) });
      }
    }
    if (clauses.length === 0) return { t: "const", v: true };
    if (clauses.length === 1) return clauses[0];
    return { t: "and", xs: clauses };
  }

  private logical(op: string, arg: Value, depth: number): Expr[] {
    depth = Parser.deeper(depth);
    if (!Array.isArray(arg) || arg.length === 0)
      throw new QueryError("bad_filter", `bad filter: ${op} needs a non-empty array of filters`);
    this.count();
    return arg.map((item) => {
      if (!isObject(item))
        throw new QueryError("bad_filter", `bad filter: every element of ${op} must be a filter object, got ${show(item)}`);
      return this.filter(item, depth);
    });
  }

  private fieldValue(path: FieldPath, v: Value, depth: number): FieldOp[] {
    if (isObject(v) && isOperatorObject(v)) return this.operators(path, v, depth);
    this.count();
    return [{ t: "test", test: { t: "eq", v } }];
  }

  private operators(path: FieldPath, m: Doc, depth: number): FieldOp[] {
    const p = path.dotted;
    const ops: FieldOp[] = [];
    const has = (k: string) => Object.prototype.hasOwnProperty.call(m, k);
    if (has("$options") && !has("$regex")) throw operand(p, "$options", "$options needs a $regex beside it");
    for (const op of Object.keys(m)) {
      const arg = m[op];
      this.count();
      let test: Test;
      switch (op) {
        case "$eq":
          test = { t: "eq", v: arg };
          break;
        case "$ne":
          ops.push({ t: "not", ops: [{ t: "test", test: { t: "eq", v: arg } }] });
          continue;
        case "$gt":
        case "$gte":
        case "$lt":
        case "$lte":
          test = { t: "cmp", op: op.slice(1) as "gt", v: arg };
          break;
        case "$in":
          test = inList(p, op, arg);
          break;
        case "$nin":
          ops.push({ t: "not", ops: [{ t: "test", test: inList(p, op, arg) }] });
          continue;
        case "$exists":
          if (truthy(arg)) test = { t: "exists" };
          else {
            ops.push({ t: "not", ops: [{ t: "test", test: { t: "exists" } }] });
            continue;
          }
          break;
        case "$type":
          test = { t: "type", bits: typeSet(p, arg) };
          break;
        case "$regex": {
          if (typeof arg !== "string") throw operand(p, op, "$regex needs a string pattern");
          const options = m["$options"];
          if (options !== undefined && typeof options !== "string")
            throw operand(p, "$options", "$options must be a string");
          test = { t: "regex", p: Pattern.compile(p, arg, options ?? "") };
          break;
        }
        case "$options":
          continue;
        case "$mod":
          test = modulo(p, arg);
          break;
        case "$size":
          test = { t: "size", n: size(p, arg) };
          break;
        case "$all":
          this.all(path, arg, depth, ops);
          continue;
        case "$elemMatch":
          test = this.elemMatch(path, arg, depth);
          break;
        case "$not": {
          const d = Parser.deeper(depth);
          if (isObject(arg) && Object.keys(arg).length > 0 && isOperatorObject(arg)) {
            ops.push({ t: "not", ops: this.operators(path, arg, d) });
            continue;
          }
          if (isObject(arg) && Object.keys(arg).length === 0)
            throw new QueryError("bad_filter", `bad filter: $not at '${p}' cannot be empty`);
          throw new QueryError("bad_filter", `bad filter: $not at '${p}' needs an object of operators`);
        }
        default:
          throw unknown(p, op);
      }
      ops.push({ t: "test", test });
    }
    return ops;
  }

  private all(path: FieldPath, arg: Value, depth: number, ops: FieldOp[]): void {
    const p = path.dotted;
    if (!Array.isArray(arg)) throw operand(p, "$all", "$all needs an array");
    if (arg.length > IN_VALUES_MAX) throw listTooLong(p, "$all");
    if (arg.length === 0) {
      ops.push({ t: "test", test: { t: "never" } });
      return;
    }
    const isElem = (v: Value) => isObject(v) && Object.keys(v).length === 1 && "$elemMatch" in v;
    const nElem = arg.filter(isElem).length;
    if (nElem > 0 && nElem < arg.length) throw operand(p, "$all", "$all cannot mix $elemMatch and plain values");
    for (const item of arg) {
      this.count();
      const test: Test = nElem > 0 ? this.elemMatch(path, (item as Doc)["$elemMatch"], depth) : { t: "eq", v: item };
      ops.push({ t: "test", test });
    }
  }

  private elemMatch(path: FieldPath, arg: Value, depth: number): Test {
    depth = Parser.deeper(depth);
    if (!isObject(arg)) throw operand(path.dotted, "$elemMatch", "$elemMatch needs an object");
    const first = Object.keys(arg)[0];
    const valueForm =
      first !== undefined && first.startsWith("$") && !["$and", "$or", "$nor", "$comment"].includes(first);
    if (valueForm) return { t: "elemValue", ops: this.operators(path, arg, depth) };
    return { t: "elemDoc", expr: this.filter(arg, depth) };
  }
}

function listTooLong(path: string, op: string): QueryError {
  return new QueryError("limit_exceeded", `limit exceeded: ${op} at '${path}' has more than ${IN_VALUES_MAX} values`);
}

function inList(path: string, op: string, arg: Value): Test {
  if (!Array.isArray(arg)) throw operand(path, op, `${op} needs an array`);
  if (arg.length > IN_VALUES_MAX) throw listTooLong(path, op);
  const bad = arg.find((v) => isObject(v) && isOperatorObject(v));
  if (bad !== undefined) throw operand(path, op, `${op} cannot contain operators, got ${show(bad)}`);
  return { t: "in", values: arg, hasNull: arg.some((v) => v === null) };
}

const ALIASES: Record<string, number> = {
  double: T_DOUBLE,
  string: T_STRING,
  object: T_OBJECT,
  array: T_ARRAY,
  bool: T_BOOL,
  null: T_NULL,
  int: T_INT,
  long: T_LONG,
  number: T_DOUBLE | T_INT | T_LONG,
};
const ABSENT_ALIASES = new Set([
  "binData",
  "undefined",
  "objectId",
  "date",
  "regex",
  "dbPointer",
  "javascript",
  "symbol",
  "javascriptWithScope",
  "timestamp",
  "decimal",
  "minKey",
  "maxKey",
]);
const CODES: Record<number, number> = { 1: T_DOUBLE, 2: T_STRING, 3: T_OBJECT, 4: T_ARRAY, 8: T_BOOL, 10: T_NULL, 16: T_INT, 18: T_LONG };
const ABSENT_CODES = new Set([5, 6, 7, 9, 11, 12, 13, 14, 15, 17, 19, -1, 127]);

function typeSet(path: string, arg: Value): number {
  const one = (v: Value): number => {
    if (typeof v === "string") {
      if (Object.prototype.hasOwnProperty.call(ALIASES, v)) return ALIASES[v];
      if (ABSENT_ALIASES.has(v)) return 0;
      throw operand(path, "$type", `unknown type alias ${show(v)}`);
    }
    if (typeof v === "number" || typeof v === "bigint" || v instanceof Double) {
      const f = numberValue(v);
      if (!Number.isInteger(f)) throw operand(path, "$type", `type code ${show(v)} is not an integer`);
      if (CODES[f] !== undefined) return CODES[f];
      if (ABSENT_CODES.has(f)) return 0;
      throw operand(path, "$type", `unknown type code ${show(v)}`);
    }
    throw operand(path, "$type", `$type needs a type alias or code, got ${show(v)}`);
  };
  if (Array.isArray(arg)) {
    if (arg.length === 0) throw operand(path, "$type", "$type needs at least one type");
    return arg.reduce<number>((bits, v) => bits | one(v), 0);
  }
  return one(arg);
}

function integerOf(v: Value): bigint | undefined {
  if (!(typeof v === "number" || typeof v === "bigint" || v instanceof Double)) return undefined;
  const n = num(v);
  if (n.int !== undefined) return n.int > 9223372036854775807n ? undefined : n.int;
  if (Number.isFinite(n.f) && Math.abs(n.f) < 9.2e18) return BigInt(Math.trunc(n.f));
  return undefined;
}

function modulo(path: string, arg: Value): Test {
  const bad = () => operand(path, "$mod", "$mod needs [divisor, remainder] with numbers");
  if (!Array.isArray(arg) || arg.length !== 2) throw bad();
  const divisor = integerOf(arg[0]);
  const remainder = integerOf(arg[1]);
  if (divisor === undefined || remainder === undefined) throw bad();
  if (divisor === 0n) throw operand(path, "$mod", "divisor cannot be 0");
  return { t: "mod", divisor, remainder };
}

function size(path: string, arg: Value): number {
  const bad = () => operand(path, "$size", `$size needs a non-negative integer, got ${show(arg)}`);
  if (!(typeof arg === "number" || typeof arg === "bigint" || arg instanceof Double)) throw bad();
  const n = num(arg);
  let x: number;
  if (n.int !== undefined) x = Number(n.int);
  else if (Number.isInteger(n.f) && Math.abs(n.f) < 1e15) x = n.f;
  else throw bad();
  if (x < 0) throw bad();
  return x;
}
