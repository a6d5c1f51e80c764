//! Black-box tests of runtime hooks (spec §3.10): the hook types `run:create`, `run:iterate` and
//! `task:post` call, in the reference's order, with their payloads on stdin; a dispatcher's
//! answer deciding an iteration (`{action, reason, count}`) and denying a post; `hookStatus`.

mod compat_support;

use compat_support::Sandbox;
use serde_json::Value;

const ONE_TASK: &str = "import { defineTask } from '@a5c-ai/babysitter-sdk';\n\
export const work = defineTask('work', () => ({ kind: 'node', title: 'Work', node: { entry: 'w.js' } }));\n\
export async function process(inputs, ctx) { ctx.log('phase', 'start'); const r = await ctx.task(work, {}); return { got: r.v }; }\n";

const HOOK_TYPES: &[&str] = &[
    "on-run-start",
    "on-iteration-start",
    "on-iteration-end",
    "task.created",
    "task.completed",
    "on-run-complete",
    "on-run-fail",
    "babysitter-log",
];

/// Per-repo hooks that append `<hookType> <payload>` to `hooks.log`.
fn recording(s: &Sandbox) {
    for t in HOOK_TYPES {
        s.write(
            &format!(".a5c/hooks/{t}/record.sh"),
            &format!("printf '%s ' '{t}' >> hooks.log; cat >> hooks.log; echo >> hooks.log\n"),
        );
    }
}

fn calls(s: &Sandbox) -> Vec<(String, Value)> {
    std::fs::read_to_string(s.project.join("hooks.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let (t, json) = l.split_once(' ').unwrap();
            (t.to_owned(), serde_json::from_str(json).unwrap())
        })
        .collect()
}

fn types(c: &[(String, Value)]) -> Vec<&str> {
    c.iter().map(|(t, _)| t.as_str()).collect()
}

#[test]
fn compat_runtime_hooks_follow_the_run() {
    let s = Sandbox::new();
    s.write("processes/one.mjs", ONE_TASK);
    s.write("inputs.json", "{\"x\": 1}");
    recording(&s);
    let id = s.create("hooked", "processes/one.mjs#process");
    let c = calls(&s);
    assert_eq!(types(&c), ["on-run-start"]);
    assert_eq!(c[0].1["runId"], "hooked");
    assert_eq!(c[0].1["processId"], "golden/demo");
    assert_eq!(c[0].1["inputs"]["x"], 1);
    assert_eq!(c[0].1["hookType"], "on-run-start");
    assert!(c[0].1["timestamp"].as_str().unwrap().ends_with('Z'));

    let it = s.iterate(&id);
    assert_eq!(it["status"], "waiting");
    assert_eq!(it["metadata"]["hookStatus"], "executed");
    let effect = it["nextActions"][0]["effectId"]
        .as_str()
        .unwrap()
        .to_owned();
    let c = calls(&s);
    assert_eq!(
        types(&c)[1..],
        [
            "on-iteration-start",
            "task.created",
            "babysitter-log",
            "on-iteration-end",
            "on-iteration-start",
            "on-iteration-end"
        ]
    );
    assert_eq!(c[3].1, "phase start", "the log line's text is the payload");
    assert_eq!(c[1].1["iteration"], 1);
    assert_eq!(c[2].1["effectId"], effect.as_str());
    assert_eq!(c[2].1["kind"], "node");
    assert_eq!(c[2].1["title"], "Work");
    assert_eq!(c[4].1["status"], "waiting");
    assert_eq!(c[5].1["pending"][0]["effectId"], effect.as_str());
    assert_eq!(c[6].1["action"], "none");
    assert_eq!(c[6].1["reason"], "node-pending");

    s.post_inline(&id, &effect, r#"{"v": 7}"#).ok();
    let c = calls(&s);
    let posted = &c.last().unwrap();
    assert_eq!(posted.0, "task.completed");
    assert_eq!(posted.1["effectId"], effect.as_str());
    assert_eq!(posted.1["status"], "ok");
    assert_eq!(posted.1["result"]["v"], 7);

    let it = s.iterate(&id);
    assert_eq!(it["status"], "completed");
    let c = calls(&s);
    let n = c.len();
    assert_eq!(
        types(&c)[n - 4..],
        [
            "on-iteration-start",
            "on-run-complete",
            "on-iteration-end",
            "on-iteration-end"
        ]
    );
    assert_eq!(c[n - 3].1["output"]["got"], 7);
    assert_eq!(c[n - 1].1["reason"], "completed");
    // A finished run's iterate calls nothing.
    s.iterate(&id);
    assert_eq!(calls(&s).len(), n);
}

#[test]
fn compat_a_dispatcher_decides_and_denies() {
    let s = Sandbox::new();
    s.write("processes/one.mjs", ONE_TASK);
    s.write("inputs.json", "{}");
    // The dispatcher answers the wrapper's on-iteration-start (the one with `pending`) and denies
    // task.completed; it reports what it ran on stderr.
    s.write(
        "plugins/babysitter/hooks/hook-dispatcher.sh",
        r#"payload=$(cat)
echo "plugin:dispatch.sh:success" >&2
case "$1" in
  on-iteration-start)
    case "$payload" in
      *pending*) echo '{"action": "executed-tasks", "reason": "ran them myself", "count": 2, "until": 5}' ;;
    esac ;;
  task.completed) echo '{"decision": "deny", "reason": "not on a Friday"}' ;;
esac
"#,
    );
    let id = s.create("decided", "processes/one.mjs#process");
    let it = s.iterate(&id);
    assert_eq!(it["status"], "executed");
    assert_eq!(it["action"], "executed-tasks");
    assert_eq!(it["reason"], "ran them myself");
    assert_eq!(it["count"], 2);
    assert_eq!(it["until"], 5);
    assert_eq!(it["metadata"]["hookStatus"], "executed");
    let text = s.cmd(&["run:iterate", &id]).ok().stdout;
    assert!(
        text.contains("status=executed action=executed-tasks count=2 reason=ran them myself"),
        "{text}"
    );
    let effect = it["nextActions"][0]["effectId"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = s.journal_len(&id);
    let out = s.post_inline(&id, &effect, r#"{"v": 1}"#).fails();
    assert!(
        out.stderr
            .contains("Runtime hook task.completed blocked execution: not on a Friday")
            || out
                .stdout
                .contains("Runtime hook task.completed blocked execution: not on a Friday"),
        "{}{}",
        out.stdout,
        out.stderr
    );
    assert_eq!(s.journal_len(&id), before, "a denied post writes nothing");
    assert!(
        !s.run_dir(&id)
            .join("tasks")
            .join(&effect)
            .join("result.json")
            .try_exists()
            .unwrap()
    );
}
