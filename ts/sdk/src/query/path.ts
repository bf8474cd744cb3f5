// Dotted field paths (`address.geo.lat`, `tags.0`), parsed once. A canonical numeric segment may
// also address an array position; whether it does depends on the value met there.
import { PATH_BYTES_MAX, PATH_SEGMENTS_MAX } from "./errors.js";

export interface Segment {
  readonly name: string;
  /** The array position this segment can address, or -1. */
  readonly index: number;
}

export interface FieldPath {
  readonly dotted: string;
  readonly segments: readonly Segment[];
}

/** Parses a dotted path; returns a message on failure. */
export function parsePath(dotted: string): FieldPath | string {
  if (dotted.length === 0) return "field path is empty";
  if (new TextEncoder().encode(dotted).length > PATH_BYTES_MAX)
    return `field path is longer than ${PATH_BYTES_MAX} bytes`;
  if (dotted.includes("\0")) return `field path '${dotted}' contains a NUL character`;
  const names = dotted.split(".");
  if (names.length > PATH_SEGMENTS_MAX) return `field path has more than ${PATH_SEGMENTS_MAX} segments`;
  const segments: Segment[] = [];
  for (const name of names) {
    if (name.length === 0) return `field path '${dotted}' has an empty segment`;
    segments.push({ name, index: arrayIndex(name) });
  }
  return { dotted, segments };
}

function arrayIndex(name: string): number {
  if (name.length > 9 || !/^(0|[1-9][0-9]*)$/.test(name)) return -1;
  return Number(name);
}

/** True when `a` equals `b` or is a proper prefix of it, segment-wise. */
export function isPrefixOf(a: FieldPath, b: FieldPath): boolean {
  if (a.segments.length > b.segments.length) return false;
  return a.segments.every((s, i) => s.name === b.segments[i].name);
}
