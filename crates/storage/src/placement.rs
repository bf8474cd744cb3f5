//! Where each table's entries live in redb ([`Placement`], decided by [`placement`]) and the one
//! function that writes a table's sorted entries there ([`write_sorted`]), which checkpoints
//! and the log's replay on open both go through. Snapshots read by the same decision
//! (`layer.rs`).
//!
//! Why one place: a table's entries must be written where readers look for them. When the
//! `index` and `log` tables moved out of their B-trees (into runs and blocks), the checkpoint
//! and recovery each had their own copy of that choice, and a third table moving would have had
//! to find both.
//!
//! Not here: the stored forms themselves (`runs/`, `logblocks.rs`), which entries a checkpoint
//! takes (`checkpoint.rs`).

use redb::WriteTransaction;

use crate::tables::Table;
use crate::StorageError;

/// How a table's entries are stored in redb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// One B-tree entry per key, in the table's own redb table.
    Tree,
    /// Sorted runs of compressed blocks, merged in the background (`runs/`). The table's own
    /// B-tree stays, empty since the format-2 upgrade, and is still read under the runs.
    Runs,
    /// Blocks appended in key order with a floor below which keys are deleted
    /// (`logblocks.rs`); only for a table whose new keys sort after every stored one and whose
    /// deletes remove the oldest keys.
    Blocks,
}

/// Where `table`'s entries live.
pub(crate) const fn placement(table: Table) -> Placement {
    match table {
        // ~30 small entries per document, written in random key order: a B-tree insert each
        // was most of a checkpoint's cost.
        Table::Index => Placement::Runs,
        // Append-only, pruned from the start: a block holds many records in one page.
        Table::Log => Placement::Blocks,
        Table::Docs | Table::Meta | Table::Tasks => Placement::Tree,
    }
}

/// Writes `entries` of `table` (strictly increasing keys, the newest value of each; `None` is a
/// delete) into `txn`, where [`placement`] says. Nothing at all for no entries (in particular
/// no new, empty index run).
pub(crate) fn write_sorted<'e>(
    txn: &WriteTransaction,
    table: Table,
    entries: impl IntoIterator<Item = (&'e [u8], Option<&'e [u8]>)>,
) -> Result<(), StorageError> {
    let mut entries = entries.into_iter().peekable();
    if entries.peek().is_none() {
        return Ok(());
    }
    match placement(table) {
        // Level 0, like every new run: levels never grow towards newer runs.
        Placement::Runs => drop(crate::runs::append(txn, entries, 0)?),
        Placement::Blocks => crate::logblocks::append(txn, entries)?,
        Placement::Tree => {
            let mut raw = txn.open_table(table.definition())?;
            for (key, value) in entries {
                match value {
                    Some(value) => drop(raw.insert(key, value)?),
                    None => drop(raw.remove(key)?),
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logblocks::LOG_BLOCKS;
    use crate::tables::RUN_META;
    use redb::{ReadableDatabase, ReadableTableMetadata};

    #[test]
    fn each_table_has_its_place() {
        let placed: Vec<_> = Table::ALL.iter().map(|&t| (t, placement(t))).collect();
        assert_eq!(
            placed,
            [
                (Table::Docs, Placement::Tree),
                (Table::Index, Placement::Runs),
                (Table::Log, Placement::Blocks),
                (Table::Meta, Placement::Tree),
                (Table::Tasks, Placement::Tree),
            ]
        );
    }

    /// For each table: how many entries its B-tree, the index runs' metadata and the log's
    /// blocks hold after [`write_sorted`] wrote two puts and a delete into a new database.
    fn stored_after_write(table: Table) -> (u64, u64, u64) {
        let db = redb::Builder::new()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .unwrap();
        let txn = db.begin_write().unwrap();
        let entries: [(&[u8], Option<&[u8]>); 3] =
            [(b"a", None), (b"b", Some(b"1")), (b"c", Some(b"2"))];
        write_sorted(&txn, table, entries).unwrap();
        // The same again with nothing: writes nothing (no empty run).
        write_sorted(&txn, table, []).unwrap();
        txn.open_table(table.definition()).unwrap();
        txn.open_table(RUN_META).unwrap();
        txn.open_table(LOG_BLOCKS).unwrap();
        txn.commit().unwrap();
        let read = db.begin_read().unwrap();
        let len = |def| read.open_table(def).unwrap().len().unwrap();
        (len(table.definition()), len(RUN_META), len(LOG_BLOCKS))
    }

    #[test]
    fn entries_are_written_where_the_placement_says() {
        for table in Table::ALL {
            let want = match placement(table) {
                Placement::Tree => (2, 0, 0),
                Placement::Runs => (0, 1, 0),
                Placement::Blocks => (0, 0, 1),
            };
            assert_eq!(stored_after_write(table), want, "{table:?}");
        }
    }
}
