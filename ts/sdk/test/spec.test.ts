// Spec tests in the Firestore style: scripts of user actions, server changes (another client
// writing straight to the server) and network failures (a proxy that cuts, black-holes or
// loses answers), each followed by the exact snapshots the listener must see. They run against
// a real `herald serve` on a free loopback port.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import WebSocket from "ws";
import { HeraldError, type Herald, type WebSocketConstructor } from "../src/index.js";
import { FilePersistence } from "../src/node.js";
import { client, HeraldServer, Proxy, Recorder, sleep, waitState } from "./harness.js";

let server: HeraldServer;
let proxy: Proxy;
const open: Herald[] = [];
let n = 0;

before(async () => {
  server = await HeraldServer.start();
  proxy = await Proxy.start(server.port);
});

after(async () => {
  for (const h of open) await h.close();
  await proxy.close();
  await server.destroy();
});

/** A fresh collection name and a client connected through the proxy. */
async function setup(extra: Parameters<typeof client>[1] = {}): Promise<{ h: Herald; c: string }> {
  proxy.up();
  const h = client(proxy.url, extra);
  open.push(h);
  await waitState(h, "online");
  return { h, c: `spec${++n}` };
}

const put = (c: string, id: string, doc: object) => server.http("PUT", `/v1/docs/${c}/${id}`, doc);

test("server changes arrive as add, change, changeIndex and remove with positions", async () => {
  const { h, c } = await setup();
  await put(c, "a", { n: 1 });
  await put(c, "b", { n: 2 });
  const r = new Recorder();
  h.onSnapshot(h.query(c, { sort: { n: 1 }, limit: 3 }), r.next, r.error, { includeMetadataChanges: true });
  let s = await r.take();
  assert.deepEqual([s.docs, s.changes, s.pending, s.fromCache], [["a", "b"], ["add a -1>0", "add b -1>1"], false, false]);
  await put(c, "c", { n: 0 });
  s = await r.take();
  assert.deepEqual([s.docs, s.changes], [["c", "a", "b"], ["add c -1>0"]]);
  await put(c, "a", { n: 1, tag: "x" });
  s = await r.take();
  assert.deepEqual([s.docs, s.changes], [["c", "a", "b"], ["change a 1>1"]]);
  await put(c, "c", { n: 5 });
  s = await r.take();
  assert.deepEqual([s.docs, s.changes], [["a", "b", "c"], ["changeIndex c 0>2"]]);
  await server.http("DELETE", `/v1/docs/${c}/a`);
  s = await r.take();
  assert.deepEqual([s.docs, s.changes], [["b", "c"], ["remove a 0>-1"]]);
  assert.equal(s.snap.docChanges()[0].type, "removed");
  assert.ok(s.seq > 0);
  await r.quiet();
});

test("collection groups: a pull query and a listen across collections, documents by full path", async () => {
  const { h, c } = await setup();
  const g = `${c}g`;
  await put(`rooms/r1/${g}`, "a", { n: 1 });
  await put(`rooms/r2/${g}`, "a", { n: 2 });
  await put(g, "b", { n: 0 });
  await put(`rooms/r1/${g}x`, "z", { n: 5 });
  const all = await h.get(h.query(h.collectionGroup(g), { sort: { n: 1 } }));
  assert.deepEqual(
    all.docs.map((d) => [d.id, d.path]),
    [["b", `${g}/b`], ["a", `rooms/r1/${g}/a`], ["a", `rooms/r2/${g}/a`]],
  );
  const r = new Recorder();
  h.onSnapshot(h.query(h.collectionGroup(g), { sort: { n: -1 }, limit: 2 }), r.next, r.error);
  let s = await r.take();
  assert.deepEqual(s.snap.docs.map((d) => d.path), [`rooms/r2/${g}/a`, `rooms/r1/${g}/a`]);
  // A collection of the group created after the listen started.
  await put(`x/y/${g}`, "a", { n: 9 });
  s = await r.take();
  assert.deepEqual(s.snap.docs.map((d) => d.path), [`x/y/${g}/a`, `rooms/r2/${g}/a`]);
  assert.equal(s.snap.docs[0].data?._path, `x/y/${g}/a`);
  await r.quiet();
});

test("collection groups offline: the cached group with local writes on top, then confirmed", async () => {
  const { h, c } = await setup();
  const g = `${c}g`;
  await put(`rooms/r1/${g}`, "a", { n: 1 });
  await put(`rooms/r2/${g}`, "b", { n: 2 });
  const r = new Recorder();
  h.onSnapshot(h.query(h.collectionGroup(g), { sort: { n: 1 } }), r.next, r.error, { includeMetadataChanges: true });
  assert.deepEqual((await r.take()).docs, ["a", "b"]);
  proxy.down();
  let s = await r.take();
  assert.deepEqual([s.docs, s.fromCache, s.pending], [["a", "b"], true, false]);
  const w = h.set(h.doc(`rooms/r3/${g}/c`), { n: 0 });
  s = await r.take();
  assert.deepEqual([s.docs, s.changes, s.pending], [["c", "a", "b"], ["add c -1>0"], true]);
  assert.equal(s.snap.docs[0].path, `rooms/r3/${g}/c`);
  // A get while offline answers from the cache, pending write included.
  const got = await h.get(h.query(h.collectionGroup(g), { sort: { n: 1 } }));
  assert.deepEqual(
    [got.docs.map((d) => d.path), got.metadata.fromCache],
    [[`rooms/r3/${g}/c`, `rooms/r1/${g}/a`, `rooms/r2/${g}/b`], true],
  );
  proxy.up();
  s = await r.until((x) => !x.fromCache && !x.pending);
  assert.deepEqual(s.docs, ["c", "a", "b"]);
  await w;
  await r.quiet();
});

test("a local write shows at once with hasPendingWrites, then the server confirms it", async () => {
  const { h, c } = await setup();
  await put(c, "a", { n: 1 });
  const r = new Recorder();
  h.onSnapshot(h.query(c, { sort: { n: -1 } }), r.next, r.error, { includeMetadataChanges: true });
  let s = await r.take();
  assert.deepEqual([s.docs, s.pending], [["a"], false]);
  const write = h.set(h.doc(`${c}/b`), { n: 2 });
  s = await r.take();
  assert.deepEqual([s.docs, s.changes, s.pending, s.fromCache], [["b", "a"], ["add b -1>0"], true, false]);
  assert.equal(s.snap.docs[0].metadata.hasPendingWrites, true);
  assert.equal(s.snap.docs[1].metadata.hasPendingWrites, false);
  const result = await write;
  assert.equal(result.results[0].op, "insert");
  s = await r.take();
  assert.deepEqual([s.docs, s.changes, s.pending], [["b", "a"], [], false]);
  assert.ok(s.seq >= result.seq);
  await r.quiet();
});

test("update operators apply locally and move the document at once", async () => {
  const { h, c } = await setup();
  await put(c, "a", { n: 1 });
  await put(c, "b", { n: 2 });
  const r = new Recorder();
  h.onSnapshot(h.query(c, { sort: { n: -1 } }), r.next, r.error);
  assert.deepEqual((await r.take()).docs, ["b", "a"]);
  const w = h.update(h.doc(`${c}/a`), { $inc: { n: 5 } });
  const s = await r.take();
  assert.deepEqual([s.docs, s.changes, s.pending], [["a", "b"], ["changeIndex a 1>0"], true]);
  assert.equal(s.snap.docs[0].data?.n, 6);
  await w;
  // Without includeMetadataChanges the confirmation (same data) is not a new snapshot.
  await r.quiet();
  assert.equal((await h.get(h.doc(`${c}/a`))).data?.n, 6);
});

test("collection groups with cursors: pages after a full path, and a listen applies the cursor to local writes", async () => {
  const { h, c } = await setup();
  const g = `${c}g`;
  for (const r of ["r1", "r2", "r3"]) await put(`rooms/${r}/${g}`, "a", { n: 1 });
  await put(g, "b", { n: 2 });
  const q = (spec: object) => h.query(h.collectionGroup(g), { sort: { n: 1 }, ...spec });
  const page = await h.get(q({ startAfter: [1, "a", `rooms/r1/${g}/a`], limit: 2 }));
  assert.deepEqual(
    page.docs.map((d) => d.path),
    [`rooms/r2/${g}/a`, `rooms/r3/${g}/a`],
  );
  const last = page.docs[1];
  const next = await h.get(q({ startAfter: [last.data?.n, last.id, last.path], limit: 2 }));
  assert.deepEqual(
    next.docs.map((d) => d.path),
    [`${g}/b`],
  );
  const r = new Recorder();
  h.onSnapshot(q({ startAfter: [1, "a", `rooms/r2/${g}/a`] }), r.next, r.error);
  let s = await r.take();
  assert.deepEqual(
    s.snap.docs.map((d) => d.path),
    [`rooms/r3/${g}/a`, `${g}/b`],
  );
  // A local write at the cursor's (n, _id) before its path stays out; one after it enters.
  await h.set(h.doc(`rooms/r0/${g}/a`), { n: 1 });
  const w = h.set(h.doc(`rooms/r9/${g}/a`), { n: 1 });
  s = await r.until((x) => x.snap.docs.length === 3);
  assert.deepEqual(
    s.snap.docs.map((d) => d.path),
    [`rooms/r3/${g}/a`, `rooms/r9/${g}/a`, `${g}/b`],
  );
  await w;
  const confirmed = await h.get(q({ startAfter: [1, "a", `rooms/r2/${g}/a`] }));
  assert.deepEqual(
    confirmed.docs.map((d) => d.path),
    [`rooms/r3/${g}/a`, `rooms/r9/${g}/a`, `${g}/b`],
  );
  await r.quiet();
});

test("a listen with a cursor: documents enter and leave as their sort keys cross it, locally too", async () => {
  const { h, c } = await setup();
  for (const [id, n] of [["a", 1], ["b", 2], ["c", 3], ["d", 4]] as const) await put(c, id, { n });
  const r = new Recorder();
  h.onSnapshot(h.query(c, { sort: { n: -1 }, startAfter: [3] }), r.next, r.error);
  let s = await r.take();
  assert.deepEqual(s.docs, ["b", "a"]);
  await put(c, "e", { n: 2.5 });
  s = await r.take();
  assert.deepEqual([s.docs, s.changes], [["e", "b", "a"], ["add e -1>0"]]);
  // A local write that moves a document before the cursor takes it out at once.
  const w = h.update(h.doc(`${c}/a`), { $set: { n: 10 } });
  s = await r.take();
  assert.deepEqual([s.docs, s.changes, s.pending], [["e", "b"], ["remove a 2>-1"], true]);
  await w;
  await put(c, "d", { n: 0 });
  s = await r.take();
  assert.deepEqual([s.docs, s.changes], [["e", "b", "d"], ["add d -1>2"]]);
  await r.quiet();
  const page = await h.get(h.query(c, { sort: { n: -1 }, startAfter: [2.5, "e"], limit: 1 }));
  assert.deepEqual(
    page.docs.map((d) => d.id),
    ["b"],
  );
});

test("a refused write is rolled back and its promise rejects with the server's code", async () => {
  const { h, c } = await setup();
  await put(c, "a", { n: 1 });
  const r = new Recorder();
  h.onSnapshot(h.query(c), r.next, r.error, { includeMetadataChanges: true });
  assert.deepEqual((await r.take()).docs, ["a"]);
  const w = h.commit([
    { op: "set", ref: h.doc(`${c}/b`), data: { n: 2 } },
    { op: "remove", ref: h.doc(`${c}/a`), ifVersion: 7 },
  ]);
  let s = await r.take();
  assert.deepEqual([s.docs, s.changes, s.pending], [["b"], ["remove a 0>-1", "add b -1>0"], true]);
  await assert.rejects(w, (e: unknown) => e instanceof HeraldError && e.code === "version_conflict" && e.status === 409);
  s = await r.take();
  assert.deepEqual([s.docs, s.changes, s.pending], [["a"], ["remove b 0>-1", "add a -1>0"], false]);
  // Malformed writes fail locally, before anything is queued.
  await assert.rejects(h.update(h.doc(`${c}/a`), { $inc: { n: "x" } }), (e: unknown) => e instanceof HeraldError && e.code === "type_mismatch");
  await r.quiet();
});

test("offline: cached results with fromCache, queued writes, then resume from seq and confirm once", async () => {
  const { h, c } = await setup();
  await put(c, "a", { n: 1 });
  const r = new Recorder();
  h.onSnapshot(h.query(c, { sort: { n: 1 } }), r.next, r.error, { includeMetadataChanges: true });
  assert.deepEqual((await r.take()).docs, ["a"]);
  proxy.down();
  let s = await r.take();
  assert.deepEqual([s.docs, s.changes, s.fromCache, s.pending], [["a"], [], true, false]);
  // Another client writes while we are offline; we write too.
  await put(c, "z", { n: 26 });
  const w1 = h.update(h.doc(`${c}/a`), { $inc: { n: 10 } });
  s = await r.take();
  assert.deepEqual([s.docs, s.changes, s.fromCache, s.pending], [["a"], ["change a 0>0"], true, true]);
  const w2 = h.set(h.doc(`${c}/b`), { n: 2 });
  s = await r.take();
  assert.deepEqual([s.docs, s.changes, s.pending], [["b", "a"], ["add b -1>0"], true]);
  await sleep(200);
  assert.equal(h.connectionState === "online", false);
  proxy.up();
  // Reconnect: the missed server change arrives (resume), then our writes are confirmed.
  s = await r.until((x) => !x.fromCache && !x.pending && x.docs.length === 3);
  assert.deepEqual(s.docs, ["b", "a", "z"]);
  await Promise.all([w1, w2]);
  const a = await server.http("GET", `/v1/docs/${c}/a`);
  assert.equal(a.n, 11, "the queued $inc applied exactly once");
  await r.quiet();
});

test("a lost acknowledgement is retried with the same mutation id and applies once", async () => {
  const { h, c } = await setup({ requestTimeoutMs: 1000 });
  await put(c, "a", { n: 0 });
  proxy.oneway();
  const w = h.update(h.doc(`${c}/a`), { $inc: { n: 1 } });
  // The request reached the server and committed; the answer is lost.
  for (let i = 0; ; i++) {
    if ((await server.http("GET", `/v1/docs/${c}/a`)).n === 1) break;
    assert.ok(i < 100, "the commit reached the server");
    await sleep(20);
  }
  proxy.down();
  await sleep(100);
  proxy.up();
  const result = await w;
  assert.equal(result.results[0].version, 2);
  await sleep(100);
  assert.equal((await server.http("GET", `/v1/docs/${c}/a`)).n, 1, "applied once, not twice");
});

test("a silent (black-holed) connection is detected by the heartbeat timeout", async () => {
  const { h, c } = await setup({ heartbeatTimeoutMs: 1500 });
  const r = new Recorder();
  h.onSnapshot(h.query(c), r.next, r.error, { includeMetadataChanges: true });
  assert.deepEqual((await r.take()).fromCache, false);
  const states: string[] = [];
  h.onConnectionState((s) => states.push(s));
  proxy.blackhole();
  const s = await r.take(4000);
  assert.equal(s.fromCache, true);
  assert.equal(states[0], "offline");
  proxy.up();
  await waitState(h, "online");
  assert.ok(states.includes("connecting"));
  await put(c, "late", { n: 1 });
  const back = await r.until((x) => x.docs.includes("late"));
  assert.equal(back.fromCache, false);
});

test("document listens see exists, pending and confirmed states", async () => {
  const { h, c } = await setup();
  const seen: string[] = [];
  const ref = h.doc(`${c}/d`);
  let resolveDone: () => void;
  const done = new Promise<void>((r) => (resolveDone = r));
  h.onSnapshot(
    ref,
    (d) => {
      seen.push(`${d.exists}:${String(d.data?.v)}:${d.metadata.hasPendingWrites}`);
      if (seen.length === 3) resolveDone();
    },
    undefined,
    { includeMetadataChanges: true },
  );
  await sleep(200);
  await h.set(ref, { v: 1 });
  await done;
  assert.deepEqual(seen, ["false:undefined:false", "true:1:true", "true:1:false"]);
});

test("closing a client whose socket is still connecting throws nothing", async () => {
  // A server that accepts connections and never answers the WebSocket handshake.
  const { createServer } = await import("node:net");
  const sockets: import("node:net").Socket[] = [];
  const silent = createServer((s) => sockets.push(s));
  await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
  const port = (silent.address() as import("node:net").AddressInfo).port;
  const uncaught: unknown[] = [];
  const onUncaught = (e: unknown) => uncaught.push(e);
  process.on("uncaughtException", onUncaught);
  try {
    const h = client(`ws://127.0.0.1:${port}`);
    await sleep(100);
    assert.equal(h.connectionState, "connecting");
    await h.close();
    await sleep(100);
    assert.deepEqual(uncaught, []);
  } finally {
    process.off("uncaughtException", onUncaught);
    for (const s of sockets) s.destroy();
    await new Promise((r) => silent.close(r));
  }
});

test("the offline queue survives the process (a file) and is sent in order", async () => {
  const file = join(mkdtempSync(join(tmpdir(), "herald-sdk-queue-")), "state.json");
  const { c } = await setup();
  proxy.down();
  const a = client(proxy.url, { persistence: new FilePersistence(file) });
  const ref = a.doc(`${c}/list`);
  void a.set(ref, { items: [] }).catch(() => {});
  for (const i of [1, 2, 3]) void a.update(ref, { $push: { items: i } }).catch(() => {});
  await sleep(100);
  await a.close();
  const stored = JSON.parse(readFileSync(file, "utf8")) as { mutations: unknown[] };
  assert.equal(stored.mutations.length, 4);
  // A new process: the same file, the network back.
  proxy.up();
  const b = client(proxy.url, { persistence: new FilePersistence(file) });
  open.push(b);
  await waitState(b, "online");
  await b.waitForPendingWrites();
  const doc = await server.http("GET", `/v1/docs/${c}/list`);
  assert.deepEqual(doc.items, [1, 2, 3]);
  // Replaying the same file again (as after a crash before the queue was rewritten) applies
  // nothing twice: every mutation id is remembered by the server.
  writeFileSync(file, JSON.stringify({ ...stored, clientId: (stored as { clientId?: string }).clientId }));
  const again = client(proxy.url, { persistence: new FilePersistence(file) });
  open.push(again);
  await waitState(again, "online");
  await sleep(50);
  await again.waitForPendingWrites();
  assert.deepEqual((await server.http("GET", `/v1/docs/${c}/list`)).items, [1, 2, 3]);
});

test("queries are answered from the persisted cache when offline", async () => {
  const file = join(mkdtempSync(join(tmpdir(), "herald-sdk-cache-")), "state.json");
  const { c } = await setup();
  await put(c, "a", { n: 1, t: "x" });
  await put(c, "b", { n: 2, t: "y" });
  const a = client(proxy.url, { persistence: new FilePersistence(file) });
  await waitState(a, "online");
  const r = new Recorder();
  const stop = a.onSnapshot(a.query(c, { sort: { n: 1 } }), r.next);
  assert.deepEqual((await r.take()).docs, ["a", "b"]);
  stop();
  await a.close();
  proxy.down();
  const b = client(proxy.url, { persistence: new FilePersistence(file) });
  open.push(b);
  const r2 = new Recorder();
  b.onSnapshot(b.query(c, { filter: { n: { $gte: 2 } }, projection: { t: 1 } }), r2.next);
  const s = await r2.take();
  assert.deepEqual([s.docs, s.fromCache], [["b"], true]);
  assert.deepEqual(s.snap.docs[0].data, { _id: "b", t: "y" });
  const g = await b.get(b.query(c, { sort: { n: -1 } }));
  assert.deepEqual([g.docs.map((d) => d.id), g.metadata.fromCache], [["b", "a"], true]);
  proxy.up();
});

test("subscriptions resume across a server restart", async () => {
  const { h, c } = await setup();
  await put(c, "a", { n: 1 });
  const r = new Recorder();
  h.onSnapshot(h.query(c, { sort: { n: 1 } }), r.next, r.error, { includeMetadataChanges: true });
  assert.deepEqual((await r.take()).docs, ["a"]);
  await server.restart();
  await r.until((x) => x.fromCache);
  await put(c, "b", { n: 2 });
  const s = await r.until((x) => x.docs.length === 2 && !x.fromCache);
  assert.deepEqual(s.docs, ["a", "b"]);
  assert.deepEqual(r.inconsistencies, []);
});

test("the write queue and the cache are bounded", async () => {
  const { c } = await setup();
  for (const id of ["a", "b", "c"]) await put(c, id, { n: id });
  const h = client(proxy.url, { pendingWritesMax: 2, cacheDocsMax: 2 });
  open.push(h);
  await waitState(h, "online");
  // Three documents received, two kept: the least recently received is forgotten.
  await h.get(h.query(c, { sort: { n: 1 } }));
  proxy.down();
  await waitState(h, "offline");
  const offline = await h.get(h.query(c, { sort: { n: 1 } }));
  assert.deepEqual([offline.docs.map((d) => d.id), offline.metadata.fromCache], [["b", "c"], true]);
  const w1 = h.set(h.doc(`${c}/x`), { n: 1 });
  const w2 = h.set(h.doc(`${c}/y`), { n: 2 });
  await sleep(20);
  await assert.rejects(h.set(h.doc(`${c}/z`), { n: 3 }), (e: unknown) => e instanceof HeraldError && e.code === "limit_exceeded");
  proxy.up();
  await Promise.all([w1, w2]);
  await h.set(h.doc(`${c}/z`), { n: 3 });
});

test("a resume the commit log no longer covers gets reset and a fresh result, then converges", async () => {
  const short = await HeraldServer.start(["--log-retention-count", "2"]);
  const p = await Proxy.start(short.port);
  try {
    // A WebSocket that records the type of every server message.
    const types: string[] = [];
    class SpyWebSocket extends WebSocket {
      constructor(url: string) {
        super(url);
        this.addEventListener("message", (e) => types.push(String(JSON.parse(String(e.data)).type)));
      }
    }
    const h = client(p.url, { WebSocket: SpyWebSocket as unknown as WebSocketConstructor });
    open.push(h);
    await waitState(h, "online");
    const c = "resetspec";
    const put2 = (id: string, doc: object) => short.http("PUT", `/v1/docs/${c}/${id}`, doc);
    await put2("a", { n: 1 });
    const r = new Recorder();
    h.onSnapshot(h.query(c, { sort: { n: 1 }, limit: 2 }), r.next, r.error, { includeMetadataChanges: true });
    assert.deepEqual((await r.take()).docs, ["a"]);
    p.down();
    await r.until((x) => x.fromCache);
    // More commits than the log keeps: the client's seq falls out of the retained window.
    await put2("b", { n: 0 });
    await put2("a", { n: 5 });
    await put2("c", { n: 3 });
    await put2("d", { n: 9 });
    // A restart empties the in-memory feed, so only the (short) durable log could serve the resume.
    await short.restart();
    p.up();
    const s = await r.until((x) => !x.fromCache && x.docs.join() === "b,c");
    assert.deepEqual(s.docs, ["b", "c"]);
    assert.deepEqual(r.inconsistencies, []);
    assert.ok(types.includes("reset"), `the server sent reset (saw ${types.join(" ")})`);
    assert.equal(types.filter((t) => t === "initial").length, 2);
  } finally {
    await p.close();
    await short.destroy();
  }
});

test("a token authenticates HTTP and the WebSocket; a wrong one is reported and its writes refused", async () => {
  const dir = mkdtempSync(join(tmpdir(), "herald-sdk-auth-"));
  const keyFile = join(dir, "admin.key");
  const key = "sdk-test-admin-key-0123456789";
  writeFileSync(keyFile, key);
  const secured = await HeraldServer.start(["--admin-key-file", keyFile]);
  try {
    const c = "authspec";
    const good = client(secured.url, { token: key });
    open.push(good);
    await waitState(good, "online");
    const r = new Recorder();
    good.onSnapshot(good.query(c), r.next, r.error, { includeMetadataChanges: true });
    await r.take();
    await good.set(good.doc(`${c}/a`), { n: 1 });
    assert.deepEqual((await r.until((x) => x.docs.length === 1 && !x.pending)).docs, ["a"]);

    const bad = client(secured.url, { token: "not-the-key-at-all-000000" });
    open.push(bad);
    const errors: string[] = [];
    bad.onConnectionError((e) => errors.push(e.code));
    for (let i = 0; errors.length === 0; i++) {
      assert.ok(i < 100, "the refused token is reported");
      await sleep(20);
    }
    assert.equal(errors[0], "unauthenticated");
    assert.notEqual(bad.connectionState, "online");
    await assert.rejects(bad.set(bad.doc(`${c}/b`), { n: 2 }), (e: unknown) => e instanceof HeraldError && e.status === 401);
  } finally {
    await secured.destroy();
  }
});

test("aggregate runs a pipeline on the server after the client's own writes", async () => {
  const { h, c } = await setup();
  await put(c, "a", { room: "r1", n: 2 });
  await put(c, "b", { room: "r2", n: 5 });
  await h.set(h.doc(`${c}/x`), { room: "r1", n: 1 });
  const r = await h.aggregate(c, [{ $group: { _id: "$room", n: { $sum: "$n" }, c: { $count: {} } } }, { $sort: { _id: 1 } }]);
  assert.deepEqual(r.docs, [{ _id: "r1", n: 3, c: 2 }, { _id: "r2", n: 5, c: 1 }]);
  assert.ok(r.seq >= 3);
  const counted = await h.aggregate(h.collection(c), [{ $match: { n: { $gte: 2 } } }, { $count: "n" }]);
  assert.deepEqual(counted.docs, [{ n: 2 }]);
  await assert.rejects(h.aggregate(c, [{ $out: "x" }]), (e: unknown) => e instanceof HeraldError && e.code === "unknown_operator");
});
