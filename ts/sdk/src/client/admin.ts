// Administration over HTTP: collections, query plans, trigger queues and dead letters, and the
// server's Prometheus metrics parsed into samples. These calls go straight to the server (no
// cache, no queue): they need a reachable server and, with authentication on, an admin key
// (collections and metrics also accept a service key). The web console is built on them.
import type { Doc } from "../query/value.js";
import {
  decodeClusterStatus,
  decodeCollectionList,
  decodeDeadLetters,
  decodeDeadPurged,
  decodeDeadRetried,
  decodeTriggerList,
  decodeTriggerStatus,
  type ClusterStatus,
  type DeadLetter,
  type TriggerStatus,
} from "../protocol.js";
import type { Http } from "./http.js";

export type { ClusterStatus, DeadLetter, GridCell, GridStatus, NodeRole, NodeStatus, TriggerError, TriggerStatus } from "../protocol.js";

export interface CollectionInfo {
  readonly name: string;
}

/** The plan and the work of one pull query (`POST /v1/query` with `explain: true`). */
export interface Explained {
  readonly docs: Doc[];
  readonly seq: number;
  readonly explain: {
    /** `{"type": "index"|"ordered_index"|"intersection"|"union"|"ids"|"collection_scan"|
     * "group_merge", ...}`. */
    readonly plan: Record<string, unknown>;
    readonly keysExamined: number;
    readonly docsExamined: number;
    readonly returned: number;
    /** Index entries and documents counted to estimate the plans. */
    readonly keysSampled?: number;
    /** The chosen plan's estimate (`atLeast`: a count stopped early). */
    readonly estimate?: PlanEstimate;
    /** The other plans considered (`abandoned`: tried first and given up). */
    readonly alternatives?: readonly {
      readonly plan: Record<string, unknown>;
      readonly estimate: PlanEstimate;
      readonly abandoned?: boolean;
    }[];
  };
}

/** What a plan is estimated to examine. */
export interface PlanEstimate {
  readonly keys: number;
  readonly docs: number;
  readonly atLeast?: boolean;
}

/** One sample of the Prometheus text format: `name{labels} value`. */
export interface MetricSample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

export class Admin {
  constructor(private readonly http: Http) {}

  async listCollections(): Promise<CollectionInfo[]> {
    const out: CollectionInfo[] = [];
    let after: string | undefined;
    for (;;) {
      const q = after === undefined ? "" : `?after=${encodeURIComponent(after)}`;
      const r = decodeCollectionList(await this.http.request<unknown>("GET", `/v1/collections${q}`));
      out.push(...r.collections);
      if (!r.more || r.collections.length === 0) return out;
      after = r.collections[r.collections.length - 1].name;
    }
  }

  /** `GET /v1/cluster`: the nodes, their roles and lag, as the answering node sees them. */
  async clusterStatus(): Promise<ClusterStatus> {
    return decodeClusterStatus(await this.http.request<unknown>("GET", "/v1/cluster"));
  }

  explain(collection: string, spec: Record<string, unknown>): Promise<Explained> {
    return this.http.request<Explained>("POST", "/v1/query", { collection, ...spec, explain: true });
  }

  /** [`explain`] for a collection-group query. */
  explainGroup(collectionGroup: string, spec: Record<string, unknown>): Promise<Explained> {
    return this.http.request<Explained>("POST", "/v1/query", { collectionGroup, ...spec, explain: true });
  }

  async triggers(): Promise<TriggerStatus[]> {
    return decodeTriggerList(await this.http.request<unknown>("GET", "/v1/triggers")).triggers;
  }

  async trigger(name: string): Promise<TriggerStatus> {
    return decodeTriggerStatus(await this.http.request<unknown>("GET", `/v1/triggers/${encodeURIComponent(name)}`));
  }

  async deadLetters(name: string, opts: { limit?: number; after?: string } = {}): Promise<DeadLetter[]> {
    const params = new URLSearchParams();
    if (opts.limit !== undefined) params.set("limit", String(opts.limit));
    if (opts.after !== undefined) params.set("after", opts.after);
    const q = params.toString() === "" ? "" : `?${params}`;
    const path = `/v1/triggers/${encodeURIComponent(name)}/dead${q}`;
    return decodeDeadLetters(await this.http.request<unknown>("GET", path)).deadLetters;
  }

  async retryDead(name: string, tasks?: string[]): Promise<number> {
    const path = `/v1/triggers/${encodeURIComponent(name)}/dead/retry`;
    return decodeDeadRetried(await this.http.request<unknown>("POST", path, tasks === undefined ? undefined : { tasks })).retried;
  }

  async purgeDead(name: string, tasks?: string[]): Promise<number> {
    const path = `/v1/triggers/${encodeURIComponent(name)}/dead/purge`;
    return decodeDeadPurged(await this.http.request<unknown>("POST", path, tasks === undefined ? undefined : { tasks })).purged;
  }

  async metrics(): Promise<MetricSample[]> {
    return parsePrometheus(await this.http.requestText("GET", "/metrics"));
  }
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$/;
const LABEL = /\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?/y;

/**
 * Parses the Prometheus text exposition format (version 0.0.4) into samples, in order.
 * `# HELP` / `# TYPE` lines and blank lines are skipped; label values are unescaped
 * (`\\`, `\"`, `\n`); `+Inf`, `-Inf` and `NaN` become the numbers they name. A line that does not
 * parse is skipped rather than failing the whole scrape.
 */
export function parsePrometheus(text: string): MetricSample[] {
  const out: MetricSample[] = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const m = SAMPLE.exec(line);
    if (m === null) continue;
    const labels: Record<string, string> = {};
    if (m[2] !== undefined) {
      LABEL.lastIndex = 0;
      let ok = true;
      while (LABEL.lastIndex < m[2].length) {
        const l = LABEL.exec(m[2]);
        if (l === null) {
          ok = false;
          break;
        }
        labels[l[1]] = l[2].replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));
      }
      if (!ok) continue;
    }
    const value = m[3] === "+Inf" ? Infinity : m[3] === "-Inf" ? -Infinity : Number(m[3]);
    out.push({ name: m[1], labels, value });
  }
  return out;
}
