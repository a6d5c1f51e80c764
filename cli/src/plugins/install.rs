//! Installing a harness's bundle where that harness looks for it, recording exactly what was
//! written, and removing exactly that again (`harness:install-plugin`, `plugin:uninstall`,
//! `plugin:list-installed`).
//!
//! An install is a set of files written atomically plus, for Claude Code and Codex, the
//! harness's own registration (`claude plugin marketplace add` / `claude plugin install`,
//! `codex plugin marketplace add` / `codex plugin add`: the only supported way to enable a
//! plugin there; the bundle is a one-plugin local marketplace). Codex keeps plugins in the
//! user's configuration, so its registration is the user's in either scope. Every install is recorded in `<base>/.a5c/plugins/installed.json`
//! (`<base>` is the project for `--project`, the home directory for `--user`) with the files it
//! wrote, so a second install is a no-op that says so, an update rewrites only what changed, and
//! an uninstall deletes those files and nothing else. A file already there that the plugin did
//! not write is never overwritten: the install stops and names it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use super::bundle::{self, MARKETPLACE};
use super::harness::Harness;
use super::source::SourceError;

/// Where an install goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Project,
    User,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Project => "project",
            Scope::User => "user",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("{path}: {what}")]
    Io { path: PathBuf, what: String },
    #[error(
        "{path} exists and was not written by this plugin; move it away (or merge it by hand) and install again"
    )]
    Foreign { path: PathBuf },
    #[error("{0}")]
    Harness(String),
    #[error("{path}: the install record is unreadable ({what}); remove it to start over")]
    Record { path: PathBuf, what: String },
}

fn io(path: &Path, e: std::io::Error) -> InstallError {
    InstallError::Io {
        path: path.to_owned(),
        what: e.to_string(),
    }
}

/// One recorded install.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Installed {
    pub harness: String,
    pub scope: Scope,
    /// The bundle's directory.
    pub dir: PathBuf,
    /// Every file written, absolute.
    pub files: Vec<PathBuf>,
    /// The harness registration done (Claude Code: the marketplace and plugin names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub registered: Vec<String>,
    pub version: String,
    pub installed_at: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Record {
    installs: Vec<Installed>,
}

/// What an install did.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    pub harness: String,
    pub scope: Scope,
    pub dir: PathBuf,
    pub written: Vec<PathBuf>,
    pub unchanged: Vec<PathBuf>,
    pub registered: Vec<String>,
}

/// Where `h`'s bundle lives for a scope rooted at `base` (the project, or the home directory).
/// Gemini CLI loads extensions from the home directory only, so its bundle goes there in both
/// scopes.
pub fn target_dir(h: Harness, scope: Scope, base: &Path, home: &Path) -> PathBuf {
    match (h, scope) {
        (Harness::ClaudeCode | Harness::Codex, _) => base.join(".a5c/plugins").join(h.key()),
        (Harness::GeminiCli, _) => home.join(".gemini/extensions/babysitter"),
        (Harness::Cursor, _) => base.join(".cursor"),
        (Harness::OpenCode, Scope::Project) => base.join(".opencode"),
        (Harness::OpenCode, Scope::User) => base.join(".config/opencode"),
        (Harness::Pi, Scope::Project) => base.join(".pi"),
        (Harness::Pi, Scope::User) => base.join(".pi/agent"),
    }
}

fn record_path(base: &Path) -> PathBuf {
    base.join(".a5c/plugins/installed.json")
}

fn read_record(base: &Path) -> Result<Record, InstallError> {
    let path = record_path(base);
    match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| InstallError::Record {
            path,
            what: e.to_string(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Record::default()),
        Err(e) => Err(io(&path, e)),
    }
}

fn write_record(base: &Path, r: &Record) -> Result<(), InstallError> {
    let path = record_path(base);
    let mut bytes = serde_json::to_vec_pretty(r).unwrap_or_default();
    bytes.push(b'\n');
    write_atomic(&path, &bytes, false)
}

/// Writes `path` whole (a temporary file renamed over it), 0755 or 0644, its directories made.
pub fn write_atomic(path: &Path, bytes: &[u8], executable: bool) -> Result<(), InstallError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    std::fs::write(&tmp, bytes).map_err(|e| io(&tmp, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = if executable { 0o755 } else { 0o644 };
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
            .map_err(|e| io(&tmp, e))?;
    }
    std::fs::rename(&tmp, path).map_err(|e| io(path, e))
}

/// Everything an install needs from its caller.
pub struct Request<'a> {
    pub harness: Harness,
    pub scope: Scope,
    /// The project directory, or the home directory.
    pub base: &'a Path,
    /// The user's home directory.
    pub home: &'a Path,
    /// The `babysitter` executable the hooks should call (recorded beside the shim).
    pub babysitter: Option<PathBuf>,
    /// The harness's executable, for harnesses registered through their own CLI.
    pub harness_bin: Option<PathBuf>,
    pub now: String,
}

/// How a harness that enables plugins through its own CLI is told about the bundle.
struct Registration {
    /// Run in order to register (the marketplace, then the plugin).
    add: Vec<Vec<String>>,
    /// Run before `add` when a changed bundle replaces a registered one (the harness caches
    /// the plugin at install time).
    refresh: Vec<Vec<String>>,
    /// Run in order to unregister.
    remove: Vec<Vec<String>>,
}

fn argv(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| (*s).to_owned()).collect()
}

fn registration(h: Harness, scope: Scope, dir: &Path) -> Option<Registration> {
    let plugin = format!("babysitter@{MARKETPLACE}");
    let dir = dir.to_string_lossy().into_owned();
    match h {
        Harness::ClaudeCode => Some(Registration {
            add: vec![
                argv(&["plugin", "marketplace", "add", &dir]),
                argv(&["plugin", "install", &plugin, "--scope", scope.as_str()]),
            ],
            refresh: vec![argv(&[
                "plugin",
                "uninstall",
                &plugin,
                "--scope",
                scope.as_str(),
            ])],
            remove: vec![
                argv(&["plugin", "uninstall", &plugin, "--scope", scope.as_str()]),
                argv(&["plugin", "marketplace", "remove", MARKETPLACE]),
            ],
        }),
        Harness::Codex => Some(Registration {
            add: vec![
                argv(&["plugin", "marketplace", "add", &dir]),
                argv(&["plugin", "add", &plugin]),
            ],
            refresh: vec![argv(&["plugin", "remove", &plugin])],
            remove: vec![
                argv(&["plugin", "remove", &plugin]),
                argv(&["plugin", "marketplace", "remove", MARKETPLACE]),
            ],
        }),
        _ => None,
    }
}

fn missing_cli(h: Harness) -> InstallError {
    InstallError::Harness(format!(
        "{} is registered through its own CLI and `{}` is not on PATH (or set {}_BIN); install {} first",
        h.label(),
        h.binary(),
        h.binary().to_uppercase(),
        h.label()
    ))
}

/// Installs `req.harness`'s bundle.
pub fn install(req: &Request<'_>) -> Result<Outcome, InstallError> {
    let h = req.harness;
    let dir = target_dir(h, req.scope, req.base, req.home);
    let reg = registration(h, req.scope, &dir);
    if reg.is_some() && req.harness_bin.is_none() {
        return Err(missing_cli(h));
    }
    let mut files: BTreeMap<String, bundle::BundleFile> = bundle::render(h)?;
    if let Some(bin) = &req.babysitter {
        let shim_dir = files
            .keys()
            .find(|p| p.ends_with("babysitter-hook.sh"))
            .and_then(|p| p.rsplit_once('/').map(|(d, _)| d.to_owned()));
        if let Some(d) = shim_dir {
            files.insert(
                format!("{d}/babysitter-bin"),
                bundle::BundleFile {
                    bytes: format!("{}\n", bin.display()).into_bytes(),
                    executable: false,
                },
            );
        }
    }
    let mut record = read_record(req.base)?;
    let previous = record
        .installs
        .iter()
        .position(|i| i.harness == h.key() && i.scope == req.scope);
    let owned: Vec<PathBuf> = previous
        .map(|i| record.installs[i].files.clone())
        .unwrap_or_default();
    // Check every file before writing any: a foreign file stops the whole install.
    let mut plan = Vec::new();
    for (rel, f) in &files {
        let path = dir.join(rel);
        match std::fs::read(&path) {
            Ok(existing) if existing == f.bytes => plan.push((path, f, false)),
            Ok(_) if owned.contains(&path) => plan.push((path, f, true)),
            Ok(_) => return Err(InstallError::Foreign { path }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => plan.push((path, f, true)),
            Err(e) => return Err(io(&path, e)),
        }
    }
    let mut out = Outcome {
        harness: h.key().to_owned(),
        scope: req.scope,
        dir: dir.clone(),
        written: Vec::new(),
        unchanged: Vec::new(),
        registered: Vec::new(),
    };
    for (path, f, write) in &plan {
        if *write {
            write_atomic(path, &f.bytes, f.executable)?;
            out.written.push(path.clone());
        } else {
            out.unchanged.push(path.clone());
        }
    }
    // Files of an earlier version that this one no longer has.
    let now_files: Vec<PathBuf> = plan.iter().map(|(p, _, _)| p.clone()).collect();
    for stale in owned.iter().filter(|p| !now_files.contains(p)) {
        remove_file(stale, req.base)?;
    }
    if let (Some(reg), Some(bin)) = (&reg, req.harness_bin.as_deref()) {
        if !out.written.is_empty() && previous.is_some() {
            for args in &reg.refresh {
                run(bin, req, args)?;
            }
        }
        for args in &reg.add {
            run(bin, req, args)?;
        }
        out.registered = vec![
            format!("marketplace {MARKETPLACE}"),
            format!("plugin babysitter@{MARKETPLACE}"),
        ];
    }
    let entry = Installed {
        harness: h.key().to_owned(),
        scope: req.scope,
        dir,
        files: now_files,
        registered: out.registered.clone(),
        version: super::source::Manifest::load()?.version,
        installed_at: req.now.clone(),
    };
    match previous {
        Some(i) => record.installs[i] = entry,
        None => record.installs.push(entry),
    }
    write_record(req.base, &record)?;
    Ok(out)
}

fn run(bin: &Path, req: &Request<'_>, args: &[String]) -> Result<(), InstallError> {
    let out = Command::new(bin)
        .args(args)
        .current_dir(req.base)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| InstallError::Harness(format!("cannot run {}: {e}", bin.display())))?;
    if out.status.success() {
        return Ok(());
    }
    Err(InstallError::Harness(format!(
        "`{} {}` failed ({}): {}",
        bin.display(),
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

fn remove_file(path: &Path, base: &Path) -> Result<(), InstallError> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(path, e)),
    }
    // Directories the plugin's files leave empty go too; a directory with anything else stays.
    // Never the base itself (the project or the home directory), nor anything above it.
    let mut dir = path.parent();
    while let Some(d) = dir {
        if !d.starts_with(base) || d == base || std::fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
    Ok(())
}

/// What an uninstall removed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Removed {
    pub harness: String,
    pub scope: Scope,
    pub removed: Vec<PathBuf>,
    pub unregistered: Vec<String>,
}

/// Removes exactly what the recorded install of `h` in `scope` wrote.
pub fn uninstall(req: &Request<'_>) -> Result<Option<Removed>, InstallError> {
    let h = req.harness;
    let mut record = read_record(req.base)?;
    let Some(i) = record
        .installs
        .iter()
        .position(|x| x.harness == h.key() && x.scope == req.scope)
    else {
        return Ok(None);
    };
    let entry = record.installs.remove(i);
    let mut unregistered = Vec::new();
    if !entry.registered.is_empty()
        && let Some(reg) = registration(h, req.scope, &entry.dir)
    {
        let bin = req.harness_bin.as_deref().ok_or_else(|| missing_cli(h))?;
        for args in &reg.remove {
            run(bin, req, args)?;
        }
        unregistered = entry.registered.clone();
    }
    for f in &entry.files {
        remove_file(f, req.base)?;
    }
    if record.installs.is_empty() {
        remove_file(&record_path(req.base), req.base)?;
    } else {
        write_record(req.base, &record)?;
    }
    Ok(Some(Removed {
        harness: entry.harness,
        scope: entry.scope,
        removed: entry.files,
        unregistered,
    }))
}

/// The recorded installs under `base`.
pub fn list(base: &Path) -> Result<Vec<Installed>, InstallError> {
    Ok(read_record(base)?.installs)
}
