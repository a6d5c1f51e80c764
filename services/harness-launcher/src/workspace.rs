//! The project directory an agent works in, per task (`execution.workspace` in task.json):
//!
//! - none: an empty directory of the task's own;
//! - `{"path": "/abs"}` (or `execution.cwd`): that directory, in place;
//! - `{"source": "/abs/repo", "mode": "copy"}`: a copy of the source, thrown away afterwards
//!   (the task's value is what counts);
//! - `{"source": "/abs/repo", "mode": "worktree", "ref": "main"}`: a git worktree of the source
//!   on a new branch `babysitter/<session>`; after the run every change is committed on that
//!   branch and the worktree removed, so concurrent tasks never share a checkout and the work
//!   survives the task (the branch and commit are in the result's metadata).
//!
//! Why git and cp are run as commands: they are what an operator would run, they handle every
//! file type and git's own locking, and a failure message from them is the clearest reason to
//! hand back in a task error.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{Value, json};

/// How the task wants its project set up.
#[derive(Debug, Clone, PartialEq)]
pub enum Workspace {
    Fresh,
    InPlace(PathBuf),
    Copy(PathBuf),
    Worktree {
        source: PathBuf,
        git_ref: Option<String>,
    },
}

impl Workspace {
    /// From `execution.workspace` / `execution.cwd` / `agent.cwd`.
    pub fn from_task(def: &Value) -> Result<Self, String> {
        let ws = &def["execution"]["workspace"];
        let abs = |v: &Value, what: &str| -> Result<PathBuf, String> {
            match v.as_str() {
                Some(p) if Path::new(p).is_absolute() => Ok(PathBuf::from(p)),
                _ => Err(format!("{what} must be an absolute path")),
            }
        };
        if ws.is_object() {
            if !ws["path"].is_null() {
                return Ok(Workspace::InPlace(abs(
                    &ws["path"],
                    "execution.workspace.path",
                )?));
            }
            let source = abs(&ws["source"], "execution.workspace.source")?;
            return match ws["mode"].as_str().unwrap_or("worktree") {
                "copy" => Ok(Workspace::Copy(source)),
                "worktree" => Ok(Workspace::Worktree {
                    source,
                    git_ref: ws["ref"].as_str().map(str::to_owned),
                }),
                other => Err(format!(
                    "execution.workspace.mode `{other}` is not copy or worktree"
                )),
            };
        }
        for cwd in [&def["execution"]["cwd"], &def["agent"]["cwd"]] {
            if !cwd.is_null() {
                return Ok(Workspace::InPlace(abs(cwd, "execution.cwd")?));
            }
        }
        Ok(Workspace::Fresh)
    }
}

/// A prepared project directory; [`Prepared::finish`] settles it after the run.
#[derive(Debug)]
pub struct Prepared {
    pub dir: PathBuf,
    worktree: Option<(PathBuf, String)>,
}

async fn cmd(program: &str, args: &[&str], cwd: &Path) -> Result<String, String> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(format!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn dir_str(p: &Path) -> Result<&str, String> {
    p.to_str()
        .ok_or_else(|| format!("{} is not UTF-8", p.display()))
}

/// Sets up the project under `work_dir` (or in place); `session` names the worktree branch.
pub async fn prepare(ws: &Workspace, work_dir: &Path, session: &str) -> Result<Prepared, String> {
    let project = work_dir.join("project");
    let make = |d: &Path| {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))
    };
    match ws {
        Workspace::Fresh => {
            make(&project)?;
            Ok(Prepared {
                dir: project,
                worktree: None,
            })
        }
        Workspace::InPlace(dir) => match tokio::fs::metadata(dir).await {
            Ok(m) if m.is_dir() => Ok(Prepared {
                dir: dir.clone(),
                worktree: None,
            }),
            _ => Err(format!(
                "the task's directory {} does not exist on this worker",
                dir.display()
            )),
        },
        Workspace::Copy(source) => {
            make(work_dir)?;
            let from = format!("{}/.", dir_str(source)?);
            make(&project)?;
            cmd("cp", &["-a", &from, dir_str(&project)?], work_dir).await?;
            Ok(Prepared {
                dir: project,
                worktree: None,
            })
        }
        Workspace::Worktree { source, git_ref } => {
            make(work_dir)?;
            let branch = format!("babysitter/{session}");
            let mut args = vec!["worktree", "add", "-b", &branch, dir_str(&project)?];
            if let Some(r) = git_ref {
                args.push(r);
            }
            cmd("git", &args, source).await?;
            Ok(Prepared {
                dir: project,
                worktree: Some((source.clone(), branch)),
            })
        }
    }
}

impl Prepared {
    /// After the run: a worktree's changes are committed on its branch and the worktree is
    /// removed. Returns what the result's metadata should say about the workspace.
    pub async fn finish(self) -> Value {
        let Some((source, branch)) = self.worktree else {
            return Value::Null;
        };
        let dir = &self.dir;
        let commit = async {
            cmd("git", &["add", "-A"], dir).await?;
            let changed = cmd("git", &["status", "--porcelain"], dir).await?;
            if !changed.is_empty() {
                cmd(
                    "git",
                    &[
                        "-c",
                        "user.name=babysitter",
                        "-c",
                        "user.email=babysitter@localhost",
                        "commit",
                        "-q",
                        "--no-verify",
                        "-m",
                        "babysitter: agent task changes",
                    ],
                    dir,
                )
                .await?;
            }
            cmd("git", &["rev-parse", "HEAD"], dir).await
        }
        .await;
        let removed = match dir_str(dir) {
            Ok(d) => cmd("git", &["worktree", "remove", "--force", d], &source).await,
            Err(e) => Err(e),
        };
        if let Err(e) = &removed {
            tracing::warn!(error = %e, "removing the task's git worktree failed");
        }
        match commit {
            Ok(sha) => json!({"branch": branch, "commit": sha}),
            Err(e) => json!({"branch": branch, "error": e}),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_modes_are_read_from_the_task() {
        let w = |v: Value| Workspace::from_task(&v);
        assert_eq!(w(json!({})), Ok(Workspace::Fresh));
        assert_eq!(
            w(json!({"execution": {"cwd": "/r"}})),
            Ok(Workspace::InPlace("/r".into()))
        );
        assert_eq!(
            w(json!({"execution": {"workspace": {"source": "/r", "mode": "copy"}}})),
            Ok(Workspace::Copy("/r".into()))
        );
        assert_eq!(
            w(json!({"execution": {"workspace": {"source": "/r", "ref": "main"}}})),
            Ok(Workspace::Worktree {
                source: "/r".into(),
                git_ref: Some("main".into())
            })
        );
        assert!(w(json!({"execution": {"cwd": "relative"}})).is_err());
        assert!(w(json!({"execution": {"workspace": {"source": "/r", "mode": "rsync"}}})).is_err());
    }

    #[tokio::test]
    async fn a_worktree_task_keeps_its_work_on_a_branch_and_leaves_the_checkout_alone() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap_or_else(|e| panic!("{e}"));
        let git = |args: &[&str]| {
            let repo = repo.clone();
            let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            async move {
                let a: Vec<&str> = args.iter().map(String::as_str).collect();
                cmd("git", &a, &repo)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"))
            }
        };
        git(&["init", "-q", "-b", "main"]).await;
        std::fs::write(repo.join("a.txt"), "a\n").unwrap_or_else(|e| panic!("{e}"));
        git(&["add", "."]).await;
        git(&[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "-m",
            "init",
        ])
        .await;

        let ws = Workspace::Worktree {
            source: repo.clone(),
            git_ref: None,
        };
        let p = prepare(&ws, &tmp.path().join("work"), "eff1-1")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            std::fs::read_to_string(p.dir.join("a.txt")).unwrap_or_default(),
            "a\n"
        );
        std::fs::write(p.dir.join("out.txt"), "hello\n").unwrap_or_else(|e| panic!("{e}"));
        let dir = p.dir.clone();
        let meta = p.finish().await;
        assert_eq!(meta["branch"], "babysitter/eff1-1", "{meta}");
        assert!(std::fs::metadata(&dir).is_err(), "worktree removed");
        assert!(
            std::fs::metadata(repo.join("out.txt")).is_err(),
            "the source checkout is untouched"
        );
        let shown = git(&["show", "babysitter/eff1-1:out.txt"]).await;
        assert_eq!(shown, "hello");

        let copy = Workspace::Copy(repo.clone());
        let p = prepare(&copy, &tmp.path().join("work2"), "x")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(p.dir.join("a.txt").is_file() && std::fs::metadata(p.dir.join(".git")).is_ok());
        assert_eq!(p.finish().await, Value::Null);
    }
}
