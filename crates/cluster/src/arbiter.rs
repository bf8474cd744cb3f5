//! The rule every node applies to the log, record by record, in the log's order: which claim
//! made which node primary, and which data records are the database's history. Pure and
//! deterministic, so every reader of the same log reaches the same verdicts; that is the whole
//! of the cluster's agreement (Kafka's single partition gives the order and the durability).
//!
//! - A claim is accepted when its epoch is above every epoch accepted before it.
//! - A data record is accepted when its epoch is the current one and its index is the last
//!   accepted index + 1.
//!
//! Fencing follows: once a newer claim is in the log, nothing the deposed primary writes later
//! (an older epoch) is accepted by anyone, and since a primary acknowledges a write only after
//! reading its record back accepted, it can never acknowledge a write that lies after the new
//! primary's claim. A record the producer retried (same epoch and index twice) is accepted once.

use crate::record::Record;
use serde::{Deserialize, Serialize};

/// What the log says so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogState {
    /// The highest accepted claim's epoch (0 before any).
    pub epoch: u64,
    /// The node that claimed it.
    pub primary: Option<Primary>,
    /// The last accepted data record's replication index (0 before any).
    pub index: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Primary {
    pub node: String,
    pub url: String,
}

/// What one record means, given the records before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A claim that made its node the primary of its epoch.
    Elected,
    /// A claim for an epoch not above the current one: ignored.
    StaleClaim,
    /// The next batch of the database's history (its index is now `LogState::index`).
    Accepted,
    /// Data of an epoch that is not the current one (a deposed primary's late write): ignored.
    StaleEpoch,
    /// Data of the current epoch whose index is not the next one: ignored (a duplicate of an
    /// accepted record, or a batch written after a refused one).
    OutOfOrder,
}

impl LogState {
    pub fn step(&mut self, record: &Record) -> Verdict {
        match record {
            Record::Claim { epoch, node, url } => {
                if *epoch <= self.epoch {
                    return Verdict::StaleClaim;
                }
                self.epoch = *epoch;
                self.primary = Some(Primary {
                    node: node.clone(),
                    url: url.clone(),
                });
                Verdict::Elected
            }
            Record::Data { epoch, index, .. } => {
                if *epoch != self.epoch {
                    Verdict::StaleEpoch
                } else if *index != self.index + 1 {
                    Verdict::OutOfOrder
                } else {
                    self.index = *index;
                    Verdict::Accepted
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A writer that believes it is primary of `epoch` from `index`: what a node that read the
    /// log up to some point (maybe long ago: paused, partitioned) would write.
    #[derive(Debug, Clone)]
    enum Act {
        /// Node `n` reads the whole log and claims the next epoch.
        Claim(usize),
        /// Node `n` writes its next batch, as primary of the epoch it last won.
        Write(usize),
        /// The producer of node `n` sends its last record again (a retry).
        Retry(usize),
    }

    fn acts() -> impl Strategy<Value = Vec<Act>> {
        prop::collection::vec(
            prop_oneof![
                1 => (0..3usize).prop_map(Act::Claim),
                6 => (0..3usize).prop_map(Act::Write),
                1 => (0..3usize).prop_map(Act::Retry),
            ],
            1..120,
        )
    }

    #[derive(Default, Clone)]
    struct Writer {
        /// The epoch it won and the next index it will write.
        term: Option<(u64, u64)>,
        last: Option<Record>,
        /// Records it acknowledged: (epoch, index, payload).
        acked: Vec<(u64, u64, u8)>,
    }

    fn replay(log: &[Record]) -> (LogState, Vec<(Verdict, LogState)>) {
        let mut state = LogState::default();
        let verdicts = log.iter().map(|r| (state.step(r), state.clone())).collect();
        (state, verdicts)
    }

    proptest! {
        /// However stale the writers' views, the accepted data records are one gap-free
        /// history, and every write a writer acknowledged (after reading it back accepted) is
        /// in it, once; a write it did not see accepted is never in it.
        #[test]
        fn acknowledged_writes_are_exactly_the_accepted_history(acts in acts()) {
            let mut log: Vec<Record> = Vec::new();
            let mut writers = vec![Writer::default(); 3];
            let mut payload = 0u8;
            for act in acts {
                match act {
                    Act::Claim(n) => {
                        let (state, _) = replay(&log);
                        let claim = Record::Claim {
                            epoch: state.epoch + 1,
                            node: format!("n{n}"),
                            url: String::new(),
                        };
                        log.push(claim);
                        let (after, verdicts) = replay(&log);
                        if verdicts.last().unwrap().0 == Verdict::Elected {
                            writers[n].term = Some((after.epoch, after.index + 1));
                        }
                    }
                    Act::Write(n) => {
                        let Some((epoch, index)) = writers[n].term else { continue };
                        payload = payload.wrapping_add(1);
                        let record = Record::Data { epoch, index, batch: vec![payload] };
                        log.push(record.clone());
                        writers[n].last = Some(record);
                        // Read back: acknowledge only if accepted where it landed.
                        let (_, verdicts) = replay(&log);
                        if verdicts.last().unwrap().0 == Verdict::Accepted {
                            writers[n].acked.push((epoch, index, payload));
                            writers[n].term = Some((epoch, index + 1));
                        } else {
                            // Refused: this writer is deposed (or behind) until it claims again.
                            writers[n].term = None;
                        }
                    }
                    Act::Retry(n) => {
                        if let Some(r) = writers[n].last.clone() {
                            log.push(r);
                        }
                    }
                }
            }
            let (_, verdicts) = replay(&log);
            let history: Vec<(u64, u64, u8)> = log
                .iter()
                .zip(&verdicts)
                .filter(|(_, (v, _))| *v == Verdict::Accepted)
                .map(|(r, _)| match r {
                    Record::Data { epoch, index, batch } => (*epoch, *index, batch[0]),
                    Record::Claim { .. } => unreachable!(),
                })
                .collect();
            for (i, (_, index, _)) in history.iter().enumerate() {
                prop_assert_eq!(*index, i as u64 + 1, "gap-free");
            }
            let mut acked: Vec<_> = writers.iter().flat_map(|w| w.acked.clone()).collect();
            acked.sort_by_key(|a| a.1);
            prop_assert_eq!(acked, history);
        }
    }

    #[test]
    fn a_deposed_primarys_late_record_is_ignored() {
        let mut s = LogState::default();
        let claim = |epoch: u64, node: &str| Record::Claim {
            epoch,
            node: node.into(),
            url: String::new(),
        };
        let data = |epoch, index| Record::Data {
            epoch,
            index,
            batch: vec![],
        };
        assert_eq!(s.step(&claim(1, "a")), Verdict::Elected);
        assert_eq!(s.step(&data(1, 1)), Verdict::Accepted);
        assert_eq!(s.step(&data(1, 1)), Verdict::OutOfOrder, "a retry");
        assert_eq!(s.step(&claim(2, "b")), Verdict::Elected);
        assert_eq!(s.step(&data(1, 2)), Verdict::StaleEpoch, "a's late write");
        assert_eq!(s.step(&claim(2, "a")), Verdict::StaleClaim);
        assert_eq!(s.step(&data(2, 2)), Verdict::Accepted);
        assert_eq!(s.primary.as_ref().unwrap().node, "b");
        assert_eq!((s.epoch, s.index), (2, 2));
    }
}
