// The client: the `Herald` facade over the four parts that do the work, layered as Firestore's
// SDK is (docs/sdk.md):
// - the mutation queue (mutationQueue.ts): the durable write queue, mutation ids, retries;
// - the document cache (documentCache.ts): last known server state, persisted, bounded;
// - the listen registry (listenRegistry.ts): subscriptions, their local views and snapshots
//   (and pipelineListens.ts: live aggregations, online only);
// - the sync loop (sync.ts): the live connection's state machine (connect, auth, resume,
//   reset, heartbeat), which feeds the registry and wakes the queue.
// The facade owns references, one-shot reads and administration (straight over HTTP), and
// wires the parts together; beyond that wiring it holds only the application's callbacks.
import { Query, type QuerySpec } from "../query/query.js";
import { QueryError } from "../query/errors.js";
import type { Doc } from "../query/value.js";
import { COMMIT_WRITES_MAX } from "../limits.js";
import { decodeQueryResult, type CommitResult, type QueryResult } from "../protocol.js";
import {
  Admin,
  type ClusterStatus,
  type CollectionInfo,
  type DeadLetter,
  type Explained,
  type MetricSample,
  type TriggerStatus,
} from "./admin.js";
import { CACHE_DOCS_MAX, DocumentCache } from "./documentCache.js";
import { HeraldError } from "./errors.js";
import { Http, type Fetch } from "./http.js";
import { ListenRegistry, snapshot, type ListenLink, type Listener } from "./listenRegistry.js";
import { MutationQueue, PENDING_WRITES_MAX } from "./mutationQueue.js";
import { MemoryPersistence, type Persistence } from "./persistence.js";
import { PipelineListens, type AggregateSnapshot, type PipelineSource } from "./pipelineListens.js";
import { CollectionGroupRef, CollectionRef, DocumentRef, QueryRef, toWire, wireQuery, type Write } from "./refs.js";
import type { DocumentSnapshot, QuerySnapshot } from "./snapshot.js";
import { SyncLoop, type BackoffOptions, type ConnectionState, type WebSocketConstructor } from "./sync.js";
import { generateId, validate, type WireWrite } from "./writes.js";

export { CollectionGroupRef, CollectionRef, DocumentRef, QueryRef, type Write } from "./refs.js";
export type { CommitResult, WriteResult } from "../protocol.js";
export { PENDING_WRITES_MAX } from "./mutationQueue.js";
export { CACHE_DOCS_MAX } from "./documentCache.js";

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

export interface ListenOptions {
  /** Also call `next` when only `metadata` changed (Firestore's option; default false). */
  includeMetadataChanges?: boolean;
}

/** What an aggregation reads, as the wire says it: a collection, or a collection group. */
function pipelineSource(from: CollectionRef | CollectionGroupRef | string): PipelineSource {
  if (from instanceof CollectionGroupRef) return { collectionGroup: from.name };
  return { collection: typeof from === "string" ? from : from.path };
}

/** Opens a client. The connection is made in the background; everything works offline. */
export function connect(options: ConnectOptions): Herald {
  return new Herald(options);
}

export class Herald {
  private readonly http: Http;
  private readonly admin: Admin;
  private readonly persistence: Persistence;
  private readonly cache: DocumentCache;
  private readonly queue: MutationQueue;
  private readonly listens: ListenRegistry;
  private readonly pipelines: PipelineListens;
  private readonly sync: SyncLoop;
  /** Resolves once the persisted queue and cache are restored; everything waits for it. */
  private readonly ready: Promise<void>;
  private readonly stateListeners = new Set<(s: ConnectionState) => void>();
  private readonly connectionErrorListeners = new Set<(e: HeraldError) => void>();

  constructor(options: ConnectOptions) {
    const base = options.url.replace(/\/+$/, "");
    const fetchImpl = options.fetch ?? globalThis.fetch?.bind(globalThis);
    if (fetchImpl === undefined) throw new HeraldError("bad_request", "no fetch implementation: pass options.fetch");
    const WS = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (WS === undefined) throw new HeraldError("bad_request", "no WebSocket implementation: pass options.WebSocket");
    this.http = new Http(base, options.token, fetchImpl, options.requestTimeoutMs ?? 15_000);
    this.admin = new Admin(this.http);
    this.persistence = options.persistence ?? new MemoryPersistence();
    const backoff = { initialMs: options.backoff?.initialMs ?? 250, maxMs: options.backoff?.maxMs ?? 10_000 };
    this.cache = new DocumentCache(this.persistence, options.cacheDocsMax ?? CACHE_DOCS_MAX);
    this.queue = new MutationQueue(this.http, this.persistence, backoff, options.pendingWritesMax ?? PENDING_WRITES_MAX, {
      queued: (p) => this.listens.refresh(p.collections),
      acked: (p) => {
        this.cache.foldWrites(p.m.writes);
        this.listens.retire();
      },
      rejected: (p) => this.listens.refresh(p.collections),
    });
    // The registry and the sync loop need each other (subscribing is the loop's, the windows
    // the registry's); the link defers to the loop made just after.
    const loop = (): SyncLoop => this.sync;
    const link: ListenLink = {
      subscribe: (l) => loop().subscribe(l),
      unsubscribe: (l) => loop().unsubscribe(l),
      get online() {
        return loop().online;
      },
    };
    this.listens = new ListenRegistry(this.cache, this.queue, link);
    this.pipelines = new PipelineListens({ send: (m) => loop().send(m), minSeq: () => this.queue.minSeq() });
    this.sync = new SyncLoop(
      {
        url: base.replace(/^http/, "ws") + "/v1/ws",
        token: options.token,
        WebSocket: WS,
        heartbeatTimeoutMs: options.heartbeatTimeoutMs ?? 5000,
        backoff,
        onState: (s) => {
          for (const cb of this.stateListeners) cb(s);
        },
        onError: (e) => {
          for (const cb of this.connectionErrorListeners) cb(e);
        },
      },
      this.listens,
      this.queue,
      this.pipelines,
    );
    this.ready = this.restore();
    void this.ready.then(() => this.sync.start());
  }

  // ---- references ----

  collection(path: string): CollectionRef {
    return new CollectionRef(path);
  }

  /** Every collection whose last path segment is `name`, at any depth. Its queries and
   * listens are answered by the server when online and from the cached documents of the
   * group's collections offline, with pending local writes on top either way; each document's
   * `path` (and its data's `_path`) is its full path. */
  collectionGroup(name: string): CollectionGroupRef {
    return new CollectionGroupRef(name);
  }

  /** A document by path: `rooms/r1/messages/m1`. */
  doc(path: string): DocumentRef {
    const i = path.lastIndexOf("/");
    if (i <= 0 || i === path.length - 1) throw new HeraldError("bad_path", `'${path}' is not a document path`);
    return new DocumentRef(path.slice(0, i), path.slice(i + 1));
  }

  /** A query; throws QueryError at once if the filter, sort or projection is malformed. */
  query(collection: CollectionRef | CollectionGroupRef | string, spec: QuerySpec = {}): QueryRef {
    if (collection instanceof CollectionGroupRef)
      return new QueryRef("", spec, Query.parseGroup(spec), collection.name);
    const path = typeof collection === "string" ? collection : collection.path;
    return new QueryRef(path, spec, Query.parse(spec));
  }

  // ---- connection ----

  get connectionState(): ConnectionState {
    return this.sync.current;
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
    return this.queue.onRejected(cb);
  }

  /** Simulates a network failure of the live connection (for tests and demos). */
  dropConnection(): void {
    this.sync.drop();
  }

  /** Resolves when every write made so far has been acknowledged or rejected. */
  waitForPendingWrites(): Promise<void> {
    return this.queue.settled();
  }

  async close(): Promise<void> {
    this.queue.close();
    this.sync.close();
    await this.ready.catch(() => {});
    await this.cache.flush();
    await this.persistence.close();
  }

  // ---- reads ----

  /** Reads a document (from the cache with pending writes when the server is unreachable). */
  get(ref: DocumentRef): Promise<DocumentSnapshot>;
  /** Runs a query once (locally from the cache when the server is unreachable). */
  get(ref: QueryRef | CollectionRef | CollectionGroupRef): Promise<QuerySnapshot>;
  async get(ref: DocumentRef | QueryRef | CollectionRef | CollectionGroupRef): Promise<DocumentSnapshot | QuerySnapshot> {
    await this.ready;
    if (ref instanceof DocumentRef) {
      try {
        const min = this.queue.minSeq().minSeq;
        const doc = await this.http.request<Doc>("GET", `/v1/docs/${ref.path}${min === undefined ? "" : `?minSeq=${min}`}`);
        this.cache.put(ref.collection, [[ref.id, doc]]);
      } catch (e) {
        if (e instanceof HeraldError && e.code === "not_found") this.cache.put(ref.collection, [[ref.id, null]]);
        else if (!(e instanceof HeraldError && e.retryable)) throw e;
        else return this.listens.localDoc(ref.collection, ref.id, ref.path, true);
      }
      return this.listens.localDoc(ref.collection, ref.id, ref.path, false);
    }
    const q = ref instanceof QueryRef ? ref : this.query(ref);
    if (q.group !== undefined) {
      // The server's answer (cached under each document's collection), or offline the
      // cached documents of the group's collections; pending writes on top either way.
      const g = { collection: "", group: q.group, query: q.parsed };
      try {
        const body = { ...wireQuery(q), ...this.queue.minSeq() };
        const r = decodeQueryResult(await this.http.request("POST", "/v1/query", body));
        for (const d of r.docs) {
          const path = String(d._path);
          const i = path.lastIndexOf("/");
          const { _path: _p, ...stored } = d;
          this.cache.put(path.slice(0, i), [[path.slice(i + 1), stored]]);
        }
        this.cache.noteSeq(r.seq);
        const view = this.listens.view({ ...g, server: r.docs, seq: r.seq }, false);
        return snapshot(view.docs, [], { hasPendingWrites: view.pending, fromCache: false }, r.seq);
      } catch (e) {
        if (!(e instanceof HeraldError && e.retryable)) throw e;
      }
      const view = this.listens.view({ ...g, seq: this.cache.seq }, true);
      return snapshot(view.docs, [], { hasPendingWrites: view.pending, fromCache: true }, this.cache.seq);
    }
    let fromCache = false;
    let seq = this.cache.seq;
    try {
      const body = { ...wireQuery(q), ...this.queue.minSeq() };
      const r = decodeQueryResult(await this.http.request("POST", "/v1/query", body));
      this.cache.put(q.collection, r.docs.map((d) => [String(d._id), d]));
      this.cache.noteSeq(r.seq);
      seq = r.seq;
      const view = this.listens.view({ collection: q.collection, query: q.parsed, server: r.docs, seq: r.seq }, false);
      return snapshot(view.docs, [], { hasPendingWrites: view.pending, fromCache: false }, seq);
    } catch (e) {
      if (!(e instanceof HeraldError && e.retryable)) throw e;
      fromCache = true;
    }
    const view = this.listens.view({ collection: q.collection, query: q.parsed, seq: this.cache.seq }, true);
    return snapshot(view.docs, [], { hasPendingWrites: view.pending, fromCache }, seq);
  }

  /**
   * Runs an aggregation pipeline on the server (`POST /v1/aggregate`): the output rows and the
   * seq of the snapshot they were computed from, after this client's acknowledged writes. The
   * stages are MongoDB's (`$match`, `$group`, `$sort`, `$skip`, `$limit`, `$project`, `$count`,
   * `$unwind`); with authentication, the read rule applies before the first stage. Over a
   * collection group (`collectionGroup(name)`) the input documents carry `_path`, and each
   * collection's read rule applies to its own documents. It needs the server: there is no local
   * evaluation, and an unreachable server rejects with a retryable `HeraldError`.
   */
  async aggregate(collection: CollectionRef | CollectionGroupRef | string, pipeline: Doc[]): Promise<QueryResult> {
    await this.ready;
    const body = { ...pipelineSource(collection), pipeline, ...this.queue.minSeq() };
    return decodeQueryResult(await this.http.request("POST", "/v1/aggregate", body));
  }

  // ---- administration (straight to the server; admin key when authentication is on) ----

  /** Every collection holding at least one document, in byte order (`GET /v1/collections`). */
  listCollections(): Promise<CollectionInfo[]> {
    return this.admin.listCollections();
  }

  /** The cluster as the server sees it (`GET /v1/cluster`): a single server answers itself as
   * the primary of a one-node cluster. */
  clusterStatus(): Promise<ClusterStatus> {
    return this.admin.clusterStatus();
  }

  /** Runs a query on the server with its plan and work (`explain`); no cache, no local view. */
  explain(ref: QueryRef | CollectionRef | CollectionGroupRef): Promise<Explained> {
    const q = ref instanceof QueryRef ? ref : this.query(ref);
    if (q.group !== undefined) return this.admin.explainGroup(q.group, { ...q.spec });
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
    return this.queue.commit(wire);
  }

  // ---- listening ----

  /** Listens to a query or a document; returns the function that stops listening. */
  onSnapshot(
    ref: QueryRef | CollectionRef | CollectionGroupRef,
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
    ref: QueryRef | CollectionRef | CollectionGroupRef | DocumentRef,
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
    const listener: Listener = { next: deliver, error, includeMetadataChanges: options.includeMetadataChanges === true };
    return this.listens.add(wireQuery(q), q.parsed, listener, this.ready);
  }

  /**
   * Listens to a live aggregation: `pipeline` holds the stages of `POST /v1/aggregate` (a
   * `$group` or `$count`, see docs/live-queries.md for the shape maintained live). `next` gets
   * the result rows from the server's `initial`, then after every commit that changes them,
   * with the edits. Online only: no snapshot from the cache, pending writes not applied. A
   * pipeline the server refuses (`unsupported_live`, `bad_pipeline`...) reaches `error`.
   * Over a collection group (`collectionGroup(name)`) the rows are those `aggregate` returns for
   * the group: its input documents carry `_path` (so `{"$group": {"_id": "$_path"}}` works),
   * each collection's read rule applied before aggregation.
   * Returns the function that stops listening.
   */
  onAggregate<T = Doc>(
    collection: string | CollectionRef | CollectionGroupRef,
    pipeline: Record<string, unknown>[],
    next: (s: AggregateSnapshot<T>) => void,
    error?: (e: Error) => void,
  ): () => void {
    let stop: (() => void) | undefined;
    let stopped = false;
    const deliver = next as unknown as (s: AggregateSnapshot) => void;
    void this.ready.then(() => {
      if (!stopped) stop = this.pipelines.add(pipelineSource(collection), pipeline as Doc[], { next: deliver, error });
    });
    return () => {
      stopped = true;
      stop?.();
    };
  }

  private async restore(): Promise<void> {
    const s = await this.persistence.load();
    await this.queue.restore(s);
    for (const d of s.docs) this.cache.set(d.collection, d.id, d.doc);
  }
}
