//! One OpenTelemetry trace per run, across the four services as real processes (issue 27 §4).
//!
//! An OTLP/gRPC receiver runs in the test (`opentelemetry-proto`'s collector service on
//! 127.0.0.1:0; no collector can be installed from a trustworthy package, toolchain.md §9). The
//! `journal`, `orchestrator`, `harness-launcher` and `transport-proxy` binaries export to it
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, a short batch delay). A process asks for one shell task, which
//! prints its `TRACEPARENT`, then one agent task run by a real harness CLI, whose model requests
//! go through the transport proxy (the harness's protocol in front, another one behind) to the
//! scripted model server. Once per harness: Claude Code, Codex, Gemini CLI, Pi and OpenCode.
//!
//! After the run completes and every service has been stopped (each flushes its spans on
//! SIGTERM), the run's spans must form one tree in one trace:
//! - the orchestrator's `run` root (no parent); `run.iterate` and `run.task` spans its children;
//! - the launcher's `worker.task` spans children of the `run.task` span of the same effect;
//!   `task.process` (the shell command) and `harness.process` (the CLI) children of theirs;
//! - the shell command saw the `task.process` span in `TRACEPARENT`;
//! - the proxy's `proxy.request` spans children of the `harness.process` span (through the
//!   `traceparent` header the CLI was configured to send, see the launcher's
//!   `harness::trace_headers`), and the upstream requests the scripted server received carry
//!   the proxy span as their parent;
//! - the journal's `JournalService.Append` spans in the trace, some under a `run.iterate` span;
//! - spans of all four `service.name`s.
//!
//! The CLIs are the pinned installs of `scripts/ensure-*.sh`; without one its test is skipped,
//! saying why (a failure under `BABYSITTER_REQUIRE_ALL=1`, as in CI).
//!
//! Another test, which needs no harness, restarts the orchestrator mid-run: the run's trace
//! context is kept in run.json, so the orchestrator that recovers the run continues its trace.

#[path = "support/cluster.rs"]
mod cluster;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use babysitter_harness_launcher::config::{LauncherConfig, OrchestratorLink, WorkerConfig};
use babysitter_harness_launcher::testing::{
    self, CLAUDE_CODE, CODEX, GEMINI_CLI, OPENCODE, PI, RealCli, TOOL_TURN_PROMPT,
};
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_tests::skip::{self, skip};
use babysitter_tests::{ServiceProcess, workspace_bin};
use babysitter_transport_proxy::protocol::Protocol;
use babysitter_transport_proxy::scripted::ScriptedServer;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// A shell task that prints the trace context it was given, then one agent task.
const PROCESS: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const sh = defineTask('t.sh', () => ({ kind: 'shell', title: 'trace env',
  shell: { command: 'printf %s "$TRACEPARENT"' } }));
const agent = defineTask('t.agent', (a) => ({ kind: 'agent', title: 'out.txt',
  execution: { harness: a.harness, cwd: a.project },
  agent: { prompt: a.prompt } }));
export async function process(inputs, ctx) {
  const shell = await ctx.task(sh, {});
  const answer = await ctx.task(agent, inputs);
  return { traceparent: shell.stdout, answer };
}
"#;

/// A guard against a hung CLI or service, not a timing assertion.
const RUN_GUARD: Duration = Duration::from_secs(300);
/// How long to wait for the flushed spans to arrive (a guard too).
const SPANS_GUARD: Duration = Duration::from_secs(30);

const SERVICES: [&str; 4] = [
    "orchestrator",
    "journal",
    "harness-launcher",
    "transport-proxy",
];

/// The OTLP/gRPC trace receiver: every export request goes into a channel.
struct Receiver(mpsc::UnboundedSender<ExportTraceServiceRequest>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let _ = self.0.send(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// One exported span and the service that exported it.
#[derive(Debug, Clone)]
struct Got {
    service: String,
    span: Span,
}

impl Got {
    fn attr(&self, key: &str) -> Option<String> {
        string_attr(&self.span.attributes, key)
    }
}

fn string_attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    attrs
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref()?.value.as_ref())
        .map(|v| match v {
            AnyValue::StringValue(s) => s.clone(),
            AnyValue::IntValue(i) => i.to_string(),
            other => format!("{other:?}"),
        })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The in-test OTLP/gRPC receiver and what it has received.
struct Otlp {
    rx: mpsc::UnboundedReceiver<ExportTraceServiceRequest>,
    /// `OTEL_*` settings pointing a service at it, with a short batch delay.
    env: Vec<(String, String)>,
    spans: Vec<Got>,
}

impl Otlp {
    /// Listening on 127.0.0.1:0 (bound before any exporter exists).
    async fn start() -> Otlp {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(Receiver(tx)))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let env = vec![
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(),
                format!("http://{addr}"),
            ),
            ("OTEL_BSP_SCHEDULE_DELAY".to_owned(), "100".to_owned()),
        ];
        Otlp {
            rx,
            env,
            spans: Vec::new(),
        }
    }

    /// `env` with `OTEL_SERVICE_NAME=name` (to tell two processes of one service apart).
    fn env_named(&self, name: &str) -> Vec<(String, String)> {
        let mut env = self.env.clone();
        env.push(("OTEL_SERVICE_NAME".to_owned(), name.to_owned()));
        env
    }

    /// Collects spans until `done` holds of them or [`SPANS_GUARD`] runs out (the checks then
    /// say what is missing).
    async fn collect_until(&mut self, done: impl Fn(&[Got]) -> bool) -> &[Got] {
        let until = tokio::time::Instant::now() + SPANS_GUARD;
        loop {
            drain(&mut self.rx, &mut self.spans);
            if done(&self.spans) || tokio::time::Instant::now() > until {
                return &self.spans;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The spans of export requests received so far.
fn drain(rx: &mut mpsc::UnboundedReceiver<ExportTraceServiceRequest>, into: &mut Vec<Got>) {
    while let Ok(req) = rx.try_recv() {
        for rs in req.resource_spans {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| string_attr(&r.attributes, "service.name"))
                .unwrap_or_default();
            for scope in rs.scope_spans {
                for span in scope.spans {
                    into.push(Got {
                        service: service.clone(),
                        span,
                    });
                }
            }
        }
    }
}

/// `traceparent`'s trace id and parent (span) id.
fn ids_of(traceparent: &str) -> (String, String) {
    let parts: Vec<&str> = traceparent.trim().split('-').collect();
    assert_eq!(parts.len(), 4, "a W3C traceparent: {traceparent:?}");
    (parts[1].to_owned(), parts[2].to_owned())
}

/// The proxy's config: `front` (the harness's protocol) in front, the scripted server behind
/// speaking another protocol (OpenAI Chat, or Anthropic for a Chat front), so every request is
/// translated.
fn proxy_config(dir: &std::path::Path, front: Protocol, upstream: &str) -> std::path::PathBuf {
    let (provider, base) = match front {
        Protocol::OpenAiChat => ("anthropic", upstream.to_owned()),
        _ => ("openai", format!("{upstream}/v1")),
    };
    let file = dir.join("transport-proxy.toml");
    std::fs::write(
        &file,
        format!(
            "version = 1\nlisten = \"127.0.0.1:0\"\n[[routes]]\nname = \"harness\"\n\
             front = \"{front}\"\n[routes.upstream]\nprovider = \"{provider}\"\n\
             base-url = \"{base}\"\nmodel = \"{}\"\n",
            testing::SCRIPTED_MODEL
        ),
    )
    .expect("write the proxy config");
    file
}

/// The launcher's TOML config: `cli` (at `bin`) against the proxy, plus shell tasks.
fn launcher_config(
    dir: &std::path::Path,
    orchestrator: &str,
    (cli, bin): (RealCli, std::path::PathBuf),
    proxy: String,
) -> std::path::PathBuf {
    let config = LauncherConfig {
        orchestrator: OrchestratorLink {
            url: orchestrator.to_owned(),
            token_file: None,
            ..OrchestratorLink::default()
        },
        worker: WorkerConfig {
            id: "traced".into(),
            work_dir: dir.join("work"),
            max_concurrency: 2,
            drain_timeout_secs: 10,
            ..WorkerConfig::default()
        },
        agent: cli.scripted_config(bin, cli.native, proxy),
        ..LauncherConfig::default()
    };
    let file = dir.join("harness-launcher.toml");
    std::fs::write(&file, toml::to_string(&config).expect("config as TOML"))
        .expect("write the launcher config");
    file
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_per_run_across_the_four_services() {
    one_trace_with(CLAUDE_CODE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_per_run_with_codex() {
    one_trace_with(CODEX).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_per_run_with_gemini_cli() {
    one_trace_with(GEMINI_CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_per_run_with_pi() {
    one_trace_with(PI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_per_run_with_opencode() {
    one_trace_with(OPENCODE).await;
}

/// The run's tree with `cli` running the agent task, its requests through the proxy.
async fn one_trace_with(cli: RealCli) {
    let Some(bin) = skip::installed(&cli.path()) else {
        return skip(format!(
            "needs the {} CLI at {}: run scripts/ensure-{}.sh",
            cli.harness,
            skip::tidy(&cli.path()).display(),
            cli.harness
        ));
    };

    let mut otlp = Otlp::start().await;
    let otel = otlp.env.clone();

    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let mut journal = cluster::start_journal(
        &format!("file://{}", d.join("journal").display()),
        &[],
        &otel,
        d.join("journal.log"),
    );
    let args = cluster::orchestrator_args(
        &format!("http://{}", journal.ready),
        "127.0.0.1:0",
        &d.join("orchestrator-runs"),
    );
    let mut orchestrator = ServiceProcess::start(
        &workspace_bin("orchestrator").expect("the orchestrator binary"),
        &args,
        &otel,
        "orchestrator listening on ",
        d.join("orchestrator.log"),
    )
    .expect("orchestrator");
    let url = format!("http://{}", orchestrator.ready);
    let scripted = ScriptedServer::start(([127, 0, 0, 1], 0).into(), None, None)
        .await
        .expect("scripted model server");
    let mut proxy = ServiceProcess::start(
        &workspace_bin("babysitter-transport-proxy").expect("the transport-proxy binary"),
        &[
            "--config".to_owned(),
            proxy_config(d, cli.native, &scripted.url())
                .display()
                .to_string(),
        ],
        &otel,
        "transport-proxy listening on ",
        d.join("transport-proxy.log"),
    )
    .expect("transport-proxy");
    let mut worker = ServiceProcess::start(
        &workspace_bin("harness-launcher").expect("the launcher binary"),
        &[
            "--config".to_owned(),
            launcher_config(d, &url, (cli, bin), format!("http://{}", proxy.ready))
                .display()
                .to_string(),
        ],
        &otel,
        "harness-launcher: harnesses ",
        d.join("harness-launcher.log"),
    )
    .expect("harness-launcher");
    let logs = |procs: [&ServiceProcess; 4]| {
        procs
            .iter()
            .map(|p| format!("--- {}\n{}", p.name(), p.log_tail(40)))
            .collect::<Vec<_>>()
            .join("\n")
    };

    let project = d.join("project");
    std::fs::create_dir_all(&project).expect("project dir");
    let mut c = cluster::run_client(&url, None);
    let run_id = cluster::create(
        &mut c,
        PROCESS,
        json!({"harness": cli.harness, "project": project, "prompt": TOOL_TURN_PROMPT}),
    )
    .await;
    let deadline = tokio::time::Instant::now() + RUN_GUARD;
    let run = loop {
        let run = cluster::get_run(&mut c, &run_id).await;
        if run.status != pb::RunStatus::Running as i32
            && run.status != pb::RunStatus::Created as i32
        {
            break run;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run did not finish:\n{}",
            logs([&orchestrator, &journal, &worker, &proxy])
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let ctx = logs([&orchestrator, &journal, &worker, &proxy]);
    assert_eq!(
        run.status,
        pb::RunStatus::Completed as i32,
        "{run:?}\n{ctx}"
    );
    let output: Value = serde_json::from_slice(&run.output_json).unwrap_or_default();
    testing::check_done(&output["answer"], &ctx);
    let shell_traceparent = output["traceparent"]
        .as_str()
        .unwrap_or_default()
        .to_owned();

    // SIGTERM: each service flushes its spans as it exits.
    for p in [&mut worker, &mut proxy, &mut orchestrator, &mut journal] {
        let status = p.terminate();
        assert!(
            status.is_some_and(|s| s.success()),
            "{}: {status:?}",
            p.name()
        );
    }
    let upstream = scripted.requests();
    scripted.stop().await;

    let spans = otlp
        .collect_until(|spans| {
            let services: BTreeSet<&str> = spans.iter().map(|g| g.service.as_str()).collect();
            let names: BTreeSet<&str> = spans.iter().map(|g| g.span.name.as_str()).collect();
            SERVICES.iter().all(|s| services.contains(s))
                && [
                    "run",
                    "run.iterate",
                    "run.task",
                    "worker.task",
                    "task.process",
                    "harness.process",
                    "proxy.request",
                ]
                .iter()
                .all(|n| names.contains(n))
        })
        .await;
    check_tree(spans, &run_id, &shell_traceparent, &upstream, &ctx);
}

/// One shell task.
const ONE_SHELL_TASK: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const sh = defineTask('t.sh', () => ({ kind: 'shell', title: 'after', shell: { command: 'true' } }));
export async function process(inputs, ctx) {
  return await ctx.task(sh, {});
}
"#;

/// The run's trace context is kept in run.json: an orchestrator that takes the run over after a
/// restart continues its trace. The first orchestrator creates the run and queues its task (no
/// worker yet) and stops; the second (another `service.name`, to tell them apart) recovers it,
/// a worker runs the task, the run completes — and the second orchestrator's iterations and task
/// span are children of the root span the first one made. Needs no harness CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_orchestrator_continues_the_runs_trace() {
    let mut otlp = Otlp::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let mut journal = cluster::start_journal(
        &format!("file://{}", d.join("journal").display()),
        &[],
        &otlp.env,
        d.join("journal.log"),
    );
    let journal_url = format!("http://{}", journal.ready);
    let orchestrator = |name: &str| {
        let args =
            cluster::orchestrator_args(&journal_url, "127.0.0.1:0", &d.join("orchestrator-runs"));
        ServiceProcess::start(
            &workspace_bin("orchestrator").expect("the orchestrator binary"),
            &args,
            &otlp.env_named(name),
            "orchestrator listening on ",
            d.join(format!("{name}.log")),
        )
        .expect("orchestrator")
    };
    let mut before = orchestrator("orchestrator-before");
    let mut c = cluster::run_client(&format!("http://{}", before.ready), None);
    let run_id = cluster::create(&mut c, ONE_SHELL_TASK, json!({})).await;
    let deadline = tokio::time::Instant::now() + RUN_GUARD;
    while !cluster::journal_events(&journal.ready, None, &run_id)
        .await
        .iter()
        .any(|e| e.r#type == "EFFECT_REQUESTED")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the task was never requested:\n{}",
            before.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stopped = before.terminate();
    assert!(stopped.is_some_and(|s| s.success()), "{stopped:?}");

    let mut after = orchestrator("orchestrator-after");
    let url = format!("http://{}", after.ready);
    let mut worker = cluster::start_shell_worker(&url, "w1", d, &[]);
    let mut c = cluster::run_client(&url, None);
    let run = loop {
        let run = cluster::get_run(&mut c, &run_id).await;
        if run.status != pb::RunStatus::Running as i32
            && run.status != pb::RunStatus::Created as i32
        {
            break run;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run did not finish:\n{}\n{}",
            after.log_tail(40),
            worker.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(run.status, pb::RunStatus::Completed as i32, "{run:?}");
    for p in [&mut worker, &mut after, &mut journal] {
        let status = p.terminate();
        assert!(
            status.is_some_and(|s| s.success()),
            "{}: {status:?}",
            p.name()
        );
    }

    let spans = otlp
        .collect_until(|spans| {
            let has = |service: &str, name: &str| {
                spans
                    .iter()
                    .any(|g| g.service == service && g.span.name == name)
            };
            has("orchestrator-before", "run")
                && has("orchestrator-after", "run.iterate")
                && has("orchestrator-after", "run.task")
        })
        .await;
    let summary: Vec<String> = spans
        .iter()
        .map(|g| {
            format!(
                "{} {} parent={}",
                g.service,
                g.span.name,
                hex(&g.span.parent_span_id)
            )
        })
        .collect();
    let ctx = format!("spans:\n{}", summary.join("\n"));
    let root = spans
        .iter()
        .find(|g| g.span.name == "run" && g.attr("run_id").as_deref() == Some(run_id.as_str()))
        .unwrap_or_else(|| panic!("the run's root span\n{ctx}"));
    assert_eq!(root.service, "orchestrator-before", "{ctx}");
    let continued: Vec<&Got> = spans
        .iter()
        .filter(|g| {
            g.service == "orchestrator-after"
                && ["run.iterate", "run.task"].contains(&g.span.name.as_str())
        })
        .collect();
    assert!(
        continued.iter().any(|g| g.span.name == "run.task"),
        "the recovered task was dispatched again\n{ctx}"
    );
    for g in &continued {
        assert_eq!(
            g.span.trace_id, root.span.trace_id,
            "{} in the run's trace\n{ctx}",
            g.span.name
        );
        assert_eq!(
            g.span.parent_span_id, root.span.span_id,
            "{} a child of the first orchestrator's run span\n{ctx}",
            g.span.name
        );
    }
}

/// The run's spans form one tree in one trace, spanning the four services.
fn check_tree(
    spans: &[Got],
    run_id: &str,
    shell_traceparent: &str,
    upstream: &[babysitter_transport_proxy::scripted::LoggedRequest],
    ctx: &str,
) {
    let summary: Vec<String> = spans
        .iter()
        .map(|g| {
            format!(
                "{} {} trace={} id={} parent={}",
                g.service,
                g.span.name,
                hex(&g.span.trace_id),
                hex(&g.span.span_id),
                hex(&g.span.parent_span_id)
            )
        })
        .collect();
    let ctx = format!("spans:\n{}\n{ctx}", summary.join("\n"));
    let roots: Vec<&Got> = spans
        .iter()
        .filter(|g| g.span.name == "run" && g.attr("run_id").as_deref() == Some(run_id))
        .collect();
    assert_eq!(roots.len(), 1, "one root span for the run\n{ctx}");
    let root = roots[0];
    assert_eq!(root.service, "orchestrator");
    assert!(
        root.span.parent_span_id.is_empty(),
        "the run's span is a root"
    );
    let trace = &root.span.trace_id;

    // Every span of the run's execution is in its trace (a client's query about the run is in
    // the client's); the trace holds all four services.
    let execution = ["run.iterate", "run.task", "worker.task"];
    for g in spans
        .iter()
        .filter(|g| execution.contains(&g.span.name.as_str()))
    {
        assert_eq!(g.attr("run_id").as_deref(), Some(run_id), "{ctx}");
        assert_eq!(
            &g.span.trace_id, trace,
            "{} in the run's trace\n{ctx}",
            g.span.name
        );
    }
    let in_trace: Vec<&Got> = spans.iter().filter(|g| &g.span.trace_id == trace).collect();
    let by_id: HashMap<&[u8], &Got> = in_trace
        .iter()
        .map(|g| (g.span.span_id.as_slice(), *g))
        .collect();
    let services: BTreeSet<&str> = in_trace.iter().map(|g| g.service.as_str()).collect();
    assert_eq!(
        services,
        SERVICES.into_iter().collect::<BTreeSet<_>>(),
        "spans of all four services in the run's trace\n{ctx}"
    );
    let named = |name: &str| -> Vec<&Got> {
        in_trace
            .iter()
            .copied()
            .filter(|g| g.span.name == name)
            .collect()
    };
    let parent_of = |g: &Got| by_id.get(g.span.parent_span_id.as_slice()).copied();

    // Orchestrator: iterations and tasks under the run's root.
    let iterations = named("run.iterate");
    assert!(iterations.len() >= 3, "an iteration per step\n{ctx}");
    for g in iterations.iter().chain(named("run.task").iter()) {
        assert_eq!(
            g.span.parent_span_id, root.span.span_id,
            "{} is a child of the run\n{ctx}",
            g.span.name
        );
    }
    let tasks = named("run.task");
    assert_eq!(tasks.len(), 2, "a dispatch span per task\n{ctx}");

    // Launcher: each task's execution under the orchestrator's span for that effect.
    let executions = named("worker.task");
    assert_eq!(executions.len(), 2, "an execution span per task\n{ctx}");
    let mut by_kind = HashMap::new();
    for exec in &executions {
        assert_eq!(exec.service, "harness-launcher");
        let parent = parent_of(exec).unwrap_or_else(|| panic!("worker.task's parent\n{ctx}"));
        assert_eq!(parent.span.name, "run.task", "{ctx}");
        assert_eq!(parent.attr("effect_id"), exec.attr("effect_id"), "{ctx}");
        by_kind.insert(
            exec.attr("kind").unwrap_or_default(),
            exec.span.span_id.clone(),
        );
    }
    let shell_exec = by_kind
        .get("shell")
        .unwrap_or_else(|| panic!("shell\n{ctx}"));
    let agent_exec = by_kind
        .get("agent")
        .unwrap_or_else(|| panic!("agent\n{ctx}"));

    // The shell command's span, under its task, handed to it in TRACEPARENT.
    let commands = named("task.process");
    assert_eq!(commands.len(), 1, "{ctx}");
    assert_eq!(&commands[0].span.parent_span_id, shell_exec, "{ctx}");
    let (tp_trace, tp_parent) = ids_of(shell_traceparent);
    assert_eq!(
        tp_trace,
        hex(trace),
        "the shell's TRACEPARENT is in the run's trace"
    );
    assert_eq!(
        tp_parent,
        hex(&commands[0].span.span_id),
        "the shell's TRACEPARENT names its process span"
    );

    // The CLI's process span, under the agent task; the proxy's request spans under it (the
    // header the CLI sent); the upstream requests under those.
    let harness = named("harness.process");
    assert_eq!(harness.len(), 1, "{ctx}");
    assert_eq!(&harness[0].span.parent_span_id, agent_exec, "{ctx}");
    let proxied = named("proxy.request");
    assert!(
        !proxied.is_empty(),
        "the model requests went through the proxy\n{ctx}"
    );
    for p in &proxied {
        assert_eq!(p.service, "transport-proxy");
        assert_eq!(
            p.span.parent_span_id, harness[0].span.span_id,
            "a proxied model request is a child of the harness process\n{ctx}"
        );
    }
    let proxy_ids: BTreeSet<String> = proxied.iter().map(|p| hex(&p.span.span_id)).collect();
    let sent: Vec<(String, String)> = upstream
        .iter()
        .filter_map(|r| r.headers.iter().find(|(k, _)| k == "traceparent"))
        .map(|(_, v)| ids_of(v))
        .collect();
    assert!(
        !sent.is_empty(),
        "upstream requests carry traceparent: {upstream:?}"
    );
    for (t, parent) in &sent {
        assert_eq!(t, &hex(trace), "upstream request in the run's trace");
        assert!(
            proxy_ids.contains(parent),
            "an upstream request's parent is a proxy request span: {parent}\n{ctx}"
        );
    }

    // Journal: every append to the run is in its trace (writes are the run's own doing, never a
    // client's query), some of them made inside an iteration.
    let run_appends = spans.iter().filter(|g| {
        g.service == "journal"
            && g.span.name == "append"
            && g.attr("run_id").as_deref() == Some(run_id)
    });
    for g in run_appends {
        assert_eq!(
            &g.span.trace_id, trace,
            "an append to the run in its trace\n{ctx}"
        );
    }
    let appends = named("JournalService.Append");
    assert!(!appends.is_empty(), "{ctx}");
    let under_iteration = |g: &Got| {
        let mut at = parent_of(g);
        while let Some(p) = at {
            if p.span.name == "run.iterate" {
                return true;
            }
            at = parent_of(p);
        }
        false
    };
    for a in &appends {
        assert_eq!(a.service, "journal");
        let parent =
            parent_of(a).unwrap_or_else(|| panic!("an append's parent is in the trace\n{ctx}"));
        assert_eq!(parent.service, "orchestrator", "{ctx}");
    }
    assert!(
        appends.iter().filter(|a| under_iteration(a)).count() >= 2,
        "the iterations' appends (requested effects, the completion) are under them\n{ctx}"
    );
}
