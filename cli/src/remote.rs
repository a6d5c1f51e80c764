//! `--server URL` (or `BABYSITTER_SERVER`): the run and task commands against an orchestrator's
//! `RunService` instead of a local runs directory. The server iterates runs itself, so there is
//! no `run:iterate` loop to drive; the commands create, observe and steer.
//!
//! `run:create --entry FILE[#export] [--inputs FILE] [--namespace NS] [--label k=v]…` uploads the
//! process bundle: every `.js` / `.mjs` / `.cjs` / `.json` file under the entry's folder (skipping
//! `node_modules` and dot-directories) and every file module the entry imports from elsewhere in
//! its project (the engine's entry check names them), by path relative to the process root.
//! `run:status`, `run:events`, `run:halt`, `run:cancel`, `task:list`, `task:post` and
//! `run:iterate` (reports the server's status) take the run id where the local commands take the
//! run directory. Tokens: `BABYSITTER_TOKEN_FILE` (or `BABYSITTER_TOKEN`).
//!
//! Output is JSON on stdout (one document), errors on stderr with exit code 1.

#![allow(clippy::print_stdout)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use babysitter_common::EnvMap;
use babysitter_common::auth::Secret;
use babysitter_common::client::{AuthedChannel, ClientOptions};
use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient;
use serde_json::{Map, Value, json};

/// The commands that have a remote form.
pub const COMMANDS: &[&str] = &[
    "run:create",
    "run:status",
    "run:events",
    "run:halt",
    "run:cancel",
    "run:iterate",
    "task:list",
    "task:post",
];

/// The server URL when the command should go remote: `--server URL` / `--server=URL` in `argv`,
/// else `BABYSITTER_SERVER`. Returns the URL and `argv` without the flag.
pub fn server_of(argv: &[String], env: &EnvMap) -> Option<(String, Vec<String>)> {
    let mut rest = Vec::with_capacity(argv.len());
    let mut url = None;
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        if a == "--server" {
            url = it.next().cloned();
        } else if let Some(v) = a.strip_prefix("--server=") {
            url = Some(v.to_owned());
        } else {
            rest.push(a.clone());
        }
    }
    let url = url.or_else(|| env.get_non_empty("BABYSITTER_SERVER").map(str::to_owned))?;
    Some((url, rest))
}

/// Flags and positionals of a remote command.
#[derive(Debug, Default)]
struct Args {
    positional: Vec<String>,
    flags: HashMap<String, Vec<String>>,
}

impl Args {
    fn parse(argv: &[String]) -> Self {
        let mut a = Args::default();
        let mut it = argv.iter().peekable();
        while let Some(x) = it.next() {
            if let Some(name) = x.strip_prefix("--") {
                let (name, value) = match name.split_once('=') {
                    Some((n, v)) => (n.to_owned(), v.to_owned()),
                    None => match it.peek() {
                        Some(v) if !v.starts_with("--") => {
                            (name.to_owned(), it.next().cloned().unwrap_or_default())
                        }
                        _ => (name.to_owned(), String::new()),
                    },
                };
                a.flags.entry(name).or_default().push(value);
            } else {
                a.positional.push(x.clone());
            }
        }
        a
    }

    fn value(&self, name: &str) -> Option<&str> {
        self.flags
            .get(name)
            .and_then(|v| v.last())
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn run_id(&self) -> Result<String> {
        self.positional
            .first()
            .cloned()
            .ok_or_else(|| anyhow!("the run id is missing (remote commands take <runId>)"))
    }
}

pub fn main(command: &str, url: &str, argv: &[String], env: &EnvMap) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("babysitter: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(command, url, &Args::parse(argv), env)) {
        Ok(v) => {
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("[{command}] {e:#}");
            ExitCode::from(1)
        }
    }
}

fn client(url: &str, env: &EnvMap) -> Result<RunServiceClient<AuthedChannel>> {
    let token = match env.get_non_empty("BABYSITTER_TOKEN_FILE") {
        Some(p) => Some(Secret::from_file(Path::new(p)).map_err(anyhow::Error::msg)?),
        None => env.get_non_empty("BABYSITTER_TOKEN").map(Secret::new),
    };
    Ok(babysitter_common::client::client(
        url,
        token.as_ref(),
        &ClientOptions::default(),
    )?)
}

fn status_name(s: i32) -> &'static str {
    match pb::RunStatus::try_from(s) {
        Ok(pb::RunStatus::Created) => "created",
        Ok(pb::RunStatus::Running) => "running",
        Ok(pb::RunStatus::Waiting) => "waiting",
        Ok(pb::RunStatus::Completed) => "completed",
        Ok(pb::RunStatus::Failed) => "failed",
        Ok(pb::RunStatus::Halted) => "halted",
        Ok(pb::RunStatus::Cancelled) => "cancelled",
        _ => "unknown",
    }
}

fn run_json(r: &pb::Run) -> Value {
    let mut m = Map::new();
    m.insert("runId".into(), json!(r.run_id));
    m.insert("namespace".into(), json!(r.namespace));
    m.insert("status".into(), json!(status_name(r.status)));
    m.insert("processId".into(), json!(r.process_id));
    m.insert("headSeq".into(), json!(r.head_seq));
    m.insert("pendingEffects".into(), json!(r.pending_effects));
    m.insert("pendingByKind".into(), json!(r.pending_effects_by_kind));
    if !r.status_reason.is_empty() {
        m.insert("reason".into(), json!(r.status_reason));
    }
    if !r.labels.is_empty() {
        m.insert("labels".into(), json!(r.labels));
    }
    if !r.output_json.is_empty() {
        let out: Value = serde_json::from_slice(&r.output_json).unwrap_or(Value::Null);
        m.insert("output".into(), out);
    }
    if let Some(e) = &r.error {
        m.insert(
            "error".into(),
            json!({"name": e.name, "message": e.message}),
        );
    }
    Value::Object(m)
}

/// The process for a run on the server: every module or JSON file under the entry's folder and
/// every file module the entry imports from elsewhere in its project (the engine's entry check
/// loads it and names them: a library process's `../common-utilities/…`), by path relative to the
/// process root, so the server loads it exactly as it loads here. A module that does not load
/// here is sent with its folder alone: the server reports its error as the run's.
async fn bundle(entry: &str) -> Result<pb::ProcessBundle> {
    let (path, export) = match entry.rsplit_once('#') {
        Some((p, x)) => (p, x.to_owned()),
        None => (entry, String::new()),
    };
    let entry = Path::new(path)
        .canonicalize()
        .with_context(|| format!("process file {path} cannot be opened"))?;
    let folder = entry
        .parent()
        .context("the process file has no folder")?
        .to_owned();
    let export_name = (!export.is_empty()).then_some(export.as_str());
    let (root, imported) = match babysitter_engine::check_entry(&entry, export_name, None).await {
        Ok(check) => (check.root, check.modules),
        Err(_) => (folder.clone(), Vec::new()),
    };
    let mut files: std::collections::BTreeMap<String, Vec<u8>> = Default::default();
    let mut stack = vec![folder];
    while let Some(dir) = stack.pop() {
        for e in
            std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?
        {
            let p = e?.path();
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if p.is_dir() {
                if name != "node_modules" && !name.starts_with('.') {
                    stack.push(p);
                }
                continue;
            }
            let ext = p.extension().and_then(|x| x.to_str()).unwrap_or_default();
            if matches!(ext, "js" | "mjs" | "cjs" | "json") {
                let content =
                    std::fs::read(&p).with_context(|| format!("cannot read {}", p.display()))?;
                files.insert(relative(&root, &p)?, content);
            }
        }
    }
    for (name, p) in imported {
        if let std::collections::btree_map::Entry::Vacant(slot) = files.entry(name) {
            slot.insert(std::fs::read(&p).with_context(|| format!("cannot read {}", p.display()))?);
        }
    }
    Ok(pb::ProcessBundle {
        entry_path: relative(&root, &entry)?,
        export_name: export,
        files: files
            .into_iter()
            .map(|(path, content)| pb::ProcessFile {
                path,
                content: content.into(),
            })
            .collect(),
    })
}

fn relative(root: &Path, p: &Path) -> Result<String> {
    let rel: PathBuf = p.strip_prefix(root)?.to_owned();
    rel.to_str()
        .map(|s| s.replace('\\', "/"))
        .ok_or_else(|| anyhow!("{} is not UTF-8", rel.display()))
}

async fn run(command: &str, url: &str, a: &Args, env: &EnvMap) -> Result<Value> {
    let mut c = client(url, env)?;
    let ns = a.value("namespace").unwrap_or_default().to_owned();
    match command {
        "run:create" => {
            let entry = a
                .value("entry")
                .or_else(|| a.positional.first().map(String::as_str))
                .ok_or_else(|| anyhow!("--entry <process.mjs[#export]> is required"))?;
            let inputs = match a.value("inputs") {
                Some(p) => {
                    let bytes =
                        std::fs::read(p).with_context(|| format!("cannot read inputs file {p}"))?;
                    serde_json::from_slice::<Value>(&bytes)
                        .with_context(|| format!("inputs file {p} is not JSON"))?;
                    Some(bytes.into())
                }
                None => None,
            };
            let mut labels = HashMap::new();
            for l in a.flags.get("label").into_iter().flatten() {
                let (k, v) = l
                    .split_once('=')
                    .ok_or_else(|| anyhow!("--label {l}: expected key=value"))?;
                labels.insert(k.to_owned(), v.to_owned());
            }
            let r = c
                .create_run(pb::CreateRunRequest {
                    namespace: ns,
                    process: Some(bundle(entry).await?),
                    inputs_json: inputs,
                    labels,
                    run_id: a.value("run-id").unwrap_or_default().into(),
                    process_id: a.value("process-id").unwrap_or_default().into(),
                    request: a.value("request").unwrap_or_default().into(),
                    prompt: a.value("prompt").unwrap_or_default().into(),
                    idempotency_key: a.value("idempotency-key").unwrap_or_default().into(),
                })
                .await?
                .into_inner();
            Ok(run_json(&r.run.context("no run in the answer")?))
        }
        "run:status" | "run:iterate" => {
            let r = c
                .get_run(pb::GetRunRequest {
                    namespace: ns,
                    run_id: a.run_id()?,
                })
                .await?
                .into_inner();
            Ok(run_json(&r.run.context("no run in the answer")?))
        }
        "run:events" | "task:list" => {
            let run_id = a.run_id()?;
            let events = events_to_head(&mut c, &ns, &run_id).await?;
            if command == "run:events" {
                return Ok(json!({"runId": run_id, "events": events}));
            }
            let mut pending: Vec<Value> = Vec::new();
            let mut done = std::collections::HashSet::new();
            for e in events.iter().rev() {
                let id = e["data"]["effectId"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                match e["type"].as_str() {
                    Some("EFFECT_RESOLVED" | "EFFECT_CANCELLED") => {
                        done.insert(id);
                    }
                    Some("EFFECT_REQUESTED") if !done.contains(&id) => pending.push(json!({
                        "effectId": id, "kind": e["data"]["kind"], "label": e["data"]["label"],
                        "taskId": e["data"]["taskId"], "status": "requested",
                    })),
                    _ => {}
                }
            }
            pending.reverse();
            Ok(json!({"runId": run_id, "tasks": pending}))
        }
        "run:halt" => {
            let failed = a.value("final-status") == Some("failed");
            let r = c
                .halt_run(pb::HaltRunRequest {
                    namespace: ns,
                    run_id: a.run_id()?,
                    reason: a.value("reason").unwrap_or_default().into(),
                    final_status: if failed {
                        pb::HaltFinalStatus::Failed as i32
                    } else {
                        pb::HaltFinalStatus::Completed as i32
                    },
                })
                .await?
                .into_inner();
            let mut out = run_json(&r.run.context("no run in the answer")?);
            out["alreadyTerminal"] = json!(r.already_terminal);
            Ok(out)
        }
        "run:cancel" => {
            let r = c
                .cancel_run(pb::CancelRunRequest {
                    namespace: ns,
                    run_id: a.run_id()?,
                    reason: a.value("reason").unwrap_or_default().into(),
                })
                .await?
                .into_inner();
            Ok(run_json(&r.run.context("no run in the answer")?))
        }
        "task:post" => {
            let run_id = a.run_id()?;
            let effect_id = a.positional.get(1).cloned().ok_or_else(|| {
                anyhow!("usage: task:post <runId> <effectId> --status ok|error --value FILE")
            })?;
            let value: Value = match (a.value("value"), a.value("value-inline")) {
                (Some(p), _) => serde_json::from_slice(
                    &std::fs::read(p).with_context(|| format!("cannot read value file {p}"))?,
                )
                .with_context(|| format!("value file {p} is not JSON"))?,
                (None, Some(inline)) => {
                    serde_json::from_str(inline).context("--value-inline is not JSON")?
                }
                (None, None) => Value::Null,
            };
            let outcome = match a.value("status").unwrap_or("ok") {
                "ok" => cpb::task_result::Outcome::ValueJson(serde_json::to_vec(&value)?.into()),
                "error" => cpb::task_result::Outcome::Error(cpb::TaskError {
                    name: value["name"].as_str().unwrap_or("Error").to_owned(),
                    message: value["message"]
                        .as_str()
                        .map_or_else(|| value.to_string(), str::to_owned),
                    stack: String::new(),
                    data_json: value
                        .get("data")
                        .map(|d| d.to_string().into_bytes().into())
                        .unwrap_or_default(),
                }),
                other => bail!("--status {other}: expected ok or error"),
            };
            let r = c
                .post_task_result(pb::PostTaskResultRequest {
                    namespace: ns,
                    run_id: run_id.clone(),
                    effect_id: effect_id.clone(),
                    result: Some(cpb::TaskResult {
                        outcome: Some(outcome),
                        ..Default::default()
                    }),
                })
                .await?
                .into_inner();
            Ok(
                json!({"runId": run_id, "effectId": effect_id, "status": a.value("status").unwrap_or("ok"),
                      "resolvedSeq": r.resolved_seq, "alreadyResolved": r.already_resolved}),
            )
        }
        other => bail!(
            "{other} has no remote form (remote commands: {})",
            COMMANDS.join(", ")
        ),
    }
}

/// The run's journal events up to its head when the call starts.
async fn events_to_head(
    c: &mut RunServiceClient<AuthedChannel>,
    ns: &str,
    run_id: &str,
) -> Result<Vec<Value>> {
    let mut stream = c
        .watch_run(pb::WatchRunRequest {
            namespace: ns.into(),
            run_id: run_id.into(),
            from_seq: 1,
            include_agent_events: false,
        })
        .await?
        .into_inner();
    let mut head = 0;
    let mut out = Vec::new();
    while let Some(m) = stream.message().await? {
        if let Some(r) = &m.run
            && head == 0
        {
            head = r.head_seq;
        }
        for e in m.events {
            out.push(json!({
                "seq": e.seq, "id": e.ulid, "type": e.r#type, "recordedAt": e.recorded_at,
                "data": serde_json::from_slice::<Value>(&e.data_json).unwrap_or(Value::Null),
            }));
        }
        if out.len() as u64 >= head {
            break;
        }
    }
    Ok(out)
}

/// `babysitter run --server URL <process>` (or `--resume <runId>`): creates the run on the
/// orchestrator and follows it to the end — effects as they are requested and resolved (NDJSON
/// with `--json`), breakpoints approved with `--yes` or asked on the terminal (without a terminal
/// and without `--yes` they wait for an approver elsewhere). Exit code 0 when the run completes.
pub async fn drive_run(
    url: &str,
    env: &EnvMap,
    process: Option<&str>,
    inputs: Option<&Path>,
    resume: Option<&str>,
    yes: bool,
    json_out: bool,
) -> Result<u8> {
    use std::io::IsTerminal;
    let mut c = client(url, env)?;
    let run_id = match (resume, process) {
        (Some(id), _) => id.to_owned(),
        (None, Some(p)) => {
            let inputs = match inputs {
                Some(f) => {
                    let bytes = std::fs::read(f)
                        .with_context(|| format!("cannot read inputs file {}", f.display()))?;
                    serde_json::from_slice::<Value>(&bytes)
                        .with_context(|| format!("inputs file {} is not JSON", f.display()))?;
                    Some(bytes.into())
                }
                None => None,
            };
            c.create_run(pb::CreateRunRequest {
                process: Some(bundle(p).await?),
                inputs_json: inputs,
                ..Default::default()
            })
            .await?
            .into_inner()
            .run
            .context("no run in the answer")?
            .run_id
        }
        (None, None) => bail!("a process file or --resume <runId> is required"),
    };
    let say = |v: Value, text: String| {
        if json_out {
            println!("{v}");
        } else {
            eprintln!("{text}");
        }
    };
    say(
        json!({"type": "run", "runId": run_id, "server": url}),
        format!("run {run_id} on {url}"),
    );
    let mut stream = c
        .watch_run(pb::WatchRunRequest {
            run_id: run_id.clone(),
            from_seq: 1,
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut labels: HashMap<String, String> = HashMap::new();
    let mut asked = std::collections::HashSet::new();
    while let Some(m) = stream.message().await? {
        for e in &m.events {
            let data: Value = serde_json::from_slice(&e.data_json).unwrap_or(Value::Null);
            let id = data["effectId"].as_str().unwrap_or_default().to_owned();
            match e.r#type.as_str() {
                "EFFECT_REQUESTED" => {
                    let name = data["label"]
                        .as_str()
                        .or(data["taskId"].as_str())
                        .unwrap_or("task")
                        .to_owned();
                    say(
                        json!({"type": "effect.requested", "effectId": id, "kind": data["kind"], "label": name}),
                        format!("  → {name} ({})", data["kind"].as_str().unwrap_or("?")),
                    );
                    labels.insert(id, name);
                }
                "EFFECT_RESOLVED" | "EFFECT_CANCELLED" => {
                    let name = labels.get(&id).cloned().unwrap_or_else(|| id.clone());
                    let ok = data["status"] == "ok";
                    say(
                        json!({"type": "effect.resolved", "effectId": id, "status": data["status"]}),
                        format!("  {} {name}", if ok { "✓" } else { "✗" }),
                    );
                }
                _ => {}
            }
        }
        let waiting_bp = m
            .run
            .as_ref()
            .is_some_and(|r| r.pending_effects_by_kind.contains_key("breakpoint"));
        if !waiting_bp {
            continue;
        }
        let bps = c
            .list_breakpoints(pb::ListBreakpointsRequest {
                run_id: run_id.clone(),
                ..Default::default()
            })
            .await?
            .into_inner()
            .breakpoints;
        for bp in bps {
            if !asked.insert(bp.effect_id.clone()) {
                continue;
            }
            let payload: Value = serde_json::from_slice(&bp.payload_json).unwrap_or(Value::Null);
            let question = payload["question"]
                .as_str()
                .unwrap_or("approve?")
                .to_owned();
            let approve = if yes {
                Some(true)
            } else if std::io::stdin().is_terminal() {
                eprint!("  ? {}: {question} [y/N] ", bp.label);
                let mut line = String::new();
                std::io::stdin().read_line(&mut line)?;
                Some(matches!(line.trim(), "y" | "Y" | "yes"))
            } else {
                say(
                    json!({"type": "breakpoint.waiting", "effectId": bp.effect_id, "label": bp.label}),
                    format!(
                        "  … {} waits for an approver (ResolveBreakpoint on {url})",
                        bp.label
                    ),
                );
                None
            };
            if let Some(approved) = approve {
                c.resolve_breakpoint(pb::ResolveBreakpointRequest {
                    run_id: run_id.clone(),
                    effect_id: bp.effect_id.clone(),
                    decision: if approved {
                        pb::BreakpointDecision::Approve as i32
                    } else {
                        pb::BreakpointDecision::Reject as i32
                    },
                    approver: env.get_non_empty("USER").unwrap_or("cli").to_owned(),
                    ..Default::default()
                })
                .await?;
            }
        }
    }
    let r = c
        .get_run(pb::GetRunRequest {
            run_id: run_id.clone(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .run
        .context("no run in the answer")?;
    let summary = run_json(&r);
    say(
        json!({"type": "run.finished", "run": summary}),
        format!("run {run_id}: {}", status_name(r.status)),
    );
    if !json_out {
        println!(
            "{}",
            serde_json::to_string_pretty(&summary["output"]).unwrap_or_default()
        );
    }
    Ok(if r.status == pb::RunStatus::Completed as i32 {
        0
    } else {
        1
    })
}
