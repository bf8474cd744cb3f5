//! Who may claim the primary role: the member of the Kafka consumer group `<cluster>.leader`
//! that the group assigns the one partition of the `<cluster>.leader` topic. Kafka's group
//! protocol gives failure detection (the session timeout) and exactly one assignee per
//! generation; it gives no fencing, so being assigned only allows a claim. Whether a claim
//! made a node primary is the log's decision (`arbiter.rs`), and losing the assignment does
//! not stop a primary: a newer claim in the log does.

use crate::shared::Shared;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::ClientContext;
use std::sync::Arc;
use std::time::Duration;

struct Lead(Arc<Shared>);

impl ClientContext for Lead {}

impl ConsumerContext for Lead {
    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let mut st = self.0.lock();
        if std::env::var_os("HERALD_CLUSTER_DEBUG").is_some() {
            eprintln!(
                "herald cluster: node {} rebalance {rebalance:?}",
                self.0.opts.node_id
            );
        }
        match rebalance {
            // Cooperative rebalances report only what changed: an empty change is no news.
            Rebalance::Assign(tpl) if tpl.count() > 0 => st.holds_lead = true,
            Rebalance::Revoke(tpl) if tpl.count() > 0 => st.holds_lead = false,
            Rebalance::Assign(_) | Rebalance::Revoke(_) => {}
            Rebalance::Error(e) => st.kafka_error = Some(format!("leadership group: {e}")),
        }
        self.0.changed.notify_all();
    }
}

pub(crate) fn run(shared: Arc<Shared>) {
    while !shared.stopping() {
        let consumer: BaseConsumer<Lead> =
            match crate::kafka::elector(&shared.opts).create_with_context(Lead(shared.clone())) {
                Ok(c) => c,
                Err(e) => {
                    shared.lock().kafka_error = Some(format!("leadership consumer: {e}"));
                    std::thread::sleep(Duration::from_secs(1));
                    continue;
                }
            };
        if let Err(e) = consumer.subscribe(&[&shared.topics.leader]) {
            shared.lock().kafka_error = Some(format!("joining the leadership group: {e}"));
            std::thread::sleep(Duration::from_secs(1));
            continue;
        }
        while !shared.stopping() {
            // Nothing is ever produced to the topic: polling only serves the group protocol.
            if let Some(Err(e)) = consumer.poll(Duration::from_millis(100)) {
                shared.lock().kafka_error = Some(format!("leadership group: {e}"));
            }
        }
        // Leave the group now, so the others need not wait for the session timeout.
        consumer.unsubscribe();
        shared.lock().holds_lead = false;
    }
}
