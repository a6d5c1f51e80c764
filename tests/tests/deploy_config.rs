//! Every setting a deployment needs is discoverable from the binaries themselves: each service's
//! `--dump-config` names it (set, or in the "Unset" list with its environment variable), so a
//! new user never has to read tests or source to find `journal.token-file` or `server.tls`.
//! The keys listed are the ones `deploy/` (compose, the Helm chart) sets.

use babysitter_tests::workspace_bin;

fn dump(bin: &str) -> String {
    let out = std::process::Command::new(workspace_bin(bin).unwrap())
        .arg("--dump-config")
        .env_clear()
        .output()
        .unwrap();
    assert!(out.status.success(), "{bin} --dump-config: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Whether `key` (`a.b.c`) appears in `text`: as an unset key, or as `c = …` under `[a.b]`.
fn names(text: &str, key: &str) -> bool {
    if text.lines().any(|l| {
        l.trim_start_matches('#')
            .split_whitespace()
            .next()
            .is_some_and(|k| k == key)
    }) {
        return true;
    }
    let (table, leaf) = key.rsplit_once('.').unwrap_or(("", key));
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(t) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = t.trim_matches(['[', ']']).to_owned();
        } else if current == table && line.starts_with(&format!("{leaf} =")) {
            return true;
        }
    }
    false
}

#[test]
fn every_deployment_setting_is_in_dump_config() {
    let tls = [
        "tls.cert-file",
        "tls.key-file",
        "tls.client-ca-file",
        "tls.reload-interval",
    ];
    let expect: &[(&str, Vec<String>)] = &[
        (
            "journal",
            [
                "server.listen-addr",
                "server.auth.tokens",
                "store.url",
                "store.endpoint",
                "store.region",
                "store.access-key-id",
                "store.secret-access-key",
                "store.allow-http",
                "telemetry.metrics-listen-addr",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .chain(tls.iter().map(|t| format!("server.{t}")))
            .chain(tls.iter().map(|t| format!("telemetry.metrics-{t}")))
            .collect(),
        ),
        (
            "orchestrator",
            [
                "server.listen-addr",
                "server.auth.tokens",
                "journal.remote",
                "journal.token-file",
                "journal.tls.ca-file",
                "journal.tls.cert-file",
                "journal.tls.key-file",
                "journal.tls.server-name",
                "engine.runs-dir",
                "leadership.enabled",
                "leadership.advertise-url",
                "leadership.tls.ca-file",
                "leadership.tls.cert-file",
                "queue.lease-duration-ms",
                "telemetry.metrics-listen-addr",
                "dashboard.listen-addr",
                "dashboard.stale-after",
                "dashboard.active-port",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .chain(tls.iter().map(|t| format!("server.{t}")))
            .chain(tls.iter().map(|t| format!("dashboard.{t}")))
            .collect(),
        ),
        (
            "harness-launcher",
            [
                "orchestrator.url",
                "orchestrator.token-file",
                "orchestrator.tls.ca-file",
                "orchestrator.tls.cert-file",
                "orchestrator.tls.key-file",
                "worker.max-concurrency",
                "worker.work-dir",
                "agent.proxy-url",
                "server",
                "telemetry.metrics-listen-addr",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
        ),
        (
            "babysitter-transport-proxy",
            [
                "listen",
                "proxy-token-file",
                "control",
                "data-dir",
                "telemetry.metrics-listen-addr",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .chain(tls.iter().map(|t| (*t).to_owned()))
            .collect(),
        ),
    ];
    for (bin, keys) in expect {
        let text = dump(bin);
        let missing: Vec<&String> = keys.iter().filter(|k| !names(&text, k)).collect();
        assert!(
            missing.is_empty(),
            "{bin} --dump-config does not name {missing:?}:\n{text}"
        );
    }
}
