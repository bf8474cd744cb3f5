#!/usr/bin/env python3
"""Validate the format of the query conformance vectors in this folder.

Checks every *.json file next to this script against README.md:
valid JSON, required fields, unique case names per file, unique string _ids
in every query case, exactly one expectation per case, and error codes from
the README table only. Prints per-file and total case counts; exits 1 on any
problem. Standard library only.
"""
import json
import os
import sys

ERROR_CODES = {
    "bad_filter", "unknown_operator", "bad_operand", "bad_regex", "unsupported_regex",
    "bad_sort", "bad_projection", "bad_query", "limit_exceeded", "bad_update",
    "conflicting_update_paths", "type_mismatch", "path_not_viable", "immutable_field",
    "numeric_overflow", "bad_pipeline",
}
QUERY_KEYS = {"filter", "sort", "skip", "limit", "projection", "startAt", "startAfter", "endAt", "endBefore"}
QUERY_CASE_KEYS = {"name", "note", "group", "docs", "query", "expect", "expectDocs", "error"}
UPDATE_CASE_KEYS = {"name", "note", "doc", "update", "now", "expect", "error"}
UPSERT_CASE_KEYS = {"name", "note", "filter", "update", "upsert", "expect", "error"}
PIPELINE_CASE_KEYS = {"name", "note", "docs", "pipeline", "expectDocs", "error"}


def reject_constants(value):
    raise ValueError("non-standard JSON constant %s" % value)


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def check_query_case(case, where, problems):
    extra = set(case) - QUERY_CASE_KEYS
    if extra:
        problems.append("%s: unknown keys %s" % (where, sorted(extra)))
    # A collection-group case: ids may repeat, each document has a unique string `_path`, and
    # `expect` lists `_path`s.
    group = case.get("group", False)
    if group is not True and "group" in case:
        problems.append("%s: group must be true when given" % where)
    key = "_path" if group is True else "_id"
    docs = case.get("docs")
    if not isinstance(docs, list):
        problems.append("%s: docs must be an array" % where)
        docs = []
    ids = []
    order = {}
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            problems.append("%s: docs[%d] is not an object" % (where, i))
            continue
        if not isinstance(doc.get("_id"), str) or not isinstance(doc.get(key), str):
            problems.append("%s: docs[%d] has no string %s" % (where, i, key))
            continue
        ids.append(doc[key])
        order[doc[key]] = (doc["_id"].encode("utf-8"), doc[key].encode("utf-8"))
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        problems.append("%s: duplicate %s values %s" % (where, key, dup))
    query = case.get("query")
    if not isinstance(query, dict):
        problems.append("%s: query must be an object" % where)
    else:
        if "filter" not in query:
            problems.append("%s: query has no filter" % where)
        extra = set(query) - QUERY_KEYS
        if extra:
            problems.append("%s: query has unknown keys %s" % (where, sorted(extra)))
    kinds = [k for k in ("expect", "expectDocs", "error") if k in case]
    if len(kinds) != 1:
        problems.append("%s: needs exactly one of expect/expectDocs/error, has %s" % (where, kinds))
        return
    if "expect" in case:
        exp = case["expect"]
        if not isinstance(exp, list) or not all(isinstance(x, str) for x in exp):
            problems.append("%s: expect must be an array of string %ss" % (where, key))
        else:
            unknown = [x for x in exp if x not in ids]
            if unknown:
                problems.append("%s: expect names unknown %ss %s" % (where, key, unknown))
            if len(set(exp)) != len(exp):
                problems.append("%s: expect repeats an %s" % (where, key))
            q = query if isinstance(query, dict) else {}
            plain = not any(k in q for k in ("sort", "skip", "limit", "startAt", "startAfter", "endAt", "endBefore"))
            if plain and not unknown and exp != sorted(exp, key=lambda s: order[s]):
                problems.append("%s: without sort/skip/limit, expect must be in _id order" % where)
    if "expectDocs" in case:
        if not isinstance(case["expectDocs"], list) or not all(isinstance(x, dict) for x in case["expectDocs"]):
            problems.append("%s: expectDocs must be an array of objects" % where)


def check_pipeline_case(case, where, problems):
    extra = set(case) - PIPELINE_CASE_KEYS
    if extra:
        problems.append("%s: unknown keys %s" % (where, sorted(extra)))
    docs = case.get("docs")
    if not isinstance(docs, list):
        problems.append("%s: docs must be an array" % where)
        docs = []
    ids = [d.get("_id") for d in docs if isinstance(d, dict)]
    if len(ids) != len(docs) or not all(isinstance(i, str) for i in ids):
        problems.append("%s: every document needs a string _id" % where)
    elif len(set(ids)) != len(ids):
        problems.append("%s: duplicate _id values" % where)
    elif ids != sorted(ids, key=lambda s: s.encode("utf-8")):
        problems.append("%s: docs must be listed in _id order (the pipeline's input order)" % where)
    kinds = [k for k in ("expectDocs", "error") if k in case]
    if len(kinds) != 1:
        problems.append("%s: needs exactly one of expectDocs/error, has %s" % (where, kinds))
        return
    if "expectDocs" in case:
        if not isinstance(case["pipeline"], list):
            problems.append("%s: pipeline must be an array (only an error case may hold another value)" % where)
        exp = case["expectDocs"]
        if not isinstance(exp, list) or not all(isinstance(x, dict) for x in exp):
            problems.append("%s: expectDocs must be an array of objects" % where)


def check_update_case(case, where, problems, upsert):
    allowed = UPSERT_CASE_KEYS if upsert else UPDATE_CASE_KEYS
    extra = set(case) - allowed
    if extra:
        problems.append("%s: unknown keys %s" % (where, sorted(extra)))
    if upsert:
        if case.get("upsert") is not True:
            problems.append("%s: upsert must be true" % where)
        if "filter" not in case:
            problems.append("%s: upsert case has no filter" % where)
    else:
        doc = case.get("doc")
        if not isinstance(doc, dict) or not isinstance(doc.get("_id"), str):
            problems.append("%s: doc must be an object with a string _id" % where)
        if "now" in case and not is_int(case["now"]):
            problems.append("%s: now must be an integer" % where)
    if not isinstance(case.get("update"), dict):
        problems.append("%s: update must be an object" % where)
    kinds = [k for k in ("expect", "error") if k in case]
    if len(kinds) != 1:
        problems.append("%s: needs exactly one of expect/error, has %s" % (where, kinds))
        return
    if "expect" in case:
        exp = case["expect"]
        if not isinstance(exp, dict) or "_id" not in exp:
            problems.append("%s: expect must be a document with _id" % where)
        elif next(iter(exp)) != "_id":
            problems.append("%s: expect must start with _id" % where)


def check_file(path, problems):
    where0 = os.path.basename(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f, parse_constant=reject_constants)
    except (ValueError, UnicodeDecodeError) as exc:
        problems.append("%s: invalid JSON: %s" % (where0, exc))
        return 0
    if not isinstance(data, dict):
        problems.append("%s: top level must be an object" % where0)
        return 0
    if not isinstance(data.get("description"), str) or not data["description"]:
        problems.append("%s: missing description" % where0)
    extra = set(data) - {"description", "cases"}
    if extra:
        problems.append("%s: unknown top-level keys %s" % (where0, sorted(extra)))
    cases = data.get("cases")
    if not isinstance(cases, list) or not cases:
        problems.append("%s: cases must be a non-empty array" % where0)
        return 0
    names = set()
    for i, case in enumerate(cases):
        where = "%s case %d" % (where0, i)
        if not isinstance(case, dict):
            problems.append("%s: not an object" % where)
            continue
        name = case.get("name")
        if not isinstance(name, str) or not name:
            problems.append("%s: missing name" % where)
        else:
            where = "%s %r" % (where0, name)
            if name in names:
                problems.append("%s: duplicate name" % where)
            names.add(name)
        if "note" in case and not isinstance(case["note"], str):
            problems.append("%s: note must be a string" % where)
        if "error" in case and case["error"] not in ERROR_CODES:
            problems.append("%s: unknown error code %r" % (where, case["error"]))
        if "pipeline" in case:
            check_pipeline_case(case, where, problems)
        elif "docs" in case or "query" in case:
            check_query_case(case, where, problems)
        elif "upsert" in case:
            check_update_case(case, where, problems, upsert=True)
        elif "doc" in case:
            check_update_case(case, where, problems, upsert=False)
        else:
            problems.append("%s: neither a query, an update nor an upsert case" % where)
    return len(cases)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    files = sorted(f for f in os.listdir(here) if f.endswith(".json"))
    problems = []
    total = 0
    for name in files:
        n = check_file(os.path.join(here, name), problems)
        print("%-22s %4d" % (name, n))
        total += n
    print("%-22s %4d" % ("total", total))
    if not files:
        problems.append("no *.json files found")
    for p in problems:
        print("PROBLEM: " + p, file=sys.stderr)
    if problems:
        print("%d problem(s)" % len(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
