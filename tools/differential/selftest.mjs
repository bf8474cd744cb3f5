// Self-test of the MongoDB model (lib/mongo-ref.mjs) that judges divergences. Expected answers
// are MongoDB's, taken from jstests/core/query/null_query_semantics.js (8.0 semantics, documents
// with `undefined` dropped since JSON has none) and from MongoDB's documented behaviour.
// Also prints where mingo as shipped differs, which is what the classifiers explain.
//
// Run: node selftest.mjs   (exit 1 on a failed expectation)

import { refQuery, refUpdate } from "./lib/mongo-ref.mjs";
import { mingoQuery, mingoUpdateCase } from "./lib/mingo-runner.mjs";
import { deepEqual } from "./lib/values.mjs";

const NULL_DOCS = [
  { _id: "a_empty_subobject", a: {} },
  { _id: "a_null", a: null },
  { _id: "a_number", a: 4 },
  { _id: "a_subobject_b_not_null", a: { b: "hi" } },
  { _id: "a_subobject_b_null", a: { b: null } },
  { _id: "no_a" },
  { _id: "a_double_array", a: [[]] },
  { _id: "a_empty_array", a: [] },
  { _id: "a_object_array_no_b_nulls", a: [{ b: 1 }, { b: 3 }, { b: "string" }] },
  { _id: "a_object_array_some_b_nulls", a: [{ b: null }, { b: 3 }, { b: null }] },
  { _id: "a_object_array_some_b_missing", a: [{ b: 3 }, {}] },
  { _id: "a_value_array_all_nulls", a: [null, null] },
  { _id: "a_value_array_no_nulls", a: [1, "string", 4] },
  { _id: "a_value_array_with_null", a: [1, "string", null, 4] },
];
const ALL = NULL_DOCS.map((d) => d._id);
const except = (...ids) => ALL.filter((x) => !ids.includes(x));
const EQ_NULL = ["a_null", "a_value_array_all_nulls", "a_value_array_with_null", "no_a"];
const DOTTED_NULL = [
  "a_empty_subobject", "a_null", "a_number", "a_subobject_b_null", "no_a",
  "a_object_array_some_b_nulls", "a_object_array_some_b_missing",
];

const QUERY_CASES = [
  // null_query_semantics.js
  { docs: NULL_DOCS, query: { filter: { a: { $eq: null } } }, expect: EQ_NULL },
  { docs: NULL_DOCS, query: { filter: { a: { $ne: null } } }, expect: except(...EQ_NULL) },
  { docs: NULL_DOCS, query: { filter: { a: { $in: [null, 75] } } }, expect: EQ_NULL },
  { docs: NULL_DOCS, query: { filter: { a: { $not: { $gte: null } } } }, expect: except(...EQ_NULL) },
  { docs: NULL_DOCS, query: { filter: { "a.b": { $eq: null } } }, expect: DOTTED_NULL },
  { docs: NULL_DOCS, query: { filter: { "a.b": { $ne: null } } }, expect: except(...DOTTED_NULL) },
  { docs: NULL_DOCS, query: { filter: { "a.b": { $in: [null, 75] } } }, expect: DOTTED_NULL },
  {
    docs: NULL_DOCS,
    query: { filter: { a: { $nin: [null, []] } } },
    expect: except("a_null", "no_a", "a_double_array", "a_empty_array", "a_value_array_all_nulls", "a_value_array_with_null"),
  },
  { docs: NULL_DOCS, query: { filter: { a: { $elemMatch: { $eq: null } } } }, expect: ["a_value_array_all_nulls", "a_value_array_with_null"] },
  {
    docs: NULL_DOCS,
    query: { filter: { a: { $elemMatch: { $ne: null } } } },
    expect: ["a_double_array", "a_object_array_no_b_nulls", "a_object_array_some_b_nulls", "a_object_array_some_b_missing", "a_value_array_no_nulls", "a_value_array_with_null"],
  },
  {
    docs: NULL_DOCS,
    query: { filter: { a: { $elemMatch: { b: { $eq: null } } } } },
    expect: ["a_double_array", "a_object_array_some_b_nulls", "a_object_array_some_b_missing"],
  },
  {
    docs: NULL_DOCS,
    query: { filter: { a: { $elemMatch: { b: { $ne: null } } } } },
    expect: ["a_object_array_no_b_nulls", "a_object_array_some_b_nulls", "a_object_array_some_b_missing"],
  },
  { docs: NULL_DOCS.slice(0, 6), query: { filter: { "a.b": { $exists: false } } }, expect: ["a_empty_subobject", "a_null", "a_number", "no_a"] },
  {
    docs: NULL_DOCS,
    query: { filter: { "a.b": { $eq: null } }, projection: { _id: 0, "a.b": 1 } },
    expectDocs: [{ a: {} }, {}, {}, { a: { b: null } }, {}, { a: [{ b: null }, { b: 3 }, { b: null }] }, { a: [{ b: 3 }, {}] }],
  },
  {
    docs: NULL_DOCS,
    query: { filter: { "a.b": { $ne: null } }, projection: { _id: 0, "a.b": 1 } },
    expectDocs: [{ a: { b: "hi" } }, { a: [[]] }, { a: [] }, { a: [{ b: 1 }, { b: 3 }, { b: "string" }] }, { a: [] }, { a: [] }, { a: [] }],
  },
  // documented behaviour
  { docs: [{ _id: "s", a: 1 }, { _id: "t", a: [1, 2] }, { _id: "u", a: [[1]] }], query: { filter: { a: { $all: [1] } } }, expect: ["s", "t"] },
  { docs: [{ _id: "s", a: 1 }, { _id: "u", a: [[1]] }, { _id: "v", a: [[1], 2] }], query: { filter: { a: 1 } }, expect: ["s"] },
  { docs: [{ _id: "u", a: [[1]] }, { _id: "v", a: [1] }], query: { filter: { a: [1] } }, expect: ["u", "v"] },
  { docs: [{ _id: "p", a: 5.5 }, { _id: "q", a: -5 }, { _id: "r", a: null }], query: { filter: { a: { $mod: [2, 1] } } }, expect: ["p"] },
  { docs: [{ _id: "p", a: [{ b: 1 }] }, { _id: "q", a: [{ b: 2 }, { b: 1 }] }], query: { filter: { "a.0.b": 1 } }, expect: ["p"] },
  { docs: [{ _id: "p", a: { x: 1, y: 2 } }, { _id: "q", a: { y: 2, x: 1 } }], query: { filter: { a: { x: 1, y: 2 } } }, expect: ["p"] },
  { docs: [{ _id: "p", a: [1, "x"] }, { _id: "q", a: 2 }, { _id: "r", a: "y" }], query: { filter: { a: { $type: "string" } } }, expect: ["p", "r"] },
  { docs: [{ _id: "p", a: [[1, 2]] }, { _id: "q", a: [1, 2] }], query: { filter: { a: { $size: 2 } } }, expect: ["q"] },
  {
    docs: [{ _id: "e", a: [] }, { _id: "n", a: null }, { _id: "m" }, { _id: "r", a: [0, 5] }, { _id: "o", a: 1 }],
    query: { filter: {}, sort: { a: 1 } },
    expect: ["e", "m", "n", "r", "o"],
  },
  {
    docs: [{ _id: "e", a: [] }, { _id: "n", a: null }, { _id: "m" }, { _id: "r", a: [0, 5] }, { _id: "o", a: 1 }],
    query: { filter: {}, sort: { a: -1 } },
    expect: ["r", "o", "m", "n", "e"],
  },
];

// jstests/core/query/sort/sort_dotted_paths.js (ids are "1".."9"; documents with undefined dropped)
const S = (docs) => docs.map((d) => ({ ...d, _id: String(d._id) }));
const SORT_SETS = [
  {
    docs: S([{ _id: 1, a: 1 }, { _id: 3, a: null }, { _id: 4, a: {} }, { _id: 5, a: [] }, { _id: 6, a: [1] }, { _id: 7, a: [[1]] }, { _id: 8 }]),
    tests: [[{ a: 1, _id: 1 }, [5, 3, 8, 1, 6, 4, 7]], [{ a: -1, _id: 1 }, [7, 4, 1, 6, 3, 8, 5]]],
  },
  {
    docs: S([{ _id: 1, a: 1, b: [2] }, { _id: 2, a: 2, b: [] }, { _id: 3, a: [], b: 4 }, { _id: 4, a: [1], b: 4 }, { _id: 5, a: [2, 3], b: 2 },
      { _id: 6, a: 2, b: [3, 5] }, { _id: 7, a: 1, b: [1, 3] }, { _id: 8, a: [1, 2], b: 3 }, { _id: 9, a: 2, b: 3 }]),
    tests: [
      [{ a: 1, b: 1, _id: 1 }, [3, 7, 1, 8, 4, 2, 5, 6, 9]],
      [{ a: 1, b: -1, _id: 1 }, [3, 4, 7, 8, 1, 6, 9, 5, 2]],
      [{ a: -1, b: 1, _id: 1 }, [5, 2, 6, 8, 9, 7, 1, 4, 3]],
      [{ a: -1, b: -1, _id: 1 }, [5, 6, 8, 9, 2, 4, 7, 1, 3]],
    ],
  },
  {
    docs: S([{ _id: 1, a: { b: 2 } }, { _id: 2, a: { b: [] } }, { _id: 3, a: { b: [2, 3] } }, { _id: 4, a: { c: 1 } }, { _id: 5, a: [] },
      { _id: 6, a: [{ b: [5] }] }, { _id: 7, a: [{ b: [4, 5] }, { b: 7 }] }, { _id: 8, a: [{ b: [1, 3] }, { b: [2, 5] }] }, { _id: 9, a: [{ b: [] }, { b: [1, 3] }] }]),
    tests: [
      [{ "a.b": 1, _id: 1 }, [2, 9, 4, 5, 8, 1, 3, 7, 6]],
      [{ "a.b": 1, _id: -1 }, [9, 2, 5, 4, 8, 3, 1, 7, 6]],
      [{ "a.b": -1, _id: 1 }, [7, 6, 8, 3, 9, 1, 4, 5, 2]],
      [{ "a.b": -1, _id: -1 }, [7, 8, 6, 9, 3, 1, 5, 4, 2]],
    ],
  },
  {
    docs: S([{ _id: 1, a: [{ b: 4, c: 1 }, { b: 1, c: 2 }] }, { _id: 2, a: [{ b: 2, c: 1 }, { b: 4, c: 2 }] }, { _id: 3, a: [{ b: 6, c: 1 }, { b: 9, c: 2 }] },
      { _id: 4, a: [{ b: 4, c: 1 }, { b: 5, c: 3 }] }, { _id: 5, a: [{ b: 2, c: 1 }, { b: 7, c: 3 }] }, { _id: 6, a: [{ b: 5, c: 1 }, { b: 3, c: 3 }] },
      { _id: 7, a: [{ b: 7, c: 2 }, { b: 2, c: 3 }] }, { _id: 8, a: [{ b: 3, c: 2 }, { b: 8, c: 3 }] }, { _id: 9, a: [{ b: 8, c: 2 }, { b: 6, c: 3 }] }]),
    tests: [
      [{ "a.c": 1, "a.b": 1, _id: 1 }, [2, 5, 1, 4, 6, 3, 8, 7, 9]],
      [{ "a.c": 1, "a.b": -1, _id: 1 }, [3, 6, 1, 4, 2, 5, 9, 7, 8]],
      [{ "a.c": -1, "a.b": 1, _id: 1 }, [7, 6, 4, 9, 5, 8, 1, 2, 3]],
      [{ "a.c": -1, "a.b": -1, _id: 1 }, [8, 5, 9, 4, 6, 7, 3, 2, 1]],
      [{ "a.c": 1, a: 1, _id: 1 }, [2, 5, 1, 4, 6, 3, 8, 7, 9]],
      [{ "a.c": 1, a: -1, _id: 1 }, [3, 6, 1, 4, 2, 5, 9, 7, 8]],
      [{ "a.c": -1, a: 1, _id: 1 }, [7, 6, 4, 9, 5, 8, 1, 2, 3]],
      [{ "a.c": -1, a: -1, _id: 1 }, [8, 5, 9, 4, 6, 7, 3, 2, 1]],
    ],
  },
  {
    docs: S([{ _id: 1, a: [{ b: [4, 1], c: 1 }, { b: [1, 5], c: 2 }] }, { _id: 2, a: [{ b: 2, c: [1, 3] }, { b: 4, c: [2, 4] }] },
      { _id: 3, a: [{ b: [6, 4], c: 1 }, { b: [9, 7], c: 2 }] }, { _id: 4, a: [{ b: 4, c: [1, 2] }, { b: 5, c: [3, 2] }] },
      { _id: 5, a: [{ b: [2, 3], c: 1 }, { b: [7, 6], c: 3 }] }, { _id: 6, a: [{ b: 5, c: [] }, { b: 3, c: 3 }] },
      { _id: 7, a: [{ b: [], c: 2 }, { b: 2, c: 3 }] }, { _id: 8, a: [{ b: 3, c: [2] }, { b: 8, c: [3] }] }, { _id: 9, a: [{ b: [8], c: 2 }, { b: [6], c: 3 }] }]),
    tests: [
      [{ "a.c": 1, "a.b": 1, _id: 1 }, [6, 1, 2, 5, 3, 4, 7, 8, 9]],
      [{ "a.c": 1, "a.b": -1, _id: 1 }, [6, 3, 1, 4, 5, 2, 9, 8, 7]],
      [{ "a.c": -1, "a.b": 1, _id: 1 }, [2, 7, 6, 4, 5, 9, 8, 1, 3]],
      [{ "a.c": -1, "a.b": -1, _id: 1 }, [2, 8, 5, 9, 4, 6, 7, 3, 1]],
      [{ "a.b": 1, a: 1, _id: 1 }, [7, 1, 2, 5, 6, 8, 4, 3, 9]],
      [{ "a.b": 1, a: -1, _id: 1 }, [7, 1, 5, 2, 8, 6, 3, 4, 9]],
      [{ "a.b": -1, a: 1, _id: 1 }, [3, 8, 9, 5, 6, 4, 1, 2, 7]],
      [{ "a.b": -1, a: -1, _id: 1 }, [3, 9, 8, 5, 1, 4, 6, 2, 7]],
    ],
  },
  {
    docs: S([{ _id: 1, a: { b: 1 }, c: [{ d: [4, 1] }, { d: [1, 5] }] }, { _id: 2, a: [{ b: [1, 3] }, { b: [2, 4] }], c: { d: 2 } },
      { _id: 3, a: { b: 1 }, c: [{ d: [6, 4] }, { d: [9, 7] }] }, { _id: 4, a: [{ b: [2] }, { b: [3, 2] }], c: { d: 4 } },
      { _id: 5, a: { b: 1 }, c: [{ d: [2, 3] }, { d: [7, 6] }] }, { _id: 6, a: [{ b: [] }, { b: 3 }], c: { d: 4 } },
      { _id: 7, a: { b: 2 }, c: [{ d: [] }, { d: 2 }] }, { _id: 8, a: [{ b: [2] }, { b: [3] }], c: { d: 3 } }, { _id: 9, a: { b: 3 }, c: [{ d: [8] }, { d: [6] }] }]),
    tests: [
      [{ "a.b": 1, "c.d": 1, _id: 1 }, [6, 1, 2, 5, 3, 7, 8, 4, 9]],
      [{ "a.b": 1, "c.d": -1, _id: 1 }, [6, 3, 5, 1, 2, 4, 8, 7, 9]],
      [{ "a.b": -1, "c.d": 1, _id: 1 }, [2, 8, 4, 6, 9, 7, 1, 5, 3]],
      [{ "a.b": -1, "c.d": -1, _id: 1 }, [2, 9, 4, 6, 8, 7, 3, 5, 1]],
    ],
  },
  {
    docs: S([{ _id: 1, a: { b: { c: 2 } } }, { _id: 2, a: { b: { c: [] } } }, { _id: 3, a: [{ b: [] }, { b: { c: [] } }] }, { _id: 4, a: [{ b: { c: 1 } }] },
      { _id: 5, a: { b: [{ c: 3 }, { d: 1 }] } }, { _id: 6, a: { b: [{ c: [5] }] } }, { _id: 7, a: [] }, { _id: 8, a: { b: [{ c: [1, 3] }, { c: [2, 5] }] } },
      { _id: 9, a: [{ b: [{ c: [] }, { c: [1, 3] }] }] }]),
    tests: [
      [{ "a.b.c": 1, _id: 1 }, [2, 3, 9, 5, 7, 4, 8, 1, 6]],
      [{ "a.b.c": 1, _id: -1 }, [9, 3, 2, 7, 5, 8, 4, 1, 6]],
      [{ "a.b.c": -1, _id: 1 }, [6, 8, 5, 9, 1, 4, 3, 7, 2]],
      [{ "a.b.c": -1, _id: -1 }, [8, 6, 9, 5, 1, 4, 7, 3, 2]],
    ],
  },
];
for (const set of SORT_SETS)
  for (const [sort, ids] of set.tests) QUERY_CASES.push({ docs: set.docs, query: { filter: {}, sort }, expect: ids.map(String) });
// sort_dotted_paths_parallel_arrays.js
QUERY_CASES.push({ docs: [{ _id: "p", a: [1], b: [2] }], query: { filter: {}, sort: { a: 1, b: 1 } }, error: true });

const UPDATE_CASES = [
  { doc: { _id: "x", a: [1, 2, 1] }, update: { $addToSet: { a: 3 } }, expect: { _id: "x", a: [1, 2, 1, 3] } },
  { doc: { _id: "x", a: "s" }, update: { $inc: { a: 1 } }, error: true },
  { doc: { _id: "x", a: null }, update: { $set: { "a.b": 1 } }, error: true },
  { doc: { _id: "x", a: [1] }, update: { $set: { "a.3": 2 } }, expect: { _id: "x", a: [1, null, null, 2] } },
  { doc: { _id: "x", a: [5, [5, 6]] }, update: { $pull: { a: 5 } }, expect: { _id: "x", a: [[5, 6]] } },
  { doc: { _id: "x", a: [{ b: 1, c: 2 }, { b: 2 }] }, update: { $pull: { a: { b: 1 } } }, expect: { _id: "x", a: [{ b: 2 }] } },
  { doc: { _id: "x" }, update: { $mul: { a: 3 } }, expect: { _id: "x", a: 0 } },
  { doc: { _id: "x", a: [3, 1, 2] }, update: { $push: { a: { $each: [0], $sort: 1, $slice: 2 } } }, expect: { _id: "x", a: [0, 1] } },
];

let failures = 0;
let mingoDiffers = 0;
for (const c of QUERY_CASES) {
  const ref = refQuery(c.docs, c.query);
  const want = c.expect ?? null;
  let ok;
  const bag = (docs) => (docs ?? []).map((d) => JSON.stringify(d)).sort(); // resultsEq is unordered
  if (c.error) {
    ok = ref.error !== undefined;
  } else if (c.expectDocs) {
    ok = deepEqual(bag(ref.docs), bag(c.expectDocs), true);
  } else {
    const got = c.query.sort ? ref.ids : [...ref.ids].sort();
    ok = deepEqual(got, c.query.sort ? want : [...want].sort(), true);
  }
  const m = mingoQuery({ docsText: JSON.stringify(c.docs), queryText: JSON.stringify(c.query) });
  const mingoSame = c.error ? m.error !== undefined : c.expectDocs ? deepEqual(bag(m.docs), bag(c.expectDocs), true) : deepEqual(c.query.sort ? m.ids : [...(m.ids ?? [])].sort(), c.query.sort ? want : [...want].sort(), true);
  if (!mingoSame) mingoDiffers++;
  if (!ok) {
    failures++;
    console.log("REF FAIL", JSON.stringify(c.query), "\n  got ", JSON.stringify(c.expectDocs ? ref.docs : ref.ids), "\n  want", JSON.stringify(c.expectDocs ?? want));
  }
  if (!mingoSame && process.env.VERBOSE) console.log("mingo differs", JSON.stringify(c.query), JSON.stringify(m.ids ?? m));
}
for (const c of UPDATE_CASES) {
  const ref = refUpdate(c.doc, c.update);
  const ok = c.error ? ref.error !== undefined : deepEqual(ref.doc, c.expect);
  const m = mingoUpdateCase({ docText: JSON.stringify(c.doc), updateText: JSON.stringify(c.update) });
  const mingoSame = c.error ? m.error !== undefined : deepEqual(m.doc, c.expect);
  if (!mingoSame) mingoDiffers++;
  if (!ok) {
    failures++;
    console.log("REF FAIL", JSON.stringify(c.doc), JSON.stringify(c.update), "\n  got ", JSON.stringify(ref), "\n  want", JSON.stringify(c.expect ?? "error"));
  }
  if (!mingoSame && process.env.VERBOSE) console.log("mingo differs", JSON.stringify(c.update), JSON.stringify(m));
}
const total = QUERY_CASES.length + UPDATE_CASES.length;
console.log(`selftest: MongoDB model ${total - failures}/${total} expectations met; mingo as shipped differs on ${mingoDiffers}`);
console.log(`${total - failures} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
