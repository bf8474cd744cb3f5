// A small model of MongoDB's (8.x) query, sort, projection and update semantics over JSON values.
//
// It is NOT the oracle of the differential test: mingo is. It is used only to *judge* a
// divergence between mingo and Herald: each classifier in known-divergences.mjs replaces one
// mingo operator (or stage) by the version in this file and checks whether mingo then agrees
// with Herald. Every rule here follows MongoDB's source (src/mongo/db/matcher/path.cpp,
// expression_leaf.cpp, update/*_node.cpp) or a jstest; see the comments.

import {
  MISSING,
  EMPTY_ARRAY_KEY,
  bsonCmp,
  bsonEq,
  canonType,
  cmpStr,
  isPlainObject,
  clone,
} from "./values.mjs";

export class RefError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}
const fail = (code, msg) => {
  throw new RefError(code, msg);
};

const has = (o, k) => Object.prototype.hasOwnProperty.call(o, k);
const isDigits = (s) => /^[0-9]+$/.test(s);
const asDoc = (v) => (Array.isArray(v) ? Object.fromEntries(v.map((e, i) => [String(i), e])) : v);

// ---------------------------------------------------------------------------
// Path iteration: a port of BSONElementIterator (src/mongo/db/matcher/path.cpp).
// leaf: "traverse" (elements of a leaf array, then the array), "none" (the leaf array itself).

function getFieldDottedOrArray(obj, parts, start) {
  let cur = obj;
  let idx = start;
  let res = MISSING;
  while (idx < parts.length) {
    res = has(cur, parts[idx]) ? cur[parts[idx]] : MISSING;
    if (res === MISSING) break;
    if (Array.isArray(res)) break;
    if (isPlainObject(res)) {
      cur = res;
      idx++;
      continue;
    }
    if (idx < parts.length - 1) res = MISSING; // scalar in the middle of the path
    break;
  }
  return { elem: res, idx };
}

function iterObject(obj, parts, leaf, out) {
  const { elem, idx } = getFieldDottedOrArray(asDoc(obj), parts, 0);
  if (!Array.isArray(elem)) {
    out.push(elem);
    return;
  }
  const restStart = idx + 1;
  if (restStart >= parts.length && leaf === "none") {
    out.push(elem);
    return;
  }
  iterArray(elem, parts.slice(restStart), leaf, out);
}

function iterArray(arr, rest, leaf, out) {
  if (rest.length === 0) {
    for (const e of arr) out.push(e);
    out.push(arr);
    return;
  }
  const next = rest[0];
  const nextIsNum = isDigits(next);
  for (let i = 0; i < arr.length; i++) {
    const e = arr[i];
    const offsetMatch = nextIsNum && next === String(i);
    if (isPlainObject(e)) {
      iterObject(e, rest, leaf, out);
      if (offsetMatch) {
        if (rest.length === 1) out.push(e);
        else iterObject(e, rest.slice(1), leaf, out);
      }
    } else if (offsetMatch) {
      if (rest.length === 1) out.push(e);
      else if (Array.isArray(e)) iterArray(e, rest.slice(1), leaf, out);
    }
  }
}

/** The values MongoDB's matcher looks at for `path` in `doc` (MISSING for an absent field). */
export function pathValues(doc, path, leaf = "traverse") {
  const out = [];
  iterObject(doc, path.split("."), leaf, out);
  return out;
}

// ---------------------------------------------------------------------------
// Single-element predicates (matchesSingleElement).

/** ComparisonMatchExpression::matchesSingleElement */
export function cmpMatch(op, e, rhs) {
  const ect = canonType(e);
  const rct = canonType(rhs);
  if (ect !== rct) {
    if (ect + rct === 5) return op === "$eq" || op === "$lte" || op === "$gte";
    return false;
  }
  const x = bsonCmp(e, rhs);
  switch (op) {
    case "$eq":
      return x === 0;
    case "$lt":
      return x < 0;
    case "$lte":
      return x <= 0;
    case "$gt":
      return x > 0;
    case "$gte":
      return x >= 0;
  }
  throw new Error("bad comparison " + op);
}

export function inMatch(e, list) {
  for (const v of list) {
    if (v instanceof RegExp) {
      if (typeof e === "string" && v.test(e)) return true;
    } else if (v === null) {
      if (e === MISSING || e === null) return true;
    } else if (e !== MISSING && bsonEq(e, v)) return true;
  }
  return false;
}

const INT32_MIN = -2147483648;
const INT32_MAX = 2147483647;
/** Number typing. "json": Herald's rule (integral literal in int32 -> int, other integral -> long,
 *  fraction/exponent -> double; the generator never puts "2.0"-style doubles in $type cases).
 *  "mingo": mingo's rule (int/long = Number.isInteger, double = any number). */
function numberType(v, typing, alias) {
  if (typeof v !== "number") return false;
  if (alias === "number") return true;
  if (typing === "mingo") {
    if (alias === "double") return true;
    if (alias === "int" || alias === "long") return Number.isInteger(v);
    return false;
  }
  const isInt = Number.isInteger(v);
  if (alias === "double") return !isInt;
  if (alias === "int") return isInt && v >= INT32_MIN && v <= INT32_MAX;
  if (alias === "long") return isInt && (v < INT32_MIN || v > INT32_MAX);
  return false;
}

const TYPE_ALIASES = {
  double: "double", 1: "double",
  string: "string", 2: "string",
  object: "object", 3: "object",
  array: "array", 4: "array",
  binData: "binData", 5: "binData",
  undefined: "undefined", 6: "undefined",
  objectId: "objectId", 7: "objectId",
  bool: "bool", 8: "bool",
  date: "date", 9: "date",
  null: "null", 10: "null",
  regex: "regex", 11: "regex",
  int: "int", 16: "int",
  timestamp: "timestamp", 17: "timestamp",
  long: "long", 18: "long",
  decimal: "decimal", 19: "decimal",
  minKey: "minKey", "-1": "minKey",
  maxKey: "maxKey", 127: "maxKey",
  number: "number",
};

export function parseTypes(arg) {
  const list = Array.isArray(arg) ? arg : [arg];
  if (Array.isArray(arg) && list.length === 0) fail("bad_operand", "$type array must not be empty");
  return list.map((t) => {
    if (typeof t === "number" && !Number.isInteger(t)) fail("bad_operand", "bad $type code " + t);
    const a = TYPE_ALIASES[String(t)];
    if (!a || (typeof t !== "number" && typeof t !== "string")) fail("bad_operand", "unknown $type " + JSON.stringify(t));
    return a;
  });
}

export function typeMatch(e, aliases, typing = "json") {
  if (e === MISSING) return false;
  for (const a of aliases) {
    switch (a) {
      case "double":
      case "int":
      case "long":
      case "number":
        if (numberType(e, typing, a)) return true;
        break;
      case "string":
        if (typeof e === "string") return true;
        break;
      case "object":
        if (isPlainObject(e)) return true;
        break;
      case "array":
        if (Array.isArray(e)) return true;
        break;
      case "bool":
        if (typeof e === "boolean") return true;
        break;
      case "null":
        if (e === null) return true;
        break;
    }
  }
  return false;
}

/** $regex/$options -> RegExp, with MongoDB's option letters (i m s x). */
export function makeRegex(pattern, options = "") {
  if (typeof pattern !== "string") fail("bad_operand", "$regex has to be a string");
  if (typeof options !== "string") fail("bad_operand", "$options has to be a string");
  let flags = "";
  let src = pattern;
  for (const ch of options) {
    if (ch === "x") {
      // extended: unescaped whitespace outside classes and #-comments are ignored
      src = stripExtended(src);
    } else if ("ims".includes(ch)) {
      if (!flags.includes(ch)) flags += ch;
    } else fail("bad_regex", "invalid flag in regex options: " + ch);
  }
  try {
    return new RegExp(src, flags);
  } catch (e) {
    fail("bad_regex", e.message);
  }
}

function stripExtended(src) {
  let out = "";
  let inClass = false;
  for (let i = 0; i < src.length; i++) {
    const c = src[i];
    if (c === "\\") {
      out += c + (src[i + 1] ?? "");
      i++;
      continue;
    }
    if (inClass) {
      if (c === "]") inClass = false;
      out += c;
      continue;
    }
    if (c === "[") {
      inClass = true;
      out += c;
      continue;
    }
    if (/\s/.test(c)) continue;
    if (c === "#") {
      while (i < src.length && src[i] !== "\n") i++;
      continue;
    }
    out += c;
  }
  return out;
}

export function parseMod(arg) {
  if (!Array.isArray(arg)) fail("bad_operand", "$mod needs an array");
  if (arg.length !== 2) fail("bad_operand", "$mod needs [divisor, remainder]");
  if (!arg.every((x) => typeof x === "number" && Number.isFinite(x))) fail("bad_operand", "$mod needs numbers");
  const d = Math.trunc(arg[0]);
  const r = Math.trunc(arg[1]);
  if (d === 0) fail("bad_operand", "divisor cannot be 0");
  return [d, r];
}

export function modMatch(e, [d, r]) {
  if (typeof e !== "number" || !Number.isFinite(e)) return false;
  const x = Math.trunc(e);
  // C remainder (sign of the dividend) == JS %
  const m = x % d;
  return (m === 0 ? 0 : m) === r;
}

// ---------------------------------------------------------------------------
// Filter compilation.

const LOGICAL = new Set(["$and", "$or", "$nor"]);
const isOperatorObject = (v) => isPlainObject(v) && Object.keys(v).length > 0 && Object.keys(v)[0].startsWith("$");

function checkPath(path) {
  if (path === "" || path.split(".").some((s) => s === "")) fail("bad_filter", "bad field path " + JSON.stringify(path));
}

/**
 * Compile a filter. opts.typing: number typing for $type ("json" = Herald's choice).
 * Returns doc => boolean. Throws RefError for invalid filters.
 */
export function compileFilter(filter, opts = {}) {
  if (!isPlainObject(filter)) fail("bad_filter", "filter must be an object");
  const preds = [];
  for (const [k, v] of Object.entries(filter)) {
    if (LOGICAL.has(k)) {
      if (!Array.isArray(v) || v.length === 0 || !v.every(isPlainObject))
        fail("bad_filter", `${k} must be a non-empty array of objects`);
      const subs = v.map((f) => compileFilter(f, opts));
      if (k === "$and") preds.push((d) => subs.every((s) => s(d)));
      else if (k === "$or") preds.push((d) => subs.some((s) => s(d)));
      else preds.push((d) => !subs.some((s) => s(d)));
    } else if (k.startsWith("$")) {
      fail("unknown_operator", "unknown top level operator " + k);
    } else {
      checkPath(k);
      preds.push(compileField(k, v, opts));
    }
  }
  return (d) => preds.every((p) => p(d));
}

function compileField(path, v, opts) {
  if (!isOperatorObject(v)) {
    return leafPath(path, (e) => cmpMatch("$eq", e, v), "traverse");
  }
  const preds = compileOperators(path, v, opts);
  return (d) => preds.every((p) => p(d));
}

function compileOperators(path, obj, opts) {
  const preds = [];
  const keys = Object.keys(obj);
  for (const op of keys) {
    if (!op.startsWith("$")) fail("unknown_operator", "unknown operator " + op);
    if (op === "$options") {
      if (!has(obj, "$regex")) fail("bad_operand", "$options needs a $regex");
      continue;
    }
    preds.push(compileOp(path, op, obj[op], obj, opts));
  }
  return preds;
}

const not = (p) => (d) => !p(d);

function leafPath(path, pred, leaf) {
  return (d) => pathValues(d, path, leaf).some(pred);
}

function compileOp(path, op, arg, whole, opts) {
  switch (op) {
    case "$ne":
      return not(compileOp(path, "$eq", arg, whole, opts));
    case "$nin":
      return not(compileOp(path, "$in", arg, whole, opts));
    case "$not": {
      let inner;
      if (arg instanceof RegExp) inner = leafPath(path, singlePred("$regex", arg, {}, opts), "traverse");
      else {
        if (!isOperatorObject(arg)) fail("bad_operand", "$not needs an operator object or regex");
        const subs = compileOperators(path, arg, opts);
        inner = (d) => subs.every((s) => s(d));
      }
      return not(inner);
    }
    case "$exists":
      return arg === false || arg === 0 || arg === null
        ? not(leafPath(path, (e) => e !== MISSING, "traverse"))
        : leafPath(path, (e) => e !== MISSING, "traverse");
    case "$all": {
      if (!Array.isArray(arg)) fail("bad_operand", "$all needs an array");
      if (arg.length === 0) return () => false;
      const subs = arg.map((x) => {
        if (isPlainObject(x) && has(x, "$elemMatch")) return compileOp(path, "$elemMatch", x.$elemMatch, x, opts);
        if (isOperatorObject(x)) fail("bad_operand", "no $ expressions in $all");
        return leafPath(path, (e) => cmpMatch("$eq", e, x), "traverse");
      });
      return (d) => subs.every((s) => s(d));
    }
    case "$size":
    case "$elemMatch":
      return leafPath(path, singlePred(op, arg, whole, opts), "none");
    default:
      return leafPath(path, singlePred(op, arg, whole, opts), "traverse");
  }
}

/** Predicate on one element (no array traversal), as used directly and inside $elemMatch. */
export function singlePred(op, arg, whole = {}, opts = {}) {
  switch (op) {
    case "$eq":
    case "$gt":
    case "$gte":
    case "$lt":
    case "$lte":
      if (isPlainObject(arg) && has(arg, "$regex")) fail("bad_operand", "cannot compare to a regex document");
      return (e) => cmpMatch(op, e, arg);
    case "$ne":
      return (e) => !cmpMatch("$eq", e, arg);
    case "$in":
    case "$nin": {
      if (!Array.isArray(arg)) fail("bad_operand", op + " needs an array");
      if (arg.some(isOperatorObject)) fail("bad_operand", "cannot nest $ under " + op);
      return op === "$in" ? (e) => inMatch(e, arg) : (e) => !inMatch(e, arg);
    }
    case "$exists":
      return arg === false || arg === 0 || arg === null ? (e) => e === MISSING : (e) => e !== MISSING;
    case "$type": {
      const aliases = parseTypes(arg);
      return (e) => typeMatch(e, aliases, opts.typing ?? "json");
    }
    case "$regex": {
      const re = arg instanceof RegExp ? arg : makeRegex(arg, whole.$options ?? "");
      return (e) => typeof e === "string" && re.test(e);
    }
    case "$mod": {
      const m = parseMod(arg);
      return (e) => modMatch(e, m);
    }
    case "$size": {
      if (typeof arg !== "number" || !Number.isInteger(arg) || arg < 0) fail("bad_operand", "$size needs a non-negative integer");
      return (e) => Array.isArray(e) && e.length === arg;
    }
    case "$elemMatch": {
      if (!isPlainObject(arg)) fail("bad_operand", "$elemMatch needs an object");
      const first = Object.keys(arg)[0];
      const valueForm = first !== undefined && first.startsWith("$") && !LOGICAL.has(first);
      let elemPred;
      if (valueForm) {
        const subs = [];
        for (const k of Object.keys(arg)) {
          if (!k.startsWith("$")) fail("bad_filter", "mixed $elemMatch");
          if (k === "$options") continue;
          if (k === "$not") {
            const inner = arg.$not;
            if (!isOperatorObject(inner)) fail("bad_operand", "$not needs an operator object");
            const ps = Object.keys(inner)
              .filter((x) => x !== "$options")
              .map((x) => singlePred(x, inner[x], inner, opts));
            subs.push((e) => !ps.every((p) => p(e)));
          } else if (k === "$all") {
            if (!Array.isArray(arg.$all)) fail("bad_operand", "$all needs an array");
            const vals = arg.$all;
            subs.push((e) => vals.length > 0 && vals.every((v) => cmpMatch("$eq", e, v)));
          } else subs.push(singlePred(k, arg[k], arg, opts));
        }
        elemPred = (e) => subs.every((p) => p(e));
      } else {
        const q = compileFilter(arg, opts);
        elemPred = (e) => (isPlainObject(e) || Array.isArray(e)) && q(asDoc(e));
      }
      return (e) => Array.isArray(e) && e.some(elemPred);
    }
    case "$all": {
      if (!Array.isArray(arg)) fail("bad_operand", "$all needs an array");
      return (e) => arg.length > 0 && arg.every((v) => cmpMatch("$eq", e, v));
    }
  }
  fail("unknown_operator", "unknown operator " + op);
}

/**
 * A mingo query operator implemented with the semantics above, so that one mingo operator can be
 * swapped for MongoDB's behaviour. mingo calls it as (selector, value, options) => (obj) => bool,
 * after its own normalisation (a {$regex, $options} pair arrives as a RegExp).
 */
export function asMingoOperator(op, opts = {}) {
  return (selector, value, _options) => compileOp(selector, op, value, {}, opts);
}

// ---------------------------------------------------------------------------
// Validation of the non-filter parts of a query.

export function validateQuery(query) {
  if (!isPlainObject(query)) fail("bad_query", "query must be an object");
  compileFilter(query.filter ?? {}); // throws on an invalid filter
  if (query.sort !== undefined) {
    if (!isPlainObject(query.sort)) fail("bad_sort", "sort must be an object");
    for (const [k, v] of Object.entries(query.sort)) {
      checkSortPath(k);
      if (v !== 1 && v !== -1) fail("bad_sort", "sort values must be 1 or -1");
    }
  }
  for (const k of ["skip", "limit"]) {
    const v = query[k];
    if (v !== undefined && (typeof v !== "number" || !Number.isInteger(v) || v < 0)) fail("bad_query", `${k} must be a non-negative integer`);
  }
  if (query.projection !== undefined) projectionMode(query.projection);
}

function checkSortPath(k) {
  if (k === "" || k.split(".").some((s) => s === "")) fail("bad_sort", "bad sort path");
}

// ---------------------------------------------------------------------------
// Sort: MongoDB builds the keys an index on the sort pattern would hold (BtreeKeyGenerator): the
// paths are followed together, so paths through the same array give one key tuple per element
// ("a.b" and "a.c" come from the same element of a), two different arrays give "parallel arrays"
// (an error), missing or a scalar on the way gives null, an empty array gives undefined at the end
// of a path (sorts below null) and null in the middle. The document sorts by its best tuple under
// the pattern's directions (jstests/core/query/sort/sort_dotted_paths.js). Ties: _id (Herald).
// Parallel arrays: MongoDB fails the query (sort_dotted_paths_parallel_arrays.js); with
// parallel = "cartesian" the arrays are expanded one after the other instead (Herald's behaviour).

function walkSortField(obj, parts) {
  let cur = obj;
  for (let i = 0; i < parts.length; i++) {
    if (!isPlainObject(cur) || !has(cur, parts[i])) return { value: null };
    cur = cur[parts[i]];
    if (Array.isArray(cur)) return { array: cur, rest: parts.slice(i + 1) };
  }
  return { value: cur };
}

// items: {i, node, parts} (walk from node) or {i, array, rest} (already at an array).
// parallel: "error" (MongoDB) or "cartesian" (expand one array after the other).
function genSortKeys(items, base, out, parallel) {
  const tuple = base.slice();
  const groups = new Map();
  for (const it of items) {
    const r = it.array ? it : walkSortField(it.node, it.parts);
    if (!r.array) {
      tuple[it.i] = r.value;
      continue;
    }
    if (!groups.has(r.array)) groups.set(r.array, []);
    groups.get(r.array).push({ i: it.i, rest: r.rest });
  }
  if (groups.size === 0) {
    out.push(tuple);
    return;
  }
  if (groups.size > 1 && parallel !== "cartesian") fail("bad_sort", "cannot sort with keys that are parallel arrays");
  const [[arr, fields], ...others] = [...groups];
  const pending = others.flatMap(([array, fs]) => fs.map((f) => ({ i: f.i, array, rest: f.rest })));
  if (arr.length === 0) {
    for (const f of fields) tuple[f.i] = f.rest.length ? null : EMPTY_ARRAY_KEY;
    if (pending.length) genSortKeys(pending, tuple, out, parallel);
    else out.push(tuple);
    return;
  }
  for (const e of arr) {
    const t = tuple.slice();
    const deeper = [];
    for (const f of fields) {
      if (f.rest.length === 0) t[f.i] = e; // a nested array stays an array value
      else if (isPlainObject(e)) deeper.push({ i: f.i, node: e, parts: f.rest });
      else t[f.i] = null;
    }
    const next = deeper.concat(pending);
    if (next.length) genSortKeys(next, t, out, parallel);
    else out.push(t);
  }
}

function cmpTuple(x, y, dirs) {
  for (let i = 0; i < dirs.length; i++) {
    const c = bsonCmp(x[i], y[i]);
    if (c) return c * dirs[i];
  }
  return 0;
}

/** The tuple a document sorts by (throws RefError for parallel arrays). */
export function sortKey(doc, sort, parallel = "error") {
  const fields = Object.keys(sort).map((p, i) => ({ i, node: doc, parts: p.split(".") }));
  const dirs = Object.values(sort);
  const keys = [];
  genSortKeys(fields, [], keys, parallel);
  let best = keys[0];
  for (const k of keys) if (cmpTuple(k, best, dirs) < 0) best = k;
  return best;
}

export function refSort(docs, sort, parallel = "error") {
  const dirs = Object.values(sort ?? {});
  const keyed = docs.map((d) => ({ d, k: dirs.length ? sortKey(d, sort, parallel) : [] }));
  keyed.sort((x, y) => cmpTuple(x.k, y.k, dirs) || cmpStr(x.d._id, y.d._id));
  return keyed.map((x) => x.d);
}

// ---------------------------------------------------------------------------
// Projection (find semantics, plain paths only).

function projectionMode(proj) {
  if (!isPlainObject(proj)) fail("bad_projection", "projection must be an object");
  let mode = null;
  const tree = {};
  const paths = [];
  for (const [k, v] of Object.entries(proj)) {
    if (k === "" || k.startsWith("$") || k.split(".").some((s) => s === "" || s.startsWith("$")))
      fail("bad_projection", "bad projection path " + k);
    let include;
    if (typeof v === "number" || typeof v === "boolean") include = !!v;
    else fail("bad_projection", "unsupported projection value " + JSON.stringify(v));
    if (k !== "_id") {
      const m = include ? "include" : "exclude";
      if (mode && mode !== m) fail("bad_projection", "cannot mix inclusion and exclusion");
      mode = m;
    }
    paths.push([k, include]);
  }
  // path collisions ({a:1, "a.b":1})
  const keys = paths.map(([k]) => k);
  for (const a of keys)
    for (const b of keys) if (a !== b && b.startsWith(a + ".")) fail("bad_projection", "path collision " + a + " / " + b);
  if (mode === null) {
    // only _id (or nothing): {_id:0} is an exclusion, {_id:1} an inclusion
    const idv = paths.find(([k]) => k === "_id");
    mode = idv && idv[1] ? "include" : "exclude";
  }
  for (const [k] of paths) {
    if (k === "_id") continue;
    let t = tree;
    const parts = k.split(".");
    for (let i = 0; i < parts.length - 1; i++) {
      if (!isPlainObject(t[parts[i]])) t[parts[i]] = {};
      t = t[parts[i]];
    }
    t[parts[parts.length - 1]] = true;
  }
  const idEntry = paths.find(([k]) => k === "_id");
  const keepId = idEntry ? idEntry[1] : true;
  return { mode, tree, keepId };
}

const DROP = Symbol("drop");
function projInc(obj, tree) {
  const out = {};
  for (const k of Object.keys(obj)) {
    if (!has(tree, k)) continue;
    if (tree[k] === true) out[k] = clone(obj[k]);
    else {
      const r = projIncChild(obj[k], tree[k]);
      if (r !== DROP) out[k] = r;
    }
  }
  return out;
}
function projIncChild(v, tree) {
  if (isPlainObject(v)) return projInc(v, tree);
  if (Array.isArray(v)) return v.map((e) => projIncChild(e, tree)).filter((e) => e !== DROP);
  return DROP;
}
function projExc(obj, tree) {
  const out = {};
  for (const k of Object.keys(obj)) {
    if (has(tree, k)) {
      if (tree[k] === true) continue;
      out[k] = projExcChild(obj[k], tree[k]);
    } else out[k] = clone(obj[k]);
  }
  return out;
}
function projExcChild(v, tree) {
  if (isPlainObject(v)) return projExc(v, tree);
  if (Array.isArray(v)) return v.map((e) => projExcChild(e, tree));
  return clone(v);
}

export function refProject(docs, projection) {
  if (projection === undefined || (isPlainObject(projection) && Object.keys(projection).length === 0)) return docs.map(clone);
  const { mode, tree, keepId } = projectionMode(projection);
  return docs.map((d) => {
    let out = mode === "include" ? projInc(d, tree) : projExc(d, tree);
    if (mode === "include" && keepId && has(d, "_id")) out = { _id: d._id, ...out };
    if (!keepId) delete out._id;
    return out;
  });
}

/** Full reference query (used by the reference fake evaluator and the self-test). */
export function refQuery(docs, query, opts = {}) {
  try {
    validateQuery(query);
    const m = compileFilter(query.filter ?? {}, opts);
    let res = docs.filter((d) => m(d));
    res = refSort(res, query.sort);
    if (query.skip) res = res.slice(query.skip);
    if (query.limit) res = res.slice(0, query.limit);
    return { ids: res.map((d) => d._id), docs: refProject(res, query.projection) };
  } catch (e) {
    if (e instanceof RefError) return { error: e.code, message: e.message };
    throw e;
  }
}

// ---------------------------------------------------------------------------
// Updates (src/mongo/db/update/*_node.cpp).

export const UPDATE_OPS = [
  "$set", "$unset", "$inc", "$mul", "$min", "$max", "$rename",
  "$push", "$pull", "$pullAll", "$addToSet", "$pop", "$currentDate", "$setOnInsert",
];
const CREATES = new Set(["$set", "$inc", "$mul", "$min", "$max", "$push", "$addToSet", "$currentDate", "$setOnInsert"]);

function checkUpdatePath(p) {
  if (p === "" || p.split(".").some((s) => s === "")) fail("bad_update", "empty field name in path " + JSON.stringify(p));
  if (p.split(".").some((s) => s.startsWith("$"))) fail("bad_update", "positional / $-prefixed path not supported: " + p);
}

function hasDollarKeys(v) {
  if (Array.isArray(v)) return v.some(hasDollarKeys);
  if (isPlainObject(v)) return Object.keys(v).some((k) => k.startsWith("$") || hasDollarKeys(v[k]));
  return false;
}

/** Whole-update validation: shape, paths, conflicts, _id. Throws RefError. */
export function validateUpdate(update) {
  if (!isPlainObject(update) || Object.keys(update).length === 0) fail("bad_update", "update must be a non-empty object");
  const keys = Object.keys(update);
  if (!keys.every((k) => k.startsWith("$"))) fail("bad_update", "update mixes operators and fields");
  const all = [];
  for (const op of keys) {
    if (!UPDATE_OPS.includes(op)) fail("unknown_operator", "unknown update operator " + op);
    const arg = update[op];
    if (!isPlainObject(arg)) fail("bad_update", op + " needs an object");
    for (const [p, v] of Object.entries(arg)) {
      checkUpdatePath(p);
      all.push(p);
      validateOpArg(op, p, v);
      if (op === "$rename") all.push(v);
    }
  }
  for (let i = 0; i < all.length; i++)
    for (let j = 0; j < all.length; j++)
      if (i !== j && (all[i] === all[j] || all[j].startsWith(all[i] + ".")))
        fail("conflicting_update_paths", `conflict between ${all[i]} and ${all[j]}`);
  for (const p of all) if (p === "_id" || p.startsWith("_id.")) fail("immutable_field", "cannot update _id");
}

/** Argument checks of one operator/path (no cross-path checks). */
export function validateOpArg(op, p, v) {
  if (op === "$rename") {
    if (typeof v !== "string") fail("bad_update", "$rename target must be a string");
    checkUpdatePath(v);
    if (v === p || v.startsWith(p + ".") || p.startsWith(v + ".")) fail("bad_update", "$rename source and target overlap");
  }
  if (op === "$inc" || op === "$mul") {
    if (typeof v !== "number") fail("type_mismatch", `${op} needs a number`);
  }
  if (op === "$pop" && v !== 1 && v !== -1) fail("bad_update", "$pop needs 1 or -1");
  if (op === "$pullAll" && !Array.isArray(v)) fail("bad_update", "$pullAll needs an array");
  if ((op === "$set" || op === "$min" || op === "$max" || op === "$setOnInsert") && hasDollarKeys(v))
    fail("bad_update", "$-prefixed field name in value");
  if (op === "$push" || op === "$addToSet") validateEach(op, v);
}

const PUSH_MODS = ["$each", "$slice", "$sort", "$position"];
function validateEach(op, v) {
  if (!isPlainObject(v) || !has(v, "$each")) {
    if (hasDollarKeys(v)) fail("bad_update", "$-prefixed field name in value");
    return;
  }
  if (!Array.isArray(v.$each)) fail("bad_update", "$each needs an array");
  for (const k of Object.keys(v)) {
    if (op === "$addToSet" ? k !== "$each" : !PUSH_MODS.includes(k)) fail("bad_update", "unknown modifier " + k);
  }
  if (v.$each.some(hasDollarKeys)) fail("bad_update", "$-prefixed field name in value");
  if (has(v, "$slice") && !(typeof v.$slice === "number" && Number.isInteger(v.$slice))) fail("bad_update", "$slice must be an integer");
  if (has(v, "$position") && !(typeof v.$position === "number" && Number.isInteger(v.$position))) fail("bad_update", "$position must be an integer");
  if (has(v, "$sort")) {
    const s = v.$sort;
    if (isPlainObject(s)) {
      if (Object.keys(s).length === 0 || !Object.values(s).every((x) => x === 1 || x === -1)) fail("bad_update", "bad $sort");
      for (const k of Object.keys(s)) if (k === "" || k.split(".").some((x) => x === "" || x.startsWith("$"))) fail("bad_update", "bad $sort path");
    } else if (s !== 1 && s !== -1) fail("bad_update", "bad $sort");
  }
}

/**
 * Find the container of the last path segment. Returns {parent, key} or null when the path does
 * not exist (for non-creating operators). For creating operators, missing parts are created and
 * a path through a scalar or a non-numeric segment on an array is an error; so it is for the
 * array operators that do not create ($pop, $pull, $pullAll: `opts.viable`), as MongoDB's
 * checkViability makes it (PathNotViable), while a missing field is not.
 */
function locate(doc, parts, create, opts = {}) {
  let cur = doc;
  for (let i = 0; i < parts.length - 1; i++) {
    const p = parts[i];
    if (isPlainObject(cur)) {
      if (!has(cur, p)) {
        if (!create) return null;
        cur[p] = {};
      }
      cur = cur[p];
    } else if (Array.isArray(cur)) {
      if (opts.noArrays) fail("bad_update", "path through an array element");
      if (!isDigits(p)) {
        if (create || opts.viable) fail("path_not_viable", `cannot use the part (${p}) to traverse an array`);
        return null;
      }
      const idx = Number(p);
      if (idx >= cur.length) {
        if (!create) return null;
        while (cur.length < idx) cur.push(null);
        cur.push({});
      }
      cur = cur[idx];
    } else {
      if (create || opts.viable) fail("path_not_viable", `cannot create field '${p}' in a non-object value`);
      return null;
    }
  }
  const last = parts[parts.length - 1];
  if (isPlainObject(cur)) return { parent: cur, key: last, exists: has(cur, last) };
  if (Array.isArray(cur)) {
    if (opts.noArrays) fail("bad_update", "path through an array element");
    if (!isDigits(last)) {
      if (create || opts.viable) fail("path_not_viable", `cannot use the part (${last}) to traverse an array`);
      return null;
    }
    const idx = Number(last);
    return { parent: cur, key: idx, exists: idx < cur.length };
  }
  if (create || opts.viable) fail("path_not_viable", `cannot create field '${last}' in a non-object value`);
  return null;
}

function put(loc, value) {
  const { parent, key } = loc;
  if (Array.isArray(parent)) while (parent.length < key) parent.push(null);
  parent[key] = value;
}

function pullMatcher(spec) {
  if (isPlainObject(spec) && !isOperatorObject(spec)) {
    const q = compileFilter(spec);
    return (e) => isPlainObject(e) && q(e);
  }
  if (isPlainObject(spec)) {
    const q = compileFilter({ x: spec });
    return (e) => q({ x: e });
  }
  return (e) => bsonEq(e, spec);
}

function pushSortCmp(spec) {
  if (!isPlainObject(spec)) return (a, b) => spec * bsonCmp(a, b);
  const fields = Object.entries(spec);
  const get = (e, path) => {
    let cur = e;
    for (const p of path.split(".")) {
      if (isPlainObject(cur) && has(cur, p)) cur = cur[p];
      else if (Array.isArray(cur) && isDigits(p) && Number(p) < cur.length) cur = cur[Number(p)];
      else return null;
    }
    return cur;
  };
  return (a, b) => {
    for (const [f, dir] of fields) {
      const c = bsonCmp(get(a, f), get(b, f));
      if (c) return dir * c;
    }
    return 0;
  };
}

/** Apply one operator of an update to `doc` in place (paths already validated). */
export function applyOp(doc, op, arg) {
  if (!UPDATE_OPS.includes(op)) fail("unknown_operator", "unknown update operator " + op);
  if (!isPlainObject(arg)) fail("bad_update", op + " needs an object");
  for (const [path, v] of Object.entries(arg)) {
    checkUpdatePath(path);
    validateOpArg(op, path, v);
    const parts = path.split(".");
    if (op === "$rename") {
      const from = locate(doc, parts, false, { noArrays: true });
      if (!from || !from.exists) continue;
      const value = from.parent[from.key];
      delete from.parent[from.key];
      const to = locate(doc, v.split("."), true, { noArrays: true });
      put(to, value);
      continue;
    }
    const loc = locate(doc, parts, CREATES.has(op), { viable: ["$pop", "$pull", "$pullAll"].includes(op) });
    if (!loc) continue;
    const cur = loc.exists ? loc.parent[loc.key] : MISSING;
    switch (op) {
      case "$set":
      case "$setOnInsert":
        put(loc, clone(v));
        break;
      case "$unset":
        if (!loc.exists) break;
        if (Array.isArray(loc.parent)) loc.parent[loc.key] = null;
        else delete loc.parent[loc.key];
        break;
      case "$inc":
      case "$mul":
        if (cur === MISSING) put(loc, op === "$inc" ? v : 0);
        else if (typeof cur !== "number") fail("type_mismatch", `cannot apply ${op} to a non-number at ${path}`);
        else put(loc, op === "$inc" ? cur + v : cur * v);
        break;
      case "$min":
      case "$max":
        if (cur === MISSING) put(loc, clone(v));
        else {
          const c = bsonCmp(v, cur);
          if ((op === "$min" && c < 0) || (op === "$max" && c > 0)) put(loc, clone(v));
        }
        break;
      case "$push": {
        const mods = isPlainObject(v) && has(v, "$each") ? v : { $each: [v] };
        let arr;
        if (cur === MISSING) arr = [];
        else if (!Array.isArray(cur)) fail("type_mismatch", `${path} must be an array for $push`);
        else arr = cur;
        const items = clone(mods.$each);
        const size = arr.length;
        let pos = has(mods, "$position") ? mods.$position : size;
        if (pos < 0) pos = Math.max(0, size + pos);
        if (pos > size) pos = size;
        arr.splice(pos, 0, ...items);
        if (has(mods, "$sort")) {
          const cmp = pushSortCmp(mods.$sort);
          arr.sort(cmp); // stable; MongoDB leaves the order of ties unspecified (std::sort)
        }
        if (has(mods, "$slice")) {
          const s = mods.$slice;
          if (s >= 0) arr.splice(s);
          else if (arr.length > -s) arr.splice(0, arr.length + s);
        }
        if (cur === MISSING) put(loc, arr);
        break;
      }
      case "$addToSet": {
        const items = isPlainObject(v) && has(v, "$each") ? v.$each : [v];
        let arr;
        if (cur === MISSING) arr = [];
        else if (!Array.isArray(cur)) fail("type_mismatch", `${path} must be an array for $addToSet`);
        else arr = cur;
        for (const it of items) if (!arr.some((x) => bsonEq(x, it))) arr.push(clone(it));
        if (cur === MISSING) put(loc, arr);
        break;
      }
      case "$pop":
        if (cur === MISSING) break;
        if (!Array.isArray(cur)) fail("type_mismatch", `${path} must be an array for $pop`);
        if (cur.length) v === -1 ? cur.shift() : cur.pop();
        break;
      case "$pull":
      case "$pullAll": {
        if (cur === MISSING) break;
        if (!Array.isArray(cur)) fail("type_mismatch", `${path} must be an array for ${op}`);
        const m = op === "$pull" ? pullMatcher(v) : (e) => v.some((x) => bsonEq(e, x));
        put(loc, cur.filter((e) => !m(e)));
        break;
      }
      default:
        fail("unknown_operator", op);
    }
  }
}

/** Full reference update. */
export function refUpdate(doc, update) {
  try {
    validateUpdate(update);
    const d = clone(doc);
    for (const op of Object.keys(update)) applyOp(d, op, update[op]);
    return { doc: d };
  } catch (e) {
    if (e instanceof RefError) return { error: e.code, message: e.message };
    throw e;
  }
}
