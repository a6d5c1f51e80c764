//! The Rust functions behind the Node shims and the globals.
//!
//! They are collected on one object that shim modules see as `import.meta.host` and the prelude
//! (`shims/prelude.js`) receives as its argument; process code cannot reach it. Everything that
//! touches the outside world lives here so the confinement rules sit in one place: file access is
//! read-only and checked against the canonical process folder, randomness comes from the run's
//! seeded PRNG, and console output goes to `tracing` (target `babysitter::process`).

use std::path::PathBuf;
use std::sync::Arc;

use rquickjs::function::Opt;
use rquickjs::{Array, Ctx, Function, IntoJs, Object, Value};
use sha2::Digest;

use super::HostCore;
use super::loader::{normalize_lexically, throw_coded};

const HASHES: &str = "sha1, sha224, sha256, sha384, sha512";

/// A failed file access, reported to JS as a Node-style error (`code`, `syscall`, `path`).
struct FsFailure {
    code: &'static str,
    text: String,
}

fn io_failure(err: &std::io::Error) -> FsFailure {
    use std::io::ErrorKind;
    let (code, text) = match err.kind() {
        ErrorKind::NotFound => ("ENOENT", "no such file or directory".to_owned()),
        ErrorKind::PermissionDenied => ("EACCES", "permission denied".to_owned()),
        ErrorKind::IsADirectory => ("EISDIR", "illegal operation on a directory".to_owned()),
        ErrorKind::NotADirectory => ("ENOTDIR", "not a directory".to_owned()),
        _ => ("EIO", err.to_string()),
    };
    FsFailure { code, text }
}

impl HostCore {
    /// The canonical path of `path` (relative to the root, or absolute), which must exist and
    /// lie inside the root.
    fn fs_path(&self, path: &str) -> Result<PathBuf, FsFailure> {
        let outside = || FsFailure {
            code: "EACCES",
            text: "the embedded engine only reads files inside the process folder".into(),
        };
        let lexical = normalize_lexically(&self.root.join(path));
        if !lexical.starts_with(&self.root) {
            return Err(outside());
        }
        let canonical = lexical.canonicalize().map_err(|e| io_failure(&e))?;
        if !canonical.starts_with(&self.root) {
            return Err(outside());
        }
        Ok(canonical)
    }
}

fn fs_throw(ctx: &Ctx<'_>, syscall: &str, path: &str, failure: FsFailure) -> rquickjs::Error {
    let message = format!("{}: {}, {syscall} '{path}'", failure.code, failure.text);
    let err = throw_coded(ctx, failure.code, &message);
    // decorate the pending exception like Node does; best effort
    let thrown = ctx.catch();
    if let Some(obj) = thrown.as_object() {
        let _ = obj.set("syscall", syscall);
        let _ = obj.set("path", path);
    }
    if thrown.is_undefined() {
        err
    } else {
        ctx.throw(thrown)
    }
}

fn type_error(ctx: &Ctx<'_>, message: &str) -> rquickjs::Error {
    rquickjs::Exception::throw_type(ctx, message)
}

/// Bytes of a hash / encode input: a string (utf-8) or an array of byte values.
fn bytes_of<'js>(ctx: &Ctx<'js>, value: Value<'js>) -> rquickjs::Result<Vec<u8>> {
    match value.as_string() {
        Some(s) => Ok(s.to_string()?.into_bytes()),
        None => rquickjs::FromJs::from_js(ctx, value),
    }
}

fn digest(alg: &str, parts: &[Vec<u8>]) -> Option<Vec<u8>> {
    fn run<D: Digest>(parts: &[Vec<u8>]) -> Vec<u8> {
        let mut hasher = D::new();
        for part in parts {
            hasher.update(part);
        }
        hasher.finalize().to_vec()
    }
    Some(match alg {
        "sha1" => run::<sha1::Sha1>(parts),
        "sha224" => run::<sha2::Sha224>(parts),
        "sha256" => run::<sha2::Sha256>(parts),
        "sha384" => run::<sha2::Sha384>(parts),
        "sha512" => run::<sha2::Sha512>(parts),
        _ => return None,
    })
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(bytes: &[u8], url: bool) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            let six = usize::try_from((n >> (18 - 6 * i)) & 63).unwrap_or(0);
            let c = match (url, B64[six]) {
                (true, b'+') => '-',
                (true, b'/') => '_',
                (_, c) => char::from(c),
            };
            out.push(c);
        }
        if !url {
            out.push_str(&"=".repeat(3 - chunk.len()));
        }
    }
    out
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
    {
        let v = match c {
            b'-' => 62,
            b'_' => 63,
            _ => B64.iter().position(|b| *b == c)?,
        };
        acc = (acc << 6) | u32::try_from(v).ok()?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((acc >> bits) & 0xFF).ok()?);
        }
    }
    Some(out)
}

/// Encodes bytes as Node's `buf.toString(encoding)` does for the encodings the host supports.
fn encode(bytes: &[u8], encoding: &str) -> Option<String> {
    Some(match encoding.to_ascii_lowercase().as_str() {
        "hex" => hex::encode(bytes),
        "base64" => base64_encode(bytes, false),
        "base64url" => base64_encode(bytes, true),
        "utf8" | "utf-8" => String::from_utf8_lossy(bytes).into_owned(),
        "latin1" | "binary" => bytes.iter().map(|b| char::from(*b)).collect(),
        "ascii" => bytes.iter().map(|b| char::from(b & 0x7F)).collect(),
        _ => return None,
    })
}

/// Decodes a string given in `encoding` into bytes.
fn decode(text: &str, encoding: &str) -> Option<Vec<u8>> {
    match encoding.to_ascii_lowercase().as_str() {
        "hex" => hex::decode(text).ok(),
        "base64" | "base64url" => base64_decode(text),
        "utf8" | "utf-8" => Some(text.as_bytes().to_vec()),
        "latin1" | "binary" | "ascii" => {
            Some(text.chars().map(|c| (c as u32 & 0xFF) as u8).collect())
        }
        _ => None,
    }
}

fn unknown_encoding(ctx: &Ctx<'_>, encoding: &str) -> rquickjs::Error {
    type_error(ctx, &format!("unknown encoding: {encoding}"))
}

/// Builds the host object: `cwd`, `log`, `random*`, `hash`, `encode`, `decode`, `fs*`.
pub(super) fn host_api<'js>(ctx: &Ctx<'js>, core: Arc<HostCore>) -> rquickjs::Result<Object<'js>> {
    let host = Object::new(ctx.clone())?;
    host.set("cwd", core.root.to_string_lossy().into_owned())?;

    host.set(
        "log",
        Function::new(ctx.clone(), |level: String, message: String| {
            const T: &str = "babysitter::process";
            match level.as_str() {
                "error" => tracing::error!(target: T, "{message}"),
                "warn" => tracing::warn!(target: T, "{message}"),
                "debug" => tracing::debug!(target: T, "{message}"),
                "trace" => tracing::trace!(target: T, "{message}"),
                _ => tracing::info!(target: T, "{message}"),
            }
        })?,
    )?;

    let c = core.clone();
    host.set(
        "random",
        Function::new(ctx.clone(), move || {
            // 53 random bits → [0, 1)
            (c.next_random() >> 11) as f64 / (1u64 << 53) as f64
        })?,
    )?;
    let c = core.clone();
    host.set(
        "randomBytes",
        Function::new(ctx.clone(), move |ctx: Ctx<'js>, n: f64| {
            if !(0.0..=65536.0).contains(&n) || n.fract() != 0.0 {
                return Err(type_error(
                    &ctx,
                    "the byte count must be an integer in 0..=65536",
                ));
            }
            let n = n as usize;
            let mut out = Vec::with_capacity(n + 8);
            while out.len() < n {
                out.extend_from_slice(&c.next_random().to_le_bytes());
            }
            out.truncate(n);
            Ok(out)
        })?,
    )?;
    let c = core.clone();
    host.set(
        "randomUUID",
        Function::new(ctx.clone(), move || {
            let mut b = [0u8; 16];
            b[..8].copy_from_slice(&c.next_random().to_le_bytes());
            b[8..].copy_from_slice(&c.next_random().to_le_bytes());
            b[6] = (b[6] & 0x0F) | 0x40;
            b[8] = (b[8] & 0x3F) | 0x80;
            let h = hex::encode(b);
            format!(
                "{}-{}-{}-{}-{}",
                &h[..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..]
            )
        })?,
    )?;

    host.set(
        "hash",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, alg: String, parts: Vec<Value<'js>>| {
            let bytes = parts
                .into_iter()
                .map(|p| bytes_of(&ctx, p))
                .collect::<rquickjs::Result<Vec<_>>>()?;
            digest(&alg, &bytes).ok_or_else(|| {
                let message = format!(
                    "Digest method not supported: '{alg}' is not available in the embedded engine (supported: {HASHES})"
                );
                throw_coded(&ctx, "ERR_CRYPTO_INVALID_DIGEST", &message)
            })
        })?,
    )?;
    host.set(
        "encode",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, bytes: Value<'js>, enc: String| {
                let bytes = bytes_of(&ctx, bytes)?;
                encode(&bytes, &enc).ok_or_else(|| unknown_encoding(&ctx, &enc))
            },
        )?,
    )?;
    host.set(
        "decode",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, text: String, enc: String| {
            decode(&text, &enc).ok_or_else(|| unknown_encoding(&ctx, &enc))
        })?,
    )?;

    install_fs(ctx, &host, core)?;
    Ok(host)
}

/// `fsRead(path, encoding?)`, `fsExists(path)`, `fsReaddir(path)`, `fsStat(path, follow)`.
fn install_fs<'js>(
    ctx: &Ctx<'js>,
    host: &Object<'js>,
    core: Arc<HostCore>,
) -> rquickjs::Result<()> {
    let c = core.clone();
    host.set(
        "fsRead",
        Function::new(
            ctx.clone(),
            move |ctx: Ctx<'js>,
                  path: String,
                  enc: Opt<Option<String>>|
                  -> rquickjs::Result<Value<'js>> {
                let real = c
                    .fs_path(&path)
                    .map_err(|f| fs_throw(&ctx, "open", &path, f))?;
                let bytes = std::fs::read(&real)
                    .map_err(|e| fs_throw(&ctx, "read", &path, io_failure(&e)))?;
                match enc.0.flatten() {
                    None => bytes.into_js(&ctx),
                    Some(enc) => encode(&bytes, &enc)
                        .ok_or_else(|| unknown_encoding(&ctx, &enc))?
                        .into_js(&ctx),
                }
            },
        )?,
    )?;
    let c = core.clone();
    host.set(
        "fsExists",
        Function::new(ctx.clone(), move |path: String| c.fs_path(&path).is_ok())?,
    )?;
    let c = core.clone();
    host.set(
        "fsReaddir",
        Function::new(
            ctx.clone(),
            move |ctx: Ctx<'js>, path: String| -> rquickjs::Result<Array<'js>> {
                let real = c
                    .fs_path(&path)
                    .map_err(|f| fs_throw(&ctx, "scandir", &path, f))?;
                let read = std::fs::read_dir(&real)
                    .map_err(|e| fs_throw(&ctx, "scandir", &path, io_failure(&e)))?;
                let mut entries = Vec::new();
                for entry in read {
                    let entry =
                        entry.map_err(|e| fs_throw(&ctx, "scandir", &path, io_failure(&e)))?;
                    let kind = match entry.file_type() {
                        Ok(t) if t.is_symlink() => "symlink",
                        Ok(t) if t.is_dir() => "dir",
                        Ok(t) if t.is_file() => "file",
                        _ => "other",
                    };
                    entries.push((entry.file_name().to_string_lossy().into_owned(), kind));
                }
                // the OS order is arbitrary; sorted names keep replays deterministic
                entries.sort();
                let out = Array::new(ctx.clone())?;
                for (i, (name, kind)) in entries.into_iter().enumerate() {
                    let o = Object::new(ctx.clone())?;
                    o.set("name", name)?;
                    o.set("kind", kind)?;
                    out.set(i, o)?;
                }
                Ok(out)
            },
        )?,
    )?;
    host.set(
        "fsStat",
        Function::new(
            ctx.clone(),
            move |ctx: Ctx<'js>,
                  path: String,
                  follow: Opt<bool>|
                  -> rquickjs::Result<Object<'js>> {
                let syscall = if follow.0 == Some(false) {
                    "lstat"
                } else {
                    "stat"
                };
                let real = core
                    .fs_path(&path)
                    .map_err(|f| fs_throw(&ctx, syscall, &path, f))?;
                let meta = if follow.0 == Some(false) {
                    // the link itself, once its target is known to be inside the root
                    let lexical = normalize_lexically(&core.root.join(&path));
                    std::fs::symlink_metadata(lexical)
                } else {
                    std::fs::metadata(&real)
                }
                .map_err(|e| fs_throw(&ctx, syscall, &path, io_failure(&e)))?;
                let kind = if meta.is_symlink() {
                    "symlink"
                } else if meta.is_dir() {
                    "dir"
                } else if meta.is_file() {
                    "file"
                } else {
                    "other"
                };
                let mtime_ms = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0.0, |d| d.as_secs_f64() * 1000.0);
                let o = Object::new(ctx.clone())?;
                o.set("kind", kind)?;
                o.set("size", meta.len() as f64)?;
                o.set("mtimeMs", mtime_ms)?;
                Ok(o)
            },
        )?,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_base64_round_trips() {
        assert_eq!(base64_encode(b"", false), "");
        assert_eq!(base64_encode(b"f", false), "Zg==");
        assert_eq!(base64_encode(b"fo", false), "Zm8=");
        assert_eq!(base64_encode(b"foo", false), "Zm9v");
        assert_eq!(base64_encode(&[0xfb, 0xff], true), "-_8");
        for data in [&b"hello world"[..], &[0, 1, 2, 250, 251, 252, 253]] {
            assert_eq!(base64_decode(&base64_encode(data, false)).unwrap(), data);
            assert_eq!(base64_decode(&base64_encode(data, true)).unwrap(), data);
        }
    }
}
