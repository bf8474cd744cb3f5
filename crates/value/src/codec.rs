//! Order-preserving binary encoding of values for index keys.
//!
//! Invariant: for all values `a`, `b`: `encode(a).cmp(encode(b)) == compare(a, b)`, and equal
//! values (`1` and `1.0`) encode to identical bytes. The encoding is prefix-free (every value is
//! self-delimiting), so keys can be concatenated for composite indexes and a whole key can be
//! bit-inverted for descending order.
//!
//! Layout: one tag byte per type bracket, then a payload.
//! - number: 8 bytes of the value rounded to a double, in sortable form; doubles of magnitude
//!   2^53 and above are followed by 2 bytes holding the integer's distance from that double, so
//!   integers no double can hold keep their exact order.
//! - string: the UTF-8 bytes with 0x00 escaped as 0x00 0xFF, terminated by 0x00 0x01.
//! - object: per field the value's tag, the escaped key, the value's payload; then 0x00.
//!   (MongoDB orders fields by value type first, then name, then value.)
//! - array: per element its tag and payload; then 0x00.
//!
//! Index keys may cut long strings ([`encode_key_limited`]): a string of more than `max` bytes
//! is encoded as its first `max` bytes (escaped) terminated by 0x00 0x02 instead of 0x00 0x01.
//! The map stays monotone (`a < b` implies `key(a) <= key(b)`), so an index of such keys yields
//! a superset of the matches of any range, in an order that is exact except among strings
//! sharing their first `max` bytes, which tie.

use crate::number::Num;
use serde_json::Value;

const END: u8 = 0x00;
const TAG_NULL: u8 = 0x10;
const TAG_NUMBER: u8 = 0x20;
const TAG_STRING: u8 = 0x30;
const TAG_OBJECT: u8 = 0x40;
const TAG_ARRAY: u8 = 0x50;
const TAG_BOOL: u8 = 0x60;

/// Doubles at or above this magnitude cannot hold every integer exactly.
const EXACT_INT_LIMIT: f64 = 9_007_199_254_740_992.0; // 2^53

/// Appends the ascending key encoding of `v` to `out`.
pub fn encode_key(v: &Value, out: &mut Vec<u8>) {
    out.push(tag(v));
    payload(v, out);
}

/// Appends the descending key encoding of `v` (every byte inverted) to `out`.
pub fn encode_key_desc(v: &Value, out: &mut Vec<u8>) {
    let start = out.len();
    encode_key(v, out);
    for b in &mut out[start..] {
        *b = !*b;
    }
}

/// Like [`encode_key`], but a string longer than `string_bytes_max` bytes is cut to that many
/// bytes and terminated by 0x00 0x02 (so it sorts after the cut prefix as a whole string, and
/// with every other string sharing the prefix). Returns whether the value was cut. Only a
/// top-level string is cut (index entries hold scalars).
pub fn encode_key_limited(v: &Value, string_bytes_max: usize, out: &mut Vec<u8>) -> bool {
    match v {
        Value::String(s) if s.len() > string_bytes_max => {
            out.push(TAG_STRING);
            escaped(&s.as_bytes()[..string_bytes_max], out);
            out.extend_from_slice(&[0x00, 0x02]);
            true
        }
        _ => {
            encode_key(v, out);
            false
        }
    }
}

/// [`encode_key_limited`] with every byte inverted, for descending index fields.
pub fn encode_key_desc_limited(v: &Value, string_bytes_max: usize, out: &mut Vec<u8>) -> bool {
    let start = out.len();
    let cut = encode_key_limited(v, string_bytes_max, out);
    for b in &mut out[start..] {
        *b = !*b;
    }
    cut
}

/// The ascending key encoding of `v` as a new vector.
pub fn key_of(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    encode_key(v, &mut out);
    out
}

fn tag(v: &Value) -> u8 {
    match v {
        Value::Null => TAG_NULL,
        Value::Number(_) => TAG_NUMBER,
        Value::String(_) => TAG_STRING,
        Value::Object(_) => TAG_OBJECT,
        Value::Array(_) => TAG_ARRAY,
        Value::Bool(_) => TAG_BOOL,
    }
}

fn payload(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => {}
        Value::Bool(b) => out.push(u8::from(*b)),
        Value::Number(n) => number(Num::of(n), out),
        Value::String(s) => string(s, out),
        Value::Array(items) => {
            for item in items {
                out.push(tag(item));
                payload(item, out);
            }
            out.push(END);
        }
        Value::Object(map) => {
            for (k, item) in map {
                out.push(tag(item));
                string(k, out);
                payload(item, out);
            }
            out.push(END);
        }
    }
}

fn string(s: &str, out: &mut Vec<u8>) {
    escaped(s.as_bytes(), out);
    out.extend_from_slice(&[0x00, 0x01]);
}

fn escaped(bytes: &[u8], out: &mut Vec<u8>) {
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
}

fn number(n: Num, out: &mut Vec<u8>) {
    let mut d = n.as_f64();
    if d == 0.0 {
        d = 0.0; // fold -0.0 into 0.0
    }
    out.extend_from_slice(&sortable_f64(d).to_be_bytes());
    if d.abs() >= EXACT_INT_LIMIT {
        // `d` is integral here; the distance from the integer to it is below 2^12.
        let correction = match n.as_i128() {
            Some(i) => i - d as i128,
            None => 0,
        };
        let c = correction as i16;
        debug_assert_eq!(c as i128, correction);
        out.extend_from_slice(&((c as u16) ^ 0x8000).to_be_bytes());
    }
}

/// Maps a double to a u64 whose unsigned order is the numeric order; NaN sorts below -inf.
fn sortable_f64(d: f64) -> u64 {
    if d.is_nan() {
        return 0;
    }
    let bits = d.to_bits();
    if bits >> 63 == 0 {
        bits | (1 << 63)
    } else {
        !bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::compare;
    use proptest::prelude::*;
    use serde_json::{json, Map, Number};
    use std::cmp::Ordering;

    fn arb_number() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<i64>().prop_map(Value::from),
            (-3i64..3).prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-2.0f64..2.0).prop_map(|f| Value::Number(Number::from_f64(f).unwrap())),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| Value::Number(Number::from_f64(f).unwrap())),
            // Integers near 2^53 and 2^63, where doubles lose precision.
            (-4i64..4).prop_map(|d| Value::from(9_007_199_254_740_992i64 + d)),
            (0i64..8).prop_map(|d| Value::from(i64::MAX - d)),
            (-2i64..2).prop_map(|d| Value::Number(
                Number::from_f64(9_007_199_254_740_992.0 + d as f64).unwrap()
            )),
        ]
    }

    pub(crate) fn arb_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            arb_number(),
            "[a-c\\x00]{0,3}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[a-c]{0,2}", inner), 0..4).prop_map(|kvs| {
                    let mut m = Map::new();
                    for (k, v) in kvs {
                        m.insert(k, v);
                    }
                    Value::Object(m)
                }),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn encoding_agrees_with_order(a in arb_value(), b in arb_value()) {
            let (ka, kb) = (key_of(&a), key_of(&b));
            prop_assert_eq!(ka.cmp(&kb), compare(&a, &b), "a={} b={}", a, b);
        }

        #[test]
        fn descending_encoding_reverses_order(a in arb_value(), b in arb_value()) {
            let (mut ka, mut kb) = (Vec::new(), Vec::new());
            encode_key_desc(&a, &mut ka);
            encode_key_desc(&b, &mut kb);
            prop_assert_eq!(ka.cmp(&kb), compare(&a, &b).reverse());
        }

        #[test]
        fn composite_keys_order_lexicographically(a in arb_value(), b in arb_value(), c in arb_value(), d in arb_value()) {
            let mut k1 = key_of(&a);
            encode_key(&b, &mut k1);
            let mut k2 = key_of(&c);
            encode_key(&d, &mut k2);
            let expected = compare(&a, &c).then(compare(&b, &d));
            prop_assert_eq!(k1.cmp(&k2), expected);
        }
    }

    /// Strings over bytes that matter to the escape and the cut: NUL, two letters, and a
    /// multi-byte character (cut in the middle by small limits).
    fn arb_string() -> impl Strategy<Value = Value> {
        "[ab\\x00é]{0,7}".prop_map(Value::String)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        /// Cut keys are monotone: a < b implies key(a) <= key(b), with equality only when both
        /// were cut and share the prefix. Mixed with other types and with composite suffixes.
        #[test]
        fn limited_encoding_is_monotone(
            a in prop_oneof![arb_string(), arb_value()],
            b in prop_oneof![arb_string(), arb_value()],
            max in 0usize..6,
            tail_a in arb_value(),
            tail_b in arb_value(),
        ) {
            let (mut ka, mut kb) = (Vec::new(), Vec::new());
            let cut_a = encode_key_limited(&a, max, &mut ka);
            let cut_b = encode_key_limited(&b, max, &mut kb);
            let same_cut = cut_a && cut_b && a.as_str().map(|s| &s.as_bytes()[..max]) == b.as_str().map(|s| &s.as_bytes()[..max]);
            match compare(&a, &b) {
                Ordering::Less => prop_assert!(ka < kb || (same_cut && ka == kb), "a={} b={}", a, b),
                Ordering::Greater => prop_assert!(ka > kb || (same_cut && ka == kb), "a={} b={}", a, b),
                Ordering::Equal => prop_assert_eq!(&ka, &kb),
            }
            prop_assert_eq!(same_cut, cut_a && cut_b && ka == kb);
            // Self-delimiting: a suffix never changes the order of different keys.
            if ka != kb {
                let (mut xa, mut xb) = (ka.clone(), kb.clone());
                encode_key(&tail_a, &mut xa);
                encode_key(&tail_b, &mut xb);
                prop_assert_eq!(xa.cmp(&xb), ka.cmp(&kb));
            }
            let (mut da, mut db) = (Vec::new(), Vec::new());
            encode_key_desc_limited(&a, max, &mut da);
            encode_key_desc_limited(&b, max, &mut db);
            prop_assert_eq!(da.cmp(&db), ka.cmp(&kb).reverse());
        }
    }

    #[test]
    fn limited_encoding_cuts_only_long_strings() {
        let mut k = Vec::new();
        assert!(!encode_key_limited(&json!("abc"), 3, &mut k));
        assert_eq!(k, key_of(&json!("abc")));
        k.clear();
        assert!(encode_key_limited(&json!("abcd"), 3, &mut k));
        assert_eq!(k, [TAG_STRING, b'a', b'b', b'c', 0x00, 0x02]);
        assert!(key_of(&json!("abc")) < k && k < key_of(&json!("abd")));
        k.clear();
        assert!(!encode_key_limited(&json!(12345), 1, &mut k));
    }

    #[test]
    fn equal_numbers_encode_identically() {
        assert_eq!(key_of(&json!(1)), key_of(&json!(1.0)));
        assert_eq!(key_of(&json!(-0.0)), key_of(&json!(0)));
        assert_eq!(key_of(&json!({"a": [2]})), key_of(&json!({"a": [2.0]})));
    }

    #[test]
    fn integers_beyond_double_precision_keep_order() {
        let two53 = 9_007_199_254_740_992i64;
        let big = [
            json!(two53 - 1),
            json!(two53),
            json!(two53 + 1),
            json!(two53 + 2),
            json!(i64::MAX - 1),
            json!(i64::MAX),
            json!(u64::MAX),
        ];
        for w in big.windows(2) {
            assert!(key_of(&w[0]) < key_of(&w[1]), "{} < {}", w[0], w[1]);
        }
    }
}
