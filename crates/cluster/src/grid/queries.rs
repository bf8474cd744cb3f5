//! The active views of the whole cluster: every node follows the compacted topic
//! `<cluster>.grid.queries` from its beginning and keeps each view's registration with its
//! offset, so a cell knows which views were registered below any offset it claims. The same
//! topic holds the grid's shape (key `config`), which every node checks at start.

use crate::grid::wire::{Registration, Shape, CONFIG_KEY};
use crate::grid::GridCtx;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Active views the registry keeps at most (every front end's, of every row); past it a
/// registration is ignored and counted (`dropped`): its front end then never completes and
/// resets its subscribers.
pub const VIEWS_MAX: usize = 1_000_000;

/// A registered view and where on the topic it was registered.
#[derive(Debug, Clone)]
pub struct Registered {
    pub offset: u64,
    pub reg: Registration,
}

#[derive(Default)]
pub struct RegistryState {
    /// The offset after the last record read.
    pub end: u64,
    /// The topic's end when the follower started, reached once `end >= start_high`.
    pub start_high: Option<u64>,
    /// Active views by key.
    pub views: BTreeMap<String, Registered>,
    /// The grid's shape as the topic says (the last `config` record read).
    pub shape: Option<Shape>,
    pub dropped: u64,
    pub error: Option<String>,
}

impl RegistryState {
    /// Whether the follower has read everything that was on the topic when it started.
    pub fn caught_up(&self) -> bool {
        self.start_high.is_some_and(|h| self.end >= h)
    }
}

/// The registry shared by the follower thread (writer) and the cells (readers).
#[derive(Default)]
pub struct Registry {
    state: Mutex<RegistryState>,
    /// Signalled whenever `state` changes.
    pub changed: Condvar,
}

impl Registry {
    pub fn lock(&self) -> MutexGuard<'_, RegistryState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until the follower has read the topic as far as it was at start.
    pub fn wait_caught_up(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        while !st.caught_up() {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            st = self
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    fn apply(&self, offset: u64, key: Option<&[u8]>, payload: Option<&[u8]>) {
        let mut st = self.lock();
        st.end = st.end.max(offset + 1);
        let Some(key) = key.and_then(|k| std::str::from_utf8(k).ok()) else {
            return;
        };
        if key == CONFIG_KEY {
            if let Some(shape) = payload.and_then(|p| serde_json::from_slice::<Shape>(p).ok()) {
                st.shape = Some(shape);
            }
        } else {
            // A tombstone has no value; an empty one is taken as one too.
            let payload = payload.filter(|p| !p.is_empty());
            match payload.map(serde_json::from_slice::<Registration>) {
                Some(Ok(reg)) => {
                    if st.views.len() < VIEWS_MAX || st.views.contains_key(key) {
                        st.views.insert(key.to_string(), Registered { offset, reg });
                    } else {
                        st.dropped += 1;
                    }
                }
                // A tombstone, or a record this version does not understand (ignored: no
                // front end of this version waits for it).
                None => {
                    st.views.remove(key);
                }
                Some(Err(_)) => {}
            }
        }
        drop(st);
        self.changed.notify_all();
    }
}

/// Follows the queries topic until the grid stops.
pub(crate) fn run(ctx: Arc<GridCtx>) {
    let (shared, topic, registry) = (&ctx.shared, &ctx.topics.queries, &ctx.registry);
    let consumer: BaseConsumer = match crate::kafka::reader(&shared.opts, "grid.queries").create() {
        Ok(c) => c,
        Err(e) => {
            registry.lock().error = Some(format!("queries consumer: {e}"));
            return;
        }
    };
    let mut tpl = TopicPartitionList::new();
    let assigned = tpl
        .add_partition_offset(topic, 0, Offset::Beginning)
        .is_ok()
        && consumer.assign(&tpl).is_ok();
    if !assigned {
        registry.lock().error = Some("could not read the grid's queries topic".into());
        return;
    }
    while !ctx.stopping() {
        if registry.lock().start_high.is_none() {
            match consumer.fetch_watermarks(topic, 0, Duration::from_secs(5)) {
                Ok((_, high)) => {
                    registry.lock().start_high = Some(high.max(0) as u64);
                    registry.changed.notify_all();
                }
                Err(e) => registry.lock().error = Some(format!("grid queries topic: {e}")),
            }
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => registry.apply(m.offset().max(0) as u64, m.key(), m.payload()),
            Some(Err(KafkaError::PartitionEOF(_))) => {
                // The watermark was taken before this poll: at the end now, we are past it.
                let mut st = registry.lock();
                if let Some(h) = st.start_high {
                    st.end = st.end.max(h);
                }
                drop(st);
                registry.changed.notify_all();
            }
            None => {}
            Some(Err(e)) => registry.lock().error = Some(format!("grid queries topic: {e}")),
        }
    }
}
