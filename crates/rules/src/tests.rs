//! Unit tests of rule validation, substitution and decisions.

use crate::{and_filters, AuthCtx, Denial, Rules};
use herald_query::Filter;
use serde_json::{json, Map, Value};

fn rules(v: Value) -> Rules {
    Rules::parse(&v).unwrap()
}

fn user(uid: &str, claims: Value) -> AuthCtx {
    AuthCtx {
        uid: uid.into(),
        claims: claims.as_object().cloned().unwrap_or_default(),
    }
}

fn notes() -> Rules {
    rules(json!({"rules": [
        {"match": "notes/{noteId}",
         "read": {"$or": [{"public": true}, {"owner": "$$auth.uid"}]},
         "create": {"after.owner": "$$auth.uid"},
         "update": {"before.owner": "$$auth.uid", "after.owner": "$$auth.uid"},
         "delete": {"before.owner": "$$auth.uid"},
         "fields": ["owner", "text", "public"]},
        {"match": "users/{uid}/posts/{postId}",
         "read": {"$or": [{"draft": false}, {"$and": [{"author": "$$uid"}, {"author": "$$auth.uid"}]}]},
         "create": {"after.author": "$$uid"}},
        {"match": "teams/{team}/docs/{d}", "read": {"team": "$$auth.claims.team"}}
    ]}))
}

#[test]
fn bad_rule_sets_are_refused_with_a_reason() {
    let bad = [
        (json!([]), "must be an object"),
        (json!({"rules": {}}), "'rules' must be an array"),
        (json!({"rules": [], "x": 1}), "unknown member 'x'"),
        (json!({"rules": [{"match": "notes"}]}), "even number"),
        (
            json!({"rules": [{"match": "notes/n1"}]}),
            "must be a variable",
        ),
        (
            json!({"rules": [{"match": "notes/{a}/x/{a}"}]}),
            "appears twice",
        ),
        (json!({"rules": [{"match": "notes/{auth}"}]}), "reserved"),
        (json!({"rules": [{"match": "__x/{a}"}]}), "bad segment"),
        (
            json!({"rules": [{"match": "n/{a}", "read": true}]}),
            "must be a filter",
        ),
        (
            json!({"rules": [{"match": "n/{a}", "read": {"x": {"$bogus": 1}}}]}),
            "unknown_operator",
        ),
        (
            json!({"rules": [{"match": "n/{a}", "read": {"x": "$$nope"}}]}),
            "unknown reference",
        ),
        (
            json!({"rules": [{"match": "n/{a}", "read": {"x": "$$a"}}]}),
            "document id",
        ),
        (
            json!({"rules": [{"match": "n/{a}", "read": {"x": "$$auth.claims."}}]}),
            "bad claim",
        ),
        (
            json!({"rules": [{"match": "n/{a}", "fields": ["a.b"]}]}),
            "top-level",
        ),
        (
            json!({"rules": [{"match": "n/{a}", "write": {}}]}),
            "unknown member 'write'",
        ),
        (
            json!({"rules": [{"match": "n/{a}", "read": {"x": {"$regex": "(?=a)"}}}]}),
            "unsupported_regex",
        ),
    ];
    for (v, want) in bad {
        let e = Rules::parse(&v).unwrap_err();
        assert_eq!(e.code(), "bad_rules");
        assert!(e.0.contains(want), "{v}: {e} should mention {want}");
    }
    assert!(Rules::parse_text(b"{")
        .unwrap_err()
        .0
        .contains("not valid JSON"));
}

#[test]
fn the_read_filter_is_the_rule_with_the_user_substituted() {
    let r = notes();
    let alice = user("alice", json!({}));
    assert_eq!(
        r.read_filter("notes", &alice).unwrap(),
        json!({"$or": [{"public": true}, {"owner": "alice"}]})
    );
    assert_eq!(
        r.read_filter("users/bob/posts", &alice).unwrap(),
        json!({"$or": [{"draft": false}, {"$and": [{"author": "bob"}, {"author": "alice"}]}]})
    );
    assert_eq!(r.read_filter("other", &alice), Err(Denial::NoRule));
    assert_eq!(r.read_filter("notes/n1/sub", &alice), Err(Denial::NoRule));
    // A claim the token lacks denies instead of comparing with null.
    assert_eq!(r.read_filter("teams/t1/docs", &alice), Err(Denial::Denied));
    let member = user("carol", json!({"team": "t1"}));
    assert_eq!(
        r.read_filter("teams/x/docs", &member).unwrap(),
        json!({"team": "t1"})
    );
}

#[test]
fn substituted_values_are_data_never_operators_or_placeholders() {
    let r = notes();
    // A uid that looks like a placeholder stays a string.
    let sneaky = user("$$auth.claims.team", json!({"team": "t1"}));
    assert_eq!(
        r.read_filter("notes", &sneaky).unwrap(),
        json!({"$or": [{"public": true}, {"owner": "$$auth.claims.team"}]})
    );
    // An object claim where a field condition goes is compared as a literal.
    let injector = user("x", json!({"team": {"$ne": null}}));
    let f = r.read_filter("teams/t/docs", &injector).unwrap();
    assert_eq!(f, json!({"team": {"$eq": {"$ne": null}}}));
    let f = Filter::parse(&f).unwrap();
    assert!(!f.matches(&json!({"_id": "d", "team": "t1"})));
    assert!(f.matches(&json!({"_id": "d", "team": {"$ne": null}})));
}

#[test]
fn can_read_hides_what_the_filter_excludes() {
    let r = notes();
    let alice = user("alice", json!({}));
    assert_eq!(
        r.can_read("notes", &json!({"owner": "alice"}), &alice),
        Ok(())
    );
    assert_eq!(
        r.can_read("notes", &json!({"public": true}), &alice),
        Ok(())
    );
    assert_eq!(
        r.can_read("notes", &json!({"owner": "bob"}), &alice),
        Err(Denial::Hidden)
    );
}

#[test]
fn writes_are_decided_on_before_and_after() {
    let r = notes();
    let alice = user("alice", json!({}));
    let mine = json!({"_id": "n", "owner": "alice", "text": "a"});
    let bobs = json!({"_id": "n", "owner": "bob", "text": "b"});
    let public_bobs = json!({"_id": "n", "owner": "bob", "public": true});
    assert_eq!(r.check_write("notes", None, Some(&mine), &alice), Ok(()));
    assert_eq!(
        r.check_write("notes", None, Some(&bobs), &alice),
        Err(Denial::Denied)
    );
    let edited = json!({"_id": "n", "owner": "alice", "text": "b"});
    assert_eq!(
        r.check_write("notes", Some(&mine), Some(&edited), &alice),
        Ok(())
    );
    // Giving the note away is an update whose after-image fails.
    assert_eq!(
        r.check_write("notes", Some(&mine), Some(&bobs), &alice),
        Err(Denial::Denied)
    );
    // Readable but not hers: denied; unreadable: hidden (as if missing).
    assert_eq!(
        r.check_write("notes", Some(&public_bobs), None, &alice),
        Err(Denial::Denied)
    );
    assert_eq!(
        r.check_write("notes", Some(&bobs), None, &alice),
        Err(Denial::Hidden)
    );
    assert_eq!(
        r.check_write("notes", None, None, &alice),
        Err(Denial::Hidden)
    );
    assert_eq!(r.check_write("notes", Some(&mine), None, &alice), Ok(()));
    // fields: only listed top-level fields may be added, changed or removed.
    let extra = json!({"_id": "n", "owner": "alice", "text": "a", "admin": true});
    assert_eq!(
        r.check_write("notes", Some(&mine), Some(&extra), &alice),
        Err(Denial::Denied)
    );
    assert_eq!(
        r.check_write("notes", Some(&extra), Some(&mine), &alice),
        Err(Denial::Denied),
        "removing an unlisted field is a change too"
    );
    assert_eq!(
        r.check_write(
            "notes",
            Some(&extra),
            Some(&json!({"_id": "n", "owner": "alice", "text": "z", "admin": true})),
            &alice
        ),
        Ok(()),
        "an unlisted field left as it was is fine"
    );
    // An operation without a rule is denied.
    let post = json!({"_id": "p", "author": "alice", "draft": false});
    assert_eq!(
        r.check_write("users/alice/posts", Some(&post), None, &alice),
        Err(Denial::Denied)
    );
    assert_eq!(
        r.check_write("users/alice/posts", None, Some(&post), &alice),
        Ok(())
    );
    assert_eq!(
        r.check_write("users/bob/posts", None, Some(&post), &alice),
        Err(Denial::Denied)
    );
    assert_eq!(
        r.check_write("nowhere", None, Some(&post), &alice),
        Err(Denial::NoRule)
    );
}

#[test]
fn and_filters_keeps_both_sides() {
    let rule = json!({"owner": "a"});
    assert_eq!(and_filters(None, rule.clone()), rule);
    assert_eq!(and_filters(Some(&json!({})), rule.clone()), rule);
    assert_eq!(
        and_filters(Some(&json!({"n": 1})), json!({})),
        json!({"n": 1})
    );
    assert_eq!(
        and_filters(
            Some(&json!({"$or": [{"owner": "b"}, {"n": 1}]})),
            rule.clone()
        ),
        json!({"$and": [{"$or": [{"owner": "b"}, {"n": 1}]}, {"owner": "a"}]})
    );
    // The user cannot widen the rule: the AND of an $or that names another owner with the rule
    // matches only the rule's documents.
    let f = Filter::parse(&and_filters(
        Some(&json!({"$or": [{"owner": "b"}, {"n": 1}]})),
        rule,
    ))
    .unwrap();
    assert!(!f.matches(&json!({"owner": "b"})));
    assert!(f.matches(&json!({"owner": "a", "n": 1})));
}

#[test]
fn test_files_report_each_case() {
    let file = json!({"cases": [
        {"name": "own", "auth": {"uid": "alice"}, "op": "read", "path": "notes/n1", "doc": {"owner": "alice"}, "expect": "allow"},
        {"name": "anon", "op": "read", "path": "notes/n1", "doc": {"public": true}, "expect": "deny"},
        {"name": "wrong", "auth": {"uid": "bob"}, "op": "delete", "path": "notes/n1", "before": {"owner": "alice", "public": true}, "expect": "allow"}
    ]});
    let results = crate::testfile::run(&notes(), &file).unwrap();
    assert_eq!(
        results.iter().map(|r| r.passed()).collect::<Vec<_>>(),
        [true, true, false]
    );
    let table = crate::testfile::table(&results);
    assert!(
        table.contains("MISMATCH") && table.contains("3 cases, 2 passed, 1 mismatched"),
        "{table}"
    );
    let bad = json!({"cases": [{"op": "read", "path": "notes", "expect": "allow"}]});
    assert!(crate::testfile::run(&notes(), &bad)
        .unwrap_err()
        .0
        .contains("not a document path"));
    let _ = Map::<String, Value>::new();
}
