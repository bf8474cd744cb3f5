//! `GET /metrics`: Prometheus text exposition of the commit sequence, the storage writer,
//! every trigger's queue (pending, oldest pending age, dead letters, executed, failed) and the
//! live notification latency histogram (`crate::notify_latency`), the live-query matching
//! grid's cells (seq matched, views held), and on a node of a cluster
//! its role, epoch, applied seq and every node's lag.

use crate::state::AppState;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use herald_db::triggers::TriggerStatus;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

/// A label value escaped as the exposition format requires.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

pub async fn metrics(
    State(st): State<AppState>,
    _: crate::api::auth::RequireTrusted,
) -> impl IntoResponse {
    let db = st.db.clone();
    let mut body = tokio::task::spawn_blocking(move || render(&db))
        .await
        .unwrap_or_default();
    st.notify_latency.render(&mut body);
    st.ws_stats.render(&mut body);
    render_cells(&mut body, &st.live.cells());
    if let Some(c) = &st.cluster {
        let status = crate::api::cluster::with_waiting(&st, c.status());
        render_cluster(&mut body, c.as_ref(), &status, st.db.seq());
    }
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        body,
    )
}

/// The live-query matching grid, per cell (row = query partition, part = write partition).
fn render_cells(out: &mut String, cells: &[herald_db::live::grid::CellStatus]) {
    family(
        out,
        "herald_live_cell_seq",
        "gauge",
        "The newest commit seq each live-query matching cell has matched.",
    );
    for c in cells {
        let _ = writeln!(
            out,
            "herald_live_cell_seq{{row=\"{}\",part=\"{}\"}} {}",
            c.row, c.part, c.seq
        );
    }
    family(
        out,
        "herald_live_cell_views",
        "gauge",
        "Live queries (shared views) each matching cell matches.",
    );
    for c in cells {
        let _ = writeln!(
            out,
            "herald_live_cell_views{{row=\"{}\",part=\"{}\"}} {}",
            c.row, c.part, c.views
        );
    }
}

fn render(db: &herald_db::Db) -> String {
    let mut out = String::with_capacity(4096);
    family(
        &mut out,
        "herald_seq",
        "gauge",
        "The last committed sequence number.",
    );
    let _ = writeln!(out, "herald_seq {}", db.seq());
    let m = db.storage_metrics();
    for (name, help, v) in [
        (
            "herald_storage_commits_total",
            "Group commits (one fsync each in fsync mode).",
            m.commits,
        ),
        (
            "herald_storage_commit_failures_total",
            "Group commits that failed.",
            m.commit_failures,
        ),
        (
            "herald_storage_jobs_committed_total",
            "Write jobs committed.",
            m.jobs_committed,
        ),
        (
            "herald_storage_jobs_failed_total",
            "Write jobs refused (their writes discarded).",
            m.jobs_failed,
        ),
        (
            "herald_storage_checkpoints_total",
            "Checkpoints: committed batches applied to the redb file.",
            m.checkpoints,
        ),
        (
            "herald_storage_durable_checkpoints_total",
            "Checkpoints synced to disk (the log segments they cover may go).",
            m.durable_checkpoints,
        ),
        (
            "herald_storage_writer_stalls_total",
            "Times the writer waited for a checkpoint (in-memory layers at their bound).",
            m.writer_stalls,
        ),
        (
            "herald_storage_index_run_merges_total",
            "Merges of index runs into the next level.",
            m.index_run_merges,
        ),
        (
            "herald_storage_index_run_merge_entries_total",
            "Index entries read by merges of index runs.",
            m.index_run_merge_entries,
        ),
        (
            "herald_storage_log_bytes_total",
            "Bytes appended to the write-ahead log.",
            m.log_bytes,
        ),
    ] {
        family(&mut out, name, "counter", help);
        let _ = writeln!(out, "{name} {v}");
    }
    family(
        &mut out,
        "herald_storage_layers_bytes",
        "gauge",
        "Memory held by committed batches not yet checkpointed (an estimate).",
    );
    let _ = writeln!(out, "herald_storage_layers_bytes {}", m.layers_bytes);
    family(
        &mut out,
        "herald_storage_disk_full",
        "gauge",
        "1 while writes are refused because the disk is full (they resume once space is freed).",
    );
    let _ = writeln!(out, "herald_storage_disk_full {}", u8::from(m.disk_full));
    family(
        &mut out,
        "herald_storage_writes_refused",
        "gauge",
        "1 while the store refuses writes for any reason (a full disk, or a failure that needs a restart).",
    );
    let refused = db.write_refusal().is_some();
    let _ = writeln!(out, "herald_storage_writes_refused {}", u8::from(refused));
    family(
        &mut out,
        "herald_storage_index_runs",
        "gauge",
        "Index runs in the store (sorted runs of index entries; docs/storage.md).",
    );
    let _ = writeln!(out, "herald_storage_index_runs {}", m.index_runs);
    family(
        &mut out,
        "herald_storage_index_run_merge_seconds_total",
        "counter",
        "Time merges of index runs took (reading, writing and committing).",
    );
    let _ = writeln!(
        out,
        "herald_storage_index_run_merge_seconds_total {}",
        m.index_run_merge_nanos as f64 / 1e9
    );
    family(
        &mut out,
        "herald_storage_checkpoint_entries_total",
        "counter",
        "Entries checkpointed into each redb table.",
    );
    for (t, n, _) in m.checkpoint_tables() {
        let _ = writeln!(
            out,
            "herald_storage_checkpoint_entries_total{{table=\"{t}\"}} {n}"
        );
    }
    family(
        &mut out,
        "herald_storage_checkpoint_seconds_total",
        "counter",
        "Time checkpoints spent writing each redb table's entries.",
    );
    for (t, _, ns) in m.checkpoint_tables() {
        let _ = writeln!(
            out,
            "herald_storage_checkpoint_seconds_total{{table=\"{t}\"}} {}",
            ns as f64 / 1e9
        );
    }
    family(
        &mut out,
        "herald_storage_checkpoint_commit_seconds_total",
        "counter",
        "Time checkpoints spent committing redb transactions (page writes; syncs if durable).",
    );
    let _ = writeln!(
        out,
        "herald_storage_checkpoint_commit_seconds_total {}",
        m.checkpoint_commit_nanos as f64 / 1e9
    );
    family(
        &mut out,
        "herald_storage_checkpoint_wait_seconds_total",
        "counter",
        "Time checkpoints waited for redb's write transaction (which index-run merges take too).",
    );
    let _ = writeln!(
        out,
        "herald_storage_checkpoint_wait_seconds_total {}",
        m.checkpoint_wait_nanos as f64 / 1e9
    );
    m.log_sync.render(
        &mut out,
        "herald_storage_log_sync_seconds",
        "Each synced write-ahead log append (write and fdatasync: what a write waits for in fsync mode).",
    );
    m.durable_commit.render(
        &mut out,
        "herald_storage_durable_checkpoint_seconds",
        "Each durable checkpoint's redb commit (writing the pages buffered since the last one, and the sync).",
    );
    let defs = db.triggers().defs();
    type Counter = fn(&TriggerStatus) -> f64;
    let statuses: Vec<TriggerStatus> = defs
        .iter()
        .filter_map(|d| db.trigger_status(&d.name).ok())
        .collect();
    let gauges: [(&str, &str, &str, Counter, f64); 5] = [
        (
            "herald_trigger_pending_tasks",
            "gauge",
            "Tasks waiting in the trigger's queue.",
            |s| s.pending as f64,
            1.0,
        ),
        (
            "herald_trigger_oldest_pending_age_seconds",
            "gauge",
            "Age of the oldest queued task.",
            |s| s.oldest_pending_age_ms.unwrap_or(0) as f64,
            0.001,
        ),
        (
            "herald_trigger_dead_letters",
            "gauge",
            "Tasks that used up their attempts.",
            |s| s.dead as f64,
            1.0,
        ),
        (
            "herald_trigger_executed_total",
            "counter",
            "Tasks completed since the server started.",
            |s| s.executed as f64,
            1.0,
        ),
        (
            "herald_trigger_failed_total",
            "counter",
            "Failed task attempts since the server started.",
            |s| s.failed as f64,
            1.0,
        ),
    ];
    for (name, kind, help, field, scale) in gauges {
        family(&mut out, name, kind, help);
        for s in &statuses {
            let v = field(s) * scale;
            let n = label(&s.def.name);
            let _ = writeln!(out, "{name}{{trigger=\"{n}\"}} {v}");
        }
    }
    family(
        &mut out,
        "herald_trigger_conflicts_total",
        "counter",
        "Task runs re-done because what they read changed.",
    );
    for d in defs.iter() {
        let c = db.triggers().stats(d.uid).conflicts.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "herald_trigger_conflicts_total{{trigger=\"{}\"}} {c}",
            label(&d.name)
        );
    }
    out
}

/// The cluster families (a node of a cluster only; a single node has none).
fn render_cluster(
    out: &mut String,
    c: &dyn crate::cluster::ClusterView,
    status: &herald_protocol::ClusterStatus,
    applied_seq: u64,
) {
    family(
        out,
        "herald_cluster_role",
        "gauge",
        "This node's role: 2 primary, 1 follower, 0 candidate (no primary known).",
    );
    let _ = writeln!(out, "herald_cluster_role {}", c.role().gauge());
    family(
        out,
        "herald_cluster_epoch",
        "gauge",
        "The epoch of the current primary's claim.",
    );
    let _ = writeln!(out, "herald_cluster_epoch {}", status.epoch);
    family(
        out,
        "herald_cluster_applied_seq",
        "gauge",
        "The last seq this node applied.",
    );
    let _ = writeln!(out, "herald_cluster_applied_seq {applied_seq}");
    family(
        out,
        "herald_cluster_lag_seqs",
        "gauge",
        "How many seqs each node is behind the primary, as this node last heard.",
    );
    for n in &status.nodes {
        let _ = writeln!(
            out,
            "herald_cluster_lag_seqs{{node=\"{}\"}} {}",
            label(&n.id),
            n.lag_seqs
        );
    }
    let Some(grid) = &status.grid else { return };
    family(
        out,
        "herald_grid_cell_seq",
        "gauge",
        "Per grid cell, the seq it has matched: `running` the cells this node runs, `waiting` \
         the cells its subscriptions wait on (claimed for its views).",
    );
    let cells = [("running", &grid.running), ("waiting", &grid.waiting)];
    for (kind, list) in cells {
        for cell in list.iter() {
            let _ = writeln!(
                out,
                "herald_grid_cell_seq{{kind=\"{kind}\",row=\"{}\",part=\"{}\"}} {}",
                cell.row, cell.part, cell.seq
            );
        }
    }
    family(
        out,
        "herald_grid_cell_lag_seqs",
        "gauge",
        "Per grid cell, how many seqs it is behind this node's applied seq (labels as \
         herald_grid_cell_seq): a slow cell shows here.",
    );
    for (kind, list) in cells {
        for cell in list.iter() {
            let _ = writeln!(
                out,
                "herald_grid_cell_lag_seqs{{kind=\"{kind}\",row=\"{}\",part=\"{}\"}} {}",
                cell.row, cell.part, cell.lag_seqs
            );
        }
    }
}
