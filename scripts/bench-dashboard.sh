#!/usr/bin/env bash
# Dashboard budgets (issue 23; a benchmark, not CI): the size of what the browser downloads
# (information), and with a fleet of N simulated GPUs (default 1,000) the time from navigating
# to the GPUs page until it is usable and until all N cards are drawn, in headless Chromium, on
# loopback and on a throttled link (tests/browser/bench-gpus-page.mjs); then, under the same
# fleet, how soon a state change at an agent shows on an open GPU page and GPUs page
# (tests/browser/bench-live-page.mjs; BENCH_LIVE_FLIPS=0 skips it).
#
#   scripts/bench-dashboard.sh              # build release server + agent + dashboard, 1,000 GPUs
#   BENCH_GPUS=2000 SKIP_BUILD=1 scripts/bench-dashboard.sh
#   BENCH_PROFILE=debug SKIP_BUILD=1 scripts/bench-dashboard.sh   # server and agents of target/debug
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/server.sh
gpus="${BENCH_GPUS:-1000}"
profile="${BENCH_PROFILE:-release}"

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  ./frontend/build.sh
  cargo build --profile "$([ "$profile" = debug ] && echo dev || echo "$profile")" -p fleetlens-server -p fleetlens-agent
fi
if [ ! -d tests/browser/node_modules/playwright-core ] || [ ! -d tests/browser/node_modules/axe-core ]; then
  (cd tests/browser && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund >/dev/null)
fi

echo "==> download size (frontend/dist; one wasm module: every page downloads the same files)"
python3 - frontend/dist <<'PY'
import os, subprocess, sys
d = sys.argv[1]
size = lambda f: os.path.getsize(os.path.join(d, f))
gz = lambda f: len(subprocess.run(["gzip", "-9c", os.path.join(d, f)], capture_output=True, check=True).stdout)
# What the server sends a browser: the precompressed file frontend/build.sh wrote.
sent = lambda f: os.path.getsize(os.path.join(d, f + ".gz")) if os.path.exists(os.path.join(d, f + ".gz")) else gz(f)
files = ["fleetlens_bg.wasm", "fleetlens.js", "boot.js", "fleetlens.css", "index.html"]
for f in files:
    print(f"  {f:24s} {size(f):9,d} B raw  {gz(f):9,d} B gzip -9  {sent(f):9,d} B sent")
print(f"  {'any first page':24s} {sum(map(size, files)):9,d} B raw  {sum(map(gz, files)):9,d} B gzip -9  {sum(map(sent, files)):9,d} B sent")
PY

tmp="$(mktemp -d /tmp/fleetlens-bench-dash.XXXXXX)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
token="fl-bench-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
email=admin@example.com
password="bench-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
FLEETLENS_ADMIN_TOKEN="$token" FLEETLENS_ADMIN_EMAIL="$email" FLEETLENS_ADMIN_PASSWORD="$password" \
  target/$profile/fleetlens-server --listen 127.0.0.1:0 --database-url "sqlite://$tmp/db" \
  --static-dir frontend/dist >"$tmp/server.out" 2>"$tmp/server.err" &
pids+=($!)
url="$(server_url "$tmp/server.out")"
[ -n "$url" ] || { cat "$tmp/server.err"; exit 1; }

echo "==> $gpus simulated GPUs on $((gpus / 8)) hosts of 8, reporting every 5 s"
for h in $(seq 1 $((gpus / 8))); do
  target/$profile/fleetlens-agent --server "$url" --api-key "$token" --source simulate:8 --seed "$h" \
    --host "bench-$h" --interval 5s --flush-interval 5s --spool-dir "$tmp/spool-$h" 2>>"$tmp/agents.err" &
  pids+=($!)
done
for _ in $(seq 1 120); do
  n="$(curl -fsS -H "Authorization: Bearer $token" "$url/api/v1/gpus" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d["gpus"] if isinstance(d, dict) else d))')"
  [ "$n" -ge "$gpus" ] && break
  sleep 1
done
echo "    $n GPUs reporting"

echo "==> GPUs page in headless Chromium (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
FLEETLENS_URL="$url" FLEETLENS_ADMIN_EMAIL="$email" FLEETLENS_ADMIN_PASSWORD="$password" \
  FLEETLENS_BENCH_GPUS="$gpus" node tests/browser/bench-gpus-page.mjs

flips="${BENCH_LIVE_FLIPS:-4}"
if [ "$flips" -gt 0 ]; then
  echo "==> live push: a state change at the agent until an open page shows it ($flips flips, under the same fleet)"
  # 8 GPUs of host bench-live replayed at 1x: idle in even minutes, busy in odd ones, from now.
  python3 - "$tmp/live.jsonl" "$((flips + 2))" <<'PY'
import json, sys, time
path, minutes = sys.argv[1], int(sys.argv[2])
start = int(time.time()) * 1000
end = (start // 60000 + 1 + minutes) * 60000
with open(path, "w") as out:
    for ts in range(start, end, 1000):
        busy = (ts // 60000) % 2 == 1
        for g in range(8):
            out.write(json.dumps({
                "host": "bench-live", "ts_ms": ts, "uuid": f"GPU-live-{g}", "gpu_index": g,
                "name": "NVIDIA H100 80GB HBM3",
                "gpu_util_pct": 100.0 if busy else 0.0, "sm_active_pct": 95.0 if busy else 0.0,
                "sm_occupancy_pct": 60.0 if busy else 0.0, "tensor_active_pct": 80.0 if busy else 0.0,
                "dram_active_pct": 30.0 if busy else 0.0, "mem_used_bytes": (40 << 30) if busy else 0,
                "mem_total_bytes": 80 << 30, "power_w": 650.0 if busy else 70.0, "power_limit_w": 700.0,
                "processes": [{"pid": 4242, "used_bytes": 40 << 30}] if busy else [],
            }) + "\n")
PY
  target/$profile/fleetlens-agent --server "$url" --api-key "$token" --source "replay:$tmp/live.jsonl" \
    --speed 1 --spool-dir "$tmp/spool-live" 2>>"$tmp/agents.err" &
  pids+=($!)
  echo "    load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  FLEETLENS_URL="$url" FLEETLENS_ADMIN_EMAIL="$email" FLEETLENS_ADMIN_PASSWORD="$password" \
    FLEETLENS_LIVE_UUID=GPU-live-0 FLEETLENS_LIVE_FLIPS="$flips" node tests/browser/bench-live-page.mjs
fi
