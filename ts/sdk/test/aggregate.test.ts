// Live aggregations through the SDK against a real `herald serve`: `onAggregate` gets the
// server's rows, then one snapshot per commit with the row edits (ids are the rows' `_id` as JSON
// text), resumes across a network cut, and reports a refused pipeline with its code; over a
// collection group, the rows `aggregate` returns for the group (input documents with `_path`).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { HeraldError, type AggregateSnapshot, type Doc, type Herald } from "../src/index.js";
import { client, HeraldServer, Proxy, waitState } from "./harness.js";

let server: HeraldServer;
let proxy: Proxy;
const open: Herald[] = [];

before(async () => {
  server = await HeraldServer.start();
  proxy = await Proxy.start(server.port);
});

after(async () => {
  for (const h of open) await h.close();
  await proxy.close();
  await server.destroy();
});

/** Snapshots (and errors) in arrival order. */
class Rows {
  private readonly seen: (AggregateSnapshot | Error)[] = [];
  private wake: (() => void) | undefined;
  next = (s: AggregateSnapshot): void => this.push(s);
  error = (e: Error): void => this.push(e);
  private push(x: AggregateSnapshot | Error): void {
    this.seen.push(x);
    this.wake?.();
  }
  async take(timeoutMs = 5000): Promise<AggregateSnapshot | Error> {
    const deadline = Date.now() + timeoutMs;
    while (this.seen.length === 0) {
      if (Date.now() > deadline) throw new Error("no snapshot in time");
      await new Promise<void>((r) => {
        this.wake = r;
        setTimeout(r, 50);
      });
    }
    return this.seen.shift()!;
  }
  async snap(): Promise<AggregateSnapshot> {
    const s = await this.take();
    if (s instanceof Error) throw s;
    return s;
  }
}

const put = (c: string, id: string, doc: object) => server.http("PUT", `/v1/docs/${c}/${id}`, doc);
const edits = (s: AggregateSnapshot) => s.changes.map((c) => `${c.type} ${c.id} ${c.oldIndex}>${c.newIndex}`);

test("a live aggregation's rows follow every commit and resume after a cut", async () => {
  proxy.up();
  const h = client(proxy.url);
  open.push(h);
  await waitState(h, "online");
  const c = "agg1";
  await put(c, "a", { room: "r1", v: 2 });
  await put(c, "b", { room: "r2", v: 1.5 });
  const r = new Rows();
  h.onAggregate<{ _id: string; n: number; s: number }>(
    c,
    [{ $group: { _id: "$room", n: { $count: {} }, s: { $sum: "$v" } } }, { $sort: { n: -1 } }],
    r.next,
    r.error,
  );
  let s = await r.snap();
  assert.deepEqual(s.rows, [
    { _id: "r1", n: 1, s: 2 },
    { _id: "r2", n: 1, s: 1.5 },
  ]);
  await put(c, "c", { room: "r2", v: 1 });
  s = await r.snap();
  assert.deepEqual(s.rows, [
    { _id: "r2", n: 2, s: 2.5 },
    { _id: "r1", n: 1, s: 2 },
  ]);
  assert.deepEqual(edits(s), ['modified "r2" 1>0']);
  // Cut: a change made meanwhile arrives on resume, as an edit of the rows.
  proxy.down();
  await waitState(h, "offline");
  await server.http("DELETE", `/v1/docs/${c}/a`);
  proxy.up();
  s = await r.snap();
  assert.deepEqual(s.rows, [{ _id: "r2", n: 2, s: 2.5 }]);
  assert.deepEqual(edits(s), ['removed "r1" 1>-1']);
  // A pipeline the server cannot maintain reaches `error` with its code.
  const bad = new Rows();
  h.onAggregate(c, [{ $limit: 1 }, { $group: { _id: null } }], bad.next, bad.error);
  const e = await bad.take();
  assert.ok(e instanceof HeraldError && e.code === "unsupported_live", String(e));
});

test("a live aggregation over a collection group equals the pull one, with _path", async () => {
  proxy.up();
  const h = client(proxy.url);
  open.push(h);
  await waitState(h, "online");
  const g = "gaggmsgs";
  await put(`rooms/r1/${g}`, "m1", { author: "ann", ts: 1 });
  await put(`rooms/r2/${g}`, "m1", { author: "bob", ts: 2 });
  await put(g, "m2", { author: "ann", ts: 3 });
  await put("rooms/r1/other", "m3", { author: "ann", ts: 4 });
  const pipeline: Doc[] = [{ $sort: { ts: 1 } }, { $group: { _id: "$author", n: { $count: {} }, paths: { $push: "$_path" } } }];
  const r = new Rows();
  h.onAggregate(h.collectionGroup(g), pipeline, r.next, r.error);
  let s = await r.snap();
  assert.deepEqual(s.rows, [
    { _id: "ann", n: 2, paths: [`rooms/r1/${g}/m1`, `${g}/m2`] },
    { _id: "bob", n: 1, paths: [`rooms/r2/${g}/m1`] },
  ]);
  const pulled = await h.aggregate(h.collectionGroup(g), pipeline);
  assert.deepEqual([pulled.docs, pulled.seq], [s.rows, s.seq]);
  // A collection of the group created after the subscription.
  await put(`late/x/${g}`, "m1", { author: "bob", ts: 5 });
  s = await r.snap();
  assert.deepEqual(s.rows[1], { _id: "bob", n: 2, paths: [`rooms/r2/${g}/m1`, `late/x/${g}/m1`] });
  assert.deepEqual(edits(s), ['modified "bob" 1>1']);
  // Rows keyed by each document's full path.
  const byPath = new Rows();
  h.onAggregate(h.collectionGroup(g), [{ $group: { _id: "$_path", ts: { $max: "$ts" } } }], byPath.next, byPath.error);
  const p = await byPath.snap();
  assert.deepEqual(
    p.rows.map((x) => x._id),
    [g, `late/x/${g}`, `rooms/r1/${g}`, `rooms/r2/${g}`].map((c) => `${c}/${c === g ? "m2" : "m1"}`),
  );
  // Cut: a delete made meanwhile arrives on resume, as an edit of the rows.
  proxy.down();
  await waitState(h, "offline");
  await server.http("DELETE", `/v1/docs/rooms/r1/${g}/m1`);
  proxy.up();
  s = await r.snap();
  assert.deepEqual(s.rows[0], { _id: "ann", n: 1, paths: [`${g}/m2`] });
  assert.deepEqual(edits(s), ['modified "ann" 0>0']);
  assert.deepEqual((await h.aggregate(h.collectionGroup(g), pipeline)).docs, s.rows);
  // A shape the server cannot maintain is refused as for a collection.
  const bad = new Rows();
  h.onAggregate(h.collectionGroup(g), [{ $limit: 1 }, { $group: { _id: null } }], bad.next, bad.error);
  const e = await bad.take();
  assert.ok(e instanceof HeraldError && e.code === "unsupported_live", String(e));
});
