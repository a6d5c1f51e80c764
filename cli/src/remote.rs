//! `--server URL` (or `BABYSITTER_SERVER`): what only an orchestrator does. The server
//! iterates runs itself, so `run:create` here creates the run on it and it runs from there;
//! `run:iterate` reports where the server's own iterations have taken it, and `run:cancel` stops
//! it (a local run has no cancel). The commands that read or change a run the same way wherever
//! it lives (`run:status`, `run:events`, `run:halt`, `task:list`, `task:show`, `task:post`) are
//! the babysitter commands over the remote client (`compat::client::remote`), not here.
//!
//! `run:create --entry FILE[#export] [--inputs FILE] [--namespace NS] [--label k=v]…` uploads the
//! process bundle: every `.js` / `.mjs` / `.cjs` / `.json` file under the entry's folder (skipping
//! `node_modules` and dot-directories) and every file module the entry imports from elsewhere in
//! its project (the engine's entry check names them), by path relative to the process root.
//! `run:cancel` and `run:iterate` take the run id. Tokens: `BABYSITTER_TOKEN_FILE` (or
//! `BABYSITTER_TOKEN`); namespace `--namespace` or `BABYSITTER_NAMESPACE`.
//!
//! Output is JSON on stdout (one document), errors on stderr with exit code 1.

#![allow(clippy::print_stdout)]

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use babysitter_common::EnvMap;
use babysitter_common::client::AuthedChannel;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient;
use serde_json::{Map, Value, json};

use crate::compat::client::bundle::bundle;
use crate::compat::client::remote::Remote;
use crate::flags::{Arg, Flags};

/// The commands that have a remote form.
pub const COMMANDS: &[&str] = &["run:cancel"];

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

/// What `run:cancel --server` takes: `<runId> [--namespace NS] [--reason TEXT] [--json]`.
#[derive(Debug, Default)]
struct Args {
    run_id: Option<String>,
    namespace: Option<String>,
    reason: Option<String>,
}

impl Args {
    fn parse(argv: &[String]) -> Result<Self> {
        let mut a = Args::default();
        let mut flags = Flags::new(argv);
        while let Some(arg) = flags.next_arg() {
            match arg {
                Arg::Flag(f @ "--namespace") => {
                    a.namespace = Some(flags.value(f).map_err(anyhow::Error::msg)?)
                }
                Arg::Flag(f @ "--reason") => {
                    a.reason = Some(flags.value(f).map_err(anyhow::Error::msg)?)
                }
                // The output is JSON either way.
                Arg::Flag("--json") => {}
                Arg::Flag(f) => {
                    bail!("unknown flag {f} (run:cancel <runId> [--namespace NS] [--reason TEXT])")
                }
                Arg::Positional(p) if a.run_id.is_none() => a.run_id = Some(p.to_owned()),
                Arg::Positional(p) => bail!("unexpected argument {p}: one run id at a time"),
            }
        }
        Ok(a)
    }

    fn run_id(&self) -> Result<String> {
        self.run_id
            .clone()
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
    let args = match Args::parse(argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("[{command}] {e:#}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(command, url, &args, env)) {
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
    Ok(Remote::connect(url, env)?.client())
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

/// An output too large to come inside the `Run`: streamed by `ReadRunOutput`, its size and
/// SHA-256 checked against what the `Run` said.
async fn read_output(c: &mut RunServiceClient<AuthedChannel>, r: &pb::Run) -> Result<Value> {
    use sha2::Digest as _;
    let mut stream = c
        .read_run_output(pb::ReadRunOutputRequest {
            namespace: r.namespace.clone(),
            run_id: r.run_id.clone(),
        })
        .await?
        .into_inner();
    let mut bytes = Vec::with_capacity(usize::try_from(r.output_size_bytes).unwrap_or(0));
    while let Some(part) = stream.message().await? {
        bytes.extend_from_slice(&part.chunk);
    }
    let digest = hex::encode(sha2::Sha256::digest(&bytes));
    if bytes.len() as u64 != r.output_size_bytes || digest != r.output_sha256 {
        bail!(
            "the output of run {} arrived as {} bytes with SHA-256 {digest}; the run says {} bytes, {}",
            r.run_id,
            bytes.len(),
            r.output_size_bytes,
            r.output_sha256
        );
    }
    serde_json::from_slice(&bytes)
        .with_context(|| format!("the output of run {} is not JSON", r.run_id))
}

async fn run(command: &str, url: &str, a: &Args, env: &EnvMap) -> Result<Value> {
    let mut c = client(url, env)?;
    let ns = a
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .or_else(|| env.get_non_empty("BABYSITTER_NAMESPACE"))
        .unwrap_or_default()
        .to_owned();
    match command {
        "run:cancel" => {
            let r = c
                .cancel_run(pb::CancelRunRequest {
                    namespace: ns,
                    run_id: a.run_id()?,
                    reason: a.reason.clone().unwrap_or_default(),
                })
                .await?
                .into_inner();
            Ok(run_json(&r.run.context("no run in the answer")?))
        }
        other => bail!(
            "{other} has no remote form (remote commands: {})",
            COMMANDS.join(", ")
        ),
    }
}

/// `babysitter run --server URL <process>` (or `--resume <runId>`): creates the run on the
/// orchestrator and follows it to the end — effects as they are requested and resolved (NDJSON
/// with `--json`), breakpoints approved with `--yes` or asked on the terminal (without a terminal
/// and without `--yes` they wait for an approver elsewhere). Exit code 0 when the run completes.
pub async fn drive_run(
    url: &str,
    env: &EnvMap,
    which: WhichRun<'_>,
    yes: bool,
    json_out: bool,
) -> Result<u8> {
    let mut c = client(url, env)?;
    let run_id = match (which.resume, which.process) {
        (Some(id), _) => id.to_owned(),
        (None, Some(p)) => start_run(&mut c, p, which.inputs, which.budget).await?,
        (None, None) => bail!("a process file or --resume <runId> is required"),
    };
    let mut follow = Follow {
        url,
        run_id,
        json_out,
        labels: HashMap::new(),
        asked: std::collections::HashSet::new(),
    };
    follow.say(
        json!({"type": "run", "runId": follow.run_id, "server": url}),
        format!("run {} on {url}", follow.run_id),
    );
    let mut stream = c
        .watch_run(pb::WatchRunRequest {
            run_id: follow.run_id.clone(),
            from_seq: 1,
            ..Default::default()
        })
        .await?
        .into_inner();
    while let Some(m) = stream.message().await? {
        follow.show(&m.events);
        let waiting_bp = m
            .run
            .as_ref()
            .is_some_and(|r| r.pending_effects_by_kind.contains_key("breakpoint"));
        if waiting_bp {
            let approver = env.get_non_empty("USER").unwrap_or("cli");
            follow.answer_breakpoints(&mut c, yes, approver).await?;
        }
    }
    follow.finished(&mut c).await
}

/// The run `babysitter run --server` drives: a new one of `process` (with its inputs file and
/// budget), or the one named by `--resume`.
#[derive(Debug, Default)]
pub struct WhichRun<'a> {
    pub process: Option<&'a str>,
    pub inputs: Option<&'a Path>,
    pub resume: Option<&'a str>,
    pub budget: Option<babysitter_orchestrator::service::budget::Budget>,
}

/// Creates the run of `process` (with the inputs file, checked to be JSON) on the orchestrator,
/// for it to drive; returns its id.
async fn start_run(
    c: &mut RunServiceClient<AuthedChannel>,
    process: &str,
    inputs: Option<&Path>,
    budget: Option<babysitter_orchestrator::service::budget::Budget>,
) -> Result<String> {
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
    Ok(c.create_run(pb::CreateRunRequest {
        process: Some(bundle(process).await?),
        client_driven: false,
        inputs_json: inputs,
        budget: budget.map(babysitter_orchestrator::service::grpc::budget_pb),
        ..Default::default()
    })
    .await?
    .into_inner()
    .run
    .context("no run in the answer")?
    .run_id)
}

/// [`drive_run`] following one run: what it has said, and the breakpoints it has asked.
struct Follow<'a> {
    url: &'a str,
    run_id: String,
    json_out: bool,
    /// Each requested effect's label, for its resolution line.
    labels: HashMap<String, String>,
    asked: std::collections::HashSet<String>,
}

impl Follow<'_> {
    /// One NDJSON line on stdout with `--json`, else `text` on stderr.
    fn say(&self, v: Value, text: String) {
        if self.json_out {
            println!("{v}");
        } else {
            eprintln!("{text}");
        }
    }

    /// Effects as they are requested and resolved.
    fn show(&mut self, events: &[babysitter_proto::journal::v1::Event]) {
        for e in events {
            let data: Value = serde_json::from_slice(&e.data_json).unwrap_or(Value::Null);
            let id = data["effectId"].as_str().unwrap_or_default().to_owned();
            match e.r#type.as_str() {
                "EFFECT_REQUESTED" => {
                    let name = data["label"]
                        .as_str()
                        .or(data["taskId"].as_str())
                        .unwrap_or("task")
                        .to_owned();
                    self.say(
                        json!({"type": "effect.requested", "effectId": id, "kind": data["kind"], "label": name}),
                        format!("  → {name} ({})", data["kind"].as_str().unwrap_or("?")),
                    );
                    self.labels.insert(id, name);
                }
                "EFFECT_RESOLVED" | "EFFECT_CANCELLED" => {
                    let name = self.labels.get(&id).cloned().unwrap_or_else(|| id.clone());
                    let ok = data["status"] == "ok";
                    self.say(
                        json!({"type": "effect.resolved", "effectId": id, "status": data["status"]}),
                        format!("  {} {name}", if ok { "✓" } else { "✗" }),
                    );
                }
                _ => {}
            }
        }
    }

    /// Each pending breakpoint not asked yet: approved with `--yes`, asked on the terminal, or
    /// (neither) left waiting for an approver elsewhere.
    async fn answer_breakpoints(
        &mut self,
        c: &mut RunServiceClient<AuthedChannel>,
        yes: bool,
        approver: &str,
    ) -> Result<()> {
        use std::io::IsTerminal;
        let bps = c
            .list_breakpoints(pb::ListBreakpointsRequest {
                run_id: self.run_id.clone(),
                ..Default::default()
            })
            .await?
            .into_inner()
            .breakpoints;
        for bp in bps {
            if !self.asked.insert(bp.effect_id.clone()) {
                continue;
            }
            let payload: Value = serde_json::from_slice(&bp.payload_json).unwrap_or(Value::Null);
            let question = payload["question"].as_str().unwrap_or("approve?");
            let approved = if yes {
                true
            } else if std::io::stdin().is_terminal() {
                eprint!("  ? {}: {question} [y/N] ", bp.label);
                let mut line = String::new();
                std::io::stdin().read_line(&mut line)?;
                matches!(line.trim(), "y" | "Y" | "yes")
            } else {
                self.say(
                    json!({"type": "breakpoint.waiting", "effectId": bp.effect_id, "label": bp.label}),
                    format!(
                        "  … {} waits for an approver (ResolveBreakpoint on {})",
                        bp.label, self.url
                    ),
                );
                continue;
            };
            c.resolve_breakpoint(pb::ResolveBreakpointRequest {
                run_id: self.run_id.clone(),
                effect_id: bp.effect_id.clone(),
                decision: if approved {
                    pb::BreakpointDecision::Approve as i32
                } else {
                    pb::BreakpointDecision::Reject as i32
                },
                approver: approver.to_owned(),
                ..Default::default()
            })
            .await?;
        }
        Ok(())
    }

    /// The run's end: its summary, its output (pretty, without `--json`) and the exit code (0
    /// when it completed).
    async fn finished(&self, c: &mut RunServiceClient<AuthedChannel>) -> Result<u8> {
        let r = c
            .get_run(pb::GetRunRequest {
                run_id: self.run_id.clone(),
                ..Default::default()
            })
            .await?
            .into_inner()
            .run
            .context("no run in the answer")?;
        let mut summary = run_json(&r);
        if r.output_json.is_empty()
            && r.output_size_bytes > 0
            && let Value::Object(m) = &mut summary
        {
            m.insert("output".into(), read_output(c, &r).await?);
        }
        self.say(
            json!({"type": "run.finished", "run": summary}),
            format!("run {}: {}", self.run_id, status_name(r.status)),
        );
        if !self.json_out {
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
}
