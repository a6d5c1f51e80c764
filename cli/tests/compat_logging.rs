//! What the CLI's commands log on stderr: a process's `console.warn` / `console.error` and the
//! libraries' warnings (an unusable snapshot), at babysitter's `BABYSITTER_LOG_LEVEL`; stdout
//! keeps carrying only the command's JSON.

mod compat_support;

use compat_support::Sandbox;

const CHATTY: &str = "export async function process(inputs, ctx) {\n\
  console.log('chatty line');\n\
  console.warn('careful: n is ' + inputs.n);\n\
  console.error('an error line');\n\
  return { ok: true };\n\
}\n";

fn sandbox() -> (Sandbox, String) {
    let s = Sandbox::new();
    s.write("inputs.json", "{\"n\": 7}");
    s.write("processes/chatty.mjs", CHATTY);
    let id = s.create("run-logging", "processes/chatty.mjs#process");
    (s, id)
}

#[test]
fn a_process_console_warnings_reach_stderr_at_the_level_asked() {
    let cases: [(Option<&str>, &[&str], &[&str]); 4] = [
        (
            None,
            &["careful: n is 7", "an error line"],
            &["chatty line"],
        ),
        (
            Some("info"),
            &["careful: n is 7", "an error line", "chatty line"],
            &[],
        ),
        (
            Some("ERROR"),
            &["an error line"],
            &["careful: n is 7", "chatty line"],
        ),
        (
            Some("silent"),
            &[],
            &["careful: n is 7", "an error line", "chatty line"],
        ),
    ];
    for (level, shown, hidden) in cases {
        let (s, id) = sandbox();
        let extra: Vec<(&str, &str)> = level
            .map(|l| vec![("BABYSITTER_LOG_LEVEL", l)])
            .unwrap_or_default();
        let out = s.cmd_env(&["run:iterate", &id, "--json"], &extra).ok();
        // stdout is the command's JSON alone.
        assert_eq!(
            out.json()["status"],
            "completed",
            "{level:?}: {}",
            out.stdout
        );
        for line in shown {
            assert!(
                out.stderr.contains(line),
                "{level:?}: `{line}` missing from stderr:\n{}",
                out.stderr
            );
        }
        for line in hidden {
            assert!(
                !out.stderr.contains(line),
                "{level:?}: `{line}` on stderr:\n{}",
                out.stderr
            );
        }
        if level.is_none() {
            assert!(
                out.stderr.contains("babysitter::process"),
                "the process is named: {}",
                out.stderr
            );
        }
    }
}

#[test]
fn an_unusable_snapshot_is_reported_and_the_run_still_opens() {
    let (s, id) = sandbox();
    let snapshots = s.run_dir(&id).join("state/snapshots");
    std::fs::create_dir_all(&snapshots).unwrap();
    let bad = snapshots.join("00000000000000000001.json");
    std::fs::write(&bad, "{ not a snapshot").unwrap();
    let out = s
        .cmd_env(
            &["run:iterate", &id, "--json"],
            &[("BABYSITTER_LOG_LEVEL", "silent")],
        )
        .ok();
    assert_eq!(out.json()["status"], "completed");
    assert!(!out.stderr.contains("snapshot"), "{}", out.stderr);

    let out = s.cmd(&["run:status", &id, "--json"]).ok();
    assert_eq!(out.json()["state"], "completed", "{}", out.stdout);
    assert!(
        out.stderr.contains("unusable snapshot") && out.stderr.contains(&bad.display().to_string()),
        "the warning names the snapshot: {}",
        out.stderr
    );
    // The bad snapshot is left for the user to look at; the journal is whole.
    assert!(bad.is_file());
    assert_eq!(
        s.event_types(&id).last().map(String::as_str),
        Some("RUN_COMPLETED")
    );
}
