//! Where runs live and how path arguments resolve (spec §1.1): the global runs root
//! (`~/.a5c/runs`, `BABYSITTER_GLOBAL_STATE_DIR`), the repo scope (`BABYSITTER_RUNS_SCOPE=repo`),
//! `BABYSITTER_RUNS_DIR` / `--runs-dir`, the readable roots, `<runDir>` lookup, input-path
//! resolution, and the run-relative POSIX paths babysitter stores. Paths are handled lexically
//! the way Node's `path.resolve` / `path.relative` do (no symlink resolution).

use std::path::{Path, PathBuf};

use babysitter_common::EnvMap;

/// Node's `path.resolve(base, p)`: `p` if absolute, else `base/p`, with `.` and `..` folded.
pub use babysitter_common::project::{normalize, resolve};

/// Node's `path.relative(from, to)` for absolute, normalised paths, with `/` separators.
pub fn relative_posix(from: &Path, to: &Path) -> String {
    let (from, to) = (normalize(from), normalize(to));
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = Vec::new();
    for _ in common..from.len() {
        parts.push("..".into());
    }
    for c in &to[common..] {
        parts.push(c.as_os_str().to_string_lossy().into_owned());
    }
    parts.join("/")
}

/// `.a5c/runs/.a5c/runs/` → `.a5c/runs/` and `.a5c/.a5c/` → `.a5c/` (the reference's
/// `collapseDoubledA5cRuns`).
pub fn collapse_doubled(p: &Path) -> PathBuf {
    let mut parts: Vec<String> = p
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    loop {
        let mut changed = false;
        let mut i = 0;
        while i + 3 < parts.len() {
            if parts[i] == ".a5c"
                && parts[i + 1] == "runs"
                && parts[i + 2] == ".a5c"
                && parts[i + 3] == "runs"
            {
                parts.drain(i + 2..i + 4);
                changed = true;
            } else {
                i += 1;
            }
        }
        // `.a5c/.a5c/` only when followed by another segment (the reference's pattern needs
        // the trailing separator).
        let mut i = 0;
        while i + 2 < parts.len() {
            if parts[i] == ".a5c" && parts[i + 1] == ".a5c" {
                parts.remove(i + 1);
                changed = true;
            } else {
                i += 1;
            }
        }
        if !changed {
            break;
        }
    }
    parts.iter().collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Global,
    Repo,
}

/// `BABYSITTER_RUNS_SCOPE`: `repo` (aliases `project`, `root`, `local`), anything else global.
pub fn runs_scope(env: &EnvMap) -> Scope {
    match env
        .get("BABYSITTER_RUNS_SCOPE")
        .map(|v| v.trim().to_lowercase())
        .as_deref()
    {
        Some("repo" | "project" | "root" | "local") => Scope::Repo,
        _ => Scope::Global,
    }
}

/// Every run directory (one holding `run.json`) under the readable runs roots of `primary`,
/// root by root, each root's in name order.
pub fn all_run_dirs(primary: &Path, cwd: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for root in readable_runs_dirs(primary, cwd) {
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.join("run.json").is_file())
            .collect();
        dirs.sort();
        out.extend(dirs);
    }
    out
}

/// The home directory as Node's `os.homedir()` finds it: `HOME` (resolved against the cwd),
/// else this user's passwd entry; `None` when there is neither.
pub fn home(env: &EnvMap, cwd: &Path) -> Option<PathBuf> {
    babysitter_common::project::home_dir(env.get("HOME"), cwd)
}

/// Per-user files an iteration reads or writes, under `~/.a5c` as babysitter keeps them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct UserFiles {
    /// Structured logs (`BABYSITTER_LOG_DIR`, else `~/.a5c/logs`).
    pub logs: Option<PathBuf>,
    /// Breakpoint auto-approval rules (`~/.a5c/breakpoint-approvals/rules.json`).
    pub breakpoint_rules: Option<PathBuf>,
}

impl UserFiles {
    /// Points an engine's per-user files here.
    pub fn apply_to(self, opts: &mut babysitter_engine::EngineOptions) {
        opts.process_log_dir = self.logs;
        opts.breakpoint_rules = self.breakpoint_rules;
    }

    pub fn of(env: &EnvMap, cwd: &Path) -> UserFiles {
        let home = home(env, cwd);
        UserFiles {
            logs: match env.get_non_empty("BABYSITTER_LOG_DIR") {
                Some(dir) => Some(resolve(cwd, dir)),
                None => home.as_ref().map(|h| h.join(".a5c").join("logs")),
            },
            breakpoint_rules: home.map(|h| {
                h.join(".a5c")
                    .join("breakpoint-approvals")
                    .join("rules.json")
            }),
        }
    }
}

/// `~/.a5c`, or `BABYSITTER_GLOBAL_STATE_DIR` (resolved against the cwd).
pub fn global_state_root(env: &EnvMap, cwd: &Path) -> PathBuf {
    match env.get_non_empty("BABYSITTER_GLOBAL_STATE_DIR") {
        Some(dir) => resolve(cwd, dir.trim()),
        None => {
            let home = env.get_non_empty("HOME").unwrap_or("/");
            resolve(cwd, home).join(".a5c")
        }
    }
}

fn present(p: &Path) -> bool {
    p.try_exists().unwrap_or(false)
}

/// The nearest ancestor of `start` holding `.git` or `.a5c`.
pub fn find_repo_root(start: &Path) -> Option<PathBuf> {
    babysitter_common::project::find_root(start)
}

pub fn repo_root(cwd: &Path) -> PathBuf {
    find_repo_root(cwd).unwrap_or_else(|| normalize(cwd))
}

/// The primary runs root: `--runs-dir` / `BABYSITTER_RUNS_DIR` (absolute as-is; relative against
/// the repo root in repo scope, else against the global state root), else the scope's default.
pub fn resolve_runs_dir(env: &EnvMap, cwd: &Path, override_dir: Option<&str>) -> PathBuf {
    let explicit = override_dir
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .or_else(|| env.get_non_empty("BABYSITTER_RUNS_DIR").map(str::trim));
    let scope = runs_scope(env);
    match explicit {
        Some(dir) if Path::new(dir).is_absolute() => normalize(Path::new(dir)),
        Some(dir) => {
            let base = match scope {
                Scope::Repo => repo_root(cwd),
                Scope::Global => global_state_root(env, cwd),
            };
            resolve(&base, dir)
        }
        None => match scope {
            Scope::Repo => repo_root(cwd).join(".a5c").join("runs"),
            Scope::Global => global_state_root(env, cwd).join("runs"),
        },
    }
}

/// Where runs are looked up, in order: the primary root, then the legacy `<repo>/.a5c/runs`.
pub fn readable_runs_dirs(primary: &Path, cwd: &Path) -> Vec<PathBuf> {
    let legacy = repo_root(cwd).join(".a5c").join("runs");
    let mut out = vec![primary.to_path_buf()];
    if legacy != primary {
        out.push(legacy);
    }
    out
}

/// The reference's `resolveExistingRunDir` + `collapseDoubledA5cRuns`: an absolute path as-is;
/// something that looks like a path against the cwd, then the repo root; a bare id under each
/// readable root. The first candidate holding `run.json` wins, else the first candidate.
pub fn resolve_existing_run_dir(run_ref: &str, runs_dir: &Path, cwd: &Path) -> PathBuf {
    let p = Path::new(run_ref);
    let resolved = if p.is_absolute() {
        normalize(p)
    } else {
        let normalized = run_ref.replace('\\', "/");
        let looks_like_path = normalized.contains('/')
            || normalized.contains(".a5c/")
            || normalized == "."
            || normalized == "..";
        let mut candidates: Vec<PathBuf> = if looks_like_path {
            vec![resolve(cwd, run_ref), resolve(&repo_root(cwd), run_ref)]
        } else {
            readable_runs_dirs(runs_dir, cwd)
                .into_iter()
                .map(|root| root.join(run_ref))
                .collect()
        };
        candidates.dedup();
        candidates
            .iter()
            .find(|c| present(&c.join("run.json")))
            .cloned()
            .unwrap_or_else(|| candidates[0].clone())
    };
    collapse_doubled(&normalize(&resolved))
}

/// The reference's `resolveInputPath`: `-` stays, absolute paths as-is, a path containing
/// `.a5c/runs` given from inside a `.a5c/runs` tree resolves against the project root, anything
/// else against the cwd.
pub fn resolve_input_path(input: &str, cwd: &Path) -> PathBuf {
    if input == "-" {
        return PathBuf::from("-");
    }
    if Path::new(input).is_absolute() {
        return collapse_doubled(&normalize(Path::new(input)));
    }
    let input_norm = input.replace('\\', "/");
    if input_norm.contains(".a5c/runs") {
        let cwd_s = format!("{}/", cwd.to_string_lossy().replace('\\', "/"));
        if let Some(idx) = cwd_s.find("/.a5c/runs/") {
            let project = &cwd_s[..idx];
            if !project.is_empty() {
                return collapse_doubled(&resolve(Path::new(project), input));
            }
        }
    }
    collapse_doubled(&resolve(cwd, input))
}

/// A run-relative artifact reference normalised the reference's way (`normalizeArtifactRef`):
/// absolute refs become run-relative, relative ones are cleaned; POSIX separators.
pub fn normalize_ref(run_dir: &Path, r: Option<&str>) -> Option<String> {
    let r = r?.trim();
    if r.is_empty() {
        return None;
    }
    let abs = if Path::new(r).is_absolute() {
        normalize(Path::new(r))
    } else {
        collapse_doubled(&resolve(run_dir, r))
    };
    Some(relative_posix(run_dir, &abs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_helpers_match_node() {
        assert_eq!(
            resolve(Path::new("/a/b"), "../c/./d"),
            PathBuf::from("/a/c/d")
        );
        assert_eq!(resolve(Path::new("/a"), "/x/../y"), PathBuf::from("/y"));
        assert_eq!(
            relative_posix(
                Path::new("/p/.a5c/runs/r1"),
                Path::new("/p/processes/x.mjs")
            ),
            "../../../processes/x.mjs"
        );
        assert_eq!(relative_posix(Path::new("/a/b"), Path::new("/a/b")), "");
        assert_eq!(
            collapse_doubled(Path::new("/p/.a5c/runs/.a5c/runs/01R")),
            PathBuf::from("/p/.a5c/runs/01R")
        );
        assert_eq!(
            collapse_doubled(Path::new("/p/.a5c/.a5c/runs")),
            PathBuf::from("/p/.a5c/runs")
        );
    }

    #[test]
    fn runs_dir_resolution() {
        let cwd = Path::new("/nonexistent-cwd/sub");
        let env: EnvMap = [("HOME", "/home/u")].into_iter().collect();
        assert_eq!(
            resolve_runs_dir(&env, cwd, None),
            PathBuf::from("/home/u/.a5c/runs")
        );
        let env = env.with("BABYSITTER_GLOBAL_STATE_DIR", "/g");
        assert_eq!(resolve_runs_dir(&env, cwd, None), PathBuf::from("/g/runs"));
        assert_eq!(
            resolve_runs_dir(&env, cwd, Some("custom")),
            PathBuf::from("/g/custom")
        );
        let env = env.with("BABYSITTER_RUNS_SCOPE", "Project");
        assert_eq!(
            resolve_runs_dir(&env, cwd, None),
            PathBuf::from("/nonexistent-cwd/sub/.a5c/runs")
        );
        let env = env.with("BABYSITTER_RUNS_DIR", "/abs/runs");
        assert_eq!(
            resolve_runs_dir(&env, cwd, None),
            PathBuf::from("/abs/runs")
        );
    }

    #[test]
    fn input_paths_and_refs() {
        assert_eq!(
            resolve_input_path(
                ".a5c/runs/R/tasks/E/out.json",
                Path::new("/p/.a5c/runs/R/tasks/T")
            ),
            PathBuf::from("/p/.a5c/runs/R/tasks/E/out.json")
        );
        assert_eq!(
            resolve_input_path("in.json", Path::new("/w")),
            PathBuf::from("/w/in.json")
        );
        let run = Path::new("/r/run1");
        assert_eq!(
            normalize_ref(run, Some("tasks/E/result.json")).as_deref(),
            Some("tasks/E/result.json")
        );
        assert_eq!(
            normalize_ref(run, Some("/r/run1/tasks/E/stdout.log")).as_deref(),
            Some("tasks/E/stdout.log")
        );
        assert_eq!(normalize_ref(run, None), None);
    }
}
