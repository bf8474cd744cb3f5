// The SDK's administration calls against a real `herald serve`: collections, explain, trigger
// queues and dead letters (list, retry, purge), metrics; and the Prometheus parser alone.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { HeraldServer, client, sleep } from "./harness.js";
import { HeraldError, parsePrometheus, type Herald } from "../src/index.js";

let server: HeraldServer;
let db: Herald;

before(async () => {
  server = await HeraldServer.start();
  db = client(server.url);
});

after(async () => {
  await db.close();
  await server.destroy();
});

test("parsePrometheus reads samples, labels (escaped) and special values; skips comments", () => {
  const text = [
    "# HELP herald_seq The last committed sequence number.",
    "# TYPE herald_seq gauge",
    "herald_seq 42",
    'herald_trigger_pending_tasks{trigger="a\\"b\\\\c"} 3',
    'h_bucket{le="0.5",x="y"} 7 1700000000000',
    'h_bucket{le="+Inf"} +Inf',
    "not a sample line at all {",
    "",
  ].join("\n");
  assert.deepEqual(parsePrometheus(text), [
    { name: "herald_seq", labels: {}, value: 42 },
    { name: "herald_trigger_pending_tasks", labels: { trigger: 'a"b\\c' }, value: 3 },
    { name: "h_bucket", labels: { le: "0.5", x: "y" }, value: 7 },
    { name: "h_bucket", labels: { le: "+Inf" }, value: Infinity },
  ]);
});

test("listCollections names every collection with documents, in byte order", async () => {
  await server.http("PUT", "/v1/docs/zeta/a", { n: 1 });
  await server.http("PUT", "/v1/docs/alpha/a", { n: 1 });
  await server.http("PUT", "/v1/docs/alpha/b", { n: 2 });
  await server.http("PUT", "/v1/docs/rooms/r1/messages/m1", { n: 2 });
  assert.deepEqual(await db.listCollections(), [{ name: "alpha" }, { name: "rooms/r1/messages" }, { name: "zeta" }]);
});

test("explain runs the query on the server and reports its plan", async () => {
  const r = await db.explain(db.query("alpha", { filter: { n: { $gte: 2 } }, sort: { n: -1 }, projection: { n: 1 } }));
  assert.deepEqual(r.docs, [{ _id: "b", n: 2 }]);
  assert.equal(r.explain.returned, 1);
  assert.equal(typeof r.explain.plan.type, "string");
  assert.ok(r.seq >= 4);
  await assert.rejects(db.explain(db.query("bad path/..", {})), (e: unknown) => e instanceof HeraldError && e.code === "bad_path");
});

test("triggers, dead letters, retry and purge", async () => {
  await server.http("PUT", "/v1/triggers/boom", {
    collection: "jobs",
    on: ["insert"],
    maxAttempts: 1,
    function: "function (event, db) { throw new Error('boom ' + event.id); }",
  });
  await server.http("PUT", "/v1/docs/jobs/j1", { n: 1 });
  await server.http("PUT", "/v1/docs/jobs/j2", { n: 2 });
  let dead = await db.deadLetters("boom");
  for (let i = 0; i < 100 && dead.length < 2; i++) {
    await sleep(50);
    dead = await db.deadLetters("boom");
  }
  assert.deepEqual(dead.map((d) => d.id), ["j1", "j2"]);
  assert.match(dead[0].lastError ?? "", /boom j1/);
  const t = await db.trigger("boom");
  assert.equal(t.name, "boom");
  assert.equal(t.dead, 2);
  assert.ok(t.recentErrors.length >= 1);
  assert.deepEqual((await db.triggers()).map((x) => x.name), ["boom"]);
  assert.deepEqual((await db.deadLetters("boom", { limit: 1 })).map((d) => d.id), ["j1"]);

  // Retried, the task fails again (one attempt) and comes back as a dead letter.
  assert.equal(await db.retryDead("boom", [dead[0].task]), 1);
  assert.equal(await db.purgeDead("boom", [dead[1].task]), 1);
  for (let i = 0; i < 100; i++) {
    dead = await db.deadLetters("boom");
    if (dead.length === 1 && dead[0].attempts >= 1 && (await db.trigger("boom")).pending === 0) break;
    await sleep(50);
  }
  assert.deepEqual(dead.map((d) => d.id), ["j1"]);
  assert.equal(await db.purgeDead("boom"), 1);
  assert.deepEqual(await db.deadLetters("boom"), []);
  await assert.rejects(db.trigger("nope"), (e: unknown) => e instanceof HeraldError && e.code === "trigger_not_found" && e.status === 404);
});

test("metrics parses the server's exposition, including the notification latency histogram", async () => {
  const samples = await db.metrics();
  const seq = samples.find((s) => s.name === "herald_seq");
  assert.ok(seq !== undefined && seq.value >= 4);
  assert.ok(samples.some((s) => s.name === "herald_live_notify_latency_seconds_count"));
  assert.ok(samples.some((s) => s.name === "herald_trigger_failed_total" && s.labels.trigger === "boom"));
});
