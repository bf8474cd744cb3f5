// The cluster pane: the nodes of the cluster as the server answering the console sees them
// (role, applied seq, lag, last heard), with the epoch and the primary. A single server shows
// itself as the primary of a one-node cluster.
import type { ClusterStatus, NodeStatus } from "@herald/sdk";
import type { App } from "./app.js";
import { byId, describeError, h, status } from "./dom.js";

/** How often the visible pane reloads the status. */
export const CLUSTER_POLL_MS = 2000;

function row(s: ClusterStatus, n: NodeStatus): HTMLTableRowElement {
  const self = n.id === s.nodeId ? " (this node)" : "";
  return h("tr", { "data-node": n.id, class: `role-${n.role}` },
    h("td", {}, n.id + self), h("td", {}, n.url), h("td", {}, n.role),
    h("td", { class: "num" }, String(n.appliedSeq)), h("td", { class: "num" }, String(n.lagSeqs)),
    h("td", { class: "num" }, `${n.lastSeenMs} ms`));
}

export function setupCluster(app: App, visible: () => boolean): void {
  async function reload(): Promise<void> {
    try {
      const s = await app.db.clusterStatus();
      byId("c-table").querySelector("tbody")!.replaceChildren(...s.nodes.map((n) => row(s, n)));
      const name = s.cluster === null ? "single node" : `cluster ${s.cluster}`;
      status("c-status", `${name}, epoch ${s.epoch}, primary ${s.primary ?? "none (failover in progress)"}`);
    } catch (e) {
      status("c-status", describeError(e), "error");
    }
  }

  byId("c-refresh").addEventListener("click", () => void reload());
  setInterval(() => {
    if (visible()) void reload();
  }, CLUSTER_POLL_MS);
  app.onClient(() => void reload());
}
