//! The server's [`ClusterView`] of a running `herald_cluster::Node` (cluster builds only), and
//! the state digest endpoint's data.

use crate::cluster::{ClusterView, Role};
use herald_cluster::grid::Grid;
use herald_cluster::Node;
use herald_db::Db;
use herald_protocol::{ClusterStatus, GridCell, GridStatus, NodeRole, NodeStatus};
use std::sync::Arc;

struct NodeView {
    node: Arc<Node>,
    db: Db,
    grid: Option<Arc<Grid>>,
}

/// The view of `node`, whose database is `db`, with its share of the matching grid.
pub fn view(node: Arc<Node>, db: Db, grid: Option<Arc<Grid>>) -> Arc<dyn ClusterView> {
    Arc::new(NodeView { node, db, grid })
}

/// The grid as this node sees it: the cells it runs (the cells its engine waits on are the
/// engine's, `api::cluster` adds them).
fn grid_status(grid: &Grid, me: &str) -> GridStatus {
    let shape = grid.shape();
    GridStatus {
        rows: shape.rows,
        partitions: shape.partitions,
        running: grid
            .running()
            .into_iter()
            .map(|c| GridCell {
                row: c.row,
                part: c.part,
                seq: c.seq,
                lag_seqs: c.lag,
                views: c.views as u64,
                node: Some(me.to_string()),
            })
            .collect(),
        waiting: Vec::new(),
    }
}

fn role_of(role: herald_cluster::Role) -> Role {
    match role {
        herald_cluster::Role::Primary => Role::Primary,
        herald_cluster::Role::Follower => Role::Follower,
        herald_cluster::Role::Candidate => Role::Candidate,
    }
}

impl ClusterView for NodeView {
    fn role(&self) -> Role {
        role_of(self.node.role())
    }

    fn primary_url(&self) -> Option<String> {
        self.node
            .primary()
            .filter(|p| p.node != self.node.node_id())
            .map(|p| p.url)
    }

    fn node_id(&self) -> String {
        self.node.node_id().to_string()
    }

    fn write_snapshot(&self, out: &mut dyn std::io::Write) -> Result<(), String> {
        self.node.write_snapshot(out).map(|_| ())
    }

    fn status(&self) -> ClusterStatus {
        let now = herald_cluster::now_ms();
        let nodes = self.node.nodes();
        let top = nodes.iter().map(|n| n.applied_seq).max().unwrap_or(0);
        let me = self.node.node_id();
        ClusterStatus {
            cluster: Some(self.node.cluster().to_string()),
            node_id: me.to_string(),
            epoch: self.node.epoch(),
            primary: self.node.primary().map(|p| p.node),
            nodes: nodes
                .into_iter()
                .map(|n| NodeStatus {
                    role: match role_of(herald_cluster::role_of(&n)) {
                        Role::Primary => NodeRole::Primary,
                        Role::Follower => NodeRole::Follower,
                        Role::Candidate => NodeRole::Candidate,
                    },
                    lag_seqs: top.saturating_sub(n.applied_seq),
                    last_seen_ms: if n.id == me {
                        0
                    } else {
                        now.saturating_sub(n.at_ms)
                    },
                    applied_seq: if n.id == me {
                        self.db.seq()
                    } else {
                        n.applied_seq
                    },
                    id: n.id,
                    url: n.url,
                })
                .collect(),
            grid: self.grid.as_deref().map(|g| grid_status(g, me)),
        }
    }
}
