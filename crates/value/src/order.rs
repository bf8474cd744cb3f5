//! MongoDB's total order across JSON values.
//!
//! Values are first ordered by type bracket (null < numbers < strings < objects < arrays <
//! booleans), then within the bracket. Embedded documents compare pair by pair: the type bracket of
//! the values, then the field name, then the value; a document that runs out of fields first is
//! smaller. Arrays compare element by element. Strings compare by UTF-8 bytes (MongoDB's simple
//! collation). A missing field is treated as null by the callers that need it.

use crate::number::{compare_numbers, Num};
use serde_json::Value;
use std::cmp::Ordering;

/// The type brackets of MongoDB's comparison order, in ascending order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Bracket {
    Null = 0,
    Number = 1,
    String = 2,
    Object = 3,
    Array = 4,
    Bool = 5,
}

#[inline]
pub fn bracket(v: &Value) -> Bracket {
    match v {
        Value::Null => Bracket::Null,
        Value::Number(_) => Bracket::Number,
        Value::String(_) => Bracket::String,
        Value::Object(_) => Bracket::Object,
        Value::Array(_) => Bracket::Array,
        Value::Bool(_) => Bracket::Bool,
    }
}

/// Total order over values, as MongoDB compares them.
pub fn compare(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare_numbers(Num::of(x), Num::of(y)),
        (Value::String(x), Value::String(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Null, Value::Null) => Ordering::Equal,
        (Value::Array(x), Value::Array(y)) => {
            for (ex, ey) in x.iter().zip(y.iter()) {
                let ord = compare(ex, ey);
                if ord != Ordering::Equal {
                    return ord;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            for ((kx, vx), (ky, vy)) in x.iter().zip(y.iter()) {
                let ord = bracket(vx)
                    .cmp(&bracket(vy))
                    .then_with(|| kx.as_bytes().cmp(ky.as_bytes()))
                    .then_with(|| compare(vx, vy));
                if ord != Ordering::Equal {
                    return ord;
                }
            }
            x.len().cmp(&y.len())
        }
        _ => bracket(a).cmp(&bracket(b)),
    }
}

/// Equality under the order: `1 == 1.0`, embedded documents equal only with the same field order.
#[inline]
pub fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        // Fast paths for the common scalar cases.
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Null, Value::Null) => true,
        _ => compare(a, b) == Ordering::Equal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn brackets_order_types() {
        let ascending = [
            json!(null),
            json!(-5),
            json!(2.5),
            json!(""),
            json!("a"),
            json!({}),
            json!({"a": 1}),
            json!([]),
            json!([1]),
            json!(false),
            json!(true),
        ];
        for w in ascending.windows(2) {
            assert_eq!(compare(&w[0], &w[1]), Ordering::Less, "{} < {}", w[0], w[1]);
        }
    }

    #[test]
    fn objects_compare_type_then_name_then_value() {
        // Type bracket of the first value decides before the field name.
        assert_eq!(
            compare(&json!({"b": 1}), &json!({"a": "x"})),
            Ordering::Less
        );
        assert_eq!(compare(&json!({"a": 1}), &json!({"b": 1})), Ordering::Less);
        assert_eq!(
            compare(&json!({"a": 1}), &json!({"a": 1, "b": 0})),
            Ordering::Less
        );
        assert_ne!(
            compare(&json!({"a": 1, "b": 2}), &json!({"b": 2, "a": 1})),
            Ordering::Equal
        );
    }

    #[test]
    fn int_equals_double() {
        assert!(values_equal(&json!(1), &json!(1.0)));
        assert!(values_equal(
            &json!([1, {"a": 2}]),
            &json!([1.0, {"a": 2.0}])
        ));
    }
}
