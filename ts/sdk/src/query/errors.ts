// The stable error codes of the query language (the same codes the server answers with).

export type QueryErrorCode =
  | "bad_filter"
  | "unknown_operator"
  | "bad_operand"
  | "bad_regex"
  | "unsupported_regex"
  | "bad_sort"
  | "bad_projection"
  | "bad_query"
  | "limit_exceeded"
  | "bad_update"
  | "conflicting_update_paths"
  | "type_mismatch"
  | "path_not_viable"
  | "immutable_field"
  | "numeric_overflow";

/** A query or update was rejected; `code` is stable, `message` names the path and operator. */
export class QueryError extends Error {
  constructor(
    readonly code: QueryErrorCode,
    message: string,
  ) {
    super(message);
    this.name = "QueryError";
  }
}

export const FILTER_DEPTH_MAX = 32;
export const FILTER_NODES_MAX = 1024;
export const IN_VALUES_MAX = 1000;
export const REGEX_BYTES_MAX = 1024;
export const SORT_KEYS_MAX = 32;
/** Longest document id a cursor's `_id` value may hold, in UTF-8 bytes. */
export const CURSOR_ID_BYTES_MAX = 256;
/** Longest full path (`collection/id`) a collection-group cursor's `_path` value may hold, in
 * UTF-8 bytes: the longest collection path, a slash, the longest id. */
export const CURSOR_PATH_BYTES_MAX = 1024 + 1 + CURSOR_ID_BYTES_MAX;
export const PROJECTION_FIELDS_MAX = 256;
export const UPDATE_PATHS_MAX = 1024;
export const EACH_VALUES_MAX = 10_000;
export const PATH_BYTES_MAX = 1024;
export const PATH_SEGMENTS_MAX = 64;
