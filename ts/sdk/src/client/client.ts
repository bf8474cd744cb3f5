// The client: references, writes with latency compensation and an offline queue, and live
// snapshots kept from the server's subscriptions, the local cache and the pending writes.
//
// Three sources make every snapshot:
// - the server's window of each subscription (`Listen.server`), exact as of `Listen.seq`;
// - the cache of last known documents (fed by every server answer, persisted), which answers
//   queries that have no server window yet (offline, or before the first answer);
// - the queue of writes the server has not confirmed, applied on top, in order.
// A write the server acknowledged at seq S stays applied for a listen until the listen has seen
// S (its changes or a heartbeat), so the view never flickers back to the old state.
import { Query, type QuerySpec } from "../query/query.js";
import { QueryError } from "../query/errors.js";
import { isObject, type Doc } from "../query/value.js";
import { Connection, type BackoffOptions, type ConnectionState, type WebSocketConstructor } from "./connection.js";
import { HeraldError } from "./errors.js";
import { Http, type Fetch } from "./http.js";
import { Admin, type CollectionInfo, type DeadLetter, type Explained, type MetricSample, type TriggerStatus } from "./admin.js";
import { MemoryPersistence, type CachedDoc, type Persistence, type StoredMutation } from "./persistence.js";
import {
  diffDocs,
  type DocumentChange,
  type DocumentSnapshot,
  type QuerySnapshot,
  type SnapshotMetadata,
} from "./snapshot.js";
import { applyWrite, generateId, validate, type Known, type WireWrite } from "./writes.js";

export interface ConnectOptions {
  /** The server's base URL, e.g. `http://127.0.0.1:7070`. */
  url: string;
  /** Sent as `Authorization: Bearer` on HTTP and in the WebSocket's first message. */
  token?: string;
  /** A WebSocket implementation (Node: `ws`); defaults to `globalThis.WebSocket`. */
  WebSocket?: WebSocketConstructor;
  /** Defaults to `globalThis.fetch`. */
  fetch?: Fetch;
  /** Where the write queue and the cache live; defaults to memory. */
  persistence?: Persistence;
  /** A connection silent for this long is presumed dead (default 5000 ms; the server sends a
   * heartbeat after 1 s of idleness). */
  heartbeatTimeoutMs?: number;
  /** An HTTP request unanswered this long fails and is retried (default 15000 ms). */
  requestTimeoutMs?: number;
  /** Most commits waiting for the server; one more is refused with `limit_exceeded`
   * (default 10,000). */
  pendingWritesMax?: number;
  /** Most documents in the cache; the least recently received are forgotten first
   * (default 100,000). */
  cacheDocsMax?: number;
  backoff?: BackoffOptions;
}

export class CollectionRef {
  readonly kind = "collection";
  constructor(readonly path: string) {}
}

export class DocumentRef {
  readonly kind = "document";
  constructor(
    readonly collection: string,
    readonly id: string,
  ) {}
  get path(): string {
    return `${this.collection}/${this.id}`;
  }
}

export class QueryRef {
  readonly kind = "query";
  constructor(
    readonly collection: string,
    readonly spec: QuerySpec,
    /** Parsed once; a bad query fails when it is built. */
    readonly parsed: Query,
  ) {}
}

/** One write of an atomic `commit`. */
export type Write =
  | { op: "set"; ref: DocumentRef; data: Doc; ifVersion?: number }
  | { op: "insert"; ref: DocumentRef | CollectionRef; data: Doc }
  | { op: "update"; ref: DocumentRef; update: Doc; upsert?: boolean; ifVersion?: number }
  | { op: "remove"; ref: DocumentRef; ifVersion?: number };

export interface WriteResult {
  op: "insert" | "update" | "delete" | null;
  collection: string;
  id: string;
  version: number;
}

export interface CommitResult {
  seq: number;
  results: WriteResult[];
}

export interface ListenOptions {
  /** Also call `next` when only `metadata` changed (Firestore's option; default false). */
  includeMetadataChanges?: boolean;
}

interface Pending {
  m: StoredMutation;
  /** Collections the mutation writes to. */
  collections: Set<string>;
  /** Seq of the server's acknowledgement, once acknowledged. */
  ackedSeq?: number;
  settle?: { resolve(r: CommitResult): void; reject(e: Error): void };
}

interface Listener {
  next(s: QuerySnapshot): void;
  error?: (e: Error) => void;
  includeMetadataChanges: boolean;
  last?: { docs: DocumentSnapshot[]; meta: SnapshotMetadata };
}

interface Listen {
  sub: string;
  collection: string;
  query: Query;
  /** The subscription message, without `sub` and `resumeFrom`. */
  wire: Record<string, unknown>;
  /** The server's window as of `seq` (full documents); undefined before the first answer. */
  server?: Doc[];
  seq: number;
  /** The server's answer for this connection arrived (false while offline or resubscribing). */
  live: boolean;
  /** Resubscribed with `resumeFrom` on this connection: the server sends only missed batches
   * (maybe none), so the next heartbeat (every message up to its seq sent) makes it live. */
  resuming: boolean;
  listeners: Set<Listener>;
}

const COMMIT_WRITES_MAX = 500;
/** Default bound of the write queue (commits not yet acknowledged). */
export const PENDING_WRITES_MAX = 10_000;
/** Default bound of the document cache. */
export const CACHE_DOCS_MAX = 100_000;

/** Opens a client. The connection is made in the background; everything works offline. */
export function connect(options: ConnectOptions): Herald {
  return new Herald(options);
}

export class Herald {
  private readonly http: Http;
  private readonly admin: Admin;
  private readonly conn: Connection;
  private readonly persistence: Persistence;
  private readonly ready: Promise<void>;
  private clientId = generateId();
  private nextBatch = 1;
  private readonly queue: Pending[] = [];
  /** Last known server state per collection and id (null: known absent). */
  private readonly cache = new Map<string, Map<string, Doc | null>>();
  /** Highest seq seen in any server answer: what the cache reflects, roughly. */
  private cacheSeq = 0;
  private readonly listens = new Map<string, Listen>();
  private nextSub = 1;
  private pumping = false;
  private pumpTimer: ReturnType<typeof setTimeout> | undefined;
  private pumpAttempt = 0;
  private readonly stateListeners = new Set<(s: ConnectionState) => void>();
  private readonly rejectListeners = new Set<(e: HeraldError, writes: WireWrite[]) => void>();
  private readonly connectionErrorListeners = new Set<(e: HeraldError) => void>();
  private closed = false;
  private readonly backoff: Required<BackoffOptions>;
  private readonly pendingWritesMax: number;
  private readonly cacheDocsMax: number;
  /** Cache keys, least recently received first (for eviction). */
  private readonly cacheOrder = new Map<string, [string, string]>();

  constructor(options: ConnectOptions) {
    this.pendingWritesMax = options.pendingWritesMax ?? PENDING_WRITES_MAX;
    this.cacheDocsMax = options.cacheDocsMax ?? CACHE_DOCS_MAX;
    const base = options.url.replace(/\/+$/, "");
    const fetchImpl = options.fetch ?? globalThis.fetch?.bind(globalThis);
    if (fetchImpl === undefined) throw new HeraldError("bad_request", "no fetch implementation: pass options.fetch");
    const WS = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (WS === undefined) throw new HeraldError("bad_request", "no WebSocket implementation: pass options.WebSocket");
    this.http = new Http(base, options.token, fetchImpl, options.requestTimeoutMs ?? 15_000);
    this.admin = new Admin(this.http);
    this.persistence = options.persistence ?? new MemoryPersistence();
    this.backoff = { initialMs: options.backoff?.initialMs ?? 250, maxMs: options.backoff?.maxMs ?? 10_000 };
    this.conn = new Connection({
      url: base.replace(/^http/, "ws") + "/v1/ws",
      token: options.token,
      WebSocket: WS,
      heartbeatTimeoutMs: options.heartbeatTimeoutMs ?? 5000,
      backoff: this.backoff,
      onOnline: () => this.onOnline(),
      onMessage: (m) => this.onMessage(m),
      onState: (s) => this.onState(s),
      onError: (e) => {
        for (const cb of this.connectionErrorListeners) cb(e);
      },
    });
    this.ready = this.restore();
    void this.ready.then(() => this.conn.start());
  }

  // ---- references ----

  collection(path: string): CollectionRef {
    return new CollectionRef(path);
  }

  /** A document by path: `rooms/r1/messages/m1`. */
  doc(path: string): DocumentRef {
    const i = path.lastIndexOf("/");
    if (i <= 0 || i === path.length - 1) throw new HeraldError("bad_path", `'${path}' is not a document path`);
    return new DocumentRef(path.slice(0, i), path.slice(i + 1));
  }

  /** A query; throws QueryError at once if the filter, sort or projection is malformed. */
  query(collection: CollectionRef | string, spec: QuerySpec = {}): QueryRef {
    const path = typeof collection === "string" ? collection : collection.path;
    return new QueryRef(path, spec, Query.parse(spec));
  }

  // ---- connection ----

  get connectionState(): ConnectionState {
    return this.conn.current;
  }

  /** Calls `cb` on every connection-state change; returns the unsubscribe function. */
  onConnectionState(cb: (s: ConnectionState) => void): () => void {
    this.stateListeners.add(cb);
    return () => this.stateListeners.delete(cb);
  }

  /** Calls `cb` when the live connection fails for a reason worth showing (a refused token);
   * the client keeps retrying with backoff. */
  onConnectionError(cb: (e: HeraldError) => void): () => void {
    this.connectionErrorListeners.add(cb);
    return () => this.connectionErrorListeners.delete(cb);
  }

  /** Calls `cb` when the server refuses a queued write (its local effect is rolled back). */
  onWriteRejected(cb: (e: HeraldError, writes: WireWrite[]) => void): () => void {
    this.rejectListeners.add(cb);
    return () => this.rejectListeners.delete(cb);
  }

  /** Simulates a network failure of the live connection (for tests and demos). */
  dropConnection(): void {
    this.conn.drop();
  }

  /** Resolves when every write made so far has been acknowledged or rejected. */
  async waitForPendingWrites(): Promise<void> {
    const waits = this.queue.map(
      (p) => new Promise<void>((resolve) => {
        const s = p.settle;
        p.settle = {
          resolve: (r) => (s?.resolve(r), resolve()),
          reject: (e) => (s?.reject(e), resolve()),
        };
      }),
    );
    await Promise.all(waits);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.pumpTimer);
    this.conn.close();
    await this.ready.catch(() => {});
    await this.flush();
    await this.persistence.close();
  }

  // ---- reads ----

  /** Reads a document (from the cache with pending writes when the server is unreachable). */
  get(ref: DocumentRef): Promise<DocumentSnapshot>;
  /** Runs a query once (locally from the cache when the server is unreachable). */
  get(ref: QueryRef | CollectionRef): Promise<QuerySnapshot>;
  async get(ref: DocumentRef | QueryRef | CollectionRef): Promise<DocumentSnapshot | QuerySnapshot> {
    await this.ready;
    if (ref instanceof DocumentRef) {
      try {
        const doc = await this.http.request<Doc>("GET", `/v1/docs/${ref.path}`);
        this.cachePut(ref.collection, [[ref.id, doc]]);
      } catch (e) {
        if (e instanceof HeraldError && e.code === "not_found") this.cachePut(ref.collection, [[ref.id, null]]);
        else if (!(e instanceof HeraldError && e.retryable)) throw e;
        else return this.localDoc(ref, true);
      }
      return this.localDoc(ref, false);
    }
    const q = ref instanceof QueryRef ? ref : this.query(ref);
    let fromCache = false;
    let seq = this.cacheSeq;
    try {
      const body = { collection: q.collection, ...stripProjection(q.spec) };
      const r = await this.http.request<{ docs: Doc[]; seq: number }>("POST", "/v1/query", body);
      this.cachePut(q.collection, r.docs.map((d) => [String(d._id), d]));
      this.cacheSeq = Math.max(this.cacheSeq, r.seq);
      seq = r.seq;
      const view = this.compute({ collection: q.collection, query: q.parsed, server: r.docs, seq: r.seq }, false);
      return snapshot(view.docs, [], { hasPendingWrites: view.pending, fromCache: false }, seq);
    } catch (e) {
      if (!(e instanceof HeraldError && e.retryable)) throw e;
      fromCache = true;
    }
    const view = this.compute({ collection: q.collection, query: q.parsed, seq: this.cacheSeq }, true);
    return snapshot(view.docs, [], { hasPendingWrites: view.pending, fromCache }, seq);
  }

  // ---- administration (straight to the server; admin key when authentication is on) ----

  /** Every collection holding at least one document, in byte order (`GET /v1/collections`). */
  listCollections(): Promise<CollectionInfo[]> {
    return this.admin.listCollections();
  }

  /** Runs a query on the server with its plan and work (`explain`); no cache, no local view. */
  explain(ref: QueryRef | CollectionRef): Promise<Explained> {
    const q = ref instanceof QueryRef ? ref : this.query(ref);
    return this.admin.explain(q.collection, { ...q.spec });
  }

  /** Every trigger with its queue: pending, oldest age, dead, executed, failed, recent errors. */
  triggers(): Promise<TriggerStatus[]> {
    return this.admin.triggers();
  }

  trigger(name: string): Promise<TriggerStatus> {
    return this.admin.trigger(name);
  }

  /** A trigger's dead letters, oldest first (at most `limit`, default 100, after task `after`). */
  deadLetters(name: string, opts?: { limit?: number; after?: string }): Promise<DeadLetter[]> {
    return this.admin.deadLetters(name, opts);
  }

  /** Queues dead letters again (the given task ids, or all); resolves to how many. */
  retryDead(name: string, tasks?: string[]): Promise<number> {
    return this.admin.retryDead(name, tasks);
  }

  /** Deletes dead letters (the given task ids, or all); resolves to how many. */
  purgeDead(name: string, tasks?: string[]): Promise<number> {
    return this.admin.purgeDead(name, tasks);
  }

  /** The server's `/metrics`, parsed (see `parsePrometheus`). */
  metrics(): Promise<MetricSample[]> {
    return this.admin.metrics();
  }

  private localDoc(ref: DocumentRef, fromCache: boolean): DocumentSnapshot {
    const base = this.cache.get(ref.collection)?.get(ref.id);
    const o = this.overlay(ref.collection, ref.id, base, this.cacheSeq);
    const data = isObject(o.doc) ? o.doc : undefined;
    return {
      id: ref.id,
      path: ref.path,
      exists: data !== undefined,
      data,
      metadata: { hasPendingWrites: o.touched, fromCache },
    };
  }

  // ---- writes ----

  /** Creates or replaces a document. */
  set(ref: DocumentRef, data: Doc, opts: { ifVersion?: number } = {}): Promise<CommitResult> {
    return this.commit([{ op: "set", ref, data, ...opts }]);
  }

  /** Inserts a document under a client-generated id (so it shows at once); returns its ref. */
  async insert(ref: CollectionRef, data: Doc): Promise<DocumentRef> {
    const id = typeof data._id === "string" ? data._id : generateId();
    const doc = new DocumentRef(ref.path, id);
    await this.commit([{ op: "insert", ref: doc, data }]);
    return doc;
  }

  /** Applies update operators (`{"$inc": {"n": 1}}`) or a replacement. */
  update(ref: DocumentRef, update: Doc, opts: { upsert?: boolean; ifVersion?: number } = {}): Promise<CommitResult> {
    return this.commit([{ op: "update", ref, update, ...opts }]);
  }

  remove(ref: DocumentRef, opts: { ifVersion?: number } = {}): Promise<CommitResult> {
    return this.commit([{ op: "remove", ref, ...opts }]);
  }

  /**
   * Applies writes atomically. The local effect shows at once in every affected snapshot
   * (`hasPendingWrites`); the promise resolves when the server has committed (durably), and
   * rejects with the server's error if it refused (the local effect is rolled back). Offline,
   * the writes wait in the persisted queue and are sent in order on reconnect, each commit
   * carrying its mutation id so a retry applies once.
   */
  async commit(writes: Write[]): Promise<CommitResult> {
    if (writes.length === 0 || writes.length > COMMIT_WRITES_MAX)
      throw new HeraldError("limit_exceeded", `a commit needs 1 to ${COMMIT_WRITES_MAX} writes`);
    const wire = writes.map(toWire);
    try {
      wire.forEach(validate);
    } catch (e) {
      if (e instanceof QueryError) throw new HeraldError(e.code, e.message, 400);
      throw e;
    }
    await this.ready;
    if (this.closed) throw new HeraldError("closed", "the client is closed");
    if (this.queue.filter((p) => p.ackedSeq === undefined).length >= this.pendingWritesMax)
      throw new HeraldError("limit_exceeded", `more than ${this.pendingWritesMax} commits are waiting for the server`);
    const m: StoredMutation = { id: `${this.clientId}:${this.nextBatch}`, batch: this.nextBatch++, writes: wire };
    const p: Pending = { m, collections: new Set(wire.map((w) => w.collection)) };
    const done = new Promise<CommitResult>((resolve, reject) => (p.settle = { resolve, reject }));
    this.queue.push(p);
    this.refresh(p.collections);
    await this.persistence.addMutation(m);
    this.pump();
    return done;
  }

  // ---- listening ----

  /** Listens to a query or a document; returns the function that stops listening. */
  onSnapshot(
    ref: QueryRef | CollectionRef,
    next: (s: QuerySnapshot) => void,
    error?: (e: Error) => void,
    options?: ListenOptions,
  ): () => void;
  onSnapshot(
    ref: DocumentRef,
    next: (s: DocumentSnapshot) => void,
    error?: (e: Error) => void,
    options?: ListenOptions,
  ): () => void;
  onSnapshot(
    ref: QueryRef | CollectionRef | DocumentRef,
    next: ((s: QuerySnapshot) => void) | ((s: DocumentSnapshot) => void),
    error?: (e: Error) => void,
    options: ListenOptions = {},
  ): () => void {
    let q: QueryRef;
    let deliver: (s: QuerySnapshot) => void;
    if (ref instanceof DocumentRef) {
      q = this.query(ref.collection, { filter: { _id: ref.id } });
      deliver = (s) => {
        const d = s.docs[0];
        (next as (s: DocumentSnapshot) => void)(
          d ?? { id: ref.id, path: ref.path, exists: false, data: undefined, metadata: s.metadata },
        );
      };
    } else {
      q = ref instanceof QueryRef ? ref : this.query(ref);
      deliver = next as (s: QuerySnapshot) => void;
    }
    const wire = { collection: q.collection, ...stripProjection(q.spec) };
    const key = JSON.stringify(wire);
    let l = this.listens.get(key);
    const listener: Listener = { next: deliver, error, includeMetadataChanges: options.includeMetadataChanges === true };
    const isNew = l === undefined;
    if (l === undefined) {
      l = {
        sub: `s${this.nextSub++}`,
        collection: q.collection,
        query: q.parsed,
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
    void this.ready.then(() => {
      if (!listen.listeners.has(listener)) return;
      if (isNew) this.subscribe(listen);
      // Online, the first snapshot waits for the server's answer (as Firestore's does);
      // offline it comes from the cache at once.
      if (this.conn.current !== "online" || listen.live) this.emit(listen, listener);
    });
    return () => {
      listen.listeners.delete(listener);
      if (listen.listeners.size === 0 && this.listens.get(key) === listen) {
        this.listens.delete(key);
        this.conn.send({ op: "unsubscribe", sub: listen.sub });
        this.retire();
      }
    };
  }

  // ---- internals: start, connection events ----

  private async restore(): Promise<void> {
    const s = await this.persistence.load();
    if (s.clientId !== undefined) this.clientId = s.clientId;
    else await this.persistence.saveClientId(this.clientId);
    for (const d of s.docs) this.cacheSet(d.collection, d.id, d.doc);
    const sorted = [...s.mutations].sort((a, b) => a.batch - b.batch);
    for (const m of sorted) {
      this.queue.push({ m, collections: new Set(m.writes.map((w) => w.collection)) });
      this.nextBatch = Math.max(this.nextBatch, m.batch + 1);
    }
  }

  private onState(s: ConnectionState): void {
    if (s !== "online") {
      for (const l of this.listens.values()) {
        l.resuming = false;
        if (l.live) {
          l.live = false;
          this.emitAll(l);
        } else for (const x of l.listeners) if (x.last === undefined) this.emit(l, x);
      }
    }
    for (const cb of this.stateListeners) cb(s);
  }

  private onOnline(): void {
    for (const l of this.listens.values()) this.subscribe(l);
    this.pumpAttempt = 0;
    this.pump();
  }

  private subscribe(l: Listen): void {
    const msg: Record<string, unknown> = { op: "subscribe", sub: l.sub, ...l.wire };
    if (l.server !== undefined && l.seq > 0) msg.resumeFrom = l.seq;
    if (this.conn.send(msg)) l.resuming = msg.resumeFrom !== undefined;
  }

  private listenBySub(sub: unknown): Listen | undefined {
    for (const l of this.listens.values()) if (l.sub === sub) return l;
    return undefined;
  }

  private onMessage(msg: Record<string, unknown>): void {
    const seq = typeof msg.seq === "number" ? msg.seq : 0;
    switch (msg.type) {
      case "initial": {
        const l = this.listenBySub(msg.sub);
        if (l === undefined) return;
        const docs = (msg.docs as Doc[]) ?? [];
        l.server = docs;
        l.seq = seq;
        l.live = true;
        l.resuming = false;
        this.cacheSeq = Math.max(this.cacheSeq, seq);
        this.cachePut(l.collection, docs.map((d) => [String(d._id), d]));
        this.retire();
        this.emitAll(l);
        return;
      }
      case "changes": {
        const l = this.listenBySub(msg.sub);
        if (l === undefined) return;
        const list = (l.server ??= []);
        for (const c of (msg.changes as Record<string, unknown>[]) ?? []) {
          const oldIndex = c.oldIndex as number;
          const newIndex = c.newIndex as number;
          if (oldIndex >= 0) list.splice(oldIndex, 1);
          if (newIndex >= 0 && isObject(c.doc)) list.splice(newIndex, 0, c.doc);
          const id = String(c.id);
          // A document that left the window may have been deleted or only moved out: forget it
          // rather than keep a possibly stale copy.
          this.cacheSet(l.collection, id, c.kind === "remove" ? undefined : (c.doc as Doc));
        }
        l.seq = seq;
        l.live = true;
        l.resuming = false;
        this.cacheSeq = Math.max(this.cacheSeq, seq);
        this.retire();
        this.emitAll(l);
        return;
      }
      case "heartbeat": {
        // Every message up to `seq` has been sent: live windows are current as of it, and a
        // resumed subscription has received every batch it missed.
        this.cacheSeq = Math.max(this.cacheSeq, seq);
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
        return;
      }
      case "reset": {
        const l = this.listenBySub(msg.sub);
        if (l !== undefined) {
          l.live = false;
          l.resuming = false;
        }
        return;
      }
      case "error": {
        const l = this.listenBySub(msg.sub);
        if (l === undefined) return;
        for (const [k, v] of this.listens) if (v === l) this.listens.delete(k);
        const err = new HeraldError(String(msg.code), String(msg.message));
        for (const x of l.listeners) x.error?.(err);
        return;
      }
    }
  }

  // ---- internals: the write queue ----

  /** Sends queued mutations in order, one at a time, while the server is reachable. */
  private pump(): void {
    if (this.pumping || this.closed) return;
    const p = this.queue.find((x) => x.ackedSeq === undefined);
    if (p === undefined) return;
    this.pumping = true;
    clearTimeout(this.pumpTimer);
    this.http
      .request<CommitResult>("POST", "/v1/commit", { mutationId: p.m.id, writes: p.m.writes })
      .then(
        (r) => {
          this.pumpAttempt = 0;
          p.ackedSeq = r.seq;
          this.foldIntoCache(p);
          void this.persistence.removeMutation(p.m.id);
          p.settle?.resolve({ seq: r.seq, results: r.results });
          this.retire();
        },
        (e: unknown) => {
          const err = e instanceof HeraldError ? e : new HeraldError("internal", String(e));
          if (err.retryable) {
            // Stay queued; try again after a backoff (or as soon as the connection is back).
            const delay = Math.max(50, Math.floor(Math.random() * Math.min(this.backoff.maxMs, this.backoff.initialMs * 2 ** this.pumpAttempt++)));
            this.pumpTimer = setTimeout(() => this.pump(), delay);
            return "wait";
          }
          this.queue.splice(this.queue.indexOf(p), 1);
          void this.persistence.removeMutation(p.m.id);
          this.refresh(p.collections);
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

  /** An acknowledged mutation's effect on cached documents no live window covers. */
  private foldIntoCache(p: Pending): void {
    for (const w of p.m.writes) {
      if (w.op === "update") this.cacheSet(w.collection, w.id, undefined);
      else this.cacheSet(w.collection, w.id, applyWrite(w, undefined, Date.now()) ?? undefined);
    }
  }

  /** Drops acknowledged mutations every listen has caught up with, and refreshes views. */
  private retire(): void {
    const touched = new Set<string>();
    for (let i = 0; i < this.queue.length; i++) {
      const p = this.queue[i];
      if (p.ackedSeq === undefined) continue;
      const seq = p.ackedSeq;
      const behind = [...this.listens.values()].some((l) => p.collections.has(l.collection) && l.seq < seq);
      if (behind) continue;
      this.queue.splice(i--, 1);
      for (const c of p.collections) touched.add(c);
    }
    this.refresh(touched);
  }

  // ---- internals: views ----

  private cacheSet(collection: string, id: string, doc: Known): void {
    let c = this.cache.get(collection);
    if (c === undefined) this.cache.set(collection, (c = new Map()));
    const key = `${collection}\u0000${id}`;
    this.cacheOrder.delete(key);
    if (doc === undefined) c.delete(id);
    else {
      c.set(id, doc);
      this.cacheOrder.set(key, [collection, id]);
    }
    this.dirty.set(key, { collection, id, doc: doc ?? null });
    while (this.cacheOrder.size > this.cacheDocsMax) {
      const [oldest, [oc, oid]] = this.cacheOrder.entries().next().value as [string, [string, string]];
      this.cacheOrder.delete(oldest);
      this.cache.get(oc)?.delete(oid);
      this.dirty.set(oldest, { collection: oc, id: oid, doc: null });
    }
    this.scheduleFlush();
  }

  private cachePut(collection: string, docs: [string, Doc | null][]): void {
    for (const [id, d] of docs) this.cacheSet(collection, id, d);
  }

  private readonly dirty = new Map<string, CachedDoc>();
  private flushScheduled = false;

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setTimeout(() => void this.flush(), 0);
  }

  private async flush(): Promise<void> {
    this.flushScheduled = false;
    const docs = [...this.dirty.values()];
    this.dirty.clear();
    if (docs.length > 0) await this.persistence.putDocs(docs).catch(() => {});
  }

  /** The document after the pending writes a view at `seq` has not seen yet. */
  private overlay(collection: string, id: string, base: Known, seq: number): { doc: Known; touched: boolean } {
    let doc = base;
    let touched = false;
    const now = Date.now();
    for (const p of this.queue) {
      if (p.ackedSeq !== undefined && p.ackedSeq <= seq) continue;
      for (const w of p.m.writes) {
        if (w.collection !== collection || w.id !== id) continue;
        touched = true;
        doc = applyWrite(w, doc, now);
      }
    }
    return { doc, touched };
  }

  private touchedIds(collection: string, seq: number): Set<string> {
    const ids = new Set<string>();
    for (const p of this.queue) {
      if (p.ackedSeq !== undefined && p.ackedSeq <= seq) continue;
      for (const w of p.m.writes) if (w.collection === collection) ids.add(w.id);
    }
    return ids;
  }

  /** The documents a view shows now, in order, with the pending flag. */
  private compute(
    l: { collection: string; query: Query; server?: Doc[]; seq: number },
    useCache: boolean,
  ): { docs: DocumentSnapshot[]; pending: boolean } {
    const touched = this.touchedIds(l.collection, l.seq);
    const cache = this.cache.get(l.collection);
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
      const o = this.overlay(l.collection, id, base, l.seq);
      if (cand.has(id) && fromServer) pending = true;
      if (isObject(o.doc)) cand.set(id, o.doc);
      else if (o.doc === null) cand.delete(id);
    }
    const q = l.query;
    let list: Doc[];
    if (fromServer) {
      // The server applied skip and limit already; local writes can only reorder, add or drop
      // within the window (a document entering before a skipped window's start is not shown).
      list = q.sort.sort([...cand.values()].filter((d) => q.filter.matches(d)));
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

  private refresh(collections: Set<string>): void {
    for (const l of this.listens.values()) if (collections.has(l.collection)) this.emitAll(l);
  }

  private emitAll(l: Listen): void {
    for (const x of l.listeners) this.emit(l, x);
  }

  private emit(l: Listen, x: Listener): void {
    const view = this.compute(l, l.server === undefined);
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

function snapshot(
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

/** Subscriptions fetch whole documents (the local engine needs them); projection is local. */
function stripProjection(spec: QuerySpec): Omit<QuerySpec, "projection"> {
  const { projection: _p, ...rest } = spec;
  return rest;
}

function toWire(w: Write): WireWrite {
  switch (w.op) {
    case "set":
      return { op: "put", collection: w.ref.collection, id: w.ref.id, doc: w.data, ...iv(w.ifVersion) };
    case "insert": {
      if (w.ref instanceof DocumentRef) return { op: "insert", collection: w.ref.collection, id: w.ref.id, doc: w.data };
      const id = typeof w.data._id === "string" ? w.data._id : generateId();
      return { op: "insert", collection: w.ref.path, id, doc: w.data };
    }
    case "update":
      return {
        op: "update",
        collection: w.ref.collection,
        id: w.ref.id,
        update: w.update,
        ...(w.upsert === true ? { upsert: true } : {}),
        ...iv(w.ifVersion),
      };
    case "remove":
      return { op: "delete", collection: w.ref.collection, id: w.ref.id, ...iv(w.ifVersion) };
  }
}

function iv(v: number | undefined): { ifVersion?: number } {
  return v === undefined ? {} : { ifVersion: v };
}

