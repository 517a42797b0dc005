#!/usr/bin/env bash
# Dashboard tests in a real Chromium: builds the dashboard, the server and the agent, starts the
# server on a fresh SQLite database, pushes the recorded H200 trace and a simulated fleet, then
# runs tests/browser/*.test.mjs (playwright-core driving /usr/bin/chromium; no browser download).
#
#   scripts/browser-test.sh             # build everything, run the tests
#   SKIP_BUILD=1 scripts/browser-test.sh
#   SKIP_BUILD=1 BROWSER_TESTS=a11y.test.mjs scripts/browser-test.sh   # one file of tests/browser
#   SCREENSHOT_DIR=/tmp/shots scripts/browser-test.sh   # keep the screenshots there
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
source scripts/lib/server.sh

if [ ! -x /usr/bin/chromium ]; then
  echo "==> installing chromium"
  apt-get install -y chromium >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y chromium >/dev/null; }
fi
if [ "${SKIP_BUILD:-0}" != "1" ]; then
  ./frontend/build.sh
  cargo build -p fleetlens-server -p fleetlens-agent
fi
if [ ! -d tests/browser/node_modules/playwright-core ] || [ ! -d tests/browser/node_modules/axe-core ]; then
  (cd tests/browser && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund >/dev/null)
fi

tmp="$(mktemp -d /tmp/fleetlens-browser.XXXXXX)"
shots="${SCREENSHOT_DIR:-$tmp/screenshots}"
mkdir -p "$shots"
token="fl-browser-test-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
# The bootstrap admin the tests log in as (email and password: a real session).
admin_email="admin@example.com"
admin_password="browser-test-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# The replayed trace keeps its recorded timestamps: raw retention must not age it out.
FLEETLENS_ADMIN_TOKEN="$token" FLEETLENS_ADMIN_EMAIL="$admin_email" FLEETLENS_ADMIN_PASSWORD="$admin_password" \
  target/debug/fleetlens-server --listen 127.0.0.1:0 --webhook-allow-cidrs 127.0.0.0/8 \
  --database-url "sqlite://$tmp/db" --static-dir frontend/dist --raw-retention 36500d >"$tmp/server.out" 2>"$tmp/server.err" &
pids+=($!)
url="$(server_url "$tmp/server.out")"
if [ -z "$url" ]; then
  echo "server did not start:"; cat "$tmp/server.err"; exit 1
fi
echo "==> server at $url (logs in $tmp)"

# The recorded H200 trace (recorded timestamps: the dashboard must find it however old it is).
target/debug/fleetlens-agent --server "$url" --api-key "$token" \
  --source replay:tests/fixtures/nvml-h200-phases.jsonl --once --spool-dir "$tmp/spool-replay" 2>"$tmp/replay.err"
# A live simulated fleet for the whole run: polling must show it moving.
target/debug/fleetlens-agent --server "$url" --api-key "$token" --source simulate:8 --seed 1 \
  --interval 1s --spool-dir "$tmp/spool-sim" 2>"$tmp/sim.err" &
pids+=($!)
sleep 3

echo "==> browser tests (screenshots in $shots)"
cd tests/browser
FLEETLENS_URL="$url" FLEETLENS_TOKEN="$token" SCREENSHOT_DIR="$shots" \
  FLEETLENS_ADMIN_EMAIL="$admin_email" FLEETLENS_ADMIN_PASSWORD="$admin_password" \
  timeout 600 node --test --test-concurrency=1 --test-reporter=spec ${BROWSER_TESTS:-./*.test.mjs}
