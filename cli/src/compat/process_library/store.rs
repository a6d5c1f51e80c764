//! The process library on disk, as the reference keeps it (`processLibrary/active.ts`): a git
//! clone (default `<stateDir>/process-library/babysitter-repo`, the processes under `library/`)
//! and the bindings file `<stateDir>/active/process-library.json` naming which directory is
//! active by default, per run and per session:
//!
//! ```json
//! {"version": 1, "updatedAt": "…", "runBindings": {"<runId>": <binding>},
//!  "sessionBindings": {"<sessionId>": <binding>}, "defaultBinding": <binding>}
//! ```
//!
//! with a binding `{dir, repoUrl?, ref?, revision?, boundAt}`. The file is read as a JSON
//! object and rewritten whole (key order kept, unknown keys kept), atomically — the reference
//! writes it in place. `<stateDir>` is `--state-dir`, else `BABYSITTER_GLOBAL_STATE_DIR`, else
//! `~/.a5c`. Git runs as the `git` binary, as in the reference.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use babysitter_common::EnvMap;
use serde_json::{Map, Value, json};

use crate::compat::paths::{self, resolve};
use babysitter_journal::journal::now_iso;

use crate::compat::session::file::write_file_atomic;

const STATE_FILE: &str = "process-library.json";
const DEFAULT_REPO: &str = "https://github.com/a5c-ai/babysitter.git";
const DEFAULT_SUBPATH: &str = "library";
const DEFAULT_REFERENCE_SUBPATH: &str = "plugins/babysitter/reference";

/// Where the library and its state live for one command (the reference's inputs: `--state-dir`,
/// the environment, the working directory).
pub struct Store<'a> {
    pub env: &'a EnvMap,
    pub cwd: &'a Path,
    pub state_dir_flag: Option<&'a str>,
}

/// The default library (`getDefaultProcessLibrarySpec`).
pub struct Spec {
    pub state_dir: PathBuf,
    pub repo: String,
    pub r#ref: Option<String>,
    pub clone_dir: PathBuf,
    pub process_root: PathBuf,
    pub reference_root: PathBuf,
}

impl Spec {
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("stateDir".into(), path_json(&self.state_dir));
        m.insert("repo".into(), json!(self.repo));
        if let Some(r) = &self.r#ref {
            m.insert("ref".into(), json!(r));
        }
        m.insert("cloneDir".into(), path_json(&self.clone_dir));
        m.insert("processRoot".into(), path_json(&self.process_root));
        m.insert("referenceRoot".into(), path_json(&self.reference_root));
        Value::Object(m)
    }
}

/// A resolved binding: `{stateFile, bindingScope, bindingKey?, binding}`.
pub struct Resolved {
    pub state_file: PathBuf,
    /// `default`, `run`, `session`, `run+session` (from a bind), or `None`.
    pub scope: Option<&'static str>,
    pub key: Option<String>,
    /// The binding as stored (its keys in file order), or `None`.
    pub binding: Option<Value>,
}

impl Resolved {
    pub fn to_json(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("stateFile".into(), path_json(&self.state_file));
        m.insert("bindingScope".into(), json!(self.scope));
        if let Some(k) = &self.key {
            m.insert("bindingKey".into(), json!(k));
        }
        m.insert(
            "binding".into(),
            self.binding.clone().unwrap_or(Value::Null),
        );
        m
    }

    /// The bound directory, when the binding names one.
    pub fn dir(&self) -> Option<&str> {
        self.binding.as_ref()?.get("dir")?.as_str()
    }
}

/// Which run / session a command binds or resolves for.
#[derive(Clone, Copy, Default)]
pub struct Scope<'a> {
    pub run_id: Option<&'a str>,
    pub session_id: Option<&'a str>,
}

fn path_json(p: &Path) -> Value {
    json!(p.display().to_string())
}

fn split_subpath(value: &str) -> PathBuf {
    value
        .split(['/', '\\'])
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

impl Store<'_> {
    fn non_empty(&self, name: &str) -> Option<String> {
        self.env
            .get(name)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    }

    pub fn state_dir(&self) -> PathBuf {
        match self.state_dir_flag {
            // The reference resolves the flag as given (untrimmed) when it is not blank.
            Some(flag) if !flag.trim().is_empty() => resolve(self.cwd, flag),
            _ => paths::global_state_root(self.env, self.cwd),
        }
    }

    /// `path.resolve(p)` against the working directory.
    pub fn resolve(&self, p: &str) -> PathBuf {
        resolve(self.cwd, p)
    }

    /// The default library: `repo` / `ref` / `clone_dir` override the environment
    /// (`BABYSITTER_PROCESS_LIBRARY_REPO|REF|SUBPATH|REFERENCE_SUBPATH`) and the defaults.
    pub fn spec(&self, repo: Option<&str>, r#ref: Option<&str>, clone_dir: Option<&str>) -> Spec {
        let state_dir = self.state_dir();
        let trimmed = |v: Option<&str>| {
            v.map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        let repo = trimmed(repo)
            .or_else(|| self.non_empty("BABYSITTER_PROCESS_LIBRARY_REPO"))
            .unwrap_or_else(|| DEFAULT_REPO.to_owned());
        let r#ref = trimmed(r#ref).or_else(|| self.non_empty("BABYSITTER_PROCESS_LIBRARY_REF"));
        let clone_dir = match trimmed(clone_dir) {
            Some(d) => self.resolve(&d),
            None => state_dir.join("process-library").join("babysitter-repo"),
        };
        let sub = self
            .non_empty("BABYSITTER_PROCESS_LIBRARY_SUBPATH")
            .unwrap_or_else(|| DEFAULT_SUBPATH.to_owned());
        let reference_sub = self
            .non_empty("BABYSITTER_PROCESS_LIBRARY_REFERENCE_SUBPATH")
            .unwrap_or_else(|| DEFAULT_REFERENCE_SUBPATH.to_owned());
        Spec {
            process_root: paths::normalize(&clone_dir.join(split_subpath(&sub))),
            reference_root: paths::normalize(&clone_dir.join(split_subpath(&reference_sub))),
            state_dir,
            repo,
            r#ref,
            clone_dir,
        }
    }

    pub fn state_file(&self) -> PathBuf {
        self.state_dir().join("active").join(STATE_FILE)
    }

    /// The bindings file as a JSON object; a fresh one when there is none.
    fn read_state(&self) -> Result<Map<String, Value>, String> {
        let path = self.state_file();
        match crate::compat::json_file::read_object(&path) {
            Ok(Some(m)) => Ok(m),
            Ok(None) => {
                let mut m = Map::new();
                m.insert("version".into(), json!(1));
                m.insert("updatedAt".into(), json!(now_iso()));
                m.insert("runBindings".into(), json!({}));
                m.insert("sessionBindings".into(), json!({}));
                Ok(m)
            }
            Err(e) => Err(format!("process-library state file: {e}")),
        }
    }

    /// `resolveActiveProcessLibrary`: the run's binding, else the session's, else the default.
    pub fn resolve_active(&self, scope: Scope<'_>) -> Result<Resolved, String> {
        let state_file = self.state_file();
        let state = self.read_state()?;
        let lookup = |table: &str, key: Option<&str>| {
            let key = key?;
            state
                .get(table)?
                .get(key)
                .filter(|b| crate::compat::output::js_truthy(b))
                .map(|b| (key.to_owned(), b.clone()))
        };
        if let Some((key, binding)) = lookup("runBindings", scope.run_id) {
            return Ok(Resolved {
                state_file,
                scope: Some("run"),
                key: Some(key),
                binding: Some(binding),
            });
        }
        if let Some((key, binding)) = lookup("sessionBindings", scope.session_id) {
            return Ok(Resolved {
                state_file,
                scope: Some("session"),
                key: Some(key),
                binding: Some(binding),
            });
        }
        let default = state
            .get("defaultBinding")
            .filter(|b| crate::compat::output::js_truthy(b))
            .cloned();
        Ok(Resolved {
            state_file,
            scope: default.as_ref().map(|_| "default"),
            key: None,
            binding: default,
        })
    }

    /// `bindActiveProcessLibrary`: binds `dir` (which must exist) for the run and / or session,
    /// else as the default.
    pub fn bind(
        &self,
        dir: &str,
        r#ref: Option<&str>,
        scope: Scope<'_>,
    ) -> Result<Resolved, String> {
        let dir = existing_dir(&self.resolve(dir))?;
        let mut state = self.read_state()?;
        let meta = git_metadata(&dir);
        let mut binding = Map::new();
        binding.insert("dir".into(), path_json(&dir));
        if let Some(u) = meta.repo_url {
            binding.insert("repoUrl".into(), json!(u));
        }
        if let Some(r) = r#ref.filter(|r| !r.is_empty()) {
            binding.insert("ref".into(), json!(r));
        }
        if let Some(r) = meta.revision {
            binding.insert("revision".into(), json!(r));
        }
        binding.insert("boundAt".into(), json!(now_iso()));
        let binding = Value::Object(binding);
        let mut set = |table: &str, key: &str| {
            let entry = state.entry(table).or_insert_with(|| json!({}));
            if !entry.is_object() {
                *entry = json!({});
            }
            if let Some(m) = entry.as_object_mut() {
                m.insert(key.to_owned(), binding.clone());
            }
        };
        let (scope_name, key) = match (scope.run_id, scope.session_id) {
            (Some(run), Some(session)) => {
                set("runBindings", run);
                set("sessionBindings", session);
                ("run+session", Some(format!("{run}:{session}")))
            }
            (Some(run), None) => {
                set("runBindings", run);
                ("run", Some(run.to_owned()))
            }
            (None, Some(session)) => {
                set("sessionBindings", session);
                ("session", Some(session.to_owned()))
            }
            (None, None) => {
                state.insert("defaultBinding".into(), binding.clone());
                ("default", None)
            }
        };
        state.insert("updatedAt".into(), json!(now_iso()));
        let state_file = self.state_file();
        let text = crate::compat::output::pretty(&Value::Object(state));
        write_file_atomic(&state_file, &text)?;
        Ok(Resolved {
            state_file,
            scope: Some(scope_name),
            key,
            binding: Some(binding),
        })
    }
}

/// `ensureDirectoryExists`.
pub fn existing_dir(dir: &Path) -> Result<PathBuf, String> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(dir.to_path_buf()),
        Ok(_) => Err(format!(
            "Process-library path is not a directory: {}",
            dir.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "Process-library directory not found: {}",
            dir.display()
        )),
        Err(e) => Err(crate::compat::output::io_message("stat", dir, &e)),
    }
}

fn exists(p: &Path) -> bool {
    p.try_exists().unwrap_or(false)
}

/// `assertSafeGitRef`: letters, digits and `/._-`; no leading `-`, no `..`, no `@{`.
pub fn check_ref(r: &str) -> Result<(), String> {
    let bad = r.is_empty()
        || r.starts_with('-')
        || r.contains("..")
        || r.contains("@{")
        || !r
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c));
    if bad {
        Err(format!("Invalid process-library git ref: {r}"))
    } else {
        Ok(())
    }
}

/// Runs `git <args>` (in `cwd`); its stdout, or the reference's `Command failed: …` message.
fn git(args: &[&str], cwd: Option<&Path>) -> Result<String, String> {
    let mut c = Command::new("git");
    c.args(args)
        .stdin(Stdio::null())
        // Never wait on a credential prompt: the CLI runs under agents with nobody to answer.
        .env("GIT_TERMINAL_PROMPT", "0");
    if let Some(d) = cwd {
        c.current_dir(d);
    }
    let out = c.output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "spawn git ENOENT".to_owned(),
        _ => format!("spawn git: {e}"),
    })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "Command failed: git {}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

struct GitMeta {
    repo_url: Option<String>,
    revision: Option<String>,
}

fn git_metadata(dir: &Path) -> GitMeta {
    let get = |args: &[&str]| {
        git(args, Some(dir))
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    };
    GitMeta {
        repo_url: get(&["config", "--get", "remote.origin.url"]),
        revision: get(&["rev-parse", "HEAD"]),
    }
}

/// `cloneProcessLibrary`: a shallow clone of `repo` (at `ref`) into `dir`, which must not exist.
/// Returns `{dir, repo, ref?, revision}`.
pub fn clone(repo: &str, dir: &Path, r#ref: Option<&str>) -> Result<Value, String> {
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| crate::compat::output::io_message("mkdir", parent, &e))?;
    }
    if exists(dir) {
        return Err(format!(
            "Process-library directory already exists at {}. Choose a new --dir or update it instead.",
            dir.display()
        ));
    }
    let dir_text = dir.display().to_string();
    let mut args = vec!["clone", "--depth", "1"];
    if let Some(r) = r#ref {
        check_ref(r)?;
        args.extend(["--branch", r]);
    }
    // `--`: a repository argument starting with `-` is never an option.
    args.extend(["--", repo, &dir_text]);
    if let Err(e) = git(&args, None) {
        let _ = std::fs::remove_dir_all(dir);
        return Err(e);
    }
    let revision = git_metadata(dir)
        .revision
        .ok_or_else(|| format!("Unable to determine cloned revision for {dir_text}"))?;
    let mut m = Map::new();
    m.insert("dir".into(), json!(dir_text));
    m.insert("repo".into(), json!(repo));
    if let Some(r) = r#ref {
        m.insert("ref".into(), json!(r));
    }
    m.insert("revision".into(), json!(revision));
    Ok(Value::Object(m))
}

/// `updateProcessLibrary`: `git pull --ff-only`, or fetch and check out `ref`. Returns
/// `{dir, repo?, ref?, revision}`.
pub fn update(dir: &Path, r#ref: Option<&str>) -> Result<Value, String> {
    let dir = existing_dir(dir)?;
    match r#ref {
        Some(r) => {
            check_ref(r)?;
            git(&["fetch", "--depth", "1", "origin", r], Some(&dir))?;
            git(&["checkout", "--force", "FETCH_HEAD"], Some(&dir))?;
        }
        None => {
            git(&["pull", "--ff-only"], Some(&dir))?;
        }
    }
    let meta = git_metadata(&dir);
    let revision = meta
        .revision
        .ok_or_else(|| format!("Unable to determine updated revision for {}", dir.display()))?;
    let mut m = Map::new();
    m.insert("dir".into(), path_json(&dir));
    if let Some(u) = meta.repo_url {
        m.insert("repo".into(), json!(u));
    }
    if let Some(r) = r#ref {
        m.insert("ref".into(), json!(r));
    }
    m.insert("revision".into(), json!(revision));
    Ok(Value::Object(m))
}

/// `ensureActiveProcessLibrary`: the active binding when its directory exists; else the
/// default library is cloned (or updated) and bound. Returns `{…resolved, bootstrapped,
/// defaultSpec}`.
pub fn ensure_active(
    store: &Store<'_>,
    scope: Scope<'_>,
    r#ref: Option<&str>,
) -> Result<Map<String, Value>, String> {
    let spec = store.spec(None, r#ref, None);
    let resolved = store.resolve_active(scope)?;
    if resolved.dir().is_some_and(|d| exists(&store.resolve(d))) {
        let mut out = resolved.to_json();
        out.insert("bootstrapped".into(), json!(false));
        out.insert("defaultSpec".into(), spec.to_json());
        return Ok(out);
    }
    let spec_ref = spec.r#ref.as_deref();
    if exists(&spec.clone_dir.join(".git")) {
        update(&spec.clone_dir, spec_ref)?;
    } else {
        clone(&spec.repo, &spec.clone_dir, spec_ref)?;
    }
    let root = spec.process_root.display().to_string();
    let mut bound = store.bind(&root, spec_ref, scope)?;
    // A bootstrap for a run and a session reports the run's scope (as the reference).
    if bound.scope == Some("run+session") {
        bound.scope = Some("run");
    }
    let mut out = bound.to_json();
    out.insert("bootstrapped".into(), json!(true));
    out.insert("defaultSpec".into(), spec.to_json());
    Ok(out)
}

/// The active library's directory (`getActiveProcessLibraryPath`): the bound directory when it
/// exists, else the default clone's processes when present.
pub fn active_path(store: &Store<'_>, scope: Scope<'_>) -> Option<PathBuf> {
    match store.resolve_active(scope) {
        Ok(r) => {
            if let Some(dir) = r.dir().map(|d| store.resolve(d)).filter(|d| exists(d)) {
                return Some(dir);
            }
        }
        Err(e) => {
            errln!("[babysitter] active process library resolution failed, using default: {e}")
        }
    }
    let spec = store.spec(None, None, None);
    exists(&spec.process_root).then_some(spec.process_root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_are_checked_like_the_reference() {
        for ok in ["main", "v1.2.3", "feature/x_y-z"] {
            assert!(check_ref(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-x", "a..b", "a@{1}", "a\\b", "a b", "a;rm"] {
            assert!(check_ref(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn spec_follows_flags_then_environment() {
        let env: EnvMap = [
            ("HOME", "/home/u"),
            ("BABYSITTER_PROCESS_LIBRARY_SUBPATH", "a//b"),
        ]
        .into_iter()
        .collect();
        let cwd = Path::new("/work");
        let store = Store {
            env: &env,
            cwd,
            state_dir_flag: Some("st"),
        };
        let spec = store.spec(Some(" r "), None, None);
        assert_eq!(spec.repo, "r");
        assert_eq!(
            spec.clone_dir,
            Path::new("/work/st/process-library/babysitter-repo")
        );
        assert_eq!(
            spec.process_root,
            Path::new("/work/st/process-library/babysitter-repo/a/b")
        );
        assert_eq!(
            spec.to_json()["referenceRoot"],
            "/work/st/process-library/babysitter-repo/plugins/babysitter/reference"
        );
        assert!(spec.to_json().get("ref").is_none());
    }
}
