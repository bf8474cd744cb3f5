// Running an aggregation pipeline through mingo's Aggregator, with every operator family loaded:
// as shipped (the oracle), or "patched" with some accumulators or stages replaced by MongoDB's
// semantics, which is how pipeline divergences are judged (see known-divergences.mjs).

import { Aggregator } from "mingo/aggregator";
import { Context } from "mingo/core";
import { Lazy } from "mingo/lazy";
import * as accumulatorOps from "mingo/operators/accumulator";
import * as expressionOps from "mingo/operators/expression";
import * as pipelineOps from "mingo/operators/pipeline";
import * as projectionOps from "mingo/operators/projection";
import * as queryOps from "mingo/operators/query";
import { sortKey } from "./mongo-ref.mjs";
import { bsonCmp, cmpStr } from "./values.mjs";
import { byId } from "./mingo-runner.mjs";

/** MongoDB's value of an accumulator's expression per document; `undefined` is missing. */
const values = (coll, expr) => coll.map((o) => aggValue(o, expr));

/**
 * MongoDB's evaluation of the expressions the generator writes: field paths (through arrays of
 * documents, as a list), `$$ROOT`, literals, and documents of expressions (missing members left
 * out). Anything else is not generated.
 */
export function aggValue(doc, expr) {
  if (typeof expr === "string" && expr === "$$ROOT") return doc;
  if (typeof expr === "string" && expr.startsWith("$")) return fieldPath(doc, expr.slice(1).split("."));
  if (Array.isArray(expr)) return expr.map((e) => aggValue(doc, e) ?? null);
  if (expr !== null && typeof expr === "object") {
    const out = {};
    for (const [k, e] of Object.entries(expr)) {
      const v = aggValue(doc, e);
      if (v !== undefined) out[k] = v;
    }
    return out;
  }
  return expr;
}

function fieldPath(v, parts) {
  if (parts.length === 0) return v;
  if (Array.isArray(v)) {
    const out = [];
    for (const e of v) {
      if (e === null || typeof e !== "object") continue;
      const x = fieldPath(e, parts);
      if (x !== undefined) out.push(x);
    }
    return out;
  }
  if (v === null || typeof v !== "object" || !Object.prototype.hasOwnProperty.call(v, parts[0])) return undefined;
  return fieldPath(v[parts[0]], parts.slice(1));
}

/** MongoDB's accumulators and stages where mingo differs, by patch name. */
const PATCHES = {
  // $push / $addToSet leave missing values out (mingo pushes null for them).
  "p:push-missing": {
    accumulator: {
      $push: (coll, expr, options) => values(coll, expr, options).filter((v) => v !== undefined),
      $addToSet: (coll, expr, options) => {
        const out = [];
        for (const v of values(coll, expr, options)) {
          if (v !== undefined && !out.some((x) => bsonCmp(x, v) === 0)) out.push(v);
        }
        return out;
      },
    },
  },
  // $min / $max compare with the BSON order (arrays as whole values, above strings and objects),
  // ignoring null and missing.
  "p:minmax-bson": {
    accumulator: {
      $min: (coll, expr, options) => best(values(coll, expr, options), -1),
      $max: (coll, expr, options) => best(values(coll, expr, options), 1),
    },
  },
  // $count of an empty input is no document (mingo answers a count of 0).
  "p:count-empty": {
    pipeline: {
      $count: (coll, expr, options) => {
        const all = coll.collect();
        return all.length ? pipelineOps.$count(Lazy(all), expr, options) : Lazy([]);
      },
    },
  },
  // $sort with MongoDB's sort keys (arrays by their smallest/largest element, BSON order), stable.
  "p:sort": { pipeline: { $sort: sorter(false) } },
  // Herald's $sort: MongoDB's sort keys, ties broken by _id ascending (as /v1/query does).
  "p:sort-id-ties": { pipeline: { $sort: sorter(true) } },
};

/**
 * A $sort stage with MongoDB's sort keys; ties keep the input order, or with `idTies` are broken
 * by _id first. Keys are taken from the documents as JSON (mingo keeps members whose value is
 * undefined, which JSON and MongoDB do not have).
 */
function sorter(idTies) {
  return (coll, spec) => {
    const full = idTies && !("_id" in spec) ? { ...spec, _id: 1 } : spec;
    const allDirs = Object.values(full);
    const keyed = coll.collect().map((d, i) => ({ d, i, k: sortKey(JSON.parse(JSON.stringify(d)), full, "expand") }));
    keyed.sort((x, y) => {
      for (let j = 0; j < allDirs.length; j++) {
        const c = bsonCmp(x.k[j] ?? null, y.k[j] ?? null) * allDirs[j];
        if (c) return c;
      }
      return x.i - y.i;
    });
    return Lazy(keyed.map((x) => x.d));
  };
}

function best(vals, sign) {
  let out = null;
  for (const v of vals) {
    if (v === undefined || v === null) continue;
    if (out === null || bsonCmp(v, out) * sign > 0) out = v;
  }
  return out;
}

const contexts = new Map();
function contextFor(patches) {
  const key = [...patches].sort().join(",");
  if (!contexts.has(key)) {
    const ops = {
      accumulator: { ...accumulatorOps },
      expression: expressionOps,
      pipeline: { ...pipelineOps },
      projection: projectionOps,
      query: queryOps,
    };
    for (const p of patches) {
      for (const [family, replaced] of Object.entries(PATCHES[p] ?? {})) Object.assign(ops[family], replaced);
    }
    contexts.set(key, Context.init(ops));
  }
  return contexts.get(key);
}

/** mingo's answer for a pipeline over docs (given to it in _id order, as Herald reads them). */
export function mingoPipeline(docs, pipeline, patches = new Set()) {
  try {
    const out = new Aggregator(pipeline, { context: contextFor(patches) }).run(byId(docs));
    return { docs: JSON.parse(JSON.stringify(out)) };
  } catch (e) {
    return { error: "mingo_error", message: String(e?.message ?? e) };
  }
}

/** JSON with object keys sorted: the identity of a document when order does not matter. */
const canon = (v) =>
  v !== null && typeof v === "object" && !Array.isArray(v)
    ? `{${Object.keys(v).sort().map((k) => JSON.stringify(k) + ":" + canon(v[k])).join(",")}}`
    : Array.isArray(v)
      ? `[${v.map(canon).join(",")}]`
      : JSON.stringify(v);

/**
 * A pipeline case's answer with its documents sorted when MongoDB leaves their order open (the
 * generator marks such cases `ordered: false`: a $group not followed by a $sort).
 */
export function normalized(c, a) {
  if (c.kind !== "pipeline" || c.ordered || !a || !Array.isArray(a.docs)) return a;
  return { ...a, docs: a.docs.slice().sort((x, y) => cmpStr(canon(x), canon(y))) };
}

/** mingo's (normalized) answer for a pipeline case, with these patches. */
export function patchedPipeline(c, patches) {
  return normalized(c, mingoPipeline(JSON.parse(c.docsText), JSON.parse(c.pipelineText), patches));
}
