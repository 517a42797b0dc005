#!/usr/bin/env bash
# Lints the deployment files without a Docker daemon or a cluster (issue 8), with tools from
# PyPI installed into target/lint-venv on first use (offline afterwards):
#   - docker-compose.yml: yamllint + the Compose specification's JSON schema
#     (check-jsonschema's vendored `vendor.compose-spec`);
#   - deploy/k8s/*.yaml: yamllint + kubernetes-validate --strict (the API schemas it ships);
#   - packaging/*.service: systemd-analyze verify (ExecStart pointed at a real executable);
#   - Dockerfile: structure checks (multi-stage, numeric non-root USER, HEALTHCHECK, --locked);
#   - deploy/prometheus: yamllint + promtool check config (the remote-write example);
#   - deploy/grafana/fleetlens.json: Grafana's dashboard schema (@grafana/schema types, tsc).
# Fast (a few seconds once installed): scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/lint-venv
if ! "$venv/bin/kubernetes-validate" --version >/dev/null 2>&1 || ! "$venv/bin/check-jsonschema" --version >/dev/null 2>&1 \
   || ! "$venv/bin/yamllint" --version >/dev/null 2>&1; then
  python3 -m venv "$venv" 2>/dev/null || { apt-get install -y --no-install-recommends python3-venv >/dev/null && python3 -m venv "$venv"; }
  "$venv/bin/pip" install --quiet yamllint check-jsonschema kubernetes-validate
fi
fail=0
step() { printf '  %-58s' "$1"; shift; if out=$("$@" 2>&1); then echo ok; else echo FAILED; echo "$out" | sed 's/^/    /'; fail=1; fi; }

yamlrules='{extends: default, rules: {line-length: {max: 120}, document-start: disable, comments: {min-spaces-from-content: 1}, truthy: {check-keys: false}}}'
echo "deployment files:"
step "yamllint docker-compose.yml deploy/k8s deploy/prometheus" "$venv/bin/yamllint" -s -d "$yamlrules" docker-compose.yml deploy/k8s deploy/prometheus
if command -v promtool >/dev/null; then
  step "promtool check config deploy/prometheus/prometheus.yml" promtool check config deploy/prometheus/prometheus.yml
else
  echo "  promtool not installed: the remote-write example is not checked"
fi
step "compose-spec schema: docker-compose.yml" "$venv/bin/check-jsonschema" --builtin-schema vendor.compose-spec docker-compose.yml
k8s=$(ls deploy/k8s/*.yaml | grep -v kustomization.yaml)
# shellcheck disable=SC2086
step "kubernetes-validate --strict deploy/k8s ($(echo $k8s | wc -w) files)" "$venv/bin/kubernetes-validate" --strict --quiet $k8s
step "kustomization lists every manifest" python3 - <<'PY'
import glob, os, yaml
k = yaml.safe_load(open("deploy/k8s/kustomization.yaml"))
have = {os.path.basename(p) for p in glob.glob("deploy/k8s/*.yaml")} - {"kustomization.yaml"}
assert set(k["resources"]) == have, (sorted(k["resources"]), sorted(have))
PY
step "server-secret.yaml ships no usable admin credential" python3 - <<'PY'
import yaml
data = yaml.safe_load(open("deploy/k8s/server-secret.yaml"))["stringData"]
for key in ("FLEETLENS_ADMIN_PASSWORD", "FLEETLENS_ADMIN_TOKEN"):
    assert not data.get(key), f"{key} must be empty in the example Secret (the server refuses placeholders anyway)"
PY

if command -v systemd-analyze >/dev/null; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  for unit in packaging/*.service; do
    # verify wants the ExecStart binary to exist: point it at one that does.
    sed "s|^ExecStart=/usr/local/bin/[a-z-]*|ExecStart=$(command -v true)|" "$unit" > "$tmp/$(basename "$unit")"
  done
  step "systemd-analyze verify packaging/*.service" systemd-analyze verify "$tmp"/*.service
else
  echo "  systemd-analyze not installed: units not verified"
fi

step "Dockerfile: multi-stage, non-root, health check" python3 - <<'PY'
import re
raw = [l.strip() for l in open("Dockerfile") if l.strip() and not l.lstrip().startswith("#")]
lines = " ".join(l[:-1] + " " if l.endswith("\\") else l + "\n" for l in raw).splitlines()
lines = [re.sub(r"\s+", " ", l).strip() for l in lines]
text = "\n".join(lines)
froms = [l for l in lines if l.upper().startswith("FROM ")]
assert len(froms) >= 2, "multi-stage: a build stage and a runtime stage"
final = text[text.rfind("\nFROM "):]
users = re.findall(r"^USER\s+(\S+)", final, re.M)
assert users and users[-1].split(":")[0].isdigit() and users[-1].split(":")[0] != "0", f"numeric non-root USER in the final stage: {users}"
assert re.search(r"^HEALTHCHECK .*CMD ", final, re.M), "HEALTHCHECK in the final stage"
assert re.search(r"^ENTRYPOINT ", final, re.M), "ENTRYPOINT"
assert "--locked" in text, "cargo build --locked"
assert "frontend/build.sh" in text, "the dashboard is built into the image"
assert "fleetlens-agent" in text and "fleetlens-server" in text and "COPY --from=" in final, "both binaries copied into the runtime stage"
PY
# Grafana's dashboard schema: the `Dashboard` type that @grafana/schema (npm) generates from
# Grafana's dashboard kind, checked by tsc with `satisfies` (Grafana publishes no JSON Schema of
# the dashboard model; its TypeScript types are the published form). The PromQL of every panel is
# run against a real Prometheus scraping a running server by tests/tests/grafana_dashboard.rs.
gl=target/grafana-lint
if [ ! -x "$gl/node_modules/.bin/tsc" ]; then
  mkdir -p "$gl" && cp deploy/grafana/schema-check/package.json deploy/grafana/schema-check/package-lock.json "$gl/"
  (cd "$gl" && npm ci --no-audit --no-fund --silent)
fi
cp deploy/grafana/schema-check/tsconfig.json "$gl/"
python3 deploy/grafana/schema-check/check.py deploy/grafana/fleetlens.json "$gl/check.ts"
step "Grafana dashboard schema: deploy/grafana/fleetlens.json" "$gl/node_modules/.bin/tsc" -p "$gl/tsconfig.json"

exit $fail
