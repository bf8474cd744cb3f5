//! The typed filter plan and its evaluation against a document.
//!
//! A filter is parsed once (see `parse.rs`) into an [`Expr`] tree and then evaluated against many
//! documents. Evaluation follows MongoDB: a field predicate holds when *any* value the path
//! reaches satisfies it (see `walk.rs`); negations (`$ne`, `$nin`, `$not`, `$exists: false`)
//! negate the whole "any", so `{"tags": {"$ne": "x"}}` rejects every array containing "x".
//!
//! The common case (a path through plain objects to a scalar) resolves the path once for all
//! operators on that field and allocates nothing.

use crate::regex::Pattern;
use crate::walk::{resolve_plain, walk, LeafArrays};
use herald_value::{bracket, compare, values_equal, FieldPath, Map, Num, Value};
use std::cmp::Ordering;

/// A parsed filter, ready to evaluate.
#[derive(Debug, Clone)]
pub struct Filter {
    pub(crate) root: Expr,
    /// The document it was parsed from (`{}` for [`Filter::all`]): what a node sends another
    /// that evaluates the same filter (the matching grid across machines).
    pub(crate) source: std::sync::Arc<Value>,
}

/// A node of the filter plan.
#[derive(Debug, Clone)]
pub enum Expr {
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Nor(Vec<Expr>),
    Field(FieldExpr),
    /// Always true (`{}`) or always false (`$all: []`).
    Const(bool),
}

/// All operators given for one field path; the expression holds when every one holds.
#[derive(Debug, Clone)]
pub struct FieldExpr {
    pub path: FieldPath,
    pub ops: Vec<FieldOp>,
}

#[derive(Debug, Clone)]
pub enum FieldOp {
    /// Holds when any value reached by the path passes the test.
    Test(Test),
    /// Holds unless every operator inside holds (`$not`, `$ne`, `$nin`, `$exists: false`).
    Not(Vec<FieldOp>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Gt,
    Gte,
    Lt,
    Lte,
}

/// A test of one value (or of "missing").
#[derive(Debug, Clone)]
pub enum Test {
    Eq(Value),
    Cmp(CmpOp, Value),
    In(InList),
    Exists,
    Type(TypeSet),
    Regex(Box<Pattern>),
    Mod {
        divisor: i64,
        remainder: i64,
    },
    Size(usize),
    /// `$elemMatch` with a query on embedded documents.
    ElemMatchDoc(Box<Expr>),
    /// `$elemMatch` with operators that one element must satisfy together.
    ElemMatchValue(Vec<FieldOp>),
    Never,
}

/// The values of `$in`, sorted by the value order for binary search.
#[derive(Debug, Clone)]
pub struct InList {
    sorted: Vec<Value>,
    has_null: bool,
}

impl InList {
    pub fn new(mut values: Vec<Value>) -> InList {
        values.sort_by(compare);
        values.dedup_by(|a, b| compare(a, b) == Ordering::Equal);
        let has_null = values.iter().any(Value::is_null);
        InList {
            sorted: values,
            has_null,
        }
    }

    pub fn values(&self) -> &[Value] {
        &self.sorted
    }

    #[inline]
    fn contains(&self, v: &Value) -> bool {
        self.sorted
            .binary_search_by(|probe| compare(probe, v))
            .is_ok()
    }
}

/// A set of MongoDB type aliases, as a bit set over the JSON types Herald stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TypeSet(pub u16);

impl TypeSet {
    pub const DOUBLE: u16 = 1 << 0;
    pub const STRING: u16 = 1 << 1;
    pub const OBJECT: u16 = 1 << 2;
    pub const ARRAY: u16 = 1 << 3;
    pub const BOOL: u16 = 1 << 4;
    pub const NULL: u16 = 1 << 5;
    pub const INT: u16 = 1 << 6;
    pub const LONG: u16 = 1 << 7;

    /// The type bit of a stored value. Integers that fit in 32 bits are `int`, other integers
    /// `long`, numbers written with a fraction or exponent `double`.
    pub fn of(v: &Value) -> u16 {
        match v {
            Value::Null => Self::NULL,
            Value::Bool(_) => Self::BOOL,
            Value::String(_) => Self::STRING,
            Value::Array(_) => Self::ARRAY,
            Value::Object(_) => Self::OBJECT,
            Value::Number(n) => match Num::of(n) {
                Num::I(i) if i32::try_from(i).is_ok() => Self::INT,
                Num::I(_) | Num::U(_) => Self::LONG,
                Num::F(_) => Self::DOUBLE,
            },
        }
    }
}

impl CmpOp {
    #[inline]
    fn holds(self, ord: Ordering) -> bool {
        match self {
            CmpOp::Gt => ord == Ordering::Greater,
            CmpOp::Gte => ord != Ordering::Less,
            CmpOp::Lt => ord == Ordering::Less,
            CmpOp::Lte => ord != Ordering::Greater,
        }
    }
}

impl Filter {
    /// The filter that matches every document.
    pub fn all() -> Filter {
        Filter {
            root: Expr::Const(true),
            source: std::sync::Arc::new(Value::Object(Default::default())),
        }
    }

    /// True when `doc` (an object) matches. Non-objects never match.
    #[inline]
    pub fn matches(&self, doc: &Value) -> bool {
        match doc {
            Value::Object(m) => self.root.matches(m),
            _ => false,
        }
    }

    #[inline]
    pub fn matches_map(&self, doc: &Map<String, Value>) -> bool {
        self.root.matches(doc)
    }

    /// The plan, for planners and predicate indexes that look inside.
    pub fn expr(&self) -> &Expr {
        &self.root
    }
}

impl Expr {
    pub fn matches(&self, doc: &Map<String, Value>) -> bool {
        match self {
            Expr::And(xs) => xs.iter().all(|x| x.matches(doc)),
            Expr::Or(xs) => xs.iter().any(|x| x.matches(doc)),
            Expr::Nor(xs) => !xs.iter().any(|x| x.matches(doc)),
            Expr::Field(f) => f.matches(doc),
            Expr::Const(b) => *b,
        }
    }
}

impl FieldExpr {
    #[inline]
    pub fn matches(&self, doc: &Map<String, Value>) -> bool {
        let segs = self.path.segments();
        match resolve_plain(doc, segs) {
            Ok(v) => self.ops.iter().all(|op| op.single(v)),
            Err(()) => self.ops.iter().all(|op| op.walked(doc, segs)),
        }
    }
}

/// The document MongoDB sees when it treats an array as one: positions become field names.
fn array_as_document(items: &[Value]) -> Map<String, Value> {
    items
        .iter()
        .enumerate()
        .map(|(i, v)| (i.to_string(), v.clone()))
        .collect()
}

impl FieldOp {
    /// Evaluates as if `v` were the value at the end of a path: an array is tried element by
    /// element and as a whole, as `$pull` conditions are (MongoDB matches them as `{"": v}`).
    pub fn matches_value(&self, v: &Value) -> bool {
        match self {
            FieldOp::Test(t) => match v {
                Value::Array(items) if t.leaf_arrays() == LeafArrays::Traverse => {
                    items.iter().any(|e| t.single(Some(e))) || t.single(Some(v))
                }
                _ => t.single(Some(v)),
            },
            FieldOp::Not(ops) => !ops.iter().all(|op| op.matches_value(v)),
        }
    }

    /// Evaluates against the one value (or missing) that a path without arrays reaches.
    #[inline]
    fn single(&self, v: Option<&Value>) -> bool {
        match self {
            FieldOp::Test(t) => t.single(v),
            FieldOp::Not(ops) => !ops.iter().all(|op| op.single(v)),
        }
    }

    fn walked(&self, doc: &Map<String, Value>, segs: &[herald_value::Segment]) -> bool {
        match self {
            FieldOp::Test(t) => walk(doc, segs, t.leaf_arrays(), &mut |v| t.single(v)),
            FieldOp::Not(ops) => !ops.iter().all(|op| op.walked(doc, segs)),
        }
    }
}

impl Test {
    fn leaf_arrays(&self) -> LeafArrays {
        match self {
            Test::Size(_) | Test::ElemMatchDoc(_) | Test::ElemMatchValue(_) => LeafArrays::Whole,
            _ => LeafArrays::Traverse,
        }
    }

    /// Tests one candidate value; `None` is a missing field, which compares as null.
    #[inline]
    pub fn single(&self, v: Option<&Value>) -> bool {
        match self {
            Test::Eq(rhs) => match v {
                Some(v) => bracket(v) == bracket(rhs) && values_equal(v, rhs),
                None => rhs.is_null(),
            },
            Test::Cmp(op, rhs) => match v {
                Some(v) => bracket(v) == bracket(rhs) && op.holds(compare(v, rhs)),
                None => rhs.is_null() && matches!(op, CmpOp::Gte | CmpOp::Lte),
            },
            Test::In(list) => match v {
                Some(v) => list.contains(v),
                None => list.has_null,
            },
            Test::Exists => v.is_some(),
            Test::Type(set) => v.is_some_and(|v| TypeSet::of(v) & set.0 != 0),
            Test::Regex(p) => matches!(v, Some(Value::String(s)) if p.is_match(s)),
            Test::Mod { divisor, remainder } => match v {
                Some(Value::Number(n)) => {
                    let x = match Num::of(n) {
                        Num::I(i) => i,
                        Num::U(u) => u as i64,
                        // Doubles outside the 64-bit range never match, as in MongoDB.
                        Num::F(f) if f.is_finite() && f.abs() < 9.223_372_036_854_775e18 => {
                            f.trunc() as i64
                        }
                        Num::F(_) => return false,
                    };
                    x.checked_rem(*divisor).unwrap_or(0) == *remainder
                }
                _ => false,
            },
            Test::Size(n) => matches!(v, Some(Value::Array(a)) if a.len() == *n),
            Test::ElemMatchDoc(expr) => match v {
                Some(Value::Array(items)) => items.iter().any(|e| match e {
                    Value::Object(m) => expr.matches(m),
                    // MongoDB reads a nested array as a document with fields "0", "1", ...
                    Value::Array(inner) => expr.matches(&array_as_document(inner)),
                    _ => false,
                }),
                _ => false,
            },
            Test::ElemMatchValue(ops) => match v {
                Some(Value::Array(items)) => items
                    .iter()
                    .any(|e| ops.iter().all(|op| op.single(Some(e)))),
                _ => false,
            },
            Test::Never => false,
        }
    }
}
