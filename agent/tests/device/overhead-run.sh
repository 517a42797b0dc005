#!/usr/bin/env bash
# The agent's overhead, each configuration alone on the GPU next to a small background process:
#   bash agent/tests/device/overhead-run.sh PATH/TO/fleetlens-agent OUTDIR [PATH/TO/nvml-rss]
# Writes into OUTDIR (7 files):
#   overhead-alone.jsonl  per configuration (overhead.py CONFIGS_ALONE: 1 s and 5 s intervals, the
#                         default 5-s flush and --flush-interval 1s, MALLOC_ARENA_MAX=1): CPU per
#                         poll and % of one core (from the 10-ms ticks of /proc/PID/stat and, exactly,
#                         from the threads' schedstat), RSS split (anonymous / file), the largest
#                         mappings, threads, what was left spooled at SIGTERM
#   agents.log            every configuration's log (info: the NVML reading cost every 60 polls)
#   received.json         what the stand-in server received, per configuration
#   nvml-rss.jsonl, nvml-rss-no-attach.jsonl
#                         with the third argument: NVML's own memory, call group by call group, and
#                         the cost of each group (agent/examples/nvml-rss.rs), plain and NO_ATTACH
#   info.txt, run.log
# About 4 minutes (SCALE=0.5 in the environment halves the measuring windows).
set -u
BIN=$1
OUT=$2
PROBE=${3:-}
D=agent/tests/device
LOGS=$(mktemp -d)
chmod +x "$BIN"
{ date -u; nproc; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; "$BIN" --version; } > "$OUT/info.txt" 2>&1
export FLEETLENS_WIRE_FORMAT=json  # receiver.py, the stand-in server, reads gzip JSON
python3 $D/receiver.py 18081 "$LOGS/batches.jsonl" & RECV=$!
python3 $D/holder.py & H=$!
sleep 8
if [ -n "$PROBE" ]; then
  chmod +x "$PROBE"
  timeout 60 "$PROBE" 50 > "$OUT/nvml-rss.jsonl" 2>&1
  timeout 60 "$PROBE" 10 no-attach > "$OUT/nvml-rss-no-attach.jsonl" 2>&1
  echo "nvml-rss rc=$?" >> "$OUT/info.txt"
fi
python3 $D/overhead.py sequential "$BIN" "$OUT/overhead-alone.jsonl" "$LOGS" "${SCALE:-1}"
kill $H $RECV
python3 $D/overhead.py received "$LOGS/batches.jsonl" > "$OUT/received.json"
for f in "$LOGS"/agent-*.log; do echo "== $f"; cat "$f"; done > "$OUT/agents.log"
ls -la "$OUT"
