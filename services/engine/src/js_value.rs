//! A process's TaskDef and task arguments, read off the JS values as JSON documents.
//!
//! A new effect's TaskDef and args become `task.json`. Turning them into text with
//! `JSON.stringify` and parsing that text again cost more than the rest of a warm `ctx.task` call,
//! so the host reads the values directly — for the documents processes build: plain objects and
//! arrays (whose prototypes are the realm's own) holding strings, booleans, `null` and numbers,
//! with no `toJSON` anywhere. The result is exactly what `JSON.parse(JSON.stringify(v))` would
//! give: `Object.keys` order, `undefined` / functions / symbols left out of objects and `null` in
//! arrays (holes too), non-finite numbers as `null`, `-0` as `0`.
//!
//! Anything else — dates and other class instances, boxed primitives, proxies, a `toJSON`,
//! bigints, integral numbers beyond 2^53 (whose JS text is not their exact value), nesting deeper
//! than [`MAX_DEPTH`] (a cycle), arrays longer than [`MAX_ARRAY_LENGTH`] — sends the whole value
//! through `JSON.stringify` instead, so its semantics (and its errors) stay JavaScript's own. (A
//! getter met before such a value runs twice then: once here, once in `JSON.stringify`.)

use rquickjs::{Array, Atom, Ctx, Exception, Object, Type, Value};
use serde_json::{Map, Number, Value as Json};

/// Nesting the direct reading goes to before handing the value to `JSON.stringify`.
const MAX_DEPTH: usize = 64;
/// Longer arrays go to `JSON.stringify` too (the direct reading is for what processes build).
const MAX_ARRAY_LENGTH: f64 = 65_536.0;
/// 2^53: integral numbers below it print as their exact digits in JS.
const EXACT_INTEGERS: f64 = 9_007_199_254_740_992.0;
/// JS prints numbers from 1e21 on in exponent form, which parses back to the same double.
const EXPONENT_FORM: f64 = 1e21;

/// `JSON.parse(JSON.stringify(value))`; `None` when `JSON.stringify` gives `undefined`. What
/// `JSON.stringify` throws (a cycle, a bigint) is thrown to the caller's JS.
pub(crate) fn to_json<'js>(ctx: &Ctx<'js>, value: &Value<'js>) -> rquickjs::Result<Option<Json>> {
    let realm = Realm {
        object: Object::new(ctx.clone())?.get_prototype(),
        array: Array::new(ctx.clone())?.as_object().get_prototype(),
    };
    match read(&realm, value, 0) {
        Ok(json) => Ok(json),
        Err(NotPlain) => stringified(ctx, value),
    }
}

/// The realm's own prototypes: an object with one of them (and no `toJSON`) is plain.
struct Realm<'js> {
    object: Option<Object<'js>>,
    array: Option<Object<'js>>,
}

/// The value needs `JSON.stringify`'s full semantics.
struct NotPlain;

fn stringified<'js>(ctx: &Ctx<'js>, value: &Value<'js>) -> rquickjs::Result<Option<Json>> {
    let Some(text) = ctx.json_stringify(value.clone())? else {
        return Ok(None);
    };
    serde_json::from_str(&text.to_string()?)
        .map(Some)
        .map_err(|e| {
            Exception::throw_type(ctx, &format!("the value cannot be stored as JSON: {e}"))
        })
}

fn read<'js>(
    realm: &Realm<'js>,
    value: &Value<'js>,
    depth: usize,
) -> Result<Option<Json>, NotPlain> {
    Ok(Some(match value.type_of() {
        Type::Null => Json::Null,
        Type::Bool => Json::Bool(value.as_bool().ok_or(NotPlain)?),
        Type::Int => Json::from(value.as_int().ok_or(NotPlain)?),
        Type::Float => number(value.as_float().ok_or(NotPlain)?)?,
        Type::String => Json::String(
            value
                .as_string()
                .and_then(|s| s.to_string().ok())
                .ok_or(NotPlain)?,
        ),
        Type::Undefined | Type::Uninitialized | Type::Symbol => return Ok(None),
        Type::Function | Type::Constructor => return Ok(None),
        Type::Array => array(realm, value, depth)?,
        Type::Object => object(realm, value, depth)?,
        Type::BigInt
        | Type::Promise
        | Type::Exception
        | Type::Proxy
        | Type::Module
        | Type::Unknown => return Err(NotPlain),
    }))
}

/// A finite double as `JSON.parse` reads JS's text of it.
fn number(f: f64) -> Result<Json, NotPlain> {
    if !f.is_finite() {
        return Ok(Json::Null);
    }
    if f.fract() == 0.0 && f.abs() < EXACT_INTEGERS {
        // -0 prints as 0; the cast is exact below 2^53
        return Ok(Json::from(f as i64));
    }
    if f.fract() != 0.0 || f.abs() >= EXPONENT_FORM {
        // the shortest round-trip text parses back to the same double
        return Number::from_f64(f).map(Json::Number).ok_or(NotPlain);
    }
    Err(NotPlain)
}

/// The object, if it is plain: the expected prototype and no `toJSON` to call.
fn plain<'js>(
    value: &Value<'js>,
    proto: &Option<Object<'js>>,
    depth: usize,
) -> Result<Object<'js>, NotPlain> {
    let obj = value.as_object().ok_or(NotPlain)?;
    if depth >= MAX_DEPTH || obj.get_prototype() != *proto {
        return Err(NotPlain);
    }
    let to_json: Value = obj.get("toJSON").map_err(|_| NotPlain)?;
    if !to_json.is_undefined() {
        return Err(NotPlain);
    }
    Ok(obj.clone())
}

fn array<'js>(realm: &Realm<'js>, value: &Value<'js>, depth: usize) -> Result<Json, NotPlain> {
    let obj = plain(value, &realm.array, depth)?;
    let length: f64 = obj.get("length").map_err(|_| NotPlain)?;
    if !(0.0..=MAX_ARRAY_LENGTH).contains(&length) {
        return Err(NotPlain);
    }
    let mut items = Vec::with_capacity((length as usize).min(1024));
    for i in 0..length as u32 {
        let item: Value = obj.get(i).map_err(|_| NotPlain)?;
        items.push(read(realm, &item, depth + 1)?.unwrap_or(Json::Null));
    }
    Ok(Json::Array(items))
}

fn object<'js>(realm: &Realm<'js>, value: &Value<'js>, depth: usize) -> Result<Json, NotPlain> {
    let obj = plain(value, &realm.object, depth)?;
    let mut map = Map::new();
    // By atom: a key read back by its text would be looked up in the atom table again.
    for key in obj.keys::<Atom>() {
        let key = key.map_err(|_| NotPlain)?;
        let member: Value = obj.get(key.clone()).map_err(|_| NotPlain)?;
        if let Some(json) = read(realm, &member, depth + 1)? {
            map.insert(key.to_string().map_err(|_| NotPlain)?, json);
        }
    }
    Ok(Json::Object(map))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::js_test::{thrown_message, with_context};

    /// Every case is compared with `JSON.parse(JSON.stringify(v))` as JS computes it.
    #[test]
    fn js_value_reads_values_as_json_stringify_and_parse_do() {
        with_context(|ctx| {
            let cases = [
                "({ kind: 'node', title: 'step 1', node: { entry: 'a.js', args: ['--i', '1'] }, labels: ['x'] })",
                "({ b: 1, a: 'x', c: null, d: undefined, e: () => 1, g: Symbol('s'), 10: 2, 9: 3 })",
                "[1, 'a', [true, null], , undefined, () => 1, { z: [] }]",
                "({ n: [0, -0, 1.5, -2.25, 1e21, 1e300, NaN, Infinity, -Infinity, 2 ** 53 - 1, 0.1 + 0.2] })",
                "({ big: 2 ** 60 + 256, neg: -(2 ** 55) })",
                "({ when: new Date(0), nested: { d: new Date(86400000) } })",
                "({ boxed: new Number(3), s: new String('s'), b: new Boolean(false) })",
                "({ custom: { toJSON(key) { return 'k=' + key; } } })",
                "(class Point { constructor() { this.x = 1; } }, { p: new (class { constructor() { this.x = 1; } })() })",
                "({ m: new Map([[1, 2]]), set: new Set([1]), err: new Error('e') })",
                "Object.create(null)",
                "({ proxy: new Proxy({ a: 1 }, {}) })",
                "Object.defineProperty({ a: 1 }, 'hidden', { value: 2, enumerable: false })",
                "({ get g() { return [1, 2]; } })",
                "({ 'quo\"te': 'new\\nline\\u0001', 'é': 'ü' })",
                "'just a string'",
                "42",
                "null",
                "(function () { let v = {}; for (let i = 0; i < 100; i++) v = { v }; return v; })()",
                "({ long: Array.from({ length: 70000 }, (_, i) => i % 7) })",
            ];
            for case in cases {
                let value: Value = ctx.eval(case).unwrap();
                let expected: Option<Json> = ctx
                    .json_stringify(value.clone())
                    .unwrap()
                    .map(|s| serde_json::from_str(&s.to_string().unwrap()).unwrap());
                assert_eq!(to_json(&ctx, &value).unwrap(), expected, "{case}");
            }
            for undefined in ["undefined", "(() => 1)", "Symbol('x')"] {
                let value: Value = ctx.eval(undefined).unwrap();
                assert_eq!(to_json(&ctx, &value).unwrap(), None, "{undefined}");
            }
        });
    }

    #[test]
    fn js_value_reports_what_json_stringify_refuses() {
        with_context(|ctx| {
            for (case, says) in [
                ("const a = { x: 1 }; a.self = a; a", "circular"),
                ("({ n: 10n })", "bigint"),
            ] {
                let value: Value = ctx.eval(case).unwrap();
                assert!(to_json(&ctx, &value).is_err(), "{case}");
                let message = thrown_message(&ctx);
                assert!(message.to_lowercase().contains(says), "{case}: {message}");
            }
        });
    }
}
