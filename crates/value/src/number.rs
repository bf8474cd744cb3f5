//! Exact numeric comparison across JSON's 64-bit integers and doubles.
//!
//! MongoDB compares `1` and `1.0` as equal and orders `2^53 + 1` (an integer no double can hold)
//! above `2^53` (a double). Converting everything to `f64` would get that wrong, so integers are
//! widened to `i128` and doubles are compared against them exactly.

use serde_json::Number;
use std::cmp::Ordering;

/// A JSON number, classified. `U` holds integers above `i64::MAX` that serde_json parsed as `u64`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    I(i64),
    U(u64),
    F(f64),
}

impl Num {
    #[inline]
    pub fn of(n: &Number) -> Num {
        if let Some(i) = n.as_i64() {
            Num::I(i)
        } else if let Some(u) = n.as_u64() {
            Num::U(u)
        } else {
            // serde_json never stores NaN or infinities, so this is always finite.
            Num::F(n.as_f64().unwrap_or(0.0))
        }
    }

    /// The value as an exact integer, when it is one of the integer kinds.
    #[inline]
    pub fn as_i128(self) -> Option<i128> {
        match self {
            Num::I(i) => Some(i as i128),
            Num::U(u) => Some(u as i128),
            Num::F(_) => None,
        }
    }

    /// The value rounded to the nearest double (exact for doubles).
    #[inline]
    pub fn as_f64(self) -> f64 {
        match self {
            Num::I(i) => i as f64,
            Num::U(u) => u as f64,
            Num::F(f) => f,
        }
    }

    pub fn is_integer_kind(self) -> bool {
        !matches!(self, Num::F(_))
    }
}

/// Compares two numbers exactly. NaN (never produced by JSON input) sorts below every number and
/// equal to itself, as in MongoDB.
#[inline]
pub fn compare_numbers(a: Num, b: Num) -> Ordering {
    match (a, b) {
        (Num::I(x), Num::I(y)) => x.cmp(&y),
        (Num::F(x), Num::F(y)) => cmp_f64(x, y),
        (Num::F(x), _) => cmp_f64_int(x, b.as_i128().unwrap_or(0)),
        (_, Num::F(y)) => cmp_f64_int(y, a.as_i128().unwrap_or(0)).reverse(),
        _ => a.as_i128().cmp(&b.as_i128()),
    }
}

#[inline]
fn cmp_f64(x: f64, y: f64) -> Ordering {
    match (x.is_nan(), y.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        // -0.0 == 0.0 under partial_cmp, which is what MongoDB does.
        (false, false) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
    }
}

/// Compares a double with an integer exactly, without rounding the integer.
fn cmp_f64_int(x: f64, i: i128) -> Ordering {
    if x.is_nan() {
        return Ordering::Less;
    }
    // Every i128 we hold fits in (-2^64, 2^64); doubles outside that range are decided by sign.
    const TWO_64: f64 = 18_446_744_073_709_551_616.0;
    if x >= TWO_64 {
        return Ordering::Greater;
    }
    if x <= -TWO_64 {
        return Ordering::Less;
    }
    let floor = x.floor();
    // `floor` is an integer-valued double in range, so the cast is exact.
    let fi = floor as i128;
    match fi.cmp(&i) {
        Ordering::Equal if x > floor => Ordering::Greater,
        ord => ord,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_and_double_compare_numerically() {
        assert_eq!(compare_numbers(Num::I(1), Num::F(1.0)), Ordering::Equal);
        assert_eq!(compare_numbers(Num::I(1), Num::F(1.5)), Ordering::Less);
        assert_eq!(compare_numbers(Num::F(-0.5), Num::I(-1)), Ordering::Greater);
        assert_eq!(compare_numbers(Num::F(-1.5), Num::I(-1)), Ordering::Less);
    }

    #[test]
    fn large_integers_are_not_rounded() {
        let two53 = 9_007_199_254_740_992i64;
        assert_eq!(
            compare_numbers(Num::I(two53 + 1), Num::F(two53 as f64)),
            Ordering::Greater
        );
        assert_eq!(
            compare_numbers(Num::U(u64::MAX), Num::I(i64::MAX)),
            Ordering::Greater
        );
        assert_eq!(
            compare_numbers(Num::F(1e30), Num::U(u64::MAX)),
            Ordering::Greater
        );
        assert_eq!(
            compare_numbers(Num::F(-1e30), Num::I(i64::MIN)),
            Ordering::Less
        );
    }

    #[test]
    fn nan_sorts_first() {
        assert_eq!(
            compare_numbers(Num::F(f64::NAN), Num::I(i64::MIN)),
            Ordering::Less
        );
        assert_eq!(
            compare_numbers(Num::F(f64::NAN), Num::F(f64::NAN)),
            Ordering::Equal
        );
    }
}
