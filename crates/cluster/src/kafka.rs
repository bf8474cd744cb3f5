//! Talking to Kafka: the topics a cluster uses (created if missing), and the client
//! configurations of its producer and consumers, in one place so their timeouts agree.

use crate::ClusterOptions;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::RDKafkaErrorCode;
use std::time::Duration;

/// The largest storage batch the log takes (the topic's `max.message.bytes`): a transaction
/// bigger than this cannot commit in cluster mode.
pub const RECORD_BYTES_MAX: usize = 64 << 20;

/// The cluster's topic names.
#[derive(Debug, Clone)]
pub struct Topics {
    /// The replicated log: one partition, every batch and claim in order.
    pub log: String,
    /// One partition; the member of the group `leader` it is assigned to may claim.
    pub leader: String,
    /// Compacted, one partition: each node's latest status, keyed by node id.
    pub nodes: String,
}

impl Topics {
    pub fn new(cluster: &str) -> Topics {
        Topics {
            log: format!("{cluster}.log"),
            leader: format!("{cluster}.leader"),
            nodes: format!("{cluster}.nodes"),
        }
    }
}

/// The settings every client shares.
pub(crate) fn base(opts: &ClusterOptions) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &opts.bootstrap)
        .set("client.id", format!("herald-{}", opts.node_id))
        .set("socket.keepalive.enable", "true")
        .set("reconnect.backoff.max.ms", "1000")
        .set("log_level", "3");
    c
}

/// The producer of log records: durable in every in-sync replica before it reports delivery,
/// idempotent (a retry is never a second copy, and order is kept), and bounded in time.
pub(crate) fn producer(opts: &ClusterOptions) -> ClientConfig {
    let mut c = base(opts);
    c.set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "0")
        .set(
            "message.max.bytes",
            (RECORD_BYTES_MAX + (1 << 20)).to_string(),
        )
        .set(
            "message.timeout.ms",
            opts.write_timeout.as_millis().to_string(),
        )
        .set("queue.buffering.max.messages", "10000");
    c
}

/// How long the broker may hold a log reader's fetch while there is nothing new. A fetch
/// returns as soon as a record arrives, so this costs no latency; a short one only makes idle
/// readers ask the broker again and again (with 10 ms, three idle nodes kept a broker at about
/// a seventh of a core).
const LOG_FETCH_WAIT_MS: u32 = 200;
/// The same for the statuses, which change about once a second.
const STATUS_FETCH_WAIT_MS: u32 = 500;

/// A reader of one partition from an offset it chooses (no group, no committed offsets).
pub(crate) fn reader(opts: &ClusterOptions, what: &str) -> ClientConfig {
    let wait = if what == "nodes" || what == "peers" {
        STATUS_FETCH_WAIT_MS
    } else {
        LOG_FETCH_WAIT_MS
    };
    let mut c = base(opts);
    c.set(
        "group.id",
        format!("{}.{what}.{}", opts.cluster, opts.node_id),
    )
    .set("enable.auto.commit", "false")
    .set("enable.auto.offset.store", "false")
    .set("auto.offset.reset", "earliest")
    .set("fetch.wait.max.ms", wait.to_string())
    .set("fetch.max.bytes", (RECORD_BYTES_MAX * 2).to_string())
    .set(
        "max.partition.fetch.bytes",
        (RECORD_BYTES_MAX + (1 << 20)).to_string(),
    )
    .set("enable.partition.eof", "true");
    c
}

/// The member of the leadership group: its session timeout is the failover time's main part.
pub(crate) fn elector(opts: &ClusterOptions) -> ClientConfig {
    let mut c = base(opts);
    let session = opts.session_timeout.as_millis().max(500);
    c.set("group.id", format!("{}.leader", opts.cluster))
        .set("enable.auto.commit", "false")
        .set("session.timeout.ms", session.to_string())
        .set("heartbeat.interval.ms", (session / 6).max(100).to_string())
        .set("max.poll.interval.ms", "300000")
        // Sticky: a node joining does not move the lead (and the primary role) elsewhere.
        .set("partition.assignment.strategy", "cooperative-sticky");
    c
}

/// Creates the cluster's topics that do not exist yet (an existing topic is left as the
/// operator configured it).
pub(crate) fn ensure_topics(opts: &ClusterOptions, topics: &Topics) -> Result<(), String> {
    let (opts, topics) = (opts.clone(), topics.clone());
    on_runtime(move || async move {
        let admin: AdminClient<DefaultClientContext> = base(&opts)
            .create()
            .map_err(|e| format!("Kafka admin client: {e}"))?;
        let rf = || TopicReplication::Fixed(opts.replication_factor);
        let max_bytes = (RECORD_BYTES_MAX + (1 << 20)).to_string();
        let new = [
            NewTopic::new(&topics.log, 1, rf())
                .set("max.message.bytes", &max_bytes)
                .set("cleanup.policy", "delete"),
            NewTopic::new(&topics.leader, 1, rf()),
            NewTopic::new(&topics.nodes, 1, rf())
                .set("cleanup.policy", "compact")
                .set("segment.ms", "60000"),
        ];
        let admin_opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        let results = admin
            .create_topics(&new, &admin_opts)
            .await
            .map_err(|e| format!("creating the cluster's topics: {e}"))?;
        for result in results {
            match result {
                Ok(_) => {}
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((topic, code)) => return Err(format!("creating topic {topic}: {code}")),
            }
        }
        Ok(())
    })
}

/// Runs an admin future to completion on a thread of its own (callers may be inside an async
/// runtime, where blocking on a nested one is refused).
pub(crate) fn on_runtime<F, Fut, T>(f: F) -> T
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T>,
    T: Send + 'static,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime")
            .block_on(f())
    })
    .join()
    .expect("the admin thread does not panic")
}

/// A member of a grid row's group (`grid/rows.rs`): the session timeout is how long a dead
/// node's cells go unmatched, as for the leadership group.
pub(crate) fn grid_member(opts: &ClusterOptions, row: u32) -> ClientConfig {
    let mut c = elector(opts);
    c.set("group.id", format!("{}.grid.row.{row}", opts.cluster))
        .set("client.id", format!("herald-{}-row{row}", opts.node_id));
    c
}

/// The matches topic keeps records this long: a cell taking over reads back to the cell's
/// last claim, and a front end only reads what was published since it started.
pub const GRID_MATCHES_RETENTION_MS: u64 = 3_600_000;

/// Creates the grid's topics if missing and returns the partition count of the cells topic
/// (an existing topic keeps the count it was created with).
pub(crate) fn ensure_grid_topics(
    opts: &ClusterOptions,
    topics: &crate::grid::GridTopics,
    partitions: u32,
) -> Result<u32, String> {
    let (o, t) = (opts.clone(), topics.clone());
    on_runtime(move || async move {
        let admin: AdminClient<DefaultClientContext> = base(&o)
            .create()
            .map_err(|e| format!("Kafka admin client: {e}"))?;
        let rf = || TopicReplication::Fixed(o.replication_factor);
        let max_bytes = (RECORD_BYTES_MAX + (1 << 20)).to_string();
        let retention = GRID_MATCHES_RETENTION_MS.to_string();
        let new = [
            NewTopic::new(&t.cells, partitions as i32, rf()),
            NewTopic::new(&t.queries, 1, rf())
                .set("cleanup.policy", "compact")
                .set("segment.ms", "60000"),
            NewTopic::new(&t.matches, 1, rf())
                .set("max.message.bytes", &max_bytes)
                .set("cleanup.policy", "delete")
                .set("retention.ms", &retention)
                .set("segment.ms", "600000"),
        ];
        let admin_opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        let results = admin
            .create_topics(&new, &admin_opts)
            .await
            .map_err(|e| format!("creating the grid's topics: {e}"))?;
        for result in results {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((topic, code)) => return Err(format!("creating topic {topic}: {code}")),
            }
        }
        Ok(())
    })?;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = base(opts)
        .create()
        .map_err(|e| format!("Kafka client: {e}"))?;
    let md = consumer
        .fetch_metadata(Some(&topics.cells), Duration::from_secs(10))
        .map_err(|e| format!("the grid's cells topic: {e}"))?;
    let count = md
        .topics()
        .iter()
        .find(|t| t.name() == topics.cells)
        .map_or(0, |t| t.partitions().len());
    Ok(count as u32)
}
