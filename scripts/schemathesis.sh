#!/usr/bin/env bash
# Schemathesis (PyPI) against the running server: every operation of /api/openapi.json is called
# with generated valid and invalid input, as the bootstrap admin key, against a SQLite database
# holding some ingested data (2 hosts, 5 GPUs, a team, a channel, a rule, a silence, a job).
# Checks: no 5xx, every status code documented, every response body valid against its schema.
#
#   scripts/schemathesis.sh [extra schemathesis options]
#   SERVER_BIN=target/release/fleetlens-server MAX_EXAMPLES=50 scripts/schemathesis.sh
#
# Bounded for a 2-core machine: MAX_EXAMPLES (default 25) cases per operation and phase, and the
# whole run under TIME_LIMIT seconds (default 240; exceeding it fails the script).
set -euo pipefail
cd "$(dirname "$0")/.."

SERVER_BIN=${SERVER_BIN:-target/debug/fleetlens-server}
MAX_EXAMPLES=${MAX_EXAMPLES:-25}
TIME_LIMIT=${TIME_LIMIT:-240}
TOKEN="fl_schemathesis_admin_token_$(date +%s)"

if ! command -v schemathesis >/dev/null 2>&1; then
  echo "==> installing schemathesis (PyPI)"
  python3 -m pip install --quiet schemathesis || python3 -m pip install --quiet --break-system-packages schemathesis
fi
[ -x "$SERVER_BIN" ] || cargo build -p fleetlens-server --bin fleetlens-server

work=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

FLEETLENS_ADMIN_TOKEN=$TOKEN RUST_LOG=${RUST_LOG:-warn} "$SERVER_BIN" --listen 127.0.0.1:0 --webhook-allow-cidrs 127.0.0.0/8 \
  --database-url "sqlite://$work/fleetlens.db" --static-dir "$work/no-dashboard" \
  >"$work/stdout" 2>"$work/server.log" &
server_pid=$!
url=
for _ in $(seq 1 300); do
  url=$(grep -o 'http://[^ ]*' "$work/stdout" 2>/dev/null | head -n1 | sed 's#/$##') || true
  [ -n "$url" ] && curl -fsS "$url/readyz" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log"; echo "server exited" >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { echo "server did not start" >&2; exit 1; }
echo "==> server at $url (SQLite in $work)"

echo "==> seeding data"
URL=$url TOKEN=$TOKEN FIXTURE=tests/fixtures/nvml-h200-phases.jsonl python3 - <<'EOF'
import json, os, time, urllib.request

url, token = os.environ["URL"], os.environ["TOKEN"]

def call(method, path, body=None, ok=(200, 201, 204)):
    req = urllib.request.Request(url + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        assert r.status in ok, (path, r.status)
        raw = r.read()
        return json.loads(raw) if raw else None

now = int(time.time() * 1000)
fixture = os.environ["FIXTURE"]
lines = [json.loads(l) for l in open(fixture)]  # in the repository: a public clone has it
if lines:  # the recorded trace (84 s of an H200), moved to end a minute ago
    shift = now - 60_000 - lines[-1]["ts_ms"]
    for l in lines:
        l["ts_ms"] += shift
        l.pop("host", None)
        l.pop("phase", None)
    call("POST", "/api/v1/ingest", {"host": "gpu-node-01", "labels": {"team": "ml"}, "samples": lines})
# Two hours of four synthetic GPUs on a second host, one sample every 30 s.
samples = []
for i in range(4):
    for k in range(240):
        busy = (k // 40 + i) % 3
        samples.append({"ts_ms": now - 7_200_000 + k * 30_000, "uuid": f"GPU-00000000-0000-0000-0000-00000000000{i}",
                        "gpu_index": i, "name": "NVIDIA H100 80GB HBM3", "gpu_util_pct": [0, 100, 60][busy],
                        "sm_active_pct": [0, 5, 55][busy], "tensor_active_pct": [0, 0, 30][busy],
                        "mem_used_bytes": [0, 40 << 30, 60 << 30][busy], "mem_total_bytes": 80 << 30,
                        "power_w": [70, 150, 500][busy], "power_limit_w": 700, "temp_c": 40})
call("POST", "/api/v1/ingest", {"host": "gpu-node-02", "samples": samples})
team = call("POST", "/api/v1/teams", {"name": "research"})
call("PUT", "/api/v1/hosts/gpu-node-02/team", {"team_id": team["id"]})
ch = call("POST", "/api/v1/notification-channels", {"name": "hook", "kind": "webhook", "url": "http://127.0.0.1:9/hook"})
call("POST", "/api/v1/alert-rules", {"name": "busy", "condition": "gpu_util_pct >= 80 && sm_active_pct < 30",
                                     "for_s": 60, "severity": "warning", "channels": [ch["id"]]})
call("POST", "/api/v1/silences", {"matchers": {"host": "gpu-node-02"}, "ends_at": now + 3_600_000, "comment": "seed"})
call("POST", "/api/v1/jobs", {"name": "train", "gpus": ["GPU-00000000-0000-0000-0000-000000000002"],
                              "from": now - 3_600_000, "to": now - 60_000, "precision": "bf16",
                              "achieved_flops_per_s": 2e14})
print(f"seeded {len(lines) + len(samples)} samples")
EOF

echo "==> explicit cases (what the generators did not reach)"
# Times at the ends of i64 (issue 19: `to - from` overflowed past the size check on
# `/series?from=-1&to=9223372036854775807`). Schemathesis sends these parameters as strings and
# rarely tries such numbers: they are replayed here, on every range-taking operation, and each
# must be a 422 naming the parameter, with the server still answering afterwards.
URL=$url TOKEN=$TOKEN python3 - <<'EOF'
import json, os, urllib.error, urllib.request

url, token = os.environ["URL"], os.environ["TOKEN"]
gpu = "GPU-00000000-0000-0000-0000-000000000000"
endpoints = [f"/api/v1/gpus/{gpu}/samples", f"/api/v1/gpus/{gpu}/series", f"/api/v1/gpus/{gpu}/states",
             "/api/v1/fleet/summary", "/api/v1/events", "/api/v1/jobs", "/api/v1/reports/billing",
             "/api/v1/reports/billing?group_by=user&format=csv"]
cases = [("from=-1&to=9223372036854775807", {"from", "to"}), ("from=-9223372036854775808", {"from"}),
         ("to=-9223372036854775808", {"to"}), ("from=0&to=9223372036854775807", {"to"}),
         ("from=99999999999999999999", {"from"})]
failures = []
for endpoint in endpoints:
    for query, fields in cases:
        path = endpoint + ("&" if "?" in endpoint else "?") + query
        req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(req, timeout=20) as r:
                failures.append(f"{path}: HTTP {r.status}, want 422")
        except urllib.error.HTTPError as e:
            field = json.loads(e.read() or b"{}").get("error", {}).get("field")
            if e.code != 422 or field not in fields:
                failures.append(f"{path}: HTTP {e.code} field {field!r}, want 422 naming one of {sorted(fields)}")
        except Exception as e:  # no answer at all: the handler died
            failures.append(f"{path}: {e!r}")
with urllib.request.urlopen(urllib.request.Request(url + "/readyz"), timeout=20) as r:
    assert r.status == 200
if failures:
    raise SystemExit("explicit cases failed:\n" + "\n".join(failures))
print(f"{len(endpoints) * len(cases)} explicit cases: 422 each")
EOF

echo "==> schemathesis $(schemathesis --version 2>/dev/null | tail -n1): $MAX_EXAMPLES examples per operation, ${TIME_LIMIT}s at most"
# Revoking an API key could revoke the key this run authenticates with (it is excluded);
# every other operation runs, the destructive ones included. One worker: with two threads,
# CPython 3.11's `ast.parse` (which Hypothesis calls to describe its strategies) can fail with
# "AST constructor recursion depth mismatch" (a thread-safety bug of 3.11's AST validator),
# an error of the tool, not of the API, seen once here on GET /api/v1/events. The hooks module
# (scripts/schemathesis_hooks.py) sends POST /api/v1/write's binary protobuf bodies as bytes.
# GET /api/v1/stream is left out: its answer is an endless event stream (it ends after 30 min),
# so every generated case would wait out the request timeout; tests/tests/stream_api.rs covers
# it (authentication, `once`, events against the API's types, caps) on both databases.
status=0
hooks_dir=$PWD/scripts
(cd "$work" && SCHEMATHESIS_HOOKS=schemathesis_hooks PYTHONPATH="$hooks_dir${PYTHONPATH:+:$PYTHONPATH}" \
  timeout --kill-after=10 "$TIME_LIMIT" schemathesis run "$url/api/openapi.json" \
  --header "Authorization: Bearer $TOKEN" \
  --checks not_a_server_error,status_code_conformance,response_schema_conformance \
  --phases examples,coverage,fuzzing \
  --max-examples "$MAX_EXAMPLES" \
  --exclude-operation-id revoke_key \
  --exclude-path /api/v1/stream \
  --workers 1 \
  --seed "${SEED:-42}" \
  --suppress-health-check all \
  --request-timeout 20 \
  --report junit --report-dir "$work/report" \
  --no-color "$@") || status=$?
if [ "$status" -ne 0 ]; then
  echo "schemathesis failed (exit $status); server log:" >&2
  grep -E 'ERROR|panicked' "$work/server.log" | tail -n 20 >&2 || true
  exit "$status"
fi
if grep -E 'panicked' "$work/server.log"; then
  echo "the server panicked during the run" >&2
  exit 1
fi
echo "==> schemathesis: no failures"
