// Known divergences between mingo and Herald that are NOT Herald bugs.
//
// Each entry: { id, kind: "query" | "update", side: "mingo" | "herald", reason, patches, test }.
//   test(case, mingoResult, heraldResult) -> true when this entry explains the divergence.
//
// Almost every entry works the same way: it re-runs the case through mingo with ONE operator or
// stage swapped for the MongoDB model in lib/mongo-ref.mjs (`patches`) and explains the divergence
// only if mingo then gives exactly Herald's answer. So an entry never excuses "anything involving
// $type": only answers that MongoDB itself (or Herald's documented choice) would give.
// When no single entry explains a divergence, run.mjs tries the union of the relevant entries'
// patches (a case can hit two mingo bugs at once) and reports the smallest such set.
//
// Versions: mingo 7.2.7 (see package.json); MongoDB semantics of 8.0.

import { patchedQuery, patchedUpdate } from "./lib/mingo-runner.mjs";
import { patchedPipeline } from "./lib/mingo-pipeline.mjs";
import { sortKey } from "./lib/mongo-ref.mjs";
import { sameAnswer } from "./lib/values.mjs";

const Q = (id, side, patches, relevant, reason) => ({
  id,
  kind: "query",
  side,
  patches,
  relevant,
  reason,
  test: (c, _m, h) => sameAnswer("query", patchedQuery(c, new Set(patches)), h),
});
const U = (id, side, patches, relevant, reason) => ({
  id,
  kind: "update",
  side,
  patches,
  relevant,
  reason,
  test: (c, _m, h) => sameAnswer("update", patchedUpdate(c, new Set(patches)), h),
});

const P = (id, side, patches, relevant, reason) => ({
  id,
  kind: "pipeline",
  side,
  patches,
  relevant,
  reason,
  test: (c, _m, h) => sameAnswer("pipeline", patchedPipeline(c, new Set(patches)), h),
});

// Relevance helpers: does the case mention this operator at all? (only to save time)
const mentions = (...ops) => (c) => ops.some((op) => c.queryText.includes(JSON.stringify(op) + ":"));
const updates = (op) => (c) => c.updateText.includes(JSON.stringify(op) + ":");
const always = () => true;
const pipelineMentions = (...ops) => (c) => ops.some((op) => c.pipelineText.includes(JSON.stringify(op) + ":"));
/** Does a document of the case hold parallel arrays for the case's sort pattern? */
function hasParallelArrays(c) {
  if (!c.queryText.includes('"sort":')) return false;
  let q, docs;
  try {
    q = JSON.parse(c.queryText);
    docs = JSON.parse(c.docsText);
    if (!q.sort || typeof q.sort !== "object" || Object.keys(q.sort).length < 2) return false;
  } catch {
    return false;
  }
  return docs.some((d) => {
    try {
      sortKey(d, q.sort);
      return false;
    } catch (e) {
      return /parallel/.test(e.message);
    }
  });
}

export const KNOWN_DIVERGENCES = [
  // ----------------------------------------------------------------- Herald's deliberate choices
  Q("herald-type-json-numbers", "herald", ["q:type-json"], mentions("$type"),
    "Herald types numbers by their JSON spelling: an integral literal that fits int32 is \"int\", a larger " +
    "integral literal is \"long\", a literal with a fraction or exponent is \"double\". mingo calls every " +
    "integer both int and long and every number a double ({$type:\"double\"} matches 1; {$type:\"int\"} " +
    "matches 3000000000)."),

  Q("herald-sort-parallel-arrays", "herald", ["q:sort", "q:sort-parallel"], hasParallelArrays,
    "MongoDB fails a find whose compound sort meets two different arrays in one document (\"cannot sort with keys " +
    "that are parallel arrays\", sort_dotted_paths_parallel_arrays.js, even for empty arrays). Herald sorts such " +
    "documents instead, expanding the arrays independently (cartesian product of the key tuples), so the document " +
    "sorts by each array's smallest (ascending) / largest (descending) key as with a single array. (Patch: MongoDB's " +
    "sort with the parallel-array error replaced by that expansion.)"),

  // ------------------------------------------------------------------------- mingo query bugs
  Q("mingo-eq-path-semantics", "mingo", ["q:$eq"], always,
    "mingo's $eq/$ne (and plain equality) differ from MongoDB's element iteration on dotted paths: " +
    "mingo's path resolver returns a nested array unchanged when a dotted path meets an array inside an array " +
    "(resolve({a:[[2,\"B\"]]}, \"a.c\") yields [2,\"B\"]), so such values leak into the comparison; MongoDB never applies a " +
    "field name to the elements of a nested array (path.cpp). An array of scalars on a dotted path resolves to [] in mingo, so {\"b.a\":[]} matches b:[null,3.75]. " +
    "mingo's document equality ignores field order ({x:1,y:2} equals {y:2,x:1}; MongoDB compares field by field). " +
    "Null/missing: MongoDB's {\"a.b\":null} matches an array holding an object without b but not an array of scalars, and " +
    "{\"a.0\":null} also matches when element 0 is a document (the document is searched for a field \"0\" first, path.cpp)."),
  Q("mingo-in-path-semantics", "mingo", ["q:$in"], mentions("$in", "$nin"),
    "mingo's $in/$nin compare the leaf array's elements but never the array itself ({a:{$in:[[1,2]]}} misses a:[1,2]), " +
    "use key-order-insensitive document equality, and handle null via isNil on its resolved value, so $in:[null] on dotted " +
    "paths through arrays disagrees with MongoDB (null_query_semantics.js: {\"b.1.c\":{$in:[null]}} does not match " +
    "b:[1,\"x\"] in MongoDB). Also: mingo's path resolver returns a nested array unchanged when a dotted path meets an array inside an array " +
    "(resolve({a:[[2,\"B\"]]}, \"a.c\") yields [2,\"B\"]), so such values leak into the comparison; MongoDB never applies a " +
    "field name to the elements of a nested array (path.cpp). "),
  Q("mingo-range-semantics", "mingo", ["q:$cmp"], mentions("$gt", "$gte", "$lt", "$lte"),
    "mingo's $gt/$gte/$lt/$lte require typeOf(element) == typeOf(operand): an array operand is only compared with " +
    "nested arrays (MongoDB also compares the whole array: a:[1,2] is $gt [1]), $gte/$lte null do not match a missing " +
    "field (MongoDB: missing compares as null), documents compare with sorted keys instead of BSON field order. " +
    "And mingo's path resolver returns a nested array unchanged when a dotted path meets an array inside an array " +
    "(resolve({a:[[2,\"B\"]]}, \"a.c\") yields [2,\"B\"]), so such values leak into the comparison; MongoDB never applies a " +
    "field name to the elements of a nested array (path.cpp). "),
  Q("mingo-exists-semantics", "mingo", ["q:$exists"], mentions("$exists"),
    "mingo's $exists on dotted paths is true for shapes MongoDB does not traverse: {\"a.b\":{$exists:true}} matches " +
    "a:[false,[\"x\"]] because its path resolver returns a nested array unchanged when a dotted path meets an array inside an array " +
    "(resolve({a:[[2,\"B\"]]}, \"a.c\") yields [2,\"B\"]), so such values leak into the comparison; MongoDB never applies a " +
    "field name to the elements of a nested array (path.cpp). "),
  Q("mingo-type-array-semantics", "mingo", ["q:$type"], mentions("$type"),
    "mingo's $type tests the resolved value as a whole: {b:{$type:\"number\"}} does not match b:[\"Foo\",-3,5] and " +
    "{a:{$type:10}} does not match a:[[],null], while MongoDB tests each element of a leaf array and the array itself. " +
    "Dotted paths through nested arrays resolve to the nested array (see mingo-eq-path-semantics). mingo accepts an " +
    "unknown alias ({$type:\"foo\"} matches nothing; MongoDB rejects it). (This patch keeps mingo's number typing; " +
    "together with herald-type-json-numbers it gives Herald's full rule.)"),
  Q("mingo-regex-semantics", "mingo", ["q:$regex"], mentions("$regex"),
    "mingo's $regex flattens one array level more than MongoDB ({a:{$regex:\"x\"}} matches a:[[\"x\"]]; MongoDB only " +
    "tests the leaf array's elements, and a nested array is not a string), and its path resolver returns a nested array unchanged when a dotted path meets an array inside an array " +
    "(resolve({a:[[2,\"B\"]]}, \"a.c\") yields [2,\"B\"]), so such values leak into the comparison; MongoDB never applies a " +
    "field name to the elements of a nested array (path.cpp). "),
  Q("mingo-regex-x-flag", "mingo", ["q:regex-x"], (c) => /"\$options":"[^"]*x/.test(c.queryText),
    "mingo passes $options to JavaScript's RegExp, which has no 'x' (extended) flag, so any {$options:\"x\"} " +
    "throws. MongoDB (PCRE) accepts x and ignores unescaped whitespace and #-comments in the pattern."),
  Q("mingo-mod-semantics", "mingo", ["q:$mod"], mentions("$mod"),
    "mingo's $mod computes x % d on any value: null % 2 == 0 and true % 2 == 1 match, and 5.5 % 2 is 1.5, so " +
    "{$mod:[2,0]} matches a:null and a string array can match. MongoDB only matches numbers and truncates a double " +
    "dividend toward zero first (5.5 mod 2 == 1, expression_leaf.cpp)."),
  Q("mingo-all-semantics", "mingo", ["q:$all"], mentions("$all"),
    "mingo's $all requires the field to be an array: {a:{$all:[\"B\"]}} does not match a:\"B\", and {a:{$all:[[1,2]]}} does " +
    "not match a:[1,2]; MongoDB's $all is the $and of equality predicates with the usual array semantics. mingo also " +
    "accepts a non-array operand ({$all:3} matches nothing; MongoDB rejects it), and its path resolver returns a nested array unchanged when a dotted path meets an array inside an array " +
    "(resolve({a:[[2,\"B\"]]}, \"a.c\") yields [2,\"B\"]), so such values leak into the comparison; MongoDB never applies a " +
    "field name to the elements of a nested array (path.cpp). "),
  Q("mingo-elemmatch-semantics", "mingo", ["q:$elemMatch"], mentions("$elemMatch"),
    "mingo's $elemMatch value form wraps each element as {field: element} and so applies array semantics again to " +
    "nested arrays (a:[[1,2]] matches {$elemMatch:{$eq:1}}; MongoDB tests the element itself). Its object form only " +
    "accepts plain objects (MongoDB also runs the sub-query on array elements: a:[[]] matches {$elemMatch:{b:null}}, " +
    "null_query_semantics.js) and lets scalars satisfy {$elemMatch:{a:{$in:[null]}}} (b:[2.25,null,5] matches). mingo " +
    "accepts a non-object operand ({$elemMatch:3}); MongoDB rejects it."),
  Q("mingo-size-semantics", "mingo", ["q:$size"], mentions("$size"),
    "mingo's $size resolves dotted paths by collecting the values into one array: {\"b.a\":{$size:2}} matches " +
    "b:[{a:5},{a:null}] because [5,null] has two elements; MongoDB checks each array found at the path (none here)."),
  Q("mingo-sort-order", "mingo", ["q:sort"], (c) => c.queryText.includes('"sort":'),
    "mingo sorts arrays by comparing their sorted element lists, puts missing before null, and compares " +
    "documents with sorted keys. MongoDB sorts ascending by the smallest and descending by the largest " +
    "value the path yields (an index key: array elements, null for a missing field or a non-object " +
    "element on the way), treats missing and null as equal, an empty leaf array as less than null, and " +
    "compares documents in field order. Ties are then ordered by _id."),
  Q("mingo-projection", "mingo", ["q:projection"], (c) => c.queryText.includes('"projection":'),
    "mingo rejects {b:0, _id:1} (\"Cannot do exclusion and inclusion\"); MongoDB allows _id:1 in an exclusion " +
    "projection. mingo's inclusion of a dotted path through arrays and of missing sub-fields also differs from MongoDB " +
    "(MongoDB keeps {} for documents without the field, drops scalars inside arrays, keeps empty arrays)."),
  Q("mingo-limit-zero", "mingo", ["q:limit0"], (c) => c.queryText.includes('"limit":0'),
    "mingo's cursor.limit(0) returns no documents; in MongoDB limit 0 means no limit."),
  Q("mingo-lenient-validation", "mingo", ["q:validate"], always,
    "mingo accepts queries MongoDB rejects: sort values other than 1/-1 (2 sorts ascending), $and/$or/$nor " +
    "with an empty array (vacuously true), $not with an empty object, projection mixes it can evaluate, ... " +
    "Herald rejects them like MongoDB. The patch validates the query with MongoDB's rules first."),

  // ------------------------------------------------------------------------ mingo update bugs
  U("mingo-update-set-paths", "mingo", ["u:$set"], updates("$set"),
    "mingo's $set silently does nothing when the path runs through a scalar or through an array with a non-numeric " +
    "part, and turns a null (or missing) parent into a new object ({b:null} $set b.0.c -> {b:{\"0\":{c:..}}}); " +
    "MongoDB fails the update (\"Cannot create field ... in element\")."),
  U("mingo-update-inc-mul-types", "mingo", ["u:$inc", "u:$mul"], (c) => updates("$inc")(c) || updates("$mul")(c),
    "mingo's $inc/$mul skip a non-numeric target (string, null, bool, array, document) without error, and through a " +
    "scalar path they either skip or create objects; MongoDB fails the update (\"Cannot apply $inc to a value of " +
    "non-numeric type\", \"Cannot create field\")."),
  U("mingo-update-min-max-order", "mingo", ["u:$min", "u:$max"], (c) => updates("$min")(c) || updates("$max")(c),
    "mingo's $min/$max compare with its query comparator, which descends into arrays (a:[1,5] $max 3 gives 3; " +
    "a:0 $max [] keeps 0) and sorts object keys; MongoDB compares whole values in BSON order (an array is greater than " +
    "any number or string). Paths through scalars/arrays are skipped by mingo instead of failing."),
  U("mingo-update-rename", "mingo", ["u:$rename"], updates("$rename"),
    "mingo's $rename moves array elements ({$rename:{\"tags.1\":\"z\"}} leaves null in the array); MongoDB rejects a " +
    "source or target inside an array (\"The source field cannot be an array element\")."),
  U("mingo-update-push", "mingo", ["u:$push"], updates("$push"),
    "mingo's $push ignores $sort/$slice/$position when the field is missing (it just stores $each), sorts only by " +
    "the first key of a $sort document with its own comparator (descends into arrays, sorted object keys), silently " +
    "skips a non-array target, and skips or creates objects on paths through scalars/arrays; MongoDB fails those updates. " +
    "(MongoDB leaves the order of $sort ties unspecified; both sides here use a stable sort.)"),
  U("mingo-update-pull", "mingo", ["u:$pull"], updates("$pull"),
    "mingo's $pull with a scalar value runs the query {k: value}, so it also removes arrays containing the value " +
    "(a:[5,[5,6]] $pull 5 -> []), and a document spec is also tested against scalars (mingo resolves a field of a " +
    "string to the string itself, so {$pull:{tags:{b:{$exists:true}}}} empties [\"foo\",\"b\"]). MongoDB removes only " +
    "equal elements, or documents matching a document spec. mingo skips a non-array target (MongoDB: error)."),
  U("mingo-update-pullall", "mingo", ["u:$pullAll"], updates("$pullAll"),
    "mingo's $pullAll is $pull with $in, so an array in the list never removes an equal array element " +
    "(a:[[1],\"2\"] $pullAll [[1]] keeps [1]; b:[[],1] $pullAll [[],1] keeps []), and document equality ignores key " +
    "order. MongoDB removes exactly the BSON-equal elements. mingo skips a non-array target (MongoDB: error)."),
  U("mingo-update-addtoset", "mingo", ["u:$addToSet"], updates("$addToSet"),
    "mingo's $addToSet rebuilds the array as unique(old ++ new): it drops duplicates already in the array and can then " +
    "add nothing ([1,2,1] $addToSet 3 stays [1,2,1]); its equality ignores document key order. MongoDB keeps the array " +
    "and appends each value not already present (BSON equality, field order matters). mingo skips a non-array target " +
    "and paths through scalars (MongoDB: error)."),
  U("mingo-update-pop", "mingo", ["u:$pop"], updates("$pop"),
    "mingo's $pop silently skips a non-array target; MongoDB fails the update."),
  U("mingo-update-validation", "mingo", ["u:validate"], always,
    "mingo accepts updates MongoDB rejects ($-prefixed field names inside values, ...). The patch validates " +
    "the update with MongoDB's rules first."),

  P("herald-agg-sort-id-ties", "herald", ["p:sort-id-ties"], pipelineMentions("$sort"),
    "Herald's $sort breaks ties by _id ascending, as every Herald query does (so a pipeline's head $match + $sort " +
    "can run as an index plan with the same answer); mingo's sort is stable (ties keep their input order). " +
    "MongoDB leaves the order of ties unspecified. (Patch: MongoDB's sort keys with the _id tie-break.)"),

  // -------------------------------------------------------------------- mingo aggregation bugs
  P("mingo-agg-push-missing", "mingo", ["p:push-missing"], pipelineMentions("$push", "$addToSet"),
    "mingo's $push and $addToSet accumulators add null for a document where the expression is missing; MongoDB " +
    "leaves missing values out (accumulator_push.cpp / accumulator_add_to_set.cpp skip missing), and keeps null."),
  P("mingo-agg-minmax-order", "mingo", ["p:minmax-bson"], pipelineMentions("$min", "$max"),
    "mingo's $min/$max accumulators sort with mingo's own comparator, which does not follow MongoDB's BSON order " +
    "across types (arrays and objects) and within documents; MongoDB compares whole values in BSON order (an array " +
    "as a value, above strings and documents), ignoring null and missing."),
  P("mingo-agg-count-empty", "mingo", ["p:count-empty"], pipelineMentions("$count"),
    "mingo's $count stage answers {name: 0} for an empty input; MongoDB's $count (a $group with _id null) " +
    "outputs no document at all."),
  P("mingo-agg-sort", "mingo", ["p:sort"], pipelineMentions("$sort"),
    "mingo's $sort compares arrays and embedded documents with its own comparator; MongoDB sorts an array by its " +
    "smallest (ascending) or largest (descending) element and documents in BSON order (field type, name, value, " +
    "in order). The patch is that sort (stable, as both sides sort)."),
];

/** All patch ids used by the entries of one kind (the union is tried when no single entry fits). */
export function patchesOf(kind) {
  return KNOWN_DIVERGENCES.filter((d) => d.kind === kind);
}
