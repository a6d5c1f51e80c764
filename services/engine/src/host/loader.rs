//! Module resolution and loading, confined to the process root (the project a process belongs
//! to: see `engine::process_file::process_root`), so library processes can share helper modules
//! the way babysitter's library does (`../common-utilities/…`) while nothing outside the project
//! (a symlink included) is loaded.
//!
//! Module names are what QuickJS caches modules by and what stack traces show: a file module is
//! named by its canonical path relative to the process root (`lib/util.js`), so names (and the
//! stacks that end up in journals) do not depend on where the project sits on disk. Built-in
//! modules keep their specifier (`@a5c-ai/babysitter-sdk`), Node shims their `node:` name.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use rquickjs::loader::{ImportAttributes, Loader, Resolver};
use rquickjs::module::Declared;
use rquickjs::{Ctx, Exception, Module};

use super::{HostCore, HostError, slot};

/// Node built-ins the host shims: accepted specifiers → module name.
const NODE_ALIASES: &[(&str, &str)] = &[
    ("path", "node:path"),
    ("path/posix", "node:path"),
    ("url", "node:url"),
    ("crypto", "node:crypto"),
    ("fs", "node:fs"),
    ("fs/promises", "node:fs/promises"),
];

/// Shim module names (their sources live with the precompiled bundle).
const SHIMS: &[&str] = &[
    "node:path",
    "node:url",
    "node:crypto",
    "node:fs",
    "node:fs/promises",
];

/// Why an import failed: a Node-style error code and the message.
pub(super) struct ImportFailure {
    code: &'static str,
    message: String,
}

/// Removes `.` and `..` components without touching the file system (`..` stops at `/`).
pub(super) fn normalize_lexically(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// `file://` URL of an absolute path, percent-encoding everything outside the URL path set.
pub(super) fn file_url(path: &Path) -> String {
    let mut url = String::from("file://");
    for byte in path.to_string_lossy().bytes() {
        let keep = byte.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&byte);
        if keep {
            url.push(char::from(byte));
        } else {
            url.push_str(&format!("%{byte:02X}"));
        }
    }
    url
}

impl HostCore {
    /// Root-relative, `/`-separated name of a canonical path inside the root.
    fn module_name(&self, canonical: &Path) -> Option<String> {
        let rel = canonical.strip_prefix(&self.root).ok()?;
        let parts: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
        Some(parts?.join("/"))
    }

    /// The module name of an entry file given relative to the root (or absolute inside it).
    pub(super) fn entry_name(&self, rel_path: &str) -> Result<String, HostError> {
        let joined = self.root.join(rel_path);
        let canonical = joined.canonicalize().map_err(|source| HostError::Io {
            path: joined.clone(),
            source,
        })?;
        let load_error = |message: &str| HostError::Load {
            path: rel_path.to_owned(),
            message: message.to_owned(),
        };
        if !canonical.starts_with(&self.root) {
            return Err(load_error("it is outside the process root"));
        }
        if !canonical.is_file() {
            return Err(load_error("it is not a file"));
        }
        self.module_name(&canonical)
            .ok_or_else(|| load_error("its path is not valid utf-8"))
    }

    /// How an importer is shown in errors.
    fn importer_label(base: &str) -> &str {
        if base.is_empty() { "<engine>" } else { base }
    }

    /// Resolves `spec` imported from the module named `base` to a module name.
    pub(super) fn resolve_import(&self, base: &str, spec: &str) -> Result<String, ImportFailure> {
        let is_path = spec.starts_with("./")
            || spec.starts_with("../")
            || spec == "."
            || spec == ".."
            || spec.starts_with('/')
            || spec.starts_with("file:");
        if is_path {
            return self.resolve_file(base, spec);
        }
        if self.builtins.contains_key(spec) {
            return Ok(spec.to_owned());
        }
        let bare = spec.strip_prefix("node:").unwrap_or(spec);
        if let Some((_, name)) = NODE_ALIASES.iter().find(|(alias, _)| *alias == bare) {
            return Ok((*name).to_owned());
        }
        Err(ImportFailure {
            code: "ERR_MODULE_NOT_FOUND",
            message: format!(
                "Cannot import module '{spec}' from '{}': not available in the embedded engine",
                Self::importer_label(base)
            ),
        })
    }

    fn resolve_file(&self, base: &str, spec: &str) -> Result<String, ImportFailure> {
        let importer = Self::importer_label(base);
        let escapes = || ImportFailure {
            code: "ERR_ACCESS_DENIED",
            message: format!("import of '{spec}' from '{importer}' escapes the process root"),
        };
        let target = match spec.strip_prefix("file://") {
            Some(url) => PathBuf::from(percent_decode(url).ok_or_else(|| ImportFailure {
                code: "ERR_INVALID_URL",
                message: format!("invalid file url '{spec}' imported from '{importer}'"),
            })?),
            None => {
                let dir = match self.file(base) {
                    Some(file) => file.parent().unwrap_or(&self.root).to_path_buf(),
                    None => self.root.clone(),
                };
                dir.join(spec)
            }
        };
        let target = normalize_lexically(&target);
        if !target.starts_with(&self.root) {
            return Err(escapes());
        }
        let has_extension = Path::new(spec)
            .file_name()
            .is_some_and(|n| Path::new(n).extension().is_some());
        let mut candidates = vec![target.clone()];
        if !has_extension {
            let raw = target.as_os_str().to_owned();
            for suffix in [".js", ".mjs", "/index.js"] {
                let mut with = raw.clone();
                with.push(suffix);
                candidates.push(PathBuf::from(with));
            }
        }
        for candidate in candidates {
            if !candidate.is_file() {
                continue;
            }
            let Ok(canonical) = candidate.canonicalize() else {
                continue;
            };
            if !canonical.starts_with(&self.root) {
                return Err(escapes());
            }
            let Some(name) = self.module_name(&canonical) else {
                continue;
            };
            self.add_file(name.clone(), canonical);
            return Ok(name);
        }
        Err(ImportFailure {
            code: "ERR_MODULE_NOT_FOUND",
            message: format!("Cannot find module '{spec}' imported from '{importer}'"),
        })
    }
}

/// Decodes `%XX` escapes; `None` when an escape is malformed or the result is not utf-8.
pub(super) fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Throws a JS `Error` with `code` and `message`; returns the error to hand back to rquickjs.
pub(super) fn throw_coded(ctx: &Ctx<'_>, code: &str, message: &str) -> rquickjs::Error {
    match Exception::from_message(ctx.clone(), message) {
        Ok(exception) => match exception.as_object().set("code", code) {
            Ok(()) => exception.throw(),
            Err(e) => e,
        },
        Err(e) => e,
    }
}

/// The runtime's resolver: relative files inside the root, built-ins, Node shims.
pub(super) struct HostResolver {
    core: Arc<HostCore>,
}

impl HostResolver {
    pub(super) fn new(core: Arc<HostCore>) -> Self {
        Self { core }
    }
}

impl Resolver for HostResolver {
    fn resolve<'js>(
        &mut self,
        ctx: &Ctx<'js>,
        base: &str,
        name: &str,
        _attributes: Option<ImportAttributes<'js>>,
    ) -> rquickjs::Result<String> {
        self.core
            .resolve_import(base, name)
            .map_err(|failure| throw_coded(ctx, failure.code, &failure.message))
    }
}

/// The runtime's loader for the names [`HostResolver`] produces.
pub(super) struct HostLoader {
    core: Arc<HostCore>,
}

impl HostLoader {
    pub(super) fn new(core: Arc<HostCore>) -> Self {
        Self { core }
    }

    fn load_file<'js>(
        &self,
        ctx: &Ctx<'js>,
        name: &str,
        path: &Path,
    ) -> rquickjs::Result<Module<'js, Declared>> {
        let fail = |message: String| throw_coded(ctx, "ERR_MODULE_NOT_FOUND", &message);
        let bytes =
            std::fs::read(path).map_err(|e| fail(format!("Cannot load module '{name}': {e}")))?;
        self.core.record_loaded(name, path, &bytes);
        let text = String::from_utf8(bytes)
            .map_err(|e| fail(format!("Cannot load module '{name}': {e}")))?;
        let source = if path.extension().is_some_and(|e| e == "json") {
            if let Err(e) = serde_json::from_str::<serde_json::Value>(&text) {
                return Err(fail(format!(
                    "Cannot load module '{name}': invalid json: {e}"
                )));
            }
            let literal = serde_json::to_string(&text)
                .map_err(|e| fail(format!("Cannot load module '{name}': {e}")))?;
            format!("export default JSON.parse({literal});\n")
        } else {
            text
        };
        let module = Module::declare(ctx.clone(), name, source)?;
        let meta = module.meta()?;
        meta.set("url", file_url(path))?;
        meta.set("filename", path.to_string_lossy().into_owned())?;
        if let Some(dir) = path.parent() {
            meta.set("dirname", dir.to_string_lossy().into_owned())?;
        }
        Ok(module)
    }
}

impl Loader for HostLoader {
    fn load<'js>(
        &mut self,
        ctx: &Ctx<'js>,
        name: &str,
        _attributes: Option<ImportAttributes<'js>>,
    ) -> rquickjs::Result<Module<'js, Declared>> {
        let file = self.core.file(name);
        if let Some(path) = file {
            return self.load_file(ctx, name, &path);
        }
        if let Some(source) = self.core.builtins.get(name) {
            let module = super::precompiled::declare(ctx, name, source)?;
            if let Some(engine) = slot::<rquickjs::Object>(ctx, "engine")? {
                module.meta()?.set("engine", engine)?;
            }
            return Ok(module);
        }
        if let Some(source) = SHIMS
            .contains(&name)
            .then(|| super::precompiled::source_of(name))
            .flatten()
        {
            let module = super::precompiled::declare(ctx, name, source)?;
            if let Some(host) = slot::<rquickjs::Object>(ctx, "host")? {
                module.meta()?.set("host", host)?;
            }
            return Ok(module);
        }
        Err(throw_coded(
            ctx,
            "ERR_MODULE_NOT_FOUND",
            &format!("Cannot load module '{name}': not available in the embedded engine"),
        ))
    }
}
