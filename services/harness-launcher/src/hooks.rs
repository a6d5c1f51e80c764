//! babysitter's runtime hooks (spec §3.10): user scripts run at points of a run's life —
//! `on-run-start`, `on-iteration-start` / `-end`, `on-run-complete` / `-fail`, `task.created`,
//! `task.completed`, `babysitter-log` — and for `ctx.hook` effects. The payload goes to the
//! script's stdin as JSON; a hook never breaks orchestration (a failure is reported, not raised),
//! except that a `task.*` hook answering `{"decision": "deny" | "ask"}` blocks that step.
//!
//! Where hooks come from, as the reference looks for them: a `hook-dispatcher.sh` in
//! `plugins/babysitter-unified/hooks/` or `plugins/babysitter/hooks/` of the working directory or
//! an ancestor (run as `bash <dispatcher> <hookType>`; its stdout is the hook output, its stderr
//! lines `<location>:<name>:<status>[:<exit>]` the executed-hook summary); otherwise every
//! `*.{sh,js,ts,py,bash}` file of `<cwd>/.a5c/hooks/<hookType>/` (per-repo) and
//! `~/.a5c/hooks/<hookType>/` (per-user), then `<pluginRoot>/hooks/<hookType>.<ext>` (plugin),
//! each run with `bash`, one after another. Each run is bounded by `BABYSITTER_HOOK_TIMEOUT`
//! (milliseconds, 30 s by default) and killed as a process group past it.
//!
//! Fixed here: a hook type is a path segment and an argument, so one that is not a plain name
//! (`../x`) runs nothing; per-repo and per-user hooks run in name order (the reference: directory
//! order).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use crate::exec::{Leftovers, run_command};

const EXTENSIONS: &[&str] = &["sh", "js", "ts", "py", "bash"];
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a run's hooks are, found once (a command calls several hook types), and how long one
/// may take.
#[derive(Debug, Clone)]
pub struct Hooks {
    cwd: PathBuf,
    /// `plugins/babysitter{-unified,}/hooks/hook-dispatcher.sh` of the cwd or an ancestor.
    dispatcher: Option<PathBuf>,
    /// `<cwd>/.a5c/hooks` and `~/.a5c/hooks`, those that exist.
    dirs: Vec<(PathBuf, &'static str)>,
    /// Plugin `hooks/` directories that exist: the plugin root's, then those up the tree.
    plugin_dirs: Vec<PathBuf>,
    timeout: Duration,
    /// The scripts' whole environment, when it is not this process's (the warm server runs a
    /// client's command with the client's environment).
    env: Option<Vec<(String, String)>>,
}

/// One hook script that ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Executed {
    pub path: String,
    pub name: String,
    pub location: String,
    pub success: bool,
    pub exit_code: Option<i32>,
}

/// What calling a hook type gave (the reference's `HookResult`).
#[derive(Debug, Clone, PartialEq)]
pub struct HookResult {
    pub hook_type: String,
    pub success: bool,
    /// The dispatcher's stdout: JSON when it parses, else the trimmed text.
    pub output: Option<Value>,
    pub error: Option<String>,
    pub executed: Vec<Executed>,
}

impl HookResult {
    fn nothing(hook_type: &str) -> HookResult {
        HookResult {
            hook_type: hook_type.to_owned(),
            success: true,
            output: None,
            error: None,
            executed: Vec::new(),
        }
    }

    fn failed(hook_type: &str, error: String) -> HookResult {
        HookResult {
            success: false,
            error: Some(error),
            ..HookResult::nothing(hook_type)
        }
    }

    /// `{hookType, success, output?, error?, executedHooks: [{hookPath, hookName, hookLocation,
    /// status, exitCode?}]}`.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("hookType".into(), self.hook_type.clone().into());
        m.insert("success".into(), self.success.into());
        if let Some(o) = &self.output {
            m.insert("output".into(), o.clone());
        }
        if let Some(e) = &self.error {
            m.insert("error".into(), e.clone().into());
        }
        let executed: Vec<Value> = self
            .executed
            .iter()
            .map(|h| {
                let mut e = json!({"hookPath": h.path, "hookName": h.name, "hookLocation": h.location,
                                   "status": if h.success { "success" } else { "failed" }});
                if let Some(c) = h.exit_code {
                    e["exitCode"] = c.into();
                }
                e
            })
            .collect();
        m.insert("executedHooks".into(), executed.into());
        Value::Object(m)
    }

    /// The reason a hook blocked the step it was called for (`{"decision": "deny" | "ask",
    /// "reason"?}`), as `Runtime hook <type> blocked execution[: <reason>]`.
    pub fn blocked(&self) -> Option<String> {
        let out = self.output.as_ref()?.as_object()?;
        let decision = out.get("decision")?.as_str()?;
        if decision != "deny" && decision != "ask" {
            return None;
        }
        let reason = out
            .get("reason")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty());
        Some(match reason {
            Some(r) => format!("Runtime hook {} blocked execution: {r}", self.hook_type),
            None => format!("Runtime hook {} blocked execution", self.hook_type),
        })
    }

    /// `metadata.hookStatus` of `run:iterate` (the reference's `deriveHookStatus`).
    pub fn status(&self) -> &'static str {
        if !self.executed.is_empty() {
            return if self.executed.iter().any(|h| !h.success) {
                "error"
            } else {
                "executed"
            };
        }
        match &self.error {
            Some(e) if e.contains("not found") => "no-hooks-configured",
            Some(_) => "error",
            None if self.success => "no-hooks-configured",
            None => "skipped",
        }
    }
}

/// A hook type usable as a file name and an argument.
fn valid_type(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 128
        && !t.starts_with('.')
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn is_file(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file())
}

/// `dir` and its ancestors (at most 50), nearest first.
fn ancestors(dir: &Path) -> impl Iterator<Item = &Path> {
    dir.ancestors().take(50)
}

impl Hooks {
    /// Hooks for commands run in `cwd` by a user whose home is `home`; `plugin_root` is the
    /// harness plugin's directory when one is known; `timeout` bounds each script.
    pub fn new(
        cwd: PathBuf,
        home: Option<PathBuf>,
        plugin_root: Option<PathBuf>,
        timeout: Option<Duration>,
    ) -> Hooks {
        let is_dir = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_dir());
        let mut dispatcher = None;
        let mut plugin_dirs: Vec<PathBuf> = plugin_root
            .map(|r| r.join("hooks"))
            .into_iter()
            .filter(|d| is_dir(d))
            .collect();
        for dir in ancestors(&cwd) {
            for p in ["babysitter-unified", "babysitter"] {
                let hooks = dir.join("plugins").join(p).join("hooks");
                if !is_dir(&hooks) {
                    continue;
                }
                let d = hooks.join("hook-dispatcher.sh");
                if dispatcher.is_none() && is_file(&d) {
                    dispatcher = Some(d);
                }
                plugin_dirs.push(hooks);
            }
        }
        let dirs = [
            Some((cwd.join(".a5c/hooks"), "per-repo")),
            home.map(|h| (h.join(".a5c/hooks"), "per-user")),
        ]
        .into_iter()
        .flatten()
        .filter(|(d, _)| is_dir(d))
        .collect();
        Hooks {
            cwd,
            dispatcher,
            dirs,
            plugin_dirs,
            timeout: timeout.unwrap_or(DEFAULT_TIMEOUT),
            env: None,
        }
    }

    /// For a command run by this process in `cwd`: `HOME`, the plugin root from
    /// `BABYSITTER_PLUGIN_ROOT` / `CLAUDE_PLUGIN_ROOT` / `CODEX_PLUGIN_ROOT` / `AGENT_PLUGIN_ROOT`,
    /// the timeout from `BABYSITTER_HOOK_TIMEOUT` (milliseconds), all read through `var`.
    pub fn from_env(cwd: PathBuf, var: impl Fn(&str) -> Option<String>) -> Hooks {
        let set = |k: &str| var(k).filter(|v| !v.trim().is_empty());
        let home = babysitter_common::project::home_dir(var("HOME").as_deref(), &cwd);
        let plugin_root = [
            "BABYSITTER_PLUGIN_ROOT",
            "CLAUDE_PLUGIN_ROOT",
            "CODEX_PLUGIN_ROOT",
            "AGENT_PLUGIN_ROOT",
        ]
        .iter()
        .find_map(|k| set(k))
        .map(PathBuf::from);
        let timeout = set("BABYSITTER_HOOK_TIMEOUT")
            .and_then(|t| t.trim().parse::<u64>().ok())
            .filter(|t| *t > 0)
            .map(Duration::from_millis);
        Hooks::new(cwd, home, plugin_root, timeout)
    }

    /// The hooks of the run at `run_dir`, found from its project directory (the nearest
    /// ancestor holding `.a5c` or `.git`; the run directory itself when there is none), with the
    /// environment read through `var` (see [`Hooks::from_env`]).
    pub fn for_run_dir(run_dir: &Path, var: impl Fn(&str) -> Option<String>) -> Hooks {
        let root =
            babysitter_common::project::find_root(run_dir).unwrap_or_else(|| run_dir.to_path_buf());
        Hooks::from_env(root, var)
    }

    /// The same hooks, with `vars` as the scripts' whole environment instead of this process's.
    pub fn with_env<'a>(mut self, vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> Hooks {
        self.env = Some(
            vars.into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        );
        self
    }

    /// A `bash` running `script` from the hooks' directory, with their environment.
    fn bash(&self, script: &Path) -> Command {
        let mut cmd = crate::group::command("bash");
        cmd.arg(script).current_dir(&self.cwd);
        if let Some(env) = &self.env {
            cmd.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
        }
        cmd
    }

    /// The same hooks with another time limit per script.
    pub fn with_timeout(mut self, timeout: Duration) -> Hooks {
        self.timeout = timeout;
        self
    }

    /// The scripts for `hook_type` when there is no dispatcher.
    fn discover(&self, hook_type: &str) -> Vec<(PathBuf, String, &'static str)> {
        let mut found = Vec::new();
        for (base, location) in &self.dirs {
            let dir = base.join(hook_type);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut names: Vec<String> = entries
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| {
                    Path::new(n)
                        .extension()
                        .and_then(|x| x.to_str())
                        .is_some_and(|x| EXTENSIONS.contains(&x))
                })
                .collect();
            names.sort();
            found.extend(names.into_iter().map(|n| (dir.join(&n), n, *location)));
        }
        'roots: for root in &self.plugin_dirs {
            for ext in EXTENSIONS {
                let name = format!("{hook_type}.{ext}");
                let candidate = root.join(&name);
                if is_file(&candidate) {
                    found.push((candidate, name, "plugin"));
                    break 'roots;
                }
            }
        }
        found
    }

    /// What would run for `hook_type`: `Some(scripts)` (empty when a dispatcher takes the call),
    /// `None` when nothing would.
    fn plan(&self, hook_type: &str) -> Option<Vec<(PathBuf, String, &'static str)>> {
        if !valid_type(hook_type) {
            return None;
        }
        if self.dispatcher.is_some() {
            return Some(Vec::new());
        }
        let scripts = self.discover(hook_type);
        (!scripts.is_empty()).then_some(scripts)
    }

    /// Whether any hook would run for `hook_type`.
    pub fn any_for(&self, hook_type: &str) -> bool {
        self.plan(hook_type).is_some()
    }

    /// Calls `hook_type` with `payload` (`hookType` and `timestamp` added to an object payload, as
    /// the reference's runtime does). Never fails: what went wrong is in the result.
    pub async fn call(&self, hook_type: &str, payload: Value) -> HookResult {
        if !valid_type(hook_type) {
            return HookResult::failed(hook_type, format!("invalid hook type `{hook_type}`"));
        }
        self.call_if_any(hook_type, || payload)
            .await
            .unwrap_or_else(|| HookResult::nothing(hook_type))
    }

    /// [`Hooks::call`] when some hook would run for `hook_type` (`payload` is built only then),
    /// else `None`. The hooks are looked for once.
    pub async fn call_if_any(
        &self,
        hook_type: &str,
        payload: impl FnOnce() -> Value,
    ) -> Option<HookResult> {
        let scripts = self.plan(hook_type)?;
        let mut payload = payload();
        if let Value::Object(m) = &mut payload {
            m.insert("hookType".into(), hook_type.into());
            let stamped = m
                .get("timestamp")
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty());
            if !stamped {
                m.insert("timestamp".into(), chrono_now().into());
            }
        }
        let input = payload.to_string().into_bytes();
        let stop = CancellationToken::new();
        if let Some(dispatcher) = &self.dispatcher {
            let mut cmd = self.bash(dispatcher);
            cmd.arg(hook_type);
            let what = format!("{} {hook_type}", dispatcher.display());
            return Some(
                match run_command(
                    cmd,
                    &what,
                    Some(input),
                    self.timeout,
                    &stop,
                    Leftovers::Keep,
                )
                .await
                {
                    Err(e) => HookResult::failed(
                        hook_type,
                        format!("Failed to spawn hook dispatcher: {e}"),
                    ),
                    Ok(r) if r.timed_out => HookResult::failed(
                        hook_type,
                        format!(
                            "Hook execution timed out after {}ms",
                            self.timeout.as_millis()
                        ),
                    ),
                    Ok(r) => HookResult {
                        hook_type: hook_type.to_owned(),
                        success: r.code == Some(0),
                        output: (!r.stdout.is_empty()).then(|| {
                            serde_json::from_str(&r.stdout)
                                .unwrap_or_else(|_| Value::String(r.stdout.trim().to_owned()))
                        }),
                        error: (r.code != Some(0)).then(|| match r.code {
                            Some(c) => format!("Hook dispatcher exited with code {c}"),
                            None => "Hook dispatcher was killed by a signal".to_owned(),
                        }),
                        executed: summary(&r.stderr),
                    },
                },
            );
        }
        let mut executed = Vec::with_capacity(scripts.len());
        for (path, name, location) in scripts {
            let cmd = self.bash(&path);
            let ran = run_command(
                cmd,
                &name,
                Some(input.clone()),
                self.timeout,
                &stop,
                Leftovers::Keep,
            )
            .await;
            let (success, exit_code) = match ran {
                Ok(r) if !r.timed_out => (r.code == Some(0), r.code),
                _ => (false, None),
            };
            executed.push(Executed {
                path: path.display().to_string(),
                name,
                location: location.to_owned(),
                success,
                exit_code,
            });
        }
        let ok = executed.iter().all(|h| h.success);
        Some(HookResult {
            hook_type: hook_type.to_owned(),
            success: ok,
            output: None,
            error: (!ok).then(|| format!("One or more discovered hooks failed for {hook_type}")),
            executed,
        })
    }
}

/// `new Date().toISOString()`.
fn chrono_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The dispatcher's stderr summary lines: `<per-repo|per-user|plugin>:<name>:<status>[:<exit>]`.
fn summary(stderr: &str) -> Vec<Executed> {
    stderr
        .lines()
        .filter_map(|line| {
            let mut parts = line.split(':');
            let location = parts.next()?;
            if !matches!(location, "per-repo" | "per-user" | "plugin") {
                return None;
            }
            let name = parts.next().filter(|n| !n.is_empty())?;
            let status = parts.next().filter(|s| !s.is_empty())?;
            let exit_code = match parts.next() {
                Some(c) => Some(
                    c.parse::<i32>()
                        .ok()
                        .filter(|_| c.bytes().all(|b| b.is_ascii_digit()))?,
                ),
                None => None,
            };
            if parts.next().is_some() {
                return None;
            }
            Some(Executed {
                path: "unknown".into(),
                name: name.to_owned(),
                location: location.to_owned(),
                success: status == "success",
                exit_code,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
