//! Front-end leases: every node renews a lease record for its front end on the queries topic,
//! and the views of a front end whose lease nobody has read for longer than the lease time are
//! removed by another node, so the cells stop matching for subscribers that are gone for good
//! (a node that restarts as the same id removes its earlier run's views itself, `mod.rs`).
//!
//! The argument that a live front end never loses views it still serves: a node removes a
//! front end's views only after reading neither a lease nor a registration of it for `ttl`,
//! counted from when it read the last one, which is after the front end sent it. The front end
//! counts from when it sent its last confirmed lease, and gives up (its subscribers get a
//! `reset`, `front.rs`) once that is older than `ttl / 2`. So a removal can only come after
//! the front end has already stopped trusting the cells, with `ttl / 2` to spare for clock
//! rates and delays. A front end that sees one of its views removed anyway (someone's clock
//! or a hand-written tombstone) gives up too.
//!
//! Who removes: the node running the cell `(row, 0)` removes the row's expired views (cells are
//! where matching them costs), and the node running `(0, 0)` removes expired lease records.
//! Tombstones are idempotent, so a cell moving between nodes at that moment costs a duplicate.

use crate::grid::wire::{key_prefix, lease_key, Lease};
use crate::grid::GridCtx;
use rdkafka::producer::BaseRecord;
use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The lease time by default (`ClusterOptions::grid_lease`).
pub const LEASE_DEFAULT: Duration = Duration::from_secs(60);

/// How often a node renews its lease: six times per lease time, at least every 100 ms.
pub fn renew_every(ttl: Duration) -> Duration {
    (ttl / 6).max(Duration::from_millis(100))
}

/// Whether a front end whose last confirmed lease was sent at `renewed` must stop trusting
/// the cells at `now`: past half the lease time, another node may soon remove its views.
pub fn lease_lost(renewed: Instant, now: Instant, ttl: Duration) -> bool {
    now.saturating_duration_since(renewed) > ttl / 2
}

/// Tombstones sent at most per round (a dead front end with many views is removed over a few
/// rounds, so a round never holds the producer's queue for long).
const TOMBSTONES_PER_ROUND_MAX: usize = 10_000;

/// Renews this node's lease and removes expired front ends' views until the grid stops.
pub(crate) fn run(ctx: Arc<GridCtx>) {
    let ttl = ctx.lease_ttl;
    let every = renew_every(ttl);
    let own = key_prefix(&ctx.shared.opts.node_id, ctx.incarnation);
    let own_lease = lease_key(&own);
    let mut next_renewal = Instant::now();
    let mut waiting: Option<(Instant, mpsc::Receiver<Result<i64, String>>)> = None;
    // Keys tombstoned, and when: sent again only after `every` if still registered.
    let mut removed: HashMap<String, Instant> = HashMap::new();
    while !ctx.stopping() {
        let now = Instant::now();
        if let Some((sent, rx)) = &waiting {
            match rx.try_recv() {
                Ok(Ok(_)) => {
                    ctx.renewed(*sent);
                    waiting = None;
                }
                Ok(Err(e)) => {
                    *ctx.error.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(format!("renewing the grid lease: {e}"));
                    waiting = None;
                }
                Err(mpsc::TryRecvError::Empty) if now.duration_since(*sent) < ttl => {}
                Err(_) => waiting = None,
            }
        }
        if waiting.is_none() && now >= next_renewal {
            let lease = Lease {
                node: ctx.shared.opts.node_id.clone(),
                at_ms: crate::status::now_ms(),
            };
            let bytes = serde_json::to_vec(&lease).expect("lease JSON");
            if let Some(rx) = send(&ctx, &own_lease, Some(&bytes)) {
                waiting = Some((now, rx));
            }
            next_renewal = now + every;
        }
        if ctx.registry.lock().caught_up() {
            remove_expired(&ctx, &own, now, every, &mut removed);
        }
        std::thread::sleep(every.min(Duration::from_millis(200)));
    }
}

/// Tombstones the expired views of the rows whose cell `(row, 0)` this node runs, and (on the
/// node running `(0, 0)`) the lease records of expired front ends with no views left.
fn remove_expired(
    ctx: &GridCtx,
    own: &str,
    now: Instant,
    every: Duration,
    removed: &mut HashMap<String, Instant>,
) {
    let rows: Vec<u32> = ctx
        .cells
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|c| c.part == 0)
        .map(|c| c.row)
        .collect();
    if rows.is_empty() {
        return;
    }
    let keys: Vec<String> = {
        let reg = ctx.registry.lock();
        let mut expired = reg.expired_front_ends(now, ctx.lease_ttl);
        expired.retain(|p| p != own);
        let mut keys: Vec<String> = Vec::new();
        for row in &rows {
            keys.extend(reg.views_of(&expired, *row));
        }
        if rows.contains(&0) {
            keys.extend(
                expired
                    .iter()
                    .filter(|p| !reg.has_views_of(p))
                    .map(|p| lease_key(p)),
            );
        }
        keys
    };
    removed.retain(|_, at| now.saturating_duration_since(*at) < every);
    let mut sent = 0;
    for key in keys {
        if sent == TOMBSTONES_PER_ROUND_MAX {
            break;
        }
        if removed.contains_key(&key) {
            continue;
        }
        if send(ctx, &key, None).is_some() {
            sent += 1;
            removed.insert(key, now);
        }
    }
    if sent > 0 {
        eprintln!(
            "herald grid: node {} removes {sent} views or leases of front ends whose lease expired",
            ctx.shared.opts.node_id
        );
    }
}

/// Sends a record (a tombstone when `payload` is `None`) to the queries topic.
fn send(
    ctx: &GridCtx,
    key: &str,
    payload: Option<&[u8]>,
) -> Option<mpsc::Receiver<Result<i64, String>>> {
    let (tx, rx) = mpsc::sync_channel(1);
    let mut record = BaseRecord::with_opaque_to(&ctx.topics.queries, Box::new(tx)).key(key);
    if let Some(p) = payload {
        record = record.payload(p);
    }
    ctx.shared.producer.send(record).ok().map(|_| rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_front_end_gives_up_well_before_others_may_remove_its_views() {
        let ttl = Duration::from_secs(60);
        let t0 = Instant::now();
        assert!(!lease_lost(t0, t0 + Duration::from_secs(30), ttl));
        assert!(lease_lost(t0, t0 + Duration::from_secs(31), ttl));
        // It renews several times within the half it may lose before giving up.
        assert!(renew_every(ttl) * 2 < ttl / 2);
        assert_eq!(
            renew_every(Duration::from_millis(60)),
            Duration::from_millis(100)
        );
    }
}
