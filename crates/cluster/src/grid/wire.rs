//! The grid's records on Kafka and their bytes: a view's registration on `<cluster>.grid.queries`
//! (and the grid's shape under the key `config`), and a cell's record on `<cluster>.grid.matches`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The key of the record on the queries topic that holds the grid's shape.
pub const CONFIG_KEY: &str = "config";

/// The grid's shape, which every node of a cluster must agree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shape {
    /// Query partitions (rows): each view belongs to one.
    pub rows: u32,
    /// Write partitions: each change belongs to one, by `write_partition(collection, id, W)`.
    pub partitions: u32,
}

/// A view a front end registered: what a cell needs to match it. Keyed on the topic by the
/// view's global key; a tombstone (no value) removes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Registration {
    pub collection: String,
    /// The filter as the client gave it (after the security rules' restriction).
    pub filter: Value,
    pub row: u32,
    /// The seq the view starts after: cells match its commits with a greater seq only.
    pub from_seq: u64,
    /// The front end's node id (for operators; keys already carry it).
    pub node: String,
}

/// One record of a cell on the matches topic: some matches and a cumulative claim.
///
/// The claim: for every view registered on the queries topic at an offset below
/// `queries_end`, every change of this cell's write partition with seq `<= to_seq` that the
/// view's filter matches (before- or after-image) is in this record or an earlier one of the
/// matches topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CellRecord {
    pub row: u32,
    pub part: u32,
    pub to_seq: u64,
    /// The offset after the last queries-topic record the cell had read when it claimed.
    pub queries_end: u64,
    /// `(seq, view key, indexes into the commit's changes, ascending)`.
    pub matches: Vec<(u64, String, Vec<u32>)>,
    /// The node that ran the cell (for operators and tests: a zombie's records are valid too).
    pub node: String,
}

/// A view's global key: never reused, so a late match can never be taken for another view.
pub fn view_key(node: &str, incarnation: u64, counter: u64) -> String {
    format!("{node}/{incarnation}/{counter}")
}

/// The prefix every key of this front end (node and incarnation) starts with.
pub fn key_prefix(node: &str, incarnation: u64) -> String {
    format!("{node}/{incarnation}/")
}

/// What the key of a lease record starts with; the rest is the front end's key prefix.
pub const LEASE_KEY_START: &str = "lease/";

/// The key of the lease record of the front end whose view keys start with `prefix`.
pub fn lease_key(prefix: &str) -> String {
    format!("{LEASE_KEY_START}{prefix}")
}

/// The front end's key prefix of a view key (`node/incarnation/`), or `None` for a key that
/// is not a view's.
pub fn prefix_of(view_key: &str) -> Option<&str> {
    let cut = view_key.rfind('/')?;
    (cut > 0).then(|| &view_key[..=cut])
}

/// A front end's lease record on the queries topic: the front end renews it while it runs.
/// Its content is for operators; what counts is when a node last read one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Lease {
    pub node: String,
    /// The front end's wall clock when it wrote the record, in ms since the epoch.
    pub at_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn records_round_trip_and_refuse_unknown_members() {
        let r = CellRecord {
            row: 1,
            part: 0,
            to_seq: 9,
            queries_end: 4,
            matches: vec![(9, view_key("n1", 7, 2), vec![0, 3])],
            node: "n2".into(),
        };
        let bytes = serde_json::to_vec(&r).unwrap();
        assert_eq!(serde_json::from_slice::<CellRecord>(&bytes).unwrap(), r);
        let reg: Result<Registration, _> = serde_json::from_value(json!({
            "collection": "c", "filter": {}, "row": 0, "fromSeq": 1, "node": "n", "x": 1
        }));
        assert!(reg.is_err());
    }

    #[test]
    fn lease_keys_and_prefixes() {
        let key = view_key("n1", 7, 2);
        let prefix = prefix_of(&key).unwrap();
        assert_eq!(prefix, key_prefix("n1", 7));
        assert_eq!(lease_key(prefix), "lease/n1/7/");
        assert_eq!(prefix_of("config"), None);
        assert_eq!(prefix_of("/x"), None);
    }
}
