#!/usr/bin/env bash
# Runs every Fleetlens test on a fresh machine: installs what it needs, starts PostgreSQL if it
# is down, checks formatting and lints, builds the binaries the black-box tests spawn, then runs
# the whole suite (SQLite and PostgreSQL) with cargo-nextest.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n==> %s\n' "$*"; }
# Debian packages; a fresh machine may have no package lists yet.
apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" \
    || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"; }
}

# A cold run (the debug build of every crate and test, the WASM dashboard, Chromium) fills about
# 20 GiB: say so up front, not as "No space left on device" from a compiler half an hour in.
free_gib=$(df -P -BG . | awk 'NR == 2 { sub("G", "", $4); print $4 }')
log "disk: ${free_gib} GiB free here"
if [ ! -d target/debug ] && [ "${free_gib:-0}" -lt 20 ]; then
  echo "warning: a cold run needs about 20 GiB of disk and ${free_gib} GiB is free; the build may fail for want of space" >&2
fi

log "PostgreSQL on 127.0.0.1:5432"
if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -n1)" main start
  for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
fi
pg_isready -h 127.0.0.1 -p 5432

if ! command -v promtool >/dev/null; then
  log "installing promtool (Debian package prometheus)"
  apt_install prometheus
fi

if [ ! -x /usr/bin/prometheus-alertmanager ]; then
  log "installing Alertmanager (Debian package prometheus-alertmanager; the alerting tests push to it)"
  apt_install prometheus-alertmanager
fi

if ! python3 -c 'import slack_sdk' 2>/dev/null; then
  log "installing slack_sdk (PyPI; the alerting tests validate Slack Block Kit payloads with it)"
  python3 -m pip install --quiet slack_sdk || python3 -m pip install --quiet --break-system-packages slack_sdk
fi

if ! command -v schemathesis >/dev/null 2>&1; then
  log "installing schemathesis (PyPI; scripts/schemathesis.sh fuzzes the API against its OpenAPI document)"
  python3 -m pip install --quiet schemathesis || python3 -m pip install --quiet --break-system-packages schemathesis
fi

if ! cargo nextest --version >/dev/null 2>&1; then
  log "installing cargo-nextest"
  cargo install cargo-nextest --locked
fi

log "deployment files: Compose, Kubernetes, systemd, Dockerfile (scripts/lint-deploy.sh)"
./scripts/lint-deploy.sh

log "format and lints (native crates; the dashboard is linted for wasm32 below)"
cargo fmt --all --check
cargo clippy --all-targets -p fleetlens-core -p fleetlens-api -p fleetlens-store -p fleetlens-server \
  -p fleetlens-agent -p fleetlens-tests -p fleetlens-bench -- -D warnings

log "building the binaries the black-box tests spawn"
cargo build --bins

log "tests: unit, store contract (SQLite + PostgreSQL), black-box server and agent"
cargo nextest run --no-fail-fast "$@"

log "schemathesis: every operation of /api/openapi.json against the running server (SQLite)"
SERVER_BIN=target/debug/fleetlens-server ./scripts/schemathesis.sh

log "dashboard: wasm32 build, lints, and tests in real Chromium"
./frontend/build.sh
cargo clippy -p fleetlens-frontend --target wasm32-unknown-unknown -- -D warnings
# The dashboard's pure code (API answer reading, formatting, routes, series) is unit-tested natively.
cargo nextest run -p fleetlens-frontend
SKIP_BUILD=1 ./scripts/browser-test.sh
