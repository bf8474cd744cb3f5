// The sync loop: the live connection's state machine (connect, authenticate, watch for a dead
// peer, reconnect with backoff) and what each transition means for the rest of the client:
// subscriptions are (re)sent on every `online`, resuming from the seq of the window they hold;
// server messages are decoded and handed to the listen registry; the mutation queue is woken.
//
//                start()
//                   │
//                   ▼
//   ┌─────────► connecting ───── socket open, token ─────► authenticating
//   │               │                                          │
//   │               │ socket open, no token                    │ {"type":"auth","ok":true}
//   │               ▼                                          │
//   │            online ◄──────────────────────────────────────┘
//   │               │  on entry: every listen subscribes (with resumeFrom its seq when it
//   │               │  holds a window) and the mutation queue resumes; while online, any
//   │               │  message re-arms the watchdog, and initial, changes, heartbeat, reset
//   │               │  and error go to the listen registry
//   │               │
//   │               │ close, error, or no message for heartbeatTimeoutMs
//   │               ▼
//   └── timer ── offline ◄── close, error or silence while connecting; a refused auth (an `error`,
//   (exponential              or ok: false) while authenticating
//    backoff with
//    full jitter)
//
//   close(), from any state ──► closed (final)
//
// `authenticating` shows as "connecting" to the application (ConnectionState). Leaving `online`
// makes every view fromCache until its subscription is answered again. A resumed subscription
// gets only the batches it missed (maybe none) and is live from the next heartbeat, which says
// every message up to its seq was sent; when continuity is lost the server sends `reset`, and
// the view waits for the fresh `initial` that follows.
//
// The server sends a heartbeat after one idle second, so silence longer than the timeout means
// the connection is dead even if the socket does not know it yet (a cut cable, a paused VM).
import { assertNever, decodeServerMessage, type ClientMessage, type ServerMessage, type SubscribeMessage } from "../protocol.js";
import { HeraldError } from "./errors.js";
import type { Listen, ListenLink, ListenRegistry } from "./listenRegistry.js";
import type { MutationQueue } from "./mutationQueue.js";
import type { PipelineListens } from "./pipelineListens.js";

/** The part of the WebSocket API the client uses (browsers' WebSocket and the `ws` package). */
export interface WebSocketLike {
  readonly readyState: number;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code?: number; reason?: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

export type WebSocketConstructor = new (url: string) => WebSocketLike;

export type ConnectionState = "connecting" | "online" | "offline" | "closed";

export interface BackoffOptions {
  /** First retry delay ceiling (default 250 ms). */
  initialMs?: number;
  /** Largest retry delay ceiling (default 10 s). */
  maxMs?: number;
}

export interface SyncOptions {
  url: string;
  token?: string;
  WebSocket: WebSocketConstructor;
  heartbeatTimeoutMs: number;
  backoff: Required<BackoffOptions>;
  /** Every state change, after the registry has seen it. */
  onState(state: ConnectionState): void;
  /** A failure worth showing (a refused token); the loop keeps retrying. */
  onError(err: HeraldError): void;
}

/** The delay before retry number `attempt` (0-based): uniform in [0, min(max, initial * 2^attempt)]. */
export function backoffDelay(attempt: number, b: Required<BackoffOptions>, random = Math.random): number {
  const ceiling = Math.min(b.maxMs, b.initialMs * 2 ** Math.min(attempt, 30));
  return Math.floor(random() * ceiling);
}

export class SyncLoop implements ListenLink {
  private ws: WebSocketLike | undefined;
  private state: ConnectionState = "offline";
  private attempt = 0;
  private retryTimer: ReturnType<typeof setTimeout> | undefined;
  private watchdog: ReturnType<typeof setInterval> | undefined;
  private lastMessageAt = 0;
  /** Sent `auth` on this socket and waiting for its answer. */
  private authenticating = false;

  constructor(
    private readonly o: SyncOptions,
    private readonly listens: ListenRegistry,
    private readonly queue: MutationQueue,
    /** Live aggregations (pipeline subscriptions), online only. */
    private readonly pipelines?: PipelineListens,
  ) {}

  get current(): ConnectionState {
    return this.state;
  }

  get online(): boolean {
    return this.state === "online";
  }

  /** Sends a listen's subscription if online (with `resumeFrom` when it holds a window, and
   * `minSeq` once a write of this client was acknowledged); offline, the next `online` sends
   * it. */
  subscribe(l: Listen): void {
    const msg: SubscribeMessage = { op: "subscribe", sub: l.sub, ...l.wire, ...this.queue.minSeq() };
    if (l.server !== undefined && l.seq > 0) msg.resumeFrom = l.seq;
    if (this.send(msg)) l.resuming = msg.resumeFrom !== undefined;
  }

  unsubscribe(l: Listen): void {
    this.send({ op: "unsubscribe", sub: l.sub });
  }

  start(): void {
    if (this.state === "closed") return;
    this.open();
  }

  /** Sends a message if online; returns false otherwise (the caller resends after reconnect). */
  send(msg: ClientMessage): boolean {
    if (this.state !== "online" || this.ws === undefined) return false;
    try {
      this.ws.send(JSON.stringify(msg));
      return true;
    } catch {
      return false;
    }
  }

  /** Drops the current socket as if the network failed; the usual reconnect follows. */
  drop(): void {
    if (this.ws !== undefined) this.lost();
  }

  close(): void {
    this.setState("closed");
    clearTimeout(this.retryTimer);
    clearInterval(this.watchdog);
    this.detach()?.close(1000, "client closed");
  }

  private setState(s: ConnectionState): void {
    if (this.state === s || this.state === "closed") return;
    this.state = s;
    if (s !== "online") this.listens.wentOffline();
    this.o.onState(s);
  }

  private open(): void {
    clearTimeout(this.retryTimer);
    this.setState("connecting");
    let ws: WebSocketLike;
    try {
      ws = new this.o.WebSocket(this.o.url);
    } catch (e) {
      this.o.onError(new HeraldError("network", `WebSocket: ${(e as Error).message}`));
      this.scheduleRetry();
      return;
    }
    this.ws = ws;
    this.lastMessageAt = Date.now();
    this.armWatchdog();
    ws.onopen = () => {
      if (this.o.token !== undefined) {
        this.authenticating = true;
        ws.send(JSON.stringify({ op: "auth", token: this.o.token } satisfies ClientMessage));
      } else this.wentOnline();
    };
    ws.onmessage = (ev) => {
      this.lastMessageAt = Date.now();
      let msg: ServerMessage;
      try {
        msg = decodeServerMessage(JSON.parse(String(ev.data)));
      } catch {
        // Not JSON, or not a message this client knows: nothing to act on.
        return;
      }
      if (this.authenticating) this.handshake(msg);
      else this.onMessage(msg);
    };
    ws.onclose = () => {
      if (this.ws === ws) this.lost();
    };
    ws.onerror = () => {
      if (this.ws === ws) this.lost();
    };
  }

  /** The answer to the first `auth`. */
  private handshake(msg: ServerMessage): void {
    if (msg.type === "error") {
      // A refused first `auth` (the server closes the connection after it).
      this.authenticating = false;
      this.o.onError(new HeraldError(msg.code, msg.message, 401));
      this.lost();
    } else if (msg.type === "auth") {
      this.authenticating = false;
      if (msg.ok) this.wentOnline();
      else {
        this.o.onError(new HeraldError("unauthenticated", "authentication failed"));
        this.lost();
      }
    } else this.onMessage(msg);
  }

  private wentOnline(): void {
    this.attempt = 0;
    this.setState("online");
    for (const l of this.listens.all()) this.subscribe(l);
    this.pipelines?.resubscribe();
    this.queue.resume();
  }

  private onMessage(msg: ServerMessage): void {
    const p = this.pipelines;
    if (p !== undefined && "sub" in msg && msg.sub !== undefined && p.owns(msg.sub)) {
      if (msg.type === "initial") p.applyInitial(msg);
      else if (msg.type === "changes") p.applyChanges(msg);
      else if (msg.type === "reset") p.applyReset(msg.sub);
      else if (msg.type === "error") p.applyError({ ...msg, sub: msg.sub });
      return;
    }
    switch (msg.type) {
      case "initial":
        return this.listens.applyInitial(msg);
      case "changes":
        return this.listens.applyChanges(msg);
      case "heartbeat":
        return this.listens.applyHeartbeat(msg.seq);
      case "reset":
        return this.listens.applyReset(msg.sub);
      case "error":
        // Errors without `sub` concern a message or the connection (token_expired and
        // rate_limited precede a close, which the reconnect handles).
        if (msg.sub !== undefined) this.listens.applyError({ ...msg, sub: msg.sub });
        return;
      case "auth":
        // Answers a renewal; this client authenticates once per connection.
        return;
      case "written":
        // Answers a WebSocket write request; this client commits over HTTP.
        return;
      default:
        return assertNever(msg, "server message");
    }
  }

  private armWatchdog(): void {
    clearInterval(this.watchdog);
    const every = Math.max(50, Math.floor(this.o.heartbeatTimeoutMs / 4));
    this.watchdog = setInterval(() => {
      if (this.ws !== undefined && Date.now() - this.lastMessageAt > this.o.heartbeatTimeoutMs) this.lost();
    }, every);
  }

  private detach(): WebSocketLike | undefined {
    const ws = this.ws;
    this.ws = undefined;
    if (ws !== undefined) {
      ws.onopen = ws.onmessage = ws.onclose = null;
      // A socket closed while still connecting reports that as an error afterwards, and
      // Node's `ws` throws an error nobody listens for: swallow it, the socket is not ours
      // any more.
      ws.onerror = () => {};
    }
    return ws;
  }

  /** The socket is gone or presumed dead: close it and retry after a backoff. */
  private lost(): void {
    clearInterval(this.watchdog);
    const ws = this.detach();
    try {
      // `ws` in Node has terminate() for a peer that does not answer a close.
      const t = (ws as unknown as { terminate?: () => void } | undefined)?.terminate;
      if (t !== undefined) t.call(ws);
      else ws?.close();
    } catch {
      // Already closed.
    }
    if (this.state === "closed") return;
    this.setState("offline");
    this.scheduleRetry();
  }

  private scheduleRetry(): void {
    if (this.state === "closed") return;
    this.setState("offline");
    const delay = backoffDelay(this.attempt++, this.o.backoff);
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => this.open(), delay);
  }
}
