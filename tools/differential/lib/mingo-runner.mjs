// Running a case through mingo: as shipped (the oracle), and "patched" — with some operators or
// stages replaced by the MongoDB model in mongo-ref.mjs — which is how divergences are judged.

import { Query as MingoQuery, update as mingoUpdate } from "mingo";
import { Query as BaseQuery } from "mingo/query";
import { Context } from "mingo/core";
import * as queryOps from "mingo/operators/query";
import * as projectionOps from "mingo/operators/projection";
import * as pipelineOps from "mingo/operators/pipeline";
import * as expressionOps from "mingo/operators/expression";
import { resolve } from "mingo/util";
import {
  RefError,
  applyOp,
  asMingoOperator,
  makeRegex,
  refProject,
  refSort,
  validateQuery,
  validateUpdate,
} from "./mongo-ref.mjs";
import { cmpStr, isPlainObject } from "./values.mjs";

const errorOf = (e) =>
  e instanceof RefError ? { error: e.code, message: e.message } : { error: "mingo_error", message: String(e?.message ?? e) };

/** Both sides see documents in _id order, so a stable sort breaks ties by _id like Herald. */
export function byId(docs) {
  return docs.slice().sort((x, y) => cmpStr(String(x._id), String(y._id)));
}

const roundTrip = (v) => JSON.parse(JSON.stringify(v)); // array holes -> null, drops undefined

function runCursor(query, docs, q, projection) {
  let cur = query.find(docs, projection);
  if (q.sort !== undefined) cur = cur.sort(q.sort);
  if (q.skip !== undefined) cur = cur.skip(q.skip);
  if (q.limit !== undefined) cur = cur.limit(q.limit);
  return cur.all();
}

/** mingo as shipped: Query.find(...).sort().skip().limit() with the projection. */
export function mingoQuery(c) {
  try {
    const docs = byId(JSON.parse(c.docsText));
    const q = JSON.parse(c.queryText);
    const query = new MingoQuery(q.filter);
    const res = runCursor(query, docs, q);
    const ids = res.map((d) => d._id);
    const out = q.projection !== undefined ? runCursor(query, docs, q, q.projection) : res;
    return { ids, docs: roundTrip(out) };
  } catch (e) {
    return errorOf(e);
  }
}

/** mingo's update() as shipped. */
export function mingoUpdateCase(c) {
  try {
    const doc = JSON.parse(c.docText);
    mingoUpdate(doc, JSON.parse(c.updateText));
    return { doc: roundTrip(doc) };
  } catch (e) {
    return errorOf(e);
  }
}

// ---------------------------------------------------------------------------
// Patches. A patch id names one mingo operator or stage that is replaced by mongo-ref.mjs.

export const QUERY_OPERATOR_PATCHES = {
  "q:$eq": ["$eq", "$ne"],
  "q:$in": ["$in", "$nin"],
  "q:$cmp": ["$gt", "$gte", "$lt", "$lte"],
  "q:$exists": ["$exists"],
  "q:$type": ["$type"],
  "q:$regex": ["$regex"],
  "q:$mod": ["$mod"],
  "q:$all": ["$all"],
  "q:$elemMatch": ["$elemMatch"],
  "q:$size": ["$size"],
};
export const QUERY_STAGE_PATCHES = ["q:type-json", "q:regex-x", "q:sort", "q:sort-parallel", "q:projection", "q:limit0", "q:validate"];
export const UPDATE_PATCHES = [
  "u:$set", "u:$unset", "u:$inc", "u:$mul", "u:$min", "u:$max", "u:$rename",
  "u:$push", "u:$pull", "u:$pullAll", "u:$addToSet", "u:$pop", "u:validate",
];
export const ALL_QUERY_PATCHES = [...Object.keys(QUERY_OPERATOR_PATCHES), ...QUERY_STAGE_PATCHES];

/** mingo's own $type logic, but with Herald's JSON number typing. */
function mingoTypeWithJsonNumbers(selector, value, _options) {
  const INT32 = (v) => Number.isInteger(v) && v >= -2147483648 && v <= 2147483647;
  const fns = {
    double: (v) => typeof v === "number" && !Number.isInteger(v),
    1: (v) => typeof v === "number" && !Number.isInteger(v),
    int: (v) => typeof v === "number" && INT32(v),
    16: (v) => typeof v === "number" && INT32(v),
    long: (v) => typeof v === "number" && Number.isInteger(v) && !INT32(v),
    18: (v) => typeof v === "number" && Number.isInteger(v) && !INT32(v),
    number: (v) => typeof v === "number",
    decimal: () => false,
    19: () => false,
    string: (v) => typeof v === "string",
    2: (v) => typeof v === "string",
    object: isPlainObject,
    3: isPlainObject,
    array: Array.isArray,
    4: Array.isArray,
    bool: (v) => typeof v === "boolean",
    8: (v) => typeof v === "boolean",
    null: (v) => v === null,
    10: (v) => v === null,
  };
  const test = (a, t) => (fns[t] ? fns[t](a) : false);
  return (o) => {
    const a = resolve(o, selector, { unwrapArray: true });
    return Array.isArray(value) ? value.some((t) => test(a, t)) : test(a, value);
  };
}

const ctxCache = new Map();
function contextFor(patches) {
  const key = [...patches].filter((p) => p.startsWith("q:$") || p === "q:type-json").sort().join(",");
  let ctx = ctxCache.get(key);
  if (ctx) return ctx;
  const typing = patches.has("q:type-json") ? "json" : "mingo";
  const overrides = {};
  if (patches.has("q:type-json")) overrides.$type = mingoTypeWithJsonNumbers;
  for (const [id, ops] of Object.entries(QUERY_OPERATOR_PATCHES)) {
    if (!patches.has(id)) continue;
    for (const op of ops) overrides[op] = asMingoOperator(op, { typing });
  }
  ctx = Context.init({
    query: { ...queryOps, ...overrides },
    projection: projectionOps,
    pipeline: pipelineOps,
    expression: expressionOps,
  });
  ctxCache.set(key, ctx);
  return ctx;
}

/** Rewrite {$regex, $options: "...x..."} the way PCRE reads it, so that JS RegExp accepts it. */
function rewriteRegexX(v) {
  if (Array.isArray(v)) return v.map(rewriteRegexX);
  if (!isPlainObject(v)) return v;
  const out = {};
  for (const [k, x] of Object.entries(v)) out[k] = rewriteRegexX(x);
  if (typeof out.$regex === "string" && typeof out.$options === "string" && out.$options.includes("x")) {
    out.$regex = makeRegex(out.$regex, out.$options).source;
    out.$options = out.$options.replace(/x/g, "");
    if (!out.$options) delete out.$options;
  }
  return out;
}

/** mingo with the given patches applied (a Set of patch ids). */
export function patchedQuery(c, patches) {
  try {
    const docs = byId(JSON.parse(c.docsText));
    const q = JSON.parse(c.queryText);
    if (patches.has("q:validate")) validateQuery(q);
    let filter = q.filter;
    if (patches.has("q:regex-x")) filter = rewriteRegexX(filter);
    const query = new BaseQuery(filter, { context: contextFor(patches) });
    let res = docs.filter((d) => query.test(d));
    const all = new MingoQuery({});
    if (q.sort !== undefined) res = patches.has("q:sort") ? refSort(res, q.sort, patches.has("q:sort-parallel") ? "cartesian" : "error") : all.find(res).sort(q.sort).all();
    const page = { skip: q.skip, limit: patches.has("q:limit0") && q.limit === 0 ? undefined : q.limit };
    res = runCursor(all, res, page);
    const ids = res.map((d) => d._id);
    let out = res;
    if (q.projection !== undefined) out = patches.has("q:projection") ? refProject(res, q.projection) : all.find(res, q.projection).all();
    return { ids, docs: roundTrip(out) };
  } catch (e) {
    return errorOf(e);
  }
}

/** mingo's update() for the operators not patched, then mongo-ref for the patched ones. */
export function patchedUpdate(c, patches) {
  try {
    const doc = JSON.parse(c.docText);
    const upd = JSON.parse(c.updateText);
    if (patches.has("u:validate")) validateUpdate(upd);
    const mingoPart = {};
    const refOps = [];
    for (const op of Object.keys(upd)) {
      if (patches.has("u:" + op)) refOps.push(op);
      else mingoPart[op] = upd[op];
    }
    if (Object.keys(mingoPart).length) mingoUpdate(doc, mingoPart);
    for (const op of refOps) applyOp(doc, op, upd[op]);
    return { doc: roundTrip(doc) };
  } catch (e) {
    return errorOf(e);
  }
}
