// The persistence implementations keep the write queue and the cache across instances:
// IndexedDB (through fake-indexeddb, a complete in-memory implementation of the API) and the
// Node file.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { IDBFactory } from "fake-indexeddb";
import { IndexedDbPersistence, type Persistence, type StoredMutation } from "../src/index.js";
import { FilePersistence } from "../src/node.js";

const m = (batch: number): StoredMutation => ({
  id: `client:${batch}`,
  batch,
  writes: [{ op: "update", collection: "c", id: "a", update: { $inc: { n: batch } } }],
});

async function roundTrip(make: () => Persistence): Promise<void> {
  const p = make();
  const empty = await p.load();
  assert.deepEqual([empty.clientId, empty.mutations, empty.docs], [undefined, [], []]);
  await p.saveClientId("client");
  for (const b of [1, 2, 3]) await p.addMutation(m(b));
  await p.removeMutation("client:2");
  await p.putDocs([
    { collection: "c", id: "a", doc: { _id: "a", n: 1 } },
    { collection: "c", id: "b", doc: { _id: "b", n: 2 } },
  ]);
  await p.putDocs([{ collection: "c", id: "b", doc: null }]);
  await p.close();
  const again = await make().load();
  assert.equal(again.clientId, "client");
  assert.deepEqual(
    again.mutations.sort((x, y) => x.batch - y.batch),
    [m(1), m(3)],
  );
  assert.deepEqual(again.docs, [{ collection: "c", id: "a", doc: { _id: "a", n: 1 } }]);
}

test("IndexedDbPersistence keeps the queue and the cache", async () => {
  const factory = new IDBFactory();
  await roundTrip(() => new IndexedDbPersistence("herald-test", factory));
});

test("FilePersistence keeps the queue and the cache", async () => {
  const file = join(mkdtempSync(join(tmpdir(), "herald-sdk-file-")), "state.json");
  await roundTrip(() => new FilePersistence(file));
});
