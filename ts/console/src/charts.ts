// Live charts from the server's `/metrics`, polled every second: the write rate and the
// notification latency (`metrics.ts` computes them). Plain SVG polylines.
import type { App } from "./app.js";
import { byId, describeError, status } from "./dom.js";
import { between, scrape, type Scrape } from "./metrics.js";

export const POLL_MS = 1000;
/** Points per chart (one per poll). */
export const POINTS_MAX = 60;

/** A round axis maximum at or above `v`. */
function niceMax(v: number): number {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

/** Draws series (each `(number|null)[]`, null a gap) into an SVG with a 300x80 viewBox. */
function draw(svg: SVGSVGElement, series: { values: (number | null)[]; cls: string }[]): void {
  const W = 300, H = 80;
  const max = niceMax(Math.max(0, ...series.flatMap((s) => s.values.filter((v): v is number => v !== null))));
  const ns = "http://www.w3.org/2000/svg";
  const parts: SVGElement[] = [];
  for (const f of [0.5, 1]) {
    const line = document.createElementNS(ns, "line");
    line.setAttribute("x1", "0"); line.setAttribute("x2", String(W));
    line.setAttribute("y1", String(H - f * (H - 4))); line.setAttribute("y2", String(H - f * (H - 4)));
    line.setAttribute("class", "grid");
    parts.push(line);
  }
  for (const s of series) {
    let d = "";
    s.values.forEach((v, i) => {
      if (v === null) return;
      // Right-aligned: the newest point at the right edge, history scrolling left.
      const x = W - (W * (s.values.length - 1 - i)) / (POINTS_MAX - 1);
      const y = H - (v / max) * (H - 4);
      d += `${d === "" || s.values[i - 1] === null ? "M" : "L"}${x.toFixed(1)},${y.toFixed(1)}`;
    });
    const path = document.createElementNS(ns, "path");
    path.setAttribute("d", d);
    path.setAttribute("class", s.cls);
    parts.push(path);
  }
  const label = document.createElementNS(ns, "text");
  label.setAttribute("x", "2"); label.setAttribute("y", "10");
  label.textContent = String(max);
  parts.push(label);
  svg.replaceChildren(...parts);
}

export function setupCharts(app: App): void {
  let prev: Scrape | undefined;
  const rate: (number | null)[] = [];
  const mean: (number | null)[] = [];
  const p99: (number | null)[] = [];
  const push = (a: (number | null)[], v: number | null) => {
    a.push(v);
    if (a.length > POINTS_MAX) a.shift();
  };
  const fmt = (v: number | null) => (v === null ? "–" : v < 10 ? v.toFixed(2) : v.toFixed(0));

  async function poll(): Promise<void> {
    try {
      const cur = scrape(await app.db.metrics(), Date.now());
      if (prev !== undefined) {
        const r = between(prev, cur);
        push(rate, r.rate);
        push(mean, r.meanMs);
        push(p99, r.p99Ms);
        byId("rate-now").textContent = fmt(r.rate);
        byId("lat-now").textContent = fmt(r.meanMs);
        byId("p99-now").textContent = fmt(r.p99Ms);
        draw(byId("chart-rate") as unknown as SVGSVGElement, [{ values: rate, cls: "s1" }]);
        draw(byId("chart-latency") as unknown as SVGSVGElement, [{ values: p99, cls: "s2" }, { values: mean, cls: "s1" }]);
      }
      prev = cur;
    } catch (e) {
      prev = undefined;
      status("global-status", `metrics: ${describeError(e)}`, "error");
    }
  }
  setInterval(() => void poll(), POLL_MS);
  void poll();
  app.onClient(() => {
    prev = undefined;
  });
}
