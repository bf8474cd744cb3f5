#!/usr/bin/env node
// A stand-in for `herald-conformance eval` (same line protocol), for developing and testing the
// harness before/without the Rust binary.
//
//   node fake-eval.mjs                   answers with mingo itself (expect 0 divergences)
//   node fake-eval.mjs --mongo-model     answers with lib/mongo-ref.mjs, i.e. behaves like MongoDB
//                                        (expect many divergences, all explained)
//   node fake-eval.mjs --break=drop-one  mingo, but drops one result of every query or pipeline
//                                        with >= 3 results (expect unexplained divergences, exit 1)
//   node fake-eval.mjs --break=update    mingo, but $inc adds one more than asked
//
// Protocol: one JSON request per stdin line, exactly one JSON answer per stdout line.

import { createInterface } from "node:readline";
import { mingoQuery, mingoUpdateCase, byId } from "./lib/mingo-runner.mjs";
import { refQuery, refUpdate } from "./lib/mongo-ref.mjs";
import { mingoPipeline } from "./lib/mingo-pipeline.mjs";

/** mingo with MongoDB's semantics where it differs (the --mongo-model answer for pipelines). */
const MONGO_PIPELINE = new Set(["p:push-missing", "p:minmax-bson", "p:count-empty", "p:sort"]);

const args = process.argv.slice(2);
const mongoModel = args.includes("--mongo-model");
const brk = (args.find((a) => a.startsWith("--break=")) ?? "").slice("--break=".length);

function answer(req) {
  if (req.pipeline !== undefined) {
    const res = mingoPipeline(req.docs, req.pipeline, mongoModel ? MONGO_PIPELINE : new Set());
    if (brk === "drop-one" && res.docs && res.docs.length >= 3) res.docs.splice(1, 1);
    return res;
  }
  if (req.docs !== undefined) {
    if (mongoModel) return refQuery(byId(req.docs), req.query);
    const res = mingoQuery({ docsText: JSON.stringify(req.docs), queryText: JSON.stringify(req.query) });
    if (brk === "drop-one" && res.ids && res.ids.length >= 3) {
      res.ids.splice(1, 1);
      res.docs.splice(1, 1);
    }
    return res;
  }
  if (req.doc !== undefined) {
    if (mongoModel) return refUpdate(req.doc, req.update);
    let upd = req.update;
    if (brk === "update" && upd && upd.$inc) {
      upd = { ...upd, $inc: Object.fromEntries(Object.entries(upd.$inc).map(([k, v]) => [k, typeof v === "number" ? v + 1 : v])) };
    }
    return mingoUpdateCase({ docText: JSON.stringify(req.doc), updateText: JSON.stringify(upd) });
  }
  return { error: "bad_request", message: "neither a query, a pipeline nor an update request" };
}

const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of rl) {
  if (!line.trim()) continue;
  let out;
  try {
    out = answer(JSON.parse(line));
  } catch (e) {
    out = { error: "internal", message: String(e?.message ?? e) };
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}
