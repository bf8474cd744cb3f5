//! `$group` accumulators: their parsed form ([`Accumulator`]) and their running state per group
//! ([`AccState`]).
//!
//! Semantics follow MongoDB's `$group` accumulators:
//! - `$sum` adds numbers and ignores everything else (an empty or all-non-numeric group sums to
//!   the integer 0). Integers are summed exactly (in an i128); the result is an integer when no
//!   double was added and it fits 64 bits, else a double, as MongoDB widens int -> long -> double.
//!   With doubles, the exact sum of every term is rounded once to the nearest double
//!   (`exact.rs`): the result does not depend on the order of the terms (MongoDB's own
//!   double-double summation is within an ulp of it; summing one by one is not), and a term can
//!   be removed exactly, which live aggregation needs.
//! - `$avg` is the double mean of the numbers (that sum divided by their count); `null` when the
//!   group has none.
//! - `$min`/`$max` compare with the value order and ignore `null` and missing; `null` when nothing
//!   else was seen. Arrays are compared as whole values (no traversal).
//! - `$first`/`$last`: the value for the group's first/last document in input order; missing
//!   counts as `null`.
//! - `$push`: every value, in input order, missing left out; `$addToSet`: distinct values (under
//!   the value order, so `1` and `1.0` are one), first-seen order.
//! - `$count`: the number of documents (`{"$count": {}}`, the same as `{"$sum": 1}`).
//!
//! Live aggregation (`live.rs`) needs removal as well as addition: it keeps a [`NumSum`] per group
//! (removal is exact, [`NumSum::remove`]) and its own state for the other accumulators (an
//! ordered multiset for min/max, the contributions in input order).

use super::exact::ExactSum;
use super::expr::{bad, AggExpr};
use super::size::approx_bytes;
use crate::error::QueryError;
use crate::limits::{ACC_ARRAY_BYTES_MAX, ACC_ARRAY_VALUES_MAX};
use herald_value::{compare, key_of, Num, Number, Value};
use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::HashSet;

/// Which accumulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccOp {
    Sum,
    Avg,
    Min,
    Max,
    Count,
    First,
    Last,
    Push,
    AddToSet,
}

impl AccOp {
    fn of(name: &str) -> Option<AccOp> {
        Some(match name {
            "$sum" => AccOp::Sum,
            "$avg" => AccOp::Avg,
            "$min" => AccOp::Min,
            "$max" => AccOp::Max,
            "$count" => AccOp::Count,
            "$first" => AccOp::First,
            "$last" => AccOp::Last,
            "$push" => AccOp::Push,
            "$addToSet" => AccOp::AddToSet,
            _ => return None,
        })
    }
}

/// One output field of a `$group`: `"name": {"$op": <expr>}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Accumulator {
    pub name: String,
    pub op: AccOp,
    pub expr: AggExpr,
}

impl Accumulator {
    pub fn parse(name: &str, spec: &Value, at: &str) -> Result<Accumulator, QueryError> {
        if name.is_empty() || name.starts_with('$') || name.contains('.') {
            return Err(bad(at, &format!("bad $group output field name '{name}'")));
        }
        let at = format!("{at}.{name}");
        let Some((op_name, operand)) = spec
            .as_object()
            .filter(|m| m.len() == 1)
            .and_then(|m| m.iter().next())
        else {
            return Err(bad(
                &at,
                "an accumulator is an object with one operator, like {\"$sum\": \"$n\"}",
            ));
        };
        let Some(op) = AccOp::of(op_name) else {
            return Err(QueryError::UnknownOperator {
                path: at,
                op: op_name.clone(),
            });
        };
        let expr = match op {
            AccOp::Count => match operand {
                Value::Object(m) if m.is_empty() => AggExpr::Literal(Value::from(1)),
                _ => return Err(bad(&at, "$count takes an empty document: {\"$count\": {}}")),
            },
            _ if operand.is_array() => {
                return Err(bad(
                    &at,
                    &format!("the {op_name} accumulator is a unary operator"),
                ))
            }
            _ => AggExpr::parse(operand, &at)?,
        };
        Ok(Accumulator {
            name: name.to_string(),
            op,
            expr,
        })
    }

    /// A fresh state for one group.
    pub fn state(&self) -> AccState {
        match self.op {
            AccOp::Sum | AccOp::Count => AccState::Sum(NumSum::default()),
            AccOp::Avg => AccState::Avg(NumSum::default()),
            AccOp::Min => AccState::Min(None),
            AccOp::Max => AccState::Max(None),
            AccOp::First => AccState::First(None),
            AccOp::Last => AccState::Last(Value::Null),
            AccOp::Push => AccState::Push(Vec::new(), 0),
            AccOp::AddToSet => AccState::AddToSet(Vec::new(), HashSet::new(), 0),
        }
    }
}

/// An exact running sum of numbers: integers in an i128 (no overflow for 2^64 additions of
/// 64-bit values), doubles apart in an exact accumulator (made at the first double).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NumSum {
    ints: i128,
    doubles: Option<ExactSum>,
    /// How many doubles were added (any makes the result a double).
    n_doubles: u64,
    /// How many numbers were added.
    n: u64,
}

impl NumSum {
    pub(super) fn add(&mut self, v: &Value) {
        self.put(v, false);
    }

    /// Removes a value added before: the sum is then exactly as if it had never been added.
    pub(super) fn remove(&mut self, v: &Value) {
        self.put(v, true);
    }

    fn put(&mut self, v: &Value, remove: bool) {
        if let Value::Number(n) = v {
            match Num::of(n) {
                Num::F(f) => {
                    self.doubles
                        .get_or_insert_with(ExactSum::default)
                        .add_f64(f, remove);
                    if remove {
                        self.n_doubles -= 1;
                    } else {
                        self.n_doubles += 1;
                    }
                }
                other => {
                    let i = other.as_i128().unwrap_or(0);
                    self.ints += if remove { -i } else { i };
                }
            }
            if remove {
                self.n -= 1;
            } else {
                self.n += 1;
            }
        }
    }

    /// The sum as a double, rounded once.
    fn as_f64(&self) -> f64 {
        match &self.doubles {
            Some(d) if self.n_doubles > 0 => {
                let mut d = d.clone();
                d.add_i128(self.ints, false);
                d.to_f64()
            }
            _ => self.ints as f64,
        }
    }

    pub(super) fn total(&self) -> Value {
        if self.n_doubles == 0 {
            if let Ok(i) = i64::try_from(self.ints) {
                return Value::from(i);
            }
        }
        double(self.as_f64())
    }

    pub(super) fn mean(&self) -> Value {
        match self.n {
            0 => Value::Null,
            n => double(self.as_f64() / n as f64),
        }
    }
}

/// A double as a value; JSON has no infinities, so an overflowing sum is `null`.
fn double(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// The running state of one accumulator for one group.
#[derive(Debug, Clone)]
pub enum AccState {
    Sum(NumSum),
    Avg(NumSum),
    Min(Option<Value>),
    Max(Option<Value>),
    /// `None` until the group's first document.
    First(Option<Value>),
    Last(Value),
    /// The values and their estimated bytes.
    Push(Vec<Value>, usize),
    /// The values in first-seen order, their keys, and their estimated bytes.
    AddToSet(Vec<Value>, HashSet<Vec<u8>>, usize),
}

impl AccState {
    /// Adds one document's value of the accumulator's expression (`None`: missing). Returns the
    /// change in estimated bytes held. The value is copied only when the state keeps it.
    pub fn add(&mut self, v: Option<Cow<'_, Value>>) -> Result<isize, QueryError> {
        match self {
            AccState::Sum(s) | AccState::Avg(s) => {
                if let Some(v) = &v {
                    s.add(v);
                }
                Ok(0)
            }
            AccState::Min(best) => Ok(keep_if(best, v, Ordering::Less)),
            AccState::Max(best) => Ok(keep_if(best, v, Ordering::Greater)),
            AccState::First(first) => {
                if first.is_none() {
                    let v = v.map_or(Value::Null, Cow::into_owned);
                    let n = approx_bytes(&v) as isize;
                    *first = Some(v);
                    return Ok(n);
                }
                Ok(0)
            }
            AccState::Last(last) => {
                let old = approx_bytes(last) as isize;
                *last = v.map_or(Value::Null, Cow::into_owned);
                Ok(approx_bytes(last) as isize - old)
            }
            AccState::Push(items, bytes) => match v {
                None => Ok(0),
                Some(v) => push_bounded(items, bytes, v.into_owned(), "$push"),
            },
            AccState::AddToSet(items, seen, bytes) => match v {
                Some(v) if seen.insert(key_of(&v)) => {
                    push_bounded(items, bytes, v.into_owned(), "$addToSet")
                }
                _ => Ok(0),
            },
        }
    }

    /// The accumulator's output for the group.
    pub fn finish(self) -> Value {
        match self {
            AccState::Sum(s) => s.total(),
            AccState::Avg(s) => s.mean(),
            AccState::Min(v) | AccState::Max(v) | AccState::First(v) => v.unwrap_or(Value::Null),
            AccState::Last(v) => v,
            AccState::Push(items, _) | AccState::AddToSet(items, _, _) => Value::Array(items),
        }
    }
}

/// Replaces `best` by `v` when `v` orders `want` against it; null and missing are ignored.
fn keep_if(best: &mut Option<Value>, v: Option<Cow<'_, Value>>, want: Ordering) -> isize {
    match v {
        None => 0,
        Some(v) if v.is_null() => 0,
        Some(v) => match best {
            Some(b) if compare(&v, b) != want => 0,
            _ => {
                let old = best.as_ref().map_or(0, approx_bytes) as isize;
                let n = approx_bytes(&v) as isize;
                *best = Some(v.into_owned());
                n - old
            }
        },
    }
}

fn push_bounded(
    items: &mut Vec<Value>,
    bytes: &mut usize,
    v: Value,
    op: &str,
) -> Result<isize, QueryError> {
    let n = approx_bytes(&v);
    if items.len() >= ACC_ARRAY_VALUES_MAX {
        return Err(QueryError::LimitExceeded(format!(
            "{op} would hold more than ACC_ARRAY_VALUES_MAX ({ACC_ARRAY_VALUES_MAX}) values in one group"
        )));
    }
    if *bytes + n > ACC_ARRAY_BYTES_MAX {
        return Err(QueryError::LimitExceeded(format!(
            "{op} would hold more than ACC_ARRAY_BYTES_MAX ({ACC_ARRAY_BYTES_MAX}) bytes in one group"
        )));
    }
    *bytes += n;
    items.push(v);
    Ok(n as isize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_value::json;

    fn run(spec: Value, values: &[Option<Value>]) -> Value {
        let acc = Accumulator::parse("x", &spec, "g").unwrap();
        let mut st = acc.state();
        for v in values {
            st.add(v.as_ref().map(Cow::Borrowed)).unwrap();
        }
        st.finish()
    }

    #[test]
    fn sum_stays_integer_when_it_fits_and_widens_when_not() {
        let s = json!({"$sum": "$n"});
        assert_eq!(
            run(s.clone(), &[Some(json!(1)), Some(json!(2))]).to_string(),
            "3"
        );
        assert_eq!(
            run(s.clone(), &[Some(json!(1)), Some(json!(2.5))]).to_string(),
            "3.5"
        );
        let big = Some(json!(i64::MAX));
        assert_eq!(
            run(s.clone(), &[big.clone(), big]),
            json!(1.8446744073709552e19)
        );
        assert_eq!(
            run(s, &[Some(json!("a")), None, Some(json!(null))]).to_string(),
            "0"
        );
    }

    #[test]
    fn double_sums_round_once_whatever_the_order() {
        let s = json!({"$sum": "$n"});
        let terms = [
            Some(json!(0.1)),
            Some(json!(0.2)),
            Some(json!(0.3)),
            Some(json!(1)),
        ];
        let mut rev = terms.clone();
        rev.reverse();
        // One by one, 0.1 + 0.2 + 0.3 is 0.6000000000000001 and 0.3 + 0.2 + 0.1 is 0.6.
        assert_eq!(run(s.clone(), &terms).to_string(), "1.6");
        assert_eq!(run(s.clone(), &rev).to_string(), "1.6");
        assert_eq!(run(json!({"$avg": "$n"}), &terms).to_string(), "0.4");
        let big = [Some(json!(1e308)), Some(json!(1e308)), Some(json!(-1e308))];
        assert_eq!(run(s, &big), json!(1e308));
        // Removal is exact: back to integers, the sum prints as one.
        let mut sum = NumSum::default();
        sum.add(&json!(2));
        sum.add(&json!(0.1));
        sum.remove(&json!(0.1));
        assert_eq!(sum.total().to_string(), "2");
    }

    #[test]
    fn avg_min_max_ignore_what_mongodb_ignores() {
        let vals = [
            Some(json!(null)),
            None,
            Some(json!(4)),
            Some(json!("s")),
            Some(json!(2)),
        ];
        assert_eq!(run(json!({"$avg": "$n"}), &vals).to_string(), "3.0");
        assert_eq!(run(json!({"$avg": "$n"}), &[None]), json!(null));
        assert_eq!(run(json!({"$min": "$n"}), &vals), json!(2));
        assert_eq!(run(json!({"$max": "$n"}), &vals), json!("s"));
        assert_eq!(
            run(json!({"$max": "$n"}), &[None, Some(json!(null))]),
            json!(null)
        );
    }

    #[test]
    fn first_last_push_add_to_set() {
        let vals = [None, Some(json!(1)), Some(json!(1.0)), Some(json!(null))];
        assert_eq!(run(json!({"$first": "$n"}), &vals), json!(null));
        assert_eq!(run(json!({"$last": "$n"}), &vals), json!(null));
        assert_eq!(run(json!({"$push": "$n"}), &vals), json!([1, 1.0, null]));
        assert_eq!(run(json!({"$addToSet": "$n"}), &vals), json!([1, null]));
    }

    #[test]
    fn bad_accumulators() {
        let e = |s: Value| Accumulator::parse("x", &s, "g").unwrap_err().code();
        assert_eq!(e(json!({"$stdDevPop": "$n"})), "unknown_operator");
        assert_eq!(e(json!({"$sum": ["$a", "$b"]})), "bad_pipeline");
        assert_eq!(e(json!({"$count": 1})), "bad_pipeline");
        assert_eq!(e(json!({"$sum": 1, "$avg": 1})), "bad_pipeline");
    }

    #[test]
    fn push_is_bounded() {
        let acc = Accumulator::parse("x", &json!({"$push": "$n"}), "g").unwrap();
        let mut st = acc.state();
        let one = json!(1);
        for _ in 0..ACC_ARRAY_VALUES_MAX {
            st.add(Some(Cow::Borrowed(&one))).unwrap();
        }
        let e = st.add(Some(Cow::Borrowed(&one))).unwrap_err();
        assert_eq!(e.code(), "limit_exceeded");
        assert!(e.to_string().contains("ACC_ARRAY_VALUES_MAX"));
    }
}
