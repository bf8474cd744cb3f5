// Random documents, queries and updates. Everything is drawn from a seeded Rng so that a case is
// reproducible from (seed, case index). Values may contain Dbl markers (integral doubles that
// JSON writes as "2.0"); the harness serialises with toJSONText.

import { Dbl, isPlainObject, plain } from "./values.mjs";
import { pathValues } from "./mongo-ref.mjs";
import { MISSING } from "./values.mjs";

const STRINGS = ["", "a", "ab", "abc", "abd", "b", "B", "ba", "x", "foo", "Foo", "foo bar", "fob", "line1\nline2", "é", "10", "2", "null"];
const INTS = [-3, -1, 0, 1, 2, 3, 5, 7, 10, 42];
const DOUBLES = [-2.5, 0.5, 1.5, 2.25, 3.75, 10.5];
const DBLS = [0, 1, 2, 5, -1];
const LONGS = [3000000000, -5000000000];
const NESTED_KEYS = ["a", "b", "c"];
const TOP_KEYS = ["a", "b", "c", "tags"];

export function genScalar(r) {
  return r.weighted([
    [30, () => r.pick(INTS)],
    [10, () => r.pick(DOUBLES)],
    [6, () => new Dbl(r.pick(DBLS))],
    [2, () => r.pick(LONGS)],
    [25, () => r.pick(STRINGS)],
    [8, () => r.chance(0.5)],
    [10, () => null],
  ])();
}

function genObject(r, depth) {
  const o = {};
  for (const k of r.shuffle(NESTED_KEYS)) if (r.chance(0.55)) o[k] = genValue(r, depth - 1);
  return o;
}

export function genValue(r, depth = 2) {
  const entries = [
    [55, () => genScalar(r)],
    [12, () => Array.from({ length: r.int(1, 4) }, () => genScalar(r))],
    [5, () => []],
  ];
  if (depth > 0) {
    entries.push(
      [14, () => genObject(r, depth)],
      [9, () => Array.from({ length: r.int(1, 3) }, () => (r.chance(0.85) ? genObject(r, depth) : genScalar(r)))],
      [4, () => Array.from({ length: r.int(1, 3) }, () => genValue(r, depth - 1))],
      [3, () => [Array.from({ length: r.int(0, 2) }, () => genScalar(r)), genScalar(r)]],
      [2, () => ({})],
    );
  }
  return r.weighted(entries)();
}

function genTags(r) {
  return r.weighted([
    [55, () => Array.from({ length: r.int(0, 4) }, () => (r.chance(0.7) ? r.pick(["x", "y", "z", "foo", "a", "b"]) : genScalar(r)))],
    [15, () => Array.from({ length: r.int(1, 3) }, () => genObject(r, 1))],
    [15, () => genValue(r, 1)],
    [15, () => undefined],
  ])();
}

export function genDocs(r) {
  const n = r.int(20, 60);
  const ids = r.shuffle(Array.from({ length: n }, (_, i) => "d" + String(i).padStart(2, "0")));
  return ids.map((id) => {
    const d = { _id: id };
    for (const k of r.shuffle(TOP_KEYS)) {
      if (k === "tags") {
        const t = genTags(r);
        if (t !== undefined) d.tags = t;
      } else if (r.chance(0.72)) d[k] = genValue(r, 2);
    }
    return d;
  });
}

// ---------------------------------------------------------------------------
// Queries

const FILTER_PATHS = [
  [10, "a"], [8, "b"], [6, "c"], [8, "tags"], [6, "a.b"], [4, "a.c"], [4, "b.a"], [3, "c.b"],
  [3, "a.b.c"], [2, "tags.a"], [3, "a.0"], [3, "tags.0"], [2, "tags.1"], [2, "a.0.b"], [1, "b.1.c"], [2, "_id"],
];
const SORT_PATHS = ["a", "b", "c", "tags", "a.b", "a.c", "b.c", "a.b.c", "_id"];
const PROJ_PATHS = ["a", "b", "c", "tags", "a.b", "a.c", "b.c", "b.a", "tags.a"];
const TYPES = ["double", "string", "object", "array", "bool", "null", "int", "long", "number", 1, 2, 3, 4, 8, 10, 16, 18];
const REGEXES = ["^a", "b$", "a.c", "^f", "o+", "^$", "^ab?c", "[ab]", "^F", "x", "bar$", "^line2", "1.line", "^a b", "é", "^[0-9]+$"];

/** A value to compare with: usually one that occurs at the path in some document. */
function operand(r, docs, path) {
  if (r.chance(0.6)) {
    const d = r.pick(docs);
    const vals = pathValues(plainOnce(d), path).filter((v) => v !== MISSING);
    if (vals.length) return structuredClone(r.pick(vals));
  }
  return genValue(r, 1);
}
// pathValues needs plain values (no Dbl); memoise per document object
const plainCache = new WeakMap();
function plainOnce(d) {
  let p = plainCache.get(d);
  if (!p) plainCache.set(d, (p = plain(d)));
  return p;
}

function scalarOperand(r, docs, path) {
  for (let i = 0; i < 4; i++) {
    const v = operand(r, docs, path);
    if (!Array.isArray(v) && !isPlainObject(v)) return v;
  }
  return genScalar(r);
}

function regexSpec(r) {
  const spec = { $regex: r.pick(REGEXES) };
  const opt = r.weighted([[55, ""], [15, "i"], [8, "m"], [7, "s"], [7, "x"], [5, "im"], [3, "g"]]);
  if (opt) spec.$options = opt;
  return spec;
}

function opCondition(r, docs, path, depth = 0) {
  return r.weighted([
    [5, () => ({ $eq: operand(r, docs, path) })],
    [6, () => ({ $ne: r.chance(0.3) ? null : operand(r, docs, path) })],
    [14, () => {
      const ops = r.shuffle(["$gt", "$gte", "$lt", "$lte"]).slice(0, r.int(1, 2));
      const o = {};
      for (const op of ops) o[op] = r.chance(0.9) ? (r.chance(0.1) ? null : scalarOperand(r, docs, path)) : operand(r, docs, path);
      return o;
    }],
    [8, () => ({ $in: Array.from({ length: r.int(1, 4) }, () => (r.chance(0.2) ? null : operand(r, docs, path))) })],
    [5, () => ({ $nin: Array.from({ length: r.int(1, 3) }, () => (r.chance(0.2) ? null : operand(r, docs, path))) })],
    [6, () => ({ $exists: r.chance(0.5) })],
    [6, () => ({ $type: r.chance(0.85) ? r.pick(TYPES) : [r.pick(TYPES), r.pick(TYPES)] })],
    [7, () => regexSpec(r)],
    [4, () => ({ $mod: [r.pick([2, 3, 5, -3]), r.pick([0, 1, -1, 2])] })],
    [5, () => ({
      $all: r.chance(0.15)
        ? [{ $elemMatch: elemMatchArg(r, docs, path, depth) }]
        : Array.from({ length: r.int(1, 3) }, () => operand(r, docs, path + (r.chance(0.5) ? "" : ".0"))),
    })],
    [7, () => ({ $elemMatch: elemMatchArg(r, docs, path, depth) })],
    [5, () => ({ $size: r.weighted([[20, 0], [30, 1], [25, 2], [15, 3], [5, 4]]) })],
    [5, () => {
      if (depth > 1) return { $exists: true };
      const inner = r.weighted([
        [4, () => ({ [r.pick(["$gt", "$gte", "$lt", "$lte"])]: scalarOperand(r, docs, path) })],
        [3, () => ({ $in: [operand(r, docs, path), r.chance(0.3) ? null : operand(r, docs, path)] })],
        [3, () => regexSpec(r)],
        [2, () => ({ $type: r.pick(TYPES) })],
        [2, () => ({ $size: r.int(0, 2) })],
        [2, () => ({ $elemMatch: elemMatchArg(r, docs, path, depth + 1) })],
        [1, () => ({ $eq: operand(r, docs, path) })],
      ])();
      return { $not: inner };
    }],
  ])();
}

function elemMatchArg(r, docs, path, depth) {
  const elemPath = path + ".0";
  if (r.chance(0.5)) {
    // value form
    return r.weighted([
      [4, () => {
        const lo = scalarOperand(r, docs, elemPath);
        return r.chance(0.5) ? { $gte: lo } : { $gt: lo, $lt: scalarOperand(r, docs, elemPath) };
      }],
      [2, () => ({ $eq: operand(r, docs, elemPath) })],
      [2, () => ({ $ne: r.chance(0.5) ? null : operand(r, docs, elemPath) })],
      [2, () => ({ $in: [operand(r, docs, elemPath), operand(r, docs, elemPath)] })],
      [2, () => regexSpec(r)],
      [1, () => ({ $type: r.pick(TYPES) })],
      [1, () => ({ $size: r.int(0, 2) })],
      [1, () => ({ $exists: true })],
      [1, () => ({ $not: { $gt: scalarOperand(r, docs, elemPath) } })],
    ])();
  }
  // object form
  const o = {};
  const k1 = r.pick(NESTED_KEYS);
  o[k1] = r.chance(0.5) ? operand(r, docs, path + "." + k1) : opCondition(r, docs, path + "." + k1, depth + 2);
  if (r.chance(0.35)) {
    const k2 = r.pick(NESTED_KEYS);
    if (k2 !== k1) o[k2] = r.chance(0.5) ? { $exists: r.chance(0.5) } : operand(r, docs, path + "." + k2);
  }
  if (r.chance(0.05)) return {};
  if (r.chance(0.1)) return { $or: [o, { [r.pick(NESTED_KEYS)]: operand(r, docs, path + ".b") }] };
  return o;
}

function fieldCondition(r, docs, path, depth) {
  if (r.chance(0.2)) return operand(r, docs, path); // plain equality (scalar, array or document)
  return opCondition(r, docs, path, depth);
}

export function genFilter(r, docs, depth = 0) {
  if (depth === 0 && r.chance(0.04)) return {};
  const f = {};
  const n = r.weighted([[50, 1], [35, 2], [15, 3]]);
  for (let i = 0; i < n; i++) {
    if (depth < 2 && r.chance(0.14)) {
      const op = r.pick(["$and", "$or", "$or", "$nor"]);
      if (f[op]) continue;
      f[op] = Array.from({ length: r.int(1, 3) }, () => genFilter(r, docs, depth + 1));
      if (f[op].some((x) => Object.keys(x).length === 0)) f[op] = f[op].filter((x) => Object.keys(x).length);
      if (!f[op].length) delete f[op];
    } else {
      const path = r.weighted(FILTER_PATHS);
      if (path in f) continue;
      f[path] = fieldCondition(r, docs, path, depth);
    }
  }
  if (depth > 0 && Object.keys(f).length === 0) f.a = { $exists: true };
  return f;
}

/** A few deliberately invalid queries (they must be rejected by both sides). */
function invalidQuery(r, docs) {
  return r.weighted([
    [1, () => ({ filter: { a: { $in: 5 } } })],
    [1, () => ({ filter: { a: { $size: -1 } } })],
    [1, () => ({ filter: { a: { $size: 1.5 } } })],
    [1, () => ({ filter: { a: { $mod: [0, 1] } } })],
    [1, () => ({ filter: { a: { $mod: [2] } } })],
    [1, () => ({ filter: { a: { $type: "foo" } } })],
    [1, () => ({ filter: { a: { $regex: "a", $options: "g" } } })],
    [1, () => ({ filter: { a: { $regex: "(" } } })],
    [1, () => ({ filter: { $and: [] } })],
    [1, () => ({ filter: { $or: {} } })],
    [1, () => ({ filter: { a: { $not: {} } } })],
    [1, () => ({ filter: { a: { $foo: 1 } } })],
    [1, () => ({ filter: { $where: "1" } })],
    [1, () => ({ filter: { a: { $elemMatch: 3 } } })],
    [1, () => ({ filter: { a: { $all: 3 } } })],
    [1, () => ({ filter: {}, sort: { a: 2 } })],
    [1, () => ({ filter: {}, skip: -1 })],
    [1, () => ({ filter: {}, limit: -2 })],
    [1, () => ({ filter: {}, projection: { a: 1, b: 0 } })],
    [1, () => ({ filter: { "a..b": 1 } })],
  ])();
}

export function genQuery(r, docs) {
  if (r.chance(0.025)) return invalidQuery(r, docs);
  const q = { filter: genFilter(r, docs) };
  if (r.chance(0.45)) {
    const sort = {};
    for (const p of r.shuffle(SORT_PATHS).slice(0, r.weighted([[65, 1], [35, 2]]))) sort[p] = r.pick([1, -1]);
    q.sort = sort;
  }
  if (r.chance(0.25)) q.skip = r.int(0, 10);
  if (r.chance(0.3)) q.limit = r.chance(0.05) ? 0 : r.int(1, 15);
  if (r.chance(0.15)) {
    const mode = r.weighted([[45, 1], [45, 0], [10, "id"]]);
    const proj = {};
    if (mode === "id") proj._id = 0;
    else {
      const chosen = [];
      for (const p of r.shuffle(PROJ_PATHS)) {
        if (chosen.length >= r.int(1, 3)) break;
        if (chosen.some((c) => c === p || p.startsWith(c + ".") || c.startsWith(p + "."))) continue;
        chosen.push(p);
      }
      for (const p of chosen) proj[p] = mode;
      if (r.chance(0.3)) proj._id = 0;
      else if (r.chance(0.1)) proj._id = 1;
    }
    q.projection = proj;
  }
  return q;
}

// ---------------------------------------------------------------------------
// Updates

const UPD_PATHS = ["a", "b", "c", "tags", "z", "a.b", "a.c", "b.c", "a.z", "tags.0", "tags.1", "tags.5", "a.0", "c.b.a", "b.0.c"];

function getPath(doc, path) {
  let cur = doc;
  for (const p of path.split(".")) {
    if (isPlainObject(cur) && p in cur) cur = cur[p];
    else if (Array.isArray(cur) && /^[0-9]+$/.test(p) && Number(p) < cur.length) cur = cur[Number(p)];
    else return MISSING;
  }
  return cur;
}
const isNum = (v) => typeof v === "number" || v instanceof Dbl;

const SUITS = {
  $inc: (v) => v === MISSING || isNum(v),
  $mul: (v) => v === MISSING || isNum(v),
  $push: (v) => v === MISSING || Array.isArray(v),
  $addToSet: (v) => v === MISSING || Array.isArray(v),
  $pop: (v) => Array.isArray(v),
  $pull: (v) => Array.isArray(v),
  $pullAll: (v) => Array.isArray(v),
  $rename: (v) => v !== MISSING,
  $unset: (v) => v !== MISSING,
};

function pickPath(r, doc, op, used) {
  const ok = (p) => !used.some((u) => u === p || p.startsWith(u + ".") || u.startsWith(p + "."));
  const suits = SUITS[op] ?? (() => true);
  for (let i = 0; i < 12; i++) {
    const p = r.pick(UPD_PATHS);
    if (ok(p) && suits(getPath(doc, p))) return p;
  }
  for (let i = 0; i < 12; i++) {
    const p = r.pick(UPD_PATHS);
    if (ok(p) || r.chance(0.05)) return p;
  }
  return null;
}

function arrayItem(r, doc, path) {
  const arr = getPath(doc, path);
  if (Array.isArray(arr) && arr.length && r.chance(0.7)) return structuredClone(r.pick(arr));
  return genValue(r, 1);
}

function opArg(r, doc, op, path) {
  switch (op) {
    case "$set":
      return genValue(r, 1);
    case "$unset":
      return "";
    case "$inc":
      return r.pick([1, -2, 5, 0.5, 2.5, new Dbl(1), 0]);
    case "$mul":
      return r.pick([2, -1, 0, 0.5, 3, new Dbl(2)]);
    case "$min":
    case "$max":
      return r.chance(0.85) ? genScalar(r) : genValue(r, 1);
    case "$push": {
      if (r.chance(0.5)) return r.chance(0.8) ? genScalar(r) : genValue(r, 1);
      const spec = { $each: Array.from({ length: r.int(0, 3) }, () => (r.chance(0.7) ? genScalar(r) : genValue(r, 1))) };
      if (r.chance(0.35)) spec.$slice = r.pick([0, 1, 2, 3, -1, -2, -5]);
      if (r.chance(0.35)) spec.$sort = r.chance(0.5) ? r.pick([1, -1]) : { [r.pick(NESTED_KEYS)]: r.pick([1, -1]) };
      if (r.chance(0.3)) spec.$position = r.pick([0, 1, 2, -1, -2, 10]);
      return spec;
    }
    case "$addToSet":
      if (r.chance(0.6)) return r.chance(0.5) ? arrayItem(r, doc, path) : genScalar(r);
      return { $each: Array.from({ length: r.int(1, 3) }, () => (r.chance(0.5) ? arrayItem(r, doc, path) : genScalar(r))) };
    case "$pop":
      return r.pick([1, -1]);
    case "$pull":
      return r.weighted([
        [45, () => arrayItem(r, doc, path)],
        [15, () => ({ $gte: genScalar(r) })],
        [10, () => ({ $in: [arrayItem(r, doc, path), genScalar(r)] })],
        [20, () => ({ [r.pick(NESTED_KEYS)]: genScalar(r) })],
        [5, () => ({ [r.pick(NESTED_KEYS)]: { $exists: true } })],
        [5, () => ({ $regex: r.pick(["^a", "o"]) })],
      ])();
    case "$pullAll":
      return Array.from({ length: r.int(1, 3) }, () => arrayItem(r, doc, path));
  }
  throw new Error(op);
}

const UPD_OPS = [
  [20, "$set"], [8, "$unset"], [10, "$inc"], [5, "$mul"], [6, "$min"], [6, "$max"], [6, "$rename"],
  [12, "$push"], [7, "$pull"], [4, "$pullAll"], [8, "$addToSet"], [5, "$pop"],
];

export function genUpdate(r, doc) {
  if (r.chance(0.02)) {
    return r.pick([
      { $inc: { a: "x" } },
      { $set: { "a.": 1 } },
      { $foo: { a: 1 } },
      { $set: { a: 1 }, b: 2 },
      { $pop: { tags: 2 } },
      { $push: { tags: { $each: 3 } } },
      { $set: { a: 1 }, $unset: { a: "" } },
      { $set: { a: 1, "a.b": 2 } },
      { $rename: { a: "a" } },
      { $set: { _id: "other" } },
    ]);
  }
  const update = {};
  const used = [];
  const nOps = r.weighted([[60, 1], [30, 2], [10, 3]]);
  const pdoc = plain(doc);
  for (let i = 0; i < nOps; i++) {
    const op = r.weighted(UPD_OPS);
    if (update[op]) continue;
    const arg = {};
    const nPaths = r.weighted([[75, 1], [25, 2]]);
    for (let j = 0; j < nPaths; j++) {
      const p = pickPath(r, pdoc, op, used);
      if (!p) continue;
      used.push(p);
      if (op === "$rename") {
        const target = r.pick(["y", "z", "q", "n.m"]);
        if (used.some((u) => u === target || target.startsWith(u + ".") || u.startsWith(target + "."))) continue;
        used.push(target);
        arg[p] = target;
      } else arg[p] = opArg(r, pdoc, op, p);
    }
    if (Object.keys(arg).length) update[op] = arg;
  }
  if (Object.keys(update).length === 0) update.$set = { z: 1 };
  return update;
}
