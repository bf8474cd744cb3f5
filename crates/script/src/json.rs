//! JSON conversion between `serde_json::Value` and JavaScript values, exact for everything JSON can hold.
//!
//! Both directions go through the engine's own `JSON.parse` and `JSON.stringify`, so JavaScript
//! semantics come for free: key order is kept (insertion order, integer-like keys first, as
//! `JSON.stringify` emits them), `toJSON` is honoured, `undefined`, functions and symbols are dropped
//! from objects and become `null` in arrays, non-finite numbers become `null`, and cycles or BigInts
//! throw a `TypeError` inside the script.
//!
//! Numbers: JavaScript has only doubles. `JSON.stringify` prints an integral double without a decimal
//! point and serde_json parses such text as an integer, so integral numbers stay integers. One
//! adjustment follows: an integer outside the safe range (`|n| > 2^53 - 1`) is turned back into a
//! float, because above that bound a double no longer names one integer. Floats parse exactly because
//! this crate enables serde_json's `float_roundtrip`.

use rquickjs::{Ctx, Exception, Value};
use serde_json::{Number, Value as Json};

/// The largest integer a double holds exactly with its neighbours (`Number.MAX_SAFE_INTEGER`).
pub const SAFE_INTEGER_MAX: u64 = (1 << 53) - 1;

/// Converts JSON text (already produced by serde_json) to a JavaScript value with `JSON.parse`.
pub(crate) fn parse<'js>(ctx: &Ctx<'js>, text: &str) -> rquickjs::Result<Value<'js>> {
    ctx.json_parse(text)
}

/// Converts a serde_json value to a JavaScript value.
pub(crate) fn to_js<'js>(ctx: &Ctx<'js>, value: &Json) -> rquickjs::Result<Value<'js>> {
    // serde_json escapes U+0000 as \u0000, so the text never holds a NUL byte for the C string.
    let text = serde_json::to_string(value).expect("serde_json::Value always serializes");
    parse(ctx, &text)
}

/// Converts a JavaScript value to JSON with `JSON.stringify`, or `None` where `JSON.stringify`
/// returns `undefined` (for `undefined`, a function, a symbol, or a `toJSON` that returns one).
///
/// A JavaScript exception (a cycle, a BigInt, a throwing getter or `toJSON`) is left pending and
/// returned as `Error::Exception`, so a host function can simply propagate it into the script. A
/// value nested deeper than serde_json's recursion limit (128) throws a `TypeError`.
pub(crate) fn from_js<'js>(ctx: &Ctx<'js>, value: Value<'js>) -> rquickjs::Result<Option<Json>> {
    let Some(text) = ctx.json_stringify(value)? else {
        return Ok(None);
    };
    let text = text.to_string()?;
    match serde_json::from_str::<Json>(&text) {
        Ok(mut json) => {
            normalize_numbers(&mut json);
            Ok(Some(json))
        }
        Err(err) => Err(Exception::throw_type(
            ctx,
            &format!("value cannot be converted to a document: {err}"),
        )),
    }
}

/// Turns integers that a double cannot hold exactly (beyond ±(2^53 - 1)) into floats, in place.
pub(crate) fn normalize_numbers(value: &mut Json) {
    match value {
        Json::Number(n) => {
            if let Some(f) = unsafe_integer(n) {
                if let Some(float) = Number::from_f64(f) {
                    *n = float;
                }
            }
        }
        Json::Array(items) => items.iter_mut().for_each(normalize_numbers),
        Json::Object(map) => map.values_mut().for_each(normalize_numbers),
        Json::Null | Json::Bool(_) | Json::String(_) => {}
    }
}

/// The value of `n` as a double when `n` is an integer outside the safe range, else `None`.
fn unsafe_integer(n: &Number) -> Option<f64> {
    if let Some(u) = n.as_u64() {
        return (u > SAFE_INTEGER_MAX).then_some(u as f64);
    }
    if let Some(i) = n.as_i64() {
        return (i.unsigned_abs() > SAFE_INTEGER_MAX).then_some(i as f64);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use rquickjs::{Context, Runtime};
    use serde_json::json;

    fn with_ctx(f: impl FnOnce(&Ctx<'_>)) {
        let rt = Runtime::new().unwrap();
        let ctx = Context::full(&rt).unwrap();
        ctx.with(|ctx| f(&ctx));
    }

    fn eval_json(ctx: &Ctx<'_>, src: &str) -> Option<Json> {
        let v: Value = ctx.eval(src).unwrap();
        from_js(ctx, v).unwrap()
    }

    #[test]
    fn round_trip_keeps_order_and_number_kinds() {
        with_ctx(|ctx| {
            let doc = json!({"z": 1, "a": [1, 1.5, -0.25, "s", null, true], "m": {"b": 2, "a": 3},
                "big": 9007199254740991_i64, "neg": -9007199254740991_i64});
            let back = from_js(ctx, to_js(ctx, &doc).unwrap()).unwrap().unwrap();
            assert_eq!(
                serde_json::to_string(&back).unwrap(),
                serde_json::to_string(&doc).unwrap()
            );
            assert!(back["big"].is_i64() || back["big"].is_u64());
            assert!(back["a"][1].is_f64());
        });
    }

    #[test]
    fn javascript_numbers_become_integers_only_when_safe() {
        with_ctx(|ctx| {
            let v = eval_json(
                ctx,
                "({a: 3, b: 3.5, c: 2**53 - 1, d: 2**53, e: -(2**60), f: 1e21, g: -0})",
            )
            .unwrap();
            assert_eq!(v["a"].as_i64(), Some(3));
            assert!(v["b"].is_f64());
            assert_eq!(v["c"].as_u64(), Some(SAFE_INTEGER_MAX));
            assert_eq!(v["d"].as_f64(), Some(9007199254740992.0));
            assert!(v["d"].is_f64());
            assert!(v["e"].is_f64());
            assert!(v["f"].is_f64());
            assert_eq!(v["g"].as_i64(), Some(0));
        });
    }

    #[test]
    fn floats_round_trip_bit_exactly() {
        with_ctx(|ctx| {
            let src = "(() => { const out = []; let x = 0.1; \
                       for (let i = 0; i < 2000; i++) { x = (x * 1103515245.123 + 0.3) % 1e6; \
                       out.push([x / 7.77e-3, String(x / 7.77e-3)]); } return out; })()";
            let v = eval_json(ctx, src).unwrap();
            for pair in v.as_array().unwrap() {
                let parsed: f64 = pair[1].as_str().unwrap().parse().unwrap();
                assert_eq!(
                    pair[0].as_f64().unwrap().to_bits(),
                    parsed.to_bits(),
                    "{pair}"
                );
            }
        });
    }

    #[test]
    fn undefined_and_non_finite_follow_json_stringify() {
        with_ctx(|ctx| {
            assert_eq!(eval_json(ctx, "undefined"), None);
            assert_eq!(eval_json(ctx, "(function () {})"), None);
            let v = eval_json(
                ctx,
                "({a: undefined, b: NaN, c: [undefined, Infinity], d: () => 1})",
            );
            assert_eq!(v, Some(json!({"b": null, "c": [null, null]})));
        });
    }

    #[test]
    fn cycles_and_bigints_throw_type_errors() {
        with_ctx(|ctx| {
            for src in [
                "(() => { const a = {}; a.self = a; return a; })()",
                "({n: 10n})",
            ] {
                let v: Value = ctx.eval(src).unwrap();
                assert!(matches!(from_js(ctx, v), Err(rquickjs::Error::Exception)));
                let thrown = ctx.catch();
                let name: String = thrown.as_object().unwrap().get("name").unwrap();
                assert_eq!(name, "TypeError", "{src}");
            }
        });
    }

    #[test]
    fn too_deep_nesting_throws_a_type_error() {
        with_ctx(|ctx| {
            let v: Value = ctx
                .eval("(() => { let a = 0; for (let i = 0; i < 200; i++) a = [a]; return a; })()")
                .unwrap();
            assert!(matches!(from_js(ctx, v), Err(rquickjs::Error::Exception)));
            let msg: String = ctx.catch().as_object().unwrap().get("message").unwrap();
            assert!(msg.contains("cannot be converted"), "{msg}");
        });
    }

    #[test]
    fn strings_with_nul_and_unicode_survive() {
        with_ctx(|ctx| {
            let doc = json!({"s": "a\u{0}b\u{1F600}\"\\\n"});
            let back = from_js(ctx, to_js(ctx, &doc).unwrap()).unwrap().unwrap();
            assert_eq!(back, doc);
        });
    }
}
