// JSON value helpers: the integral-double marker, JSON text serialisation that keeps it,
// MongoDB's BSON order over JSON values, and result comparison.

/**
 * A double whose value is integral (e.g. 2.0). JSON keeps the distinction ("2.0" vs "2"),
 * JavaScript does not, so the generator wraps such values and `toJSONText` writes them
 * with a ".0". Herald sees a double; mingo (which parses the same text) sees the number 2.
 */
export class Dbl {
  constructor(v) {
    this.v = v;
  }
}

export const isPlainObject = (v) =>
  v !== null && typeof v === "object" && !Array.isArray(v) && !(v instanceof Dbl);

/** Serialise a generated value to JSON text, writing Dbl markers as "<n>.0". */
export function toJSONText(v) {
  if (v instanceof Dbl) {
    return Number.isInteger(v.v) ? `${v.v}.0` : JSON.stringify(v.v);
  }
  if (Array.isArray(v)) return "[" + v.map(toJSONText).join(",") + "]";
  if (isPlainObject(v)) {
    return (
      "{" +
      Object.keys(v)
        .map((k) => JSON.stringify(k) + ":" + toJSONText(v[k]))
        .join(",") +
      "}"
    );
  }
  return JSON.stringify(v);
}

/** Replace Dbl markers by plain numbers (what any JSON.parse of the text yields). */
export function plain(v) {
  if (v instanceof Dbl) return v.v;
  if (Array.isArray(v)) return v.map(plain);
  if (isPlainObject(v)) {
    const o = {};
    for (const k of Object.keys(v)) o[k] = plain(v[k]);
    return o;
  }
  return v;
}

/** Does the value contain a Dbl marker anywhere? */
export function hasDbl(v) {
  if (v instanceof Dbl) return true;
  if (Array.isArray(v)) return v.some(hasDbl);
  if (isPlainObject(v)) return Object.values(v).some(hasDbl);
  return false;
}

export const clone = (v) => (v === undefined ? undefined : JSON.parse(JSON.stringify(v)));

// ---------------------------------------------------------------------------
// MongoDB's order (BSONElement::woCompare / canonicalizeBSONType) restricted to JSON values.

export const MISSING = Symbol("missing");
/** sort key of an empty array (sorts below null) */
export const EMPTY_ARRAY_KEY = Symbol("emptyArrayKey");

export function canonType(v) {
  if (v === MISSING || v === undefined) return 0;
  if (v === EMPTY_ARRAY_KEY) return 1;
  if (v === null) return 5;
  switch (typeof v) {
    case "number":
      return 10;
    case "string":
      return 15;
    case "boolean":
      return 40;
  }
  if (Array.isArray(v)) return 25;
  return 20;
}

/** Byte-wise UTF-8 order == code point order. */
export function cmpStr(a, b) {
  if (a === b) return 0;
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; ) {
    const ca = a.codePointAt(i);
    const cb = b.codePointAt(i);
    if (ca !== cb) return ca < cb ? -1 : 1;
    i += ca > 0xffff ? 2 : 1;
  }
  return a.length < b.length ? -1 : a.length > b.length ? 1 : 0;
}

const sign = (x) => (x < 0 ? -1 : x > 0 ? 1 : 0);

function cmpEntries(ea, eb) {
  const n = Math.min(ea.length, eb.length);
  for (let i = 0; i < n; i++) {
    const [ka, va] = ea[i];
    const [kb, vb] = eb[i];
    let c = sign(canonType(va) - canonType(vb));
    if (c) return c;
    c = cmpStr(ka, kb);
    if (c) return c;
    c = bsonCmp(va, vb);
    if (c) return c;
  }
  return sign(ea.length - eb.length);
}

/** Total order of MongoDB over JSON values: type bracket first, then value. */
export function bsonCmp(a, b) {
  const ta = canonType(a);
  const tb = canonType(b);
  if (ta !== tb) return ta < tb ? -1 : 1;
  switch (ta) {
    case 0:
    case 1:
    case 5:
      return 0;
    case 10:
      return a < b ? -1 : a > b ? 1 : 0;
    case 15:
      return cmpStr(a, b);
    case 40:
      return a === b ? 0 : a ? 1 : -1;
    case 25:
      return cmpEntries(
        a.map((v, i) => [String(i), v]),
        b.map((v, i) => [String(i), v]),
      );
    default:
      return cmpEntries(Object.entries(a), Object.entries(b));
  }
}

export const bsonEq = (a, b) => bsonCmp(a, b) === 0;

// ---------------------------------------------------------------------------
// Result comparison (used to compare mingo's and Herald's answers).

/** Deep equality; object key order is ignored unless `ordered`. Numbers compare by value. */
export function deepEqual(a, b, ordered = false) {
  if (a === b) return true;
  if (typeof a !== typeof b) return false;
  if (a === null || b === null || typeof a !== "object") return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    if (a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!deepEqual(a[i], b[i], ordered)) return false;
    return true;
  }
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  if (ordered) {
    for (let i = 0; i < ka.length; i++) {
      if (ka[i] !== kb[i] || !deepEqual(a[ka[i]], b[kb[i]], ordered)) return false;
    }
    return true;
  }
  for (const k of ka) {
    if (!Object.prototype.hasOwnProperty.call(b, k)) return false;
    if (!deepEqual(a[k], b[k], ordered)) return false;
  }
  return true;
}

/** Compare two evaluator answers ({ids, docs} | {doc} | {error}). Both errors agree. */
export function sameAnswer(kind, x, y) {
  if (!x || !y) return false;
  const ex = x.error !== undefined;
  const ey = y.error !== undefined;
  if (ex || ey) return ex && ey;
  if (kind === "pipeline") return Array.isArray(x.docs) && Array.isArray(y.docs) && deepEqual(x.docs, y.docs);
  if (kind === "query") {
    if (!Array.isArray(x.ids) || !Array.isArray(y.ids)) return false;
    if (!deepEqual(x.ids, y.ids, true)) return false;
    if (!deepEqual(x.docs, y.docs)) return false; // key order of documents is not compared
    return true;
  }
  return deepEqual(x.doc, y.doc);
}
