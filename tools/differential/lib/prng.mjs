// Small seeded PRNG (mulberry32) with the helpers the generators need.
// Deterministic for a given seed so that every failure can be reproduced with DIFF_SEED.

export function mulberry32(seed) {
  let a = seed >>> 0;
  return function next() {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export class Rng {
  constructor(seed) {
    this.seed = seed >>> 0;
    this.next = mulberry32(this.seed);
  }
  /** float in [0, 1) */
  float() {
    return this.next();
  }
  /** integer in [lo, hi] inclusive */
  int(lo, hi) {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  /** true with probability p */
  chance(p) {
    return this.next() < p;
  }
  pick(arr) {
    return arr[Math.floor(this.next() * arr.length)];
  }
  /** weighted pick: entries are [weight, value] */
  weighted(entries) {
    let total = 0;
    for (const [w] of entries) total += w;
    let r = this.next() * total;
    for (const [w, v] of entries) {
      if ((r -= w) < 0) return v;
    }
    return entries[entries.length - 1][1];
  }
  shuffle(arr) {
    const a = arr.slice();
    for (let i = a.length - 1; i > 0; i--) {
      const j = Math.floor(this.next() * (i + 1));
      [a[i], a[j]] = [a[j], a[i]];
    }
    return a;
  }
  /** a sub-seed for an independent stream (used per case so cases are reproducible alone) */
  fork() {
    return new Rng(Math.floor(this.next() * 4294967296));
  }
}
