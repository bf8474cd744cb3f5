// Unit tests without a server: the snapshot diff (a property test against random lists), the
// reconnect backoff, local write application, lossless JSON, the engine's ordering, and the
// write queue's retry decision (against a scripted fetch).
import { test } from "node:test";
import assert from "node:assert/strict";
import { diffDocs, type DocumentSnapshot } from "../src/client/snapshot.js";
import { applyWrite, generateId } from "../src/client/writes.js";
import {
  backoffDelay,
  connect,
  Double,
  HeraldError,
  parseLossless,
  Query,
  stringifyLossless,
  type Doc,
  type WebSocketLike,
} from "../src/index.js";

/** A small deterministic PRNG so failures reproduce. */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function snap(id: string, v: number): DocumentSnapshot {
  return { id, path: `c/${id}`, exists: true, data: { _id: id, v }, metadata: { hasPendingWrites: false, fromCache: false } };
}

test("docChanges applied in order turn the previous docs into the new ones (property, 5000 cases)", () => {
  const cases = Number(process.env.HERALD_SDK_DIFF_CASES ?? 5000);
  for (let seed = 0; seed < cases; seed++) {
    const r = rng(seed);
    const universe = "abcdefghij".split("");
    const pick = () =>
      universe
        .filter(() => r() < 0.6)
        .sort(() => r() - 0.5)
        .map((id) => snap(id, Math.floor(r() * 3)));
    const prev = pick();
    const next = pick();
    const changes = diffDocs(prev, next);
    const list = prev.map((d) => d.id);
    for (const c of changes) {
      if (c.oldIndex >= 0) {
        assert.equal(list[c.oldIndex], c.doc.id, `seed ${seed}: ${c.kind} ${c.doc.id} at ${c.oldIndex}`);
        list.splice(c.oldIndex, 1);
      }
      if (c.newIndex >= 0) list.splice(c.newIndex, 0, c.doc.id);
      assert.equal(c.type, { add: "added", remove: "removed", change: "modified", changeIndex: "modified" }[c.kind]);
    }
    assert.deepEqual(list, next.map((d) => d.id), `seed ${seed}`);
    // Every document whose content changed is reported; unchanged ones in place are not.
    const before = new Map(prev.map((d) => [d.id, d.data?.v]));
    for (const d of next) {
      const reported = changes.some((c) => c.doc.id === d.id);
      if (before.has(d.id) && before.get(d.id) !== d.data?.v) assert.ok(reported, `seed ${seed}: change of ${d.id}`);
    }
    assert.equal(new Set(changes.map((c) => c.doc.id)).size, changes.length, "one edit per document");
  }
});

test("a single document moving is one changeIndex, not a cascade", () => {
  const prev = [snap("c", 0), snap("a", 1), snap("b", 2)];
  const next = [snap("a", 1), snap("b", 2), snap("c", 5)];
  const changes = diffDocs(prev, next).map((c) => `${c.kind} ${c.doc.id} ${c.oldIndex}>${c.newIndex}`);
  assert.deepEqual(changes, ["changeIndex c 0>2"]);
});

test("backoff grows exponentially with full jitter and a ceiling", () => {
  const b = { initialMs: 100, maxMs: 2000 };
  assert.equal(backoffDelay(0, b, () => 0.999999), 99);
  assert.equal(backoffDelay(3, b, () => 0.999999), 799);
  assert.equal(backoffDelay(10, b, () => 0.999999), 1999);
  assert.equal(backoffDelay(100, b, () => 0.5), 1000);
  assert.equal(backoffDelay(5, b, () => 0), 0);
});

test("local writes: put, update operators, upsert, delete, and unknown bases", () => {
  const base = { _id: "a", n: 1, tags: ["x"] };
  assert.deepEqual(applyWrite({ op: "update", collection: "c", id: "a", update: { $inc: { n: 2 }, $push: { tags: "y" } } }, base, 0), {
    _id: "a",
    n: 3,
    tags: ["x", "y"],
  });
  assert.deepEqual(base, { _id: "a", n: 1, tags: ["x"] }, "the base is not mutated");
  assert.deepEqual(applyWrite({ op: "put", collection: "c", id: "a", doc: { m: 1 } }, base, 0), { _id: "a", m: 1 });
  assert.equal(applyWrite({ op: "delete", collection: "c", id: "a" }, base, 0), null);
  // An update of a document the client has never seen stays unknown; of one known absent, only
  // an upsert creates it.
  assert.equal(applyWrite({ op: "update", collection: "c", id: "a", update: { $set: { n: 1 } } }, undefined, 0), undefined);
  assert.equal(applyWrite({ op: "update", collection: "c", id: "a", update: { $set: { n: 1 } } }, null, 0), null);
  assert.deepEqual(applyWrite({ op: "update", collection: "c", id: "a", update: { $set: { n: 1 } }, upsert: true }, null, 0), { _id: "a", n: 1 });
  // A write the server will refuse leaves the document as it was.
  assert.deepEqual(applyWrite({ op: "update", collection: "c", id: "a", update: { $inc: { tags: 1 } } }, base, 0), base);
});

test("generated ids are 20 alphanumeric characters", () => {
  const ids = new Set(Array.from({ length: 1000 }, generateId));
  assert.equal(ids.size, 1000);
  for (const id of ids) assert.match(id, /^[A-Za-z0-9]{20}$/);
});

test("lossless JSON keeps doubles, big integers and key order", () => {
  const text = '{"b":1.0,"a":9223372036854775807,"c":[2e3,-0.5,"\\u00e9"]}';
  const v = parseLossless(text);
  assert.ok((v as { b: unknown }).b instanceof Double);
  assert.equal((v as { a: unknown }).a, 9223372036854775807n);
  assert.equal(stringifyLossless(v), '{"b":1.0,"a":9223372036854775807,"c":[2000.0,-0.5,"é"]}');
  assert.throws(() => parseLossless("{"), SyntaxError);
});

test("results are ordered by sort keys, then _id, in Herald's type order", () => {
  const docs: Doc[] = [
    { _id: "s", k: "x" },
    { _id: "n", k: null },
    { _id: "m" },
    { _id: "b", k: true },
    { _id: "o", k: { a: 1 } },
    { _id: "a", k: [] },
    { _id: "i2", k: 2 },
    { _id: "i1", k: 1.5 },
    { _id: "arr", k: [3, 0.5] },
  ];
  const q = Query.parse({ sort: { k: 1 }, skip: 1, limit: 6 });
  assert.deepEqual(
    q.run(docs).map((d) => (d as { _id: string })._id),
    ["m", "n", "arr", "i1", "i2", "s"],
  );
  const desc = Query.parse({ sort: { k: -1 } });
  assert.deepEqual(
    desc.run(docs).map((d) => (d as { _id: string })._id),
    ["b", "o", "s", "arr", "i2", "i1", "m", "n", "a"],
  );
});

test("strings compare by code point (UTF-8 byte order), not UTF-16 units", () => {
  const q = Query.parse({ sort: { s: 1 } });
  const docs: Doc[] = [
    { _id: "emoji", s: "\u{1F600}" },
    { _id: "bmp", s: "\uFFFD" },
    { _id: "ascii", s: "z" },
  ];
  assert.deepEqual(
    q.run(docs).map((d) => (d as { _id: string })._id),
    ["ascii", "bmp", "emoji"],
  );
});

/** A WebSocket that never opens: the client stays connecting, writes go over HTTP only. */
class SilentSocket implements WebSocketLike {
  readonly readyState = 0;
  onopen = null;
  onmessage = null;
  onclose = null;
  onerror = null;
  send(): void {}
  close(): void {}
}

/** A client whose `POST /v1/commit` answers come from `answers`, in order; counts attempts. */
function scripted(answers: { status: number; body: unknown }[]): { commits: () => number; h: ReturnType<typeof connect> } {
  let commits = 0;
  const fetch = (async (url: string | URL | Request) => {
    assert.match(String(url), /\/v1\/commit$/);
    const a = answers[Math.min(commits++, answers.length - 1)];
    return new Response(JSON.stringify(a.body), { status: a.status, headers: { "content-type": "application/json" } });
  }) as typeof globalThis.fetch;
  const h = connect({ url: "http://127.0.0.1:1", fetch, WebSocket: SilentSocket, backoff: { initialMs: 10, maxMs: 20 } });
  return { commits: () => commits, h };
}

const corrupted = (extra: object) => ({
  status: 500,
  body: { error: { code: "storage_corrupted", message: "the data file is corrupted", ...extra } },
});

test("a non-retryable 500 (storage_corrupted) rejects the write at once and is not retried", async () => {
  // With the body's `retryable` and without it (then the error table decides).
  for (const extra of [{ retryable: false }, {}]) {
    const { h, commits } = scripted([corrupted(extra)]);
    const rejected: string[] = [];
    h.onWriteRejected((e) => rejected.push(e.code));
    await assert.rejects(h.set(h.doc("c/a"), { n: 1 }), (e: unknown) => e instanceof HeraldError && e.code === "storage_corrupted");
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(commits(), 1, `retried ${JSON.stringify(extra)}`);
    assert.deepEqual(rejected, ["storage_corrupted"]);
    await h.close();
  }
});

test("a retryable error (overloaded) keeps the write queued and sends it again with the same id", async () => {
  const ok = { status: 200, body: { seq: 7, results: [{ op: "insert", collection: "c", id: "a", version: 1 }] } };
  const overloaded = { status: 503, body: { error: { code: "overloaded", message: "retry later", retryable: true } } };
  const { h, commits } = scripted([overloaded, overloaded, ok]);
  const r = await h.set(h.doc("c/a"), { n: 1 });
  assert.equal(r.seq, 7);
  assert.equal(commits(), 3);
  await h.close();
});

test("after an acknowledged write, queries and document reads carry minSeq (read-your-writes on any node)", async () => {
  const seen: { url: string; body: unknown }[] = [];
  const fetch = (async (url: string | URL | Request, init?: RequestInit) => {
    const u = String(url);
    const body = typeof init?.body === "string" ? (JSON.parse(init.body) as unknown) : undefined;
    seen.push({ url: u, body });
    const answer = u.endsWith("/v1/commit")
      ? { seq: 42, results: [{ op: "insert", collection: "c", id: "a", version: 1 }] }
      : u.includes("/v1/query")
        ? { docs: [], seq: 42 }
        : { _id: "a", n: 1 };
    return new Response(JSON.stringify(answer), { status: 200, headers: { "content-type": "application/json" } });
  }) as typeof globalThis.fetch;
  const h = connect({ url: "http://127.0.0.1:1", fetch, WebSocket: SilentSocket });
  // Before any write: no minSeq.
  await h.get(h.query("c"));
  assert.equal((seen.at(-1)!.body as { minSeq?: number }).minSeq, undefined);
  await h.set(h.doc("c/a"), { n: 1 });
  await h.get(h.query("c"));
  assert.equal((seen.at(-1)!.body as { minSeq?: number }).minSeq, 42);
  await h.get(h.doc("c/a"));
  assert.match(seen.at(-1)!.url, /\/v1\/docs\/c\/a\?minSeq=42$/);
  await h.close();
});

test("cursors: pages after a document in the query's own order, and a bad cursor fails when built", () => {
  const docs: Doc[] = [1700, 1800, 1700, 1600, 1900].map((ts, i) => ({ _id: `m${i}`, ts }));
  const ids = (spec: object) => Query.parse(spec).run(docs).map((d) => (d as { _id: string })._id);
  assert.deepEqual(ids({ sort: { ts: -1 }, limit: 2 }), ["m4", "m1"]);
  assert.deepEqual(ids({ sort: { ts: -1 }, startAfter: [1800, "m1"], limit: 2 }), ["m0", "m2"]);
  assert.deepEqual(ids({ sort: { ts: -1 }, startAfter: [1700] }), ["m3"]);
  assert.deepEqual(ids({ sort: { ts: -1 }, startAt: [1800], endBefore: [1700] }), ["m1"]);
  assert.deepEqual(ids({ startAfter: ["m2"] }), ["m3", "m4"]);
  assert.throws(
    () => Query.parse({ sort: { ts: 1 }, startAt: [1, "a", 2] }),
    (e: unknown) => (e as { code?: string }).code === "bad_query",
  );
});

test("a query's cursors are sent to the server", async () => {
  const bodies: unknown[] = [];
  const fetch = (async (url: string | URL | Request, init?: RequestInit) => {
    if (typeof init?.body === "string") bodies.push(JSON.parse(init.body));
    assert.match(String(url), /\/v1\/query$/);
    return new Response(JSON.stringify({ docs: [], seq: 1 }), { status: 200, headers: { "content-type": "application/json" } });
  }) as typeof globalThis.fetch;
  const h = connect({ url: "http://127.0.0.1:1", fetch, WebSocket: SilentSocket });
  await h.get(h.query("c", { sort: { ts: -1 }, limit: 10, startAfter: [1700, "m9"], endAt: [1000] }));
  const sent = bodies.at(-1) as { startAfter?: unknown; endAt?: unknown };
  assert.deepEqual(sent.startAfter, [1700, "m9"]);
  assert.deepEqual(sent.endAt, [1000]);
  assert.throws(() => h.query("c", { startAt: 5 as unknown as unknown[] }), (e: unknown) => (e as { code?: string }).code === "bad_query");
  await h.close();
});

/** Rooms r0..r3 with messages m0..m5 (`ts` = the message's number): every (ts, _id) repeats
 * in each room, so only `_path` orders the ties. */
function groupDocs(): Doc[] {
  const docs: Doc[] = [];
  for (let r = 0; r < 4; r++)
    for (let m = 0; m < 6; m++) docs.push({ _id: `m${m}`, ts: m, _path: `rooms/r${r}/messages/m${m}` });
  return docs;
}

test("group cursors: positions in the group's order (sort, _id, _path), exact on ties of _id", () => {
  const docs = groupDocs();
  const random = rng(7);
  for (const sort of [{ ts: -1 }, { ts: 1, _id: -1 }, undefined]) {
    const q = Query.parseGroup({ sort });
    const order = q.order.sort(docs.filter((d) => q.matches(d)));
    assert.equal(order.length, docs.length);
    const position = (d: Doc) => [...q.order.keys.map((k) => d[k.path.dotted] as unknown)];
    for (let i = 0; i < 40; i++) {
      const k = Math.floor(random() * order.length);
      const at = position(order[k]);
      const paths = (spec: object) =>
        q.order
          .sort(docs.filter((d) => Query.parseGroup({ sort, ...spec }).matches(d)))
          .map((d) => d._path);
      const want = order.map((d) => d._path);
      assert.deepEqual(paths({ startAt: at }), want.slice(k));
      assert.deepEqual(paths({ startAfter: at }), want.slice(k + 1));
      assert.deepEqual(paths({ endAt: at }), want.slice(0, k + 1));
      assert.deepEqual(paths({ endBefore: at }), want.slice(0, k));
      // Without the path, a cursor covers the (sort, _id) tie in every collection.
      const tie = order.filter((d) => q.sort.compare(d, order[k]) === 0).map((d) => d._path);
      assert.equal(tie.length, 4);
      assert.deepEqual(paths({ startAfter: at.slice(0, -1) }), want.slice(want.indexOf(tie[3]) + 1));
    }
  }
  const bad = (spec: object, says: string) =>
    assert.throws(
      () => Query.parseGroup(spec),
      (e: unknown) => (e as { code?: string }).code === "bad_query" && String((e as Error).message).includes(says),
    );
  bad({ sort: { ts: 1 }, startAt: [1, "m1", "rooms/r0/messages/m1", 4] }, "then a _path");
  bad({ sort: { ts: 1 }, startAfter: [1, "m1", 7] }, "for _path");
  bad({ endBefore: ["m1", ""] }, "for _path");
  // A collection query's cursor still ends at the `_id`.
  assert.throws(() => Query.parse({ sort: { ts: 1 }, startAt: [1, "m1", "rooms/r0/messages/m1"] }));
});

test("a group query with a cursor is answered offline from the cache, in the group's order", async () => {
  let online = true;
  const bodies: unknown[] = [];
  const fetch = (async (url: string | URL | Request, init?: RequestInit) => {
    assert.match(String(url), /\/v1\/query$/);
    if (typeof init?.body === "string") bodies.push(JSON.parse(init.body));
    if (!online) throw new TypeError("fetch failed");
    return new Response(JSON.stringify({ docs: groupDocs(), seq: 1 }), { status: 200, headers: { "content-type": "application/json" } });
  }) as typeof globalThis.fetch;
  const h = connect({ url: "http://127.0.0.1:1", fetch, WebSocket: SilentSocket });
  try {
    await groupPageOffline(h, () => (online = false), bodies);
  } finally {
    await h.close();
  }
});

async function groupPageOffline(h: ReturnType<typeof connect>, offline: () => void, bodies: unknown[]): Promise<void> {
  const all = await h.get(h.query(h.collectionGroup("messages")));
  assert.equal(all.docs.length, 24);
  offline();
  const spec = { sort: { ts: -1 as const }, startAfter: [4, "m4", "rooms/r1/messages/m4"], limit: 3 };
  const page = await h.get(h.query(h.collectionGroup("messages"), spec));
  assert.deepEqual(bodies.at(-1), { collectionGroup: "messages", ...spec });
  assert.equal(page.metadata.fromCache, true);
  assert.deepEqual(
    page.docs.map((d) => d.path),
    ["rooms/r2/messages/m4", "rooms/r3/messages/m4", "rooms/r0/messages/m3"],
  );
  assert.throws(
    () => h.query(h.collectionGroup("messages"), { startAt: ["m1", 3] }),
    (e: unknown) => (e as { code?: string }).code === "bad_query",
  );
}
