//! Running the part of a pipeline after its head query one input document at a time, and the
//! shapes a database can answer without reading documents at all.
//!
//! A pipeline whose stages after the head are per-document (`$match`, `$project`, `$unwind`)
//! up to a `$group` or `$count` never needs its whole input in memory: [`Streaming`] feeds each
//! document through the per-document stages into the group (bounded by the group limits) or a
//! counter, and runs the stages after it over their (small) output. Fed the same documents in the
//! same order it returns exactly what [`Pipeline::run_from`] returns.
//!
//! [`CountShape`] is a pipeline that only counts its input (`$count`, or a `$group` on a
//! constant key whose accumulators are all `$count`/`$sum: 1`): a database that can count the
//! head query's matches (index entries in an exact range) answers it from that number.
//! [`Extreme`] is a `$group` on a constant key with one `$min` or `$max` of a field: a database
//! whose index orders that field (no arrays along it) answers it from the first match of a
//! sorted query.

use super::accum::AccOp;
use super::expr::AggExpr;
use super::group::GroupRun;
use super::{Pipeline, Stage};
use crate::error::QueryError;
use herald_value::{Map, Value};

/// Where the streamed documents end.
enum Sink<'p> {
    Group(GroupRun<'p>),
    Count { name: &'p str, n: usize },
}

/// The stages after a pipeline's head, fed one document at a time (see the module docs).
pub struct Streaming<'p> {
    pipeline: &'p Pipeline,
    per_doc: &'p [Stage],
    sink: Sink<'p>,
    /// The first stage after the sink.
    rest: usize,
}

impl Pipeline {
    /// The stages from `first` on as a [`Streaming`] run, when they are per-document stages up
    /// to a `$group` or `$count`; `None` otherwise (the caller holds the input and calls
    /// [`run_from`](Self::run_from)).
    pub fn streaming(&self, first: usize) -> Option<Streaming<'_>> {
        let stages = self.stages.get(first..)?;
        let at = stages.iter().position(|s| !per_document(s))?;
        let sink = match &stages[at] {
            Stage::Group(g) => Sink::Group(g.start()),
            Stage::Count(name) => Sink::Count { name, n: 0 },
            _ => return None,
        };
        Some(Streaming {
            pipeline: self,
            per_doc: &stages[..at],
            sink,
            rest: first + at + 1,
        })
    }

    /// The stage at `first` as a count of its input, if it only counts (see [`CountShape`]).
    pub fn count_shape(&self, first: usize) -> Option<CountShape<'_>> {
        match self.stages.get(first)? {
            Stage::Count(name) => Some(CountShape {
                pipeline: self,
                first,
                out: CountOut::Count(name),
            }),
            Stage::Group(g) if g.id.is_constant() => {
                let ones = g.accumulators.iter().all(|a| {
                    matches!(a.op, AccOp::Count | AccOp::Sum)
                        && matches!(&a.expr, AggExpr::Literal(v) if v.as_i64() == Some(1))
                });
                ones.then(|| CountShape {
                    pipeline: self,
                    first,
                    out: CountOut::Group {
                        id: constant(&g.id),
                        names: g.accumulators.iter().map(|a| a.name.as_str()).collect(),
                    },
                })
            }
            _ => None,
        }
    }

    /// The stage at `first` as the least or greatest value of one field, if it is only that
    /// (see [`Extreme`]).
    pub fn extreme(&self, first: usize) -> Option<Extreme<'_>> {
        let Stage::Group(g) = self.stages.get(first)? else {
            return None;
        };
        let [acc] = g.accumulators.as_slice() else {
            return None;
        };
        let max = match acc.op {
            AccOp::Max => true,
            AccOp::Min => false,
            _ => return None,
        };
        let AggExpr::Field(segs) = &acc.expr else {
            return None;
        };
        // A numeric segment names a field here but may be an array position to a sort.
        if !g.id.is_constant() || segs.iter().any(|s| s.bytes().all(|b| b.is_ascii_digit())) {
            return None;
        }
        Some(Extreme {
            pipeline: self,
            first,
            path: segs.join("."),
            max,
            id: constant(&g.id),
            name: &acc.name,
        })
    }
}

/// The value of a constant expression.
fn constant(e: &AggExpr) -> Value {
    e.eval(&Value::Object(Map::new())).unwrap_or(Value::Null)
}

/// Stages that map one document to zero or more without looking at the others.
fn per_document(s: &Stage) -> bool {
    matches!(s, Stage::Match(_) | Stage::Project(_) | Stage::Unwind(_))
}

impl Streaming<'_> {
    /// Feeds one input document.
    pub fn push(&mut self, doc: Value) -> Result<(), QueryError> {
        feed(self.per_doc, doc, &mut self.sink)
    }

    /// The pipeline's output: the sink's rows through the stages after it.
    pub fn finish(self) -> Result<Vec<Value>, QueryError> {
        let rows = match self.sink {
            Sink::Group(run) => run.finish(),
            Sink::Count { name, n } => count_rows(name, n),
        };
        self.pipeline.run_from(self.rest, rows)
    }
}

fn feed(stages: &[Stage], doc: Value, sink: &mut Sink<'_>) -> Result<(), QueryError> {
    let Some((stage, rest)) = stages.split_first() else {
        return match sink {
            Sink::Group(run) => run.push(&doc),
            Sink::Count { n, .. } => {
                *n += 1;
                Ok(())
            }
        };
    };
    match stage {
        Stage::Match(f) if f.matches(&doc) => feed(rest, doc, sink),
        Stage::Match(_) => Ok(()),
        Stage::Project(p) => feed(rest, p.apply(&doc), sink),
        Stage::Unwind(u) => {
            let mut out = Vec::new();
            u.apply(doc, &mut out)?;
            out.into_iter().try_for_each(|d| feed(rest, d, sink))
        }
        _ => unreachable!("only per-document stages precede the sink"),
    }
}

fn count_rows(name: &str, n: usize) -> Vec<Value> {
    if n == 0 {
        return Vec::new();
    }
    let mut m = Map::new();
    m.insert(name.to_string(), Value::from(n));
    vec![Value::Object(m)]
}

enum CountOut<'p> {
    Count(&'p str),
    Group { id: Value, names: Vec<&'p str> },
}

/// A stage that only counts its input (see the module docs).
pub struct CountShape<'p> {
    pipeline: &'p Pipeline,
    first: usize,
    out: CountOut<'p>,
}

impl CountShape<'_> {
    /// The pipeline's output when the stage's input has `n` documents.
    pub fn finish(&self, n: u64) -> Result<Vec<Value>, QueryError> {
        let rows = match &self.out {
            CountOut::Count(name) => count_rows(name, n as usize),
            // A group exists only when a document came in.
            CountOut::Group { .. } if n == 0 => Vec::new(),
            CountOut::Group { id, names } => {
                let mut m = Map::with_capacity(names.len() + 1);
                m.insert("_id".into(), id.clone());
                for name in names {
                    m.insert((*name).to_string(), Value::from(n));
                }
                vec![Value::Object(m)]
            }
        };
        self.pipeline.run_from(self.first + 1, rows)
    }
}

/// A `$group` on a constant key with one `$max` (or `$min`) of a field (see the module docs).
pub struct Extreme<'p> {
    pipeline: &'p Pipeline,
    first: usize,
    /// The field, dotted.
    pub path: String,
    /// `$max` (else `$min`).
    pub max: bool,
    id: Value,
    name: &'p str,
}

impl Extreme<'_> {
    /// The pipeline's output given whether the stage's input had any document and the value
    /// the accumulator settles on: the field's greatest (least) value other than null and
    /// missing, or `None` when every input document has it null or missing.
    pub fn finish(&self, any: bool, value: Option<Value>) -> Result<Vec<Value>, QueryError> {
        let rows = if any {
            let mut m = Map::with_capacity(2);
            m.insert("_id".into(), self.id.clone());
            m.insert(self.name.to_string(), value.unwrap_or(Value::Null));
            vec![Value::Object(m)]
        } else {
            Vec::new()
        };
        self.pipeline.run_from(self.first + 1, rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_value::json;

    fn docs() -> Vec<Value> {
        vec![
            json!({"_id": "a", "k": 1, "n": 2, "t": ["x", "y"]}),
            json!({"_id": "b", "k": 2, "n": 2.5}),
            json!({"_id": "c", "k": 1, "n": "s", "t": []}),
            json!({"_id": "d", "n": null, "t": "z"}),
        ]
    }

    fn streamed(spec: Value) -> Option<Vec<Value>> {
        let p = Pipeline::parse(&spec).unwrap();
        let mut s = p.streaming(0)?;
        for d in docs() {
            s.push(d).unwrap();
        }
        Some(s.finish().unwrap())
    }

    /// Fed the same documents, a streamed run returns what the reference returns.
    #[test]
    fn streaming_equals_the_reference() {
        for spec in [
            json!([{"$group": {"_id": "$k", "s": {"$sum": "$n"}, "p": {"$push": "$_id"}}}]),
            json!([{"$match": {"k": 1}}, {"$count": "c"}]),
            json!([{"$match": {"k": 9}}, {"$count": "c"}]),
            json!([{"$unwind": "$t"}, {"$project": {"t": 1}}, {"$group": {"_id": "$t", "c": {"$count": {}}}},
                   {"$sort": {"c": -1}}, {"$limit": 2}]),
            json!([{"$project": {"k": 1}}, {"$group": {"_id": null, "m": {"$max": "$k"}}}]),
        ] {
            let p = Pipeline::parse(&spec).unwrap();
            assert_eq!(
                streamed(spec.clone()),
                Some(p.run(docs()).unwrap()),
                "{spec}"
            );
        }
        // Nothing to stream into: the caller holds the input.
        assert!(streamed(json!([{"$match": {"k": 1}}, {"$sort": {"k": 1}}])).is_none());
        assert!(streamed(json!([{"$sort": {"k": 1}}, {"$count": "c"}])).is_none());
    }

    #[test]
    fn counting_shapes() {
        let shape = |spec: Value| {
            let p = Pipeline::parse(&spec).unwrap();
            let rows = p.count_shape(0).map(|c| c.finish(4).unwrap());
            if let Some(r) = &rows {
                assert_eq!(r, &p.run(docs()).unwrap(), "{spec}");
            }
            rows.is_some()
        };
        assert!(shape(json!([{"$count": "n"}])));
        assert!(shape(
            json!([{"$group": {"_id": null, "n": {"$sum": 1}, "m": {"$count": {}}}}])
        ));
        assert!(shape(
            json!([{"$group": {"_id": {"a": 1}, "n": {"$sum": 1}}}, {"$project": {"n": 1}}])
        ));
        assert!(!shape(json!([{"$group": {"_id": null, "n": {"$sum": 2}}}])));
        assert!(!shape(json!([{"$group": {"_id": "$k", "n": {"$sum": 1}}}])));
        assert!(!shape(
            json!([{"$group": {"_id": null, "n": {"$sum": "$n"}}}])
        ));
        let p = Pipeline::parse(&json!([{"$count": "n"}])).unwrap();
        assert_eq!(
            p.count_shape(0).unwrap().finish(0).unwrap(),
            Vec::<Value>::new()
        );
        let p = Pipeline::parse(&json!([{"$group": {"_id": null, "n": {"$sum": 1}}}])).unwrap();
        assert_eq!(
            p.count_shape(0).unwrap().finish(0).unwrap(),
            Vec::<Value>::new()
        );
    }

    #[test]
    fn extreme_shapes() {
        let p =
            Pipeline::parse(&json!([{"$group": {"_id": null, "m": {"$max": "$a.b"}}}])).unwrap();
        let e = p.extreme(0).unwrap();
        assert!(e.max);
        assert_eq!(e.path, "a.b");
        assert_eq!(
            e.finish(true, Some(json!(3))).unwrap(),
            vec![json!({"_id": null, "m": 3})]
        );
        assert_eq!(
            e.finish(true, None).unwrap(),
            vec![json!({"_id": null, "m": null})]
        );
        assert_eq!(e.finish(false, None).unwrap(), Vec::<Value>::new());
        for spec in [
            json!([{"$group": {"_id": "$k", "m": {"$max": "$a"}}}]),
            json!([{"$group": {"_id": null, "m": {"$max": "$a"}, "c": {"$sum": 1}}}]),
            json!([{"$group": {"_id": null, "m": {"$max": "$a.0"}}}]),
            json!([{"$group": {"_id": null, "m": {"$first": "$a"}}}]),
        ] {
            assert!(
                Pipeline::parse(&spec).unwrap().extreme(0).is_none(),
                "{spec}"
            );
        }
    }
}
