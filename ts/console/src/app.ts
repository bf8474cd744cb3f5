// The console's shared state: the SDK client (replaced when the token changes), the selected
// collection, and hooks the panes register to react to either.
import { connect, type Herald } from "@herald/sdk";

export class App {
  db: Herald;
  collection: string | undefined;
  private readonly clientHooks: ((db: Herald) => void)[] = [];
  private readonly collectionHooks: ((c: string) => void)[] = [];

  constructor(
    private readonly url: string,
    token: string | undefined,
  ) {
    this.db = this.connect(token);
  }

  private connect(token: string | undefined): Herald {
    // Short backoff: the console is interactive, and a dead server should show at once.
    return connect({ url: this.url, token, backoff: { initialMs: 250, maxMs: 3000 } });
  }

  /** Replaces the client (a new token); panes drop their subscriptions and reload. */
  setToken(token: string | undefined): void {
    const old = this.db;
    this.db = this.connect(token);
    void old.close();
    for (const f of this.clientHooks) f(this.db);
  }

  onClient(f: (db: Herald) => void): void {
    this.clientHooks.push(f);
  }

  select(collection: string): void {
    this.collection = collection;
    for (const f of this.collectionHooks) f(collection);
  }

  onSelect(f: (c: string) => void): void {
    this.collectionHooks.push(f);
  }
}
