//! Host tests: module loading and confinement, the Node shims, determinism, error mapping.
//! Each test writes real process files into a temp dir (`<tmp>/proc` is the process folder, so
//! `<tmp>` itself is "outside").

use std::path::Path;

use rquickjs::{Persistent, Promise, Value};

use super::*;

pub(super) struct Fixture {
    pub dir: tempfile::TempDir,
    pub host: JsHost,
}

impl Fixture {
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("proc").canonicalize().unwrap()
    }
}

pub(super) fn write(dir: &Path, files: &[(&str, &str)]) {
    for (rel, text) in files {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

/// A host over `<tmp>/proc` holding `files`; `tweak` adjusts the config.
pub(super) fn fixture(files: &[(&str, &str)], tweak: impl FnOnce(&mut HostConfig)) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proc");
    std::fs::create_dir_all(&root).unwrap();
    write(&root, files);
    let mut config = HostConfig {
        root,
        ..HostConfig::default()
    };
    tweak(&mut config);
    let host = JsHost::new(config).unwrap();
    Fixture { dir, host }
}

/// Calls the entry's `process` export, drives the job queue, returns the result as JSON text.
pub(super) fn run(host: &JsHost, entry: &str) -> Result<String, HostError> {
    let f = host.export_function(entry, "process")?;
    let promise = host.with(|ctx| -> Result<Persistent<Promise<'static>>, HostError> {
        let f = f.restore(&ctx).map_err(|e| js_error(&ctx, e))?;
        let value: Value = f.call(()).map_err(|e| js_error(&ctx, e))?;
        let promise = value.into_promise().expect("process returns a promise");
        Ok(Persistent::save(&ctx, promise))
    })?;
    host.drive()?;
    host.with(|ctx| {
        let promise = promise.restore(&ctx).map_err(|e| js_error(&ctx, e))?;
        match promise.result::<Value>() {
            Some(Ok(v)) => Ok(ctx
                .json_stringify(v)
                .map_err(|e| js_error(&ctx, e))?
                .map(|s| s.to_string().unwrap())
                .unwrap_or_else(|| "undefined".into())),
            Some(Err(e)) => Err(js_error(&ctx, e)),
            None => panic!("the process promise is still pending"),
        }
    })
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap()
}

fn js_message(err: HostError) -> String {
    match err {
        HostError::Js { message, .. } => message,
        other => panic!("expected a js error, got {other:?}"),
    }
}

#[test]
fn host_relative_js_mjs_json_imports() {
    let fx = fixture(
        &[
            (
                "main.mjs",
                "import { twice } from './lib/util.js';\n\
                 import cfg from './data/cfg.json';\n\
                 import pkg from './pkg';\n\
                 export async function process() { return { v: twice(cfg.n), pkg, extra: cfg.list }; }",
            ),
            (
                "lib/util.js",
                "import { one } from './helper';\nimport same from '../data/cfg.json';\n\
                 export const twice = (n) => 2 * n + one - 1 + (same.n - same.n);",
            ),
            ("lib/helper.js", "export const one = 1;"),
            ("data/cfg.json", r#"{ "n": 21, "list": ["a", "\u2028"] }"#),
            ("pkg/index.js", "export default 'pkg-index';"),
        ],
        |_| {},
    );
    let out = json(&run(&fx.host, "main.mjs").unwrap());
    assert_eq!(
        out,
        serde_json::json!({"v": 42, "pkg": "pkg-index", "extra": ["a", "\u{2028}"]})
    );
}

#[test]
fn host_json_import_attributes_and_invalid_json() {
    let fx = fixture(
        &[
            (
                "main.mjs",
                "import cfg from './cfg.json' with { type: 'json' };\n\
                 export async function process() {\n\
                   const again = await import('./cfg.json', { with: { type: 'json' } });\n\
                   return [cfg.a, again.default === cfg];\n\
                 }",
            ),
            ("cfg.json", r#"{"a": [1, {"b": null}]}"#),
            (
                "bad.js",
                "import x from './broken.json'; export const process = async () => x;",
            ),
            ("broken.json", "{ not json"),
        ],
        |_| {},
    );
    let out = json(&run(&fx.host, "main.mjs").unwrap());
    assert_eq!(out, serde_json::json!([[1, {"b": null}], true]));
    let message = js_message(fx.host.load_module("bad.js").unwrap_err());
    assert!(
        message.starts_with("Cannot load module 'broken.json': invalid json"),
        "{message}"
    );
}

#[test]
fn host_top_level_await_and_dynamic_import() {
    let fx = fixture(
        &[
            (
                "main.js",
                "const first = await import('./lib/a.js');\n\
                 await Promise.resolve();\n\
                 export async function process() {\n\
                   const b = await import('./lib/b.mjs');\n\
                   const again = await import('./lib/a.js');\n\
                   return [first.x, b.y, first === again];\n\
                 }",
            ),
            ("lib/a.js", "export const x = await Promise.resolve('a');"),
            (
                "lib/b.mjs",
                "const { x } = await import('./a.js'); export const y = x + 'b';",
            ),
        ],
        |_| {},
    );
    fx.host.load_module("main.js").unwrap();
    assert_eq!(
        json(&run(&fx.host, "main.js").unwrap()),
        serde_json::json!(["a", "ab", true])
    );
}

#[test]
fn host_parent_escape_is_refused() {
    let fx = fixture(
        &[(
            "main.js",
            "import x from '../outside.js'; export const process = async () => x;",
        )],
        |_| {},
    );
    write(fx.dir.path(), &[("outside.js", "export default 'secret';")]);
    let message = js_message(fx.host.load_module("main.js").unwrap_err());
    assert_eq!(
        message,
        "import of '../outside.js' from 'main.js' escapes the process root"
    );

    // dynamic import and an absolute file url are confined the same way
    write(
        &fx.root(),
        &[(
            "dyn.js",
            "export async function process() { try { await import('../../outside.js'); } catch (e) { return e.message; } }",
        )],
    );
    let out = json(&run(&fx.host, "dyn.js").unwrap());
    assert_eq!(
        out,
        "import of '../../outside.js' from 'dyn.js' escapes the process root"
    );
    let outside_url = format!(
        "file://{}",
        fx.dir
            .path()
            .canonicalize()
            .unwrap()
            .join("outside.js")
            .display()
    );
    let src = format!(
        "export async function process() {{ try {{ await import('{outside_url}'); }} catch (e) {{ return e.message; }} }}"
    );
    write(&fx.root(), &[("url.js", &src)]);
    assert!(
        run(&fx.host, "url.js")
            .unwrap()
            .contains("escapes the process root")
    );

    // the entry itself must be inside the folder too
    assert!(matches!(
        fx.host.load_module("../outside.js"),
        Err(HostError::Load { .. })
    ));
}

#[cfg(unix)]
#[test]
fn host_symlink_escape_is_refused() {
    let fx = fixture(
        &[
            (
                "main.js",
                "import x from './link.js'; export const process = async () => x;",
            ),
            (
                "dirlink.js",
                "import y from './shared/y.js'; export const process = async () => y;",
            ),
        ],
        |_| {},
    );
    write(
        fx.dir.path(),
        &[
            ("outside.js", "export default 'secret';"),
            ("other/y.js", "export default 'y';"),
        ],
    );
    std::os::unix::fs::symlink(fx.dir.path().join("outside.js"), fx.root().join("link.js"))
        .unwrap();
    std::os::unix::fs::symlink(fx.dir.path().join("other"), fx.root().join("shared")).unwrap();
    let message = js_message(fx.host.load_module("main.js").unwrap_err());
    assert_eq!(
        message,
        "import of './link.js' from 'main.js' escapes the process root"
    );
    let message = js_message(fx.host.load_module("dirlink.js").unwrap_err());
    assert_eq!(
        message,
        "import of './shared/y.js' from 'dirlink.js' escapes the process root"
    );
    // fs reads through the link are refused as well
    write(
        &fx.root(),
        &[(
            "read.js",
            "import fs from 'node:fs';\n\
             export async function process() {\n\
               try { fs.readFileSync('link.js', 'utf8'); } catch (e) { return [e.code, fs.existsSync('link.js')]; }\n\
             }",
        )],
    );
    assert_eq!(
        json(&run(&fx.host, "read.js").unwrap()),
        serde_json::json!(["EACCES", false])
    );
}

#[test]
fn host_unsupported_import_names_module_and_importer() {
    let fx = fixture(
        &[
            (
                "main.js",
                "import { sh } from './lib/tools.js'; export const process = async () => sh;",
            ),
            (
                "lib/tools.js",
                "import { execSync } from 'child_process'; export const sh = execSync;",
            ),
            (
                "dyn.js",
                "export async function process() { try { await import('node:child_process'); } catch (e) { return [e.message, e.code]; } }",
            ),
        ],
        |_| {},
    );
    let message = js_message(fx.host.load_module("main.js").unwrap_err());
    assert_eq!(
        message,
        "Cannot import module 'child_process' from 'lib/tools.js': not available in the embedded engine"
    );
    let out = json(&run(&fx.host, "dyn.js").unwrap());
    assert_eq!(
        out,
        serde_json::json!([
            "Cannot import module 'node:child_process' from 'dyn.js': not available in the embedded engine",
            "ERR_MODULE_NOT_FOUND"
        ])
    );
}

#[test]
fn host_missing_module_and_syntax_error() {
    let fx = fixture(
        &[
            (
                "main.js",
                "import './nope.js'; export async function process() {}",
            ),
            ("bad.js", "export async function process() { return 1 +; }"),
        ],
        |_| {},
    );
    let message = js_message(fx.host.load_module("main.js").unwrap_err());
    assert_eq!(
        message,
        "Cannot find module './nope.js' imported from 'main.js'"
    );
    match fx.host.load_module("bad.js").unwrap_err() {
        HostError::Js { name, .. } => assert_eq!(name, "SyntaxError"),
        other => panic!("unexpected {other:?}"),
    }
    assert!(matches!(
        fx.host.load_module("absent.js"),
        Err(HostError::Io { .. })
    ));
}

#[test]
fn host_builtin_module_registration_and_engine_api() {
    let sdk = "export function defineTask(id, build) { return { id, build }; }\n\
               export const version = import.meta.engine.version;\n\
               export const hello = (n) => import.meta.engine.hello(n);";
    let fx = fixture(
        &[(
            "main.js",
            "import { defineTask, version, hello } from '@a5c-ai/babysitter-sdk';\n\
             const t = defineTask('build', () => ({ kind: 'node' }));\n\
             export async function process() {\n\
               return [t.id, version, hello(2), typeof import.meta.engine, typeof import.meta.host];\n\
             }",
        )],
        |c| {
            c.builtin_modules
                .push(("@a5c-ai/babysitter-sdk".into(), sdk.into()))
        },
    );
    fx.host.with(|ctx| {
        let api = fx.host.engine_api(&ctx).unwrap();
        api.set("version", "engine-1").unwrap();
        let hello = rquickjs::Function::new(ctx.clone(), |n: i32| n * 21).unwrap();
        api.set("hello", hello).unwrap();
    });
    let out = json(&run(&fx.host, "main.js").unwrap());
    assert_eq!(
        out,
        serde_json::json!(["build", "engine-1", 42, "undefined", "undefined"])
    );
}

#[test]
fn host_export_selection() {
    let fx = fixture(
        &[
            (
                "named.js",
                "export async function build() { return 'named'; } export async function process() { return 'p'; }",
            ),
            (
                "fallback.js",
                "export async function process() { return 'process'; }",
            ),
            (
                "dflt.js",
                "export default async function () { return 'default'; }",
            ),
            ("notfn.js", "export const process = 42;"),
        ],
        |_| {},
    );
    let pick = |path: &str, name: &str| -> Result<String, HostError> {
        let f = fx.host.export_function(path, name)?;
        Ok(fx.host.with(|ctx| {
            f.restore(&ctx)
                .unwrap()
                .as_object()
                .unwrap()
                .get::<_, String>("name")
                .unwrap()
        }))
    };
    assert_eq!(pick("named.js", "build").unwrap(), "build");
    assert_eq!(pick("fallback.js", "build").unwrap(), "process");
    assert_eq!(pick("dflt.js", "build").unwrap(), "default");
    let err = pick("notfn.js", "process").unwrap_err();
    assert_eq!(
        err.to_string(),
        "Export 'process' was not a function in notfn.js"
    );
}

#[test]
fn host_path_shim() {
    let fx = fixture(
        &[(
            "main.js",
            "import path from 'node:path';\nimport { join, posix } from 'path';\n\
             export async function process() { return [\n\
               join('a', 'b/../c', './d.js'), path.resolve('x/y'), path.resolve('/a', 'b', '../c'),\n\
               path.dirname('/a/b/c.txt'), path.basename('/a/b/c.txt'), path.basename('/a/b/c.txt', '.txt'),\n\
               path.extname('x/y.tar.gz'), path.extname('.bashrc'), path.relative('/a/b/c', '/a/d'),\n\
               path.normalize('/a//b/../c/.'), path.isAbsolute('/x'), path.isAbsolute('x'), path.sep,\n\
               posix === path, path.parse('/home/u/f.txt'), path.relative('sub', '.'),\n\
             ]; }",
        )],
        |_| {},
    );
    let root = fx.root().display().to_string();
    let out = json(&run(&fx.host, "main.js").unwrap());
    assert_eq!(
        out,
        serde_json::json!([
            "a/c/d.js",
            format!("{root}/x/y"),
            "/a/c",
            "/a/b",
            "c.txt",
            "c",
            ".gz",
            "",
            "../../d",
            "/a/c",
            true,
            false,
            "/",
            true,
            {"root": "/", "dir": "/home/u", "base": "f.txt", "ext": ".txt", "name": "f"},
            ".."
        ])
    );
}

#[test]
fn host_url_shim() {
    let fx = fixture(
        &[(
            "lib/main.js",
            "import { fileURLToPath, pathToFileURL, URL as U } from 'node:url';\n\
             import path from 'node:path';\n\
             export async function process() { return [\n\
               fileURLToPath(import.meta.url), path.dirname(fileURLToPath(import.meta.url)),\n\
               pathToFileURL('/a b/c#d.js').href, new URL('./x.js', 'file:///r/lib/a.js').href,\n\
               new URL('../x.js', 'file:///r/lib/a.js').pathname, new U('file:///r/a.js').protocol,\n\
               fileURLToPath(new URL('./data.json', import.meta.url)), U === URL,\n\
             ]; }",
        )],
        |_| {},
    );
    let root = fx.root().display().to_string();
    let out = json(&run(&fx.host, "lib/main.js").unwrap());
    assert_eq!(
        out,
        serde_json::json!([
            format!("{root}/lib/main.js"),
            format!("{root}/lib"),
            "file:///a%20b/c%23d.js",
            "file:///r/lib/x.js",
            "/r/x.js",
            "file:",
            format!("{root}/lib/data.json"),
            true
        ])
    );
}

#[test]
fn host_crypto_shim() {
    let fx = fixture(
        &[(
            "main.js",
            "import { createHash, randomUUID } from 'node:crypto';\nimport crypto from 'crypto';\n\
             export async function process() {\n\
               let md5;\n\
               try { createHash('md5'); } catch (e) { md5 = e.message; }\n\
               return [\n\
                 createHash('sha256').update('abc').digest('hex'),\n\
                 crypto.createHash('sha1').update('a').update(new Uint8Array([98, 99])).digest('hex'),\n\
                 createHash('sha256').update('').digest('base64'),\n\
                 createHash('sha256').update('abc').digest().toString('hex').length,\n\
                 /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(randomUUID()),\n\
                 md5,\n\
               ];\n\
             }",
        )],
        |_| {},
    );
    let out = json(&run(&fx.host, "main.js").unwrap());
    assert_eq!(
        out,
        serde_json::json!([
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            "a9993e364706816aba3e25717850c26c9cd0d89d",
            "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",
            64,
            true,
            "Digest method not supported: 'md5' is not available in the embedded engine (supported: sha1, sha224, sha256, sha384, sha512)"
        ])
    );
}

#[test]
fn host_fs_shim_reads_inside_the_folder() {
    let fx = fixture(
        &[
            (
                "main.js",
                "import fs from 'node:fs';\nimport { readFile, readdir, stat } from 'fs/promises';\n\
                 import { statSync } from 'fs';\n\
                 export async function process() {\n\
                   const s = statSync('data/a.txt');\n\
                   let outside;\n\
                   try { fs.readFileSync('../secret.txt', 'utf8'); } catch (e) { outside = e.code; }\n\
                   let missing;\n\
                   try { fs.readFileSync('data/none.txt'); } catch (e) { missing = [e.code, e.syscall, e.path]; }\n\
                   return [\n\
                     fs.readFileSync('data/a.txt', 'utf8'), fs.readFileSync('./data/a.txt', { encoding: 'utf8' }),\n\
                     fs.readFileSync(globalThis.process.cwd() + '/data/a.txt').toString(),\n\
                     fs.existsSync('data/a.txt'), fs.existsSync('data/zzz'), fs.existsSync('../secret.txt'),\n\
                     fs.readdirSync('data'), fs.readdirSync('.', { withFileTypes: true }).map((d) => [d.name, d.isDirectory()]),\n\
                     [s.isFile(), s.isDirectory(), s.size], statSync('data').isDirectory(),\n\
                     await readFile('data/b.json', 'utf8'), await readdir('data'), (await stat('data/a.txt')).size,\n\
                     fs.statSync('nope', { throwIfNoEntry: false }) === undefined, outside, missing,\n\
                   ];\n\
                 }",
            ),
            ("data/a.txt", "hello"),
            ("data/b.json", "{}"),
            ("data/c/.keep", ""),
        ],
        |_| {},
    );
    write(fx.dir.path(), &[("secret.txt", "secret")]);
    let out = json(&run(&fx.host, "main.js").unwrap());
    assert_eq!(
        out,
        serde_json::json!([
            "hello",
            "hello",
            "hello",
            true,
            false,
            false,
            ["a.txt", "b.json", "c"],
            [["data", true], ["main.js", false]],
            [true, false, 5],
            true,
            "{}",
            ["a.txt", "b.json", "c"],
            5,
            true,
            "EACCES",
            ["ENOENT", "open", "data/none.txt"]
        ])
    );
}

#[test]
fn host_fs_writes_are_refused() {
    let fx = fixture(
        &[(
            "main.js",
            "import fs from 'node:fs';\nimport { writeFile } from 'node:fs/promises';\n\
             export async function process() {\n\
               const out = [];\n\
               try { fs.writeFileSync('x.txt', 'data'); } catch (e) { out.push(e.code, e.message); }\n\
               try { fs.mkdirSync('d'); } catch (e) { out.push(e.code); }\n\
               try { await writeFile('y.txt', 'data'); } catch (e) { out.push(e.code); }\n\
               try { await fs.promises.rm('main.js'); } catch (e) { out.push(e.code); }\n\
               out.push(fs.existsSync('x.txt'));\n\
               return out;\n\
             }",
        )],
        |_| {},
    );
    let out = json(&run(&fx.host, "main.js").unwrap());
    assert_eq!(
        out,
        serde_json::json!([
            "EROFS",
            "EROFS: read-only file system, open 'x.txt' (the embedded engine's fs is read-only)",
            "EROFS",
            "EROFS",
            "EROFS",
            false
        ])
    );
    assert!(!fx.root().join("x.txt").try_exists().unwrap());
}

#[test]
fn host_process_globals_and_console() {
    let fx = fixture(
        &[(
            "main.js",
            "export async function process() {\n\
               console.log('hello', { a: 1 }, [2]); console.warn('w'); console.error(new Error('e')); console.debug();\n\
               let frozen = false;\n\
               try { globalThis.process.env.FOO = 'changed'; } catch (e) { frozen = e instanceof TypeError; }\n\
               return [globalThis.process.env.FOO, globalThis.process.env.MISSING === undefined, frozen,\n\
                       globalThis.process.platform, globalThis.process.cwd()];\n\
             }",
        )],
        |c| {
            c.env.insert("FOO".into(), "bar".into());
        },
    );
    let root = fx.root().display().to_string();
    let out = json(&run(&fx.host, "main.js").unwrap());
    assert_eq!(out, serde_json::json!(["bar", true, true, "linux", root]));
}

#[test]
fn host_randomness_is_seeded() {
    let src = "import { randomUUID, randomBytes } from 'node:crypto';\n\
               export async function process() {\n\
                 return [Math.random(), Math.random(), randomUUID(), crypto.randomUUID(), Array.from(randomBytes(4))];\n\
               }";
    let sample = |seed: u64| {
        let fx = fixture(&[("main.js", src)], |c| c.random_seed = seed);
        json(&run(&fx.host, "main.js").unwrap())
    };
    let a = sample(7);
    assert_eq!(a, sample(7));
    assert_ne!(a, sample(8));
    let r = a[0].as_f64().unwrap();
    assert!((0.0..1.0).contains(&r));
    assert_ne!(a[0], a[1]);
}

#[test]
fn host_thrown_error_surfaces_as_js() {
    let fx = fixture(
        &[
            (
                "main.js",
                "import { fail } from './lib/fail.js';\nexport async function process() { await null; fail(); }",
            ),
            (
                "lib/fail.js",
                "export function fail() { throw new TypeError('boom from js'); }",
            ),
            (
                "str.js",
                "export async function process() { throw 'plain'; }",
            ),
            (
                "obj.js",
                "export async function process() { throw { code: 7 }; }",
            ),
        ],
        |_| {},
    );
    match run(&fx.host, "main.js").unwrap_err() {
        HostError::Js {
            name,
            message,
            stack,
        } => {
            assert_eq!(name, "TypeError");
            assert_eq!(message, "boom from js");
            let stack = stack.unwrap();
            assert!(stack.contains("lib/fail.js"), "{stack}");
            assert!(stack.contains("main.js"), "{stack}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(!fx.host.is_poisoned());
    let err = run(&fx.host, "str.js").unwrap_err();
    assert_eq!(err.to_string(), "Error: plain");
    assert_eq!(
        js_message(run(&fx.host, "obj.js").unwrap_err()),
        r#"{"code":7}"#
    );
}
