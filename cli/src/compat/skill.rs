//! `skill:discover [--plugin-root <dir>] [--run-id <id>] [--process-path <file>] [--cache-ttl <s>]
//! [--summary-only] [--json]`: the skills, agents and processes an agent can use for a run, as
//! the reference's `skill.ts` finds them — the active process library's `specializations/`
//! (and `methodologies/`), the plugin's `skills/`, the project's `.a5c/skills|agents|processes`
//! — ranked by the run's domain, at most 5 per specialization and 30 of each, with a one-line
//! summary cached per run for `--cache-ttl` seconds (300) in `$TMPDIR/babysitter-skill-cache`.
//! (Files: [`scan`].)
//!
//! `skill:fetch-remote` and `skill:discover --include-remote` need the network (GitHub's API or a
//! site's `.well-known` index), which this build does not reach: `fetch-remote` checks its
//! arguments as the reference and then fails with `REMOTE_FETCH_UNAVAILABLE`; `--include-remote`
//! adds nothing and says so on stderr.
//!
//! Differences: `--run-id` must be a valid run id (the reference joins it into the cache path
//! unchecked); directory entries are read in name order.

pub mod scan;

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::compat::cli::Cli;
use crate::compat::output;
use crate::compat::paths;
use crate::compat::process_library::store::{self, Scope, Store};

/// Where the library's processes are (`resolveDiscoveryProcessRoot`).
fn process_root(
    cli: &Cli<'_>,
    plugin_root: &str,
    library: Option<PathBuf>,
    run_id: &str,
) -> PathBuf {
    if let Some(l) = library {
        return l;
    }
    // The project's own bindings file (`<cwd>/.a5c/active/process-library.json`).
    let project_state = cli.cwd.join(".a5c").display().to_string();
    let local = Store {
        env: cli.env,
        cwd: &cli.cwd,
        state_dir_flag: Some(&project_state),
    };
    let scope = Scope {
        run_id: Some(run_id).filter(|r| !r.is_empty()),
        session_id: None,
    };
    if let Some(dir) = local
        .resolve_active(scope)
        .ok()
        .as_ref()
        .and_then(|r| r.dir())
    {
        return paths::resolve(&cli.cwd, dir);
    }
    if plugin_root.is_empty() {
        return cli.cwd.join("library");
    }
    let root = paths::resolve(&cli.cwd, plugin_root);
    // A `library/` beside the plugin or above it (a checkout of babysitter's repository).
    root.ancestors()
        .map(|a| a.join("library"))
        .find(|l| l.try_exists().unwrap_or(false))
        .unwrap_or_else(|| root.join("skills").join("babysit").join("process"))
}

fn file_of(v: &Value) -> String {
    v.get("file")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .replace('\\', "/")
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// First of each name.
fn dedup(items: Vec<Value>) -> Vec<Value> {
    let mut seen = std::collections::HashSet::new();
    items
        .into_iter()
        .filter(|i| seen.insert(text(i, "name").to_owned()))
        .collect()
}

/// Those whose category contains `domain` first (stable).
fn rank(mut items: Vec<Value>, domain: &str) -> Vec<Value> {
    if !domain.is_empty() {
        let d = domain.to_lowercase();
        items.sort_by_key(|i| !text(i, "category").to_lowercase().contains(&d));
    }
    items
}

/// At most `cap` per `/specializations/<name>/`.
fn cap(items: Vec<Value>, cap: usize) -> Vec<Value> {
    let mut counts = std::collections::HashMap::new();
    items
        .into_iter()
        .filter(|i| {
            let file = file_of(i);
            let Some(spec) = file
                .find("/specializations/")
                .map(|at| &file[at + "/specializations/".len()..])
                .and_then(|rest| rest.split_once('/'))
                .map(|(s, _)| s.to_lowercase())
            else {
                return true;
            };
            let n = counts.entry(spec).or_insert(0);
            *n += 1;
            *n <= cap
        })
        .collect()
}

fn summary(skills: &[Value], agents: &[Value]) -> String {
    let line = |items: &[Value]| {
        items
            .iter()
            .map(|i| {
                let d = scan::prefix(text(i, "description"), 60);
                let d = if d.is_empty() {
                    "no description".to_owned()
                } else {
                    d
                };
                format!("{} ({d})", text(i, "name"))
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    [line(skills), line(agents)]
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `skill:discover`.
pub async fn discover(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let a = &cli.args;
    let run_id = a.value("--run-id").unwrap_or_default();
    if !run_id.is_empty()
        && let Err(e) = babysitter_journal::validate_id("run id", run_id)
    {
        let err = json!({"error": "INVALID_RUN_ID", "message": e.to_string()});
        errln!(
            "{}",
            if a.json() {
                output::compact(&err)
            } else {
                format!("Error: {e}")
            }
        );
        return Ok(1);
    }
    let process_path = a.value("--process-path").or(a.value("--process"));
    let ttl = a.number("--cache-ttl").unwrap_or(300);
    let flag_root = a.value("--plugin-root").filter(|r| !r.is_empty());
    let plugin_root = flag_root
        .or_else(|| {
            [
                "CLAUDE_PLUGIN_ROOT",
                "CODEX_PLUGIN_ROOT",
                "CURSOR_PLUGIN_ROOT",
                "GEMINI_EXTENSION_PATH",
                "COPILOT_PLUGIN_ROOT",
                "PI_PLUGIN_ROOT",
                "OMP_PLUGIN_ROOT",
            ]
            .iter()
            .find_map(|k| cli.env.get_non_empty(k))
        })
        .unwrap_or_default();
    if a.flag("--include-remote") {
        errln!(
            "[skill:discover] --include-remote: remote skill sources need the network, which this build does not reach; listing local skills only"
        );
    }
    // Without --plugin-root, the user's active library (`~/.a5c`) comes first.
    let with_library = flag_root.is_none();
    let result = discovery(cli, plugin_root, with_library, run_id, process_path, ttl);
    print(cli, &result);
    Ok(0)
}

/// The discovery for a run: from the per-run cache when fresh (no process path), else scanned
/// (and cached). `with_library`: the user's active library is where the processes are.
fn discovery(
    cli: &Cli<'_>,
    plugin_root: &str,
    with_library: bool,
    run_id: &str,
    process_path: Option<&str>,
    ttl: u64,
) -> Map<String, Value> {
    let tmp = PathBuf::from(cli.env.get_non_empty("TMPDIR").unwrap_or("/tmp"));
    let (cache_json, cache_summary) = scan::cache_paths(&tmp, run_id);
    let now_ms = chrono::Utc::now().timestamp_millis();
    if process_path.is_none()
        && let Some(c) = scan::read_cache(&cache_json, ttl, now_ms)
    {
        let mut m = Map::new();
        for k in ["skills", "agents", "summary"] {
            m.insert(k.into(), c.get(k).cloned().unwrap_or(Value::Null));
        }
        m.insert("cached".into(), json!(true));
        return m;
    }
    let library = with_library
        .then(|| {
            let user = Store {
                env: cli.env,
                cwd: &cli.cwd,
                state_dir_flag: None,
            };
            store::active_path(&user, Scope::default())
        })
        .flatten();
    let m = fresh(cli, plugin_root, library, run_id, process_path);
    if process_path.is_none() {
        write_cache(&cache_json, &cache_summary, &m, now_ms);
    }
    m
}

/// `skillContext` of `session:iteration-message --plugin-root <dir>`: the discovery summary for
/// the run (its entry as the process path), `None` when empty or the run id is not a valid id.
pub fn context_summary(
    cli: &Cli<'_>,
    plugin_root: &str,
    run_id: &str,
    process_path: Option<&str>,
) -> Option<String> {
    if !run_id.is_empty() && babysitter_journal::validate_id("run id", run_id).is_err() {
        return None;
    }
    let m = discovery(cli, plugin_root, true, run_id, process_path, 300);
    m.get("summary")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// Scans everything (no cache): `{skills, agents, processes, summary, cached: false}`.
fn fresh(
    cli: &Cli<'_>,
    plugin_root: &str,
    library: Option<PathBuf>,
    run_id: &str,
    process_path: Option<&str>,
) -> Map<String, Value> {
    let cwd = &cli.cwd;
    let mut domain = process_path
        .and_then(scan::specialization)
        .unwrap_or_default();
    if domain.is_empty() && !run_id.is_empty() {
        domain = scan::run_domain(&cli.runs_dir().join(run_id));
    }
    let root = process_root(cli, plugin_root, library, run_id);
    let specs = root.join("specializations");
    // `path.join("", "skills")`: with no plugin root, `<cwd>/skills` (as the reference).
    let plugin_skills = paths::resolve(cwd, Path::new(plugin_root).join("skills"));
    let mut skills = scan::scan(&specs, false, "local");
    skills.extend(
        scan::scan(&plugin_skills, false, "local-plugin")
            .into_iter()
            .filter(|s| !file_of(s).contains("/specializations/")),
    );
    skills.extend(scan::scan(&cwd.join(".a5c/skills"), false, "local"));
    let mut agents = scan::scan(&specs, true, "local");
    agents.extend(scan::scan(&cwd.join(".a5c/agents"), true, "local"));

    let mut processes = Vec::new();
    for (name, dir) in scan::subdirs(&specs) {
        processes.extend(scan::processes(&dir, &name, "library"));
    }
    let methodologies = root.join("methodologies");
    processes.extend(scan::processes(&methodologies, "methodologies", "library"));
    for (name, dir) in scan::subdirs(&methodologies) {
        processes.extend(scan::processes(&dir, &name, "library"));
    }
    processes.extend(scan::processes(
        &cwd.join(".a5c/processes"),
        "project",
        "repo",
    ));

    let (mut skills, mut agents) = (dedup(skills), dedup(agents));
    let in_spec = |v: &Value, d: &str| {
        file_of(v)
            .to_lowercase()
            .contains(&format!("/specializations/{d}/"))
    };
    match (process_path, domain.as_str()) {
        (Some(_), d) if !d.is_empty() => {
            let d = d.to_lowercase();
            skills.retain(|s| in_spec(s, &d));
            agents.retain(|s| in_spec(s, &d));
            processes.retain(|p| text(p, "category").to_lowercase() == d);
        }
        (Some(_), _) => {
            skills.retain(|s| !file_of(s).contains("/specializations/"));
            agents.retain(|s| !file_of(s).contains("/specializations/"));
        }
        (None, d) => {
            skills = cap(rank(skills, d), 5);
            agents = cap(rank(agents, d), 5);
        }
    }
    skills.truncate(30);
    agents.truncate(30);
    let summary = summary(&skills, &agents);
    let mut m = Map::new();
    m.insert("skills".into(), Value::Array(skills));
    m.insert("agents".into(), Value::Array(agents));
    m.insert("processes".into(), Value::Array(processes));
    m.insert("summary".into(), json!(summary));
    m.insert("cached".into(), json!(false));
    m
}

/// The cache entry (`{skills, agents, summary, timestamp}`) and the summary beside it; failures
/// are not errors (as the reference).
fn write_cache(json_path: &Path, summary_path: &Path, m: &Map<String, Value>, now_ms: i64) {
    let entry = json!({
        "skills": m["skills"], "agents": m["agents"], "summary": m["summary"], "timestamp": now_ms,
    });
    let _ = crate::compat::session::file::write_file_atomic(json_path, &output::compact(&entry));
    let _ = crate::compat::session::file::write_file_atomic(
        summary_path,
        text(&Value::Object(m.clone()), "summary"),
    );
}

fn print(cli: &Cli<'_>, m: &Map<String, Value>) {
    let a = &cli.args;
    if a.flag("--summary-only") {
        output::line(m.get("summary").and_then(Value::as_str).unwrap_or_default());
        return;
    }
    if a.json() {
        let mut out = Map::new();
        for k in ["skills", "agents", "processes", "summary", "cached"] {
            if let Some(v) = m.get(k) {
                out.insert(k.into(), v.clone());
            }
        }
        output::line(&output::pretty(&Value::Object(out)));
        return;
    }
    let list = |k: &str| {
        m.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (skills, agents, processes) = (list("skills"), list("agents"), list("processes"));
    if skills.is_empty() && agents.is_empty() {
        output::line("(no skills or agents found)");
        return;
    }
    let mut lines = Vec::new();
    for (title, items) in [("Skills", &skills), ("Agents", &agents)] {
        if items.is_empty() {
            continue;
        }
        lines.push(format!("{title} ({}):", items.len()));
        for i in items {
            let d = text(i, "description");
            let file = text(i, "file");
            lines.push(format!(
                "  - {}: {}{}",
                text(i, "name"),
                if d.is_empty() { "(no description)" } else { d },
                if file.is_empty() {
                    String::new()
                } else {
                    format!(" [{file}]")
                }
            ));
        }
    }
    if !processes.is_empty() {
        lines.push(format!("Processes ({}):", processes.len()));
        for p in &processes {
            lines.push(format!(
                "  - {} [{}]: {}",
                text(p, "name"),
                text(p, "category"),
                text(p, "file")
            ));
        }
    }
    output::line(&lines.join("\n"));
}

/// `skill:fetch-remote --source-type github|well-known --url <url>`: the reference's argument
/// checks, then a clear refusal (the fetch needs the network).
pub async fn fetch_remote(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let a = &cli.args;
    let refuse = |code: &str, message: &str| {
        if a.json() {
            errln!(
                "{}",
                output::pretty(&json!({"error": code, "message": message}))
            );
        } else {
            errln!("Error: {message}");
        }
        1
    };
    let Some(kind) = a.value("--source-type") else {
        return Ok(refuse(
            "MISSING_SOURCE_TYPE",
            "--source-type is required (github or well-known)",
        ));
    };
    if kind != "github" && kind != "well-known" {
        return Ok(refuse(
            "INVALID_SOURCE_TYPE",
            "--source-type must be github or well-known",
        ));
    }
    let Some(url) = a.value("--url") else {
        return Ok(refuse("MISSING_URL", "--url is required"));
    };
    Ok(refuse(
        "REMOTE_FETCH_UNAVAILABLE",
        &format!(
            "fetching remote skills ({kind} source {url}) needs the network, which this babysitter build does not reach; use the reference CLI (npm @a5c-ai/babysitter-sdk) for skill:fetch-remote"
        ),
    ))
}
