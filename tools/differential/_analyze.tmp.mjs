import { readFileSync } from "node:fs";
import { Query as MingoQuery } from "mingo";
import { Query as BaseQuery } from "mingo/query";
import { Context } from "mingo/core";
import * as queryOps from "mingo/operators/query";
import { asMingoOperator } from "/work/main/tools/differential/lib/mongo-ref.mjs";
import { QUERY_OPERATOR_PATCHES } from "/work/main/tools/differential/lib/mingo-runner.mjs";
import { KNOWN_DIVERGENCES } from "/work/main/tools/differential/known-divergences.mjs";
const lines = readFileSync("/tmp/ex.txt","utf8").split("\n");
let cur = null; const want = process.argv[2];
for (const l of lines) {
  if (l.startsWith("-- ")) { cur = l.slice(3); continue; }
  if (cur !== want || !l.startsWith("{")) continue;
  const c = JSON.parse(l);
  if (c.query) {
    const kd = KNOWN_DIVERGENCES.find(d => d.id === want); const pid = kd.patches.find(p => QUERY_OPERATOR_PATCHES[p]); const patch = pid ? [pid, QUERY_OPERATOR_PATCHES[pid]] : null;
    const ops = {}; for (const op of (patch?.[1] ?? [])) ops[op] = asMingoOperator(op, {typing:"mingo"});
    const ctx = Context.init({query: {...queryOps, ...ops}});
    let mq, pq; try { mq = new MingoQuery(c.query.filter); pq = new BaseQuery(c.query.filter, {context: ctx}); } catch (e) { console.log("filter", JSON.stringify(c.query.filter), "-> patched rejects:", e.message); continue; }
    for (const d of c.docs) { const a = mq.test(d), b = pq.test(d); if (a !== b) { console.log("filter", JSON.stringify(c.query.filter)); console.log("  doc", JSON.stringify(d), "mingo", a, "mongo", b); break; } }
    if (!patch) console.log(JSON.stringify(c.query), "\n mingo", JSON.stringify(c.mingo).slice(0,600), "\n herald", JSON.stringify(c.herald).slice(0,600));
  } else console.log(JSON.stringify(c.doc), JSON.stringify(c.update), "\n mingo", JSON.stringify(c.mingo), "\n herald", JSON.stringify(c.herald));
}
