//! Tests of the live aggregation state: a seeded random model against `Pipeline::run`, the
//! shapes refused by name, ids, and the limits.

use super::*;
use crate::limits::ACC_ARRAY_VALUES_MAX;
use herald_value::json;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;

fn plan(spec: Value) -> Result<Arc<LivePipeline>, QueryError> {
    LivePipeline::new(Pipeline::parse(&spec)?).map(Arc::new)
}

/// The pull result: the head query's result in its order, then the rest of the pipeline.
fn pull(plan: &LivePipeline, docs: &BTreeMap<String, Value>) -> Vec<Value> {
    let head = plan.head();
    let mut input: Vec<Value> = docs
        .values()
        .filter(|d| head.filter.matches(d))
        .cloned()
        .collect();
    head.sort.sort(&mut input);
    let (_, covered) = plan.pipeline().head_query(usize::MAX);
    plan.pipeline().run_from(covered, input).unwrap()
}

fn random_value(rng: &mut StdRng) -> Option<Value> {
    Some(match rng.gen_range(0..9) {
        0 => return None,
        1 => Value::Null,
        2 => json!(rng.gen_range(0..3)),
        3 => json!(rng.gen_range(0..3) as f64),
        4 => json!(rng.gen_range(0..4) as f64 * 0.1 + 0.05),
        5 => json!(["a", "b", "c"][rng.gen_range(0..3)]),
        6 => json!(i64::MAX - rng.gen_range(0..2)),
        7 => json!([rng.gen_range(0..2), "x"]),
        _ => json!(rng.gen_range(-2..2)),
    })
}

fn random_doc(rng: &mut StdRng, id: &str) -> Value {
    let mut m = Map::new();
    m.insert("_id".into(), json!(id));
    for f in ["k", "j", "n", "m"] {
        if let Some(v) = random_value(rng) {
            m.insert(f.into(), v);
        }
    }
    let tags: Vec<Value> = (0..rng.gen_range(0..3))
        .map(|_| json!(rng.gen_range(0..3)))
        .collect();
    m.insert("tags".into(), Value::Array(tags));
    Value::Object(m)
}

fn pipelines() -> Vec<Value> {
    let accs = json!({"_id": "$k", "c": {"$count": {}}, "s": {"$sum": "$n"}, "a": {"$avg": "$n"},
        "lo": {"$min": "$n"}, "hi": {"$max": "$m"}, "f": {"$first": "$m"}, "l": {"$last": "$n"},
        "p": {"$push": "$j"}, "u": {"$addToSet": "$n"}});
    vec![
        json!([{"$group": accs}]),
        json!([{"$match": {"n": {"$gte": 0}}}, {"$group": {"_id": {"k": "$k", "j": "$j"}, "s": {"$sum": "$m"}, "c": {"$sum": 1}}}]),
        json!([{"$sort": {"m": -1}}, {"$group": {"_id": "$k", "f": {"$first": "$n"}, "l": {"$last": "$n"}, "p": {"$push": "$n"}}}]),
        json!([{"$unwind": "$tags"}, {"$group": {"_id": "$tags", "c": {"$count": {}}, "s": {"$sum": "$n"}}}, {"$sort": {"c": -1}}, {"$limit": 2}]),
        json!([{"$match": {"k": {"$exists": true}}}, {"$count": "total"}]),
        json!([{"$group": {"_id": null, "s": {"$sum": "$n"}, "a": {"$avg": "$m"}}}]),
        json!([{"$project": {"k": 1, "v": "$n"}}, {"$match": {"v": {"$type": "number"}}}, {"$group": {"_id": "$k", "hi": {"$max": "$v"}, "lo": {"$min": "$v"}}}, {"$match": {"hi": {"$gt": 0}}}, {"$project": {"hi": 1}}, {"$skip": 1}]),
        json!([{"$group": {"_id": "$k", "c": {"$count": {}}}}, {"$count": "groups"}]),
        // A window: array keys tie on the sort (an array sorts by its least element), and ties
        // stay in group order as the pull path's stable sort leaves them.
        json!([{"$group": {"_id": "$tags", "c": {"$count": {}}, "s": {"$sum": "$n"}}}, {"$match": {"c": {"$gte": 1}}}, {"$sort": {"_id": 1}}, {"$skip": 1}, {"$limit": 3}, {"$project": {"c": 1}}]),
        json!([{"$group": {"_id": "$j", "c": {"$count": {}}}}, {"$sort": {"c": -1}}, {"$limit": 2}]),
    ]
}

#[test]
fn random_changes_keep_the_live_result_equal_to_the_pull_result() {
    for (p, spec) in pipelines().into_iter().enumerate() {
        for seed in 0..20u64 {
            let mut rng = StdRng::seed_from_u64(seed * 31 + p as u64);
            let plan = plan(spec.clone()).unwrap();
            let mut live = LiveAgg::new(Arc::clone(&plan), plan.head().clone());
            let mut docs: BTreeMap<String, Value> = BTreeMap::new();
            for step in 0..60 {
                let id = format!("d{}", rng.gen_range(0..12));
                let before = docs.get(&id).cloned();
                let after = (rng.gen_range(0..4) != 0).then(|| random_doc(&mut rng, &id));
                match &after {
                    Some(a) => docs.insert(id.clone(), a.clone()),
                    None => docs.remove(&id),
                };
                live.apply(before.as_ref(), after.as_ref()).unwrap();
                let (rows, _) = live.result().unwrap();
                let rows: Vec<Value> = rows.iter().map(|r| (**r).clone()).collect();
                let want = pull(&plan, &docs);
                assert_eq!(
                    rows.iter().map(Value::to_string).collect::<Vec<_>>(),
                    want.iter().map(Value::to_string).collect::<Vec<_>>(),
                    "pipeline {p} seed {seed} step {step}"
                );
            }
        }
    }
}

#[test]
fn sums_return_to_integers_and_groups_disappear() {
    let plan = plan(json!([{"$group": {"_id": "$k", "s": {"$sum": "$n"}, "lo": {"$min": "$n"}}}]))
        .unwrap();
    let mut live = LiveAgg::new(Arc::clone(&plan), plan.head().clone());
    let a = json!({"_id": "a", "k": 1, "n": 2});
    let b = json!({"_id": "b", "k": 1.0, "n": 0.5});
    live.add(&a).unwrap();
    live.add(&b).unwrap();
    let (rows, _) = live.result().unwrap();
    assert_eq!(rows[0].to_string(), r#"{"_id":1,"s":2.5,"lo":0.5}"#);
    live.remove(&b).unwrap();
    let (rows, ids) = live.result().unwrap();
    assert_eq!(rows[0].to_string(), r#"{"_id":1,"s":2,"lo":2}"#);
    assert_eq!(ids, vec!["1".to_string()]);
    // The first-seen key is the output _id: with `a` gone it is 1.0.
    live.add(&b).unwrap();
    live.remove(&a).unwrap();
    let (rows, _) = live.result().unwrap();
    assert_eq!(rows[0].to_string(), r#"{"_id":1.0,"s":0.5,"lo":0.5}"#);
    live.remove(&b).unwrap();
    assert!(live.result().unwrap().0.is_empty());
    assert_eq!(live.docs(), 0);
}

#[test]
fn null_group_without_input_has_no_row_and_count_rows_have_the_empty_id() {
    let plan = plan(json!([{"$count": "n"}])).unwrap();
    let mut live = LiveAgg::new(Arc::clone(&plan), plan.head().clone());
    assert!(live.result().unwrap().0.is_empty());
    live.add(&json!({"_id": "a"})).unwrap();
    let (rows, _) = live.result().unwrap();
    assert_eq!(*rows[0], json!({"n": 1}));
    assert_eq!(row_id(&rows[0]), "");
    assert_eq!(row_id(&json!({"_id": "r1"})), "\"r1\"");
    assert_eq!(row_id(&json!({"_id": {"a": 1}})), "{\"a\":1}");
    assert_eq!(row_id(&json!({"_id": null})), "null");
}

#[test]
fn unsupported_shapes_are_refused_by_stage_and_reason() {
    let refused = |spec: Value| {
        let e = plan(spec).unwrap_err();
        assert_eq!(e.code(), "unsupported_live");
        e.to_string()
    };
    assert!(refused(json!([{"$match": {}}])).contains("needs a $group or $count"));
    assert!(
        refused(json!([{"$limit": 5}, {"$group": {"_id": null}}])).contains("pipeline.0.$limit")
    );
    assert!(refused(
        json!([{"$project": {"a": 1}}, {"$sort": {"a": 1}}, {"$group": {"_id": null}}])
    )
    .contains("pipeline.1.$sort"));
    assert!(
        refused(json!([{"$group": {"_id": "$a"}}, {"$group": {"_id": null}}]))
            .contains("pipeline.1.$group")
    );
    assert!(refused(json!([{"$group": {"_id": "$a"}}, {"$unwind": "$x"}])).contains("$unwind"));
    assert!(
        refused(json!([{"$group": {"_id": "$a"}}, {"$project": {"_id": 0}}])).contains("keep _id")
    );
    assert!(
        refused(json!([{"$group": {"_id": "$a"}}, {"$project": {"_id": "$n"}}]))
            .contains("keep _id")
    );
    // Allowed: a projection that keeps _id, anything after a $count.
    plan(json!([{"$group": {"_id": "$a", "n": {"$sum": 1}}}, {"$project": {"n": 1}}])).unwrap();
    plan(json!([{"$group": {"_id": "$a"}}, {"$count": "c"}, {"$project": {"_id": 0}}])).unwrap();
    // Malformed pipelines keep their own codes.
    assert_eq!(
        plan(json!([{"$bogus": 1}])).unwrap_err().code(),
        "unknown_operator"
    );
}

#[test]
fn limits_apply_to_the_live_state() {
    let plan = plan(json!([{"$group": {"_id": null, "p": {"$push": "$n"}}}])).unwrap();
    let mut live = LiveAgg::new(Arc::clone(&plan), plan.head().clone());
    for i in 0..=ACC_ARRAY_VALUES_MAX {
        live.add(&json!({"_id": format!("{i:06}"), "n": 1}))
            .unwrap();
    }
    let e = live.result().unwrap_err();
    assert_eq!(e.code(), "limit_exceeded");
    assert!(e.to_string().contains("ACC_ARRAY_VALUES_MAX"));
}
