#!/usr/bin/env node
// Cross-checks the pipeline vectors of testdata/conformance (cases with "pipeline") against
// mingo's aggregation: prints each case where mingo answers differently from the vector's
// expectation (documents compared by value, key order ignored; errors agree when both refuse).
// Informational: the vectors carry MongoDB's answers, and mingo differs from MongoDB in places
// (known-divergences.md lists them). Exit 0 always, unless a vector file cannot be read.

import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { mingoPipeline } from "./lib/mingo-pipeline.mjs";
import { deepEqual } from "./lib/values.mjs";

const DIR = join(dirname(fileURLToPath(import.meta.url)), "../../testdata/conformance");
let total = 0;
let differ = 0;
for (const file of readdirSync(DIR).filter((f) => f.endsWith(".json")).sort()) {
  const { cases } = JSON.parse(readFileSync(join(DIR, file), "utf8"));
  for (const c of cases) {
    if (c.pipeline === undefined) continue;
    total++;
    const got = mingoPipeline(c.docs, c.pipeline);
    const ok = c.error !== undefined ? got.error !== undefined : got.error === undefined && deepEqual(got.docs, c.expectDocs);
    if (!ok) {
      differ++;
      console.log(`${file} / ${c.name}:\n  vector ${JSON.stringify(c.error ?? c.expectDocs)}\n  mingo  ${JSON.stringify(got.error ? got.message : got.docs)}`);
    }
  }
}
console.log(`pipeline vectors: ${total}, mingo differs on ${differ}`);
