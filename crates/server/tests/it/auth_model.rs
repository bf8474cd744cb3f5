//! Authorization model test: generated users (with and without claims), documents, end-user
//! transactions of 1-3 writes (put, insert, update with or without upsert, delete, random
//! `ifVersion`, updates that fail on some documents), admin commits that move documents in and
//! out of readability, and subscriptions (filters, sort, skip, limit, tiny slack so windows
//! refill) under a fixed rule set, on a real database with the server's write guard. Every
//! outcome is compared with a reference evaluation of the rules written directly in Rust (not
//! through the rules engine): each transaction's answer (applied, `permission_denied`,
//! `not_found`, `already_exists`, `version_conflict` with the reported version, `type_mismatch`),
//! evaluated write by write in order with a hidden document counted as absent, and that a
//! refused transaction changed nothing; after every commit, each subscriber's list, built only from
//! the events it received, equals the readable documents the user's query selects (so no
//! document, change or position ever reveals a hidden one, and one that stops being readable
//! leaves as `remove`); random get-by-id and pull queries answer as the reference says.
//!
//! One case is one compared outcome. `HERALD_AUTH_MODEL_CASES` sets the total (default
//! 100,000; 1,000,000 with `HERALD_SLOW=1`).

use herald::api::auth::{for_guard, rules_guard};
use herald::auth::UserAuth;
use herald_db::live::LiveView;
use herald_db::{Db, DbError, DbOptions, Durability, Write};
use herald_query::{Projection, Query, Update};
use herald_rules::{and_filters, AuthCtx, Rules};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

fn target_cases() -> u64 {
    if let Some(n) = std::env::var("HERALD_AUTH_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    if std::env::var("HERALD_SLOW").is_ok_and(|v| v == "1") {
        1_000_000
    } else {
        100_000
    }
}

const USERS: [&str; 4] = ["u0", "u1", "u2", "u3"];
const COLLECTIONS: [&str; 5] = [
    "notes",
    "users/u0/items",
    "users/u1/items",
    "teams/t1/docs",
    "secret",
];

fn rules() -> Rules {
    Rules::parse(&json!({"rules": [
        {"match": "notes/{id}",
         "read": {"$or": [{"public": true}, {"owner": "$$auth.uid"}]},
         "create": {"after.owner": "$$auth.uid"},
         "update": {"before.owner": "$$auth.uid", "after.owner": "$$auth.uid"},
         "delete": {"before.owner": "$$auth.uid"},
         "fields": ["owner", "public", "n", "tag"]},
        {"match": "users/{uid}/items/{id}",
         "read": {"$or": [{"shared": true}, {"$and": [{"owner": "$$uid"}, {"owner": "$$auth.uid"}]}]},
         "create": {"$and": [{"after.owner": "$$uid"}, {"after.owner": "$$auth.uid"}]},
         "update": {"after.owner": "$$auth.uid"}},
        {"match": "teams/{team}/docs/{id}",
         "read": {"level": {"$lte": "$$auth.claims.level"}},
         "create": {"after.level": {"$lte": "$$auth.claims.level"}},
         "update": {"before.level": {"$lte": "$$auth.claims.level"}, "after.level": {"$lte": "$$auth.claims.level"}},
         "delete": {"before.level": {"$lte": "$$auth.claims.level"}}}
    ]}))
    .unwrap()
}

/// A user of the model: uid and the optional `level` claim.
#[derive(Clone, Debug)]
struct User {
    uid: &'static str,
    level: Option<i64>,
}

impl User {
    fn auth(&self) -> Arc<UserAuth> {
        let mut claims = Map::new();
        claims.insert("sub".into(), json!(self.uid));
        if let Some(l) = self.level {
            claims.insert("level".into(), json!(l));
        }
        Arc::new(UserAuth {
            ctx: AuthCtx {
                uid: self.uid.into(),
                claims,
            },
            expires_at_ms: u64::MAX,
        })
    }
}

fn int(doc: &Value, k: &str) -> Option<i64> {
    doc.get(k).and_then(Value::as_i64)
}

fn is(doc: &Value, k: &str, v: &Value) -> bool {
    doc.get(k) == Some(v)
}

/// Reference: may the user read in this collection at all?
fn ref_collection_readable(u: &User, coll: &str) -> bool {
    match coll {
        "notes" | "users/u0/items" | "users/u1/items" => true,
        "teams/t1/docs" => u.level.is_some(),
        _ => false,
    }
}

/// Reference read rule.
fn ref_readable(u: &User, coll: &str, doc: &Value) -> bool {
    let uid = json!(u.uid);
    match coll {
        "notes" => is(doc, "public", &json!(true)) || is(doc, "owner", &uid),
        "users/u0/items" | "users/u1/items" => {
            let path_uid = json!(coll.split('/').nth(1).unwrap());
            is(doc, "shared", &json!(true))
                || (is(doc, "owner", &path_uid) && is(doc, "owner", &uid))
        }
        "teams/t1/docs" => match (u.level, int(doc, "level")) {
            (Some(max), Some(l)) => l <= max,
            _ => false,
        },
        _ => false,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Applied,
    Denied,
    NotFound,
    AlreadyExists,
    /// With the actual version reported.
    VersionConflict(u64),
    /// The update does not apply to the document (its error code).
    Invalid(&'static str),
}

fn fields_ok(before: Option<&Value>, after: &Value) -> bool {
    let allowed = ["_id", "owner", "public", "n", "tag"];
    let empty = Map::new();
    let b = before.and_then(Value::as_object).unwrap_or(&empty);
    let a = after.as_object().unwrap();
    a.iter()
        .all(|(k, v)| allowed.contains(&k.as_str()) || b.get(k) == Some(v))
        && b.keys()
            .all(|k| allowed.contains(&k.as_str()) || a.contains_key(k))
}

/// Reference write rule: the answer for write `w` with these images. A document the user may
/// not read counts as absent: every answer about it is the answer for a missing one. With
/// `after_unknown`, only the checks made before the new document is computed (`Applied`: they
/// pass).
fn ref_write(
    u: &User,
    coll: &str,
    w: &Write,
    before: Option<&Value>,
    before_version: u64,
    after: Option<&Value>,
    after_unknown: bool,
) -> Answer {
    let uid = json!(u.uid);
    let hidden = before.is_some_and(|b| !ref_readable(u, coll, b));
    let absent = before.is_none() || hidden;
    let (must_exist, insert, if_version) = match w {
        Write::Insert { .. } => (false, true, None),
        Write::Put { if_version, .. } => (false, false, *if_version),
        Write::Update {
            upsert, if_version, ..
        } => (!upsert, false, *if_version),
        Write::Delete { if_version, .. } => (true, false, *if_version),
    };
    if absent && must_exist {
        return Answer::NotFound;
    }
    let actual = if absent { 0 } else { before_version };
    if if_version.is_some_and(|x| x != actual) {
        return Answer::VersionConflict(actual);
    }
    if insert && !absent {
        return Answer::AlreadyExists;
    }
    if hidden {
        return Answer::Denied;
    }
    if after_unknown {
        return Answer::Applied;
    }
    if coll == "secret" {
        return Answer::Denied;
    }
    let level_ok = |d: &Value| match (u.level, int(d, "level")) {
        (Some(max), Some(l)) => l <= max,
        _ => false,
    };
    let allowed = match (coll, before, after) {
        ("notes", None, Some(a)) => is(a, "owner", &uid) && fields_ok(None, a),
        ("notes", Some(b), Some(a)) => {
            is(b, "owner", &uid) && is(a, "owner", &uid) && fields_ok(Some(b), a)
        }
        ("notes", Some(b), None) => is(b, "owner", &uid),
        (c, None, Some(a)) if c.starts_with("users/") => {
            let path_uid = json!(c.split('/').nth(1).unwrap());
            is(a, "owner", &path_uid) && is(a, "owner", &uid)
        }
        (c, Some(_), Some(a)) if c.starts_with("users/") => is(a, "owner", &uid),
        (c, Some(_), None) if c.starts_with("users/") => false,
        ("teams/t1/docs", None, Some(a)) => level_ok(a),
        ("teams/t1/docs", Some(b), Some(a)) => level_ok(b) && level_ok(a),
        ("teams/t1/docs", Some(b), None) => level_ok(b),
        _ => false,
    };
    if allowed {
        Answer::Applied
    } else {
        Answer::Denied
    }
}

fn random_body(rng: &mut StdRng) -> Value {
    let mut m = Map::new();
    if rng.gen_bool(0.8) {
        m.insert("owner".into(), json!(USERS[rng.gen_range(0..4)]));
    }
    match rng.gen_range(0..3) {
        0 => {
            m.insert("public".into(), json!(true));
        }
        1 => {
            m.insert("public".into(), json!(false));
        }
        _ => {}
    }
    if rng.gen_bool(0.3) {
        m.insert("shared".into(), json!(true));
    }
    match rng.gen_range(0..5) {
        0 => {}
        1 => {
            m.insert("level".into(), json!("x"));
        }
        _ => {
            m.insert("level".into(), json!(rng.gen_range(0..4)));
        }
    }
    m.insert("n".into(), json!(rng.gen_range(0..6)));
    if rng.gen_bool(0.5) {
        m.insert("tag".into(), json!(["a", "b"][rng.gen_range(0..2)]));
    }
    if rng.gen_bool(0.1) {
        m.insert("extra".into(), json!(1));
    }
    Value::Object(m)
}

/// A body that is, half the time, owned by `u` (so that writes the rules allow are common).
fn own_body(rng: &mut StdRng, u: &User) -> Value {
    let mut b = random_body(rng);
    if rng.gen_bool(0.5) {
        b["owner"] = json!(u.uid);
    }
    b
}

fn random_update(rng: &mut StdRng) -> Value {
    match rng.gen_range(0..6) {
        0 => json!({"$set": {"n": rng.gen_range(0..6)}}),
        1 => json!({"$set": {"owner": USERS[rng.gen_range(0..4)]}}),
        2 => json!({"$set": {"public": rng.gen_bool(0.5)}}),
        3 => json!({"$set": {"level": rng.gen_range(0..4)}}),
        // Fails on a document whose level is a string: must never tell a hidden one's contents.
        4 => json!({"$inc": {"level": 1}}),
        _ => json!({"$set": {"extra": rng.gen_range(0..2)}}),
    }
}

fn random_query(rng: &mut StdRng) -> Value {
    let filter = match rng.gen_range(0..5) {
        0 => json!({}),
        1 => json!({"n": {"$gte": rng.gen_range(0..6)}}),
        2 => json!({"$or": [{"tag": "a"}, {"n": {"$lt": 2}}]}),
        // Tries to widen the rule: must still see only readable documents.
        3 => json!({"$or": [{"owner": USERS[rng.gen_range(0..4)]}, {"public": {"$exists": true}}]}),
        _ => json!({"owner": "$$auth.uid"}),
    };
    let sort = match rng.gen_range(0..4) {
        0 => json!(null),
        1 => json!({"n": 1}),
        2 => json!({"n": -1, "owner": 1}),
        _ => json!({"level": 1}),
    };
    let limit = if rng.gen_bool(0.6) {
        rng.gen_range(1..4)
    } else {
        0
    };
    json!({"filter": filter, "sort": sort, "skip": rng.gen_range(0..3), "limit": limit})
}

fn query_of(v: &Value, filter: Value) -> Query {
    Query::from_parts(&filter, &v["sort"], &v["skip"], &v["limit"], &Value::Null).unwrap()
}

/// The reference result of a user's query: the readable documents, then the query.
fn reference(
    u: &User,
    coll: &str,
    qv: &Value,
    store: &BTreeMap<(String, String), Value>,
) -> Vec<Value> {
    let q = query_of(qv, qv["filter"].clone());
    let readable: Vec<&Value> = store
        .iter()
        .filter(|((c, _), d)| c == coll && ref_readable(u, coll, d))
        .map(|(_, d)| d)
        .collect();
    q.run(readable)
}

struct Sub {
    user: User,
    coll: &'static str,
    qv: Value,
    query: Query,
    view: LiveView,
    client: Vec<(String, Value)>,
}

fn top(
    q: &Query,
    coll: &str,
    store: &BTreeMap<(String, String), Value>,
    n: Option<usize>,
) -> Vec<Value> {
    let mut t = q.clone();
    t.skip = 0;
    t.limit = n;
    t.projection = Projection::all();
    t.run(store.iter().filter(|((c, _), _)| c == coll).map(|(_, d)| d))
}

fn subscribe(
    rules: &Rules,
    rng: &mut StdRng,
    users: &[User],
    store: &BTreeMap<(String, String), Value>,
    seq: u64,
) -> (Option<Sub>, bool) {
    let user = users[rng.gen_range(0..users.len())].clone();
    let coll = COLLECTIONS[rng.gen_range(0..COLLECTIONS.len())];
    let qv = random_query(rng);
    let auth = user.auth();
    let refused = !ref_collection_readable(&user, coll);
    let rule = match rules.read_filter(coll, &auth.ctx) {
        Ok(r) => r,
        Err(_) => {
            assert!(
                refused,
                "{} was refused {coll}, the reference allows it",
                user.uid
            );
            return (None, true);
        }
    };
    assert!(
        !refused,
        "{} may subscribe to {coll}, the reference refuses",
        user.uid
    );
    let query = query_of(&qv, and_filters(Some(&qv["filter"]), rule));
    let slack = rng.gen_range(0..2);
    let fetch = query.limit.map(|l| query.skip + l + slack + 1);
    let view = LiveView::new(query.clone(), slack, top(&query, coll, store, fetch), seq);
    let client = view.window();
    (
        Some(Sub {
            user,
            coll,
            qv,
            query,
            view,
            client,
        }),
        true,
    )
}

fn answer_of(
    r: Result<herald_db::CommitOutcome, DbError>,
) -> (Answer, Option<herald_db::CommitOutcome>) {
    match r {
        Ok(out) => (Answer::Applied, Some(out)),
        Err(e) => (
            match e.code() {
                "permission_denied" => Answer::Denied,
                "not_found" => Answer::NotFound,
                "already_exists" => Answer::AlreadyExists,
                "version_conflict" => match e {
                    DbError::VersionConflict { actual, .. } => Answer::VersionConflict(actual),
                    _ => unreachable!(),
                },
                "type_mismatch" => Answer::Invalid("type_mismatch"),
                other => panic!("unexpected error {other}: {e}"),
            },
            None,
        ),
    }
}

#[test]
fn every_outcome_matches_the_reference_rules() {
    let target = target_cases();
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        DbOptions {
            durability: Durability::NoSync,
            ..DbOptions::default()
        },
    )
    .unwrap();
    let rules = Arc::new(rules());
    let mut cases = 0u64;
    let mut applied = 0u64;
    let mut refused = 0u64;
    let mut scenario = 0u64;
    while cases < target {
        scenario += 1;
        let mut rng = StdRng::seed_from_u64(scenario);
        // Each scenario has its own collections' documents: clear them as admin.
        let mut store: BTreeMap<(String, String), Value> = BTreeMap::new();
        let mut versions: BTreeMap<(String, String), u64> = BTreeMap::new();
        let mut wipe = Vec::new();
        for c in COLLECTIONS {
            for i in 0..6 {
                wipe.push(Write::Delete {
                    collection: c.into(),
                    id: format!("d{i}"),
                    if_version: None,
                });
            }
        }
        db.commit(wipe).unwrap();
        let mut seed = Vec::new();
        for c in COLLECTIONS {
            for i in 0..6 {
                if rng.gen_bool(0.6) {
                    let id = format!("d{i}");
                    let mut doc = Map::new();
                    doc.insert("_id".into(), json!(id));
                    doc.extend(random_body(&mut rng).as_object().unwrap().clone());
                    store.insert((c.to_string(), id.clone()), Value::Object(doc.clone()));
                    versions.insert((c.to_string(), id.clone()), 1);
                    seed.push(Write::Put {
                        collection: c.into(),
                        id,
                        doc: Value::Object(doc),
                        if_version: None,
                    });
                }
            }
        }
        let mut seq = db.commit(seed).unwrap().seq;
        let users: Vec<User> = USERS
            .iter()
            .map(|u| User {
                uid: u,
                level: if rng.gen_bool(0.75) {
                    Some(rng.gen_range(0..4))
                } else {
                    None
                },
            })
            .collect();
        let mut subs = Vec::new();
        for _ in 0..8 {
            let (sub, counted) = subscribe(&rules, &mut rng, &users, &store, seq);
            cases += counted as u64;
            subs.extend(sub);
        }
        for _step in 0..60 {
            let user = users[rng.gen_range(0..users.len())].clone();
            let coll = COLLECTIONS[rng.gen_range(0..COLLECTIONS.len())];
            // A third of the commits are an admin's (no rules): they move documents in and out
            // of every user's readable set.
            let out = if rng.gen_bool(0.35) {
                let mut writes = Vec::new();
                for _ in 0..rng.gen_range(1..3) {
                    let id = format!("d{}", rng.gen_range(0..6));
                    let key = (coll.to_string(), id.clone());
                    if rng.gen_bool(0.8) {
                        let mut m = Map::new();
                        m.insert("_id".into(), json!(id));
                        m.extend(random_body(&mut rng).as_object().unwrap().clone());
                        let doc = Value::Object(m);
                        let v = versions.get(&key).copied().unwrap_or(0) + 1;
                        store.insert(key.clone(), doc.clone());
                        versions.insert(key, v);
                        writes.push(Write::Put {
                            collection: coll.into(),
                            id,
                            doc,
                            if_version: None,
                        });
                    } else {
                        store.remove(&key);
                        versions.remove(&key);
                        writes.push(Write::Delete {
                            collection: coll.into(),
                            id,
                            if_version: None,
                        });
                    }
                }
                db.commit(writes).unwrap()
            } else {
                // A transaction of one to three writes (ids may repeat: later writes see earlier).
                let n_writes = if rng.gen_bool(0.7) {
                    1
                } else {
                    rng.gen_range(2..4)
                };
                let mut scratch = store.clone();
                let mut scratch_versions = versions.clone();
                let mut txn = Vec::new();
                let mut want = Answer::Applied;
                let mut touched = Vec::new();
                for _ in 0..n_writes {
                    let id = format!("d{}", rng.gen_range(0..6));
                    let key = (coll.to_string(), id.clone());
                    let before_version = scratch_versions.get(&key).copied().unwrap_or(0);
                    let if_version = match rng.gen_range(0..20) {
                        0 => Some(before_version),
                        1 => Some(before_version + 1),
                        2 => Some(0),
                        3 => Some(rng.gen_range(0..3)),
                        _ => None,
                    };
                    let w = match rng.gen_range(0..4) {
                        0 => Write::Put {
                            collection: coll.into(),
                            id: id.clone(),
                            doc: own_body(&mut rng, &user),
                            if_version,
                        },
                        1 => Write::Insert {
                            collection: coll.into(),
                            id: Some(id.clone()),
                            doc: own_body(&mut rng, &user),
                        },
                        2 => Write::Update {
                            collection: coll.into(),
                            id: id.clone(),
                            update: Update::parse(&random_update(&mut rng)).unwrap(),
                            upsert: rng.gen_bool(0.3),
                            if_version,
                        },
                        _ => Write::Delete {
                            collection: coll.into(),
                            id: id.clone(),
                            if_version,
                        },
                    };
                    txn.push(w.clone());
                    touched.push(key.clone());
                    if want != Answer::Applied {
                        continue;
                    }
                    let before = scratch.get(&key).cloned();
                    let after = match &w {
                        Write::Put { doc, .. } | Write::Insert { doc, .. } => {
                            let mut m = Map::new();
                            m.insert("_id".into(), json!(id));
                            m.extend(doc.as_object().unwrap().clone());
                            Ok(Some(Value::Object(m)))
                        }
                        Write::Update { update, upsert, .. } => match &before {
                            Some(b) => update.apply(b, 0).map(Some),
                            None if *upsert => update.apply(&json!({"_id": id}), 0).map(Some),
                            None => Ok(None),
                        },
                        Write::Delete { .. } => Ok(None),
                    };
                    // Preconditions come first, then computing the document, then the rules.
                    let pre =
                        ref_write(&user, coll, &w, before.as_ref(), before_version, None, true);
                    let answer = match (pre, &after) {
                        (Answer::Applied, _) => match &after {
                            Err(e) => {
                                let hidden = before
                                    .as_ref()
                                    .is_some_and(|b| !ref_readable(&user, coll, b));
                                assert!(!hidden, "the reference computed on a hidden document");
                                Answer::Invalid(e.code())
                            }
                            Ok(a) => ref_write(
                                &user,
                                coll,
                                &w,
                                before.as_ref(),
                                before_version,
                                a.as_ref(),
                                false,
                            ),
                        },
                        (other, _) => other,
                    };
                    if answer != Answer::Applied {
                        want = answer;
                        continue;
                    }
                    match after.unwrap() {
                        Some(a) => {
                            scratch.insert(key.clone(), a);
                            scratch_versions.insert(key.clone(), before_version + 1);
                        }
                        None => {
                            scratch.remove(&key);
                            scratch_versions.remove(&key);
                        }
                    }
                }
                // The server's path: the same preparation and guard.
                let (writes, meta) = for_guard(txn.clone());
                let guard = rules_guard(rules.clone(), user.auth(), meta);
                let got = answer_of(
                    db.submit(
                        herald_db::Transaction::new(writes).guard(guard),
                        herald_db::QueueFull::Refuse,
                    )
                    .unwrap()
                    .wait()
                    .map_err(DbError::from),
                );
                assert_eq!(
                    got.0,
                    want,
                    "scenario {scenario}: {} {txn:?} on {:?}",
                    user.uid,
                    touched.iter().map(|k| store.get(k)).collect::<Vec<_>>()
                );
                cases += 1;
                // What the database holds is what the model holds (before or after the commit).
                let Some(out) = got.1 else {
                    refused += 1;
                    for k in &touched {
                        let stored = db.get(&k.0, &k.1).unwrap().map(|d| d.doc);
                        assert_eq!(
                            stored.as_ref(),
                            store.get(k),
                            "a refused transaction changed {k:?}"
                        );
                    }
                    continue;
                };
                applied += 1;
                store = scratch;
                versions = scratch_versions;
                for k in &touched {
                    let stored = db.get(&k.0, &k.1).unwrap();
                    assert_eq!(
                        stored.as_ref().map(|d| &d.doc),
                        store.get(k),
                        "scenario {scenario}: {k:?}"
                    );
                    assert_eq!(
                        stored.map_or(0, |d| d.version),
                        versions.get(k).copied().unwrap_or(0)
                    );
                }
                out
            };
            if out.changes.is_empty() {
                continue;
            }
            seq = out.seq;
            for s in &mut subs {
                if s.coll != coll {
                    continue;
                }
                let changes: Vec<(&str, Option<&Value>, Option<&Value>)> = out
                    .changes
                    .iter()
                    .map(|c| (c.id.as_str(), c.before.as_ref(), c.after.as_ref()))
                    .collect();
                let snapshot = store.clone();
                let q = s.query.clone();
                let sc = s.coll;
                let mut refill = |k: usize, _s: u64| Ok(top(&q, sc, &snapshot, Some(k)));
                for e in s.view.apply(seq, &changes, &mut refill).unwrap() {
                    e.apply(&mut s.client);
                }
            }
            // Every subscriber's list equals the reference, whatever collection was written.
            for s in &subs {
                let want = reference(&s.user, s.coll, &s.qv, &store);
                let got: Vec<Value> = s.client.iter().map(|(_, d)| d.clone()).collect();
                assert_eq!(
                    got, want,
                    "scenario {scenario}: {}'s subscription {} on {}",
                    s.user.uid, s.qv, s.coll
                );
                cases += 1;
            }
            // A random get-by-id: hidden answers exactly as missing.
            let reader = &users[rng.gen_range(0..users.len())];
            let gc = COLLECTIONS[rng.gen_range(0..COLLECTIONS.len())];
            let gid = format!("d{}", rng.gen_range(0..6));
            let doc = db.get(gc, &gid).unwrap().map(|d| d.doc);
            let visible = doc
                .as_ref()
                .filter(|d| rules.can_read(gc, d, &reader.auth().ctx).is_ok());
            let want = store
                .get(&(gc.to_string(), gid))
                .filter(|d| ref_collection_readable(reader, gc) && ref_readable(reader, gc, d));
            assert_eq!(visible, want);
            cases += 1;
            // A pull query through the rule.
            let qv = random_query(&mut rng);
            if let Ok(rule) = rules.read_filter(gc, &reader.auth().ctx) {
                let q = query_of(&qv, and_filters(Some(&qv["filter"]), rule));
                let got = db.query(gc, &q).unwrap().docs;
                assert_eq!(got, reference(reader, gc, &qv, &store), "pull {qv} on {gc}");
            } else {
                assert!(!ref_collection_readable(reader, gc));
            }
            cases += 1;
        }
    }
    assert!(
        applied * 50 > applied + refused && refused > applied,
        "both outcomes are exercised: {applied} applied, {refused} refused"
    );
    eprintln!(
        "{cases} cases in {scenario} scenarios (end-user transactions: {applied} applied, {refused} refused)"
    );
}
