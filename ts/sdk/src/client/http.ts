// The HTTP side of the protocol: JSON requests with the bearer token, stable error codes.
import { decodeErrorBody } from "../protocol.js";
import { HeraldError } from "./errors.js";

export type Fetch = typeof fetch;

export class Http {
  constructor(
    private readonly base: string,
    private readonly token: string | undefined,
    private readonly fetchImpl: Fetch,
    /** A request without an answer after this long fails as a network error (then retried). */
    private readonly timeoutMs: number,
  ) {}

  /** Sends a request; resolves to the JSON body of a 2xx answer, rejects with HeraldError. */
  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    const { res, text } = await this.send(method, path, body);
    let json: unknown = undefined;
    try {
      json = text.length > 0 ? JSON.parse(text) : undefined;
    } catch {
      // An error page that is not JSON: reported below with the status.
    }
    if (res.ok) return json as T;
    throw errorOf(method, path, res.status, json);
  }

  /** Sends a request; resolves to the text body of a 2xx answer (e.g. `/metrics`). */
  async requestText(method: string, path: string): Promise<string> {
    const { res, text } = await this.send(method, path, undefined);
    if (res.ok) return text;
    let json: unknown = undefined;
    try {
      json = JSON.parse(text);
    } catch {
      // Not JSON: the status says enough.
    }
    throw errorOf(method, path, res.status, json);
  }

  private async send(method: string, path: string, body: unknown): Promise<{ res: Response; text: string }> {
    const headers: Record<string, string> = {};
    if (body !== undefined) headers["content-type"] = "application/json";
    if (this.token !== undefined) headers.authorization = `Bearer ${this.token}`;
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), this.timeoutMs);
    try {
      const res = await this.fetchImpl(this.base + path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: abort.signal,
      });
      return { res, text: await res.text() };
    } catch (e) {
      throw new HeraldError("network", `${method} ${path}: ${(e as Error).message}`);
    } finally {
      clearTimeout(timer);
    }
  }
}

/** The HeraldError of a non-2xx answer: its stable code, details and `retryable`, or
 * `http_<status>` for an answer that is not Herald's error body. */
function errorOf(method: string, path: string, status: number, json: unknown): HeraldError {
  let body;
  try {
    body = decodeErrorBody(json);
  } catch {
    return looseErrorOf(method, path, status, json);
  }
  const { code, message, retryable, ...details } = body.error;
  return new HeraldError(code, message, status, details, retryable);
}

/** An error answer outside the contract: a server before `retryable` was in every error body
 * (its code and message still count), or an error page from something in between. */
function looseErrorOf(method: string, path: string, status: number, json: unknown): HeraldError {
  const err = isRecord(json) && isRecord(json.error) ? json.error : {};
  const { code, message, ...details } = err;
  return new HeraldError(
    typeof code === "string" ? code : `http_${status}`,
    typeof message === "string" ? message : `${method} ${path}: HTTP ${status}`,
    status,
    details,
  );
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
