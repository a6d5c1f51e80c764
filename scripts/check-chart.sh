#!/usr/bin/env bash
# Offline checks of the Helm chart deploy/helm/babysitter (no cluster needed):
#
#   1. `helm lint --strict`, with the defaults and with every values file of ci/;
#   2. `helm template` of every ci/*.yaml, each rendered manifest validated against the
#      Kubernetes 1.37 OpenAPI schemas by kubernetes-validate (strict: unknown fields fail), and
#      every generated config.toml parsed as TOML. Custom resources have no schema there and are
#      skipped BY KIND, named in the output: ServiceMonitor, ScaledObject, Certificate;
#   3. every ci/bad/*.yaml must FAIL `helm template` with a values-schema error whose message
#      contains the string on the file's `# expect: …` line (the bad key's path).
#
# Usage: scripts/check-chart.sh [--out DIR]
#   --out DIR  keep the renders: DIR/<values-name>.yaml and DIR/<values-name>.json (the
#              documents as a JSON array, for tests/tests/helm_chart.rs)
# Needs Helm v4.3 and kubernetes-validate 1.37 from scripts/ensure-helm.sh (or BABYSITTER_HELM,
# BABYSITTER_K8S_VENV). Exits 2 when they are missing, 1 when a check fails.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chart="$repo/deploy/helm/babysitter"
helm="${BABYSITTER_HELM:-$repo/.ci-work/helm/helm}"
venv="${BABYSITTER_K8S_VENV:-$repo/.ci-work/venv-k8s}"
k8s_version=1.37.0
release=bbs
namespace=babysitter

out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    *) echo "check-chart: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [ ! -x "$helm" ] || [ ! -x "$venv/bin/python" ]; then
  echo "check-chart: needs helm at $helm and kubernetes-validate in $venv: run scripts/ensure-helm.sh" >&2
  exit 2
fi

t0=$(date +%s)
work="$(mktemp -d "${TMPDIR:-/tmp}/check-chart.XXXXXX")"
trap 'rm -rf "$work"' EXIT
[ -n "$out" ] || out="$work/out"
mkdir -p "$out"
failures=0
fail() {
  echo "check-chart: FAIL: $*" >&2
  failures=$((failures + 1))
}

# ---------------------------------------------------------------- 1. lint
echo "== helm lint --strict (defaults)"
"$helm" lint --strict "$chart" >"$work/lint.log" 2>&1 || { cat "$work/lint.log"; fail "helm lint (defaults)"; }
for values in "$chart"/ci/*.yaml; do
  echo "== helm lint --strict -f ci/$(basename "$values")"
  "$helm" lint --strict "$chart" -f "$values" >"$work/lint.log" 2>&1 ||
    { cat "$work/lint.log"; fail "helm lint -f ci/$(basename "$values")"; }
done

# ---------------------------------------------------------------- 2. render + validate
cat >"$work/validate.py" <<'PY'
"""Validates rendered manifests: Kubernetes schemas (strict) and the ConfigMaps' TOML."""
import json
import sys
import tomllib

import yaml
import kubernetes_validate

# Custom resources: kubernetes-validate has the core API only.
SKIP_KINDS = {"ServiceMonitor", "ScaledObject", "Certificate"}

version, rendered, json_out = sys.argv[1], sys.argv[2], sys.argv[3]
with open(rendered) as f:
    docs = [d for d in yaml.safe_load_all(f) if d]
with open(json_out, "w") as f:
    json.dump(docs, f)
errors, validated, skipped = [], 0, []
for d in docs:
    kind, name = d.get("kind"), d.get("metadata", {}).get("name")
    if kind in SKIP_KINDS:
        skipped.append(f"{kind}/{name}")
        continue
    try:
        kubernetes_validate.validate(d, version, strict=True)
        validated += 1
    except kubernetes_validate.ValidationError as e:
        errors.append(f"{kind}/{name}: {'.'.join(str(p) for p in e.path)}: {e.message}")
    except Exception as e:  # SchemaNotFoundError and friends: an unexpected kind
        errors.append(f"{kind}/{name}: {type(e).__name__}: {e}")
    if kind == "ConfigMap":
        for key, text in (d.get("data") or {}).items():
            if key.endswith(".toml"):
                try:
                    tomllib.loads(text)
                except tomllib.TOMLDecodeError as e:
                    errors.append(f"ConfigMap/{name} {key}: not valid TOML: {e}")
msg = f"{validated} validated against Kubernetes {version} (strict)"
if skipped:
    msg += f"; skipped (custom resources, no schema): {', '.join(skipped)}"
print(f"   {msg}")
for e in errors:
    print(f"   INVALID {e}", file=sys.stderr)
sys.exit(1 if errors else 0)
PY

for values in "$chart"/ci/*.yaml; do
  name="$(basename "$values" .yaml)"
  echo "== helm template -f ci/$name.yaml"
  if ! "$helm" template "$release" "$chart" --namespace "$namespace" -f "$values" \
    >"$out/$name.yaml" 2>"$work/template.log"; then
    cat "$work/template.log" >&2
    fail "helm template -f ci/$name.yaml"
    continue
  fi
  "$venv/bin/python" "$work/validate.py" "$k8s_version" "$out/$name.yaml" "$out/$name.json" ||
    fail "ci/$name.yaml renders invalid manifests (above)"
done

# ---------------------------------------------------------------- 3. bad values
for values in "$chart"/ci/bad/*.yaml; do
  name="ci/bad/$(basename "$values")"
  expect="$(sed -n 's/^# expect: //p' "$values" | head -n 1)"
  if [ -z "$expect" ]; then
    fail "$name has no '# expect: <text>' line"
    continue
  fi
  if "$helm" template "$release" "$chart" --namespace "$namespace" -f "$values" >/dev/null 2>"$work/bad.log"; then
    fail "$name rendered: the schema should refuse it"
  elif ! grep -q "don't meet the specifications of the schema" "$work/bad.log"; then
    cat "$work/bad.log" >&2
    fail "$name failed, but not with a values-schema error"
  elif ! grep -qF -- "$expect" "$work/bad.log"; then
    cat "$work/bad.log" >&2
    fail "$name: the schema error does not name '$expect'"
  else
    echo "== $name refused: $(grep -F -- "$expect" "$work/bad.log" | head -n 1 | sed 's/^ *//')"
  fi
done

echo "== check-chart: $failures failures, $(($(date +%s) - t0)) s"
[ "$failures" -eq 0 ]
