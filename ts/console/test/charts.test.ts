// The charts' arithmetic without a browser: the write rate and the latency mean and p99 between
// two scrapes of /metrics.
import { test } from "node:test";
import assert from "node:assert/strict";
import { between, scrape, type Sample } from "../src/metrics.js";

function samples(seq: number, buckets: [string, number][], sum: number): Sample[] {
  const name = "herald_live_notify_latency_seconds";
  return [
    { name: "herald_seq", labels: {}, value: seq },
    ...buckets.map(([le, n]) => ({ name: `${name}_bucket`, labels: { le }, value: n })),
    { name: `${name}_sum`, labels: {}, value: sum },
    { name: `${name}_count`, labels: {}, value: buckets[buckets.length - 1][1] },
  ];
}

test("rate, mean and p99 come from the deltas between two scrapes", () => {
  const a = scrape(samples(100, [["0.001", 10], ["0.01", 10], ["+Inf", 10]], 0.005), 0);
  // 100 more messages in 2 s: 98 under 1 ms, 2 under 10 ms; 50 commits.
  const b = scrape(samples(150, [["0.001", 108], ["0.01", 110], ["+Inf", 110]], 0.005 + 0.1), 2000);
  const r = between(a, b);
  assert.equal(r.rate, 25);
  assert.ok(Math.abs((r.meanMs ?? 0) - 1) < 1e-9, String(r.meanMs));
  assert.equal(r.p99Ms, 10);
  // No messages in between: no latency point (a gap), the rate still counts.
  assert.deepEqual(between(b, { ...b, atMs: 3000, seq: 151 }), { rate: 1, meanMs: null, p99Ms: null });
});
