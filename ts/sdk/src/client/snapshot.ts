// Snapshots as listeners see them, and the edits between two of them (Firestore's docChanges
// shape with Herald's kinds).
import { stringifyLossless } from "../query/json.js";
import type { Doc } from "../query/value.js";

export interface SnapshotMetadata {
  /** Some document in the snapshot (or one it no longer shows) has a write the server has not
   * confirmed yet. */
  readonly hasPendingWrites: boolean;
  /** The snapshot was computed locally (offline, or before the server's answer arrived). */
  readonly fromCache: boolean;
}

export interface DocumentSnapshot {
  readonly id: string;
  /** `collection/id`. */
  readonly path: string;
  readonly exists: boolean;
  /** The document (projected if the query has a projection); undefined when it does not exist. */
  readonly data: Doc | undefined;
  readonly metadata: SnapshotMetadata;
}

export type ChangeType = "added" | "modified" | "removed";
export type ChangeKind = "add" | "change" | "changeIndex" | "remove";

export interface DocumentChange {
  readonly type: ChangeType;
  /** Herald's edit kind: `changeIndex` is a move (maybe with new content), `change` in place. */
  readonly kind: ChangeKind;
  readonly doc: DocumentSnapshot;
  /** Index before the edit (-1 for added). Applying the edits in order, removing at oldIndex
   * and inserting at newIndex, turns the previous docs into these docs. */
  readonly oldIndex: number;
  /** Index after the edit (-1 for removed). */
  readonly newIndex: number;
}

export interface QuerySnapshot {
  readonly docs: readonly DocumentSnapshot[];
  readonly size: number;
  readonly empty: boolean;
  /** The server commit the snapshot reflects (0 before any server data). */
  readonly seq: number;
  readonly metadata: SnapshotMetadata;
  docChanges(): DocumentChange[];
}

/**
 * Edits from `prev` to `next` (both in result order, unique paths), fewest moves first: the
 * documents on a longest run that kept its relative order stay; every other document that
 * survives moves. Indexes are sequential, as Firestore's and the server's are: each edit's
 * oldIndex and newIndex hold after the edits before it, so applying them in order (remove at
 * oldIndex, insert at newIndex) turns `prev` into `next`.
 */
export function diffDocs(prev: readonly DocumentSnapshot[], next: readonly DocumentSnapshot[]): DocumentChange[] {
  const out: DocumentChange[] = [];
  const nextPaths = new Set(next.map((d) => d.path));
  const work: DocumentSnapshot[] = [];
  let removed = 0;
  prev.forEach((d, i) => {
    if (nextPaths.has(d.path)) work.push(d);
    else out.push({ type: "removed", kind: "remove", doc: d, oldIndex: i - removed++, newIndex: -1 });
  });
  const text = new Map(prev.map((d) => [d.path, stringifyLossless(d.data)]));
  const pos = new Map(work.map((d, i) => [d.path, i]));
  const stay = longestIncreasing(next.filter((d) => pos.has(d.path)).map((d) => pos.get(d.path) as number));
  const stays = new Set([...stay].map((i) => work[i].path));
  next.forEach((d, k) => {
    const at = k === 0 ? 0 : work.findIndex((w) => w.path === next[k - 1].path) + 1;
    const j = work.findIndex((w) => w.path === d.path);
    if (j < 0) {
      work.splice(at, 0, d);
      out.push({ type: "added", kind: "add", doc: d, oldIndex: -1, newIndex: at });
    } else if (!stays.has(d.path)) {
      work.splice(j, 1);
      const to = k === 0 ? 0 : work.findIndex((w) => w.path === next[k - 1].path) + 1;
      work.splice(to, 0, d);
      out.push({ type: "modified", kind: "changeIndex", doc: d, oldIndex: j, newIndex: to });
    } else if (text.get(d.path) !== stringifyLossless(d.data)) {
      work[j] = d;
      out.push({ type: "modified", kind: "change", doc: d, oldIndex: j, newIndex: j });
    }
  });
  return out;
}

/** The set of indexes (into `xs`'s values) of one longest strictly increasing subsequence. */
function longestIncreasing(xs: number[]): Set<number> {
  const tails: number[] = []; // tails[l] = index into xs of the smallest tail of a run of length l+1
  const prevOf: number[] = new Array<number>(xs.length).fill(-1);
  xs.forEach((x, i) => {
    let lo = 0;
    let hi = tails.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (xs[tails[mid]] < x) lo = mid + 1;
      else hi = mid;
    }
    if (lo > 0) prevOf[i] = tails[lo - 1];
    tails[lo] = i;
  });
  const out = new Set<number>();
  for (let i = tails.length > 0 ? tails[tails.length - 1] : -1; i >= 0; i = prevOf[i]) out.add(xs[i]);
  return out;
}
