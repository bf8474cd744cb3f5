// Live aggregations: subscriptions with a `pipeline` (one per distinct collection or collection
// group and pipeline, shared by its listeners), the result rows the server keeps current, and
// their snapshots. Over a collection group the pipeline's input documents carry `_path` (their
// full path; ids repeat across the group's collections), as for `aggregate`.
//
// Online only: rows come from the server (the local query engine does not evaluate pipelines,
// and pending writes are not applied to them); a listener gets its first snapshot with the
// server's `initial`, then one per change batch. Across reconnects the subscription resumes
// from the last seq it saw (the server replays the missed batches, or sends `reset` and a fresh
// `initial`). Each row's change id is its `_id` as JSON text (`"\"r1\""`, `{"a":1}`, `null`;
// the empty string for a `$count` row, which has no `_id`).
import type { ChangesMessage, ErrorMessage, InitialMessage, SubscribeMessage } from "../protocol.js";
import type { Doc } from "../query/value.js";
import { HeraldError } from "./errors.js";

/** One edit of a live aggregation's rows, as the server sent it. */
export interface RowChange<T = Doc> {
  type: "added" | "modified" | "removed";
  /** The row's `_id` as JSON text (see the module comment). */
  id: string;
  row: T | undefined;
  oldIndex: number;
  newIndex: number;
}

/** The rows of a live aggregation as of `seq`, and the edits since the previous snapshot.
 * `T` is the row type the application expects (not checked: rows are the server's JSON). */
export interface AggregateSnapshot<T = Doc> {
  rows: T[];
  seq: number;
  /** The edits that made these rows from the previous snapshot's (empty for the first). */
  changes: RowChange<T>[];
}

export interface AggregateListener {
  next(s: AggregateSnapshot): void;
  error?: (e: Error) => void;
}

/** What a live aggregation reads: one collection, or a collection group. */
export type PipelineSource = { collection: string } | { collectionGroup: string };

interface PipelineListen {
  readonly sub: string;
  readonly key: string;
  readonly source: PipelineSource;
  readonly pipeline: Doc[];
  rows?: Doc[];
  seq: number;
  readonly listeners: Set<AggregateListener>;
}

/** What the pipeline listens need of the connection. */
export interface PipelineLink {
  /** Sends if online; false otherwise (everything is resubscribed when the link comes up). */
  send(msg: SubscribeMessage | { op: "unsubscribe"; sub: string }): boolean;
  /** `minSeq` once a write of this client was acknowledged (read-your-writes on any node). */
  minSeq(): { minSeq?: number };
}

const TYPES = { add: "added", change: "modified", changeIndex: "modified", remove: "removed" } as const;

export class PipelineListens {
  private readonly bySub = new Map<string, PipelineListen>();
  private readonly byKey = new Map<string, PipelineListen>();
  private nextSub = 1;

  constructor(private readonly link: PipelineLink) {}

  /** Whether `sub` is a pipeline subscription (their ids start with `p`, queries' with `s`). */
  owns(sub: string): boolean {
    return this.bySub.has(sub);
  }

  /** Adds a listener to the listen of (source, pipeline), made and subscribed if new. */
  add(source: PipelineSource, pipeline: Doc[], listener: AggregateListener): () => void {
    const key = JSON.stringify([source, pipeline]);
    let l = this.byKey.get(key);
    if (l === undefined) {
      l = { sub: `p${this.nextSub++}`, key, source, pipeline, seq: 0, listeners: new Set() };
      this.byKey.set(key, l);
      this.bySub.set(l.sub, l);
      this.subscribe(l);
    } else if (l.rows !== undefined) {
      listener.next({ rows: [...l.rows], seq: l.seq, changes: [] });
    }
    l.listeners.add(listener);
    const listen = l;
    return () => {
      listen.listeners.delete(listener);
      if (listen.listeners.size === 0 && this.byKey.get(key) === listen) this.drop(listen);
    };
  }

  /** The connection came up: every listen subscribes again, resuming where it was. */
  resubscribe(): void {
    for (const l of this.bySub.values()) this.subscribe(l);
  }

  private subscribe(l: PipelineListen): void {
    const msg: SubscribeMessage = {
      op: "subscribe",
      sub: l.sub,
      ...l.source,
      pipeline: l.pipeline,
      ...this.link.minSeq(),
    };
    if (l.rows !== undefined && l.seq > 0) msg.resumeFrom = l.seq;
    this.link.send(msg);
  }

  private drop(l: PipelineListen): void {
    this.byKey.delete(l.key);
    this.bySub.delete(l.sub);
    this.link.send({ op: "unsubscribe", sub: l.sub });
  }

  applyInitial(msg: InitialMessage): void {
    const l = this.bySub.get(msg.sub);
    if (l === undefined) return;
    l.rows = [...msg.docs];
    l.seq = msg.seq;
    this.emit(l, []);
  }

  applyChanges(msg: ChangesMessage): void {
    const l = this.bySub.get(msg.sub);
    if (l === undefined) return;
    const rows = (l.rows ??= []);
    const changes: RowChange[] = [];
    for (const c of msg.changes) {
      if (c.oldIndex >= 0) rows.splice(c.oldIndex, 1);
      const row = c.kind === "remove" ? undefined : c.doc;
      if (row !== undefined && c.newIndex >= 0) rows.splice(c.newIndex, 0, row);
      changes.push({ type: TYPES[c.kind], id: c.id, row, oldIndex: c.oldIndex, newIndex: c.newIndex });
    }
    l.seq = msg.seq;
    this.emit(l, changes);
  }

  /** Continuity is lost: a fresh `initial` follows (the rows are replaced then). */
  applyReset(sub: string): void {
    const l = this.bySub.get(sub);
    if (l !== undefined) l.rows = undefined;
  }

  /** The subscription failed and is gone on the server: its listeners get the error. */
  applyError(msg: ErrorMessage & { sub: string }): void {
    const l = this.bySub.get(msg.sub);
    if (l === undefined) return;
    this.byKey.delete(l.key);
    this.bySub.delete(l.sub);
    const e = new HeraldError(msg.code, msg.message);
    for (const x of l.listeners) x.error?.(e);
  }

  private emit(l: PipelineListen, changes: RowChange[]): void {
    const rows = l.rows ?? [];
    for (const x of l.listeners) x.next({ rows: [...rows], seq: l.seq, changes });
  }
}
