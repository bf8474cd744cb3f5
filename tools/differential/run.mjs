#!/usr/bin/env node
// Differential test: Herald's query core (via `herald-conformance eval`) against mingo.
// See README.md for what it does and the knobs. Exit 0 = no unexplained divergence.

import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createInterface } from "node:readline";
import { dirname, resolve as resolvePath } from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";

import { Rng } from "./lib/prng.mjs";
import { genDocs, genQuery, genUpdate } from "./lib/gen.mjs";
import { genPipeline, genPipelineDocs } from "./lib/pipeline-gen.mjs";
import { normalized, patchedPipeline } from "./lib/mingo-pipeline.mjs";
import { plain, toJSONText, sameAnswer, cmpStr } from "./lib/values.mjs";
import { mingoQuery, mingoUpdateCase, patchedQuery, patchedUpdate } from "./lib/mingo-runner.mjs";
import { refQuery, refUpdate } from "./lib/mongo-ref.mjs";
import { KNOWN_DIVERGENCES } from "./known-divergences.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const MINGO_VERSION = createRequire(import.meta.url)("mingo/package.json").version;

// ------------------------------------------------------------------------------------ knobs
const env = process.env;
const intEnv = (name, dflt) => {
  if (env[name] === undefined || env[name] === "") return dflt;
  const v = Number(env[name]);
  if (!Number.isInteger(v) || v < 0) {
    console.error(`${name} must be a non-negative integer, got ${JSON.stringify(env[name])}`);
    process.exit(2);
  }
  return v;
};
const DEFAULT_SEED = 20251122;
const SEED =
  env.DIFF_SEED === "random" ? Math.floor(Math.random() * 2 ** 31) : intEnv("DIFF_SEED", DEFAULT_SEED);
const TOTAL = intEnv("DIFF_CASES", 4000);
const Q_CASES = intEnv("DIFF_QUERY_CASES", Math.round((TOTAL * 3) / 4));
const U_CASES = intEnv("DIFF_UPDATE_CASES", TOTAL - Math.round((TOTAL * 3) / 4));
// Aggregation pipelines come on top of DIFF_CASES (a quarter as many by default).
const P_CASES = intEnv("DIFF_PIPELINE_CASES", Math.round(TOTAL / 4));
const MAX_SHOWN = intEnv("DIFF_MAX_FAILURES", 20);
const SHRINK = env.DIFF_SHRINK !== "0";
const ONLY_CASE = env.DIFF_CASE; // e.g. "q17" or "u3": run just that case
const TIMEOUT_MS = intEnv("DIFF_TIMEOUT_MS", 30000);
const SHOW_EXPLAINED = intEnv("DIFF_SHOW_EXPLAINED", 0); // print N examples per classifier
const DEFAULT_BINARY = resolvePath(HERE, "../../target/debug/herald-conformance");
const EVAL_CMD = env.HERALD_EVAL || `"${DEFAULT_BINARY}" eval`;

// ------------------------------------------------------------------------------- cases
const NOW = 1700000000000;

function caseRng(kind, i) {
  // independent stream per case, so one case can be regenerated alone (DIFF_CASE)
  let h = (SEED ^ 0x9e3779b9) >>> 0;
  h = Math.imul(h ^ ({ q: 0x51ed27, u: 0x2c1b3c6d, p: 0x7f4a7c15 })[kind], 0x85ebca6b) >>> 0;
  h = Math.imul(h ^ (i + 1), 0xc2b2ae35) >>> 0;
  return new Rng((h ^ (h >>> 16)) >>> 0);
}

function makeQueryCase(i) {
  const r = caseRng("q", i);
  let docs = genDocs(r);
  const query = genQuery(r, docs);
  // integral doubles ("2.0") only where $type cannot see them (see lib/values.mjs Dbl)
  if (JSON.stringify(query).includes('"$type"')) docs = plain(docs);
  return buildQueryCase(`q${i}`, docs, query);
}
function buildQueryCase(name, docs, query) {
  const docsText = toJSONText(docs);
  const queryText = toJSONText(query);
  return { name, kind: "query", docs, query, docsText, queryText, line: `{"docs":${docsText},"query":${queryText}}` };
}
function makeUpdateCase(i) {
  const r = caseRng("u", i);
  const docs = genDocs(r);
  const doc = r.pick(docs);
  const update = genUpdate(r, doc);
  const docText = toJSONText(doc);
  const updateText = toJSONText(update);
  return {
    name: `u${i}`, kind: "update", doc, update, docText, updateText,
    line: `{"doc":${docText},"update":${updateText},"now":${NOW}}`,
  };
}

function makePipelineCase(i) {
  const r = caseRng("p", i);
  const docs = genPipelineDocs(r);
  const { pipeline, ordered } = genPipeline(r);
  const docsText = toJSONText(docs);
  const pipelineText = toJSONText(pipeline);
  return {
    name: `p${i}`, kind: "pipeline", docs, pipeline, ordered, docsText, pipelineText,
    line: `{"docs":${docsText},"pipeline":${pipelineText}}`,
  };
}

const makeCase = (name) =>
  ({ q: makeQueryCase, u: makeUpdateCase, p: makePipelineCase })[name[0]](Number(name.slice(1)));

// ---------------------------------------------------------------------------- evaluator
class Evaluator {
  constructor(cmd) {
    this.cmd = cmd;
    this.pending = [];
    this.dead = null;
    this.stderr = "";
    this.proc = spawn(cmd, { shell: true, cwd: HERE, stdio: ["pipe", "pipe", "pipe"] });
    this.proc.on("error", (e) => this._die(`cannot start evaluator: ${e.message}`));
    this.proc.on("exit", (code, sig) => this._die(`evaluator exited (code ${code}, signal ${sig})`));
    this.proc.stdin.on("error", () => {});
    this.proc.stderr.on("data", (d) => {
      this.stderr = (this.stderr + d).slice(-4000);
    });
    createInterface({ input: this.proc.stdout, crlfDelay: Infinity }).on("line", (line) => {
      const p = this.pending.shift();
      if (!p) return this._die(`evaluator printed an unrequested line: ${line.slice(0, 200)}`);
      clearTimeout(p.timer);
      try {
        p.resolve(JSON.parse(line));
      } catch {
        p.resolve({ error: "__invalid_json__", message: line.slice(0, 500) });
      }
    });
  }
  _die(msg) {
    if (this.dead) return;
    this.dead = msg + (this.stderr ? `\n--- evaluator stderr (tail) ---\n${this.stderr}` : "");
    for (const p of this.pending.splice(0)) {
      clearTimeout(p.timer);
      p.reject(new Error(this.dead));
    }
  }
  ask(line) {
    if (this.dead) return Promise.reject(new Error(this.dead));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this._die(`evaluator did not answer within ${TIMEOUT_MS} ms`);
      }, TIMEOUT_MS);
      this.pending.push({ resolve, reject, timer });
      this.proc.stdin.write(line + "\n");
    });
  }
  close() {
    this.proc.stdin.end();
    if (!this.proc.killed) setTimeout(() => this.proc.kill(), 2000).unref();
  }
}

// ------------------------------------------------------------------------- classification
const mingoAnswer = (c) =>
  c.kind === "query" ? mingoQuery(c) : c.kind === "update" ? mingoUpdateCase(c) : patchedPipeline(c, new Set());
const patched = (c, set) =>
  c.kind === "query" ? patchedQuery(c, set) : c.kind === "update" ? patchedUpdate(c, set) : patchedPipeline(c, set);

/**
 * null when mingo and Herald agree; otherwise {explainedBy: [ids]} or {explainedBy: null}.
 */
function judge(c, m, h) {
  h = normalized(c, h);
  if (sameAnswer(c.kind, m, h)) return null;
  const entries = KNOWN_DIVERGENCES.filter((d) => d.kind === c.kind && (!d.relevant || d.relevant(c)));
  for (const d of entries) if (d.test(c, m, h)) return { explainedBy: [d.id] };
  // several mingo bugs at once: try the union of the relevant patches, then drop what is not needed
  // (all relevant entries, or only the mingo-side ones: a Herald choice can undo a MongoDB rule)
  const patchEntries = entries.filter((d) => d.patches && d.patches.length);
  const setOf = (list) => new Set(list.flatMap((d) => d.patches));
  for (const pool of [patchEntries, patchEntries.filter((d) => d.side === "mingo")]) {
    if (!sameAnswer(c.kind, patched(c, setOf(pool)), h)) continue;
    let needed = pool.slice();
    for (const d of pool) {
      const without = needed.filter((x) => x !== d);
      if (sameAnswer(c.kind, patched(c, setOf(without)), h)) needed = without;
    }
    return { explainedBy: needed.map((d) => d.id) };
  }
  return { explainedBy: null };
}

// -------------------------------------------------------------------------------- shrinking
/** Remove documents while the divergence stays unexplained (query cases only). */
async function shrink(ev, c) {
  if (c.kind !== "query" || !SHRINK) return c;
  let docs = c.docs.slice();
  let best = c;
  let query = c.query;
  let budget = 150;
  const stillFails = async (cand, q = query) => {
    const cc = buildQueryCase(c.name, cand, q);
    const h = await ev.ask(cc.line);
    const v = judge(cc, mingoAnswer(cc), h);
    return v && v.explainedBy === null ? cc : null;
  };
  // first drop the parts of the query that are not needed (sort, skip, limit, projection)
  for (const k of ["skip", "limit", "sort", "projection"]) {
    if (query[k] === undefined) continue;
    const q = { ...query };
    delete q[k];
    const ok = await stillFails(docs, q);
    if (ok) {
      query = q;
      best = ok;
    }
  }
  for (let chunk = Math.ceil(docs.length / 2); chunk >= 1 && budget > 0; chunk = chunk === 1 ? 0 : Math.ceil(chunk / 2)) {
    for (let start = 0; start < docs.length && budget > 0; ) {
      const cand = docs.slice(0, start).concat(docs.slice(start + chunk));
      budget--;
      const ok = cand.length ? await stillFails(cand) : null;
      if (ok) {
        docs = cand;
        best = ok;
      } else start += chunk;
    }
  }
  return best;
}

function report(c, m, h) {
  const base = { case: c.name, seed: SEED };
  if (c.kind === "pipeline") {
    return `{"case":${JSON.stringify(base.case)},"seed":${base.seed},"ordered":${c.ordered},"docs":${c.docsText},` +
      `"pipeline":${c.pipelineText},"mingo":${JSON.stringify(m)},"herald":${JSON.stringify(normalized(c, h))}}`;
  }
  const model = c.kind === "query" ? refQuery(JSON.parse(c.docsText), JSON.parse(c.queryText)) : refUpdate(JSON.parse(c.docText), JSON.parse(c.updateText));
  if (c.kind === "query") {
    return `{"case":${JSON.stringify(base.case)},"seed":${base.seed},"docs":${c.docsText},"query":${c.queryText},` +
      `"mingo":${JSON.stringify(m)},"herald":${JSON.stringify(h)},"mongoModel":${JSON.stringify(model)}}`;
  }
  return `{"case":${JSON.stringify(base.case)},"seed":${base.seed},"doc":${c.docText},"update":${c.updateText},"now":${NOW},` +
    `"mingo":${JSON.stringify(m)},"herald":${JSON.stringify(h)},"mongoModel":${JSON.stringify(model)}}`;
}

// ------------------------------------------------------------------------------------ main
async function main() {
  const started = Date.now();
  console.log(`herald differential test — mingo ${MINGO_VERSION}`);
  console.log(`seed ${SEED} (reproduce: DIFF_SEED=${SEED}); evaluator: ${EVAL_CMD}`);

  let names;
  if (ONLY_CASE) {
    if (!/^[qup]\d+$/.test(ONLY_CASE)) {
      console.error("DIFF_CASE must look like q17, u3 or p5");
      process.exit(2);
    }
    names = [ONLY_CASE];
  } else {
    names = [];
    for (let i = 0; i < Q_CASES; i++) names.push(`q${i}`);
    for (let i = 0; i < U_CASES; i++) names.push(`u${i}`);
    for (let i = 0; i < P_CASES; i++) names.push(`p${i}`);
  }
  const count = (k) => names.filter((n) => n[0] === k).length;
  console.log(`cases: ${count("q")} query + ${count("u")} update + ${count("p")} pipeline`);

  if (!env.HERALD_EVAL && !existsSync(DEFAULT_BINARY)) {
    console.log(`\nFATAL: ${DEFAULT_BINARY} does not exist.`);
    console.log("Build it with `cargo build -p herald-conformance`, or point HERALD_EVAL at an evaluator");
    console.log("(e.g. HERALD_EVAL='node fake-eval.mjs' to run the harness against mingo itself).");
    process.exit(1);
  }
  const ev = new Evaluator(EVAL_CMD);
  const stats = {
    query: { run: 0, agreed: 0, bothError: 0, explained: 0, unexplained: 0 },
    update: { run: 0, agreed: 0, bothError: 0, explained: 0, unexplained: 0 },
    pipeline: { run: 0, agreed: 0, bothError: 0, explained: 0, unexplained: 0 },
  };
  const byClassifier = new Map(KNOWN_DIVERGENCES.map((d) => [d.id, 0]));
  const combos = new Map();
  const examples = new Map();
  const failures = [];
  let fatal = null;

  const WINDOW = 64;
  const inflight = [];
  const process1 = async (c, hPromise) => {
    const m = mingoAnswer(c);
    const h = await hPromise;
    const s = stats[c.kind];
    s.run++;
    const v = judge(c, m, h);
    if (!v) {
      s.agreed++;
      if (m.error !== undefined) s.bothError++;
      return;
    }
    if (v.explainedBy) {
      s.explained++;
      for (const id of v.explainedBy) byClassifier.set(id, byClassifier.get(id) + 1);
      if (v.explainedBy.length > 1) {
        const k = v.explainedBy.join(" + ");
        combos.set(k, (combos.get(k) ?? 0) + 1);
      }
      if (SHOW_EXPLAINED) {
        const k = v.explainedBy.join(" + ");
        const list = examples.get(k) ?? [];
        if (list.length < SHOW_EXPLAINED) list.push(report(c, m, h));
        examples.set(k, list);
      }
      return;
    }
    s.unexplained++;
    failures.push({ c, m, h });
  };

  try {
    for (const name of names) {
      const c = makeCase(name);
      inflight.push(process1(c, ev.ask(c.line)));
      if (inflight.length >= WINDOW) await inflight.shift();
    }
    await Promise.all(inflight);
  } catch (e) {
    fatal = e.message;
  }

  // shrink and print up to MAX_SHOWN unexplained divergences
  const shown = [];
  if (!fatal) {
    failures.sort((x, y) => cmpStr(x.c.name[0], y.c.name[0]) || Number(x.c.name.slice(1)) - Number(y.c.name.slice(1)));
    // (pipeline cases are not shrunk: shrink() returns them as they are)
    for (const f of failures.slice(0, MAX_SHOWN)) {
      try {
        const small = await shrink(ev, f.c);
        const h = small === f.c ? f.h : await ev.ask(small.line);
        shown.push(report(small, mingoAnswer(small), h));
      } catch (e) {
        fatal = e.message;
        break;
      }
    }
  }
  ev.close();

  if (shown.length) {
    console.log(`\nUNEXPLAINED DIVERGENCES (${failures.length}; showing ${shown.length}, documents shrunk; one JSON per line):`);
    for (const s of shown) console.log(s);
  }
  if (SHOW_EXPLAINED && examples.size) {
    console.log(`\nEXAMPLES OF EXPLAINED DIVERGENCES:`);
    for (const [k, list] of examples) {
      console.log(`-- ${k}`);
      for (const s of list) console.log(s);
    }
  }

  // summary table
  const q = stats.query;
  const u = stats.update;
  const p = stats.pipeline;
  const row = (label, a, b, c) =>
    console.log(`${label.padEnd(44)}${String(a).padStart(8)}${String(b).padStart(8)}${String(c).padStart(10)}`);
  console.log("\nSUMMARY");
  row("", "query", "update", "pipeline");
  row("cases run", q.run, u.run, p.run);
  row("agreed", q.agreed, u.agreed, p.agreed);
  row("  of which both rejected the case", q.bothError, u.bothError, p.bothError);
  row("explained divergences", q.explained, u.explained, p.explained);
  for (const d of KNOWN_DIVERGENCES) {
    const n = byClassifier.get(d.id);
    const at = (k) => (d.kind === k ? n : "");
    if (n) row(`  ${d.id} [${d.side}]`, at("query"), at("update"), at("pipeline"));
  }
  if (combos.size) {
    console.log("  (cases needing several entries at once:)");
    for (const [k, n] of [...combos].sort((a, b) => b[1] - a[1])) console.log(`    ${n} × ${k}`);
  }
  row("unexplained divergences", q.unexplained, u.unexplained, p.unexplained);
  console.log(`time ${((Date.now() - started) / 1000).toFixed(1)} s`);

  if (fatal) {
    console.log(`\nFATAL: ${fatal}`);
    process.exit(1);
  }
  const bad = q.unexplained + u.unexplained + p.unexplained;
  const total = q.run + u.run + p.run;
  // a plain closing line that CI runners understand
  console.log(`\ndifferential: ${total - bad} passed, ${bad} failed`);
  process.exit(bad ? 1 : 0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
