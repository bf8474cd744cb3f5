// A whole query: filter, sort, cursors, skip, limit and projection, run over documents in memory. The
// local twin of the server's reference evaluation (crates/query query.rs): results are ordered by
// the sort keys and then `_id`.
import { Cursors } from "./cursor.js";
import { QueryError } from "./errors.js";
import { Filter } from "./filter.js";
import { Projection } from "./projection.js";
import { Sort } from "./sort.js";
import { isNumber, isObject, num, type Value } from "./value.js";

export interface QuerySpec {
  filter?: Record<string, unknown>;
  sort?: Record<string, 1 | -1>;
  skip?: number;
  limit?: number;
  projection?: Record<string, 0 | 1 | boolean>;
  /** Cursors: values in the order of the sort fields, optionally then an `_id` (Firestore's
   * semantics); on a collection group, optionally then a `_path` (the document's full path). */
  startAt?: unknown[];
  startAfter?: unknown[];
  endAt?: unknown[];
  endBefore?: unknown[];
}

const FIELDS = ["filter", "sort", "skip", "limit", "projection", "startAt", "startAfter", "endAt", "endBefore"];

export class Query {
  private constructor(
    readonly filter: Filter,
    readonly sort: Sort,
    readonly skip: number,
    /** 0 means no limit. */
    readonly limit: number,
    readonly projection: Projection,
    readonly cursors: Cursors,
    /** The result order, which the cursors are positions in: the sort, or for a collection-group
     * query the group's (`Sort.forGroup`: the sort, then `_path`). */
    readonly order: Sort = sort,
  ) {}

  /** Parses `{filter, sort, skip, limit, projection}`; unknown members are refused. */
  static parse(spec: unknown): Query {
    return Query.parseAs(spec, false);
  }

  /** [`parse`] for a collection-group query: its cursors are positions in the group's order
   * (the sort, `_id`, then `_path`) and are applied to documents carrying `_path`. */
  static parseGroup(spec: unknown): Query {
    return Query.parseAs(spec, true);
  }

  private static parseAs(spec: unknown, group: boolean): Query {
    if (!isObject(spec)) throw new QueryError("bad_query", "bad query: a query must be an object");
    const k = Object.keys(spec).find((k) => !FIELDS.includes(k));
    if (k !== undefined)
      throw new QueryError("bad_query", `bad query: unknown query member '${k}' (expected one of ${FIELDS.join(", ")})`);
    if (spec.filter === null) throw new QueryError("bad_filter", "bad filter: filter must be an object, got null");
    const filter = spec.filter === undefined ? Filter.all() : Filter.parse(spec.filter);
    const sort = Sort.parse(spec.sort);
    const skip = count("skip", spec.skip);
    const limit = count("limit", spec.limit);
    const projection = Projection.parse(spec.projection);
    if (!group) return new Query(filter, sort, skip, limit, projection, Cursors.parse(sort, spec));
    const order = sort.forGroup();
    return new Query(filter, sort, skip, limit, projection, Cursors.parse(order, spec), order);
  }

  /** Whether a document is in the result before skip and limit: the filter and the cursors. */
  matches(doc: Value): boolean {
    return this.filter.matches(doc) && this.cursors.admits(this.order, doc);
  }

  /** Filters, sorts (in `order`), skips and limits; projects when `project` (the default). */
  run<T extends Value>(docs: Iterable<T>, project = true): Value[] {
    const hits: T[] = [];
    for (const d of docs) if (this.matches(d)) hits.push(d);
    const sorted = this.order.sort(hits);
    const end = this.limit === 0 ? sorted.length : this.skip + this.limit;
    const window = sorted.slice(this.skip, end);
    return project && !this.projection.isAll() ? window.map((d) => this.projection.apply(d)) : window;
  }
}

function count(name: string, v: Value | undefined): number {
  const bad = () => new QueryError("bad_query", `bad query: ${name} must be a non-negative integer, got ${JSON.stringify(v)}`);
  if (v === undefined || v === null) return 0;
  if (!isNumber(v)) throw bad();
  const n = num(v);
  if (n.int !== undefined) {
    if (n.int < 0n || n.int > BigInt(Number.MAX_SAFE_INTEGER)) throw bad();
    return Number(n.int);
  }
  if (n.f >= 0 && Number.isInteger(n.f) && n.f < 1e15) return n.f;
  throw bad();
}
