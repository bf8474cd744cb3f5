// Values and MongoDB's total order across them (the TypeScript twin of crates/value).
//
// A value is what JSON holds. Numbers come in three shapes: a JS `number` (an integer when it is
// integral, otherwise a double), a `bigint` (an integer beyond 2^53, from the lossless parser in
// json.ts) and a `Double` (a double whose value is integral, such as `1.0`, which JSON.parse would
// turn into the integer 1). Plain `JSON.parse` output is a valid value; it only loses the
// int-versus-double distinction that `$type` and update arithmetic can observe.

/** A double that happens to be integral (`1.0`), kept apart from the integer `1`. */
export class Double {
  constructor(readonly value: number) {}
  toJSON(): number {
    return this.value;
  }
}

export type Value =
  | null
  | boolean
  | number
  | bigint
  | Double
  | string
  | Value[]
  | { [key: string]: Value };

export type Doc = { [key: string]: Value };

/** Type brackets of MongoDB's order, ascending. */
export const enum Bracket {
  Null = 0,
  Number = 1,
  String = 2,
  Object = 3,
  Array = 4,
  Bool = 5,
}

export function isNumber(v: unknown): v is number | bigint | Double {
  return typeof v === "number" || typeof v === "bigint" || v instanceof Double;
}

export function isObject(v: unknown): v is Doc {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Double);
}

export function bracket(v: Value | undefined): Bracket {
  if (v === null || v === undefined) return Bracket.Null;
  switch (typeof v) {
    case "boolean":
      return Bracket.Bool;
    case "number":
    case "bigint":
      return Bracket.Number;
    case "string":
      return Bracket.String;
  }
  if (v instanceof Double) return Bracket.Number;
  return Array.isArray(v) ? Bracket.Array : Bracket.Object;
}

/** A classified number: an exact integer or a double. */
export type Num = { int: bigint; f?: undefined } | { int?: undefined; f: number };

export function num(v: number | bigint | Double): Num {
  if (typeof v === "bigint") return { int: v };
  if (v instanceof Double) return { f: v.value };
  return Number.isInteger(v) && !Object.is(v, -0) ? { int: BigInt(v) } : { f: v };
}

export function isIntegerKind(v: number | bigint | Double): boolean {
  return num(v).int !== undefined;
}

export function numberValue(v: number | bigint | Double): number {
  if (typeof v === "bigint") return Number(v);
  if (v instanceof Double) return v.value;
  return v;
}

function cmpF(x: number, y: number): number {
  const xn = Number.isNaN(x);
  const yn = Number.isNaN(y);
  if (xn || yn) return xn && yn ? 0 : xn ? -1 : 1;
  return x < y ? -1 : x > y ? 1 : 0;
}

/** Compares a double with an integer exactly, without rounding the integer. */
function cmpFInt(x: number, i: bigint): number {
  if (Number.isNaN(x)) return -1;
  if (!Number.isFinite(x)) return x > 0 ? 1 : -1;
  const floor = Math.floor(x);
  const fi = BigInt(floor);
  if (fi === i) return x > floor ? 1 : 0;
  return fi < i ? -1 : 1;
}

export function compareNumbers(a: number | bigint | Double, b: number | bigint | Double): number {
  // Fast path: two plain JS numbers compare exactly as doubles unless both are huge integers,
  // and plain numbers are exact below 2^53.
  if (typeof a === "number" && typeof b === "number") return cmpF(a, b);
  const x = num(a);
  const y = num(b);
  if (x.int !== undefined && y.int !== undefined) return x.int < y.int ? -1 : x.int > y.int ? 1 : 0;
  if (x.f !== undefined && y.f !== undefined) return cmpF(x.f, y.f);
  if (x.f !== undefined) return cmpFInt(x.f, y.int as bigint);
  return -cmpFInt(y.f as number, x.int as bigint);
}

/** Compares strings by UTF-8 bytes, which is code point order (not UTF-16 unit order). */
export function compareStrings(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) {
      // Surrogates (0xD800-0xDFFF) encode code points above every BMP unit.
      const xs = x >= 0xd800 && x <= 0xdfff;
      const ys = y >= 0xd800 && y <= 0xdfff;
      if (xs !== ys) return xs ? 1 : -1;
      return x < y ? -1 : 1;
    }
  }
  return a.length < b.length ? -1 : a.length > b.length ? 1 : 0;
}

/** MongoDB's total order over values. `undefined` (missing) compares as null. */
export function compare(a: Value | undefined, b: Value | undefined): number {
  const ba = bracket(a);
  const bb = bracket(b);
  if (ba !== bb) return ba < bb ? -1 : 1;
  switch (ba) {
    case Bracket.Null:
      return 0;
    case Bracket.Number:
      return compareNumbers(a as number, b as number);
    case Bracket.String:
      return compareStrings(a as string, b as string);
    case Bracket.Bool:
      return a === b ? 0 : a ? 1 : -1;
    case Bracket.Array: {
      const x = a as Value[];
      const y = b as Value[];
      const n = Math.min(x.length, y.length);
      for (let i = 0; i < n; i++) {
        const o = compare(x[i], y[i]);
        if (o !== 0) return o;
      }
      return x.length < y.length ? -1 : x.length > y.length ? 1 : 0;
    }
    case Bracket.Object: {
      const x = Object.entries(a as Doc);
      const y = Object.entries(b as Doc);
      const n = Math.min(x.length, y.length);
      for (let i = 0; i < n; i++) {
        const [kx, vx] = x[i];
        const [ky, vy] = y[i];
        const tx = bracket(vx);
        const ty = bracket(vy);
        if (tx !== ty) return tx < ty ? -1 : 1;
        const ko = compareStrings(kx, ky);
        if (ko !== 0) return ko;
        const o = compare(vx, vy);
        if (o !== 0) return o;
      }
      return x.length < y.length ? -1 : x.length > y.length ? 1 : 0;
    }
  }
}

/** Equality under the order: `1 == 1.0`; embedded documents equal only in the same field order. */
export function valuesEqual(a: Value | undefined, b: Value | undefined): boolean {
  if (typeof a === "string" || typeof a === "boolean") return a === b;
  return compare(a, b) === 0;
}

/** A deep copy (documents handed to callers never alias the cache). */
export function clone<T extends Value>(v: T): T {
  if (v === null || typeof v !== "object" || v instanceof Double) return v;
  if (Array.isArray(v)) return v.map(clone) as T;
  const out: Doc = {};
  for (const k of Object.keys(v)) out[k] = clone((v as Doc)[k]);
  return out as T;
}
