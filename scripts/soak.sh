#!/usr/bin/env bash
# Soak test (issue 8; not CI): 2,000 simulated GPUs at 1 Hz for N minutes against a real
# fleetlens-server, on SQLite and on PostgreSQL, through real agents (`--source simulate:N`).
# Every 10 s it records the server's RSS and CPU, the agents' spool (unsent batches), error
# lines in the logs, and the ingest lag (now − the oldest of the GPUs' newest stored sample).
# At the end it stops the agents (SIGTERM: they spool and flush), checks the stored count
# against the samples the agents produced, and prints a summary:
#   RSS growth after warm-up (goal < 5 %; medians of a minute, see scripts/soak_summary.py),
#   errors (goal 0), lag p50/max (goal < 2 s).
#
#   scripts/soak.sh [MINUTES (default 15)] [sqlite|postgres|both (default both)]
#   SOAK_GPUS=2000 SOAK_AGENTS=4 SOAK_PROFILE=release scripts/soak.sh 15
#
# Results: target/soak/<backend>-<time>.csv (one row per 10 s) and the summary on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes="${1:-15}"
which="${2:-both}"
gpus="${SOAK_GPUS:-2000}"
agents="${SOAK_AGENTS:-4}"
profile="${SOAK_PROFILE:-dev}"
pg_admin="${SOAK_PG:-postgres://postgres@127.0.0.1:5432/postgres}"
dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
[ "${SOAK_NO_BUILD:-0}" = 1 ] || cargo build --quiet --profile "$profile" -p fleetlens-server -p fleetlens-agent --bins
server_bin="${SOAK_SERVER_BIN:-target/$dir/fleetlens-server}"
agent_bin="${SOAK_AGENT_BIN:-target/$dir/fleetlens-agent}"
out=target/soak
mkdir -p "$out"
token="fl_soak_admin_token_$(date +%s)_0123456789"
per_agent=$(( gpus / agents ))

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# sql URL QUERY → one value (sqlite3 CLI is not assumed: python's sqlite3 and psql).
sql() {
  local url=$1 q=$2
  if [[ $url == sqlite://* ]]; then
    python3 - "$url" "$q" <<'PY'
import sqlite3, sys
c = sqlite3.connect(f"file:{sys.argv[1][len('sqlite://'):]}?mode=ro", uri=True, timeout=30)
print(c.execute(sys.argv[2]).fetchone()[0])
PY
  else
    psql -X -A -t -q "$url" -c "$q"
  fi
}

run_one() {
  local backend=$1 stamp db_url work port server_pid csv
  stamp=$(date -u +%Y%m%dT%H%M%SZ)
  work=$(mktemp -d /tmp/fleetlens-soak.XXXXXX)
  if [ "$backend" = sqlite ]; then
    db_url="sqlite://$work/fleetlens.db"
  else
    local name="fleetlens_soak_${stamp,,}"
    psql -X -q "$pg_admin" -c "CREATE DATABASE $name" >/dev/null
    db_url="${pg_admin%/*}/$name"
  fi
  port=$(free_port)
  FLEETLENS_ADMIN_TOKEN=$token RUST_LOG=warn "$server_bin" --listen "127.0.0.1:$port" --database-url "$db_url" \
    --static-dir /nonexistent >"$work/server.out" 2>"$work/server.err" &
  server_pid=$!
  for _ in $(seq 1 120); do curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.5; done
  curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null
  local pids=() started_ms
  started_ms=$(date +%s%3N)
  for a in $(seq 1 "$agents"); do
    RUST_LOG=warn "$agent_bin" --server "http://127.0.0.1:$port" --api-key "$token" \
      --source "simulate:$per_agent" --seed "$a" --host "soak-$a" --interval 1s --flush-interval 1s \
      --spool-dir "$work/spool-$a" >"$work/agent-$a.out" 2>"$work/agent-$a.err" &
    pids+=($!)
  done
  csv="$out/$backend-$stamp.csv"
  echo "elapsed_s,rss_kib,rss_anon_kib,rss_file_kib,rss_shmem_kib,server_cpu_s,samples,lag_oldest_ms,lag_newest_ms,spool_files,error_lines" >"$csv"
  local end clk
  end=$(python3 -c "import time,sys; print(int(time.time() + float(sys.argv[1]) * 60))" "$minutes")
  clk=$(getconf CLK_TCK)
  while [ "$(date +%s)" -lt "$end" ]; do
    sleep 10
    local now rss cpu samples lags spool errs
    now=$(date +%s%3N)
    # RSS and its parts: heap (anonymous), mapped files, shared memory (SQLite's -shm index).
    rss=$(awk '/^VmRSS/ {r=$2} /^RssAnon/ {a=$2} /^RssFile/ {f=$2} /^RssShmem/ {s=$2} END {print r "," a "," f "," s}' \
      "/proc/$server_pid/status")
    cpu=$(awk -v t="$clk" '{printf "%.1f", ($14 + $15) / t}' "/proc/$server_pid/stat")
    samples=$(sql "$db_url" "SELECT count(*) FROM samples")
    lags=$(sql "$db_url" "SELECT ($now - min(last_seen_ms)) || ',' || ($now - max(last_seen_ms)) FROM gpus WHERE host LIKE 'soak-%'")
    spool=$(find "$work" -path '*/spool-*' -type f | wc -l)
    # Every error or warning counts, but the one about the dashboard the soak does not serve.
    errs=$(cat "$work"/*.err | grep -iE 'error|warn|panick' | grep -vc 'dashboard not built' || true)
    echo "$(( (now - started_ms) / 1000 )),$rss,$cpu,$samples,$lags,$spool,$errs" | tee -a "$csv" >/dev/null
  done
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  # Whatever the agents spooled on SIGTERM is sent after their next start; count what is stored.
  sleep 2
  local stored gpus_seen
  # Open rows and the samples sealed into blocks (an hour boundary may pass during the soak).
  stored=$(sql "$db_url" "SELECT (SELECT count(*) FROM samples) + (SELECT coalesce(sum(n), 0) FROM sample_blocks)")
  gpus_seen=$(sql "$db_url" "SELECT count(*) FROM gpus")
  # On-disk bytes of each table with its indexes (PostgreSQL: after VACUUM ANALYZE settles the
  # visibility map; SQLite: the dbstat virtual table, pages of the table and its indexes).
  local bytes=""
  if [ "$backend" = postgres ]; then
    psql -X -q "$db_url" -c "VACUUM ANALYZE samples, rollups_1m, rollups_1h, rollup_pending, sample_blocks, rollup_blocks" >/dev/null
    # The marks of the minutes the rollup job has not written yet (issue 21, part 3).
    # The open tables and the marks are partitioned by hour (migrations 0026, 0027), the
    # sealed blocks by day: every partition counts. (`pg_partition_tree` of a plain table is
    # empty, not the table: those are measured as they are.)
    local size="(SELECT CASE WHEN c.relkind = 'p' THEN (SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree(c.oid)) ELSE pg_total_relation_size(c.oid) END FROM pg_class c WHERE c.oid = '@TABLE@'::regclass)"
    echo "rollup_pending: $(sql "$db_url" "SELECT count(*) FROM rollup_pending") rows, $(sql "$db_url" "SELECT ${size//@TABLE@/rollup_pending}") bytes" >&2
    # Sealed sample blocks and packed minutes too (issue 21): what a soak past an hour keeps.
    bytes=$(sql "$db_url" "SELECT ${size//@TABLE@/samples} || ',' || ${size//@TABLE@/rollups_1m} || ',' || ${size//@TABLE@/rollups_1h} || ',' || ${size//@TABLE@/sample_blocks} || ',' || ${size//@TABLE@/rollup_blocks}")
  else
    local per_table="SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name IN (SELECT name FROM sqlite_master WHERE tbl_name = '@TABLE@')"
    bytes="$(sql "$db_url" "${per_table//@TABLE@/samples}"),$(sql "$db_url" "${per_table//@TABLE@/rollups_1m}"),$(sql "$db_url" "${per_table//@TABLE@/rollups_1h}"),$(sql "$db_url" "${per_table//@TABLE@/sample_blocks}"),$(sql "$db_url" "${per_table//@TABLE@/rollup_blocks}")"
  fi
  local rollups
  rollups=$(sql "$db_url" "SELECT (SELECT count(*) FROM rollups_1m) || ',' || (SELECT count(*) FROM rollups_1h) || ',' || (SELECT coalesce(sum(n), 0) FROM rollup_blocks) || ',' || (SELECT coalesce(sum(n), 0) FROM sample_blocks)")
  kill -TERM "$server_pid"; wait "$server_pid" 2>/dev/null || true
  python3 scripts/soak_summary.py "$csv" "$backend" "$minutes" "$gpus" "$stored" "$gpus_seen" "$bytes" "$rollups"
  if [ "$backend" = postgres ]; then
    psql -X -q "$pg_admin" -c "DROP DATABASE IF EXISTS fleetlens_soak_${stamp,,} WITH (FORCE)" >/dev/null || true
  fi
  rm -rf "$work"
}

case "$which" in
  both) run_one sqlite; run_one postgres ;;
  sqlite|postgres) run_one "$which" ;;
  *) echo "usage: $0 [MINUTES] [sqlite|postgres|both]" >&2; exit 2 ;;
esac
