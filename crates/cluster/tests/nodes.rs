//! Cluster nodes in one process on a real broker: one becomes primary, the others apply its
//! batches and end with the same state; when the primary leaves another takes over and the
//! old one rejoins as a follower and catches up.

use herald_cluster::testing::{unique_name, KafkaCluster};
use herald_cluster::{ClusterOptions, Node, Role};
use herald_db::{Db, DbOptions, Write};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

/// The tests run one at a time: each starts nodes whose failover timings it checks, and one
/// starts a broker of its own (a JVM start takes both cores here for seconds).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn start(kafka: &KafkaCluster, cluster: &str, id: &str, dir: &Path) -> (Node, Db) {
    let mut opts = ClusterOptions::new(kafka.bootstrap(), cluster, id, &format!("http://{id}"));
    opts.replication_factor = kafka.brokers().min(3) as i32;
    Node::start(opts, dir, DbOptions::default()).expect("node starts")
}

fn primary_of(nodes: &[Option<(Node, Db)>], timeout: Duration) -> usize {
    let deadline = Instant::now() + timeout;
    loop {
        let primaries: Vec<usize> = nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.as_ref().is_some_and(|(n, _)| n.role() == Role::Primary))
            .map(|(i, _)| i)
            .collect();
        if primaries.len() == 1 {
            return primaries[0];
        }
        assert!(
            Instant::now() < deadline,
            "no single primary: {primaries:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn put(db: &Db, id: &str, n: u64) -> Result<u64, herald_db::DbError> {
    db.commit(vec![Write::Put {
        collection: "things".into(),
        id: id.into(),
        doc: json!({ "n": n }),
        if_version: None,
    }])
    .map(|o| o.seq)
}

/// Waits until every running node is at the same replication index as `reference` and has
/// its digest.
fn converge(nodes: &[Option<(Node, Db)>], reference: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let want = nodes[reference].as_ref().unwrap().1.state_digest().unwrap();
    for (i, n) in nodes.iter().enumerate() {
        let Some((_, db)) = n else { continue };
        loop {
            let got = db.state_digest().unwrap();
            if got == want {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {i} at {got:?}, primary at {want:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn three_nodes_replicate_fail_over_and_rejoin() {
    let _serial = serial();
    let kafka = KafkaCluster::shared();
    let cluster = unique_name("nodes");
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut nodes: Vec<Option<(Node, Db)>> = (0..3)
        .map(|i| Some(start(kafka, &cluster, &format!("n{i}"), dirs[i].path())))
        .collect();
    let started = Instant::now();
    let p = primary_of(&nodes, Duration::from_secs(30));
    eprintln!("first primary n{p} after {:?}", started.elapsed());

    // Followers refuse writes of their own; the primary's are replicated.
    let follower = (p + 1) % 3;
    let err = put(&nodes[follower].as_ref().unwrap().1, "x", 0).unwrap_err();
    assert_eq!(err.code(), "unavailable");
    let mut acked = Vec::new();
    for i in 0..200u64 {
        let db = &nodes[p].as_ref().unwrap().1;
        acked.push((format!("d{i}"), put(db, &format!("d{i}"), i).unwrap()));
    }
    converge(&nodes, p);

    // The primary leaves; another takes over; writes go on there.
    let killed = nodes[p].take().unwrap();
    let left = Instant::now();
    drop(killed);
    let q = primary_of(&nodes, Duration::from_secs(30));
    eprintln!("n{q} took over {:?} after n{p} left", left.elapsed());
    assert_ne!(q, p);
    for i in 200..300u64 {
        let db = &nodes[q].as_ref().unwrap().1;
        acked.push((format!("d{i}"), put(db, &format!("d{i}"), i).unwrap()));
    }
    // The old primary comes back as a follower and catches up.
    nodes[p] = Some(start(kafka, &cluster, &format!("n{p}"), dirs[p].path()));
    converge(&nodes, q);
    let (old, db) = nodes[p].as_ref().unwrap();
    assert_eq!(old.role(), Role::Follower);
    for (id, _) in &acked {
        assert!(db.get("things", id).unwrap().is_some(), "{id} lost");
    }
    let seqs: Vec<u64> = acked.iter().map(|(_, s)| *s).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "seqs increase across the failover"
    );
    // Seqs mean the same everywhere: the commits a client resuming from seq 150 gets are the
    // same on every node (what `resumeFrom` reads), across the failover.
    let history = |db: &Db| -> Vec<String> {
        db.commits_between(150, db.seq())
            .unwrap()
            .into_commits()
            .unwrap()
            .iter()
            .map(|c| format!("{} {:?}", c.seq, c.changes))
            .collect()
    };
    let reference = history(&nodes[q].as_ref().unwrap().1);
    assert_eq!(reference.len() as u64, seqs[seqs.len() - 1] - 150);
    for (node, db) in nodes.iter().flatten() {
        assert_eq!(history(db), reference, "{}", node.node_id());
    }
}

/// Deletes every record of the cluster's log so far (what retention does to old segments).
fn truncate_log(kafka: &KafkaCluster, cluster: &str) -> i64 {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::{ClientConfig, Offset, TopicPartitionList};
    let topic = format!("{cluster}.log");
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", kafka.bootstrap());
    let consumer: BaseConsumer = config
        .clone()
        .set("group.id", format!("{cluster}.truncate"))
        .create()
        .unwrap();
    let (_, high) = consumer
        .fetch_watermarks(&topic, 0, Duration::from_secs(10))
        .unwrap();
    let admin: AdminClient<DefaultClientContext> = config.create().unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, Offset::Offset(high))
        .unwrap();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(admin.delete_records(&tpl, &AdminOptions::new()))
        .unwrap();
    high
}

/// A new node, and a node that was down while the log's beginning was deleted, cannot start
/// from the log: they start from another node's snapshot and then follow the log.
#[test]
fn a_node_the_log_no_longer_reaches_starts_from_a_snapshot() {
    let _serial = serial();
    let kafka = KafkaCluster::shared();
    let cluster = unique_name("snap");
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut nodes: Vec<Option<(Node, Db)>> = vec![
        Some(start(kafka, &cluster, "n0", dirs[0].path())),
        Some(start(kafka, &cluster, "n1", dirs[1].path())),
        None,
    ];
    let p = primary_of(&nodes, Duration::from_secs(30));
    for i in 0..50u64 {
        put(&nodes[p].as_ref().unwrap().1, &format!("a{i}"), i).unwrap();
    }
    converge(&nodes, p);
    // n1 goes down; more writes; the log's beginning is deleted.
    let other = 1 - p;
    drop(nodes[other].take());
    for i in 50..80u64 {
        put(&nodes[p].as_ref().unwrap().1, &format!("a{i}"), i).unwrap();
    }
    std::thread::sleep(Duration::from_millis(600)); // the primary saves its position
    truncate_log(kafka, &cluster);

    let from = |url: &str, file: &Path| -> Result<(), String> {
        assert_eq!(url, format!("http://n{p}"));
        let f = std::fs::File::create(file).map_err(|e| e.to_string())?;
        nodes_write(&nodes, p, f)
    };
    for (i, id) in [(other, format!("n{other}")), (2, "n2".to_string())] {
        let mut opts =
            ClusterOptions::new(kafka.bootstrap(), &cluster, &id, &format!("http://{id}"));
        opts.replication_factor = kafka.brokers().min(3) as i32;
        match Node::start(opts.clone(), dirs[i].path(), DbOptions::default()) {
            Err(herald_cluster::StartError::NeedsSnapshot(why)) => eprintln!("{id}: {why}"),
            Err(e) => panic!("{id}: {e}"),
            Ok(_) => panic!("{id} started without the log's beginning"),
        }
        let info = Node::bootstrap(&opts, dirs[i].path(), from).unwrap();
        assert!(info.index > 0);
    }
    nodes[other] = Some(start(
        kafka,
        &cluster,
        &format!("n{other}"),
        dirs[other].path(),
    ));
    nodes[2] = Some(start(kafka, &cluster, "n2", dirs[2].path()));
    for i in 80..100u64 {
        put(&nodes[p].as_ref().unwrap().1, &format!("a{i}"), i).unwrap();
    }
    converge(&nodes, p);
    for n in nodes.iter().flatten() {
        assert_eq!(n.1.get("things", "a99").unwrap().unwrap().doc["n"], 99);
    }
}

fn nodes_write(nodes: &[Option<(Node, Db)>], i: usize, out: std::fs::File) -> Result<(), String> {
    nodes[i].as_ref().unwrap().0.write_snapshot(out).map(|_| ())
}

/// Kafka down: writes fail with `unavailable` within the write timeout (no hang), reads go on
/// from the last applied state, and writes work again once Kafka is back.
#[test]
fn writes_fail_fast_while_kafka_is_down_and_resume_after() {
    let _serial = serial();
    let kafka = KafkaCluster::start(1);
    let cluster = unique_name("down");
    let dir = tempfile::tempdir().unwrap();
    let mut opts = ClusterOptions::new(kafka.bootstrap(), &cluster, "n0", "http://n0");
    opts.write_timeout = Duration::from_secs(2);
    let (node, db) = Node::start(opts, dir.path(), DbOptions::default()).unwrap();
    assert!(node.wait_for_role(Role::Primary, Duration::from_secs(30)));
    put(&db, "before", 1).unwrap();

    kafka.kill_broker(0);
    let started = Instant::now();
    let err = put(&db, "during", 2).unwrap_err();
    let took = started.elapsed();
    eprintln!("a write with Kafka down failed after {took:?}: {err}");
    assert_eq!(err.code(), "unavailable");
    assert!(took < Duration::from_secs(6), "{took:?}");
    assert!(db.get("things", "before").unwrap().is_some(), "reads go on");
    assert!(db.get("things", "during").unwrap().is_none());

    kafka.restart_broker(0);
    let deadline = Instant::now() + Duration::from_secs(60);
    let back = Instant::now();
    loop {
        match put(&db, "after", 3) {
            Ok(_) => break,
            Err(e) => {
                assert_eq!(e.code(), "unavailable");
                assert!(Instant::now() < deadline, "writes did not resume: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    eprintln!(
        "writes resumed {:?} after the broker restarted",
        back.elapsed()
    );
    assert!(db.get("things", "after").unwrap().is_some());
}
