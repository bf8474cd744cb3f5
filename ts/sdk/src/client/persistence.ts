// Where the client keeps what must outlive a page or a process: the queue of writes the server
// has not acknowledged, and the cached documents that answer queries offline. One interface,
// three implementations: memory (the default), IndexedDB (browsers, indexeddb.ts) and a file
// (Node, node.ts).
import type { Doc } from "../query/value.js";
import type { WireWrite } from "./writes.js";

/** A write waiting for the server's acknowledgement, in the order it was made. */
export interface StoredMutation {
  /** Client mutation id, sent as `mutationId`: `<clientId>:<batch>`. */
  id: string;
  /** Position in the queue (increasing). */
  batch: number;
  writes: WireWrite[];
}

/** The last known server state of one document (`doc` null: known not to exist). */
export interface CachedDoc {
  collection: string;
  id: string;
  doc: Doc | null;
}

export interface Persistence {
  /** Everything stored, once at start. */
  load(): Promise<{ clientId?: string; mutations: StoredMutation[]; docs: CachedDoc[] }>;
  saveClientId(id: string): Promise<void>;
  /** Durably appends a mutation; resolves once it would survive a restart. */
  addMutation(m: StoredMutation): Promise<void>;
  removeMutation(id: string): Promise<void>;
  /** Replaces cached documents (null `doc` deletes the entry). Best effort; may batch. */
  putDocs(docs: CachedDoc[]): Promise<void>;
  close(): Promise<void>;
}

/** Keeps nothing beyond the process: the default. */
export class MemoryPersistence implements Persistence {
  async load() {
    return { mutations: [], docs: [] };
  }
  async saveClientId(): Promise<void> {}
  async addMutation(): Promise<void> {}
  async removeMutation(): Promise<void> {}
  async putDocs(): Promise<void> {}
  async close(): Promise<void> {}
}
