//! The active views of the whole cluster: every node follows the compacted topic
//! `<cluster>.grid.queries` from its beginning and keeps each view's registration with its
//! offset, so a cell knows which views were registered below any offset it claims. The same
//! topic holds the grid's shape (key `config`), which every node checks at start, and the
//! front ends' leases (`lease.rs`): the registry notes when it last read each one.

use crate::grid::wire::{prefix_of, Registration, Shape, CONFIG_KEY, LEASE_KEY_START};
use crate::grid::GridCtx;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use std::collections::{BTreeMap, HashMap};
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
    /// Per front end (its key prefix), when this node last read its lease or one of its
    /// registrations: a front end is alive as long as that is recent.
    pub seen: HashMap<String, Instant>,
}

impl RegistryState {
    /// Whether the follower has read everything that was on the topic when it started.
    pub fn caught_up(&self) -> bool {
        self.start_high.is_some_and(|h| self.end >= h)
    }

    /// The front ends (key prefixes) not seen for longer than `ttl` at `now`.
    pub fn expired_front_ends(&self, now: Instant, ttl: Duration) -> Vec<String> {
        let mut out: Vec<String> = self
            .seen
            .iter()
            .filter(|(_, at)| now.saturating_duration_since(**at) > ttl)
            .map(|(p, _)| p.clone())
            .collect();
        out.sort();
        out
    }

    /// The views of `row` registered by the front ends with these key prefixes.
    pub fn views_of(&self, prefixes: &[String], row: u32) -> Vec<String> {
        let mut out = Vec::new();
        for p in prefixes {
            out.extend(
                self.views
                    .range(p.clone()..)
                    .take_while(|(k, _)| k.starts_with(p.as_str()))
                    .filter(|(_, r)| r.reg.row == row)
                    .map(|(k, _)| k.clone()),
            );
        }
        out
    }

    /// Whether any view of the front end with key prefix `prefix` is registered.
    pub fn has_views_of(&self, prefix: &str) -> bool {
        self.views
            .range(prefix.to_string()..)
            .next()
            .is_some_and(|(k, _)| k.starts_with(prefix))
    }

    /// Applies one record of the topic, read at `now`.
    fn apply(&mut self, offset: u64, key: Option<&[u8]>, payload: Option<&[u8]>, now: Instant) {
        self.end = self.end.max(offset + 1);
        let Some(key) = key.and_then(|k| std::str::from_utf8(k).ok()) else {
            return;
        };
        // A tombstone has no value; an empty one is taken as one too.
        let payload = payload.filter(|p| !p.is_empty());
        if key == CONFIG_KEY {
            if let Some(shape) = payload.and_then(|p| serde_json::from_slice::<Shape>(p).ok()) {
                self.shape = Some(shape);
            }
        } else if let Some(prefix) = key.strip_prefix(LEASE_KEY_START) {
            match payload {
                Some(_) => {
                    self.seen.insert(prefix.to_string(), now);
                }
                // Removed (by a node that found it expired with no views left). Should a
                // registration have come in between, the front end stays known by it.
                None if !self.has_views_of(prefix) => {
                    self.seen.remove(prefix);
                }
                None => {}
            }
        } else {
            match payload.map(serde_json::from_slice::<Registration>) {
                Some(Ok(reg)) => {
                    if self.views.len() < VIEWS_MAX || self.views.contains_key(key) {
                        if let Some(prefix) = prefix_of(key) {
                            self.seen.insert(prefix.to_string(), now);
                        }
                        self.views
                            .insert(key.to_string(), Registered { offset, reg });
                    } else {
                        self.dropped += 1;
                    }
                }
                // A tombstone, or a record this version does not understand (ignored: no
                // front end of this version waits for it).
                None => {
                    self.views.remove(key);
                }
                Some(Err(_)) => {}
            }
        }
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
        self.lock().apply(offset, key, payload, Instant::now());
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reg(row: u32) -> Vec<u8> {
        serde_json::to_vec(
            &json!({"collection": "c", "filter": {}, "row": row, "fromSeq": 0,
                                   "node": "n"}),
        )
        .unwrap()
    }

    #[test]
    fn a_front_end_expires_when_neither_its_lease_nor_a_registration_is_read() {
        let ttl = Duration::from_secs(60);
        let t0 = Instant::now();
        let mut st = RegistryState::default();
        st.apply(0, Some(b"a/1/0"), Some(&reg(0)), t0);
        st.apply(1, Some(b"a/1/1"), Some(&reg(1)), t0);
        st.apply(2, Some(b"b/5/0"), Some(&reg(0)), t0);
        st.apply(
            3,
            Some(b"lease/b/5/"),
            Some(b"{}"),
            t0 + Duration::from_secs(50),
        );
        let later = t0 + Duration::from_secs(61);
        let expired = st.expired_front_ends(later, ttl);
        assert_eq!(expired, vec!["a/1/".to_string()]);
        assert_eq!(st.views_of(&expired, 0), vec!["a/1/0".to_string()]);
        assert_eq!(st.views_of(&expired, 1), vec!["a/1/1".to_string()]);
        assert!(
            st.expired_front_ends(t0 + ttl, ttl).is_empty(),
            "not before the ttl"
        );
        // A registration renews its front end like a lease record.
        st.apply(4, Some(b"a/1/2"), Some(&reg(0)), later);
        assert!(st.expired_front_ends(later, ttl).is_empty());
        // Removed views go.
        for (o, k) in [(5, "a/1/0"), (6, "a/1/1"), (7, "a/1/2")] {
            st.apply(o, Some(k.as_bytes()), None, later);
        }
        assert!(!st.has_views_of("a/1/") && st.has_views_of("b/5/"));
        // A lease's removal forgets its front end only when it has no views left.
        st.apply(8, Some(b"lease/b/5/"), None, later);
        assert!(st.seen.contains_key("b/5/"));
        st.apply(9, Some(b"lease/a/1/"), None, later);
        assert!(!st.seen.contains_key("a/1/"));
        assert_eq!(st.end, 10);
    }
}
