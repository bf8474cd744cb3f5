// The WebSocket connection: open, authenticate, watch for a dead peer, reconnect.
//
//            start()
//               │
//               ▼        open (+ auth ok)        message
//  ┌──────► connecting ─────────────────► online ◄──────┐ (watchdog re-armed)
//  │            │ close/error                 │ close/error/no message for heartbeatTimeoutMs
//  │            ▼                             ▼
//  └──── offline (timer: exponential backoff with full jitter) ◄──┘
//
// The server sends a heartbeat after one idle second, so silence longer than the timeout means
// the connection is dead even if the socket does not know it yet (a cut cable, a paused VM).
import { HeraldError } from "./errors.js";

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

export interface ConnectionOptions {
  url: string;
  token?: string;
  WebSocket: WebSocketConstructor;
  heartbeatTimeoutMs: number;
  backoff: Required<BackoffOptions>;
  onOnline(): void;
  onMessage(msg: Record<string, unknown>): void;
  onState(state: ConnectionState): void;
  onError(err: HeraldError): void;
}

/** The delay before retry number `attempt` (0-based): uniform in [0, min(max, initial * 2^attempt)]. */
export function backoffDelay(attempt: number, b: Required<BackoffOptions>, random = Math.random): number {
  const ceiling = Math.min(b.maxMs, b.initialMs * 2 ** Math.min(attempt, 30));
  return Math.floor(random() * ceiling);
}

export class Connection {
  private ws: WebSocketLike | undefined;
  private state: ConnectionState = "offline";
  private attempt = 0;
  private retryTimer: ReturnType<typeof setTimeout> | undefined;
  private watchdog: ReturnType<typeof setInterval> | undefined;
  private lastMessageAt = 0;
  /** Sent `auth` on this socket and waiting for its answer. */
  private authenticating = false;

  constructor(private readonly o: ConnectionOptions) {}

  get current(): ConnectionState {
    return this.state;
  }

  start(): void {
    if (this.state === "closed") return;
    this.open();
  }

  /** Sends a message if online; returns false otherwise (the caller resends after reconnect). */
  send(msg: unknown): boolean {
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
        ws.send(JSON.stringify({ op: "auth", token: this.o.token }));
      } else this.online();
    };
    ws.onmessage = (ev) => {
      this.lastMessageAt = Date.now();
      let msg: Record<string, unknown>;
      try {
        msg = JSON.parse(String(ev.data)) as Record<string, unknown>;
      } catch {
        return;
      }
      if (this.authenticating && msg.type === "error") {
        // A refused first `auth` (the server closes the connection after it).
        this.authenticating = false;
        this.o.onError(new HeraldError(String(msg.code ?? "unauthenticated"), String(msg.message ?? "authentication failed"), 401));
        this.lost();
        return;
      }
      if (msg.type === "auth") {
        this.authenticating = false;
        if (msg.ok === true) this.online();
        else {
          this.o.onError(new HeraldError(String(msg.code ?? "unauthenticated"), String(msg.message ?? "authentication failed")));
          this.lost();
        }
        return;
      }
      this.o.onMessage(msg);
    };
    ws.onclose = () => {
      if (this.ws === ws) this.lost();
    };
    ws.onerror = () => {
      if (this.ws === ws) this.lost();
    };
  }

  private online(): void {
    this.attempt = 0;
    this.setState("online");
    this.o.onOnline();
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
