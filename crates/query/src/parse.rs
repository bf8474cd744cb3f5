//! Parsing a MongoDB filter document into the typed plan of `filter.rs`.
//!
//! Every error names the offending path and operator. Limits on nesting, size, list length and
//! regex length are enforced here, so evaluation never meets an oversized plan.

use crate::error::QueryError;
use crate::filter::{CmpOp, Expr, FieldExpr, FieldOp, Filter, InList, Test, TypeSet};
use crate::limits::{FILTER_DEPTH_MAX, FILTER_NODES_MAX, IN_VALUES_MAX};
use crate::regex::Pattern;
use herald_value::{FieldPath, Map, Num, Value};

impl Filter {
    /// Parses a filter document such as `{"year": {"$gte": 2000}, "tags": "x"}`.
    pub fn parse(filter: &Value) -> Result<Filter, QueryError> {
        let mut p = Parser { nodes: 0 };
        let root = p.filter(filter, 0)?;
        Ok(Filter {
            root,
            source: std::sync::Arc::new(filter.clone()),
        })
    }

    /// The filter document this was parsed from (`{}` for [`Filter::all`]).
    pub fn source(&self) -> &Value {
        &self.source
    }
}

struct Parser {
    nodes: usize,
}

impl Parser {
    fn count(&mut self) -> Result<(), QueryError> {
        self.nodes += 1;
        if self.nodes > FILTER_NODES_MAX {
            return Err(QueryError::LimitExceeded(format!(
                "filter has more than {FILTER_NODES_MAX} predicates"
            )));
        }
        Ok(())
    }

    fn deeper(depth: usize) -> Result<usize, QueryError> {
        if depth + 1 > FILTER_DEPTH_MAX {
            return Err(QueryError::LimitExceeded(format!(
                "filter nests deeper than {FILTER_DEPTH_MAX} levels"
            )));
        }
        Ok(depth + 1)
    }

    fn filter(&mut self, v: &Value, depth: usize) -> Result<Expr, QueryError> {
        let Value::Object(map) = v else {
            return Err(QueryError::BadFilter(format!(
                "a filter must be an object, got {v}"
            )));
        };
        let mut clauses = Vec::with_capacity(map.len());
        for (key, arg) in map {
            if let Some(op) = key.strip_prefix('$') {
                match op {
                    "and" | "or" | "nor" => {
                        let children = self.logical(key, arg, depth)?;
                        clauses.push(match op {
                            "and" => Expr::And(children),
                            "or" => Expr::Or(children),
                            _ => Expr::Nor(children),
                        });
                    }
                    "comment" => {}
                    _ => return Err(unknown("", key)),
                }
            } else {
                let path =
                    FieldPath::parse(key).map_err(|e| QueryError::BadFilter(e.to_string()))?;
                let ops = self.field_value(&path, arg, depth)?;
                clauses.push(Expr::Field(FieldExpr { path, ops }));
            }
        }
        Ok(match clauses.len() {
            0 => Expr::Const(true),
            1 => clauses.pop().expect("one clause"),
            _ => Expr::And(clauses),
        })
    }

    fn logical(&mut self, op: &str, arg: &Value, depth: usize) -> Result<Vec<Expr>, QueryError> {
        let depth = Self::deeper(depth)?;
        let items = match arg {
            Value::Array(items) if !items.is_empty() => items,
            _ => {
                return Err(QueryError::BadFilter(format!(
                    "{op} needs a non-empty array of filters"
                )))
            }
        };
        self.count()?;
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            if !item.is_object() {
                return Err(QueryError::BadFilter(format!(
                    "every element of {op} must be a filter object, got {item}"
                )));
            }
            out.push(self.filter(item, depth)?);
        }
        Ok(out)
    }

    /// The value of a field clause: an operator object or a literal to compare for equality.
    fn field_value(
        &mut self,
        path: &FieldPath,
        v: &Value,
        depth: usize,
    ) -> Result<Vec<FieldOp>, QueryError> {
        match v {
            Value::Object(m) if is_operator_object(m) => self.operators(path, m, depth),
            literal => {
                self.count()?;
                Ok(vec![FieldOp::Test(Test::Eq(literal.clone()))])
            }
        }
    }

    fn operators(
        &mut self,
        path: &FieldPath,
        m: &Map<String, Value>,
        depth: usize,
    ) -> Result<Vec<FieldOp>, QueryError> {
        let p = path.as_str();
        let mut ops = Vec::with_capacity(m.len());
        let options = m.get("$options");
        if options.is_some() && !m.contains_key("$regex") {
            return Err(QueryError::operand(
                p,
                "$options",
                "$options needs a $regex beside it",
            ));
        }
        for (op, arg) in m {
            self.count()?;
            let test = match op.as_str() {
                "$eq" => Test::Eq(arg.clone()),
                "$ne" => {
                    ops.push(FieldOp::Not(vec![FieldOp::Test(Test::Eq(arg.clone()))]));
                    continue;
                }
                "$gt" => Test::Cmp(CmpOp::Gt, arg.clone()),
                "$gte" => Test::Cmp(CmpOp::Gte, arg.clone()),
                "$lt" => Test::Cmp(CmpOp::Lt, arg.clone()),
                "$lte" => Test::Cmp(CmpOp::Lte, arg.clone()),
                "$in" => Test::In(in_list(p, op, arg)?),
                "$nin" => {
                    ops.push(FieldOp::Not(vec![FieldOp::Test(Test::In(in_list(
                        p, op, arg,
                    )?))]));
                    continue;
                }
                "$exists" => {
                    if truthy(arg) {
                        Test::Exists
                    } else {
                        ops.push(FieldOp::Not(vec![FieldOp::Test(Test::Exists)]));
                        continue;
                    }
                }
                "$type" => Test::Type(type_set(p, arg)?),
                "$regex" => {
                    let Value::String(source) = arg else {
                        return Err(QueryError::operand(p, op, "$regex needs a string pattern"));
                    };
                    let flags = match options {
                        None => "",
                        Some(Value::String(s)) => s.as_str(),
                        Some(_) => {
                            return Err(QueryError::operand(
                                p,
                                "$options",
                                "$options must be a string",
                            ))
                        }
                    };
                    Test::Regex(Box::new(Pattern::compile(p, source, flags)?))
                }
                "$options" => continue,
                "$mod" => modulo(p, arg)?,
                "$size" => Test::Size(size(p, arg)?),
                "$all" => {
                    self.all(path, arg, depth, &mut ops)?;
                    continue;
                }
                "$elemMatch" => self.elem_match(path, arg, depth)?,
                "$not" => {
                    let depth = Self::deeper(depth)?;
                    match arg {
                        Value::Object(inner) if !inner.is_empty() && is_operator_object(inner) => {
                            ops.push(FieldOp::Not(self.operators(path, inner, depth)?));
                            continue;
                        }
                        Value::Object(inner) if inner.is_empty() => {
                            return Err(QueryError::BadFilter(format!(
                                "$not at '{p}' cannot be empty"
                            )))
                        }
                        _ => {
                            return Err(QueryError::BadFilter(format!(
                                "$not at '{p}' needs an object of operators"
                            )))
                        }
                    }
                }
                other => return Err(unknown(p, other)),
            };
            ops.push(FieldOp::Test(test));
        }
        Ok(ops)
    }

    fn all(
        &mut self,
        path: &FieldPath,
        arg: &Value,
        depth: usize,
        ops: &mut Vec<FieldOp>,
    ) -> Result<(), QueryError> {
        let p = path.as_str();
        let Value::Array(items) = arg else {
            return Err(QueryError::operand(p, "$all", "$all needs an array"));
        };
        if items.len() > IN_VALUES_MAX {
            return Err(list_too_long(p, "$all"));
        }
        if items.is_empty() {
            ops.push(FieldOp::Test(Test::Never));
            return Ok(());
        }
        let elem_match = |v: &Value| matches!(v, Value::Object(m) if m.len() == 1 && m.contains_key("$elemMatch"));
        let n_elem = items.iter().filter(|v| elem_match(v)).count();
        if n_elem > 0 && n_elem < items.len() {
            return Err(QueryError::operand(
                p,
                "$all",
                "$all cannot mix $elemMatch and plain values",
            ));
        }
        for item in items {
            self.count()?;
            let test = if n_elem > 0 {
                self.elem_match(path, &item["$elemMatch"], depth)?
            } else {
                Test::Eq(item.clone())
            };
            ops.push(FieldOp::Test(test));
        }
        Ok(())
    }

    fn elem_match(
        &mut self,
        path: &FieldPath,
        arg: &Value,
        depth: usize,
    ) -> Result<Test, QueryError> {
        let depth = Self::deeper(depth)?;
        let Value::Object(m) = arg else {
            return Err(QueryError::operand(
                path.as_str(),
                "$elemMatch",
                "$elemMatch needs an object",
            ));
        };
        // Value form when the object is made of field operators ({"$gte": 80, "$lt": 85});
        // document form otherwise ({"score": {"$gt": 8}, "item": "B"}).
        let value_form = m.keys().next().is_some_and(|k| {
            k.starts_with('$') && !matches!(k.as_str(), "$and" | "$or" | "$nor" | "$comment")
        });
        if value_form {
            Ok(Test::ElemMatchValue(self.operators(path, m, depth)?))
        } else {
            Ok(Test::ElemMatchDoc(Box::new(self.filter(arg, depth)?)))
        }
    }
}

/// MongoDB treats an object whose first key starts with '$' as operators, otherwise as a literal.
fn is_operator_object(m: &Map<String, Value>) -> bool {
    m.keys().next().is_some_and(|k| k.starts_with('$'))
}

fn unknown(path: &str, op: &str) -> QueryError {
    QueryError::UnknownOperator {
        path: path.to_string(),
        op: op.to_string(),
    }
}

fn list_too_long(path: &str, op: &str) -> QueryError {
    QueryError::LimitExceeded(format!(
        "{op} at '{path}' has more than {IN_VALUES_MAX} values"
    ))
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => Num::of(n).as_f64() != 0.0,
        _ => true,
    }
}

fn in_list(path: &str, op: &str, arg: &Value) -> Result<InList, QueryError> {
    let Value::Array(items) = arg else {
        return Err(QueryError::operand(
            path,
            op,
            format!("{op} needs an array"),
        ));
    };
    if items.len() > IN_VALUES_MAX {
        return Err(list_too_long(path, op));
    }
    if let Some(bad) = items
        .iter()
        .find(|v| matches!(v, Value::Object(m) if is_operator_object(m)))
    {
        return Err(QueryError::operand(
            path,
            op,
            format!("{op} cannot contain operators, got {bad}"),
        ));
    }
    Ok(InList::new(items.clone()))
}

fn type_set(path: &str, arg: &Value) -> Result<TypeSet, QueryError> {
    let one = |v: &Value| -> Result<u16, QueryError> {
        let bits = match v {
            Value::String(s) => match s.as_str() {
                "double" => TypeSet::DOUBLE,
                "string" => TypeSet::STRING,
                "object" => TypeSet::OBJECT,
                "array" => TypeSet::ARRAY,
                "bool" => TypeSet::BOOL,
                "null" => TypeSet::NULL,
                "int" => TypeSet::INT,
                "long" => TypeSet::LONG,
                "number" => TypeSet::DOUBLE | TypeSet::INT | TypeSet::LONG,
                "binData"
                | "undefined"
                | "objectId"
                | "date"
                | "regex"
                | "dbPointer"
                | "javascript"
                | "symbol"
                | "javascriptWithScope"
                | "timestamp"
                | "decimal"
                | "minKey"
                | "maxKey" => 0,
                _ => {
                    return Err(QueryError::operand(
                        path,
                        "$type",
                        format!("unknown type alias {v}"),
                    ))
                }
            },
            Value::Number(n) => {
                let f = Num::of(n).as_f64();
                if f.fract() != 0.0 {
                    return Err(QueryError::operand(
                        path,
                        "$type",
                        format!("type code {v} is not an integer"),
                    ));
                }
                match f as i64 {
                    1 => TypeSet::DOUBLE,
                    2 => TypeSet::STRING,
                    3 => TypeSet::OBJECT,
                    4 => TypeSet::ARRAY,
                    8 => TypeSet::BOOL,
                    10 => TypeSet::NULL,
                    16 => TypeSet::INT,
                    18 => TypeSet::LONG,
                    5 | 6 | 7 | 9 | 11..=15 | 17 | 19 | -1 | 127 => 0,
                    _ => {
                        return Err(QueryError::operand(
                            path,
                            "$type",
                            format!("unknown type code {v}"),
                        ))
                    }
                }
            }
            _ => {
                return Err(QueryError::operand(
                    path,
                    "$type",
                    format!("$type needs a type alias or code, got {v}"),
                ))
            }
        };
        Ok(bits)
    };
    match arg {
        Value::Array(items) if items.is_empty() => Err(QueryError::operand(
            path,
            "$type",
            "$type needs at least one type",
        )),
        Value::Array(items) => {
            let mut bits = 0;
            for item in items {
                bits |= one(item)?;
            }
            Ok(TypeSet(bits))
        }
        single => Ok(TypeSet(one(single)?)),
    }
}

fn integer_of(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => match Num::of(n) {
            Num::I(i) => Some(i),
            Num::U(_) => None,
            Num::F(f) if f.is_finite() && f.abs() < 9.2e18 => Some(f.trunc() as i64),
            Num::F(_) => None,
        },
        _ => None,
    }
}

fn modulo(path: &str, arg: &Value) -> Result<Test, QueryError> {
    let bad = || QueryError::operand(path, "$mod", "$mod needs [divisor, remainder] with numbers");
    let Value::Array(items) = arg else {
        return Err(bad());
    };
    if items.len() != 2 {
        return Err(bad());
    }
    let divisor = integer_of(&items[0]).ok_or_else(bad)?;
    let remainder = integer_of(&items[1]).ok_or_else(bad)?;
    if divisor == 0 {
        return Err(QueryError::operand(path, "$mod", "divisor cannot be 0"));
    }
    Ok(Test::Mod { divisor, remainder })
}

fn size(path: &str, arg: &Value) -> Result<usize, QueryError> {
    let bad = || {
        QueryError::operand(
            path,
            "$size",
            format!("$size needs a non-negative integer, got {arg}"),
        )
    };
    let Value::Number(n) = arg else {
        return Err(bad());
    };
    let n = match Num::of(n) {
        Num::I(i) => i,
        Num::F(f) if f.fract() == 0.0 && f.abs() < 1e15 => f as i64,
        _ => return Err(bad()),
    };
    usize::try_from(n).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_value::json;

    fn code(f: Value) -> &'static str {
        Filter::parse(&f).unwrap_err().code()
    }

    #[test]
    fn errors_name_path_and_operator() {
        let e = Filter::parse(&json!({"a.b": {"$foo": 1}})).unwrap_err();
        assert_eq!(e.to_string(), "unknown operator '$foo' at 'a.b'");
        assert_eq!(code(json!({"a": {"$in": 5}})), "bad_operand");
        assert_eq!(code(json!({"$and": []})), "bad_filter");
        assert_eq!(code(json!({"$where": "1"})), "unknown_operator");
        assert_eq!(code(json!({"a..b": 1})), "bad_filter");
        assert_eq!(code(json!([1])), "bad_filter");
        assert_eq!(code(json!({"a": {"$not": {}}})), "bad_filter");
        assert_eq!(code(json!({"a": {"$size": -1}})), "bad_operand");
        assert_eq!(code(json!({"a": {"$mod": [0, 1]}})), "bad_operand");
        assert_eq!(code(json!({"a": {"$type": "nope"}})), "bad_operand");
        assert_eq!(code(json!({"a": {"$options": "i"}})), "bad_operand");
    }

    #[test]
    fn limits() {
        let many: Vec<i64> = (0..=IN_VALUES_MAX as i64).collect();
        assert_eq!(code(json!({"a": {"$in": many}})), "limit_exceeded");
        let mut deep = json!({"a": 1});
        for _ in 0..=FILTER_DEPTH_MAX {
            deep = json!({ "$and": [deep] });
        }
        assert_eq!(code(deep), "limit_exceeded");
        let wide: Map<String, Value> = (0..=FILTER_NODES_MAX)
            .map(|i| (format!("f{i}"), json!(1)))
            .collect();
        assert_eq!(code(Value::Object(wide)), "limit_exceeded");
    }
}
