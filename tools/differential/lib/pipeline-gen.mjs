// Random collections and aggregation pipelines for the pipeline mode of run.mjs, from the subset
// Herald supports: $match $group (every accumulator) $sort $skip $limit $project $count $unwind.
//
// The generator keeps each pipeline's answer well defined where MongoDB's is: after a $group
// (whose output order MongoDB leaves unspecified) only order-insensitive stages follow until a
// $sort that ends with the unique _id; then any stage may follow. Numbers are small integers and
// doubles with exact binary fractions, so sums do not depend on the order of additions.

import { Dbl } from "./values.mjs";

const KEYS = [1, 2, "a", "b", null, true, new Dbl(1), new Dbl(2)];
const NUMS = [0, 1, 2, 3, 5, -1, 0.5, 1.5, 2.25, -2.5, new Dbl(2), 3000000000];
const TAGS = ["x", "y", "z", 1, 2.5, null, true];

function maybe(r, p, f) {
  return r.chance(p) ? f() : undefined;
}

/** A collection of 5–25 documents with string _ids d00.. (given in _id order). */
export function genPipelineDocs(r) {
  const n = r.int(5, 25);
  const docs = [];
  for (let i = 0; i < n; i++) {
    const d = { _id: "d" + String(i).padStart(2, "0") };
    const fields = {
      g: maybe(r, 0.85, () => r.pick(KEYS)),
      n: maybe(r, 0.8, () => r.weighted([[8, () => r.pick(NUMS)], [1, () => r.pick(["s", "", true])], [1, () => null]])()),
      arr: maybe(r, 0.75, () =>
        r.weighted([
          [6, () => Array.from({ length: r.int(1, 4) }, () => r.pick(TAGS))],
          [1, () => []],
          [1, () => null],
          [1, () => r.pick(TAGS)],
        ])(),
      ),
      o: maybe(r, 0.7, () => (r.chance(0.85) ? { x: r.pick(KEYS), y: r.pick(NUMS) } : {})),
    };
    for (const k of r.shuffle(Object.keys(fields))) if (fields[k] !== undefined) d[k] = fields[k];
    docs.push(d);
  }
  return docs;
}

const SCALAR_PATHS = ["$g", "$n", "$o.x", "$o.y"];
const ACC_OPS = ["$sum", "$avg", "$min", "$max", "$first", "$last", "$push", "$addToSet", "$count"];

function accumulator(r) {
  const op = r.pick(ACC_OPS);
  if (op === "$count") return { $count: {} };
  const expr = r.weighted([
    [6, () => r.pick(SCALAR_PATHS)],
    [1, () => r.pick([1, 2])],
    [1, () => "$missing"],
    [1, () => ({ k: r.pick(SCALAR_PATHS), c: 1 })],
  ])();
  return { [op]: expr };
}

function groupId(r) {
  return r.weighted([
    [5, () => "$g"],
    [2, () => "$o.x"],
    [2, () => null],
    [1, () => "all"],
    [2, () => ({ a: "$g", b: "$o.x" })],
  ])();
}

/** A pipeline of 1–4 stages over documents shaped as genPipelineDocs makes them. */
export function genPipeline(r) {
  const stages = [];
  // The shape of the current documents: "docs" (input-like), "groups" (after $group, with these
  // accumulator fields), "counted" (after $count).
  let shape = "docs";
  let groupFields = [];
  let ordered = true; // is the current order well defined?
  const n = r.int(1, 4);
  for (let i = 0; i < n && shape !== "counted"; i++) {
    const choices = [];
    if (shape === "docs") {
      choices.push(
        [3, () => ({ $match: r.pick([{ g: r.pick(KEYS) }, { n: { $gte: r.pick([0, 1, 2]) } }, { "o.x": { $ne: null } }, { arr: r.pick(TAGS) }]) })],
        [4, () => {
          const spec = { _id: groupId(r) };
          const k = r.int(1, 3);
          groupFields = [];
          for (let j = 0; j < k; j++) {
            spec["f" + j] = accumulator(r);
            groupFields.push("f" + j);
          }
          shape = "groups";
          ordered = false;
          return { $group: spec };
        }],
        [2, () => ({ $sort: r.chance(0.5) ? { [r.pick(["g", "n", "o.x"])]: r.pick([1, -1]) } : { n: r.pick([1, -1]), g: r.pick([1, -1]) } })],
        [2, () =>
          r.chance(0.5)
            ? { $unwind: "$arr" }
            : { $unwind: { path: "$arr", ...(r.chance(0.6) ? { includeArrayIndex: "i" } : {}), ...(r.chance(0.6) ? { preserveNullAndEmptyArrays: r.chance(0.7) } : {}) } }],
        [1, () => ({ $project: r.pick([{ g: 1, n: 1 }, { arr: 0, o: 0 }, { _id: 0, k: "$g", v: "$o.y" }, { g: 1, x: "$o.x" }, { "o.x": 1 }]) })],
      );
      if (ordered) {
        choices.push([1, () => ({ $skip: r.int(0, 6) })], [1, () => ({ $limit: r.int(1, 12) })]);
      }
      choices.push([1, () => {
        shape = "counted";
        return { $count: "c" };
      }]);
    } else {
      // groups: _id plus groupFields
      choices.push(
        [4, () => {
          ordered = true;
          const f = r.pick(["_id", ...groupFields]);
          return { $sort: f === "_id" ? { _id: r.pick([1, -1]) } : { [f]: r.pick([1, -1]), _id: 1 } };
        }],
        [1, () => ({ $match: { [r.pick(groupFields)]: { $ne: null } } })],
        [1, () => ({ $project: { [r.pick(groupFields)]: 1 } })],
        [1, () => {
          shape = "counted";
          return { $count: "c" };
        }],
      );
      if (ordered) choices.push([1, () => ({ $skip: r.int(0, 3) })], [1, () => ({ $limit: r.int(1, 4) })]);
    }
    stages.push(r.weighted(choices)());
  }
  return { pipeline: stages, ordered: ordered || shape === "counted" };
}
