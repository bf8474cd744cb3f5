// Errors the client reports: a server error with its stable code, or a network failure.
import { ERROR_CODES, isErrorCode } from "../errorCodes.js";

/** The server refused a request (`code` is one of docs/protocol.md's stable codes), or the
 * client failed locally (`code` "network", "closed", "cancelled", or a query-language code). */
export class HeraldError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly status = 0,
    readonly details?: Record<string, unknown>,
    /** The error body's `retryable`, when the server said. */
    private readonly serverRetryable?: boolean,
  ) {
    super(message);
    this.name = "HeraldError";
  }

  /** True when retrying the same request later may succeed (network, overload, shutdown): what
   * the server said, else the error table's word for the code. An answer that is not Herald's
   * (a proxy's error page, `http_<status>`) is retried only for HTTP's transient statuses. */
  get retryable(): boolean {
    if (this.code === "network") return true;
    if (this.serverRetryable !== undefined) return this.serverRetryable;
    if (isErrorCode(this.code)) return ERROR_CODES[this.code].retryable;
    return this.code.startsWith("http_") && TRANSIENT_STATUSES.has(this.status);
  }
}

const TRANSIENT_STATUSES = new Set([429, 502, 503, 504]);
