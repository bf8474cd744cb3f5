// What the charts show, from two scrapes of `/metrics`: commits per second (the change of
// `herald_seq`) and the notification latency's mean and p99 over the interval (the deltas of the
// `herald_live_notify_latency_seconds` histogram). No DOM, no imports: unit-tested in Node.

/** A sample as the SDK's `parsePrometheus` returns it. */
export interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

const LATENCY = "herald_live_notify_latency_seconds";

/** What one scrape contributes: the seq, the latency histogram (cumulative buckets). */
export interface Scrape {
  atMs: number;
  seq: number;
  count: number;
  sumSeconds: number;
  /** `[upper bound in seconds, cumulative count]`, ascending, `+Inf` last. */
  buckets: [number, number][];
}

export function scrape(samples: readonly Sample[], atMs: number): Scrape {
  const one = (name: string) => samples.find((s) => s.name === name)?.value ?? 0;
  const buckets = samples
    .filter((s) => s.name === `${LATENCY}_bucket`)
    .map((s): [number, number] => [s.labels.le === "+Inf" ? Infinity : Number(s.labels.le), s.value])
    .sort((a, b) => a[0] - b[0]);
  return { atMs, seq: one("herald_seq"), count: one(`${LATENCY}_count`), sumSeconds: one(`${LATENCY}_sum`), buckets };
}

/** Between two scrapes: commits per second, and latency mean and p99 in ms (null: no messages). */
export function between(a: Scrape, b: Scrape): { rate: number; meanMs: number | null; p99Ms: number | null } {
  const dt = Math.max(1, b.atMs - a.atMs) / 1000;
  const rate = Math.max(0, b.seq - a.seq) / dt;
  const n = b.count - a.count;
  if (n <= 0) return { rate, meanMs: null, p99Ms: null };
  const meanMs = ((b.sumSeconds - a.sumSeconds) / n) * 1000;
  // The p99 is the upper bound of the bucket where 99% of this interval's messages fall.
  let p99Ms: number | null = null;
  for (const [le, cum] of b.buckets) {
    const before = a.buckets.find(([l]) => l === le)?.[1] ?? 0;
    if (cum - before >= 0.99 * n) {
      p99Ms = Number.isFinite(le) ? le * 1000 : meanMs;
      break;
    }
  }
  return { rate, meanMs, p99Ms };
}
