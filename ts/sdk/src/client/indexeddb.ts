// Persistence in a browser's IndexedDB: the write queue (written before a write is reported
// queued) and the document cache, in one database per name.
import type { CachedDoc, Persistence, StoredMutation } from "./persistence.js";

const MUTATIONS = "mutations";
const DOCS = "docs";
const META = "meta";

function req<T>(r: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

function done(tx: IDBTransaction): Promise<void> {
  return new Promise((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error);
  });
}

export class IndexedDbPersistence implements Persistence {
  private db: Promise<IDBDatabase>;

  constructor(name = "herald", factory: IDBFactory = globalThis.indexedDB) {
    const open = factory.open(name, 1);
    open.onupgradeneeded = () => {
      const db = open.result;
      db.createObjectStore(MUTATIONS, { keyPath: "id" });
      db.createObjectStore(DOCS);
      db.createObjectStore(META);
    };
    this.db = req(open);
  }

  async load(): Promise<{ clientId?: string; mutations: StoredMutation[]; docs: CachedDoc[] }> {
    const db = await this.db;
    const tx = db.transaction([MUTATIONS, DOCS, META], "readonly");
    const [mutations, docs, clientId] = await Promise.all([
      req(tx.objectStore(MUTATIONS).getAll() as IDBRequest<StoredMutation[]>),
      req(tx.objectStore(DOCS).getAll() as IDBRequest<CachedDoc[]>),
      req(tx.objectStore(META).get("clientId") as IDBRequest<string | undefined>),
    ]);
    return { clientId, mutations, docs };
  }

  async saveClientId(id: string): Promise<void> {
    const tx = (await this.db).transaction(META, "readwrite");
    tx.objectStore(META).put(id, "clientId");
    await done(tx);
  }

  async addMutation(m: StoredMutation): Promise<void> {
    const tx = (await this.db).transaction(MUTATIONS, "readwrite", { durability: "strict" });
    tx.objectStore(MUTATIONS).put(m);
    await done(tx);
  }

  async removeMutation(id: string): Promise<void> {
    const tx = (await this.db).transaction(MUTATIONS, "readwrite");
    tx.objectStore(MUTATIONS).delete(id);
    await done(tx);
  }

  async putDocs(docs: CachedDoc[]): Promise<void> {
    const tx = (await this.db).transaction(DOCS, "readwrite");
    const store = tx.objectStore(DOCS);
    for (const d of docs) {
      const key = `${d.collection}\u0000${d.id}`;
      if (d.doc === null) store.delete(key);
      else store.put(d, key);
    }
    await done(tx);
  }

  async close(): Promise<void> {
    (await this.db).close();
  }
}
