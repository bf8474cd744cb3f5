// The mutation queue: the durable, ordered queue of commits the server has not acknowledged,
// their client mutation ids, and the loop that sends them one at a time with retries.
//
// Invariants:
// - A mutation leaves the persisted queue only when the server acknowledged or refused it; a
//   retryable failure (network, overload, or whatever the error table says) keeps it queued and
//   it is sent again after a backoff, with the same mutation id, so it applies exactly once.
// - Mutations are sent in order, one at a time (a later write may depend on an earlier one).
// - An acknowledged mutation stays in memory (not persisted) until every listen on its
//   collections has seen its seq (`retire`), so views never flicker back to the old state.
import { HeraldError } from "./errors.js";
import type { Http } from "./http.js";
import type { Persistence, StoredMutation } from "./persistence.js";
import { applyWrite, generateId, type Known, type WireWrite } from "./writes.js";
import { decodeCommitResult, type CommitResult } from "../protocol.js";

/** Default bound of the write queue (commits not yet acknowledged). */
export const PENDING_WRITES_MAX = 10_000;

export interface Pending {
  readonly m: StoredMutation;
  /** Collections the mutation writes to. */
  readonly collections: Set<string>;
  /** Seq of the server's acknowledgement, once acknowledged. */
  ackedSeq?: number;
  settle?: { resolve(r: CommitResult): void; reject(e: Error): void };
}

/** What the queue tells the rest of the client. */
export interface QueueEvents {
  /** A mutation entered the queue (its local effect should show). */
  queued(p: Pending): void;
  /** The server acknowledged `p` (`p.ackedSeq` is set). */
  acked(p: Pending): void;
  /** The server refused `p`; it has left the queue (its local effect should go). */
  rejected(p: Pending): void;
}

export class MutationQueue {
  private readonly pending: Pending[] = [];
  private clientId = generateId();
  private nextBatch = 1;
  private pumping = false;
  private pumpTimer: ReturnType<typeof setTimeout> | undefined;
  private pumpAttempt = 0;
  private closed = false;
  private readonly rejectListeners = new Set<(e: HeraldError, writes: WireWrite[]) => void>();

  constructor(
    private readonly http: Http,
    private readonly persistence: Persistence,
    /** Retry delay ceilings: the first, and the largest (as the sync loop's BackoffOptions). */
    private readonly backoff: { readonly initialMs: number; readonly maxMs: number },
    private readonly pendingMax: number,
    private readonly events: QueueEvents,
  ) {}

  /** Takes over the persisted client id and mutations (once, at start). */
  async restore(s: { clientId?: string; mutations: StoredMutation[] }): Promise<void> {
    if (s.clientId !== undefined) this.clientId = s.clientId;
    else await this.persistence.saveClientId(this.clientId);
    const sorted = [...s.mutations].sort((a, b) => a.batch - b.batch);
    for (const m of sorted) {
      this.pending.push({ m, collections: new Set(m.writes.map((w) => w.collection)) });
      this.nextBatch = Math.max(this.nextBatch, m.batch + 1);
    }
  }

  /** The highest seq of this client's acknowledged writes (0: none yet). Sent as `minSeq` with
   * queries and subscriptions, so that whichever node of a cluster answers has applied this
   * client's own writes (read-your-writes; docs/sdk.md). Not persisted: after a restart the
   * cache's seq and `resumeFrom` carry the client forward. */
  highestAckedSeq = 0;

  /** The `minSeq` member for a read: present once a write was acknowledged. */
  minSeq(): { minSeq?: number } {
    return this.highestAckedSeq > 0 ? { minSeq: this.highestAckedSeq } : {};
  }

  /** Queues a commit (persisted before it is sent); resolves with the server's answer. */
  async commit(writes: WireWrite[]): Promise<CommitResult> {
    if (this.closed) throw new HeraldError("closed", "the client is closed");
    if (this.pending.filter((p) => p.ackedSeq === undefined).length >= this.pendingMax)
      throw new HeraldError("limit_exceeded", `more than ${this.pendingMax} commits are waiting for the server`);
    const m: StoredMutation = { id: `${this.clientId}:${this.nextBatch}`, batch: this.nextBatch++, writes };
    const p: Pending = { m, collections: new Set(writes.map((w) => w.collection)) };
    const done = new Promise<CommitResult>((resolve, reject) => (p.settle = { resolve, reject }));
    this.pending.push(p);
    this.events.queued(p);
    await this.persistence.addMutation(m);
    this.pump();
    return done;
  }

  /** Calls `cb` when the server refuses a queued write; returns the unsubscribe function. */
  onRejected(cb: (e: HeraldError, writes: WireWrite[]) => void): () => void {
    this.rejectListeners.add(cb);
    return () => this.rejectListeners.delete(cb);
  }

  /** The server is reachable again: send at once, with a fresh backoff. */
  resume(): void {
    this.pumpAttempt = 0;
    this.pump();
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.pumpTimer);
  }

  /** Resolves when every mutation queued so far has been acknowledged or rejected. */
  async settled(): Promise<void> {
    const waits = this.pending.map(
      (p) =>
        new Promise<void>((resolve) => {
          const s = p.settle;
          p.settle = {
            resolve: (r) => (s?.resolve(r), resolve()),
            reject: (e) => (s?.reject(e), resolve()),
          };
        }),
    );
    await Promise.all(waits);
  }

  /** Drops the acknowledged mutations `behind` says every view has caught up with; returns the
   * collections they wrote. */
  retire(behind: (collections: Set<string>, seq: number) => boolean): Set<string> {
    const touched = new Set<string>();
    for (let i = 0; i < this.pending.length; i++) {
      const p = this.pending[i];
      if (p.ackedSeq === undefined) continue;
      if (behind(p.collections, p.ackedSeq)) continue;
      this.pending.splice(i--, 1);
      for (const c of p.collections) touched.add(c);
    }
    return touched;
  }

  /** The document after the queued writes a view at `seq` has not seen yet. */
  overlay(collection: string, id: string, base: Known, seq: number): { doc: Known; touched: boolean } {
    let doc = base;
    let touched = false;
    const now = Date.now();
    for (const p of this.pending) {
      if (p.ackedSeq !== undefined && p.ackedSeq <= seq) continue;
      for (const w of p.m.writes) {
        if (w.collection !== collection || w.id !== id) continue;
        touched = true;
        doc = applyWrite(w, doc, now);
      }
    }
    return { doc, touched };
  }

  /** The collections that queued writes a view at `seq` has not seen touch. */
  touchedCollections(seq: number): Set<string> {
    const out = new Set<string>();
    for (const p of this.pending) {
      if (p.ackedSeq !== undefined && p.ackedSeq <= seq) continue;
      for (const c of p.collections) out.add(c);
    }
    return out;
  }

  /** The ids of `collection` that queued writes a view at `seq` has not seen touch. */
  touchedIds(collection: string, seq: number): Set<string> {
    const ids = new Set<string>();
    for (const p of this.pending) {
      if (p.ackedSeq !== undefined && p.ackedSeq <= seq) continue;
      for (const w of p.m.writes) if (w.collection === collection) ids.add(w.id);
    }
    return ids;
  }

  /** Sends queued mutations in order, one at a time, while the server is reachable. */
  private pump(): void {
    if (this.pumping || this.closed) return;
    const p = this.pending.find((x) => x.ackedSeq === undefined);
    if (p === undefined) return;
    this.pumping = true;
    clearTimeout(this.pumpTimer);
    this.http
      .request("POST", "/v1/commit", { mutationId: p.m.id, writes: p.m.writes })
      .then(decodeCommitResult)
      .then(
        (r) => {
          this.pumpAttempt = 0;
          p.ackedSeq = r.seq;
          this.highestAckedSeq = Math.max(this.highestAckedSeq, r.seq);
          void this.persistence.removeMutation(p.m.id);
          p.settle?.resolve({ seq: r.seq, results: r.results });
          this.events.acked(p);
          return undefined;
        },
        (e: unknown) => {
          const err = e instanceof HeraldError ? e : new HeraldError("internal", String(e));
          if (err.retryable) {
            // Stay queued; try again after a backoff (or as soon as the connection is back).
            const ceiling = Math.min(this.backoff.maxMs, this.backoff.initialMs * 2 ** this.pumpAttempt++);
            const delay = Math.max(50, Math.floor(Math.random() * ceiling));
            this.pumpTimer = setTimeout(() => this.pump(), delay);
            return "wait";
          }
          this.pending.splice(this.pending.indexOf(p), 1);
          void this.persistence.removeMutation(p.m.id);
          this.events.rejected(p);
          p.settle?.reject(err);
          for (const cb of this.rejectListeners) cb(err, p.m.writes);
          return undefined;
        },
      )
      .then((outcome) => {
        this.pumping = false;
        if (outcome !== "wait") this.pump();
      });
  }
}
