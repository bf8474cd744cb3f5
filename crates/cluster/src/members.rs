//! Node statuses: every node publishes its own about once a second to the compacted topic
//! `<cluster>.nodes` (keyed by node id) and reads everyone's, for `GET /v1/cluster`, the
//! metrics and the lag of each node.

use crate::shared::Shared;
use crate::status::{now_ms, NodeStatus};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a node publishes its status.
pub const STATUS_INTERVAL: Duration = Duration::from_secs(1);
/// A status older than this when read is history, not a sign of life.
const HISTORY_MS: u64 = 10_000;
/// Statuses kept at most (nodes that left stay listed with their last status).
pub const NODES_MAX: usize = 256;

pub(crate) fn own_status(shared: &Shared) -> NodeStatus {
    let (role, epoch, applied, kafka_error) = {
        let st = shared.lock();
        (st.role, st.log.epoch, st.applied, st.kafka_error.clone())
    };
    NodeStatus {
        id: shared.opts.node_id.clone(),
        url: shared.opts.url.clone(),
        role: role.as_str().into(),
        epoch,
        applied_seq: shared.db.get().map_or(0, |db| db.seq()),
        applied_index: applied,
        at_ms: now_ms(),
        kafka_error,
    }
}

pub(crate) fn run(shared: Arc<Shared>) {
    let consumer: Option<BaseConsumer> = crate::kafka::reader(&shared.opts, "nodes")
        .create()
        .ok()
        .filter(|c: &BaseConsumer| {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(&shared.topics.nodes, 0, Offset::Beginning)
                .is_ok()
                && c.assign(&tpl).is_ok()
        });
    let mut last = Instant::now() - STATUS_INTERVAL;
    while !shared.stopping() {
        if last.elapsed() >= STATUS_INTERVAL {
            last = Instant::now();
            let me = own_status(&shared);
            let bytes = serde_json::to_vec(&me).expect("status JSON");
            // Best effort: a status lost now is replaced within a second.
            let s = shared.clone();
            std::thread::spawn(move || {
                let _ = s.produce(&s.topics.nodes, Some(s.opts.node_id.as_bytes()), &bytes);
            });
        }
        let Some(consumer) = &consumer else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
            let status = message
                .payload()
                .and_then(|p| serde_json::from_slice::<NodeStatus>(p).ok());
            if let Some(status) = status {
                // A status read from the topic's history says nothing about now.
                let fresh = now_ms().saturating_sub(status.at_ms) < HISTORY_MS;
                let mut peers = shared.peers.lock().unwrap_or_else(|e| e.into_inner());
                if peers.len() < NODES_MAX || peers.contains_key(&status.id) {
                    if fresh && status.id != shared.opts.node_id {
                        shared
                            .seen
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(
                                status.id.clone(),
                                (Instant::now(), status.role.clone(), status.epoch),
                            );
                    }
                    peers.insert(status.id.clone(), status);
                }
            }
        }
    }
}

/// The URLs of the nodes (other than this one) that published a status in the last `within`,
/// the primary first: read from the statuses topic for up to `wait`.
pub(crate) fn recent_peers(
    opts: &crate::ClusterOptions,
    topics: &crate::kafka::Topics,
    wait: Duration,
) -> Vec<String> {
    let Ok(consumer) = crate::kafka::reader(opts, "peers").create::<BaseConsumer>() else {
        return Vec::new();
    };
    let mut tpl = TopicPartitionList::new();
    if tpl
        .add_partition_offset(&topics.nodes, 0, Offset::Beginning)
        .is_err()
        || consumer.assign(&tpl).is_err()
    {
        return Vec::new();
    }
    let mut latest: std::collections::BTreeMap<String, NodeStatus> = Default::default();
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                if let Some(s) = m
                    .payload()
                    .and_then(|p| serde_json::from_slice::<NodeStatus>(p).ok())
                {
                    latest.insert(s.id.clone(), s);
                }
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => break,
            _ => {}
        }
    }
    let now = now_ms();
    let mut peers: Vec<NodeStatus> = latest
        .into_values()
        .filter(|s| s.id != opts.node_id && now.saturating_sub(s.at_ms) < HISTORY_MS)
        .collect();
    peers.sort_by_key(|s| (s.role != "primary", std::cmp::Reverse(s.applied_index)));
    peers.into_iter().map(|s| s.url).collect()
}

/// Whether `node` said, within the last `within`, that it is the primary of `epoch`: then a
/// node holding the lead leaves it be (a rebalance moved the lead, not a failure).
pub(crate) fn primary_alive(shared: &Shared, node: &str, epoch: u64, within: Duration) -> bool {
    let seen = shared.seen.lock().unwrap_or_else(|e| e.into_inner());
    seen.get(node)
        .is_some_and(|(at, role, e)| at.elapsed() < within && role == "primary" && *e == epoch)
}
