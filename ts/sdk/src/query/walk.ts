// MongoDB's traversal of a dotted path with implicit array expansion (see crates/query/src/walk.rs).
// The visitor gets every candidate value (`undefined` = missing) and stops the walk by returning
// true. At the end of the path an array yields its elements and then itself (Traverse), or only
// itself (Whole, for $size and $elemMatch). Nested arrays are not expanded implicitly; inside an
// array of documents a numeric segment is tried both as a field name and as a position.
import type { Segment } from "./path.js";
import { isObject, type Doc, type Value } from "./value.js";

export type Visit = (v: Value | undefined) => boolean;

export function walk(doc: Doc, path: readonly Segment[], whole: boolean, f: Visit, from = 0): boolean {
  let cur = doc;
  for (let i = from; i < path.length; i++) {
    const last = i + 1 === path.length;
    const v = Object.prototype.hasOwnProperty.call(cur, path[i].name) ? cur[path[i].name] : undefined;
    if (v === undefined) return f(undefined);
    if (Array.isArray(v)) return walkArray(v, path, i + 1, whole, f);
    if (last) return f(v);
    if (isObject(v)) cur = v;
    else return f(undefined);
  }
  return false;
}

function walkArray(items: Value[], path: readonly Segment[], rest: number, whole: boolean, f: Visit): boolean {
  if (rest === path.length) {
    if (whole) return f(items);
    return items.some((e) => f(e)) || f(items);
  }
  const next = path[rest];
  for (let pos = 0; pos < items.length; pos++) {
    const item = items[pos];
    const atOffset = next.index === pos;
    if (isObject(item)) {
      if (walk(item, path, whole, f, rest)) return true;
      if (atOffset) {
        const stop = rest + 1 === path.length ? f(item) : walk(item, path, whole, f, rest + 1);
        if (stop) return true;
      }
    } else if (atOffset) {
      let stop = false;
      if (rest + 1 === path.length) stop = f(item);
      else if (Array.isArray(item)) stop = walkArray(item, path, rest + 1, whole, f);
      if (stop) return true;
    }
  }
  return false;
}
