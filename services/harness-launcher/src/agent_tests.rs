//! The runner against stand-in harness binaries (shell scripts named like the real CLIs): the
//! bad cases of issue 7 — non-zero exit, a hang past the timeout, garbage output, cancellation —
//! each end as a task error with the reason and the captured output, and kill the process group.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::harness::Detected;
use crate::provider::Provider;

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("{e}"));
    p
}

fn settings(bin: PathBuf, kind: HarnessKind) -> AgentSettings {
    let provider = Provider {
        name: "local".into(),
        protocol: kind.native_protocols()[0],
        origin: "http://127.0.0.1:9".into(),
        api_key: Some(babysitter_transport_proxy::config::Secret::new(
            "sk-never-logged",
        )),
        model: Some("fake-model".into()),
        kind: Default::default(),
    };
    AgentSettings {
        harnesses: vec![Detected {
            kind,
            version: "0.0.0".into(),
            path: bin,
        }],
        providers: BTreeMap::from([("local".into(), provider)]),
        default_provider: "local".into(),
        remote_proxy: None,
        default_timeout: Duration::from_secs(60),
        prices: crate::outcome::default_prices(),
        extra_env: BTreeMap::new(),
        path_env: "/usr/bin:/bin".into(),
        as_root: false,
        default_workspace: None,
        quota_retry: Duration::from_secs(300),
    }
}

fn task(harness: &str, extra: Value) -> Value {
    let mut t = json!({"kind": "agent", "execution": {"harness": harness},
                       "agent": {"prompt": "write out.txt"}});
    if let (Some(t), Some(e)) = (t["agent"].as_object_mut(), extra.as_object()) {
        t.extend(e.clone());
    }
    t
}

async fn run_task(
    s: &AgentSettings,
    def: &Value,
    dir: &Path,
    cancel: &CancellationToken,
) -> (AgentDone, Vec<babysitter_proto::common::v1::AgentEvent>) {
    let (tx, mut rx) = mpsc::channel(4096);
    let attempt = Attempt {
        run_id: "run",
        effect_id: "sess",
        number: 1,
        home_marker: "",
    };
    let kind = def["kind"].as_str().unwrap_or("agent");
    let task = AgentTask {
        kind,
        def,
        work_dir: dir,
        attempt,
        timeout: None,
        resume: None,
        saves: None,
    };
    let done = run(s, task, &tx, cancel).await;
    drop(tx);
    let mut evs = Vec::new();
    while let Some(e) = rx.recv().await {
        evs.push(e);
    }
    (done, evs)
}

/// A stand-in harness `name` (a shell script with `body`) of `kind` runs a plain task for
/// `harness`; the temp dir holding it comes back with the outcome and the events.
async fn run_script(
    name: &str,
    body: &str,
    kind: HarnessKind,
    harness: &str,
) -> (
    tempfile::TempDir,
    AgentDone,
    Vec<babysitter_proto::common::v1::AgentEvent>,
) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let s = settings(script(dir.path(), name, body), kind);
    let (d, evs) = run_task(
        &s,
        &task(harness, json!({})),
        &dir.path().join("w"),
        &CancellationToken::new(),
    )
    .await;
    (dir, d, evs)
}

fn err(d: &AgentDone) -> &Value {
    d.done
        .outcome
        .as_ref()
        .err()
        .unwrap_or_else(|| panic!("expected an error: {:?}", d.done.outcome))
}

const CLAUDE_OK: &str = r#"echo '{"type":"system","subtype":"init","session_id":"s1","model":"fake-model"}'
echo '{"type":"assistant","message":{"id":"m1","model":"fake-model","content":[{"type":"text","text":"{\"ok\": true}"}]}}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"{\"ok\": true}","usage":{"input_tokens":1000,"output_tokens":100}}'"#;

#[tokio::test]
async fn a_run_yields_the_value_usage_cost_and_a_closed_event_stream() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let bin = script(
        dir.path(),
        "claude",
        &format!("test -n \"$ANTHROPIC_API_KEY\" || exit 9\n{CLAUDE_OK}"),
    );
    let mut s = settings(bin, HarnessKind::ClaudeCode);
    s.prices.insert(
        "fake-model".into(),
        crate::outcome::Price {
            input: 1.0,
            output: 10.0,
            cache_read: 0.0,
            cache_write: 0.0,
        },
    );
    let def = task(
        "claude-code",
        json!({"outputSchema": {"type": "object", "required": ["ok"]}}),
    );
    let (d, evs) = run_task(&s, &def, &dir.path().join("w"), &CancellationToken::new()).await;
    assert_eq!(d.done.outcome, Ok(json!({"ok": true})));
    let u = d.usage.unwrap_or_default();
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.model.as_str()),
        (1000, 100, "fake-model")
    );
    assert!((u.cost_usd - 0.002).abs() < 1e-12, "{}", u.cost_usd);
    let types: Vec<&str> = evs.iter().map(|e| e.r#type.as_str()).collect();
    assert_eq!(types.first(), Some(&"session.started"));
    assert_eq!(types.last(), Some(&"session.ended"));
    assert!(!types.contains(&"agent.unparsed"), "{types:?}");
    let seqs: Vec<u64> = evs.iter().map(|e| e.sequence).collect();
    assert_eq!(seqs, (1..=evs.len() as u64).collect::<Vec<_>>());
    assert_eq!(evs[2].native_session_id.as_deref(), Some("s1"));
    // The key went to the harness's env, never into events or metadata.
    let all = format!("{:?} {}", evs, d.metadata);
    assert!(!all.contains("sk-never-logged"));
}

#[tokio::test]
async fn a_non_zero_exit_is_a_task_error_with_the_reason_and_the_output() {
    let (_dir, d, _) = run_script(
        "codex",
        "echo '{\"type\":\"thread.started\",\"thread_id\":\"t\"}'\necho 'auth exploded' >&2\nexit 3",
        HarnessKind::Codex,
        "codex",
    )
    .await;
    let e = err(&d);
    assert_eq!(e["name"], "AgentExitError");
    assert_eq!(e["message"], "codex exited with code 3: auth exploded");
    assert_eq!(e["data"]["exitCode"], 3);
    assert!(
        d.done
            .stdout
            .as_deref()
            .unwrap_or_default()
            .contains("thread.started")
    );
    assert_eq!(d.done.stderr.as_deref(), Some("auth exploded\n"));
}

#[tokio::test]
async fn garbage_output_with_exit_zero_is_a_task_error_and_unparsed_events() {
    let (_dir, d, evs) = run_script(
        "gemini",
        "echo 'Segmentation fault (core dumped) or so'\necho '<html>'",
        HarnessKind::GeminiCli,
        "gemini-cli",
    )
    .await;
    let e = err(&d);
    assert_eq!(e["name"], "AgentOutputError");
    assert!(
        e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("0 lines understood, 2 not"),
        "{e}"
    );
    assert!(
        e["data"]["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("<html>")
    );
    assert_eq!(
        evs.iter().filter(|e| e.r#type == "agent.unparsed").count(),
        2
    );
}

/// Running (a killed process may linger as a zombie until its new parent reaps it).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.chars().next()))
        .flatten()
        .is_some_and(|state| !matches!(state, 'Z' | 'X'))
}

/// A harness that starts a grandchild and hangs: the grandchild's pid is in `pidfile`.
fn hanging(dir: &Path, name: &str, pidfile: &Path) -> PathBuf {
    script(
        dir,
        name,
        &format!(
            "sleep 600 &\necho $! > {}\necho '{{\"type\":\"session\",\"id\":\"x\"}}'\nwait",
            pidfile.display()
        ),
    )
}

async fn grandchild(pidfile: &Path) -> i32 {
    for _ in 0..1000 {
        if let Some(pid) = std::fs::read_to_string(pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the stand-in harness never started its child");
}

/// Runs a hanging stand-in `kind` (cancelled once its child is up when `cancel_early`) and
/// checks that its grandchild did not survive.
async fn run_hanging(
    kind: HarnessKind,
    extra: Value,
    cancel_early: bool,
) -> (AgentDone, Vec<babysitter_proto::common::v1::AgentEvent>) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let pidfile = dir.path().join("child.pid");
    let bin = hanging(dir.path(), kind.binary_name(), &pidfile);
    let s = settings(bin, kind);
    let cancel = CancellationToken::new();
    if cancel_early {
        let (c, pf) = (cancel.clone(), pidfile.clone());
        tokio::spawn(async move {
            grandchild(&pf).await;
            c.cancel();
        });
    }
    let r = run_task(
        &s,
        &task(kind.name(), extra),
        &dir.path().join("w"),
        &cancel,
    )
    .await;
    let pid = grandchild(&pidfile).await;
    // SIGKILL to the group is delivered asynchronously: give the kernel a moment to finish it.
    for _ in 0..250 {
        if !alive(pid) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive(pid), "grandchild {pid} survived");
    r
}

#[tokio::test]
async fn a_hang_past_the_timeout_kills_the_process_group_and_is_a_task_error() {
    let (d, evs) = run_hanging(HarnessKind::Pi, json!({"timeoutMs": 3000}), false).await;
    let e = err(&d);
    assert_eq!(e["name"], "AgentTimeoutError");
    assert_eq!(
        e["message"],
        "pi did not finish within 3 s; its process group was killed"
    );
    let ended = evs.last().unwrap_or_else(|| panic!("no events"));
    assert_eq!(ended.r#type, "session.ended");
    assert!(String::from_utf8_lossy(&ended.data_json).contains("\"terminated\""));
}

#[tokio::test]
async fn cancellation_kills_the_process_group() {
    let (d, _) = run_hanging(HarnessKind::OpenCode, json!({}), true).await;
    assert_eq!(err(&d)["name"], "EffectCancelledError");
}

#[tokio::test]
async fn a_harness_that_is_not_installed_or_a_bad_task_fails_clearly() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let bin = script(dir.path(), "claude", CLAUDE_OK);
    let s = settings(bin, HarnessKind::ClaudeCode);
    let (d, _) = run_task(
        &s,
        &task("codex", json!({})),
        &dir.path().join("w"),
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(
        err(&d)["message"],
        "harness `codex` is not installed on this worker"
    );
    let bad = json!({"kind": "agent", "execution": {"harness": "claude-code"}, "agent": {}});
    let (d, _) = run_task(&s, &bad, &dir.path().join("w"), &CancellationToken::new()).await;
    assert_eq!(
        err(&d)["message"],
        "invalid agent task: agent.prompt is missing"
    );
    // The answer is not JSON though the task has a schema.
    let def = task("claude-code", json!({"outputSchema": {"type": "array"}}));
    let (d, _) = run_task(&s, &def, &dir.path().join("w"), &CancellationToken::new()).await;
    let e = err(&d);
    assert_eq!(e["name"], "AgentOutputError");
    assert_eq!(
        e["message"],
        "claude-code: the answer does not match the output schema: /: expected array"
    );
}

#[tokio::test]
async fn an_endless_line_is_cut_into_bounded_pieces_not_buffered_whole() {
    // 3 MiB without a newline, then a valid end: memory stays bounded, the run still ends.
    let (_dir, d, evs) = run_script(
        "claude",
        &format!("head -c 3145728 /dev/zero | tr '\\0' x\necho\n{CLAUDE_OK}"),
        HarnessKind::ClaudeCode,
        "claude-code",
    )
    .await;
    assert_eq!(d.done.outcome, Ok(json!("{\"ok\": true}")));
    let unparsed = evs.iter().filter(|e| e.r#type == "agent.unparsed").count();
    assert_eq!(unparsed, 3, "one per MiB piece");
}

/// The record keeps every event but the deltas, up to [`KEPT_EVENTS`] and [`KEPT_BYTES`] of
/// payload, while the live stream gets them all.
#[tokio::test]
async fn the_record_leaves_out_deltas_and_stays_within_its_bounds() {
    let (tx, mut rx) = mpsc::channel(8192);
    let drain = tokio::spawn(async move {
        let mut n = 0u64;
        while rx.recv().await.is_some() {
            n += 1;
        }
        n
    });
    let mut evs = Events {
        env: Envelope::new("s1"),
        tx: &tx,
        count: 0,
        kept: Vec::new(),
        kept_bytes: 0,
    };
    let ev = |kind: &'static str, data: Value| Ev {
        kind,
        data,
        synthetic: false,
    };
    // Deltas and items alternating, past the count bound.
    let many: Vec<Ev> = (0..KEPT_EVENTS + 500)
        .flat_map(|i| {
            [
                ev("item.delta", json!({"delta": i})),
                ev("item.completed", json!({"item": {"n": i}})),
            ]
        })
        .collect();
    evs.send(many, None).await;
    assert_eq!(evs.kept.len(), KEPT_EVENTS);
    assert!(evs.kept.iter().all(|e| e.r#type == "item.completed"));
    let sequences: Vec<u64> = evs.kept.iter().map(|e| e.sequence).collect();
    assert!(sequences.is_sorted());

    // Large payloads: kept only while they fit in the byte bound.
    let mut big = Events {
        env: Envelope::new("s2"),
        tx: &tx,
        count: 0,
        kept: Vec::new(),
        kept_bytes: 0,
    };
    let mib = "x".repeat(1024 * 1024);
    let large: Vec<Ev> = (0..20)
        .map(|_| ev("item.completed", json!({"output": mib})))
        .collect();
    big.send(large, None).await;
    let bytes: usize = big.kept.iter().map(|e| e.data_json.len()).sum();
    assert!(bytes <= KEPT_BYTES, "{bytes}");
    assert!(
        !big.kept.is_empty() && big.kept.len() < 20,
        "{}",
        big.kept.len()
    );
    drop(evs);
    drop(big);
    drop(tx);
    let live = drain.await.unwrap();
    assert_eq!(
        live,
        2 * (KEPT_EVENTS as u64 + 500) + 20,
        "the live stream has them all"
    );
}
