//! Cluster nodes in one process on a real broker: one becomes primary, the others apply its
//! batches and end with the same state; when the primary leaves another takes over and the
//! old one rejoins as a follower and catches up.

use herald_cluster::testing::{unique_name, KafkaCluster};
use herald_cluster::{ClusterOptions, Node, Role};
use herald_db::{Db, DbOptions, Write};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

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
}
