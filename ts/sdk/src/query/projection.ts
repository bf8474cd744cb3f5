// Projections: inclusion or exclusion tries (crates/query projection.rs). A nested document is
// a shorthand for dotted paths ({a: {b: 1}} is {"a.b": 1}); a path inside _id (_id.a) is
// projected like any other, and then _id is not kept whole. Through arrays an inclusion keeps
// only embedded documents (projected); an exclusion keeps everything else.
import { PROJECTION_FIELDS_MAX, QueryError } from "./errors.js";
import { parsePath } from "./path.js";
import { isNumber, isObject, numberValue, type Doc, type Value } from "./value.js";

interface Node {
  leaf: boolean;
  children: Map<string, Node>;
}

type Mode = "all" | "include" | "exclude";

function node(): Node {
  return { leaf: false, children: new Map() };
}

export class Projection {
  private constructor(
    private readonly mode: Mode,
    private readonly tree: Node,
    private readonly keepId: boolean,
  ) {}

  static all(): Projection {
    return new Projection("all", node(), true);
  }

  static parse(spec: unknown): Projection {
    if (spec === null || spec === undefined) return Projection.all();
    if (!isObject(spec))
      throw new QueryError("bad_projection", `bad projection: projection must be an object, got ${JSON.stringify(spec)}`);
    const fields: [string, unknown][] = [];
    flatten(spec, "", fields);
    let mode: Mode = "all";
    let keepId = true;
    const tree = node();
    for (const [field, v] of fields) {
      let include: boolean;
      if (typeof v === "boolean") include = v;
      else if (isNumber(v)) include = numberValue(v) !== 0;
      else
        throw new QueryError(
          "bad_projection",
          `bad projection: projection value for '${field}' must be 0, 1, true or false (projection operators are not supported)`,
        );
      if (field.includes("$"))
        throw new QueryError("bad_projection", `bad projection: positional and operator projections are not supported: '${field}'`);
      const path = parsePath(field);
      if (typeof path === "string") throw new QueryError("bad_projection", `bad projection: ${path}`);
      if (field === "_id") {
        keepId = include;
        continue;
      }
      const want: Mode = include ? "include" : "exclude";
      if (mode !== "all" && mode !== want)
        throw new QueryError("bad_projection", "bad projection: cannot mix inclusion and exclusion (except for _id)");
      mode = want;
      let n = tree;
      path.segments.forEach((seg, i) => {
        if (n.leaf) throw collision(field);
        let child = n.children.get(seg.name);
        if (child === undefined) {
          child = node();
          n.children.set(seg.name, child);
        }
        n = child;
        if (i + 1 === path.segments.length && (n.leaf || n.children.size > 0)) throw collision(field);
      });
      n.leaf = true;
    }
    const namesId = fields.some(([f]) => f === "_id");
    if (namesId && tree.children.has("_id"))
      throw new QueryError(
        "bad_projection",
        "bad projection: path collision at '_id': it is named whole and with a path inside it",
      );
    if (mode === "all" && !keepId) mode = "exclude";
    if (mode === "all" && namesId) mode = "include";
    return new Projection(mode, tree, keepId);
  }

  isAll(): boolean {
    return this.mode === "all";
  }

  apply(doc: Value): Value {
    if (!isObject(doc) || this.mode === "all") return doc;
    return this.mode === "include" ? includeObject(doc, this.tree, this.keepId) : excludeObject(doc, this.tree, this.keepId);
  }
}

// The projection's (path, value) pairs with nested documents spelled as dotted paths: a value
// that is a non-empty object whose keys are not operators is a sub-projection.
function flatten(spec: Doc, prefix: string, out: [string, unknown][]): void {
  for (const k of Object.keys(spec)) {
    const v = spec[k];
    const path = prefix === "" ? k : `${prefix}.${k}`;
    if (isObject(v) && Object.keys(v).length === 0)
      throw new QueryError("bad_projection", `bad projection: an empty sub-projection at '${path}' is not valid`);
    if (isObject(v) && !Object.keys(v).some((x) => x.startsWith("$"))) flatten(v, path, out);
    else out.push([path, v]);
    if (out.length > PROJECTION_FIELDS_MAX)
      throw new QueryError("limit_exceeded", `limit exceeded: projection has more than ${PROJECTION_FIELDS_MAX} fields`);
  }
}

function collision(field: string): QueryError {
  return new QueryError("bad_projection", `bad projection: path collision at '${field}'`);
}

function includeObject(m: Doc, n: Node, topId: boolean | undefined): Doc {
  const out: Doc = {};
  for (const k of Object.keys(m)) {
    const v = m[k];
    if (topId !== undefined && k === "_id" && !n.children.has(k)) {
      if (topId) out[k] = v;
      continue;
    }
    const child = n.children.get(k);
    if (child === undefined) continue;
    if (child.leaf) out[k] = v;
    else {
      const p = includeValue(v, child);
      if (p !== undefined) out[k] = p;
    }
  }
  return out;
}

function includeValue(v: Value, n: Node): Value | undefined {
  if (isObject(v)) return includeObject(v, n, undefined);
  if (Array.isArray(v)) {
    const out: Value[] = [];
    for (const e of v) {
      if (isObject(e) || Array.isArray(e)) {
        const p = includeValue(e, n);
        if (p !== undefined) out.push(p);
      }
    }
    return out;
  }
  return undefined;
}

function excludeObject(m: Doc, n: Node, topId: boolean | undefined): Doc {
  const out: Doc = {};
  for (const k of Object.keys(m)) {
    const v = m[k];
    if (topId !== undefined && k === "_id" && !n.children.has(k)) {
      if (topId) out[k] = v;
      continue;
    }
    const child = n.children.get(k);
    if (child === undefined) out[k] = v;
    else if (!child.leaf) out[k] = excludeValue(v, child);
  }
  return out;
}

function excludeValue(v: Value, n: Node): Value {
  if (isObject(v)) return excludeObject(v, n, undefined);
  if (Array.isArray(v)) return v.map((e) => excludeValue(e, n));
  return v;
}
