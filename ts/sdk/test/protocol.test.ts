// The SDK against the shared wire fixtures (testdata/protocol, generated and checked by the Rust
// tests in crates/protocol): every valid example of every client and server message decodes
// (into exactly itself), every invalid one is refused, the fixture kinds and the TypeScript
// unions list the same kinds, and the generated error table and limits match their JSON.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import {
  CHANGE_EVENT_KINDS,
  CLIENT_MESSAGE_KINDS,
  decodeChangeEvent,
  decodeClientMessage,
  decodeCommitResult,
  decodeCommitWrite,
  decodeErrorBody,
  decodeQueryResult,
  decodeServerMessage,
  HTTP_REPLY_DECODERS,
  HTTP_REQUEST_KINDS,
  ProtocolError,
  SERVER_MESSAGE_KINDS,
} from "../src/protocol.js";
import { ERROR_CODES } from "../src/errorCodes.js";
import * as limits from "../src/limits.js";
import { HeraldError } from "../src/index.js";

const dir = resolve(process.cwd(), "../../testdata/protocol");

interface Fixture {
  kind: string;
  valid: unknown[];
  invalid: { message: unknown; code: string; why: string }[];
}

function fixture(file: string): Fixture {
  const f = JSON.parse(readFileSync(join(dir, file), "utf8")) as Fixture;
  assert.equal(f.kind, file.replace(/\.json$/, ""), `${file}: kind is the file's name`);
  return f;
}

/** Fixture files of one family (`client` or `server`), by the kind after the dot. */
function family(prefix: string): Map<string, Fixture> {
  const out = new Map<string, Fixture>();
  for (const file of readdirSync(dir).filter((n) => n.startsWith(`${prefix}.`) && n.endsWith(".json")))
    out.set(file.slice(prefix.length + 1, -".json".length), fixture(file));
  return out;
}

/** Every valid example decodes into itself; every invalid one is refused. */
function check(file: string, f: Fixture, decode: (v: unknown) => unknown): void {
  f.valid.forEach((v, i) => {
    let got: unknown;
    assert.doesNotThrow(() => (got = decode(v)), `${file} valid[${i}] ${JSON.stringify(v)}`);
    assert.deepEqual(got, v, `${file} valid[${i}] decodes into itself`);
  });
  for (const bad of f.invalid)
    assert.throws(() => decode(bad.message), ProtocolError, `${file}: refuses ${JSON.stringify(bad.message)} (${bad.why})`);
}

/** The fixture kinds and the union's kinds are the same set. */
function sameKinds(prefix: string, files: Map<string, Fixture>, kinds: readonly string[]): void {
  const missingFile = kinds.filter((k) => !files.has(k));
  const unknownKind = [...files.keys()].filter((k) => !kinds.includes(k));
  assert.deepEqual(missingFile, [], `${prefix} kinds of the TypeScript union without a fixture file`);
  assert.deepEqual(unknownKind, [], `${prefix} fixture files whose kind the TypeScript union lacks`);
}

test("client messages: the fixtures and the ClientMessage union agree, example by example", () => {
  const files = family("client");
  sameKinds("client", files, CLIENT_MESSAGE_KINDS);
  for (const [kind, f] of files) {
    check(`client.${kind}`, f, decodeClientMessage);
    for (const v of f.valid) assert.equal((v as { op: string }).op, kind);
  }
});

test("server messages: the fixtures and the ServerMessage union agree, example by example", () => {
  const files = family("server");
  sameKinds("server", files, SERVER_MESSAGE_KINDS);
  for (const [kind, f] of files) {
    check(`server.${kind}`, f, decodeServerMessage);
    for (const v of f.valid) assert.equal((v as { type: string }).type, kind);
  }
});

test("change events, writes, error bodies and the HTTP answers the SDK reads", () => {
  check("change", fixture("change.json"), decodeChangeEvent);
  check("write", fixture("write.json"), decodeCommitWrite);
  check("error", fixture("error.json"), decodeErrorBody);
  check("http.commitReply", fixture("http.commitReply.json"), (v) => {
    const r = decodeCommitResult(v);
    // `replayed` is checked and dropped: compare without it.
    return (v as { replayed?: boolean }).replayed === undefined ? r : { ...r, replayed: true };
  });
  for (const kind of ["queryReply", "aggregateReply"])
    check(`http.${kind}`, fixture(`http.${kind}.json`), (v) => {
      const r = decodeQueryResult(v);
      const explain = (v as { explain?: unknown }).explain;
      return explain === undefined ? r : { ...r, explain };
    });
  // Every change kind of the union is shown by some valid example.
  const seen = new Set<string>();
  for (const c of fixture("change.json").valid) seen.add((c as { kind: string }).kind);
  for (const m of fixture("server.changes.json").valid)
    for (const c of (m as { changes: { kind: string }[] }).changes) seen.add(c.kind);
  assert.deepEqual([...CHANGE_EVENT_KINDS].sort(), [...seen].sort());
});

test("HTTP bodies: every fixture is a request body the SDK sends or an answer it decodes", () => {
  const files = family("http");
  const replies = Object.keys(HTTP_REPLY_DECODERS);
  sameKinds("http", files, [...replies, ...HTTP_REQUEST_KINDS]);
  // commitReply, queryReply and aggregateReply drop a member; the test above checks them.
  for (const [kind, decode] of Object.entries(HTTP_REPLY_DECODERS))
    if (!["commitReply", "queryReply", "aggregateReply"].includes(kind)) check(`http.${kind}`, files.get(kind)!, decode);
});

test("errorCodes.ts and limits.ts are generated from the fixtures' error table and limits", () => {
  const codes = JSON.parse(readFileSync(join(dir, "error-codes.json"), "utf8")) as {
    code: string;
    http: number;
    wsClose: number | null;
    retryable: boolean;
  }[];
  assert.deepEqual(
    Object.entries(ERROR_CODES).map(([code, x]) => ({ code, ...x })),
    codes,
    "src/errorCodes.ts is stale: run npm run gen:contract",
  );
  const want = JSON.parse(readFileSync(join(dir, "limits.json"), "utf8")) as Record<string, unknown>;
  assert.deepEqual({ ...limits }, want, "src/limits.ts is stale: run npm run gen:contract");
});

test("retryable comes from the error table, or from the error body when it says", () => {
  for (const [code, x] of Object.entries(ERROR_CODES))
    assert.equal(new HeraldError(code, "m", x.http).retryable, x.retryable, code);
  assert.equal(new HeraldError("storage_corrupted", "m", 500).retryable, false);
  assert.equal(new HeraldError("overloaded", "m", 503).retryable, true);
  assert.equal(new HeraldError("internal", "m", 500, {}, true).retryable, true, "the body's word wins");
  assert.equal(new HeraldError("overloaded", "m", 503, {}, false).retryable, false, "the body's word wins");
  assert.equal(new HeraldError("network", "m").retryable, true);
  assert.equal(new HeraldError("closed", "m").retryable, false);
  // Not Herald's answer: only HTTP's transient statuses.
  assert.equal(new HeraldError("http_502", "m", 502).retryable, true);
  assert.equal(new HeraldError("http_500", "m", 500).retryable, false);
});
