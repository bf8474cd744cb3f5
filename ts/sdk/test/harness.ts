// Test rig: a real `herald serve` on a free loopback port with a temporary data directory, a
// TCP proxy in front of it that can cut or black-hole the network, and a recorder of the
// snapshots a listener sees.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, existsSync } from "node:fs";
import { createServer, connect as tcpConnect, type Server as NetServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import assert from "node:assert/strict";
import WebSocket from "ws";
import { connect, type ConnectOptions, type Herald, type QuerySnapshot, type WebSocketConstructor } from "../src/index.js";

export function heraldBinary(): string {
  const candidates = [
    process.env.HERALD_BIN,
    process.env.CARGO_TARGET_DIR && join(process.env.CARGO_TARGET_DIR, "debug", "herald"),
    resolve(process.cwd(), "../../target/debug/herald"),
  ].filter((x): x is string => typeof x === "string" && x.length > 0);
  const found = candidates.find((c) => existsSync(c));
  if (found === undefined)
    throw new Error(`herald binary not found (tried ${candidates.join(", ")}); run cargo build -p herald or set HERALD_BIN`);
  return found;
}

/** A running `herald serve`, stoppable and restartable on the same port and data. */
export class HeraldServer {
  private child: ChildProcess | undefined;
  port = 0;

  private constructor(
    readonly dataDir: string,
    private readonly extraArgs: string[],
  ) {}

  /** Starts a server; `extraArgs` go to `herald serve` (e.g. a short log retention). */
  static async start(extraArgs: string[] = []): Promise<HeraldServer> {
    const s = new HeraldServer(mkdtempSync(join(tmpdir(), "herald-sdk-test-")), extraArgs);
    await s.launch(0);
    return s;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  private launch(port: number): Promise<void> {
    const child = spawn(
      heraldBinary(),
      ["serve", "--data", join(this.dataDir, "data"), "--listen", `127.0.0.1:${port}`, "--durability", "nosync", ...this.extraArgs],
      { stdio: ["ignore", "ignore", "pipe"] },
    );
    this.child = child;
    return new Promise((resolveStart, reject) => {
      let err = "";
      const timer = setTimeout(() => reject(new Error(`herald did not start: ${err}`)), 20_000);
      child.stderr!.on("data", (b: Buffer) => {
        err += b.toString();
        const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(err);
        if (m && this.port === 0) this.port = Number(m[1]);
        if (m) {
          clearTimeout(timer);
          resolveStart();
        }
      });
      child.on("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`herald exited with ${code}: ${err}`));
      });
    });
  }

  /** Stops the process (SIGTERM, graceful) and waits for it. */
  async stop(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (child === undefined || child.exitCode !== null) return;
    await new Promise<void>((r) => {
      child.once("exit", () => r());
      child.kill("SIGTERM");
    });
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.launch(this.port);
  }

  async destroy(): Promise<void> {
    await this.stop();
    rmSync(this.dataDir, { recursive: true, force: true });
  }

  /** A write straight to the server (another client), bypassing the proxy. */
  async http(method: string, path: string, body?: unknown): Promise<Record<string, unknown>> {
    const res = await fetch(this.url + path, {
      method,
      headers: { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const json = (await res.json()) as Record<string, unknown>;
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
    return json;
  }
}

/** A TCP proxy whose network can be cut (connections reset) or black-holed (silent). */
export class Proxy {
  private server: NetServer;
  private readonly pairs = new Set<[Socket, Socket]>();
  /** Every accepted socket, including silent ones, so down() and close() can end them. */
  private readonly sockets = new Set<Socket>();
  mode: "up" | "down" | "blackhole" | "oneway" = "up";
  port = 0;

  private constructor(private readonly target: number) {
    this.server = createServer((client) => this.accept(client));
  }

  static async start(target: number): Promise<Proxy> {
    const p = new Proxy(target);
    await new Promise<void>((r) => p.server.listen(0, "127.0.0.1", () => r()));
    p.port = (p.server.address() as { port: number }).port;
    return p;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  private accept(client: Socket): void {
    client.on("error", () => {});
    this.sockets.add(client);
    client.on("close", () => this.sockets.delete(client));
    if (this.mode === "down") {
      client.destroy();
      return;
    }
    if (this.mode === "blackhole" || this.mode === "oneway") return; // accepted, never answered
    const upstream = tcpConnect(this.target, "127.0.0.1");
    upstream.on("error", () => client.destroy());
    client.on("error", () => upstream.destroy());
    const pair: [Socket, Socket] = [client, upstream];
    this.pairs.add(pair);
    const forward = (from: Socket, to: Socket, toServer: boolean) =>
      from.on("data", (b) => {
        if (this.mode === "up" || (this.mode === "oneway" && toServer)) to.write(b);
      });
    forward(client, upstream, true);
    forward(upstream, client, false);
    const end = () => {
      this.pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on("close", end);
    upstream.on("close", end);
  }

  /** Resets every connection and refuses new ones. */
  down(): void {
    this.mode = "down";
    for (const [a, b] of this.pairs) {
      a.resetAndDestroy?.();
      b.destroy();
    }
    this.pairs.clear();
    for (const sock of this.sockets) sock.destroy();
    this.sockets.clear();
  }

  /** Keeps connections open but drops every byte both ways (a dead peer). */
  blackhole(): void {
    this.mode = "blackhole";
  }

  /** Requests reach the server, answers are lost (an acknowledgement lost in the network). */
  oneway(): void {
    this.mode = "oneway";
  }

  up(): void {
    this.mode = "up";
  }

  async close(): Promise<void> {
    this.down();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

export function client(url: string, extra: Partial<ConnectOptions> = {}): Herald {
  return connect({
    url,
    WebSocket: WebSocket as unknown as WebSocketConstructor,
    heartbeatTimeoutMs: 2500,
    backoff: { initialMs: 50, maxMs: 300 },
    ...extra,
  });
}

export function waitState(h: Herald, state: string, timeoutMs = 10_000): Promise<void> {
  if (h.connectionState === state) return Promise.resolve();
  return new Promise((resolveWait, reject) => {
    const timer = setTimeout(() => {
      off();
      reject(new Error(`connection did not become ${state} (is ${h.connectionState})`));
    }, timeoutMs);
    const off = h.onConnectionState((s) => {
      if (s === state) {
        clearTimeout(timer);
        off();
        resolveWait();
      }
    });
  });
}

/** A compact view of a snapshot for exact expectations. */
export interface Seen {
  docs: string[];
  changes: string[];
  pending: boolean;
  fromCache: boolean;
  seq: number;
  snap: QuerySnapshot;
}

export function describe(s: QuerySnapshot): Seen {
  return {
    docs: s.docs.map((d) => d.id),
    changes: s.docChanges().map((c) => `${c.kind} ${c.doc.id} ${c.oldIndex}>${c.newIndex}`),
    pending: s.metadata.hasPendingWrites,
    fromCache: s.metadata.fromCache,
    seq: s.seq,
    snap: s,
  };
}

/** Records every snapshot of one listener and checks that each one's docChanges, applied to
 * the previous docs (remove at oldIndex, insert at newIndex), give its docs. */
export class Recorder {
  readonly seen: Seen[] = [];
  private read = 0;
  private waiters: (() => void)[] = [];
  errors: Error[] = [];
  private prev: string[] = [];
  inconsistencies: string[] = [];

  readonly next = (s: QuerySnapshot): void => {
    const d = describe(s);
    const list = [...this.prev];
    for (const c of s.docChanges()) {
      if (c.oldIndex >= 0) {
        if (list[c.oldIndex] !== c.doc.id) this.inconsistencies.push(`${c.kind} ${c.doc.id} not at ${c.oldIndex} in ${list}`);
        list.splice(c.oldIndex, 1);
      }
      if (c.newIndex >= 0) list.splice(c.newIndex, 0, c.doc.id);
    }
    if (list.join(",") !== d.docs.join(",")) this.inconsistencies.push(`changes give ${list}, docs are ${d.docs}`);
    this.prev = d.docs;
    this.seen.push(d);
    this.waiters.splice(0).forEach((w) => w());
  };

  readonly error = (e: Error): void => {
    this.errors.push(e);
  };

  /** The next snapshot not yet taken (waits for it). */
  async take(timeoutMs = 5000): Promise<Seen> {
    const deadline = Date.now() + timeoutMs;
    while (this.read >= this.seen.length) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no snapshot within ${timeoutMs} ms (saw ${this.seen.length})`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, left);
        this.waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
    assert.deepEqual(this.inconsistencies, []);
    return this.seen[this.read++];
  }

  /** Takes snapshots until one satisfies `pred`; returns it. */
  async until(pred: (s: Seen) => boolean, timeoutMs = 8000): Promise<Seen> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const s = await this.take(Math.max(1, deadline - Date.now()));
      if (pred(s)) return s;
    }
  }

  /** Asserts no snapshot arrives within `ms`. */
  async quiet(ms = 300): Promise<void> {
    await new Promise((r) => setTimeout(r, ms));
    assert.equal(this.seen.length, this.read, `unexpected snapshot: ${JSON.stringify(this.seen.slice(this.read).map(({ snap: _s, ...x }) => x))}`);
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
