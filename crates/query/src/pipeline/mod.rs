//! Aggregation pipelines (MongoDB's `aggregate`), evaluated over documents in memory.
//!
//! A pipeline is parsed once into typed [`Stage`]s and then run over the input documents in
//! order. Supported: `$match` (the query [`Filter`]), `$group` (`group.rs`, accumulators in
//! `accum.rs`), `$sort`, `$skip`, `$limit`, `$project` (`project.rs`), `$count` and `$unwind`
//! (`unwind.rs`); expressions are in `expr.rs`. Any other stage is refused by name with
//! `unknown_operator`, a malformed stage with `bad_pipeline` (or the `$match`/`$sort`/`$project`
//! codes of the query language), a limit with `limit_exceeded` (`crate::limits`).
//!
//! A caller with a faster path for the head of the pipeline (an index plan) takes it with
//! [`Pipeline::head_query`] and runs the rest with [`Pipeline::run_from`]; [`Pipeline::run`] is the
//! reference evaluation that every such path must agree with. [`Pipeline::streaming`] runs the
//! stages after the head one input document at a time when they end in a `$group` or `$count`
//! (`stream.rs`), and [`Pipeline::count_shape`] / [`Pipeline::extreme`] name the shapes an index
//! answers without reading documents. Input order matters to
//! `$first`/`$last`/`$push`: the input is the head query's result, ordered by `_id` unless sorted.

mod accum;
mod expr;
mod group;
mod project;
mod size;
mod stream;
mod unwind;

pub use accum::{AccOp, AccState, Accumulator, NumSum};
pub use expr::{field_path, AggExpr};
pub use group::{Group, GroupRun};
pub use project::Project;
pub use stream::{CountShape, Extreme, Streaming};
pub use unwind::Unwind;

use crate::error::QueryError;
use crate::filter::Filter;
use crate::limits::{BLOCKING_STAGE_BYTES_MAX, PIPELINE_STAGES_MAX};
use crate::query::Query;
use crate::sort::Sort;
use expr::bad;
use herald_value::{Map, Num, Value};
use size::{approx_bytes, docs_bytes};

/// One parsed stage.
#[derive(Debug, Clone)]
pub enum Stage {
    Match(Filter),
    Group(Group),
    Sort(Sort),
    Skip(usize),
    Limit(usize),
    Project(Project),
    /// `$count`: one document `{name: n}` (none for an empty input, as in MongoDB).
    Count(String),
    Unwind(Unwind),
}

impl Stage {
    /// The stage's operator name, for explain.
    pub fn name(&self) -> &'static str {
        match self {
            Stage::Match(_) => "$match",
            Stage::Group(_) => "$group",
            Stage::Sort(_) => "$sort",
            Stage::Skip(_) => "$skip",
            Stage::Limit(_) => "$limit",
            Stage::Project(_) => "$project",
            Stage::Count(_) => "$count",
            Stage::Unwind(_) => "$unwind",
        }
    }
}

/// Stages MongoDB has that Herald does not run (refused by name, `unknown_operator`); any other
/// `$` name is refused the same way.
const KNOWN_STAGES: &[&str] = &[
    "$match", "$group", "$sort", "$skip", "$limit", "$project", "$count", "$unwind",
];

/// A parsed pipeline.
#[derive(Debug, Clone)]
pub struct Pipeline {
    stages: Vec<Stage>,
}

impl Pipeline {
    /// Parses `[{"$match": {...}}, {"$group": {...}}, ...]`.
    pub fn parse(spec: &Value) -> Result<Pipeline, QueryError> {
        let Value::Array(items) = spec else {
            return Err(QueryError::BadPipeline(
                "a pipeline is an array of stages".into(),
            ));
        };
        if items.len() > PIPELINE_STAGES_MAX {
            return Err(QueryError::LimitExceeded(format!(
                "the pipeline has more than PIPELINE_STAGES_MAX ({PIPELINE_STAGES_MAX}) stages"
            )));
        }
        let stages = items
            .iter()
            .enumerate()
            .map(|(i, s)| parse_stage(s, &format!("pipeline.{i}")))
            .collect::<Result<_, _>>()?;
        Ok(Pipeline { stages })
    }

    pub fn stages(&self) -> &[Stage] {
        &self.stages
    }

    /// The query a database can run for the head of the pipeline (a leading `$match`, then a
    /// `$sort`, `$skip` and `$limit` directly after it, in that order), and how many stages it
    /// covers. Running the query and then [`run_from`](Self::run_from) that many stages gives
    /// the same result as [`run`](Self::run) over the whole collection in `_id` order. A `$limit`
    /// over `limit_max` (the database's cap on a query's result) is left to the pipeline.
    pub fn head_query(&self, limit_max: usize) -> (Query, usize) {
        let mut q = Query::default();
        let mut i = 0;
        if let Some(Stage::Match(f)) = self.stages.first() {
            q.filter = f.clone();
            i = 1;
        }
        if let Some(Stage::Sort(s)) = self.stages.get(i) {
            q.sort = s.clone();
            i += 1;
        }
        if let Some(Stage::Skip(n)) = self.stages.get(i) {
            q.skip = *n;
            i += 1;
        }
        if let Some(Stage::Limit(n)) = self.stages.get(i) {
            if *n > limit_max {
                return (q, i);
            }
            q.limit = Some(*n);
            i += 1;
        }
        (q, i)
    }

    /// Runs the whole pipeline over `docs` (taken in the order given).
    pub fn run(&self, docs: Vec<Value>) -> Result<Vec<Value>, QueryError> {
        self.run_from(0, docs)
    }

    /// Runs the stages from `first` on over `docs`.
    pub fn run_from(&self, first: usize, mut docs: Vec<Value>) -> Result<Vec<Value>, QueryError> {
        for stage in self.stages.iter().skip(first) {
            docs = run_stage(stage, docs)?;
        }
        Ok(docs)
    }
}

fn run_stage(stage: &Stage, mut docs: Vec<Value>) -> Result<Vec<Value>, QueryError> {
    Ok(match stage {
        Stage::Match(f) => {
            docs.retain(|d| f.matches(d));
            docs
        }
        Stage::Group(g) => g.run(docs)?,
        Stage::Sort(s) => {
            held(&docs, "$sort")?;
            s.sort(&mut docs);
            docs
        }
        Stage::Skip(n) => {
            docs.drain(..(*n).min(docs.len()));
            docs
        }
        Stage::Limit(n) => {
            docs.truncate(*n);
            docs
        }
        Stage::Project(p) => {
            // A projection can grow documents (`{"a": "$$ROOT", "b": "$$ROOT"}`), so its output
            // is bounded as it is built, not after.
            let mut held = Held::new("$project");
            let mut out = Vec::with_capacity(docs.len());
            for d in &docs {
                let p = p.apply(d);
                held.add(&p)?;
                out.push(p);
            }
            out
        }
        Stage::Count(name) => match docs.len() {
            0 => Vec::new(),
            n => {
                let mut m = Map::new();
                m.insert(name.clone(), Value::from(n));
                vec![Value::Object(m)]
            }
        },
        Stage::Unwind(u) => {
            let mut held = Held::new("$unwind");
            let mut out = Vec::with_capacity(docs.len());
            for d in docs {
                let from = out.len();
                u.apply(d, &mut out)?;
                for d in &out[from..] {
                    held.add(d)?;
                }
            }
            out
        }
    })
}

/// Refuses a stage output over the byte limit.
fn held(docs: &[Value], stage: &str) -> Result<(), QueryError> {
    if docs_bytes(docs) > BLOCKING_STAGE_BYTES_MAX {
        return Err(too_many_bytes(stage));
    }
    Ok(())
}

fn too_many_bytes(stage: &str) -> QueryError {
    QueryError::LimitExceeded(format!(
        "{stage} would hold more than BLOCKING_STAGE_BYTES_MAX ({BLOCKING_STAGE_BYTES_MAX}) bytes"
    ))
}

/// The estimated bytes of a stage's output as it is built.
struct Held {
    stage: &'static str,
    bytes: usize,
}

impl Held {
    fn new(stage: &'static str) -> Held {
        Held { stage, bytes: 0 }
    }

    fn add(&mut self, doc: &Value) -> Result<(), QueryError> {
        self.bytes += approx_bytes(doc);
        if self.bytes > BLOCKING_STAGE_BYTES_MAX {
            return Err(too_many_bytes(self.stage));
        }
        Ok(())
    }
}

fn parse_stage(spec: &Value, at: &str) -> Result<Stage, QueryError> {
    let Some((name, arg)) = spec
        .as_object()
        .filter(|m| m.len() == 1)
        .and_then(|m| m.iter().next())
    else {
        return Err(bad(
            at,
            "a stage is a document with one field, like {\"$match\": {...}}",
        ));
    };
    if !KNOWN_STAGES.contains(&name.as_str()) {
        return Err(QueryError::UnknownOperator {
            path: at.to_string(),
            op: name.clone(),
        });
    }
    let at = format!("{at}.{name}");
    Ok(match name.as_str() {
        "$match" => {
            if !arg.is_object() {
                return Err(QueryError::BadFilter(format!(
                    "{at}: $match takes a filter document"
                )));
            }
            Stage::Match(Filter::parse(arg)?)
        }
        "$group" => Stage::Group(Group::parse(arg, &at)?),
        "$sort" => {
            if arg.as_object().is_some_and(|m| m.is_empty()) {
                return Err(QueryError::BadSort(format!(
                    "{at}: $sort needs at least one key"
                )));
            }
            Stage::Sort(Sort::parse(arg)?)
        }
        "$skip" => Stage::Skip(count(arg, &at, 0)?),
        "$limit" => Stage::Limit(count(arg, &at, 1)?),
        "$project" => Stage::Project(Project::parse(arg, &at)?),
        "$count" => match arg {
            Value::String(s)
                if !s.is_empty() && !s.starts_with('$') && !s.contains('.') && s != "_id" =>
            {
                Stage::Count(s.clone())
            }
            _ => {
                return Err(bad(
                    &at,
                    "$count takes a field name (not empty, no '$' prefix or '.', not _id)",
                ))
            }
        },
        "$unwind" => Stage::Unwind(Unwind::parse(arg, &at)?),
        _ => unreachable!("checked against KNOWN_STAGES"),
    })
}

/// A `$skip`/`$limit` operand: an integer (a double with no fraction counts) at least `min`.
fn count(v: &Value, at: &str, min: usize) -> Result<usize, QueryError> {
    let n = match v {
        Value::Number(n) => match Num::of(n) {
            Num::I(i) => usize::try_from(i).ok(),
            Num::U(u) => usize::try_from(u).ok(),
            Num::F(f) if f >= 0.0 && f.fract() == 0.0 && f < 1e15 => Some(f as usize),
            Num::F(_) => None,
        },
        _ => None,
    };
    match n {
        Some(n) if n >= min => Ok(n),
        _ => Err(bad(
            at,
            &format!("takes an integer of at least {min}, got {v}"),
        )),
    }
}

#[cfg(test)]
mod tests;
