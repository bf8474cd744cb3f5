// The listen registry: the client's subscriptions (one per distinct query, shared by its
// listeners), the server window each keeps, and the local views and snapshots made from them.
//
// Three sources make every snapshot:
// - the server's window of each subscription (`Listen.server`), exact as of `Listen.seq`;
// - the document cache, which answers queries that have no server window yet (offline, or
//   before the first answer);
// - the mutation queue's writes the server has not confirmed, applied on top, in order.
// A write the server acknowledged at seq S stays applied for a listen until the listen has seen
// S (its changes or a heartbeat), so the view never flickers back to the old state.
//
// The registry applies what the server says about a subscription (`applyInitial`, ...); when
// to (re)subscribe and with what `resumeFrom` is the sync loop's business (sync.ts).
import type { Query } from "../query/query.js";
import { compareStrings, isObject, type Doc } from "../query/value.js";
import type { ChangesMessage, ErrorMessage, InitialMessage, SubscribeMessage } from "../protocol.js";
import type { DocumentCache } from "./documentCache.js";
import { HeraldError } from "./errors.js";
import type { MutationQueue } from "./mutationQueue.js";
import {
  diffDocs,
  type DocumentChange,
  type DocumentSnapshot,
  type QuerySnapshot,
  type SnapshotMetadata,
} from "./snapshot.js";
import type { Known } from "./writes.js";

export interface Listener {
  next(s: QuerySnapshot): void;
  error?: (e: Error) => void;
  includeMetadataChanges: boolean;
  last?: { docs: DocumentSnapshot[]; meta: SnapshotMetadata };
}

/** The query members of a subscription message (no `sub`, no `resumeFrom`). */
export type ListenQuery = Omit<SubscribeMessage, "op" | "sub" | "resumeFrom">;

export interface Listen {
  readonly sub: string;
  /** Empty for a collection-group listen (`group`). */
  readonly collection: string;
  /** A collection-group listen: online only (its window is the server's, without the cache
   * or pending writes); documents are known by `_path`. */
  readonly group?: string;
  readonly query: Query;
  readonly wire: ListenQuery;
  /** The server's window as of `seq` (full documents); undefined before the first answer. */
  server?: Doc[];
  seq: number;
  /** The server's answer for this connection arrived (false while offline or resubscribing). */
  live: boolean;
  /** Resubscribed with `resumeFrom` on this connection: the server sends only missed batches
   * (maybe none), so the next heartbeat (every message up to its seq sent) makes it live. */
  resuming: boolean;
  readonly listeners: Set<Listener>;
}

/** What the registry needs of the connection. */
export interface ListenLink {
  /** Sends the listen's subscription if the connection is up. */
  subscribe(l: Listen): void;
  unsubscribe(l: Listen): void;
  readonly online: boolean;
}

/** The view a query shows now: documents in order, and whether pending writes touch it. */
export interface View {
  docs: DocumentSnapshot[];
  pending: boolean;
}

export class ListenRegistry {
  /** By the subscription's query (`JSON.stringify(wire)`): listeners of one query share it. */
  private readonly listens = new Map<string, Listen>();
  private nextSub = 1;

  constructor(
    private readonly cache: DocumentCache,
    private readonly queue: MutationQueue,
    private readonly link: ListenLink,
  ) {}

  all(): IterableIterator<Listen> {
    return this.listens.values();
  }

  /**
   * Adds a listener to the listen of `wire` (made if new). `started` resolves when the client
   * has restored its state; the first snapshot follows then, from the cache at once when
   * offline, or after the server's answer (as Firestore's does). Returns the function that
   * removes the listener (and the listen with its last listener).
   */
  add(wire: ListenQuery, query: Query, listener: Listener, started: Promise<void>): () => void {
    const key = JSON.stringify(wire);
    let l = this.listens.get(key);
    const isNew = l === undefined;
    if (l === undefined) {
      l = {
        sub: `s${this.nextSub++}`,
        collection: wire.collection ?? "",
        ...(wire.collectionGroup === undefined ? {} : { group: wire.collectionGroup }),
        query,
        wire,
        seq: 0,
        live: false,
        resuming: false,
        listeners: new Set(),
      };
      this.listens.set(key, l);
    }
    l.listeners.add(listener);
    const listen = l;
    void started.then(() => {
      if (!listen.listeners.has(listener)) return;
      if (isNew) this.link.subscribe(listen);
      if (!this.link.online || listen.live) this.emit(listen, listener);
    });
    return () => {
      listen.listeners.delete(listener);
      if (listen.listeners.size === 0 && this.listens.get(key) === listen) {
        this.listens.delete(key);
        this.link.unsubscribe(listen);
        this.retire();
      }
    };
  }

  bySub(sub: string): Listen | undefined {
    for (const l of this.listens.values()) if (l.sub === sub) return l;
    return undefined;
  }

  // ---- what the server says ----

  /** The subscription's first window (or a fresh one after a reset). */
  applyInitial(msg: InitialMessage): void {
    const l = this.bySub(msg.sub);
    if (l === undefined) return;
    l.server = msg.docs;
    l.seq = msg.seq;
    l.live = true;
    l.resuming = false;
    this.cache.noteSeq(msg.seq);
    if (l.group === undefined) this.cache.put(l.collection, msg.docs.map((d) => [String(d._id), d]));
    else for (const d of msg.docs) this.cacheGroupDoc(String(d._path), d);
    this.retire();
    this.emitAll(l);
  }

  /** One commit's edits to the window, applied in order. */
  applyChanges(msg: ChangesMessage): void {
    const l = this.bySub(msg.sub);
    if (l === undefined) return;
    const list = (l.server ??= []);
    for (const c of msg.changes) {
      if (c.oldIndex >= 0) list.splice(c.oldIndex, 1);
      if (c.kind !== "remove" && c.newIndex >= 0) list.splice(c.newIndex, 0, c.doc);
      // A document that left the window may have been deleted or only moved out: forget it
      // rather than keep a possibly stale copy.
      if (l.group === undefined) this.cache.set(l.collection, c.id, c.kind === "remove" ? undefined : c.doc);
      else this.cacheGroupDoc(c.id, c.kind === "remove" ? undefined : c.doc);
    }
    l.seq = msg.seq;
    l.live = true;
    l.resuming = false;
    this.cache.noteSeq(msg.seq);
    this.retire();
    this.emitAll(l);
  }

  /** Every message up to `seq` has been sent: live windows are current as of it, and a
   * resumed subscription has received every batch it missed. */
  applyHeartbeat(seq: number): void {
    this.cache.noteSeq(seq);
    const woke: Listen[] = [];
    for (const l of this.listens.values()) {
      if (l.resuming) {
        l.resuming = false;
        l.live = true;
        woke.push(l);
      }
      if (l.live && l.seq < seq) l.seq = seq;
    }
    this.retire();
    for (const l of woke) this.emitAll(l);
  }

  /** Continuity is lost: the window is stale until the fresh `initial` that follows. */
  applyReset(sub: string): void {
    const l = this.bySub(sub);
    if (l !== undefined) {
      l.live = false;
      l.resuming = false;
    }
  }

  /** The subscription failed and is gone on the server: its listeners get the error. */
  applyError(msg: ErrorMessage & { sub: string }): void {
    const l = this.bySub(msg.sub);
    if (l === undefined) return;
    for (const [k, v] of this.listens) if (v === l) this.listens.delete(k);
    const err = new HeraldError(msg.code, msg.message);
    for (const x of l.listeners) x.error?.(err);
  }

  /** The connection left `online`: every window is now from the cache until answered again. */
  wentOffline(): void {
    for (const l of this.listens.values()) {
      l.resuming = false;
      if (l.live) {
        l.live = false;
        this.emitAll(l);
      } else for (const x of l.listeners) if (x.last === undefined) this.emit(l, x);
    }
  }

  // ---- views ----

  /** Drops acknowledged mutations every listen has caught up with, and refreshes views. */
  retire(): void {
    const touched = this.queue.retire((collections, seq) =>
      [...this.listens.values()].some((l) => covers(l, collections) && l.seq < seq),
    );
    this.refresh(touched);
  }

  /** Emits to every listen on one of `collections` (a listener sees only real changes). */
  refresh(collections: Set<string>): void {
    for (const l of this.listens.values()) if (covers(l, collections)) this.emitAll(l);
  }

  /** A collection-group window's document in the cache, under its own collection (without
   * `_path`, which is not stored); `undefined`: forget it. */
  private cacheGroupDoc(path: string, doc: Doc | undefined): void {
    const i = path.lastIndexOf("/");
    if (i <= 0) return;
    let stored: Doc | undefined;
    if (doc !== undefined) {
      const { _path: _p, ...rest } = doc;
      stored = rest;
    }
    this.cache.set(path.slice(0, i), path.slice(i + 1), stored);
  }

  /** A document from the cache with the pending writes on top. */
  localDoc(collection: string, id: string, path: string, fromCache: boolean): DocumentSnapshot {
    const o = this.queue.overlay(collection, id, this.cache.get(collection, id), this.cache.seq);
    const data = isObject(o.doc) ? o.doc : undefined;
    return { id, path, exists: data !== undefined, data, metadata: { hasPendingWrites: o.touched, fromCache } };
  }

  /** The documents a view shows now, in order, with the pending flag: over the server's
   * window `server` as of `seq`, or over the cache when `useCache`. */
  view(l: { collection: string; group?: string; query: Query; server?: Doc[]; seq: number }, useCache: boolean): View {
    if (l.group !== undefined) return this.groupView({ ...l, group: l.group }, useCache);
    const touched = this.queue.touchedIds(l.collection, l.seq);
    const cache = this.cache.collection(l.collection);
    const cand = new Map<string, Doc>();
    let fromServer = false;
    if (l.server !== undefined && !useCache) {
      fromServer = true;
      for (const d of l.server) cand.set(String(d._id), d);
    } else if (cache !== undefined) {
      for (const [id, d] of cache) if (d !== null) cand.set(id, d);
    }
    let pending = false;
    for (const id of touched) {
      const base: Known = cand.get(id) ?? cache?.get(id);
      const o = this.queue.overlay(l.collection, id, base, l.seq);
      if (cand.has(id) && fromServer) pending = true;
      if (isObject(o.doc)) cand.set(id, o.doc);
      else if (o.doc === null) cand.delete(id);
    }
    const q = l.query;
    let list: Doc[];
    if (fromServer) {
      // The server applied skip and limit already; local writes can only reorder, add or drop
      // within the window (a document entering before a skipped window's start is not shown).
      list = q.sort.sort([...cand.values()].filter((d) => q.matches(d)));
      const first = l.server?.[0];
      if (q.skip > 0 && first !== undefined) {
        const known = new Set(l.server?.map((d) => String(d._id)));
        list = list.filter((d) => known.has(String(d._id)) || q.sort.compare(d, first) >= 0);
      }
      if (q.limit > 0) list = list.slice(0, q.limit);
    } else {
      list = q.run(cand.values(), false) as Doc[];
    }
    const docs = list.map((d): DocumentSnapshot => {
      const id = String(d._id);
      const p = touched.has(id);
      if (p) pending = true;
      const data = (q.projection.isAll() ? d : q.projection.apply(d)) as Doc;
      return { id, path: `${l.collection}/${id}`, exists: true, data, metadata: { hasPendingWrites: p, fromCache: false } };
    });
    return { docs, pending };
  }

  /** [`view`] of a collection group: over the server's window (documents by `_path`) or
   * over the cached documents of every collection of the group, with the pending writes to
   * those collections on top, in the group's order (the sort, `_id`, then `_path`). */
  private groupView(l: { group: string; query: Query; server?: Doc[]; seq: number }, useCache: boolean): View {
    const inGroup = (c: string): boolean => lastSegment(c) === l.group;
    const cand = new Map<string, Doc>();
    const fromServer = l.server !== undefined && !useCache;
    const collections = new Set<string>();
    for (const c of this.cache.collections()) if (inGroup(c)) collections.add(c);
    for (const c of this.queue.touchedCollections(l.seq)) if (inGroup(c)) collections.add(c);
    if (fromServer) for (const d of l.server ?? []) cand.set(String(d._path), d);
    else
      for (const c of collections)
        for (const [id, d] of this.cache.collection(c) ?? []) if (d !== null) cand.set(`${c}/${id}`, withPath(d, c, id));
    let pending = false;
    const touchedPaths = new Set<string>();
    for (const c of collections) {
      for (const id of this.queue.touchedIds(c, l.seq)) {
        const path = `${c}/${id}`;
        touchedPaths.add(path);
        const base: Known = cand.get(path) ?? this.cache.get(c, id);
        const o = this.queue.overlay(c, id, base, l.seq);
        if (cand.has(path) && fromServer) pending = true;
        if (isObject(o.doc)) cand.set(path, withPath(o.doc, c, id));
        else if (o.doc === null) cand.delete(path);
      }
    }
    const q = l.query;
    const idDesc = q.sort.keys.find((k) => k.path.dotted === "_id")?.desc === true;
    const order = (a: Doc, b: Doc): number => {
      const o = q.sort.compare(a, b);
      if (o !== 0) return o;
      const p = compareStrings(String(a._path), String(b._path));
      return idDesc ? -p : p;
    };
    // The filter, and the cursors in the group's order (each candidate carries `_path`).
    let list = [...cand.values()].filter((d) => q.matches(d)).sort(order);
    if (fromServer) {
      // As for a collection: the server applied skip and limit; local writes only reorder,
      // add or drop within the window.
      const first = l.server?.[0];
      if (q.skip > 0 && first !== undefined) {
        const known = new Set(l.server?.map((d) => String(d._path)));
        list = list.filter((d) => known.has(String(d._path)) || order(d, first) >= 0);
      }
    } else list = list.slice(q.skip);
    if (q.limit > 0) list = list.slice(0, q.limit);
    const docs = list.map((d): DocumentSnapshot => {
      const path = String(d._path);
      const p = touchedPaths.has(path);
      if (p) pending = true;
      const data = (q.projection.isAll() ? d : { ...(q.projection.apply(d) as Doc), _path: path }) as Doc;
      return { id: String(d._id), path, exists: true, data, metadata: { hasPendingWrites: p, fromCache: false } };
    });
    return { docs, pending };
  }

  private emitAll(l: Listen): void {
    for (const x of l.listeners) this.emit(l, x);
  }

  private emit(l: Listen, x: Listener): void {
    const view = this.view(l, l.server === undefined);
    const meta: SnapshotMetadata = { hasPendingWrites: view.pending, fromCache: !l.live };
    const docs = view.docs.map((d) => ({ ...d, metadata: { hasPendingWrites: d.metadata.hasPendingWrites, fromCache: !l.live } }));
    const prev = x.last;
    const changes = diffDocs(prev?.docs ?? [], docs);
    const metaChanged =
      prev === undefined || prev.meta.hasPendingWrites !== meta.hasPendingWrites || prev.meta.fromCache !== meta.fromCache;
    if (prev !== undefined && changes.length === 0 && !(metaChanged && x.includeMetadataChanges)) {
      if (metaChanged) x.last = { docs, meta };
      return;
    }
    x.last = { docs, meta };
    const snap = snapshot(docs, changes, meta, l.seq);
    try {
      x.next(snap);
    } catch (e) {
      // A throwing listener must not break the client; report it like a listen error.
      x.error?.(e as Error);
    }
  }
}

/** The last segment of a collection path: the collection group it belongs to. */
function lastSegment(collection: string): string {
  return collection.slice(collection.lastIndexOf("/") + 1);
}

/** Whether a listen reads one of `collections` (a group listen: one of its group). */
function covers(l: Listen, collections: Set<string>): boolean {
  if (l.group === undefined) return collections.has(l.collection);
  for (const c of collections) if (lastSegment(c) === l.group) return true;
  return false;
}

/** A stored document as a group view holds it: with `_path`, its full path. */
function withPath(d: Doc, collection: string, id: string): Doc {
  return { ...d, _path: `${collection}/${id}` };
}

export function snapshot(
  docs: DocumentSnapshot[],
  changes: DocumentChange[],
  metadata: SnapshotMetadata,
  seq: number,
): QuerySnapshot {
  return {
    docs,
    size: docs.length,
    empty: docs.length === 0,
    seq,
    metadata,
    docChanges: () => changes,
  };
}
