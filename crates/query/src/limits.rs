//! Limits against abusive queries and updates. Each is a named constant so that the error message,
//! the docs and the tests agree on one number.

/// Deepest nesting of `$and`/`$or`/`$nor`/`$not`/`$elemMatch` and embedded operator objects.
pub const FILTER_DEPTH_MAX: usize = 32;
/// Most predicates and logical nodes in one filter.
pub const FILTER_NODES_MAX: usize = 1024;
/// Longest `$in` / `$nin` / `$all` list.
pub const IN_VALUES_MAX: usize = 1000;
/// Longest `$regex` pattern, in bytes.
pub const REGEX_BYTES_MAX: usize = 1024;
/// Largest compiled regular expression program, in bytes (the regex crate's size limit).
pub const REGEX_COMPILED_BYTES_MAX: usize = 1 << 20;
/// Largest lazily built regex DFA, in bytes.
pub const REGEX_DFA_BYTES_MAX: usize = 2 << 20;
/// Most keys in one sort specification.
pub const SORT_KEYS_MAX: usize = 32;
/// Longest document id a cursor's `_id` value may hold, in bytes (the database's longest id).
pub const CURSOR_ID_BYTES_MAX: usize = 256;
/// Longest full document path (`collection/id`) a collection-group cursor's `_path` value may
/// hold, in bytes: the database's longest collection path (1024), a slash, its longest id.
pub const CURSOR_PATH_BYTES_MAX: usize = 1024 + 1 + CURSOR_ID_BYTES_MAX;
/// Most fields in one projection.
pub const PROJECTION_FIELDS_MAX: usize = 256;
/// Most field paths in one update.
pub const UPDATE_PATHS_MAX: usize = 1024;
/// Longest `$each` list of `$push` / `$addToSet`.
pub const EACH_VALUES_MAX: usize = 10_000;

// Aggregation pipelines (`pipeline/`). Every stage that holds documents is bounded, so one
// request cannot make the server hold more than these figures (plus the head query's result).

/// Most stages in one pipeline.
pub const PIPELINE_STAGES_MAX: usize = 64;
/// Most groups one `$group` stage may hold.
pub const GROUPS_MAX: usize = 100_000;
/// Most elements in the array one `$push` / `$addToSet` builds for one group.
pub const ACC_ARRAY_VALUES_MAX: usize = 10_000;
/// Largest array one `$push` / `$addToSet` builds for one group, in (estimated) bytes.
pub const ACC_ARRAY_BYTES_MAX: usize = 16 << 20;
/// Most documents `$unwind` makes of one input document.
pub const UNWIND_OUTPUT_MAX: usize = 10_000;
/// Most bytes (estimated) a blocking stage (`$sort`, `$group`) holds at once, and the most bytes
/// any stage's output may hold (pull evaluation materializes each stage's output).
pub const BLOCKING_STAGE_BYTES_MAX: usize = 64 << 20;
