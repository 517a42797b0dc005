#!/usr/bin/env bash
# Ingest benchmark: GPU-samples/s that fleetlens-server stores durably over HTTP on SQLite and
# PostgreSQL, beside VictoriaMetrics fed the same samples. Arguments go to ingest-bench, e.g.
#   scripts/bench-ingest.sh --gpus 200 --samples 100
#   scripts/bench-ingest.sh --backend sqlite --json bench.json
# (see `target/release/ingest-bench --help`). The markdown table goes to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n==> %s\n' "$*" >&2; }

log "release build"
cargo build --release -p fleetlens-server -p fleetlens-bench >&2

if ! command -v victoria-metrics >/dev/null 2>&1 && [ ! -x /usr/bin/victoria-metrics ]; then
  log "installing victoria-metrics (Debian package)"
  if [ "$(id -u)" -eq 0 ]; then SUDO=; else SUDO=sudo; fi
  $SUDO apt-get install -y victoria-metrics >&2 || { $SUDO apt-get update >&2 && $SUDO apt-get install -y victoria-metrics >&2; }
fi

log "PostgreSQL on 127.0.0.1:5432"
if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -n1)" main start
  for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
fi
pg_isready -h 127.0.0.1 -p 5432 >&2

log "machine: $(nproc) cores; uptime: $(uptime)"
cmd=(target/release/ingest-bench --server-bin target/release/fleetlens-server "$@")
log "running: ${cmd[*]}"
exec "${cmd[@]}"
