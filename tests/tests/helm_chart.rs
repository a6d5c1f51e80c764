//! The Helm chart `deploy/helm/babysitter`, checked offline (no cluster):
//!
//! * `scripts/check-chart.sh` passes: lint, every `ci/*.yaml` rendered and validated against the
//!   Kubernetes 1.37 schemas (strict), every `ci/bad/*.yaml` refused by the values schema with an
//!   error naming its bad key;
//! * what the renders contain: the NetworkPolicies allow the architecture's flows and nothing
//!   open, mTLS values reach every server and client config, the autoscaling hooks render, the
//!   orchestrator gets a PodDisruptionBudget when replicated and advertises its pod IP, every pod
//!   is locked down (non-root, read-only root, no capabilities, no ServiceAccount token);
//! * each rendered config (with the pod's environment) loads in its service binary
//!   (`--dump-config`), when the workspace binaries are built;
//! * the README's values table and `values.yaml` list the same keys.
//!
//! Helm and kubernetes-validate come from `scripts/ensure-helm.sh` (`.ci-work/helm/helm`,
//! `.ci-work/venv-k8s`); without them the tests that need them skip (`babysitter_tests::skip`),
//! and fail under `BABYSITTER_REQUIRE_ALL=1`. The renders are parsed through the venv's PyYAML
//! into JSON (the workspace has no YAML parser), the configs with `toml`.

#![allow(clippy::print_stdout)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use babysitter_tests::skip::{installed, skip, tidy};
use serde_json::Value;

const RELEASE: &str = "bbs";
const NAMESPACE: &str = "babysitter";
/// `<release>-<chart>`: the prefix of every resource name.
const PREFIX: &str = "bbs-babysitter";

fn repo() -> PathBuf {
    tidy(&Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
}

fn chart() -> PathBuf {
    repo().join("deploy/helm/babysitter")
}

/// Helm and the kubernetes-validate venv's Python, or why they are missing.
struct Tools {
    helm: PathBuf,
    python: PathBuf,
}

fn tools() -> Result<Tools, String> {
    let work = repo().join(".ci-work");
    let helm = work.join("helm/helm");
    let python = work.join("venv-k8s/bin/python");
    match (installed(&helm), installed(&python)) {
        (Some(helm), Some(python)) => Ok(Tools { helm, python }),
        _ => Err(format!(
            "needs Helm at {} and kubernetes-validate in {}: run scripts/ensure-helm.sh",
            helm.display(),
            work.join("venv-k8s").display()
        )),
    }
}

/// The tools, or `None` once the skip is recorded (the test then returns; under
/// `BABYSITTER_REQUIRE_ALL=1` it fails here).
fn tools_or_skip() -> Option<Tools> {
    tools().map_err(skip::<()>).ok()
}

/// `helm template` of the chart with `ci/<values>` (and `--set`s), as JSON documents.
fn render(t: &Tools, values: &str, sets: &[&str]) -> Vec<Value> {
    let mut cmd = Command::new(&t.helm);
    cmd.args(["template", RELEASE])
        .arg(chart())
        .args(["--namespace", NAMESPACE, "-f"])
        .arg(chart().join("ci").join(values));
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", t.helm.display()));
    assert!(
        out.status.success(),
        "helm template -f ci/{values} {sets:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    yaml_to_json(t, &out.stdout)
}

/// Multi-document YAML → JSON array, through PyYAML in the kubernetes-validate venv.
fn yaml_to_json(t: &Tools, yaml: &[u8]) -> Vec<Value> {
    use std::io::Write as _;
    let mut child = Command::new(&t.python)
        .args([
            "-c",
            "import sys, json, yaml; json.dump([d for d in yaml.safe_load_all(sys.stdin) if d], sys.stdout)",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", t.python.display()));
    child
        .stdin
        .take()
        .unwrap_or_else(|| panic!("no stdin"))
        .write_all(yaml)
        .unwrap_or_else(|e| panic!("writing the render to python: {e}"));
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("python: {e}"));
    assert!(
        out.status.success(),
        "the render is not YAML: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    match serde_json::from_slice(&out.stdout) {
        Ok(Value::Array(docs)) => docs,
        other => panic!("expected a JSON array of documents, got {other:?}"),
    }
}

fn kind_of(d: &Value) -> &str {
    d["kind"].as_str().unwrap_or_default()
}

fn name_of(d: &Value) -> &str {
    d["metadata"]["name"].as_str().unwrap_or_default()
}

fn all<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| kind_of(d) == kind).collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter()
        .find(|d| kind_of(d) == kind && name_of(d) == name)
}

#[track_caller]
fn get<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    find(docs, kind, name).unwrap_or_else(|| {
        let have: Vec<String> = docs
            .iter()
            .map(|d| format!("{}/{}", kind_of(d), name_of(d)))
            .collect();
        panic!("no {kind}/{name} in the render; it has {have:?}")
    })
}

/// The parsed `config.toml` of a ConfigMap.
#[track_caller]
fn config(docs: &[Value], name: &str) -> toml::Table {
    let cm = get(docs, "ConfigMap", name);
    let text = cm["data"]["config.toml"]
        .as_str()
        .unwrap_or_else(|| panic!("ConfigMap/{name} has no config.toml"));
    text.parse::<toml::Table>()
        .unwrap_or_else(|e| panic!("ConfigMap/{name}: config.toml is not TOML: {e}\n{text}"))
}

/// A dotted path in a TOML table.
fn at<'a>(t: &'a toml::Table, path: &str) -> Option<&'a toml::Value> {
    let mut parts = path.split('.');
    let mut v = t.get(parts.next()?)?;
    for p in parts {
        v = v.as_table()?.get(p)?;
    }
    Some(v)
}

#[track_caller]
fn str_at<'a>(t: &'a toml::Table, path: &str) -> &'a str {
    at(t, path)
        .and_then(toml::Value::as_str)
        .unwrap_or_else(|| panic!("no string at `{path}` in\n{t:#?}"))
}

/// Workloads: Deployments and StatefulSets.
fn workloads(docs: &[Value]) -> Vec<&Value> {
    docs.iter()
        .filter(|d| matches!(kind_of(d), "Deployment" | "StatefulSet"))
        .collect()
}

fn ci_values() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(chart().join("ci"))
        .unwrap_or_else(|e| panic!("ci/: {e}"))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    names.sort();
    names
}

// ---------------------------------------------------------------------------------------------

#[test]
fn check_chart_script_passes() {
    if tools_or_skip().is_none() {
        return;
    }
    let started = std::time::SystemTime::now();
    let out = Command::new("bash")
        .arg(repo().join("scripts/check-chart.sh"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run scripts/check-chart.sh: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scripts/check-chart.sh failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    println!(
        "scripts/check-chart.sh took {:?}\n{stdout}",
        started.elapsed().unwrap_or_default()
    );
    // Every values file was rendered and validated, every bad one refused.
    for values in ci_values() {
        assert!(
            stdout.contains(&format!("helm template -f ci/{values}")),
            "ci/{values} was not rendered:\n{stdout}"
        );
    }
    let bad: Vec<String> = std::fs::read_dir(chart().join("ci/bad"))
        .unwrap_or_else(|e| panic!("ci/bad/: {e}"))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(bad.len() >= 5, "too few bad values files: {bad:?}");
    for b in &bad {
        assert!(
            stdout.contains(&format!("ci/bad/{b} refused")),
            "ci/bad/{b} was not checked:\n{stdout}"
        );
    }
    // The custom resources are skipped by name, not silently.
    assert!(
        stdout.contains("skipped (custom resources, no schema): ScaledObject/"),
        "{stdout}"
    );
    assert!(stdout.contains("Certificate/"), "{stdout}");
    assert!(stdout.contains("check-chart: 0 failures"), "{stdout}");
}

#[test]
fn a_bad_values_file_is_refused_naming_its_key() {
    // The schema check, once more by hand, so a schema that accepts anything fails here too.
    let Some(t) = tools_or_skip() else { return };
    let out = Command::new(&t.helm)
        .args(["template", RELEASE])
        .arg(chart())
        .args(["--set", "orchestrator.replicaz=3"])
        .output()
        .unwrap_or_else(|e| panic!("helm: {e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a misspelt key rendered");
    assert!(
        err.contains("replicaz"),
        "the error does not name the key: {err}"
    );
}

#[test]
fn every_values_key_is_in_the_readme_table_and_back() {
    let values = std::fs::read_to_string(chart().join("values.yaml"))
        .unwrap_or_else(|e| panic!("values.yaml: {e}"));
    let readme = std::fs::read_to_string(chart().join("README.md"))
        .unwrap_or_else(|e| panic!("README.md: {e}"));
    let (documented, undocumented) = values_keys(&values);
    assert!(
        undocumented.is_empty(),
        "values.yaml keys with a value but no `# --` comment: {undocumented:?}"
    );
    assert!(documented.len() > 50, "{documented:?}");
    let table: BTreeSet<String> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_owned)
        .collect();
    let missing: Vec<_> = documented.difference(&table).collect();
    let stale: Vec<_> = table.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "values.yaml keys missing from README.md's values table: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "README.md's values table lists keys values.yaml does not have: {stale:?}"
    );
}

/// The dotted paths of values.yaml's documented keys (a `# --` comment above them; their
/// contents are the value, not keys of their own), and of keys with a scalar value but no such
/// comment. A line scanner, enough for values.yaml's block style.
fn values_keys(text: &str) -> (BTreeSet<String>, Vec<String>) {
    let mut documented = BTreeSet::new();
    let mut undocumented = Vec::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut doc = false;
    let mut covered: Option<usize> = None;
    for line in text.lines() {
        let body = line.trim_start();
        if body.is_empty() {
            continue;
        }
        let indent = line.len() - body.len();
        if body.starts_with('#') {
            if body.starts_with("# --") {
                doc = true;
            }
            continue;
        }
        if covered.is_some_and(|c| indent > c) {
            continue;
        }
        covered = None;
        if body.starts_with("- ") {
            continue;
        }
        let Some((key, rest)) = body.split_once(':') else {
            continue;
        };
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            continue;
        }
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        stack.push((indent, key.to_owned()));
        let path = stack
            .iter()
            .map(|(_, k)| k.as_str())
            .collect::<Vec<_>>()
            .join(".");
        if doc {
            documented.insert(path);
            covered = Some(indent);
            doc = false;
        } else if !rest.trim().is_empty() {
            undocumented.push(path);
        }
    }
    (documented, undocumented)
}

/// The ingress rules of a NetworkPolicy, each checked to name its peers (an empty `from`
/// would let everyone in).
#[track_caller]
fn ingress(np: &Value) -> &Vec<Value> {
    let rules = np["spec"]["ingress"]
        .as_array()
        .unwrap_or_else(|| panic!("{} has no ingress list", name_of(np)));
    for r in rules {
        let from = r["from"].as_array();
        assert!(
            from.is_some_and(|f| !f.is_empty()),
            "{}: an ingress rule without peers lets everyone in: {r}",
            name_of(np)
        );
    }
    rules
}

#[track_caller]
fn egress(np: &Value) -> &Vec<Value> {
    let rules = np["spec"]["egress"]
        .as_array()
        .unwrap_or_else(|| panic!("{} has no egress list", name_of(np)));
    for r in rules {
        assert!(
            r["to"].as_array().is_some_and(|t| !t.is_empty()),
            "{}: an egress rule without peers lets it reach anything: {r}",
            name_of(np)
        );
    }
    rules
}

/// A rule lets `component`'s pods through on `port` (a number or a port name).
fn allows_component(
    rules: &[Value],
    peer_key: &str,
    component: &str,
    port: impl Into<Value>,
) -> bool {
    let port = port.into();
    rules.iter().any(|r| {
        let peers = r[peer_key].as_array().cloned().unwrap_or_default();
        let ports = r["ports"].as_array().cloned().unwrap_or_default();
        peers.iter().any(|p| {
            p["podSelector"]["matchLabels"]["app.kubernetes.io/component"].as_str()
                == Some(component)
        }) && ports.iter().any(|p| p["port"] == port)
    })
}

fn allows_dns(rules: &[Value]) -> bool {
    rules.iter().any(|r| {
        r["ports"]
            .as_array()
            .is_some_and(|ps| ps.iter().any(|p| p["port"] == 53 && p["protocol"] == "UDP"))
    })
}

#[test]
fn network_policies_allow_the_architecture_flows_and_nothing_open() {
    let Some(t) = tools_or_skip() else { return };
    let docs = render(&t, "defaults-values.yaml", &[]);
    let nps = all(&docs, "NetworkPolicy");
    assert_eq!(
        nps.len(),
        4,
        "journal, orchestrator, proxy, one pool: {nps:?}"
    );
    for np in &nps {
        let types = &np["spec"]["policyTypes"];
        assert_eq!(types, &serde_json::json!(["Ingress", "Egress"]), "{np}");
        assert!(allows_dns(egress(np)), "{}: no DNS egress", name_of(np));
    }
    let np = |c: &str| get(&docs, "NetworkPolicy", &format!("{PREFIX}-{c}"));

    // orchestrator → journal; nobody else reaches the journal
    let journal_in = ingress(np("journal"));
    assert!(allows_component(journal_in, "from", "orchestrator", "grpc"));
    assert!(!allows_component(
        journal_in,
        "from",
        "harness-launcher",
        "grpc"
    ));
    assert!(!allows_component(
        journal_in,
        "from",
        "transport-proxy",
        "grpc"
    ));
    // journal → S3 (the default egress: https)
    assert!(
        egress(np("journal"))
            .iter()
            .any(|r| r["ports"][0]["port"] == 443),
        "journal has no S3 egress"
    );

    // clients and launchers → orchestrator, and standby → active
    let orch_in = ingress(np("orchestrator"));
    assert!(allows_component(
        orch_in,
        "from",
        "harness-launcher",
        "grpc"
    ));
    assert!(allows_component(orch_in, "from", "orchestrator", "grpc"));
    assert!(
        orch_in.iter().any(
            |r| r["from"][0]["podSelector"]["matchLabels"]["babysitter.a5c.ai/client"] == "true"
        ),
        "no client ingress on the orchestrator: {orch_in:?}"
    );
    let orch_out = egress(np("orchestrator"));
    assert!(allows_component(orch_out, "to", "journal", 50051));
    assert!(allows_component(orch_out, "to", "orchestrator", 50052));
    assert!(
        !orch_out.iter().any(|r| r["ports"][0]["port"] == 443),
        "the orchestrator reaches nothing outside"
    );

    // launcher → orchestrator and → proxy, nothing else (no provider egress of its own)
    let worker_out = egress(np("worker-default"));
    assert!(allows_component(worker_out, "to", "orchestrator", 50052));
    assert!(allows_component(worker_out, "to", "transport-proxy", 8787));
    assert_eq!(
        worker_out.len(),
        3,
        "DNS, orchestrator, proxy only: {worker_out:?}"
    );
    // launcher → proxy on the proxy's side; proxy → providers
    assert!(allows_component(
        ingress(np("transport-proxy")),
        "from",
        "harness-launcher",
        "http"
    ));
    assert!(
        egress(np("transport-proxy"))
            .iter()
            .any(|r| r["ports"][0]["port"] == 443 && r["to"][0]["ipBlock"]["cidr"] == "0.0.0.0/0"),
        "the proxy cannot reach the providers"
    );
    // Prometheus → metrics, on every component
    for np in &nps {
        assert!(
            ingress(np)
                .iter()
                .any(|r| r["ports"][0]["port"] == "metrics"),
            "{}: no metrics ingress",
            name_of(np)
        );
    }

    // In-chart SeaweedFS: journal → SeaweedFS only, SeaweedFS reached by the journal only.
    let docs = render(&t, "seaweedfs-values.yaml", &[]);
    let np = |c: &str| get(&docs, "NetworkPolicy", &format!("{PREFIX}-{c}"));
    assert!(allows_component(
        egress(np("journal")),
        "to",
        "seaweedfs",
        8333
    ));
    let sw_in = ingress(np("seaweedfs"));
    assert_eq!(sw_in.len(), 1, "{sw_in:?}");
    assert!(allows_component(sw_in, "from", "journal", "s3"));
    assert!(egress(np("seaweedfs")).is_empty(), "SeaweedFS calls nobody");
    // The control API is open to the admin clients only, and none are configured here.
    assert!(
        !ingress(np("transport-proxy"))
            .iter()
            .any(|r| r["ports"][0]["port"] == "control"),
        "control API reachable without networkPolicy.adminClients"
    );
}

/// `orchestrator.dashboard` (in `ci/mtls-values.yaml`): every replica's config has the
/// dashboard's port with the orchestrator's certificate and no client CA (browsers have no
/// client certificates), a Service selects all replicas (standbys forward to the active one),
/// the NetworkPolicy lets the orchestrators reach each other's dashboard port and the configured
/// dashboard clients in, cert-manager's certificate names the dashboard Service, and an Ingress
/// fronts it; off by default, nothing of it renders.
#[test]
fn the_dashboard_is_served_by_every_replica_over_https_without_client_certificates() {
    let Some(t) = tools_or_skip() else { return };
    let docs = render(&t, "mtls-values.yaml", &[]);
    let orch = config(&docs, &format!("{PREFIX}-orchestrator"));
    assert_eq!(str_at(&orch, "dashboard.listen-addr"), "0.0.0.0:8443");
    assert_eq!(
        str_at(&orch, "dashboard.tls.cert-file"),
        "/run/secrets/babysitter/tls/tls.crt"
    );
    assert!(
        at(&orch, "dashboard.tls.client-ca-file").is_none(),
        "the dashboard asks browsers for client certificates"
    );
    assert!(
        at(&orch, "server.tls.client-ca-file").is_some(),
        "mTLS lost on gRPC"
    );

    let svc = get(
        &docs,
        "Service",
        &format!("{PREFIX}-orchestrator-dashboard"),
    );
    assert_eq!(svc["spec"]["ports"][0]["port"], 8443, "{svc}");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "dashboard", "{svc}");
    assert_eq!(
        svc["spec"]["selector"]["app.kubernetes.io/component"], "orchestrator",
        "{svc}"
    );
    let deploy = get(&docs, "Deployment", &format!("{PREFIX}-orchestrator"));
    assert!(
        deploy["spec"]["template"]["spec"]["containers"][0]["ports"]
            .as_array()
            .is_some_and(|ps| ps
                .iter()
                .any(|p| p["name"] == "dashboard" && p["containerPort"] == 8443)),
        "no dashboard container port: {deploy}"
    );

    let np = get(&docs, "NetworkPolicy", &format!("{PREFIX}-orchestrator"));
    assert!(allows_component(
        ingress(np),
        "from",
        "orchestrator",
        "dashboard"
    ));
    assert!(
        ingress(np)
            .iter()
            .any(|r| r["ports"][0]["port"] == "dashboard"
                && r["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                    == "ingress-nginx"),
        "networkPolicy.dashboardClients not let in: {np}"
    );
    assert!(allows_component(egress(np), "to", "orchestrator", 8443));
    let cert = get(&docs, "Certificate", &format!("{PREFIX}-orchestrator"));
    assert!(
        cert["spec"]["dnsNames"].as_array().is_some_and(|ns| ns
            .iter()
            .any(|n| n == &format!("{PREFIX}-orchestrator-dashboard"))),
        "{cert}"
    );

    // The Ingress in front of the dashboard's Service, TLS at the controller, the backend
    // spoken to over HTTPS as the annotation says.
    let ing = get(
        &docs,
        "Ingress",
        &format!("{PREFIX}-orchestrator-dashboard"),
    );
    let rule = &ing["spec"]["rules"][0];
    assert_eq!(rule["host"], "babysitter.example.com", "{ing}");
    let backend = &rule["http"]["paths"][0]["backend"]["service"];
    assert_eq!(
        backend["name"],
        format!("{PREFIX}-orchestrator-dashboard"),
        "{ing}"
    );
    assert_eq!(backend["port"]["name"], "dashboard", "{ing}");
    assert_eq!(
        ing["spec"]["tls"][0]["secretName"],
        "babysitter-dashboard-cert"
    );
    assert_eq!(ing["spec"]["ingressClassName"], "nginx");

    let plain = render(&t, "defaults-values.yaml", &[]);
    assert!(
        find(
            &plain,
            "Service",
            &format!("{PREFIX}-orchestrator-dashboard")
        )
        .is_none()
    );
    assert!(
        at(
            &config(&plain, &format!("{PREFIX}-orchestrator")),
            "dashboard"
        )
        .is_none()
    );
    assert!(
        all(&plain, "Ingress").is_empty(),
        "an Ingress with the dashboard off"
    );
    let np = get(&plain, "NetworkPolicy", &format!("{PREFIX}-orchestrator"));
    assert!(
        !ingress(np)
            .iter()
            .any(|r| r["ports"][0]["port"] == "dashboard"),
        "a dashboard port is open with the dashboard off"
    );
}

#[test]
fn mtls_values_configure_tls_on_every_link() {
    let Some(t) = tools_or_skip() else { return };
    let docs = render(&t, "mtls-values.yaml", &[]);
    let tls = "/run/secrets/babysitter/tls";

    let orch = config(&docs, &format!("{PREFIX}-orchestrator"));
    assert_eq!(
        str_at(&orch, "server.tls.client-ca-file"),
        format!("{tls}/ca.crt")
    );
    assert_eq!(
        str_at(&orch, "server.tls.cert-file"),
        format!("{tls}/tls.crt")
    );
    assert_eq!(str_at(&orch, "server.tls.reload-interval"), "30s");
    assert!(str_at(&orch, "journal.remote").starts_with("https://"));
    assert_eq!(
        str_at(&orch, "journal.tls.cert-file"),
        format!("{tls}/tls.crt")
    );
    assert_eq!(
        str_at(&orch, "journal.tls.server-name"),
        format!("{PREFIX}-journal")
    );
    assert_eq!(
        str_at(&orch, "leadership.tls.key-file"),
        format!("{tls}/tls.key")
    );
    assert!(at(&orch, "telemetry.metrics-tls.cert-file").is_some());

    let journal = config(&docs, &format!("{PREFIX}-journal"));
    assert_eq!(
        str_at(&journal, "server.tls.client-ca-file"),
        format!("{tls}/ca.crt")
    );

    let worker = config(&docs, &format!("{PREFIX}-worker-default"));
    assert!(str_at(&worker, "orchestrator.url").starts_with("https://"));
    assert_eq!(
        str_at(&worker, "orchestrator.tls.ca-file"),
        format!("{tls}/ca.crt")
    );
    assert_eq!(
        str_at(&worker, "orchestrator.tls.cert-file"),
        format!("{tls}/tls.crt")
    );
    assert!(str_at(&worker, "agent.proxy-url").starts_with("https://"));
    assert_eq!(
        str_at(&worker, "server.tls.client-ca-file"),
        format!("{tls}/ca.crt")
    );

    // The proxy's HTTP listener serves TLS without asking harnesses for certificates; its gRPC
    // control API is mTLS like the others.
    let proxy = config(&docs, &format!("{PREFIX}-transport-proxy"));
    assert_eq!(str_at(&proxy, "tls.cert-file"), format!("{tls}/tls.crt"));
    assert!(at(&proxy, "tls.client-ca-file").is_none(), "{proxy:#?}");
    assert_eq!(
        str_at(&proxy, "control.tls.client-ca-file"),
        format!("{tls}/ca.crt")
    );

    // One Certificate per component, into the Secret its pods mount (as a directory, so
    // renewals reach them), probes that speak TLS.
    let certs = all(&docs, "Certificate");
    assert_eq!(certs.len(), 4, "{certs:?}");
    for w in workloads(&docs) {
        let spec = &w["spec"]["template"]["spec"];
        let secret = spec["volumes"]
            .as_array()
            .and_then(|vs| vs.iter().find(|v| v["name"] == "tls"))
            .map(|v| v["secret"]["secretName"].clone())
            .unwrap_or_else(|| panic!("{} mounts no TLS secret", name_of(w)));
        assert!(
            certs.iter().any(|c| c["spec"]["secretName"] == secret),
            "{}: no Certificate writes {secret}",
            name_of(w)
        );
        let c = &spec["containers"][0];
        let mount = c["volumeMounts"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["name"] == "tls"))
            .unwrap_or_else(|| panic!("{}: tls not mounted", name_of(w)));
        assert!(
            mount["subPath"].is_null(),
            "{}: subPath mounts never update",
            name_of(w)
        );
        assert!(
            c["livenessProbe"]["grpc"].is_null(),
            "{}: grpc probe under TLS",
            name_of(w)
        );
    }
    let orch_deploy = get(&docs, "Deployment", &format!("{PREFIX}-orchestrator"));
    let probe = &orch_deploy["spec"]["template"]["spec"]["containers"][0]["readinessProbe"];
    assert!(
        probe["exec"]["command"]
            .as_array()
            .is_some_and(|c| c.iter().any(|a| a == "--health-check")),
        "{probe}"
    );
    let env = &orch_deploy["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env.to_string().contains("https://$(POD_IP):50052"),
        "advertise-url is not https: {env}"
    );

    // And without TLS no config mentions it.
    let plain = render(&t, "defaults-values.yaml", &[]);
    for cm in all(&plain, "ConfigMap") {
        let text = cm["data"]["config.toml"].as_str().unwrap_or_default();
        assert!(!text.contains("tls"), "{}: {text}", name_of(cm));
        assert!(!text.contains("https://"), "{}: {text}", name_of(cm));
    }
}

#[test]
fn autoscaling_values_render_the_hooks() {
    let Some(t) = tools_or_skip() else { return };
    let docs = render(&t, "autoscaling-values.yaml", &[]);
    let hpas = all(&docs, "HorizontalPodAutoscaler");
    assert_eq!(hpas.len(), 1, "{hpas:?}");
    let hpa = get(
        &docs,
        "HorizontalPodAutoscaler",
        &format!("{PREFIX}-worker-agents"),
    );
    assert_eq!(
        hpa["spec"]["scaleTargetRef"]["name"],
        format!("{PREFIX}-worker-agents")
    );
    assert_eq!(hpa["spec"]["minReplicas"], 1);
    assert_eq!(hpa["spec"]["maxReplicas"], 20);
    let m = &hpa["spec"]["metrics"][0]["external"];
    assert_eq!(m["metric"]["name"], "babysitter_orchestrator_queue_tasks");
    assert_eq!(m["metric"]["selector"]["matchLabels"]["state"], "queued");
    assert_eq!(
        m["metric"]["selector"]["matchLabels"]["namespace"],
        "team-a"
    );
    assert_eq!(m["target"]["averageValue"], "2");

    // A pool's own image tag (the worker image without harness CLIs); the others the default.
    let image_of = |pool: &str| {
        get(&docs, "Deployment", &format!("{PREFIX}-worker-{pool}"))["spec"]["template"]["spec"]
            ["containers"][0]["image"]
            .clone()
    };
    assert_eq!(
        image_of("shell"),
        "babysitter/harness-launcher:0.1.0-noharness"
    );
    let chart_version = std::fs::read_to_string(chart().join("Chart.yaml"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("appVersion:"))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .unwrap_or_default();
    assert_eq!(
        image_of("agents"),
        format!("babysitter/harness-launcher:{chart_version}")
    );

    let so = get(&docs, "ScaledObject", &format!("{PREFIX}-worker-shell"));
    assert_eq!(so["spec"]["minReplicaCount"], 0);
    assert_eq!(so["spec"]["maxReplicaCount"], 5);
    let trig = &so["spec"]["triggers"][0];
    assert_eq!(trig["type"], "prometheus");
    assert_eq!(
        trig["metadata"]["query"],
        "sum(babysitter_orchestrator_queue_tasks{state=\"queued\"})"
    );
    assert_eq!(trig["metadata"]["threshold"], "4");

    // Autoscaled Deployments leave replicas to the autoscaler; the fixed pool keeps its own.
    let replicas = |pool: &str| {
        get(&docs, "Deployment", &format!("{PREFIX}-worker-{pool}"))["spec"]["replicas"].clone()
    };
    assert!(replicas("agents").is_null());
    assert!(replicas("shell").is_null());
    assert_eq!(replicas("fixed"), 3);
    assert!(find(&docs, "ScaledObject", &format!("{PREFIX}-worker-fixed")).is_none());

    // Each pool's own worker config, over the defaults.
    let agents = config(&docs, &format!("{PREFIX}-worker-agents"));
    assert_eq!(
        at(&agents, "worker.max-concurrency"),
        Some(&toml::Value::Integer(2))
    );
    assert_eq!(
        at(&agents, "worker.task-kinds"),
        Some(&toml::Value::Array(vec!["agent".into()]))
    );
    assert_eq!(str_at(&agents, "worker.labels.gpu"), "false");
    let shell = config(&docs, &format!("{PREFIX}-worker-shell"));
    assert!(at(&shell, "worker.namespaces").is_none());

    // Without the values, no autoscaler at all.
    let plain = render(&t, "defaults-values.yaml", &[]);
    assert!(all(&plain, "HorizontalPodAutoscaler").is_empty());
    assert!(all(&plain, "ScaledObject").is_empty());
}

#[test]
fn replicated_orchestrators_get_a_pdb_and_advertise_their_pod_ip() {
    let Some(t) = tools_or_skip() else { return };
    let docs = render(&t, "external-s3-values.yaml", &[]);
    let name = format!("{PREFIX}-orchestrator");
    let deploy = get(&docs, "Deployment", &name);
    assert_eq!(deploy["spec"]["replicas"], 3);
    let pdb = get(&docs, "PodDisruptionBudget", &name);
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        deploy["spec"]["selector"]["matchLabels"]
    );
    let cfg = config(&docs, &name);
    assert_eq!(
        at(&cfg, "leadership.enabled"),
        Some(&toml::Value::Boolean(true))
    );
    assert_eq!(
        at(&cfg, "leadership.ttl-ms"),
        Some(&toml::Value::Integer(4000))
    );
    assert_eq!(
        at(&cfg, "queue.lease-duration-ms"),
        Some(&toml::Value::Integer(30000)),
        "orchestrator.config is merged in"
    );
    let env = deploy["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let var = |n: &str| env.iter().find(|e| e["name"] == n).cloned();
    assert_eq!(
        var("POD_IP").map(|e| e["valueFrom"]["fieldRef"]["fieldPath"].clone()),
        Some(Value::from("status.podIP"))
    );
    assert_eq!(
        var("BABYSITTER_ORCHESTRATOR__LEADERSHIP__ADVERTISE_URL").map(|e| e["value"].clone()),
        Some(Value::from("http://$(POD_IP):50052"))
    );
    // The journal's store and its credentials come from the values, the keys from a Secret.
    let journal = config(&docs, &format!("{PREFIX}-journal"));
    assert_eq!(
        str_at(&journal, "store.url"),
        "s3://babysitter-journal/prod/runs"
    );
    assert_eq!(
        str_at(&journal, "store.endpoint"),
        "https://s3.storage.internal:9000"
    );
    assert_eq!(
        at(&journal, "store.allow-http"),
        Some(&toml::Value::Boolean(false))
    );
    assert!(!journal.to_string().contains("example-secret"));

    // One orchestrator: no PDB (it could never be satisfied).
    let single = render(&t, "seaweedfs-values.yaml", &[]);
    assert!(find(&single, "PodDisruptionBudget", &name).is_none());
}

#[test]
fn every_pod_is_locked_down() {
    let Some(t) = tools_or_skip() else { return };
    let mut checked = 0;
    for values in ci_values() {
        let docs = render(&t, &values, &[]);
        for w in workloads(&docs) {
            let what = format!("ci/{values}: {}/{}", kind_of(w), name_of(w));
            let spec = &w["spec"]["template"]["spec"];
            assert_eq!(spec["automountServiceAccountToken"], false, "{what}");
            assert_eq!(spec["securityContext"]["runAsNonRoot"], true, "{what}");
            assert_eq!(
                spec["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
                "{what}"
            );
            for c in spec["containers"].as_array().into_iter().flatten() {
                let sc = &c["securityContext"];
                assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
                assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
                assert_eq!(sc["runAsNonRoot"], true, "{what}");
                assert_eq!(
                    sc["capabilities"]["drop"],
                    serde_json::json!(["ALL"]),
                    "{what}"
                );
                assert!(
                    c["resources"]["requests"].is_object(),
                    "{what}: no requests"
                );
                // Whatever listens is probed (a worker without admin API and metrics listens
                // nowhere).
                if c["ports"].as_array().is_some_and(|p| !p.is_empty()) {
                    assert!(
                        c["readinessProbe"].is_object(),
                        "{what}: no readiness probe"
                    );
                    assert!(c["livenessProbe"].is_object(), "{what}: no liveness probe");
                }
                // Writable places are volumes: /tmp at least.
                assert!(
                    c["volumeMounts"]
                        .as_array()
                        .is_some_and(|ms| ms.iter().any(|m| m["mountPath"] == "/tmp")),
                    "{what}: no writable /tmp"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} workloads checked");
}

/// `(ConfigMap name → binary, env prefix)`.
fn binary_of(cm: &str) -> Option<&'static str> {
    let rest = cm.strip_prefix(PREFIX)?.strip_prefix('-')?;
    match rest {
        "journal" => Some("journal"),
        "orchestrator" => Some("orchestrator"),
        "transport-proxy" => Some("babysitter-transport-proxy"),
        r if r.starts_with("worker-") => Some("harness-launcher"),
        _ => None,
    }
}

/// The container env of the workload mounting `cm`, with the downward API and `$(VAR)`
/// references filled in as Kubernetes would (a made-up pod).
fn pod_env(docs: &[Value], cm: &str) -> Vec<(String, String)> {
    let Some(w) = workloads(docs).into_iter().find(|w| {
        w["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .is_some_and(|vs| vs.iter().any(|v| v["configMap"]["name"] == cm))
    }) else {
        panic!("no workload mounts ConfigMap/{cm}");
    };
    let mut env: Vec<(String, String)> = Vec::new();
    for e in w["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = e["name"].as_str().unwrap_or_default().to_owned();
        let value = if let Some(v) = e["value"].as_str() {
            let mut v = v.to_owned();
            for (k, val) in &env {
                v = v.replace(&format!("$({k})"), val);
            }
            v
        } else {
            match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("status.podIP") => "10.1.2.3".to_owned(),
                Some("metadata.name") => "pod-0".to_owned(),
                _ => "from-a-secret".to_owned(),
            }
        };
        env.push((name, value));
    }
    env
}

#[test]
fn rendered_configs_load_in_the_service_binaries() {
    let Some(t) = tools_or_skip() else { return };
    let mut bins = std::collections::BTreeMap::new();
    for b in [
        "journal",
        "orchestrator",
        "harness-launcher",
        "babysitter-transport-proxy",
    ] {
        match babysitter_tests::workspace_bin(b) {
            Ok(p) => {
                bins.insert(b, p);
            }
            Err(e) => return skip(format!("{e}")),
        }
    }
    // TLS keys are checked once the binaries know them (`[server.tls]` in --dump-config).
    let tls_known = {
        let out = Command::new(&bins["journal"])
            .arg("--dump-config")
            .output()
            .unwrap_or_else(|e| panic!("journal --dump-config: {e}"));
        String::from_utf8_lossy(&out.stdout).contains("server.tls")
    };
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut loaded = 0;
    for values in ci_values() {
        let docs = render(&t, &values, &[]);
        let uses_tls = docs.iter().any(|d| {
            kind_of(d) == "ConfigMap" && d["data"]["config.toml"].to_string().contains("tls")
        });
        if uses_tls && !tls_known {
            println!("ci/{values}: not loaded, the binaries have no TLS settings yet");
            continue;
        }
        for cm in all(&docs, "ConfigMap") {
            let Some(bin) = binary_of(name_of(cm)) else {
                continue;
            };
            let path = dir.path().join(format!("{}.toml", name_of(cm)));
            let text = cm["data"]["config.toml"].as_str().unwrap_or_default();
            std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
            let env = pod_env(&docs, name_of(cm));
            let out = Command::new(&bins[bin])
                .arg("--config")
                .arg(&path)
                .arg("--dump-config")
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .envs(env.iter().map(|(k, v)| (k, v)))
                .output()
                .unwrap_or_else(|e| panic!("{bin}: {e}"));
            assert!(
                out.status.success(),
                "ci/{values}: {bin} refuses ConfigMap/{} with env {env:?}: {}\n{text}",
                name_of(cm),
                String::from_utf8_lossy(&out.stderr)
            );
            loaded += 1;
        }
    }
    assert!(loaded >= 15, "only {loaded} configs loaded");
}
