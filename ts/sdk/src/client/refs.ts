// References (collections, documents, queries) and the application's writes, with their wire
// forms: a write becomes a commit-format write, a query the members of a subscription.
import { Query, type QuerySpec } from "../query/query.js";
import type { Doc } from "../query/value.js";
import type { ListenQuery } from "./listenRegistry.js";
import { generateId, type WireWrite } from "./writes.js";

export class CollectionRef {
  readonly kind = "collection";
  constructor(readonly path: string) {}
}

/** Every collection whose last path segment is `name`, at any depth (`messages`,
 * `rooms/r1/messages`, ...): queried and listened to on the server, or offline over the cached
 * documents of those collections; each document carries `_path`, its full path. */
export class CollectionGroupRef {
  readonly kind = "collectionGroup";
  constructor(readonly name: string) {}
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
    /** Empty for a collection-group query. */
    readonly collection: string,
    readonly spec: QuerySpec,
    /** Parsed once; a bad query fails when it is built. */
    readonly parsed: Query,
    /** The collection group queried instead of `collection`. */
    readonly group?: string,
  ) {}
}

/** One write of an atomic `commit`. */
export type Write =
  | { op: "set"; ref: DocumentRef; data: Doc; ifVersion?: number }
  | { op: "insert"; ref: DocumentRef | CollectionRef; data: Doc }
  | { op: "update"; ref: DocumentRef; update: Doc; upsert?: boolean; ifVersion?: number }
  | { op: "remove"; ref: DocumentRef; ifVersion?: number };

/** The query as the server runs it: subscriptions and pull queries fetch whole documents (the
 * local engine needs them); the projection is applied locally. */
export function wireQuery(q: QueryRef): ListenQuery {
  const { projection: _p, ...rest } = q.spec;
  if (q.group !== undefined) return { collectionGroup: q.group, ...rest };
  return { collection: q.collection, ...rest };
}

export function toWire(w: Write): WireWrite {
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
    default: {
      const never: never = w;
      return never;
    }
  }
}

function iv(v: number | undefined): { ifVersion?: number } {
  return v === undefined ? {} : { ifVersion: v };
}
