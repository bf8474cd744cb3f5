// Errors the client reports: a server error with its stable code, or a network failure.

/** The server refused a request (`code` is one of docs/protocol.md's stable codes), or the
 * client failed locally (`code` "network", "closed", "cancelled", or a query-language code). */
export class HeraldError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly status = 0,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
    this.name = "HeraldError";
  }

  /** True when retrying the same request later may succeed (network, overload, shutdown). */
  get retryable(): boolean {
    return this.code === "network" || this.status >= 500;
  }
}
