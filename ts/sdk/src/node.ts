// Node-only helpers: a file-backed persistence for the write queue and the cache. Import from
// `@herald/sdk/node`; browsers use IndexedDbPersistence from the main entry.
import { mkdirSync, readFileSync, renameSync, writeFileSync, openSync, fsyncSync, closeSync } from "node:fs";
import { dirname } from "node:path";
import type { CachedDoc, Persistence, StoredMutation } from "./client/persistence.js";

interface FileState {
  clientId?: string;
  mutations: StoredMutation[];
  docs: Record<string, CachedDoc>;
}

/**
 * Keeps the client's state in one JSON file, rewritten atomically (write to a temporary file,
 * fsync, rename) on every change of the write queue, so a queued write survives a crash of the
 * process. Cache updates are written with the next queue change or at most every `flushMs`.
 */
export class FilePersistence implements Persistence {
  private state: FileState = { mutations: [], docs: {} };
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly path: string,
    private readonly flushMs = 200,
  ) {}

  async load(): Promise<{ clientId?: string; mutations: StoredMutation[]; docs: CachedDoc[] }> {
    try {
      this.state = JSON.parse(readFileSync(this.path, "utf8")) as FileState;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
    }
    return { clientId: this.state.clientId, mutations: [...this.state.mutations], docs: Object.values(this.state.docs) };
  }

  async saveClientId(id: string): Promise<void> {
    this.state.clientId = id;
    this.write();
  }

  async addMutation(m: StoredMutation): Promise<void> {
    this.state.mutations.push(m);
    this.write();
  }

  async removeMutation(id: string): Promise<void> {
    this.state.mutations = this.state.mutations.filter((m) => m.id !== id);
    this.write();
  }

  async putDocs(docs: CachedDoc[]): Promise<void> {
    for (const d of docs) {
      const key = `${d.collection}\u0000${d.id}`;
      if (d.doc === null) delete this.state.docs[key];
      else this.state.docs[key] = d;
    }
    if (this.timer === undefined) this.timer = setTimeout(() => this.write(), this.flushMs);
  }

  async close(): Promise<void> {
    if (this.timer !== undefined) this.write();
  }

  private write(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    mkdirSync(dirname(this.path), { recursive: true });
    const tmp = `${this.path}.tmp`;
    writeFileSync(tmp, JSON.stringify(this.state));
    const fd = openSync(tmp, "r");
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, this.path);
  }
}
