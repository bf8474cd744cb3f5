// The web console's entry point: the token form, the connection badge, the tabs, and the panes
// (collections and documents, query with explain, live query, triggers, cluster, charts).
// Everything it shows comes through @herald/sdk's public API; the token (an admin API key on secured
// servers) is kept in sessionStorage for this tab only.
import type { ConnectionState } from "@herald/sdk";
import { App } from "./app.js";
import { setupCharts } from "./charts.js";
import { setupCluster } from "./cluster.js";
import { setupDocs } from "./docs.js";
import { byId, status } from "./dom.js";
import { setupLive } from "./live.js";
import { setupQuery } from "./query.js";
import { setupTriggers } from "./triggers.js";

const TOKEN_KEY = "herald-console-token";

function start(): void {
  const saved = sessionStorage.getItem(TOKEN_KEY) ?? undefined;
  const app = new App(location.origin, saved === "" ? undefined : saved);
  byId<HTMLInputElement>("token").value = saved ?? "";

  const badge = byId("conn-state");
  const watch = () => {
    const show = (s: ConnectionState) => {
      badge.textContent = s;
      badge.className = `badge ${s}`;
    };
    show(app.db.connectionState);
    app.db.onConnectionState(show);
    app.db.onConnectionError((e) => status("global-status", `${e.code}: ${e.message}`, "error"));
  };
  watch();
  app.onClient(watch);

  byId("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const token = byId<HTMLInputElement>("token").value.trim();
    sessionStorage.setItem(TOKEN_KEY, token);
    status("global-status", "");
    app.setToken(token === "" ? undefined : token);
  });

  let tab = "docs";
  for (const b of byId("tabs").querySelectorAll<HTMLButtonElement>("button[data-tab]")) {
    b.addEventListener("click", () => {
      tab = b.dataset.tab ?? "docs";
      for (const x of byId("tabs").querySelectorAll("button")) x.classList.toggle("active", x === b);
      for (const s of document.querySelectorAll("section.tab")) s.classList.toggle("active", s.id === `tab-${tab}`);
    });
  }

  const docs = setupDocs(app);
  setupQuery(app);
  setupLive(app);
  setupTriggers(app, () => tab === "triggers");
  setupCluster(app, () => tab === "cluster");
  setupCharts(app);
  void docs.reloadCollections();
}

start();
