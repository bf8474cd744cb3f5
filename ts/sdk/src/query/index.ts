// The local query engine: the same language, order and errors as the server's query core.
export { Double, compare, valuesEqual, clone, type Value, type Doc } from "./value.js";
export { QueryError, type QueryErrorCode } from "./errors.js";
export { Filter } from "./filter.js";
export { Sort } from "./sort.js";
export { Projection } from "./projection.js";
export { Update, setLosslessDoubles } from "./update.js";
export { Query, type QuerySpec } from "./query.js";
export { parseLossless, stringifyLossless } from "./json.js";
