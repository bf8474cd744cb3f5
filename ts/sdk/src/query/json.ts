// Lossless JSON: integers beyond 2^53 become `bigint`, integral doubles (`1.0`, `2e3`) become
// `Double`, so values round-trip as the server (serde_json) writes them. Used by the conformance
// runner; the client uses it for wire messages when `lossless: true` is asked for.
import { Double, type Value } from "./value.js";

const NUMBER = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/y;

export function parseLossless(text: string): Value {
  let i = 0;
  const ws = () => {
    while (i < text.length) {
      const c = text.charCodeAt(i);
      if (c === 32 || c === 9 || c === 10 || c === 13) i++;
      else break;
    }
  };
  const fail = (what: string): never => {
    throw new SyntaxError(`bad JSON at ${i}: ${what}`);
  };
  const value = (): Value => {
    ws();
    const c = text[i];
    if (c === "{") {
      i++;
      const out: { [k: string]: Value } = {};
      ws();
      if (text[i] === "}") {
        i++;
        return out;
      }
      for (;;) {
        ws();
        if (text[i] !== '"') fail("expected a key");
        const k = str();
        ws();
        if (text[i++] !== ":") fail("expected ':'");
        out[k] = value();
        ws();
        const d = text[i++];
        if (d === "}") return out;
        if (d !== ",") fail("expected ',' or '}'");
      }
    }
    if (c === "[") {
      i++;
      const out: Value[] = [];
      ws();
      if (text[i] === "]") {
        i++;
        return out;
      }
      for (;;) {
        out.push(value());
        ws();
        const d = text[i++];
        if (d === "]") return out;
        if (d !== ",") fail("expected ',' or ']'");
      }
    }
    if (c === '"') return str();
    if (text.startsWith("true", i)) return (i += 4), true;
    if (text.startsWith("false", i)) return (i += 5), false;
    if (text.startsWith("null", i)) return (i += 4), null;
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (!m) return fail("unexpected character");
    i += m[0].length;
    if (m[1] === undefined && m[2] === undefined) {
      const n = Number(m[0]);
      return Number.isSafeInteger(n) ? n : BigInt(m[0]);
    }
    const f = Number(m[0]);
    return Number.isInteger(f) ? new Double(f) : f;
  };
  const str = (): string => {
    // Find the closing quote, then let JSON.parse decode the escapes.
    let j = i + 1;
    for (;;) {
      const c = text.charCodeAt(j);
      if (Number.isNaN(c)) fail("unterminated string");
      if (c === 92) j += 2;
      else if (c === 34) break;
      else j++;
    }
    const s = JSON.parse(text.slice(i, j + 1)) as string;
    i = j + 1;
    return s;
  };
  const v = value();
  ws();
  if (i !== text.length) fail("trailing characters");
  return v;
}

/** Serializes like serde_json: a `Double` keeps its `.0`, a `bigint` its digits. */
export function stringifyLossless(v: Value | undefined): string {
  if (v === undefined) return "null";
  if (v === null) return "null";
  if (typeof v === "bigint") return v.toString();
  if (v instanceof Double) {
    if (Object.is(v.value, -0)) return "-0.0";
    const s = JSON.stringify(v.value);
    return /[.eE]/.test(s) ? s : s + ".0";
  }
  if (typeof v === "number") {
    if (!Number.isFinite(v)) return "null";
    if (Object.is(v, -0)) return "-0.0";
    return JSON.stringify(v);
  }
  if (typeof v !== "object") return JSON.stringify(v);
  if (Array.isArray(v)) return "[" + v.map(stringifyLossless).join(",") + "]";
  return (
    "{" +
    Object.keys(v)
      .map((k) => JSON.stringify(k) + ":" + stringifyLossless(v[k]))
      .join(",") +
    "}"
  );
}
