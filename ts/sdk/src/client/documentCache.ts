// The document cache: the last known server state of documents, fed by every server answer
// (query results, live windows, acknowledged writes) and persisted, so that queries have an
// answer offline or before the server's first one.
//
// Invariants: at most `docsMax` documents are held (the least recently received are forgotten
// first); an entry is either a document, null (known absent) or missing (unknown). A document
// that may be stale is forgotten rather than kept. Writes to persistence are batched: every
// change marks its key dirty and one flush per turn of the event loop stores them.
import type { Doc } from "../query/value.js";
import type { CachedDoc, Persistence } from "./persistence.js";
import { applyWrite, type Known, type WireWrite } from "./writes.js";

/** Default bound of the document cache. */
export const CACHE_DOCS_MAX = 100_000;

export class DocumentCache {
  /** Last known server state per collection and id (null: known absent). */
  private readonly docs = new Map<string, Map<string, Doc | null>>();
  /** Cache keys, least recently received first (for eviction). */
  private readonly order = new Map<string, [string, string]>();
  /** Entries changed since the last flush, by cache key (null `doc`: delete). */
  private readonly dirty = new Map<string, CachedDoc>();
  private flushScheduled = false;
  /** Highest seq seen in any server answer: what the cache reflects, roughly. */
  private seqSeen = 0;

  constructor(
    private readonly persistence: Persistence,
    private readonly docsMax: number,
  ) {}

  get seq(): number {
    return this.seqSeen;
  }

  /** Notes a server answer as of `seq`. */
  noteSeq(seq: number): void {
    this.seqSeen = Math.max(this.seqSeen, seq);
  }

  get(collection: string, id: string): Known {
    return this.docs.get(collection)?.get(id);
  }

  /** Every known entry of a collection (null: known absent). */
  collection(collection: string): ReadonlyMap<string, Doc | null> | undefined {
    return this.docs.get(collection);
  }

  /** The collections the cache knows documents of. */
  collections(): IterableIterator<string> {
    return this.docs.keys();
  }

  /** Records what is known of one document (undefined: forget it). */
  set(collection: string, id: string, doc: Known): void {
    let c = this.docs.get(collection);
    if (c === undefined) this.docs.set(collection, (c = new Map()));
    const key = `${collection}\u0000${id}`;
    this.order.delete(key);
    if (doc === undefined) c.delete(id);
    else {
      c.set(id, doc);
      this.order.set(key, [collection, id]);
    }
    this.dirty.set(key, { collection, id, doc: doc ?? null });
    while (this.order.size > this.docsMax) {
      const [oldest, [oc, oid]] = this.order.entries().next().value as [string, [string, string]];
      this.order.delete(oldest);
      this.docs.get(oc)?.delete(oid);
      this.dirty.set(oldest, { collection: oc, id: oid, doc: null });
    }
    this.scheduleFlush();
  }

  put(collection: string, docs: [string, Doc | null][]): void {
    for (const [id, d] of docs) this.set(collection, id, d);
  }

  /** An acknowledged mutation's effect on cached documents no live window covers: puts,
   * inserts and deletes are known exactly; an update's result is not (the server had the
   * base), so the document is forgotten. */
  foldWrites(writes: readonly WireWrite[]): void {
    for (const w of writes) {
      if (w.op === "update") this.set(w.collection, w.id, undefined);
      else this.set(w.collection, w.id, applyWrite(w, undefined, Date.now()) ?? undefined);
    }
  }

  /** Stores the dirty entries now (best effort: a failed store is not retried). */
  async flush(): Promise<void> {
    this.flushScheduled = false;
    const docs = [...this.dirty.values()];
    this.dirty.clear();
    if (docs.length > 0) await this.persistence.putDocs(docs).catch(() => {});
  }

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setTimeout(() => void this.flush(), 0);
  }
}
