//! The argument shape of a `ctx.task` call, read off the JS value itself.
//!
//! A derived step id hashes `JSON.stringify(shapeOf(args))` (the reference's `shapeOf`: every leaf
//! replaced by its `typeof`, object keys sorted). Building that object in JS and stringifying it
//! cost more than anything else a warm `ctx.task` call does, so the host walks the value and
//! writes the same JSON directly. What JS would do is kept exactly: arrays go by `length` with
//! holes as `null` (`Array.prototype.map` skips them), objects by `Object.keys` in the order JS
//! enumerates the sorted copy (array-index keys first, then `localeCompare`), a `"__proto__"` key
//! never appears (assigning it sets the copy's prototype), and getters run as `value[key]` runs
//! them. Only JSON-safe text is produced (shapes hold `typeof` names and keys).

use rquickjs::{Ctx, Exception, Object, Type, Value};

use crate::identity;

/// Nesting beyond this is reported as JS reports runaway recursion (a cyclic argument).
const MAX_DEPTH: usize = 512;
/// Longer arrays are refused rather than walked (JS would walk a sparse one for ever).
const MAX_ARRAY_LENGTH: u32 = 1 << 24;

/// `JSON.stringify(shapeOf(value))`.
pub(crate) fn shape_json<'js>(ctx: &Ctx<'js>, value: &Value<'js>) -> rquickjs::Result<String> {
    let mut out = String::with_capacity(32);
    write_shape(ctx, value, &mut out, 0)?;
    Ok(out)
}

fn write_shape<'js>(
    ctx: &Ctx<'js>,
    value: &Value<'js>,
    out: &mut String,
    depth: usize,
) -> rquickjs::Result<()> {
    let leaf = match value.type_of() {
        Type::Array => return write_array(ctx, value, out, depth),
        Type::Object | Type::Promise | Type::Exception | Type::Proxy => {
            return write_object(ctx, value, out, depth);
        }
        Type::Null => "null",
        Type::Undefined | Type::Uninitialized => "undefined",
        Type::Bool => "boolean",
        Type::Int | Type::Float => "number",
        Type::String => "string",
        Type::Symbol => "symbol",
        Type::BigInt => "bigint",
        Type::Function | Type::Constructor => "function",
        Type::Module | Type::Unknown => "object",
    };
    out.push('"');
    out.push_str(leaf);
    out.push('"');
    Ok(())
}

fn nested<'js>(ctx: &Ctx<'js>, value: &Value<'js>, depth: usize) -> rquickjs::Result<Object<'js>> {
    if depth >= MAX_DEPTH {
        return Err(Exception::throw_range(
            ctx,
            "Maximum call stack size exceeded (the task arguments are nested too deeply or cyclic)",
        ));
    }
    value
        .as_object()
        .cloned()
        .ok_or_else(|| rquickjs::Error::new_from_js(value.type_name(), "object"))
}

fn write_array<'js>(
    ctx: &Ctx<'js>,
    value: &Value<'js>,
    out: &mut String,
    depth: usize,
) -> rquickjs::Result<()> {
    let array = nested(ctx, value, depth)?;
    let length: f64 = array.get("length")?;
    if !(0.0..=f64::from(MAX_ARRAY_LENGTH)).contains(&length) {
        return Err(Exception::throw_range(
            ctx,
            "the task arguments hold an array too long to derive a step id from",
        ));
    }
    out.push('[');
    for i in 0..length as u32 {
        if i > 0 {
            out.push(',');
        }
        if array.contains_key(i)? {
            write_shape(ctx, &array.get::<_, Value>(i)?, out, depth + 1)?;
        } else {
            out.push_str("null");
        }
    }
    out.push(']');
    Ok(())
}

fn write_object<'js>(
    ctx: &Ctx<'js>,
    value: &Value<'js>,
    out: &mut String,
    depth: usize,
) -> rquickjs::Result<()> {
    let object = nested(ctx, value, depth)?;
    let keys = object
        .keys::<String>()
        .collect::<rquickjs::Result<Vec<String>>>()?;
    out.push('{');
    let mut first = true;
    for key in identity::js_sorted_keys(keys.iter().map(String::as_str)) {
        if key == "__proto__" {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        // Keys are JSON-escaped as JS escapes them (serde_json agrees for strings).
        let quoted = serde_json::to_string(key)
            .map_err(|e| rquickjs::Error::new_from_js_message("key", "JSON", e.to_string()))?;
        out.push_str(&quoted);
        out.push(':');
        write_shape(ctx, &object.get::<_, Value>(key)?, out, depth + 1)?;
    }
    out.push('}');
    Ok(())
}

#[cfg(test)]
mod tests {
    use rquickjs::Function;

    use super::*;
    use crate::js_test::{thrown_message, with_context};

    /// The reference's `shapeOf` as the runtime ran it in JS before the host took it over: the
    /// walker must produce the same JSON for every kind of value.
    const SHAPE_OF_JS: &str = r#"
      (function shapeOf(value) {
        if (Array.isArray(value)) return value.map(shapeOf);
        if (value && typeof value === "object") {
          const keys = Object.keys(value);
          const out = {};
          for (const key of keys.length > 1 ? sortKeys(keys) : keys) out[key] = shapeOf(value[key]);
          return out;
        }
        return value === null ? "null" : typeof value;
      })
    "#;

    #[test]
    fn js_shape_matches_the_javascript_shape_of() {
        with_context(|ctx| {
            let sort = Function::new(ctx.clone(), |keys: Vec<String>| -> Vec<String> {
                let mut k = keys;
                k.sort_by(|a, b| identity::locale_compare(a, b));
                k
            })
            .unwrap();
            ctx.globals().set("sortKeys", sort).unwrap();
            let shape_of: Function = ctx.eval(SHAPE_OF_JS).unwrap();
            let cases = [
                "undefined",
                "null",
                "({ i: 1 })",
                "({ b: 1, a: 'x', c: null, d: undefined, e: () => 1, f: 10n, g: Symbol('s') })",
                "({ 10: 1, 9: 2, b: 3, B: 4, a: 5, '01': 6, 'é': 7, 'e': 8, '-1': 9 })",
                "[1, 'a', [true, null], , undefined, { z: [] }]",
                "JSON.parse('{\"__proto__\": {\"x\": 1}, \"y\": 2}')",
                "({ 'quo\"te': 1, 'new\\nline': 2, '\\u0001': 3 })",
                "({ date: new Date(0), map: new Map([[1, 2]]), err: new Error('e'), p: Promise.resolve(1) })",
                "Object.defineProperty({ a: 1 }, 'hidden', { value: 2, enumerable: false })",
                "({ get g() { return [1, 2]; } })",
                "(function () { const a = [1]; a[5] = 2; return a; })()",
            ];
            for case in cases {
                let value: Value = ctx.eval(case).unwrap();
                let expected: String = ctx
                    .json_stringify(shape_of.call::<_, Value>((value.clone(),)).unwrap())
                    .unwrap()
                    .unwrap()
                    .to_string()
                    .unwrap();
                assert_eq!(shape_json(&ctx, &value).unwrap(), expected, "{case}");
            }
        });
    }

    #[test]
    fn js_shape_refuses_cyclic_arguments_with_a_range_error() {
        with_context(|ctx| {
            let value: Value = ctx.eval("const a = { x: 1 }; a.self = a; a").unwrap();
            assert!(shape_json(&ctx, &value).is_err());
            let message = thrown_message(&ctx);
            assert!(message.contains("nested too deeply or cyclic"), "{message}");
        });
    }
}
