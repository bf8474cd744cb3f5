// End-to-end test of the web console in headless Chromium (Debian's `chromium` driven by
// playwright-core): a real `herald serve` on a free port with a temporary data dir serves
// /console; the test writes through the HTTP API (fetch from Node) and checks what the page
// shows: the live query's rows appearing, moving and disappearing in their positions, the
// document browser and editor, the query pane with explain, the trigger queues and dead
// letters, the cluster pane, the charts, and a secured server with a token. It saves a screenshot
// (CONSOLE_SCREENSHOT, default build/console.png).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { chromium, type Browser, type Page } from "playwright-core";

function heraldBinary(): string {
  const candidates = [
    process.env.HERALD_BIN,
    process.env.CARGO_TARGET_DIR && join(process.env.CARGO_TARGET_DIR, "debug", "herald"),
    resolve(process.cwd(), "../../target/debug/herald"),
  ].filter((x): x is string => typeof x === "string" && x.length > 0);
  const found = candidates.find((c) => existsSync(c));
  if (found === undefined) throw new Error(`herald binary not found (tried ${candidates.join(", ")}); set HERALD_BIN`);
  return found;
}

/** A `herald serve` child on 127.0.0.1 with a free port and a temporary data dir. */
class Server {
  private constructor(
    readonly child: ChildProcess,
    readonly dir: string,
    readonly url: string,
    private readonly token?: string,
  ) {}

  static async start(extraArgs: string[] = [], token?: string): Promise<Server> {
    const dir = mkdtempSync(join(tmpdir(), "herald-console-e2e-"));
    const args = ["serve", "--data", join(dir, "data"), "--listen", "127.0.0.1:0", "--durability", "nosync"];
    if (token !== undefined) {
      writeFileSync(join(dir, "admin.key"), token);
      args.push("--admin-key-file", join(dir, "admin.key"));
    }
    const child = spawn(heraldBinary(), [...args, ...extraArgs], { stdio: ["ignore", "ignore", "pipe"] });
    const url = await new Promise<string>((ok, fail) => {
      let err = "";
      const timer = setTimeout(() => fail(new Error(`herald did not start: ${err}`)), 20_000);
      child.stderr!.on("data", (b: Buffer) => {
        err += b.toString();
        const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(err);
        if (m) {
          clearTimeout(timer);
          ok(m[1]);
        }
      });
      child.on("exit", (code) => fail(new Error(`herald exited with ${code}: ${err}`)));
    });
    return new Server(child, dir, url, token);
  }

  /** A request straight to the HTTP API (another client than the console). */
  async http(method: string, path: string, body?: unknown): Promise<Record<string, unknown>> {
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (this.token !== undefined) headers.authorization = `Bearer ${this.token}`;
    const res = await fetch(this.url + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const json = (await res.json()) as Record<string, unknown>;
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
    return json;
  }

  async stop(): Promise<void> {
    if (this.child.exitCode === null) {
      await new Promise<void>((r) => {
        this.child.once("exit", () => r());
        this.child.kill("SIGTERM");
      });
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

let browser: Browser;
let server: Server;
let page: Page;

before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_BIN ?? "/usr/bin/chromium",
    headless: true,
    // Root in a container has no user namespaces for Chromium's sandbox.
    args: ["--no-sandbox", "--disable-dev-shm-usage"],
  });
  server = await Server.start();
  page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => {
    // Chromium logs every non-2xx answer; the tests provoke some (a refused save) on purpose.
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) errors.push(m.text());
  });
  (globalThis as { pageErrors?: string[] }).pageErrors = errors;
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

function pageErrors(): string[] {
  return (globalThis as { pageErrors?: string[] }).pageErrors ?? [];
}

/** The ids of the live pane's rows that count (removed rows fading out excluded), in order. */
function liveIds(): Promise<string[]> {
  return page.$$eval("#live-rows li[data-id]:not(.removing)", (els) => els.map((e) => e.getAttribute("data-id") ?? ""));
}

async function waitLive(expected: string[], what: string): Promise<void> {
  try {
    await page.waitForFunction(
      (want) =>
        [...document.querySelectorAll("#live-rows li[data-id]:not(.removing)")].map((e) => e.getAttribute("data-id")).join(",") === want,
      expected.join(","),
      { timeout: 5000 },
    );
  } catch {
    assert.fail(`${what}: live rows are ${JSON.stringify(await liveIds())}, expected ${JSON.stringify(expected)}`);
  }
}

async function tab(name: string): Promise<void> {
  await page.click(`#tabs button[data-tab="${name}"]`);
}

test("the server serves the console page and its assets with their content types", async () => {
  for (const [path, type] of [
    ["/console", "text/html"],
    ["/console/", "text/html"],
    ["/console/console.js", "text/javascript"],
    ["/console/console.css", "text/css"],
  ]) {
    const res = await fetch(server.url + path);
    assert.equal(res.status, 200, path);
    assert.ok(res.headers.get("content-type")?.startsWith(type), `${path}: ${res.headers.get("content-type")}`);
  }
  assert.equal((await fetch(server.url + "/console/nope.js")).status, 404);
  // The binary embeds the committed bundle (a stale binary would test an old console).
  const served = Buffer.from(await (await fetch(server.url + "/console/console.js")).arrayBuffer());
  assert.ok(served.equals(readFileSync("../../crates/server/console/console.js")), "the server embeds crates/server/console/console.js");
});

test("the page loads and connects", async () => {
  await page.goto(`${server.url}/console`);
  await page.waitForSelector("#conn-state.online", { timeout: 10_000 });
  assert.deepEqual(pageErrors(), []);
});

test("document browser: collections, documents, edit and save with errors shown", async () => {
  for (const [id, v] of [["a", 10], ["b", 20], ["c", 30]] as const) await server.http("PUT", `/v1/docs/scores/${id}`, { v });
  await server.http("PUT", "/v1/docs/rooms/r1/messages/m1", { text: "hi" });
  await page.click("#collections-refresh");
  await page.waitForSelector('#collections li[data-name="rooms/r1/messages"]');
  assert.deepEqual(
    await page.$$eval("#collections li", (els) => els.map((e) => e.getAttribute("data-name"))),
    ["rooms/r1/messages", "scores"],
  );
  await page.click('#collections li[data-name="scores"] button');
  await page.waitForFunction(() => document.querySelectorAll("#docs-table tbody tr").length === 3);
  assert.deepEqual(await page.$$eval("#docs-table tbody tr", (els) => els.map((e) => e.getAttribute("data-id"))), ["a", "b", "c"]);

  await page.click('#docs-table tr[data-id="b"]');
  await page.waitForFunction(() => (document.getElementById("doc-json") as HTMLTextAreaElement).value.includes('"v": 20'));
  await page.fill("#doc-json", JSON.stringify({ _id: "b", v: 25, note: "edited" }));
  await page.click("#doc-save");
  await page.waitForSelector("#doc-status.ok");
  assert.match(await page.textContent("#doc-status") ?? "", /saved: version 2/);
  assert.deepEqual(await server.http("GET", "/v1/docs/scores/b"), { _id: "b", v: 25, note: "edited" });
  await page.waitForFunction(() => document.querySelector('#docs-table tr[data-id="b"]')?.textContent?.includes("edited"));

  // The server's refusal and malformed JSON are shown, and nothing changes.
  await page.fill("#doc-json", JSON.stringify({ _id: "other", v: 1 }));
  await page.click("#doc-save");
  await page.waitForSelector("#doc-status.error");
  assert.match(await page.textContent("#doc-status") ?? "", /id_mismatch/);
  await page.fill("#doc-json", "{ not json");
  await page.click("#doc-save");
  await page.waitForFunction(() => /not valid|JSON/i.test(document.getElementById("doc-status")?.textContent ?? ""));
  assert.deepEqual(await server.http("GET", "/v1/docs/scores/b"), { _id: "b", v: 25, note: "edited" });
});

test("query with explain", async () => {
  await tab("query");
  assert.equal(await page.inputValue("#q-collection"), "scores");
  await page.fill("#q-filter", '{"v": {"$gte": 20}}');
  await page.fill("#q-sort", '{"v": -1}');
  await page.fill("#q-projection", '{"v": 1}');
  await page.fill("#q-limit", "2");
  await page.click("#q-run");
  await page.waitForSelector("#q-status.ok");
  assert.deepEqual(await page.$$eval("#q-results tbody tr", (els) => els.map((e) => e.getAttribute("data-id"))), ["c", "b"]);
  const explain = JSON.parse((await page.textContent("#q-explain")) ?? "{}") as { plan: { type: string }; returned: number };
  assert.equal(explain.returned, 2);
  assert.equal(typeof explain.plan.type, "string");
  // A malformed query is refused with its stable code.
  await page.fill("#q-sort", '{"v": 7}');
  await page.click("#q-run");
  await page.waitForSelector("#q-status.error");
  assert.match(await page.textContent("#q-status") ?? "", /bad_sort/);
});

test("live query: rows appear, change, move and disappear in their positions", async () => {
  await tab("live");
  assert.equal(await page.inputValue("#l-collection"), "scores");
  await page.fill("#l-sort", '{"v": -1}');
  await page.fill("#l-limit", "3");
  await page.click("#l-subscribe");
  // scores: a 10, b 25, c 30.
  await waitLive(["c", "b", "a"], "initial");

  await server.http("PUT", "/v1/docs/scores/d", { v: 27 });
  await waitLive(["c", "d", "b"], "d added between c and b, a pushed out of the window");
  assert.ok(await page.$('#live-rows li[data-id="d"].flash-add'), "the added row is highlighted");
  assert.ok(await page.$('#live-rows li[data-id="a"].removing'), "the row that left fades out");

  await server.http("PATCH", "/v1/docs/scores/a", { $set: { v: 100 } });
  await waitLive(["a", "c", "d"], "a enters at the top");

  await server.http("PATCH", "/v1/docs/scores/c", { $set: { v: 26 } });
  await waitLive(["a", "d", "c"], "c moves below d");
  // One move: c down or d up, as the SDK's fewest-moves diff picks.
  assert.ok(await page.$("#live-rows li.flash-changeIndex"), "the moved row is highlighted");

  await server.http("PATCH", "/v1/docs/scores/d", { $set: { tag: "in place" } });
  await page.waitForFunction(() => document.querySelector('#live-rows li[data-id="d"]')?.textContent?.includes("in place"));
  await waitLive(["a", "d", "c"], "a change in place keeps positions");
  assert.ok(await page.$('#live-rows li[data-id="d"].flash-change'), "the changed row is highlighted");

  await server.http("DELETE", "/v1/docs/scores/a");
  await waitLive(["d", "c", "b"], "a removed, b refilled at the bottom");

  const log = await page.$$eval("#live-log li", (els) => els.map((e) => e.textContent ?? ""));
  for (const kind of ["add", "change", "changeIndex", "remove"]) {
    assert.ok(log.some((l) => new RegExp(`: ${kind} `).test(l)), `the log shows a ${kind}: ${JSON.stringify(log)}`);
  }
  assert.deepEqual(pageErrors(), []);
});

test("charts show the write rate and the notification latency from /metrics", async () => {
  // Keep writing (each one a change in the live window) until both readings show numbers.
  const deadline = Date.now() + 10_000;
  let n = 0;
  for (;;) {
    await server.http("PATCH", "/v1/docs/scores/d", { $set: { n: n++ } });
    const [rate, lat] = await Promise.all([page.textContent("#rate-now"), page.textContent("#lat-now")]);
    if (Number(rate) > 0 && Number.isFinite(Number(lat))) break;
    assert.ok(Date.now() < deadline, `charts show rate ${rate}, latency ${lat}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(((await page.getAttribute("#chart-rate path.s1", "d")) ?? "").length > 0);
  assert.ok(((await page.getAttribute("#chart-latency path.s1", "d")) ?? "").length > 0);
});

test("trigger queues and dead letters: list, retry, purge", async () => {
  await server.http("PUT", "/v1/triggers/boom", {
    collection: "jobs",
    on: ["insert"],
    maxAttempts: 1,
    function: "function (event, db) { throw new Error('boom ' + event.id); }",
  });
  await server.http("PUT", "/v1/docs/jobs/j1", { n: 1 });
  await server.http("PUT", "/v1/docs/jobs/j2", { n: 2 });
  await tab("triggers");
  await page.click("#t-refresh");
  await page.waitForFunction(() => document.querySelector('#t-table tr[data-name="boom"] td.dead')?.textContent === "2", null, { timeout: 8000 });
  assert.match((await page.textContent('#t-table tr[data-name="boom"]')) ?? "", /boom j1|boom j2/);
  await page.waitForFunction(() => document.querySelectorAll("#dead-table tbody tr").length === 2);

  await page.check("#dead-table tbody tr:first-child input");
  await page.click("#dead-purge");
  await page.waitForFunction(() => document.getElementById("dead-status")?.textContent === "purged 1");
  await page.waitForFunction(() => document.querySelectorAll("#dead-table tbody tr").length === 1);
  await page.click("#dead-retry-all");
  await page.waitForFunction(() => document.getElementById("dead-status")?.textContent === "retried 1");
  // Retried with one attempt, it fails again and returns to the dead letters.
  await page.waitForFunction(() => document.querySelector('#t-table tr[data-name="boom"] td.dead')?.textContent === "1", null, { timeout: 8000 });
  await page.click("#dead-purge-all");
  await page.waitForFunction(() => document.getElementById("dead-status")?.textContent === "purged 1");
  await page.waitForFunction(() => document.querySelectorAll("#dead-table tbody tr").length === 0);
});

test("the cluster pane: a single server is the primary of a one-node cluster", async () => {
  await tab("cluster");
  await page.click("#c-refresh");
  await page.waitForFunction(() => document.querySelectorAll("#c-table tbody tr").length === 1, null, { timeout: 8000 });
  const row = (await page.textContent("#c-table tbody tr")) ?? "";
  assert.match(row, /this node/);
  assert.match(row, /primary/);
  assert.match((await page.textContent("#c-status")) ?? "", /single node, epoch 0/);
});

test("screenshot of the live pane", async () => {
  await tab("live");
  await page.fill("#l-limit", "8");
  await page.click("#l-subscribe");
  for (let i = 0; i < 6; i++) await server.http("PUT", `/v1/docs/scores/p${i}`, { v: 20 + i * 3, player: `player ${i}` });
  await waitLive(["p5", "p4", "p3", "d", "c", "p2", "b", "p1"], "more rows");
  // A few seconds of traffic for the charts, then one edit of each kind just before the shot.
  const until = Date.now() + 8000;
  for (let n = 0; Date.now() < until; n++) {
    await server.http("PATCH", `/v1/docs/scores/p${n % 6}`, { $set: { n } });
    await new Promise((r) => setTimeout(r, 30 + (n % 7) * 10));
  }
  await server.http("PATCH", "/v1/docs/scores/p0", { $set: { v: 40 } });
  await waitLive(["p0", "p5", "p4", "p3", "d", "c", "p2", "b"], "p0 enters at the top");
  await server.http("PATCH", "/v1/docs/scores/p3", { $set: { v: 33 } });
  await waitLive(["p0", "p5", "p3", "p4", "d", "c", "p2", "b"], "p3 moves up");
  await server.http("PATCH", "/v1/docs/scores/d", { $set: { tag: "changed" } });
  await server.http("DELETE", "/v1/docs/scores/c");
  await waitLive(["p0", "p5", "p3", "p4", "d", "p2", "b", "p1"], "c removed");
  assert.deepEqual(
    await page.$$eval("#live-rows li[data-id]:not(.removing) .pos", (els) => els.map((e) => e.textContent)),
    ["0", "1", "2", "3", "4", "5", "6", "7"],
    "positions are shown",
  );
  const out = process.env.CONSOLE_SCREENSHOT ?? "build/console.png";
  mkdirSync(dirname(out), { recursive: true });
  await page.screenshot({ path: out });
  assert.deepEqual(pageErrors(), []);
});

test("a secured server: the page is public, the data needs the token", async () => {
  const key = "console-e2e-admin-key-0123456789";
  const secured = await Server.start([], key);
  const p = await browser.newPage();
  try {
    await p.goto(`${secured.url}/console`);
    await p.waitForSelector("#collections-status.error");
    assert.match((await p.textContent("#collections-status")) ?? "", /unauthenticated/);
    await secured.http("PUT", "/v1/docs/secret/s1", { n: 1 });
    await p.fill("#token", key);
    await p.click('#token-form button[type="submit"]');
    await p.waitForSelector('#collections li[data-name="secret"]');
    await p.waitForSelector("#conn-state.online");
  } finally {
    await p.close();
    await secured.stop();
  }
});
