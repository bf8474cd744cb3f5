//! The parsers of client input: WebSocket messages, bulk NDJSON lines, queries (filter, sort,
//! projection, skip, limit), updates, rules, trigger definitions, JWTs. Each refuses bad input
//! with an error, never a panic; what it accepts evaluates against a few documents.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use herald::auth::token::Verifier;
use herald_db::triggers::TriggerDef;
use herald_db::ChangeOp;
use herald_protocol::{ClientMessage, Decode, TriggerBody};
use herald_query::{Filter, Projection, Query, Sort, Update};
use herald_rules::{AuthCtx, Rules};
use serde_json::{json, Value};

/// The HS256 secret of the `jwt` target (the verifier wants 32 bytes or more).
pub const JWT_SECRET: &[u8] = b"fuzzing-secret-fuzzing-secret-32";
/// The clock the `jwt` target verifies against (2026-01-01, half a second past, Unix ms).
pub const JWT_NOW_MS: u64 = 1_767_225_600_500;

/// Documents every accepted filter, sort, projection and update is run against: each type,
/// nesting, arrays of scalars and of documents, a missing field.
pub fn sample_docs() -> Vec<Value> {
    vec![
        json!({"_id": "a", "n": 1, "s": "x", "b": true, "z": null, "arr": [1, 2, 3]}),
        json!({"_id": "b", "n": 2.5, "s": "", "o": {"p": {"q": [1, {"r": "s"}]}}, "arr": [{"k": 1}, {"k": [2]}]}),
        json!({"_id": "c", "n": -9_007_199_254_740_993_i64, "s": "ü", "arr": [], "o": {"n": "1"}}),
        json!({"_id": "d", "n": 1e300, "0": {"1": [[0]]}, "a.b": 1, "$x": {}}),
        json!({"_id": 7}),
    ]
}

fn json_of(data: &[u8]) -> Option<Value> {
    serde_json::from_slice(data).ok()
}

/// A WebSocket client message (`ClientMessage::decode`, as `/v1/ws` decodes every message): an
/// accepted message re-encodes to one that decodes to itself.
pub fn ws_message(data: &[u8]) {
    let Ok(msg) = ClientMessage::decode(data) else {
        return;
    };
    let text = serde_json::to_vec(&msg).expect("a message serializes");
    let again = ClientMessage::decode(&text).expect("an encoded message decodes");
    assert_eq!(again, msg, "decode(encode(m)) == m");
}

/// One `/v1/bulk` line, decoded as the handler decodes it.
pub fn bulk_line(data: &[u8]) {
    let _ = herald::api::writes::decode_line(data);
}

/// A query object `{filter, sort, skip, limit, projection}` and cursors (`Query::parse`, what
/// `/v1/query` and subscriptions run), and the same value as a filter, a sort and a projection
/// on their own. What is accepted runs against [`sample_docs`]: results obey the sort and the limit.
pub fn query(data: &[u8]) {
    let Some(v) = json_of(data) else { return };
    let docs = sample_docs();
    if let Ok(q) = Query::parse(&v) {
        let out = q.run(&docs);
        if let Some(limit) = q.limit {
            assert!(out.len() <= limit, "at most `limit` results");
        }
        assert!(out.len() <= docs.len());
        if q.projection.is_all() {
            for w in out.windows(2) {
                assert!(
                    q.sort.compare(&w[0], &w[1]).is_le(),
                    "results are in sort order"
                );
            }
        }
    }
    if let Ok(f) = Filter::parse(&v) {
        for d in &docs {
            let _ = f.matches(d);
        }
    }
    if let Ok(s) = Sort::parse(&v) {
        let mut sorted = docs.clone();
        s.sort(&mut sorted);
        for w in sorted.windows(2) {
            assert!(s.compare(&w[0], &w[1]).is_le(), "sort orders totally");
            assert_eq!(
                s.compare(&w[0], &w[1]),
                s.encoded_key(&w[0]).cmp(&s.encoded_key(&w[1])),
                "the encoded sort key orders as the sort does"
            );
        }
    }
    if let Ok(p) = Projection::parse(&v) {
        for d in &docs {
            let _ = p.apply(d);
        }
    }
}

/// An update (operators or a replacement): what is accepted applies (or fails with an error)
/// on each of [`sample_docs`], and as an upsert; `_id` never changes.
pub fn update(data: &[u8]) {
    let Some(v) = json_of(data) else { return };
    let Ok(u) = Update::parse(&v) else { return };
    for d in sample_docs() {
        if let Ok(after) = u.apply(&d, 1_700_000_000_000) {
            assert!(after.is_object(), "an update yields a document");
            assert_eq!(after.get("_id"), d.get("_id"), "_id is immutable");
        }
    }
    let _ = u.upsert_document(&Filter::all(), 1_700_000_000_000);
    if let Ok(f) = Filter::parse(&json!({"_id": "new", "n": {"$gt": 1}, "o.p": 2})) {
        let _ = u.upsert_document(&f, 1_700_000_000_000);
    }
}

/// A rule set (`PUT /v1/rules`, `herald rules test`): what is accepted answers reads and writes
/// on a few collections for a user.
pub fn rules(data: &[u8]) {
    let Ok(r) = Rules::parse_text(data) else {
        return;
    };
    let auth = AuthCtx {
        uid: "u1".into(),
        claims: json!({"role": "admin", "org": {"id": 3}, "teams": ["a", "b"]})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    };
    let docs = sample_docs();
    for c in ["notes", "users/u1/posts", "a/b/c", "x"] {
        if let Ok(f) = r.read_filter(c, &auth) {
            if let Ok(f) = Filter::parse(&f) {
                for d in &docs {
                    let _ = f.matches(d);
                }
            }
        }
        for d in &docs {
            let _ = r.can_read(c, d, &auth);
            let _ = r.check_write(c, Some(d), Some(&docs[0]), &auth);
            let _ = r.check_write(c, None, Some(d), &auth);
            let _ = r.check_write(c, Some(d), None, &auth);
        }
    }
}

/// A trigger definition (`PUT /v1/triggers/{name}`: the wire type, then the definition): what is
/// accepted decides whether a few changes fire it.
pub fn trigger_def(data: &[u8]) {
    let _ = TriggerBody::decode(data);
    let Some(v) = json_of(data) else { return };
    let Ok(def) = TriggerDef::parse("t", &v) else {
        return;
    };
    for d in sample_docs() {
        for c in ["c", "users/u1/posts", "a/b/c"] {
            let _ = def.fires(c, ChangeOp::Insert, None, Some(&d));
            let _ = def.fires(c, ChangeOp::Delete, Some(&d), None);
        }
    }
}

/// A bearer token. The first byte picks the input: 0, the token text as sent; otherwise the
/// claims, signed with [`JWT_SECRET`] so the claim checks behind the signature are reached.
pub fn jwt(data: &[u8]) {
    let verifier = Verifier::new(Some(JWT_SECRET), None).expect("a 32-byte secret");
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let token = if mode == 0 {
        String::from_utf8_lossy(rest).into_owned()
    } else {
        signed_token(rest)
    };
    if let Ok(user) = verifier.verify(&token, JWT_NOW_MS) {
        // Tokens are valid through the second their `exp` names (whole seconds, as the JWT
        // library checks): an accepted one expires no earlier than the current second.
        assert!(
            user.expires_at_ms / 1000 >= JWT_NOW_MS / 1000,
            "an accepted token has not expired"
        );
    }
}

/// An HS256 token over `claims` (any bytes) signed with [`JWT_SECRET`].
pub fn signed_token(claims: &[u8]) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let message = format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims));
    let key = jsonwebtoken::EncodingKey::from_secret(JWT_SECRET);
    let sig = jsonwebtoken::crypto::sign(message.as_bytes(), &key, jsonwebtoken::Algorithm::HS256)
        .expect("HS256 signs");
    format!("{message}.{sig}")
}
